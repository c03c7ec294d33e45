//! Small GGUF files written here with candle's GGUF writer: a tiny random
//! Llama checked against the f64 reference of `kolm_kernels` (both RoPE
//! layouts), quantised tensors checked against their originals, a tiny
//! tokenizer, and one broken file per loader error. No assets needed.

use std::path::PathBuf;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use kolm_kernels::cpu::llama::{Tokens, loss_and_grads};
use kolm_kernels::llama::{Config, Shape};
use kolm_kernels::rng::SplitMix64;
use kolm_model::{GgufFile, ModelError, Rope, RopeLayout};

const VOCAB: usize = 36;
const D: usize = 64;
const LAYERS: usize = 2;
const Q_HEADS: usize = 2;
const KV_HEADS: usize = 1;
const HEAD_DIM: usize = 64;
const FFN: usize = 96;
const ROPE_BASE: f32 = 10_000.0;
const EPS: f32 = 1e-5;

/// A tiny byte-level vocabulary: specials, the letters, space and newline,
/// three merges.
fn tokens() -> Vec<String> {
    let mut t: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        .map(str::to_owned)
        .to_vec();
    t.extend(('a'..='z').map(String::from));
    // GPT-2's byte-to-char map: space is U+0120, newline U+010A.
    t.extend(
        [
            "\u{120}",
            "\u{10a}",
            "ab",
            "\u{120}a",
            "\u{120}ab",
            "0",
            "1",
        ]
        .map(str::to_owned),
    );
    assert_eq!(t.len(), VOCAB);
    t
}

/// A GGUF under construction: metadata and tensors, editable before writing.
struct Tiny {
    metadata: Vec<(String, Value)>,
    tensors: Vec<(String, QTensor)>,
    /// The f32 values written, by tensor name.
    originals: Vec<(String, Vec<f32>)>,
}

fn q(values: &[f32], shape: &[usize], dtype: GgmlDType) -> QTensor {
    let t = Tensor::from_vec(values.to_vec(), shape, &Device::Cpu).unwrap();
    QTensor::quantize(&t, dtype).unwrap()
}

impl Tiny {
    /// Random weights (seeded); matrices stored as `matrix_type`.
    fn new(seed: u64, matrix_type: GgmlDType) -> Self {
        let mut rng = SplitMix64::new(seed);
        let u32v = |n: usize| Value::U32(u32::try_from(n).unwrap());
        let metadata = vec![
            ("general.architecture", Value::String("llama".into())),
            ("llama.block_count", u32v(LAYERS)),
            ("llama.context_length", u32v(64)),
            ("llama.embedding_length", u32v(D)),
            ("llama.feed_forward_length", u32v(FFN)),
            ("llama.attention.head_count", u32v(Q_HEADS)),
            ("llama.attention.head_count_kv", u32v(KV_HEADS)),
            ("llama.attention.key_length", u32v(HEAD_DIM)),
            ("llama.attention.value_length", u32v(HEAD_DIM)),
            ("llama.rope.freq_base", Value::F32(ROPE_BASE)),
            ("llama.attention.layer_norm_rms_epsilon", Value::F32(EPS)),
            ("llama.vocab_size", u32v(VOCAB)),
            ("llama.rope.dimension_count", u32v(HEAD_DIM)),
            ("tokenizer.ggml.model", Value::String("gpt2".into())),
            ("tokenizer.ggml.pre", Value::String("smollm".into())),
            (
                "tokenizer.ggml.tokens",
                Value::Array(tokens().into_iter().map(Value::String).collect()),
            ),
            (
                "tokenizer.ggml.token_type",
                Value::Array(
                    (0..VOCAB)
                        .map(|i| Value::I32(if i < 3 { 3 } else { 1 }))
                        .collect(),
                ),
            ),
            (
                "tokenizer.ggml.merges",
                Value::Array(
                    ["\u{120} a", "a b", "\u{120}a b"]
                        .map(|m| Value::String(m.into()))
                        .to_vec(),
                ),
            ),
            ("tokenizer.ggml.bos_token_id", Value::U32(1)),
            ("tokenizer.ggml.eos_token_id", Value::U32(2)),
            ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let mut tiny = Self {
            metadata,
            tensors: Vec::new(),
            originals: Vec::new(),
        };
        let (qd, kvd) = (Q_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
        let mut add = |tiny: &mut Self, name: String, shape: Vec<usize>, norm: bool| {
            let n = shape.iter().product();
            let values: Vec<f32> = if norm {
                (0..n).map(|_| 1.0 + rng.symmetric(0.3) as f32).collect()
            } else {
                (0..n).map(|_| rng.symmetric(0.25) as f32).collect()
            };
            let dtype = if norm { GgmlDType::F32 } else { matrix_type };
            tiny.tensors.push((name.clone(), q(&values, &shape, dtype)));
            tiny.originals.push((name, values));
        };
        add(&mut tiny, "token_embd.weight".into(), vec![VOCAB, D], false);
        add(&mut tiny, "output_norm.weight".into(), vec![D], true);
        for l in 0..LAYERS {
            let n = |s: &str| format!("blk.{l}.{s}.weight");
            add(&mut tiny, n("attn_norm"), vec![D], true);
            add(&mut tiny, n("attn_q"), vec![qd, D], false);
            add(&mut tiny, n("attn_k"), vec![kvd, D], false);
            add(&mut tiny, n("attn_v"), vec![kvd, D], false);
            add(&mut tiny, n("attn_output"), vec![D, qd], false);
            add(&mut tiny, n("ffn_norm"), vec![D], true);
            add(&mut tiny, n("ffn_gate"), vec![FFN, D], false);
            add(&mut tiny, n("ffn_up"), vec![FFN, D], false);
            add(&mut tiny, n("ffn_down"), vec![D, FFN], false);
        }
        tiny
    }

    fn set_meta(&mut self, key: &str, value: Value) {
        self.metadata.retain(|(k, _)| k != key);
        self.metadata.push((key.to_owned(), value));
    }

    fn remove_meta(&mut self, key: &str) {
        self.metadata.retain(|(k, _)| k != key);
    }

    fn set_tensor(&mut self, name: &str, tensor: QTensor) {
        self.tensors.retain(|(n, _)| n != name);
        self.tensors.push((name.to_owned(), tensor));
    }

    fn remove_tensor(&mut self, name: &str) {
        self.tensors.retain(|(n, _)| n != name);
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = std::io::Cursor::new(Vec::new());
        let md: Vec<(&str, &Value)> = self.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let ts: Vec<(&str, &QTensor)> = self.tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
        gguf_file::write(&mut out, &md, &ts).unwrap();
        out.into_inner()
    }
}

/// Writes `bytes` to a fresh file; the directory lives as long as the guard.
fn file(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    std::fs::write(&path, bytes).unwrap();
    (dir, path)
}

fn open(bytes: &[u8]) -> Result<GgufFile, ModelError> {
    let (_dir, path) = file(bytes);
    GgufFile::open(&path)
}

/// Opens a tiny model after `edit` changed it.
fn open_edited(edit: impl FnOnce(&mut Tiny)) -> Result<GgufFile, ModelError> {
    let mut tiny = Tiny::new(8, GgmlDType::F32);
    edit(&mut tiny);
    open(&tiny.bytes())
}

fn kernels_config(layout: kolm_kernels::cpu::RopeLayout) -> Config {
    Config::new(Shape {
        vocab: VOCAB,
        d_model: D,
        layers: LAYERS,
        q_heads: Q_HEADS,
        kv_heads: KV_HEADS,
        head_dim: HEAD_DIM,
        ffn: FFN,
        rope: Rope {
            layout,
            base: f64::from(ROPE_BASE),
        },
        rms_eps: f64::from(EPS),
        ..Shape::smollm2_135m()
    })
    .unwrap()
}

/// The f32 forward pass scores a sequence as the kernels' f64 reference
/// does, with each RoPE layout; and the loader's kernel parameter layout is
/// the one the reference (and so the GPU path) takes.
#[test]
fn tiny_model_matches_the_f64_reference() {
    let (_dir, path) = file(&Tiny::new(1, GgmlDType::F32).bytes());
    let model = GgufFile::open(&path).unwrap().load_model().unwrap();
    let params: Vec<Vec<f64>> = model
        .weights()
        .kernel_params()
        .unwrap()
        .into_iter()
        .map(|p| p.into_iter().map(f64::from).collect())
        .collect();
    let mut rng = SplitMix64::new(9);
    let seq: Vec<u32> = (0..40).map(|_| rng.below(VOCAB as u64) as u32).collect();
    let ids = &seq[..seq.len() - 1];
    let targets: Vec<i32> = seq[1..].iter().map(|&t| t as i32).collect();
    let tokens = Tokens {
        batch: 1,
        seq: ids.len(),
        ids,
        targets: &targets,
    };
    for (ours, theirs) in [
        (
            RopeLayout::Interleaved,
            kolm_kernels::cpu::RopeLayout::Interleaved,
        ),
        (
            RopeLayout::RotateHalf,
            kolm_kernels::cpu::RopeLayout::RotateHalf,
        ),
    ] {
        let (reference, _) = loss_and_grads(&kernels_config(theirs), &params, tokens);
        let cfg = model.config().with_rope(Rope {
            layout: ours,
            base: f64::from(ROPE_BASE),
        });
        let p = model.with_config(cfg).unwrap().perplexity(&seq).unwrap();
        assert_eq!(p.predicted, 39);
        assert!(
            // Measured agreement: ~1e-7 (f32 against f64).
            (p.mean_nll - reference).abs() < 1e-5,
            "{ours:?}: mean NLL {} vs reference {reference}",
            p.mean_nll
        );
        // Sanity: random weights, not a uniform guess.
        assert!((p.mean_nll - (VOCAB as f64).ln()).abs() > 0.05);
    }
    // The two layouts are different functions of the same weights.
    let half = model
        .with_config(model.config().with_rope(Rope {
            layout: RopeLayout::RotateHalf,
            base: f64::from(ROPE_BASE),
        }))
        .unwrap();
    assert_ne!(
        model.perplexity(&seq).unwrap().mean_nll,
        half.perplexity(&seq).unwrap().mean_nll
    );
}

/// Quantised tensors dequantise to their originals within the format's
/// step: Q8_0 (the real embedding's type) and Q4_1 (its matrices').
#[test]
fn quantised_tensors_dequantise_to_their_originals() {
    for (dtype, levels) in [(GgmlDType::Q8_0, 127.0), (GgmlDType::Q4_1, 15.0)] {
        let tiny = Tiny::new(2, dtype);
        let (_dir, path) = file(&tiny.bytes());
        let model = GgufFile::open(&path).unwrap().load_model().unwrap();
        let params = model.weights().kernel_params().unwrap();
        // token_embd is kernel parameter 0; blk.0.ffn_down is the last of layer 0.
        for (name, index) in [("token_embd.weight", 0), ("blk.0.ffn_down.weight", 7)] {
            let original = &tiny.originals.iter().find(|(n, _)| n == name).unwrap().1;
            let loaded = &params[index];
            assert_eq!(loaded.len(), original.len(), "{name}");
            // Weights are uniform in [-0.25, 0.25]: one step is at most 0.5 / levels.
            let step = 0.5 / levels;
            let worst = original
                .iter()
                .zip(loaded)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0_f32, f32::max);
            assert!(worst <= step, "{dtype:?} {name}: error {worst} > {step}");
            assert!(
                worst > 0.0,
                "{dtype:?} {name}: lossy format came back exact"
            );
        }
    }
}

#[test]
fn tiny_tokenizer_encodes_decodes_and_adds_bos_when_asked() {
    let mut tiny = Tiny::new(3, GgmlDType::F32);
    let text = "ab abc\n<|im_start|>a 01";
    let (_dir, path) = file(&tiny.bytes());
    let tok = GgufFile::open(&path).unwrap().tokenizer().unwrap();
    let ids = tok.encode(text).unwrap();
    // "ab" merges, " ab" merges whole, digits stay single, the special is one token.
    assert_eq!(ids, [31, 33, 5, 30, 1, 3, 29, 34, 35]);
    assert_eq!(tok.decode(&ids).unwrap(), text);
    assert!(!tok.adds_bos());

    tiny.set_meta("tokenizer.ggml.add_bos_token", Value::Bool(true));
    let (_dir, path) = file(&tiny.bytes());
    let tok = GgufFile::open(&path).unwrap().tokenizer().unwrap();
    let with_bos = tok.encode(text).unwrap();
    assert_eq!(with_bos[0], 1);
    assert_eq!(with_bos[1..], ids);
    let reloaded = kolm_model::tokenizers::Tokenizer::from_bytes(tok.to_json().unwrap()).unwrap();
    assert_eq!(reloaded.encode(text, true).unwrap().get_ids(), with_bos);
}

#[test]
fn forward_refuses_bad_input() {
    let (_dir, path) = file(&Tiny::new(4, GgmlDType::F32).bytes());
    let model = GgufFile::open(&path).unwrap().load_model().unwrap();
    assert!(matches!(
        model.logits(&[1, 36, 2]),
        Err(ModelError::TokenOutOfRange {
            id: 36,
            position: 1,
            vocab: 36
        })
    ));
    assert!(matches!(
        model.perplexity(&[1]),
        Err(ModelError::TooFewTokens {
            needed: 2,
            got: 1,
            ..
        })
    ));
    assert!(matches!(
        model.greedy(&[], 3),
        Err(ModelError::TooFewTokens { got: 0, .. })
    ));
    // Context length 64 (the metadata's), counting cached positions.
    assert!(matches!(
        model.logits(&[3; 65]),
        Err(ModelError::ContextTooLong { len: 65, max: 64 })
    ));
    assert!(matches!(
        model.greedy(&[3; 60], 6),
        Err(ModelError::ContextTooLong { len: 65, max: 64 })
    ));
    // The last generated token is never fed back: 60 + 5 fits in 64.
    assert_eq!(model.greedy(&[3; 60], 5).unwrap().len(), 5);
    let other = model.config().with_rope(Rope {
        layout: RopeLayout::Interleaved,
        base: 500.0,
    });
    assert!(model.with_config(other).is_ok());
}

#[test]
fn not_gguf_and_unsupported_version() {
    assert!(matches!(
        open(b"PK\x03\x04 a zip file"),
        Err(ModelError::NotGguf { found }) if found == b"PK\x03\x04"
    ));
    assert!(matches!(open(b""), Err(ModelError::NotGguf { .. })));
    let mut bytes = Tiny::new(5, GgmlDType::F32).bytes();
    bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert!(matches!(
        open(&bytes),
        Err(ModelError::UnsupportedVersion { found: 1 })
    ));
}

/// Cut anywhere, the file is reported truncated: in the version, inside
/// the metadata, in the tensor table, in the tensor data.
#[test]
fn truncated_files_are_truncated() {
    let bytes = Tiny::new(6, GgmlDType::F32).bytes();
    let table_start = bytes
        .windows(17)
        .position(|w| w == b"token_embd.weight")
        .unwrap();
    for cut in [
        6,
        30,
        200,
        table_start + 5,
        bytes.len() / 2,
        bytes.len() - 40,
    ] {
        let err = open(&bytes[..cut]).unwrap_err();
        assert!(
            matches!(err, ModelError::Truncated { .. }),
            "cut at {cut} of {}: {err}",
            bytes.len()
        );
    }
    // Cut in the tensor data: the error names the tensor and the offsets.
    match open(&bytes[..bytes.len() - 40]).unwrap_err() {
        ModelError::Truncated {
            what,
            needed,
            file_size,
        } => {
            assert!(what.starts_with("tensor `"), "{what}");
            assert!(needed > file_size);
            assert_eq!(file_size, bytes.len() as u64 - 40);
        }
        other => panic!("{other}"),
    }
}

#[test]
fn trailing_bytes_are_refused() {
    let mut bytes = Tiny::new(7, GgmlDType::F32).bytes();
    let size = bytes.len() as u64;
    bytes.extend_from_slice(&[0; 64]);
    assert!(matches!(
        open(&bytes),
        Err(ModelError::TrailingBytes { file_size, .. }) if file_size == size + 64
    ));
}

#[test]
fn missing_tensor_is_named() {
    let result = open_edited(|tiny| {
        tiny.remove_tensor("blk.1.ffn_up.weight");
    });
    assert!(matches!(
        result,
        Err(ModelError::MissingTensor { name }) if name == "blk.1.ffn_up.weight"
    ));
}

#[test]
fn wrong_shape_is_named_with_both_shapes() {
    let result = open_edited(|tiny| {
        // k projection as wide as q: the metadata says one kv head. (In
        // block 0 the head count is checked against it first: see
        // hyper_parameters_are_checked_against_the_tensors.)
        tiny.set_tensor(
            "blk.1.attn_k.weight",
            q(
                &vec![0.0; 2 * HEAD_DIM * D],
                &[2 * HEAD_DIM, D],
                GgmlDType::F32,
            ),
        );
    });
    match result {
        Err(ModelError::WrongShape {
            name,
            expected,
            found,
        }) => {
            assert_eq!(name, "blk.1.attn_k.weight");
            assert_eq!(expected, [HEAD_DIM, D]);
            assert_eq!(found, [2 * HEAD_DIM, D]);
        }
        other => panic!("{other:?}"),
    }
    // A transposed matrix is a wrong shape too.
    let result = open_edited(|tiny| {
        tiny.set_tensor(
            "blk.1.ffn_down.weight",
            q(&vec![0.0; FFN * D], &[FFN, D], GgmlDType::F32),
        );
    });
    assert!(matches!(
        result,
        Err(ModelError::WrongShape { name, .. }) if name == "blk.1.ffn_down.weight"
    ));
}

#[test]
fn norm_weights_must_be_float() {
    let result = open_edited(|tiny| {
        tiny.set_tensor("blk.0.ffn_norm.weight", q(&[1.0; D], &[D], GgmlDType::Q8_0));
    });
    assert!(matches!(
        result,
        Err(ModelError::WrongDtype { name, found, .. })
            if name == "blk.0.ffn_norm.weight" && found == "Q8_0"
    ));
}

/// `Q8_1` is ggml's activation format (like `Q8_K`): valid GGUF, never a
/// weight type.
#[test]
fn activation_quantisation_is_unsupported() {
    let result = open_edited(|tiny| {
        tiny.set_tensor(
            "token_embd.weight",
            q(&vec![0.5; VOCAB * D], &[VOCAB, D], GgmlDType::Q8_1),
        );
    });
    assert!(matches!(
        result,
        Err(ModelError::UnsupportedQuantisation { name, found })
            if name == "token_embd.weight" && found == "Q8_1"
    ));
}

#[test]
fn unknown_tensors_are_refused() {
    let result = open_edited(|tiny| {
        tiny.set_tensor(
            "output.weight",
            q(&vec![0.0; VOCAB * D], &[VOCAB, D], GgmlDType::F32),
        );
    });
    assert!(matches!(
        result,
        Err(ModelError::UnsupportedTensor { name, .. }) if name == "output.weight"
    ));
}

#[test]
fn metadata_errors_name_the_key() {
    let result = open_edited(|tiny| {
        tiny.remove_meta("llama.rope.freq_base");
    });
    assert!(matches!(
        result,
        Err(ModelError::MetadataMissing { key }) if key == "llama.rope.freq_base"
    ));

    let result = open_edited(|tiny| {
        tiny.set_meta("llama.block_count", Value::String("two".into()));
    });
    assert!(matches!(
        result,
        Err(ModelError::MetadataType { key, .. }) if key == "llama.block_count"
    ));

    let result = open_edited(|tiny| {
        tiny.set_meta("general.architecture", Value::String("gpt2".into()));
    });
    assert!(matches!(
        result,
        Err(ModelError::UnsupportedArchitecture { found }) if found == "gpt2"
    ));

    let result = open_edited(|tiny| {
        tiny.set_meta("llama.attention.head_count_kv", Value::U32(3));
    });
    assert!(matches!(
        result,
        Err(ModelError::BadHyperParameter { key, .. }) if key == "llama.attention.head_count_kv"
    ));

    let result = open_edited(|tiny| {
        tiny.set_meta("llama.vocab_size", Value::U32(40));
    });
    assert!(matches!(
        result,
        Err(ModelError::BadHyperParameter { key, .. }) if key == "llama.vocab_size"
    ));

    // More layers in the metadata than in the file: both counts named.
    let result = open_edited(|tiny| {
        tiny.set_meta("llama.block_count", Value::U32(3));
    });
    assert!(matches!(
        result,
        Err(ModelError::HyperParameterMismatch { key, value, implied, .. })
            if key == "llama.block_count" && value == "3" && implied == "2 blocks"
    ));
    // A block missing a tensor: the tensor named.
    let result = open_edited(|tiny| {
        tiny.remove_tensor("blk.1.ffn_up.weight");
    });
    assert!(matches!(
        result,
        Err(ModelError::MissingTensor { name }) if name == "blk.1.ffn_up.weight"
    ));

    let result = open_edited(|tiny| {
        tiny.set_meta("tokenizer.ggml.pre", Value::String("qwen2".into()));
    });
    assert!(matches!(result, Err(ModelError::Tokenizer { .. })));
}

/// Weights handed back in the kernels' layout (what the trainer returns)
/// make the same model, and a tensor of the wrong size is refused naming it.
#[test]
fn kernel_params_round_trip_into_a_model() {
    let (_dir, path) = file(&Tiny::new(1, GgmlDType::F32).bytes());
    let model = GgufFile::open(&path).unwrap().load_model().unwrap();
    let params = model.weights().kernel_params().unwrap();
    let back = kolm_model::Model::from_kernel_params(*model.config(), &params).unwrap();
    assert_eq!(back.weights().kernel_params().unwrap(), params);
    let seq: Vec<u32> = (0..20).map(|i| (i * 7 % VOCAB) as u32).collect();
    assert_eq!(
        back.perplexity(&seq).unwrap().mean_nll,
        model.perplexity(&seq).unwrap().mean_nll
    );
    let mut bad = params.clone();
    bad[3].pop();
    let err = kolm_model::Model::from_kernel_params(*model.config(), &bad).unwrap_err();
    assert!(err.to_string().contains("parameter 3 (wqkv)"), "{err}");
    assert!(kolm_model::Model::from_kernel_params(*model.config(), &params[1..]).is_err());
}

/// The process's peak resident memory (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// Opens a tiny model edited by `edit` and returns the error, checking
/// that it came at once and without a large allocation: each of these
/// headers once ran for a minute or aborted the process (issue 20).
fn refused_quickly(what: &str, edit: impl FnOnce(&mut Tiny)) -> ModelError {
    let mut tiny = Tiny::new(8, GgmlDType::F32);
    edit(&mut tiny);
    let bytes = tiny.bytes();
    let before = peak_rss();
    let start = std::time::Instant::now();
    let result = open(&bytes);
    let elapsed = start.elapsed();
    let grown = peak_rss().saturating_sub(before);
    assert!(
        elapsed < std::time::Duration::from_secs(2),
        "{what}: {elapsed:?}"
    );
    // Other tests of this binary run at the same time and are small; the
    // broken headers used to reach gigabytes.
    assert!(grown < 256 << 20, "{what}: peak RSS grew by {grown} bytes");
    match result {
        Ok(_) => panic!("{what}: opened"),
        Err(e) => e,
    }
}

/// `general.alignment` 0 divided by zero inside candle's parser (the job
/// died of signal 6); a non-power of two, or a type candle ignores, is
/// refused too, naming the key.
#[test]
fn alignment_must_be_a_power_of_two() {
    for (value, shown) in [
        (Value::U32(0), "0"),
        (Value::U8(0), "0"),
        (Value::U32(48), "48"),
        (Value::I32(-32), "-32"),
        (Value::U64(64), "a value of GGUF type 10"),
    ] {
        let what = format!("{value:?}");
        let err = refused_quickly(&what, |tiny| tiny.set_meta("general.alignment", value));
        match &err {
            ModelError::BadHyperParameter { key, value, .. } => {
                assert_eq!(key, "general.alignment", "{what}");
                assert_eq!(value, shown, "{what}");
            }
            other => panic!("{what}: {other}"),
        }
        assert!(err.to_string().contains("`general.alignment`"), "{err}");
    }
    // The value candle's writer pads to, stated, is read.
    let mut tiny = Tiny::new(8, GgmlDType::F32);
    tiny.set_meta("general.alignment", Value::U32(32));
    open(&tiny.bytes()).unwrap();
}

/// Absurd sizes in the metadata are refused against the tensors present
/// before anything is sized from them (`block_count = 2^32 - 1` used to run
/// for a minute and allocate 6.4 GB), naming the key and both values.
#[test]
fn hyper_parameters_are_checked_against_the_tensors() {
    let max = Value::U32(u32::MAX);
    let cases: Vec<(&str, Value, &str, String)> = vec![
        ("llama.block_count", max.clone(), "blk.N", "2 blocks".into()),
        (
            "llama.block_count",
            Value::U64(u64::MAX),
            "blk.N",
            "2 blocks".into(),
        ),
        (
            "llama.embedding_length",
            max.clone(),
            "token_embd.weight",
            D.to_string(),
        ),
        (
            "llama.feed_forward_length",
            max.clone(),
            "blk.0.ffn_gate.weight",
            FFN.to_string(),
        ),
        (
            "llama.attention.head_count",
            max.clone(),
            "blk.0.attn_q.weight",
            format!("{Q_HEADS} heads of {HEAD_DIM}"),
        ),
        (
            "llama.attention.head_count_kv",
            Value::U32(2),
            "blk.0.attn_k.weight",
            format!("{KV_HEADS} heads of {HEAD_DIM}"),
        ),
        (
            "llama.attention.key_length",
            Value::U64(1 << 62),
            "blk.0.attn_q.weight",
            format!(
                "{} rows, not a multiple of the head dimension {}",
                Q_HEADS * HEAD_DIM,
                1u64 << 62
            ),
        ),
    ];
    for (key, value, tensor, implied) in cases {
        let what = format!("{key} = {value:?}");
        let stated = match &value {
            Value::U32(n) => n.to_string(),
            Value::U64(n) => n.to_string(),
            other => panic!("{other:?}"),
        };
        let err = refused_quickly(&what, |tiny| {
            if key == "llama.attention.key_length" {
                tiny.set_meta("llama.attention.value_length", value.clone());
                tiny.remove_meta("llama.rope.dimension_count");
            }
            tiny.set_meta(key, value.clone());
        });
        let msg = err.to_string();
        match err {
            ModelError::HyperParameterMismatch {
                key: k,
                value: v,
                tensor: t,
                implied: i,
            } => {
                // key_length is checked through the head count it scales.
                let expected_key = if key == "llama.attention.key_length" {
                    "llama.attention.head_count"
                } else {
                    key
                };
                assert_eq!(k, expected_key, "{what}");
                if expected_key == key {
                    assert_eq!(v, stated, "{what}");
                }
                assert_eq!(t, tensor, "{what}");
                assert_eq!(i, implied, "{what}");
            }
            other => panic!("{what}: {other}"),
        }
        assert!(msg.contains(tensor) && msg.contains(&implied), "{msg}");
    }
    // The context length has no tensor to check against: it is bounded.
    let err = refused_quickly("context", |tiny| {
        tiny.set_meta("llama.context_length", Value::U32(u32::MAX));
    });
    assert!(
        matches!(&err, ModelError::BadHyperParameter { key, value, .. }
            if key == "llama.context_length" && value == "4294967295"),
        "{err}"
    );
}
