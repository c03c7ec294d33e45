//! The TDX verification pipeline: parse, own checks, dcap-qvl appraisal,
//! policy. Checks run in a fixed order; once one fails, the checks after it
//! are recorded as skipped (except the trailing-bytes check, which only needs
//! the parsed quote), so the verdict names the first failure.

use kolm_policy::Policy;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use time::macros::format_description;

use crate::attestation::{AttestationReport, CheckKind};
use kolm_format::timefmt;

use super::appraise::{self, DcapVerdict};
use super::check_id as id;
use super::collateral::TdxCollateral;
use super::error::TdxError;
use super::pki::Cert;
use super::quote::{TdxQuote, Trailing};

/// `platform` of the reports this module writes.
pub const PLATFORM: &str = "tdx";

/// Verifies a TDX quote against collateral JSON at `at` under `policy`.
///
/// `expected_report_data`, when given, must equal the quote's REPORT_DATA.
/// Nothing here reads the clock or the network. The report's verdict is
/// `accept` only if every check that ran passed.
pub fn verify_tdx(
    quote: &[u8],
    collateral_json: &[u8],
    at: OffsetDateTime,
    policy: &Policy,
    expected_report_data: Option<&[u8; 64]>,
) -> AttestationReport {
    let collateral = TdxCollateral::parse(collateral_json);
    run(quote, collateral.as_ref(), at, policy, expected_report_data)
}

/// [`verify_tdx`] with collateral that is already parsed.
pub fn verify_tdx_parsed(
    quote: &[u8],
    collateral: &TdxCollateral,
    at: OffsetDateTime,
    policy: &Policy,
    expected_report_data: Option<&[u8; 64]>,
) -> AttestationReport {
    run(quote, Ok(collateral), at, policy, expected_report_data)
}

/// Records checks, skipping those after the first failure.
struct Run {
    rep: AttestationReport,
    first_failure: Option<&'static str>,
}

impl Run {
    fn record(&mut self, id: &'static str, kind: CheckKind, outcome: Result<String, String>) {
        match outcome {
            Ok(detail) => self.rep.pass(id, kind, detail),
            Err(detail) => {
                self.rep.fail(id, kind, detail);
                self.first_failure.get_or_insert(id);
            }
        }
    }

    /// Runs `f` unless an earlier check failed.
    fn check(
        &mut self,
        id: &'static str,
        kind: CheckKind,
        f: impl FnOnce() -> Result<String, String>,
    ) {
        match self.first_failure {
            Some(first) => self.rep.skip(id, kind, format!("not run: {first} failed")),
            None => {
                let outcome = f();
                self.record(id, kind, outcome);
            }
        }
    }

    fn failed(&self) -> bool {
        self.first_failure.is_some()
    }
}

fn utc(t: OffsetDateTime) -> String {
    timefmt::format_utc_seconds(t).unwrap_or_else(|_| t.to_string())
}

/// `2025-02-06T23:25:51+00:00`, the spelling of `pck_validity`.
fn utc_offset(t: OffsetDateTime) -> String {
    t.to_offset(time::UtcOffset::UTC)
        .format(format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second]+00:00"
        ))
        .unwrap_or_else(|_| t.to_string())
}

fn run(
    quote_bytes: &[u8],
    collateral: Result<&TdxCollateral, &TdxError>,
    at: OffsetDateTime,
    policy: &Policy,
    expected_report_data: Option<&[u8; 64]>,
) -> AttestationReport {
    let mut run = Run {
        rep: AttestationReport::new(PLATFORM, utc(at)),
        first_failure: None,
    };

    // 1. Structure.
    let quote = TdxQuote::parse_structure(quote_bytes);
    run.record(
        id::QUOTE_FORMAT,
        CheckKind::Format,
        quote
            .as_ref()
            .map(describe_quote)
            .map_err(ToString::to_string),
    );
    run.record(
        id::COLLATERAL_FORMAT,
        CheckKind::Format,
        collateral
            .map(describe_collateral)
            .map_err(ToString::to_string),
    );
    let (Ok(quote), Ok(collateral)) = (quote.as_ref(), collateral) else {
        if let Ok(q) = quote.as_ref() {
            quote_fields(&mut run.rep, q, &Signatures::of(q));
        }
        skip_all_after_format(&mut run, quote.is_ok());
        if let Ok(q) = quote.as_ref() {
            run.record(id::TRAILING_DATA, CheckKind::Format, trailing(q));
        }
        run.rep.conclude();
        return run.rep;
    };
    let sigs = Signatures::of(quote);
    quote_fields(&mut run.rep, quote, &sigs);
    collateral_fields(&mut run.rep, quote, collateral);

    // 2. The collateral's PCK chain, which dcap-qvl would prefer over the
    // quote's, must be the quote's.
    run.check(id::PCK_CHAIN_MATCH, CheckKind::Chain, || {
        pck_chain_match(quote, collateral)
    });

    // 3. The quote's own signatures and chain.
    run.check(id::PCK_CHAIN, CheckKind::Chain, || sigs.pck_chain(quote));
    run.check(id::QE_REPORT_SIGNATURE, CheckKind::Signature, || {
        if sigs.qe_report_sig_by_pck {
            Ok("QE report signed by the PCK leaf key".into())
        } else {
            Err("QE report signature does not verify with the PCK leaf key".into())
        }
    });
    run.check(id::QE_REPORT_DATA, CheckKind::Signature, || {
        if sigs.qe_report_data_binds_ak {
            Ok("QE REPORTDATA = SHA-256(attestation key || QE auth data) || 0^32".into())
        } else {
            Err("QE REPORTDATA is not SHA-256(attestation key || QE auth data) || 0^32".into())
        }
    });
    run.check(id::QUOTE_SIGNATURE, CheckKind::Signature, || {
        if sigs.quote_sig {
            Ok(format!(
                "header and TD report ({} bytes) signed by the attestation key",
                quote.signed_bytes().len()
            ))
        } else {
            Err("quote signature does not verify with the attestation key".into())
        }
    });

    // 4. Collateral issuer chains, 5. windows.
    run.check(id::COLLATERAL_CHAIN, CheckKind::Chain, || {
        collateral_chains(quote, collateral)
    });
    run.check(id::COLLATERAL_FRESHNESS, CheckKind::Freshness, || {
        freshness(quote, collateral, at)
    });

    // 6. dcap-qvl.
    let mut verdict: Option<DcapVerdict> = None;
    if run.failed() {
        run.check(id::DCAP, CheckKind::Signature, || Ok(String::new()));
    } else {
        match u64::try_from(at.unix_timestamp()) {
            Err(_) => run.record(
                id::COLLATERAL_FRESHNESS,
                CheckKind::Freshness,
                Err(format!("instant {} is before 1970", utc(at))),
            ),
            Ok(secs) => match appraise::appraise(quote, collateral, secs) {
                Ok(v) => {
                    run.record(
                        id::DCAP,
                        CheckKind::Signature,
                        Ok(format!(
                            "dcap-qvl 0.7.1: collateral signatures, chains to the embedded root \
                             with CRLs, QE identity and TCB level verified; TCB status {} \
                             (platform {}, QE {}), advisories [{}]",
                            v.tcb_status,
                            v.platform_status,
                            v.qe_status,
                            v.advisory_ids.join(", ")
                        )),
                    );
                    run.rep.field("tcb_status", v.tcb_status.clone());
                    run.rep.field("advisory_ids", v.advisory_ids.clone());
                    verdict = Some(v);
                }
                Err(f) => run.record(f.id, f.kind, Err(format!("dcap-qvl: {}", f.detail))),
            },
        }
    }

    // 7. Policy.
    let td = quote.td_report();
    run.check(id::DEBUG, CheckKind::Debug, || {
        debug_check(td.tud(), policy)
    });
    policy_checks(&mut run, quote, policy, verdict.as_ref());
    match expected_report_data {
        None if !run.failed() => run.rep.skip(
            id::BINDING_REPORT_DATA,
            CheckKind::Binding,
            "no expected REPORT_DATA given",
        ),
        _ => run.check(
            id::BINDING_REPORT_DATA,
            CheckKind::Binding,
            || match expected_report_data {
                Some(e) if e == quote.report_data() => {
                    Ok("REPORT_DATA equals the expected value".into())
                }
                Some(e) => Err(format!(
                    "REPORT_DATA {} differs from the expected {}",
                    hex::encode(quote.report_data()),
                    hex::encode(e)
                )),
                None => Ok("no expected REPORT_DATA given".into()),
            },
        ),
    }

    // 8. Trailing bytes: outside every signature and length field, so this
    // comes after the appraisal; it runs even after a failure.
    run.record(id::TRAILING_DATA, CheckKind::Format, trailing(quote));

    run.rep.conclude();
    run.rep
}

/// Rule `debug` on TD_ATTRIBUTES.TUD (bits 7:0). Bit 0 is DEBUG; bits 4..6
/// (profiling) and the reserved ones also mean "TD under debug", which the
/// TDX module ABI says makes the TD untrusted. dcap-qvl's own check of these
/// bits is switched off (`allow_debug(true)`) so the policy decides.
fn debug_check(tud: u8, policy: &Policy) -> Result<String, String> {
    match policy.check_debug(tud != 0) {
        Ok(()) if tud == 0 => Ok("not a debug TD (TD_ATTRIBUTES.TUD = 0x00)".into()),
        Ok(()) => Ok(format!(
            "TD under debug (TD_ATTRIBUTES.TUD = {tud:#04x}) accepted: policy allow_debug = true"
        )),
        Err(v) => Err(format!(
            "TD under debug (TD_ATTRIBUTES.TUD = {tud:#04x}, DEBUG bit {}): {v}",
            tud & 1
        )),
    }
}

fn skip_all_after_format(run: &mut Run, quote_parsed: bool) {
    let later: [(&str, CheckKind); 15] = [
        (id::PCK_CHAIN_MATCH, CheckKind::Chain),
        (id::PCK_CHAIN, CheckKind::Chain),
        (id::QE_REPORT_SIGNATURE, CheckKind::Signature),
        (id::QE_REPORT_DATA, CheckKind::Signature),
        (id::QUOTE_SIGNATURE, CheckKind::Signature),
        (id::COLLATERAL_CHAIN, CheckKind::Chain),
        (id::COLLATERAL_FRESHNESS, CheckKind::Freshness),
        (id::DCAP, CheckKind::Signature),
        (id::DEBUG, CheckKind::Debug),
        (id::POLICY_MRTD, CheckKind::Measurement),
        (id::POLICY_RTMR, CheckKind::Measurement),
        (id::POLICY_TCB_STATUS, CheckKind::Tcb),
        (id::POLICY_ADVISORIES, CheckKind::Tcb),
        (id::BINDING_REPORT_DATA, CheckKind::Binding),
        (id::TRAILING_DATA, CheckKind::Format),
    ];
    let first = run.first_failure.unwrap_or(id::QUOTE_FORMAT);
    for (check, kind) in later {
        if check == id::TRAILING_DATA && quote_parsed {
            continue;
        }
        run.rep
            .skip(check, kind, format!("not run: {first} failed"));
    }
}

fn describe_quote(q: &TdxQuote) -> String {
    let body = match q.td_report().body_type {
        None | Some(2) => "TD report 1.0",
        Some(3) => "TD report 1.5",
        _ => "TD report 1.5-Ex",
    };
    let padding = match q.trailing() {
        Trailing::None => String::new(),
        Trailing::ZeroPadding { len } => format!(" + {len} bytes of zero padding"),
        Trailing::Data { len, .. } => {
            format!(" + {len} trailing bytes (see {})", id::TRAILING_DATA)
        }
    };
    format!(
        "TDX quote v{} ({body}), {} bytes{padding}; PCK chain of 3 certificates",
        q.version(),
        q.bytes().len()
    )
}

fn describe_collateral(c: &TdxCollateral) -> String {
    format!(
        "TCB Info {} v{} FMSPC {} (eval #{}), QE Identity {} v{}, 2 CRLs, {}",
        c.tcb_info().id,
        c.tcb_info().version,
        c.tcb_info().fmspc.as_deref().unwrap_or("-"),
        c.tcb_info().tcb_evaluation_data_number,
        c.qe_identity().id,
        c.qe_identity().version,
        if c.pck_certificate_chain().is_some() {
            "with pck_certificate_chain"
        } else {
            "no pck_certificate_chain"
        }
    )
}

/// The verifier's own signature checks, all computed (they are also
/// reported as the `internal_sig_checks` field).
struct Signatures {
    quote_sig: bool,
    qe_report_sig_by_pck: bool,
    qe_report_data_binds_ak: bool,
    chain0: bool,
    chain1: bool,
    root_self: bool,
    root_pinned: bool,
}

fn p256_fixed(key: &[u8], msg: &[u8], sig: &[u8]) -> bool {
    ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, key)
        .verify(msg, sig)
        .is_ok()
}

impl Signatures {
    fn of(q: &TdxQuote) -> Signatures {
        let mut ak = [0x04u8; 65];
        if let Some(dst) = ak.get_mut(1..) {
            dst.copy_from_slice(q.attestation_key());
        }
        let quote_sig = p256_fixed(&ak, q.signed_bytes(), q.signature());
        let chain = q.pck_chain();
        let (leaf, ca, root) = (chain.first(), chain.get(1), chain.get(2));
        let qe_report_sig_by_pck = leaf
            .and_then(Cert::p256_public_key)
            .is_some_and(|key| p256_fixed(key, q.qe_report().raw(), q.qe_report_signature()));
        let mut h = Sha256::new();
        h.update(q.attestation_key());
        h.update(q.qe_auth_data());
        let digest = h.finalize();
        let rd = &q.qe_report().report_data;
        let qe_report_data_binds_ak = rd.get(..32) == Some(&digest[..])
            && rd.get(32..).is_some_and(|z| z.iter().all(|b| *b == 0));
        let signed = |child: Option<&Cert>, parent: Option<&Cert>| match (child, parent) {
            (Some(c), Some(p)) => c.is_signed_by(p),
            _ => false,
        };
        Signatures {
            quote_sig,
            qe_report_sig_by_pck,
            qe_report_data_binds_ak,
            chain0: signed(leaf, ca),
            chain1: signed(ca, root),
            root_self: signed(root, root),
            root_pinned: root.is_some_and(Cert::is_pinned_root),
        }
    }

    fn pck_chain(&self, q: &TdxQuote) -> Result<String, String> {
        if !self.root_pinned {
            return Err(
                "the quote's PCK chain does not end in the embedded Intel SGX Root CA \
                 (SHA-256 44a0196b...74d3)"
                    .into(),
            );
        }
        let ca = q.pck_chain().get(1).map(Cert::subject).unwrap_or_default();
        if !self.chain1 {
            return Err(format!(
                "PCK CA certificate ({ca}) is not signed by the root"
            ));
        }
        if !self.chain0 {
            return Err(format!(
                "PCK certificate is not signed by the PCK CA ({ca})"
            ));
        }
        if !self.root_self {
            return Err("the root's self-signature does not verify".into());
        }
        Ok(format!(
            "PCK certificate <- {ca} <- Intel SGX Root CA (pinned); signatures verify"
        ))
    }

    fn json(&self) -> Value {
        json!({
            "quote_sig": self.quote_sig,
            "qe_report_sig_by_pck": self.qe_report_sig_by_pck,
            "qe_report_data_binds_ak": self.qe_report_data_binds_ak,
            "chain0": self.chain0,
            "chain1": self.chain1,
            "root_self": self.root_self,
        })
    }
}

fn quote_fields(rep: &mut AttestationReport, q: &TdxQuote, sigs: &Signatures) {
    let td = q.td_report();
    let b = &td.base;
    rep.field("version", q.version());
    rep.field("body_type", td.body_type);
    rep.field("tee_type", format!("{:#x}", q.header().tee_type));
    let ext = q.pck_extension();
    rep.field("fmspc", hex::encode(ext.fmspc));
    if let Some(leaf) = q.pck_chain().first() {
        rep.field("pck_issuer", leaf.issuer());
        if let Ok((nb, na)) = leaf.validity() {
            rep.field("pck_validity", json!([utc_offset(nb), utc_offset(na)]));
        }
    }
    rep.field("pck_sgx_tcb_comps", ext.sgx_tcb_comps.to_vec());
    rep.field("pck_pcesvn", ext.pcesvn);
    let qe = q.qe_report();
    rep.field(
        "qe_report",
        json!({
            "mrenclave": hex::encode(qe.mrenclave),
            "mrsigner": hex::encode(qe.mrsigner),
            "isvprodid": qe.isvprodid,
            "isvsvn": qe.isvsvn,
        }),
    );
    rep.field("internal_sig_checks", sigs.json());
    rep.field(
        "td",
        json!({
            "tee_tcb_svn": hex::encode(b.tee_tcb_svn),
            "mrseam": hex::encode(b.mrseam),
            "td_attributes": hex::encode(b.td_attributes),
            "xfam": hex::encode(b.xfam),
            "mrtd": hex::encode(b.mrtd),
            "mrconfigid": hex::encode(b.mrconfigid),
            "mrowner": hex::encode(b.mrowner),
            "mrownerconfig": hex::encode(b.mrownerconfig),
            "rtmr0": hex::encode(b.rtmr[0]),
            "rtmr1": hex::encode(b.rtmr[1]),
            "rtmr2": hex::encode(b.rtmr[2]),
            "rtmr3": hex::encode(b.rtmr[3]),
            "report_data": hex::encode(b.report_data),
            "debug": td.debug(),
            "mrenclave": null,
            "mrsigner": null,
            "isvprodid": null,
            "isvsvn": null,
        }),
    );
    rep.field(
        "td_seam",
        json!({
            "mrsignerseam": hex::encode(b.mrsignerseam),
            "seam_attributes": hex::encode(b.seam_attributes),
        }),
    );
    rep.field(
        "td15",
        td.td15.as_ref().map(|x| {
            json!({
                "tee_tcb_svn2": hex::encode(x.tee_tcb_svn2),
                "mrservicetd": hex::encode(x.mrservicetd),
            })
        }),
    );
    rep.field(
        "td15ex",
        td.td15ex.as_ref().map(|x| {
            json!({
                "vmid": x.vmid,
                "td_id": hex::encode(x.td_id),
                "dev_info": hex::encode(x.dev_info),
                "init_service_td_hash": hex::encode(x.init_service_td_hash),
                "init_service_td_attributes": hex::encode(x.init_service_td_attributes),
                "init_cpu_svn": hex::encode(x.init_cpu_svn),
                "init_tee_tcb_svn": hex::encode(x.init_tee_tcb_svn),
                "init_tee_fmspc": hex::encode(x.init_tee_fmspc),
                "cur_service_td_hash": hex::encode(x.cur_service_td_hash),
                "cur_service_td_attributes": hex::encode(x.cur_service_td_attributes),
            })
        }),
    );
}

fn collateral_fields(rep: &mut AttestationReport, q: &TdxQuote, c: &TdxCollateral) {
    rep.field(
        "tcb_evaluation_data_number",
        c.tcb_info().tcb_evaluation_data_number,
    );
    if let Ok((start, end)) = windows(q, c).map(|w| overall(&w)) {
        rep.field("collateral_window", json!([utc(start), utc(end)]));
    }
}

fn pck_chain_match(q: &TdxQuote, c: &TdxCollateral) -> Result<String, String> {
    match c.pck_certificate_chain() {
        None => Ok("collateral carries no pck_certificate_chain; the quote's chain is used".into()),
        Some(theirs) if theirs == q.pck_chain() => Ok(
            "collateral pck_certificate_chain is identical to the quote's embedded chain".into(),
        ),
        Some(theirs) => {
            let same_leaf = theirs.first() == q.pck_chain().first();
            Err(format!(
                "collateral pck_certificate_chain ({} certificates) differs from the quote's \
                 embedded chain ({}); same leaf: {}. dcap-qvl would verify the collateral's \
                 chain instead of the quote's",
                theirs.len(),
                if same_leaf {
                    "the intermediates or root differ"
                } else {
                    "different PCK certificate"
                },
                if same_leaf { "yes" } else { "no" }
            ))
        }
    }
}

fn collateral_chains(q: &TdxQuote, c: &TdxCollateral) -> Result<String, String> {
    let chains: [(&str, &[Cert]); 3] = [
        ("tcb_info_issuer_chain", c.tcb_info_issuer_chain()),
        ("qe_identity_issuer_chain", c.qe_identity_issuer_chain()),
        ("pck_crl_issuer_chain", c.pck_crl_issuer_chain()),
    ];
    for (name, chain) in chains {
        let (Some(signer), Some(root), None) = (chain.first(), chain.get(1), chain.get(2)) else {
            return Err(format!("{name} is not [signer, root]"));
        };
        if !root.is_pinned_root() {
            return Err(format!(
                "{name} does not end in the embedded Intel SGX Root CA"
            ));
        }
        if !signer.is_signed_by(root) {
            return Err(format!(
                "{name}: {} is not signed by the root",
                signer.subject()
            ));
        }
    }
    let crl_ca = c.pck_crl_issuer_chain().first();
    if crl_ca != q.pck_chain().get(1) {
        return Err(format!(
            "pck_crl_issuer_chain's CA ({}) is not the quote's PCK CA ({})",
            crl_ca.map(Cert::subject).unwrap_or_default(),
            q.pck_chain().get(1).map(Cert::subject).unwrap_or_default()
        ));
    }
    Ok(
        "TCB Info, QE Identity and PCK CRL issuer chains end in the embedded root; \
        signers signed by it; PCK CRL issuer is the quote's PCK CA"
            .into(),
    )
}

/// A validity window of one collateral item.
struct Window {
    name: &'static str,
    start_label: &'static str,
    start: OffsetDateTime,
    end_label: &'static str,
    end: OffsetDateTime,
    /// Whether `end` itself is inside the window. A CRL's nextUpdate is
    /// not (webpki: expired at `time >= nextUpdate`); a certificate's
    /// notAfter and a TCB Info / QE Identity nextUpdate are (webpki,
    /// dcap-qvl).
    end_inclusive: bool,
}

impl Window {
    /// The last second inside the window.
    fn last(&self) -> OffsetDateTime {
        if self.end_inclusive {
            self.end
        } else {
            self.end
                .checked_sub(time::Duration::SECOND)
                .unwrap_or(self.end)
        }
    }
}

fn windows(q: &TdxQuote, c: &TdxCollateral) -> Result<Vec<Window>, TdxError> {
    let doc = |name, d: &super::collateral::SignedDocSummary| Window {
        name,
        start_label: "issueDate",
        start: d.issue_date,
        end_label: "nextUpdate",
        end: d.next_update,
        end_inclusive: true,
    };
    let crl = |name, d: &super::collateral::CrlSummary| Window {
        name,
        start_label: "thisUpdate",
        start: d.this_update,
        end_label: "nextUpdate",
        end: d.next_update,
        end_inclusive: false,
    };
    let mut out = vec![
        doc("TCBInfo", c.tcb_info()),
        doc("QEIdentity", c.qe_identity()),
        crl("root CA CRL", c.root_ca_crl()),
        crl("PCK CRL", c.pck_crl()),
    ];
    let chain = q.pck_chain();
    let certs: [(&'static str, Option<&Cert>); 6] = [
        ("PCK certificate", chain.first()),
        ("PCK CA certificate", chain.get(1)),
        ("Intel SGX Root CA", chain.get(2)),
        (
            "TCB Info signing certificate",
            c.tcb_info_issuer_chain().first(),
        ),
        (
            "QE Identity signing certificate",
            c.qe_identity_issuer_chain().first(),
        ),
        (
            "PCK CRL issuer certificate",
            c.pck_crl_issuer_chain().first(),
        ),
    ];
    for (name, cert) in certs {
        if let Some(cert) = cert {
            let (start, end) = cert.validity()?;
            out.push(Window {
                name,
                start_label: "notBefore",
                start,
                end_label: "notAfter",
                end,
                end_inclusive: true,
            });
        }
    }
    Ok(out)
}

fn overall(ws: &[Window]) -> (OffsetDateTime, OffsetDateTime) {
    let start = ws
        .iter()
        .map(|w| w.start)
        .max()
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    let end = ws
        .iter()
        .map(Window::last)
        .min()
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    (start, end)
}

fn freshness(q: &TdxQuote, c: &TdxCollateral, at: OffsetDateTime) -> Result<String, String> {
    let ws = windows(q, c).map_err(|e| e.to_string())?;
    let problems: Vec<String> = ws
        .iter()
        .filter_map(|w| {
            if at < w.start {
                Some(format!(
                    "{} not yet valid: {} {} is after {}",
                    w.name,
                    w.start_label,
                    utc(w.start),
                    utc(at)
                ))
            } else if at > w.last() {
                Some(format!(
                    "{} expired: {} {} is {} {}",
                    w.name,
                    w.end_label,
                    utc(w.end),
                    if w.end_inclusive {
                        "before"
                    } else {
                        "not after"
                    },
                    utc(at)
                ))
            } else {
                None
            }
        })
        .collect();
    if problems.is_empty() {
        let (start, end) = overall(&ws);
        Ok(format!(
            "all {} windows (TCBInfo, QEIdentity, 2 CRLs, 6 certificates) contain {}; \
             together valid {} .. {} (inclusive)",
            ws.len(),
            utc(at),
            utc(start),
            utc(end)
        ))
    } else {
        Err(problems.join("; "))
    }
}

fn policy_checks(run: &mut Run, q: &TdxQuote, policy: &Policy, verdict: Option<&DcapVerdict>) {
    let rules: [(&str, &'static str, CheckKind); 4] = [
        ("tdx.mrtd", id::POLICY_MRTD, CheckKind::Measurement),
        ("tdx.rtmr", id::POLICY_RTMR, CheckKind::Measurement),
        ("tdx.tcb_status", id::POLICY_TCB_STATUS, CheckKind::Tcb),
        ("tdx.advisory", id::POLICY_ADVISORIES, CheckKind::Tcb),
    ];
    let Some(v) = verdict.filter(|_| !run.failed()) else {
        for (_, check, kind) in rules {
            run.check(check, kind, || Ok(String::new()));
        }
        return;
    };
    let tdx = &policy.tdx;
    let violation = policy
        .check_tdx(q.mrtd(), q.rtmrs(), &v.tcb_status, &v.advisory_ids)
        .err();
    let at = violation
        .as_ref()
        .map(|viol| rules.iter().position(|(rule, _, _)| *rule == viol.rule()));
    let passes = [
        if tdx.mrtd.is_empty() {
            "any MRTD accepted (no allow-list)".to_string()
        } else {
            format!("MRTD in the allow-list ({} entries)", tdx.mrtd.len())
        },
        {
            let listed: Vec<String> = tdx
                .rtmr
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.is_empty())
                .map(|(i, _)| format!("RTMR{i}"))
                .collect();
            if listed.is_empty() {
                "any RTMRs accepted (no allow-lists)".to_string()
            } else {
                format!("{} in their allow-lists", listed.join(", "))
            }
        },
        format!("TCB status {} is allowed", v.tcb_status),
        if v.advisory_ids.is_empty() {
            "no advisories".to_string()
        } else {
            format!("advisories [{}] allowed", v.advisory_ids.join(", "))
        },
    ];
    for (i, ((_, check, kind), pass)) in rules.into_iter().zip(passes).enumerate() {
        match (&violation, at) {
            (Some(viol), Some(Some(k))) if i == k => run.record(check, kind, Err(viol.to_string())),
            (Some(_), Some(Some(k))) if i > k => run.rep.skip(
                check,
                kind,
                "not evaluated: kolm-policy reports the first violated rule only",
            ),
            (Some(_), Some(None)) => {}
            _ => run.record(check, kind, Ok(pass)),
        }
    }
    // A violation of a rule this module does not know: fail closed.
    if let (Some(viol), Some(None)) = (&violation, at) {
        run.record(id::POLICY, CheckKind::Tcb, Err(viol.to_string()));
    }
}

fn trailing(q: &TdxQuote) -> Result<String, String> {
    match q.trailing() {
        Trailing::None => Ok("no bytes after the signature data".into()),
        Trailing::ZeroPadding { len } => Ok(format!(
            "{len} zero bytes of padding after the signature data (ignored)"
        )),
        Trailing::Data {
            offset,
            len,
            first_nonzero,
        } => Err(TdxError::TrailingData {
            offset,
            len,
            first_nonzero,
        }
        .to_string()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn debug_rule_covers_every_tud_bit() {
        let production = Policy::production();
        let mut debug_ok = Policy::production();
        debug_ok.allow_debug = true;
        assert!(debug_check(0, &production).is_ok());
        for bit in 0..8 {
            let tud = 1u8 << bit;
            let err = debug_check(tud, &production).unwrap_err();
            assert!(err.contains("TD under debug"), "{err}");
            assert!(err.contains("debug"), "{err}");
            assert!(debug_check(tud, &debug_ok).unwrap().contains("allow_debug"));
        }
    }
}
