//! Content identifiers: CIDv1 (codec `json`, multihash sha2-256) written in
//! multibase base32 lower case, the form `b...` (multiformats CID spec).
//!
//! kolm names a manifest by the CID of its canonical (RFC 8785) bytes, so the
//! name commits to every byte an auditor checks.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

/// Multicodec code of `json` (the manifest is canonical JSON).
pub const CODEC_JSON: u64 = 0x0200;
/// Multicodec code of `sha2-256`.
pub const MULTIHASH_SHA2_256: u64 = 0x12;

/// The binary CID kolm writes: version 1, codec `json` (varint 0x80 0x04),
/// multihash sha2-256 (0x12) of 32 bytes (0x20), then the digest.
const PREFIX: [u8; 5] = [0x01, 0x80, 0x04, 0x12, 0x20];

/// RFC 4648 base32, lower case (multibase `b`): no padding.
const BASE32_LOWER: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// Why a string is not a kolm content identifier.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContentIdError {
    #[error("not a CID: {0}")]
    Malformed(String),
    #[error("CID must be version 1, found version {0}")]
    Version(u64),
    #[error("CID codec must be json (0x0200), found {0:#x}")]
    Codec(u64),
    #[error("CID multihash must be sha2-256 (0x12) of 32 bytes, found code {code:#x} length {len}")]
    Hash { code: u64, len: u8 },
    #[error("CID is not in canonical base32 lower-case form (expected {expected})")]
    NotCanonical { expected: String },
}

/// A CIDv1 over canonical JSON bytes with a sha2-256 multihash: the digest
/// is all it carries (version, codec and hash function are fixed).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentId([u8; 32]);

impl ContentId {
    /// The CID of `bytes`, which the caller asserts are canonical JSON.
    pub fn for_json(bytes: &[u8]) -> ContentId {
        let digest = Sha256::digest(bytes);
        ContentId::from_sha256(digest.into())
    }

    /// The CID whose multihash is the given sha2-256 digest.
    pub fn from_sha256(digest: [u8; 32]) -> ContentId {
        ContentId(digest)
    }

    /// The sha2-256 digest this CID names.
    pub fn sha256(&self) -> [u8; 32] {
        self.0
    }

    /// Binary CID (version varint, codec varint, multihash).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = PREFIX.to_vec();
        out.extend_from_slice(&self.0);
        out
    }

    /// Reads a binary CID of kolm's one shape; each other shape is named.
    fn from_binary(bytes: &[u8]) -> Result<ContentId, ContentIdError> {
        let mut r = bytes;
        let version = read_varint(&mut r)?;
        if version != 1 {
            return Err(ContentIdError::Version(version));
        }
        let codec = read_varint(&mut r)?;
        if codec != CODEC_JSON {
            return Err(ContentIdError::Codec(codec));
        }
        let code = read_varint(&mut r)?;
        let len = read_varint(&mut r)?;
        let len = u8::try_from(len)
            .map_err(|_| ContentIdError::Malformed(format!("multihash length {len} over 255")))?;
        if code != MULTIHASH_SHA2_256 || len != 32 {
            return Err(ContentIdError::Hash { code, len });
        }
        let digest: [u8; 32] = r.try_into().map_err(|_| {
            ContentIdError::Malformed(format!(
                "the multihash digest is {} bytes, its length says 32",
                r.len()
            ))
        })?;
        Ok(ContentId(digest))
    }
}

/// An unsigned varint (multiformats: LEB128, at most 9 bytes, minimal).
fn read_varint(r: &mut &[u8]) -> Result<u64, ContentIdError> {
    let mut value = 0u64;
    for shift in [0u32, 7, 14, 21, 28, 35, 42, 49, 56] {
        let Some((&b, rest)) = r.split_first() else {
            return Err(ContentIdError::Malformed("a varint is cut short".into()));
        };
        *r = rest;
        value |= u64::from(b & 0x7f).wrapping_shl(shift);
        if b & 0x80 == 0 {
            if b == 0 && shift > 0 {
                return Err(ContentIdError::Malformed(
                    "a varint is not minimally encoded".into(),
                ));
            }
            return Ok(value);
        }
    }
    Err(ContentIdError::Malformed("a varint is over 9 bytes".into()))
}

/// The base32 digit of the low five bits of `v`.
fn digit(v: u64) -> char {
    // `v & 31` is below 32, the alphabet's length.
    char::from(BASE32_LOWER.get((v & 31) as usize).copied().unwrap_or(b'a'))
}

fn base32_lower(bytes: &[u8]) -> String {
    let mut out = String::new();
    // Five bytes are eight digits: whole groups, then the rest padded with
    // zero bits (no `=`).
    for group in bytes.chunks(5) {
        let mut buf = [0u8; 8];
        buf.get_mut(3..group.len().min(5).saturating_add(3))
            .unwrap_or_default()
            .copy_from_slice(group);
        let n = u64::from_be_bytes(buf);
        let digits = (group.len().saturating_mul(8)).div_ceil(5);
        for i in 0..digits {
            let shift = 35u32.saturating_sub(5u32.saturating_mul(i as u32));
            out.push(digit(n.wrapping_shr(shift)));
        }
    }
    out
}

/// Decodes base32 of either case (multibase `b` and `B`); the caller
/// compares the re-encoding to refuse anything but the canonical form.
fn base32_decode(text: &str) -> Result<Vec<u8>, ContentIdError> {
    let mut out = Vec::new();
    for group in text.as_bytes().chunks(8) {
        let mut n = 0u64;
        for (i, &c) in group.iter().enumerate() {
            let v = BASE32_LOWER
                .iter()
                .position(|&a| a == c.to_ascii_lowercase())
                .ok_or_else(|| {
                    ContentIdError::Malformed(format!("{:?} is not a base32 digit", char::from(c)))
                })?;
            let shift = 35u32.saturating_sub(5u32.saturating_mul(i as u32));
            n |= (v as u64).wrapping_shl(shift);
        }
        // Eight digits are five bytes; fewer carry floor(digits * 5 / 8).
        let len = group.len().saturating_mul(5) / 8;
        let bytes = n.to_be_bytes();
        out.extend_from_slice(bytes.get(3..len.saturating_add(3)).unwrap_or_default());
    }
    Ok(out)
}

impl FromStr for ContentId {
    type Err = ContentIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // Only base32 (multibase `b`, or `B` upper case, which is then
        // refused as not canonical) is read.
        let body = match s.split_at_checked(1) {
            Some(("b" | "B", body)) if !body.is_empty() => body,
            _ => {
                return Err(ContentIdError::Malformed(
                    "not multibase base32 (a CID kolm writes starts with b)".into(),
                ));
            }
        };
        let id = ContentId::from_binary(&base32_decode(body)?)?;
        let expected = id.to_string();
        if expected != s {
            return Err(ContentIdError::NotCanonical { expected });
        }
        Ok(id)
    }
}

impl fmt::Display for ContentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Multibase base32 lower case: the "b" prefix.
        write!(f, "b{}", base32_lower(&self.to_bytes()))
    }
}

impl fmt::Debug for ContentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentId({self})")
    }
}

impl serde::Serialize for ContentId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ContentId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    /// A manifest CID the README example prints (computed by the `cid`
    /// crate before kolm wrote its own; verifier/tests/vectors.rs keeps
    /// that crate as the independent oracle).
    const KNOWN: &str = "bagaaiera3r5fryc2lpynoueftizanhu6bnqdiy52hg3xbh7sgfm6uhqb2cla";

    #[test]
    fn the_one_form_round_trips() {
        let id: ContentId = KNOWN.parse().unwrap();
        assert_eq!(id.to_string(), KNOWN);
        assert_eq!(ContentId::from_sha256(id.sha256()), id);
        assert_eq!(&id.to_bytes()[..5], &PREFIX);
        assert_eq!(format!("{id:?}"), format!("ContentId({KNOWN})"));
    }

    #[test]
    fn every_other_shape_is_named() {
        let upper = KNOWN.to_ascii_uppercase();
        assert_eq!(
            upper.parse::<ContentId>(),
            Err(ContentIdError::NotCanonical {
                expected: KNOWN.into()
            })
        );
        let with = |bytes: &[u8]| format!("b{}", base32_lower(bytes));
        let d = [7u8; 32];
        let mut v2 = vec![0x02, 0x80, 0x04, 0x12, 0x20];
        v2.extend_from_slice(&d);
        assert_eq!(
            with(&v2).parse::<ContentId>(),
            Err(ContentIdError::Version(2))
        );
        let mut raw = vec![0x01, 0x55, 0x12, 0x20];
        raw.extend_from_slice(&d);
        assert_eq!(
            with(&raw).parse::<ContentId>(),
            Err(ContentIdError::Codec(0x55))
        );
        let mut blake = vec![0x01, 0x80, 0x04, 0x1e, 0x20];
        blake.extend_from_slice(&d);
        assert_eq!(
            with(&blake).parse::<ContentId>(),
            Err(ContentIdError::Hash {
                code: 0x1e,
                len: 32
            })
        );
        let mut long = ContentId(d).to_bytes();
        long.push(0);
        for bad in [
            with(&long),
            with(&[0x81, 0x00]),
            with(&[0x01]),
            "zQmSomething".into(),
            "b".into(),
            "b0".into(),
            String::new(),
        ] {
            assert!(
                matches!(bad.parse::<ContentId>(), Err(ContentIdError::Malformed(_))),
                "{bad}"
            );
        }
        // Non-zero bits after the last byte: decodes, but is not the one form.
        let mut tail = KNOWN.to_string();
        tail.pop();
        tail.push('b');
        assert!(matches!(
            tail.parse::<ContentId>(),
            Err(ContentIdError::NotCanonical { .. })
        ));
    }
}
