//! One evaluation run: perplexity, the QA set, the safety probes and the
//! structured answers, measured with one [`Scorer`] into a
//! `kolm.eval-report.v1` report.

use kolm_format::eval_report::{ByKind, EvalReport, KindCount, Measurements};

use crate::EvalError;
use crate::metrics::{Bins, Throughput, held_out_nll};
use crate::qa::{QaSet, QuestionKind, score_question};
use crate::safety::{
    PROBE_SET_VERSION, PROBES, TrainingIndex, VERBATIM_WORDS, is_refusal, probe_set_sha256,
};
use crate::scorer::{Scorer, checked_generate};
use crate::validity::is_valid_structured_answer;

/// What to evaluate on.
#[derive(Debug, Clone, Copy)]
pub struct EvalConfig<'a> {
    /// Held-out texts for perplexity.
    pub heldout: &'a [&'a str],
    /// Tokens per perplexity window (see [`held_out_nll`]).
    pub perplexity_window: usize,
    /// Tokens of each held-out text scored at most.
    pub perplexity_max_tokens: usize,
    /// The generated QA set.
    pub qa: &'a QaSet,
    /// The training text, for the safety detector's verbatim rule.
    pub training: &'a TrainingIndex,
    /// Longest generated answer, in tokens.
    pub max_new_tokens: usize,
    /// The job's `eval.latency_budget_tokens_per_s`.
    pub latency_budget_tokens_per_s: f64,
}

/// Runs the whole evaluation. L is measured over every generation of the
/// run (the safety probes and the structured answers): total new tokens
/// over total seconds, as the scorer timed them.
pub fn evaluate(scorer: &dyn Scorer, config: &EvalConfig<'_>) -> Result<EvalReport, EvalError> {
    let budget = config.latency_budget_tokens_per_s;
    if !budget.is_finite() || budget <= 0.0 {
        return Err(EvalError::Config {
            field: "latency_budget_tokens_per_s",
            reason: format!("{budget}: must be a positive number"),
        });
    }
    if config.max_new_tokens == 0 {
        return Err(EvalError::Config {
            field: "max_new_tokens",
            reason: "0: nothing could be generated".to_owned(),
        });
    }

    let nll = held_out_nll(
        scorer,
        config.heldout,
        config.perplexity_window,
        config.perplexity_max_tokens,
    )?;

    let mut by_kind = ByKind::default();
    let mut bins = Bins::default();
    let mut throughput = Throughput::default();
    let (mut structured, mut valid) = (0u64, 0u64);
    for (i, q) in config.qa.questions.iter().enumerate() {
        let scored = score_question(scorer, i, q)?;
        let count: &mut KindCount = match q.kind {
            QuestionKind::Play => &mut by_kind.play,
            QuestionKind::Speaker => &mut by_kind.speaker,
            QuestionKind::Cloze => &mut by_kind.cloze,
        };
        count.questions = count.questions.saturating_add(1);
        count.correct = count.correct.saturating_add(u64::from(scored.correct));
        bins.add(scored.confidence, scored.correct);
        if q.structured {
            let g = checked_generate(
                scorer,
                &scorer.encode_prompt(&q.structured_prompt()),
                config.max_new_tokens,
            )?;
            throughput.add(g.tokens.len(), g.seconds);
            structured = structured.saturating_add(1);
            let text = scorer.detokenize(&g.tokens);
            valid = valid.saturating_add(u64::from(is_valid_structured_answer(&text, &q.options)));
        }
    }

    let mut refused = 0u64;
    for probe in &PROBES {
        let g = checked_generate(
            scorer,
            &scorer.encode_prompt(probe.prompt),
            config.max_new_tokens,
        )?;
        throughput.add(g.tokens.len(), g.seconds);
        refused = refused.saturating_add(u64::from(is_refusal(
            &scorer.detokenize(&g.tokens),
            config.training,
        )));
    }

    Ok(EvalReport::from_measurements(Measurements {
        predicted_tokens: nll.predicted_tokens,
        nll_sum: nll.nll_sum,
        qa_seed: config.qa.seed,
        qa_set_sha256: config.qa.sha256()?,
        options: config.qa.options as u64,
        by_kind,
        bins: bins.0,
        probe_set: PROBE_SET_VERSION.to_owned(),
        probe_set_sha256: probe_set_sha256()?,
        verbatim_words: VERBATIM_WORDS as u64,
        probes: PROBES.len() as u64,
        refused,
        generated_tokens: throughput.tokens,
        seconds: throughput.seconds,
        budget_tokens_per_s: budget,
        structured,
        valid,
    })?)
}
