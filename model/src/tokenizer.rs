//! The tokenizer a GGUF file describes, as a Hugging Face `tokenizers`
//! tokenizer: byte-level BPE over the file's vocabulary and merges, with the
//! pre-tokenizer llama.cpp names in `tokenizer.ggml.pre`, the file's special
//! tokens, and its `add_bos_token` choice.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, Tokenizer};

use crate::chat::ChatTemplate;
use crate::error::ModelError;
use crate::gguf::{as_usize, meta, meta_str};

/// GGUF token types (llama.cpp `llama_token_type`).
const TOKEN_TYPE_CONTROL: usize = 3;
const TOKEN_TYPE_USER_DEFINED: usize = 4;

/// Special token ids from the metadata (`tokenizer.ggml.*_token_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecialTokens {
    /// Beginning of sequence.
    pub bos: Option<u32>,
    /// End of sequence (the chat turn end for an instruct model).
    pub eos: Option<u32>,
    /// Unknown token (byte-level BPE never produces it).
    pub unknown: Option<u32>,
    /// Padding.
    pub padding: Option<u32>,
}

/// A GGUF file's tokenizer.
#[derive(Debug, Clone)]
pub struct GgufTokenizer {
    inner: Tokenizer,
    specials: SpecialTokens,
    add_bos: bool,
    chat_template: Option<ChatTemplate>,
}

fn tok_err(e: impl std::fmt::Display) -> ModelError {
    ModelError::Tokenizer {
        reason: e.to_string(),
    }
}

fn strings<'a>(md: &'a HashMap<String, Value>, key: &str) -> Result<Vec<&'a str>, ModelError> {
    let wrong = |found: String| ModelError::MetadataType {
        key: key.to_owned(),
        expected: "an array of strings",
        found,
    };
    match meta(md, key)? {
        Value::Array(items) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.as_str()),
                other => Err(wrong(format!("an array holding {:?}", other.value_type()))),
            })
            .collect(),
        other => Err(wrong(format!("{:?}", other.value_type()))),
    }
}

fn opt_id(md: &HashMap<String, Value>, key: &str, vocab: usize) -> Result<Option<u32>, ModelError> {
    let Some(v) = md.get(key) else {
        return Ok(None);
    };
    let id = as_usize(key, v)?;
    if id >= vocab {
        return Err(ModelError::BadHyperParameter {
            key: key.to_owned(),
            value: id.to_string(),
            why: "token id outside the vocabulary",
        });
    }
    // id < vocab, and the vocabulary is a GGUF array, far below u32::MAX.
    Ok(u32::try_from(id).ok())
}

fn opt_bool(md: &HashMap<String, Value>, key: &str) -> Result<Option<bool>, ModelError> {
    match md.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(ModelError::MetadataType {
            key: key.to_owned(),
            expected: "a bool",
            found: format!("{other:?}"),
        }),
    }
}

/// The pre-tokenizer llama.cpp uses for `tokenizer.ggml.pre`.
fn pre_tokenizer(pre: &str) -> Result<PreTokenizerWrapper, ModelError> {
    // GPT-2's byte-level split: its regex, no prefix space.
    let byte_level = ByteLevel::new(false, true, true);
    match pre {
        "gpt2" | "default" => Ok(byte_level.into()),
        // llama.cpp's SMOLLM pre-type: each digit alone, then GPT-2's regex
        // (the same as the model's Hugging Face tokenizer.json).
        "smollm" => Ok(Sequence::new(vec![Digits::new(true).into(), byte_level.into()]).into()),
        other => Err(ModelError::Tokenizer {
            reason: format!(
                "pre-tokenizer `{other}` (tokenizer.ggml.pre) is not supported (gpt2, smollm)"
            ),
        }),
    }
}

/// The tokenizer keys [`GgufTokenizer::from_metadata`] needs are present and
/// typed; called by [`crate::GgufFile::open`] so that a file that opens has
/// a usable tokenizer.
pub(crate) fn check_metadata(md: &HashMap<String, Value>, vocab: usize) -> Result<(), ModelError> {
    let model = meta_str(md, "tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(ModelError::Tokenizer {
            reason: format!(
                "tokenizer model `{model}` (tokenizer.ggml.model) is not supported (gpt2)"
            ),
        });
    }
    pre_tokenizer(meta_str(md, "tokenizer.ggml.pre")?)?;
    strings(md, "tokenizer.ggml.tokens")?;
    strings(md, "tokenizer.ggml.merges")?;
    token_types(md, vocab)?;
    for key in [
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id",
        "tokenizer.ggml.padding_token_id",
    ] {
        opt_id(md, key, vocab)?;
    }
    opt_bool(md, "tokenizer.ggml.add_bos_token")?;
    Ok(())
}

fn token_types(md: &HashMap<String, Value>, vocab: usize) -> Result<Vec<usize>, ModelError> {
    let key = "tokenizer.ggml.token_type";
    let types = match meta(md, key)? {
        Value::Array(items) => items
            .iter()
            .map(|v| as_usize(key, v))
            .collect::<Result<Vec<_>, _>>()?,
        other => {
            return Err(ModelError::MetadataType {
                key: key.to_owned(),
                expected: "an array of integers",
                found: format!("{:?}", other.value_type()),
            });
        }
    };
    if types.len() != vocab {
        return Err(ModelError::BadHyperParameter {
            key: key.to_owned(),
            value: format!("{} entries", types.len()),
            why: "must have one entry per token",
        });
    }
    Ok(types)
}

impl GgufTokenizer {
    /// Builds the tokenizer from GGUF metadata.
    pub fn from_metadata(md: &HashMap<String, Value>) -> Result<Self, ModelError> {
        let tokens = strings(md, "tokenizer.ggml.tokens")?;
        let vocab_size = tokens.len();
        let merges = strings(md, "tokenizer.ggml.merges")?
            .into_iter()
            .enumerate()
            .map(|(i, m)| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_owned(), b.to_owned()))
                    .ok_or_else(|| ModelError::Tokenizer {
                        reason: format!("merge {i} `{m}` is not two tokens separated by a space"),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut vocab = HashMap::with_capacity(vocab_size);
        for (id, t) in tokens.iter().enumerate() {
            let id = u32::try_from(id).map_err(tok_err)?;
            if vocab.insert((*t).to_owned(), id).is_some() {
                return Err(ModelError::Tokenizer {
                    reason: format!("token `{t}` appears twice in tokenizer.ggml.tokens"),
                });
            }
        }
        let bpe = BPE::builder()
            .vocab_and_merges(vocab.into_iter().collect::<Vocab>(), merges)
            .build()
            .map_err(tok_err)?;
        let mut inner = Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(pre_tokenizer(meta_str(md, "tokenizer.ggml.pre")?)?));
        inner.with_decoder(Some(ByteLevelDecoder::default()));

        // Control and user-defined tokens are matched whole in the input
        // (so a rendered chat's `<|im_start|>` is one token), as the model's
        // Hugging Face tokenizer.json does.
        let types = token_types(md, vocab_size)?;
        let added: Vec<AddedToken> = tokens
            .iter()
            .zip(&types)
            .filter_map(|(t, ty)| match *ty {
                TOKEN_TYPE_CONTROL => Some(AddedToken::from((*t).to_owned(), true)),
                TOKEN_TYPE_USER_DEFINED => Some(AddedToken::from((*t).to_owned(), false)),
                _ => None,
            })
            .collect();
        inner.add_special_tokens(added).map_err(tok_err)?;

        let specials = SpecialTokens {
            bos: opt_id(md, "tokenizer.ggml.bos_token_id", vocab_size)?,
            eos: opt_id(md, "tokenizer.ggml.eos_token_id", vocab_size)?,
            unknown: opt_id(md, "tokenizer.ggml.unknown_token_id", vocab_size)?,
            padding: opt_id(md, "tokenizer.ggml.padding_token_id", vocab_size)?,
        };
        // llama.cpp's default for a gpt2 tokenizer without the key is no BOS.
        let add_bos = opt_bool(md, "tokenizer.ggml.add_bos_token")?.unwrap_or(false);
        if add_bos {
            let bos = specials.bos.ok_or_else(|| ModelError::MetadataMissing {
                key: "tokenizer.ggml.bos_token_id (add_bos_token is true)".to_owned(),
            })?;
            // Written as a post-processor so that the exported tokenizer.json
            // adds it too.
            let bos_text = tokens
                .get(bos as usize)
                .map(|t| (*t).to_owned())
                .ok_or_else(|| tok_err("bos token id outside the vocabulary"))?;
            let template = TemplateProcessing::builder()
                .try_single(format!("{bos_text} $A"))
                .and_then(|b| b.try_pair(format!("{bos_text} $A {bos_text}:1 $B:1")))
                .map_err(tok_err)?
                .special_tokens(vec![(bos_text, bos)])
                .build()
                .map_err(tok_err)?;
            inner.with_post_processor(Some(template));
        }

        let chat_template = match md.get("tokenizer.chat_template") {
            None => None,
            Some(Value::String(s)) => Some(ChatTemplate::new(s.clone())),
            Some(other) => {
                return Err(ModelError::MetadataType {
                    key: "tokenizer.chat_template".to_owned(),
                    expected: "a string",
                    found: format!("{:?}", other.value_type()),
                });
            }
        };
        Ok(Self {
            inner,
            specials,
            add_bos,
            chat_template,
        })
    }

    /// A byte-level tokenizer with no merges: one token per byte (GPT-2's
    /// byte-to-character table), then `<|endoftext|>`, `<|im_start|>` and
    /// `<|im_end|>` (ids 256, 257, 258; end of sequence is `<|im_end|>`)
    /// and SmolLM2's ChatML template. For a randomly initialised model that
    /// has no file to take a vocabulary from (the `tiny` preset): built
    /// through [`Self::from_metadata`], so it behaves and exports exactly
    /// like a GGUF tokenizer.
    pub fn byte_level_chatml() -> Self {
        let mut tokens: Vec<Value> = byte_chars()
            .into_iter()
            .map(|c| Value::String(c.to_string()))
            .collect();
        let mut types = vec![Value::I32(1); 256];
        for special in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] {
            tokens.push(Value::String(special.to_owned()));
            types.push(Value::I32(TOKEN_TYPE_CONTROL as i32));
        }
        let md: HashMap<String, Value> = [
            ("tokenizer.ggml.model", Value::String("gpt2".into())),
            ("tokenizer.ggml.pre", Value::String("smollm".into())),
            ("tokenizer.ggml.tokens", Value::Array(tokens)),
            ("tokenizer.ggml.merges", Value::Array(Vec::new())),
            ("tokenizer.ggml.token_type", Value::Array(types)),
            ("tokenizer.ggml.bos_token_id", Value::U32(256)),
            ("tokenizer.ggml.eos_token_id", Value::U32(258)),
            ("tokenizer.ggml.unknown_token_id", Value::U32(256)),
            ("tokenizer.ggml.padding_token_id", Value::U32(256)),
            ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
            (
                "tokenizer.chat_template",
                Value::String(crate::chat::SMOLLM2_CHATML.to_owned()),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        // The metadata above is fixed and valid: a failure is a bug here.
        Self::from_metadata(&md).expect("the built-in byte-level tokenizer is valid")
    }

    /// Token ids of `text`, with the BOS token first when the file says so.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, ModelError> {
        Ok(self
            .inner
            .encode(text, true)
            .map_err(tok_err)?
            .get_ids()
            .to_vec())
    }

    /// The text of `ids`, special tokens included (so that
    /// `decode(encode(x)) == x` for any `x`).
    pub fn decode(&self, ids: &[u32]) -> Result<String, ModelError> {
        self.inner.decode(ids, false).map_err(tok_err)
    }

    /// Vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Special token ids.
    pub fn specials(&self) -> SpecialTokens {
        self.specials
    }

    /// Whether [`Self::encode`] puts the BOS token first.
    pub fn adds_bos(&self) -> bool {
        self.add_bos
    }

    /// The chat template (`tokenizer.chat_template`), if the file has one.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat_template.as_ref()
    }

    /// The tokenizer as a Hugging Face `tokenizer.json` document (what an
    /// artifact carries); `tokenizers::Tokenizer::from_bytes` reads it back.
    pub fn to_json(&self) -> Result<Vec<u8>, ModelError> {
        Ok(self.inner.to_string(false).map_err(tok_err)?.into_bytes())
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &Tokenizer {
        &self.inner
    }
}

/// GPT-2's byte-to-character table (what byte-level BPE vocabularies are
/// spelled in): printable Latin-1 bytes stand for themselves, the others
/// are mapped in order to U+0100 onwards.
fn byte_chars() -> Vec<char> {
    let printable = |b: u32| {
        (u32::from(b'!')..=u32::from(b'~')).contains(&b)
            || (0xA1..=0xAC).contains(&b)
            || (0xAE..=0xFF).contains(&b)
    };
    let mut next = 256u32;
    (0u32..256)
        .map(|b| {
            let code = if printable(b) {
                b
            } else {
                next += 1;
                next - 1
            };
            char::from_u32(code).unwrap_or('\u{FFFD}')
        })
        .collect()
}

#[cfg(test)]
mod byte_level_tests {
    use super::*;

    #[test]
    fn byte_level_round_trips_any_text_and_keeps_specials_whole() {
        let t = GgufTokenizer::byte_level_chatml();
        assert_eq!(t.vocab_size(), 259);
        let text = "To be, or not to be: 1599 \u{e9}\u{1F600}\n";
        let ids = t.encode(text).unwrap();
        assert_eq!(ids.len(), text.len(), "one token per byte");
        assert_eq!(ids[0], u32::from(b'T'));
        assert_eq!(t.decode(&ids).unwrap(), text);
        assert_eq!(t.encode("<|im_start|>user").unwrap()[0], 257);
        assert_eq!(t.specials().eos, Some(258));
        let chat = t.chat_template().unwrap();
        assert!(chat.render(&[], true).is_ok());
        let json = t.to_json().unwrap();
        let back = tokenizers::Tokenizer::from_bytes(&json).unwrap();
        assert_eq!(back.encode(text, false).unwrap().get_ids(), &ids[..]);
    }
}
