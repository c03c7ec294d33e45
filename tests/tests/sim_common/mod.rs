//! Helpers shared by the simulated-TEE tests (`sim_tee.rs`, `sim_snp.rs`):
//! the demo job sealed by a given provider, verify options, an artifact's
//! entries, the binaries.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use kolm_enclave::attest::AttestationProvider;
use kolm_enclave::run::{self, RunRequest, RunResult};
use kolm_format::container;
use kolm_policy::Policy;
use kolm_verifier::artifact::{VerifyAt, VerifyOptions};
use kolm_verifier::sim::SimRoots;
use time::OffsetDateTime;

use kolm_testkit::Deadline as _;

/// The most one child of these tests may take: a simulated attestation run
/// takes seconds; a hung one fails with `DEADLINE` (issue 20 section 6).
const LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

pub const SPEC: &[u8] =
    b"id = \"sim\"\nkind = \"demo\"\ninputs = [\"corpus.txt\"]\neval_every = 3\n";
pub const SIM_POLICY: &str = "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"simulated\"]\n\
                              [egress]\nmust_be_zero = false\n";

pub fn enclave_exe() -> PathBuf {
    kolm_testkit::workspace_binary("kolm-enclave")
}

/// The installation's bundle as `sim-root --out` exports it.
pub fn bundle(root_dir: &Path) -> SimRoots {
    let (pem, _) =
        kolm_enclave::attest::sim::bundle_pem(root_dir, false, OffsetDateTime::now_utc()).unwrap();
    SimRoots::parse(pem.as_bytes()).unwrap()
}

pub fn first_failure(r: &kolm_verifier::attested::Rejection) -> &'static str {
    r.first_failure().unwrap().id.as_str()
}

/// The demo job's input directory under `dir`.
pub fn setup(dir: &Path) -> PathBuf {
    let input = dir.join("in");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(
        input.join("corpus.txt"),
        "the quick brown fox\njumps over\nthe lazy dog\nand the fox\nruns far away\n",
    )
    .unwrap();
    input
}

/// The demo job run and sealed under `policy` by `provider`, into
/// `dir/out`.
pub fn seal(dir: &Path, policy: &str, provider: &dyn AttestationProvider) -> RunResult {
    let input = setup(dir);
    let exe = enclave_exe();
    let req = RunRequest {
        spec: SPEC,
        policy: policy.as_bytes(),
        input_dir: &input,
        out_dir: &dir.join("out"),
        runtime_exe: Some(&exe),
        jobs_exe: None,
        fine_tune: Default::default(),
    };
    run::run(&req, provider).unwrap()
}

pub fn opts(policy: &str, root: Option<SimRoots>) -> VerifyOptions {
    VerifyOptions {
        policy: Some(Policy::from_toml_str(policy).unwrap()),
        dangerous_trust_sim_root: root,
        ..VerifyOptions::at(VerifyAt::ReceiptTime)
    }
}

/// Every entry of an artifact, by name, in order.
pub fn entries(zip: &Path) -> Vec<(String, Vec<u8>)> {
    let mut f = std::fs::File::open(zip).unwrap();
    let c = container::read_canonical_zip(&mut f).unwrap();
    c.entries
        .iter()
        .map(|e| {
            (
                e.name.clone(),
                container::read_entry(&mut f, e, 64 << 20).unwrap(),
            )
        })
        .collect()
}

/// Runs `exe args` with the sim root in `sim_root_dir`: (exit code,
/// stdout, stderr).
pub fn run_bin(exe: &Path, args: &[&str], sim_root_dir: &Path) -> (i32, String, String) {
    let out = Command::new(exe)
        .args(args)
        .env("KOLM_SIM_ROOT_DIR", sim_root_dir)
        .output_within(LIMIT);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
