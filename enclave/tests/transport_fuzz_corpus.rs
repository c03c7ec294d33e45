//! Replays the committed corpus of the `transport` fuzz target
//! (`fuzz/corpus/transport/`) through the same two readers the target runs,
//! and checks each file's outcome against `fuzz/expected/transport.txt`, in
//! the line format of `verifier/tests/fuzz_corpus.rs` (which replays the
//! other targets; this one lives here because the verifier never links the
//! enclave). Per file: `message <verdict>; frames <verdict>`, where
//! `message` is `Message::decode` on the whole file and `frames` is the file
//! as a connection's byte stream through `Channel::recv` (`ok` when every
//! frame is a valid message and the stream ends cleanly).
//!
//! After adding corpus files, or after a deliberate verdict change:
//! `KOLM_REGENERATE_FUZZ_EXPECTED=1 cargo test -p kolm-enclave --test
//! transport_fuzz_corpus`, then review the diff.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::Write;
use std::path::PathBuf;

use kolm_transport::frame::{FrameOptions, MIN_MAX_FRAME};
use kolm_transport::{Channel, ChannelError, Message, Stream, memory};

const TARGET: &str = "transport";
const REGENERATE: &str = "KOLM_REGENERATE_FUZZ_EXPECTED";

/// An error's variant name: its `Debug` form up to the first `(`, `{` or
/// space.
fn class(e: &impl Debug) -> String {
    let debug = format!("{e:?}");
    let end = debug
        .find(|c: char| c == '(' || c == '{' || c.is_whitespace())
        .unwrap_or(debug.len());
    debug[..end].to_owned()
}

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
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut got = BTreeMap::new();
    for entry in std::fs::read_dir(fuzz.join("corpus").join(TARGET)).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        assert!(!name.contains(char::is_whitespace), "{name}");
        got.insert(name, outcome(&std::fs::read(&path).unwrap()));
    }
    assert!(!got.is_empty(), "empty corpus");
    let expected = fuzz.join("expected").join(format!("{TARGET}.txt"));

    if std::env::var_os(REGENERATE).is_some_and(|v| v == "1") {
        let mut text = format!(
            "# Expected outcome of each fuzz/corpus/{TARGET}/ file (format: \
             enclave/tests/transport_fuzz_corpus.rs).\n# Regenerate: {REGENERATE}=1 cargo test \
             -p kolm-enclave --test transport_fuzz_corpus\n"
        );
        for (name, v) in &got {
            text.push_str(&format!("{name} {v}\n"));
        }
        std::fs::write(&expected, text).unwrap();
        return;
    }

    let text = std::fs::read_to_string(&expected).unwrap();
    let want: BTreeMap<String, String> = text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (name, v) = l.split_once(' ').expect("`<file> <verdict>`");
            (name.to_owned(), v.to_owned())
        })
        .collect();
    assert_eq!(
        got,
        want,
        "outcomes differ from {} (after a deliberate change: {REGENERATE}=1 and review the diff)",
        expected.display()
    );
}
