//! `log`, enclave to host: one line of public log output and the stream
//! it came from. Its codec and its rule.

use super::cbor::{Decoder, Encoder};
use super::codec::{Body, Codec, DecodeError, MAX_NAME, invalid};
use super::rules::{Invalid, Rule, max_len};

/// Longest log line, in bytes.
pub const MAX_LOG_LINE: usize = 64 * 1024;

/// One log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// The text, at most [`MAX_LOG_LINE`] bytes.
    pub line: String,
    /// Where it came from.
    pub stream: LogStream,
}

/// The source of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogStream {
    /// The job's standard output. Spelled `stdout`.
    Stdout,
    /// The job's standard error. Spelled `stderr`.
    Stderr,
    /// The enclave's supervisor. Spelled `supervisor`.
    Supervisor,
}

impl LogStream {
    /// Every stream.
    pub const ALL: [LogStream; 3] = [LogStream::Stdout, LogStream::Stderr, LogStream::Supervisor];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
            LogStream::Supervisor => "supervisor",
        }
    }
}

impl Codec for LogLine {
    fn encode(&self, e: &mut Encoder) {
        e.map(Self::FIELDS);
        e.key("line");
        e.text(&self.line);
        e.key("stream");
        e.text(self.stream.as_str());
    }

    fn read(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let mut m = d.map("log", Self::FIELDS)?;
        d.key(&mut m, "line")?;
        let line = d.text("log.line", MAX_LOG_LINE)?.to_owned();
        d.key(&mut m, "stream")?;
        let value = d.text("log.stream", MAX_NAME)?;
        let stream = LogStream::ALL
            .into_iter()
            .find(|s| s.as_str() == value)
            .ok_or_else(|| {
                invalid(
                    "log.stream",
                    Invalid::UnknownLogStream {
                        value: value.to_owned(),
                    },
                )
            })?;
        d.end(m)?;
        Ok(LogLine { line, stream })
    }
}

impl Body for LogLine {
    const FIELDS: &'static [&'static str] = &["line", "stream"];

    fn check(&self) -> Rule {
        max_len("log.line", self.line.len(), MAX_LOG_LINE)
    }
}
