//! Typed errors of the SEV-SNP verifier. Every variant belongs to exactly one
//! check; [`SnpError::check`] names it.

use thiserror::Error;

use super::report::{REPORT_HEX_LEN, REPORT_LEN};
use super::roots::Product;
use crate::check::SnpCheck;

/// Which certificate of the chain an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CertRole {
    /// AMD Root Key (self-signed).
    Ark,
    /// AMD SEV Key (VCEK chains) or AMD SEV VLEK Key (ASVK, VLEK chains).
    Ask,
    /// The report signer: VCEK or VLEK.
    Leaf,
}

impl std::fmt::Display for CertRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CertRole::Ark => "ARK",
            CertRole::Ask => "ASK/ASVK",
            CertRole::Leaf => "VCEK/VLEK",
        })
    }
}

/// What went wrong, and in which check.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SnpError {
    // ---- snp.report.format ------------------------------------------------
    /// The raw evidence is neither [`REPORT_LEN`] raw bytes nor their hex
    /// spelling ([`super::decode_report_forms`]).
    #[error(
        "report is {len} bytes; expected {REPORT_LEN} raw bytes or {REPORT_HEX_LEN} hex digits"
    )]
    ReportSize { len: usize },
    /// The binary report is not exactly [`REPORT_LEN`] bytes.
    #[error("report is {len} bytes; an ATTESTATION_REPORT is exactly {REPORT_LEN}")]
    ReportLength { len: usize },
    /// Hex text with a character that is not a hex digit.
    #[error("report hex text has a non-hex byte 0x{byte:02x} at offset {offset}")]
    ReportHex { offset: usize, byte: u8 },
    /// VERSION is not 2, 3 or 5.
    #[error("report VERSION {version} is not supported (2, 3 and 5 are)")]
    UnsupportedVersion { version: u32 },
    /// SIGNATURE_ALGO is not 1 (ECDSA P-384 with SHA-384).
    #[error("report SIGNATURE_ALGO {algo} is not supported (1 = ECDSA P-384/SHA-384)")]
    UnsupportedSignatureAlgorithm { algo: u32 },
    /// A reserved (must-be-zero) byte is set.
    #[error("reserved field {field} is not zero (byte at offset 0x{offset:03x})")]
    ReservedNonZero { field: &'static str, offset: usize },
    /// KEY_INFO SIGNING_KEY holds a reserved encoding.
    #[error("KEY_INFO SIGNING_KEY {value} is reserved (0 = VCEK, 1 = VLEK, 7 = none)")]
    ReservedSigningKey { value: u32 },
    /// R or S does not fit 48 bytes: a byte of its zero extension is set.
    #[error(
        "signature {component} has a non-zero byte beyond its 48 bytes (offset 0x{offset:03x})"
    )]
    SignaturePadding {
        component: &'static str,
        offset: usize,
    },

    // ---- snp.vcek.format / snp.chain.format --------------------------------
    /// A certificate does not decode (DER, PEM or the certificate itself).
    #[error("{role} certificate does not decode: {reason}")]
    CertDecode { role: CertRole, reason: String },
    /// The chain bundle is not exactly one ARK and one ASK/ASVK.
    #[error("chain must hold exactly one ARK (self-issued) and one ASK/ASVK in PEM; {reason}")]
    ChainShape { reason: String },
    /// The leaf's subject is neither SEV-VCEK nor SEV-VLEK.
    #[error("leaf certificate subject CN {cn:?} is neither SEV-VCEK nor SEV-VLEK")]
    LeafKindUnknown { cn: Option<String> },
    /// The leaf does not certify an ECDSA P-384 key.
    #[error("VCEK/VLEK public key is not an ECDSA P-384 point: {reason}")]
    LeafKey { reason: String },

    // ---- snp.product --------------------------------------------------------
    /// CPUID family/model outside Milan, Genoa and Turin.
    #[error(
        "CPUID family {family:02x}h model {model:02x}h is not a supported product (Milan, Genoa, Turin)"
    )]
    UnsupportedCpu { family: u8, model: u8 },
    /// Two sources name different products.
    #[error("product mismatch: {first} says {a}, {second} says {b}")]
    ProductMismatch {
        first: &'static str,
        a: String,
        second: &'static str,
        b: String,
    },
    /// Nothing identifies the product.
    #[error("cannot determine the product: {reason}")]
    ProductUnknown { reason: String },

    // ---- snp.chain.ark --------------------------------------------------------
    /// The embedded root does not match its SHA-256 pin (a build defect).
    #[error("embedded {role} for {product} does not match its SHA-256 pin")]
    EmbeddedPin { product: Product, role: CertRole },
    /// The supplied ARK is not AMD's ARK for the product.
    #[error("supplied ARK ({subject}, sha256 {sha256}) is not AMD's ARK-{product}")]
    ArkNotTrusted {
        product: Product,
        subject: String,
        sha256: String,
    },
    /// The ARK of simulated evidence is not the kolm sim SEV-SNP root the
    /// caller trusts.
    #[error(
        "the chain's ARK {subject} (sha256 {sha256}) is not the trusted kolm sim SEV-SNP root \
         (sha256 {trusted})"
    )]
    SimArkNotTrusted {
        subject: String,
        sha256: String,
        trusted: String,
    },

    // ---- snp.chain.ark / .ask / .vcek (signatures and names) ---------------
    /// Issuer of a certificate is not the subject of its signer.
    #[error("{role} issuer ({issuer}) is not the subject of its signer ({signer})")]
    IssuerMismatch {
        role: CertRole,
        issuer: String,
        signer: String,
    },
    /// A certificate's subject CN is not the one AMD uses for that role.
    #[error("{role} subject CN {found:?} is not {expected:?}")]
    SubjectMismatch {
        role: CertRole,
        found: Option<String>,
        expected: String,
    },
    /// A CA certificate lacks basicConstraints CA:TRUE.
    #[error("{role} certificate is not a CA (basicConstraints): {reason}")]
    NotCa { role: CertRole, reason: String },
    /// The signature algorithm is not RSASSA-PSS/SHA-384/MGF1-SHA-384/salt 48.
    #[error(
        "{role} signature algorithm is not RSASSA-PSS with SHA-384, MGF1-SHA-384, salt 48: {reason}"
    )]
    CertSignatureAlgorithm { role: CertRole, reason: String },
    /// The RSA-PSS signature does not verify.
    #[error("{role} signature does not verify under its issuer's key: {reason}")]
    CertSignature { role: CertRole, reason: String },

    // ---- snp.freshness --------------------------------------------------------
    /// The instant is before notBefore.
    #[error("{cert} certificate not yet valid: notBefore {not_before} is after {at}")]
    NotYetValid {
        /// `ARK`, `ASK`, `ASVK`, `VCEK` or `VLEK`.
        cert: &'static str,
        not_before: String,
        at: String,
    },
    /// The instant is after notAfter.
    #[error("{cert} certificate expired: notAfter {not_after} is before {at}")]
    Expired {
        /// `ARK`, `ASK`, `ASVK`, `VCEK` or `VLEK`.
        cert: &'static str,
        not_after: String,
        at: String,
    },

    // ---- snp.signature --------------------------------------------------------
    /// The report signature does not verify under the leaf key.
    #[error("report signature does not verify under the {key} public key: {reason}")]
    ReportSignature { key: &'static str, reason: String },

    // ---- snp.signing_key ------------------------------------------------------
    /// KEY_INFO SIGNING_KEY names another key type than the leaf certificate.
    #[error("report KEY_INFO SIGNING_KEY is {report} but the leaf certificate is a {cert}")]
    SigningKeyMismatch {
        report: &'static str,
        cert: &'static str,
    },

    // ---- snp.vcek.hwid -------------------------------------------------------
    /// The VCEK hwID extension is missing or malformed.
    #[error("VCEK hwID extension (1.3.6.1.4.1.3704.1.4) {reason}")]
    HwidExtension { reason: String },
    /// The report's CHIP_ID is masked, so no VCEK can be bound to it.
    #[error("CHIP_ID is masked (KEY_INFO MASK_CHIP_KEY = 1): the VCEK cannot be bound to the chip")]
    ChipIdMasked,
    /// hwID differs from CHIP_ID.
    #[error("VCEK hwID {hwid} does not match report CHIP_ID {chip_id}")]
    HwidMismatch { hwid: String, chip_id: String },

    // ---- snp.vcek.tcb --------------------------------------------------------
    /// A TCB extension is missing or malformed.
    #[error("VCEK/VLEK TCB extension {oid} ({component}) {reason}")]
    TcbExtension {
        oid: &'static str,
        component: &'static str,
        reason: String,
    },
    /// A TCB component of the certificate differs from REPORTED_TCB.
    #[error("certificate {component} SPL {cert} differs from REPORTED_TCB {component} {report}")]
    TcbMismatch {
        component: &'static str,
        cert: u8,
        report: u8,
    },

    // ---- snp.binding.report_data ----------------------------------------------
    /// REPORT_DATA is not the expected value.
    #[error("REPORT_DATA {found} is not the expected {expected}")]
    ReportDataMismatch { found: String, expected: String },
    /// The caller expects a value an SEV-SNP report has no field for (a
    /// nonce, a public key): the evidence cannot prove it, so it fails.
    #[error(
        "an expected {what} cannot be checked: an SEV-SNP report has no such field \
         (bind it into REPORT_DATA instead)"
    )]
    ExpectationUnsupported { what: &'static str },
}

impl SnpError {
    /// The check this error fails.
    pub fn check(&self) -> SnpCheck {
        match self {
            SnpError::ReportSize { .. }
            | SnpError::ReportLength { .. }
            | SnpError::ReportHex { .. }
            | SnpError::UnsupportedVersion { .. }
            | SnpError::UnsupportedSignatureAlgorithm { .. }
            | SnpError::ReservedNonZero { .. }
            | SnpError::ReservedSigningKey { .. }
            | SnpError::SignaturePadding { .. } => SnpCheck::ReportFormat,
            SnpError::CertDecode {
                role: CertRole::Leaf,
                ..
            }
            | SnpError::LeafKindUnknown { .. }
            | SnpError::LeafKey { .. } => SnpCheck::VcekFormat,
            SnpError::CertDecode { .. } | SnpError::ChainShape { .. } => SnpCheck::ChainFormat,
            SnpError::UnsupportedCpu { .. }
            | SnpError::ProductMismatch { .. }
            | SnpError::ProductUnknown { .. } => SnpCheck::Product,
            SnpError::EmbeddedPin { .. }
            | SnpError::ArkNotTrusted { .. }
            | SnpError::SimArkNotTrusted { .. } => SnpCheck::ChainArk,
            SnpError::IssuerMismatch { role, .. }
            | SnpError::SubjectMismatch { role, .. }
            | SnpError::NotCa { role, .. }
            | SnpError::CertSignatureAlgorithm { role, .. }
            | SnpError::CertSignature { role, .. } => match role {
                CertRole::Ark => SnpCheck::ChainArk,
                CertRole::Ask => SnpCheck::ChainAsk,
                CertRole::Leaf => SnpCheck::ChainVcek,
            },
            SnpError::NotYetValid { .. } | SnpError::Expired { .. } => SnpCheck::Freshness,
            SnpError::ReportSignature { .. } => SnpCheck::Signature,
            SnpError::SigningKeyMismatch { .. } => SnpCheck::SigningKey,
            SnpError::HwidExtension { .. }
            | SnpError::ChipIdMasked
            | SnpError::HwidMismatch { .. } => SnpCheck::VcekHwid,
            SnpError::TcbExtension { .. } | SnpError::TcbMismatch { .. } => SnpCheck::VcekTcb,
            SnpError::ReportDataMismatch { .. } | SnpError::ExpectationUnsupported { .. } => {
                SnpCheck::BindingReportData
            }
        }
    }
}
