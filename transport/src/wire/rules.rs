//! The rules' vocabulary: [`Invalid`], each way a field value breaks the
//! protocol, and the checks several messages share. Each message's own
//! rules are in its module, beside its codec.

use std::collections::BTreeSet;

use kolm_policy::Platform;

use super::file_name::FileNameError;
use super::hello::MAX_VERSIONS;
use super::job_submit::collateral_paths;
use super::message::MIN_MAX_FRAME;
use super::progress::MAX_PHASE;
use super::train_progress::MAX_LOSS_MICROS;

/// A field value that breaks the protocol's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Invalid {
    #[error("must list 1 to {MAX_VERSIONS} versions, each at least 1, strictly ascending")]
    Versions,
    #[error("{value} does not fit 32 bits")]
    NotU32 { value: u64 },
    #[error("unknown platform {value:?}")]
    UnknownPlatform { value: String },
    #[error("{value} is below the smallest frame limit, {MIN_MAX_FRAME}")]
    MaxFrameTooSmall { value: u32 },
    #[error("{len} bytes, at most {max} allowed")]
    TooLong { len: usize, max: usize },
    #[error("{len} bytes, must be exactly {want}")]
    WrongLength { len: usize, want: usize },
    #[error(transparent)]
    FileName(#[from] FileNameError),
    #[error("input {name:?} is declared twice")]
    DuplicateInput { name: String },
    #[error("declared input sizes add up to more than 2^64 - 1 bytes")]
    TotalOverflow,
    #[error("phase {value:?} is not 1 to {MAX_PHASE} bytes of a-z, 0-9 and -")]
    Phase { value: String },
    #[error("done {done} is more than total {total}")]
    DoneOverTotal { done: u64, total: u64 },
    #[error("step {step} is not 1 to steps ({steps})")]
    StepOutOfRange { step: u64, steps: u64 },
    #[error("{value} is over the largest loss, {MAX_LOSS_MICROS} millionths")]
    LossTooLarge { value: u64 },
    #[error("offset {offset} plus {len} bytes passes the end ({total})")]
    PastEnd { offset: u64, len: u64, total: u64 },
    #[error("offset {offset} plus {len} bytes overflows 64 bits")]
    OffsetOverflow { offset: u64, len: u64 },
    #[error("unknown log stream {value:?}")]
    UnknownLogStream { value: String },
    #[error("unknown error code {value:?}")]
    UnknownErrorCode { value: String },
    #[error("{path:?} is not an evidence file of platform {platform}")]
    EvidenceSlot { path: String, platform: Platform },
    #[error("{path:?} is listed twice")]
    DuplicateEvidence { path: String },
    #[error("{path:?} has {len} bytes, its slot holds at most {max}")]
    EvidenceTooLarge { path: String, len: usize, max: u64 },
    #[error("{count} attestation files; platform {platform} needs exactly {want}")]
    EvidenceAttestations {
        count: usize,
        want: usize,
        platform: Platform,
    },
    #[error(
        "{path:?} is not a collateral file of any hardware platform (allowed: {})",
        collateral_paths().join(", ")
    )]
    CollateralSlot { path: String },
}

/// The outcome of a rule: the field named and what is wrong with it.
pub(super) type Rule = Result<(), (&'static str, Invalid)>;

/// `len` is at most `max`.
pub(super) fn max_len(field: &'static str, len: usize, max: usize) -> Rule {
    if len > max {
        return Err((field, Invalid::TooLong { len, max }));
    }
    Ok(())
}

/// The end of `len` bytes at `offset`, if it fits 64 bits.
pub(super) fn span(
    field: &'static str,
    offset: u64,
    len: usize,
) -> Result<u64, (&'static str, Invalid)> {
    let len = u64::try_from(len).unwrap_or(u64::MAX);
    offset
        .checked_add(len)
        .ok_or((field, Invalid::OffsetOverflow { offset, len }))
}

/// One evidence file of a message (a hello's evidence, a job-submit's
/// collateral) in its `slot`: its path not `seen` before, its `len` within
/// the slot's cap.
pub(super) fn check_slot_file<'a>(
    field: &'static str,
    seen: &mut BTreeSet<&'a str>,
    path: &'a str,
    len: usize,
    slot: &kolm_format::evidence::EvidenceSlot,
) -> Rule {
    if !seen.insert(path) {
        return Err((
            field,
            Invalid::DuplicateEvidence {
                path: path.to_owned(),
            },
        ));
    }
    if u64::try_from(len).map_or(true, |n| n > slot.max_bytes) {
        return Err((
            field,
            Invalid::EvidenceTooLarge {
                path: path.to_owned(),
                len,
                max: slot.max_bytes,
            },
        ));
    }
    Ok(())
}
