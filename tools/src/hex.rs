//! Hex text to bytes and back, tolerant of the separators people paste.

/// Why a hex string could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum HexError {
    /// A character that is neither a hex digit nor an accepted separator.
    BadChar(char),
    /// An odd number of hex digits.
    OddLength,
}

impl std::fmt::Display for HexError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HexError::BadChar(c) => write!(f, "not a hex digit: {c:?}"),
            HexError::OddLength => write!(f, "odd number of hex digits"),
        }
    }
}

/// Decodes hex digits, ignoring white space, `:`, `-`, `_` and `0x` prefixes.
pub fn decode(text: &str) -> Result<Vec<u8>, HexError> {
    let mut digits = Vec::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '0' && matches!(chars.peek(), Some('x') | Some('X')) {
            chars.next();
            continue;
        }
        match c {
            c if c.is_ascii_hexdigit() => digits.push(c.to_digit(16).unwrap() as u8),
            c if c.is_whitespace() || matches!(c, ':' | '-' | '_') => {}
            c => return Err(HexError::BadChar(c)),
        }
    }
    if digits.len() % 2 != 0 {
        return Err(HexError::OddLength);
    }
    Ok(digits.chunks(2).map(|p| p[0] << 4 | p[1]).collect())
}

/// Encodes bytes as lowercase hex without separators.
pub fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_and_prefixes_are_ignored() {
        assert_eq!(
            decode("0xF6ab 0e:18\n01-01_0303").unwrap(),
            vec![0xf6, 0xab, 0x0e, 0x18, 1, 1, 3, 3]
        );
        assert_eq!(decode("").unwrap(), Vec::<u8>::new());
        assert_eq!(decode("abc"), Err(HexError::OddLength));
        assert_eq!(decode("zz"), Err(HexError::BadChar('z')));
        assert_eq!(encode(&[0, 0xab]), "00ab");
    }
}
