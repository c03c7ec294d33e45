//! The model's hyper-parameters: the one Llama configuration
//! (`kolm-model-config`), re-exported here as `kolm_model::Config` for the
//! scorer, the trainers and the kernels alike.

use crate::error::ModelError;

pub use kolm_model_config::{
    Config, ConfigError, EMBED, FINAL_NORM, PER_LAYER, ParamInfo, Rope, RopeLayout, RopeTable,
    Shape, slot,
};

/// [`Config::new`] with its refusal as this crate's error (same key, value
/// and reason).
pub(crate) fn checked(shape: Shape) -> Result<Config, ModelError> {
    Config::new(shape).map_err(|e| match e {
        ConfigError::BadHyperParameter { key, value, why } => ModelError::BadHyperParameter {
            key: key.to_owned(),
            value,
            why,
        },
        // `ConfigError` is non-exhaustive: a refusal added there later keeps
        // its own words.
        other => ModelError::Config { error: other },
    })
}
