//! File handles (RFC 1813 §2.3.3: opaque to the client, at most 64 bytes, valid across a
//! server restart): which object a handle names, and a MAC that makes a forged handle
//! `NFS3ERR_BADHANDLE`.
//!
//! ```text
//! 0      version (1)      1..4  zero
//! 4..12  device           12..20 inode          20..24 generation
//! 24..32 SipHash-2-4 of bytes 0..24 under the server's 128-bit key
//! ```
//!
//! The generation is taken from the object's birth time when the filesystem reports one
//! (statx), so that a handle of a deleted file does not name a later file that reuses its
//! inode number (NFS3ERR_STALE instead). The key lives in the server's state directory
//! (created, mode 0600, the first time), so handles survive restarts; which path a handle
//! names is found again by searching the export (`ops::export`).

use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Bytes of a handle this server makes.
pub const FH_LEN: usize = 32;
const VERSION: u8 = 1;

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

    /// The handle of `id`.
    pub fn handle(&self, id: Id) -> Fh {
        let mut bytes = [0u8; 64];
        bytes[0] = VERSION;
        bytes[4..12].copy_from_slice(&id.dev.to_be_bytes());
        bytes[12..20].copy_from_slice(&id.ino.to_be_bytes());
        bytes[20..24].copy_from_slice(&id.gen.to_be_bytes());
        let mac = self.mac(&bytes[..24]);
        bytes[24..32].copy_from_slice(&mac.to_be_bytes());
        Fh {
            len: FH_LEN as u8,
            bytes,
        }
    }

    /// What `fh` names, or `None` for a handle this server did not make (a wrong length or
    /// version, or a MAC that does not match: NFS3ERR_BADHANDLE, §2.6).
    pub fn open(&self, fh: &[u8]) -> Option<Id> {
        if fh.len() != FH_LEN || fh[0] != VERSION || fh[1..4] != [0, 0, 0] {
            return None;
        }
        let mac = u64::from_be_bytes(fh[24..32].try_into().ok()?);
        if mac != self.mac(&fh[..24]) {
            return None;
        }
        Some(Id {
            dev: u64::from_be_bytes(fh[4..12].try_into().ok()?),
            ino: u64::from_be_bytes(fh[12..20].try_into().ok()?),
            gen: u32::from_be_bytes(fh[20..24].try_into().ok()?),
        })
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
        let fh = k.handle(id);
        assert_eq!(fh.as_bytes().len(), FH_LEN);
        assert_eq!(k.open(fh.as_bytes()), Some(id));
        for i in 0..FH_LEN {
            let mut bad = fh.as_bytes().to_vec();
            bad[i] ^= 1;
            assert_eq!(k.open(&bad), None, "byte {i} flipped");
        }
        assert_eq!(k.open(&fh.as_bytes()[..31]), None);
        assert_eq!(k.open(&[]), None);
        assert_eq!(
            Key::from_bytes([8; 16]).open(fh.as_bytes()),
            None,
            "another key"
        );
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
        assert_eq!(b.open(a.handle(id).as_bytes()), Some(id));
        let mode = std::fs::metadata(dir.join("fh-key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
