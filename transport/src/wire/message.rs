//! The messages of the sealed-run protocol, version 1, and their one
//! encoder and one decoder.
//!
//! Each frame carries one message: a CBOR array `[version, kind, body]`,
//! `body` a map whose keys are the fields below in deterministic order
//! (`docs/sealed-run.md` lists them). Decoding is strict: an unknown
//! version or kind, a missing, unknown, repeated or misplaced field, a
//! wrong type, an over-long string, a value out of range, a
//! non-deterministic encoding or a byte after the message is an error. The
//! same rules ([`Message::encode`] refuses what [`Message::decode`] would),
//! so every accepted message re-encodes to the bytes it was read from.
//!
//! This module is the envelope and the dispatch by [`Kind`]; each body has
//! its own module (`hello`, `job_submit`, `input_chunk`, `progress`,
//! `train_progress`, `log`, `artifact_chunk`, `cancel`, `error`, `bye`)
//! with its codec and its rules side by side, re-exported here.

use std::fmt;

use super::bye::Bye;
use super::cbor::{Decoder, Encoder};
use super::codec::{Body, Codec, MAX_NAME};
use super::rules::Rule;

pub use super::artifact_chunk::ArtifactChunk;
pub use super::cancel::Cancel;
pub use super::codec::{DecodeError, EncodeError};
pub use super::error::{ErrorCode, ErrorMessage, MAX_REASON};
pub use super::file_name::{FileName, FileNameError, MAX_FILE_NAME};
pub use super::hello::{
    Hello, HelloEvidence, IDENTITY_KEY_LEN, MAX_HELLO_EVIDENCE, MAX_HELLO_EVIDENCE_FILES,
    MAX_MEASUREMENT, MAX_VERSIONS,
};
pub use super::input_chunk::InputChunk;
pub use super::job_submit::{
    CollateralFile, InputDecl, JobSubmit, MAX_DOCUMENT, MAX_INPUTS, MAX_SUBMIT_COLLATERAL_FILE,
    MAX_SUBMIT_COLLATERAL_FILES, Sha256Digest, collateral_slot,
};
pub use super::log::{LogLine, LogStream, MAX_LOG_LINE};
pub use super::progress::{MAX_PHASE, Progress};
pub use super::rules::Invalid;
pub use super::train_progress::{MAX_LOSS_MICROS, TrainProgress};

/// The smallest maximum frame size a peer may announce or configure: every
/// control message (hello, error, ...) fits in it.
pub const MIN_MAX_FRAME: u32 = 64 * 1024;
/// The protocol version this build writes.
pub const PROTOCOL_VERSION: u32 = 1;
/// The versions this build reads.
pub const SUPPORTED_VERSIONS: [u32; 1] = [PROTOCOL_VERSION];

/// One protocol message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Enclave to host, first on every connection.
    Hello(Hello),
    /// Host to enclave: the job and the inputs that will follow.
    JobSubmit(JobSubmit),
    /// Host to enclave: part of a declared input.
    InputChunk(InputChunk),
    /// Enclave to host: how far the job is.
    Progress(Progress),
    /// Enclave to host: how far training is (fine-tune jobs).
    TrainProgress(TrainProgress),
    /// Enclave to host: one line of public log output.
    Log(LogLine),
    /// Enclave to host: part of the sealed artifact.
    ArtifactChunk(ArtifactChunk),
    /// Host to enclave: stop the job.
    Cancel(Cancel),
    /// Either way: what went wrong; the sender closes the connection.
    Error(ErrorMessage),
    /// Either way: the sender is done and closes the connection.
    Bye,
}

/// The message kinds, as spelled on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Hello,
    JobSubmit,
    InputChunk,
    Progress,
    TrainProgress,
    Log,
    ArtifactChunk,
    Cancel,
    Error,
    Bye,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 10] = [
        Kind::Hello,
        Kind::JobSubmit,
        Kind::InputChunk,
        Kind::Progress,
        Kind::TrainProgress,
        Kind::Log,
        Kind::ArtifactChunk,
        Kind::Cancel,
        Kind::Error,
        Kind::Bye,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Hello => "hello",
            Kind::JobSubmit => "job-submit",
            Kind::InputChunk => "input-chunk",
            Kind::Progress => "progress",
            Kind::TrainProgress => "train-progress",
            Kind::Log => "log",
            Kind::ArtifactChunk => "artifact-chunk",
            Kind::Cancel => "cancel",
            Kind::Error => "error",
            Kind::Bye => "bye",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Message {
    /// The message's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Message::Hello(_) => Kind::Hello,
            Message::JobSubmit(_) => Kind::JobSubmit,
            Message::InputChunk(_) => Kind::InputChunk,
            Message::Progress(_) => Kind::Progress,
            Message::TrainProgress(_) => Kind::TrainProgress,
            Message::Log(_) => Kind::Log,
            Message::ArtifactChunk(_) => Kind::ArtifactChunk,
            Message::Cancel(_) => Kind::Cancel,
            Message::Error(_) => Kind::Error,
            Message::Bye => Kind::Bye,
        }
    }

    /// The rules a value must follow beyond its Rust type ([`Body::check`]
    /// of its body); both [`Message::encode`] and [`Message::decode`] apply
    /// them.
    fn check(&self) -> Rule {
        match self {
            Message::Hello(h) => h.check(),
            Message::JobSubmit(j) => j.check(),
            Message::InputChunk(c) => c.check(),
            Message::Progress(p) => p.check(),
            Message::TrainProgress(t) => t.check(),
            Message::Log(l) => l.check(),
            Message::ArtifactChunk(a) => a.check(),
            Message::Cancel(c) => c.check(),
            Message::Error(e) => e.check(),
            Message::Bye => Bye.check(),
        }
    }

    /// The message's bytes (one frame's payload).
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        self.check()
            .map_err(|(field, problem)| EncodeError::Invalid { field, problem })?;
        let mut e = Encoder::default();
        e.array(3);
        e.uint(PROTOCOL_VERSION.into());
        e.text(self.kind().as_str());
        match self {
            Message::Hello(h) => h.encode(&mut e),
            Message::JobSubmit(j) => j.encode(&mut e),
            Message::InputChunk(c) => c.encode(&mut e),
            Message::Progress(p) => p.encode(&mut e),
            Message::TrainProgress(t) => t.encode(&mut e),
            Message::Log(l) => l.encode(&mut e),
            Message::ArtifactChunk(a) => a.encode(&mut e),
            Message::Cancel(c) => c.encode(&mut e),
            Message::Error(m) => m.encode(&mut e),
            Message::Bye => Bye.encode(&mut e),
        }
        Ok(e.into_bytes())
    }

    /// Reads one message from a frame's payload: all of it, strictly. The
    /// envelope, then the body its kind names, then nothing more; the
    /// rules last.
    pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
        let mut d = Decoder::new(bytes);
        let kind = read_envelope(&mut d)?;
        let message = read_body(&mut d, kind)?;
        d.finish()?;
        message
            .check()
            .map_err(|(field, problem)| DecodeError::Invalid { field, problem })?;
        Ok(message)
    }
}

/// The envelope up to the body: `[version, kind, ...`, the version checked
/// before the array's length (a later version may shape it otherwise).
fn read_envelope(d: &mut Decoder<'_>) -> Result<Kind, DecodeError> {
    let len = d.array_any("message")?;
    if len == 0 {
        return Err(DecodeError::EnvelopeLength { len });
    }
    let version = d.uint("version")?;
    if !SUPPORTED_VERSIONS.iter().any(|&v| u64::from(v) == version) {
        return Err(DecodeError::UnknownVersion { version });
    }
    if len != 3 {
        return Err(DecodeError::EnvelopeLength { len });
    }
    let kind = d.text("kind", MAX_NAME)?;
    Kind::parse(kind).ok_or_else(|| DecodeError::UnknownKind {
        kind: kind.to_owned(),
    })
}

/// The body of a message of `kind`, by that kind's [`Codec`].
fn read_body(d: &mut Decoder<'_>, kind: Kind) -> Result<Message, DecodeError> {
    Ok(match kind {
        Kind::Hello => Message::Hello(Hello::read(d)?),
        Kind::JobSubmit => Message::JobSubmit(JobSubmit::read(d)?),
        Kind::InputChunk => Message::InputChunk(InputChunk::read(d)?),
        Kind::Progress => Message::Progress(Progress::read(d)?),
        Kind::TrainProgress => Message::TrainProgress(TrainProgress::read(d)?),
        Kind::Log => Message::Log(LogLine::read(d)?),
        Kind::ArtifactChunk => Message::ArtifactChunk(ArtifactChunk::read(d)?),
        Kind::Cancel => Message::Cancel(Cancel::read(d)?),
        Kind::Error => Message::Error(ErrorMessage::read(d)?),
        Kind::Bye => {
            Bye::read(d)?;
            Message::Bye
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use ciborium::Value;

    use super::*;
    use crate::wire::cbor::in_deterministic_order;
    use crate::wire::job_submit::INPUT_DECL;
    use crate::wire::test_support::*;

    // The field lists, under the names the tests below use.
    const HELLO: &[&str] = <Hello as Body>::FIELDS;
    const FILE_ENTRY: &[&str] = crate::wire::files::FIELDS;
    const JOB_SUBMIT: &[&str] = <JobSubmit as Body>::FIELDS;
    const INPUT_CHUNK: &[&str] = <InputChunk as Body>::FIELDS;
    const PROGRESS: &[&str] = <Progress as Body>::FIELDS;
    const TRAIN_PROGRESS: &[&str] = <TrainProgress as Body>::FIELDS;
    const LOG: &[&str] = <LogLine as Body>::FIELDS;
    const ARTIFACT_CHUNK: &[&str] = <ArtifactChunk as Body>::FIELDS;
    const CANCEL: &[&str] = <Cancel as Body>::FIELDS;
    const ERROR: &[&str] = <ErrorMessage as Body>::FIELDS;
    const BYE: &[&str] = <Bye as Body>::FIELDS;

    #[test]
    fn field_lists_are_in_deterministic_key_order() {
        for fields in [
            HELLO,
            FILE_ENTRY,
            JOB_SUBMIT,
            INPUT_DECL,
            INPUT_CHUNK,
            PROGRESS,
            TRAIN_PROGRESS,
            LOG,
            ARTIFACT_CHUNK,
            CANCEL,
            ERROR,
            BYE,
        ] {
            assert!(in_deterministic_order(fields), "{fields:?}");
        }
    }

    #[test]
    fn the_envelope_is_version_kind_body_and_ciborium_reads_it() {
        let bytes = Message::Bye.encode().unwrap();
        assert_eq!(bytes, [0x83, 0x01, 0x63, b'b', b'y', b'e', 0xa0]);
        let v: Value = ciborium::from_reader(&hello().encode().unwrap()[..]).unwrap();
        let Value::Array(items) = v else { panic!() };
        assert_eq!(items[0], Value::Integer(1.into()));
        assert_eq!(items[1], text("hello"));
        let keys: Vec<Value> = match &items[2] {
            Value::Map(m) => m.iter().map(|(k, _)| k.clone()).collect(),
            _ => panic!(),
        };
        assert_eq!(keys, HELLO.iter().map(|k| text(k)).collect::<Vec<_>>());
    }

    #[test]
    fn version_is_checked_first_then_the_envelope_then_the_kind() {
        for (bytes, want) in [
            (
                mutated(&hello(), |i| i[0] = Value::Integer(2.into())),
                DecodeError::UnknownVersion { version: 2 },
            ),
            // A future version's envelope of another shape: still "unknown version".
            (vec![0x81, 0x07], DecodeError::UnknownVersion { version: 7 }),
            (vec![0x80], DecodeError::EnvelopeLength { len: 0 }),
            (
                mutated(&Message::Bye, |i| i.push(Value::Null)),
                DecodeError::EnvelopeLength { len: 4 },
            ),
            (
                mutated(&Message::Bye, |i| i[1] = text("launch-missiles")),
                DecodeError::UnknownKind {
                    kind: "launch-missiles".into(),
                },
            ),
        ] {
            assert_eq!(Message::decode(&bytes), Err(want));
        }
        let err =
            Message::decode(&mutated(&hello(), |i| i[0] = Value::Integer(9.into()))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported protocol version 9 (this build speaks [1])"
        );
    }

    #[test]
    fn fields_must_be_exactly_the_declared_ones_in_order() {
        let unknown = mutated(&hello(), |i| {
            body(i).push((text("debug"), Value::Integer(1.into())))
        });
        assert!(matches!(
            Message::decode(&unknown),
            Err(DecodeError::UnknownField { message: "hello", ref field, .. }) if field == "debug"
        ));
        let missing = mutated(&hello(), |i| {
            body(i).pop();
        });
        assert_eq!(
            Message::decode(&missing),
            Err(DecodeError::MissingField {
                message: "hello",
                field: "identity_key"
            })
        );
        let swapped = mutated(&hello(), |i| body(i).swap(1, 2));
        assert!(matches!(
            Message::decode(&swapped),
            Err(DecodeError::FieldOrder { message: "hello", ref field, .. }) if field == "versions"
        ));
        let repeated = mutated(&Message::Cancel(Cancel { reason: "x".into() }), |i| {
            let again = body(i)[0].clone();
            body(i).push(again);
        });
        assert!(matches!(
            Message::decode(&repeated),
            Err(DecodeError::FieldOrder {
                message: "cancel",
                ..
            })
        ));
        let inner = mutated(&job(), |i| {
            let Value::Array(inputs) = &mut body(i)[1].1 else {
                panic!()
            };
            let Value::Map(first) = &mut inputs[0] else {
                panic!()
            };
            first.push((text("mode"), Value::Integer(0o755.into())));
        });
        assert!(matches!(
            Message::decode(&inner),
            Err(DecodeError::UnknownField {
                message: "job-submit.inputs",
                ..
            })
        ));
    }

    #[test]
    fn wrong_types_trailing_bytes_and_non_deterministic_forms_are_refused() {
        let wrong = mutated(&hello(), |i| body(i)[3].1 = text("65536"));
        assert!(matches!(
            Message::decode(&wrong),
            Err(DecodeError::WrongType {
                what: "hello.max_frame",
                expected: "unsigned integer",
                found: "text string",
                ..
            })
        ));
        let negative = mutated(&job(), |i| {
            let Value::Array(inputs) = &mut body(i)[1].1 else {
                panic!()
            };
            let Value::Map(first) = &mut inputs[0] else {
                panic!()
            };
            first[1].1 = Value::Integer((-5).into());
        });
        assert!(matches!(
            Message::decode(&negative),
            Err(DecodeError::WrongType {
                found: "negative integer",
                ..
            })
        ));
        let mut trailing = Message::Bye.encode().unwrap();
        trailing.push(0);
        assert_eq!(
            Message::decode(&trailing),
            Err(DecodeError::TrailingBytes {
                offset: 7,
                count: 1
            })
        );
        // The version as a two-byte integer: the same value, not the same bytes.
        let long_version = [0x83, 0x18, 0x01, 0x63, b'b', b'y', b'e', 0xa0];
        assert!(matches!(
            Message::decode(&long_version),
            Err(DecodeError::NotShortest {
                what: "version",
                offset: 1
            })
        ));
        // An indefinite-length body map.
        let indefinite = [0x83, 0x01, 0x63, b'b', b'y', b'e', 0xbf, 0xff];
        assert!(matches!(
            Message::decode(&indefinite),
            Err(DecodeError::Indefinite { what: "bye", .. })
        ));
        // A tagged envelope.
        assert!(matches!(
            Message::decode(&[0xd8, 0x18, 0x80]),
            Err(DecodeError::WrongType { found: "tag", .. })
        ));
        assert!(matches!(
            Message::decode(&[]),
            Err(DecodeError::Truncated {
                what: "message",
                offset: 0,
                need: 1,
                have: 0
            })
        ));
    }

    #[test]
    fn out_of_range_values_are_refused_naming_the_field() {
        let cases: Vec<(Vec<u8>, &str, &str)> = vec![
            (
                mutated(&hello(), |i| {
                    body(i)[2].1 =
                        Value::Array(vec![Value::Integer(2.into()), Value::Integer(1.into())])
                }),
                "hello.versions",
                "ascending",
            ),
            (
                mutated(&hello(), |i| body(i)[1].1 = text("sgx")),
                "hello.platform",
                "unknown platform \"sgx\"",
            ),
            (
                mutated(&hello(), |i| body(i)[5].1 = Value::Bytes(vec![0; 31])),
                "hello.identity_key",
                "31 bytes, must be exactly 32",
            ),
            (
                mutated(&hello(), |i| body(i)[3].1 = Value::Integer(4096.into())),
                "hello.max_frame",
                "below the smallest frame limit",
            ),
            (
                mutated(&job(), |i| {
                    let Value::Array(inputs) = &mut body(i)[1].1 else {
                        panic!()
                    };
                    let Value::Map(first) = &mut inputs[0] else {
                        panic!()
                    };
                    first[0].1 = text("../../etc/passwd");
                }),
                "job-submit.inputs.name",
                "only plain file names",
            ),
            (
                mutated(&job(), |i| {
                    let Value::Array(inputs) = &mut body(i)[1].1 else {
                        panic!()
                    };
                    let Value::Map(second) = &mut inputs[1] else {
                        panic!()
                    };
                    second[0].1 = text("corpus.txt");
                }),
                "job-submit.inputs",
                "\"corpus.txt\" is declared twice",
            ),
            (
                mutated(&job(), |i| {
                    let Value::Array(inputs) = &mut body(i)[1].1 else {
                        panic!()
                    };
                    for input in inputs.iter_mut() {
                        let Value::Map(m) = input else { panic!() };
                        m[1].1 = Value::Integer(u64::MAX.into());
                    }
                }),
                "job-submit.inputs",
                "more than 2^64 - 1",
            ),
            (
                mutated(
                    &Message::Progress(Progress {
                        done: 1,
                        phase: "run".into(),
                        total: 2,
                    }),
                    |i| body(i)[0].1 = Value::Integer(3.into()),
                ),
                "progress.done",
                "done 3 is more than total 2",
            ),
            (
                mutated(&train(), |i| body(i)[0].1 = Value::Integer(0.into())),
                "train-progress.step",
                "step 0 is not 1 to steps (200)",
            ),
            (
                mutated(&train(), |i| body(i)[0].1 = Value::Integer(201.into())),
                "train-progress.step",
                "step 201 is not 1 to steps (200)",
            ),
            (
                mutated(&train(), |i| {
                    body(i)[3].1 = Value::Integer((MAX_LOSS_MICROS + 1).into())
                }),
                "train-progress.loss_micros",
                "over the largest loss",
            ),
            (
                mutated(
                    &Message::Progress(Progress {
                        done: 1,
                        phase: "run".into(),
                        total: 2,
                    }),
                    |i| body(i)[1].1 = text("Run!"),
                ),
                "progress.phase",
                "a-z, 0-9 and -",
            ),
            (
                mutated(
                    &Message::ArtifactChunk(ArtifactChunk {
                        data: vec![1, 2],
                        name: name("a.zip"),
                        total: 4,
                        offset: 2,
                    }),
                    |i| body(i)[3].1 = Value::Integer(3.into()),
                ),
                "artifact-chunk.offset",
                "passes the end (4)",
            ),
            (
                mutated(
                    &Message::InputChunk(InputChunk {
                        data: vec![1],
                        name: name("a"),
                        offset: 0,
                    }),
                    |i| body(i)[2].1 = Value::Integer(u64::MAX.into()),
                ),
                "input-chunk.offset",
                "overflows 64 bits",
            ),
            (
                mutated(
                    &Message::Error(ErrorMessage::new(ErrorCode::Busy, "busy")),
                    |i| body(i)[0].1 = text("teapot"),
                ),
                "error.code",
                "unknown error code \"teapot\"",
            ),
            (
                mutated(
                    &Message::Log(LogLine {
                        line: "x".into(),
                        stream: LogStream::Stdout,
                    }),
                    |i| body(i)[1].1 = text("stdin"),
                ),
                "log.stream",
                "unknown log stream \"stdin\"",
            ),
        ];
        for (bytes, field, says) in cases {
            let err = Message::decode(&bytes).unwrap_err();
            assert!(
                matches!(&err, DecodeError::Invalid { field: f, .. } if *f == field),
                "{field}: {err:?}"
            );
            assert!(err.to_string().contains(says), "{field}: {err}");
        }
    }

    #[test]
    fn the_encoder_refuses_what_the_decoder_would() {
        let mut h = hello();
        if let Message::Hello(h) = &mut h {
            h.versions = vec![];
        }
        assert!(matches!(
            h.encode(),
            Err(EncodeError::Invalid {
                field: "hello.versions",
                problem: Invalid::Versions
            })
        ));
        let p = Message::Progress(Progress {
            done: 3,
            phase: "x".into(),
            total: 2,
        });
        assert!(matches!(
            p.encode(),
            Err(EncodeError::Invalid {
                field: "progress.done",
                ..
            })
        ));
        let l = Message::Log(LogLine {
            line: "x".repeat(MAX_LOG_LINE + 1),
            stream: LogStream::Stderr,
        });
        assert!(matches!(
            l.encode(),
            Err(EncodeError::Invalid {
                field: "log.line",
                problem: Invalid::TooLong { .. }
            })
        ));
    }
}
