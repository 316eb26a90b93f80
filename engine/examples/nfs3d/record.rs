//! ONC RPC over TCP: record marking (RFC 5531 §11) and the reply headers the TCP side of
//! nfs3d (MOUNT, the rpcbind client) sends and reads, encoded by `rpcrdma_proto::rpc`.
//!
//! A record is a sequence of fragments, each preceded by a 4-byte header whose high bit
//! marks the last fragment and whose low 31 bits give the fragment's length. Readers here
//! are bounded: a fragment longer than [`MAX_FRAGMENT`] or a record longer than the
//! caller's limit is refused before any of its bytes are buffered.

use std::io::{self, Read, Write};

use rpcrdma_proto::rpc::{CallHeader, OpaqueAuth, ReplyHeader, RPC_VERSION};
use rpcrdma_proto::xdr::XdrWriter;

/// Largest fragment accepted (64 KiB): MOUNT and rpcbind messages are a few hundred bytes.
pub const MAX_FRAGMENT: usize = 64 * 1024;

/// The last-fragment bit of a record-marking header (RFC 5531 §11).
const LAST_FRAGMENT: u32 = 0x8000_0000;

/// Why a record could not be read.
#[derive(Debug)]
pub enum RecordError {
    /// The peer closed the connection between two records.
    Closed,
    /// A fragment header announced more than [`MAX_FRAGMENT`] bytes, or the record grew
    /// past the caller's limit.
    TooLong(usize),
    /// The socket failed (a read timeout included) or closed inside a record.
    Io(io::Error),
}

impl core::fmt::Display for RecordError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RecordError::Closed => f.write_str("connection closed"),
            RecordError::TooLong(n) => write!(f, "record fragment of {n} bytes refused"),
            RecordError::Io(e) => write!(f, "socket: {e}"),
        }
    }
}

impl std::error::Error for RecordError {}

/// Reads one whole record (every fragment) of at most `max` bytes.
pub fn read_record(r: &mut impl Read, max: usize) -> Result<Vec<u8>, RecordError> {
    let mut record = Vec::new();
    loop {
        let mut head = [0u8; 4];
        if let Err(e) = r.read_exact(&mut head) {
            return Err(
                if record.is_empty() && e.kind() == io::ErrorKind::UnexpectedEof {
                    RecordError::Closed
                } else {
                    RecordError::Io(e)
                },
            );
        }
        let word = u32::from_be_bytes(head);
        let len = (word & !LAST_FRAGMENT) as usize;
        if len > MAX_FRAGMENT || record.len() + len > max {
            return Err(RecordError::TooLong(len));
        }
        let start = record.len();
        record.resize(start + len, 0);
        r.read_exact(&mut record[start..])
            .map_err(RecordError::Io)?;
        if word & LAST_FRAGMENT != 0 {
            return Ok(record);
        }
    }
}

/// Writes `msg` as one record of one fragment.
pub fn write_record(w: &mut impl Write, msg: &[u8]) -> io::Result<()> {
    let len = u32::try_from(msg.len())
        .ok()
        .filter(|&n| n & LAST_FRAGMENT == 0)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "record too long"))?;
    let mut out = Vec::with_capacity(4 + msg.len());
    out.extend_from_slice(&(len | LAST_FRAGMENT).to_be_bytes());
    out.extend_from_slice(msg);
    w.write_all(&out)?;
    w.flush()
}

/// A reply message: `header` (RFC 5531 §9) followed by `results` (for SUCCESS).
pub fn reply(header: &ReplyHeader<'_>, results: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; header.encoded_len() + results.len()];
    // The buffer is sized from `encoded_len` and the verifier is AUTH_NONE: cannot fail.
    let n = header.encode(&mut out).unwrap_or(0);
    out.truncate(n);
    out.extend_from_slice(results);
    out
}

/// A call message: the header for (`xid`, `prog`, `vers`, `proc_num`) with `cred` and an
/// AUTH_NONE verifier, followed by `args` (RFC 5531 §9).
pub fn call(
    xid: u32,
    prog: u32,
    vers: u32,
    proc_num: u32,
    cred: OpaqueAuth<'_>,
    args: &[u8],
) -> Vec<u8> {
    let header = CallHeader::new(xid, prog, vers, proc_num, cred, OpaqueAuth::NONE);
    debug_assert_eq!(header.rpcvers, RPC_VERSION);
    let mut out = vec![0u8; header.encoded_len() + args.len()];
    let n = header.encode(&mut out).unwrap_or(0);
    out.truncate(n);
    out.extend_from_slice(args);
    out
}

/// XDR-encodes with `f` into a buffer of at most `max` bytes; the bytes written, or `None`
/// when they did not fit.
pub fn encode(
    max: usize,
    f: impl FnOnce(&mut XdrWriter<'_>) -> Result<(), rpcrdma_proto::error::EncodeError>,
) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; max];
    let n = {
        let mut w = XdrWriter::new(&mut buf);
        f(&mut w).ok()?;
        w.position()
    };
    buf.truncate(n);
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_are_bounded() {
        let mut wire = Vec::new();
        write_record(&mut wire, b"abcd").unwrap();
        assert_eq!(read_record(&mut &wire[..], 100).unwrap(), b"abcd");
        // Two fragments make one record.
        let mut two = Vec::new();
        two.extend_from_slice(&2u32.to_be_bytes());
        two.extend_from_slice(b"ab");
        two.extend_from_slice(&(2u32 | LAST_FRAGMENT).to_be_bytes());
        two.extend_from_slice(b"cd");
        assert_eq!(read_record(&mut &two[..], 100).unwrap(), b"abcd");
        assert!(matches!(
            read_record(&mut &two[..], 3),
            Err(RecordError::TooLong(_))
        ));
        let huge = (LAST_FRAGMENT | 0x7fff_ffff).to_be_bytes();
        assert!(matches!(
            read_record(&mut &huge[..], usize::MAX),
            Err(RecordError::TooLong(_))
        ));
        assert!(matches!(
            read_record(&mut &[][..], 100),
            Err(RecordError::Closed)
        ));
        assert!(matches!(
            read_record(&mut &wire[..6], 100),
            Err(RecordError::Io(_))
        ));
    }
}
