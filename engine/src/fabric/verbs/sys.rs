//! Small system helpers of the verbs provider: errno, page-aligned anonymous mappings,
//! socket addresses in C form and waiting on a descriptor with a timeout.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use crate::fabric::FabricError;

/// The calling thread's errno.
pub(super) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Clears the calling thread's errno, before a call that reports failure through it only.
pub(super) fn clear_errno() {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = 0 };
}

/// The error of a failed call that returned an errno value (or -1 with errno set).
pub(super) fn os_err(call: &'static str, ret: i32) -> FabricError {
    let errno = if ret > 0 { ret } else { errno() };
    FabricError::Os {
        call,
        errno: if errno == 0 { libc::EIO } else { errno },
    }
}

/// The system page size.
pub(super) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n <= 0 {
        4096
    } else {
        n as usize
    }
}

/// A private anonymous read-write mapping, page-aligned and zero-filled. It is not unmapped
/// on drop: its owner decides whether it may be ([`Mapping::unmap`]) or must be leaked
/// because the device may still reach it.
pub(super) struct Mapping {
    ptr: NonNull<u8>,
    map_len: usize,
}

impl Mapping {
    /// Maps at least `len` bytes (rounded up to whole pages).
    pub(super) fn new(len: usize) -> Result<Mapping, FabricError> {
        let page = page_size();
        let map_len = len
            .checked_add(page - 1)
            .map(|n| n / page * page)
            .ok_or(FabricError::InvalidArgument("region length overflows"))?;
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choice; it aliases
        // no Rust object.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(FabricError::last_os("mmap"));
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(FabricError::InvalidArgument("mmap null"))?;
        Ok(Mapping { ptr, map_len })
    }

    /// The first byte.
    pub(super) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Gives the memory up for good, without unmapping it (what dropping does too; this
    /// names the intent).
    pub(super) fn leak(self) {}

    /// Unmaps the memory.
    ///
    /// # Safety
    ///
    /// Nothing may reach the memory any more: no registration covers it and no Rust
    /// reference into it lives.
    pub(super) unsafe fn unmap(self) {
        // SAFETY: the caller guarantees nothing uses the mapping; ptr/map_len are exactly
        // what mmap returned.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.map_len) };
    }
}

/// A socket address in the C form rdma_cm takes.
pub(super) fn sockaddr_of(addr: &SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and as aligned as sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and as aligned as sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
        }
    }
    ss
}

/// The socket address in `ss`, as rdma_cm fills one in (`rdma_addr`'s `src_storage` or
/// `dst_storage`): IPv4 or IPv6; `None` for any other family (`AF_IB`, or none set).
pub(super) fn socket_addr_from(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in; sockaddr_storage is
            // larger than and as aligned as it, and every bit pattern is a valid one.
            let sin: libc::sockaddr_in =
                unsafe { std::ptr::read((ss as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6; sockaddr_storage is
            // larger than and as aligned as it, and every bit pattern is a valid one.
            let sin6: libc::sockaddr_in6 =
                unsafe { std::ptr::read((ss as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Makes a descriptor non-blocking.
pub(super) fn set_nonblocking(fd: i32, call: &'static str) -> Result<(), FabricError> {
    // SAFETY: fcntl on a descriptor the caller owns; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(FabricError::last_os(call));
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(FabricError::last_os(call));
    }
    Ok(())
}

/// Waits until `fd` is readable or `deadline` passes; returns whether it is readable.
pub(super) fn wait_readable(fd: i32, deadline: Instant) -> Result<bool, FabricError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = millis_ceil(left);
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd that outlives the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n > 0 {
            return Ok(true);
        }
        if n == 0 {
            if Instant::now() >= deadline {
                return Ok(false);
            }
            continue;
        }
        let e = errno();
        if e != libc::EINTR {
            return Err(FabricError::Os {
                call: "poll",
                errno: e,
            });
        }
    }
}

/// A duration in whole milliseconds, rounded up, as a C int.
pub(super) fn millis_ceil(d: Duration) -> i32 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    ms.min(i32::MAX as u128) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Addresses go to C form and back unchanged; another family is no address.
    #[test]
    fn socket_addresses_round_trip() {
        for a in [
            "192.0.2.7:20049",
            "0.0.0.0:0",
            "[2001:db8::1]:20049",
            "[fe80::1%3]:1",
        ] {
            let addr: SocketAddr = a.parse().unwrap();
            assert_eq!(socket_addr_from(&sockaddr_of(&addr)), Some(addr), "{a}");
        }
        let v6 = SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::LOCALHOST, 7, 0x12345, 4));
        assert_eq!(socket_addr_from(&sockaddr_of(&v6)), Some(v6));
        let mut ss = sockaddr_of(&"192.0.2.7:1".parse().unwrap());
        ss.ss_family = 27; // AF_IB
        assert_eq!(socket_addr_from(&ss), None);
        ss.ss_family = 0;
        assert_eq!(socket_addr_from(&ss), None);
    }
}
