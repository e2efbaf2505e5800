//! The one hex type of the workspace: a fixed-length byte string written as lower-case hex in JSON, TOML, on
//! the command line and in messages (measurement sets, policies, pins). Input may be upper case, surrounded by
//! whitespace and prefixed with `0x`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// A fixed-length byte string written as hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Hex<const N: usize>(pub [u8; N]);

/// Why a text is not `N` bytes of hex.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum HexError {
    /// A character is not a hex digit, or the number of digits is odd.
    #[error("not hex ({0})")]
    NotHex(hex::FromHexError),
    /// The digits decode to the wrong number of bytes.
    #[error("{got} bytes of hex, expected {expected} ({} hex digits)", 2 * expected)]
    WrongLength {
        /// Bytes decoded.
        got: usize,
        /// Bytes expected.
        expected: usize,
    },
}

impl<const N: usize> fmt::Debug for Hex<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl<const N: usize> fmt::Display for Hex<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl<const N: usize> FromStr for Hex<N> {
    type Err = HexError;
    fn from_str(s: &str) -> Result<Self, HexError> {
        let s = s.trim().trim_start_matches("0x");
        let v = hex::decode(s).map_err(HexError::NotHex)?;
        let arr: [u8; N] = v.as_slice().try_into().map_err(|_| HexError::WrongLength {
            got: v.len(),
            expected: N,
        })?;
        Ok(Hex(arr))
    }
}

impl<const N: usize> Serialize for Hex<N> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de, const N: usize> Deserialize<'de> for Hex<N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse()
            .map_err(|e| serde::de::Error::custom(format!("{s:?} is {e}")))
    }
}

/// Serialises a byte array as lower-case hex (for `#[serde(serialize_with)]` on plain array fields).
pub fn serialize<S: Serializer, const N: usize>(v: &[u8; N], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex::encode(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_it_prints_and_names_what_is_wrong() {
        let h: Hex<4> = " 0xDEADbeef\n".parse().expect("hex");
        assert_eq!(h, Hex([0xde, 0xad, 0xbe, 0xef]));
        assert_eq!(h.to_string(), "deadbeef");
        assert_eq!(
            "abcd".parse::<Hex<4>>(),
            Err(HexError::WrongLength {
                got: 2,
                expected: 4
            })
        );
        let e = "abcd".parse::<Hex<4>>().expect_err("short").to_string();
        assert_eq!(e, "2 bytes of hex, expected 4 (8 hex digits)");
        let e = "zz".parse::<Hex<1>>().expect_err("not hex").to_string();
        assert!(e.starts_with("not hex ("), "{e}");
        let j: Result<Hex<2>, _> = serde_json::from_str("\"xyz\"");
        let e = j.expect_err("not hex").to_string();
        assert!(e.contains("\"xyz\" is not hex"), "{e}");
        assert_eq!(
            serde_json::to_string(&Hex([1u8, 2])).expect("json"),
            "\"0102\""
        );
    }
}
