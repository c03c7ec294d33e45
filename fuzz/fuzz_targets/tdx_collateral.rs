#![no_main]
//! TDX collateral JSON.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kolm_verifier::tdx::parse_tdx_collateral(data);
});
