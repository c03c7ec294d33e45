//! The measuring half of each term: what is counted and summed. The
//! derivation of the term from these counts (the ratio, ECE, K) is
//! `kolm_format::eval_report`'s, shared with the strict reader.

use kolm_format::eval_report::{CALIBRATION_BINS, CalibrationBin};

use crate::EvalError;
use crate::scorer::{Scorer, checked_logprobs};

/// What perplexity is computed from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NllSum {
    /// Tokens whose probability was scored.
    pub predicted_tokens: u64,
    /// Sum of their negative log-probabilities.
    pub nll_sum: f64,
}

impl NllSum {
    /// `exp(nll_sum / predicted_tokens)`; the report derives it the same way.
    pub fn perplexity(&self) -> f64 {
        (self.nll_sum / self.predicted_tokens as f64).exp()
    }
}

/// Scores held-out `texts` for perplexity: each text is tokenized, its
/// first `max_tokens_per_text` tokens are cut into consecutive windows of
/// `window` tokens (the last one may be shorter), and each window's first
/// token is context only: a window of `w` tokens predicts `w - 1`
/// (`logprobs(&window[..1], &window[1..])`). A last window of one token
/// predicts nothing and is dropped. So 256 tokens in one window predict
/// 255, as the reference perplexity of `hamlet_gut.txt` counts.
pub fn held_out_nll(
    scorer: &dyn Scorer,
    texts: &[&str],
    window: usize,
    max_tokens_per_text: usize,
) -> Result<NllSum, EvalError> {
    if window < 2 {
        return Err(EvalError::Config {
            field: "perplexity_window",
            reason: format!("{window}: a window predicts window - 1 tokens, so at least 2"),
        });
    }
    let mut sum = NllSum {
        predicted_tokens: 0,
        nll_sum: 0.0,
    };
    for text in texts {
        let tokens = scorer.tokenize(text);
        let tokens = tokens
            .get(..max_tokens_per_text.min(tokens.len()))
            .unwrap_or_default();
        for chunk in tokens.chunks(window) {
            let Some((first, rest)) = chunk.split_first() else {
                continue;
            };
            if rest.is_empty() {
                continue;
            }
            let lps = checked_logprobs(scorer, std::slice::from_ref(first), rest)?;
            sum.predicted_tokens = sum.predicted_tokens.saturating_add(rest.len() as u64);
            sum.nll_sum -= lps.iter().sum::<f64>();
        }
    }
    if sum.predicted_tokens == 0 {
        return Err(EvalError::Perplexity(format!(
            "the {} held-out text(s) give no token to predict (each needs at least 2 tokens)",
            texts.len()
        )));
    }
    Ok(sum)
}

/// The calibration bin of `confidence`: `min(floor(confidence * M), M - 1)`
/// with M = [`CALIBRATION_BINS`], so bin `i` holds `[i/M, (i+1)/M)` and the
/// last also holds 1.
pub fn bin_of(confidence: f64) -> usize {
    let m = CALIBRATION_BINS;
    let raw = (confidence.clamp(0.0, 1.0) * m as f64).floor() as usize;
    raw.min(m.saturating_sub(1))
}

/// Accumulates `(confidence, correct)` pairs into the M bins, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Bins(pub Vec<CalibrationBin>);

impl Default for Bins {
    fn default() -> Self {
        Bins(vec![CalibrationBin::default(); CALIBRATION_BINS])
    }
}

impl Bins {
    pub fn add(&mut self, confidence: f64, correct: bool) {
        if let Some(b) = self.0.get_mut(bin_of(confidence)) {
            b.count = b.count.saturating_add(1);
            b.correct = b.correct.saturating_add(u64::from(correct));
            b.confidence_sum += confidence;
        }
    }
}

/// Generated tokens and the seconds they took, summed over generations.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Throughput {
    pub tokens: u64,
    pub seconds: f64,
}

impl Throughput {
    pub fn add(&mut self, tokens: usize, seconds: f64) {
        self.tokens = self.tokens.saturating_add(tokens as u64);
        self.seconds += seconds;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::scorer::Generation;

    /// Gives token `t` probability `probs[t]` whatever the context.
    struct Unigram(Vec<f32>);

    impl Scorer for Unigram {
        fn logprobs(&self, _: &[u32], continuation: &[u32]) -> Vec<f32> {
            continuation
                .iter()
                .map(|&t| self.0[t as usize].ln())
                .collect()
        }
        fn generate(&self, _: &[u32], _: usize) -> Generation {
            Generation {
                tokens: vec![],
                seconds: 0.0,
            }
        }
        fn tokenize(&self, text: &str) -> Vec<u32> {
            text.bytes().map(|b| u32::from(b - b'0')).collect()
        }
        fn detokenize(&self, _: &[u32]) -> String {
            String::new()
        }
    }

    #[test]
    fn perplexity_by_hand() {
        // Tokens 0 1 0 1 0 with p(0) = 0.5, p(1) = 0.25, window 3:
        // windows [0 1 0] and [1 0]; predicted: 1 0 | 0, so
        // NLL = ln 4 + ln 2 + ln 2 = ln 16 over 3 tokens, perplexity 16^(1/3).
        let s = Unigram(vec![0.5, 0.25]);
        let nll = held_out_nll(&s, &["01010"], 3, 1000).unwrap();
        assert_eq!(nll.predicted_tokens, 3);
        assert!((nll.nll_sum - 16f64.ln()).abs() < 1e-6);
        assert!((nll.perplexity() - 16f64.powf(1.0 / 3.0)).abs() < 1e-6);
        // Capped at 4 tokens: [0 1 0] [1] -> 2 predicted.
        let capped = held_out_nll(&s, &["01010"], 3, 4).unwrap();
        assert_eq!(capped.predicted_tokens, 2);
    }

    #[test]
    fn perplexity_edge_cases() {
        let s = Unigram(vec![0.5, 0.5]);
        assert!(matches!(
            held_out_nll(&s, &["0", ""], 4, 100),
            Err(EvalError::Perplexity(_))
        ));
        assert!(matches!(
            held_out_nll(&s, &["0101"], 1, 100),
            Err(EvalError::Config { .. })
        ));
        // A probability of 0 is a broken scorer, not an infinite perplexity.
        let zero = Unigram(vec![0.0, 1.0]);
        assert!(matches!(
            held_out_nll(&zero, &["10"], 4, 100),
            Err(EvalError::Scorer(_))
        ));
    }

    #[test]
    fn bins_by_hand() {
        assert_eq!(bin_of(0.0), 0);
        assert_eq!(bin_of(0.0999), 0);
        assert_eq!(bin_of(0.1), 1);
        assert_eq!(bin_of(0.95), 9);
        assert_eq!(bin_of(1.0), 9);
        let mut bins = Bins::default();
        bins.add(0.25, true);
        bins.add(0.26, false);
        bins.add(1.0, true);
        assert_eq!(bins.0[2].count, 2);
        assert_eq!(bins.0[2].correct, 1);
        assert!((bins.0[2].confidence_sum - 0.51).abs() < 1e-12);
        assert_eq!(bins.0[9].count, 1);
        assert_eq!(bins.0.iter().map(|b| b.count).sum::<u64>(), 3);
    }
}
