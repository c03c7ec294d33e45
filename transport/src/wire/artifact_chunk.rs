//! `artifact-chunk`, enclave to host: bytes of the sealed artifact, at an
//! offset, with the artifact's size. Its codec and its rule.

use super::cbor::{Decoder, Encoder};
use super::codec::{Body, Codec, DecodeError, FRAME_BOUNDED, file_name};
use super::file_name::FileName;
use super::rules::{Invalid, Rule, span};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactChunk {
    /// The bytes; `offset + data.len() <= total`.
    pub data: Vec<u8>,
    /// The artifact's file name.
    pub name: FileName,
    /// The artifact's size.
    pub total: u64,
    /// Where in the artifact they start.
    pub offset: u64,
}

impl Codec for ArtifactChunk {
    fn encode(&self, e: &mut Encoder) {
        e.map(Self::FIELDS);
        e.key("data");
        e.bytes(&self.data);
        e.key("name");
        e.text(self.name.as_str());
        e.key("total");
        e.uint(self.total);
        e.key("offset");
        e.uint(self.offset);
    }

    fn read(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let mut m = d.map("artifact-chunk", Self::FIELDS)?;
        d.key(&mut m, "data")?;
        let data = d.bytes("artifact-chunk.data", FRAME_BOUNDED)?.to_vec();
        d.key(&mut m, "name")?;
        let name = file_name(d, "artifact-chunk.name")?;
        d.key(&mut m, "total")?;
        let total = d.uint("artifact-chunk.total")?;
        d.key(&mut m, "offset")?;
        let offset = d.uint("artifact-chunk.offset")?;
        d.end(m)?;
        Ok(ArtifactChunk {
            data,
            name,
            total,
            offset,
        })
    }
}

impl Body for ArtifactChunk {
    const FIELDS: &'static [&'static str] = &["data", "name", "total", "offset"];

    /// The chunk ends within the artifact.
    fn check(&self) -> Rule {
        let end = span("artifact-chunk.offset", self.offset, self.data.len())?;
        if end > self.total {
            return Err((
                "artifact-chunk.offset",
                Invalid::PastEnd {
                    offset: self.offset,
                    len: end.saturating_sub(self.offset),
                    total: self.total,
                },
            ));
        }
        Ok(())
    }
}
