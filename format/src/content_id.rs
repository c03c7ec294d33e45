//! Content identifiers: CIDv1 (codec `json`, multihash sha2-256) written in
//! multibase base32 lower case, the form `b...` (multiformats CID spec).
//!
//! kolm names a manifest by the CID of its canonical (RFC 8785) bytes, so the
//! name commits to every byte an auditor checks.

use std::fmt;
use std::str::FromStr;

use cid::Cid;
use multihash::Multihash;
use sha2::{Digest, Sha256};

/// Multicodec code of `json` (the manifest is canonical JSON).
pub const CODEC_JSON: u64 = 0x0200;
/// Multicodec code of `sha2-256`.
pub const MULTIHASH_SHA2_256: u64 = 0x12;

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

/// A CIDv1 over canonical JSON bytes with a sha2-256 multihash.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentId(Cid);

impl ContentId {
    /// The CID of `bytes`, which the caller asserts are canonical JSON.
    pub fn for_json(bytes: &[u8]) -> ContentId {
        let digest = Sha256::digest(bytes);
        ContentId::from_sha256(digest.into())
    }

    /// The CID whose multihash is the given sha2-256 digest.
    pub fn from_sha256(digest: [u8; 32]) -> ContentId {
        // A 32-byte digest always fits the 64-byte multihash buffer.
        #[allow(clippy::expect_used)]
        let mh = Multihash::<64>::wrap(MULTIHASH_SHA2_256, &digest)
            .expect("32-byte digest fits a 64-byte multihash");
        ContentId(Cid::new_v1(CODEC_JSON, mh))
    }

    /// The sha2-256 digest this CID names.
    pub fn sha256(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        out.copy_from_slice(self.0.hash().digest());
        out
    }

    /// Binary CID (version varint, codec varint, multihash).
    pub fn to_bytes(&self) -> Vec<u8> {
        self.0.to_bytes()
    }
}

impl FromStr for ContentId {
    type Err = ContentIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let cid = Cid::try_from(s).map_err(|e| ContentIdError::Malformed(e.to_string()))?;
        if cid.version() != cid::Version::V1 {
            return Err(ContentIdError::Version(cid.version().into()));
        }
        if cid.codec() != CODEC_JSON {
            return Err(ContentIdError::Codec(cid.codec()));
        }
        let mh = cid.hash();
        if mh.code() != MULTIHASH_SHA2_256 || mh.size() != 32 {
            return Err(ContentIdError::Hash {
                code: mh.code(),
                len: mh.size(),
            });
        }
        let id = ContentId(cid);
        let expected = id.to_string();
        if expected != s {
            return Err(ContentIdError::NotCanonical { expected });
        }
        Ok(id)
    }
}

impl fmt::Display for ContentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // CIDv1 Display is multibase base32 lower case ("b" prefix).
        write!(f, "{}", self.0)
    }
}

impl fmt::Debug for ContentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentId({})", self.0)
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
