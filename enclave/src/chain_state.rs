//! The enclave's receipt chain state: the CID of its last receipt and the
//! next sequence number, so every receipt links to the one before it and a
//! rolled-back or replayed state shows up as a broken link.

use std::path::{Path, PathBuf};

use kolm_format::content_id::ContentId;
use serde::{Deserialize, Serialize};

/// Why the chain state could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChainStateError {
    #[error("chain state {path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("chain state {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Where the next receipt attaches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainState {
    pub previous: Option<ContentId>,
    pub sequence: u64,
}

impl ChainState {
    /// The start of a chain.
    pub fn genesis() -> ChainState {
        ChainState {
            previous: None,
            sequence: 0,
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
                    source,
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
    pub fn advance(&self, cid: ContentId) -> ChainState {
        ChainState {
            previous: Some(cid),
            sequence: self.sequence.saturating_add(1),
        }
    }

    /// Writes atomically (temp file, fsync, rename).
    pub fn store(&self, path: &Path) -> Result<(), ChainStateError> {
        let io = |source| ChainStateError::Io {
            path: path.to_path_buf(),
            source,
        };
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| ChainStateError::Invalid {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        crate::fsutil::write_atomic(path, &bytes).map_err(io)
    }
}
