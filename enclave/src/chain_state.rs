//! The enclave's receipt chain state: the CID of its last receipt and the
//! next sequence number, so every receipt links to the one before it and a
//! rolled-back or replayed state shows up as a broken link.
//!
//! The state also records the platform and launch measurement of the
//! enclave that sealed the last receipt: the verifier refuses a link
//! between receipts of different measurements, so an enclave of another
//! measurement (a rebuild) starts a new chain instead ([`ChainState::for_enclave`]).
//! And one job at a time holds the state directory ([`StateLock`]), so two
//! receipts of one chain never overlap in time.
//!
//! The state file lies in the host's state directory, so its bytes are
//! the host's: the verifier's lint set holds (no unwrap, no indexing, no
//! unchecked arithmetic).
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use std::path::{Path, PathBuf};

use kolm_format::content_id::ContentId;
use kolm_policy::Platform;
use serde::{Deserialize, Serialize};

/// Why the chain state could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChainStateError {
    #[error("chain state {path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("chain state {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// Another job holds the state directory.
    #[error(
        "busy: state directory {dir} is held by another job ({holder}); one job at a time \
         per state directory, try again when it has finished"
    )]
    Busy { dir: PathBuf, holder: String },
}

/// Where the next receipt attaches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainState {
    pub previous: Option<ContentId>,
    pub sequence: u64,
    /// The platform of the enclave that sealed `previous` (absent in files
    /// written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    /// Its launch measurement, lower-case hex (absent: none, or not
    /// recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measurement: Option<String>,
    /// Which chain of this state directory this is: 0 for the first, one
    /// more at each new chain (its artifacts' names carry it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub chain: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A chain ended because the enclave is not the one that sealed its last
/// receipt: what the announcement names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewChain {
    pub old_platform: Platform,
    pub old_measurement: Option<String>,
    pub new_platform: Platform,
    pub new_measurement: Option<String>,
    /// The old chain's length.
    pub old_sequence: u64,
    pub chain: u64,
}

impl std::fmt::Display for NewChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = |m: &Option<String>| m.clone().unwrap_or_else(|| "none".into());
        write!(
            f,
            "new receipt chain {} started (sequence 0, no previous): the last receipt of the \
             old chain (sequence {}) comes from platform {} measurement {}, this enclave is \
             platform {} measurement {}; the verifier links only receipts of one measurement",
            self.chain,
            self.old_sequence.saturating_sub(1),
            self.old_platform,
            m(&self.old_measurement),
            self.new_platform,
            m(&self.new_measurement)
        )
    }
}

impl ChainState {
    /// The start of a chain.
    pub fn genesis() -> ChainState {
        ChainState {
            previous: None,
            sequence: 0,
            platform: None,
            measurement: None,
            chain: 0,
        }
    }

    /// Where a receipt of the enclave `platform`/`measurement` attaches:
    /// this state, or the start of a new chain (announced by the
    /// [`NewChain`]) when the last receipt came from another platform or
    /// measurement. A state that records neither (written before they
    /// were) is taken as it is.
    pub fn for_enclave(
        &self,
        platform: Platform,
        measurement: Option<&[u8]>,
    ) -> (ChainState, Option<NewChain>) {
        let here = measurement.map(hex::encode);
        match self.platform {
            Some(old) if self.sequence > 0 && (old != platform || self.measurement != here) => {
                let chain = self.chain.saturating_add(1);
                let next = ChainState {
                    chain,
                    ..ChainState::genesis()
                };
                let announce = NewChain {
                    old_platform: old,
                    old_measurement: self.measurement.clone(),
                    new_platform: platform,
                    new_measurement: here,
                    old_sequence: self.sequence,
                    chain,
                };
                (next, Some(announce))
            }
            _ => (self.clone(), None),
        }
    }

    /// The artifact file name of a receipt at this state for job `id`:
    /// `ID-SEQ.zip` on the first chain, `ID-chainN-SEQ.zip` on later ones
    /// (so a new chain's first receipt never replaces the old chain's).
    pub fn artifact_name(&self, id: &str) -> String {
        if self.chain == 0 {
            format!("{id}-{}.zip", self.sequence)
        } else {
            format!("{id}-chain{}-{}.zip", self.chain, self.sequence)
        }
    }

    /// Loads the state, or the genesis state when the file does not exist.
    pub fn load(path: &Path) -> Result<ChainState, ChainStateError> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ChainState::genesis()),
            Err(source) => {
                return Err(ChainStateError::Io {
                    path: path.to_path_buf(),
                    error: source,
                });
            }
        };
        let state: ChainState =
            serde_json::from_slice(&bytes).map_err(|e| ChainStateError::Invalid {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        if state.previous.is_none() != (state.sequence == 0) {
            return Err(ChainStateError::Invalid {
                path: path.to_path_buf(),
                reason: "previous must be null exactly when sequence is 0".into(),
            });
        }
        Ok(state)
    }

    /// The state after sealing `cid` at this state's sequence.
    /// The state after sealing `cid` at this state's sequence, by the
    /// enclave `platform`/`measurement`.
    pub fn advance(
        &self,
        cid: ContentId,
        platform: Platform,
        measurement: Option<&[u8]>,
    ) -> ChainState {
        ChainState {
            previous: Some(cid),
            sequence: self.sequence.saturating_add(1),
            platform: Some(platform),
            measurement: measurement.map(hex::encode),
            chain: self.chain,
        }
    }

    /// Writes atomically (temp file, fsync, rename).
    pub fn store(&self, path: &Path) -> Result<(), ChainStateError> {
        let io = |source| ChainStateError::Io {
            path: path.to_path_buf(),
            error: source,
        };
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| ChainStateError::Invalid {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        crate::fsutil::write_atomic(path, &bytes).map_err(io)
    }
}

/// Name of the lock file in a state directory.
pub const LOCK_FILE: &str = ".lock";

/// The state directory, held by one job (an exclusive `flock` on its
/// `.lock`, across processes) from before its first input byte is stored
/// until its artifact and chain state are written. Released when dropped
/// (or when the process dies: the kernel drops the lock). A job that
/// stored nothing leaves nothing: dropped while `.lock` is all the
/// directory holds, the lock removes it (and the directory, if it made it).
#[derive(Debug)]
pub struct StateLock {
    file: Option<std::fs::File>,
    dir: PathBuf,
    /// The directory did not exist before [`StateLock::acquire`].
    created: bool,
}

impl Drop for StateLock {
    fn drop(&mut self) {
        let only_the_lock = std::fs::read_dir(&self.dir)
            .is_ok_and(|mut entries| entries.all(|e| e.is_ok_and(|e| e.file_name() == LOCK_FILE)));
        if only_the_lock {
            // Unlinked while still held: whoever opened this inode in the
            // meantime sees it is no longer the path's and opens again.
            let _ = std::fs::remove_file(self.dir.join(LOCK_FILE));
            self.file = None;
            if self.created {
                let _ = std::fs::remove_dir(&self.dir);
            }
        }
    }
}

impl StateLock {
    /// Takes the lock of `dir` for `holder` (who, for the busy message of
    /// the next one to try), or fails at once with
    /// [`ChainStateError::Busy`] naming the directory and its holder.
    pub fn acquire(dir: &Path, holder: &str) -> Result<StateLock, ChainStateError> {
        use std::io::{Read, Seek, Write};
        use std::os::unix::fs::MetadataExt;
        let path = dir.join(LOCK_FILE);
        let io = |source| ChainStateError::Io {
            path: path.clone(),
            error: source,
        };
        let created = !dir.exists();
        let mut tries = 0u32;
        let mut file = loop {
            std::fs::create_dir_all(dir).map_err(io)?;
            // Not written through a temp file and a rename: the lock
            // belongs to this inode, which must stay the same for every
            // process.
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(io)?;
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    let mut text = String::new();
                    let _ = (&file).take(512).read_to_string(&mut text);
                    let text = text.trim();
                    return Err(ChainStateError::Busy {
                        dir: dir.to_path_buf(),
                        holder: if text.is_empty() {
                            "holder unknown".into()
                        } else {
                            text.escape_debug().to_string()
                        },
                    });
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
            }
            // A holder that stored nothing unlinks `.lock` as it lets go
            // (Drop): a lock on an unlinked inode excludes no one, so open
            // again.
            let held = file.metadata().map_err(io)?;
            let same = std::fs::metadata(&path)
                .is_ok_and(|now| (now.dev(), now.ino()) == (held.dev(), held.ino()));
            if same {
                break file;
            }
            tries = tries.saturating_add(1);
            if tries > 16 {
                return Err(io(std::io::Error::other(
                    "the lock file was replaced 16 times while being taken",
                )));
            }
        };
        // Who holds it, for the busy message (best effort: the lock, not
        // this text, is what excludes).
        let now = time::OffsetDateTime::now_utc();
        let since = kolm_format::timefmt::format_utc_seconds(now).unwrap_or_default();
        let note = format!("pid {}, {holder}, since {since}\n", std::process::id());
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        file.write_all(note.as_bytes()).map_err(io)?;
        Ok(StateLock {
            file: Some(file),
            dir: dir.to_path_buf(),
            created,
        })
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
mod tests {
    use super::*;

    #[test]
    fn an_old_file_without_platform_reads_and_links_on() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("chain-state.json");
        let cid = ContentId::from_sha256([0xab; 32]);
        std::fs::write(&p, format!("{{\"previous\": \"{cid}\", \"sequence\": 3}}")).unwrap();
        let s = ChainState::load(&p).unwrap();
        assert_eq!(s.sequence, 3);
        let (next, new) = s.for_enclave(Platform::Simulated, Some(&[1, 2]));
        assert!(new.is_none());
        assert_eq!(next, s);
    }

    #[test]
    fn another_measurement_starts_a_new_announced_chain() {
        let cid = ContentId::from_sha256([0xcd; 32]);
        let s = ChainState::genesis().advance(cid, Platform::Simulated, Some(&[0xaa]));
        let (same, none) = s.for_enclave(Platform::Simulated, Some(&[0xaa]));
        assert!(none.is_none());
        assert_eq!(same.sequence, 1);
        let (next, new) = s.for_enclave(Platform::Simulated, Some(&[0xbb]));
        let new = new.unwrap();
        assert_eq!((next.sequence, next.previous, next.chain), (0, None, 1));
        let text = new.to_string();
        assert!(
            text.contains("measurement aa") && text.contains("measurement bb"),
            "{text}"
        );
        assert_eq!(next.artifact_name("j"), "j-chain1-0.zip");
        assert_eq!(s.artifact_name("j"), "j-1.zip");
    }

    #[test]
    fn a_second_holder_is_refused_busy_naming_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let held = StateLock::acquire(dir.path(), "kolm-enclave start, job a").unwrap();
        let e = StateLock::acquire(dir.path(), "kolm-enclave run").unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("busy: state directory"), "{text}");
        assert!(text.contains("kolm-enclave start, job a"), "{text}");
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        drop(held);
        StateLock::acquire(dir.path(), "again").unwrap();
    }

    #[test]
    fn a_job_that_stored_nothing_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        // A state directory the lock made: gone with it.
        let state = dir.path().join("state");
        drop(StateLock::acquire(&state, "a").unwrap());
        assert!(!state.exists());
        // One that was there: kept, without the lock file.
        std::fs::create_dir(&state).unwrap();
        drop(StateLock::acquire(&state, "b").unwrap());
        assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0);
        // One that holds state: the lock file stays.
        let held = StateLock::acquire(&state, "c").unwrap();
        std::fs::write(state.join("chain-state.json"), b"{}").unwrap();
        drop(held);
        assert!(state.join(LOCK_FILE).exists());
        // A lock taken on the inode of a lock file unlinked meanwhile is
        // not held: the next holder opens the path's own file.
        let dir = tempfile::tempdir().unwrap();
        let first = StateLock::acquire(dir.path(), "first").unwrap();
        let stale = std::fs::File::open(dir.path().join(LOCK_FILE)).unwrap();
        drop(first);
        let second = StateLock::acquire(dir.path(), "second").unwrap();
        assert!(matches!(
            StateLock::acquire(dir.path(), "third"),
            Err(ChainStateError::Busy { .. })
        ));
        drop((second, stale));
    }
}
