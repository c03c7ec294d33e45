#![no_main]
//! TDX DCAP quotes (v4/v5).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kolm_verifier::tdx::parse_tdx_quote(data);
});
