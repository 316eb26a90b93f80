//! Access rights of memory regions and memory windows (`enum ibv_access_flags`).

use core::fmt;
use core::ops::{BitOr, BitOrAssign};

/// A set of access rights, with the bit values of `enum ibv_access_flags`.
///
/// Local read access is always granted. As in verbs, a region that grants
/// [`Access::REMOTE_WRITE`] (or [`Access::REMOTE_ATOMIC`]) must also grant
/// [`Access::LOCAL_WRITE`]; registering it otherwise fails.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Access(u32);

impl Access {
    /// No rights beyond local read.
    pub const NONE: Access = Access(0);
    /// The fabric may write the memory for this host: receive buffers, RDMA Read
    /// destinations (`IBV_ACCESS_LOCAL_WRITE`).
    pub const LOCAL_WRITE: Access = Access(1);
    /// A peer may RDMA Write the memory (`IBV_ACCESS_REMOTE_WRITE`).
    pub const REMOTE_WRITE: Access = Access(1 << 1);
    /// A peer may RDMA Read the memory (`IBV_ACCESS_REMOTE_READ`).
    pub const REMOTE_READ: Access = Access(1 << 2);
    /// A peer may perform atomics on the memory (`IBV_ACCESS_REMOTE_ATOMIC`).
    pub const REMOTE_ATOMIC: Access = Access(1 << 3);
    /// Memory windows may be bound over the region (`IBV_ACCESS_MW_BIND`).
    pub const MW_BIND: Access = Access(1 << 4);

    /// The rights a memory window may carry.
    pub const WINDOW_RIGHTS: Access =
        Access(Self::REMOTE_WRITE.0 | Self::REMOTE_READ.0 | Self::REMOTE_ATOMIC.0);

    /// The set from its raw `ibv_access_flags` bits.
    pub const fn from_bits(bits: u32) -> Access {
        Access(bits)
    }

    /// The raw `ibv_access_flags` bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether every right in `other` is in `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether `self` and `other` share any right.
    pub const fn intersects(self, other: Access) -> bool {
        self.0 & other.0 != 0
    }

    /// The union of two sets.
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }

    /// Whether any remote right (write, read or atomic) is granted.
    pub const fn is_remote(self) -> bool {
        self.intersects(Self::WINDOW_RIGHTS)
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        self.union(rhs)
    }
}

impl BitOrAssign for Access {
    fn bitor_assign(&mut self, rhs: Access) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(Access, &str); 5] = [
            (Access::LOCAL_WRITE, "LOCAL_WRITE"),
            (Access::REMOTE_WRITE, "REMOTE_WRITE"),
            (Access::REMOTE_READ, "REMOTE_READ"),
            (Access::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
            (Access::MW_BIND, "MW_BIND"),
        ];
        let mut first = true;
        for (flag, name) in NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        let unknown = self.0 & !0x1f;
        if unknown != 0 {
            if !first {
                f.write_str("|")?;
            }
            write!(f, "{unknown:#x}")?;
            first = false;
        }
        if first {
            f.write_str("NONE")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_match_verbs() {
        assert_eq!(Access::LOCAL_WRITE.bits(), 1);
        assert_eq!(Access::REMOTE_WRITE.bits(), 2);
        assert_eq!(Access::REMOTE_READ.bits(), 4);
        assert_eq!(Access::REMOTE_ATOMIC.bits(), 8);
        assert_eq!(Access::MW_BIND.bits(), 16);
    }

    #[test]
    fn set_operations_and_debug() {
        let a = Access::LOCAL_WRITE | Access::REMOTE_READ;
        assert!(a.contains(Access::REMOTE_READ));
        assert!(!a.contains(Access::REMOTE_WRITE));
        assert!(a.is_remote());
        assert!(!Access::LOCAL_WRITE.is_remote());
        assert_eq!(format!("{a:?}"), "LOCAL_WRITE|REMOTE_READ");
        assert_eq!(format!("{:?}", Access::NONE), "NONE");
    }
}
