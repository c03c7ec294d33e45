//! Azure confidential VMs (vTPM + HCL paravisor report, on SEV-SNP or TDX).
//!
//! Order of checks: the evidence JSON; the HCL report; the binding of the
//! runtime data to the hardware report (`report_data[0..32] =
//! SHA-256(runtime data)`); the vTPM attestation key `HCLAkPub` taken from that
//! bound runtime data; the TPM quote's signature by it, its structure, its PCR
//! digest against the reported PCR values and its nonce; then the hardware
//! report itself through the SEV-SNP or TDX verifier. TDX evidence carries no
//! DCAP collateral: without collateral supplied separately it fails closed.

pub mod hcl;
pub mod tpm;

use base64::Engine as _;
use serde::Deserialize;

use kolm_policy::Platform;
use time::OffsetDateTime;

use std::collections::BTreeMap;

use crate::attested::{
    Attested, Claims, Evaluation, EvidenceKind, Expectations, Identity, Rejection,
};
use crate::check::{AzureCheck, CheckStatus};
use hcl::{HclKind, HclReport};
use tpm::TpmQuote;

/// Largest evidence document accepted.
pub const MAX_EVIDENCE_BYTES: usize = 1024 * 1024;

/// Why Azure evidence could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AzureError {
    #[error("evidence JSON: {0}")]
    Json(String),
    #[error("evidence field {field}: {reason}")]
    Field { field: &'static str, reason: String },
    #[error("HCL report: {0}")]
    Hcl(#[from] hcl::HclError),
    #[error("runtime data: {0}")]
    RuntimeData(String),
}

/// The evidence document (the confidential-containers attestation agent's
/// `az-snp-vtpm` v2 and `az-tdx-vtpm` v1 layouts).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct EvidenceJson {
    version: u32,
    tpm_quote: TpmQuoteJson,
    hcl_report: String,
    #[serde(default)]
    vcek: Option<String>,
    #[serde(default)]
    td_quote: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TpmQuoteJson {
    signature: String,
    message: String,
    pcrs: Vec<String>,
}

/// Parsed Azure evidence (structure only, no cryptography).
#[derive(Debug, Clone)]
pub struct AzureEvidence {
    pub version: u32,
    pub hcl: HclReport,
    pub quote: TpmQuote,
    pub quote_message: Vec<u8>,
    pub quote_signature: Vec<u8>,
    pub pcrs: Vec<[u8; 32]>,
    /// VCEK DER (SNP evidence).
    pub vcek: Option<Vec<u8>>,
    /// DCAP quote (TDX evidence).
    pub td_quote: Option<Vec<u8>>,
    pub runtime: RuntimeData,
}

impl AzureEvidence {
    /// The PCRs the TPM quote's selection covers, with their reported
    /// values (whether those hash to the quoted digest is
    /// `azure.tpm.pcr_digest`).
    pub fn quoted_pcrs(&self) -> BTreeMap<u8, [u8; 32]> {
        self.quote
            .pcrs
            .iter()
            .filter_map(|&i| Some((i, *self.pcrs.get(usize::from(i))?)))
            .collect()
    }
}

/// The runtime data the HCL report binds.
#[derive(Debug, Clone)]
pub struct RuntimeData {
    /// `HCLAkPub` modulus and exponent.
    pub ak_n: Vec<u8>,
    pub ak_e: Vec<u8>,
    /// `user-data`: 64 bytes the guest chose (kolm puts its report data here).
    pub user_data: Option<Vec<u8>>,
}

fn ferr(field: &'static str, reason: impl Into<String>) -> AzureError {
    AzureError::Field {
        field,
        reason: reason.into(),
    }
}

fn b64_any(s: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
    let t = s.trim();
    URL_SAFE_NO_PAD
        .decode(t)
        .or_else(|_| URL_SAFE.decode(t))
        .or_else(|_| STANDARD.decode(t))
        .ok()
}

fn parse_runtime(bytes: &[u8]) -> Result<RuntimeData, AzureError> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| AzureError::RuntimeData(e.to_string()))?;
    let keys = v
        .get("keys")
        .and_then(|k| k.as_array())
        .ok_or_else(|| AzureError::RuntimeData("no \"keys\" array".into()))?;
    let mut found = None;
    for k in keys {
        if k.get("kid").and_then(|x| x.as_str()) == Some("HCLAkPub") {
            if found.is_some() {
                return Err(AzureError::RuntimeData("HCLAkPub appears twice".into()));
            }
            if k.get("kty").and_then(|x| x.as_str()) != Some("RSA") {
                return Err(AzureError::RuntimeData("HCLAkPub is not an RSA key".into()));
            }
            let get = |name: &str| {
                k.get(name)
                    .and_then(|x| x.as_str())
                    .and_then(b64_any)
                    .ok_or_else(|| {
                        AzureError::RuntimeData(format!("HCLAkPub.{name} missing or not base64url"))
                    })
            };
            found = Some((get("n")?, get("e")?));
        }
    }
    let (ak_n, ak_e) = found.ok_or_else(|| AzureError::RuntimeData("no HCLAkPub key".into()))?;
    let user_data = match v.get("user-data") {
        None => None,
        Some(u) => {
            let s = u
                .as_str()
                .ok_or_else(|| AzureError::RuntimeData("user-data is not a string".into()))?;
            Some(hex::decode(s).map_err(|e| AzureError::RuntimeData(format!("user-data: {e}")))?)
        }
    };
    Ok(RuntimeData {
        ak_n,
        ak_e,
        user_data,
    })
}

/// Parses Azure evidence (no cryptography); never panics.
pub fn parse_azure_evidence(bytes: &[u8]) -> Result<AzureEvidence, AzureError> {
    if bytes.len() > MAX_EVIDENCE_BYTES {
        return Err(AzureError::Json(format!(
            "{} bytes, over the cap",
            bytes.len()
        )));
    }
    let ev: EvidenceJson =
        serde_json::from_slice(bytes).map_err(|e| AzureError::Json(e.to_string()))?;
    let hcl_bytes = b64_any(&ev.hcl_report).ok_or_else(|| ferr("hcl_report", "not base64"))?;
    let hcl = HclReport::parse(&hcl_bytes)?;
    let quote_message =
        hex::decode(&ev.tpm_quote.message).map_err(|e| ferr("tpm_quote.message", e.to_string()))?;
    let quote_signature = hex::decode(&ev.tpm_quote.signature)
        .map_err(|e| ferr("tpm_quote.signature", e.to_string()))?;
    let quote =
        TpmQuote::parse(&quote_message).map_err(|e| ferr("tpm_quote.message", e.to_string()))?;
    if ev.tpm_quote.pcrs.len() != 24 {
        return Err(ferr(
            "tpm_quote.pcrs",
            format!("expected 24 values, found {}", ev.tpm_quote.pcrs.len()),
        ));
    }
    let mut pcrs = Vec::with_capacity(24);
    for p in &ev.tpm_quote.pcrs {
        let mut a = [0u8; 32];
        hex::decode_to_slice(p, &mut a).map_err(|e| ferr("tpm_quote.pcrs", e.to_string()))?;
        pcrs.push(a);
    }
    let vcek = match &ev.vcek {
        Some(s) => Some(decode_cert(s).ok_or_else(|| ferr("vcek", "neither PEM nor base64 DER"))?),
        None => None,
    };
    let td_quote = match &ev.td_quote {
        Some(s) => Some(b64_any(s).ok_or_else(|| ferr("td_quote", "not base64"))?),
        None => None,
    };
    match (hcl.kind, vcek.is_some(), td_quote.is_some()) {
        (HclKind::Snp, true, false) | (HclKind::Tdx, false, true) => {}
        (HclKind::Snp, _, _) => {
            return Err(ferr("vcek", "SNP evidence needs vcek and no td_quote"));
        }
        (HclKind::Tdx, _, _) => {
            return Err(ferr("td_quote", "TDX evidence needs td_quote and no vcek"));
        }
    }
    let runtime = parse_runtime(&hcl.runtime_data)?;
    Ok(AzureEvidence {
        version: ev.version,
        hcl,
        quote,
        quote_message,
        quote_signature,
        pcrs,
        vcek,
        td_quote,
        runtime,
    })
}

fn decode_cert(s: &str) -> Option<Vec<u8>> {
    let t = s.trim();
    if t.starts_with("-----BEGIN") {
        let body: String = t
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect::<Vec<_>>()
            .concat();
        return base64::engine::general_purpose::STANDARD.decode(body).ok();
    }
    b64_any(t)
}

/// An Azure evidence slot: the evidence document and, for TDX-based
/// evidence, the DCAP collateral supplied beside it.
#[derive(Debug, Clone, Copy)]
pub struct AzureInput<'a> {
    pub evidence: &'a [u8],
    pub tdx_collateral: Option<&'a [u8]>,
}

/// Runs the Azure-specific checks (HCL binding, vTPM quote) into `out`;
/// returns the parsed evidence when it could be read. The hardware report is
/// checked by [`evaluate`]. An expected `public_key` cannot be checked on
/// Azure: the binding fails closed.
pub fn check_azure_layer(
    input: &[u8],
    expect: &Expectations<'_>,
    out: &mut Evaluation,
) -> Option<AzureEvidence> {
    let ev = match parse_azure_evidence(input) {
        Ok(ev) => ev,
        Err(e) => {
            out.checks.fail(AzureCheck::EvidenceFormat, e.to_string());
            return None;
        }
    };
    out.checks.pass(
        AzureCheck::EvidenceFormat,
        format!("evidence v{}, HCL report v{}", ev.version, ev.hcl.version),
    );
    let kind = match ev.hcl.kind {
        HclKind::Snp => "SNP",
        HclKind::Tdx => "TDX",
    };
    out.fields.insert("hcl_report_type", kind);
    let rt_hash = ev.hcl.runtime_data_sha256();
    out.fields
        .insert("runtime_data_sha256", hex::encode(rt_hash));
    match ev.hcl.hw_report_data() {
        Some(rd) if rd.get(..32) == Some(rt_hash.as_slice()) => out.checks.pass(
            AzureCheck::BindingRuntimeData,
            "hardware report_data[0..32] = SHA-256(runtime data)",
        ),
        _ => out.checks.fail(
            AzureCheck::BindingRuntimeData,
            "hardware report_data[0..32] is not SHA-256(runtime data): HCLAkPub is not bound",
        ),
    }
    let authenticated = check_tpm_quote(out, &ev);
    // azure.policy.pcr: the guest's identity on Azure (the hardware report
    // describes the paravisor). Only quoted PCRs count: a reported value
    // outside the quote's selection is not signed.
    check_pcr_policy(out, &ev, expect.policy, authenticated);
    check_bindings(out, &ev, expect);
    Some(ev)
}

/// Checks `azure.tpm.signature` and `azure.tpm.pcr_digest`; returns
/// whether both passed (the PCR values are authenticated).
fn check_tpm_quote(out: &mut Evaluation, ev: &AzureEvidence) -> bool {
    if tpm::verify_rsa_pkcs1_sha256(
        &ev.runtime.ak_n,
        &ev.runtime.ak_e,
        &ev.quote_message,
        &ev.quote_signature,
    ) {
        out.checks
            .pass(AzureCheck::TpmSignature, "TPM quote signed by HCLAkPub");
    } else {
        out.checks.fail(
            AzureCheck::TpmSignature,
            "TPM quote signature does not verify under HCLAkPub",
        );
    }
    let signed = out.checks.status_of(AzureCheck::TpmSignature) == Some(CheckStatus::Pass);
    let digest_ok = match ev.quote.expected_pcr_digest(&ev.pcrs) {
        Some(d) if d.as_slice() == ev.quote.pcr_digest.as_slice() => {
            out.checks.pass(
                AzureCheck::TpmPcrDigest,
                format!("PCRs {:?} match the quoted digest", ev.quote.pcrs),
            );
            true
        }
        _ => {
            out.checks.fail(
                AzureCheck::TpmPcrDigest,
                "reported PCR values do not hash to the quoted pcrDigest",
            );
            false
        }
    };
    signed && digest_ok
}

/// Check `azure.policy.pcr` on the quoted PCRs, run only when they are
/// `authenticated`.
fn check_pcr_policy(
    out: &mut Evaluation,
    ev: &AzureEvidence,
    policy: &kolm_policy::Policy,
    authenticated: bool,
) {
    if policy.azure.pcrs.is_empty() {
        out.checks.skip(
            AzureCheck::PolicyPcr,
            "policy has no vTPM PCR allow-list (azure.pcrs)",
        );
    } else if !authenticated {
        out.checks.skip(
            AzureCheck::PolicyPcr,
            "not run: the PCR values are not authenticated by the TPM quote",
        );
    } else {
        match policy.check_azure_pcrs(&ev.quoted_pcrs()) {
            Ok(()) => out.checks.pass(
                AzureCheck::PolicyPcr,
                format!(
                    "vTPM PCR {} quoted and in the policy's allow-lists",
                    policy
                        .azure
                        .pcrs
                        .keys()
                        .map(u8::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
            Err(v) => out.checks.fail(AzureCheck::PolicyPcr, v.to_string()),
        }
    }
}

/// Checks `azure.binding.nonce` (the TPM quote's extraData) and
/// `azure.binding.user_data` (the runtime data's user-data).
fn check_bindings(out: &mut Evaluation, ev: &AzureEvidence, expect: &Expectations<'_>) {
    out.fields.insert(
        "tpm_quote_extra_data(nonce)",
        hex::encode(&ev.quote.extra_data),
    );
    match &expect.nonce {
        Some(n) if n == &ev.quote.extra_data => out
            .checks
            .pass(AzureCheck::BindingNonce, "TPM quote nonce matches"),
        Some(_) => out.checks.fail(
            AzureCheck::BindingNonce,
            "TPM quote nonce differs from the expected nonce",
        ),
        None => out
            .checks
            .skip(AzureCheck::BindingNonce, "no nonce expected"),
    }
    if let Some(u) = &ev.runtime.user_data {
        out.fields.insert("user_data", hex::encode(u));
    }
    match (&expect.report_data, &expect.public_key) {
        (_, Some(_)) => out.checks.fail(
            AzureCheck::BindingUserData,
            "a public_key is expected, but Azure evidence carries none to compare",
        ),
        (Some(want), None) if ev.runtime.user_data.as_deref() == Some(want.as_slice()) => {
            out.checks.pass(
                AzureCheck::BindingUserData,
                "runtime data user-data matches",
            )
        }
        (Some(_), None) => out.checks.fail(
            AzureCheck::BindingUserData,
            "runtime data user-data differs from the expected report data",
        ),
        (None, None) => out
            .checks
            .skip(AzureCheck::BindingUserData, "no user-data expected"),
    }
}

/// Checks Azure CVM evidence at `at`: the Azure layer (HCL binding, vTPM
/// quote), then the hardware report through the SEV-SNP verifier (the VCEK in
/// the evidence, AMD roots embedded) or the TDX verifier. TDX evidence carries
/// no DCAP collateral; without `tdx_collateral` the TD quote's TCB cannot be
/// appraised offline and the evidence is rejected (`azure.tdx.collateral`).
///
/// The claims' measurement is the hardware report's (the paravisor's on
/// Azure); the report data is the runtime data's `user-data`.
pub fn evaluate(
    input: &AzureInput<'_>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Evaluation {
    let at = at.to_offset(time::UtcOffset::UTC);
    let mut out = Evaluation::new(EvidenceKind::Azure, at);
    let Some(ev) = check_azure_layer(input.evidence, expect, &mut out) else {
        return out;
    };
    // The hardware report's REPORT_DATA is SHA-256(runtime data) || zeros,
    // checked above; kolm's binding lives in the runtime data.
    let hw_expect = Expectations::new(expect.policy);
    let user_data = ev.runtime.user_data.clone().unwrap_or_default();
    let hw = match ev.hcl.kind {
        HclKind::Snp => {
            let snp = crate::snp::SnpEvidence {
                report: &ev.hcl.hw_report,
                vcek: ev.vcek.as_deref().unwrap_or_default(),
                chain: None,
            };
            Some((
                Platform::AzureSevSnp,
                crate::snp::evaluate_on(&snp, &hw_expect, at, Platform::AzureSevSnp),
            ))
        }
        HclKind::Tdx => {
            let td = ev.td_quote.as_deref().unwrap_or_default();
            match crate::tdx::parse_tdx_quote(td) {
                Err(e) => out.checks.fail(AzureCheck::TdxQuote, e.to_string()),
                Ok(q) => {
                    let same_rd = ev.hcl.hw_report_data() == Some(q.report_data().as_slice());
                    let same_mrtd = ev.hcl.tdx_mrtd() == Some(q.mrtd().as_slice());
                    if same_rd && same_mrtd {
                        out.checks.pass(
                            AzureCheck::TdxTdReport,
                            "TD quote carries the HCL TDREPORT's REPORTDATA and MRTD",
                        );
                    } else {
                        out.checks.fail(
                            AzureCheck::TdxTdReport,
                            "TD quote's REPORTDATA/MRTD differ from the HCL TDREPORT",
                        );
                    }
                    out.fields.insert("mrtd", hex::encode(q.mrtd()));
                }
            }
            match input.tdx_collateral {
                Some(c) => {
                    let tdx = crate::tdx::TdxEvidence {
                        quote: td,
                        collateral: c,
                    };
                    Some((
                        Platform::AzureTdx,
                        crate::tdx::evaluate_on(&tdx, &hw_expect, at, Platform::AzureTdx),
                    ))
                }
                None => {
                    out.checks.fail(
                        AzureCheck::TdxCollateral,
                        "no DCAP collateral for the TD quote: its signatures may be genuine but \
                         its TCB cannot be appraised offline (fail closed; pass --tdx-collateral)",
                    );
                    None
                }
            }
        }
    };
    if let Some((platform, hw)) = hw {
        out.checks.extend(hw.checks);
        out.fields.merge(hw.fields);
        let pcrs = ev.quoted_pcrs();
        out.claims = hw.claims.map(|c| Claims {
            platform,
            measurement: c.measurement,
            report_data: user_data,
            tcb: c.tcb,
            debug: c.debug,
            identity: Identity::Azure {
                hardware: Box::new(c.identity),
                pcrs,
            },
        });
    }
    out
}

/// [`evaluate`], concluded.
pub fn verify(
    input: &AzureInput<'_>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Result<Attested, Rejection> {
    evaluate(input, expect, at).conclude(expect.policy)
}
