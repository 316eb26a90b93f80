//! Tests of RPC-over-RDMA version 1 CM Private Data (RFC 8797): constants, Size field
//! encoding, encoding and parsing, the Format Identifier search and negotiation.

use super::*;
use crate::error::EncodeError;
use proptest::prelude::*;

/// Send 4096, Receive 4096, R = 1 (checklist B.7 example).
const EXAMPLE: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x03];

fn present(data: PrivateData, offset: usize) -> Parsed {
    Parsed::Present { data, offset }
}

fn pd(send_size: u32, receive_size: u32, remote_invalidation: bool) -> PrivateData {
    PrivateData {
        version: 1,
        remote_invalidation,
        send_size,
        receive_size,
    }
}

#[test]
fn constants_match_the_rfc() {
    assert_eq!(FORMAT_IDENTIFIER_BYTES, [0xf6, 0xab, 0x0e, 0x18]);
    assert_eq!(VERSION, 1);
    assert_eq!(ENCODED_LEN, 8);
    assert_eq!(MIN_SIZE, 1024);
    assert_eq!(MAX_SIZE, 262_144);
    assert_eq!(DEFAULT_INLINE_THRESHOLD, 1024);
    assert_eq!(R_BIT | RESERVED_MASK, 0xff);
    assert_eq!(R_BIT & RESERVED_MASK, 0);
}

#[test]
fn example_4096_4096_r_encodes_and_parses() {
    let data = PrivateData::new(4096, 4096, true);
    assert_eq!(data, pd(4096, 4096, true));
    assert_eq!(data.encode(), EXAMPLE);
    assert_eq!(parse(&EXAMPLE), present(data, 0));
}

#[test]
fn defaults_encode_as_all_zero_fields() {
    let bytes = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x00, 0x00];
    assert_eq!(PrivateData::new(1024, 1024, false).encode(), bytes);
    assert_eq!(PrivateData::DEFAULT.encode(), bytes);
    assert_eq!(PrivateData::default(), PrivateData::DEFAULT);
    assert_eq!(parse(&bytes), present(pd(1024, 1024, false), 0));
}

#[test]
fn maximum_size_encodes_as_ff() {
    let bytes = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0xff, 0xff];
    assert_eq!(PrivateData::new(262_144, 262_144, false).encode(), bytes);
    assert_eq!(parse(&bytes), present(pd(262_144, 262_144, false), 0));
    // Send and Receive are separate octets, in that order.
    let bytes = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0xff, 0x00];
    assert_eq!(PrivateData::new(262_144, 1024, false).encode(), bytes);
    assert_eq!(parse(&bytes), present(pd(262_144, 1024, false), 0));
}

#[test]
fn reserved_bits_are_ignored_on_input() {
    let all_set = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0xff, 0x03, 0x07];
    assert_eq!(parse(&all_set), present(pd(4096, 8192, true), 0));
    let reserved_only = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0xfe, 0x00, 0x01];
    assert_eq!(parse(&reserved_only), present(pd(1024, 2048, false), 0));
    let top_bit = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x80, 0x00, 0x00];
    assert_eq!(parse(&top_bit), present(pd(1024, 1024, false), 0));
    // Re-encoding clears them.
    assert_eq!(parse(&all_set).effective().encode()[5], 0x01);
    assert_eq!(parse(&reserved_only).effective().encode()[5], 0x00);
}

#[test]
fn identifier_at_unaligned_offset() {
    let buf = [
        0x00, 0x11, 0x22, 0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x03,
    ];
    assert_eq!(parse(&buf), present(pd(4096, 4096, true), 3));
    // Trailing octets after the eight are ignored.
    let buf = [
        0x00, 0x11, 0x22, 0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x01, 0x00, 0xde, 0xad,
    ];
    assert_eq!(parse(&buf), present(pd(2048, 1024, false), 3));
}

#[test]
fn identifier_with_seven_octets_is_truncated() {
    let seven = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03];
    let parsed = parse(&seven);
    assert_eq!(
        parsed,
        Parsed::Absent(AbsentReason::Truncated { offset: 0 })
    );
    assert_eq!(parsed.effective(), PrivateData::DEFAULT);
    let prefixed = [0x99, 0x98, 0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03];
    assert_eq!(
        parse(&prefixed),
        Parsed::Absent(AbsentReason::Truncated { offset: 2 })
    );
    // The identifier alone, with no Version octet.
    assert_eq!(
        parse(&FORMAT_IDENTIFIER_BYTES),
        Parsed::Absent(AbsentReason::Truncated { offset: 0 })
    );
}

#[test]
fn unknown_version_is_absent() {
    let v2 = [0xf6, 0xab, 0x0e, 0x18, 0x02, 0x01, 0x03, 0x03];
    let parsed = parse(&v2);
    assert_eq!(parsed, Parsed::Absent(AbsentReason::UnknownVersion(2)));
    assert_eq!(parsed.effective(), PrivateData::DEFAULT);
    let v0 = [0xf6, 0xab, 0x0e, 0x18, 0x00, 0x01, 0x03, 0x03];
    assert_eq!(parse(&v0), Parsed::Absent(AbsentReason::UnknownVersion(0)));
    // A future version may be shorter or longer than eight octets: the Version decides, so
    // five octets with version 2 are an unknown version, not a truncation.
    let short_v2 = [0xf6, 0xab, 0x0e, 0x18, 0x02];
    assert_eq!(
        parse(&short_v2),
        Parsed::Absent(AbsentReason::UnknownVersion(2))
    );
}

#[test]
fn empty_buffer() {
    let parsed = parse(&[]);
    assert_eq!(parsed, Parsed::Absent(AbsentReason::Empty));
    assert_eq!(parsed.effective(), PrivateData::DEFAULT);
    assert!(!parsed.is_present());
    assert_eq!(parsed.present(), None);
}

#[test]
fn no_identifier() {
    let none = Parsed::Absent(AbsentReason::NoFormatIdentifier);
    assert_eq!(parse(&[0u8; 56]), none);
    // Three of the four identifier octets.
    assert_eq!(parse(&[0xf6, 0xab, 0x0e, 0x01, 0x00, 0x03, 0x03]), none);
    assert_eq!(parse(&[0x00, 0xf6, 0xab, 0x0e]), none);
    // The identifier in little-endian order is not the identifier.
    assert_eq!(
        parse(&[0x18, 0x0e, 0xab, 0xf6, 0x01, 0x00, 0x00, 0x00]),
        none
    );
    assert_eq!(parse(&[0x42]).effective(), PrivateData::DEFAULT);
}

/// A 56-octet buffer (the most rdma_cm carries in an InfiniBand connect request) whose first
/// four octets are MPA-like IRD/ORD data (RFC 6581 §7.1).
#[test]
fn fifty_six_octets_with_mpa_like_prefix() {
    let mut buf = [0u8; 56];
    buf[..4].copy_from_slice(&[0x80, 0x10, 0x40, 0x10]);
    buf[4..12].copy_from_slice(&[0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x1f, 0x0f]);
    assert_eq!(parse(&buf), present(pd(32_768, 16_384, true), 4));

    // The same data in the last eight octets: the search reaches the very end.
    let mut buf = [0xa5u8; 56];
    buf[48..].copy_from_slice(&EXAMPLE);
    assert_eq!(parse(&buf), present(pd(4096, 4096, true), 48));

    // One octet further and it no longer fits.
    let mut buf = [0xa5u8; 56];
    buf[49..].copy_from_slice(&EXAMPLE[..7]);
    assert_eq!(
        parse(&buf),
        Parsed::Absent(AbsentReason::Truncated { offset: 49 })
    );
}

#[test]
fn failing_candidate_does_not_hide_a_later_valid_one() {
    // Version 2 at offset 0, valid version 1 at offset 8.
    let buf = [
        0xf6, 0xab, 0x0e, 0x18, 0x02, 0x00, 0x00, 0x00, //
        0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x01, 0x02,
    ];
    assert_eq!(parse(&buf), present(pd(2048, 3072, false), 8));
    // Back to back: the first candidate's Version octet is the next identifier's first octet.
    let buf = [
        0xf6, 0xab, 0x0e, 0x18, 0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x00, 0x00,
    ];
    assert_eq!(parse(&buf), present(pd(1024, 1024, true), 4));
    let all: Vec<Candidate> = candidates(&buf).collect();
    assert_eq!(
        all,
        vec![
            Candidate {
                offset: 0,
                result: Err(AbsentReason::UnknownVersion(0xf6)),
            },
            Candidate {
                offset: 4,
                result: Ok(pd(1024, 1024, true)),
            },
        ]
    );
}

#[test]
fn first_valid_candidate_wins() {
    let buf = [
        0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x00, 0x00, //
        0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0xff, 0xff,
    ];
    assert_eq!(parse(&buf), present(pd(1024, 1024, false), 0));
    assert_eq!(candidates(&buf).count(), 2);
}

#[test]
fn first_failure_is_reported_when_none_is_valid() {
    let buf = [
        0xf6, 0xab, 0x0e, 0x18, 0x02, 0x00, 0x00, 0x00, //
        0xf6, 0xab, 0x0e, 0x18, 0x01,
    ];
    assert_eq!(parse(&buf), Parsed::Absent(AbsentReason::UnknownVersion(2)));
    let all: Vec<Candidate> = candidates(&buf).collect();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].offset, 8);
    assert!(matches!(all[1].result, Err(AbsentReason::Truncated { .. })));
}

#[test]
fn size_boundaries_encode() {
    let table: [(u32, u8, u32); 13] = [
        (0, 0, 1024),
        (1, 0, 1024),
        (1023, 0, 1024),
        (1024, 0, 1024),
        (1025, 0, 1024),
        (2047, 0, 1024),
        (2048, 1, 2048),
        (4096, 3, 4096),
        (262_143, 254, 261_120),
        (262_144, 255, 262_144),
        (262_145, 255, 262_144),
        (263_168, 255, 262_144),
        (u32::MAX, 255, 262_144),
    ];
    for (bytes, code, seen) in table {
        assert_eq!(encode_size(bytes), code, "encode_size({bytes})");
        assert_eq!(advertisable_size(bytes), seen, "advertisable_size({bytes})");
    }
}

#[test]
fn size_boundaries_decode() {
    assert_eq!(decode_size(0), 1024);
    assert_eq!(decode_size(1), 2048);
    assert_eq!(decode_size(3), 4096);
    assert_eq!(decode_size(254), 261_120);
    assert_eq!(decode_size(255), 262_144);
    for v in 0..=u8::MAX {
        assert_eq!(encode_size(decode_size(v)), v);
    }
}

#[test]
fn new_rounds_sizes_to_what_the_peer_sees() {
    let data = PrivateData::new(5000, 300_000, false);
    assert_eq!(data, pd(4096, 262_144, false));
    assert_eq!(PrivateData::new(0, 1023, true), pd(1024, 1024, true));
    // Fields set directly are rounded by encode.
    let raw = pd(5000, 2047, true);
    assert_eq!(
        raw.encode(),
        [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x00]
    );
    assert_eq!(raw.as_received(), pd(4096, 1024, true));
    // A version other than 1 is written as held, and a v1 receiver ignores it.
    let v2 = PrivateData { version: 2, ..raw };
    assert_eq!(v2.encode()[4], 2);
    assert_eq!(v2.as_received(), PrivateData::DEFAULT);
}

#[test]
fn encode_into_checks_the_buffer() {
    let data = PrivateData::new(4096, 4096, true);
    let mut small = [0u8; 7];
    assert_eq!(
        data.encode_into(&mut small),
        Err(EncodeError::BufferTooSmall {
            needed: 8,
            available: 7
        })
    );
    assert_eq!(small, [0u8; 7]);
    let mut exact = [0u8; 8];
    assert_eq!(data.encode_into(&mut exact), Ok(8));
    assert_eq!(exact, EXAMPLE);
    let mut large = [0xeeu8; 12];
    assert_eq!(data.encode_into(&mut large), Ok(8));
    assert_eq!(&large[..8], &EXAMPLE);
    assert_eq!(&large[8..], &[0xee; 4]);
}

#[test]
fn negotiation_table() {
    // (client send, client receive, client R, server send, server receive, server R)
    //   -> (call threshold, reply threshold, remote invalidation)
    type Row = ((u32, u32, bool), (u32, u32, bool), (u32, u32, bool));
    let table: [Row; 8] = [
        (
            (1024, 1024, false),
            (1024, 1024, false),
            (1024, 1024, false),
        ),
        ((4096, 4096, true), (4096, 4096, true), (4096, 4096, true)),
        ((4096, 4096, true), (4096, 4096, false), (4096, 4096, false)),
        ((4096, 4096, false), (4096, 4096, true), (4096, 4096, false)),
        // Each direction takes the sender's Send Size against the receiver's Receive Size.
        ((8192, 2048, true), (65_536, 4096, true), (4096, 2048, true)),
        (
            (2048, 65_536, false),
            (4096, 32_768, false),
            (2048, 4096, false),
        ),
        (
            (262_144, 262_144, true),
            (1024, 1024, true),
            (1024, 1024, true),
        ),
        (
            (262_144, 262_144, false),
            (262_144, 1024, false),
            (1024, 262_144, false),
        ),
    ];
    for ((cs, cr, cri), (ss, sr, sri), (call, reply, ri)) in table {
        let client = PrivateData::new(cs, cr, cri);
        let server = PrivateData::new(ss, sr, sri);
        let expected = Negotiated {
            call_threshold: call,
            reply_threshold: reply,
            remote_invalidation: ri,
        };
        assert_eq!(negotiate(&client, &server), expected, "{client} / {server}");
        assert_eq!(expected.send_threshold(ConnEnd::Client), call);
        assert_eq!(expected.receive_threshold(ConnEnd::Client), reply);
        assert_eq!(expected.send_threshold(ConnEnd::Server), reply);
        assert_eq!(expected.receive_threshold(ConnEnd::Server), call);
    }
}

#[test]
fn negotiation_uses_wire_values() {
    // 5000 is advertised as 4096, so both ends use 4096.
    let client = pd(5000, 5000, false);
    let server = pd(8192, 8192, false);
    let n = negotiate(&client, &server);
    assert_eq!((n.call_threshold, n.reply_threshold), (4096, 4096));
}

#[test]
fn negotiate_with_peer_from_raw_bytes() {
    let local_client = PrivateData::new(8192, 16_384, true);
    // Server: send 32768 (0x1f), receive 4096 (0x03), R = 1.
    let server_bytes = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x1f, 0x03];
    assert_eq!(
        negotiate_with_peer(ConnEnd::Client, &local_client, &server_bytes),
        Negotiated {
            call_threshold: 4096,
            reply_threshold: 16_384,
            remote_invalidation: true,
        }
    );
    let local_server = PrivateData::new(32_768, 4096, true);
    assert_eq!(
        negotiate_with_peer(ConnEnd::Server, &local_server, &local_client.encode()),
        negotiate_with_peer(ConnEnd::Client, &local_client, &server_bytes)
    );
}

#[test]
fn absent_or_invalid_peer_data_means_defaults() {
    let local = PrivateData::new(65_536, 65_536, true);
    let inputs: [&[u8]; 4] = [
        &[],
        &[0u8; 56],
        &[0xf6, 0xab, 0x0e, 0x18, 0x02, 0x01, 0xff, 0xff],
        &[0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0xff],
    ];
    for bytes in inputs {
        for role in [ConnEnd::Client, ConnEnd::Server] {
            assert_eq!(
                negotiate_with_peer(role, &local, bytes),
                Negotiated::DEFAULT,
                "{role:?} {bytes:02x?}"
            );
        }
    }
    assert_eq!(Negotiated::default(), Negotiated::DEFAULT);
    assert_eq!(
        negotiate(&PrivateData::DEFAULT, &PrivateData::DEFAULT),
        Negotiated::DEFAULT
    );
}

#[test]
fn descriptions_cite_the_rfc() {
    let reasons = [
        AbsentReason::Empty,
        AbsentReason::NoFormatIdentifier,
        AbsentReason::UnknownVersion(2),
        AbsentReason::Truncated { offset: 3 },
    ];
    let mut names = Vec::new();
    for reason in reasons {
        assert!(reason.describe().contains("RFC 8797 §5."), "{reason:?}");
        assert_eq!(Parsed::Absent(reason).describe(), reason.describe());
        assert!(!reason.to_string().is_empty());
        names.push(reason.name());
    }
    assert_eq!(
        names,
        [
            "empty",
            "no-format-identifier",
            "unknown-version",
            "truncated"
        ]
    );
    assert!(parse(&EXAMPLE).describe().contains("RFC 8797 §4"));
    assert_eq!(
        AbsentReason::UnknownVersion(7).to_string(),
        "unknown private data version 7"
    );
    assert_eq!(
        AbsentReason::Truncated { offset: 9 }.to_string(),
        "private data at offset 9 needs 8 octets but the buffer ends first"
    );
    assert_eq!(
        PrivateData::new(4096, 2048, true).to_string(),
        "version 1, send size 4096, receive size 2048, remote invalidation supported"
    );
}

fn valid_data() -> impl Strategy<Value = PrivateData> {
    (any::<u8>(), any::<u8>(), any::<bool>())
        .prop_map(|(s, r, ri)| pd(decode_size(s), decode_size(r), ri))
}

proptest! {
    #[test]
    fn parse_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..300)) {
        let parsed = parse(&buf);
        if let Parsed::Present { data, offset } = parsed {
            prop_assert!(offset + ENCODED_LEN <= buf.len());
            prop_assert_eq!(&buf[offset..offset + 4], &FORMAT_IDENTIFIER_BYTES[..]);
            prop_assert_eq!(data.version, VERSION);
        }
        let _ = parsed.effective();
        let _ = parsed.describe();
    }

    #[test]
    fn parse_never_panics_with_identifiers(
        pieces in proptest::collection::vec(
            prop_oneof![
                Just(FORMAT_IDENTIFIER_BYTES.to_vec()),
                proptest::collection::vec(any::<u8>(), 0..6),
                proptest::collection::vec(0u8..3, 0..3),
            ],
            0..12,
        )
    ) {
        let buf: Vec<u8> = pieces.concat();
        let parsed = parse(&buf);
        let first_ok = candidates(&buf).find(|c| c.result.is_ok());
        match (parsed, first_ok) {
            (Parsed::Present { data, offset }, Some(c)) => {
                prop_assert_eq!(offset, c.offset);
                prop_assert_eq!(Ok(data), c.result);
            }
            (Parsed::Absent(_), None) => {}
            (p, c) => prop_assert!(false, "parse {:?} but candidates {:?}", p, c),
        }
    }

    #[test]
    fn encode_then_parse_is_identity(
        data in valid_data(),
        prefix in proptest::collection::vec(any::<u8>().prop_filter("no 0xf6", |b| *b != 0xf6), 0..48),
        suffix in proptest::collection::vec(any::<u8>(), 0..48),
    ) {
        let encoded = data.encode();
        prop_assert_eq!(encoded[5] & RESERVED_MASK, 0);
        prop_assert_eq!(parse(&encoded), present(data, 0));
        let mut buf = prefix.clone();
        buf.extend_from_slice(&encoded);
        buf.extend_from_slice(&suffix);
        prop_assert_eq!(parse(&buf), present(data, prefix.len()));
        prop_assert_eq!(data.as_received(), data);
    }

    #[test]
    fn encode_size_never_over_advertises(bytes in any::<u32>()) {
        let seen = advertisable_size(bytes);
        prop_assert!((MIN_SIZE..=MAX_SIZE).contains(&seen));
        prop_assert_eq!(seen % SIZE_UNIT, 0);
        if bytes >= MIN_SIZE {
            prop_assert!(seen <= bytes);
        }
        if (MIN_SIZE..=MAX_SIZE).contains(&bytes) {
            prop_assert!(bytes - seen < SIZE_UNIT);
        }
    }

    #[test]
    fn both_ends_agree(
        cs in any::<u32>(), cr in any::<u32>(), cri in any::<bool>(),
        ss in any::<u32>(), sr in any::<u32>(), sri in any::<bool>(),
    ) {
        let client = pd(cs, cr, cri);
        let server = pd(ss, sr, sri);
        let at_client = negotiate_with_peer(ConnEnd::Client, &client, &server.encode());
        let at_server = negotiate_with_peer(ConnEnd::Server, &server, &client.encode());
        prop_assert_eq!(at_client, at_server);
        prop_assert_eq!(at_client, negotiate(&client, &server));
        prop_assert!(at_client.call_threshold >= MIN_SIZE);
        prop_assert!(at_client.reply_threshold >= MIN_SIZE);
        prop_assert_eq!(at_client.remote_invalidation, cri && sri);
    }
}
