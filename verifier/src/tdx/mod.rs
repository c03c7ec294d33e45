//! Offline verification of Intel TDX DCAP quotes (v4 and v5, TD reports 1.0,
//! 1.5 and 1.5-Ex) against Intel PCS collateral, an explicit instant and a
//! `kolm.policy.v1` policy.
//!
//! The cryptographic appraisal (collateral signatures, certificate paths to
//! the Intel SGX Root CA with CRLs, QE identity, TCB level) is done by
//! [dcap-qvl](https://crates.io/crates/dcap-qvl) 0.7.1 with the RustCrypto
//! backend and the root CA embedded in this crate. Around it this module adds
//! a strict quote parser (trailing bytes, length fields, TDX only), a strict
//! collateral parser (size caps, unknown keys rejected), its own checks of the
//! quote's signatures and chains (so that a failure names the broken link),
//! a freshness check over every collateral and certificate window (CRL
//! `thisUpdate` included, which dcap-qvl does not check), the rule that a
//! `pck_certificate_chain` in the collateral must equal the quote's own chain,
//! and the policy: debug, MRTD/RTMR allow-lists, TCB status and advisories,
//! REPORT_DATA binding.
//!
//! Entry points: [`verify_tdx`] (bytes in, report out), [`verify_tdx_parsed`]
//! (for an already parsed collateral), [`parse_tdx_quote`] and
//! [`parse_tdx_collateral`] (parsers only; never panic, for fuzzing and the
//! artifact path). Check ids and fields are listed in `docs/attestation-tdx.md`.

mod appraise;
mod collateral;
mod error;
mod pki;
mod quote;
mod verify;

pub use appraise::{DcapFailure, DcapVerdict, classify as classify_dcap_error};
pub use collateral::{CrlSummary, MAX_COLLATERAL_BYTES, SignedDocSummary, TdxCollateral};
pub use error::TdxError;
pub use pki::{Cert, INTEL_SGX_ROOT_CA_DER, INTEL_SGX_ROOT_CA_SHA256, PckSgxExtension};
pub use quote::{
    INTEL_QE_VENDOR_ID, MAX_QUOTE_BYTES, QeReport, QuoteHeader, TEE_TYPE_TDX, TdReport, TdReport10,
    TdReport15ExFields, TdReport15Fields, TdxQuote, Trailing,
};
pub use verify::{PLATFORM, verify_tdx, verify_tdx_parsed};

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
/// the dates of the signed TCB Info and QE Identity decoded. Nothing is
/// authenticated.
///
/// Never panics, whatever the input.
pub fn parse_tdx_collateral(bytes: &[u8]) -> Result<TdxCollateral, TdxError> {
    TdxCollateral::parse(bytes)
}

/// Stable check ids, in the order the checks run.
pub mod check_id {
    /// Quote structure ([`super::parse_tdx_quote`] minus trailing bytes).
    pub const QUOTE_FORMAT: &str = "tdx.quote.format";
    /// Collateral structure ([`super::parse_tdx_collateral`]).
    pub const COLLATERAL_FORMAT: &str = "tdx.collateral.format";
    /// A collateral `pck_certificate_chain` must equal the quote's chain.
    pub const PCK_CHAIN_MATCH: &str = "tdx.collateral.pck_chain_match";
    /// The quote's PCK chain: ends in the pinned root, each link signed.
    pub const PCK_CHAIN: &str = "tdx.pck.chain";
    /// QE report signed by the PCK key.
    pub const QE_REPORT_SIGNATURE: &str = "tdx.qe.report_signature";
    /// QE REPORTDATA = SHA-256(attestation key || QE auth data) || 0^32.
    pub const QE_REPORT_DATA: &str = "tdx.qe.report_data";
    /// Header and TD report signed by the attestation key.
    pub const QUOTE_SIGNATURE: &str = "tdx.quote.signature";
    /// Collateral issuer chains end in the pinned root, signer signed by it.
    pub const COLLATERAL_CHAIN: &str = "tdx.collateral.chain";
    /// Every collateral and certificate window contains the instant.
    pub const COLLATERAL_FRESHNESS: &str = "tdx.collateral.freshness";
    /// dcap-qvl's appraisal passed (on failure a finer id below is used).
    pub const DCAP: &str = "tdx.dcap";
    /// dcap-qvl: TCB Info signature.
    pub const TCB_INFO_SIGNATURE: &str = "tdx.tcb_info.signature";
    /// dcap-qvl: QE Identity signature.
    pub const QE_IDENTITY_SIGNATURE: &str = "tdx.qe_identity.signature";
    /// dcap-qvl: CRL signature, revocation, revocation status.
    pub const CRL: &str = "tdx.crl";
    /// dcap-qvl: webpki path validation of a chain.
    pub const CHAIN: &str = "tdx.chain";
    /// dcap-qvl: QE report against QE Identity.
    pub const QE_IDENTITY: &str = "tdx.qe.identity";
    /// dcap-qvl: FMSPC, TCB level, TDX module identity, Revoked.
    pub const TCB_LEVEL: &str = "tdx.tcb.level";
    /// dcap-qvl: TD attributes it always rejects.
    pub const TD_ATTRIBUTES: &str = "tdx.td_attributes";
    /// Policy: TD under debug (any TUD bit) only with `allow_debug`.
    pub const DEBUG: &str = "tdx.debug";
    /// Policy: MRTD allow-list.
    pub const POLICY_MRTD: &str = "tdx.policy.mrtd";
    /// Policy: RTMR allow-lists.
    pub const POLICY_RTMR: &str = "tdx.policy.rtmr";
    /// Policy: accepted TCB statuses.
    pub const POLICY_TCB_STATUS: &str = "tdx.policy.tcb_status";
    /// Policy: accepted advisories.
    pub const POLICY_ADVISORIES: &str = "tdx.policy.advisories";
    /// Policy: a rule of `check_tdx` this module does not know (fail closed).
    pub const POLICY: &str = "tdx.policy";
    /// REPORT_DATA equals the expected 64 bytes.
    pub const BINDING_REPORT_DATA: &str = "tdx.binding.report_data";
    /// Only zero padding after the signature data.
    pub const TRAILING_DATA: &str = "tdx.quote.trailing_data";
}
