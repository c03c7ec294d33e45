#![no_main]
//! COSE_Sign1 receipts.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kolm_format::receipt::payload(data);
    let _ = kolm_format::receipt::verify(data, b"{}", &[0u8; 32]);
});
