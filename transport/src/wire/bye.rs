//! `bye`, either way: the sender is done and closes the connection. An
//! empty body.

use super::cbor::{Decoder, Encoder};
use super::codec::{Body, Codec, DecodeError};
use super::rules::Rule;

/// The body of [`super::message::Message::Bye`]: an empty map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Bye;

impl Codec for Bye {
    fn encode(&self, e: &mut Encoder) {
        e.map(Self::FIELDS);
    }

    fn read(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let m = d.map("bye", Self::FIELDS)?;
        d.end(m)?;
        Ok(Bye)
    }
}

impl Body for Bye {
    const FIELDS: &'static [&'static str] = &[];

    fn check(&self) -> Rule {
        Ok(())
    }
}
