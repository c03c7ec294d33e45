//! A `kolm-enclave` built without its `sim` feature (as images for
//! hardware are) holds no simulated-TEE code (issue 21).
//!
//! The test builds `kolm-enclave --no-default-features` into a target
//! directory of its own (`<target>/no-sim`, beside the default build's, so
//! neither build evicts the other's artifacts), then reads both binaries'
//! bytes for marker strings that only the `kolm-sim-tee` crate holds
//! ([`SIM_ONLY_MARKERS`]): each must be in the default `kolm-enclave`
//! (which `cargo build --locked --bins` made; the test fails if it is
//! missing) and in none of the no-sim one, so the check cannot pass
//! vacuously. The no-sim binary also refuses `--attest sim`, naming the
//! missing feature, and has no `sim-root` command.
//!
//! `tests/tests/dependency_boundary.rs` checks the same from the other
//! side: the no-sim build's dependency closure holds neither
//! `kolm-sim-tee` nor `rsa`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kolm_testkit::Deadline as _;

/// The most the no-sim build may take: a cold build of the enclave's
/// dependency closure on a busy machine, waiting for cargo's locks behind
/// other builds; a hung one fails with `DEADLINE`.
const BUILD_LIMIT: Duration = Duration::from_secs(20 * 60);

/// String literals of `kolm-sim-tee` that no other crate of the enclave
/// spells: the PCR1 stand-in label (`kolm_sim_tee::PCR1_LABEL`), the
/// organizational unit of every sim certificate
/// (`kolm_sim_tee::root::SIM_ORG_UNIT`) and the log line of a new sim root.
const SIM_ONLY_MARKERS: [&str; 3] = [
    "kolm simulated TEE PCR1: no kernel or bootstrap is measured (NOT A TEE)",
    "simulated TEE, not hardware",
    "created a kolm sim root (NOT A TEE)",
];

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("kolm-tests lives one level below the workspace root")
        .to_path_buf()
}

/// The default `kolm-enclave` (the `sim` feature on) and the target
/// directory it lies in (`<target>/debug/kolm-enclave`).
fn default_binary() -> (PathBuf, PathBuf) {
    let exe = kolm_testkit::workspace_binary("kolm-enclave");
    let target = exe
        .parent()
        .and_then(Path::parent)
        .expect("a binary lies in <target>/<profile>/")
        .to_path_buf();
    (exe, target)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// Builds `kolm-enclave` without default features into `target_dir`.
fn build_without_sim(target_dir: &Path) -> PathBuf {
    let start = Instant::now();
    let output = Command::new(env!("CARGO"))
        .args([
            "build",
            "-p",
            "kolm-enclave",
            "--no-default-features",
            "--bin",
            "kolm-enclave",
            "--locked",
            "--offline",
            "--target-dir",
        ])
        .arg(target_dir)
        .env("CARGO_INCREMENTAL", "0")
        .current_dir(workspace_root())
        .output_within(BUILD_LIMIT);
    assert!(
        output.status.success(),
        "cargo build -p kolm-enclave --no-default-features failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!(
        "no-sim build of kolm-enclave: {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let exe = target_dir.join("debug").join("kolm-enclave");
    assert!(exe.is_file(), "{} was not built", exe.display());
    exe
}

#[test]
fn a_build_without_the_sim_feature_holds_no_sim_code() {
    let (default_exe, target) = default_binary();
    let default_bytes = std::fs::read(&default_exe).expect("reading the default kolm-enclave");
    for marker in SIM_ONLY_MARKERS {
        assert!(
            contains(&default_bytes, marker),
            "the default {} lacks the sim marker {marker:?}: the marker no longer names sim code, \
             so its absence below would prove nothing",
            default_exe.display()
        );
    }

    let no_sim_exe = build_without_sim(&target.join("no-sim"));
    let no_sim_bytes = std::fs::read(&no_sim_exe).expect("reading the no-sim kolm-enclave");
    let found: Vec<&str> = SIM_ONLY_MARKERS
        .into_iter()
        .filter(|m| contains(&no_sim_bytes, m))
        .collect();
    assert!(
        found.is_empty(),
        "{} (built without the sim feature) holds simulated-TEE code: {found:?}",
        no_sim_exe.display()
    );

    // It refuses the simulated TEE, saying why, before anything runs.
    let out_dir = tempfile::tempdir().expect("tempdir");
    let refused = Command::new(&no_sim_exe)
        .args(["run", "--attest", "sim", "--out"])
        .arg(out_dir.path())
        .output_within(Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--attest sim: this build of kolm-enclave has no simulated TEE"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_dir(out_dir.path()).map(Iterator::count).ok(),
        Some(0),
        "nothing is written when --attest sim is refused"
    );
    // And has no sim-root command.
    let sim_root = Command::new(&no_sim_exe)
        .args(["sim-root", "--out"])
        .arg(out_dir.path().join("root.pem"))
        .output_within(Duration::from_secs(60));
    assert!(!sim_root.status.success());
    assert!(
        String::from_utf8_lossy(&sim_root.stderr).contains("unrecognized subcommand 'sim-root'"),
        "{}",
        String::from_utf8_lossy(&sim_root.stderr)
    );
}
