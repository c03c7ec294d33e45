#![no_main]
//! The sandbox record's strict reader (`governance/sandbox-record.json`).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = kolm_format::sandbox_record::SandboxRecord::from_json_bytes(data) {
        // Whatever is accepted adds up, and survives a round trip.
        assert_eq!(
            Some(r.blocked_total),
            r.counted
                .checked_total()
                .and_then(|c| c.checked_add(r.listener.withdrawn_before_read))
                .and_then(|c| c.checked_add(r.sigsys_kills))
        );
        let again = r.to_json_bytes().expect("serialises");
        assert_eq!(
            kolm_format::sandbox_record::SandboxRecord::from_json_bytes(&again).ok(),
            Some(r)
        );
    }
});
