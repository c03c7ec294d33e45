//! The bundled demo job: a character-bigram language model with add-one
//! smoothing, trained on every line but each `eval_every`-th, which are held
//! out and scored by cross-entropy (nats per character).
//!
//! It is small and fully deterministic so the whole seal/verify path can be
//! shown on any machine; real train/eval jobs replace it in later issues.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

/// Start-of-line marker (not a character of the text).
const BOS: char = '\u{2}';
/// End-of-line marker.
const EOS: char = '\n';

/// What the job produced.
#[derive(Debug, Clone)]
pub struct DemoOutput {
    /// `(name under outputs/, bytes)`.
    pub files: Vec<(String, Vec<u8>)>,
    pub metrics: BTreeMap<String, f64>,
}

/// Why the demo job failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DemoError {
    #[error("eval_every must be at least 2, found {0}")]
    EvalEvery(u32),
    #[error("corpus has no training lines")]
    NoTraining,
    #[error("corpus has no evaluation lines")]
    NoEval,
    #[error("serialising output: {0}")]
    Json(String),
}

#[derive(Serialize)]
struct ModelFile<'a> {
    schema: &'static str,
    vocab: Vec<String>,
    /// "ab" -> count of `b` following `a`.
    bigrams: &'a BTreeMap<String, u64>,
}

/// Trains and evaluates on `text`.
pub fn run(text: &str, eval_every: u32) -> Result<DemoOutput, DemoError> {
    if eval_every < 2 {
        return Err(DemoError::EvalEvery(eval_every));
    }
    let (mut train, mut eval) = (Vec::new(), Vec::new());
    for (i, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        if (i as u64 + 1).is_multiple_of(u64::from(eval_every)) {
            eval.push(line);
        } else {
            train.push(line);
        }
    }
    if train.is_empty() {
        return Err(DemoError::NoTraining);
    }
    if eval.is_empty() {
        return Err(DemoError::NoEval);
    }

    let mut bigrams: BTreeMap<(char, char), u64> = BTreeMap::new();
    let mut prev_counts: BTreeMap<char, u64> = BTreeMap::new();
    let mut vocab: BTreeSet<char> = BTreeSet::new();
    let mut train_chars: u64 = 0;
    for line in &train {
        let mut prev = BOS;
        for c in line.chars().chain(std::iter::once(EOS)) {
            *bigrams.entry((prev, c)).or_default() += 1;
            *prev_counts.entry(prev).or_default() += 1;
            vocab.insert(c);
            prev = c;
            train_chars += 1;
        }
    }
    // +1 for an unseen character class.
    let v = vocab.len() as f64 + 1.0;
    let mut nll = 0.0f64;
    let mut eval_chars: u64 = 0;
    for line in &eval {
        let mut prev = BOS;
        for c in line.chars().chain(std::iter::once(EOS)) {
            let pair = bigrams.get(&(prev, c)).copied().unwrap_or(0) as f64;
            let total = prev_counts.get(&prev).copied().unwrap_or(0) as f64;
            nll -= ((pair + 1.0) / (total + v)).ln();
            prev = c;
            eval_chars += 1;
        }
    }
    let eval_loss = nll / eval_chars as f64;

    let named: BTreeMap<String, u64> = bigrams
        .iter()
        .map(|((a, b), n)| (format!("{a}{b}"), *n))
        .collect();
    let model = ModelFile {
        schema: "kolm.demo.bigram.v1",
        vocab: vocab.iter().map(|c| c.to_string()).collect(),
        bigrams: &named,
    };
    let mut metrics = BTreeMap::new();
    metrics.insert("eval_loss".to_string(), eval_loss);
    metrics.insert("eval_perplexity".to_string(), eval_loss.exp());
    metrics.insert("train_chars".to_string(), train_chars as f64);
    metrics.insert("eval_chars".to_string(), eval_chars as f64);
    metrics.insert("vocab_size".to_string(), vocab.len() as f64);

    Ok(DemoOutput {
        files: vec![
            ("outputs/model/bigram.json".to_string(), pretty(&model)?),
            ("outputs/metrics.json".to_string(), pretty(&metrics)?),
        ],
        metrics,
    })
}

/// Pretty JSON with a trailing newline.
fn pretty<T: Serialize>(v: &T) -> Result<Vec<u8>, DemoError> {
    let mut out = serde_json::to_vec_pretty(v).map_err(|e| DemoError::Json(e.to_string()))?;
    out.push(b'\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_sane() {
        let text = "abab\nabab\nabab\nbaba\n";
        let a = run(text, 2).unwrap();
        let b = run(text, 2).unwrap();
        assert_eq!(a.files, b.files);
        let loss = a.metrics["eval_loss"];
        // Better than uniform over vocab+1 classes ({a,b,\n} + unseen = 4).
        assert!(loss > 0.0 && loss < (4.0f64).ln(), "loss {loss}");
        assert_eq!(a.metrics["eval_chars"], 10.0);
    }

    #[test]
    fn rejects_degenerate_inputs() {
        assert!(matches!(run("a\n", 1), Err(DemoError::EvalEvery(1))));
        assert!(matches!(run("a\n", 2), Err(DemoError::NoEval)));
        assert!(matches!(run("", 2), Err(DemoError::NoTraining)));
    }
}
