//! The sealed-run protocol between the host agent and the enclave service:
//! its versioned CBOR messages ([`message`]), one encoder and one strict
//! decoder (`docs/sealed-run.md`). Framing and the byte streams that carry
//! the frames are `kolm-transport`'s.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod cbor;
pub mod message;
