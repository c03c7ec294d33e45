//! Test vectors: RFC 8785 examples, multiformats CID examples, and the frozen
//! receipt v1 vector in `tests/vectors/receipt-v1/` (regenerate only for a new
//! spec version: `KOLM_REGENERATE_VECTORS=1 cargo test --test vectors`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::io::Cursor;
use std::path::PathBuf;

use cid::Cid;
use kolm_format::binding;
use kolm_format::container;
use kolm_format::content_id::{ContentId, ContentIdError};
use kolm_format::jcs;
use kolm_format::manifest::Manifest;
use multihash::Multihash;
use sha2::{Digest, Sha256};

fn jcs_of(input: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(input).unwrap();
    String::from_utf8(jcs::to_canonical_vec(&v).unwrap()).unwrap()
}

#[test]
fn rfc8785_section_3_2_2_example() {
    let input = r#"{
        "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
        "literals": [null, true, false]
    }"#;
    let want = "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\"string\":\"€$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}";
    assert_eq!(jcs_of(input), want);
    // And those bytes are accepted as canonical; the input is not.
    jcs::parse_canonical(want.as_bytes()).unwrap();
    assert!(jcs::parse_canonical(input.as_bytes()).is_err());
}

#[test]
fn rfc8785_section_3_2_3_sorting() {
    let input = r#"{
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\ud83d\ude00": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis"
    }"#;
    let out = jcs_of(input);
    let keys: Vec<String> = {
        // Order of keys as written in the canonical output.
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let mut order: Vec<(usize, String)> = v
            .as_object()
            .unwrap()
            .keys()
            .map(|k| {
                (
                    out.find(&serde_json::to_string(k).unwrap()).unwrap(),
                    k.clone(),
                )
            })
            .collect();
        order.sort();
        order.into_iter().map(|(_, k)| k).collect()
    };
    // RFC 8785 3.2.3: sorted by UTF-16 code units.
    let want = [
        "\r",
        "1",
        "\u{80}",
        "\u{f6}",
        "\u{20ac}",
        "\u{1f600}",
        "\u{fb33}",
    ];
    assert_eq!(keys, want);
}

#[test]
fn rfc8785_appendix_b_numbers() {
    // IEEE-754 bit patterns and their canonical spelling (RFC 8785 Appendix B).
    let cases: [(u64, &str); 12] = [
        (0x0000000000000000, "0"),
        (0x8000000000000000, "0"),
        (0x0000000000000001, "5e-324"),
        (0x8000000000000001, "-5e-324"),
        (0x7fefffffffffffff, "1.7976931348623157e+308"),
        (0xffefffffffffffff, "-1.7976931348623157e+308"),
        (0x4340000000000000, "9007199254740992"),
        (0xc340000000000000, "-9007199254740992"),
        (0x4430000000000000, "295147905179352830000"),
        (0x44b52d02c7e14af5, "9.999999999999997e+22"),
        (0x44b52d02c7e14af6, "1e+23"),
        (0x3eb0c6f7a0b5ed8d, "0.000001"),
    ];
    for (bits, want) in cases {
        let got = String::from_utf8(jcs::to_canonical_vec(&f64::from_bits(bits)).unwrap()).unwrap();
        assert_eq!(got, want, "{bits:#018x}");
    }
}

#[test]
fn multiformats_cid_examples() {
    // The multihash README example: sha2-256("multihash").
    let d = Sha256::digest(b"multihash");
    let mh = Multihash::<64>::wrap(0x12, &d).unwrap();
    assert_eq!(
        hex::encode(mh.to_bytes()),
        "12209cbc07c3f991725836a3aa2a581ca2029198aa420b9d99bc0e131d9f3e2cbe47"
    );
    // The widely published CIDv1 (raw codec) of "hello world".
    let mh = Multihash::<64>::wrap(0x12, &Sha256::digest(b"hello world")).unwrap();
    assert_eq!(
        Cid::new_v1(0x55, mh).to_string(),
        "bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e"
    );
    // kolm uses the json codec (0x0200); computed independently with Python's
    // hashlib + base64.b32encode.
    let id = ContentId::for_json(b"{}");
    assert_eq!(
        id.to_string(),
        "bagaaieraiqjw7i2vwntyuekgvulpp2det2kpwt6cd7tx5ayqybqpmhfk76fa"
    );
    assert_eq!(id.sha256(), <[u8; 32]>::from(Sha256::digest(b"{}")));
    assert_eq!(id.to_string().parse::<ContentId>().unwrap(), id);
}

/// kolm writes and reads CIDs with its own few lines (kolm_format::content_id);
/// the multiformats `cid` crate is the independent oracle, over many digests
/// (every length of base32 tail and every byte value appear).
#[test]
fn content_ids_agree_with_the_cid_crate() {
    for i in 0u32..512 {
        let d: [u8; 32] = Sha256::digest(i.to_le_bytes()).into();
        let ours = ContentId::from_sha256(d);
        let theirs = Cid::new_v1(0x0200, Multihash::<64>::wrap(0x12, &d).unwrap());
        assert_eq!(ours.to_string(), theirs.to_string());
        assert_eq!(ours.to_bytes(), theirs.to_bytes());
        assert_eq!(theirs.to_string().parse::<ContentId>().unwrap(), ours);
    }
}

#[test]
fn content_id_parsing_is_strict() {
    let raw = "bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e";
    assert_eq!(raw.parse::<ContentId>(), Err(ContentIdError::Codec(0x55)));
    let upper = "BAGAAIERAIQJW7I2VWNTYUEKGVULPP2DET2KPWT6CD7TX5AYQYBQPMHFK76FA";
    assert!(matches!(
        upper.parse::<ContentId>(),
        Err(ContentIdError::NotCanonical { .. })
    ));
    assert!(matches!(
        "bnot-a-cid".parse::<ContentId>(),
        Err(ContentIdError::Malformed(_))
    ));
    // CIDv0 (base58 "Qm...") is refused.
    assert!(
        "QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG"
            .parse::<ContentId>()
            .is_err()
    );
}

#[test]
fn binding_vector() {
    let id = ContentId::for_json(b"{}");
    let rd = binding::report_data(&id);
    let mut h = sha2::Sha512::new();
    h.update(b"kolm/receipt/v1/report-data\0");
    h.update(id.to_bytes());
    assert_eq!(rd.as_slice(), h.finalize().as_slice());
    // version 0x01, codec 0x0200 as varint 0x80 0x04, multihash 0x12 0x20 + 32 bytes.
    assert_eq!(id.to_bytes()[..5], [0x01, 0x80, 0x04, 0x12, 0x20]);
    assert_eq!(id.to_bytes().len(), 37);
}

fn vector_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/receipt-v1")
}

#[test]
fn receipt_v1_vector_is_frozen() {
    let dir = tempfile::tempdir().unwrap();
    let built = common::build_default(dir.path());
    let bytes = std::fs::read(&built).unwrap();
    let mut cur = Cursor::new(bytes.clone());
    let zip = container::read_canonical_zip(&mut cur).unwrap();
    let get = |cur: &mut Cursor<Vec<u8>>, n: &str| {
        container::read_entry(cur, zip.entry(n).unwrap(), u64::MAX).unwrap()
    };
    let manifest_bytes = get(&mut cur, "manifest.json");
    let receipt_bytes = get(&mut cur, "receipt.cose");
    let manifest = Manifest::from_canonical_bytes(&manifest_bytes).unwrap();
    let cid = manifest.content_id().unwrap();
    let summary = serde_json::json!({
        "artifact_sha256": hex::encode(Sha256::digest(&bytes)),
        "manifest_cid": cid.to_string(),
        "report_data": hex::encode(binding::report_data(&cid)),
        "signer_seed": hex::encode(common::SEED_A),
        "signer_public_key": manifest.signer.public_key.to_hex(),
    });
    let summary_text = format!("{}\n", serde_json::to_string_pretty(&summary).unwrap());
    let vd = vector_dir();
    if std::env::var_os("KOLM_REGENERATE_VECTORS").is_some() {
        std::fs::create_dir_all(&vd).unwrap();
        std::fs::write(vd.join("artifact.zip"), &bytes).unwrap();
        std::fs::write(vd.join("manifest.json"), &manifest_bytes).unwrap();
        std::fs::write(vd.join("receipt.cose"), &receipt_bytes).unwrap();
        std::fs::write(vd.join("vector.json"), &summary_text).unwrap();
    }
    assert_eq!(
        std::fs::read(vd.join("artifact.zip")).unwrap(),
        bytes,
        "artifact bytes changed"
    );
    assert_eq!(
        std::fs::read(vd.join("manifest.json")).unwrap(),
        manifest_bytes
    );
    assert_eq!(
        std::fs::read(vd.join("receipt.cose")).unwrap(),
        receipt_bytes
    );
    assert_eq!(
        std::fs::read_to_string(vd.join("vector.json")).unwrap(),
        summary_text
    );
    // The committed artifact verifies (as unattested) on its own.
    let r = kolm_verifier::artifact::verify_artifact(
        &vd.join("artifact.zip"),
        &kolm_verifier::artifact::VerifyOptions::at(kolm_verifier::artifact::VerifyAt::ReceiptTime),
    )
    .unwrap();
    assert!(
        r.status_of(kolm_verifier::check::ArtifactCheck::ReceiptSignature)
            == Some(kolm_verifier::report::CheckStatus::Pass)
    );
}

/// The receipt v2 vector (`tests/vectors/receipt-v2/`), beside the frozen
/// v1 one: the default spec sealed by kolm's writer as v2 (platform `none`,
/// so `evidence.collateral` is `[]`). Both directions: the writer
/// reproduces the committed bytes, and the committed bytes read back with
/// the v2 rules (and not with v1's). Regenerate only for a new spec
/// version: `KOLM_REGENERATE_VECTORS=1 cargo test --test vectors`.
#[test]
fn receipt_v2_vector_is_frozen() {
    use kolm_format::evidence::EvidenceIndex;
    use kolm_format::version::SpecVersion;
    let vd = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/receipt-v2");
    let dir = tempfile::tempdir().unwrap();
    let built = std::fs::read(common::build_default_v2(dir.path())).unwrap();
    let names = [
        "artifact.zip",
        "manifest.json",
        "receipt.cose",
        "evidence-index.json",
    ];
    let read_zip = |zip_bytes: &[u8]| {
        let mut cur = Cursor::new(zip_bytes.to_vec());
        let zip = container::read_canonical_zip(&mut cur).unwrap();
        ["manifest.json", "receipt.cose", "evidence/index.json"]
            .map(|n| container::read_entry(&mut cur, zip.entry(n).unwrap(), u64::MAX).unwrap())
    };
    let [m, rc, idx] = read_zip(&built);
    if std::env::var_os("KOLM_REGENERATE_VECTORS").is_some() {
        std::fs::create_dir_all(&vd).unwrap();
        for (name, bytes) in names.iter().zip([&built, &m, &rc, &idx]) {
            std::fs::write(vd.join(name), bytes).unwrap();
        }
    }
    // Writer -> committed bytes.
    for (name, bytes) in names.iter().zip([&built, &m, &rc, &idx]) {
        assert_eq!(
            &std::fs::read(vd.join(name)).unwrap(),
            bytes,
            "{name} changed"
        );
    }
    // Committed bytes -> reader.
    let committed = std::fs::read(vd.join("artifact.zip")).unwrap();
    let [m, rc, idx] = read_zip(&committed);
    let manifest = Manifest::from_canonical_bytes(&m).unwrap();
    assert_eq!(manifest.version().unwrap(), SpecVersion::V2);
    assert_eq!(manifest.bound_collateral(), Some(&[][..]));
    assert!(
        String::from_utf8(m.clone())
            .unwrap()
            .contains("\"evidence\":{\"collateral\":[]}")
    );
    let pk = manifest.signer.public_key.0;
    kolm_format::receipt::verify_for(SpecVersion::V2, &rc, &m, &pk).unwrap();
    assert!(kolm_format::receipt::verify(&rc, &m, &pk).is_err());
    let index = EvidenceIndex::from_canonical_bytes(&idx).unwrap();
    assert_eq!(index.version().unwrap(), SpecVersion::V2);
    let cid = ContentId::for_json(&m);
    assert_eq!(index.manifest_cid, cid);
    assert_eq!(
        index.report_data.0,
        binding::report_data_for(SpecVersion::V2, &cid)
    );
    assert_ne!(index.report_data.0, binding::report_data(&cid));
    let mut h = sha2::Sha512::new();
    h.update(b"kolm/receipt/v2/report-data\0");
    h.update(cid.to_bytes());
    assert_eq!(index.report_data.0.as_slice(), h.finalize().as_slice());
    // Every check passes; platform `none` is unattested.
    let policy = kolm_policy::Policy::from_toml_str(
        "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"none\"]\n[egress]\nmust_be_zero = false\n",
    )
    .unwrap();
    let r = kolm_verifier::artifact::verify_artifact(
        &vd.join("artifact.zip"),
        &kolm_verifier::artifact::VerifyOptions {
            policy: Some(policy),
            ..kolm_verifier::artifact::VerifyOptions::at(
                kolm_verifier::artifact::VerifyAt::ReceiptTime,
            )
        },
    )
    .unwrap();
    assert_eq!(
        r.verdict,
        kolm_verifier::report::Verdict::Unattested,
        "{}",
        r.to_table()
    );
}
