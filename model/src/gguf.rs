//! Opening a GGUF file: header, metadata, tensor table, with every check
//! done before any weight is dequantised.
//!
//! The bytes are parsed by candle's `gguf_file` reader (GGUF v2 and v3);
//! this module adds what a loader must know beyond "it parses": the
//! architecture and hyper-parameters, the exact tensor set with shapes and
//! types, and that the file holds all of the data the header points at and
//! nothing after it.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::{Path, PathBuf};

use candle_core::Device;
use candle_core::quantized::GgmlDType;
use candle_core::quantized::gguf_file::{Content, Value};

use crate::config::{Config, Rope, RopeLayout, Shape, checked};
use crate::error::{ModelError, candle_message, is_unexpected_eof};
use crate::prescan::{self, ALIGNMENT_KEY, Alignment};
use crate::tokenizer::GgufTokenizer;
use crate::weights::{LayerWeights, Weights};
use crate::{Model, tokenizer};

/// The only architecture this loader runs.
const ARCHITECTURE: &str = "llama";

/// Tensor data alignment when `general.alignment` is absent (GGUF spec).
const DEFAULT_ALIGNMENT: u64 = 32;

/// Largest `llama.context_length` accepted: no Llama-class model is
/// trained for more positions, and a larger value can only be a broken
/// or hostile header.
pub const MAX_CONTEXT_LENGTH: usize = 1 << 24;

/// The alignment the file states, refused unless it is a power of two
/// held in an integer type candle reads (it would use 32 for another).
fn checked_alignment(found: Alignment) -> Result<u64, ModelError> {
    match found {
        Alignment::Absent => Ok(DEFAULT_ALIGNMENT),
        Alignment::Value(a) => match u64::try_from(a) {
            Ok(a) if a.is_power_of_two() => Ok(a),
            _ => Err(bad(ALIGNMENT_KEY, a, "must be a power of two")),
        },
        Alignment::OtherType(t) => Err(bad(
            ALIGNMENT_KEY,
            format!("a value of GGUF type {t}"),
            "must be an unsigned 32-bit integer (a power of two)",
        )),
    }
}

/// A GGUF file whose header has been read and checked: its configuration,
/// tensor table and tokenizer metadata are known to be usable. Weights are
/// read only by [`GgufFile::load_model`].
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    content: Content,
    config: Config,
}

/// What a tensor is for: decides the types it may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A matrix (or the embedding): any storage quantisation.
    Matrix,
    /// A norm weight: a float type (ggml keeps them in f32).
    Norm,
}

/// Every tensor the architecture needs: GGUF name, row-major shape (outer
/// dimension first, the reverse of GGUF's dimension order), role.
fn expected_tensors(c: &Config) -> Vec<(String, Vec<usize>, Role)> {
    let (d, q, kv, f) = (c.d_model(), c.q_dim(), c.kv_dim(), c.ffn());
    let mut out = vec![
        (
            "token_embd.weight".to_owned(),
            vec![c.vocab(), d],
            Role::Matrix,
        ),
        ("output_norm.weight".to_owned(), vec![d], Role::Norm),
    ];
    for l in 0..c.layers() {
        let n = |s: &str| format!("blk.{l}.{s}.weight");
        out.extend([
            (n("attn_norm"), vec![d], Role::Norm),
            (n("attn_q"), vec![q, d], Role::Matrix),
            (n("attn_k"), vec![kv, d], Role::Matrix),
            (n("attn_v"), vec![kv, d], Role::Matrix),
            (n("attn_output"), vec![d, q], Role::Matrix),
            (n("ffn_norm"), vec![d], Role::Norm),
            (n("ffn_gate"), vec![f, d], Role::Matrix),
            (n("ffn_up"), vec![f, d], Role::Matrix),
            (n("ffn_down"), vec![d, f], Role::Matrix),
        ]);
    }
    out
}

/// ggml types that store weights. `Q8_1` and `Q8_K` are ggml's formats for
/// quantised activations inside dot products, never written as weights.
fn is_storage_type(t: GgmlDType) -> bool {
    !matches!(t, GgmlDType::Q8_1 | GgmlDType::Q8K)
}

fn is_float_type(t: GgmlDType) -> bool {
    matches!(t, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16)
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> ModelError + '_ {
    move |source| ModelError::Io {
        path: path.to_owned(),
        error: source,
    }
}

impl GgufFile {
    /// Reads and checks the header of the GGUF file at `path`.
    ///
    /// Checks, in order: the magic and version; that the header parses
    /// (running out of bytes is [`ModelError::Truncated`]); the architecture
    /// (`llama`) and every hyper-parameter the forward pass uses; that the
    /// tensor table holds exactly the tensors of that configuration, each
    /// with the shape the metadata implies and a type fit for its role; that
    /// every tensor's data lies inside the file and nothing follows the last
    /// one; and that the tokenizer metadata is present.
    pub fn open(path: &Path) -> Result<Self, ModelError> {
        let file = File::open(path).map_err(io_error(path))?;
        let file_size = file.metadata().map_err(io_error(path))?.len();
        let mut reader = BufReader::new(file);

        // Magic and version first, so a wrong file gets a plain answer
        // instead of a parser message.
        let mut head = Vec::with_capacity(8);
        (&mut reader)
            .take(8)
            .read_to_end(&mut head)
            .map_err(io_error(path))?;
        if head.get(..4) != Some(b"GGUF".as_slice()) {
            head.truncate(4);
            return Err(ModelError::NotGguf { found: head });
        }
        let Some(version) = head
            .get(4..8)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_le_bytes)
        else {
            return Err(ModelError::Truncated {
                what: "the header (version)".to_owned(),
                needed: 8,
                file_size,
            });
        };
        if !matches!(version, 2 | 3) {
            return Err(ModelError::UnsupportedVersion { found: version });
        }
        reader.rewind().map_err(io_error(path))?;
        // Before candle's parser: it divides by the alignment unchecked.
        let alignment = checked_alignment(prescan::alignment(&mut reader, file_size)?)?;
        reader.rewind().map_err(io_error(path))?;

        let content = Content::read(&mut reader).map_err(|e| {
            let reason = candle_message(&e);
            // candle checks declared lengths against the bytes left and says
            // "remaining" when they do not fit; a plain short read is EOF.
            if is_unexpected_eof(&e) || reason.contains("remaining") {
                ModelError::Truncated {
                    what: format!("the header ({reason})"),
                    needed: 0,
                    file_size,
                }
            } else {
                ModelError::Malformed { reason }
            }
        })?;

        let config = config_from_metadata(&content.metadata)?;
        // Every size against the tensors present before the expected
        // tensor list (9 names a block) is built from them.
        check_against_tensors(&content, &config)?;
        check_tensors(&content, &config)?;
        check_data_extent(&content, file_size, alignment)?;
        tokenizer::check_metadata(&content.metadata, config.vocab())?;
        Ok(Self {
            path: path.to_owned(),
            content,
            config,
        })
    }

    /// The configuration read from the metadata.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The GGUF metadata, for keys this crate does not interpret.
    pub fn metadata(&self) -> &HashMap<String, Value> {
        &self.content.metadata
    }

    /// The tokenizer built from the metadata.
    pub fn tokenizer(&self) -> Result<GgufTokenizer, ModelError> {
        GgufTokenizer::from_metadata(&self.content.metadata)
    }

    /// Reads every tensor and dequantises it to `f32`.
    pub fn load_model(&self) -> Result<Model, ModelError> {
        let file = File::open(&self.path).map_err(io_error(&self.path))?;
        let mut reader = BufReader::new(file);
        let mut read = |name: &str| -> Result<candle_core::Tensor, ModelError> {
            // `open` checked that every tensor's bytes are in the file; a
            // failure here (the file changed since) is reported with
            // candle's message.
            let q = self
                .content
                .tensor(&mut reader, name, &Device::Cpu)
                .map_err(|e| ModelError::Dequantise {
                    name: name.to_owned(),
                    reason: candle_message(&e),
                })?;
            q.dequantize(&Device::Cpu)
                .map_err(|e| ModelError::Dequantise {
                    name: name.to_owned(),
                    reason: candle_message(&e),
                })
        };
        let embed = read("token_embd.weight")?;
        let final_norm = read("output_norm.weight")?;
        let mut layers = Vec::with_capacity(self.config.layers());
        for l in 0..self.config.layers() {
            let mut n = |s: &str| read(&format!("blk.{l}.{s}.weight"));
            layers.push(LayerWeights {
                attn_norm: n("attn_norm")?,
                wq: n("attn_q")?,
                wk: n("attn_k")?,
                wv: n("attn_v")?,
                wo: n("attn_output")?,
                mlp_norm: n("ffn_norm")?,
                gate: n("ffn_gate")?,
                up: n("ffn_up")?,
                down: n("ffn_down")?,
            });
        }
        Ok(Model::new(
            self.config,
            Weights {
                embed,
                final_norm,
                layers,
            },
        ))
    }
}

fn describe(v: &Value) -> String {
    match v {
        Value::Array(a) => format!("an array of {}", a.len()),
        Value::String(s) if s.len() > 40 => format!("a string of {} bytes", s.len()),
        other => format!("{other:?}"),
    }
}

pub(crate) fn meta<'a>(md: &'a HashMap<String, Value>, key: &str) -> Result<&'a Value, ModelError> {
    md.get(key).ok_or_else(|| ModelError::MetadataMissing {
        key: key.to_owned(),
    })
}

fn wrong_type(key: &str, expected: &'static str, v: &Value) -> ModelError {
    ModelError::MetadataType {
        key: key.to_owned(),
        expected,
        found: describe(v),
    }
}

/// A non-negative integer of any GGUF integer type.
pub(crate) fn as_usize(key: &str, v: &Value) -> Result<usize, ModelError> {
    let n: Option<u64> = match *v {
        Value::U8(n) => Some(n.into()),
        Value::U16(n) => Some(n.into()),
        Value::U32(n) => Some(n.into()),
        Value::U64(n) => Some(n),
        Value::I8(n) => u64::try_from(n).ok(),
        Value::I16(n) => u64::try_from(n).ok(),
        Value::I32(n) => u64::try_from(n).ok(),
        Value::I64(n) => u64::try_from(n).ok(),
        _ => None,
    };
    n.and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| wrong_type(key, "a non-negative integer", v))
}

pub(crate) fn meta_usize(md: &HashMap<String, Value>, key: &str) -> Result<usize, ModelError> {
    as_usize(key, meta(md, key)?)
}

fn meta_opt_usize(md: &HashMap<String, Value>, key: &str) -> Result<Option<usize>, ModelError> {
    md.get(key).map(|v| as_usize(key, v)).transpose()
}

fn meta_f64(md: &HashMap<String, Value>, key: &str) -> Result<f64, ModelError> {
    match *meta(md, key)? {
        Value::F32(x) => Ok(x.into()),
        Value::F64(x) => Ok(x),
        ref v => Err(wrong_type(key, "a float", v)),
    }
}

pub(crate) fn meta_str<'a>(
    md: &'a HashMap<String, Value>,
    key: &str,
) -> Result<&'a str, ModelError> {
    match meta(md, key)? {
        Value::String(s) => Ok(s),
        v => Err(wrong_type(key, "a string", v)),
    }
}

fn bad(key: &str, value: impl std::fmt::Display, why: &'static str) -> ModelError {
    ModelError::BadHyperParameter {
        key: key.to_owned(),
        value: value.to_string(),
        why,
    }
}

/// The configuration from the `llama.*` keys, each checked for range and
/// against the others. Nothing is defaulted that changes the maths: a file
/// without its RoPE base is refused rather than given 10000 (which scores
/// perplexity 17.5 instead of 15.64 on SmolLM2).
fn config_from_metadata(md: &HashMap<String, Value>) -> Result<Config, ModelError> {
    let arch = meta_str(md, "general.architecture")?;
    if arch != ARCHITECTURE {
        return Err(ModelError::UnsupportedArchitecture {
            found: arch.to_owned(),
        });
    }
    let positive = |key: &str| -> Result<usize, ModelError> {
        let n = meta_usize(md, key)?;
        if n == 0 {
            return Err(bad(key, n, "must be positive"));
        }
        Ok(n)
    };
    let layers = positive("llama.block_count")?;
    let d_model = positive("llama.embedding_length")?;
    let ffn = positive("llama.feed_forward_length")?;
    let q_heads = positive("llama.attention.head_count")?;
    let context_length = positive("llama.context_length")?;
    if context_length > MAX_CONTEXT_LENGTH {
        return Err(bad(
            "llama.context_length",
            context_length,
            "more positions than any model this loader runs (at most 2^24)",
        ));
    }
    let (kv_heads, head_dim) = heads(md, d_model, q_heads)?;
    let (rope_base, rms_eps) = rope_base_and_eps(md)?;
    let vocab = vocab(md)?;
    checked(Shape {
        vocab,
        d_model,
        layers,
        q_heads,
        kv_heads,
        head_dim,
        ffn,
        rope: Rope {
            // Fixed by the architecture, not the metadata: see RopeLayout.
            layout: RopeLayout::Interleaved,
            base: rope_base,
        },
        rms_eps,
        context_length,
    })
}

/// Key/value heads (default: as many as the query heads) and the head
/// dimension (default: hidden / heads), with the value and rotary sizes
/// that must equal it.
fn heads(
    md: &HashMap<String, Value>,
    d_model: usize,
    q_heads: usize,
) -> Result<(usize, usize), ModelError> {
    // Optional in the GGUF spec, meaning "as many as the query heads".
    let kv_heads = match meta_opt_usize(md, "llama.attention.head_count_kv")? {
        Some(0) => return Err(bad("llama.attention.head_count_kv", 0, "must be positive")),
        Some(n) => n,
        None => q_heads,
    };
    if !q_heads.is_multiple_of(kv_heads) {
        return Err(bad(
            "llama.attention.head_count_kv",
            kv_heads,
            "must divide llama.attention.head_count",
        ));
    }
    let head_dim = match meta_opt_usize(md, "llama.attention.key_length")? {
        Some(n) => n,
        None if d_model.is_multiple_of(q_heads) => d_model / q_heads,
        None => {
            return Err(bad(
                "llama.embedding_length",
                d_model,
                "is not a multiple of llama.attention.head_count (and no key_length is given)",
            ));
        }
    };
    if head_dim == 0 || !head_dim.is_multiple_of(2) {
        return Err(bad(
            "llama.attention.key_length",
            head_dim,
            "head dimension must be positive and even",
        ));
    }
    if let Some(v) = meta_opt_usize(md, "llama.attention.value_length")?
        && v != head_dim
    {
        return Err(bad(
            "llama.attention.value_length",
            v,
            "must equal the key length",
        ));
    }
    if let Some(r) = meta_opt_usize(md, "llama.rope.dimension_count")?
        && r != head_dim
    {
        return Err(bad(
            "llama.rope.dimension_count",
            r,
            "partial rotary embeddings are not supported (must equal the head dimension)",
        ));
    }
    Ok((kv_heads, head_dim))
}

/// The RoPE base and the RMSNorm epsilon, with RoPE scaling refused.
fn rope_base_and_eps(md: &HashMap<String, Value>) -> Result<(f64, f64), ModelError> {
    if let Some(v) = md.get("llama.rope.scaling.type") {
        let none = matches!(v, Value::String(s) if s == "none");
        if !none {
            return Err(bad(
                "llama.rope.scaling.type",
                describe(v),
                "RoPE scaling is not supported",
            ));
        }
    }
    let rope_base = meta_f64(md, "llama.rope.freq_base")?;
    if !(rope_base.is_finite() && rope_base > 1.0) {
        return Err(bad(
            "llama.rope.freq_base",
            rope_base,
            "must be finite and > 1",
        ));
    }
    let rms_eps = meta_f64(md, "llama.attention.layer_norm_rms_epsilon")?;
    if !(rms_eps.is_finite() && rms_eps > 0.0 && rms_eps < 1.0) {
        return Err(bad(
            "llama.attention.layer_norm_rms_epsilon",
            rms_eps,
            "must be in (0, 1)",
        ));
    }
    Ok((rope_base, rms_eps))
}

/// The vocabulary size, equal to the tokenizer's token count.
fn vocab(md: &HashMap<String, Value>) -> Result<usize, ModelError> {
    let tokens = match meta(md, "tokenizer.ggml.tokens")? {
        Value::Array(a) => a.len(),
        v => {
            return Err(wrong_type(
                "tokenizer.ggml.tokens",
                "an array of strings",
                v,
            ));
        }
    };
    // Older files lack `llama.vocab_size`; the token list is then the size.
    let vocab = meta_opt_usize(md, "llama.vocab_size")?.unwrap_or(tokens);
    if vocab != tokens || vocab == 0 {
        return Err(bad(
            "llama.vocab_size",
            vocab,
            "must be positive and equal the number of tokenizer.ggml.tokens",
        ));
    }
    Ok(vocab)
}

/// The first dimension (rows) of tensor `name`, or its absence named.
fn rows_of<'a>(content: &'a Content, name: &str) -> Result<&'a [usize], ModelError> {
    content
        .tensor_infos
        .get(name)
        .map(|i| i.shape.dims())
        .ok_or_else(|| ModelError::MissingTensor {
            name: name.to_owned(),
        })
}

fn mismatch(key: &str, value: usize, tensor: &str, implied: impl ToString) -> ModelError {
    ModelError::HyperParameterMismatch {
        key: key.to_owned(),
        value: value.to_string(),
        tensor: tensor.to_owned(),
        implied: implied.to_string(),
    }
}

/// Each size the metadata states against the tensors the file holds, so
/// that nothing is sized from the metadata alone: the block count against
/// the `blk.N` tensors present, the hidden size and vocabulary against the
/// embedding, the head counts and the MLP width against block 0's
/// projections (every block's shapes are then checked by
/// [`check_tensors`]). Runs in time linear in the tensor table and
/// allocates nothing proportional to a stated size.
fn check_against_tensors(content: &Content, c: &Config) -> Result<(), ModelError> {
    // Blocks present: one more than the highest `blk.N` index.
    let blocks = content
        .tensor_infos
        .keys()
        .filter_map(|n| {
            n.strip_prefix("blk.")?
                .split('.')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .map(|i| i.saturating_add(1))
        .max()
        .unwrap_or(0);
    if c.layers() != blocks {
        return Err(mismatch(
            "llama.block_count",
            c.layers(),
            "blk.N",
            format!("{blocks} blocks"),
        ));
    }
    let embd = "token_embd.weight";
    let dims = rows_of(content, embd)?;
    if let [vocab, d] = *dims {
        if d != c.d_model() {
            return Err(mismatch("llama.embedding_length", c.d_model(), embd, d));
        }
        if vocab != c.vocab() {
            return Err(mismatch("llama.vocab_size", c.vocab(), embd, vocab));
        }
    }
    // Block 0's projections fix the head counts (in heads of head_dim
    // rows) and the MLP width.
    let heads = |key: &str, count: usize, tensor: &str| -> Result<(), ModelError> {
        let rows = rows_of(content, tensor)?.first().copied().unwrap_or(0);
        if count.checked_mul(c.head_dim()) != Some(rows) {
            let implied = if rows.is_multiple_of(c.head_dim()) {
                format!("{} heads of {}", rows / c.head_dim(), c.head_dim())
            } else {
                format!(
                    "{rows} rows, not a multiple of the head dimension {}",
                    c.head_dim()
                )
            };
            return Err(mismatch(key, count, tensor, implied));
        }
        Ok(())
    };
    heads(
        "llama.attention.head_count",
        c.q_heads(),
        "blk.0.attn_q.weight",
    )?;
    heads(
        "llama.attention.head_count_kv",
        c.kv_heads(),
        "blk.0.attn_k.weight",
    )?;
    let gate = "blk.0.ffn_gate.weight";
    let ffn = rows_of(content, gate)?.first().copied().unwrap_or(0);
    if ffn != c.ffn() {
        return Err(mismatch("llama.feed_forward_length", c.ffn(), gate, ffn));
    }
    Ok(())
}

/// The tensor table holds exactly the configuration's tensors, each with
/// its implied shape and a type fit for its role.
fn check_tensors(content: &Content, config: &Config) -> Result<(), ModelError> {
    let expected = expected_tensors(config);
    let names: BTreeSet<&str> = expected.iter().map(|(n, _, _)| n.as_str()).collect();
    // Unknown tensors are refused, not ignored: an untied lm head or a
    // RoPE frequency table would change the maths this forward pass does.
    let mut extra: Vec<&String> = content
        .tensor_infos
        .keys()
        .filter(|n| !names.contains(n.as_str()))
        .collect();
    extra.sort();
    if let Some(name) = extra.first() {
        let why = match name.as_str() {
            "output.weight" => "an untied lm head (this loader runs tied embeddings)",
            "rope_freqs.weight" => "RoPE frequency factors (not supported)",
            _ => "not part of the llama layout this loader runs",
        };
        return Err(ModelError::UnsupportedTensor {
            name: (*name).clone(),
            why,
        });
    }
    for (name, shape, role) in &expected {
        let info = content
            .tensor_infos
            .get(name)
            .ok_or_else(|| ModelError::MissingTensor { name: name.clone() })?;
        let found = info.shape.dims();
        if found != shape.as_slice() {
            return Err(ModelError::WrongShape {
                name: name.clone(),
                expected: shape.clone(),
                found: found.to_vec(),
            });
        }
        let t = info.ggml_dtype;
        if !is_storage_type(t) {
            return Err(ModelError::UnsupportedQuantisation {
                name: name.clone(),
                found: format!("{t:?}"),
            });
        }
        if *role == Role::Norm && !is_float_type(t) {
            return Err(ModelError::WrongDtype {
                name: name.clone(),
                expected: "a float type (F32, F16 or BF16) for a norm weight",
                found: format!("{t:?}"),
            });
        }
        // A quantised row must hold whole blocks.
        let row = shape.last().copied().unwrap_or(0);
        if !row.is_multiple_of(t.block_size()) {
            return Err(ModelError::WrongShape {
                name: name.clone(),
                expected: shape.clone(),
                found: found.to_vec(),
            });
        }
    }
    Ok(())
}

/// Every tensor's bytes lie inside the file, and the file ends with the
/// last tensor (plus at most the alignment padding after it).
fn check_data_extent(content: &Content, file_size: u64, alignment: u64) -> Result<(), ModelError> {
    let mut end = content.tensor_data_offset;
    let mut infos: Vec<_> = content.tensor_infos.iter().collect();
    infos.sort_by_key(|(_, info)| info.offset);
    for (name, info) in infos {
        let t = info.ggml_dtype;
        // Checked: dimensions come from the file (shapes were matched to
        // the metadata, which is bounded by the tensors, not by the file).
        let bytes = info
            .shape
            .dims()
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d as u64))
            .map(|n| n / t.block_size() as u64)
            .and_then(|blocks| blocks.checked_mul(t.type_size() as u64));
        let tensor_end = bytes
            .and_then(|bytes| {
                content
                    .tensor_data_offset
                    .checked_add(info.offset)
                    .and_then(|s| s.checked_add(bytes))
            })
            .ok_or_else(|| ModelError::Malformed {
                reason: format!("tensor `{name}`'s size or offset {} overflows", info.offset),
            })?;
        if tensor_end > file_size {
            return Err(ModelError::Truncated {
                what: format!("tensor `{name}`"),
                needed: tensor_end,
                file_size,
            });
        }
        end = end.max(tensor_end);
    }
    // `alignment` is a power of two (checked_alignment).
    let padded = end.div_ceil(alignment).saturating_mul(alignment);
    if file_size > padded {
        return Err(ModelError::TrailingBytes {
            data_end: end,
            file_size,
        });
    }
    Ok(())
}
