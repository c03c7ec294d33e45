//! The collateral a TDX quote is appraised against, in the JSON layout of
//! dcap-qvl's `QuoteCollateralV3` (what `dcap-qvl`'s PCCS client and the
//! samples store):
//!
//! | key | content |
//! |---|---|
//! | `pck_crl_issuer_chain` | PEM: PCK Platform/Processor CA, Intel SGX Root CA |
//! | `root_ca_crl` | hex of the DER CRL of the Intel SGX Root CA |
//! | `pck_crl` | hex of the DER CRL of the PCK CA |
//! | `tcb_info_issuer_chain` | PEM: Intel SGX TCB Signing, Intel SGX Root CA |
//! | `tcb_info` | the exact signed TCB Info JSON text |
//! | `tcb_info_signature` | hex of the 64-byte ECDSA `r \|\| s` over `tcb_info` |
//! | `qe_identity_issuer_chain` | PEM: Intel SGX TCB Signing, Intel SGX Root CA |
//! | `qe_identity` | the exact signed QE Identity JSON text |
//! | `qe_identity_signature` | hex of the 64-byte ECDSA `r \|\| s` over `qe_identity` |
//! | `pck_certificate_chain` | optional PEM PCK chain (a trailing NUL, as in the quote, is allowed); must equal the quote's |
//!
//! Unknown keys and repeated keys are rejected; `pck_certificate_chain` may
//! be absent or `null`. The input is capped at [`MAX_COLLATERAL_BYTES`] and
//! each field has its own cap. Hex may be upper or lower case. Inside the
//! signed `tcb_info` / `qe_identity` documents (Intel's, versioned by Intel)
//! unknown keys are ignored; only the keys read here must be present.

use serde::Deserialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::error::TdxError;
use super::pki::{self, Cert};

/// Largest collateral JSON accepted.
pub const MAX_COLLATERAL_BYTES: usize = 1024 * 1024;
/// Largest PEM chain field.
const MAX_PEM_CHAIN: usize = 16 * 1024;
/// Largest CRL (DER bytes).
const MAX_CRL: usize = 256 * 1024;
/// Largest `tcb_info` text.
const MAX_TCB_INFO: usize = 256 * 1024;
/// Largest `qe_identity` text.
const MAX_QE_IDENTITY: usize = 64 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CollateralJson {
    pck_crl_issuer_chain: String,
    root_ca_crl: String,
    pck_crl: String,
    tcb_info_issuer_chain: String,
    tcb_info: String,
    tcb_info_signature: String,
    qe_identity_issuer_chain: String,
    qe_identity: String,
    qe_identity_signature: String,
    #[serde(default)]
    pck_certificate_chain: Option<String>,
}

/// Dates of a CRL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrlSummary {
    /// Issuer DN (RFC 4514).
    pub issuer: String,
    pub this_update: OffsetDateTime,
    /// Required here (Intel's CRLs always carry it).
    pub next_update: OffsetDateTime,
    /// Number of revoked certificates listed.
    pub entries: usize,
}

/// The keys of the signed TCB Info / QE Identity documents that this module
/// reads (dcap-qvl reads the whole document after checking its signature).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedDocSummary {
    /// `"TDX"` for TCB Info, `"TD_QE"` for QE Identity.
    pub id: String,
    pub version: u32,
    pub issue_date: OffsetDateTime,
    pub next_update: OffsetDateTime,
    pub tcb_evaluation_data_number: u32,
    /// TCB Info only (upper-case hex as Intel writes it).
    pub fmspc: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DocJson {
    id: String,
    version: u32,
    issue_date: String,
    next_update: String,
    tcb_evaluation_data_number: u32,
    #[serde(default)]
    fmspc: Option<String>,
}

/// A CRL as the appraisal reads it: issuer, signature and revoked serials.
#[derive(Debug, Clone)]
pub(crate) struct Crl {
    summary: CrlSummary,
    issuer: x509_cert::name::Name,
    /// The DER of `tbsCertList`, which the signature covers.
    tbs: Vec<u8>,
    /// Both algorithm identifiers are ecdsa-with-SHA256.
    ecdsa_sha256: bool,
    /// DER `Ecdsa-Sig-Value`.
    signature: Vec<u8>,
    /// Serial numbers of the revoked certificates.
    revoked: Vec<Vec<u8>>,
}

impl Crl {
    /// Whether `issuer` signed this CRL: its name is the CRL's issuer and
    /// its P-256 key verifies the ecdsa-with-SHA256 signature.
    pub(crate) fn is_issued_by(&self, issuer: &Cert) -> bool {
        self.issuer == *issuer.subject_name()
            && self.ecdsa_sha256
            && issuer.verifies(&self.tbs, &self.signature, false)
    }

    /// Whether this CRL can speak for `cert`: it is issued under the name
    /// that issued `cert`.
    pub(crate) fn covers(&self, cert: &Cert) -> bool {
        cert.issuer_name() == &self.issuer
    }

    /// Whether `cert`'s serial number is listed as revoked.
    pub(crate) fn lists(&self, cert: &Cert) -> bool {
        self.revoked.iter().any(|s| s.as_slice() == cert.serial())
    }

    pub(crate) fn summary(&self) -> &CrlSummary {
        &self.summary
    }
}

/// Parsed collateral. Obtained from
/// [`parse_tdx_collateral`](super::parse_tdx_collateral); nothing in it is
/// authenticated yet.
#[derive(Debug, Clone)]
pub struct TdxCollateral {
    dcap: dcap_qvl::QuoteCollateralV3,
    pck_crl_issuer_chain: Vec<Cert>,
    tcb_info_issuer_chain: Vec<Cert>,
    qe_identity_issuer_chain: Vec<Cert>,
    pck_certificate_chain: Option<Vec<Cert>>,
    root_ca_crl: Crl,
    pck_crl: Crl,
    tcb_info: SignedDocSummary,
    qe_identity: SignedDocSummary,
    /// The whole TCB Info document, typed as dcap-qvl reads it.
    tcb_info_doc: dcap_qvl::TcbInfo,
    /// The whole QE Identity document, typed as dcap-qvl reads it.
    qe_identity_doc: dcap_qvl::QeIdentity,
}

fn cap(field: &'static str, len: usize, max: usize) -> Result<(), TdxError> {
    if len > max {
        Err(TdxError::CollateralField {
            field,
            detail: format!("{len} bytes, at most {max} accepted"),
        })
    } else {
        Ok(())
    }
}

fn unhex(field: &'static str, s: &str, max: usize) -> Result<Vec<u8>, TdxError> {
    cap(field, s.len() / 2, max)?;
    hex::decode(s).map_err(|e| TdxError::CollateralField {
        field,
        detail: format!("not hex: {e}"),
    })
}

fn signature(field: &'static str, s: &str) -> Result<Vec<u8>, TdxError> {
    let sig = unhex(field, s, 64)?;
    if sig.len() != 64 {
        return Err(TdxError::CollateralField {
            field,
            detail: format!("{} bytes; a P-256 r || s signature is 64", sig.len()),
        });
    }
    Ok(sig)
}

fn chain(field: &'static str, pem: &str, expected: Option<usize>) -> Result<Vec<Cert>, TdxError> {
    cap(field, pem.len(), MAX_PEM_CHAIN)?;
    // Only the PCK chain, copied from a quote, may keep the quote's NUL.
    let nul = field == "pck_certificate_chain";
    let certs = pki::parse_pem_chain(pem.as_bytes(), field, nul)?;
    match expected {
        Some(n) if certs.len() != n => Err(TdxError::ChainLength {
            what: field,
            count: certs.len(),
            expected: n,
        }),
        _ => Ok(certs),
    }
}

fn crl(which: &'static str, der: &[u8]) -> Result<Crl, TdxError> {
    use der::{Decode as _, Encode as _};
    let err = |detail: String| TdxError::Crl { which, detail };
    let list = x509_cert::crl::CertificateList::from_der(der)
        .map_err(|e| err(format!("not a DER CRL: {e}")))?;
    let tbs = &list.tbs_cert_list;
    let conv = |t: x509_cert::time::Time| {
        i64::try_from(t.to_unix_duration().as_secs())
            .ok()
            .and_then(|s| OffsetDateTime::from_unix_timestamp(s).ok())
            .ok_or_else(|| err("time out of range".into()))
    };
    let next = tbs.next_update.ok_or_else(|| err("no nextUpdate".into()))?;
    let summary = CrlSummary {
        issuer: tbs.issuer.to_string(),
        this_update: conv(tbs.this_update)?,
        next_update: conv(next)?,
        entries: tbs.revoked_certificates.as_ref().map_or(0, Vec::len),
    };
    let signature = list
        .signature
        .as_bytes()
        .ok_or_else(|| err("signature is not a whole number of bytes".into()))?
        .to_vec();
    Ok(Crl {
        summary,
        issuer: tbs.issuer.clone(),
        tbs: tbs
            .to_der()
            .map_err(|e| err(format!("tbsCertList does not re-encode: {e}")))?,
        ecdsa_sha256: list.signature_algorithm.oid == pki::ECDSA_WITH_SHA256
            && tbs.signature.oid == pki::ECDSA_WITH_SHA256,
        signature,
        revoked: tbs
            .revoked_certificates
            .iter()
            .flatten()
            .map(|r| r.serial_number.as_bytes().to_vec())
            .collect(),
    })
}

fn rfc3339(which: &'static str, key: &str, s: &str) -> Result<OffsetDateTime, TdxError> {
    OffsetDateTime::parse(s, &Rfc3339).map_err(|e| TdxError::CollateralDocument {
        which,
        detail: format!("{key} {s:?} is not RFC 3339: {e}"),
    })
}

/// The whole signed document, typed as dcap-qvl reads it.
fn typed<T: serde::de::DeserializeOwned>(which: &'static str, text: &str) -> Result<T, TdxError> {
    serde_json::from_str(text).map_err(|e| TdxError::CollateralDocument {
        which,
        detail: format!("not a document dcap-qvl reads: {e}"),
    })
}

fn doc(which: &'static str, text: &str) -> Result<SignedDocSummary, TdxError> {
    let d: DocJson = serde_json::from_str(text).map_err(|e| TdxError::CollateralDocument {
        which,
        detail: format!("not the expected JSON: {e}"),
    })?;
    Ok(SignedDocSummary {
        issue_date: rfc3339(which, "issueDate", &d.issue_date)?,
        next_update: rfc3339(which, "nextUpdate", &d.next_update)?,
        id: d.id,
        version: d.version,
        tcb_evaluation_data_number: d.tcb_evaluation_data_number,
        fmspc: d.fmspc,
    })
}

impl TdxCollateral {
    pub(crate) fn parse(input: &[u8]) -> Result<TdxCollateral, TdxError> {
        if input.len() > MAX_COLLATERAL_BYTES {
            return Err(TdxError::TooLarge {
                what: "collateral",
                len: input.len(),
                max: MAX_COLLATERAL_BYTES,
            });
        }
        let j: CollateralJson =
            serde_json::from_slice(input).map_err(|e| TdxError::CollateralJson {
                detail: e.to_string(),
            })?;
        cap("tcb_info", j.tcb_info.len(), MAX_TCB_INFO)?;
        cap("qe_identity", j.qe_identity.len(), MAX_QE_IDENTITY)?;
        let root_ca_crl = unhex("root_ca_crl", &j.root_ca_crl, MAX_CRL)?;
        let pck_crl = unhex("pck_crl", &j.pck_crl, MAX_CRL)?;
        let tcb_info_signature = signature("tcb_info_signature", &j.tcb_info_signature)?;
        let qe_identity_signature = signature("qe_identity_signature", &j.qe_identity_signature)?;
        let parsed = TdxCollateral {
            pck_crl_issuer_chain: chain("pck_crl_issuer_chain", &j.pck_crl_issuer_chain, Some(2))?,
            tcb_info_issuer_chain: chain(
                "tcb_info_issuer_chain",
                &j.tcb_info_issuer_chain,
                Some(2),
            )?,
            qe_identity_issuer_chain: chain(
                "qe_identity_issuer_chain",
                &j.qe_identity_issuer_chain,
                Some(2),
            )?,
            pck_certificate_chain: j
                .pck_certificate_chain
                .as_deref()
                .map(|pem| chain("pck_certificate_chain", pem, None))
                .transpose()?,
            root_ca_crl: crl("root_ca_crl", &root_ca_crl)?,
            pck_crl: crl("pck_crl", &pck_crl)?,
            tcb_info: doc("tcb_info", &j.tcb_info)?,
            qe_identity: doc("qe_identity", &j.qe_identity)?,
            tcb_info_doc: typed("tcb_info", &j.tcb_info)?,
            qe_identity_doc: typed("qe_identity", &j.qe_identity)?,
            dcap: dcap_qvl::QuoteCollateralV3 {
                pck_crl_issuer_chain: j.pck_crl_issuer_chain,
                root_ca_crl,
                pck_crl,
                tcb_info_issuer_chain: j.tcb_info_issuer_chain,
                tcb_info: j.tcb_info,
                tcb_info_signature,
                qe_identity_issuer_chain: j.qe_identity_issuer_chain,
                qe_identity: j.qe_identity,
                qe_identity_signature,
                pck_certificate_chain: j.pck_certificate_chain,
            },
        };
        Ok(parsed)
    }

    /// The collateral as dcap-qvl takes it.
    pub fn as_dcap(&self) -> &dcap_qvl::QuoteCollateralV3 {
        &self.dcap
    }

    /// `pck_crl_issuer_chain`: PCK CA, root.
    pub fn pck_crl_issuer_chain(&self) -> &[Cert] {
        &self.pck_crl_issuer_chain
    }

    /// `tcb_info_issuer_chain`: TCB Signing, root.
    pub fn tcb_info_issuer_chain(&self) -> &[Cert] {
        &self.tcb_info_issuer_chain
    }

    /// `qe_identity_issuer_chain`: TCB Signing, root.
    pub fn qe_identity_issuer_chain(&self) -> &[Cert] {
        &self.qe_identity_issuer_chain
    }

    /// `pck_certificate_chain`, if present.
    pub fn pck_certificate_chain(&self) -> Option<&[Cert]> {
        self.pck_certificate_chain.as_deref()
    }

    /// Dates of `root_ca_crl`.
    pub fn root_ca_crl(&self) -> &CrlSummary {
        self.root_ca_crl.summary()
    }

    /// Dates of `pck_crl`.
    pub fn pck_crl(&self) -> &CrlSummary {
        self.pck_crl.summary()
    }

    /// `root_ca_crl`, for the appraisal.
    pub(crate) fn root_ca_crl_list(&self) -> &Crl {
        &self.root_ca_crl
    }

    /// `pck_crl`, for the appraisal.
    pub(crate) fn pck_crl_list(&self) -> &Crl {
        &self.pck_crl
    }

    /// The signed `tcb_info`, whole and typed.
    pub(crate) fn tcb_info_doc(&self) -> &dcap_qvl::TcbInfo {
        &self.tcb_info_doc
    }

    /// The signed `qe_identity`, whole and typed.
    pub(crate) fn qe_identity_doc(&self) -> &dcap_qvl::QeIdentity {
        &self.qe_identity_doc
    }

    /// The exact signed `tcb_info` text and its `r || s` signature.
    pub(crate) fn tcb_info_signed(&self) -> (&[u8], &[u8]) {
        (self.dcap.tcb_info.as_bytes(), &self.dcap.tcb_info_signature)
    }

    /// The exact signed `qe_identity` text and its `r || s` signature.
    pub(crate) fn qe_identity_signed(&self) -> (&[u8], &[u8]) {
        (
            self.dcap.qe_identity.as_bytes(),
            &self.dcap.qe_identity_signature,
        )
    }

    /// Header keys of `tcb_info`.
    pub fn tcb_info(&self) -> &SignedDocSummary {
        &self.tcb_info
    }

    /// Header keys of `qe_identity`.
    pub fn qe_identity(&self) -> &SignedDocSummary {
        &self.qe_identity
    }
}
