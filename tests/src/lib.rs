//! kolm-tests: cross-crate integration tests live in `tests/tests/`.
#![forbid(unsafe_code)]
