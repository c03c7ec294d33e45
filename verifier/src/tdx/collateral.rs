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
    root_ca_crl: CrlSummary,
    pck_crl: CrlSummary,
    tcb_info: SignedDocSummary,
    qe_identity: SignedDocSummary,
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

fn crl(which: &'static str, der: &[u8]) -> Result<CrlSummary, TdxError> {
    use der::Decode as _;
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
    Ok(CrlSummary {
        issuer: tbs.issuer.to_string(),
        this_update: conv(tbs.this_update)?,
        next_update: conv(next)?,
        entries: tbs.revoked_certificates.as_ref().map_or(0, Vec::len),
    })
}

fn rfc3339(which: &'static str, key: &str, s: &str) -> Result<OffsetDateTime, TdxError> {
    OffsetDateTime::parse(s, &Rfc3339).map_err(|e| TdxError::CollateralDocument {
        which,
        detail: format!("{key} {s:?} is not RFC 3339: {e}"),
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
        &self.root_ca_crl
    }

    /// Dates of `pck_crl`.
    pub fn pck_crl(&self) -> &CrlSummary {
        &self.pck_crl
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
