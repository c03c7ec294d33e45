//! Manifest rules added by issue 12, each refused by the writer and by the
//! strict reader: output names that would unpack differently on another OS
//! (item 10; the names kolm itself writes still pass), and a recorded
//! failure (item 7: a non-zero exit is never sealed as success).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use std::collections::BTreeMap;

use kolm_format::hexbytes::HexBytes;
use kolm_format::jcs;
use kolm_format::manifest::{
    CHECKSUMS_PATH, ChainLink, Environment, FileRecord, Governance, JobRecord, MANIFEST_SCHEMA_V1,
    Manifest, ManifestError, Runtime, SBOM_PATH, Signer,
};
use kolm_policy::Platform;

fn file(path: &str) -> FileRecord {
    FileRecord {
        path: path.to_string(),
        size: 1,
        sha256: HexBytes([0x11; 32]),
    }
}

fn manifest(outputs: &[&str]) -> Manifest {
    let mut outputs: Vec<FileRecord> = outputs.iter().map(|p| file(p)).collect();
    outputs.sort_by(|a, b| a.path.cmp(&b.path));
    Manifest {
        schema: MANIFEST_SCHEMA_V1.to_string(),
        job: JobRecord {
            id: "job-1".into(),
            kind: "demo".into(),
            spec_sha256: HexBytes([1; 32]),
            policy_sha256: HexBytes([2; 32]),
            started_at: "2026-01-01T00:00:00Z".into(),
            finished_at: "2026-01-01T00:00:01Z".into(),
            exit_code: 0,
            techniques: None,
        },
        inputs: vec![file("corpus.txt")],
        environment: Environment {
            platform: Platform::None,
            measurement: None,
            runtime: Runtime {
                name: "kolm-enclave".into(),
                version: "0.1.0".into(),
            },
            sandbox: None,
            gpu: None,
        },
        outputs,
        metrics: BTreeMap::new(),
        governance: Governance {
            sbom: file(SBOM_PATH),
            checksums: file(CHECKSUMS_PATH),
        },
        chain: ChainLink {
            previous: None,
            sequence: 0,
        },
        signer: Signer {
            alg: "Ed25519".into(),
            public_key: HexBytes([3; 32]),
        },
        evidence: None,
    }
}

/// The manifest's bytes as a forger would write them (JCS, no rule checks).
fn forged_bytes(m: &Manifest) -> Vec<u8> {
    jcs::to_canonical_vec(m).unwrap()
}

fn refused(m: &Manifest) -> String {
    let w = m.to_canonical_bytes().unwrap_err();
    let r = Manifest::from_canonical_bytes(&forged_bytes(m)).unwrap_err();
    assert_eq!(w.to_string(), r.to_string());
    assert!(matches!(r, ManifestError::Field { .. }), "{r:?}");
    r.to_string()
}

#[test]
fn kolm_s_own_names_pass() {
    let m = manifest(&["outputs/metrics.json", "outputs/model/bigram.json"]);
    let bytes = m.to_canonical_bytes().unwrap();
    assert_eq!(Manifest::from_canonical_bytes(&bytes).unwrap(), m);
}

#[test]
fn names_that_collide_on_unpacking_are_refused() {
    for (outputs, says) in [
        (
            &["outputs/Model.bin", "outputs/model.bin"][..],
            "differ only in ASCII case",
        ),
        (&["outputs/a", "outputs/A/b"], "needs a directory"),
        (&["outputs/x", "outputs/x/y"], "needs a directory"),
    ] {
        let e = refused(&manifest(outputs));
        assert!(e.contains(says), "{outputs:?}: {e}");
    }
}

#[test]
fn names_that_some_os_cannot_hold_are_refused() {
    for (name, says) in [
        ("outputs/aux.txt", "Windows reserved device name"),
        ("outputs/CON", "Windows reserved device name"),
        ("outputs/com1.log", "Windows reserved device name"),
        ("outputs/report.", "ends with '.' or ' '"),
        ("outputs/report ", "ends with '.' or ' '"),
        ("outputs/a:stream", "contains ':'"),
        (
            "outputs/invoice\u{202e}fdp.exe",
            "bidirectional control character",
        ),
        ("outputs/\u{e9}.txt", "outside the portable set"),
        // NFC and NFD spellings of the same visible name.
        ("outputs/e\u{301}.txt", "outside the portable set"),
        ("outputs/\u{212a}elvin", "outside the portable set"),
    ] {
        let e = refused(&manifest(&[name]));
        assert!(e.contains(says), "{name:?}: {e}");
    }
    // Inputs follow the same per-name rules.
    let mut m = manifest(&["outputs/metrics.json"]);
    m.inputs = vec![file("aux.txt")];
    assert!(refused(&m).contains("Windows reserved"));
}

#[test]
fn a_failed_job_is_never_a_sealed_manifest() {
    for code in [1, 2, 137, -1, i32::MAX, i32::MIN] {
        let mut m = manifest(&["outputs/metrics.json"]);
        m.job.exit_code = code;
        let e = refused(&m);
        assert!(e.contains("job.exit_code"), "{code}: {e}");
    }
}

/// `job.techniques` (a fine-tune's method, LoRA rank, precision, device and
/// determinism mode): a v2 field, each value from its closed set, the rank
/// exactly with LoRA; absent, it is not written at all.
#[test]
fn techniques_are_checked_and_v2_only() {
    use kolm_format::manifest::{
        DETERMINISM_BITWISE_ON_RECORDED_TUPLE, EvidenceBinding, MANIFEST_SCHEMA_V2, Techniques,
    };
    let mut m = manifest(&["outputs/metrics.json"]);
    assert!(
        !String::from_utf8(m.to_canonical_bytes().unwrap())
            .unwrap()
            .contains("techniques")
    );
    let lora = Techniques {
        method: "lora".into(),
        lora_rank: Some(16),
        precision: "bf16".into(),
        device: "gpu".into(),
        determinism: DETERMINISM_BITWISE_ON_RECORDED_TUPLE.into(),
    };
    m.job.techniques = Some(lora.clone());
    assert!(refused(&m).contains("job.techniques"));
    m.schema = MANIFEST_SCHEMA_V2.into();
    m.evidence = Some(EvidenceBinding {
        collateral: Vec::new(),
    });
    let bytes = m.to_canonical_bytes().unwrap();
    assert_eq!(Manifest::from_canonical_bytes(&bytes).unwrap(), m);
    type Break = fn(&mut Techniques);
    let bad: [(&str, Break); 6] = [
        ("job.techniques.method", |t| t.method = "qlora".into()),
        ("job.techniques.precision", |t| t.precision = "fp8".into()),
        ("job.techniques.device", |t| t.device = "tpu".into()),
        ("job.techniques.determinism", |t| {
            t.determinism = "none".into()
        }),
        ("job.techniques.lora_rank", |t| t.lora_rank = None),
        ("job.techniques.lora_rank", |t| {
            t.method = "full".into();
        }),
    ];
    for (field, f) in bad {
        let mut t = lora.clone();
        f(&mut t);
        m.job.techniques = Some(t);
        let e = refused(&m);
        assert!(e.contains(field), "{field}: {e}");
    }
}
