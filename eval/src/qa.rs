//! The QA set: multiple-choice questions generated deterministically from
//! held-out plays, and their scoring by the model's log-probabilities.
//!
//! Three kinds, in turn (question `i` is kind `i mod 3`):
//! - **play**: which play a line comes from, among [`QaConfig::options`]
//!   play titles;
//! - **speaker**: who speaks a line, among speakers of the same play;
//! - **cloze**: the masked word of a line (a word of at least
//!   [`CLOZE_MIN_LETTERS`] letters replaced by [`BLANK`]), among words of
//!   the same play (all options lower-case).
//!
//! Only lines of at least [`MIN_LINE_WORDS`] words are asked about. All
//! choices come from one [SplitMix64] stream seeded with
//! [`QaConfig::seed`], in a fixed order (play, line, distractors, answer
//! position), over pools sorted by byte value: the same seed and texts give
//! the same set byte for byte ([`QaSet::to_canonical_bytes`], hashed into
//! the report by [`QaSet::sha256`]).
//!
//! Scoring ([`score_question`]): the context is the question followed by
//! `\nAnswer:`, each option's continuation is a space and the option. An
//! option's score is the mean log-probability of its tokens (length
//! normalised, so a long title is not penalised for its length); the
//! option probabilities are the softmax of the scores; the prediction is
//! the arg-max (the first on a tie). The same pass gives the accuracy (is
//! the prediction the answer) and the calibration (the prediction's
//! probability is its confidence).
//!
//! [SplitMix64]: https://prng.di.unimi.it/splitmix64.c

use std::collections::BTreeSet;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::EvalError;
use crate::play::Play;
use crate::rng::SplitMix64;
use crate::scorer::{Scorer, checked_logprobs};

/// `schema` of the QA set's canonical JSON.
pub const QA_SET_SCHEMA_V1: &str = "kolm.qa-set.v1";
/// Fewest words in a line a question is asked about.
pub const MIN_LINE_WORDS: usize = 6;
/// Fewest letters of a cloze word.
pub const CLOZE_MIN_LETTERS: usize = 4;
/// What replaces the cloze word.
pub const BLANK: &str = "_____";

/// Why a QA set cannot be generated or scored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QaError {
    #[error("`{field}`: {reason}")]
    Config { field: &'static str, reason: String },
    #[error("{plays} play(s) given: play questions need at least {options} (one per option)")]
    TooFewPlays { plays: usize, options: usize },
    #[error("two plays have the title {0:?}: a play question could not tell them apart")]
    DuplicateTitle(String),
    #[error("play {title:?}: {reason}")]
    PlayTooSmall { title: String, reason: String },
    #[error("question {question}: option {option:?} tokenizes to nothing")]
    EmptyOption { question: usize, option: String },
    #[error("question {question}: answer index {answer} of {options} options")]
    AnswerOutOfRange {
        question: usize,
        answer: usize,
        options: usize,
    },
}

/// The kind of a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QuestionKind {
    Play,
    Speaker,
    Cloze,
}

/// One multiple-choice question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Question {
    pub kind: QuestionKind,
    /// The question text, without the answer cue.
    pub question: String,
    pub options: Vec<String>,
    /// Index of the right option.
    pub answer: usize,
    /// Whether a structured (JSON) answer is also asked for.
    pub structured: bool,
}

impl Question {
    /// The context the options are scored after.
    pub fn scoring_context(&self) -> String {
        format!("{}\nAnswer:", self.question)
    }

    /// The continuation scored for option `option`.
    pub fn scoring_continuation(option: &str) -> String {
        format!(" {option}")
    }

    /// The request for a structured answer (see `validity`).
    pub fn structured_prompt(&self) -> String {
        format!(
            "{}\nOptions: {}\nReply with only a JSON object of the form {{\"answer\": \"...\"}} \
             whose answer is one of the options, written exactly.",
            self.question,
            self.options.join(" | ")
        )
    }
}

/// What to generate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QaConfig {
    pub seed: u64,
    /// Number of questions.
    pub questions: usize,
    /// Options per question (at least 2).
    pub options: usize,
    /// Every `structured_every`-th question (the 1-based index divisible
    /// by it) also asks for a structured answer; at least 1.
    pub structured_every: usize,
}

/// A generated QA set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QaSet {
    #[serde(skip)]
    pub seed: u64,
    pub options: usize,
    pub questions: Vec<Question>,
}

#[derive(Serialize)]
struct QaSetDocument<'a> {
    schema: &'static str,
    seed: String,
    #[serde(flatten)]
    set: &'a QaSet,
}

impl QaSet {
    /// The set as RFC 8785 canonical JSON (`kolm.qa-set.v1`; the seed as
    /// a decimal string).
    pub fn to_canonical_bytes(&self) -> Result<Vec<u8>, EvalError> {
        Ok(kolm_format::jcs::to_canonical_vec(&QaSetDocument {
            schema: QA_SET_SCHEMA_V1,
            seed: self.seed.to_string(),
            set: self,
        })?)
    }

    /// SHA-256 of [`QaSet::to_canonical_bytes`], lower-case hex.
    pub fn sha256(&self) -> Result<String, EvalError> {
        Ok(hex::encode(Sha256::digest(self.to_canonical_bytes()?)))
    }
}

/// What each play offers the generator.
struct Pool<'a> {
    title: &'a str,
    /// `(speaker, line)` of every line with enough words.
    lines: Vec<(&'a str, &'a str)>,
    /// Distinct speakers, sorted.
    speakers: Vec<&'a str>,
    /// Distinct cloze words of the play, lower-case, sorted.
    words: Vec<String>,
}

/// The cloze word inside a whitespace-separated token: the token without
/// leading and trailing non-letters, when that is all letters and long
/// enough.
fn cloze_core(token: &str) -> Option<&str> {
    let core = token.trim_matches(|c: char| !c.is_alphabetic());
    (core.chars().count() >= CLOZE_MIN_LETTERS && core.chars().all(char::is_alphabetic))
        .then_some(core)
}

fn pool(play: &Play, options: usize) -> Result<Pool<'_>, QaError> {
    let too_small = |reason: String| QaError::PlayTooSmall {
        title: play.title.clone(),
        reason,
    };
    let lines: Vec<(&str, &str)> = play
        .speeches
        .iter()
        .flat_map(|s| s.lines.iter().map(|l| (s.speaker.as_str(), l.as_str())))
        .filter(|(_, l)| {
            l.split_whitespace().count() >= MIN_LINE_WORDS
                && !l.contains(BLANK)
                && l.split_whitespace().any(|t| cloze_core(t).is_some())
        })
        .collect();
    if lines.is_empty() {
        return Err(too_small(format!(
            "no line of {MIN_LINE_WORDS} words or more with a cloze word"
        )));
    }
    let speakers = play.speakers();
    if speakers.len() < options {
        return Err(too_small(format!(
            "{} speakers, fewer than the {options} options",
            speakers.len()
        )));
    }
    let words: BTreeSet<String> = play
        .speeches
        .iter()
        .flat_map(|s| s.lines.iter())
        .flat_map(|l| l.split_whitespace())
        .filter_map(cloze_core)
        .map(str::to_lowercase)
        .collect();
    if words.len() < options {
        return Err(too_small(format!(
            "{} distinct cloze words, fewer than the {options} options",
            words.len()
        )));
    }
    Ok(Pool {
        title: &play.title,
        lines,
        speakers,
        words: words.into_iter().collect(),
    })
}

fn pick<'p, T>(rng: &mut SplitMix64, items: &'p [T]) -> Option<&'p T> {
    items.get(rng.below(items.len()))
}

/// `options - 1` distinct distractors from `pool` (which excludes the
/// answer), then the answer at a random position.
fn options_with(
    rng: &mut SplitMix64,
    answer: &str,
    pool: &[&str],
    options: usize,
) -> (Vec<String>, usize) {
    let mut candidates: Vec<&str> = pool.iter().copied().filter(|c| *c != answer).collect();
    let wanted = options.saturating_sub(1).min(candidates.len());
    // Partial Fisher-Yates: the first `wanted` become a uniform sample.
    for j in 0..wanted {
        let r = j.saturating_add(rng.below(candidates.len().saturating_sub(j)));
        candidates.swap(j, r);
    }
    let mut chosen: Vec<String> = candidates
        .iter()
        .take(wanted)
        .map(|c| (*c).to_owned())
        .collect();
    let at = rng.below(wanted.saturating_add(1));
    chosen.insert(at, answer.to_owned());
    (chosen, at)
}

/// Generates the QA set from `plays` (see the module doc).
pub fn generate(plays: &[Play], config: &QaConfig) -> Result<QaSet, QaError> {
    if config.questions == 0 {
        return Err(QaError::Config {
            field: "questions",
            reason: "0 questions: accuracy is undefined".to_owned(),
        });
    }
    if config.options < 2 {
        return Err(QaError::Config {
            field: "options",
            reason: format!("{}: a choice needs at least 2 options", config.options),
        });
    }
    if config.structured_every == 0 {
        return Err(QaError::Config {
            field: "structured_every",
            reason: "0: must be at least 1".to_owned(),
        });
    }
    if plays.len() < config.options {
        return Err(QaError::TooFewPlays {
            plays: plays.len(),
            options: config.options,
        });
    }
    let mut titles = BTreeSet::new();
    for p in plays {
        if !titles.insert(p.title.as_str()) {
            return Err(QaError::DuplicateTitle(p.title.clone()));
        }
    }
    let titles: Vec<&str> = titles.into_iter().collect();
    let pools = plays
        .iter()
        .map(|p| pool(p, config.options))
        .collect::<Result<Vec<_>, _>>()?;

    let mut rng = SplitMix64::new(config.seed);
    let mut questions = Vec::with_capacity(config.questions);
    for i in 0..config.questions {
        let kind = match i % 3 {
            0 => QuestionKind::Play,
            1 => QuestionKind::Speaker,
            _ => QuestionKind::Cloze,
        };
        let pool = pick(&mut rng, &pools).ok_or(QaError::TooFewPlays {
            plays: 0,
            options: config.options,
        })?;
        let &(speaker, line) =
            pick(&mut rng, &pool.lines).ok_or_else(|| QaError::PlayTooSmall {
                title: pool.title.to_owned(),
                reason: "no line".to_owned(),
            })?;
        let (question, (options, answer)) = match kind {
            QuestionKind::Play => (
                format!("Which Shakespeare play is this line from?\nLine: \"{line}\""),
                options_with(&mut rng, pool.title, &titles, config.options),
            ),
            QuestionKind::Speaker => (
                format!("In {}, who speaks this line?\nLine: \"{line}\"", pool.title),
                options_with(&mut rng, speaker, &pool.speakers, config.options),
            ),
            QuestionKind::Cloze => {
                let tokens: Vec<&str> = line.split_whitespace().collect();
                let maskable: Vec<usize> = tokens
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| cloze_core(t).is_some())
                    .map(|(k, _)| k)
                    .collect();
                let &masked = pick(&mut rng, &maskable).ok_or_else(|| QaError::PlayTooSmall {
                    title: pool.title.to_owned(),
                    reason: format!("line {line:?} has no cloze word"),
                })?;
                let mut answer = String::new();
                let shown: Vec<String> = tokens
                    .iter()
                    .enumerate()
                    .map(|(k, t)| match cloze_core(t) {
                        Some(core) if k == masked => {
                            answer = core.to_lowercase();
                            t.replacen(core, BLANK, 1)
                        }
                        _ => (*t).to_owned(),
                    })
                    .collect();
                let words: Vec<&str> = pool.words.iter().map(String::as_str).collect();
                (
                    format!(
                        "In {}, which word fills the blank?\nLine: \"{}\"",
                        pool.title,
                        shown.join(" ")
                    ),
                    options_with(&mut rng, &answer, &words, config.options),
                )
            }
        };
        questions.push(Question {
            kind,
            question,
            options,
            answer,
            structured: (i.saturating_add(1)) % config.structured_every == 0,
        });
    }
    Ok(QaSet {
        seed: config.seed,
        options: config.options,
        questions,
    })
}

/// One scored question.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// Mean token log-probability of each option.
    pub scores: Vec<f64>,
    /// Softmax of `scores`.
    pub probabilities: Vec<f64>,
    /// Arg-max of `scores` (first on a tie).
    pub predicted: usize,
    /// `predicted == answer`.
    pub correct: bool,
    /// `probabilities[predicted]`.
    pub confidence: f64,
}

/// The softmax of `scores`, shifted by their maximum for stability.
pub fn softmax(scores: &[f64]) -> Vec<f64> {
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
    let total: f64 = exps.iter().sum();
    exps.iter().map(|e| e / total).collect()
}

/// Scores question number `index` with `scorer` (see the module doc).
pub fn score_question(
    scorer: &dyn Scorer,
    index: usize,
    q: &Question,
) -> Result<Scored, EvalError> {
    if q.answer >= q.options.len() || q.options.len() < 2 {
        return Err(QaError::AnswerOutOfRange {
            question: index,
            answer: q.answer,
            options: q.options.len(),
        }
        .into());
    }
    let context = scorer.tokenize(&q.scoring_context());
    let mut scores = Vec::with_capacity(q.options.len());
    for option in &q.options {
        let continuation = scorer.tokenize(&Question::scoring_continuation(option));
        if continuation.is_empty() {
            return Err(QaError::EmptyOption {
                question: index,
                option: option.clone(),
            }
            .into());
        }
        let lps = checked_logprobs(scorer, &context, &continuation)?;
        scores.push(lps.iter().sum::<f64>() / lps.len() as f64);
    }
    let probabilities = softmax(&scores);
    let mut predicted = 0;
    for (k, s) in scores.iter().enumerate() {
        if scores.get(predicted).is_some_and(|best| s > best) {
            predicted = k;
        }
    }
    let confidence = probabilities.get(predicted).copied().unwrap_or(0.0);
    Ok(Scored {
        scores,
        probabilities,
        predicted,
        correct: predicted == q.answer,
        confidence,
    })
}
