#![no_main]
//! The sealed-run transport as the enclave reads it from its host: the
//! message decoder on its own, then the same bytes as a connection's
//! stream through `Channel::recv` (frames, then messages, then the error
//! report and close on the first bad one).
use std::io::Write;

use kolm_transport::frame::{FrameOptions, MIN_MAX_FRAME};
use kolm_transport::{Channel, Message, Stream, memory};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Whatever the decoder accepts is the encoder's output, byte for byte.
    if let Ok(m) = Message::decode(data) {
        assert_eq!(m.encode().expect("an accepted message encodes"), data);
    }

    // A small frame limit, so oversize lengths are reached too.
    let options = FrameOptions::default()
        .with_max_frame(MIN_MAX_FRAME)
        .expect("the minimum is allowed");
    let (mut peer, server) = memory::pipe_with_capacity(data.len().saturating_add(1));
    peer.write_all(data).expect("the pipe holds the whole input");
    peer.shutdown().expect("memory pipes always shut down");
    let mut channel = Channel::new(server, options);
    while let Ok(m) = channel.recv() {
        let bytes = m.encode().expect("a received message encodes");
        assert_eq!(Message::decode(&bytes).as_ref(), Ok(&m));
    }
    assert!(!channel.is_open());
});
