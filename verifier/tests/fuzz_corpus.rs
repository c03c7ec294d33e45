//! Replays every committed fuzz corpus file through its parser, so the corpus
//! (seeds plus any crash reproducers added later) is exercised on every test
//! run, without the fuzzing toolchain.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Cursor;
use std::path::PathBuf;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            out.push((p.clone(), std::fs::read(&p).unwrap()));
        }
    }
    assert!(!out.is_empty(), "empty corpus {}", dir.display());
    out
}

#[test]
fn container_corpus() {
    for (_, data) in corpus("container") {
        let mut cur = Cursor::new(&data);
        if let Ok(zip) = kolm_format::container::read_canonical_zip(&mut cur) {
            for e in &zip.entries {
                let _ = kolm_format::container::hash_entry(&mut cur, e);
            }
        }
    }
}

#[test]
fn manifest_corpus() {
    for (_, data) in corpus("manifest") {
        if let Ok(m) = kolm_format::manifest::Manifest::from_canonical_bytes(&data) {
            assert_eq!(m.to_canonical_bytes().unwrap(), data);
        }
        let _ = kolm_format::evidence::EvidenceIndex::from_canonical_bytes(&data);
    }
}

#[test]
fn receipt_corpus() {
    for (_, data) in corpus("receipt") {
        let _ = kolm_format::receipt::payload(&data);
        let _ = kolm_format::receipt::verify(&data, b"{}", &[0u8; 32]);
    }
}

#[test]
fn artifact_corpus() {
    let opts = kolm_verifier::artifact::VerifyOptions::default();
    for (p, data) in corpus("artifact") {
        let r = kolm_verifier::artifact::verify_artifact_reader(
            &p.display().to_string(),
            &mut Cursor::new(&data),
            &opts,
        );
        assert!(r.is_ok());
    }
}

#[test]
fn evidence_corpora() {
    for (_, data) in corpus("nitro") {
        let _ = kolm_verifier::nitro::parse_nitro_document(&data);
    }
    for (_, data) in corpus("snp") {
        let _ = kolm_verifier::snp::parse_snp_report(&data);
    }
    for (_, data) in corpus("tdx_quote") {
        let _ = kolm_verifier::tdx::parse_tdx_quote(&data);
    }
    for (_, data) in corpus("tdx_collateral") {
        let _ = kolm_verifier::tdx::parse_tdx_collateral(&data);
    }
    for (_, data) in corpus("azure") {
        let _ = kolm_verifier::azure::parse_azure_evidence(&data);
        let _ = kolm_verifier::azure::hcl::HclReport::parse(&data);
        let _ = kolm_verifier::azure::tpm::TpmQuote::parse(&data);
    }
}
