#![no_main]
//! Canonical JSON manifests and evidence indexes.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = kolm_format::manifest::Manifest::from_canonical_bytes(data) {
        // Whatever parses must re-serialise to the same bytes.
        assert_eq!(m.to_canonical_bytes().ok().as_deref(), Some(data));
    }
    let _ = kolm_format::evidence::EvidenceIndex::from_canonical_bytes(data);
});
