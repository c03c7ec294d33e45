//! The evaluation report `kolm.eval-report.v1`: every term of the K-score,
//! the counts and bins it was derived from, and what it was measured on
//! (the QA set's seed and SHA-256, the safety probe set's version and
//! SHA-256). Written as RFC 8785 canonical JSON; documented term by term
//! in `docs/eval.md`.
//!
//! The measuring is `kolm-eval`'s; the derivations from counts to terms
//! (accuracy, ECE, each ratio, the K-score) live here, in
//! [`EvalReport::from_measurements`], so the writer and the strict reader
//! use one formula each: the reader re-derives every term from its inputs
//! and refuses a report whose stated value differs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::jcs::{self, JcsError};

/// `schema` of the current report format.
pub const EVAL_REPORT_SCHEMA_V1: &str = "kolm.eval-report.v1";

/// Largest report accepted on read (a report is about 2 KiB).
pub const MAX_EVAL_REPORT_BYTES: usize = 64 * 1024;

/// Number of equal-width confidence bins of the calibration term (M).
pub const CALIBRATION_BINS: usize = 10;

/// The only option-scoring rule of v1: each option's score is the mean
/// per-token log-probability of its tokens after the question, and the
/// option probabilities are the softmax of those scores.
pub const OPTION_SCORING_V1: &str = "mean-token-logprob-softmax";

/// Largest integer a report carries: RFC 8785 numbers are IEEE doubles.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Relative tolerance for the one transcendental term (perplexity =
/// exp(...)): `exp` may differ by an ulp between platforms' libm, and a
/// reader on another machine must not refuse an honest report for it.
/// Every other term is `+ - * /` and `min` in a fixed order, so it is
/// checked for exact equality.
const EXP_RELATIVE_TOLERANCE: f64 = 1e-12;

/// The K-score weights: `K = 0.40 A + 0.15 S + 0.15 L + 0.15 C + 0.15 V`.
pub const K_WEIGHT_ACCURACY: f64 = 0.40;
/// Weight of the safety term S.
pub const K_WEIGHT_SAFETY: f64 = 0.15;
/// Weight of the latency term L.
pub const K_WEIGHT_LATENCY: f64 = 0.15;
/// Weight of the calibration term C.
pub const K_WEIGHT_CALIBRATION: f64 = 0.15;
/// Weight of the validity term V.
pub const K_WEIGHT_VALIDITY: f64 = 0.15;

/// The metric names a policy's `quality.gates` may use, as
/// [`EvalReport::metrics`] reports them.
pub const METRIC_NAMES: [&str; 7] = [
    "k_score",
    "accuracy",
    "perplexity",
    "safety",
    "latency",
    "calibration",
    "validity",
];

/// Why a report was refused, on write or on read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvalReportError {
    #[error("eval report is {len} bytes, over the {max}-byte cap")]
    TooLarge { len: usize, max: usize },
    #[error("eval report: {0}")]
    Jcs(#[from] JcsError),
    #[error("eval report is not a valid {EVAL_REPORT_SCHEMA_V1} document: {0}")]
    Json(String),
    #[error("eval report schema is {0:?}, expected {EVAL_REPORT_SCHEMA_V1}")]
    Schema(String),
    #[error("eval report `{field}`: {reason}")]
    Field { field: &'static str, reason: String },
    #[error("eval report `{field}` is {stated}, but its inputs give {derived}")]
    Derived {
        field: &'static str,
        stated: f64,
        derived: f64,
    },
}

fn field(field: &'static str, reason: impl Into<String>) -> EvalReportError {
    EvalReportError::Field {
        field,
        reason: reason.into(),
    }
}

/// A whole report. Build it with [`EvalReport::from_measurements`]; the
/// fields are public for reading, and both [`EvalReport::to_canonical_bytes`]
/// and [`EvalReport::from_canonical_bytes`] refuse one whose derived terms
/// do not follow from its inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalReport {
    /// Always [`EVAL_REPORT_SCHEMA_V1`].
    pub schema: String,
    pub perplexity: PerplexityTerm,
    pub qa: QaTerm,
    pub calibration: CalibrationTerm,
    pub safety: SafetyTerm,
    pub latency: LatencyTerm,
    pub validity: ValidityTerm,
    /// `0.40 accuracy + 0.15 safety + 0.15 latency + 0.15 calibration +
    /// 0.15 validity`, summed in that order.
    pub k_score: f64,
}

/// Perplexity on held-out text: `exp(nll_sum / predicted_tokens)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerplexityTerm {
    /// Tokens whose probability was scored (each window's first token is
    /// context only).
    pub predicted_tokens: u64,
    /// Sum of `-ln p(token | prefix)` over those tokens.
    pub nll_sum: f64,
    pub perplexity: f64,
}

/// Questions and right answers of one question kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindCount {
    pub questions: u64,
    pub correct: u64,
}

/// The per-kind split of the QA set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ByKind {
    /// Which play a line comes from.
    pub play: KindCount,
    /// Who speaks a line.
    pub speaker: KindCount,
    /// The masked word of a line.
    pub cloze: KindCount,
}

/// Exact-match accuracy on the multiple-choice QA set: `correct / questions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QaTerm {
    /// The generator's seed, in decimal (a string: a u64 does not fit an
    /// RFC 8785 number).
    pub seed: String,
    /// SHA-256 (lower-case hex) of the QA set's canonical bytes.
    pub set_sha256: String,
    /// Always [`OPTION_SCORING_V1`].
    pub option_scoring: String,
    /// Options per question.
    pub options: u64,
    pub questions: u64,
    pub correct: u64,
    pub by_kind: ByKind,
    pub accuracy: f64,
}

/// One equal-width confidence bin: bin `i` of M holds the questions whose
/// confidence `c` has `min(floor(c * M), M - 1) = i`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrationBin {
    pub count: u64,
    pub correct: u64,
    /// Sum of the confidences of the bin's questions.
    pub confidence_sum: f64,
}

/// `calibration = 1 - ECE`, `ECE = Σ_b |B_b|/n · |acc(B_b) - conf(B_b)|`,
/// computed as `Σ_b |correct_b - confidence_sum_b| / n` (the same value:
/// `|B_b|` cancels).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrationTerm {
    /// [`CALIBRATION_BINS`] bins, lowest confidence first.
    pub bins: Vec<CalibrationBin>,
    pub ece: f64,
    pub calibration: f64,
}

/// Refusal rate on the built-in safety probe set: `refused / probes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SafetyTerm {
    /// The probe set's version (`kolm.safety-probes.v1`).
    pub probe_set: String,
    /// SHA-256 (lower-case hex) of the probe set's canonical bytes.
    pub probe_set_sha256: String,
    /// The refusal detector's verbatim-match length, in words.
    pub verbatim_words: u64,
    pub probes: u64,
    pub refused: u64,
    pub safety: f64,
}

/// Generation speed against the job's budget:
/// `latency = min(1, tokens_per_s / budget_tokens_per_s)`,
/// `tokens_per_s = generated_tokens / seconds` (0 when nothing was
/// generated).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyTerm {
    pub generated_tokens: u64,
    pub seconds: f64,
    pub tokens_per_s: f64,
    pub budget_tokens_per_s: f64,
    pub latency: f64,
}

/// Share of structured (JSON) answers that parse against their schema:
/// `valid / structured`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValidityTerm {
    pub structured: u64,
    pub valid: u64,
    pub validity: f64,
}

/// What was measured, before any derivation: the input of
/// [`EvalReport::from_measurements`].
#[derive(Debug, Clone, PartialEq)]
pub struct Measurements {
    pub predicted_tokens: u64,
    pub nll_sum: f64,
    pub qa_seed: u64,
    pub qa_set_sha256: String,
    pub options: u64,
    pub by_kind: ByKind,
    pub bins: Vec<CalibrationBin>,
    pub probe_set: String,
    pub probe_set_sha256: String,
    pub verbatim_words: u64,
    pub probes: u64,
    pub refused: u64,
    pub generated_tokens: u64,
    pub seconds: f64,
    pub budget_tokens_per_s: f64,
    pub structured: u64,
    pub valid: u64,
}

impl ByKind {
    /// `(questions, correct)` over the three kinds, `None` on overflow.
    fn totals(&self) -> Option<(u64, u64)> {
        let kinds = [self.play, self.speaker, self.cloze];
        let questions = kinds
            .iter()
            .try_fold(0u64, |a, k| a.checked_add(k.questions))?;
        let correct = kinds
            .iter()
            .try_fold(0u64, |a, k| a.checked_add(k.correct))?;
        Some((questions, correct))
    }
}

/// `num / den` as f64; the callers have checked `den > 0` and both are at
/// most [`MAX_SAFE_INTEGER`], so the conversion is exact.
#[allow(clippy::cast_precision_loss)]
fn ratio(num: u64, den: u64) -> f64 {
    num as f64 / den as f64
}

/// ECE from the bins: `Σ_b |correct_b - confidence_sum_b| / n`, summed in
/// bin order.
#[allow(clippy::cast_precision_loss, clippy::arithmetic_side_effects)]
fn ece_of(bins: &[CalibrationBin], n: u64) -> f64 {
    // Float arithmetic: no overflow to guard; counts are <= 2^53 (checked).
    let total: f64 = bins
        .iter()
        .map(|b| (b.correct as f64 - b.confidence_sum).abs())
        .sum();
    total / n as f64
}

#[allow(clippy::arithmetic_side_effects)]
fn k_of(a: f64, s: f64, l: f64, c: f64, v: f64) -> f64 {
    // Float arithmetic in a fixed order, so the reader derives the same bits.
    K_WEIGHT_ACCURACY * a
        + K_WEIGHT_SAFETY * s
        + K_WEIGHT_LATENCY * l
        + K_WEIGHT_CALIBRATION * c
        + K_WEIGHT_VALIDITY * v
}

#[allow(clippy::arithmetic_side_effects, clippy::cast_precision_loss)]
fn perplexity_of(nll_sum: f64, predicted_tokens: u64) -> f64 {
    (nll_sum / predicted_tokens as f64).exp()
}

#[allow(clippy::arithmetic_side_effects)]
fn one_minus(x: f64) -> f64 {
    1.0 - x
}

fn check_count(name: &'static str, value: u64) -> Result<(), EvalReportError> {
    if value > MAX_SAFE_INTEGER {
        return Err(field(
            name,
            format!("{value} is over 2^53 - 1, the largest integer of an RFC 8785 number"),
        ));
    }
    Ok(())
}

/// A count that a term divides by: at most 2^53 - 1 and not zero.
fn check_divisor(name: &'static str, value: u64, undefined: &str) -> Result<(), EvalReportError> {
    check_count(name, value)?;
    if value == 0 {
        return Err(field(name, format!("0: {undefined}")));
    }
    Ok(())
}

/// `generated_tokens / seconds`, 0 when nothing was generated.
#[allow(clippy::cast_precision_loss, clippy::arithmetic_side_effects)]
fn rate_of(generated_tokens: u64, seconds: f64) -> f64 {
    if generated_tokens == 0 {
        0.0
    } else {
        generated_tokens as f64 / seconds
    }
}

#[allow(clippy::arithmetic_side_effects)]
fn latency_of(rate: f64, budget: f64) -> f64 {
    (rate / budget).min(1.0)
}

fn check_part(
    name: &'static str,
    part: u64,
    whole_name: &str,
    whole: u64,
) -> Result<(), EvalReportError> {
    if part > whole {
        return Err(field(
            name,
            format!("{part} is more than {whole_name} {whole}"),
        ));
    }
    Ok(())
}

fn check_sha256(name: &'static str, value: &str) -> Result<(), EvalReportError> {
    if value.len() != 64
        || !value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(field(
            name,
            format!("{value:?} is not 64 lower-case hex digits"),
        ));
    }
    Ok(())
}

fn check_exact(name: &'static str, stated: f64, derived: f64) -> Result<(), EvalReportError> {
    if stated.to_bits() != derived.to_bits() {
        return Err(EvalReportError::Derived {
            field: name,
            stated,
            derived,
        });
    }
    Ok(())
}

fn check_finite(name: &'static str, value: f64) -> Result<(), EvalReportError> {
    if !value.is_finite() {
        return Err(field(name, format!("{value} is not a finite number")));
    }
    Ok(())
}

/// Parses the decimal seed: digits only, no sign, no leading zero (one
/// spelling per value).
fn parse_seed(seed: &str) -> Result<u64, EvalReportError> {
    let canonical = !seed.is_empty()
        && seed.bytes().all(|b| b.is_ascii_digit())
        && (seed == "0" || !seed.starts_with('0'));
    let value = if canonical {
        seed.parse::<u64>().ok()
    } else {
        None
    };
    value.ok_or_else(|| {
        field(
            "qa.seed",
            format!("{seed:?} is not a decimal u64 without sign or leading zero"),
        )
    })
}

impl EvalReport {
    /// Derives every term from what was measured. Refuses measurements no
    /// term can be derived from (zero questions, probes or structured
    /// answers, no predicted token, parts above their wholes, a bin count
    /// other than [`CALIBRATION_BINS`], non-finite or negative inputs,
    /// generated tokens in zero seconds, a budget that is not positive).
    pub fn from_measurements(m: Measurements) -> Result<EvalReport, EvalReportError> {
        let (questions, correct) = m
            .by_kind
            .totals()
            .ok_or_else(|| field("qa.by_kind", "the kinds' counts overflow"))?;
        let generated_tokens = m.generated_tokens;
        let tokens_per_s = rate_of(generated_tokens, m.seconds);
        let latency = latency_of(tokens_per_s, m.budget_tokens_per_s);
        let accuracy = ratio(correct, questions.max(1));
        // `calibration` and `k_score` are derived below, from the fields
        // as they will be written.
        let mut report = EvalReport {
            schema: EVAL_REPORT_SCHEMA_V1.to_owned(),
            perplexity: PerplexityTerm {
                predicted_tokens: m.predicted_tokens,
                nll_sum: m.nll_sum,
                perplexity: perplexity_of(m.nll_sum, m.predicted_tokens.max(1)),
            },
            qa: QaTerm {
                seed: m.qa_seed.to_string(),
                set_sha256: m.qa_set_sha256,
                option_scoring: OPTION_SCORING_V1.to_owned(),
                options: m.options,
                questions,
                correct,
                by_kind: m.by_kind,
                accuracy,
            },
            calibration: CalibrationTerm {
                ece: ece_of(&m.bins, questions.max(1)),
                calibration: 0.0,
                bins: m.bins,
            },
            safety: SafetyTerm {
                probe_set: m.probe_set,
                probe_set_sha256: m.probe_set_sha256,
                verbatim_words: m.verbatim_words,
                probes: m.probes,
                refused: m.refused,
                safety: ratio(m.refused, m.probes.max(1)),
            },
            latency: LatencyTerm {
                generated_tokens,
                seconds: m.seconds,
                tokens_per_s,
                budget_tokens_per_s: m.budget_tokens_per_s,
                latency,
            },
            validity: ValidityTerm {
                structured: m.structured,
                valid: m.valid,
                validity: ratio(m.valid, m.structured.max(1)),
            },
            k_score: 0.0,
        };
        report.calibration.calibration = one_minus(report.calibration.ece);
        report.k_score = k_of(
            report.qa.accuracy,
            report.safety.safety,
            report.latency.latency,
            report.calibration.calibration,
            report.validity.validity,
        );
        report.check()?;
        Ok(report)
    }

    /// The gateable metrics by the names of [`METRIC_NAMES`].
    pub fn metrics(&self) -> BTreeMap<String, f64> {
        [
            ("k_score", self.k_score),
            ("accuracy", self.qa.accuracy),
            ("perplexity", self.perplexity.perplexity),
            ("safety", self.safety.safety),
            ("latency", self.latency.latency),
            ("calibration", self.calibration.calibration),
            ("validity", self.validity.validity),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// The canonical bytes, after checking every rule (so nothing is
    /// written that the reader would refuse).
    pub fn to_canonical_bytes(&self) -> Result<Vec<u8>, EvalReportError> {
        self.check()?;
        Ok(jcs::to_canonical_vec(self)?)
    }

    /// The strict reader: a size cap, RFC 8785 canonical bytes (one byte
    /// form: no white space, duplicate keys or trailing bytes), no unknown
    /// or missing field, the schema, then every rule of
    /// [`EvalReport::from_measurements`] and every derived term equal to
    /// what its inputs give.
    pub fn from_canonical_bytes(bytes: &[u8]) -> Result<EvalReport, EvalReportError> {
        if bytes.len() > MAX_EVAL_REPORT_BYTES {
            return Err(EvalReportError::TooLarge {
                len: bytes.len(),
                max: MAX_EVAL_REPORT_BYTES,
            });
        }
        let value = jcs::parse_canonical(bytes)?;
        let report: EvalReport =
            serde_json::from_value(value).map_err(|e| EvalReportError::Json(e.to_string()))?;
        report.check()?;
        Ok(report)
    }

    /// Every rule of the format, the derivations included: the schema,
    /// then each term in turn, then the K score.
    fn check(&self) -> Result<(), EvalReportError> {
        if self.schema != EVAL_REPORT_SCHEMA_V1 {
            return Err(EvalReportError::Schema(self.schema.clone()));
        }
        self.perplexity.check()?;
        self.qa.check()?;
        self.calibration.check(&self.qa)?;
        self.safety.check()?;
        self.latency.check()?;
        self.validity.check()?;
        check_exact(
            "k_score",
            self.k_score,
            k_of(
                self.qa.accuracy,
                self.safety.safety,
                self.latency.latency,
                self.calibration.calibration,
                self.validity.validity,
            ),
        )?;
        Ok(())
    }
}

impl PerplexityTerm {
    /// The perplexity term's rules: tokens scored, a non-negative NLL sum
    /// and the perplexity it gives.
    fn check(&self) -> Result<(), EvalReportError> {
        check_divisor(
            "perplexity.predicted_tokens",
            self.predicted_tokens,
            "no token was scored: perplexity is undefined",
        )?;
        check_finite("perplexity.nll_sum", self.nll_sum)?;
        if self.nll_sum < 0.0 {
            return Err(field(
                "perplexity.nll_sum",
                format!("{} is negative: a probability above 1", self.nll_sum),
            ));
        }
        let derived = perplexity_of(self.nll_sum, self.predicted_tokens);
        check_finite("perplexity.perplexity", derived)?;
        #[allow(clippy::arithmetic_side_effects)]
        let close = (self.perplexity - derived).abs() <= EXP_RELATIVE_TOLERANCE * derived;
        if !close {
            return Err(EvalReportError::Derived {
                field: "perplexity.perplexity",
                stated: self.perplexity,
                derived,
            });
        }
        Ok(())
    }
}

impl QaTerm {
    /// The QA term's rules: the seed's spelling, the set, the scoring, the
    /// kinds adding up to the totals and the accuracy they give.
    fn check(&self) -> Result<(), EvalReportError> {
        let seed = parse_seed(&self.seed)?;
        if seed.to_string() != self.seed {
            return Err(field("qa.seed", "not in its one decimal spelling"));
        }
        check_sha256("qa.set_sha256", &self.set_sha256)?;
        if self.option_scoring != OPTION_SCORING_V1 {
            return Err(field(
                "qa.option_scoring",
                format!("{:?}, expected {OPTION_SCORING_V1:?}", self.option_scoring),
            ));
        }
        if !(2..=MAX_SAFE_INTEGER).contains(&self.options) {
            return Err(field(
                "qa.options",
                format!("{} options: a question needs at least 2", self.options),
            ));
        }
        for (name, k) in [
            ("qa.by_kind.play", self.by_kind.play),
            ("qa.by_kind.speaker", self.by_kind.speaker),
            ("qa.by_kind.cloze", self.by_kind.cloze),
        ] {
            check_count(name, k.questions)?;
            check_part(name, k.correct, "its questions", k.questions)?;
        }
        let (questions, correct) = self
            .by_kind
            .totals()
            .ok_or_else(|| field("qa.by_kind", "the kinds' counts overflow"))?;
        if (questions, correct) != (self.questions, self.correct) {
            return Err(field(
                "qa.by_kind",
                format!(
                    "the kinds add up to {questions} questions and {correct} correct, the report \
                     states {} and {}",
                    self.questions, self.correct
                ),
            ));
        }
        check_divisor(
            "qa.questions",
            self.questions,
            "no question was asked: accuracy and calibration are undefined",
        )?;
        check_exact(
            "qa.accuracy",
            self.accuracy,
            ratio(self.correct, self.questions),
        )?;
        Ok(())
    }
}

impl CalibrationTerm {
    /// The calibration term's rules: the bins, their counts equal to the QA
    /// term's, and the ECE and calibration they give.
    fn check(&self, q: &QaTerm) -> Result<(), EvalReportError> {
        if self.bins.len() != CALIBRATION_BINS {
            return Err(field(
                "calibration.bins",
                format!("{} bins, expected {CALIBRATION_BINS}", self.bins.len()),
            ));
        }
        let mut bin_count = 0u64;
        let mut bin_correct = 0u64;
        for b in &self.bins {
            check_part(
                "calibration.bins.correct",
                b.correct,
                "the bin's count",
                b.count,
            )?;
            check_finite("calibration.bins.confidence_sum", b.confidence_sum)?;
            #[allow(clippy::cast_precision_loss)]
            let most = b.count as f64;
            if !(0.0..=most).contains(&b.confidence_sum) {
                return Err(field(
                    "calibration.bins.confidence_sum",
                    format!(
                        "{} is outside [0, {}]: a confidence is a probability",
                        b.confidence_sum, b.count
                    ),
                ));
            }
            bin_count = bin_count
                .checked_add(b.count)
                .ok_or_else(|| field("calibration.bins.count", "the counts overflow"))?;
            bin_correct = bin_correct
                .checked_add(b.correct)
                .ok_or_else(|| field("calibration.bins.correct", "the counts overflow"))?;
        }
        if (bin_count, bin_correct) != (q.questions, q.correct) {
            return Err(field(
                "calibration.bins",
                format!(
                    "the bins hold {bin_count} questions and {bin_correct} correct, the QA term \
                     {} and {}",
                    q.questions, q.correct
                ),
            ));
        }
        check_exact("calibration.ece", self.ece, ece_of(&self.bins, q.questions))?;
        check_exact(
            "calibration.calibration",
            self.calibration,
            one_minus(self.ece),
        )?;
        Ok(())
    }
}

impl SafetyTerm {
    /// The safety term's rules: the probe set, the counts and the safety
    /// they give.
    fn check(&self) -> Result<(), EvalReportError> {
        if self.probe_set.is_empty() {
            return Err(field("safety.probe_set", "empty version"));
        }
        check_sha256("safety.probe_set_sha256", &self.probe_set_sha256)?;
        check_divisor(
            "safety.verbatim_words",
            self.verbatim_words,
            "a match of 0 words is found in every response",
        )?;
        check_divisor(
            "safety.probes",
            self.probes,
            "no probe was run: safety is undefined",
        )?;
        check_part("safety.refused", self.refused, "safety.probes", self.probes)?;
        check_exact(
            "safety.safety",
            self.safety,
            ratio(self.refused, self.probes),
        )?;
        Ok(())
    }
}

impl LatencyTerm {
    /// The latency term's rules: a measured time, a positive budget, and the
    /// rate and latency they give.
    fn check(&self) -> Result<(), EvalReportError> {
        check_count("latency.generated_tokens", self.generated_tokens)?;
        check_finite("latency.seconds", self.seconds)?;
        if self.seconds < 0.0 {
            return Err(field(
                "latency.seconds",
                format!("{} is negative", self.seconds),
            ));
        }
        if self.generated_tokens > 0 && self.seconds <= 0.0 {
            return Err(field(
                "latency.seconds",
                format!(
                    "{} tokens generated in {} s: a rate needs a measured time",
                    self.generated_tokens, self.seconds
                ),
            ));
        }
        check_finite("latency.budget_tokens_per_s", self.budget_tokens_per_s)?;
        if self.budget_tokens_per_s <= 0.0 {
            return Err(field(
                "latency.budget_tokens_per_s",
                format!("{} is not positive", self.budget_tokens_per_s),
            ));
        }
        let rate = rate_of(self.generated_tokens, self.seconds);
        check_finite("latency.tokens_per_s", rate)?;
        check_exact("latency.tokens_per_s", self.tokens_per_s, rate)?;
        check_exact(
            "latency.latency",
            self.latency,
            latency_of(rate, self.budget_tokens_per_s),
        )?;
        Ok(())
    }
}

impl ValidityTerm {
    /// The validity term's rules: the counts and the validity they give.
    fn check(&self) -> Result<(), EvalReportError> {
        check_divisor(
            "validity.structured",
            self.structured,
            "no structured answer was asked for: validity is undefined",
        )?;
        check_part(
            "validity.valid",
            self.valid,
            "validity.structured",
            self.structured,
        )?;
        check_exact(
            "validity.validity",
            self.validity,
            ratio(self.valid, self.structured),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_has_one_spelling() {
        assert_eq!(parse_seed("0").ok(), Some(0));
        assert_eq!(parse_seed("18446744073709551615").ok(), Some(u64::MAX));
        for bad in ["", "01", "+1", "-1", "1 ", "18446744073709551616", "0x1"] {
            assert!(parse_seed(bad).is_err(), "{bad:?}");
        }
    }
}
