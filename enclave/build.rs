//! Compiles the job sandbox's seccomp filters from `seccomp/policy.json` at
//! build time (Firecracker's `resources/seccomp` approach): the policy is
//! data with a comment on every rule, and the binary carries the compiled
//! BPF, never a JSON parser for it.
//!
//! `policy.json` is the one source for every architecture. It holds
//! `comment`, `arches` (each supported architecture with a comment saying
//! what differs on it) and `filters` (the six named filters in seccompiler's
//! JSON format). For each architecture this composes seccompiler's input from
//! `filters`: a rule with an `arches` list is kept only for the architectures
//! it names (the key itself is removed, seccompiler does not know it), a rule
//! without one applies everywhere. Syscall names are resolved by seccompiler
//! per architecture, so a name one architecture lacks fails the build.
//!
//! Every architecture is composed and compiled, so a mistake that only
//! shows on an architecture that is not the build target still fails the
//! build. The composed inputs are written to `$OUT_DIR/seccomp/<arch>.json`
//! for review; only the target's programs go into
//! `$OUT_DIR/seccomp_filters.rs`, with the record's `filter_source`.
//! The output depends only on `policy.json` and seccompiler: key order,
//! file system order and time play no part.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use seccompiler::{BpfProgram, TargetArch};
use serde_json::{Map, Value};

/// The one policy file, relative to the crate (and as recorded).
const SOURCE: &str = "seccomp/policy.json";

/// Every architecture `policy.json` must describe, and nothing else.
const ARCHES: [(&str, TargetArch); 2] = [
    ("x86_64", TargetArch::x86_64),
    ("aarch64", TargetArch::aarch64),
];

/// Filters the policy must define, and nothing else.
const FILTERS: [&str; 6] = [
    "counted_default",
    "counted_strict",
    "deny",
    "deny_enosys",
    "deny_memfd",
    "deny_sysv_ipc",
];

fn sorted<'a>(keys: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut v: Vec<&str> = keys.collect();
    v.sort_unstable();
    v
}

fn has_comment(v: &Value) -> bool {
    v["comment"].as_str().is_some_and(|c| !c.trim().is_empty())
}

/// Reads `policy.json` and checks its shape: the three top-level keys, a
/// commented entry for each architecture in [`ARCHES`], the filters in
/// [`FILTERS`], a comment on every rule (the file is the reviewed policy),
/// and rule `arches` lists that name known architectures.
fn load(path: &Path) -> Map<String, Value> {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let doc: Value = serde_json::from_slice(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    let Value::Object(doc) = doc else {
        panic!("{}: top level must be an object", path.display());
    };
    assert_eq!(
        sorted(doc.keys().map(String::as_str)),
        ["arches", "comment", "filters"],
        "{}: top-level keys",
        path.display()
    );
    assert!(
        doc["comment"]
            .as_str()
            .is_some_and(|c| !c.trim().is_empty()),
        "{}: the top-level comment is missing",
        path.display()
    );

    let known = sorted(ARCHES.iter().map(|(a, _)| *a));
    let arches = doc["arches"]
        .as_object()
        .unwrap_or_else(|| panic!("{}: arches must be an object", path.display()));
    assert_eq!(
        sorted(arches.keys().map(String::as_str)),
        known,
        "{}: arches",
        path.display()
    );
    for (arch, entry) in arches {
        assert!(
            has_comment(entry) && entry.as_object().is_some_and(|o| o.len() == 1),
            "{}: arches.{arch} must hold exactly a non-empty comment",
            path.display()
        );
    }

    let filters = doc["filters"]
        .as_object()
        .unwrap_or_else(|| panic!("{}: filters must be an object", path.display()));
    assert_eq!(
        sorted(filters.keys().map(String::as_str)),
        sorted(FILTERS.into_iter()),
        "{}: filter names",
        path.display()
    );
    for (name, filter) in filters {
        let rules = filter["filter"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: {name}.filter must be a list", path.display()));
        for rule in rules {
            assert!(
                has_comment(rule),
                "{}: {name}: rule {rule} has no comment",
                path.display()
            );
            if let Some(only) = rule.get("arches") {
                let names: Option<Vec<&str>> = only
                    .as_array()
                    .and_then(|a| a.iter().map(Value::as_str).collect());
                let valid = names.is_some_and(|names| {
                    let mut unique = sorted(names.iter().copied());
                    unique.dedup();
                    !names.is_empty()
                        && unique.len() == names.len()
                        && names.iter().all(|a| known.contains(a))
                });
                assert!(
                    valid,
                    "{}: {name}: rule {rule}: arches must list known architectures \
                     ({known:?}), each once",
                    path.display()
                );
            }
        }
    }
    doc
}

/// seccompiler's input for `arch`: every filter with the rules that apply
/// to `arch`, without the `arches` key.
fn compose(filters: &Map<String, Value>, arch: &str) -> Value {
    let mut out = filters.clone();
    for filter in out.values_mut() {
        if let Some(Value::Array(rules)) = filter.get_mut("filter") {
            rules.retain(|rule| {
                rule.get("arches")
                    .and_then(Value::as_array)
                    .is_none_or(|only| only.iter().any(|a| a == arch))
            });
            for rule in rules.iter_mut() {
                if let Value::Object(r) = rule {
                    r.remove("arches");
                }
            }
        }
    }
    Value::Object(out)
}

fn compile(arch: &str, target: TargetArch, input: &Value) -> BTreeMap<String, BpfProgram> {
    let mut bytes = serde_json::to_vec_pretty(input).expect("a JSON value serialises");
    bytes.push(b'\n');
    let dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("seccomp");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    let composed = dir.join(format!("{arch}.json"));
    std::fs::write(&composed, &bytes)
        .unwrap_or_else(|e| panic!("writing {}: {e}", composed.display()));
    seccompiler::compile_from_json(bytes.as_slice(), target)
        .unwrap_or_else(|e| panic!("compiling {SOURCE} for {arch}: {e}"))
        .into_iter()
        .collect()
}

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed={SOURCE}");
    let doc = load(Path::new(SOURCE));
    let filters = doc["filters"]
        .as_object()
        .expect("load checked that filters is an object");
    let target_arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let mut out = String::from(
        "// @generated by enclave/build.rs from enclave/seccomp/policy.json; do not edit.\n",
    );
    let mut found = false;
    for (arch, target) in ARCHES {
        let programs = compile(arch, target, &compose(filters, arch));
        if arch != target_arch {
            continue;
        }
        found = true;
        let _ = writeln!(
            out,
            "pub(super) const FILTER_SOURCE: &str = \"seccomp/{arch}.json\";"
        );
        out.push_str("pub(super) const PROGRAMS: &[(&str, &[super::RawInsn])] = &[\n");
        for (name, program) in &programs {
            let _ = writeln!(out, "    (\"{name}\", &[");
            for insn in program {
                let _ = writeln!(
                    out,
                    "        (0x{:04x}, {}, {}, 0x{:08x}),",
                    insn.code, insn.jt, insn.jf, insn.k
                );
            }
            out.push_str("    ]),\n");
        }
        out.push_str("];\n");
    }
    if !found {
        // No filter for this architecture: the sandbox refuses to start.
        out.push_str("pub(super) const FILTER_SOURCE: &str = \"\";\n");
        out.push_str("pub(super) const PROGRAMS: &[(&str, &[super::RawInsn])] = &[];\n");
    }
    let dest = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("seccomp_filters.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("writing {}: {e}", dest.display()));
}
