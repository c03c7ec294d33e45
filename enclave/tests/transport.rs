//! The transport end to end inside one process: every protocol message
//! through a [`Channel`] over the in-memory and the unix-socket back ends,
//! hostile frames written raw by the peer (each refused with an error
//! report and the connection closed), and inputs streamed into an
//! [`InputReceiver`] through a channel. Only unix sockets and in-memory
//! pipes: no vsock socket is ever opened here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io::{Read, Write};
use std::time::Duration;

use kolm_enclave::inputs::{InputReceiver, ReceiveError};
use kolm_policy::Platform;
use kolm_transport::frame::{FrameOptions, read_frame, write_frame};
use kolm_transport::message::{
    ArtifactChunk, Cancel, CollateralFile, ErrorCode, ErrorMessage, FileName, Hello, HelloEvidence,
    InputChunk, InputDecl, JobSubmit, LogLine, LogStream, Progress,
};
use kolm_transport::{
    Address, AddressConnector, Channel, ChannelError, Connector, DecodeError, FrameError, Listener,
    Message, Stream, listen, memory,
};
use sha2::{Digest, Sha256};

fn name(s: &str) -> FileName {
    FileName::parse(s).unwrap()
}

/// One message of every kind, with the edges of their fields.
fn every_kind() -> Vec<Message> {
    vec![
        Message::Hello(Hello {
            versions: vec![1, 2, 7],
            platform: Platform::SevSnp,
            max_frame: 64 << 20,
            measurement: (0..48).collect(),
            identity_key: [0x5a; 32],
            evidence: vec![
                HelloEvidence {
                    data: vec![0x11; kolm_tee_layouts::snp::report::SIZE],
                    path: "evidence/snp-report.bin".into(),
                },
                HelloEvidence {
                    data: vec![0x30; 1300],
                    path: "evidence/snp-vcek.der".into(),
                },
            ],
        }),
        Message::Hello(Hello {
            versions: vec![1],
            platform: Platform::None,
            max_frame: u32::MAX,
            measurement: vec![],
            identity_key: [0; 32],
            evidence: vec![],
        }),
        Message::JobSubmit(JobSubmit {
            spec: b"[job]\nkind = \"demo\"\n".to_vec(),
            inputs: vec![
                InputDecl {
                    name: name("corpus.txt"),
                    size: 1 << 40,
                    sha256: [0xee; 32],
                },
                InputDecl {
                    name: name("empty"),
                    size: 0,
                    sha256: Sha256::digest(b"").into(),
                },
            ],
            policy: b"version = 1\n".to_vec(),
            collateral: vec![
                CollateralFile {
                    data: vec![0x30; 16 * 1024],
                    path: "evidence/snp-vcek.der".into(),
                },
                CollateralFile {
                    data: vec![b'{'; 1024 * 1024],
                    path: "evidence/tdx-collateral.json".into(),
                },
            ],
        }),
        Message::JobSubmit(JobSubmit {
            spec: vec![],
            inputs: vec![],
            policy: vec![],
            collateral: vec![],
        }),
        Message::InputChunk(InputChunk {
            data: vec![0xab; 100_000],
            name: name("corpus.txt"),
            offset: u64::MAX - 100_000,
        }),
        Message::Progress(Progress {
            done: 3,
            phase: "train-step".into(),
            total: 3,
        }),
        Message::Log(LogLine {
            line: "epoch 1: loss 2.31 — ünïcödé".into(),
            stream: LogStream::Stderr,
        }),
        Message::Log(LogLine {
            line: String::new(),
            stream: LogStream::Supervisor,
        }),
        Message::ArtifactChunk(ArtifactChunk {
            data: b"PK\x03\x04".to_vec(),
            name: name("demo-bigram-0.zip"),
            total: 4,
            offset: 0,
        }),
        Message::Cancel(Cancel {
            reason: "user pressed Ctrl-C".into(),
        }),
        Message::Error(ErrorMessage::new(
            ErrorCode::DigestMismatch,
            "input \"corpus.txt\" does not match",
        )),
        Message::Bye,
    ]
}

/// A back end's name, then a connected (client, server) pair.
type Pair = (&'static str, Box<dyn Stream>, Box<dyn Stream>);

/// A connected pair from each back end, through its listener and
/// connector.
fn connected_pairs(dir: &tempfile::TempDir) -> Vec<Pair> {
    let (mem_listener, mem_connector) = memory::listener();
    let mem_client = mem_connector.connect().unwrap();
    let mem_server = mem_listener.accept().unwrap();

    let address = Address::parse(&format!("unix:{}", dir.path().join("t.sock").display())).unwrap();
    let unix_listener = listen(&address).unwrap();
    let unix_client = AddressConnector::new(address).unwrap().connect().unwrap();
    let unix_server = unix_listener.accept().unwrap();
    vec![
        ("memory", mem_client, mem_server),
        ("unix", unix_client, unix_server),
    ]
}

fn options() -> FrameOptions {
    FrameOptions::default()
        .with_idle_timeout(Some(Duration::from_secs(20)))
        .unwrap()
}

#[test]
fn every_message_round_trips_over_each_back_end() {
    let dir = tempfile::tempdir().unwrap();
    for (backend, client, server) in connected_pairs(&dir) {
        let sent = every_kind();
        let to_send = sent.clone();
        let sender = std::thread::spawn(move || {
            let mut ch = Channel::new(client, options());
            for m in &to_send {
                ch.send(m).unwrap();
            }
            // The reply proves the other direction works too.
            ch.recv().unwrap()
        });
        let mut ch = Channel::new(server, options());
        let got: Vec<Message> = (0..sent.len()).map(|_| ch.recv().unwrap()).collect();
        assert_eq!(got, sent, "{backend}");
        ch.close().unwrap();
        assert_eq!(sender.join().unwrap(), Message::Bye, "{backend}");
        assert!(!ch.is_open());
        assert!(matches!(ch.recv(), Err(ChannelError::Closed)));
    }
}

#[test]
fn encoded_messages_are_plain_deterministic_cbor() {
    for m in every_kind() {
        let bytes = m.encode().unwrap();
        // An independent decoder reads them, and writes the same bytes back.
        let value: ciborium::Value = ciborium::from_reader(&bytes[..]).unwrap();
        let mut again = Vec::new();
        ciborium::into_writer(&value, &mut again).unwrap();
        assert_eq!(again, bytes, "{:?}", m.kind());
        assert_eq!(Message::decode(&bytes).unwrap(), m);
    }
}

#[test]
fn a_large_chunk_crosses_a_real_socket_in_partial_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (_, client, server) = connected_pairs(&dir).pop().unwrap();
    let chunk = Message::InputChunk(InputChunk {
        data: (0..8 << 20).map(|i: u32| (i % 253) as u8).collect(),
        name: name("big.bin"),
        offset: 0,
    });
    let expected = chunk.clone();
    let sender = std::thread::spawn(move || Channel::new(client, options()).send(&chunk).unwrap());
    assert_eq!(Channel::new(server, options()).recv().unwrap(), expected);
    sender.join().unwrap();
}

/// What the peer reads back after sending `raw`: the error report's code,
/// then end of stream.
fn report_after(
    raw: &[u8],
    backend_pair: (Box<dyn Stream>, Box<dyn Stream>),
) -> (ChannelError, Option<ErrorCode>) {
    let (mut peer, server) = backend_pair;
    peer.write_all(raw).unwrap();
    let mut ch = Channel::new(server, options());
    let err = ch.recv().unwrap_err();
    assert!(!ch.is_open(), "closed after {err}");
    assert!(matches!(ch.send(&Message::Bye), Err(ChannelError::Closed)));
    let opts = options();
    let code = match read_frame(&mut peer, &opts).unwrap() {
        Some(payload) => match Message::decode(&payload).unwrap() {
            Message::Error(e) => {
                assert!(!e.message.is_empty());
                Some(e.code)
            }
            other => panic!("expected an error report, got {other:?}"),
        },
        None => None,
    };
    // Then the connection is closed.
    assert!(read_frame(&mut peer, &opts).unwrap().is_none());
    (err, code)
}

fn framed(payload: &[u8]) -> Vec<u8> {
    let mut v = (payload.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(payload);
    v
}

#[test]
fn hostile_frames_are_reported_and_the_connection_closed() {
    let mut trailing = Message::Bye.encode().unwrap();
    trailing.push(0);
    let mut future = Message::Bye.encode().unwrap();
    future[1] = 0x02;
    let unknown_kind = {
        let mut v = vec![0x83, 0x01, 0x67];
        v.extend_from_slice(b"upgrade");
        v.push(0xa0);
        v
    };
    type Check = fn(&ChannelError) -> bool;
    let cases: [(&str, Vec<u8>, Check, ErrorCode); 6] = [
        (
            "oversize length",
            (64u32 << 20).saturating_add(1).to_be_bytes().to_vec(),
            |e| {
                matches!(
                    e,
                    ChannelError::Receive(FrameError::TooLarge {
                        len: 67_108_865,
                        max: 67_108_864
                    })
                )
            },
            ErrorCode::FrameTooLarge,
        ),
        (
            "garbage CBOR",
            framed(&[0xff, 0xfe, 0x00, 0x13]),
            |e| matches!(e, ChannelError::Decode(DecodeError::WrongType { .. })),
            ErrorCode::Malformed,
        ),
        (
            "trailing bytes",
            framed(&trailing),
            |e| {
                matches!(
                    e,
                    ChannelError::Decode(DecodeError::TrailingBytes { count: 1, .. })
                )
            },
            ErrorCode::Malformed,
        ),
        (
            "unknown version",
            framed(&future),
            |e| {
                matches!(
                    e,
                    ChannelError::Decode(DecodeError::UnknownVersion { version: 2 })
                )
            },
            ErrorCode::UnsupportedVersion,
        ),
        (
            "unknown kind",
            framed(&unknown_kind),
            |e| matches!(e, ChannelError::Decode(DecodeError::UnknownKind { kind }) if kind == "upgrade"),
            ErrorCode::UnknownKind,
        ),
        (
            "empty frame",
            framed(&[]),
            |e| matches!(e, ChannelError::Decode(DecodeError::Truncated { .. })),
            ErrorCode::Malformed,
        ),
    ];
    for (what, raw, check, code) in cases {
        let dir = tempfile::tempdir().unwrap();
        for (backend, client, server) in connected_pairs(&dir) {
            let (err, got) = report_after(&raw, (client, server));
            assert!(check(&err), "{what} over {backend}: {err:?}");
            assert_eq!(got, Some(code), "{what} over {backend}");
        }
    }
}

#[test]
fn a_truncated_frame_closes_the_connection_without_a_report() {
    let dir = tempfile::tempdir().unwrap();
    for (backend, mut client, server) in connected_pairs(&dir) {
        let full = framed(&Message::Bye.encode().unwrap());
        client.write_all(&full[..full.len() - 2]).unwrap();
        client.shutdown().unwrap();
        let mut ch = Channel::new(server, options());
        let err = ch.recv().unwrap_err();
        assert!(
            matches!(
                err,
                ChannelError::Receive(FrameError::TruncatedPayload { len: 7, got: 5 })
            ),
            "{backend}: {err:?}"
        );
        assert!(!ch.is_open());
    }
}

#[test]
fn a_silent_peer_times_out_and_is_told_so() {
    let dir = tempfile::tempdir().unwrap();
    for (backend, mut client, server) in connected_pairs(&dir) {
        let quick = FrameOptions::default()
            .with_idle_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let mut ch = Channel::new(server, quick);
        let err = ch.recv().unwrap_err();
        assert!(
            matches!(err, ChannelError::Receive(FrameError::IdleTimeout { .. })),
            "{backend}: {err:?}"
        );
        let payload = read_frame(&mut client, &options()).unwrap().unwrap();
        assert!(matches!(
            Message::decode(&payload).unwrap(),
            Message::Error(ErrorMessage {
                code: ErrorCode::Timeout,
                ..
            })
        ));
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
    }
}

/// The host side of an upload: job-submit, then each input in chunks.
fn upload(client: Box<dyn Stream>, inputs: Vec<(&'static str, Vec<u8>, Vec<u8>)>) -> Message {
    let mut ch = Channel::new(client, options());
    let decls = inputs
        .iter()
        .map(|(n, declared, _)| InputDecl {
            name: name(n),
            size: declared.len() as u64,
            sha256: Sha256::digest(declared).into(),
        })
        .collect();
    ch.send(&Message::JobSubmit(JobSubmit {
        spec: b"spec".to_vec(),
        inputs: decls,
        policy: b"policy".to_vec(),
        collateral: vec![],
    }))
    .unwrap();
    for (n, _, sent) in &inputs {
        for (i, piece) in sent.chunks(1000).enumerate() {
            let chunk = InputChunk {
                data: piece.to_vec(),
                name: name(n),
                offset: i as u64 * 1000,
            };
            if ch.send(&Message::InputChunk(chunk)).is_err() {
                break;
            }
        }
    }
    ch.recv().unwrap()
}

/// The enclave side: receive the declared inputs into `dir`.
fn receive(
    server: Box<dyn Stream>,
    dir: &std::path::Path,
    limit: u64,
) -> Result<Vec<String>, ReceiveError> {
    let mut ch = Channel::new(server, options());
    let Message::JobSubmit(job) = ch.recv().unwrap() else {
        panic!("expected job-submit")
    };
    let outcome = (|| {
        let mut rx = InputReceiver::new(dir, &job.inputs, limit)?;
        let declared: u64 = job.inputs.iter().map(|i| i.size).sum();
        let mut got = 0u64;
        while got < declared {
            match ch.recv().unwrap() {
                Message::InputChunk(c) => {
                    got += c.data.len() as u64;
                    rx.accept(&c)?;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        rx.finish()
    })();
    match outcome {
        Ok(received) => {
            ch.close().unwrap();
            Ok(received.paths.keys().map(|n| n.to_string()).collect())
        }
        Err(e) => {
            ch.fail(e.code(), &e.to_string());
            Err(e)
        }
    }
}

#[test]
fn inputs_stream_through_a_channel_and_a_mismatch_is_reported_by_name() {
    for tampered in [false, true] {
        let sock = tempfile::tempdir().unwrap();
        let inputs_dir = tempfile::tempdir().unwrap();
        let (_, client, server) = connected_pairs(&sock).pop().unwrap();
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        let mut sent = data.clone();
        if tampered {
            sent[4321] ^= 1;
        }
        let host = std::thread::spawn(move || {
            upload(
                client,
                vec![
                    ("a.bin", b"small".to_vec(), b"small".to_vec()),
                    ("weights.bin", data, sent),
                ],
            )
        });
        let result = receive(server, inputs_dir.path(), 1 << 20);
        let reply = host.join().unwrap();
        let left: Vec<_> = std::fs::read_dir(inputs_dir.path()).unwrap().collect();
        if tampered {
            let err = result.unwrap_err();
            assert!(
                matches!(&err, ReceiveError::DigestMismatch { name, .. } if name == "weights.bin"),
                "{err:?}"
            );
            let Message::Error(report) = reply else {
                panic!("{reply:?}")
            };
            assert_eq!(report.code, ErrorCode::DigestMismatch);
            assert!(
                report.message.contains("\"weights.bin\""),
                "{}",
                report.message
            );
            assert!(left.is_empty(), "nothing half-written: {left:?}");
        } else {
            assert_eq!(result.unwrap(), ["a.bin", "weights.bin"]);
            assert_eq!(reply, Message::Bye);
            assert_eq!(left.len(), 2);
        }
    }
}

#[test]
fn an_oversize_bundle_is_refused_before_any_chunk_is_stored() {
    let sock = tempfile::tempdir().unwrap();
    let inputs_dir = tempfile::tempdir().unwrap();
    let (_, client, server) = connected_pairs(&sock).pop().unwrap();
    let host =
        std::thread::spawn(move || upload(client, vec![("big.bin", vec![1; 3000], vec![1; 3000])]));
    let err = receive(server, inputs_dir.path(), 2999).unwrap_err();
    assert!(
        matches!(
            err,
            ReceiveError::BundleTooLarge {
                declared: 3000,
                limit: 2999
            }
        ),
        "{err:?}"
    );
    let Message::Error(report) = host.join().unwrap() else {
        panic!()
    };
    assert_eq!(report.code, ErrorCode::BundleTooLarge);
    assert_eq!(std::fs::read_dir(inputs_dir.path()).unwrap().count(), 0);
}

#[test]
fn a_raw_frame_written_by_hand_is_read_as_the_encoder_wrote_it() {
    // The wire form of `bye` spelled out: length 7, then [1, "bye", {}].
    let (mut peer, server) = memory::pipe();
    peer.write_all(&[0, 0, 0, 7, 0x83, 0x01, 0x63, b'b', b'y', b'e', 0xa0])
        .unwrap();
    assert_eq!(
        Channel::new(server, options()).recv().unwrap(),
        Message::Bye
    );
    let (mut a, mut b) = memory::pipe();
    write_frame(&mut a, &Message::Bye.encode().unwrap(), &options()).unwrap();
    let mut got = [0u8; 11];
    b.read_exact(&mut got).unwrap();
    assert_eq!(got, [0, 0, 0, 7, 0x83, 0x01, 0x63, b'b', b'y', b'e', 0xa0]);
}

#[test]
fn after_the_peer_refuses_and_closes_a_failed_send_still_lets_its_report_be_read() {
    let dir = tempfile::tempdir().unwrap();
    for (backend, client, server) in connected_pairs(&dir) {
        let mut enclave = Channel::new(server, options());
        enclave.fail(ErrorCode::Busy, "another job is running");
        assert!(!enclave.is_open());
        let mut host = Channel::new(client, options());
        let chunk = Message::InputChunk(InputChunk {
            data: vec![0; 4096],
            name: name("x"),
            offset: 0,
        });
        // The peer is gone: some send fails (the first may still be buffered).
        let err = (0..1000)
            .find_map(|_| host.send(&chunk).err())
            .expect("a send to a closed peer fails");
        assert!(
            matches!(err, ChannelError::Send(FrameError::Io(_))),
            "{backend}: {err:?}"
        );
        assert!(!host.is_open());
        assert!(matches!(
            host.send(&Message::Bye),
            Err(ChannelError::Closed)
        ));
        let Message::Error(report) = host.recv().unwrap() else {
            panic!("{backend}")
        };
        assert_eq!(report.code, ErrorCode::Busy);
        assert_eq!(report.message, "another job is running");
        assert!(
            matches!(host.recv(), Err(ChannelError::PeerClosed)),
            "{backend}"
        );
        assert!(
            matches!(host.recv(), Err(ChannelError::Closed)),
            "{backend}"
        );
    }
}

/// `recv_within`: nothing yet is `None` and leaves the channel open (the
/// service polls it while a job runs); a message that then arrives is
/// read whole, on each back end.
#[test]
fn waiting_a_while_for_a_message_consumes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for (backend, client, server) in connected_pairs(&dir) {
        let mut ch = Channel::new(server, options());
        for _ in 0..3 {
            assert!(
                ch.recv_within(Duration::from_millis(20)).unwrap().is_none(),
                "{backend}"
            );
            assert!(ch.is_open(), "{backend}");
        }
        let mut peer = Channel::new(client, options());
        peer.send(&Message::Bye).unwrap();
        assert_eq!(
            ch.recv_within(Duration::from_secs(5)).unwrap(),
            Some(Message::Bye),
            "{backend}"
        );
        drop(peer);
        assert!(matches!(
            ch.recv_within(Duration::from_secs(5)),
            Err(ChannelError::PeerClosed)
        ));
    }
}
