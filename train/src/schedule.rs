//! The learning-rate schedule: linear warmup, then cosine or linear decay to
//! `lr * min_lr_ratio` at the last step, or a constant rate.
//!
//! Steps are 1-based (step 1 is the first optimiser update), so the rate of
//! a step is a pure function of `(step, total_steps, spec)`: a resumed run
//! recomputes exactly the rates the uninterrupted one used.

use kolm_format::job_spec::{Schedule, Train};

/// The learning rate of `step` (1-based) of a `total_steps` run.
///
/// - Warmup (`step <= warmup_steps`): `lr * step / warmup_steps`, from
///   `lr / warmup_steps` at step 1 up to `lr` at step `warmup_steps`.
/// - After warmup, with `p = (step - warmup) / (total - warmup)` (so `p = 1`
///   at the last step): cosine `min + (lr - min) (1 + cos(pi p)) / 2`,
///   linear `lr - (lr - min) p`, where `min = lr * min_lr_ratio`; constant
///   stays at `lr`.
///
/// A step past `total_steps` is held at the last step's rate (the loop
/// never asks for one; this keeps the function total).
pub fn lr_at(step: u64, total_steps: u64, train: &Train) -> f64 {
    let lr = train.lr;
    let step = step.max(1);
    let warmup = train.warmup_steps;
    if step <= warmup {
        return lr * step as f64 / warmup as f64;
    }
    let decay_steps = total_steps.saturating_sub(warmup);
    if decay_steps == 0 {
        // Warmup covers the whole run (or more): the last warmup rate holds.
        return lr;
    }
    let p = ((step - warmup) as f64 / decay_steps as f64).min(1.0);
    let min = lr * train.min_lr_ratio;
    match train.schedule {
        Schedule::Constant => lr,
        Schedule::Linear => lr - (lr - min) * p,
        Schedule::Cosine => min + (lr - min) * 0.5 * (1.0 + (std::f64::consts::PI * p).cos()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kolm_format::job_spec::{Device, Length, Precision};

    pub(crate) fn train(schedule: Schedule, warmup: u64) -> Train {
        Train {
            length: Length::Steps(100),
            batch: 8,
            seq_len: 128,
            lr: 1e-3,
            warmup_steps: warmup,
            schedule,
            min_lr_ratio: 0.1,
            weight_decay: 0.0,
            clip_norm: Some(1.0),
            seed: 1,
            device: Device::Cpu,
            precision: Precision::F32,
            checkpoint_every: None,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-15 * a.abs().max(b.abs()).max(1e-300)
    }

    #[test]
    fn warmup_is_linear_from_lr_over_warmup_to_lr() {
        let t = train(Schedule::Cosine, 10);
        assert!(close(lr_at(1, 100, &t), 1e-4));
        assert!(close(lr_at(5, 100, &t), 5e-4));
        assert!(close(lr_at(10, 100, &t), 1e-3));
    }

    #[test]
    fn cosine_and_linear_end_at_min_lr_on_the_last_step() {
        for s in [Schedule::Cosine, Schedule::Linear] {
            let t = train(s, 10);
            assert!(close(lr_at(100, 100, &t), 1e-4), "{s:?}");
            // One step after warmup: just below the peak.
            let first = lr_at(11, 100, &t);
            assert!(first < 1e-3 && first > 9.8e-4, "{s:?}: {first}");
            // Halfway through the decay: the midpoint for both shapes.
            assert!(close(lr_at(55, 100, &t), 5.5e-4), "{s:?}");
            // Monotone non-increasing after warmup.
            let mut prev = f64::INFINITY;
            for step in 10..=100 {
                let lr = lr_at(step, 100, &t);
                assert!(lr <= prev, "{s:?} step {step}");
                prev = lr;
            }
        }
    }

    #[test]
    fn constant_no_warmup_and_degenerate_lengths() {
        let t = train(Schedule::Constant, 0);
        assert_eq!(lr_at(1, 100, &t), 1e-3);
        assert_eq!(lr_at(100, 100, &t), 1e-3);
        let t = train(Schedule::Cosine, 0);
        assert_eq!(lr_at(1, 1, &t), 1e-4, "a one-step run ends at min lr");
        let t = train(Schedule::Cosine, 20);
        assert_eq!(lr_at(10, 10, &t), 5e-4, "warmup longer than the run");
        assert!(close(lr_at(0, 100, &t), 5e-5), "step 0 is read as step 1");
        assert!(
            close(lr_at(500, 100, &t), 1e-4),
            "past the end holds the last rate"
        );
    }
}
