//! Receiving a job's declared inputs: each file is streamed into a
//! temporary file in the input directory as its chunks arrive, in order,
//! checked against its declared size and SHA-256, synced, and only then
//! renamed to its name. A bundle over the size limit is refused before any
//! byte is stored; any failure removes everything this receiver wrote.
//!
//! Everything here comes from the host, which is not trusted: the
//! verifier's lint set holds (no unwrap, no indexing, no unchecked
//! arithmetic).
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tempfile::NamedTempFile;

use kolm_transport::message::{ErrorCode, FileName, InputChunk, InputDecl, Sha256Digest};

/// Why inputs were refused. Each variant names the input concerned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiveError {
    #[error("declared inputs total {declared} bytes, over the limit of {limit}")]
    BundleTooLarge { declared: u128, limit: u64 },
    #[error("input {name:?} is declared twice")]
    DuplicateInput { name: String },
    #[error("chunk for {name:?}, which was not declared")]
    Undeclared { name: String },
    #[error("chunk for {name:?} at offset {offset}, expected offset {expected}")]
    OutOfOrder {
        name: String,
        offset: u64,
        expected: u64,
    },
    #[error("chunk for {name:?} ends at byte {end}, past its declared size {size}")]
    Overlong { name: String, end: u64, size: u64 },
    #[error("chunk for {name:?} while {current:?} is incomplete: inputs arrive one at a time")]
    Interleaved { name: String, current: String },
    #[error(
        "input {name:?} does not match its declared SHA-256 (declared {declared}, received {received})"
    )]
    DigestMismatch {
        name: String,
        declared: String,
        received: String,
    },
    #[error("input {name:?} is incomplete: {received} of {size} bytes received")]
    Incomplete {
        name: String,
        received: u64,
        size: u64,
    },
    #[error("the receiver already failed; no more chunks are taken")]
    Aborted,
    #[error("storing input {name:?} in {dir}: {error}")]
    Io {
        name: String,
        dir: PathBuf,
        error: io::Error,
    },
}

impl ReceiveError {
    /// The code an error report to the host carries.
    pub fn code(&self) -> ErrorCode {
        match self {
            ReceiveError::BundleTooLarge { .. } => ErrorCode::BundleTooLarge,
            ReceiveError::DigestMismatch { .. } => ErrorCode::DigestMismatch,
            ReceiveError::Io { .. } => ErrorCode::Internal,
            _ => ErrorCode::InputRejected,
        }
    }
}

/// What is known of one declared input.
#[derive(Debug)]
enum State {
    /// No byte yet.
    Pending,
    /// Being written: bytes so far and their running hash.
    Writing {
        file: NamedTempFile,
        received: u64,
        hash: Sha256,
    },
    /// Checked and renamed to its name.
    Done,
}

#[derive(Debug)]
struct Entry {
    size: u64,
    sha256: Sha256Digest,
    state: State,
}

/// Receives the inputs one `job-submit` declared into a directory.
#[derive(Debug)]
pub struct InputReceiver {
    dir: PathBuf,
    entries: BTreeMap<FileName, Entry>,
    /// The input being written, if any.
    current: Option<FileName>,
    failed: bool,
}

/// The inputs, all stored and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedInputs {
    /// Each input's path, by name.
    pub paths: BTreeMap<FileName, PathBuf>,
}

impl InputReceiver {
    /// A receiver for `inputs` into the existing directory `dir`. Refused,
    /// before anything is written, when the declared sizes add up to more
    /// than `max_total` bytes or a name is declared twice.
    pub fn new(
        dir: &Path,
        inputs: &[InputDecl],
        max_total: u64,
    ) -> Result<InputReceiver, ReceiveError> {
        let declared: u128 = inputs.iter().map(|i| u128::from(i.size)).sum();
        if declared > u128::from(max_total) {
            return Err(ReceiveError::BundleTooLarge {
                declared,
                limit: max_total,
            });
        }
        let mut entries = BTreeMap::new();
        for i in inputs {
            let entry = Entry {
                size: i.size,
                sha256: i.sha256,
                state: State::Pending,
            };
            if entries.insert(i.name.clone(), entry).is_some() {
                return Err(ReceiveError::DuplicateInput {
                    name: i.name.to_string(),
                });
            }
        }
        Ok(InputReceiver {
            dir: dir.to_owned(),
            entries,
            current: None,
            failed: false,
        })
    }

    /// Stores one chunk. An error removes everything this receiver stored,
    /// and every later call fails with [`ReceiveError::Aborted`].
    pub fn accept(&mut self, chunk: &InputChunk) -> Result<(), ReceiveError> {
        if self.failed {
            return Err(ReceiveError::Aborted);
        }
        let result = self.store(chunk);
        if result.is_err() {
            self.abort();
        }
        result
    }

    /// Every input must be complete; empty inputs (which need no chunk) are
    /// created here. On error, everything this receiver stored is removed.
    pub fn finish(mut self) -> Result<ReceivedInputs, ReceiveError> {
        if self.failed {
            return Err(ReceiveError::Aborted);
        }
        let names: Vec<FileName> = self.entries.keys().cloned().collect();
        for name in names {
            if let Err(e) = self.complete_empty(&name) {
                self.abort();
                return Err(e);
            }
        }
        let paths = self
            .entries
            .keys()
            .map(|n| (n.clone(), self.dir.join(n.as_str())))
            .collect();
        // Success: the files stay.
        self.entries.clear();
        Ok(ReceivedInputs { paths })
    }

    fn store(&mut self, chunk: &InputChunk) -> Result<(), ReceiveError> {
        let name = &chunk.name;
        if let Some(current) = &self.current
            && current != name
        {
            return Err(ReceiveError::Interleaved {
                name: name.to_string(),
                current: current.to_string(),
            });
        }
        let dir = self.dir.clone();
        let entry = self
            .entries
            .get_mut(name)
            .ok_or_else(|| ReceiveError::Undeclared {
                name: name.to_string(),
            })?;
        let received = match &entry.state {
            State::Pending => 0,
            State::Writing { received, .. } => *received,
            State::Done => entry.size,
        };
        if chunk.offset != received {
            return Err(ReceiveError::OutOfOrder {
                name: name.to_string(),
                offset: chunk.offset,
                expected: received,
            });
        }
        let len = u64::try_from(chunk.data.len()).unwrap_or(u64::MAX);
        let end = received.saturating_add(len);
        if end > entry.size || (matches!(entry.state, State::Done) && len > 0) {
            return Err(ReceiveError::Overlong {
                name: name.to_string(),
                end,
                size: entry.size,
            });
        }
        if chunk.data.is_empty() {
            return Ok(());
        }
        if matches!(entry.state, State::Pending) {
            // A dot name: never a declared input's (FileName refuses them).
            let file = tempfile::Builder::new()
                .prefix(".kolm-input-")
                .tempfile_in(&dir)
                .map_err(io_error(name, &dir))?;
            entry.state = State::Writing {
                file,
                received: 0,
                hash: Sha256::new(),
            };
            self.current = Some(name.clone());
        }
        let State::Writing {
            file,
            received,
            hash,
        } = &mut entry.state
        else {
            // Pending was just turned into Writing, and Done with a
            // non-empty chunk was refused above.
            return Err(ReceiveError::Aborted);
        };
        file.write_all(&chunk.data).map_err(io_error(name, &dir))?;
        hash.update(&chunk.data);
        *received = end;
        if end == entry.size {
            // Pending while it is checked: on failure finalize() has removed
            // the temporary file and there is nothing of it left to remove.
            let State::Writing { file, hash, .. } =
                std::mem::replace(&mut entry.state, State::Pending)
            else {
                return Err(ReceiveError::Aborted);
            };
            self.current = None;
            let received: Sha256Digest = hash.finalize().into();
            finalize(&dir, name, file, &entry.sha256, &received)?;
            entry.state = State::Done;
        }
        Ok(())
    }

    /// An empty input that got no chunk is created now; any other input
    /// must be done.
    fn complete_empty(&mut self, name: &FileName) -> Result<(), ReceiveError> {
        let dir = self.dir.clone();
        let Some(entry) = self.entries.get_mut(name) else {
            return Ok(());
        };
        match &entry.state {
            State::Done => Ok(()),
            State::Pending if entry.size == 0 => {
                let file = tempfile::Builder::new()
                    .prefix(".kolm-input-")
                    .tempfile_in(&dir)
                    .map_err(io_error(name, &dir))?;
                let received: Sha256Digest = Sha256::digest([]).into();
                finalize(&dir, name, file, &entry.sha256, &received)?;
                entry.state = State::Done;
                Ok(())
            }
            State::Pending => Err(ReceiveError::Incomplete {
                name: name.to_string(),
                received: 0,
                size: entry.size,
            }),
            State::Writing { received, .. } => Err(ReceiveError::Incomplete {
                name: name.to_string(),
                received: *received,
                size: entry.size,
            }),
        }
    }

    /// Removes every temporary and finished file of this receiver.
    fn abort(&mut self) {
        self.failed = true;
        self.current = None;
        for (name, entry) in std::mem::take(&mut self.entries) {
            match entry.state {
                // Dropping a NamedTempFile removes it.
                State::Writing { file, .. } => drop(file),
                State::Done => {
                    // Best effort: the error being returned says what failed.
                    let _ = std::fs::remove_file(self.dir.join(name.as_str()));
                }
                State::Pending => {}
            }
        }
    }
}

impl Drop for InputReceiver {
    /// A receiver dropped before [`InputReceiver::finish`] succeeded leaves
    /// nothing behind.
    fn drop(&mut self) {
        if !self.entries.is_empty() {
            self.abort();
        }
    }
}

fn io_error(name: &FileName, dir: &Path) -> impl FnOnce(io::Error) -> ReceiveError + use<> {
    let name = name.to_string();
    let dir = dir.to_owned();
    move |source| ReceiveError::Io {
        name,
        dir,
        error: source,
    }
}

/// Checks the digest, syncs the file, renames it to `name` (never over an
/// existing file) and syncs the directory. The temporary file is removed
/// on any failure.
fn finalize(
    dir: &Path,
    name: &FileName,
    file: NamedTempFile,
    declared: &Sha256Digest,
    received: &Sha256Digest,
) -> Result<(), ReceiveError> {
    if declared != received {
        return Err(ReceiveError::DigestMismatch {
            name: name.to_string(),
            declared: hex::encode(declared),
            received: hex::encode(received),
        });
    }
    file.as_file().sync_all().map_err(io_error(name, dir))?;
    file.persist_noclobber(dir.join(name.as_str()))
        .map_err(|e| io_error(name, dir)(e.error))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(name, dir))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn decl(name: &str, content: &[u8]) -> InputDecl {
        InputDecl {
            name: FileName::parse(name).unwrap(),
            size: content.len() as u64,
            sha256: Sha256::digest(content).into(),
        }
    }

    fn chunk(name: &str, offset: u64, data: &[u8]) -> InputChunk {
        InputChunk {
            data: data.to_vec(),
            name: FileName::parse(name).unwrap(),
            offset,
        }
    }

    /// The directory's entries, temporary files included.
    fn listing(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn stores_inputs_streamed_in_chunks_and_checks_each() {
        let dir = tempfile::tempdir().unwrap();
        let a = b"hello, sealed world".to_vec();
        let b = vec![9u8; 10_000];
        let decls = [decl("a.txt", &a), decl("b.bin", &b), decl("empty", b"")];
        let mut rx = InputReceiver::new(dir.path(), &decls, 20_000).unwrap();
        rx.accept(&chunk("a.txt", 0, &a[..5])).unwrap();
        // Mid-file: only the temporary file exists.
        let mid = listing(dir.path());
        assert_eq!(mid.len(), 1);
        assert!(mid[0].starts_with(".kolm-input-"), "{mid:?}");
        rx.accept(&chunk("a.txt", 5, &a[5..])).unwrap();
        for (i, piece) in b.chunks(3000).enumerate() {
            rx.accept(&chunk("b.bin", i as u64 * 3000, piece)).unwrap();
        }
        let got = rx.finish().unwrap();
        assert_eq!(listing(dir.path()), ["a.txt", "b.bin", "empty"]);
        assert_eq!(std::fs::read(dir.path().join("a.txt")).unwrap(), a);
        assert_eq!(std::fs::read(dir.path().join("b.bin")).unwrap(), b);
        assert_eq!(std::fs::read(dir.path().join("empty")).unwrap(), b"");
        assert_eq!(got.paths.len(), 3);
    }

    #[test]
    fn a_bundle_over_the_limit_is_refused_before_anything_is_stored() {
        let dir = tempfile::tempdir().unwrap();
        let decls = [decl("a", &[1; 600]), decl("b", &[2; 500])];
        let err = InputReceiver::new(dir.path(), &decls, 1099).unwrap_err();
        assert!(
            matches!(
                err,
                ReceiveError::BundleTooLarge {
                    declared: 1100,
                    limit: 1099
                }
            ),
            "{err:?}"
        );
        assert_eq!(err.code(), ErrorCode::BundleTooLarge);
        assert!(listing(dir.path()).is_empty());
        // Sizes that overflow u64 when added are over any limit, not a wrap.
        let huge = [
            InputDecl {
                size: u64::MAX,
                ..decl("a", b"")
            },
            InputDecl {
                size: 2,
                ..decl("b", b"")
            },
        ];
        assert!(matches!(
            InputReceiver::new(dir.path(), &huge, u64::MAX),
            Err(ReceiveError::BundleTooLarge { .. })
        ));
        assert!(InputReceiver::new(dir.path(), &decls, 1100).is_ok());
    }

    #[test]
    fn a_digest_mismatch_names_the_file_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let decls = [decl("good", b"good bytes"), decl("model.bin", b"declared")];
        let mut rx = InputReceiver::new(dir.path(), &decls, 1 << 20).unwrap();
        rx.accept(&chunk("good", 0, b"good bytes")).unwrap();
        assert_eq!(listing(dir.path()), ["good"]);
        let err = rx.accept(&chunk("model.bin", 0, b"tampered")).unwrap_err();
        assert!(err.to_string().contains("\"model.bin\""), "{err}");
        assert!(
            err.to_string()
                .contains(&hex::encode(Sha256::digest(b"declared"))),
            "{err}"
        );
        assert_eq!(err.code(), ErrorCode::DigestMismatch);
        assert!(listing(dir.path()).is_empty(), "{:?}", listing(dir.path()));
        assert!(matches!(
            rx.accept(&chunk("good", 0, b"x")),
            Err(ReceiveError::Aborted)
        ));
        assert!(matches!(rx.finish(), Err(ReceiveError::Aborted)));
    }

    #[test]
    fn refuses_undeclared_out_of_order_overlong_and_interleaved_chunks() {
        type Check = fn(&ReceiveError) -> bool;
        let cases: [(&[InputChunk], Check); 5] = [
            (
                &[chunk("other", 0, b"x")],
                |e| matches!(e, ReceiveError::Undeclared { name } if name == "other"),
            ),
            (&[chunk("a", 1, b"x")], |e| {
                matches!(
                    e,
                    ReceiveError::OutOfOrder {
                        offset: 1,
                        expected: 0,
                        ..
                    }
                )
            }),
            (&[chunk("a", 0, b"ab"), chunk("a", 1, b"b")], |e| {
                matches!(
                    e,
                    ReceiveError::OutOfOrder {
                        offset: 1,
                        expected: 2,
                        ..
                    }
                )
            }),
            (&[chunk("a", 0, b"abcde"), chunk("a", 5, b"fg")], |e| {
                matches!(
                    e,
                    ReceiveError::Overlong {
                        end: 7,
                        size: 6,
                        ..
                    }
                )
            }),
            (
                &[chunk("a", 0, b"ab"), chunk("b", 0, b"x")],
                |e| matches!(e, ReceiveError::Interleaved { name, current } if name == "b" && current == "a"),
            ),
        ];
        for (chunks, check) in cases {
            let dir = tempfile::tempdir().unwrap();
            let decls = [decl("a", b"abcdef"), decl("b", b"xyz")];
            let mut rx = InputReceiver::new(dir.path(), &decls, 100).unwrap();
            let (last, first) = chunks.split_last().unwrap();
            for c in first {
                rx.accept(c).unwrap();
            }
            let err = rx.accept(last).unwrap_err();
            assert!(check(&err), "{err:?}");
            assert_eq!(err.code(), ErrorCode::InputRejected);
            assert!(listing(dir.path()).is_empty(), "{:?}", listing(dir.path()));
        }
    }

    #[test]
    fn incomplete_inputs_fail_finish_and_a_dropped_receiver_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let decls = [decl("a", b"abc"), decl("b", b"xyz")];
        let mut rx = InputReceiver::new(dir.path(), &decls, 100).unwrap();
        rx.accept(&chunk("a", 0, b"abc")).unwrap();
        rx.accept(&chunk("b", 0, b"x")).unwrap();
        let err = rx.finish().unwrap_err();
        assert!(
            matches!(&err, ReceiveError::Incomplete { name, received: 1, size: 3 } if name == "b"),
            "{err:?}"
        );
        assert!(listing(dir.path()).is_empty());

        let mut rx = InputReceiver::new(dir.path(), &decls, 100).unwrap();
        rx.accept(&chunk("a", 0, b"abc")).unwrap();
        rx.accept(&chunk("b", 0, b"x")).unwrap();
        drop(rx);
        assert!(listing(dir.path()).is_empty());
    }

    #[test]
    fn never_replaces_a_file_already_in_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"theirs").unwrap();
        let mut rx = InputReceiver::new(dir.path(), &[decl("a", b"ours")], 100).unwrap();
        let err = rx.accept(&chunk("a", 0, b"ours")).unwrap_err();
        assert!(
            matches!(&err, ReceiveError::Io { name, error: source, .. } if name == "a" && source.kind() == io::ErrorKind::AlreadyExists),
            "{err:?}"
        );
        assert_eq!(listing(dir.path()), ["a"]);
        assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), b"theirs");
    }
}
