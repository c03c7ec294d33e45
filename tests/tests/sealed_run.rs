//! Issue 13, end to end over a unix socket: `kolm-host run` -> the enclave
//! service (`kolm-enclave start`, simulated TEE) -> the sandboxed job ->
//! the artifact -> `kolm-verify`. The artifact verifies as `simulated` only
//! with the sim root, is rejected without it and when tampered with, is
//! signed by the identity key the enclave announced, and two runs chain
//! through `--previous`. A job the enclave's policy refuses leaves no
//! artifact and a non-zero exit.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use kolm_testkit::Deadline as _;

mod linger;

/// The most one child of these tests may take: a sealed selftest or tiny run
/// takes seconds to a minute on a 2-core machine, a few under full load; a hung
/// one fails with `DEADLINE` (issue 20 section 6).
const LIMIT: std::time::Duration = std::time::Duration::from_secs(900);

fn bin(name: &str) -> PathBuf {
    kolm_testkit::workspace_binary(name)
}

/// The quickstart job, copied so the test owns its files.
fn quickstart(dir: &Path, policy: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/quickstart");
    for f in ["job.toml", "corpus.txt"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    std::fs::write(dir.join("policy.toml"), policy).unwrap();
    dir.join("job.toml")
}

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// `kolm-host run --attest sim --json` of `job`, the artifact to `out`.
    fn host_command(&self, job: &Path, out: &str) -> Command {
        let mut c = Command::new(bin("kolm-host"));
        c.args(["run", "--attest", "sim", "--json", "--state"])
            .arg(self.path("state"))
            .arg("--enclave-bin")
            .arg(bin("kolm-enclave"))
            .arg("--out")
            .arg(self.path(out))
            .arg(job)
            .env("KOLM_SIM_ROOT_DIR", self.path("sim-root"));
        c
    }

    fn host(&self, job: &Path, out: &str) -> (Output, Vec<Value>) {
        let o = self.host_command(job, out).output_within(LIMIT);
        let events = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (o, events)
    }

    fn sim_root(&self) -> PathBuf {
        let pem = self.path("sim-root.pem");
        let o = Command::new(bin("kolm-host"))
            .arg("sim-root")
            .arg("--out")
            .arg(&pem)
            .arg("--enclave-bin")
            .arg(bin("kolm-enclave"))
            .env("KOLM_SIM_ROOT_DIR", self.path("sim-root"))
            .output_within(LIMIT);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        pem
    }

    fn verify(&self, artifact: &Path, extra: &[&str]) -> (Option<i32>, Value) {
        let o = Command::new(bin("kolm-verify"))
            .arg(artifact)
            .arg("--policy")
            .arg(self.path("policy.toml"))
            .arg("--json")
            .args(extra)
            .output_within(LIMIT);
        let v = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
        (o.status.code(), v)
    }
}

const POLICY: &str = "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"simulated\"]\n\
                      [egress]\nmust_be_zero = true\n";

#[test]
fn host_to_enclave_to_artifact_to_verifier() {
    let env = Env::new();
    let job = quickstart(env.dir.path(), POLICY);
    let (o, events) = env.host(&job, "first.zip");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let hello = events.iter().find(|e| e["event"] == "hello").unwrap();
    assert_eq!(hello["platform"], "simulated");
    let done = events.last().unwrap();
    assert_eq!(done["event"], "done", "{events:?}");
    assert_eq!(done["verdict"], "simulated");
    assert_eq!(done["signed_by_the_enclave"], true);
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "progress" && e["phase"] == "inputs")
    );
    let first = env.path("first.zip");
    assert!(first.is_file());

    // The auditor's verifier, offline: simulated with the sim root only.
    let root = env.sim_root();
    let root = root.to_str().unwrap();
    let (code, v) = env.verify(&first, &["--dangerous-trust-sim-root", root]);
    assert_eq!(v["verdict"], "simulated", "{v}");
    assert_eq!(code, Some(1));
    let (code, v) = env.verify(&first, &[]);
    assert_eq!(v["verdict"], "rejected", "{v}");
    assert_eq!(code, Some(1));
    // The receipt's signer is the identity key the enclave announced.
    assert_eq!(
        v["fields"]["signer_public_key"].as_str(),
        hello["identity_key"].as_str(),
        "{v}"
    );

    // A tampered artifact: one byte of the sealed metrics changed.
    let mut bytes = std::fs::read(&first).unwrap();
    let at = bytes
        .windows(b"eval_loss".len())
        .position(|w| w == b"eval_loss")
        .unwrap();
    bytes[at] ^= 0x20;
    let tampered = env.path("tampered.zip");
    std::fs::write(&tampered, &bytes).unwrap();
    let (_, v) = env.verify(&tampered, &["--dangerous-trust-sim-root", root]);
    assert_eq!(v["verdict"], "rejected", "{v}");

    // A second run chains to the first.
    let (o, events) = env.host(&job, "second.zip");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(events.last().unwrap()["verdict"], "simulated");
    let second = env.path("second.zip");
    let (_, v) = env.verify(
        &second,
        &[
            "--dangerous-trust-sim-root",
            root,
            "--previous",
            first.to_str().unwrap(),
        ],
    );
    assert_eq!(v["verdict"], "simulated", "{v}");
    let chain = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "chain")
        .unwrap();
    assert_eq!(chain["status"], "pass", "{chain}");
    // And not to an unrelated artifact: the second run is not the first's
    // successor's successor.
    let (_, v) = env.verify(
        &first,
        &[
            "--dangerous-trust-sim-root",
            root,
            "--previous",
            second.to_str().unwrap(),
        ],
    );
    assert_eq!(v["verdict"], "rejected", "{v}");
}

/// `kolm-host run --attest sim --sim-format tdx`: the enclave service
/// writes the TDX form; the host verifies it (`simulated`) with the bundle
/// it exports, which holds the TDX format root; the auditor's `kolm-verify`
/// agrees with that bundle and rejects the artifact without it.
#[test]
fn host_run_sim_format_tdx_to_the_verifier() {
    let env = Env::new();
    let job = quickstart(env.dir.path(), POLICY);
    let o = env
        .host_command(&job, "tdx.zip")
        .args(["--sim-format", "tdx"])
        .output_within(LIMIT);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let events: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let done = events.last().unwrap();
    assert_eq!(done["event"], "done", "{events:?}");
    assert_eq!(
        (&done["verdict"], &done["accepted"]),
        (&"simulated".into(), &true.into())
    );
    let artifact = env.path("tdx.zip");
    let names =
        kolm_format::container::read_canonical_zip(&mut std::fs::File::open(&artifact).unwrap())
            .unwrap()
            .entries
            .iter()
            .map(|e| e.name.clone())
            .collect::<Vec<_>>();
    assert!(
        names.iter().any(|n| n == "evidence/sim-tdx-quote.bin"),
        "{names:?}"
    );
    let root = env.sim_root();
    let (code, v) = env.verify(
        &artifact,
        &["--dangerous-trust-sim-root", root.to_str().unwrap()],
    );
    assert_eq!((code, &v["verdict"]), (Some(1), &"simulated".into()), "{v}");
    let (_, v) = env.verify(&artifact, &[]);
    assert_eq!(v["verdict"], "rejected", "{v}");
}

#[test]
fn a_job_the_policy_refuses_leaves_no_artifact() {
    let env = Env::new();
    // The job's policy allows only hardware: the host refuses the simulated
    // enclave itself, before it sends anything (tests/tests/host_boundary.rs
    // has the transcript).
    let job = quickstart(
        env.dir.path(),
        "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"nitro\"]\n",
    );
    let (o, _) = env.host(&job, "refused.zip");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("does not allow platform simulated") && stderr.contains("nothing was sent"),
        "{stderr}"
    );
    assert!(!env.path("refused.zip").exists());
    let sealed = std::fs::read_dir(env.path("state"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".zip"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(sealed, 0);
}

/// A job spec of kind `egress-selftest` beside the policy.
fn selftest(dir: &Path, linger: Option<u32>) -> PathBuf {
    let mut spec = "id = \"selftest\"\nkind = \"egress-selftest\"\ninputs = []\n".to_string();
    if let Some(s) = linger {
        spec.push_str(&format!("linger_seconds = {s}\n"));
    }
    std::fs::write(dir.join("job.toml"), spec).unwrap();
    std::fs::write(dir.join("policy.toml"), POLICY).unwrap();
    dir.join("job.toml")
}

#[test]
fn a_job_that_opens_network_sockets_completes_and_its_receipt_counts_them() {
    let env = Env::new();
    let job = selftest(env.dir.path(), None);
    let (o, events) = env.host(&job, "selftest.zip");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(events.last().unwrap()["verdict"], "simulated");
    let root = env.sim_root();
    let (_, v) = env.verify(
        &env.path("selftest.zip"),
        &["--dangerous-trust-sim-root", root.to_str().unwrap()],
    );
    assert_eq!(v["verdict"], "simulated", "{v}");
    // Five probes, each one socket(2) call: refused and counted.
    let governance = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "governance")
        .unwrap();
    let detail = governance["detail"].as_str().unwrap();
    assert!(
        detail.contains("blocked_total 5, egress_blocked true"),
        "{detail}"
    );
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Victim {
    Service,
    Job,
}

#[test]
fn a_killed_service_leaves_no_artifact_and_no_survivor() {
    kill_mid_job(Victim::Service, 41);
}

#[test]
fn a_killed_job_leaves_no_artifact_and_no_survivor() {
    kill_mid_job(Victim::Job, 43);
}

// Ctrl-C to the host mid-job: `exit_paths.rs`,
// `ctrl_c_to_the_hosts_process_group_mid_job_leaves_no_plaintext_and_no_seal`.

/// Runs a lingering selftest job and SIGKILLs `victim` (the service, or
/// the job's own process) once the job has left its escaped process
/// behind: the host exits 2, no artifact, no chain state, and no job
/// process left.
fn kill_mid_job(victim: Victim, linger: u32) {
    if !kolm_testkit::is_root() {
        kolm_testkit::skip("not root, so no PID namespace to take the job's processes down");
        return;
    }
    let env = Env::new();
    // A linger length no other test uses, as the processes' mark.
    let job = selftest(env.dir.path(), Some(linger));
    let mark = linger::mark(linger);
    let host = env
        .host_command(&job, "killed.zip")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the job's escaped process, then kill the victim.
    let state = env.path("state");
    let state = state.to_str().unwrap();
    let start = std::time::Instant::now();
    while kolm_testkit::processes_with(&[&mark]).is_empty() {
        assert!(start.elapsed().as_secs() < 30, "the job never lingered");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let targets = match victim {
        Victim::Service => kolm_testkit::processes_with(&[state, "start"]),
        Victim::Job => linger::job_of(linger),
    };
    assert_eq!(targets.len(), 1, "{victim:?}: {targets:?}");
    kolm_testkit::signal("KILL", targets[0]);
    let status = kolm_testkit::wait_within(host, "kolm-host after the kill", LIMIT).status;
    assert_eq!(status.code(), Some(2), "{victim:?}");
    let start = std::time::Instant::now();
    while !kolm_testkit::processes_with(&[&mark]).is_empty() {
        assert!(
            start.elapsed().as_secs() < 5,
            "a job process survived the service: {:?}",
            kolm_testkit::processes_with(&[&mark])
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!env.path("killed.zip").exists());
    let sealed: Vec<_> = std::fs::read_dir(env.path("state"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".zip") || n == "chain-state.json")
        .collect();
    assert!(sealed.is_empty(), "{sealed:?}");
}

#[test]
fn a_launched_enclave_takes_many_jobs_until_stopped() {
    let env = Env::new();
    let job = quickstart(env.dir.path(), POLICY);
    let runtime = env.path("run");
    let host = |args: &[&str]| {
        Command::new(bin("kolm-host"))
            .args(args)
            .arg("--runtime-dir")
            .arg(&runtime)
            .env("KOLM_SIM_ROOT_DIR", env.path("sim-root"))
            .output_within(LIMIT)
    };
    let o = Command::new(bin("kolm-host"))
        // The SEV-SNP form of the simulated TEE (launch passes it on).
        .args([
            "launch",
            "--name",
            "t1",
            "--attest",
            "sim",
            "--sim-format",
            "sev-snp",
            "--state",
        ])
        .arg(env.path("state"))
        .arg("--runtime-dir")
        .arg(&runtime)
        .arg("--enclave-bin")
        .arg(bin("kolm-enclave"))
        .env("KOLM_SIM_ROOT_DIR", env.path("sim-root"))
        .output_within(LIMIT);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Launching the same name twice is refused while it runs.
    let again = Command::new(bin("kolm-host"))
        .args(["launch", "--name", "t1", "--attest", "sim", "--runtime-dir"])
        .arg(&runtime)
        .arg("--enclave-bin")
        .arg(bin("kolm-enclave"))
        .output_within(LIMIT);
    assert_eq!(again.status.code(), Some(2));

    let o = host(&["status", "--name", "t1", "--json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let status: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(status["up"], true);
    assert_eq!(status["platform"], "simulated");
    let socket = status["socket"].as_str().unwrap().to_string();

    let mut sequence = Vec::new();
    // A service the host did not start: its sim root is trusted only when
    // the operator says so.
    let trusted = env.sim_root();
    for out in ["a.zip", "b.zip"] {
        let o = Command::new(bin("kolm-host"))
            .args(["run", "--json", "--enclave-bin"])
            .arg(bin("kolm-enclave"))
            .arg("--dangerous-trust-sim-root")
            .arg(&trusted)
            .arg("--connect")
            .arg(format!("unix:{socket}"))
            .arg("--out")
            .arg(env.path(out))
            .arg(&job)
            .env("KOLM_SIM_ROOT_DIR", env.path("sim-root"))
            .output_within(LIMIT);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let root = env.sim_root();
        let (_, v) = env.verify(
            &env.path(out),
            &["--dangerous-trust-sim-root", root.to_str().unwrap()],
        );
        assert_eq!(v["verdict"], "simulated", "{v}");
        assert!(v.to_string().contains("sev-snp-format sim evidence"), "{v}");
        sequence.push(v["fields"]["sequence"].as_u64().unwrap());
        // The same enclave signed both: the identity key status reported.
        assert_eq!(v["fields"]["signer_public_key"], status["identity_key"]);
    }
    assert_eq!(sequence, [0, 1]);

    let o = host(&["stop", "--name", "t1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Gone (or a zombie waiting for whoever adopted it: no command line).
    let pid = u32::try_from(status["pid"].as_u64().unwrap()).unwrap();
    let cmdline = kolm_testkit::command_line(pid);
    assert!(cmdline.is_empty(), "{cmdline}");
    let o = host(&["status", "--name", "t1"]);
    assert_ne!(o.status.code(), Some(0));
}

#[test]
fn a_full_output_disk_leaves_nothing_half_written() {
    let env = Env::new();
    let job = quickstart(env.dir.path(), POLICY);
    let small = env.path("small");
    std::fs::create_dir(&small).unwrap();
    // A 64 KiB file system: the artifact (about 180 KB) does not fit.
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "kolm-test-full"])
        .arg(&small)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .is_ok_and(|c| {
            kolm_testkit::wait_within(c, "mount", LIMIT)
                .status
                .success()
        });
    if !mounted {
        eprintln!("SKIP: cannot mount a small tmpfs here (needs root)");
        return;
    }
    let o = env
        .host_command(&job, "small/artifact.zip")
        .output_within(LIMIT);
    let left: Vec<_> = std::fs::read_dir(&small)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    let _ = Command::new("umount").arg(&small).status_within(LIMIT);
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("artifact.zip"), "{stderr}");
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_job_past_the_policys_time_limit_is_killed_and_not_sealed() {
    let env = Env::new();
    let job = selftest(env.dir.path(), Some(53));
    std::fs::write(
        env.path("policy.toml"),
        format!("{POLICY}[limits]\nmax_job_seconds = 1\n"),
    )
    .unwrap();
    let start = std::time::Instant::now();
    let (o, _) = env.host(&job, "late.zip");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("job-failed"), "{stderr}");
    assert!(start.elapsed().as_secs() < 30, "{:?}", start.elapsed());
    assert!(!env.path("late.zip").exists());
}
