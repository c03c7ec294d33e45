#![no_main]
//! The model card's and the lineage record's strict readers
//! (`kolm_format::model_card`): no panic on any bytes, and what each accepts
//! is the one byte form its writer produces.
use kolm_format::model_card::{Lineage, ModelCard};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = ModelCard::from_canonical_bytes(data) {
        assert_eq!(c.to_canonical_bytes().expect("writes"), data);
        let _ = c.to_markdown();
    }
    if let Ok(l) = Lineage::from_canonical_bytes(data) {
        assert_eq!(l.to_canonical_bytes().expect("writes"), data);
    }
});
