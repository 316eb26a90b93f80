//! File handles (RFC 1813 §2.3.3: opaque to the client, at most 64 bytes, valid across a
//! server restart): the kernel's own handle of the object ([`khandle`]), what the server
//! checks it against, and a MAC that makes a forged handle `NFS3ERR_BADHANDLE`.
//!
//! ```text
//! 0      version (2)      1      n: bytes of the kernel's handle (at most 36)
//! 2..4   zero             4..8   the kernel's handle type
//! 8..16  inode            16..20 generation
//! 20..20+n               the kernel's handle
//! 20+n..28+n             SipHash-2-4 of bytes 0..20+n under the server's 128-bit key
//! ```
//!
//! The kernel's handle resolves the object in one system call, whatever its names
//! (`ops::export`). The inode and generation let the server check an object it found by
//! a remembered path without asking the kernel again; the generation is taken from the
//! object's birth time when the filesystem reports one (statx), so that a handle of a
//! deleted file does not name a later file that reuses its inode number (NFS3ERR_STALE
//! instead). The key lives in the server's state directory (created, mode 0600, the first
//! time), so handles survive restarts.
//!
//! [`khandle`]: crate::khandle

use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::khandle::{KernelFh, MAX_BYTES};

/// Bytes of this server's fields around the kernel's handle.
const OVERHEAD: usize = 28;
const VERSION: u8 = 2;

/// A file handle as sent to clients: its length and bytes, inline (no allocation).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fh {
    len: u8,
    bytes: [u8; 64],
}

impl core::fmt::Debug for Fh {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Fh(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

impl Fh {
    /// A handle as a client sent it (at most 64 bytes), to send back as it is.
    pub fn from_bytes(b: &[u8]) -> Option<Fh> {
        let mut bytes = [0u8; 64];
        bytes.get_mut(..b.len())?.copy_from_slice(b);
        Some(Fh {
            len: b.len() as u8,
            bytes,
        })
    }

    /// The handle's bytes, as they go on the wire in an `nfs_fh3`.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// What a valid handle names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Id {
    /// The device (filesystem) number.
    pub dev: u64,
    /// The inode number.
    pub ino: u64,
    /// The generation (from the birth time; 0 where the filesystem keeps none).
    pub gen: u32,
}

/// The server's handle key.
#[derive(Clone, Copy)]
pub struct Key([u64; 2]);

impl core::fmt::Debug for Key {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// The key kept in `state_dir/fh-key`, made from the system's random source the first
    /// time.
    pub fn load_or_create(state_dir: &Path) -> io::Result<Key> {
        std::fs::create_dir_all(state_dir)?;
        let path = state_dir.join("fh-key");
        let mut bytes = [0u8; 16];
        match std::fs::File::open(&path) {
            Ok(mut f) => f.read_exact(&mut bytes)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                random(&mut bytes)?;
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)?;
                f.write_all(&bytes)?;
                f.sync_all()?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
            }
            Err(e) => return Err(e),
        }
        Ok(Key::from_bytes(bytes))
    }

    /// A key from 16 bytes.
    pub fn from_bytes(b: [u8; 16]) -> Key {
        let k0 = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
        let k1 = u64::from_le_bytes(b[8..].try_into().unwrap_or_default());
        Key([k0, k1])
    }

    /// The MAC of `data`: SipHash-2-4 under this key.
    pub fn mac(&self, data: &[u8]) -> u64 {
        siphash24(self.0[0], self.0[1], data)
    }

    /// The handle of `id`, whose kernel handle is `kfh`.
    pub fn handle(&self, id: Id, kfh: &KernelFh) -> Fh {
        let k = kfh.as_bytes();
        let mut bytes = [0u8; 64];
        bytes[0] = VERSION;
        bytes[1] = k.len() as u8;
        bytes[4..8].copy_from_slice(&kfh.kind().to_be_bytes());
        bytes[8..16].copy_from_slice(&id.ino.to_be_bytes());
        bytes[16..20].copy_from_slice(&id.gen.to_be_bytes());
        bytes[20..20 + k.len()].copy_from_slice(k);
        let at = 20 + k.len();
        let mac = self.mac(&bytes[..at]);
        bytes[at..at + 8].copy_from_slice(&mac.to_be_bytes());
        Fh {
            len: (at + 8) as u8,
            bytes,
        }
    }

    /// What `fh` names (its `dev` is `dev`, the export's: handles name objects of its file
    /// system) and its kernel handle, or `None` for a handle this server did not make (a
    /// wrong length or version, or a MAC that does not match: NFS3ERR_BADHANDLE, §2.6).
    pub fn open(&self, fh: &[u8], dev: u64) -> Option<(Id, KernelFh)> {
        let n = *fh.get(1)? as usize;
        if n > MAX_BYTES || fh.len() != OVERHEAD + n || fh[0] != VERSION || fh[2..4] != [0, 0] {
            return None;
        }
        let at = 20 + n;
        let mac = u64::from_be_bytes(fh[at..at + 8].try_into().ok()?);
        if mac != self.mac(&fh[..at]) {
            return None;
        }
        let kind = i32::from_be_bytes(fh[4..8].try_into().ok()?);
        let id = Id {
            dev,
            ino: u64::from_be_bytes(fh[8..16].try_into().ok()?),
            gen: u32::from_be_bytes(fh[16..20].try_into().ok()?),
        };
        Some((id, KernelFh::new(kind, &fh[20..at])?))
    }
}

/// Fills `out` from the system's random source.
pub fn random(out: &mut [u8]) -> io::Result<()> {
    std::fs::File::open("/dev/urandom")?.read_exact(out)
}

/// SipHash-2-4 (Aumasson and Bernstein) of `data` under the key (`k0`, `k1`).
fn siphash24(k0: u64, k1: u64, data: &[u8]) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let m = u64::from_le_bytes(c.try_into().unwrap_or_default());
        v[3] ^= m;
        round(&mut v);
        round(&mut v);
        v[0] ^= m;
    }
    let rest = chunks.remainder();
    let mut last = [0u8; 8];
    last[..rest.len()].copy_from_slice(rest);
    let m = u64::from_le_bytes(last) | (data.len() as u64) << 56;
    v[3] ^= m;
    round(&mut v);
    round(&mut v);
    v[0] ^= m;
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siphash_matches_the_reference_vectors() {
        // The paper's key 00..0f and messages 00..(n-1): outputs for n = 0, 1, 7, 8, 15.
        let key: Vec<u8> = (0..16).collect();
        let k = Key::from_bytes(key.try_into().unwrap());
        let msg: Vec<u8> = (0..64).collect();
        let expect = [
            (0, 0x726f_db47_dd0e_0e31u64),
            (1, 0x74f8_39c5_93dc_67fd),
            (7, 0xab02_00f5_8b01_d137),
            (8, 0x93f5_f579_9a93_2462),
            (15, 0xa129_ca61_49be_45e5),
        ];
        for (n, want) in expect {
            assert_eq!(k.mac(&msg[..n]), want, "{n} bytes");
        }
    }

    #[test]
    fn handles_round_trip_and_forgeries_are_refused() {
        let k = Key::from_bytes([7; 16]);
        let id = Id {
            dev: 0x801,
            ino: 123_456,
            gen: 99,
        };
        let kfh = KernelFh::new(2, &[9; 12]).unwrap();
        let fh = k.handle(id, &kfh);
        assert_eq!(fh.as_bytes().len(), OVERHEAD + 12);
        assert_eq!(k.open(fh.as_bytes(), 0x801), Some((id, kfh)));
        for i in 0..fh.as_bytes().len() {
            let mut bad = fh.as_bytes().to_vec();
            bad[i] ^= 1;
            assert_eq!(k.open(&bad, 0x801), None, "byte {i} flipped");
        }
        let n = fh.as_bytes().len();
        assert_eq!(k.open(&fh.as_bytes()[..n - 1], 0x801), None);
        assert_eq!(k.open(&[], 0x801), None);
        assert_eq!(
            Key::from_bytes([8; 16]).open(fh.as_bytes(), 0x801),
            None,
            "another key"
        );
        // The longest kernel handle still fits an NFS handle (64 bytes, §2.3.3).
        let long = KernelFh::new(1, &[7; MAX_BYTES]).unwrap();
        let fh = k.handle(id, &long);
        assert_eq!(fh.as_bytes().len(), 64);
        assert_eq!(k.open(fh.as_bytes(), 0x801), Some((id, long)));
    }

    #[test]
    fn the_key_survives_a_restart() {
        let dir = std::env::temp_dir().join(format!("nfs3d-key-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let a = Key::load_or_create(&dir).unwrap();
        let b = Key::load_or_create(&dir).unwrap();
        let id = Id {
            dev: 1,
            ino: 2,
            gen: 3,
        };
        let kfh = KernelFh::new(1, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        assert_eq!(b.open(a.handle(id, &kfh).as_bytes(), 1), Some((id, kfh)));
        let mode = std::fs::metadata(dir.join("fh-key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
