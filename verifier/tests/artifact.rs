//! Sealed artifact verification: a good artifact, and every kind of tampering
//! the receipt spec names, each rejected with the right check.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;

use common::{Spec, build, build_default, key, manifest_for};
use kolm_format::binding;
use kolm_format::container::{self, EntryData};
use kolm_format::content_id::ContentId;
use kolm_format::evidence::EvidenceIndex;
use kolm_format::hexbytes::HexBytes;
use kolm_format::receipt;
use kolm_policy::Policy;
use kolm_verifier::artifact::{VerifyAt, VerifyOptions, verify_artifact};
use kolm_verifier::check::ArtifactCheck;
use kolm_verifier::report::{CheckStatus, Verdict, VerifyReport};

/// A policy that admits the test artifacts (platform `none`, no sandbox).
fn dev_policy() -> Policy {
    Policy::from_toml_str(
        "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"none\"]\n[egress]\nmust_be_zero = false\n",
    )
    .unwrap()
}

fn dev() -> VerifyOptions {
    VerifyOptions {
        policy: Some(dev_policy()),
        ..VerifyOptions::at(VerifyAt::ReceiptTime)
    }
}

fn verify(path: &Path) -> VerifyReport {
    verify_artifact(path, &dev()).unwrap()
}

fn failed_check(r: &VerifyReport) -> &'static str {
    assert_eq!(r.verdict, Verdict::Rejected, "{}", r.to_table());
    r.first_failure().unwrap().id.as_str()
}

/// All entries of an artifact, by name.
fn entries(path: &Path) -> BTreeMap<String, Vec<u8>> {
    let bytes = std::fs::read(path).unwrap();
    let mut cur = Cursor::new(bytes);
    let zip = container::read_canonical_zip(&mut cur).unwrap();
    zip.entries
        .iter()
        .map(|e| {
            (
                e.name.clone(),
                container::read_entry(&mut cur, e, u64::MAX).unwrap(),
            )
        })
        .collect()
}

fn rewrite(dest: &Path, map: BTreeMap<String, Vec<u8>>) {
    let list = map
        .into_iter()
        .map(|(k, v)| (k, EntryData::Bytes(v)))
        .collect();
    container::write_canonical_zip(dest, list).unwrap();
}

#[test]
fn good_artifact_is_unattested_not_verified() {
    let dir = tempfile::tempdir().unwrap();
    let p = build_default(dir.path());
    let r = verify(&p);
    assert_eq!(r.verdict, Verdict::Unattested, "{}", r.to_table());
    assert_eq!(r.verdict.exit_code(), 1);
    assert!(r.first_failure().is_none());
    assert_eq!(
        r.status_of(ArtifactCheck::Attestation),
        Some(CheckStatus::Unattested)
    );
    for id in [
        ArtifactCheck::Container,
        ArtifactCheck::Manifest,
        ArtifactCheck::Entries,
        ArtifactCheck::Files,
        ArtifactCheck::Governance,
        ArtifactCheck::ManifestCid,
        ArtifactCheck::ReceiptSignature,
        ArtifactCheck::Binding,
    ] {
        assert_eq!(r.status_of(id), Some(CheckStatus::Pass), "{id}");
    }
    // The production policy requires a sandbox record showing zero egress,
    // which this artifact lacks: rejected, with the rule named.
    let r = verify_artifact(&p, &VerifyOptions::at(VerifyAt::ReceiptTime)).unwrap();
    assert_eq!(failed_check(&r), "policy");
    assert!(r.reason.as_deref().unwrap().contains("egress.must_be_zero"));
    // With the dangerous switch the production policy must also allow `none`.
    let dangerous = VerifyOptions {
        dangerous_allow_unattested: true,
        ..VerifyOptions::at(VerifyAt::ReceiptTime)
    };
    let r = verify_artifact(&p, &dangerous).unwrap();
    assert_eq!(failed_check(&r), "policy");
    assert!(
        r.reason.as_deref().unwrap().contains("platform"),
        "{:?}",
        r.reason
    );
    // A policy that allows `none` and no sandbox verifies with the switch.
    let dev = dev_policy();
    let opts = VerifyOptions {
        policy: Some(dev.clone()),
        dangerous_allow_unattested: true,
        ..VerifyOptions::at(VerifyAt::ReceiptTime)
    };
    let r = verify_artifact(&p, &opts).unwrap();
    assert_eq!(r.verdict, Verdict::Verified, "{}", r.to_table());
    assert!(r.reason.unwrap().contains("WITHOUT hardware attestation"));
    // Without the switch, the same policy still says unattested.
    let opts = VerifyOptions {
        policy: Some(dev),
        ..VerifyOptions::at(VerifyAt::ReceiptTime)
    };
    assert_eq!(
        verify_artifact(&p, &opts).unwrap().verdict,
        Verdict::Unattested
    );
}

#[test]
fn sealing_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.zip");
    let b = dir.path().join("b.zip");
    build(&a, &Spec::default());
    build(&b, &Spec::default());
    assert_eq!(std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
}

#[test]
fn every_flipped_byte_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let p = build_default(dir.path());
    let good = std::fs::read(&p).unwrap();
    let bad = dir.path().join("bad.zip");
    let mut accepted = Vec::new();
    for pos in 0..good.len() {
        for mask in [0x01u8, 0x80] {
            let mut b = good.clone();
            b[pos] ^= mask;
            std::fs::write(&bad, &b).unwrap();
            let r = verify(&bad);
            if r.verdict != Verdict::Rejected {
                accepted.push((pos, mask));
            }
        }
    }
    assert!(accepted.is_empty(), "accepted flips at {accepted:?}");
}

#[test]
fn truncated_and_empty_files_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let p = build_default(dir.path());
    let good = std::fs::read(&p).unwrap();
    let bad = dir.path().join("bad.zip");
    for len in (0..good.len())
        .step_by(3)
        .chain(good.len() - 64..good.len())
    {
        std::fs::write(&bad, &good[..len]).unwrap();
        let r = verify(&bad);
        assert_eq!(failed_check(&r), "container", "length {len}");
    }
    let mut longer = good.clone();
    longer.push(0);
    std::fs::write(&bad, &longer).unwrap();
    assert_eq!(failed_check(&verify(&bad)), "container");
}

#[test]
fn missing_file_is_an_io_error_not_a_verdict() {
    let err = verify_artifact(
        Path::new("/nonexistent/kolm.zip"),
        &VerifyOptions::at(VerifyAt::ReceiptTime),
    );
    assert!(err.is_err());
}

#[test]
fn extra_and_missing_entries_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let p = build_default(dir.path());
    let bad = dir.path().join("bad.zip");

    let mut m = entries(&p);
    m.insert("outputs/smuggled.txt".into(), b"exfil".to_vec());
    rewrite(&bad, m);
    let r = verify(&bad);
    assert_eq!(failed_check(&r), "entries");
    assert!(r.reason.unwrap().contains("smuggled"));

    let mut m = entries(&p);
    m.remove("outputs/model/weights.bin");
    rewrite(&bad, m);
    assert_eq!(failed_check(&verify(&bad)), "entries");

    for name in ["manifest.json", "receipt.cose", "evidence/index.json"] {
        let mut m = entries(&p);
        m.remove(name);
        rewrite(&bad, m);
        let r = verify(&bad);
        assert_eq!(r.verdict, Verdict::Rejected, "{name}");
        assert!(r.reason.unwrap().contains(name), "{name}");
    }
}

#[test]
fn replaced_output_content_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let p = build_default(dir.path());
    let bad = dir.path().join("bad.zip");
    let mut m = entries(&p);
    m.insert(
        "outputs/metrics.json".into(),
        b"{\"eval_loss\":0.1}\n".to_vec(),
    );
    rewrite(&bad, m);
    let r = verify(&bad);
    assert_eq!(failed_check(&r), "files");
}

/// Patches an entry name in place (local and central headers) in raw bytes.
fn patch_name(bytes: &mut [u8], from: &str, to: &str) {
    assert_eq!(from.len(), to.len());
    let mut hits = 0;
    let mut i = 0;
    while i + from.len() <= bytes.len() {
        if &bytes[i..i + from.len()] == from.as_bytes() {
            bytes[i..i + from.len()].copy_from_slice(to.as_bytes());
            hits += 1;
        }
        i += 1;
    }
    assert!(hits >= 2, "name {from} found {hits} times");
}

#[test]
fn duplicate_and_traversal_names_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let spec = Spec {
        outputs: vec![
            ("outputs/aaaa", b"one".to_vec()),
            ("outputs/aaab", b"two".to_vec()),
        ],
        ..Spec::default()
    };
    let p = dir.path().join("a.zip");
    build(&p, &spec);
    let good = std::fs::read(&p).unwrap();
    let bad = dir.path().join("bad.zip");
    for to in [
        "outputs/aaaa",
        "../../../aab",
        "/utputs/aaab",
        "outputs\\aaab",
        "outputs//aab",
        "OUTPUTS/AAAA",
    ] {
        let mut b = good.clone();
        patch_name(&mut b, "outputs/aaab", to);
        std::fs::write(&bad, &b).unwrap();
        let r = verify(&bad);
        assert_eq!(failed_check(&r), "container", "{to}");
    }
}

#[test]
fn oversized_manifest_is_refused_before_parsing() {
    let dir = tempfile::tempdir().unwrap();
    let p = build_default(dir.path());
    let bad = dir.path().join("bad.zip");
    let mut m = entries(&p);
    m.insert("manifest.json".into(), vec![b' '; 17 * 1024 * 1024]);
    rewrite(&bad, m);
    let r = verify(&bad);
    assert_eq!(failed_check(&r), "manifest");
}

#[test]
fn declared_sizes_beyond_the_file_are_rejected() {
    // A "bomb" in a stored-only container is a size field that lies.
    let dir = tempfile::tempdir().unwrap();
    let p = build_default(dir.path());
    let good = std::fs::read(&p).unwrap();
    let bad = dir.path().join("bad.zip");
    // Central directory headers start with PK\x01\x02; sizes at +20 and +24.
    let cd = good.windows(4).position(|w| w == b"PK\x01\x02").unwrap();
    for off in [20, 24] {
        let mut b = good.clone();
        b[cd + off..cd + off + 4].copy_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
        std::fs::write(&bad, &b).unwrap();
        assert_eq!(failed_check(&verify(&bad)), "container");
    }
}

#[test]
fn non_canonical_manifest_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let p = build_default(dir.path());
    let bad = dir.path().join("bad.zip");
    let m0 = entries(&p);
    let canonical = m0["manifest.json"].clone();
    let value: serde_json::Value = serde_json::from_slice(&canonical).unwrap();
    let variants = [
        serde_json::to_vec_pretty(&value).unwrap(),
        [canonical.clone(), b"\n".to_vec()].concat(),
        String::from_utf8(canonical.clone())
            .unwrap()
            .replacen("{\"chain\"", "{\"chain\":null,\"chain\"", 1)
            .into_bytes(),
    ];
    for v in variants {
        let mut m = m0.clone();
        m.insert("manifest.json".into(), v);
        rewrite(&bad, m);
        let r = verify(&bad);
        assert_eq!(failed_check(&r), "manifest");
        assert!(r.reason.unwrap().contains("canonical"));
    }
}

#[test]
fn wrong_cid_in_evidence_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let p = build_default(dir.path());
    let bad = dir.path().join("bad.zip");
    let mut m = entries(&p);
    let mut index = EvidenceIndex::from_canonical_bytes(&m["evidence/index.json"]).unwrap();
    let other = ContentId::for_json(b"{}");
    index.manifest_cid = other;
    index.report_data = HexBytes(binding::report_data(&other));
    m.insert(
        "evidence/index.json".into(),
        index.to_canonical_bytes().unwrap(),
    );
    rewrite(&bad, m);
    assert_eq!(failed_check(&verify(&bad)), "manifest.cid");

    // Right CID, wrong report data.
    let mut m = entries(&p);
    let mut index = EvidenceIndex::from_canonical_bytes(&m["evidence/index.json"]).unwrap();
    index.report_data = HexBytes([0u8; 64]);
    m.insert(
        "evidence/index.json".into(),
        index.to_canonical_bytes().unwrap(),
    );
    rewrite(&bad, m);
    assert_eq!(failed_check(&verify(&bad)), "binding");
}

#[test]
fn valid_signature_by_the_wrong_key_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let p = build_default(dir.path());
    let bad = dir.path().join("bad.zip");
    let mut m = entries(&p);
    let sig = receipt::sign(&m["manifest.json"], &key(&common::SEED_B)).unwrap();
    m.insert("receipt.cose".into(), sig);
    rewrite(&bad, m);
    let r = verify(&bad);
    assert_eq!(failed_check(&r), "receipt.signature");
}

#[test]
fn receipt_over_other_bytes_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let p = build_default(dir.path());
    let bad = dir.path().join("bad.zip");
    let mut m = entries(&p);
    let sig = receipt::sign(b"{}", &key(&common::SEED_A)).unwrap();
    m.insert("receipt.cose".into(), sig);
    rewrite(&bad, m);
    let r = verify(&bad);
    assert_eq!(failed_check(&r), "receipt.signature");
    assert!(r.reason.unwrap().contains("payload"));
}

#[test]
fn verification_instant_before_the_receipt_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let p = build_default(dir.path());
    let at = kolm_format::timefmt::parse_rfc3339("2026-01-02T03:05:05Z").unwrap();
    let r = verify_artifact(
        &p,
        &VerifyOptions {
            at: VerifyAt::Instant(at),
            ..dev()
        },
    )
    .unwrap();
    assert_eq!(failed_check(&r), "time");
    let at = kolm_format::timefmt::parse_rfc3339("2026-06-01T00:00:00+02:00").unwrap();
    let r = verify_artifact(
        &p,
        &VerifyOptions {
            at: VerifyAt::Instant(at),
            ..dev()
        },
    )
    .unwrap();
    assert_eq!(r.verdict, Verdict::Unattested);
    assert_eq!(
        r.verified_at
            .map(|t| kolm_format::timefmt::format_utc_seconds(t).unwrap()),
        Some("2026-05-31T22:00:00Z".to_string())
    );
}

#[test]
fn quality_gate_is_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let p = build_default(dir.path());
    let strict = Policy::from_toml_str(
        "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"none\"]\n[egress]\nmust_be_zero = false\n[[quality.gates]]\nmetric = \"eval_loss\"\nmax = 2.0\n",
    )
    .unwrap();
    let r = verify_artifact(
        &p,
        &VerifyOptions {
            policy: Some(strict),
            ..VerifyOptions::at(VerifyAt::ReceiptTime)
        },
    )
    .unwrap();
    assert_eq!(failed_check(&r), "policy");
    assert!(r.reason.unwrap().contains("quality"));
}

#[test]
fn chain_links_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("0.zip");
    let cid0 = build(&first, &Spec::default());
    let second = dir.path().join("1.zip");
    build(
        &second,
        &Spec {
            seed: common::SEED_B,
            previous: Some(cid0),
            sequence: 1,
            started_at: "2026-01-02T04:00:00Z",
            finished_at: "2026-01-02T04:01:00Z",
            ..Spec::default()
        },
    );
    let with_prev = |prev: &Path| VerifyOptions {
        previous: Some(prev.to_path_buf()),
        ..dev()
    };
    let r = verify_artifact(&second, &with_prev(&first)).unwrap();
    assert_eq!(
        r.status_of(ArtifactCheck::Chain),
        Some(CheckStatus::Pass),
        "{}",
        r.to_table()
    );

    // A bare receipt.cose works as the previous link too.
    let receipt_path = dir.path().join("0.cose");
    std::fs::write(&receipt_path, &entries(&first)["receipt.cose"]).unwrap();
    let r = verify_artifact(&second, &with_prev(&receipt_path)).unwrap();
    assert_eq!(
        r.status_of(ArtifactCheck::Chain),
        Some(CheckStatus::Pass),
        "{}",
        r.to_table()
    );

    // Without --previous the link is reported, not silently trusted.
    let r = verify(&second);
    assert_eq!(r.status_of(ArtifactCheck::Chain), Some(CheckStatus::Skip));

    // The wrong predecessor (a replayed or rolled-back state) is rejected.
    let other = dir.path().join("other.zip");
    build(
        &other,
        &Spec {
            seed: [5; 32],
            ..Spec::default()
        },
    );
    let r = verify_artifact(&second, &with_prev(&other)).unwrap();
    assert_eq!(failed_check(&r), "chain");

    // A sequence gap is rejected.
    let gap = dir.path().join("gap.zip");
    build(
        &gap,
        &Spec {
            previous: Some(cid0),
            sequence: 2,
            started_at: "2026-01-02T04:00:00Z",
            finished_at: "2026-01-02T04:01:00Z",
            ..Spec::default()
        },
    );
    let r = verify_artifact(&gap, &with_prev(&first)).unwrap();
    assert_eq!(failed_check(&r), "chain");

    // A tampered previous receipt is rejected.
    let mut bytes = std::fs::read(&receipt_path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&receipt_path, &bytes).unwrap();
    let r = verify_artifact(&second, &with_prev(&receipt_path)).unwrap();
    assert_eq!(failed_check(&r), "chain");
}

#[test]
fn manifest_rules_are_enforced_at_seal_time() {
    // The writer refuses what the reader would reject.
    let (mut m, _) = manifest_for(&Spec::default());
    m.chain.sequence = 3; // no previous
    assert!(m.to_canonical_bytes().is_err());
    let (mut m, _) = manifest_for(&Spec::default());
    m.job.finished_at = "2026-01-02T03:05:06.5Z".into();
    assert!(m.to_canonical_bytes().is_err());
    let (mut m, _) = manifest_for(&Spec::default());
    m.outputs.reverse();
    assert!(m.to_canonical_bytes().is_err());
    let (mut m, _) = manifest_for(&Spec::default());
    m.outputs[0].path = "model.bin".into();
    assert!(m.to_canonical_bytes().is_err());
    let (mut m, _) = manifest_for(&Spec::default());
    m.metrics.insert("x".into(), f64::NAN);
    assert!(m.to_canonical_bytes().is_err());
}

#[test]
fn sandbox_summary_must_agree_with_the_sealed_record() {
    let dir = tempfile::tempdir().unwrap();
    let record = |total: u64| common::sandbox_record(total, total);
    let strict = Policy::from_toml_str(
        "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"none\"]\n[egress]\nmust_be_zero = true\nmax_blocked_attempts = 0\n",
    )
    .unwrap();
    let opts = VerifyOptions {
        policy: Some(strict),
        ..VerifyOptions::at(VerifyAt::ReceiptTime)
    };

    let good = dir.path().join("good.zip");
    build(
        &good,
        &Spec {
            sandbox: Some(("default", true, 0, record(0))),
            ..Spec::default()
        },
    );
    let r = verify_artifact(&good, &opts).unwrap();
    assert_eq!(r.verdict, Verdict::Unattested, "{}", r.to_table());

    // The summary hides 7 blocked attempts that the record shows.
    let lying = dir.path().join("lying.zip");
    build(
        &lying,
        &Spec {
            sandbox: Some(("default", true, 0, record(7))),
            ..Spec::default()
        },
    );
    assert_eq!(
        failed_check(&verify_artifact(&lying, &opts).unwrap()),
        "governance"
    );

    // An honest record of 7 attempts fails a policy allowing none.
    let honest = dir.path().join("honest.zip");
    build(
        &honest,
        &Spec {
            sandbox: Some(("default", true, 7, record(7))),
            ..Spec::default()
        },
    );
    let r = verify_artifact(&honest, &opts).unwrap();
    assert_eq!(failed_check(&r), "policy");
    assert!(r.reason.unwrap().contains("egress.max_blocked_attempts"));

    // Summary and record agree on 0, but the record's own parts count 7
    // attempts: the verifier re-adds the parts.
    let forged = dir.path().join("forged.zip");
    build(
        &forged,
        &Spec {
            sandbox: Some(("default", true, 0, common::sandbox_record(7, 0))),
            ..Spec::default()
        },
    );
    let r = verify_artifact(&forged, &opts).unwrap();
    assert_eq!(failed_check(&r), "governance");
    assert!(
        r.reason.clone().unwrap().contains("blocked_total is 0"),
        "{}",
        r.to_table()
    );

    // A record that is not a whole sandbox record (four keys only).
    let partial = dir.path().join("partial.zip");
    build(
        &partial,
        &Spec {
            sandbox: Some((
                "default",
                true,
                0,
                b"{\"schema\":\"kolm.sandbox-record.v1\",\"profile\":\"default\",\"blocked_total\":0,\"egress_blocked\":true}".to_vec(),
            )),
            ..Spec::default()
        },
    );
    assert_eq!(
        failed_check(&verify_artifact(&partial, &opts).unwrap()),
        "governance"
    );
}
