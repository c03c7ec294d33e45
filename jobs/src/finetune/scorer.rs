//! The real model (`kolm-model`) as the evaluation's [`Scorer`]: log
//! probabilities from one full forward pass, greedy generation with a KV
//! cache timed by the wall clock, and prompts in the model's chat template.

use std::time::Instant;

use kolm_eval::{Generation, Scorer};
use kolm_model::{ChatMessage, ChatTemplate, GgufTokenizer, Model, ModelError};

/// A model and its tokenizer.
#[derive(Debug)]
pub struct ModelScorer {
    model: Model,
    tokenizer: GgufTokenizer,
    chat: Option<ChatTemplate>,
    eos: Option<u32>,
}

impl ModelScorer {
    /// Scores with `model`; prompts go through the tokenizer's chat template
    /// when it has one, and generation stops at its end-of-sequence token.
    pub fn new(model: Model, tokenizer: GgufTokenizer) -> ModelScorer {
        let chat = tokenizer.chat_template().cloned();
        let eos = tokenizer.specials().eos;
        ModelScorer {
            model,
            tokenizer,
            chat,
            eos,
        }
    }

    fn try_logprobs(&self, context: &[u32], continuation: &[u32]) -> Result<Vec<f32>, ModelError> {
        let all: Vec<u32> = context.iter().chain(continuation).copied().collect();
        // The last token is predicted, never fed.
        let fed = all.get(..all.len().saturating_sub(1)).unwrap_or_default();
        let logits = self.model.logits(fed)?;
        let first = context.len().saturating_sub(1);
        Ok(continuation
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let row = logits.row(first + i);
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum: f64 = row.iter().map(|&x| f64::from(x - max).exp()).sum();
                let lse = f64::from(max) + sum.ln();
                let lp = f64::from(row.get(t as usize).copied().unwrap_or(f32::NAN)) - lse;
                // Rounding can put a certain token a hair above 0.
                lp.min(0.0) as f32
            })
            .collect())
    }
}

impl Scorer for ModelScorer {
    /// An empty vector when the model refuses the tokens (an empty
    /// context, a sequence past its context length): the evaluation
    /// reports the broken contract.
    fn logprobs(&self, context: &[u32], continuation: &[u32]) -> Vec<f32> {
        if context.is_empty() {
            return Vec::new();
        }
        self.try_logprobs(context, continuation).unwrap_or_default()
    }

    fn generate(&self, prompt: &[u32], max_new: usize) -> Generation {
        let start = Instant::now();
        let mut tokens = self.model.greedy(prompt, max_new).unwrap_or_default();
        let seconds = start.elapsed().as_secs_f64();
        if let Some(end) = self.eos.and_then(|e| tokens.iter().position(|&t| t == e)) {
            tokens.truncate(end);
        }
        Generation { tokens, seconds }
    }

    fn tokenize(&self, text: &str) -> Vec<u32> {
        self.tokenizer.encode(text).unwrap_or_default()
    }

    fn detokenize(&self, tokens: &[u32]) -> String {
        self.tokenizer.decode(tokens).unwrap_or_default()
    }

    fn encode_prompt(&self, text: &str) -> Vec<u32> {
        let rendered = self.chat.as_ref().and_then(|t| {
            t.render(
                &[ChatMessage {
                    role: "user".into(),
                    content: text.into(),
                }],
                true,
            )
            .ok()
        });
        self.tokenize(rendered.as_deref().unwrap_or(text))
    }
}
