//! The system calls of the soft provider, each wrapped once: anonymous shared memory
//! (`memfd_create`, `mmap`), descriptor passing over Unix sockets (`SCM_RIGHTS`), waiting
//! with a timeout (`poll`), the monotonic clock and a completion queue's bell (a datagram
//! socket pair). None
//! is used on the hot path except the clock, only while a completion-delay fault is armed (a
//! vDSO call, no system call), and the bell, only when its consumer has asked to be woken.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::fabric::FabricError;

/// Peers' memory mapped in this process, by device and inode ([`Mapping::of_peer`]).
type PeerMappings = std::collections::HashMap<(libc::dev_t, libc::ino_t), Weak<Mapping>>;

/// The mappings [`Mapping::of_peer`] shares; touched only when a connection is made.
static PEER_MAPPINGS: Mutex<Option<PeerMappings>> = Mutex::new(None);

/// A view's hold on a [`Mapping`], with the mapping's first byte copied beside it: the
/// views of the hot paths (completion rings, receive rings, arenas) reach their structures
/// from their own line, instead of first loading the address out of the mapping's shared
/// allocation, a line of its own that each RPC of a cold connection would miss on once per
/// view (measured with `rpcrdma bench cost --conns 256 --cache`).
#[derive(Clone)]
pub(crate) struct MapRef {
    base: NonNull<u8>,
    map: Arc<Mapping>,
}

// SAFETY: `base` is `map`'s own first byte, and the mapping is shareable (see `Mapping`).
unsafe impl Send for MapRef {}
// SAFETY: as for `Send`; `&MapRef` gives out the base pointer and the mapping's `&` API.
unsafe impl Sync for MapRef {}

impl MapRef {
    /// A hold on `map`.
    pub(crate) fn new(map: Arc<Mapping>) -> MapRef {
        MapRef { base: map.ptr, map }
    }

    /// The mapping.
    pub(crate) fn mapping(&self) -> &Arc<Mapping> {
        &self.map
    }

    /// The first byte (from the copy).
    #[inline(always)]
    pub(crate) fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// The `T` at byte `offset`, unchecked, through the copied address: for the hot paths of
    /// views that checked their geometry against the mapping once, when they were built.
    ///
    /// # Safety
    ///
    /// `offset` is a multiple of `T`'s alignment and `offset + size_of::<T>()` is at most
    /// the mapping's [`len`](Mapping::len).
    #[inline(always)]
    pub(crate) unsafe fn at_unchecked<T: Atomics>(&self, offset: usize) -> &T {
        debug_assert!(
            self.map.try_at::<T>(offset).is_some(),
            "unchecked access outside"
        );
        // SAFETY: inside the mapping and aligned (the caller's contract); `base` is the
        // mapping's, which `self.map` keeps alive as long as `self`; any content is a valid
        // `T` (see `Mapping::try_at`).
        unsafe { &*self.base.as_ptr().add(offset).cast::<T>() }
    }
}

/// A `MAP_SHARED` read-write mapping of a whole memfd. Unmapped on drop.
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is plain shared memory. Its owner accesses it only through atomics or
// through raw-pointer copies of plain bytes, never through Rust references to non-atomic
// data, so moving the handle to another thread or sharing it is sound.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` gives out only the base pointer and the length.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// A new zero-filled memfd of `len` bytes (sparse until touched), mapped, and sealed
    /// against shrinking: a peer that receives the descriptor cannot ftruncate it under our
    /// mapping (the next access would raise SIGBUS in this process).
    pub(crate) fn create(name: &str, len: usize) -> Result<Mapping, FabricError> {
        let cname = CString::new(name).map_err(|_| FabricError::InvalidArgument("memfd name"))?;
        // SAFETY: `cname` is a valid NUL-terminated string that outlives the call.
        let raw = unsafe {
            libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if raw < 0 {
            return Err(FabricError::last_os("memfd_create"));
        }
        // SAFETY: `raw` is a descriptor memfd_create just returned and nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let size = libc::off_t::try_from(len)
            .map_err(|_| FabricError::InvalidArgument("shared memory size"))?;
        // SAFETY: plain system call on a descriptor we own; no memory is passed.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
            return Err(FabricError::last_os("ftruncate"));
        }
        // The size is final: nobody holding the descriptor (a peer process included) may
        // shrink it, and F_SEAL_SEAL, added in the same call, keeps anyone from adding seals
        // later (F_SEAL_WRITE and the like would break our writable mapping's users).
        // SAFETY: plain system call on a descriptor we own; the third argument is an int.
        if unsafe {
            libc::fcntl(
                fd.as_raw_fd(),
                libc::F_ADD_SEALS,
                libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL,
            )
        } != 0
        {
            return Err(FabricError::last_os("fcntl(F_ADD_SEALS)"));
        }
        Self::map(fd, len)
    }

    /// Maps a memfd received from a peer, whole. The memfd must be sealed against shrinking
    /// (as [`create`](Self::create) seals): a descriptor the peer could still ftruncate
    /// below what we map would turn our next access into SIGBUS, so it is refused.
    pub(crate) fn from_fd(fd: OwnedFd) -> Result<Mapping, FabricError> {
        // The seals are checked before the size is read: once F_SEAL_SHRINK is set it stays
        // set, so the size read next can only grow, never fall below what we map.
        // SAFETY: plain system call on a descriptor we own; F_GET_SEALS takes no argument.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 {
            // EINVAL: not a memfd (or not sealable), e.g. a regular file or a pipe.
            return Err(FabricError::InvalidArgument(
                "shared memory from peer is not a sealable memfd",
            ));
        }
        if seals & libc::F_SEAL_SHRINK == 0 {
            return Err(FabricError::InvalidArgument(
                "shared memory from peer is not sealed against shrinking",
            ));
        }
        let st = fstat(&fd)?;
        if st.st_size <= 0 {
            return Err(FabricError::InvalidArgument(
                "empty shared memory from peer",
            ));
        }
        let len = usize::try_from(st.st_size)
            .map_err(|_| FabricError::InvalidArgument("shared memory from peer too large"))?;
        Self::map(fd, len)
    }

    /// A peer's memfd mapped once per process: every connection to the same peer memory
    /// (the arena or the shared receive queue a thousand connections of one server share)
    /// gets the same mapping. Separate mappings of one file would each fault its pages in
    /// on first touch and keep page tables of their own: with 1,000 connections writing
    /// into one shared receive queue, the client spent a fifth of its time in page faults.
    ///
    /// Mappings are known by the file's device and inode while some connection holds
    /// them: the mapping holds the file open, so the inode cannot be reused for another
    /// file meanwhile. A file that has grown since it was mapped is mapped anew.
    pub(crate) fn of_peer(fd: OwnedFd) -> Result<Arc<Mapping>, FabricError> {
        let st = fstat(&fd)?;
        let key = (st.st_dev, st.st_ino);
        let mut guard = PEER_MAPPINGS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let known = guard.get_or_insert_with(PeerMappings::new);
        if let Some(m) = known.get(&key).and_then(Weak::upgrade) {
            if i64::try_from(m.len) == Ok(st.st_size) {
                return Ok(m);
            }
        }
        let m = Arc::new(Mapping::from_fd(fd)?);
        known.retain(|_, w| w.strong_count() > 0);
        known.insert(key, Arc::downgrade(&m));
        Ok(m)
    }

    fn map(fd: OwnedFd, len: usize) -> Result<Mapping, FabricError> {
        // SAFETY: a fresh shared mapping chosen by the kernel (no fixed address), of a
        // descriptor we own; it aliases no Rust object.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(FabricError::last_os("mmap"));
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(FabricError::InvalidArgument("mmap null"))?;
        Ok(Mapping { ptr, len, fd })
    }

    /// Faults every page of the mapping in now, writable, as a device's queue memory is
    /// pinned when the queue is made: a ring whose producer reaches a page for the first
    /// time would otherwise take a page fault in the middle of a Send, in each process
    /// mapping it (measured on soft: some 6,000 faults a second in a server whose 1,000
    /// connections' completion queues were still being gone through seconds after they
    /// were made). A kernel without `MADV_POPULATE_WRITE` (before 5.14) leaves the pages
    /// to their first touch, as before.
    pub(crate) fn populate(&self) {
        self.populate_upto(usize::MAX);
    }

    /// [`populate`](Self::populate) if the mapping is at most `max` bytes long: a peer's
    /// memory is faulted in only within what a well-behaved peer makes, so that a hostile
    /// one cannot have a large sparse file filled on its behalf.
    pub(crate) fn populate_upto(&self, max: usize) {
        if self.len > max {
            return;
        }
        // SAFETY: advice on this mapping's own range, which stays mapped; it changes no
        // byte (the pages are zero-filled or already hold what was written).
        let _ = unsafe {
            libc::madvise(
                self.ptr.as_ptr().cast(),
                self.len,
                libc::MADV_POPULATE_WRITE,
            )
        };
    }

    /// The first byte.
    pub(crate) fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The memfd, to pass to a peer.
    pub(crate) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping made in `map`; every user of the memory
        // holds this mapping alive (through an `Arc`), so nothing reaches it after this.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// The file status of `fd`.
fn fstat(fd: &OwnedFd) -> Result<libc::stat, FabricError> {
    // SAFETY: `stat` is plain old data; an all-zero value is valid and fstat overwrites it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable stat buffer; `fd` is an open descriptor.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(FabricError::last_os("fstat"));
    }
    Ok(st)
}

/// Nanoseconds of `CLOCK_MONOTONIC`, comparable across processes of the host.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A completion queue's bell: a connected pair of Unix datagram sockets, the consumer's end
/// (waited on, drained) and the producers' end (passed to peers). Producers ring with a
/// non-blocking send, which never blocks whatever a peer does to the description it was
/// given: a peer may pass any descriptor as its bell, and ringing it is at worst an error.
pub(crate) fn bell_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two descriptors into the local array.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just returned by socketpair and are owned by no one else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Rings a bell: one byte sent without blocking. A full socket buffer (the consumer is
/// readable already) or a descriptor that is not a bell (a hostile peer's) fails, harmlessly.
pub(crate) fn bell_ring(tx: &OwnedFd) {
    let b = [1u8];
    // SAFETY: sends one byte from a local array on a descriptor we hold.
    let _ = unsafe {
        libc::send(
            tx.as_raw_fd(),
            b.as_ptr().cast(),
            1,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
}

/// Takes every ring waiting at the consumer's end without blocking; returns how many.
pub(crate) fn bell_drain(rx: &OwnedFd) -> u32 {
    let mut n = 0u32;
    let mut b = [0u8; 8];
    // SAFETY: receives at most 8 bytes into a local array from a descriptor we hold.
    while unsafe {
        libc::recv(
            rx.as_raw_fd(),
            b.as_mut_ptr().cast(),
            b.len(),
            libc::MSG_DONTWAIT,
        )
    } >= 0
    {
        n = n.saturating_add(1);
    }
    n
}

/// Sends `data` and the descriptors `fds` in one message (`SCM_RIGHTS`).
pub(crate) fn send_with_fds(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let fd_bytes = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is a pure computation on a length.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut control = vec![0u8; space.max(1)];
    // SAFETY: `msghdr` is plain old data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: `msg` points at `control`, which has room for one header of `fd_bytes`
        // payload (CMSG_SPACE), so CMSG_FIRSTHDR is non-null and CMSG_DATA stays in bounds;
        // the descriptors are copied unaligned into that payload.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(cmsg),
                fd_bytes,
            );
        }
    }
    // SAFETY: `msg` and everything it points to (iov, data, control) live across the call.
    let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != data.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short sendmsg"));
    }
    Ok(())
}

/// Receives one message of exactly `buf.len()` bytes and up to `max_fds` descriptors,
/// blocking (within the socket's read timeout). Returns the descriptors received; `Ok(None)`
/// on end of stream.
pub(crate) fn recv_with_fds(
    sock: RawFd,
    buf: &mut [u8],
    max_fds: usize,
) -> io::Result<Option<Vec<OwnedFd>>> {
    let (n, fds) = recvmsg_fds(sock, buf, max_fds, libc::MSG_WAITALL)?;
    if n == 0 {
        return Ok(None);
    }
    if n != buf.len() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "short message",
        ));
    }
    Ok(Some(fds))
}

/// Receives whatever part of a message has arrived, without waiting: at most `buf.len()`
/// bytes and `max_fds` descriptors. `Ok((0, _))` is end of stream; nothing arrived yet is
/// `WouldBlock`.
pub(crate) fn recv_some_with_fds(
    sock: RawFd,
    buf: &mut [u8],
    max_fds: usize,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    recvmsg_fds(sock, buf, max_fds, libc::MSG_DONTWAIT)
}

/// One `recvmsg` with `flags` into `buf`, taking the descriptors that came with the bytes
/// (close-on-exec). More than `max_fds` descriptors is an error (all of them are closed).
fn recvmsg_fds(
    sock: RawFd,
    buf: &mut [u8],
    max_fds: usize,
    flags: libc::c_int,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let fd_bytes = max_fds * std::mem::size_of::<RawFd>();
    // SAFETY: CMSG_SPACE is a pure computation on a length.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut control = vec![0u8; space.max(1)];
    // SAFETY: `msghdr` is plain old data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` and the buffers it points to live across the call; MSG_CMSG_CLOEXEC makes
    // received descriptors close-on-exec.
    let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC | flags) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `control` up to `msg_controllen`; CMSG_FIRSTHDR/NXTHDR walk
    // only inside it, and each SCM_RIGHTS payload holds `(cmsg_len - CMSG_LEN(0)) / 4`
    // descriptors now owned by this process, read unaligned.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let payload = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let count = payload / std::mem::size_of::<RawFd>();
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for i in 0..count {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "too many descriptors",
        ));
    }
    Ok((n as usize, fds))
}

/// Waits at most `timeout` (rounded up to a millisecond) for any of `fds` to become readable
/// (or to reach end of stream or an error, which a read then reports); sets `ready[i]` for
/// each one that did. `Ok(false)` on timeout.
pub(crate) fn poll_readable(
    fds: &[RawFd],
    ready: &mut [bool],
    timeout: Duration,
) -> io::Result<bool> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
    loop {
        // SAFETY: `pfds` is a valid array of `pfds.len()` pollfds that lives across the call.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        for (r, p) in ready.iter_mut().zip(&pfds) {
            *r = p.revents != 0;
        }
        return Ok(n > 0);
    }
}

/// Types made only of atomics (and padding), so that any bit pattern is a valid value and
/// concurrent modification by another thread or process through shared memory is sound.
///
/// # Safety
///
/// Implementors must be `#[repr(C)]` structs whose every field is an atomic integer (or an
/// array or struct of them), with no invariant beyond that.
pub(crate) unsafe trait Atomics: Sized {}

impl Mapping {
    /// The `T` at byte `offset`.
    ///
    /// # Panics
    ///
    /// If the `T` would not lie inside the mapping or would be misaligned.
    #[inline]
    pub(crate) fn at<T: Atomics>(&self, offset: usize) -> &T {
        self.try_at(offset)
            .expect("shared structure outside its mapping")
    }

    /// The `T` at byte `offset`, or `None` if it would not lie inside the mapping or would
    /// be misaligned (for mappings sized by a peer).
    #[inline]
    pub(crate) fn try_at<T: Atomics>(&self, offset: usize) -> Option<&T> {
        let fits = offset.is_multiple_of(std::mem::align_of::<T>())
            && offset
                .checked_add(std::mem::size_of::<T>())
                .is_some_and(|end| end <= self.len);
        if !fits {
            return None;
        }
        // SAFETY: the bytes are inside the mapping (checked), which lives as long as `self`;
        // the base is page aligned, so `offset` alignment (checked) is the address's; `T` is
        // made of atomics only (trait contract), so any content is a valid `T` and shared
        // mutation through `&T` is sound.
        Some(unsafe { &*self.base().add(offset).cast::<T>() })
    }

    /// The address of `len` bytes at `offset`, if they lie inside the mapping.
    #[inline]
    pub(crate) fn span(&self, offset: u64, len: u64) -> Option<*mut u8> {
        let end = offset.checked_add(len)?;
        if end > self.len as u64 {
            return None;
        }
        // SAFETY: `offset <= len` of the mapping (checked), so the result is inside it or one
        // past its end.
        Some(unsafe { self.base().add(offset as usize) })
    }
}

/// Copies `len` bytes between two spans of shared mappings (or a mapping and a local
/// buffer).
///
/// # Safety
///
/// `src` must be valid for reads and `dst` for writes of `len` bytes (they may overlap: a
/// queue pair may send between buffers of one domain). The bytes may be accessed concurrently by a peer; they are plain bytes, so a race
/// can only tear the data, as on a NIC, which the fabric's usage rules exclude for correct
/// programs.
///
/// Up to 128 bytes (a Short message: a null RPC's Call is 68, its reply 52) are copied in
/// line, without a call to `memmove` for a length known only at run time.
#[inline]
pub(crate) unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    if len <= 128 {
        // SAFETY: forwarded to the caller's contract.
        unsafe { copy_small(src, dst, len) }
    } else {
        // SAFETY: forwarded to the caller's contract.
        unsafe { std::ptr::copy(src, dst, len) }
    }
}

/// [`copy_bytes`] of at most 128 bytes: two (possibly overlapping) chunks of the largest
/// power of two not above `len` (at least 4), each loaded before either is stored, so that
/// overlapping spans are copied as `memmove` would.
///
/// # Safety
///
/// As [`copy_bytes`], with `len <= 128`.
#[inline(always)]
unsafe fn copy_small(src: *const u8, dst: *mut u8, len: usize) {
    /// Copies `[src, src + N)` and `[src + len - N, src + len)` to the same places at `dst`
    /// (`N <= len <= 2N`), loading both before storing.
    ///
    /// # Safety
    ///
    /// As [`copy_bytes`], with `N <= len <= 2 * N`.
    #[inline(always)]
    unsafe fn two<const N: usize>(src: *const u8, dst: *mut u8, len: usize) {
        // SAFETY: `N <= len`, so both chunks lie within the `len` bytes the caller vouches
        // for at `src` and `dst`; unaligned accesses of plain bytes.
        unsafe {
            let a = src.cast::<[u8; N]>().read_unaligned();
            let b = src.add(len - N).cast::<[u8; N]>().read_unaligned();
            dst.cast::<[u8; N]>().write_unaligned(a);
            dst.add(len - N).cast::<[u8; N]>().write_unaligned(b);
        }
    }
    // SAFETY: each arm's `N` satisfies `N <= len <= 2 * N`; the caller's contract for the
    // rest.
    unsafe {
        match len {
            64..=128 => two::<64>(src, dst, len),
            32..=63 => two::<32>(src, dst, len),
            16..=31 => two::<16>(src, dst, len),
            8..=15 => two::<8>(src, dst, len),
            4..=7 => two::<4>(src, dst, len),
            _ => std::ptr::copy(src, dst, len),
        }
    }
}

/// Asks the CPU to start loading the cache line at `addr`, which need not be mapped (no
/// effect on program state; nothing on other architectures).
#[inline(always)]
pub(crate) fn prefetch_addr(addr: u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 only hints the cache: it never faults, whatever the address (the
    // value may come from a peer and is never dereferenced).
    unsafe {
        core::arch::x86_64::_mm_prefetch(
            addr as usize as *const i8,
            core::arch::x86_64::_MM_HINT_T0,
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// Starts fetching the cache line holding `p` (a hint; no effect on other architectures).
#[inline]
pub(crate) fn prefetch<T>(p: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 only hints the cache; it never faults and `p` is a valid reference.
    unsafe {
        core::arch::x86_64::_mm_prefetch(
            (p as *const T).cast::<i8>(),
            core::arch::x86_64::_MM_HINT_T0,
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Starts taking the cache line holding `p` in a writable state (PREFETCHW), so that a store
/// to it soon after does not wait for other cores' copies to be invalidated (a hint; a plain
/// prefetch on x86-64 CPUs without PREFETCHW, where it is a no-op; nothing elsewhere).
#[inline]
pub(crate) fn prefetch_write<T>(p: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHW only hints the cache: it never faults, writes nothing and `p` is a
    // valid reference.
    unsafe {
        core::arch::asm!(
            "prefetchw [{0}]",
            in(reg) (p as *const T),
            options(nostack, preserves_flags, readonly)
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length up to past the in-line limit, at every offset pair of a small window,
    /// overlapping or not: the same bytes as `memmove`.
    #[test]
    fn copy_bytes_is_memmove() {
        let init: Vec<u8> = (0..400u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in 0..=140usize {
            for (s, d) in [
                (0, 200),
                (3, 201),
                (0, 5),
                (5, 0),
                (10, 9),
                (9, 10),
                (40, 40),
            ] {
                let mut want = init.clone();
                want.copy_within(s..s + len, d);
                let mut got = init.clone();
                let p = got.as_mut_ptr();
                // SAFETY: both spans lie within `got` (at most 200 + 140 bytes of 400).
                unsafe { copy_bytes(p.add(s), p.add(d), len) };
                assert_eq!(got, want, "len {len}, from {s} to {d}");
            }
        }
    }

    fn errno() -> i32 {
        io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    /// A memfd of `len` bytes made with `flags`, with `seals` added (if any).
    fn memfd(flags: libc::c_uint, seals: libc::c_int, len: libc::off_t) -> OwnedFd {
        // SAFETY: the name is a NUL-terminated literal that outlives the call.
        let raw = unsafe { libc::memfd_create(c"rpcrdma-test".as_ptr(), flags) };
        assert!(raw >= 0, "memfd_create: {}", errno());
        // SAFETY: `raw` was just returned by memfd_create and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: plain system call on a descriptor we own.
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), len) }, 0);
        if seals != 0 {
            // SAFETY: plain system call on a descriptor we own; the argument is an int.
            let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) };
            assert_eq!(r, 0, "F_ADD_SEALS: {}", errno());
        }
        fd
    }

    fn seals_of(fd: RawFd) -> libc::c_int {
        // SAFETY: plain system call; F_GET_SEALS takes no argument.
        unsafe { libc::fcntl(fd, libc::F_GET_SEALS) }
    }

    fn refused(fd: OwnedFd) -> &'static str {
        match Mapping::from_fd(fd) {
            Err(FabricError::InvalidArgument(why)) => why,
            Err(e) => panic!("refused with an untyped error: {e}"),
            Ok(_) => panic!("mapped"),
        }
    }

    /// Connections to the same peer memory share one mapping of it while one of them
    /// holds it; a grown file, or one no connection maps any more, is mapped anew.
    #[test]
    fn peer_memory_is_mapped_once_per_process() {
        let fd = memfd(libc::MFD_ALLOW_SEALING, libc::F_SEAL_SHRINK, 8192);
        let a = Mapping::of_peer(fd.try_clone().unwrap()).unwrap();
        let b = Mapping::of_peer(fd.try_clone().unwrap()).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "a second connection maps it again");
        let other = memfd(libc::MFD_ALLOW_SEALING, libc::F_SEAL_SHRINK, 8192);
        let c = Mapping::of_peer(other).unwrap();
        assert!(!Arc::ptr_eq(&a, &c), "another file shares its mapping");
        // SAFETY: plain system call on a descriptor we own; growing is allowed.
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), 16384) }, 0);
        let grown = Mapping::of_peer(fd.try_clone().unwrap()).unwrap();
        assert_eq!(grown.len(), 16384);
        assert!(!Arc::ptr_eq(&a, &grown));
        drop((a, b, grown));
        let again = Mapping::of_peer(fd).unwrap();
        assert_eq!(again.len(), 16384);
    }

    /// What a hostile peer would do to our memfd after receiving it fails: it cannot be
    /// shrunk (EPERM), nor can seals be added, and our mapping stays whole.
    #[test]
    fn created_mappings_cannot_shrink() {
        let m = Mapping::create("rpcrdma-test-seal", 8192).unwrap();
        let seals = seals_of(m.fd());
        assert_eq!(
            seals & (libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL),
            libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL
        );
        for smaller in [4096, 1, 0] {
            // SAFETY: plain system call on a descriptor `m` keeps open.
            let r = unsafe { libc::ftruncate(m.fd(), smaller) };
            assert_eq!((r, errno()), (-1, libc::EPERM), "ftruncate to {smaller}");
        }
        // SAFETY: plain system call on a descriptor `m` keeps open; the argument is an int.
        let r = unsafe { libc::fcntl(m.fd(), libc::F_ADD_SEALS, libc::F_SEAL_WRITE) };
        assert_eq!((r, errno()), (-1, libc::EPERM), "no seal can be added");
        // SAFETY: byte 8191 lies inside the 8192-byte mapping `m` keeps alive; the memory is
        // plain bytes nobody else is using.
        unsafe {
            m.base().add(8191).write_volatile(7);
            assert_eq!(m.base().add(8191).read_volatile(), 7);
        }
        // A peer receiving it maps it whole.
        let peer = match Mapping::from_fd(m.fd.try_clone().unwrap()) {
            Ok(p) => p,
            Err(e) => panic!("a sealed memfd was refused: {e}"),
        };
        assert_eq!(peer.len(), 8192);
        // SAFETY: as above, through the second mapping of the same memfd.
        assert_eq!(unsafe { peer.base().add(8191).read_volatile() }, 7);
    }

    /// A memfd a peer could still shrink is refused with a typed error, whatever else it
    /// is sealed with; so is anything that is not a memfd.
    #[test]
    fn from_fd_refuses_memory_that_can_shrink() {
        let sealable = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        let why = refused(memfd(sealable, 0, 4096));
        assert!(why.contains("not sealed against shrinking"), "{why}");
        // Sealed, but against growing and further seals only.
        let why = refused(memfd(sealable, libc::F_SEAL_GROW | libc::F_SEAL_SEAL, 4096));
        assert!(why.contains("not sealed against shrinking"), "{why}");
        // Made without MFD_ALLOW_SEALING: its only seal is F_SEAL_SEAL.
        let why = refused(memfd(libc::MFD_CLOEXEC, 0, 4096));
        assert!(why.contains("not sealed against shrinking"), "{why}");
        // A regular file (which anyone with write access could truncate).
        let file = std::fs::File::open(std::env::current_exe().unwrap()).unwrap();
        let why = refused(OwnedFd::from(file));
        assert!(why.contains("not a sealable memfd"), "{why}");
        // Sealed against shrinking, but empty: still refused, still typed.
        let why = refused(memfd(sealable, libc::F_SEAL_SHRINK, 0));
        assert!(why.contains("empty"), "{why}");
        // Sealed against shrinking: accepted.
        let fd = memfd(sealable, libc::F_SEAL_SHRINK, 4096);
        match Mapping::from_fd(fd) {
            Ok(m) => assert_eq!(m.len(), 4096),
            Err(e) => panic!("a sealed memfd was refused: {e}"),
        }
    }
}
