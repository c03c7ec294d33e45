//! Offline verification of Intel TDX DCAP quotes (v4 and v5, TD reports 1.0,
//! 1.5 and 1.5-Ex) against Intel PCS collateral, an explicit instant and a
//! `kolm.policy.v1` policy.
//!
//! Around the DCAP appraisal this module adds a strict quote parser
//! (trailing bytes, length fields, TDX only), a strict collateral parser
//! (size caps, unknown keys rejected), its own checks of the quote's
//! signatures and chains (so that a failure names the broken link), a
//! freshness check over every collateral and certificate window (CRL
//! `thisUpdate` included, which dcap-qvl does not check), the rule that a
//! `pck_certificate_chain` in the collateral must equal the quote's own
//! chain, and the policy: debug, MRTD/RTMR allow-lists, TCB status and
//! advisories, REPORT_DATA binding.
//!
//! The appraisal runs its steps (CRLs, collateral signers and signatures, QE
//! identity, TCB level, TD attributes) as typed checks under their own ids,
//! then [dcap-qvl](https://crates.io/crates/dcap-qvl) 0.7.1 (RustCrypto
//! backend, the root CA embedded in this crate) on the whole quote, which
//! must agree and gives the converged TCB status; see `appraise.rs`. No
//! check id or verdict is read out of an error message.
//!
//! Entry points: [`verify`] / [`evaluate`] (the evidence and the
//! [`Expectations`]), [`evaluate_parsed`] (for an already parsed
//! collateral), [`parse_tdx_quote`] and [`parse_tdx_collateral`] (parsers
//! only; never panic, for fuzzing and the artifact path). Check ids are
//! [`TdxCheck`](crate::check::TdxCheck); they and the fields are listed in
//! `docs/attestation-tdx.md`.
#![deny(clippy::arithmetic_side_effects)]

use time::OffsetDateTime;

use crate::attested::{Attested, Evaluation, Expectations, Rejection};

mod appraise;
mod collateral;
mod error;
mod pki;
mod quote;
mod verify;

pub use collateral::{CrlSummary, MAX_COLLATERAL_BYTES, SignedDocSummary, TdxCollateral};
pub use error::TdxError;
pub use pki::{Cert, INTEL_SGX_ROOT_CA_DER, INTEL_SGX_ROOT_CA_SHA256, PckSgxExtension};
pub use quote::{
    INTEL_QE_VENDOR_ID, MAX_QUOTE_BYTES, QeReport, QuoteHeader, TEE_TYPE_TDX, TdReport, TdReport10,
    TdReport15ExFields, TdReport15Fields, TdxQuote, Trailing,
};

/// A TDX quote and the DCAP collateral it is appraised against (JSON in
/// dcap-qvl's `QuoteCollateralV3` layout, see [`parse_tdx_collateral`]).
#[derive(Debug, Clone, Copy)]
pub struct TdxEvidence<'a> {
    pub quote: &'a [u8],
    pub collateral: &'a [u8],
}

/// Runs every check on `evidence` at `at`: the checks, the display fields
/// and, once the quote parsed, the claims (platform `tdx`, MRTD, REPORTDATA,
/// the DCAP TCB status and advisories, the TD's DEBUG attribute).
///
/// `expect.report_data` must equal REPORTDATA. A TDX quote has no nonce or
/// public-key field: expecting either makes the evidence fail
/// (`tdx.binding.nonce`, `tdx.binding.public_key`). Nothing here reads the
/// clock or the network.
pub fn evaluate(
    evidence: &TdxEvidence<'_>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Evaluation {
    evaluate_on(evidence, expect, at, kolm_policy::Platform::Tdx)
}

/// [`evaluate`] for a quote that proves `platform`: `tdx`, or `azure-tdx`
/// for the TD quote behind the Azure paravisor, so that the policy's
/// `allowed_platforms` is asked about the platform the evidence proves.
pub(crate) fn evaluate_on(
    evidence: &TdxEvidence<'_>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
    platform: kolm_policy::Platform,
) -> Evaluation {
    let collateral = TdxCollateral::parse(evidence.collateral);
    verify::run(
        evidence.quote,
        collateral.as_ref(),
        expect,
        at,
        platform,
        pki::Anchor::Intel,
    )
}

/// [`evaluate`] of the kolm simulated TEE's TDX form (platform
/// `simulated`, [`crate::sim`] only): every chain must end in `root`, the
/// TDX format root the caller trusts, instead of the embedded Intel root.
pub(crate) fn evaluate_sim(
    evidence: &TdxEvidence<'_>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
    root: &crate::sim::SimRoot,
) -> Evaluation {
    let collateral = TdxCollateral::parse(evidence.collateral);
    verify::run(
        evidence.quote,
        collateral.as_ref(),
        expect,
        at,
        kolm_policy::Platform::Simulated,
        pki::Anchor::Sim(root),
    )
}

/// [`evaluate`] with collateral that is already parsed.
pub fn evaluate_parsed(
    quote: &[u8],
    collateral: &TdxCollateral,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Evaluation {
    verify::run(
        quote,
        Ok(collateral),
        expect,
        at,
        kolm_policy::Platform::Tdx,
        pki::Anchor::Intel,
    )
}

/// Accepts `evidence` only if every check that ran passed.
pub fn verify(
    evidence: &TdxEvidence<'_>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Result<Attested, Rejection> {
    evaluate(evidence, expect, at).conclude(expect.policy)
}

/// Parses a TDX quote (v4 or v5) strictly. Bytes after the signature data
/// must be zero (buffer padding); anything else is
/// [`TdxError::TrailingData`]. Signatures are not checked.
///
/// Never panics, whatever the input.
pub fn parse_tdx_quote(bytes: &[u8]) -> Result<TdxQuote, TdxError> {
    let quote = TdxQuote::parse_structure(bytes)?;
    match quote.trailing() {
        Trailing::Data {
            offset,
            len,
            first_nonzero,
        } => Err(TdxError::TrailingData {
            offset,
            len,
            first_nonzero,
        }),
        Trailing::None | Trailing::ZeroPadding { .. } => Ok(quote),
    }
}

/// Parses collateral JSON (dcap-qvl `QuoteCollateralV3` layout) strictly:
/// size caps, unknown or repeated keys rejected, hex, PEM chains, CRLs and
/// the signed TCB Info and QE Identity documents decoded. Nothing is
/// authenticated.
///
/// Never panics, whatever the input.
pub fn parse_tdx_collateral(bytes: &[u8]) -> Result<TdxCollateral, TdxError> {
    TdxCollateral::parse(bytes)
}
