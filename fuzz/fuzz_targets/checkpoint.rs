#![no_main]
//! Training checkpoints' strict readers (`kolm_train::checkpoint`): the
//! state file alone, the tensor file alone, and both together.
//!
//! Input: a u32 little-endian length `n`, then `n` bytes of `state.json`, then
//! the `tensors.safetensors` bytes. Shorter inputs, or an `n` past the end,
//! are all state (after the length, if there is one) and an empty tensor file.
//! `verifier/tests/fuzz_corpus.rs` splits the same way.
use kolm_train::checkpoint::{
    Checkpoint, DataLoaderPosition, OptimizerState, StateFile, TrainState, read_tensors,
};
use kolm_format::hexbytes::HexBytes;
use libfuzzer_sys::fuzz_target;

const CAP: u64 = 1 << 20;

fn split(data: &[u8]) -> (&[u8], &[u8]) {
    let Some((len, rest)) = data.split_first_chunk::<4>() else {
        return (data, &[]);
    };
    let n = u32::from_le_bytes(*len) as usize;
    if n <= rest.len() { rest.split_at(n) } else { (rest, &[]) }
}

fuzz_target!(|data: &[u8]| {
    let (state, tensors) = split(data);
    // Whatever is accepted is the one byte form its writer produces.
    if let Ok(s) = StateFile::from_json_bytes(state) {
        assert_eq!(s.to_json_bytes().expect("writes"), state);
    }
    if let Ok(t) = read_tensors(tensors, CAP) {
        let any = TrainState {
            step: 0,
            total_steps: 0,
            job_spec_sha256: HexBytes([0; 32]),
            base_model_sha256: HexBytes([0; 32]),
            rng_state: vec![0],
            data_loader: DataLoaderPosition { epoch: 0, index: 0, permutation_seed: 0 },
            optimizer: OptimizerState { step: 0 },
        };
        let c = Checkpoint::new(any, t).expect("read tensors make a checkpoint");
        assert_eq!(c.to_bytes().expect("writes").1, tensors);
    }
    if let Ok(c) = Checkpoint::from_bytes(state, tensors, CAP) {
        let (s, t) = c.to_bytes().expect("writes");
        assert_eq!((s.as_slice(), t.as_slice()), (state, tensors));
    }
});
