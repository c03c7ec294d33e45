//! `train-progress`, enclave to host: how far a fine-tune job's training
//! is, in five integers. Its codec and its rules.

use super::cbor::{Decoder, Encoder};
use super::codec::{Body, Codec, DecodeError};
use super::rules::{Invalid, Rule};

/// How far a fine-tune job's training is, at most a few times a second.
/// Only these integers cross from the job's output: its own words never
/// do (they may carry sealed data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainProgress {
    /// Optimizer steps done, 1 to `steps`.
    pub step: u64,
    /// Seconds left at the current rate.
    pub eta_s: u64,
    /// Optimizer steps in all.
    pub steps: u64,
    /// The training loss of step `step`, in millionths (at most
    /// [`MAX_LOSS_MICROS`]).
    pub loss_micros: u64,
    /// Training tokens per second, over the run so far.
    pub tokens_per_s: u64,
}

/// Largest loss a `train-progress` carries, in millionths (a loss of
/// 10^6: far past any real cross-entropy, whose start is ln(vocabulary)).
pub const MAX_LOSS_MICROS: u64 = 1_000_000_000_000;

impl Codec for TrainProgress {
    fn encode(&self, e: &mut Encoder) {
        e.map(Self::FIELDS);
        e.key("step");
        e.uint(self.step);
        e.key("eta_s");
        e.uint(self.eta_s);
        e.key("steps");
        e.uint(self.steps);
        e.key("loss_micros");
        e.uint(self.loss_micros);
        e.key("tokens_per_s");
        e.uint(self.tokens_per_s);
    }

    fn read(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let mut m = d.map("train-progress", Self::FIELDS)?;
        d.key(&mut m, "step")?;
        let step = d.uint("train-progress.step")?;
        d.key(&mut m, "eta_s")?;
        let eta_s = d.uint("train-progress.eta_s")?;
        d.key(&mut m, "steps")?;
        let steps = d.uint("train-progress.steps")?;
        d.key(&mut m, "loss_micros")?;
        let loss_micros = d.uint("train-progress.loss_micros")?;
        d.key(&mut m, "tokens_per_s")?;
        let tokens_per_s = d.uint("train-progress.tokens_per_s")?;
        d.end(m)?;
        Ok(TrainProgress {
            step,
            eta_s,
            steps,
            loss_micros,
            tokens_per_s,
        })
    }
}

impl Body for TrainProgress {
    /// Deterministic (length-first) key order.
    const FIELDS: &'static [&'static str] =
        &["step", "eta_s", "steps", "loss_micros", "tokens_per_s"];

    fn check(&self) -> Rule {
        if self.step == 0 || self.step > self.steps {
            return Err((
                "train-progress.step",
                Invalid::StepOutOfRange {
                    step: self.step,
                    steps: self.steps,
                },
            ));
        }
        if self.loss_micros > MAX_LOSS_MICROS {
            return Err((
                "train-progress.loss_micros",
                Invalid::LossTooLarge {
                    value: self.loss_micros,
                },
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use ciborium::Value;

    use crate::wire::message::*;
    use crate::wire::test_support::*;

    #[test]
    fn train_progress_round_trips_with_its_five_integers() {
        let bytes = train().encode().unwrap();
        assert_eq!(Message::decode(&bytes).unwrap(), train());
        // A field of another message, or a float for the loss, is refused.
        let extra = mutated(&train(), |i| {
            body(i).push((text("line"), text("sealed words")))
        });
        assert!(Message::decode(&extra).is_err());
        let float = mutated(&train(), |i| body(i)[3].1 = Value::Float(3.2));
        assert!(Message::decode(&float).is_err());
        let t = Message::TrainProgress(TrainProgress {
            step: 0,
            eta_s: 0,
            steps: 0,
            loss_micros: 0,
            tokens_per_s: 0,
        });
        assert!(matches!(
            t.encode(),
            Err(EncodeError::Invalid {
                field: "train-progress.step",
                problem: Invalid::StepOutOfRange { .. }
            })
        ));
    }
}
