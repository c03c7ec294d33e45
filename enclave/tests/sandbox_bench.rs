//! Sandbox benchmarks (ignored by default; numbers go to docs/PERFORMANCE.md):
//!
//! ```text
//! cargo test --release --locked -p kolm-enclave --test sandbox_bench -- --ignored --nocapture --test-threads 1
//! ```
//!
//! 1. Allowed system calls: a tight getpid + read(/dev/null) loop, native
//!    versus under the sandbox (the filters run on every call).
//! 2. A real CPU workload: the demo training step (`kolm-enclave __job
//!    demo`) on a generated corpus, native versus under the sandbox, and the
//!    fixed cost of setting the sandbox up (`/bin/true`).
//! 3. The cost of one blocked, counted attempt: a 1,000,000-call socket()
//!    flood, timed inside the job.
//!
//! Each measurement is the median of `ROUNDS` alternating runs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{sandbox_exec, shared_tempdir, test_program, writable_dir};

const ROUNDS: usize = 7;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn native_json(program: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

fn timed(mut f: impl FnMut()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

#[test]
#[ignore = "benchmark: run explicitly, see the module doc"]
fn allowed_syscall_overhead() {
    let hostile = test_program("kolm-hostile");
    let n = "2000000";
    let (mut native, mut sandboxed) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let v = native_json(&hostile, &["bench-syscalls", n]);
        native.push(v["elapsed_ns"].as_f64().unwrap() / v["iterations"].as_f64().unwrap());
        let run = sandbox_exec(&[], &hostile, &["bench-syscalls", n]);
        assert_eq!(run.record.blocked_total, 0);
        let v = &run.report;
        sandboxed.push(v["elapsed_ns"].as_f64().unwrap() / v["iterations"].as_f64().unwrap());
    }
    let (a, b) = (median(native), median(sandboxed));
    println!(
        "BENCH allowed syscalls (getpid+read per iteration): native {a:.1} ns, sandboxed {b:.1} ns, overhead {:+.2}%",
        (b - a) / a * 100.0
    );
}

#[test]
#[ignore = "benchmark: run explicitly, see the module doc"]
fn demo_training_step_overhead() {
    let exe = common::enclave();
    let dir = shared_tempdir();
    let input = dir.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    // ~16 MiB of varied lines.
    let mut corpus = String::new();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while corpus.len() < 16 << 20 {
        for _ in 0..60 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            corpus.push(char::from(b'a' + (x % 27) as u8).to_ascii_lowercase());
        }
        corpus.push('\n');
    }
    std::fs::write(input.join("corpus.txt"), &corpus).unwrap();
    let job_args = |out: &Path| -> Vec<String> {
        vec![
            "__job".into(),
            "--kind".into(),
            "demo".into(),
            "--input-dir".into(),
            input.display().to_string(),
            "--output-dir".into(),
            out.display().to_string(),
            "--eval-every".into(),
            "7".into(),
            "--input".into(),
            "corpus.txt".into(),
        ]
    };
    let (mut native, mut sandboxed, mut setup) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let out = dir.path().join(format!("native-{round}"));
        writable_dir(&out);
        let args = job_args(&out);
        native.push(
            timed(|| {
                let s = Command::new(&exe).args(&args).status().unwrap();
                assert!(s.success());
            })
            .as_secs_f64(),
        );
        let out = dir.path().join(format!("sandboxed-{round}"));
        writable_dir(&out);
        let args = job_args(&out);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let ro = input.display().to_string();
        let rw = out.display().to_string();
        sandboxed.push(
            timed(|| {
                let run = sandbox_exec(&["--read-only", &ro, "--read-write", &rw], &exe, &args);
                assert!(run.status.success(), "{}", run.stderr);
            })
            .as_secs_f64(),
        );
        setup.push(
            timed(|| {
                let run = sandbox_exec(&[], Path::new("/bin/true"), &[]);
                assert!(run.status.success());
            })
            .as_secs_f64(),
        );
    }
    let (a, b, s) = (median(native), median(sandboxed), median(setup));
    println!(
        "BENCH demo training step (16 MiB corpus): native {:.1} ms, sandboxed {:.1} ms ({:+.2}%), \
         sandbox set-up alone (/bin/true) {:.1} ms, job time net of set-up {:+.2}%",
        a * 1e3,
        b * 1e3,
        (b - a) / a * 100.0,
        s * 1e3,
        (b - s - a) / a * 100.0
    );
}

#[test]
#[ignore = "benchmark: run explicitly, see the module doc"]
fn cost_per_blocked_attempt() {
    let hostile = test_program("kolm-hostile");
    let n: u64 = 1_000_000;
    let mut per = Vec::new();
    for _ in 0..3 {
        let run = sandbox_exec(&[], &hostile, &["flood", &n.to_string()]);
        assert_eq!(run.record.blocked_total, n);
        per.push(run.report["elapsed_ns"].as_f64().unwrap() / n as f64 / 1000.0);
    }
    println!(
        "BENCH blocked, counted socket() attempt: {:.2} us each (median of 3 floods of {n})",
        median(per)
    );
}
