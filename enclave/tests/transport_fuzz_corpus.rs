//! Replays the committed corpus of the `transport` fuzz target
//! (`fuzz/corpus/transport/`) through the same two readers the target runs,
//! and checks each file's outcome against `fuzz/expected/transport.txt`
//! (`kolm_testkit::fuzz_corpus`: the line format and the rules). Per file:
//! `message <verdict>; frames <verdict>`, where `message` is `Message::decode` on the whole file and `frames` is the file
//! as a connection's byte stream through `Channel::recv` (`ok` when every
//! frame is a valid message and the stream ends cleanly).
//!
//! After adding corpus files, or after a deliberate verdict change:
//! `KOLM_REGENERATE_FUZZ_EXPECTED=1 cargo test -p kolm-enclave --test
//! transport_fuzz_corpus`, then review the diff.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;

use kolm_testkit::fuzz_corpus::{class, replay};
use kolm_transport::frame::{FrameOptions, MIN_MAX_FRAME};
use kolm_transport::{Channel, ChannelError, Message, Stream, memory};

const TARGET: &str = "transport";

/// The outcome of the fuzz target's two readers on `data`.
fn outcome(data: &[u8]) -> String {
    let message = match Message::decode(data) {
        Ok(m) => {
            assert_eq!(m.encode().unwrap(), data, "accepted bytes re-encode");
            "ok".to_owned()
        }
        Err(e) => format!("err {}", class(&e)),
    };
    let options = FrameOptions::default()
        .with_max_frame(MIN_MAX_FRAME)
        .unwrap();
    let (mut peer, server) = memory::pipe_with_capacity(data.len() + 1);
    peer.write_all(data).unwrap();
    peer.shutdown().unwrap();
    let mut channel = Channel::new(server, options);
    let frames = loop {
        match channel.recv() {
            Ok(_) => continue,
            Err(ChannelError::PeerClosed) => break "ok".to_owned(),
            Err(ChannelError::Receive(e)) => break format!("err {}", class(&e)),
            Err(ChannelError::Decode(e)) => break format!("err {}", class(&e)),
            Err(e) => break format!("err {}", class(&e)),
        }
    };
    format!("message {message}; frames {frames}")
}

#[test]
fn transport_corpus() {
    replay(TARGET, |_, data| outcome(data));
}
