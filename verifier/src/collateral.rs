//! Collateral for air-gapped verification: inspecting evidence and
//! collateral files (what they are, their validity windows, the instants at
//! which all of them are valid together) and assembling an evidence-slot
//! bundle for a platform. Nothing here fetches anything.

use std::collections::BTreeMap;

use der::{Decode, Encode};
use kolm_policy::Platform;
use serde::Serialize;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use x509_cert::Certificate;

use crate::platform;

/// A validity window of one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Window {
    pub what: String,
    pub not_before: String,
    pub not_after: String,
    #[serde(skip)]
    start: OffsetDateTime,
    #[serde(skip)]
    end: OffsetDateTime,
}

impl Window {
    fn new(what: impl Into<String>, start: OffsetDateTime, end: OffsetDateTime) -> Window {
        let f = |t| kolm_format::timefmt::format_utc_seconds(t).unwrap_or_default();
        Window {
            what: what.into(),
            not_before: f(start),
            not_after: f(end),
            start,
            end,
        }
    }
}

/// What one file is.
#[derive(Debug, Clone, Serialize)]
pub struct Item {
    pub file: String,
    pub sha256: String,
    /// `x509-certificates`, `tdx-collateral`, `tdx-quote`, `snp-report`,
    /// `snp-crl`, `nitro-document`, `azure-evidence`, or `unknown`.
    pub kind: &'static str,
    pub details: BTreeMap<String, serde_json::Value>,
    pub windows: Vec<Window>,
    /// Why the file was not recognised (for `unknown`), or why a
    /// recognised file fails its check ([`inspect_bundle`]: an AMD CRL
    /// that does not verify or revokes the bundle's ASK).
    pub error: Option<String>,
}

fn cert_windows(certs: &[Certificate], prefix: &str) -> (Vec<Window>, Vec<serde_json::Value>) {
    let mut windows = Vec::new();
    let mut list = Vec::new();
    for (i, c) in certs.iter().enumerate() {
        let tbs = &c.tbs_certificate;
        let subject = tbs.subject.to_string();
        let nb = OffsetDateTime::from_unix_timestamp(
            i64::try_from(tbs.validity.not_before.to_unix_duration().as_secs()).unwrap_or(i64::MAX),
        );
        let na = OffsetDateTime::from_unix_timestamp(
            i64::try_from(tbs.validity.not_after.to_unix_duration().as_secs()).unwrap_or(i64::MAX),
        );
        if let (Ok(nb), Ok(na)) = (nb, na) {
            windows.push(Window::new(format!("{prefix}[{i}] {subject}"), nb, na));
        }
        let der = c.to_der().unwrap_or_default();
        list.push(serde_json::json!({
            "subject": subject,
            "issuer": tbs.issuer.to_string(),
            "sha256": hex::encode(Sha256::digest(&der)),
        }));
    }
    (windows, list)
}

/// Parses one or more certificates: a PEM bundle or a single DER.
fn parse_certs(bytes: &[u8]) -> Option<Vec<Certificate>> {
    if bytes.starts_with(b"-----BEGIN") || bytes.windows(10).any(|w| w == b"-----BEGIN") {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut out = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find("-----BEGIN CERTIFICATE-----") {
            let after = rest.get(start..)?;
            let end_marker = "-----END CERTIFICATE-----";
            let end = after.find(end_marker)?.checked_add(end_marker.len())?;
            let block = after.get(..end)?;
            let (label, der) = pem_rfc7468_decode(block)?;
            if label != "CERTIFICATE" {
                return None;
            }
            out.push(Certificate::from_der(&der).ok()?);
            rest = after.get(end..)?;
        }
        (!out.is_empty()).then_some(out)
    } else {
        Certificate::from_der(bytes).ok().map(|c| vec![c])
    }
}

fn pem_rfc7468_decode(block: &str) -> Option<(String, Vec<u8>)> {
    use base64::Engine as _;
    let mut lines = block.lines();
    let first = lines.next()?.trim();
    let label = first
        .strip_prefix("-----BEGIN ")?
        .strip_suffix("-----")?
        .to_string();
    let body: String = lines
        .take_while(|l| !l.starts_with("-----END"))
        .map(str::trim)
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .ok()?;
    Some((label, der))
}

/// The details and windows of TDX collateral: its documents, CRLs and
/// issuer chains.
fn describe_tdx_collateral(item: &mut Item, c: &crate::tdx::TdxCollateral) {
    let tcb = c.tcb_info();
    let qe = c.qe_identity();
    item.details
        .insert("fmspc".into(), tcb.fmspc.clone().into());
    item.details.insert(
        "tcb_evaluation_data_number".into(),
        tcb.tcb_evaluation_data_number.into(),
    );
    item.windows
        .push(Window::new("tcb_info", tcb.issue_date, tcb.next_update));
    item.windows
        .push(Window::new("qe_identity", qe.issue_date, qe.next_update));
    for (name, crl) in [("pck_crl", c.pck_crl()), ("root_ca_crl", c.root_ca_crl())] {
        item.windows
            .push(Window::new(name, crl.this_update, crl.next_update));
    }
    let chains: [(&str, &[crate::tdx::Cert]); 3] = [
        ("pck_crl_issuer_chain", c.pck_crl_issuer_chain()),
        ("tcb_info_issuer_chain", c.tcb_info_issuer_chain()),
        ("qe_identity_issuer_chain", c.qe_identity_issuer_chain()),
    ];
    for (name, chain) in chains {
        for (i, cert) in chain.iter().enumerate() {
            if let Ok((nb, na)) = cert.validity() {
                item.windows.push(Window::new(
                    format!("{name}[{i}] {}", cert.subject()),
                    nb,
                    na,
                ));
            }
        }
    }
    item.details.insert(
        "carries_pck_certificate_chain".into(),
        c.pck_certificate_chain().is_some().into(),
    );
}

/// The details and windows of a Nitro attestation document: its module,
/// time and certificates.
fn describe_nitro_document(item: &mut Item, d: &crate::nitro::NitroDocument) {
    item.details
        .insert("module_id".into(), d.module_id().into());
    item.details.insert(
        "timestamp".into(),
        kolm_format::timefmt::format_utc_seconds(d.timestamp())
            .unwrap_or_default()
            .into(),
    );
    let mut certs = Vec::new();
    for der in d
        .cabundle()
        .iter()
        .map(Vec::as_slice)
        .chain(std::iter::once(d.certificate()))
    {
        if let Ok(c) = Certificate::from_der(der) {
            certs.push(c);
        }
    }
    let (w, list) = cert_windows(&certs, "chain");
    item.windows.extend(w);
    item.details.insert("certificates".into(), list.into());
}

/// The details and window of an AMD CRL, read but not checked.
fn describe_snp_crl(item: &mut Item, crl: &crate::snp::crl::SnpCrl) {
    item.details.insert("issuer".into(), crl.issuer().into());
    let revoked: Vec<_> = crl
        .entries()
        .into_iter()
        .map(|e| serde_json::json!({"serial": e.serial, "revoked_at": e.revoked_at}))
        .collect();
    item.details.insert("revoked".into(), revoked.into());
    // Alone, a CRL is only read: whose it is takes the bundle's ARK
    // ([`inspect_bundle`]).
    item.details
        .insert("signature".into(), CRL_NOT_CHECKED.into());
    match crl.next_update() {
        Some(next) => item
            .windows
            .push(Window::new("crl", crl.this_update(), next)),
        None => {
            item.details.insert(
                "this_update".into(),
                kolm_format::timefmt::format_utc_seconds(crl.this_update())
                    .unwrap_or_default()
                    .into(),
            );
        }
    }
}

/// Identifies `bytes` and lists its validity windows.
pub fn inspect(file: &str, bytes: &[u8]) -> Item {
    let mut item = Item {
        file: file.to_string(),
        sha256: hex::encode(Sha256::digest(bytes)),
        kind: "unknown",
        details: BTreeMap::new(),
        windows: Vec::new(),
        error: None,
    };
    if let Ok(c) = crate::tdx::parse_tdx_collateral(bytes) {
        item.kind = "tdx-collateral";
        describe_tdx_collateral(&mut item, &c);
        return item;
    }
    if let Ok(q) = crate::tdx::parse_tdx_quote(bytes) {
        item.kind = "tdx-quote";
        item.details
            .insert("mrtd".into(), hex::encode(q.mrtd()).into());
        item.details
            .insert("report_data".into(), hex::encode(q.report_data()).into());
        return item;
    }
    if let Ok(r) = crate::snp::parse_snp_report(bytes) {
        item.kind = "snp-report";
        item.details
            .insert("measurement".into(), hex::encode(r.measurement()).into());
        item.details
            .insert("report_data".into(), hex::encode(r.report_data()).into());
        return item;
    }
    if let Ok(ev) = crate::azure::parse_azure_evidence(bytes) {
        item.kind = "azure-evidence";
        let kind = match ev.hcl.kind {
            crate::azure::hcl::HclKind::Snp => "SNP",
            crate::azure::hcl::HclKind::Tdx => "TDX",
        };
        item.details.insert("hcl_report_type".into(), kind.into());
        if let Some(v) = ev.vcek.as_deref().and_then(parse_certs) {
            let (w, list) = cert_windows(&v, "vcek");
            item.windows.extend(w);
            item.details.insert("vcek".into(), list.into());
        }
        return item;
    }
    if let Ok(d) = crate::nitro::parse_nitro_document(bytes) {
        item.kind = "nitro-document";
        describe_nitro_document(&mut item, &d);
        return item;
    }
    if let Ok(crl) = crate::snp::crl::parse_crl(bytes) {
        item.kind = "snp-crl";
        describe_snp_crl(&mut item, &crl);
        return item;
    }
    if let Some(certs) = parse_certs(bytes) {
        item.kind = "x509-certificates";
        let (w, list) = cert_windows(&certs, "cert");
        item.windows.extend(w);
        item.details.insert("certificates".into(), list.into());
        return item;
    }
    item.error = Some(
        "not a certificate (PEM/DER), TDX collateral JSON, TDX quote, SNP report, AMD CRL, \
         Azure evidence or Nitro document"
            .into(),
    );
    item
}

/// `signature` of an `snp-crl` item that was not checked.
const CRL_NOT_CHECKED: &str = "not-checked";

/// Inspects the files of a collateral bundle: each as [`inspect`] does;
/// then each AMD CRL (`snp-crl`) is checked against the bundle's ASK/ARK
/// chain (the file holding exactly an ASK and a self-issued ARK) and its
/// VCEK (a file holding one certificate). Its details gain `signature`
/// (`ok`, `failed`), `ask_status` and `vcek_status` (`revoked`,
/// `not-revoked`, `out-of-scope`: issued by another than the CRL's issuer,
/// as a VCEK is (by the ASK); `not-checked`); its `error` says why when
/// the signature fails, the bundle has no chain, or the ASK or VCEK is
/// revoked. Which ARK the chain ends in is not judged here (`bundle
/// fetch` checks it is AMD's; the verifier checks it at verification).
pub fn inspect_bundle(files: &[(String, Vec<u8>)]) -> Vec<Item> {
    use crate::snp::CertRole;
    use crate::snp::crl::Revocation;
    let mut items: Vec<Item> = files.iter().map(|(n, b)| inspect(n, b)).collect();
    let chain = files
        .iter()
        .find_map(|(_, b)| crate::snp::certs::parse_chain(b).ok());
    let leaf = files
        .iter()
        .zip(&items)
        .filter(|(_, i)| i.kind == "x509-certificates")
        .find_map(|((_, b), _)| crate::snp::certs::parse_cert(b, CertRole::Leaf).ok());
    let status = |r: &Revocation| match r {
        Revocation::Revoked(_) => "revoked",
        Revocation::NotRevoked => "not-revoked",
        Revocation::OutOfScope { .. } => "out-of-scope",
    };
    for ((_, bytes), item) in files.iter().zip(items.iter_mut()) {
        if item.kind != "snp-crl" {
            continue;
        }
        item.details
            .insert("ask_status".into(), CRL_NOT_CHECKED.into());
        item.details
            .insert("vcek_status".into(), CRL_NOT_CHECKED.into());
        let Some(pair) = &chain else {
            item.error = Some("cannot be checked: the bundle has no ASK/ARK chain".into());
            continue;
        };
        let verified = match crate::snp::crl::verify_crl(bytes, &pair.ark) {
            Ok(v) => v,
            Err(e) => {
                item.details.insert("signature".into(), "failed".into());
                item.error = Some(e.to_string());
                continue;
            }
        };
        item.details.insert("signature".into(), "ok".into());
        let mut revoked = Vec::new();
        let certs = [
            ("ask_status", CertRole::Ask, Some(&pair.ask)),
            ("vcek_status", CertRole::Leaf, leaf.as_ref()),
        ];
        for (key, role, cert) in certs {
            let Some(cert) = cert else { continue };
            match verified.check_not_revoked(cert, role) {
                Ok(r) => {
                    item.details.insert(key.into(), status(&r).into());
                }
                Err(e) => {
                    item.details.insert(key.into(), "revoked".into());
                    revoked.push(e.to_string());
                }
            }
        }
        if !revoked.is_empty() {
            item.error = Some(revoked.join("; "));
        }
    }
    items
}

/// The instants at which every window holds: `(latest start, earliest end)`,
/// or `None` when the windows do not overlap (or there are none).
pub fn common_window(items: &[Item]) -> Option<(String, String)> {
    let all: Vec<&Window> = items.iter().flat_map(|i| i.windows.iter()).collect();
    let start = all.iter().map(|w| w.start).max()?;
    let end = all.iter().map(|w| w.end).min()?;
    let f = |t| kolm_format::timefmt::format_utc_seconds(t).unwrap_or_default();
    (start <= end).then(|| (f(start), f(end)))
}

/// Why a bundle cannot be assembled.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum BundleError {
    #[error("{file}: {reason}")]
    File { file: String, reason: String },
    #[error("platform {platform} needs {what}")]
    Missing {
        platform: Platform,
        what: &'static str,
    },
    #[error("platform {0} has no evidence to bundle")]
    NotAttested(Platform),
    #[error("two files would both be {0}")]
    Duplicate(&'static str),
}

/// Maps files to the evidence-slot names of `platform` (receipt spec v1,
/// section 6), checking that each parses as what it is placed as.
pub fn bundle(
    platform: Platform,
    files: &[(String, Vec<u8>)],
) -> Result<BTreeMap<&'static str, Vec<u8>>, BundleError> {
    let mut out: BTreeMap<&'static str, Vec<u8>> = BTreeMap::new();
    for (name, bytes) in files {
        let item = inspect(name, bytes);
        let slot = match (platform, item.kind) {
            (Platform::Nitro, "nitro-document") => platform::NITRO_DOC,
            (Platform::SevSnp, "snp-report") => platform::SNP_REPORT,
            (Platform::SevSnp, "x509-certificates") => {
                let n = parse_certs(bytes).map_or(0, |c| c.len());
                if n == 1 {
                    platform::SNP_VCEK
                } else {
                    platform::SNP_CHAIN
                }
            }
            (Platform::Tdx, "tdx-quote") => platform::TDX_QUOTE,
            (Platform::Tdx | Platform::AzureTdx, "tdx-collateral") => platform::TDX_COLLATERAL,
            (Platform::AzureSevSnp | Platform::AzureTdx, "azure-evidence") => {
                platform::AZURE_EVIDENCE
            }
            (Platform::None | Platform::Simulated, _) => {
                return Err(BundleError::NotAttested(platform));
            }
            (_, kind) => {
                return Err(BundleError::File {
                    file: name.clone(),
                    reason: format!("a {kind} has no place in {platform} evidence"),
                });
            }
        };
        let data = if slot == platform::SNP_VCEK {
            // Store the VCEK as DER whatever form it came in.
            parse_certs(bytes)
                .and_then(|c| c.first().and_then(|c| c.to_der().ok()))
                .ok_or_else(|| BundleError::File {
                    file: name.clone(),
                    reason: "certificate does not re-encode".into(),
                })?
        } else {
            bytes.clone()
        };
        if out.insert(slot, data).is_some() {
            return Err(BundleError::Duplicate(slot));
        }
    }
    let required: &[&'static str] = match platform {
        Platform::Nitro => &[platform::NITRO_DOC],
        Platform::SevSnp => &[platform::SNP_REPORT, platform::SNP_VCEK],
        Platform::Tdx => &[platform::TDX_QUOTE, platform::TDX_COLLATERAL],
        Platform::AzureSevSnp => &[platform::AZURE_EVIDENCE],
        Platform::AzureTdx => &[platform::AZURE_EVIDENCE, platform::TDX_COLLATERAL],
        Platform::None | Platform::Simulated => return Err(BundleError::NotAttested(platform)),
    };
    for r in required {
        if !out.contains_key(r) {
            return Err(BundleError::Missing { platform, what: r });
        }
    }
    Ok(out)
}

/// The evidence slot table is kolm-format's (the writer enforces it too).
pub use kolm_format::evidence::{EvidenceSlot as Slot, SNP_REPORT_BYTES, evidence_slots as slots};

/// Why an evidence index lists a file its platform's slot has no place for.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotFileError {
    #[error(
        "{path:?} is not an evidence file of platform {platform} (receipt-v1 section 6 names: {allowed})"
    )]
    Unlisted {
        platform: Platform,
        path: String,
        allowed: String,
    },
    #[error("{path:?} is listed as {found:?}, it is the {expected:?}")]
    Role {
        path: String,
        found: kolm_format::evidence::EvidenceRole,
        expected: kolm_format::evidence::EvidenceRole,
    },
    #[error("{path:?} is {size} bytes, over its {max}-byte cap")]
    TooLarge { path: String, size: u64, max: u64 },
}

/// Checks one evidence-index entry against the slot table of receipt spec
/// `version`: a known name for the platform, the right role, and a
/// declared size within the cap.
pub fn check_slot_file(
    version: kolm_format::version::SpecVersion,
    platform: Platform,
    path: &str,
    role: kolm_format::evidence::EvidenceRole,
    size: u64,
) -> Result<&'static Slot, SlotFileError> {
    let table = slots(version, platform);
    let Some(slot) = table.iter().find(|s| s.path == path) else {
        let names: Vec<&str> = table.iter().map(|s| s.path).collect();
        return Err(SlotFileError::Unlisted {
            platform,
            path: path.to_string(),
            allowed: if names.is_empty() {
                "no files".to_string()
            } else {
                names.join(", ")
            },
        });
    };
    if slot.role != role {
        return Err(SlotFileError::Role {
            path: path.to_string(),
            found: role,
            expected: slot.role,
        });
    }
    if size > slot.max_bytes {
        return Err(SlotFileError::TooLarge {
            path: path.to_string(),
            size,
            max: slot.max_bytes,
        });
    }
    Ok(slot)
}

/// The cap on a file read for `collateral inspect|bundle` and the raw
/// evidence commands: the largest slot cap (1 MiB).
pub const MAX_INPUT_FILE_BYTES: u64 = 1024 * 1024;

/// A date a vendor signed into a collateral file: the file did not exist
/// before it (TDX: the TCB info's and QE identity's `issueDate`, the CRLs'
/// `thisUpdate`; SEV-SNP: the certificates' `notBefore`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignedDate {
    pub at: OffsetDateTime,
    /// The evidence file that carries it.
    pub file: &'static str,
    /// Which date it is, as the file names it.
    pub what: &'static str,
}

impl std::fmt::Display for SignedDate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = kolm_format::timefmt::format_utc_seconds(self.at)
            .unwrap_or_else(|_| self.at.unix_timestamp().to_string());
        write!(f, "{at} ({} of {})", self.what, self.file)
    }
}

/// Why the dates of a collateral file could not be read.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignedDateError {
    #[error("{file} does not parse, so its signed dates cannot be read: {reason}")]
    Unreadable { file: &'static str, reason: String },
}

/// The latest vendor-signed date in `platform`'s collateral files among
/// `files` (evidence path -> bytes), or `None` when there is none. An
/// enclave obtains its collateral before it reads its clock for
/// `finished_at` (receipt-v2 section 7), so for collateral the signed
/// manifest binds this is a lower bound on `finished_at`; an artifact
/// finished earlier is backdated. Reads the dates only: the signatures over
/// them are checked by the platform verifier (the `attestation` check).
pub fn collateral_lower_bound(
    platform: Platform,
    files: &BTreeMap<String, Vec<u8>>,
) -> Result<Option<SignedDate>, SignedDateError> {
    let mut dates: Vec<SignedDate> = Vec::new();
    let unreadable =
        |file: &'static str| move |reason: String| SignedDateError::Unreadable { file, reason };
    // The TDX form of the simulated TEE dates its collateral as Intel does.
    let tdx_file = match platform {
        Platform::Simulated => Some(platform::SIM_TDX_COLLATERAL),
        Platform::Tdx | Platform::AzureTdx => Some(platform::TDX_COLLATERAL),
        _ => None,
    };
    match platform {
        Platform::Tdx | Platform::AzureTdx | Platform::Simulated => {
            if let Some((file, bytes)) = tdx_file.and_then(|f| files.get(f).map(|b| (f, b))) {
                let c = crate::tdx::parse_tdx_collateral(bytes)
                    .map_err(|e| unreadable(file)(e.to_string()))?;
                let date = |at, what| SignedDate { at, file, what };
                dates.push(date(c.tcb_info().issue_date, "tcbInfo.issueDate"));
                dates.push(date(
                    c.qe_identity().issue_date,
                    "enclaveIdentity.issueDate",
                ));
                dates.push(date(c.root_ca_crl().this_update, "root_ca_crl.thisUpdate"));
                dates.push(date(c.pck_crl().this_update, "pck_crl.thisUpdate"));
            }
        }
        Platform::SevSnp => {
            let secs = |file: &'static str, what, s: i64| {
                OffsetDateTime::from_unix_timestamp(s)
                    .map(|at| SignedDate { at, file, what })
                    .map_err(|e| unreadable(file)(e.to_string()))
            };
            if let Some(bytes) = files.get(platform::SNP_VCEK) {
                let file = platform::SNP_VCEK;
                let leaf = crate::snp::certs::parse_cert(bytes, crate::snp::CertRole::Leaf)
                    .map_err(|e| unreadable(file)(e.to_string()))?;
                dates.push(secs(file, "VCEK/VLEK notBefore", leaf.not_before())?);
            }
            if let Some(bytes) = files.get(platform::SNP_CHAIN) {
                let file = platform::SNP_CHAIN;
                let pair = crate::snp::certs::parse_chain(bytes)
                    .map_err(|e| unreadable(file)(e.to_string()))?;
                dates.push(secs(file, "ASK/ASVK notBefore", pair.ask.not_before())?);
                dates.push(secs(file, "ARK notBefore", pair.ark.not_before())?);
            }
        }
        Platform::None | Platform::Nitro | Platform::AzureSevSnp => {}
    }
    Ok(dates.into_iter().max_by_key(|d| d.at))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::snp::crl::testing::{self, Spec, crl};

    /// A bundle of the stand-in chain, a VCEK-like leaf issued by its ASK
    /// (serial 0, as AMD's VCEKs) and `crl`.
    fn bundle_with(crl: Option<Vec<u8>>, chain: bool) -> Vec<Item> {
        let (_, ask_key) = testing::keys();
        let leaf = testing::cert("CN=SEV-VCEK", testing::ASK_NAME, &[0], ask_key, ask_key);
        let mut files = vec![("snp-vcek.der".to_string(), leaf)];
        if chain {
            files.push(("snp-ask-ark.pem".into(), testing::chain_pem()));
        }
        if let Some(c) = crl {
            files.push(("snp-crl.der".into(), c));
        }
        inspect_bundle(&files)
    }

    fn crl_item(items: &[Item]) -> &Item {
        items.iter().find(|i| i.kind == "snp-crl").unwrap()
    }

    #[test]
    fn a_bundle_crl_is_checked_against_the_bundle_chain() {
        // Serial 0 is listed, which is the VCEK's serial; the VCEK was
        // issued by the ASK, so the ARK's list does not speak for it.
        let items = bundle_with(
            Some(crl(Spec {
                revoked: vec![vec![0]],
                ..Spec::default()
            })),
            true,
        );
        assert_eq!(items.len(), 3);
        let c = crl_item(&items);
        assert_eq!(c.error, None, "{:?}", c.details);
        assert_eq!(c.details["signature"], "ok");
        assert_eq!(c.details["ask_status"], "not-revoked");
        assert_eq!(c.details["vcek_status"], "out-of-scope");
        assert_eq!(c.details["revoked"][0]["serial"], "00");
        assert_eq!(c.windows.len(), 1);
        assert_eq!(c.windows[0].not_before, "2023-11-14T22:13:20Z");
        assert_eq!(c.windows[0].not_after, "2027-01-15T08:00:00Z");
        assert!(items.iter().all(|i| i.error.is_none()));
        assert!(common_window(&items).is_some());
    }

    #[test]
    fn a_revoked_ask_or_a_crl_that_does_not_verify_is_an_error() {
        let items = bundle_with(
            Some(crl(Spec {
                revoked: vec![testing::ASK_SERIAL.to_vec()],
                ..Spec::default()
            })),
            true,
        );
        let c = crl_item(&items);
        assert_eq!(c.details["signature"], "ok");
        assert_eq!(c.details["ask_status"], "revoked");
        let e = c.error.as_deref().unwrap();
        assert!(e.contains("ASK/ASVK serial 010001 is revoked"), "{e}");

        let items = bundle_with(
            Some(crl(Spec {
                wrong_key: true,
                ..Spec::default()
            })),
            true,
        );
        let c = crl_item(&items);
        assert_eq!(c.details["signature"], "failed");
        assert_eq!(c.details["ask_status"], "not-checked");
        let e = c.error.as_deref().unwrap();
        assert!(e.starts_with("CRL signature does not verify"), "{e}");

        let items = bundle_with(Some(crl(Spec::default())), false);
        let e = crl_item(&items).error.as_deref().unwrap();
        assert!(e.contains("no ASK/ARK chain"), "{e}");
    }

    #[test]
    fn a_crl_alone_is_read_not_judged() {
        let item = inspect("snp-crl.der", &crl(Spec::default()));
        assert_eq!(item.kind, "snp-crl");
        assert_eq!(item.details["signature"], "not-checked");
        assert_eq!(item.details["issuer"], "CN=ARK-Test,O=kolm test");
        assert_eq!(item.error, None);
        let item = inspect(
            "snp-crl.der",
            &crl(Spec {
                next_update: None,
                ..Spec::default()
            }),
        );
        assert!(item.windows.is_empty());
        assert_eq!(item.details["this_update"], "2023-11-14T22:13:20Z");
    }
}
