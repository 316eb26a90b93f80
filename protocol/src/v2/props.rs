//! Transport properties (\[V2\] §4): a property list (`rpcrdma2_propset`) is a count and that
//! many `{rdma_which, opaque rdma_data<>}` pairs. Zero-length data means the property's
//! default; a known property whose data does not fit its type is RDMA2_ERR_BAD_XDR; an
//! unknown one is skipped without an error (\[V2\] §4.1).
//!
//! [`Props`] validates a list in place once (every length against the message, every known
//! value against its type) and then hands out [`PropVal`]s and decoded [`Property`]s
//! without failing or allocating. [`Property::encode_list`] writes one.

use core::fmt;

use crate::error::{DecodeError, EncodeError};
use crate::xdr::{pad4, XdrReader, XdrWriter};

/// Receive Buffer Size, `RDMA2_PROPID_RBSIZ` (\[V2\] §4.2.1): `uint32`, default 4096.
pub const PROPID_RBSIZ: u32 = 1;
/// Reverse Request Support, `RDMA2_PROPID_BRS` (\[V2\] §4.2.2): `enum rpcrdma2_rvreqsup`,
/// default `RDMA2_RVREQSUP_INLINE`.
pub const PROPID_BRS: u32 = 2;
/// The default Receive Buffer Size.
pub const DEFAULT_RBSIZ: u32 = 4096;

/// Reverse Request Support levels, `rpcrdma2_rvreqsup` (\[V2\] §4.2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReverseRequests {
    /// RDMA2_RVREQSUP_NONE (0): no reverse-direction requests.
    None,
    /// RDMA2_RVREQSUP_INLINE (1): reverse-direction messages inline only (the default).
    Inline,
    /// RDMA2_RVREQSUP_GENL (2): reverse-direction messages with chunks too.
    General,
}

impl ReverseRequests {
    /// The wire value.
    pub const fn to_u32(self) -> u32 {
        match self {
            ReverseRequests::None => 0,
            ReverseRequests::Inline => 1,
            ReverseRequests::General => 2,
        }
    }

    /// The level for a wire value, if it is one of the three.
    pub const fn from_u32(v: u32) -> Option<ReverseRequests> {
        match v {
            0 => Some(ReverseRequests::None),
            1 => Some(ReverseRequests::Inline),
            2 => Some(ReverseRequests::General),
            _ => None,
        }
    }

    /// The draft's name.
    pub const fn name(self) -> &'static str {
        match self {
            ReverseRequests::None => "RDMA2_RVREQSUP_NONE",
            ReverseRequests::Inline => "RDMA2_RVREQSUP_INLINE",
            ReverseRequests::General => "RDMA2_RVREQSUP_GENL",
        }
    }
}

/// One property as it travels: its id and its data, borrowed from the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PropVal<'a> {
    /// `rdma_which`.
    pub which: u32,
    /// `rdma_data` (without its padding).
    pub data: &'a [u8],
}

/// A property, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Property<'a> {
    /// Receive Buffer Size; `None` asks for the default (zero-length data).
    RecvBufSize(Option<u32>),
    /// Reverse Request Support; `None` asks for the default.
    ReverseRequests(Option<ReverseRequests>),
    /// A property this implementation does not know: skipped by the receiver.
    Unknown {
        /// `rdma_which`.
        id: u32,
        /// `rdma_data`.
        data: &'a [u8],
    },
}

impl<'a> Property<'a> {
    /// The property's id.
    pub const fn id(&self) -> u32 {
        match self {
            Property::RecvBufSize(_) => PROPID_RBSIZ,
            Property::ReverseRequests(_) => PROPID_BRS,
            Property::Unknown { id, .. } => *id,
        }
    }

    /// The draft's name of a known property (`None` for another).
    pub const fn name(&self) -> Option<&'static str> {
        match self {
            Property::RecvBufSize(_) => Some("receive_buffer_size"),
            Property::ReverseRequests(_) => Some("reverse_request_support"),
            Property::Unknown { .. } => None,
        }
    }

    /// Decodes `p`: a known id's data must fit its type, zero length meaning the default.
    pub fn decode(p: PropVal<'a>) -> Result<Property<'a>, PropError> {
        let word = |d: &[u8]| -> Option<u32> {
            match d.len() {
                0 => None,
                _ => Some(u32::from_be_bytes([d[0], d[1], d[2], d[3]])),
            }
        };
        let bad = |why| PropError::BadValue { id: p.which, why };
        match p.which {
            PROPID_RBSIZ | PROPID_BRS if !matches!(p.data.len(), 0 | 4) => {
                Err(bad("its data is not one XDR uint32"))
            }
            PROPID_RBSIZ => Ok(Property::RecvBufSize(word(p.data))),
            PROPID_BRS => match word(p.data) {
                None => Ok(Property::ReverseRequests(None)),
                Some(v) => ReverseRequests::from_u32(v)
                    .map(|l| Property::ReverseRequests(Some(l)))
                    .ok_or(bad("not a value of enum rpcrdma2_rvreqsup")),
            },
            id => Ok(Property::Unknown { id, data: p.data }),
        }
    }

    /// Bytes of this property's data on the wire (without padding).
    fn data_len(&self) -> usize {
        match self {
            Property::RecvBufSize(v) => 4 * usize::from(v.is_some()),
            Property::ReverseRequests(v) => 4 * usize::from(v.is_some()),
            Property::Unknown { data, .. } => data.len(),
        }
    }

    /// Bytes a property list of `props` takes: the count, then per property its id, the
    /// data's length word and the padded data.
    pub fn list_len(props: &[Property<'_>]) -> usize {
        4 + props.iter().map(|p| 8 + pad4(p.data_len())).sum::<usize>()
    }

    /// Writes `props` as a property list.
    pub fn encode_list(props: &[Property<'_>], w: &mut XdrWriter<'_>) -> Result<(), EncodeError> {
        w.put_u32(props.len() as u32)?;
        for p in props {
            w.put_u32(p.id())?;
            match *p {
                Property::RecvBufSize(Some(v)) => w.put_opaque_var(&v.to_be_bytes(), 4)?,
                Property::ReverseRequests(Some(l)) => {
                    w.put_opaque_var(&l.to_u32().to_be_bytes(), 4)?
                }
                Property::RecvBufSize(None) | Property::ReverseRequests(None) => w.put_u32(0)?,
                Property::Unknown { data, .. } => w.put_opaque_var(data, u32::MAX)?,
            }
        }
        Ok(())
    }
}

/// Why a property list is refused: each is RDMA2_ERR_BAD_XDR (\[V2\] §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PropError {
    /// The list's structure does not decode: a count or a data length runs past the
    /// message.
    Xdr(DecodeError),
    /// A known property's data does not fit its type.
    BadValue {
        /// The property.
        id: u32,
        /// What is wrong.
        why: &'static str,
    },
}

impl fmt::Display for PropError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PropError::Xdr(e) => write!(f, "the property list does not decode: {e}"),
            PropError::BadValue { id, why } => write!(f, "property {id}: {why}"),
        }
    }
}

impl std::error::Error for PropError {}

/// A property list decoded in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Props<'a> {
    /// The encoded list, from its count word to its last padded datum.
    buf: &'a [u8],
    count: u32,
}

impl<'a> Props<'a> {
    /// Decodes the list at `r`'s position, checking every length against the input and
    /// every known property's value; `r` ends after the list.
    pub fn parse(r: &mut XdrReader<'a>) -> Result<Props<'a>, PropError> {
        let start = r.position();
        // Each property takes at least its id and its length word.
        let count = r.array_len(8, u32::MAX).map_err(PropError::Xdr)?;
        for _ in 0..count {
            let which = r.u32().map_err(PropError::Xdr)?;
            let data = r.opaque_var(u32::MAX).map_err(PropError::Xdr)?;
            Property::decode(PropVal { which, data })?;
        }
        Ok(Props {
            buf: &r.input()[start..r.position()],
            count,
        })
    }

    /// Properties in the list (the unknown ones included).
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of the encoded list.
    pub fn encoded_len(&self) -> usize {
        self.buf.len()
    }

    /// The properties as they travel, in order.
    pub fn iter(&self) -> PropsIter<'a> {
        PropsIter {
            r: XdrReader::at(self.buf, 4),
            left: self.count,
        }
    }

    /// The properties, decoded, in order.
    pub fn properties(&self) -> impl Iterator<Item = Property<'a>> {
        self.iter().filter_map(|p| Property::decode(p).ok())
    }

    /// The Receive Buffer Size the list gives (the last one, if it gives several), `None`
    /// when absent or asking for the default.
    pub fn recv_buf_size(&self) -> Option<u32> {
        self.properties()
            .filter_map(|p| match p {
                Property::RecvBufSize(v) => Some(v),
                _ => None,
            })
            .last()
            .flatten()
    }

    /// The Reverse Request Support level the list gives, `None` when absent or default.
    pub fn reverse_requests(&self) -> Option<ReverseRequests> {
        self.properties()
            .filter_map(|p| match p {
                Property::ReverseRequests(v) => Some(v),
                _ => None,
            })
            .last()
            .flatten()
    }
}

/// The properties of a [`Props`], as they travel.
#[derive(Clone, Debug)]
pub struct PropsIter<'a> {
    r: XdrReader<'a>,
    left: u32,
}

impl<'a> Iterator for PropsIter<'a> {
    type Item = PropVal<'a>;

    fn next(&mut self) -> Option<PropVal<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Validated by `Props::parse`: these cannot fail.
        let which = self.r.u32().ok()?;
        let data = self.r.opaque_var(u32::MAX).ok()?;
        Some(PropVal { which, data })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(props: &[Property<'_>]) -> Vec<u8> {
        let mut out = vec![0u8; Property::list_len(props)];
        let mut w = XdrWriter::new(&mut out);
        Property::encode_list(props, &mut w).unwrap();
        assert_eq!(w.position(), out.len());
        out
    }

    #[test]
    fn a_list_round_trips_and_unknown_properties_are_kept_but_skippable() {
        let props = [
            Property::RecvBufSize(Some(8192)),
            Property::Unknown {
                id: 77,
                data: b"abc",
            },
            Property::ReverseRequests(Some(ReverseRequests::General)),
            Property::RecvBufSize(None),
        ];
        let bytes = list(&props);
        // CHECKLIST C.1's example: Receive Buffer Size 8192 is 00000001 00000004 00002000.
        assert_eq!(&bytes[4..16], &[0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0x20, 0]);
        let p = Props::parse(&mut XdrReader::new(&bytes)).unwrap();
        assert_eq!(p.len(), 4);
        assert_eq!(p.encoded_len(), bytes.len());
        assert_eq!(p.properties().collect::<Vec<_>>(), props);
        // The last Receive Buffer Size asks for the default.
        assert_eq!(p.recv_buf_size(), None);
        assert_eq!(p.reverse_requests(), Some(ReverseRequests::General));
    }

    #[test]
    fn malformed_known_values_and_overruns_are_bad_xdr() {
        // Receive Buffer Size with 2 bytes of data.
        let b = [0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2, 0x10, 0, 0, 0];
        assert!(matches!(
            Props::parse(&mut XdrReader::new(&b)),
            Err(PropError::BadValue { id: 1, .. })
        ));
        // Reverse Request Support 3: not a value of the enum.
        let b = [0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, 3];
        assert!(matches!(
            Props::parse(&mut XdrReader::new(&b)),
            Err(PropError::BadValue { id: 2, .. })
        ));
        // An unknown property whose data runs past the message.
        let b = [0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 40, 1, 2, 3, 4];
        assert!(matches!(
            Props::parse(&mut XdrReader::new(&b)),
            Err(PropError::Xdr(_))
        ));
        // A count larger than the message could hold.
        let b = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1];
        assert!(matches!(
            Props::parse(&mut XdrReader::new(&b)),
            Err(PropError::Xdr(_))
        ));
        // An unknown property with any data at all is fine.
        let b = [0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 5, 1, 2, 3, 4, 5, 0, 0, 0];
        let p = Props::parse(&mut XdrReader::new(&b)).unwrap();
        assert_eq!(
            p.iter().next(),
            Some(PropVal {
                which: 9,
                data: &[1, 2, 3, 4, 5]
            })
        );
    }
}
