#![no_main]
//! SEV-SNP attestation reports (binary or hex).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kolm_verifier::snp::parse_snp_report(data);
});
