//! `cancel`, host to enclave: stop the job, and why. Its codec and its
//! rule.

use super::cbor::{Decoder, Encoder};
use super::codec::{Body, Codec, DecodeError};
use super::error::MAX_REASON;
use super::rules::{Rule, max_len};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancel {
    /// Why, at most [`MAX_REASON`] bytes.
    pub reason: String,
}

impl Codec for Cancel {
    fn encode(&self, e: &mut Encoder) {
        e.map(Self::FIELDS);
        e.key("reason");
        e.text(&self.reason);
    }

    fn read(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let mut m = d.map("cancel", Self::FIELDS)?;
        d.key(&mut m, "reason")?;
        let reason = d.text("cancel.reason", MAX_REASON)?.to_owned();
        d.end(m)?;
        Ok(Cancel { reason })
    }
}

impl Body for Cancel {
    const FIELDS: &'static [&'static str] = &["reason"];

    fn check(&self) -> Rule {
        max_len("cancel.reason", self.reason.len(), MAX_REASON)
    }
}
