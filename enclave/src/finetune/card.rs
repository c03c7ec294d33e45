//! The model card and lineage of a fine-tune (being written).

use std::collections::BTreeMap;
use std::path::Path;

use kolm_format::eval_report::EvalReport;
use kolm_format::job_spec::FineTuneSpec;

use super::FineTuneError;
use super::base::Base;
use super::train::TrainOutcome;

/// What the card is made from.
#[derive(Debug)]
pub struct CardInput<'a> {
    pub spec: &'a FineTuneSpec,
    pub base: &'a Base,
    pub outcome: &'a TrainOutcome,
    pub report: &'a EvalReport,
    pub metrics: &'a BTreeMap<String, f64>,
    pub base_perplexity: f64,
    pub model_sha256: [u8; 32],
    pub adapter_sha256: Option<[u8; 32]>,
    pub input_dir: &'a Path,
}

/// Writes `model-card.json`, `model-card.md` and `lineage.json`.
pub fn write(out: &Path, input: &CardInput<'_>) -> Result<(), FineTuneError> {
    let _ = (out, input);
    Ok(())
}
