//! Who may do what: the export's options as exports(5) names them (`root_squash`, the
//! default, `no_root_squash`, `all_squash`, `anonuid`, `anongid`, `ro`, and the clients
//! allowed), and the identity each Call runs as.
//!
//! AUTH_SYS carries the client's word for its user (RFC 5531 Appendix A): the server
//! cannot check it, only map it. Root (uid 0) becomes the anonymous user unless root is
//! not squashed, and so does group 0, in the primary and the supplementary groups, as
//! Linux's nfsd maps them; `all_squash` maps everyone. AUTH_NONE Calls, and Calls of any
//! flavor this server does not verify, run as the anonymous user.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use crate::identity::Caller;

/// The anonymous user and group by default (`nobody`, `nogroup`).
pub const ANON_ID: u32 = 65534;

/// A block of addresses, `IP/BITS` (or a bare IP: that one address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    bits: u8,
}

/// Why a `--allow` block did not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CidrError {
    /// The address part is not an IP address.
    Address(String),
    /// The prefix length is not a number within the address's bits.
    Bits(String),
}

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CidrError::Address(s) => write!(f, "{s:?} is not an IP address"),
            CidrError::Bits(s) => write!(f, "{s:?} is not a prefix length (0-32 or 0-128)"),
        }
    }
}

impl std::error::Error for CidrError {}

/// An IPv4-mapped IPv6 address as the IPv4 address it is (rdma_cm may report either).
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let (ip, bits) = match s.split_once('/') {
            Some((ip, bits)) => (ip, Some(bits)),
            None => (s, None),
        };
        let net = canonical(
            ip.parse::<IpAddr>()
                .map_err(|_| CidrError::Address(ip.to_string()))?,
        );
        let max = if net.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => max,
            Some(b) => b
                .parse::<u8>()
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(|| CidrError::Bits(b.to_string()))?,
        };
        Ok(Cidr { net, bits })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.bits)
    }
}

impl Cidr {
    /// Whether `ip` is in this block.
    pub fn contains(&self, ip: IpAddr) -> bool {
        fn masked(a: u128, b: u128, bits: u8, width: u32) -> bool {
            if bits == 0 {
                return true;
            }
            let shift = width - u32::from(bits);
            (a >> shift) == (b >> shift)
        }
        match (self.net, canonical(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => masked(
                u128::from(u32::from(n)),
                u128::from(u32::from(a)),
                self.bits,
                32,
            ),
            (IpAddr::V6(n), IpAddr::V6(a)) => masked(u128::from(n), u128::from(a), self.bits, 128),
            _ => false,
        }
    }
}

/// The export's options (exports(5)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Map uid 0 and gid 0 to the anonymous identity (`root_squash`, the default).
    pub root_squash: bool,
    /// Map every user and group to the anonymous identity (`all_squash`).
    pub all_squash: bool,
    /// The anonymous user (`anonuid`).
    pub anon_uid: u32,
    /// The anonymous group (`anongid`).
    pub anon_gid: u32,
    /// Refuse every change (`ro`): NFS3ERR_ROFS.
    pub read_only: bool,
    /// The clients allowed, by address; empty: every client.
    pub allow: Vec<Cidr>,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            root_squash: true,
            all_squash: false,
            anon_uid: ANON_ID,
            anon_gid: ANON_ID,
            read_only: false,
            allow: Vec::new(),
        }
    }
}

/// The identity a Call runs as, and whether the credential's own was replaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapped {
    /// Who the Call runs as.
    pub caller: Caller,
    /// Whether squashing changed the user or a group.
    pub squashed: bool,
}

impl Policy {
    /// Whether a client at `peer` may use the export: every client when no block is
    /// allowed; otherwise one whose address is in a block (a client whose address is not
    /// known, `None`, is refused).
    pub fn allows(&self, peer: Option<IpAddr>) -> bool {
        if self.allow.is_empty() {
            return true;
        }
        peer.is_some_and(|ip| self.allow.iter().any(|c| c.contains(ip)))
    }

    /// The anonymous identity (AUTH_NONE, `all_squash`, a squashed root).
    pub fn anonymous(&self) -> Caller {
        Caller {
            uid: self.anon_uid,
            gid: self.anon_gid,
            gids: Vec::new(),
        }
    }

    /// The identity an AUTH_SYS Call from `claimed` runs as.
    pub fn map(&self, claimed: Caller) -> Mapped {
        if self.all_squash {
            let squashed = claimed.uid != self.anon_uid
                || claimed.gid != self.anon_gid
                || !claimed.gids.is_empty();
            return Mapped {
                caller: self.anonymous(),
                squashed,
            };
        }
        if !self.root_squash {
            return Mapped {
                caller: claimed,
                squashed: false,
            };
        }
        let mut c = claimed;
        let mut squashed = false;
        if c.uid == 0 {
            c.uid = self.anon_uid;
            squashed = true;
        }
        if c.gid == 0 {
            c.gid = self.anon_gid;
            squashed = true;
        }
        for g in &mut c.gids {
            if *g == 0 {
                *g = self.anon_gid;
                squashed = true;
            }
        }
        Mapped {
            caller: c,
            squashed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(uid: u32, gid: u32, gids: &[u32]) -> Caller {
        Caller {
            uid,
            gid,
            gids: gids.to_vec(),
        }
    }

    #[test]
    fn blocks_parse_and_contain() {
        let c: Cidr = "10.0.2.0/24".parse().unwrap();
        assert!(c.contains("10.0.2.15".parse().unwrap()));
        assert!(
            c.contains("::ffff:10.0.2.200".parse().unwrap()),
            "mapped IPv4"
        );
        assert!(!c.contains("10.0.3.1".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        let one: Cidr = "192.168.1.7".parse().unwrap();
        assert_eq!(one.to_string(), "192.168.1.7/32");
        assert!(one.contains("192.168.1.7".parse().unwrap()));
        assert!(!one.contains("192.168.1.8".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("fe80::1".parse().unwrap()));
        assert_eq!(
            "10.0.0.0/33".parse::<Cidr>(),
            Err(CidrError::Bits("33".into()))
        );
        assert_eq!(
            "ten/8".parse::<Cidr>(),
            Err(CidrError::Address("ten".into()))
        );
        assert!("::/129".parse::<Cidr>().is_err());
    }

    #[test]
    fn only_allowed_clients() {
        let open = Policy::default();
        assert!(open.allows(None), "no --allow: everyone");
        let p = Policy {
            allow: vec!["10.0.2.0/24".parse().unwrap(), "fd00::/8".parse().unwrap()],
            ..Policy::default()
        };
        assert!(p.allows(Some("10.0.2.15".parse().unwrap())));
        assert!(p.allows(Some("fd00::5".parse().unwrap())));
        assert!(!p.allows(Some("10.0.3.15".parse().unwrap())));
        assert!(!p.allows(None), "an unknown address is refused");
    }

    #[test]
    fn root_is_squashed_by_default() {
        let p = Policy::default();
        let m = p.map(caller(0, 0, &[0, 5]));
        assert_eq!(m.caller, caller(ANON_ID, ANON_ID, &[ANON_ID, 5]));
        assert!(m.squashed);
        let m = p.map(caller(1000, 1000, &[27]));
        assert_eq!(m.caller, caller(1000, 1000, &[27]));
        assert!(!m.squashed);
        // A user in group 0 loses that group, keeps the others.
        let m = p.map(caller(1000, 0, &[]));
        assert_eq!(m.caller, caller(1000, ANON_ID, &[]));
        assert!(m.squashed);
    }

    #[test]
    fn no_root_squash_and_all_squash() {
        let p = Policy {
            root_squash: false,
            ..Policy::default()
        };
        assert_eq!(p.map(caller(0, 0, &[0])).caller, caller(0, 0, &[0]));
        let p = Policy {
            all_squash: true,
            anon_uid: 2000,
            anon_gid: 3000,
            ..Policy::default()
        };
        let m = p.map(caller(1000, 1000, &[4]));
        assert_eq!(m.caller, caller(2000, 3000, &[]));
        assert!(m.squashed);
        let m = p.map(caller(2000, 3000, &[]));
        assert!(!m.squashed, "already the anonymous identity");
    }
}
