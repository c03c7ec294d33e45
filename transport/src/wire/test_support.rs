//! What the unit tests of the message modules share: sample messages, and
//! [`mutated`], which makes hostile bytes by editing a valid message
//! through ciborium's generic value.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use ciborium::Value;
use kolm_policy::Platform;

use super::message::*;

pub(crate) fn name(s: &str) -> FileName {
    FileName::parse(s).unwrap()
}

pub(crate) fn hello() -> Message {
    Message::Hello(Hello {
        versions: vec![1],
        platform: Platform::Simulated,
        max_frame: MIN_MAX_FRAME,
        measurement: vec![0xaa; 48],
        identity_key: [7; 32],
        evidence: vec![HelloEvidence {
            data: vec![0x84; 100],
            path: kolm_format::evidence::SIM_NITRO_DOC_PATH.into(),
        }],
    })
}

pub(crate) fn train() -> Message {
    Message::TrainProgress(TrainProgress {
        step: 12,
        eta_s: 94,
        steps: 200,
        loss_micros: 3_214_500,
        tokens_per_s: 367_000,
    })
}

pub(crate) fn job() -> Message {
    Message::JobSubmit(JobSubmit {
        spec: b"[job]\nname = \"demo\"\n".to_vec(),
        inputs: vec![
            InputDecl {
                name: name("corpus.txt"),
                size: 5,
                sha256: [1; 32],
            },
            InputDecl {
                name: name("weights.bin"),
                size: 0,
                sha256: [2; 32],
            },
        ],
        policy: b"version = 1\n".to_vec(),
        collateral: vec![CollateralFile {
            data: b"{\"tcb_info\": \"...\"}".to_vec(),
            path: "evidence/tdx-collateral.json".into(),
        }],
    })
}

/// `message` through ciborium's generic value, changed by `f`, back to
/// bytes: how the hostile cases of the tests are made.
pub(crate) fn mutated(message: &Message, f: impl FnOnce(&mut Vec<Value>)) -> Vec<u8> {
    let mut v: Value = ciborium::from_reader(&message.encode().unwrap()[..]).unwrap();
    let Value::Array(items) = &mut v else {
        panic!("not an array")
    };
    f(items);
    let mut out = Vec::new();
    ciborium::into_writer(&v, &mut out).unwrap();
    out
}

pub(crate) fn body(items: &mut [Value]) -> &mut Vec<(Value, Value)> {
    match &mut items[2] {
        Value::Map(m) => m,
        other => panic!("body is {other:?}"),
    }
}

pub(crate) fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

/// `{data, path}` file entries as the wire carries them (hello
/// evidence, job-submit collateral), whatever the rules say.
pub(crate) fn file_entries<'a>(files: impl Iterator<Item = (&'a [u8], &'a str)>) -> Value {
    Value::Array(
        files
            .map(|(data, path)| {
                Value::Map(vec![
                    (text("data"), Value::Bytes(data.to_vec())),
                    (text("path"), text(path)),
                ])
            })
            .collect(),
    )
}
