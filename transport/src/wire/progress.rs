//! `progress`, enclave to host: `done` of `total` units of a phase. Its
//! codec and its rules.

use super::cbor::{Decoder, Encoder};
use super::codec::{Body, Codec, DecodeError};
use super::rules::{Invalid, Rule};

/// Longest progress phase name.
pub const MAX_PHASE: usize = 64;

/// Progress of the job: `done` of `total` units of `phase`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Units done, at most `total`.
    pub done: u64,
    /// What is progressing: 1 to [`MAX_PHASE`] bytes of `a-z`, `0-9`, `-`.
    pub phase: String,
    /// Units in all.
    pub total: u64,
}

impl Codec for Progress {
    fn encode(&self, e: &mut Encoder) {
        e.map(Self::FIELDS);
        e.key("done");
        e.uint(self.done);
        e.key("phase");
        e.text(&self.phase);
        e.key("total");
        e.uint(self.total);
    }

    fn read(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let mut m = d.map("progress", Self::FIELDS)?;
        d.key(&mut m, "done")?;
        let done = d.uint("progress.done")?;
        d.key(&mut m, "phase")?;
        let phase = d.text("progress.phase", MAX_PHASE)?.to_owned();
        d.key(&mut m, "total")?;
        let total = d.uint("progress.total")?;
        d.end(m)?;
        Ok(Progress { done, phase, total })
    }
}

impl Body for Progress {
    const FIELDS: &'static [&'static str] = &["done", "phase", "total"];

    fn check(&self) -> Rule {
        if !valid_phase(&self.phase) {
            return Err((
                "progress.phase",
                Invalid::Phase {
                    value: self.phase.chars().take(MAX_PHASE).collect(),
                },
            ));
        }
        if self.done > self.total {
            return Err((
                "progress.done",
                Invalid::DoneOverTotal {
                    done: self.done,
                    total: self.total,
                },
            ));
        }
        Ok(())
    }
}

fn valid_phase(p: &str) -> bool {
    (1..=MAX_PHASE).contains(&p.len())
        && p.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}
