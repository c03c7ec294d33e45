//! Replays every committed fuzz corpus file (`fuzz/corpus/<target>/*`) of
//! the verifier's and the formats' parsers through its cargo-fuzz target's
//! parsers, without the fuzzing toolchain, against
//! `fuzz/expected/<target>.txt` (`kolm_testkit::fuzz_corpus`: the line
//! format and the rules). The artifact target gives the report's verdict
//! and, when rejected, the id of the first failed check.
//!
//! After adding corpus files, or after a deliberate verdict change, regenerate
//! with `KOLM_REGENERATE_FUZZ_EXPECTED=1 cargo test -p kolm-verifier --test
//! fuzz_corpus`, then review the diff: a valid sample must stay `ok`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use std::io::Cursor;

use kolm_format::container::{hash_entry, read_canonical_zip};
use kolm_format::evidence::EvidenceIndex;
use kolm_format::manifest::Manifest;
use kolm_format::sandbox_record::SandboxRecord;
use kolm_testkit::fuzz_corpus::{class, fuzz_dir, per_parser, regenerating, replay, verdict};
use kolm_verifier::artifact::{VerifyAt, VerifyOptions, verify_artifact_reader};

#[test]
fn container_corpus() {
    replay("container", |_, data| {
        // As the fuzz target: the structure, then every entry's data.
        let mut cur = Cursor::new(data);
        let entries = read_canonical_zip(&mut cur).and_then(|zip| {
            zip.entries
                .iter()
                .try_for_each(|e| hash_entry(&mut cur, e).map(drop))
        });
        verdict(&entries)
    });
}

#[test]
fn manifest_corpus() {
    replay("manifest", |_, data| {
        let manifest = Manifest::from_canonical_bytes(data);
        if let Ok(m) = &manifest {
            // Whatever parses must re-serialise to the same bytes.
            assert_eq!(m.to_canonical_bytes().unwrap(), data);
        }
        per_parser(&[
            ("manifest", verdict(&manifest)),
            (
                "evidence-index",
                verdict(&EvidenceIndex::from_canonical_bytes(data)),
            ),
        ])
    });
}

#[test]
fn receipt_corpus() {
    replay("receipt", |_, data| {
        per_parser(&[
            ("payload", verdict(&kolm_format::receipt::payload(data))),
            (
                "verify",
                verdict(&kolm_format::receipt::verify(data, b"{}", &[0u8; 32])),
            ),
        ])
    });
}

#[test]
fn sandbox_record_corpus() {
    replay("sandbox_record", |_, data| {
        let record = SandboxRecord::from_json_bytes(data);
        if let Ok(r) = &record {
            // As the fuzz target: whatever is accepted adds up, and survives
            // a round trip.
            assert_eq!(
                Some(r.blocked_total),
                r.counted
                    .checked_total()
                    .and_then(|c| c.checked_add(r.sigsys_kills))
            );
            let again = r.to_json_bytes().unwrap();
            assert_eq!(
                SandboxRecord::from_json_bytes(&again).ok().as_ref(),
                Some(r)
            );
        }
        verdict(&record)
    });
}

#[test]
fn eval_report_corpus() {
    use kolm_format::eval_report::EvalReport;
    replay("eval_report", |_, data| {
        let r = EvalReport::from_canonical_bytes(data);
        if let Ok(r) = &r {
            // Whatever is accepted re-writes to the same bytes.
            assert_eq!(r.to_canonical_bytes().unwrap(), data);
        }
        verdict(&r)
    });
}

#[test]
fn model_card_corpus() {
    use kolm_format::model_card::{Lineage, ModelCard};
    replay("model_card", |_, data| {
        let card = ModelCard::from_canonical_bytes(data);
        if let Ok(c) = &card {
            assert_eq!(c.to_canonical_bytes().unwrap(), data);
        }
        let lineage = Lineage::from_canonical_bytes(data);
        if let Ok(l) = &lineage {
            assert_eq!(l.to_canonical_bytes().unwrap(), data);
        }
        per_parser(&[("card", verdict(&card)), ("lineage", verdict(&lineage))])
    });
}

#[test]
fn job_spec_corpus() {
    use kolm_format::job_spec::FineTuneSpec;
    replay("job_spec", |_, data| match std::str::from_utf8(data) {
        Ok(text) => verdict(&FineTuneSpec::from_toml_str(text)),
        Err(_) => "not utf-8".to_string(),
    });
}

#[test]
fn artifact_corpus() {
    let opts = VerifyOptions::at(VerifyAt::ReceiptTime);
    replay("artifact", |name, data| {
        match verify_artifact_reader(name, &mut Cursor::new(data), &opts) {
            Err(e) => format!("err {}", class(&e)),
            Ok(report) => {
                let verdict = format!("{:?}", report.verdict).to_lowercase();
                match report.first_failure() {
                    Some(check) => format!("{verdict} {}", check.id),
                    None => verdict,
                }
            }
        }
    });
}

#[test]
fn nitro_corpus() {
    replay("nitro", |_, data| {
        verdict(&kolm_verifier::nitro::parse_nitro_document(data))
    });
}

#[test]
fn snp_corpus() {
    replay("snp", |_, data| {
        verdict(&kolm_verifier::snp::parse_snp_report(data))
    });
}

#[test]
fn tdx_quote_corpus() {
    replay("tdx_quote", |_, data| {
        verdict(&kolm_verifier::tdx::parse_tdx_quote(data))
    });
}

#[test]
fn tdx_collateral_corpus() {
    replay("tdx_collateral", |_, data| {
        verdict(&kolm_verifier::tdx::parse_tdx_collateral(data))
    });
}

#[test]
fn azure_corpus() {
    use kolm_verifier::azure;
    replay("azure", |_, data| {
        per_parser(&[
            ("evidence", verdict(&azure::parse_azure_evidence(data))),
            ("hcl", verdict(&azure::hcl::HclReport::parse(data))),
            ("tpm", verdict(&azure::tpm::TpmQuote::parse(data))),
        ])
    });
}

/// Every fuzz target has a corpus and an expected file, and every corpus
/// (and expected file) belongs to a fuzz target.
#[test]
fn every_fuzz_target_is_replayed() {
    let replayed = [
        "artifact",
        "azure",
        "checkpoint",
        "container",
        "eval_report",
        "job_spec",
        "manifest",
        "model_card",
        "nitro",
        "receipt",
        "sandbox_record",
        "snp",
        "tdx_collateral",
        "tdx_quote",
        // Replayed where their parsers live: enclave/tests/transport_fuzz_corpus.rs,
        // train/tests/checkpoint_fuzz_corpus.rs.
        "transport",
    ];
    let stems = |dir: &str, ext: Option<&str>| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(fuzz_dir().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| ext.is_none_or(|x| p.extension().is_some_and(|e| e == x)))
            .map(|p| p.file_stem().unwrap().to_str().unwrap().to_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(stems("fuzz_targets", Some("rs")), replayed);
    assert_eq!(stems("corpus", None), replayed);
    if !regenerating() {
        assert_eq!(stems("expected", Some("txt")), replayed);
    }
}
