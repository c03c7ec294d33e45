#![no_main]
//! Nitro attestation documents in every accepted input form.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kolm_verifier::nitro::parse_nitro_document(data);
});
