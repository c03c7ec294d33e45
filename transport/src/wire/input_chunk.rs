//! `input-chunk`, host to enclave: bytes of a declared input, at an
//! offset. Its codec and its rule.

use super::cbor::{Decoder, Encoder};
use super::codec::{Body, Codec, DecodeError, FRAME_BOUNDED, file_name};
use super::file_name::FileName;
use super::rules::{Rule, span};

/// Bytes of a declared input, starting at `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputChunk {
    /// The bytes (bounded by the frame).
    pub data: Vec<u8>,
    /// The input they belong to.
    pub name: FileName,
    /// Where in the input they start.
    pub offset: u64,
}

impl Codec for InputChunk {
    fn encode(&self, e: &mut Encoder) {
        e.map(Self::FIELDS);
        e.key("data");
        e.bytes(&self.data);
        e.key("name");
        e.text(self.name.as_str());
        e.key("offset");
        e.uint(self.offset);
    }

    fn read(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let mut m = d.map("input-chunk", Self::FIELDS)?;
        d.key(&mut m, "data")?;
        let data = d.bytes("input-chunk.data", FRAME_BOUNDED)?.to_vec();
        d.key(&mut m, "name")?;
        let name = file_name(d, "input-chunk.name")?;
        d.key(&mut m, "offset")?;
        let offset = d.uint("input-chunk.offset")?;
        d.end(m)?;
        Ok(InputChunk { data, name, offset })
    }
}

impl Body for InputChunk {
    const FIELDS: &'static [&'static str] = &["data", "name", "offset"];

    /// The chunk's end fits 64 bits.
    fn check(&self) -> Rule {
        span("input-chunk.offset", self.offset, self.data.len()).map(drop)
    }
}
