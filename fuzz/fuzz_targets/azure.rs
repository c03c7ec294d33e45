#![no_main]
//! Azure CVM evidence JSON (HCL report, TPM quote, runtime data).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kolm_verifier::azure::parse_azure_evidence(data);
    let _ = kolm_verifier::azure::hcl::HclReport::parse(data);
    let _ = kolm_verifier::azure::tpm::TpmQuote::parse(data);
});
