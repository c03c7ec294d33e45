//! Checkpoint and resume: a run stopped (cleanly, or by SIGKILL) after a
//! checkpoint and resumed ends with the same bytes as the run never
//! interrupted: every merged weight and every loss after the resume point.
//!
//! The stop step is drawn from a fresh seed on every run (printed, so a
//! failure replays with `KOLM_TRAIN_TEST_SEED`).

use std::num::NonZeroUsize;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kolm_format::hexbytes::HexBytes;
use kolm_format::job_spec::{Device, Length, Precision, Schedule, Train};
use kolm_kernels::cpu::RopeLayout;
use kolm_kernels::llama::{Config, Rope, Shape, init_params};
use kolm_kernels::rng::SplitMix64;
use kolm_train::cpu::CpuBackend;
use kolm_train::data::{Dataset, steps_for};
use kolm_train::lora::{Layout, TARGETS};
use kolm_train::state::CheckpointPlan;
use kolm_train::{Progress, TrainError, TrainJob, Trained, run};

const TOTAL_STEPS: u64 = 12;
const CHILD_DIR_ENV: &str = "KOLM_TRAIN_KILL_CHILD_DIR";
const CHILD_METHOD_ENV: &str = "KOLM_TRAIN_KILL_CHILD_LORA";

fn cfg() -> Config {
    Config::new(Shape {
        vocab: 37,
        d_model: 32,
        layers: 2,
        q_heads: 2,
        kv_heads: 1,
        head_dim: 64,
        ffn: 48,
        rms_eps: 1e-5,
        rope: Rope {
            layout: RopeLayout::RotateHalf,
            base: 10_000.0,
        },
        ..Shape::smollm2_135m()
    })
    .unwrap()
}

fn hyper() -> Train {
    Train {
        length: Length::Epochs(2),
        batch: 3,
        seq_len: 16,
        lr: 1e-2,
        warmup_steps: 2,
        schedule: Schedule::Cosine,
        min_lr_ratio: 0.1,
        weight_decay: 0.01,
        clip_norm: Some(1.0),
        seed: 77,
        device: Device::Cpu,
        precision: Precision::F32,
        checkpoint_every: Some(1),
    }
}

/// 18 rows of 16: two epochs of batch 3 are 12 steps, and the loader's
/// permutation changes between them.
fn dataset() -> Dataset {
    let mut rng = SplitMix64::new(5);
    let docs: Vec<Vec<u32>> = (0..6)
        .map(|_| (0..47).map(|_| rng.below(37) as u32).collect())
        .collect();
    Dataset::from_text(&docs, Some(36), 16, 0).unwrap()
}

fn method(lora: bool) -> Option<Layout> {
    lora.then(|| {
        let all: Vec<String> = TARGETS.iter().map(|s| s.to_string()).collect();
        Layout::new(&cfg(), 4, 8.0, &all).unwrap()
    })
}

fn backend(lora: bool) -> CpuBackend {
    CpuBackend::new(cfg(), init_params(&cfg(), 3, 0.1), method(lora), 9).unwrap()
}

/// Trains the test job (checkpointing into `dir` when given).
fn train(
    lora: bool,
    dir: Option<&Path>,
    resume: bool,
    stop_after: Option<u64>,
    job_sha: u8,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Trained, TrainError> {
    let ds = dataset();
    let total = steps_for(hyper().length, ds.rows(), hyper().batch as usize).unwrap();
    assert_eq!(total, TOTAL_STEPS);
    let job = TrainJob {
        train: hyper(),
        total_steps: total,
        dataset: ds,
        job_spec_sha256: HexBytes([job_sha; 32]),
        base_model_sha256: HexBytes([2; 32]),
        checkpoint: dir.map(|d| CheckpointPlan {
            dir: d.to_path_buf(),
            every: 1,
            keep: NonZeroUsize::new(2).unwrap(),
        }),
        resume,
        stop_after,
        progress,
    };
    run(job, &mut backend(lora))
}

fn bits(t: &Trained) -> (Vec<u64>, Vec<u32>) {
    (
        t.losses.iter().map(|l| l.to_bits()).collect(),
        t.params.iter().flatten().map(|w| w.to_bits()).collect(),
    )
}

/// The resumed run's losses are the tail of the uninterrupted run's, and
/// its final weights (and adapters) are bit for bit the same.
fn assert_same_end(full: &Trained, resumed: &Trained) {
    let skip = (resumed.first_step - 1) as usize;
    let (fl, fp) = bits(full);
    let (rl, rp) = bits(resumed);
    assert_eq!(fl[skip..], rl[..], "losses after step {skip}");
    assert!(fp == rp, "merged weights differ");
    assert_eq!(full.adapter, resumed.adapter);
}

fn seed() -> u64 {
    let s = std::env::var("KOLM_TRAIN_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(SplitMix64::fresh_seed);
    eprintln!("KOLM_TRAIN_TEST_SEED={s}");
    s
}

#[test]
fn stop_and_resume_is_byte_identical_full_and_lora() {
    let mut rng = SplitMix64::new(seed());
    for lora in [false, true] {
        let whole = train(lora, None, false, None, 1, &mut |_| {}).unwrap();
        assert_eq!(whole.losses.len() as u64, TOTAL_STEPS);
        assert_eq!(whole.adapter.is_some(), lora);
        let stop = 1 + rng.below(TOTAL_STEPS - 1); // 1..=11
        let dir = tempfile::tempdir().unwrap();
        let e = train(lora, Some(dir.path()), false, Some(stop), 1, &mut |_| {}).unwrap_err();
        assert!(
            matches!(e, TrainError::Stopped { step } if step == stop),
            "{e}"
        );
        // A checkpoint of another job is refused, naming the field.
        let e = train(lora, Some(dir.path()), true, None, 7, &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("job_spec_sha256"), "{e}");
        let mut steps = Vec::new();
        let resumed = train(lora, Some(dir.path()), true, None, 1, &mut |p| {
            steps.push(p.step)
        })
        .unwrap();
        assert_eq!(resumed.first_step, stop + 1, "lora {lora}");
        assert_eq!(steps, (stop + 1..=TOTAL_STEPS).collect::<Vec<_>>());
        assert_same_end(&whole, &resumed);
    }
}

/// The child half of the kill test: trains with a checkpoint after every
/// step, slowly enough to be killed mid-run. Does nothing unless the parent
/// set the directory.
#[test]
fn kill_child() {
    let Ok(dir) = std::env::var(CHILD_DIR_ENV) else {
        return;
    };
    let lora = std::env::var(CHILD_METHOD_ENV).is_ok();
    let mut pause = |_: &Progress| std::thread::sleep(Duration::from_millis(40));
    train(lora, Some(Path::new(&dir)), false, None, 1, &mut pause).unwrap();
}

/// The newest `step-<N>` in `dir`.
fn newest_step(dir: &Path) -> Option<u64> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_prefix("step-")?
                .parse()
                .ok()
        })
        .max()
}

#[test]
fn sigkill_and_resume_is_byte_identical() {
    let mut rng = SplitMix64::new(seed());
    for lora in [false, true] {
        let whole = train(lora, None, false, None, 1, &mut |_| {}).unwrap();
        let kill_at = 1 + rng.below(TOTAL_STEPS - 3); // 1..=9: well before the end
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "kill_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR_ENV, dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if lora {
            cmd.env(CHILD_METHOD_ENV, "1");
        }
        let mut child = cmd.spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while newest_step(dir.path()).is_none_or(|s| s < kill_at) {
            if Instant::now() >= deadline {
                // Not left training behind the failed test.
                let _ = child.kill();
                let _ = child.wait();
                panic!("DEADLINE: the child wrote no checkpoint {kill_at} in 60 s");
            }
            assert!(child.try_wait().unwrap().is_none(), "the child ended early");
            std::thread::sleep(Duration::from_millis(1));
        }
        // SIGKILL on Unix: the wait that follows returns at once.
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success(), "the child was killed, not finished");
        let at = newest_step(dir.path()).unwrap();
        assert!(at < TOTAL_STEPS, "killed at step {at}, before the end");
        eprintln!("lora {lora}: killed after checkpoint {at} (aimed at {kill_at})");
        let resumed = train(lora, Some(dir.path()), true, None, 1, &mut |_| {}).unwrap();
        assert_eq!(resumed.first_step, at + 1);
        assert_same_end(&whole, &resumed);
    }
}
