//! (being written) The pre-flight memory gate.

/// The pre-flight refused the run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("memory pre-flight: {0}")]
pub struct MemoryRefusal(pub String);
