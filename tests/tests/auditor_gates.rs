//! Issue 21: `kolm-verify --policy AUDITOR.toml` judges the auditor's
//! quality gates on the numbers the artifact seals, not on the enclave's
//! verdict. The tiny example is sealed once without a TEE (`--attest
//! none`); under the job's own policy it is accepted, each gate's sealed
//! number shown; under an auditor's policy stricter than the job's it is
//! rejected, naming the gate, the sealed number and the job's own gate.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kolm_testkit::Deadline as _;

/// The most one child may take: the tiny fine-tune takes about a minute on
/// a 2-core machine, a few under full load.
const LIMIT: Duration = Duration::from_secs(900);

/// The tests of this file, which share one sealed artifact.
const TESTS: usize = 2;

fn bin(name: &str) -> PathBuf {
    kolm_testkit::workspace_binary(name)
}

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/tiny")
}

fn text_of(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The tiny example's artifact, sealed once for both tests.
struct Sealed {
    dir: PathBuf,
    zip: PathBuf,
    /// The sealed `perplexity` and `k_score`, from the manifest.
    perplexity: f64,
    k_score: f64,
}

static SEALED: OnceLock<Sealed> = OnceLock::new();

fn artifact() -> &'static Sealed {
    SEALED.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let t = Instant::now();
        let o = Command::new(bin("kolm-enclave"))
            .arg("run")
            .arg("--spec")
            .arg(example().join("job.toml"))
            .arg("--input-dir")
            .arg(example())
            .arg("--policy")
            .arg(example().join("policy.toml"))
            .arg("--out")
            .arg(dir.join("out"))
            .args(["--attest", "none"])
            .output_within(LIMIT);
        assert!(o.status.success(), "{}", text_of(&o));
        eprintln!("tiny example sealed in {:.1} s", t.elapsed().as_secs_f64());
        let zip = dir.join("out/tiny-0.zip");
        let mut f = std::fs::File::open(&zip).unwrap();
        let c = kolm_format::container::read_canonical_zip(&mut f).unwrap();
        let bytes =
            kolm_format::container::read_entry(&mut f, c.entry("manifest.json").unwrap(), 1 << 24)
                .unwrap();
        let m = kolm_format::manifest::Manifest::from_canonical_bytes(&bytes).unwrap();
        Sealed {
            dir,
            zip,
            perplexity: m.metrics["perplexity"],
            k_score: m.metrics["k_score"],
        }
    })
}

/// Counts a finished test; the last one removes the shared directory
/// (a test that panics counts too).
struct Done;

impl Drop for Done {
    fn drop(&mut self) {
        static FINISHED: AtomicUsize = AtomicUsize::new(0);
        if FINISHED.fetch_add(1, Ordering::SeqCst) + 1 == TESTS
            && let Some(s) = SEALED.get()
        {
            let _ = std::fs::remove_dir_all(&s.dir);
        }
    }
}

/// `kolm-verify ZIP --policy POLICY --dangerous-allow-unattested` (the
/// artifact has no TEE evidence), with `extra` arguments.
fn verify(zip: &Path, policy: &Path, extra: &[&str]) -> Output {
    Command::new(bin("kolm-verify"))
        .arg(zip)
        .arg("--policy")
        .arg(policy)
        .arg("--dangerous-allow-unattested")
        .args(extra)
        .output_within(LIMIT)
}

#[test]
fn the_jobs_own_policy_accepts_the_sealed_numbers() {
    let _done = Done;
    let s = artifact();
    let policy = example().join("policy.toml");
    let o = verify(&s.zip, &policy, &["--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text_of(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdict"], "verified", "{}", text_of(&o));
    // Each of the job's gates, judged on the sealed eval report.
    let q = &v["quality"];
    assert_eq!(q["source"], "eval-report", "{q}");
    let gates = q["gates"].as_array().unwrap();
    assert_eq!(gates.len(), 2, "{q}");
    assert_eq!(gates[0]["metric"], "perplexity");
    assert_eq!(gates[0]["max"], 40.0);
    assert_eq!(gates[0]["value"].as_f64(), Some(s.perplexity));
    assert_eq!(gates[1]["metric"], "k_score");
    assert_eq!(gates[1]["value"].as_f64(), Some(s.k_score));
    for g in gates {
        assert_eq!(g["passed"], true, "{g}");
        assert_eq!(g["status"], "pass", "{g}");
        // The sealed policy is the job's: its gate is the same one.
        assert_eq!(g["job_gate"]["kind"], "gate", "{g}");
        assert_eq!(g["job_gate"]["min"], g["min"], "{g}");
        assert_eq!(g["job_gate"]["max"], g["max"], "{g}");
    }
    // The table shows the same.
    let o = verify(&s.zip, &policy, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text_of(&o));
    assert!(
        text_of(&o).contains(&format!(
            "quality_gate: perplexity <= 40: {} PASS; the job's own policy gated perplexity <= 40",
            s.perplexity
        )),
        "{}",
        text_of(&o)
    );
}

#[test]
fn an_auditor_stricter_than_the_job_rejects_the_sealed_numbers() {
    let _done = Done;
    let s = artifact();
    // Below the sealed perplexity, above the sealed K-score: both miss.
    let max = (s.perplexity - 1.0).floor();
    let min = ((s.k_score + 0.01) * 100.0).ceil() / 100.0;
    let job = std::fs::read_to_string(example().join("policy.toml")).unwrap();
    assert!(job.contains("max = 40.0") && job.contains("min = 0.05"));
    let strict = job
        .replace("max = 40.0", &format!("max = {max:?}"))
        .replace("min = 0.05", &format!("min = {min:?}"));
    let policy = s.dir.join("auditor.toml");
    std::fs::write(&policy, strict).unwrap();

    let o = verify(&s.zip, &policy, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text_of(&o));
    let text = text_of(&o);
    let perplexity = format!(
        "perplexity = {} from the sealed eval report (outputs/eval-report.json) is above the \
         auditor's gate perplexity <= {max}; the job's own policy gated perplexity <= 40",
        s.perplexity
    );
    let k_score = format!(
        "k_score = {} from the sealed eval report (outputs/eval-report.json) is below the \
         auditor's gate k_score >= {min}; the job's own policy gated k_score >= 0.05",
        s.k_score
    );
    assert!(
        text.contains(&format!(
            "verdict: REJECTED (policy: quality.gate: {perplexity}; {k_score})"
        )),
        "{text}"
    );

    let o = verify(&s.zip, &policy, &["--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text_of(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdict"], "rejected");
    assert_eq!(
        v["reason"].as_str().unwrap(),
        format!("policy: quality.gate: {perplexity}; {k_score}")
    );
    let gates = v["quality"]["gates"].as_array().unwrap();
    let statuses: Vec<&str> = gates
        .iter()
        .map(|g| g["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["above-max", "below-min"]);
    assert!(gates.iter().all(|g| g["passed"] == false));
    assert_eq!(gates[0]["job_gate"]["max"], 40.0);
    assert_eq!(gates[1]["job_gate"]["min"], 0.05);
}
