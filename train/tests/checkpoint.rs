//! Training checkpoints (`kolm_train::checkpoint`): round trip, one byte
//! form, every refusal of the strict reader with the error naming the check,
//! atomic writes that survive a crash, retention.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::num::NonZeroUsize;
use std::path::Path;

use kolm_format::hexbytes::{HexBytes, Sha256Digest};
use kolm_format::jcs;
use kolm_train::checkpoint::{
    self, CHECKPOINT_SCHEMA_V1, Checkpoint, CheckpointError, DataLoaderPosition, OptimizerState,
    STATE_FILE, StateFile, TENSORS_FILE, Tensor, TrainState, read_tensors,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const CAP: u64 = 1 << 20;
const SPEC: Sha256Digest = HexBytes([0x11; 32]);
const MODEL: Sha256Digest = HexBytes([0x22; 32]);

fn state(step: u64) -> TrainState {
    TrainState {
        step,
        total_steps: 100,
        job_spec_sha256: SPEC,
        base_model_sha256: MODEL,
        rng_state: (0u8..32).collect(),
        data_loader: DataLoaderPosition {
            epoch: 1,
            index: 7,
            // All 64 bits: more than a JSON number holds exactly.
            permutation_seed: 0xfedc_ba98_7654_3210,
        },
        optimizer: OptimizerState { step },
    }
}

fn tensors() -> Vec<Tensor> {
    // Values whose bits must come back exactly: a NaN with a payload,
    // negative zero, a subnormal, infinity.
    let odd = vec![
        f32::from_bits(0x7fc0_1234),
        -0.0,
        f32::from_bits(1),
        f32::INFINITY,
        1.5,
        -2.25,
    ];
    vec![
        Tensor::new("param", "embed", vec![2, 3], odd.clone()).unwrap(),
        Tensor::new("param", "layers.0.q", vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap(),
        Tensor::new("adam_m", "embed", vec![2, 3], vec![0.5; 6]).unwrap(),
        Tensor::new("adam_v", "embed", vec![2, 3], vec![0.25; 6]).unwrap(),
        Tensor::new("lora_a", "layers.0.q", vec![2, 1], vec![-1.0, 1.0]).unwrap(),
        Tensor::new("lora_b", "layers.0.q", vec![1, 2], vec![0.0, 0.0]).unwrap(),
        Tensor::new("param", "norm", vec![], vec![3.0]).unwrap(),
    ]
}

fn ckpt(step: u64) -> Checkpoint {
    Checkpoint::new(state(step), tensors()).unwrap()
}

fn bits(c: &Checkpoint) -> Vec<(String, Vec<usize>, Vec<u32>)> {
    c.tensors()
        .iter()
        .map(|t| {
            (
                t.full_name().to_owned(),
                t.shape().to_vec(),
                t.data().iter().map(|v| v.to_bits()).collect(),
            )
        })
        .collect()
}

fn sha256(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// `state_json` with `edit` applied, re-canonicalised (so only the edit is
/// wrong).
fn edit_state(state_json: &[u8], edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(state_json).unwrap();
    edit(&mut v);
    jcs::to_canonical_vec(&v).unwrap()
}

/// `state_json` restated for `tensors` (size and digest), so that the check
/// under test is the one that fails.
fn restate(state_json: &[u8], tensors: &[u8]) -> Vec<u8> {
    edit_state(state_json, |v| {
        v["tensors_bytes"] = json!(tensors.len());
        v["tensors_sha256"] = json!(sha256(tensors));
    })
}

/// A safetensors file with this header JSON (padded to 8 bytes with spaces,
/// as the format asks) and data.
fn raw_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    out
}

/// Whether an error is the one a case expects.
type Check = fn(&CheckpointError) -> bool;

fn refuse(state_json: &[u8], tensors: &[u8]) -> CheckpointError {
    Checkpoint::from_bytes(state_json, tensors, CAP).unwrap_err()
}

#[test]
fn round_trip_through_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let c = ckpt(10);
    let path = checkpoint::write(dir.path(), &c, NonZeroUsize::new(3).unwrap()).unwrap();
    assert_eq!(path, dir.path().join("step-10"));
    assert_eq!(names(&path), [STATE_FILE, TENSORS_FILE]);

    let latest = checkpoint::latest(dir.path(), CAP).unwrap().unwrap();
    assert_eq!(latest.path, path);
    assert_eq!(latest.checkpoint.state(), c.state());
    assert_eq!(bits(&latest.checkpoint), bits(&c));
    let q = latest.checkpoint.tensor("lora_a", "layers.0.q").unwrap();
    assert_eq!((q.group(), q.name()), ("lora_a", "layers.0.q"));
    assert_eq!(q.data(), [-1.0, 1.0]);
    latest.checkpoint.check_resumes(&SPEC, &MODEL).unwrap();

    // The state file says what the brief asks, in canonical JSON.
    let s: Value = serde_json::from_slice(&std::fs::read(path.join(STATE_FILE)).unwrap()).unwrap();
    assert_eq!(s["schema"], CHECKPOINT_SCHEMA_V1);
    assert_eq!(s["data_loader"]["permutation_seed"], "fedcba9876543210");
    assert_eq!(s["rng_state"], hex::encode((0u8..32).collect::<Vec<_>>()));
    assert_eq!(s["optimizer"]["step"], 10);
    assert_eq!(
        s["tensors_sha256"],
        sha256(&std::fs::read(path.join(TENSORS_FILE)).unwrap())
    );
    assert_eq!(
        s["tensors"][0],
        json!({"dtype": "F32", "name": "adam_m/embed", "shape": [2, 3]})
    );
}

#[test]
fn writing_the_same_state_twice_gives_the_same_bytes() {
    let (s1, t1) = ckpt(4).to_bytes().unwrap();
    // Same content, tensors given in another order.
    let mut reversed = tensors();
    reversed.reverse();
    let (s2, t2) = Checkpoint::new(state(4), reversed)
        .unwrap()
        .to_bytes()
        .unwrap();
    assert_eq!((&s1, &t1), (&s2, &t2));

    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let keep = NonZeroUsize::new(1).unwrap();
    let pa = checkpoint::write(a.path(), &ckpt(4), keep).unwrap();
    let pb = checkpoint::write(b.path(), &ckpt(4), keep).unwrap();
    for f in [STATE_FILE, TENSORS_FILE] {
        assert_eq!(
            std::fs::read(pa.join(f)).unwrap(),
            std::fs::read(pb.join(f)).unwrap()
        );
    }
    // What is read back writes back to the same bytes.
    let again = checkpoint::read(&pa, CAP).unwrap().to_bytes().unwrap();
    assert_eq!(again, (s1, t1));
}

#[test]
fn tensor_file_is_plain_safetensors() {
    // Checked byte for byte against the format written out by hand, so a
    // change in the crate's writer cannot change the file unnoticed.
    let c = Checkpoint::new(
        state(1),
        vec![
            Tensor::new("param", "w", vec![2], vec![1.0, -2.0]).unwrap(),
            Tensor::new("adam_m", "w", vec![1], vec![0.5]).unwrap(),
        ],
    )
    .unwrap();
    let (_, t) = c.to_bytes().unwrap();
    let mut data = Vec::new();
    for v in [0.5f32, 1.0, -2.0] {
        data.extend(v.to_le_bytes());
    }
    let want = raw_file(
        r#"{"adam_m/w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"param/w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#,
        &data,
    );
    assert_eq!(t, want);
    assert_eq!(read_tensors(&t, CAP).unwrap(), c.tensors());
}

#[test]
fn refuses_a_missing_tensor() {
    let (s, _) = ckpt(3).to_bytes().unwrap();
    let mut fewer = tensors();
    fewer.retain(|t| t.full_name() != "param/norm");
    let (_, t) = Checkpoint::new(state(3), fewer)
        .unwrap()
        .to_bytes()
        .unwrap();
    match refuse(&restate(&s, &t), &t) {
        CheckpointError::TensorMissing { name } => assert_eq!(name, "param/norm"),
        e => panic!("{e:?}"),
    }
}

#[test]
fn refuses_an_extra_tensor() {
    let (s, _) = ckpt(3).to_bytes().unwrap();
    for extra in ["aaa/first", "param/middle", "zzz/last"] {
        let (g, n) = extra.split_once('/').unwrap();
        let mut more = tensors();
        more.push(Tensor::new(g, n, vec![1], vec![9.0]).unwrap());
        let (_, t) = Checkpoint::new(state(3), more).unwrap().to_bytes().unwrap();
        match refuse(&restate(&s, &t), &t) {
            CheckpointError::TensorExtra { name } => assert_eq!(name, extra),
            e => panic!("{extra}: {e:?}"),
        }
    }
}

#[test]
fn refuses_a_wrong_shape() {
    let (s, t) = ckpt(3).to_bytes().unwrap();
    let s = edit_state(&s, |v| v["tensors"][0]["shape"] = json!([3, 2]));
    let e = refuse(&s, &t);
    assert!(e.to_string().contains("adam_m/embed"), "{e}");
    match e {
        CheckpointError::TensorShape {
            name,
            listed,
            found,
        } => {
            assert_eq!(name, "adam_m/embed");
            assert_eq!((listed, found), (vec![3, 2], vec![2, 3]));
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn refuses_a_wrong_dtype() {
    // The file holds `param/w` as F16 (consistent in itself); the state
    // lists it as F32.
    let c = Checkpoint::new(
        state(1),
        vec![Tensor::new("param", "w", vec![2], vec![1.0, 2.0]).unwrap()],
    )
    .unwrap();
    let (s, _) = c.to_bytes().unwrap();
    let t = raw_file(
        r#"{"param/w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}"#,
        &[0, 0x3c, 0, 0x40],
    );
    match refuse(&restate(&s, &t), &t) {
        CheckpointError::TensorDtype {
            name,
            listed,
            found,
        } => assert_eq!(
            (name.as_str(), listed.as_str(), found.as_str()),
            ("param/w", "F32", "F16")
        ),
        e => panic!("{e:?}"),
    }
    // On its own, the tensor reader refuses anything but F32.
    assert!(matches!(
        read_tensors(&t, CAP),
        Err(CheckpointError::TensorsUnsupportedDtype { .. })
    ));
    // And the state cannot list another dtype at all.
    let s = edit_state(&s, |v| v["tensors"][0]["dtype"] = json!("F16"));
    assert!(matches!(refuse(&s, &t), CheckpointError::StateJson(_)));
}

#[test]
fn refuses_a_digest_or_size_mismatch() {
    let (s, mut t) = ckpt(3).to_bytes().unwrap();
    let last = t.len() - 1;
    t[last] ^= 1;
    match refuse(&s, &t) {
        CheckpointError::TensorsDigest { expected, found } => {
            assert_ne!(expected, found);
            assert_eq!(found.to_hex(), sha256(&t));
        }
        e => panic!("{e:?}"),
    }
    t.push(0);
    assert!(matches!(
        refuse(&s, &t),
        CheckpointError::TensorsSize { found, stated } if found == stated + 1
    ));
}

#[test]
fn refuses_unknown_fields_and_other_spellings_of_state() {
    let (s, t) = ckpt(3).to_bytes().unwrap();
    Checkpoint::from_bytes(&s, &t, CAP).unwrap();

    let top = edit_state(&s, |v| v["note"] = json!("x"));
    let e = refuse(&top, &t);
    assert!(matches!(e, CheckpointError::StateJson(_)), "{e:?}");
    assert!(e.to_string().contains("unknown field `note`"), "{e}");
    let nested = edit_state(&s, |v| v["data_loader"]["shuffle"] = json!(true));
    assert!(
        refuse(&nested, &t)
            .to_string()
            .contains("unknown field `shuffle`")
    );
    let entry = edit_state(&s, |v| v["tensors"][1]["offset"] = json!(0));
    assert!(
        refuse(&entry, &t)
            .to_string()
            .contains("unknown field `offset`")
    );
    let missing = edit_state(&s, |v| {
        v.as_object_mut().unwrap().remove("rng_state");
    });
    assert!(
        refuse(&missing, &t)
            .to_string()
            .contains("missing field `rng_state`")
    );

    let schema = edit_state(&s, |v| v["schema"] = json!("kolm.checkpoint.v2"));
    assert!(matches!(refuse(&schema, &t), CheckpointError::Schema(x) if x == "kolm.checkpoint.v2"));

    // Trailing bytes, white space and pretty printing are other spellings.
    let mut trailing = s.clone();
    trailing.push(b'\n');
    assert!(matches!(
        refuse(&trailing, &t),
        CheckpointError::StateNotCanonical { offset } if offset == s.len()
    ));
    let v: Value = serde_json::from_slice(&s).unwrap();
    let pretty = serde_json::to_vec_pretty(&v).unwrap();
    assert!(matches!(
        refuse(&pretty, &t),
        CheckpointError::StateNotCanonical { offset: 1 }
    ));
    let mut garbage = s.clone();
    garbage.extend(b"{}");
    assert!(matches!(
        refuse(&garbage, &t),
        CheckpointError::StateJson(_)
    ));
    // Upper-case hex is another spelling of the same digest.
    let upper = edit_state(&s, |v| {
        let digest = v["tensors_sha256"].as_str().unwrap().to_uppercase();
        assert!(digest.contains(char::is_alphabetic));
        v["tensors_sha256"] = json!(digest);
    });
    assert!(matches!(refuse(&upper, &t), CheckpointError::StateJson(_)));
}

#[test]
fn refuses_inconsistent_state_values() {
    let (s, t) = ckpt(3).to_bytes().unwrap();
    let cases: [(&str, Value, Check); 5] = [
        ("step", json!(101), |e| {
            matches!(
                e,
                CheckpointError::StepAfterTotal {
                    step: 101,
                    total_steps: 100
                }
            )
        }),
        ("optimizer", json!({"step": 4}), |e| {
            matches!(
                e,
                CheckpointError::OptimizerStepAfterStep {
                    optimizer_step: 4,
                    step: 3
                }
            )
        }),
        ("total_steps", json!(1u64 << 53), |e| {
            matches!(
                e,
                CheckpointError::NotJsonSafe {
                    field: "total_steps",
                    ..
                }
            )
        }),
        ("rng_state", json!(""), |e| {
            matches!(e, CheckpointError::StateJson(_))
        }),
        ("tensors_bytes", json!(-1), |e| {
            matches!(e, CheckpointError::StateJson(_))
        }),
    ];
    for (field, value, ok) in cases {
        let bad = edit_state(&s, |v| v[field] = value.clone());
        let e = refuse(&bad, &t);
        assert!(ok(&e), "{field} = {value}: {e:?}");
    }
    // A tensor list out of order, or with a name twice.
    let swapped = edit_state(&s, |v| {
        let list = v["tensors"].as_array_mut().unwrap();
        list.swap(0, 1);
    });
    assert!(matches!(
        refuse(&swapped, &t),
        CheckpointError::TensorOrder { name } if name == "adam_m/embed"
    ));
}

#[test]
fn refuses_to_resume_another_job() {
    let c = ckpt(3);
    c.check_resumes(&SPEC, &MODEL).unwrap();
    let other = HexBytes([0x33; 32]);
    match c.check_resumes(&other, &MODEL).unwrap_err() {
        CheckpointError::OtherJob {
            field,
            checkpoint,
            expected,
        } => assert_eq!(
            (field, checkpoint, expected),
            ("job_spec_sha256", SPEC, other)
        ),
        e => panic!("{e:?}"),
    }
    let e = c.check_resumes(&SPEC, &other).unwrap_err();
    assert!(
        matches!(
            e,
            CheckpointError::OtherJob {
                field: "base_model_sha256",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains(&other.to_hex()), "{e}");
}

#[test]
fn refuses_a_truncated_tensor_file() {
    let (s, t) = ckpt(3).to_bytes().unwrap();
    // Inside the data: the last tensor's span runs past the end.
    let cut = &t[..t.len() - 4];
    match refuse(&restate(&s, cut), cut) {
        CheckpointError::TensorsOutOfBounds { declared_end, len } => {
            assert_eq!((declared_end, len), (t.len() as u64, cut.len() as u64));
        }
        e => panic!("{e:?}"),
    }
    // Inside the header, and inside the header's length field.
    let header_len = u64::from_le_bytes(t[..8].try_into().unwrap());
    let cut = &t[..20];
    assert!(matches!(
        refuse(&restate(&s, cut), cut),
        CheckpointError::TensorsTruncated { what: "header", need, len: 20 } if need == header_len + 8
    ));
    let cut = &t[..5];
    assert!(matches!(
        refuse(&restate(&s, cut), cut),
        CheckpointError::TensorsTruncated {
            what: "header length",
            need: 8,
            len: 5
        }
    ));
    assert!(matches!(
        read_tensors(&[], CAP),
        Err(CheckpointError::TensorsTruncated { .. })
    ));
}

#[test]
fn refuses_bad_header_offsets() {
    // Out of bounds: the header says 64 bytes of data, the file has 8.
    let t = raw_file(
        r#"{"param/w":{"dtype":"F32","shape":[16],"data_offsets":[0,64]}}"#,
        &[0; 8],
    );
    let header_end = t.len() as u64 - 8;
    match read_tensors(&t, CAP).unwrap_err() {
        CheckpointError::TensorsOutOfBounds { declared_end, len } => {
            assert_eq!((declared_end, len), (header_end + 64, t.len() as u64));
        }
        e => panic!("{e:?}"),
    }
    let offsets_of_b: Check =
        |e| matches!(e, CheckpointError::TensorsOffsets { name } if name == "param/b");
    let cases: [(&str, &str, usize, Check); 8] = [
        (
            "the second tensor starts inside the first",
            r#"{"param/a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"param/b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#,
            12,
            offsets_of_b,
        ),
        (
            "both tensors on the same bytes",
            r#"{"param/a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"param/b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
            8,
            |e| matches!(e, CheckpointError::TensorsOffsets { .. }),
        ),
        (
            "a gap between tensors",
            r#"{"param/a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"param/b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#,
            12,
            offsets_of_b,
        ),
        (
            "an end before the start",
            r#"{"param/a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}"#,
            4,
            |e| matches!(e, CheckpointError::TensorsOffsets { .. }),
        ),
        (
            "a span that does not match dtype and shape",
            r#"{"param/a":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}}"#,
            12,
            |e| matches!(e, CheckpointError::TensorsSpan),
        ),
        (
            "an end offset of u64::MAX",
            r#"{"param/a":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}}"#,
            4,
            |e| matches!(e, CheckpointError::TensorsSpan),
        ),
        (
            "a shape whose size overflows",
            r#"{"param/a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}"#,
            4,
            |e| matches!(e, CheckpointError::TensorsHeader(m) if m.contains("overflows")),
        ),
        (
            "bytes after the last tensor",
            r#"{"param/a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
            6,
            |e| matches!(e, CheckpointError::TensorsTrailing { trailing: 2, .. }),
        ),
    ];
    for (what, header, data_len, ok) in cases {
        let e = read_tensors(&raw_file(header, &vec![0; data_len]), CAP).unwrap_err();
        assert!(ok(&e), "{what}: {e:?}");
    }
    // A header length far past the end of the file.
    let mut t = raw_file(r#"{}"#, &[]);
    t[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        read_tensors(&t, CAP),
        Err(CheckpointError::TensorsTruncated { what: "header", .. })
    ));
}

#[test]
fn refuses_other_spellings_of_the_tensor_file() {
    let d = 1.0f32.to_le_bytes();
    let ok = raw_file(
        r#"{"param/a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
        &d,
    );
    read_tensors(&ok, CAP).unwrap();
    let spaced = raw_file(
        r#"{ "param/a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
        &d,
    );
    assert!(matches!(
        read_tensors(&spaced, CAP),
        Err(CheckpointError::TensorsNotCanonical { offset: 9 })
    ));
    let reordered = raw_file(
        r#"{"param/a":{"shape":[1],"dtype":"F32","data_offsets":[0,4]}}"#,
        &d,
    );
    assert!(matches!(
        read_tensors(&reordered, CAP),
        Err(CheckpointError::TensorsNotCanonical { .. })
    ));
    let duplicate = raw_file(
        r#"{"param/a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"param/a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
        &d,
    );
    // serde keeps one of the two; the file is then not what the writer
    // makes of that one tensor.
    assert!(matches!(
        read_tensors(&duplicate, CAP),
        Err(CheckpointError::TensorsNotCanonical { .. })
    ));
    let metadata = raw_file(
        r#"{"__metadata__":{"a":"b"},"param/a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
        &d,
    );
    assert!(matches!(
        read_tensors(&metadata, CAP),
        Err(CheckpointError::TensorsMetadata)
    ));
    let unnamed = raw_file(
        r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
        &d,
    );
    assert!(matches!(
        read_tensors(&unnamed, CAP),
        Err(CheckpointError::TensorName { .. })
    ));
    let not_json = raw_file("{nope", &d);
    assert!(matches!(
        read_tensors(&not_json, CAP),
        Err(CheckpointError::TensorsHeader(_))
    ));
}

#[test]
fn refuses_a_tensor_file_over_the_cap() {
    let (s, t) = ckpt(3).to_bytes().unwrap();
    let cap = t.len() as u64 - 1;
    assert!(matches!(
        Checkpoint::from_bytes(&s, &t, cap),
        Err(CheckpointError::TensorsTooLarge { len, max }) if len == t.len() as u64 && max == cap
    ));
    let dir = tempfile::tempdir().unwrap();
    let path = checkpoint::write(dir.path(), &ckpt(3), NonZeroUsize::MIN).unwrap();
    assert!(matches!(
        checkpoint::read(&path, cap),
        Err(CheckpointError::TensorsTooLarge { .. })
    ));
    checkpoint::read(&path, cap + 1).unwrap();
}

#[test]
fn refuses_bad_checkpoints_on_write() {
    let bad_name = Tensor::new("Param", "w", vec![1], vec![0.0]).unwrap_err();
    assert!(matches!(bad_name, CheckpointError::TensorName { name, .. } if name == "Param/w"));
    for (g, n) in [("", "w"), ("param", ""), ("param", "a b"), ("pa/ram", "w")] {
        assert!(
            matches!(
                Tensor::new(g, n, vec![1], vec![0.0]),
                Err(CheckpointError::TensorName { .. })
            ),
            "{g}/{n}"
        );
    }
    assert!(matches!(
        Tensor::new("param", "w", vec![2, 2], vec![0.0; 3]),
        Err(CheckpointError::TensorData { data_len: 3, .. })
    ));
    assert!(matches!(
        Tensor::new("param", "w", vec![usize::MAX, 2], vec![]),
        Err(CheckpointError::TensorData { .. })
    ));
    let twice = vec![
        Tensor::new("param", "w", vec![1], vec![0.0]).unwrap(),
        Tensor::new("param", "w", vec![1], vec![1.0]).unwrap(),
    ];
    assert!(matches!(
        Checkpoint::new(state(1), twice),
        Err(CheckpointError::TensorOrder { name }) if name == "param/w"
    ));
    let mut s = state(1);
    s.data_loader.index = 1 << 53;
    assert!(matches!(
        Checkpoint::new(s, tensors()),
        Err(CheckpointError::NotJsonSafe {
            field: "data_loader.index",
            ..
        })
    ));
    let mut s = state(1);
    s.rng_state.clear();
    assert!(matches!(
        Checkpoint::new(s, tensors()),
        Err(CheckpointError::RngStateLength { len: 0 })
    ));
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn a_crash_mid_write_leaves_the_old_set_and_latest_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let keep = NonZeroUsize::new(2).unwrap();
    checkpoint::write(dir.path(), &ckpt(5), keep).unwrap();

    // What a crash leaves at each point before the rename: a temp directory
    // of step 10, empty, with one file, or with both files written.
    let (s, t) = ckpt(10).to_bytes().unwrap();
    let leftovers: [&[(&str, &[u8])]; 3] = [
        &[],
        &[(TENSORS_FILE, &t[..t.len() / 2])],
        &[(TENSORS_FILE, &t), (STATE_FILE, &s)],
    ];
    for (i, files) in leftovers.iter().enumerate() {
        let tmp = dir.path().join(format!("step-10.tmp-{i:016x}"));
        std::fs::create_dir(&tmp).unwrap();
        for (name, bytes) in *files {
            std::fs::write(tmp.join(name), bytes).unwrap();
        }
    }
    // So does a removal cut short (retention renames before removing).
    let half_removed = dir.path().join("step-1.tmp-00000000000000ff");
    std::fs::create_dir(&half_removed).unwrap();
    std::fs::write(half_removed.join(STATE_FILE), b"{").unwrap();
    assert_eq!(names(dir.path()).len(), 5);

    let latest = checkpoint::latest(dir.path(), CAP).unwrap().unwrap();
    assert_eq!(latest.checkpoint.state().step, 5);
    assert_eq!(bits(&latest.checkpoint), bits(&ckpt(5)));
    assert_eq!(names(dir.path()), ["step-5"]);

    // The run goes on and writes step 10 for real.
    checkpoint::write(dir.path(), &ckpt(10), keep).unwrap();
    let latest = checkpoint::latest(dir.path(), CAP).unwrap().unwrap();
    assert_eq!(latest.checkpoint.state(), ckpt(10).state());
    assert_eq!(bits(&latest.checkpoint), bits(&ckpt(10)));
}

#[test]
fn keeps_the_newest_k() {
    let dir = tempfile::tempdir().unwrap();
    let keep = NonZeroUsize::new(2).unwrap();
    for step in [1, 2, 3, 5, 8] {
        checkpoint::write(dir.path(), &ckpt(step), keep).unwrap();
        assert!(names(dir.path()).len() <= 2);
    }
    assert_eq!(names(dir.path()), ["step-5", "step-8"]);
    let three = NonZeroUsize::new(3).unwrap();
    checkpoint::write(dir.path(), &ckpt(13), three).unwrap();
    assert_eq!(names(dir.path()), ["step-13", "step-5", "step-8"]);
    checkpoint::write(dir.path(), &ckpt(21), NonZeroUsize::MIN).unwrap();
    assert_eq!(names(dir.path()), ["step-21"]);

    // A step not newer than the newest is refused, and nothing changes.
    for step in [21, 20] {
        assert!(matches!(
            checkpoint::write(dir.path(), &ckpt(step), keep),
            Err(CheckpointError::StepNotNewer { newest: 21, .. })
        ));
    }
    assert_eq!(names(dir.path()), ["step-21"]);
}

#[test]
fn refuses_strange_directories() {
    assert!(
        checkpoint::latest(&std::env::temp_dir().join("kolm-no-such-dir-ckpt"), CAP)
            .unwrap()
            .is_none()
    );
    let dir = tempfile::tempdir().unwrap();
    assert!(checkpoint::latest(dir.path(), CAP).unwrap().is_none());
    let path = checkpoint::write(dir.path(), &ckpt(5), NonZeroUsize::MIN).unwrap();

    // A checkpoint whose directory name is not its step.
    let moved = dir.path().join("step-6");
    std::fs::rename(&path, &moved).unwrap();
    assert!(matches!(
        checkpoint::latest(dir.path(), CAP),
        Err(CheckpointError::StepDirMismatch {
            dir_step: 6,
            state_step: 5,
            ..
        })
    ));
    std::fs::rename(&moved, &path).unwrap();

    // An extra file inside a checkpoint, and strangers beside them.
    std::fs::write(path.join("notes.txt"), b"").unwrap();
    assert!(matches!(
        checkpoint::latest(dir.path(), CAP),
        Err(CheckpointError::UnexpectedEntry { path }) if path.ends_with("notes.txt")
    ));
    std::fs::remove_file(path.join("notes.txt")).unwrap();
    for stranger in ["step-05", "step-5.old", "notes", "step-5.tmp-xyz"] {
        let p = dir.path().join(stranger);
        std::fs::create_dir(&p).unwrap();
        assert!(
            matches!(
                checkpoint::latest(dir.path(), CAP),
                Err(CheckpointError::UnexpectedEntry { .. })
            ),
            "{stranger}"
        );
        std::fs::remove_dir(&p).unwrap();
    }
    // A file (not a directory) with a checkpoint's name.
    std::fs::write(dir.path().join("step-9"), b"").unwrap();
    assert!(matches!(
        checkpoint::latest(dir.path(), CAP),
        Err(CheckpointError::UnexpectedEntry { .. })
    ));
    std::fs::remove_file(dir.path().join("step-9")).unwrap();

    // A damaged newest checkpoint is an error, never a silent fallback.
    checkpoint::write(dir.path(), &ckpt(6), NonZeroUsize::new(2).unwrap()).unwrap();
    let t = dir.path().join("step-6").join(TENSORS_FILE);
    let mut bytes = std::fs::read(&t).unwrap();
    bytes[100] ^= 0x80;
    std::fs::write(&t, bytes).unwrap();
    assert!(matches!(
        checkpoint::latest(dir.path(), CAP),
        Err(CheckpointError::TensorsDigest { .. })
    ));
}

#[test]
fn state_file_reads_alone() {
    let (s, t) = ckpt(3).to_bytes().unwrap();
    let f = StateFile::from_json_bytes(&s).unwrap();
    assert_eq!(f.state, state(3));
    assert_eq!(f.tensors_bytes, t.len() as u64);
    assert_eq!(f.tensors.len(), tensors().len());
    assert_eq!(f.to_json_bytes().unwrap(), s);
    assert!(matches!(
        StateFile::from_json_bytes(&vec![b' '; 9 * 1024 * 1024]),
        Err(CheckpointError::StateTooLarge { .. })
    ));
}
