//! Replays the committed corpus of the `checkpoint` fuzz target
//! (`fuzz/corpus/checkpoint/`) through the readers the target runs, against
//! `fuzz/expected/checkpoint.txt` (`kolm_testkit::fuzz_corpus`: the line
//! format and the rules). Per file: `state <verdict>; tensors <verdict>;
//! checkpoint <verdict>`. After a deliberate verdict change:
//! `KOLM_REGENERATE_FUZZ_EXPECTED=1 cargo test -p kolm-train --test
//! checkpoint_fuzz_corpus`, then review the diff.
#![allow(clippy::unwrap_used)]

use kolm_testkit::fuzz_corpus::{per_parser, replay, verdict};
use kolm_train::checkpoint::{Checkpoint, StateFile, read_tensors};

/// The largest tensor file the target reads.
const CAP: u64 = 1 << 20;

/// As the fuzz target: a u32 little-endian length, that many bytes of
/// state.json, then the tensor file (short inputs are all state).
fn split(data: &[u8]) -> (&[u8], &[u8]) {
    let Some((len, rest)) = data.split_first_chunk::<4>() else {
        return (data, &[]);
    };
    let n = u32::from_le_bytes(*len) as usize;
    if n <= rest.len() {
        rest.split_at(n)
    } else {
        (rest, &[])
    }
}

#[test]
fn checkpoint_corpus() {
    replay("checkpoint", |_, data| {
        let (state, tensors) = split(data);
        let both = Checkpoint::from_bytes(state, tensors, CAP);
        if let Ok(c) = &both {
            // Whatever is accepted re-writes to the same bytes.
            let (s, t) = c.to_bytes().unwrap();
            assert_eq!((s.as_slice(), t.as_slice()), (state, tensors));
        }
        per_parser(&[
            ("state", verdict(&StateFile::from_json_bytes(state))),
            ("tensors", verdict(&read_tensors(tensors, CAP))),
            ("checkpoint", verdict(&both)),
        ])
    });
}
