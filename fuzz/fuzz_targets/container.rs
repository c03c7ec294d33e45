#![no_main]
//! The strict ZIP reader: parse, then stream every entry.
use std::io::Cursor;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut cur = Cursor::new(data);
    if let Ok(zip) = kolm_format::container::read_canonical_zip(&mut cur) {
        for e in &zip.entries {
            let _ = kolm_format::container::hash_entry(&mut cur, e);
        }
    }
});
