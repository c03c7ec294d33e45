//! Crate-boundary checks (after Firecracker's `verify_dependencies.rs`).
//!
//! - Every workspace crate reaches only the internal crates that
//!   `docs/architecture.md` allows it ([`INTERNAL_EDGES`]).
//! - `kolm-format`, `kolm-verifier`, `kolm-policy` and the `kolm-verify`
//!   binary stay pure Rust: no async runtime, no network stack, no CUDA, no
//!   OpenSSL, no `*-sys` crate.
//! - `kolm-model` (the CPU model) reaches no CUDA, async, network or
//!   OpenSSL crate.
//! - `kolm-enclave` (the supervisor, which holds the keys) never reaches an
//!   ML crate ([`ML_CRATES`]: candle, cudarc, tokenizers, safetensors,
//!   kolm-model/train/eval/kernels): those are the job binary's,
//!   `kolm-jobs`.
//! - `kolm-format` and `kolm-enclave` never reach a TEE verifier crate
//!   (`kolm-verifier`, dcap-qvl, sev, x509-cert, rsa, p384, p256): the
//!   enclave's measured image and its SBOM carry only the format code. The
//!   one exception is `rsa` in the enclave ([`ENCLAVE_ALLOWED_VERIFIER_CRATES`]),
//!   which only the simulated TEE (`kolm-sim-tee`, the enclave's default
//!   `sim` feature) brings in.
//! - `kolm-enclave` built without its `sim` feature (as images for hardware
//!   are) reaches neither `kolm-sim-tee` nor `rsa`; the default build does
//!   reach `kolm-sim-tee` (so the check is not vacuous).
//!   `tests/tests/no_sim_build.rs` builds that binary and reads its bytes.
//! - clap and anyhow belong to binaries: no library crate of ours depends on
//!   them directly (dcap-qvl uses anyhow inside; that is its business).
//!
//! The checks read `cargo tree -e normal` (normal dependencies for the host
//! target; build and dev dependencies are not linked into what ships and are
//! not checked here).
//!
//! A failure prints each offending crate and the inverted tree that shows
//! how it got in.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use kolm_testkit::Deadline as _;

/// The most one child of these tests may take: `cargo` may wait for the shared
/// target directory and registry locks behind other builds; a hung one fails
/// with `DEADLINE` (issue 20 section 6).
const LIMIT: std::time::Duration = std::time::Duration::from_secs(900);

/// Crate families no boundary crate may depend on: the exact name, or the
/// name followed by `-`/`_` (so `tokio-util`, `hyper_util`, `openssl-probe`).
const BANNED_FAMILIES: [&str; 5] = ["tokio", "cudarc", "openssl", "reqwest", "hyper"];

/// Runtime crates that the verifier and the policy crate must never reach.
const RUNTIME_CRATES: [&str; 6] = [
    "kolm-enclave",
    "kolm-jobs",
    "kolm-host",
    "kolm-kernels",
    "kolm-transport",
    "kolm-model",
];

/// Each workspace crate and the internal crates it may reach (besides
/// itself), as drawn in `docs/architecture.md`. `kolm-testkit` and
/// `kolm-hostile` are test-only and appear in no shipped tree.
const INTERNAL_EDGES: [(&str, &[&str]); 17] = [
    ("kolm-policy", &[]),
    // No dependencies at all (no crypto, no I/O): the hardware layouts.
    ("kolm-tee-layouts", &[]),
    ("kolm-format", &["kolm-policy", "kolm-tee-layouts"]),
    (
        "kolm-verifier",
        &["kolm-format", "kolm-policy", "kolm-tee-layouts"],
    ),
    (
        "kolm-verify",
        &[
            "kolm-verifier",
            "kolm-format",
            "kolm-policy",
            "kolm-tee-layouts",
        ],
    ),
    // The one model configuration (no dependencies): the CPU model, the
    // trainers and the kernels take it.
    ("kolm-model-config", &[]),
    ("kolm-kernels", &["kolm-model-config"]),
    ("kolm-model", &["kolm-model-config"]),
    (
        "kolm-transport",
        &["kolm-format", "kolm-policy", "kolm-tee-layouts"],
    ),
    // The simulated TEE only with the enclave's `sim` feature (default).
    (
        "kolm-enclave",
        &[
            "kolm-format",
            "kolm-policy",
            "kolm-transport",
            "kolm-tee-layouts",
            "kolm-sim-tee",
        ],
    ),
    // The simulated TEE: the formats it writes, never the enclave.
    (
        "kolm-sim-tee",
        &["kolm-format", "kolm-policy", "kolm-tee-layouts"],
    ),
    // The job binary the enclave's sandbox execs: the ML crates, and
    // nothing of the supervisor (no key, no transport, no sealing).
    (
        "kolm-jobs",
        &[
            "kolm-format",
            "kolm-policy",
            "kolm-tee-layouts",
            "kolm-model",
            "kolm-model-config",
            "kolm-eval",
            "kolm-train",
            "kolm-kernels",
        ],
    ),
    (
        "kolm-host",
        &[
            "kolm-format",
            "kolm-policy",
            "kolm-verifier",
            "kolm-transport",
            "kolm-tee-layouts",
        ],
    ),
    (
        "kolm-images",
        &[
            "kolm-format",
            "kolm-verifier",
            "kolm-policy",
            "kolm-tee-layouts",
        ],
    ),
    ("kolm-testkit", &[]),
    (
        "kolm-eval",
        &["kolm-format", "kolm-policy", "kolm-tee-layouts"],
    ),
    (
        "kolm-train",
        &[
            "kolm-format",
            "kolm-policy",
            "kolm-kernels",
            // The candle layers its CPU forward shares with the model.
            "kolm-model",
            "kolm-model-config",
            "kolm-tee-layouts",
        ],
    ),
];

/// TEE verifier crates: the verifier's, never the enclave's or the format's.
const TEE_VERIFIER_CRATES: [&str; 7] = [
    "kolm-verifier",
    "dcap-qvl",
    "sev",
    "x509-cert",
    "rsa",
    "p384",
    "p256",
];

/// TEE verifier crates the enclave may link all the same, with why.
/// `rsa` generates the simulated TEE's stand-in SEV-SNP ARK and ASK keys
/// (ring cannot generate RSA keys); it verifies nothing there, and ring
/// signs with the keys. It comes in through `kolm-sim-tee` alone: a build
/// without the `sim` feature has none
/// ([`enclave_without_the_sim_feature_has_no_simulated_tee`]). Its own dependencies are none of
/// [`TEE_VERIFIER_CRATES`], so they need no entry.
const ENCLAVE_ALLOWED_VERIFIER_CRATES: [(&str, &str); 1] = [(
    "rsa",
    "RSA key generation for the simulated TEE's SEV-SNP ARK and ASK",
)];

/// The ML crates: the job binary's (`kolm-jobs`), never the supervisor's.
/// The process that holds the identity key links no model, tokenizer,
/// tensor library or CUDA binding; a name followed by `-`/`_` is of the
/// family too (`candle-nn`, `cudarc_sys`).
const ML_CRATES: [&str; 10] = [
    "kolm-jobs",
    "kolm-model",
    "kolm-train",
    "kolm-eval",
    "kolm-kernels",
    "candle-core",
    "candle",
    "cudarc",
    "tokenizers",
    "safetensors",
];

/// Crates that belong to binaries only.
const BINARY_ONLY_CRATES: [&str; 3] = ["clap", "clap_builder", "anyhow"];

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("kolm-tests lives one level below the workspace root")
        .to_path_buf()
}

fn cargo(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO"))
        .args(args)
        .current_dir(workspace_root())
        .output_within(LIMIT);
    assert!(
        output.status.success(),
        "cargo {args:?} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("cargo prints UTF-8")
}

/// Normal-dependency tree of `package`, one crate per line.
fn normal_tree(package: &str) -> String {
    cargo(&[
        "tree", "--locked", "-e", "normal", "-p", package, "--prefix", "none",
    ])
}

/// `(name, version)` of every crate in a `cargo tree --prefix none` listing.
/// Lines look like `name vX.Y.Z`, optionally followed by `(path)`,
/// `(proc-macro)` and `(*)`.
fn crates_in(tree: &str) -> BTreeSet<(String, String)> {
    tree.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next()?;
            let version = words.next()?.strip_prefix('v')?;
            Some((name.to_owned(), version.to_owned()))
        })
        .collect()
}

fn is_banned_family(name: &str) -> bool {
    BANNED_FAMILIES.iter().any(|family| {
        name.strip_prefix(family)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', '_']))
    })
}

/// `*-sys` crates reviewed and found to be pure Rust (no build script, no
/// `links`, no C): `(name, why)`. Each entry needs a reason; keep it short.
const REVIEWED_SYS_CRATES: [(&str, &str); 1] = [(
    "dirs-sys",
    "pulled in by `sev` (the SNP crate chosen in issue 3) for `dirs::cache_dir()`; \
     pure Rust over libc with no build script and no native library; the verifier \
     never calls sev's certificate cache",
)];

fn is_sys_crate(name: &str) -> bool {
    (name.ends_with("-sys") || name.ends_with("_sys"))
        && !REVIEWED_SYS_CRATES
            .iter()
            .any(|(reviewed, _)| *reviewed == name)
}

/// Rules for `kolm-verifier` and `kolm-policy`: why `name` may not appear.
fn pure_crate_violation(name: &str) -> Option<&'static str> {
    if is_banned_family(name) {
        Some("banned crate (async runtime, network, CUDA or OpenSSL)")
    } else if is_sys_crate(name) {
        Some("`*-sys` crate (native code)")
    } else if RUNTIME_CRATES.contains(&name) {
        Some("runtime crate")
    } else {
        None
    }
}

/// Every crate of `tree` that `rule` rejects, as `name version: reason`.
fn violations(
    tree: &str,
    rule: impl Fn(&str) -> Option<&'static str>,
) -> Vec<(String, String, &'static str)> {
    crates_in(tree)
        .into_iter()
        .filter_map(|(name, version)| rule(&name).map(|why| (name, version, why)))
        .collect()
}

/// Panics, listing each violation with the path that brings it in.
fn assert_no_violations(package: &str, found: &[(String, String, &'static str)]) {
    if found.is_empty() {
        return;
    }
    let mut report = format!("{package} depends on crates it must not reach:\n");
    for (name, version, why) in found {
        let spec = format!("{name}@{version}");
        let path = cargo(&[
            "tree", "--locked", "-e", "normal", "-p", package, "-i", &spec,
        ]);
        report.push_str(&format!("\n- {name} v{version}: {why}\n{path}"));
    }
    panic!("{report}");
}

fn check_pure(package: &str) {
    let tree = normal_tree(package);
    assert!(
        crates_in(&tree).iter().any(|(name, _)| name == package),
        "`cargo tree -p {package}` did not list {package} itself:\n{tree}"
    );
    assert_no_violations(package, &violations(&tree, pure_crate_violation));
}

#[test]
fn verifier_is_pure_rust_and_runtime_free() {
    check_pure("kolm-verifier");
}

#[test]
fn format_is_pure_rust_and_runtime_free() {
    check_pure("kolm-format");
}

#[test]
fn verify_cli_is_pure_rust_and_runtime_free() {
    check_pure("kolm-verify");
}

#[test]
fn eval_is_pure_rust_and_runtime_free() {
    check_pure("kolm-eval");
}

#[test]
fn every_crate_reaches_only_its_allowed_internal_crates() {
    for (package, allowed) in INTERNAL_EDGES {
        let tree = normal_tree(package);
        let found = violations(&tree, |name| {
            (name.starts_with("kolm-") && name != package && !allowed.contains(&name))
                .then_some("internal edge not in docs/architecture.md")
        });
        assert_no_violations(package, &found);
    }
}

#[test]
fn enclave_and_format_never_reach_the_tee_verifiers() {
    for package in ["kolm-enclave", "kolm-format"] {
        let tree = normal_tree(package);
        let allowed = |name: &str| {
            package == "kolm-enclave"
                && ENCLAVE_ALLOWED_VERIFIER_CRATES
                    .iter()
                    .any(|(allowed, _)| *allowed == name)
        };
        let found = violations(&tree, |name| {
            (TEE_VERIFIER_CRATES.contains(&name) && !allowed(name))
                .then_some("TEE verifier crate: the verifier's, never in the enclave image")
        });
        assert_no_violations(package, &found);
    }
}

/// Firecracker's jailer beside the VMM: the supervisor (`kolm-enclave`)
/// and the job it confines (`kolm-jobs`) are separate crates and binaries,
/// and the one that holds the keys reaches none of the ML crates.
#[test]
fn enclave_never_reaches_the_ml_crates() {
    let tree = normal_tree("kolm-enclave");
    let found = violations(&tree, |name| {
        ML_CRATES
            .iter()
            .any(|family| {
                name.strip_prefix(family)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', '_']))
            })
            .then_some("ML crate: the job binary's (kolm-jobs), never the supervisor's")
    });
    assert_no_violations("kolm-enclave", &found);
    // The job binary does reach them (the rule is not vacuous).
    let jobs = normal_tree("kolm-jobs");
    for name in ["kolm-model", "kolm-train", "candle-core", "tokenizers"] {
        assert!(
            crates_in(&jobs).iter().any(|(n, _)| n == name),
            "kolm-jobs no longer reaches {name}"
        );
    }
}

/// What the simulated TEE alone brings into the enclave: itself and its
/// RSA key generation.
const SIM_ONLY_CRATES: [&str; 2] = ["kolm-sim-tee", "rsa"];

/// A hardware image's `kolm-enclave` (`--no-default-features`: no `sim`)
/// links no simulated TEE; the default build does.
#[test]
fn enclave_without_the_sim_feature_has_no_simulated_tee() {
    let no_sim = cargo(&[
        "tree",
        "--locked",
        "--offline",
        "-e",
        "normal",
        "-p",
        "kolm-enclave",
        "--no-default-features",
        "--prefix",
        "none",
    ]);
    assert!(
        crates_in(&no_sim).iter().any(|(n, _)| n == "kolm-enclave"),
        "`cargo tree -p kolm-enclave --no-default-features` did not list kolm-enclave:\n{no_sim}"
    );
    let found: Vec<_> = crates_in(&no_sim)
        .into_iter()
        .filter(|(n, _)| SIM_ONLY_CRATES.contains(&n.as_str()))
        .collect();
    assert!(
        found.is_empty(),
        "kolm-enclave without the sim feature reaches {found:?}:\n{no_sim}"
    );
    let default = normal_tree("kolm-enclave");
    for name in SIM_ONLY_CRATES {
        assert!(
            crates_in(&default).iter().any(|(n, _)| n == name),
            "the default kolm-enclave no longer reaches {name} (the sim feature's)"
        );
    }
}

#[test]
fn libraries_never_reach_binary_only_crates() {
    for package in ["kolm-policy", "kolm-format", "kolm-verifier"] {
        let tree = cargo(&[
            "tree", "--locked", "-e", "normal", "-p", package, "--prefix", "none", "--depth", "1",
        ]);
        let found = violations(&tree, |name| {
            BINARY_ONLY_CRATES
                .contains(&name)
                .then_some("clap/anyhow belong to the binary crates")
        });
        assert_no_violations(package, &found);
    }
}

#[test]
fn policy_is_pure_rust_and_runtime_free() {
    check_pure("kolm-policy");
}

#[test]
fn policy_depends_on_nothing_internal() {
    let tree = normal_tree("kolm-policy");
    let found = violations(&tree, |name| {
        (name.starts_with("kolm-") && name != "kolm-policy").then_some("internal crate")
    });
    assert_no_violations("kolm-policy", &found);
}

/// The CPU model crate runs inside the enclave's job: candle without its
/// GPU features (no cudarc), and nothing async, networked or OpenSSL.
#[test]
fn model_has_no_gpu_async_or_network_crates() {
    let tree = normal_tree("kolm-model");
    let found = violations(&tree, |name| {
        is_banned_family(name).then_some("banned crate (async runtime, network, CUDA or OpenSSL)")
    });
    assert_no_violations("kolm-model", &found);
}

#[test]
fn host_never_links_enclave_or_kernels() {
    let tree = normal_tree("kolm-host");
    let found = violations(&tree, |name| {
        ["kolm-enclave", "kolm-kernels"]
            .contains(&name)
            .then_some("the host never links the enclave or the kernels")
    });
    assert_no_violations("kolm-host", &found);
}

/// The checker itself: a tree with offenders must be rejected, a clean one
/// accepted, so a green run means something.
#[test]
fn checker_rejects_offending_trees() {
    let dirty = "\
kolm-verifier v0.1.0 (/work/verifier)
tokio v1.48.0
tokio-util v0.7.0
hyper_util v0.1.0
openssl-sys v0.9.100
libz-sys v1.1.0
cudarc v0.17.0 (*)
reqwest v0.12.0
kolm-enclave v0.1.0 (/work/enclave)
kolm-kernels v0.1.0 (/work/kernels) (*)
";
    let names: Vec<String> = violations(dirty, pure_crate_violation)
        .into_iter()
        .map(|(name, _, _)| name)
        .collect();
    assert_eq!(
        names,
        [
            "cudarc",
            "hyper_util",
            "kolm-enclave",
            "kolm-kernels",
            "libz-sys",
            "openssl-sys",
            "reqwest",
            "tokio",
            "tokio-util",
        ]
    );

    let clean = "\
kolm-verifier v0.1.0 (/work/verifier)
kolm-policy v0.1.0 (/work/policy)
ring v0.17.14
hyperloglog v1.0.0
syscall-free v1.0.0
serde_derive v1.0.228 (proc-macro)
";
    assert!(violations(clean, pure_crate_violation).is_empty());
}
