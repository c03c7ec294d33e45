//! Every hardware layout is written once, in `kolm-tee-layouts` (issue 21):
//! no other Rust file of the workspace spells the size of an SEV-SNP
//! report or a TD report, and no TDX file spells the size of a QE report.
//!
//! The rule, exactly. The scanner walks every `.rs` file under the
//! workspace root except `target/` directories, hidden directories and
//! `tee-layouts/`, and splits each file into tokens: maximal runs of ASCII
//! letters, digits and `_`. A token is a *number* when it parses as a Rust
//! integer literal (decimal, or `0x`/`0o`/`0b`, `_` separators allowed,
//! an optional integer-type suffix such as `usize`); its value is what
//! counts, so a size spelled in decimal, in upper- or lower-case hex, with
//! `_` separators or with a `usize` suffix is the same size.
//!
//! 1. A number equal to the size of the SEV-SNP `ATTESTATION_REPORT`, of TD
//!    report 1.0 or of TD report 1.5 is refused **anywhere** in the file:
//!    code, string literals and comments alike (a message or a doc comment
//!    that spells the size restates the layout; say it with the constant,
//!    `{REPORT_LEN}`, or in words).
//! 2. A number equal to the size of the QE report is refused in the **code**
//!    (not in comments, string or character literals) of every file whose
//!    path contains `tdx`. Anywhere else the same number is far more often a
//!    P-384 / SHA-384 name or an unrelated count (a thread-block size), so it
//!    is not looked for there.
//!
//! Hex digests and other long alphanumeric runs are single tokens, so they
//! never match. The sizes themselves are taken from `kolm-tee-layouts`, so
//! this file spells none of them. A failure lists each `file:line`, the
//! token and the rule.

use std::path::{Path, PathBuf};

use kolm_tee_layouts::snp::report;
use kolm_tee_layouts::tdx::{qe_report, td_report10, td_report15};

/// Rule 1: refused anywhere.
const EVERYWHERE: [(usize, &str); 3] = [
    (report::SIZE, "SEV-SNP ATTESTATION_REPORT size"),
    (td_report10::SIZE, "TD report 1.0 size"),
    (td_report15::SIZE, "TD report 1.5 size"),
];

/// Rule 2: refused in the code of files whose path contains `tdx`.
const IN_TDX_CODE: [(usize, &str); 1] = [(qe_report::SIZE, "QE report size")];

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hit {
    line: usize,
    token: String,
    what: &'static str,
}

/// The value of `token` as a Rust integer literal, if it is one.
fn integer_value(token: &str) -> Option<u128> {
    if !token.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    const SUFFIXES: [&str; 12] = [
        "usize", "isize", "u128", "i128", "u64", "i64", "u32", "i32", "u16", "i16", "u8", "i8",
    ];
    let (radix, digits) = match token.get(..2) {
        Some("0x" | "0X") => (16, &token[2..]),
        Some("0o") => (8, &token[2..]),
        Some("0b") => (2, &token[2..]),
        _ => (10, token),
    };
    let digits = SUFFIXES
        .iter()
        .find_map(|s| digits.strip_suffix(s))
        .unwrap_or(digits);
    let digits: String = digits.chars().filter(|&c| c != '_').collect();
    if digits.is_empty() {
        return None;
    }
    u128::from_str_radix(&digits, radix).ok()
}

/// Which part of a source file a byte belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Code,
    /// Comments, string, byte-string and character literals.
    Text,
}

/// Classifies every byte of `src` as code or text (comments and literals).
/// A small Rust lexer: line and nested block comments, `"..."` with
/// escapes, raw strings `r#"..."#` (and `b`/`c` prefixes), character
/// literals (told apart from lifetimes).
fn classify(src: &[u8]) -> Vec<Part> {
    let mut parts = vec![Part::Code; src.len()];
    let mut i = 0;
    let at = |j: usize| src.get(j).copied().unwrap_or(0);
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    while i < src.len() {
        let start = i;
        let c = at(i);
        if c == b'/' && at(i + 1) == b'/' {
            while i < src.len() && at(i) != b'\n' {
                i += 1;
            }
        } else if c == b'/' && at(i + 1) == b'*' {
            let mut depth = 0usize;
            while i < src.len() {
                if at(i) == b'/' && at(i + 1) == b'*' {
                    depth += 1;
                    i += 2;
                } else if at(i) == b'*' && at(i + 1) == b'/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if (c == b'r' || ((c == b'b' || c == b'c') && at(i + 1) == b'r'))
            && (i == 0 || !ident(at(i - 1)))
            && {
                let mut j = i + if c == b'r' { 1 } else { 2 };
                while at(j) == b'#' {
                    j += 1;
                }
                at(j) == b'"'
            }
        {
            let mut j = i + if c == b'r' { 1 } else { 2 };
            let mut hashes = 0;
            while at(j) == b'#' {
                hashes += 1;
                j += 1;
            }
            j += 1; // the opening quote
            loop {
                if j >= src.len() {
                    break;
                }
                if at(j) == b'"' && (1..=hashes).all(|k| at(j + k) == b'#') {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
        } else if c == b'"' {
            i += 1;
            while i < src.len() && at(i) != b'"' {
                i += if at(i) == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == b'\'' {
            // A character literal: 'x' or '\..'; otherwise a lifetime.
            let close = if at(i + 1) == b'\\' {
                (i + 2..src.len().min(i + 12)).find(|&j| at(j) == b'\'')
            } else {
                // One (possibly multi-byte UTF-8) character, then a quote.
                let len = match at(i + 1) {
                    0xF0.. => 4,
                    0xE0.. => 3,
                    0xC0.. => 2,
                    _ => 1,
                };
                Some(i + 1 + len).filter(|&j| at(j) == b'\'')
            };
            match close {
                Some(j) if at(i + 1) != b'\'' => i = j + 1,
                _ => {
                    i += 1;
                    continue;
                }
            }
        } else {
            i += 1;
            continue;
        }
        for p in parts.iter_mut().take(i.min(src.len())).skip(start) {
            *p = Part::Text;
        }
    }
    parts
}

/// The findings in `src`, a file at `path`.
fn scan(path: &str, src: &str) -> Vec<Hit> {
    let bytes = src.as_bytes();
    let parts = classify(bytes);
    let tdx_file = path.to_ascii_lowercase().contains("tdx");
    let mut hits = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'\n' {
            line += 1;
        }
        if !(b.is_ascii_alphanumeric() || b == b'_') {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        let token = &src[start..i];
        let Some(value) = integer_value(token) else {
            continue;
        };
        let rule1 = EVERYWHERE.iter().find(|(v, _)| *v as u128 == value);
        let rule2 = (tdx_file && parts[start] == Part::Code)
            .then(|| IN_TDX_CODE.iter().find(|(v, _)| *v as u128 == value))
            .flatten();
        if let Some((_, what)) = rule1.or(rule2) {
            hits.push(Hit {
                line,
                token: token.to_owned(),
                what,
            });
        }
    }
    hits
}

/// Every `.rs` file under `dir`, skipping `target/`, hidden directories and
/// `tee-layouts/`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name == "target" || name == "tee-layouts" || name.starts_with('.') {
                continue;
            }
            rust_files(&path, out);
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_file_outside_tee_layouts_spells_a_layout_size() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("kolm-tests lives one level below the workspace root")
        .to_path_buf();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() > 100, "only {} .rs files found", files.len());
    let mut found = Vec::new();
    for file in &files {
        let rel = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        let Ok(src) = std::fs::read_to_string(file) else {
            continue;
        };
        for hit in scan(&rel, &src) {
            found.push(format!(
                "{rel}:{}: `{}` ({}; use kolm_tee_layouts)",
                hit.line, hit.token, hit.what
            ));
        }
    }
    assert!(
        found.is_empty(),
        "hardware layout sizes spelled outside kolm-tee-layouts (rules in tests/tests/layouts_once.rs):\n{}",
        found.join("\n")
    );
}

/// The scanner itself, on text written here (the sizes are formatted in,
/// so this file spells none of them).
#[test]
fn the_scanner_finds_a_re_added_literal() {
    let snp = report::SIZE;
    let td10 = td_report10::SIZE;
    let td15 = td_report15::SIZE;
    let qe = qe_report::SIZE;
    let hits = |path: &str, src: &str| -> Vec<(usize, String)> {
        scan(path, src)
            .into_iter()
            .map(|h| (h.line, h.token))
            .collect()
    };
    // Rule 1, in any form and any part of a file.
    let src = format!(
        "let a = [0u8; {snp}];\nlet b = {snp:#x};\nlet c = {snp:#X}usize;\n// a {td10}-byte body\nlet s = \"{td15} bytes\";\n"
    );
    let upper_hex = format!("0x{snp:X}");
    assert_eq!(
        hits("verifier/src/x.rs", &src),
        vec![
            (1, snp.to_string()),
            (2, format!("{snp:#x}")),
            (3, format!("{upper_hex}usize")),
            (4, td10.to_string()),
            (5, td15.to_string()),
        ]
    );
    let separated = format!("let a = 1_{:03};", snp - 1000);
    assert_eq!(hits("a.rs", &separated).len(), 1, "{separated}");
    // Not numbers, or other numbers.
    for clean in [
        format!("let a = {snp}0; let b = a{snp}; let h = \"ab{td10}cd\";"),
        format!("let x = {}; // {}", snp + 1, snp - 1),
        "let p = \"P-384\"; // SHA-384".to_owned(),
    ] {
        assert!(hits("a.rs", &clean).is_empty(), "{clean}");
    }
    // Rule 2: the QE report size in the code of a TDX file only.
    let qe_code = format!("let qe = [0u8; {qe}]; // QE report ({qe})\nlet s = \"{qe}\";\n");
    assert_eq!(
        hits("enclave/src/attest/sim/tdx.rs", &qe_code),
        vec![(1, qe.to_string())]
    );
    assert!(hits("kernels/src/ops/attention.rs", &qe_code).is_empty());
    assert!(
        hits(
            "verifier/tests/tdx_x.rs",
            &format!("/* {qe} */ let c = '\"'; let d = \"{qe}\";")
        )
        .is_empty()
    );
    assert_eq!(
        hits(
            "verifier/tests/tdx_x.rs",
            &format!("fn f<'a>(x: &'a [u8]) {{ x[..{qe}]; }}")
        )
        .len(),
        1,
        "a lifetime is not a character literal"
    );
    let raw = format!("let r = r#\"{qe} \"quoted\" \"#; let n = {qe};");
    assert_eq!(hits("tdx.rs", &raw).len(), 1, "{raw}");
}
