//! The DCAP appraisal by dcap-qvl, and the mapping of its errors to check
//! ids.
//!
//! dcap-qvl 0.7.1 (`QuoteVerifier::verify`) does, in this order: parse both
//! CRLs (root CA CRL signature against the root key), check the root against
//! the CRLs, parse the quote; TCB Info: window, chain to the root (webpki,
//! CRLs, validity at the instant), signature; QE Identity: the same; the PCK
//! chain (webpki, CRLs); QE report signature by the PCK key; QE report data =
//! SHA-256(attestation key || QE auth data); QE report against QE Identity;
//! the quote signature by the attestation key; FMSPC and TCB level matching
//! (platform, TDX module, TEE_TCB_SVN2 for TD 1.5); status convergence
//! (Revoked always fails); TD attributes (reserved bits, migration,
//! SERVTD_EXT / MRSERVICETD, SEPT_VE_DISABLE; debug and profiling are left to
//! this crate's policy, `allow_debug(true)`).
//!
//! It returns the first failure as an `anyhow` chain. [`classify`] maps that
//! text to a stable check id and kind; anything it does not recognise is
//! reported as `tdx.dcap`.

use crate::attestation::CheckKind;

use super::collateral::TdxCollateral;
use super::pki::INTEL_SGX_ROOT_CA_DER;
use super::quote::TdxQuote;

/// What dcap-qvl concluded for a quote it accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DcapVerdict {
    /// Converged TCB status (Intel's spelling, e.g. `UpToDate`).
    pub tcb_status: String,
    /// Advisory ids of the converged status.
    pub advisory_ids: Vec<String>,
    /// Platform (TCB Info) level status.
    pub platform_status: String,
    /// QE Identity level status.
    pub qe_status: String,
}

/// A dcap-qvl failure: check id, kind and the error chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DcapFailure {
    pub id: &'static str,
    pub kind: CheckKind,
    pub detail: String,
}

/// Runs dcap-qvl with the embedded root at `now_secs` (Unix seconds).
pub(crate) fn appraise(
    quote: &TdxQuote,
    collateral: &TdxCollateral,
    now_secs: u64,
) -> Result<DcapVerdict, DcapFailure> {
    let verifier =
        dcap_qvl::verify::QuoteVerifier::<dcap_qvl::configs::RustCryptoConfig>::new_with_config(
            INTEL_SGX_ROOT_CA_DER.to_vec(),
        )
        .allow_debug(true)
        .allow_service_td(false);
    match verifier.verify(quote.bytes(), collateral.as_dcap(), now_secs) {
        Ok(report) => Ok(DcapVerdict {
            tcb_status: report.status,
            advisory_ids: report.advisory_ids,
            platform_status: report.platform_status.status.to_string(),
            qe_status: report.qe_status.status.to_string(),
        }),
        Err(e) => {
            let detail = format!("{e:#}");
            let (id, kind) = classify(&detail);
            Err(DcapFailure { id, kind, detail })
        }
    }
}

/// Patterns in dcap-qvl 0.7.1's (and its webpki fork's) error text, first
/// match wins. Order matters: a chain error that is a validity or revocation
/// error is classified as such.
const RULES: &[(&[&str], &str, CheckKind)] = &[
    (
        &[
            "TCBInfo issue date is in the future",
            "TCBInfo expired",
            "QE Identity issue date is in the future",
            "QE Identity expired",
            "CertExpired",
            "CertNotValidYet",
            "CrlExpired",
        ],
        "tdx.collateral.freshness",
        CheckKind::Freshness,
    ),
    (
        &[
            "Failed to parse root CA CRL",
            "Failed to parse PCK CRL",
            "CertRevoked",
            "UnknownRevocationStatus",
            "IssuerNotCrlSigner",
            "InvalidCrlSignatureForPublicKey",
            "InvalidCrlNumber",
            "UnsupportedCrlVersion",
            "UnsupportedDeltaCrl",
            "UnsupportedIndirectCrl",
            "UnsupportedCrlIssuingDistributionPoint",
            "UnsupportedRevocationReason",
            "RevocationOptionsBuilder",
        ],
        "tdx.crl",
        CheckKind::Revocation,
    ),
    (
        &["Signature is invalid for tcb_info"],
        "tdx.tcb_info.signature",
        CheckKind::Signature,
    ),
    (
        &["Signature is invalid for qe_identity"],
        "tdx.qe_identity.signature",
        CheckKind::Signature,
    ),
    (
        &["Signature is invalid for qe_report"],
        "tdx.qe.report_signature",
        CheckKind::Signature,
    ),
    (
        &["QE report hash mismatch", "Invalid QE auth data length"],
        "tdx.qe.report_data",
        CheckKind::Signature,
    ),
    (
        &["ISV enclave report signature is invalid"],
        "tdx.quote.signature",
        CheckKind::Signature,
    ),
    (
        &[
            "QE MRSIGNER mismatch",
            "QE report validation failed",
            "QE ISVPRODID mismatch",
            "QE MISCSELECT mismatch",
            "QE ATTRIBUTES mismatch",
            "QE ISVSVN",
            "in QE Identity",
            "Unsupported QE Identity id/version",
        ],
        "tdx.qe.identity",
        CheckKind::Tcb,
    ),
    (
        &[
            "No matching TCB level found",
            "Fmspc mismatch",
            "Failed to decode TCB FMSPC",
            "non-TDX TCB info",
            "TDX module",
            "tdxModule",
            "TEE_TCB_SVN2",
            "TCB status is invalid",
            "Unrecognized TCB status",
            "TCB level",
        ],
        "tdx.tcb.level",
        CheckKind::Tcb,
    ),
    (
        &["Debug mode is enabled", "TD profiling is enabled"],
        "tdx.debug",
        CheckKind::Debug,
    ),
    (
        &[
            "Reserved bits in TD attributes",
            "TD migration is enabled",
            "SERVTD_EXT is enabled",
            "SEPT_VE_DISABLE is not enabled",
            "Invalid MR service TD",
            "Failed to parse TD attributes",
        ],
        "tdx.td_attributes",
        CheckKind::Measurement,
    ),
    (
        &[
            "Failed to decode TcbInfo",
            "Failed to decode QeIdentity",
            "TCB Info issue date",
            "TCB Info next update",
            "QE Identity issue date",
            "QE Identity next update",
            "Failed to parse certs",
        ],
        "tdx.collateral.format",
        CheckKind::Format,
    ),
    (
        &[
            "Failed to decode quote",
            "Unsupported DCAP quote version",
            "Unknown QE vendor ID",
            "Unsupported TEE type",
            "TEE quote must have version",
            "Unsupported DCAP attestation key type",
            "Unsupported DCAP PCK cert format",
        ],
        "tdx.quote.format",
        CheckKind::Format,
    ),
    (
        &[
            "Failed to verify certificate chain",
            "Certificate chain is too short",
            "must be issued directly by the root CA",
            "leaf certificate",
            "Failed to parse PCK certificate",
            "Failed to extract PCK certificates",
            "Failed to load root ca",
            "Too many intermediate certificates",
        ],
        "tdx.chain",
        CheckKind::Chain,
    ),
];

/// Maps a dcap-qvl error chain (`{:#}`) to `(check id, kind)`.
pub fn classify(detail: &str) -> (&'static str, CheckKind) {
    RULES
        .iter()
        .find(|(pats, _, _)| pats.iter().any(|p| detail.contains(p)))
        .map_or(("tdx.dcap", CheckKind::Signature), |(_, id, kind)| {
            (*id, *kind)
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn classification_table() {
        let cases = [
            ("TCBInfo expired", "tdx.collateral.freshness"),
            (
                "Failed to verify certificate chain: CertNotValidYet { time: .. }",
                "tdx.collateral.freshness",
            ),
            ("Failed to verify certificate chain: CertRevoked", "tdx.crl"),
            (
                "Failed to parse root CA CRL: InvalidCrlSignatureForPublicKey",
                "tdx.crl",
            ),
            (
                "Signature is invalid for tcb_info in quote_collateral",
                "tdx.tcb_info.signature",
            ),
            ("QE report hash mismatch", "tdx.qe.report_data"),
            (
                "ISV enclave report signature is invalid",
                "tdx.quote.signature",
            ),
            (
                "QE ISVSVN 2 is below minimum required 4 from QE Identity",
                "tdx.qe.identity",
            ),
            (
                "Unrecognized TCB status Foo in QE Identity",
                "tdx.qe.identity",
            ),
            ("No matching TCB level found", "tdx.tcb.level"),
            ("TCB status is invalid: Revoked", "tdx.tcb.level"),
            ("SEPT_VE_DISABLE is not enabled", "tdx.td_attributes"),
            (
                "Failed to verify certificate chain: UnknownIssuer",
                "tdx.chain",
            ),
            ("something new", "tdx.dcap"),
        ];
        for (text, id) in cases {
            assert_eq!(classify(text).0, id, "{text}");
        }
    }
}
