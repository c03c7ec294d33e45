//! The replay of committed cargo-fuzz corpora (`fuzz/corpus/<target>/*`)
//! without the fuzzing toolchain: each file's outcome is checked against its
//! line in `fuzz/expected/<target>.txt`. A corpus file without a line, or a
//! line without a file, fails; so does any changed verdict. Used by each
//! crate that owns a fuzzed parser (the verifier's, the transport's, the
//! trainer's checkpoints), so every target is replayed where its code lives.
//!
//! Line format: `<file name> <verdict>`, where a verdict is `ok` or
//! `err <Class>` (the error's variant name: its `Debug` form up to the first
//! `(`, `{` or space, so reworded messages do not matter). Targets that run
//! several parsers on each file give one `<parser> <verdict>` per parser,
//! separated by `; ` ([`per_parser`]). Lines starting with `#` are comments.
//!
//! After adding corpus files, or after a deliberate verdict change, run the
//! owning test with `KOLM_REGENERATE_FUZZ_EXPECTED=1`, then review the diff:
//! a valid sample must stay `ok`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::PathBuf;

pub const REGENERATE: &str = "KOLM_REGENERATE_FUZZ_EXPECTED";

/// Whether this run writes the expected files instead of checking them.
pub fn regenerating() -> bool {
    std::env::var_os(REGENERATE).is_some_and(|v| v == "1")
}

/// The `fuzz/` folder of the workspace.
pub fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The corpus of `target` as (file name, bytes), sorted by name.
pub fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
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
pub fn class(e: &impl Debug) -> String {
    let debug = format!("{e:?}");
    let end = debug
        .find(|c: char| c == '(' || c == '{' || c.is_whitespace())
        .unwrap_or(debug.len());
    debug[..end].to_owned()
}

/// `ok`, or `err <Class>`.
pub fn verdict<T, E: Debug>(r: &Result<T, E>) -> String {
    match r {
        Ok(_) => "ok".to_owned(),
        Err(e) => format!("err {}", class(e)),
    }
}

/// One `<parser> <verdict>` per parser.
pub fn per_parser(results: &[(&str, String)]) -> String {
    results
        .iter()
        .map(|(parser, v)| format!("{parser} {v}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Runs `outcome` on every corpus file of `target` and compares with (or,
/// under `KOLM_REGENERATE_FUZZ_EXPECTED=1`, writes) the expected file.
pub fn replay(target: &str, outcome: impl Fn(&str, &[u8]) -> String) {
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
             testkit/src/fuzz_corpus.rs).\n# Regenerate: {REGENERATE}=1 and the test that \
             replays {target}\n"
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
            "{}: {e} (regenerate: {REGENERATE}=1 and the test that replays {target})",
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
        "{}:\n  {}\n(after a deliberate change: {REGENERATE}=1 and the test that replays \
         {target}, and review the diff)",
        path.display(),
        problems.join("\n  ")
    );
}
