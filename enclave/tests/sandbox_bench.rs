//! Sandbox benchmarks (ignored by default; numbers go to docs/PERFORMANCE.md):
//!
//! ```text
//! cargo test --release --locked -p kolm-enclave --test sandbox_bench -- --ignored --nocapture --test-threads 1
//! ```
//!
//! 1. Allowed system calls: a tight getpid + read(/dev/null) loop, native
//!    versus under the sandbox (the filters run on every call).
//! 2. A real CPU workload: the demo training step (`kolm-jobs` on a demo
//!    spec) on a generated corpus, native versus under the sandbox, and the
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

use kolm_testkit::Deadline as _;

/// The most one child of these tests may take: one round of the benchmark job
/// takes seconds, a minute or so under full load; a hung one fails with
/// `DEADLINE` (issue 20 section 6).
const LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

const ROUNDS: usize = 9;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn native_json(program: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output_within(LIMIT);
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

fn timed(mut f: impl FnMut()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

/// User + system CPU seconds of all waited-for descendants so far (the
/// sandboxed job is a grandchild: its time reaches us through
/// `sandbox-exec`). Needs `--test-threads 1`.
#[allow(unsafe_code)]
fn children_cpu() -> f64 {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// Wall and CPU seconds of `f`.
fn measured(f: impl FnMut()) -> (f64, f64) {
    let cpu = children_cpu();
    let wall = timed(f).as_secs_f64();
    (wall, children_cpu() - cpu)
}

#[test]
#[ignore = "benchmark: run explicitly, see the module doc"]
fn allowed_syscall_overhead() {
    let hostile = test_program("kolm-hostile");
    let n = "2000000";
    let per_iter = |v: &serde_json::Value| {
        v["elapsed_ns"].as_f64().unwrap() / v["iterations"].as_f64().unwrap()
    };
    let (mut native, mut allow, mut sandboxed) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 * ROUNDS {
        native.push(per_iter(&native_json(&hostile, &["bench-syscalls", n])));
        // Any seccomp filter at all (one ALLOW instruction): the floor.
        allow.push(per_iter(&native_json(
            &hostile,
            &["bench-syscalls", n, "allow-filter"],
        )));
        let run = sandbox_exec(&[], &hostile, &["bench-syscalls", n]);
        assert_eq!(run.record.blocked_total, 0);
        sandboxed.push(per_iter(&run.report));
    }
    let (a, f, b) = (median(native), median(allow), median(sandboxed));
    println!(
        "BENCH allowed syscalls (getpid+read per iteration, median of {}): native {a:.1} ns, \
         one-instruction ALLOW filter {f:.1} ns ({:+.2}%), kolm sandbox {b:.1} ns ({:+.2}% vs native, \
         {:+.2}% vs the ALLOW filter)",
        3 * ROUNDS,
        (f - a) / a * 100.0,
        (b - a) / a * 100.0,
        (b - f) / f * 100.0
    );
}

#[test]
#[ignore = "benchmark: run explicitly, see the module doc"]
fn demo_training_step_overhead() {
    let exe = common::jobs();
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
    let spec = input.join("job.toml");
    std::fs::write(
        &spec,
        "id = \"bench\"\nkind = \"demo\"\ninputs = [\"corpus.txt\"]\neval_every = 7\n",
    )
    .unwrap();
    let job_args = |out: &Path| -> Vec<String> {
        vec![
            "--spec".into(),
            spec.display().to_string(),
            "--input-dir".into(),
            input.display().to_string(),
            "--output-dir".into(),
            out.display().to_string(),
        ]
    };
    let (mut native, mut sandboxed, mut setup) = (Vec::new(), Vec::new(), Vec::new());
    let (mut native_cpu, mut sandboxed_cpu, mut setup_cpu) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let out = dir.path().join(format!("native-{round}"));
        writable_dir(&out);
        let args = job_args(&out);
        let (w, c) = measured(|| {
            let s = Command::new(&exe).args(&args).status_within(LIMIT);
            assert!(s.success());
        });
        native.push(w);
        native_cpu.push(c);
        let out = dir.path().join(format!("sandboxed-{round}"));
        writable_dir(&out);
        let args = job_args(&out);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let ro = input.display().to_string();
        let rw = out.display().to_string();
        let (w, c) = measured(|| {
            let run = sandbox_exec(&["--read-only", &ro, "--read-write", &rw], &exe, &args);
            assert!(run.status.success(), "{}", run.stderr);
        });
        sandboxed.push(w);
        sandboxed_cpu.push(c);
        let (w, c) = measured(|| {
            let run = sandbox_exec(&[], Path::new("/bin/true"), &[]);
            assert!(run.status.success());
        });
        setup.push(w);
        setup_cpu.push(c);
    }
    let (a, b, s) = (median(native), median(sandboxed), median(setup));
    let (ac, bc, sc) = (median(native_cpu), median(sandboxed_cpu), median(setup_cpu));
    println!(
        "BENCH demo training step (16 MiB corpus, median of {ROUNDS}): wall native {:.1} ms, \
         sandboxed {:.1} ms ({:+.2}%); CPU native {:.1} ms, sandboxed {:.1} ms ({:+.2}%); \
         sandbox set-up alone (/bin/true) wall {:.1} ms, CPU {:.1} ms; \
         CPU net of set-up {:+.2}%",
        a * 1e3,
        b * 1e3,
        (b - a) / a * 100.0,
        ac * 1e3,
        bc * 1e3,
        (bc - ac) / ac * 100.0,
        s * 1e3,
        sc * 1e3,
        (bc - sc - ac) / ac * 100.0
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
