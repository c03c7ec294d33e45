//! The training progress a fine-tune job reports (`--progress json` on
//! its stdout), turned into the host's `train-progress` messages.
//!
//! The job's stdout is the job's: it may carry sealed data, so no text of
//! it crosses. A line that is a `train-step` report gives five integers
//! (step, steps, loss in millionths, tokens/s, seconds left); every other
//! line is dropped. Steps must rise and the step count must stay what the
//! first report said, and at most [`PER_SECOND`] reports a second go out
//! (the last step always does): what the host learns of a job through
//! this path is bounded by its step count.
//!
//! The job's lines are untrusted: the verifier's lint set holds (no
//! unwrap, no indexing, no unchecked arithmetic).
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use std::time::{Duration, Instant};

use kolm_transport::message::{MAX_LOSS_MICROS, TrainProgress};

/// Most `train-progress` messages a second.
pub const PER_SECOND: u32 = 4;
/// The least time between two reports sent.
const GAP: Duration = Duration::from_millis(1000 / PER_SECOND as u64);

/// Reads one line of the job's stdout: a `train-step` report, or `None`.
pub fn parse(line: &str) -> Option<TrainProgress> {
    #[derive(serde::Deserialize)]
    struct Step {
        event: String,
        step: u64,
        total: u64,
        loss: f64,
        tokens_per_s: f64,
        eta_s: f64,
    }
    let s: Step = serde_json::from_str(line).ok()?;
    if s.event != "train-step" || s.step == 0 || s.step > s.total {
        return None;
    }
    let whole = |v: f64| (v.is_finite() && v >= 0.0).then(|| v.round().min(u64::MAX as f64) as u64);
    let loss_micros = whole(s.loss * 1e6)?.min(MAX_LOSS_MICROS);
    Some(TrainProgress {
        step: s.step,
        eta_s: whole(s.eta_s)?,
        steps: s.total,
        loss_micros,
        tokens_per_s: whole(s.tokens_per_s)?,
    })
}

/// Which of the job's reports go to the host, and when.
#[derive(Debug, Default)]
pub struct Relay {
    /// The step count of the first report.
    steps: Option<u64>,
    /// The last step accepted.
    last_step: u64,
    last_sent: Option<Instant>,
    /// The newest report not sent yet (sent once [`GAP`] passed).
    pending: Option<TrainProgress>,
}

impl Relay {
    /// Takes one line of the job's stdout at `now`; returns the report to
    /// send now, if any.
    pub fn line(&mut self, line: &str, now: Instant) -> Option<TrainProgress> {
        let p = parse(line)?;
        if p.step <= self.last_step || *self.steps.get_or_insert(p.steps) != p.steps {
            return None;
        }
        self.last_step = p.step;
        let last = p.step == p.steps;
        self.pending = Some(p);
        if last { self.take(now) } else { self.due(now) }
    }

    /// The held report, once [`GAP`] passed since the last one sent.
    pub fn due(&mut self, now: Instant) -> Option<TrainProgress> {
        match self.last_sent {
            Some(at) if now.saturating_duration_since(at) < GAP => None,
            _ => self.take(now),
        }
    }

    fn take(&mut self, now: Instant) -> Option<TrainProgress> {
        let p = self.pending.take()?;
        self.last_sent = Some(now);
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects
    )]
    use super::*;

    fn step(step: u64, total: u64) -> String {
        format!(
            r#"{{"event":"train-step","step":{step},"total":{total},"loss":3.2145,"lr":0.0003,"grad_norm":1.5,"tokens_per_s":367012.4,"elapsed_s":1.0,"eta_s":93.6}}"#
        )
    }

    #[test]
    fn a_train_step_line_becomes_five_integers() {
        let p = parse(&step(12, 200)).unwrap();
        assert_eq!(
            p,
            TrainProgress {
                step: 12,
                eta_s: 94,
                steps: 200,
                loss_micros: 3_214_500,
                tokens_per_s: 367_012,
            }
        );
    }

    #[test]
    fn any_other_line_is_dropped() {
        for line in [
            "train [####....] step 1/2",
            r#"{"event":"log","line":"patient 12345"}"#,
            &step(0, 200),
            &step(201, 200),
            &step(3, 200).replace("3.2145", "NaN"),
            &step(3, 200).replace("3.2145", "-1.0"),
            &step(3, 200).replace("\"step\":3", "\"step\":\"3\""),
        ] {
            assert_eq!(parse(line), None, "{line}");
        }
    }

    #[test]
    fn at_most_four_a_second_steps_rising_and_the_last_step_always() {
        let t0 = Instant::now();
        let mut r = Relay::default();
        let ms = |n| t0 + Duration::from_millis(n);
        assert_eq!(r.line(&step(1, 10), ms(0)).unwrap().step, 1);
        // Within the gap: held, and replaced by a newer one.
        assert_eq!(r.line(&step(2, 10), ms(50)), None);
        assert_eq!(r.line(&step(3, 10), ms(100)), None);
        assert_eq!(r.due(ms(200)), None);
        assert_eq!(r.due(ms(250)).unwrap().step, 3);
        assert_eq!(r.due(ms(600)), None, "nothing new");
        // A step that does not rise, or another step count: dropped.
        assert_eq!(r.line(&step(3, 10), ms(700)), None);
        assert_eq!(r.line(&step(4, 11), ms(700)), None);
        assert_eq!(r.line(&step(4, 10), ms(700)).unwrap().step, 4);
        // The last step goes at once, gap or not.
        assert_eq!(r.line(&step(10, 10), ms(710)).unwrap().step, 10);
        // 1000 reports in one second: at most PER_SECOND + 1 sent.
        let mut r = Relay::default();
        let sent = (1..=1000u64)
            .filter(|&i| r.line(&step(i, 2000), ms(i)).is_some())
            .count();
        assert!(sent <= PER_SECOND as usize + 1, "{sent}");
    }
}
