//! Replays every committed fuzz corpus file (`fuzz/corpus/<target>/*`)
//! through the parsers of its cargo-fuzz target, without the fuzzing
//! toolchain, and checks each file's outcome against its line in
//! `fuzz/expected/<target>.txt`. A corpus file without a line, or a line
//! without a file, fails the test; so does any changed verdict.
//!
//! Line format: `<file name> <verdict>`, where a verdict is `ok` or
//! `err <Class>` (the error's variant name: its `Debug` form up to the first
//! `(`, `{` or space, so reworded messages do not matter). Targets that run
//! several parsers on each file give one `<parser> <verdict>` per parser,
//! separated by `; `. The artifact target gives the report's verdict and, when
//! rejected, the id of the first failed check. Lines starting with `#` are
//! comments.
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

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::Cursor;
use std::path::PathBuf;

use kolm_format::container::{hash_entry, read_canonical_zip};
use kolm_format::evidence::EvidenceIndex;
use kolm_format::manifest::Manifest;
use kolm_format::sandbox_record::SandboxRecord;
use kolm_verifier::artifact::{VerifyAt, VerifyOptions, verify_artifact_reader};

const REGENERATE: &str = "KOLM_REGENERATE_FUZZ_EXPECTED";

/// Whether this run writes the expected files instead of checking them.
fn regenerating() -> bool {
    std::env::var_os(REGENERATE).is_some_and(|v| v == "1")
}

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The corpus of `target` as (file name, bytes), sorted by name.
fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = fuzz_dir().join("corpus").join(target);
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_file() {
            let name = p.file_name().unwrap().to_str().unwrap().to_owned();
            assert!(
                !name.is_empty() && !name.contains(char::is_whitespace),
                "{}: corpus file names may not contain whitespace",
                p.display()
            );
            out.push((name, std::fs::read(&p).unwrap()));
        }
    }
    assert!(!out.is_empty(), "empty corpus {}", dir.display());
    out.sort();
    out
}

/// An error's class: its `Debug` form up to the first `(`, `{` or space
/// (the variant name for the error enums here).
fn class(e: &impl Debug) -> String {
    let debug = format!("{e:?}");
    let end = debug
        .find(|c: char| c == '(' || c == '{' || c.is_whitespace())
        .unwrap_or(debug.len());
    debug[..end].to_owned()
}

fn verdict<T, E: Debug>(r: &Result<T, E>) -> String {
    match r {
        Ok(_) => "ok".to_owned(),
        Err(e) => format!("err {}", class(e)),
    }
}

/// One `<parser> <verdict>` per parser.
fn per_parser(results: &[(&str, String)]) -> String {
    results
        .iter()
        .map(|(parser, v)| format!("{parser} {v}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Runs `outcome` on every corpus file of `target` and compares with (or,
/// under `KOLM_REGENERATE_FUZZ_EXPECTED=1`, writes) the expected file.
fn replay(target: &str, outcome: impl Fn(&str, &[u8]) -> String) {
    let got: BTreeMap<String, String> = corpus(target)
        .into_iter()
        .map(|(name, data)| {
            let v = outcome(&name, &data);
            (name, v)
        })
        .collect();
    let path = fuzz_dir().join("expected").join(format!("{target}.txt"));

    if regenerating() {
        let mut text = format!(
            "# Expected outcome of each fuzz/corpus/{target}/ file (format: \
             verifier/tests/fuzz_corpus.rs).\n# Regenerate: {REGENERATE}=1 cargo test \
             -p kolm-verifier --test fuzz_corpus\n"
        );
        for (name, v) in &got {
            text.push_str(&format!("{name} {v}\n"));
        }
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        eprintln!("regenerated {}", path.display());
        return;
    }

    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (regenerate with {REGENERATE}=1 cargo test -p kolm-verifier --test fuzz_corpus)",
            path.display()
        )
    });
    let mut want = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, v) = line
            .split_once(' ')
            .unwrap_or_else(|| panic!("{}:{}: no verdict: {line:?}", path.display(), i + 1));
        let previous = want.insert(name.to_owned(), v.to_owned());
        assert!(
            previous.is_none(),
            "{}:{}: second line for {name}",
            path.display(),
            i + 1
        );
    }

    let mut problems = Vec::new();
    for (name, v) in &got {
        match want.get(name) {
            None => problems.push(format!("{name}: no expected line (outcome: {v})")),
            Some(w) if w != v => problems.push(format!("{name}: expected `{w}`, got `{v}`")),
            Some(_) => {}
        }
    }
    for name in want.keys().filter(|n| !got.contains_key(*n)) {
        problems.push(format!("{name}: expected line but no corpus file"));
    }
    assert!(
        problems.is_empty(),
        "{}:\n  {}\n(after a deliberate change: {REGENERATE}=1 cargo test -p kolm-verifier \
         --test fuzz_corpus, and review the diff)",
        path.display(),
        problems.join("\n  ")
    );
}

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
fn checkpoint_corpus() {
    use kolm_format::checkpoint::{Checkpoint, StateFile, read_tensors};
    const CAP: u64 = 1 << 20;
    // As the fuzz target: a u32 little-endian length, that many bytes of
    // state.json, then the tensor file (short inputs are all state).
    fn split(data: &[u8]) -> (&[u8], &[u8]) {
        let Some((len, rest)) = data.split_first_chunk::<4>() else {
            return (data, &[]);
        };
        let n = u32::from_le_bytes(*len) as usize;
        if n <= rest.len() {
            rest.split_at(n)
        } else {
            (rest, &[])
        }
    }
    replay("checkpoint", |_, data| {
        let (state, tensors) = split(data);
        let both = Checkpoint::from_bytes(state, tensors, CAP);
        if let Ok(c) = &both {
            // Whatever is accepted re-writes to the same bytes.
            let (s, t) = c.to_bytes().unwrap();
            assert_eq!((s.as_slice(), t.as_slice()), (state, tensors));
        }
        per_parser(&[
            ("state", verdict(&StateFile::from_json_bytes(state))),
            ("tensors", verdict(&read_tensors(tensors, CAP))),
            ("checkpoint", verdict(&both)),
        ])
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
        // Replayed by enclave/tests/transport_fuzz_corpus.rs (the verifier never links the enclave).
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
