//! kolm's real model on the CPU: SmolLM2-class Llama models read from GGUF.
//!
//! - [`GgufFile::open`] reads a GGUF header with candle's parser and checks
//!   it completely (architecture, hyper-parameters, the exact tensor set,
//!   shapes, types, data extent) before anything is dequantised;
//!   [`GgufFile::load_model`] dequantises every tensor to `f32` master
//!   weights ([`Weights`], in the layout [`Config::params`] lists, which the
//!   trainers and the kernels take).
//! - [`GgufTokenizer`] is the file's byte-level BPE vocabulary and merges as a
//!   Hugging Face `tokenizers` tokenizer, exportable as `tokenizer.json`;
//!   the chat template is kept as data ([`ChatTemplate`]).
//! - [`Model`] runs the forward pass in `f32` ([`Model::forward`], with a
//!   KV cache), [`Model::perplexity`] and [`Model::greedy`].
//! - [`Config`] is the one model configuration (from `kolm-model-config`),
//!   which the trainers and the kernels take too; [`layers`] are the candle
//!   layers the forward shares with the CPU trainer.
//!
//! The RoPE layout is the one decision the file does not state: GGUF Llama
//! q/k rows are stored for adjacent-pair rotation ([`RopeLayout`]);
//! `docs/model.md` has the measurements that confirm it.
#![forbid(unsafe_code)]

mod chat;
mod config;
mod error;
mod forward;
mod gguf;
pub mod layers;
mod prescan;
mod tokenizer;
mod weights;

pub use chat::{ChatMessage, ChatTemplate};
pub use config::{
    Config, ConfigError, EMBED, FINAL_NORM, PER_LAYER, ParamInfo, Rope, RopeLayout, RopeTable,
    Shape, slot,
};
pub use error::ModelError;
pub use forward::{KvCache, Logits, Model, Output, Perplexity};
pub use gguf::{GgufFile, MAX_CONTEXT_LENGTH};
pub use tokenizer::{GgufTokenizer, SpecialTokens};
pub use weights::{LayerWeights, Weights};

/// The `tokenizers` crate this crate builds on, for reading an exported
/// `tokenizer.json` back.
pub use tokenizers;
