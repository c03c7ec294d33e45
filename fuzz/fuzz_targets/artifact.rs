#![no_main]
//! The whole artifact verification path.
use std::io::Cursor;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let opts = kolm_verifier::artifact::VerifyOptions::at(kolm_verifier::artifact::VerifyAt::ReceiptTime);
    let _ = kolm_verifier::artifact::verify_artifact_reader("fuzz", &mut Cursor::new(data), &opts);
});
