//! The sealed-run protocol between the host agent and the enclave service:
//! its versioned CBOR messages ([`message`]), one encoder and one strict
//! decoder (`docs/sealed-run.md`). Framing and the byte streams that carry
//! the frames are `kolm-transport`'s.
//!
//! After rustls (`rustls/src/msgs/codec.rs`): one codec per wire type
//! (`codec`, over the deterministic CBOR of `cbor`), each message body in
//! its own module with its rules beside its codec, and [`message`] reading
//! the envelope and dispatching by kind (it re-exports every public type).
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod artifact_chunk;
mod bye;
mod cancel;
mod cbor;
mod codec;
mod error;
mod file_name;
mod files;
mod hello;
mod input_chunk;
mod job_submit;
mod log;
pub mod message;
mod progress;
mod rules;
#[cfg(test)]
mod test_support;
mod train_progress;
