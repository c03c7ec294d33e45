//! What the model must provide to be evaluated.

use crate::EvalError;

/// One generation: the new tokens (prompt excluded) and the wall-clock
/// seconds the model measured for producing them.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    pub tokens: Vec<u32>,
    pub seconds: f64,
}

/// A language model as the evaluation sees it. `kolm-model` implements it
/// on the real model; [`crate::fake::BigramScorer`] on a character bigram
/// model for tests.
pub trait Scorer {
    /// Per-token natural-log probabilities of `continuation` given
    /// `context` followed by the continuation's earlier tokens: exactly
    /// `continuation.len()` values, each finite and at most 0.
    fn logprobs(&self, context: &[u32], continuation: &[u32]) -> Vec<f32>;

    /// Generates at most `max_new` tokens after `prompt` (greedy, so the
    /// evaluation is repeatable), stopping early at end of sequence, and
    /// says how long that took. The time is measured by the model: this
    /// crate reads no clock.
    fn generate(&self, prompt: &[u32], max_new: usize) -> Generation;

    /// Token ids of `text`, with no special token added.
    fn tokenize(&self, text: &str) -> Vec<u32>;

    /// The text of `tokens`.
    fn detokenize(&self, tokens: &[u32]) -> String;

    /// Token ids of a user request to answer (a safety probe, a structured
    /// question). A chat model overrides this to apply its chat template;
    /// the default is the plain text.
    fn encode_prompt(&self, text: &str) -> Vec<u32> {
        self.tokenize(text)
    }
}

/// [`Scorer::logprobs`] with its contract checked.
pub(crate) fn checked_logprobs(
    scorer: &dyn Scorer,
    context: &[u32],
    continuation: &[u32],
) -> Result<Vec<f64>, EvalError> {
    let lps = scorer.logprobs(context, continuation);
    if lps.len() != continuation.len() {
        return Err(EvalError::Scorer(format!(
            "logprobs returned {} values for {} continuation tokens",
            lps.len(),
            continuation.len()
        )));
    }
    lps.iter()
        .enumerate()
        .map(|(i, &lp)| {
            if lp.is_finite() && lp <= 0.0 {
                Ok(f64::from(lp))
            } else {
                Err(EvalError::Scorer(format!(
                    "logprobs[{i}] = {lp}: a log-probability is finite and at most 0"
                )))
            }
        })
        .collect()
}

/// [`Scorer::generate`] with its contract checked.
pub(crate) fn checked_generate(
    scorer: &dyn Scorer,
    prompt: &[u32],
    max_new: usize,
) -> Result<Generation, EvalError> {
    let g = scorer.generate(prompt, max_new);
    if g.tokens.len() > max_new {
        return Err(EvalError::Scorer(format!(
            "generate returned {} tokens, at most {max_new} were asked for",
            g.tokens.len()
        )));
    }
    if !g.seconds.is_finite() || g.seconds < 0.0 {
        return Err(EvalError::Scorer(format!(
            "generate took {} s: a time is finite and not negative",
            g.seconds
        )));
    }
    Ok(g)
}
