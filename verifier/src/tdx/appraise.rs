//! The DCAP appraisal of a quote against its collateral, as steps whose
//! check ids are known where they run.
//!
//! dcap-qvl 0.7.1 offers the appraisal as one opaque call
//! (`QuoteVerifier::verify`) whose errors are `anyhow` chains; its step
//! functions are private. So this module runs the same steps itself, in
//! dcap-qvl's order, each under its own [`TdxCheck`], reading the typed
//! values kolm parsed and using dcap-qvl's public pieces where it has them
//! (the typed `TcbInfo` / `QeIdentity` documents, `TcbLevel::shortfalls`,
//! `TcbInfo::tdx_module_identity`, `TdxModuleTcbLevel::shortfall`,
//! `TDAttributes::parse`):
//!
//! | step | id |
//! |---|---|
//! | root CA CRL signed by the root; the root not revoked | `tdx.crl` |
//! | TCB Info signer: an end-entity certificate named by the root, not revoked | `tdx.chain`, `tdx.crl` |
//! | TCB Info signature | `tdx.tcb_info.signature` |
//! | QE Identity signer (the same rules, when it is another certificate) | `tdx.chain`, `tdx.crl` |
//! | QE Identity signature | `tdx.qe_identity.signature` |
//! | QE Identity is `TD_QE` v2 or v3 | `tdx.qe.identity` |
//! | PCK chain: end-entity leaf, CA, names; PCK CRL issued by the PCK CA; nothing revoked | `tdx.chain`, `tdx.crl` |
//! | QE report against QE Identity (MRSIGNER, not debug, ISVPRODID, MISCSELECT, ATTRIBUTES, ISVSVN level) | `tdx.qe.identity` |
//! | FMSPC, TDX TCB Info, a TCB level met by CPUSVN/PCESVN/TEE_TCB_SVN (and TEE_TCB_SVN2), TDX module identity and level | `tdx.tcb.level` |
//! | no component status `Revoked` | `tdx.tcb.level` |
//! | TD attributes dcap-qvl always rejects | `tdx.td_attributes` |
//!
//! (QE report signature, QE report data and quote signature are kolm's
//! checks before the appraisal; validity windows are `tdx.collateral.freshness`.)
//!
//! Then dcap-qvl appraises the whole quote: it must agree, and it gives the
//! converged TCB status and advisories. Its failure is recorded as
//! `tdx.dcap` with dcap-qvl's message as the detail; the message is never
//! read to decide anything.

use dcap_qvl::quote::TDAttributes;
use dcap_qvl::{QeIdentity, TcbInfo, TcbLevel, TcbStatus};

use crate::check::TdxCheck;

use super::collateral::TdxCollateral;
use super::pki::{Anchor, Cert};
use super::quote::{TdReport10, TdxQuote};

/// What dcap-qvl concluded for a quote it accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DcapVerdict {
    /// Converged TCB status (Intel's spelling, e.g. `UpToDate`).
    pub tcb_status: String,
    /// Advisory ids of the converged status.
    pub advisory_ids: Vec<String>,
    /// Platform (TCB Info) level status.
    pub platform_status: String,
    /// QE Identity level status.
    pub qe_status: String,
}

/// The step that failed and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    pub id: TdxCheck,
    pub detail: String,
}

fn fail<T>(id: TdxCheck, detail: impl Into<String>) -> Result<T, Finding> {
    Err(Finding {
        id,
        detail: detail.into(),
    })
}

/// TCB statuses Intel QVL accepts in each collateral structure (as
/// dcap-qvl 0.7.1).
const TCB_INFO_STATUSES: &[TcbStatus] = &[
    TcbStatus::UpToDate,
    TcbStatus::OutOfDate,
    TcbStatus::ConfigurationNeeded,
    TcbStatus::Revoked,
    TcbStatus::OutOfDateConfigurationNeeded,
    TcbStatus::SWHardeningNeeded,
    TcbStatus::ConfigurationAndSWHardeningNeeded,
];
const TDX_MODULE_STATUSES: &[TcbStatus] = &[
    TcbStatus::UpToDate,
    TcbStatus::OutOfDate,
    TcbStatus::Revoked,
];
const QE_IDENTITY_STATUSES: &[TcbStatus] = &[
    TcbStatus::UpToDate,
    TcbStatus::OutOfDate,
    TcbStatus::ConfigurationNeeded,
    TcbStatus::Revoked,
    TcbStatus::OutOfDateConfigurationNeeded,
];

/// Runs the steps above, then dcap-qvl with the embedded root at `now_secs`
/// (Unix seconds). The quote's PCK chain is the one appraised: the caller
/// has checked that the collateral carries no other.
pub(crate) fn appraise(
    quote: &TdxQuote,
    collateral: &TdxCollateral,
    now_secs: u64,
    anchor: Anchor<'_>,
) -> Result<DcapVerdict, Finding> {
    let root = Cert::from_der(anchor.der(), "root").or_else(|e| {
        fail(
            TdxCheck::Chain,
            format!("{} does not decode: {e}", anchor.name()),
        )
    })?;
    root_ca_crl(collateral, &root)?;

    let tcb_chain = collateral.tcb_info_issuer_chain();
    let tcb_signer = signer("TCB Info signing certificate", tcb_chain, collateral, &root)?;
    let (text, sig) = collateral.tcb_info_signed();
    if !tcb_signer.verifies(text, sig, true) {
        return fail(
            TdxCheck::TcbInfoSignature,
            format!(
                "tcb_info_signature does not verify with the key of {}",
                tcb_signer.subject()
            ),
        );
    }

    let qe_chain = collateral.qe_identity_issuer_chain();
    let qe_signer = if qe_chain == tcb_chain {
        tcb_signer
    } else {
        signer(
            "QE Identity signing certificate",
            qe_chain,
            collateral,
            &root,
        )?
    };
    let (text, sig) = collateral.qe_identity_signed();
    if !qe_signer.verifies(text, sig, true) {
        return fail(
            TdxCheck::QeIdentitySignature,
            format!(
                "qe_identity_signature does not verify with the key of {}",
                qe_signer.subject()
            ),
        );
    }
    let qe_identity = collateral.qe_identity_doc();
    if qe_identity.id != "TD_QE" || !matches!(qe_identity.version, 2 | 3) {
        return fail(
            TdxCheck::QeIdentity,
            format!(
                "QE Identity {} v{} is not the identity of a TD quoting enclave (TD_QE v2 or v3)",
                qe_identity.id, qe_identity.version
            ),
        );
    }

    pck_chain(quote, collateral)?;
    let qe_status = qe_report_against_identity(quote, qe_identity)?;
    let tcb = tcb_levels(quote, collateral.tcb_info_doc())?;
    // A Revoked component makes the converged status Revoked, which
    // dcap-qvl rejects whatever the policy.
    let revoked = tcb
        .iter()
        .chain([&qe_status])
        .find(|s| s.1 == TcbStatus::Revoked);
    if let Some((what, _)) = revoked {
        return fail(
            TdxCheck::TcbLevel,
            format!("TCB status is Revoked ({what}): the platform's keys are compromised"),
        );
    }
    td_attributes(quote)?;
    dcap(quote, collateral, now_secs, anchor)
}

/// dcap-qvl's whole appraisal.
fn dcap(
    quote: &TdxQuote,
    collateral: &TdxCollateral,
    now_secs: u64,
    anchor: Anchor<'_>,
) -> Result<DcapVerdict, Finding> {
    let verifier =
        dcap_qvl::verify::QuoteVerifier::<dcap_qvl::configs::RustCryptoConfig>::new_with_config(
            anchor.der().to_vec(),
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
        Err(e) => fail(TdxCheck::Dcap, format!("dcap-qvl: {e:#}")),
    }
}

/// The root CA CRL is signed by the root, and does not list the root.
fn root_ca_crl(c: &TdxCollateral, root: &Cert) -> Result<(), Finding> {
    let crl = c.root_ca_crl_list();
    if !crl.is_issued_by(root) {
        return fail(
            TdxCheck::Crl,
            format!(
                "root_ca_crl (issuer {}) is not signed by the root ({})",
                crl.summary().issuer,
                root.subject()
            ),
        );
    }
    if crl.lists(root) {
        return fail(
            TdxCheck::Crl,
            format!("the root CA CRL revokes the root ({})", root.subject()),
        );
    }
    Ok(())
}

/// A collateral document's signer (`chain` = [signer, root], checked by
/// `tdx.collateral.chain`): an end-entity certificate whose issuer is the
/// root, not revoked by the root CA CRL (which [`root_ca_crl`] authenticated).
fn signer<'c>(
    what: &str,
    chain: &'c [Cert],
    c: &TdxCollateral,
    root: &Cert,
) -> Result<&'c Cert, Finding> {
    let Some(signer) = chain.first() else {
        return fail(TdxCheck::Chain, format!("no {what}"));
    };
    if signer.is_ca() {
        return fail(
            TdxCheck::Chain,
            format!(
                "the {what} ({}) is a CA certificate: a document signer must be an \
                 end-entity certificate",
                signer.subject()
            ),
        );
    }
    if !signer.names_issuer(root) {
        return fail(
            TdxCheck::Chain,
            format!(
                "the {what}'s issuer ({}) is not the root ({})",
                signer.issuer(),
                root.subject()
            ),
        );
    }
    if c.root_ca_crl_list().lists(signer) {
        return fail(
            TdxCheck::Crl,
            format!(
                "the root CA CRL revokes the {what} (serial {})",
                hex::encode(signer.serial())
            ),
        );
    }
    Ok(signer)
}

/// The quote's PCK chain as a path: an end-entity leaf issued by a CA
/// issued by the root (by name; `tdx.pck.chain` checked the signatures and
/// the pin), the PCK CRL issued and signed by that CA, and no certificate
/// revoked.
fn pck_chain(q: &TdxQuote, c: &TdxCollateral) -> Result<(), Finding> {
    let (Some(leaf), Some(ca), Some(root)) = (
        q.pck_chain().first(),
        q.pck_chain().get(1),
        q.pck_chain().get(2),
    ) else {
        return fail(TdxCheck::Chain, "the PCK chain is not [leaf, CA, root]");
    };
    if leaf.is_ca() {
        return fail(
            TdxCheck::Chain,
            "the PCK certificate is a CA certificate, not an end-entity certificate",
        );
    }
    if !ca.is_ca() {
        return fail(
            TdxCheck::Chain,
            format!(
                "the PCK CA certificate ({}) is not a CA certificate",
                ca.subject()
            ),
        );
    }
    if !leaf.names_issuer(ca) || !ca.names_issuer(root) {
        return fail(
            TdxCheck::Chain,
            "issuer and subject names do not chain: PCK certificate <- PCK CA <- root",
        );
    }
    let crl = c.pck_crl_list();
    if !crl.covers(leaf) {
        return fail(
            TdxCheck::Crl,
            format!(
                "pck_crl is issued by {}, not by the PCK certificate's issuer {}: \
                 its revocation status is unknown",
                crl.summary().issuer,
                leaf.issuer()
            ),
        );
    }
    if !crl.is_issued_by(ca) {
        return fail(
            TdxCheck::Crl,
            format!("pck_crl is not signed by the PCK CA ({})", ca.subject()),
        );
    }
    if crl.lists(leaf) {
        return fail(
            TdxCheck::Crl,
            format!(
                "the PCK CRL revokes the PCK certificate (serial {})",
                hex::encode(leaf.serial())
            ),
        );
    }
    if c.root_ca_crl_list().lists(ca) {
        return fail(
            TdxCheck::Crl,
            format!(
                "the root CA CRL revokes the PCK CA certificate (serial {})",
                hex::encode(ca.serial())
            ),
        );
    }
    Ok(())
}

/// The QE report against QE Identity (as dcap-qvl's
/// `verify_qe_identity_policy`); the status of the QE TCB level met.
fn qe_report_against_identity(
    q: &TdxQuote,
    id: &QeIdentity,
) -> Result<(String, TcbStatus), Finding> {
    let qe = q.qe_report();
    if qe.mrsigner != id.mrsigner {
        return fail(
            TdxCheck::QeIdentity,
            format!(
                "QE MRSIGNER {} is not QE Identity's {}",
                hex::encode(qe.mrsigner),
                hex::encode(id.mrsigner)
            ),
        );
    }
    // SGX ATTRIBUTES.DEBUG (bit 1 of the first byte).
    if qe.attributes.first().is_some_and(|a| a & 0x02 != 0) {
        return fail(TdxCheck::QeIdentity, "the QE is a debug enclave");
    }
    if qe.isvprodid != id.isvprodid {
        return fail(
            TdxCheck::QeIdentity,
            format!(
                "QE ISVPRODID {} is not QE Identity's {}",
                qe.isvprodid, id.isvprodid
            ),
        );
    }
    let mask = u32::from_le_bytes(id.miscselect_mask);
    if qe.miscselect & mask != u32::from_le_bytes(id.miscselect) & mask {
        return fail(
            TdxCheck::QeIdentity,
            format!(
                "QE MISCSELECT {:08x} differs from QE Identity's {} under mask {}",
                qe.miscselect,
                hex::encode(id.miscselect),
                hex::encode(id.miscselect_mask)
            ),
        );
    }
    let attributes_match = qe
        .attributes
        .iter()
        .zip(id.attributes.iter().zip(&id.attributes_mask))
        .all(|(have, (want, mask))| have & mask == want & mask);
    if !attributes_match {
        return fail(
            TdxCheck::QeIdentity,
            format!(
                "QE ATTRIBUTES {} differ from QE Identity's {} under mask {}",
                hex::encode(qe.attributes),
                hex::encode(id.attributes),
                hex::encode(id.attributes_mask)
            ),
        );
    }
    // Levels are listed from the highest ISVSVN down: the first one met.
    let Some(level) = id.tcb_levels.iter().find(|l| qe.isvsvn >= l.tcb.isvsvn) else {
        return fail(
            TdxCheck::QeIdentity,
            format!(
                "QE ISVSVN {} is below every QE Identity TCB level (lowest {})",
                qe.isvsvn,
                id.tcb_levels
                    .last()
                    .map_or_else(|| "none".to_string(), |l| l.tcb.isvsvn.to_string())
            ),
        );
    };
    if !QE_IDENTITY_STATUSES.contains(&level.tcb_status) {
        return fail(
            TdxCheck::QeIdentity,
            format!(
                "QE Identity TCB status {} is not one Intel QVL accepts there",
                level.tcb_status
            ),
        );
    }
    Ok(("QE".to_string(), level.tcb_status))
}

/// Intel QVL's order of TCB levels (dcap-qvl `canonicalize_tcb_levels` for
/// TDX TCB Info): SGX components, then PCESVN, then TDX components, highest
/// first.
fn intel_order(a: &TcbLevel, b: &TcbLevel) -> std::cmp::Ordering {
    b.tcb
        .sgx_components
        .cmp(&a.tcb.sgx_components)
        .then_with(|| b.tcb.pce_svn.cmp(&a.tcb.pce_svn))
        .then_with(|| b.tcb.tdx_components.cmp(&a.tcb.tdx_components))
}

/// FMSPC, the TCB Info type, the platform TCB level and TDX module level
/// met by the launch TCB (and, for TD 1.5, the current TCB), and the TDX
/// module identity. Returns every component status found, by name.
fn tcb_levels(q: &TdxQuote, info: &TcbInfo) -> Result<Vec<(String, TcbStatus)>, Finding> {
    let ext = q.pck_extension();
    let Ok(fmspc) = hex::decode(&info.fmspc) else {
        return fail(
            TdxCheck::TcbLevel,
            format!("TCB Info fmspc {:?} is not hex", info.fmspc),
        );
    };
    if fmspc != ext.fmspc {
        return fail(
            TdxCheck::TcbLevel,
            format!(
                "FMSPC mismatch: the PCK certificate's FMSPC is {}, TCB Info's {}",
                hex::encode(ext.fmspc),
                info.fmspc
            ),
        );
    }
    if info.version < 3 || info.id != "TDX" {
        return fail(
            TdxCheck::TcbLevel,
            format!(
                "TCB Info {} v{} is not TDX TCB Info (v3 or later)",
                info.id, info.version
            ),
        );
    }
    let mut levels = info.tcb_levels.clone();
    levels.sort_by(intel_order);
    let td = &q.td_report().base;
    let mut statuses = Vec::new();
    platform_level(
        q,
        info,
        &levels,
        &td.tee_tcb_svn,
        "TEE_TCB_SVN",
        &mut statuses,
    )?;
    module_identity(info, td)?;
    if let Some(td15) = &q.td_report().td15 {
        platform_level(
            q,
            info,
            &levels,
            &td15.tee_tcb_svn2,
            "TEE_TCB_SVN2",
            &mut statuses,
        )?;
    }
    Ok(statuses)
}

/// The first level (in Intel's order) met by the PCK's CPUSVN and PCESVN
/// and `svn`, and the TDX module level met by `svn`; pushes their statuses.
fn platform_level(
    q: &TdxQuote,
    info: &TcbInfo,
    levels: &[TcbLevel],
    svn: &[u8; 16],
    svn_name: &'static str,
    statuses: &mut Vec<(String, TcbStatus)>,
) -> Result<(), Finding> {
    let ext = q.pck_extension();
    let mut met = None;
    for level in levels {
        let shortfalls = level
            .shortfalls(&ext.cpusvn, ext.pcesvn, Some(svn))
            .or_else(|e| {
                fail(
                    TdxCheck::TcbLevel,
                    format!("a TCB Info level does not fit a TDX platform: {e}"),
                )
            })?;
        if shortfalls.is_empty() {
            met = Some(level);
            break;
        }
    }
    let Some(level) = met else {
        return fail(
            TdxCheck::TcbLevel,
            format!(
                "No matching TCB level found: no level of TCB Info (FMSPC {}, {} levels) is met \
                 by CPUSVN {}, PCESVN {} and {svn_name} {}",
                info.fmspc,
                levels.len(),
                hex::encode(ext.cpusvn),
                ext.pcesvn,
                hex::encode(svn)
            ),
        );
    };
    if !TCB_INFO_STATUSES.contains(&level.tcb_status) {
        return fail(
            TdxCheck::TcbLevel,
            format!(
                "TCB Info status {} ({svn_name}) is not one Intel QVL accepts there",
                level.tcb_status
            ),
        );
    }
    statuses.push((format!("platform, {svn_name}"), level.tcb_status));
    let identity = info
        .tdx_module_identity(svn)
        .or_else(|e| fail(TdxCheck::TcbLevel, format!("{svn_name}: {e}")))?;
    if let Some(identity) = identity {
        let Some(module) = identity
            .tcb_levels
            .iter()
            .find(|l| l.shortfall(svn).is_none())
        else {
            return fail(
                TdxCheck::TcbLevel,
                format!(
                    "TDX module ISVSVN {} ({svn_name}) is below every level of {}",
                    svn.first().copied().unwrap_or_default(),
                    identity.id
                ),
            );
        };
        if !TDX_MODULE_STATUSES.contains(&module.tcb_status) {
            return fail(
                TdxCheck::TcbLevel,
                format!(
                    "TDX module status {} ({svn_name}) is not one Intel QVL accepts there",
                    module.tcb_status
                ),
            );
        }
        statuses.push((format!("TDX module, {svn_name}"), module.tcb_status));
    }
    Ok(())
}

fn hex_array<const N: usize>(s: &str, field: &str) -> Result<[u8; N], Finding> {
    hex::decode(s)
        .ok()
        .and_then(|v| <[u8; N]>::try_from(v).ok())
        .map_or_else(
            || {
                fail(
                    TdxCheck::TcbLevel,
                    format!("TCB Info {field} is not {N} bytes of hex"),
                )
            },
            Ok,
        )
}

/// MRSIGNERSEAM and SEAMATTRIBUTES against the TDX module identity the
/// module version selects (or TCB Info's `tdxModule`).
fn module_identity(info: &TcbInfo, td: &TdReport10) -> Result<(), Finding> {
    let Some(base) = &info.tdx_module else {
        return fail(TdxCheck::TcbLevel, "TDX TCB Info has no tdxModule");
    };
    let mut mrsigner = hex_array::<48>(&base.mrsigner, "tdxModule.mrsigner")?;
    let mut attributes = hex_array::<8>(&base.attributes, "tdxModule.attributes")?;
    let mut mask = hex_array::<8>(&base.attributes_mask, "tdxModule.attributesMask")?;
    let identity = info
        .tdx_module_identity(&td.tee_tcb_svn)
        .or_else(|e| fail(TdxCheck::TcbLevel, e.to_string()))?;
    if let Some(id) = identity {
        mrsigner = hex_array(&id.mrsigner, "tdxModuleIdentity.mrsigner")?;
        attributes = hex_array(&id.attributes, "tdxModuleIdentity.attributes")?;
        mask = hex_array(&id.attributes_mask, "tdxModuleIdentity.attributesMask")?;
    }
    if td.mrsignerseam != mrsigner {
        return fail(
            TdxCheck::TcbLevel,
            format!(
                "TDX module MRSIGNER {} is not TCB Info's {}",
                hex::encode(td.mrsignerseam),
                hex::encode(mrsigner)
            ),
        );
    }
    let fits = td
        .seam_attributes
        .iter()
        .zip(attributes.iter().zip(&mask))
        .all(|(have, (want, m))| have & m == want & m && have & !m == 0);
    if !fits {
        return fail(
            TdxCheck::TcbLevel,
            format!(
                "TDX module SEAMATTRIBUTES {} do not match TCB Info's {} under mask {}",
                hex::encode(td.seam_attributes),
                hex::encode(attributes),
                hex::encode(mask)
            ),
        );
    }
    Ok(())
}

/// TD attributes dcap-qvl rejects whatever the policy (debug and profiling
/// are left to `tdx.debug`): a service TD binding (MRSERVICETD or
/// SERVTD_EXT), reserved bits, MIGRATABLE, SEPT_VE_DISABLE clear.
fn td_attributes(q: &TdxQuote) -> Result<(), Finding> {
    let td = q.td_report();
    if td.td15.as_ref().is_some_and(|x| x.mrservicetd != [0u8; 48]) {
        return fail(
            TdxCheck::TdAttributes,
            "MRSERVICETD is not zero: the TD is bound to a service TD",
        );
    }
    let bits = td.base.td_attributes;
    let Ok(a) = TDAttributes::parse(bits) else {
        return fail(
            TdxCheck::TdAttributes,
            format!("TD_ATTRIBUTES {} do not decode", hex::encode(bits)),
        );
    };
    let problem = if a.reserved != 0 {
        Some("reserved bits are set")
    } else if a.sec.migratable {
        Some("MIGRATABLE is set")
    } else if a.sec.servtd_ext {
        Some("SERVTD_EXT is set (a service TD binding)")
    } else if !a.sec.sept_ve_disable {
        Some("SEPT_VE_DISABLE is clear")
    } else {
        None
    };
    match problem {
        Some(p) => fail(
            TdxCheck::TdAttributes,
            format!("TD_ATTRIBUTES {}: {p}", hex::encode(bits)),
        ),
        None => Ok(()),
    }
}

/// The steps on their own, with typed documents changed where no signature
/// could be forged (the signatures are the steps before them). They need
/// the shared samples and skip without them.
#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
mod tests {
    use super::super::pki::INTEL_SGX_ROOT_CA_DER;
    use super::*;

    const V4: &str = "v4-b0c06f-dcapqvl-2025-06";
    const V5: &str = "v5-td15ex-b0c06f-dcapqvl-2026-10";

    fn bytes(case: &str) -> Option<(Vec<u8>, TdxCollateral)> {
        let dir = kolm_testkit::samples("tdx/expected.json")?
            .join("tdx")
            .join(case);
        let c = TdxCollateral::parse(&std::fs::read(dir.join("collateral.json")).unwrap()).unwrap();
        Some((std::fs::read(dir.join("quote.bin")).unwrap(), c))
    }

    fn sample(case: &str) -> Option<(TdxQuote, TdxCollateral)> {
        let (q, c) = bytes(case)?;
        Some((TdxQuote::parse_structure(&q).unwrap(), c))
    }

    /// A named change to a typed document.
    type Mutation<T> = (&'static str, fn(&mut T));

    /// A named change to one byte of TD_ATTRIBUTES, and the step's verdict.
    type AttributeCase = (&'static str, usize, fn(u8) -> u8, Option<TdxCheck>);

    fn id_of<T>(r: Result<T, Finding>) -> Option<TdxCheck> {
        r.err().map(|f| f.id)
    }

    #[test]
    fn qe_identity_step_names_each_mismatch() {
        let Some((q, c)) = sample(V4) else { return };
        let genuine = c.qe_identity_doc().clone();
        assert_eq!(
            qe_report_against_identity(&q, &genuine).unwrap().1,
            TcbStatus::UpToDate
        );
        let cases: [Mutation<QeIdentity>; 6] = [
            ("MRSIGNER", |id| id.mrsigner[0] ^= 1),
            ("ISVPRODID", |id| id.isvprodid ^= 1),
            ("MISCSELECT", |id| {
                id.miscselect_mask = [0xff; 4];
                id.miscselect[0] ^= 1;
            }),
            ("ATTRIBUTES", |id| {
                id.attributes_mask[15] = 0xff;
                id.attributes[15] ^= 0x80;
            }),
            ("ISVSVN below every level", |id| {
                for l in &mut id.tcb_levels {
                    l.tcb.isvsvn = u16::MAX;
                }
            }),
            ("no levels", |id| id.tcb_levels.clear()),
        ];
        for (what, f) in cases {
            let mut id = genuine.clone();
            f(&mut id);
            assert_eq!(
                id_of(qe_report_against_identity(&q, &id)),
                Some(TdxCheck::QeIdentity),
                "{what}"
            );
        }
        // A Revoked QE level is found here and rejected by `appraise`.
        let mut id = genuine;
        for l in &mut id.tcb_levels {
            l.tcb_status = TcbStatus::Revoked;
        }
        assert_eq!(
            qe_report_against_identity(&q, &id).unwrap().1,
            TcbStatus::Revoked
        );
    }

    #[test]
    fn tcb_level_step_names_each_mismatch() {
        for case in [V4, V5] {
            let Some((q, c)) = sample(case) else { return };
            let genuine = c.tcb_info_doc().clone();
            let statuses = tcb_levels(&q, &genuine).unwrap();
            assert!(
                statuses.iter().all(|s| s.1 == TcbStatus::UpToDate),
                "{case}: {statuses:?}"
            );
            let cases: [Mutation<TcbInfo>; 7] = [
                ("another FMSPC", |i| i.fmspc = "000000000000".into()),
                ("FMSPC not hex", |i| i.fmspc = "zz".into()),
                ("SGX TCB Info", |i| i.id = "SGX".into()),
                ("TCB Info v2", |i| i.version = 2),
                ("no level met", |i| {
                    for l in &mut i.tcb_levels {
                        l.tcb.pce_svn = u16::MAX;
                    }
                }),
                ("another TDX module signer", |i| {
                    for id in &mut i.tdx_module_identities {
                        id.mrsigner = "ff".repeat(48);
                    }
                    if let Some(m) = &mut i.tdx_module {
                        m.mrsigner = "ff".repeat(48);
                    }
                }),
                ("TDX module ISVSVN below every level", |i| {
                    for id in &mut i.tdx_module_identities {
                        for l in &mut id.tcb_levels {
                            l.tcb.isvsvn = u8::MAX;
                        }
                    }
                }),
            ];
            for (what, f) in cases {
                let mut info = genuine.clone();
                f(&mut info);
                assert_eq!(
                    id_of(tcb_levels(&q, &info)),
                    Some(TdxCheck::TcbLevel),
                    "{case}: {what}"
                );
            }
            // Revoked levels are returned, and `appraise` rejects them.
            let mut info = genuine;
            for l in &mut info.tcb_levels {
                l.tcb_status = TcbStatus::Revoked;
            }
            let statuses = tcb_levels(&q, &info).unwrap();
            assert!(statuses.iter().any(|s| s.1 == TcbStatus::Revoked));
        }
    }

    #[test]
    fn td_attributes_step_leaves_debug_to_the_policy() {
        let Some((genuine, _)) = bytes(V4) else {
            return;
        };
        // TD_ATTRIBUTES of a v4 quote: header 48, TEE_TCB_SVN 16, MRSEAM 48,
        // MRSIGNERSEAM 48, SEAMATTRIBUTES 8.
        let at = 48 + 16 + 48 + 48 + 8;
        let with = |byte: usize, f: fn(u8) -> u8| {
            let mut q = genuine.clone();
            q[at + byte] = f(q[at + byte]);
            TdxQuote::parse_structure(&q).unwrap()
        };
        let cases: [AttributeCase; 7] = [
            ("genuine", 0, |b| b, None),
            ("DEBUG (policy)", 0, |b| b | 0x01, None),
            ("profiling (policy)", 0, |b| b | 0x10, None),
            (
                "reserved bit 1",
                0,
                |b| b | 0x02,
                Some(TdxCheck::TdAttributes),
            ),
            ("SERVTD_EXT", 2, |b| b | 0x02, Some(TdxCheck::TdAttributes)),
            (
                "SEPT_VE_DISABLE clear",
                3,
                |b| b & !0x10,
                Some(TdxCheck::TdAttributes),
            ),
            ("MIGRATABLE", 3, |b| b | 0x20, Some(TdxCheck::TdAttributes)),
        ];
        for (what, byte, f, want) in cases {
            assert_eq!(id_of(td_attributes(&with(byte, f))), want, "{what}");
        }
        // A TD 1.5 bound to a service TD.
        let Some((v5, _)) = bytes(V5) else { return };
        let mrservicetd = kolm_tee_layouts::tdx::quote::V5_BODY_OFFSET
            + kolm_tee_layouts::tdx::td_report15::MRSERVICETD.offset();
        let mut q = v5.clone();
        q[mrservicetd] ^= 1;
        let q = TdxQuote::parse_structure(&q).unwrap();
        assert_eq!(id_of(td_attributes(&q)), Some(TdxCheck::TdAttributes));
        assert_eq!(
            id_of(td_attributes(&TdxQuote::parse_structure(&v5).unwrap())),
            None
        );
    }

    #[test]
    fn crl_and_chain_steps() {
        let Some((q, c)) = sample(V4) else { return };
        let root = Cert::from_der(INTEL_SGX_ROOT_CA_DER, "root").unwrap();
        assert_eq!(id_of(root_ca_crl(&c, &root)), None);
        assert_eq!(id_of(pck_chain(&q, &c)), None);
        // The root CA CRL is not the PCK CA's.
        let ca = q.pck_chain()[1].clone();
        assert_eq!(id_of(root_ca_crl(&c, &ca)), Some(TdxCheck::Crl));
        // A CA certificate as a document signer.
        let tcb = c.tcb_info_issuer_chain();
        assert!(signer("TCB Info signer", tcb, &c, &root).is_ok());
        let as_ca = c.pck_crl_issuer_chain();
        assert_eq!(
            id_of(signer("TCB Info signer", as_ca, &c, &root)),
            Some(TdxCheck::Chain)
        );
        // A signer named by another issuer than the root.
        let wrong_issuer = [tcb[0].clone(), ca];
        assert_eq!(
            id_of(signer(
                "TCB Info signer",
                &wrong_issuer,
                &c,
                &q.pck_chain()[1]
            )),
            Some(TdxCheck::Chain)
        );
    }
}
