//! Training examples from token streams, and the seeded loader that deals
//! them out in batches.
//!
//! Everything here is deterministic: the same documents, settings and seed
//! give the same rows in the same order on any machine, and a loader
//! rebuilt from a checkpoint's [`DataLoaderPosition`] continues exactly
//! where the original stopped.
//!
//! A [`Dataset`] is a list of fixed-length rows: `seq` input ids and `seq`
//! next-token targets, a negative target meaning "not scored". Rows are
//! built either from plain text ([`Dataset::from_text`]) or from
//! prompt/response pairs ([`Dataset::from_sft`]).

use crate::checkpoint::DataLoaderPosition;
use kolm_format::job_spec::Length;
use kolm_kernels::rng::SplitMix64;

use crate::{Batch, TrainError};

/// Mixed into the job's seed for the loader's permutations, so that they
/// differ from any other stream drawn from the same seed (the LoRA init).
const PERMUTATION_SALT: u64 = 0x6461_7461_5f70_6572; // "data_per"

/// The permutation seed of a job whose spec seed is `seed`.
pub fn permutation_seed(seed: u64) -> u64 {
    seed ^ PERMUTATION_SALT
}

/// Fixed-length training rows, `ids` and `targets` `[rows, seq]` row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dataset {
    seq: usize,
    ids: Vec<u32>,
    targets: Vec<i32>,
    truncated: usize,
    dropped: usize,
}

impl Dataset {
    /// Plain text: the documents' tokens concatenated in order (with `sep`,
    /// if given, after each document: the end-of-sequence id that tells the
    /// model a document ended) and cut into windows of `seq + 1` tokens
    /// starting every `seq` tokens: a window gives `ids = window[..seq]`,
    /// `targets = window[1..]`, so every token after the first is a target
    /// exactly once. The tail shorter than a window is kept as one more row,
    /// its missing positions padded with id `pad` and target -1 (a final
    /// stub of a single token has no target and is dropped).
    ///
    /// Refuses `seq == 0` and a stream with no target at all.
    pub fn from_text(
        docs: &[Vec<u32>],
        sep: Option<u32>,
        seq: usize,
        pad: u32,
    ) -> Result<Dataset, TrainError> {
        check_seq(seq)?;
        let mut stream = Vec::with_capacity(docs.iter().map(|d| d.len() + 1).sum());
        for d in docs {
            stream.extend_from_slice(d);
            stream.extend(sep);
        }
        let mut ds = Dataset::empty(seq);
        let mut start = 0;
        while start + 1 < stream.len() {
            let end = (start + seq + 1).min(stream.len());
            let window = &stream[start..end];
            let mut ids = window[..window.len() - 1].to_vec();
            let mut targets: Vec<i32> = window[1..].iter().map(|&t| to_target(t)).collect();
            ids.resize(seq, pad);
            targets.resize(seq, -1);
            ds.push(&ids, &targets);
            start += seq;
        }
        ds.check_scored("plain-text")?;
        Ok(ds)
    }

    /// Supervised fine-tuning: each example is `prompt ++ response`, scored
    /// only where the target is a response token (a prompt token as target
    /// is -1). An example longer than `seq + 1` tokens is cut to its first
    /// `seq + 1` and counted ([`Self::truncated`]); one left with no scored
    /// target (an empty response, or a prompt that fills the window) is
    /// dropped and counted ([`Self::dropped`]).
    ///
    /// An example of `L` tokens gives `L - 1` positions (its last token is
    /// only a target). With `pack = false` each example is one row padded
    /// with id `pad` and target -1. With `pack = true` examples are placed
    /// greedily in order into rows: an example that does not fit in what is
    /// left of the current row starts a new one (the old one is padded).
    /// Inside a packed row no target crosses an example boundary: an
    /// example's last position predicts its own last token, and the next
    /// example's first position predicts that example's second token.
    /// Attention is causal over the whole row (no block-diagonal mask), as
    /// is usual for packing: a later example can attend to earlier ones.
    pub fn from_sft(
        examples: &[(Vec<u32>, Vec<u32>)],
        seq: usize,
        pack: bool,
        pad: u32,
    ) -> Result<Dataset, TrainError> {
        check_seq(seq)?;
        let mut ds = Dataset::empty(seq);
        let (mut row_ids, mut row_targets) = (Vec::with_capacity(seq), Vec::with_capacity(seq));
        for (prompt, response) in examples {
            let mut tokens: Vec<u32> = prompt.iter().chain(response).copied().collect();
            if tokens.len() > seq + 1 {
                tokens.truncate(seq + 1);
                ds.truncated += 1;
            }
            if tokens.len() < 2 {
                ds.dropped += 1;
                continue;
            }
            let ids = &tokens[..tokens.len() - 1];
            // Position i predicts token i + 1: scored when that is a
            // response token.
            let targets: Vec<i32> = (1..tokens.len())
                .map(|i| {
                    if i >= prompt.len() {
                        to_target(tokens[i])
                    } else {
                        -1
                    }
                })
                .collect();
            if targets.iter().all(|&t| t < 0) {
                ds.dropped += 1;
                continue;
            }
            if (!pack || row_ids.len() + ids.len() > seq) && !row_ids.is_empty() {
                ds.push_padded(&mut row_ids, &mut row_targets, pad);
            }
            row_ids.extend_from_slice(ids);
            row_targets.extend_from_slice(&targets);
        }
        if !row_ids.is_empty() {
            ds.push_padded(&mut row_ids, &mut row_targets, pad);
        }
        ds.check_scored("SFT")?;
        Ok(ds)
    }

    fn empty(seq: usize) -> Dataset {
        Dataset {
            seq,
            ids: Vec::new(),
            targets: Vec::new(),
            truncated: 0,
            dropped: 0,
        }
    }

    fn push(&mut self, ids: &[u32], targets: &[i32]) {
        self.ids.extend_from_slice(ids);
        self.targets.extend_from_slice(targets);
    }

    fn push_padded(&mut self, ids: &mut Vec<u32>, targets: &mut Vec<i32>, pad: u32) {
        ids.resize(self.seq, pad);
        targets.resize(self.seq, -1);
        self.push(ids, targets);
        ids.clear();
        targets.clear();
    }

    fn check_scored(&self, what: &str) -> Result<(), TrainError> {
        if self.scored_targets() == 0 {
            return Err(TrainError::Invalid(format!(
                "the {what} training data has no scored target (empty, or every example \
                 dropped: {} with no response token)",
                self.dropped
            )));
        }
        Ok(())
    }

    /// Positions per row.
    pub fn seq(&self) -> usize {
        self.seq
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.ids.len() / self.seq
    }

    /// Row `i`'s ids and targets, or `None` past the end.
    pub fn row(&self, i: usize) -> Option<(&[u32], &[i32])> {
        let r = i.checked_mul(self.seq)?..(i + 1).checked_mul(self.seq)?;
        Some((self.ids.get(r.clone())?, self.targets.get(r)?))
    }

    /// Targets that are scored, over all rows.
    pub fn scored_targets(&self) -> usize {
        self.targets.iter().filter(|&&t| t >= 0).count()
    }

    /// SFT examples cut to `seq + 1` tokens.
    pub fn truncated(&self) -> usize {
        self.truncated
    }

    /// SFT examples dropped for having no scored target.
    pub fn dropped(&self) -> usize {
        self.dropped
    }

    /// Largest token id (input or target), to check against a vocabulary.
    pub fn max_token(&self) -> Option<u32> {
        let t = self.targets.iter().filter(|&&t| t >= 0).map(|&t| t as u32);
        self.ids.iter().copied().chain(t).max()
    }
}

fn check_seq(seq: usize) -> Result<(), TrainError> {
    if seq == 0 || i32::try_from(seq).is_err() {
        return Err(TrainError::Invalid(format!(
            "sequence length {seq}: must be 1 to {}",
            i32::MAX
        )));
    }
    Ok(())
}

/// A token id as a target. Ids come from a tokenizer whose vocabulary is far
/// below 2^31; a larger one cannot be a target and is marked unscored (the
/// backend refuses out-of-vocabulary ids anyway).
fn to_target(t: u32) -> i32 {
    i32::try_from(t).unwrap_or(-1)
}

/// Optimiser steps of a run: `Steps(n)` is `n`; `Epochs(e)` is
/// `ceil(e * rows / batch)` (the loader wraps across epochs, so the last
/// step may take rows of the next epoch's permutation). Refuses zero rows,
/// a zero batch, zero steps or an overflow.
pub fn steps_for(length: Length, rows: usize, batch: usize) -> Result<u64, TrainError> {
    if rows == 0 || batch == 0 {
        return Err(TrainError::Invalid(format!(
            "{rows} rows in batches of {batch}: both must be > 0"
        )));
    }
    let steps = match length {
        Length::Steps(n) => n,
        Length::Epochs(e) => (u64::from(e))
            .checked_mul(rows as u64)
            .map(|r| r.div_ceil(batch as u64))
            .ok_or_else(|| TrainError::Invalid(format!("{e} epochs of {rows} rows overflow")))?,
    };
    if steps == 0 {
        return Err(TrainError::Invalid("a run of 0 steps".into()));
    }
    Ok(steps)
}

/// Deals a dataset's rows out in batches: each epoch visits every row once,
/// in a permutation drawn from `(permutation_seed, epoch)` alone
/// (SplitMix64, Fisher–Yates), so any position can be rebuilt without
/// replaying earlier epochs.
///
/// Every batch is full: when an epoch runs out mid-batch, the batch is
/// completed with the first rows of the next epoch's permutation (the
/// "wrap" rule), so `ceil(E * rows / batch)` steps see every row `E` times
/// except the last few of the final partial batch's epoch.
#[derive(Debug, Clone)]
pub struct Loader<'a> {
    dataset: &'a Dataset,
    batch: usize,
    epoch: u64,
    index: u64,
    permutation_seed: u64,
    permutation: Vec<usize>,
}

impl<'a> Loader<'a> {
    /// A loader at the start of epoch 0.
    pub fn new(
        dataset: &'a Dataset,
        batch: usize,
        permutation_seed: u64,
    ) -> Result<Loader<'a>, TrainError> {
        Loader::resume(
            dataset,
            batch,
            DataLoaderPosition {
                epoch: 0,
                index: 0,
                permutation_seed,
            },
        )
    }

    /// A loader at `position` (from [`Self::position`], through a
    /// checkpoint). Refuses an index past the dataset's rows.
    pub fn resume(
        dataset: &'a Dataset,
        batch: usize,
        position: DataLoaderPosition,
    ) -> Result<Loader<'a>, TrainError> {
        if batch == 0 || dataset.rows() == 0 {
            return Err(TrainError::Invalid(format!(
                "a loader of batch {batch} over {} rows: both must be > 0",
                dataset.rows()
            )));
        }
        if position.index >= dataset.rows() as u64 {
            return Err(TrainError::Invalid(format!(
                "data loader index {} is past the dataset's {} rows (another dataset?)",
                position.index,
                dataset.rows()
            )));
        }
        Ok(Loader {
            dataset,
            batch,
            epoch: position.epoch,
            index: position.index,
            permutation_seed: position.permutation_seed,
            permutation: permutation(dataset.rows(), position.permutation_seed, position.epoch),
        })
    }

    /// Where the next batch starts.
    pub fn position(&self) -> DataLoaderPosition {
        DataLoaderPosition {
            epoch: self.epoch,
            index: self.index,
            permutation_seed: self.permutation_seed,
        }
    }

    /// The next `batch` rows.
    pub fn next_batch(&mut self) -> Batch {
        let seq = self.dataset.seq();
        let mut ids = Vec::with_capacity(self.batch * seq);
        let mut targets = Vec::with_capacity(self.batch * seq);
        for _ in 0..self.batch {
            // `index < rows` holds (checked on construction, wrapped below),
            // and the permutation holds each row number once.
            let row = self.permutation[self.index as usize];
            if let Some((i, t)) = self.dataset.row(row) {
                ids.extend_from_slice(i);
                targets.extend_from_slice(t);
            }
            self.index += 1;
            if self.index == self.permutation.len() as u64 {
                self.epoch += 1;
                self.index = 0;
                self.permutation =
                    permutation(self.dataset.rows(), self.permutation_seed, self.epoch);
            }
        }
        Batch {
            batch: self.batch,
            seq,
            ids,
            targets,
        }
    }
}

/// Epoch `epoch`'s order of `n` rows: Fisher–Yates over a SplitMix64 stream
/// seeded with `seed` and the epoch.
fn permutation(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    // Distinct epochs get distinct, well-mixed streams: SplitMix64's first
    // output already decorrelates neighbouring seeds.
    let mut rng = SplitMix64::new(seed ^ epoch.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        p.swap(i, j);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_windows_overlap_by_one_and_keep_a_padded_tail() {
        let docs = vec![vec![1, 2, 3, 4], vec![5, 6]];
        let ds = Dataset::from_text(&docs, Some(0), 3, 9).unwrap();
        // Stream 1 2 3 4 0 5 6 0: windows [1 2 3 4], [4 0 5 6], [6 0].
        assert_eq!(ds.rows(), 3);
        assert_eq!(ds.row(0).unwrap(), (&[1, 2, 3][..], &[2, 3, 4][..]));
        assert_eq!(ds.row(1).unwrap(), (&[4, 0, 5][..], &[0, 5, 6][..]));
        assert_eq!(ds.row(2).unwrap(), (&[6, 9, 9][..], &[0, -1, -1][..]));
        assert_eq!(ds.scored_targets(), 7, "every token after the first");
        assert!(ds.row(3).is_none());
    }

    #[test]
    fn empty_data_is_refused() {
        let e = Dataset::from_text(&[vec![7]], None, 4, 0).unwrap_err();
        assert!(e.to_string().contains("no scored target"), "{e}");
        assert!(Dataset::from_text(&[], None, 4, 0).is_err());
        assert!(Dataset::from_text(&[vec![1, 2]], None, 0, 0).is_err());
        let e = Dataset::from_sft(&[(vec![1, 2], vec![])], 4, true, 0).unwrap_err();
        assert!(e.to_string().contains("1 with no response"), "{e}");
    }

    #[test]
    fn sft_scores_only_responses_and_truncates() {
        let ex = vec![(vec![1, 2], vec![3, 4]), (vec![5; 10], vec![6])];
        let ds = Dataset::from_sft(&ex, 4, false, 0).unwrap();
        // The second example is cut to 5 prompt tokens: nothing scored.
        assert_eq!((ds.rows(), ds.truncated(), ds.dropped()), (1, 1, 1));
        assert_eq!(ds.row(0).unwrap(), (&[1, 2, 3, 0][..], &[-1, 3, 4, -1][..]));
    }

    #[test]
    fn sft_packing_never_scores_across_a_boundary() {
        let ex = vec![
            (vec![1], vec![2, 3]), // 2 positions
            (vec![4], vec![5]),    // 1 position
            (vec![6], vec![7, 8]), // 2 positions: does not fit with the first two in 4
        ];
        let ds = Dataset::from_sft(&ex, 4, true, 0).unwrap();
        assert_eq!(ds.rows(), 2);
        assert_eq!(ds.row(0).unwrap(), (&[1, 2, 4, 0][..], &[2, 3, 5, -1][..]));
        assert_eq!(ds.row(1).unwrap(), (&[6, 7, 0, 0][..], &[7, 8, -1, -1][..]));
        let unpacked = Dataset::from_sft(&ex, 4, false, 0).unwrap();
        assert_eq!(unpacked.rows(), 3);
    }

    #[test]
    fn loader_permutes_each_epoch_wraps_and_resumes() {
        let docs: Vec<Vec<u32>> = vec![(0..21).collect()];
        let ds = Dataset::from_text(&docs, None, 2, 0).unwrap();
        assert_eq!(ds.rows(), 10);
        let mut a = Loader::new(&ds, 3, 42).unwrap();
        let mut seen = Vec::new();
        let mut positions = Vec::new();
        for _ in 0..7 {
            positions.push(a.position());
            seen.push(a.next_batch());
        }
        // Epoch 0 is a permutation of all rows: rows are told apart by
        // their first id (2 * row).
        let first: Vec<u32> = seen
            .iter()
            .flat_map(|b| b.ids.chunks(2).map(|r| r[0]))
            .collect();
        let mut e0 = first[..10].to_vec();
        e0.sort_unstable();
        assert_eq!(e0, (0..10).map(|r| 2 * r).collect::<Vec<u32>>());
        assert_ne!(first[..10], first[10..20], "epochs are reshuffled");
        assert_eq!(positions[4].epoch, 1, "batch 3 wrapped into epoch 1");
        assert_eq!(positions[4].index, 2);
        // Resuming at any position replays the same batches.
        for (k, pos) in positions.iter().enumerate() {
            let mut b = Loader::resume(&ds, 3, *pos).unwrap();
            for want in &seen[k..] {
                assert_eq!(&b.next_batch(), want);
            }
        }
        let mut other = Loader::new(&ds, 3, 43).unwrap();
        assert_ne!(other.next_batch(), seen[0]);
        let bad = DataLoaderPosition {
            epoch: 0,
            index: 10,
            permutation_seed: 42,
        };
        assert!(Loader::resume(&ds, 3, bad).is_err());
    }

    #[test]
    fn steps_for_epochs_rounds_up() {
        assert_eq!(steps_for(Length::Epochs(1), 10, 3).unwrap(), 4);
        assert_eq!(steps_for(Length::Epochs(3), 10, 3).unwrap(), 10);
        assert_eq!(steps_for(Length::Steps(7), 10, 3).unwrap(), 7);
        assert!(steps_for(Length::Steps(0), 10, 3).is_err());
        assert!(steps_for(Length::Epochs(1), 0, 3).is_err());
    }
}
