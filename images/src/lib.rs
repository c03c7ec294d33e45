//! kolm-images: enclave image recipes and measurement prediction, reusing the
//! verifier's parsers so that predicted and checked measurements come from one
//! piece of code.
//!
//! Nothing is implemented yet: this crate only fixes the dependency boundary
//! (images -> verifier). It claims no feature.
#![forbid(unsafe_code)]
