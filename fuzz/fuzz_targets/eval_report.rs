#![no_main]
//! The evaluation report's strict reader (`kolm_format::eval_report`): no
//! panic on any bytes, and what it accepts is the one byte form its writer
//! produces.
use kolm_format::eval_report::EvalReport;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = EvalReport::from_canonical_bytes(data) {
        assert_eq!(r.to_canonical_bytes().expect("writes"), data);
    }
});
