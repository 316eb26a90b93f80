//! Helpers the protocol tests share: messages written by hand as hex words.
#![allow(dead_code)]

/// The bytes of `words`, hex digits with white space between the words.
pub fn hex(words: &str) -> Vec<u8> {
    let digits: String = words.split_whitespace().collect();
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap())
        .collect()
}

/// An NFSv3 NULL Call with XID `xid`, AUTH_NONE (RFC 5531 §9): 40 bytes.
pub fn null_call(xid: &str) -> String {
    format!(
        "{xid} 00000000 00000002 000186a3 00000003 00000000 00000000 00000000 00000000 00000000"
    )
}

/// An accepted SUCCESS Reply with XID `xid`: 24 bytes.
pub fn success_reply(xid: &str) -> String {
    format!("{xid} 00000001 00000000 00000000 00000000 00000000")
}
