#![no_main]
//! The fine-tune job spec's reader (`kolm_format::job_spec`): no panic on
//! any text, and every refusal is one of its two typed errors.
use kolm_format::job_spec::FineTuneSpec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = FineTuneSpec::from_toml_str(text);
    }
});
