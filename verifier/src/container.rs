//! Canonical ZIP container (placeholder; being written).
