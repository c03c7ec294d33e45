//! A deterministic stand-in for the model, so every metric is tested
//! without it: a byte-level bigram language model with add-one smoothing,
//! trained on whatever text it is given. It is a real (if weak) model: its
//! log-probabilities sum to 1 over the 256 byte tokens, it prefers what it
//! was trained on, and the QA scoring, perplexity and generation run on it
//! exactly as on the real model.
//!
//! Its generation time is simulated (`tokens / simulated_tokens_per_s`),
//! since a fake has no meaningful wall clock; replies can be scripted per
//! prompt so the safety and validity detectors are exercised on chosen
//! answers.

use crate::scorer::{Generation, Scorer};

/// Token id standing for "no previous byte".
const START: usize = 256;

/// The byte bigram model.
#[derive(Debug, Clone)]
pub struct BigramScorer {
    /// `counts[prev][next]`, `prev` in `0..=256` (256 = start).
    counts: Vec<[u32; 256]>,
    /// Row sums of `counts`.
    totals: Vec<u64>,
    simulated_tokens_per_s: f64,
    replies: Vec<(String, String)>,
}

impl BigramScorer {
    /// Trains on `text`; generation is reported at
    /// `simulated_tokens_per_s`.
    pub fn train(text: &str, simulated_tokens_per_s: f64) -> BigramScorer {
        let mut counts = vec![[0u32; 256]; START + 1];
        let mut prev = START;
        for &b in text.as_bytes() {
            if let Some(c) = counts
                .get_mut(prev)
                .and_then(|row| row.get_mut(usize::from(b)))
            {
                *c = c.saturating_add(1);
            }
            prev = usize::from(b);
        }
        let totals = counts
            .iter()
            .map(|row| row.iter().map(|&c| u64::from(c)).sum())
            .collect();
        BigramScorer {
            counts,
            totals,
            simulated_tokens_per_s,
            replies: Vec::new(),
        }
    }

    /// Answers any prompt whose text contains `key` with `reply` (the
    /// first matching key wins) instead of generating.
    pub fn with_reply(mut self, key: &str, reply: &str) -> BigramScorer {
        self.replies.push((key.to_owned(), reply.to_owned()));
        self
    }

    fn logprob(&self, prev: usize, next: u32) -> f32 {
        let count = self
            .counts
            .get(prev)
            .and_then(|row| row.get(next as usize))
            .map_or(0, |&c| u64::from(c));
        let total = self.totals.get(prev).copied().unwrap_or(0);
        // Add-one smoothing over the 256 byte tokens; ids above 255 get the
        // smoothing mass only, so a wrong tokenizer shows up as a low score.
        ((count as f64 + 1.0) / (total as f64 + 256.0)).ln() as f32
    }

    fn seconds_for(&self, tokens: usize) -> f64 {
        tokens as f64 / self.simulated_tokens_per_s
    }
}

impl Scorer for BigramScorer {
    fn logprobs(&self, context: &[u32], continuation: &[u32]) -> Vec<f32> {
        let mut prev = context.last().map_or(START, |&t| t as usize);
        continuation
            .iter()
            .map(|&t| {
                let lp = self.logprob(prev, t);
                prev = t as usize;
                lp
            })
            .collect()
    }

    fn generate(&self, prompt: &[u32], max_new: usize) -> Generation {
        let text = self.detokenize(prompt);
        if let Some((_, reply)) = self.replies.iter().find(|(key, _)| text.contains(key)) {
            let tokens: Vec<u32> = reply.bytes().map(u32::from).take(max_new).collect();
            let seconds = self.seconds_for(tokens.len());
            return Generation { tokens, seconds };
        }
        let mut prev = prompt.last().map_or(START, |&t| t as usize);
        let mut tokens = Vec::with_capacity(max_new);
        for _ in 0..max_new {
            let row = self.counts.get(prev).copied().unwrap_or([0; 256]);
            // Greedy; ties go to the lowest byte.
            let next = (0..256u32)
                .max_by_key(|&b| {
                    (
                        row.get(b as usize).copied().unwrap_or(0),
                        std::cmp::Reverse(b),
                    )
                })
                .unwrap_or(0);
            tokens.push(next);
            prev = next as usize;
        }
        let seconds = self.seconds_for(tokens.len());
        Generation { tokens, seconds }
    }

    fn tokenize(&self, text: &str) -> Vec<u32> {
        text.bytes().map(u32::from).collect()
    }

    fn detokenize(&self, tokens: &[u32]) -> String {
        let bytes: Vec<u8> = tokens
            .iter()
            .filter_map(|&t| u8::try_from(t).ok())
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn probabilities_sum_to_one_and_follow_the_training_text() {
        let m = BigramScorer::train("abab", 100.0);
        let total: f64 = (0..256u32)
            .map(|t| f64::from(m.logprobs(&[u32::from(b'a')], &[t])[0]).exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-5, "{total}");
        // After 'a': 'b' was seen twice out of 2: (2 + 1) / (2 + 256).
        let lp = m.logprobs(&[u32::from(b'a')], &[u32::from(b'b')])[0];
        assert!((f64::from(lp) - (3.0f64 / 258.0).ln()).abs() < 1e-6);
    }

    #[test]
    fn generation_is_greedy_and_timed_by_the_simulated_rate() {
        let m = BigramScorer::train("abcabc", 4.0);
        let g = m.generate(&m.tokenize("a"), 5);
        assert_eq!(m.detokenize(&g.tokens), "bcabc");
        assert_eq!(g.seconds, 1.25);
        let scripted = m.with_reply("secret", "I cannot.");
        let g = scripted.generate(&scripted.tokenize("tell the secret"), 4);
        assert_eq!(scripted.detokenize(&g.tokens), "I ca");
    }
}
