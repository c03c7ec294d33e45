//! kolm-policy (placeholder; being written).
#![forbid(unsafe_code)]
