//! [`FileName`]: the plain file names inputs and artifacts go by (input
//! declarations, input chunks, artifact chunks), parsed once.

use std::fmt;

/// Longest file name (inputs, artifacts), in bytes.
pub const MAX_FILE_NAME: usize = 255;

/// A plain file name: 1 to [`MAX_FILE_NAME`] bytes, no `/`, no control
/// character, not starting with `.` (so never `.` or `..`, and never the
/// name of a receiver's temporary file).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileName(String);

/// Why a file name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FileNameError {
    #[error("empty file name")]
    Empty,
    #[error("file name {name:?} has {len} bytes, at most {MAX_FILE_NAME} allowed")]
    TooLong { name: String, len: usize },
    #[error("file name {name:?} contains `/`: only plain file names, no paths")]
    Slash { name: String },
    #[error("file name {name:?} contains a control character")]
    Control { name: String },
    #[error("file name {name:?} starts with `.`")]
    LeadingDot { name: String },
}

impl FileName {
    /// Parses a plain file name.
    pub fn parse(s: &str) -> Result<FileName, FileNameError> {
        let name = || s.chars().take(MAX_FILE_NAME).collect::<String>();
        if s.is_empty() {
            return Err(FileNameError::Empty);
        }
        if s.len() > MAX_FILE_NAME {
            return Err(FileNameError::TooLong {
                name: name(),
                len: s.len(),
            });
        }
        if s.contains('/') {
            return Err(FileNameError::Slash { name: name() });
        }
        if s.chars().any(char::is_control) {
            return Err(FileNameError::Control { name: name() });
        }
        if s.starts_with('.') {
            return Err(FileNameError::LeadingDot { name: name() });
        }
        Ok(FileName(s.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn file_names_are_plain_names_only() {
        for ok in [
            "a",
            "corpus.txt",
            "x..y",
            "weights-v2_final.bin",
            "ünïcode",
            &"n".repeat(255),
        ] {
            assert_eq!(FileName::parse(ok).unwrap().as_str(), ok);
        }
        for (bad, class) in [
            ("", "Empty"),
            (".", "LeadingDot"),
            ("..", "LeadingDot"),
            (".hidden", "LeadingDot"),
            ("../x", "Slash"),
            ("a/b", "Slash"),
            ("/etc", "Slash"),
            ("a\0b", "Control"),
            ("line\nbreak", "Control"),
        ] {
            let err = FileName::parse(bad).unwrap_err();
            assert!(format!("{err:?}").starts_with(class), "{bad:?}: {err:?}");
        }
        assert!(matches!(
            FileName::parse(&"n".repeat(256)),
            Err(FileNameError::TooLong { len: 256, .. })
        ));
    }
}
