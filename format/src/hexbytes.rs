//! Fixed-length byte strings written as lower-case hex in JSON.
//!
//! Only lower-case hex is accepted so that each value has one spelling, which
//! canonical manifests rely on.

use std::fmt;

/// `N` bytes, serialised as `2*N` lower-case hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HexBytes<const N: usize>(pub [u8; N]);

/// A sha256 digest.
pub type Sha256Digest = HexBytes<32>;

/// Why a string is not `N` bytes of lower-case hex.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum HexError {
    #[error("expected {expected} hex digits, found {found}")]
    Length { expected: usize, found: usize },
    #[error("invalid character {ch:?} at position {pos} (only 0-9a-f allowed)")]
    Char { ch: char, pos: usize },
}

impl<const N: usize> HexBytes<N> {
    /// Parses exactly `2*N` lower-case hex digits.
    pub fn parse(s: &str) -> Result<Self, HexError> {
        let expected = N.saturating_mul(2);
        if s.len() != expected {
            return Err(HexError::Length {
                expected,
                found: s.len(),
            });
        }
        if let Some((pos, ch)) = s
            .char_indices()
            .find(|(_, c)| !matches!(c, '0'..='9' | 'a'..='f'))
        {
            return Err(HexError::Char { ch, pos });
        }
        let mut out = [0u8; N];
        hex::decode_to_slice(s, &mut out).map_err(|_| HexError::Length {
            expected,
            found: s.len(),
        })?;
        Ok(HexBytes(out))
    }

    /// Lower-case hex.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl<const N: usize> fmt::Display for HexBytes<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl<const N: usize> fmt::Debug for HexBytes<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl<const N: usize> serde::Serialize for HexBytes<N> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de, const N: usize> serde::Deserialize<'de> for HexBytes<N> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        HexBytes::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Variable-length lower-case hex (for measurements whose size depends on the
/// platform), capped at 1 KiB of bytes.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct HexVec(pub Vec<u8>);

impl HexVec {
    const MAX_BYTES: usize = 1024;

    pub fn parse(s: &str) -> Result<Self, HexError> {
        if s.is_empty() || !s.len().is_multiple_of(2) || s.len() > Self::MAX_BYTES * 2 {
            return Err(HexError::Length {
                expected: s.len().clamp(2, Self::MAX_BYTES * 2) & !1,
                found: s.len(),
            });
        }
        if let Some((pos, ch)) = s
            .char_indices()
            .find(|(_, c)| !matches!(c, '0'..='9' | 'a'..='f'))
        {
            return Err(HexError::Char { ch, pos });
        }
        hex::decode(s).map(HexVec).map_err(|_| HexError::Length {
            expected: s.len(),
            found: s.len(),
        })
    }
}

impl fmt::Debug for HexVec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(&self.0))
    }
}

impl serde::Serialize for HexVec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(&self.0))
    }
}

impl<'de> serde::Deserialize<'de> for HexVec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        HexVec::parse(&s).map_err(serde::de::Error::custom)
    }
}
