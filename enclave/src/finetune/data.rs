//! The training files of a fine-tune job, read and tokenized: plain text
//! (every token predicted; each file ends with the end-of-sequence token so
//! that no window learns to run one file into the next without it) or
//! `sft-jsonl` (one `{"prompt": ..., "response": ...}` object per line; the
//! prompt is rendered as a user turn of the model's chat template with the
//! assistant turn opened, the response closed by the end-of-sequence token,
//! and only the response is scored).

use std::path::Path;

use kolm_format::job_spec::DataFormat;
use kolm_model::{ChatMessage, GgufTokenizer};
use serde::Deserialize;

use super::FineTuneError;

/// Longest training file read, in bytes.
pub const MAX_TRAIN_FILE_BYTES: u64 = 1 << 30;

/// Tokenized training data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tokens {
    /// One token stream per file.
    Text(Vec<Vec<u32>>),
    /// `(prompt, response)` per example, in file then line order.
    Sft(Vec<(Vec<u32>, Vec<u32>)>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SftLine {
    prompt: String,
    response: String,
}

fn data_err(file: &str, line: Option<usize>, reason: String) -> FineTuneError {
    FineTuneError::Data {
        file: file.to_owned(),
        line,
        reason,
    }
}

/// Reads `files` (names under `input_dir`) in spec order; also returns
/// their texts (the safety evaluation's verbatim index).
pub fn read(
    format: DataFormat,
    files: &[String],
    input_dir: &Path,
    tokenizer: &GgufTokenizer,
) -> Result<(Tokens, Vec<String>), FineTuneError> {
    let eos = tokenizer
        .specials()
        .eos
        .ok_or_else(|| FineTuneError::BaseModel {
            reason: "the tokenizer has no end-of-sequence token".into(),
        })?;
    let mut texts = Vec::new();
    let mut docs = Vec::new();
    let mut pairs = Vec::new();
    for name in files {
        let path = input_dir.join(name);
        let meta = std::fs::metadata(&path).map_err(|e| data_err(name, None, e.to_string()))?;
        if meta.len() > MAX_TRAIN_FILE_BYTES {
            return Err(data_err(
                name,
                None,
                format!(
                    "{} bytes, over the {MAX_TRAIN_FILE_BYTES}-byte cap",
                    meta.len()
                ),
            ));
        }
        let bytes = std::fs::read(&path).map_err(|e| data_err(name, None, e.to_string()))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            data_err(
                name,
                None,
                format!(
                    "not UTF-8 (first bad byte at offset {})",
                    e.utf8_error().valid_up_to()
                ),
            )
        })?;
        let tok = |s: &str, line: Option<usize>| {
            tokenizer
                .encode(s)
                .map_err(|e| data_err(name, line, e.to_string()))
        };
        match format {
            DataFormat::Text => {
                let mut ids = tok(&text, None)?;
                if ids.is_empty() {
                    return Err(data_err(name, None, "no text to train on".into()));
                }
                ids.push(eos);
                docs.push(ids);
            }
            DataFormat::SftJsonl => {
                let chat = tokenizer.chat_template().ok_or_else(|| {
                    data_err(
                        name,
                        None,
                        "sft-jsonl needs a chat template; the model has none".into(),
                    )
                })?;
                let mut any = false;
                for (i, line) in text.lines().enumerate() {
                    let n = i + 1;
                    if line.trim().is_empty() {
                        continue;
                    }
                    let ex: SftLine = serde_json::from_str(line).map_err(|e| {
                        data_err(
                            name,
                            Some(n),
                            format!("not a {{\"prompt\", \"response\"}} object: {e}"),
                        )
                    })?;
                    if ex.response.is_empty() {
                        return Err(data_err(
                            name,
                            Some(n),
                            "empty response: nothing to learn".into(),
                        ));
                    }
                    let rendered = chat
                        .render(
                            &[ChatMessage {
                                role: "user".into(),
                                content: ex.prompt,
                            }],
                            true,
                        )
                        .map_err(|e| data_err(name, Some(n), e.to_string()))?;
                    let prompt = tok(&rendered, Some(n))?;
                    let mut response = tok(&ex.response, Some(n))?;
                    response.push(eos);
                    pairs.push((prompt, response));
                    any = true;
                }
                if !any {
                    return Err(data_err(name, None, "no example in the file".into()));
                }
            }
        }
        texts.push(text);
    }
    let tokens = match format {
        DataFormat::Text => Tokens::Text(docs),
        DataFormat::SftJsonl => Tokens::Sft(pairs),
    };
    Ok((tokens, texts))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (n, t) in files {
            std::fs::write(d.path().join(n), t).unwrap();
        }
        d
    }

    #[test]
    fn text_files_become_one_stream_each_ending_in_eos() {
        let t = GgufTokenizer::byte_level_chatml();
        let d = dir(&[("a.txt", "ab"), ("b.txt", "c")]);
        let (tokens, texts) = read(
            DataFormat::Text,
            &["a.txt".into(), "b.txt".into()],
            d.path(),
            &t,
        )
        .unwrap();
        assert_eq!(tokens, Tokens::Text(vec![vec![97, 98, 258], vec![99, 258]]));
        assert_eq!(texts, ["ab", "c"]);
    }

    #[test]
    fn sft_lines_render_the_prompt_as_a_chat_turn_and_name_bad_lines() {
        let t = GgufTokenizer::byte_level_chatml();
        let d = dir(&[(
            "s.jsonl",
            "{\"prompt\":\"hi\",\"response\":\"yo\"}\n\n{\"prompt\":\"x\"}\n",
        )]);
        let err = read(DataFormat::SftJsonl, &["s.jsonl".into()], d.path(), &t).unwrap_err();
        assert!(err.to_string().contains("s.jsonl line 3"), "{err}");
        let d = dir(&[("s.jsonl", "{\"prompt\":\"hi\",\"response\":\"yo\"}\n")]);
        let (tokens, _) = read(DataFormat::SftJsonl, &["s.jsonl".into()], d.path(), &t).unwrap();
        let Tokens::Sft(pairs) = tokens else { panic!() };
        let prompt = t.decode(&pairs[0].0).unwrap();
        assert!(
            prompt.ends_with("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"),
            "{prompt}"
        );
        assert_eq!(pairs[0].1, vec![121, 111, 258]);
        let d = dir(&[("bad.txt", "\u{0}\u{0}")]);
        std::fs::write(d.path().join("bad.txt"), [0xff, 0xfe]).unwrap();
        let err = read(DataFormat::Text, &["bad.txt".into()], d.path(), &t).unwrap_err();
        assert!(err.to_string().contains("not UTF-8"), "{err}");
    }
}
