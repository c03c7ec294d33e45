//! The training files of a fine-tune job, read and tokenized: plain text
//! (every token predicted; each file ends with the end-of-sequence token so
//! that no window learns to run one file into the next without it) or
//! `sft-jsonl` (one `{"prompt": ..., "response": ...}` object per line; the
//! prompt is rendered as a user turn of the model's chat template with the
//! assistant turn opened, the response closed by the end-of-sequence token,
//! and only the response is scored).

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use kolm_format::job_spec::DataFormat;
use kolm_model::{ChatMessage, GgufTokenizer};
use serde::Deserialize;

use super::FineTuneError;

/// Longest training file read, in bytes.
pub const MAX_TRAIN_FILE_BYTES: u64 = 1 << 30;

/// Longest `text` training file, in bytes. A text file is tokenized whole,
/// and the tokenizer holds about 140 bytes a byte of input at its peak
/// (16.9 MB of Shakespeare: 2.3 GB and 23 s with SmolLM2's tokenizer on
/// the 2-core development machine), so a 1 GiB file would need about
/// 140 GB; a larger corpus is split into several files.
pub const MAX_TEXT_FILE_BYTES: u64 = 16 << 20;

/// Longest `sft-jsonl` line, in bytes (its newline not counted). A line is
/// one example and is tokenized whole: one 64 MB line drove the tokenizer
/// to 7.5 GB and the job to an abort. Lines are read through a reader that
/// never buffers more than this.
pub const MAX_SFT_LINE_BYTES: usize = 1 << 20;

/// Most tokens one `sft-jsonl` example (prompt and response) may have;
/// a longer one cannot be trained on at any `train.seq_len` the spec allows
/// (at most 8192).
pub const MAX_SFT_EXAMPLE_TOKENS: usize = 8192;

/// Most `sft-jsonl` examples over all training files.
pub const MAX_SFT_EXAMPLES: usize = 1 << 20;

/// Most tokens over all training files (4 bytes each, 1 GiB in all).
pub const MAX_TRAIN_TOKENS: usize = 1 << 28;

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
    let mut total_tokens = 0usize;
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
        let file = DataFile {
            name,
            path: &path,
            len: meta.len(),
            tokenizer,
            eos,
        };
        let text = match format {
            DataFormat::Text => file.read_text_doc(&mut docs, &mut total_tokens)?,
            DataFormat::SftJsonl => file.read_sft_examples(&mut pairs, &mut total_tokens)?,
        };
        texts.push(text);
    }
    let tokens = match format {
        DataFormat::Text => Tokens::Text(docs),
        DataFormat::SftJsonl => Tokens::Sft(pairs),
    };
    Ok((tokens, texts))
}

/// One training file being read.
struct DataFile<'a> {
    name: &'a str,
    path: &'a Path,
    /// Its size in bytes.
    len: u64,
    tokenizer: &'a GgufTokenizer,
    eos: u32,
}

impl DataFile<'_> {
    fn tok(&self, s: &str, line: Option<usize>) -> Result<Vec<u32>, FineTuneError> {
        self.tokenizer
            .encode(s)
            .map_err(|e| data_err(self.name, line, e.to_string()))
    }

    /// A text file: one document (its tokens and end-of-sequence) appended
    /// to `docs`; returns the text.
    fn read_text_doc(
        &self,
        docs: &mut Vec<Vec<u32>>,
        total_tokens: &mut usize,
    ) -> Result<String, FineTuneError> {
        let (name, path, eos) = (self.name, self.path, self.eos);
        if self.len > MAX_TEXT_FILE_BYTES {
            return Err(data_err(
                name,
                None,
                format!(
                    "{} bytes, over the {MAX_TEXT_FILE_BYTES}-byte cap on one text file \
                 (it is tokenized whole); split it into several files",
                    self.len
                ),
            ));
        }
        let text = read_text(name, path)?;
        let mut ids = self.tok(&text, None)?;
        if ids.is_empty() {
            return Err(data_err(name, None, "no text to train on".into()));
        }
        ids.push(eos);
        *total_tokens = count_tokens(name, None, *total_tokens, ids.len())?;
        docs.push(ids);
        Ok(text)
    }

    /// A JSONL file of `{"prompt", "response"}` examples, each rendered
    /// with the chat template and appended to `pairs`; returns the text.
    fn read_sft_examples(
        &self,
        pairs: &mut Vec<(Vec<u32>, Vec<u32>)>,
        total_tokens: &mut usize,
    ) -> Result<String, FineTuneError> {
        let (name, path, eos, tokenizer) = (self.name, self.path, self.eos, self.tokenizer);
        let chat = tokenizer.chat_template().ok_or_else(|| {
            data_err(
                name,
                None,
                "sft-jsonl needs a chat template; the model has none".into(),
            )
        })?;
        let file = std::fs::File::open(path).map_err(|e| data_err(name, None, e.to_string()))?;
        let mut reader = BufReader::new(file);
        let mut text = String::new();
        let mut raw = Vec::new();
        let mut any = false;
        for n in 1.. {
            if !read_line(name, n, &mut reader, &mut raw)? {
                break;
            }
            let line = std::str::from_utf8(&raw).map_err(|e| {
                data_err(
                    name,
                    Some(n),
                    format!(
                        "not UTF-8 (first bad byte at column {})",
                        e.valid_up_to() + 1
                    ),
                )
            })?;
            text.push_str(line);
            text.push('\n');
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
            if pairs.len() == MAX_SFT_EXAMPLES {
                return Err(data_err(
                    name,
                    Some(n),
                    format!("more than {MAX_SFT_EXAMPLES} examples in the training files"),
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
            let prompt = self.tok(&rendered, Some(n))?;
            let mut response = self.tok(&ex.response, Some(n))?;
            response.push(eos);
            let example = prompt.len() + response.len();
            if example > MAX_SFT_EXAMPLE_TOKENS {
                return Err(data_err(
                    name,
                    Some(n),
                    format!(
                        "the example has {example} tokens (prompt and response), \
                     over the {MAX_SFT_EXAMPLE_TOKENS}-token cap on one example"
                    ),
                ));
            }
            *total_tokens = count_tokens(name, Some(n), *total_tokens, example)?;
            pairs.push((prompt, response));
            any = true;
        }
        if !any {
            return Err(data_err(name, None, "no example in the file".into()));
        }
        Ok(text)
    }
}

/// A whole text file as UTF-8 (its size was checked against the cap).
fn read_text(name: &str, path: &Path) -> Result<String, FineTuneError> {
    let bytes = std::fs::read(path).map_err(|e| data_err(name, None, e.to_string()))?;
    String::from_utf8(bytes).map_err(|e| {
        data_err(
            name,
            None,
            format!(
                "not UTF-8 (first bad byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// Reads line `n` into `line` (without its newline, a `\r` before it
/// kept); false at the end of the file. At most [`MAX_SFT_LINE_BYTES`] + 1
/// bytes are buffered: a longer line is refused as soon as that is seen.
fn read_line(
    name: &str,
    n: usize,
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
) -> Result<bool, FineTuneError> {
    line.clear();
    // The cap, its newline, and one byte more to see a line over the cap.
    let limit = MAX_SFT_LINE_BYTES as u64 + 2;
    let read = reader
        .by_ref()
        .take(limit)
        .read_until(b'\n', line)
        .map_err(|e| data_err(name, Some(n), e.to_string()))?;
    if read == 0 {
        return Ok(false);
    }
    if line.last() == Some(&b'\n') {
        line.pop();
    }
    if line.len() > MAX_SFT_LINE_BYTES {
        return Err(data_err(
            name,
            Some(n),
            format!("the line is longer than the {MAX_SFT_LINE_BYTES}-byte cap on one example"),
        ));
    }
    Ok(true)
}

/// `total + more`, refused over [`MAX_TRAIN_TOKENS`].
fn count_tokens(
    name: &str,
    line: Option<usize>,
    total: usize,
    more: usize,
) -> Result<usize, FineTuneError> {
    match total.checked_add(more) {
        Some(t) if t <= MAX_TRAIN_TOKENS => Ok(t),
        _ => Err(data_err(
            name,
            line,
            format!("the training files hold more than {MAX_TRAIN_TOKENS} tokens (the cap)"),
        )),
    }
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

    /// One 64 MB line aborted the job at 7.5 GB: it is refused by line
    /// number and cap, at once, without reading the line whole.
    #[test]
    fn an_overlong_sft_line_is_refused_by_number_and_cap() {
        let t = GgufTokenizer::byte_level_chatml();
        let d = tempfile::tempdir().unwrap();
        let mut text = String::from("{\"prompt\":\"hi\",\"response\":\"yo\"}\n{\"prompt\":\"");
        text.push_str(&"a".repeat(64 << 20));
        text.push_str("\",\"response\":\"yo\"}\n");
        std::fs::write(d.path().join("big.jsonl"), &text).unwrap();
        drop(text);
        let start = std::time::Instant::now();
        let err = read(DataFormat::SftJsonl, &["big.jsonl".into()], d.path(), &t).unwrap_err();
        let elapsed = start.elapsed();
        let msg = err.to_string();
        assert!(
            msg.contains("big.jsonl line 2")
                && msg.contains(&format!("{MAX_SFT_LINE_BYTES}-byte cap")),
            "{msg}"
        );
        assert!(elapsed < std::time::Duration::from_secs(5), "{elapsed:?}");

        // A line at the cap is read; its example is then too long for the
        // token cap (one token a byte here), named by line and cap.
        let mut text = String::from("{\"prompt\":\"");
        text.push_str(&"b".repeat(MAX_SFT_LINE_BYTES - 40));
        text.push_str("\",\"response\":\"yo\"}\r\n");
        std::fs::write(d.path().join("long.jsonl"), &text).unwrap();
        let err = read(DataFormat::SftJsonl, &["long.jsonl".into()], d.path(), &t).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("long.jsonl line 1")
                && msg.contains(&format!("{MAX_SFT_EXAMPLE_TOKENS}-token cap")),
            "{msg}"
        );
    }

    /// A text file is tokenized whole (about 140 bytes of memory a byte):
    /// one over the cap is refused before it is read, naming file and cap.
    #[test]
    fn an_oversized_text_file_is_refused_before_it_is_read() {
        let t = GgufTokenizer::byte_level_chatml();
        let d = tempfile::tempdir().unwrap();
        let f = std::fs::File::create(d.path().join("big.txt")).unwrap();
        f.set_len(MAX_TEXT_FILE_BYTES + 1).unwrap();
        let start = std::time::Instant::now();
        let err = read(DataFormat::Text, &["big.txt".into()], d.path(), &t).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("big.txt") && msg.contains(&format!("{MAX_TEXT_FILE_BYTES}-byte cap")),
            "{msg}"
        );
        assert!(start.elapsed() < std::time::Duration::from_secs(2));
    }
}
