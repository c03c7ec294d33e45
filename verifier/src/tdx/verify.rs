//! The TDX verification pipeline: parse, own checks, the DCAP appraisal,
//! policy. Checks run in a fixed order; once one fails, the checks after it
//! are recorded as skipped (except the trailing-bytes check, which only needs
//! the parsed quote), so the verdict names the first failure.

use kolm_policy::{Platform, Policy, PolicyViolation};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use time::macros::format_description;

use crate::attested::{
    Claims, Evaluation, EvidenceKind, Expectations, Identity, Measurement, Tcb, TdxIdentity,
};
use crate::check::TdxCheck;
use kolm_format::timefmt;

use super::appraise::{self, DcapVerdict};
use super::collateral::TdxCollateral;
use super::error::TdxError;
use super::pki::{Anchor, Cert};
use super::quote::{TdxQuote, Trailing};

/// Why one TDX check failed; its text is the check's detail.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
enum CheckFailure {
    /// The quote or the collateral does not parse, or bytes trail the quote.
    #[error("{error}")]
    Structure { error: TdxError },
    #[error(
        "collateral pck_certificate_chain ({count} certificates) differs from the quote's \
         embedded chain ({}); same leaf: {}. dcap-qvl would verify the collateral's \
         chain instead of the quote's",
        if *same_leaf { "the intermediates or root differ" } else { "different PCK certificate" },
        if *same_leaf { "yes" } else { "no" }
    )]
    PckChainDiffers { count: usize, same_leaf: bool },
    #[error(
        "the quote's PCK chain does not end in the embedded Intel SGX Root CA (SHA-256 \
         44a0196b...74d3)"
    )]
    PckRootNotIntel,
    #[error("the quote's PCK chain does not end in {anchor} (sha256 {sha256})")]
    PckRootNotSim {
        anchor: &'static str,
        sha256: String,
    },
    #[error("PCK CA certificate ({ca}) is not signed by the root")]
    PckCaSignature { ca: String },
    #[error("PCK certificate is not signed by the PCK CA ({ca})")]
    PckSignature { ca: String },
    #[error("the root's self-signature does not verify")]
    RootSelfSignature,
    #[error("QE report signature does not verify with the PCK leaf key")]
    QeReportSignature,
    #[error("QE REPORTDATA is not SHA-256(attestation key || QE auth data) || 0^32")]
    QeReportData,
    #[error("quote signature does not verify with the attestation key")]
    QuoteSignature,
    #[error("{name} is not [signer, root]")]
    CollateralChainShape { name: &'static str },
    #[error("{name} does not end in {anchor}")]
    CollateralChainAnchor {
        name: &'static str,
        anchor: &'static str,
    },
    #[error("{name}: {signer} is not signed by the root")]
    CollateralChainSignature { name: &'static str, signer: String },
    #[error("pck_crl_issuer_chain's CA ({crl_ca}) is not the quote's PCK CA ({pck_ca})")]
    CrlIssuer { crl_ca: String, pck_ca: String },
    /// Collateral windows that do not contain the instant, `; `-joined.
    #[error("{}", join(problems))]
    Windows { problems: Vec<WindowProblem> },
    #[error("instant {at} is before 1970")]
    BeforeEpoch { at: String },
    /// A step of the DCAP appraisal (see `appraise`).
    #[error("{detail}")]
    Appraisal { detail: String },
    #[error("TD under debug (TD_ATTRIBUTES.TUD = {tud:#04x}, DEBUG bit {}): {violation}", tud & 1)]
    Debug { tud: u8, violation: PolicyViolation },
    #[error("{violation}")]
    Policy { violation: PolicyViolation },
    #[error("the expected report data is {expected} bytes; TDX REPORT_DATA is {actual}")]
    ReportDataLength { expected: usize, actual: usize },
    #[error("REPORT_DATA {actual} differs from the expected {expected}")]
    ReportData { actual: String, expected: String },
    #[error(
        "a nonce is expected, but a TDX quote has no nonce field (bind it into REPORT_DATA \
         instead)"
    )]
    NonceUnsupported,
    #[error(
        "a public key is expected, but a TDX quote has no public-key field (bind it into \
         REPORT_DATA instead)"
    )]
    PublicKeyUnsupported,
}

/// One collateral window that does not contain the verification instant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
enum WindowProblem {
    #[error("{name} not yet valid: {start_label} {start} is after {at}")]
    NotYetValid {
        name: &'static str,
        start_label: &'static str,
        start: String,
        at: String,
    },
    #[error(
        "{name} expired: {end_label} {end} is {} {at}",
        if *end_inclusive { "before" } else { "not after" }
    )]
    Expired {
        name: &'static str,
        end_label: &'static str,
        end: String,
        end_inclusive: bool,
        at: String,
    },
}

fn join(problems: &[WindowProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A check's outcome: its detail when it passes, why when it fails.
type Outcome = Result<String, CheckFailure>;

/// Records checks into an [`Evaluation`], skipping those after the first
/// failure.
struct Run {
    ev: Evaluation,
    first_failure: Option<TdxCheck>,
}

impl Run {
    fn record(&mut self, id: TdxCheck, outcome: Outcome) {
        match outcome {
            Ok(detail) => self.ev.checks.pass(id, detail),
            Err(failure) => {
                self.ev.checks.fail(id, failure.to_string());
                self.first_failure.get_or_insert(id);
            }
        }
    }

    /// Runs `f` unless an earlier check failed.
    fn check(&mut self, id: TdxCheck, f: impl FnOnce() -> Outcome) {
        match self.first_failure {
            Some(first) => self.ev.checks.skip(id, format!("not run: {first} failed")),
            None => {
                let outcome = f();
                self.record(id, outcome);
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

/// The checks skipped when the quote or the collateral does not parse, in
/// report order. The trailing-bytes check runs whenever the quote parsed.
const AFTER_FORMAT: &[TdxCheck] = &[
    TdxCheck::PckChainMatch,
    TdxCheck::PckChain,
    TdxCheck::QeReportSignature,
    TdxCheck::QeReportData,
    TdxCheck::QuoteSignature,
    TdxCheck::CollateralChain,
    TdxCheck::CollateralFreshness,
    TdxCheck::Dcap,
    TdxCheck::Debug,
    TdxCheck::PolicyPlatform,
    TdxCheck::PolicyMrtd,
    TdxCheck::PolicyRtmr,
    TdxCheck::PolicyTcbStatus,
    TdxCheck::PolicyAdvisories,
    TdxCheck::PolicyConfig,
    TdxCheck::BindingReportData,
];

/// The whole pipeline over a quote and its collateral (parsed, or why not).
///
/// With `anchor` [`Anchor::Sim`] (the kolm simulated TEE's TDX form, only
/// ever from [`crate::sim`]), every chain must end in that root instead of
/// Intel's, the evaluation is of kind [`EvidenceKind::Simulated`] with
/// claims of platform `simulated`, and the policy rules that pin a real
/// Intel TD (`tdx.policy.platform`, `tdx.policy.mrtd`, `tdx.policy.rtmr`,
/// `tdx.policy.config`) are skipped, as the Nitro form skips Nitro's.
pub(crate) fn run(
    quote_bytes: &[u8],
    collateral: Result<&TdxCollateral, &TdxError>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
    platform: Platform,
    anchor: Anchor<'_>,
) -> Evaluation {
    let kind = if anchor.is_sim() {
        EvidenceKind::Simulated
    } else {
        EvidenceKind::Tdx
    };
    let mut run = Run {
        ev: Evaluation::new(kind, at),
        first_failure: None,
    };

    // 1. Structure.
    let quote = TdxQuote::parse_structure(quote_bytes);
    run.record(
        TdxCheck::QuoteFormat,
        quote
            .as_ref()
            .map(describe_quote)
            .map_err(|e| CheckFailure::Structure { error: e.clone() }),
    );
    run.record(
        TdxCheck::CollateralFormat,
        collateral
            .map(describe_collateral)
            .map_err(|e| CheckFailure::Structure { error: e.clone() }),
    );
    let sigs = quote.as_ref().ok().map(|q| Signatures::of(q, anchor));
    if let (Ok(q), Some(s)) = (quote.as_ref(), sigs.as_ref()) {
        quote_fields(&mut run.ev, q, s);
        run.ev.claims = Some(claims(q, None, platform, anchor));
    }
    let (Ok(quote), Ok(collateral), Some(sigs)) = (quote.as_ref(), collateral, sigs) else {
        format_failed(&mut run, quote.as_ref(), expect);
        return run.ev;
    };
    collateral_fields(&mut run.ev, quote, collateral);

    // 2. to 5.: the verifier's own checks.
    own_checks(&mut run, quote, collateral, &sigs, anchor, at);

    // 6. The DCAP appraisal: its steps, then dcap-qvl (see `appraise`).
    let verdict = dcap(&mut run, quote, collateral, at, platform, anchor);

    // 7. Policy.
    policy(&mut run, quote, expect, platform, verdict.as_ref(), anchor);

    // 8. Trailing bytes: outside every signature and length field, so this
    // comes after the appraisal; it runs even after a failure.
    run.record(TdxCheck::TrailingData, trailing(quote));
    run.ev
}

/// What is recorded when the quote or the collateral does not parse: the
/// checks after the format ones are skipped; the trailing-bytes check runs
/// on a parsed quote.
fn format_failed(run: &mut Run, quote: Result<&TdxQuote, &TdxError>, expect: &Expectations<'_>) {
    let first = run.first_failure.unwrap_or(TdxCheck::QuoteFormat);
    for &id in AFTER_FORMAT {
        run.ev.checks.skip(id, format!("not run: {first} failed"));
    }
    unsupported_expectations(run, expect);
    match quote {
        Ok(q) => run.record(TdxCheck::TrailingData, trailing(q)),
        Err(_) => run
            .ev
            .checks
            .skip(TdxCheck::TrailingData, format!("not run: {first} failed")),
    }
}

/// Checks 2 to 5: the collateral's PCK chain is the quote's; the quote's
/// own signatures and chain; the collateral's issuer chains and windows.
fn own_checks(
    run: &mut Run,
    quote: &TdxQuote,
    collateral: &TdxCollateral,
    sigs: &Signatures,
    anchor: Anchor<'_>,
    at: OffsetDateTime,
) {
    // 2. The collateral's PCK chain, which dcap-qvl would prefer over the
    // quote's, must be the quote's.
    run.check(TdxCheck::PckChainMatch, || {
        pck_chain_match(quote, collateral)
    });

    // 3. The quote's own signatures and chain.
    run.check(TdxCheck::PckChain, || sigs.pck_chain(quote, anchor));
    run.check(TdxCheck::QeReportSignature, || {
        if sigs.qe_report_sig_by_pck {
            Ok("QE report signed by the PCK leaf key".into())
        } else {
            Err(CheckFailure::QeReportSignature)
        }
    });
    run.check(TdxCheck::QeReportData, || {
        if sigs.qe_report_data_binds_ak {
            Ok("QE REPORTDATA = SHA-256(attestation key || QE auth data) || 0^32".into())
        } else {
            Err(CheckFailure::QeReportData)
        }
    });
    run.check(TdxCheck::QuoteSignature, || {
        if sigs.quote_sig {
            Ok(format!(
                "header and TD report ({} bytes) signed by the attestation key",
                quote.signed_bytes().len()
            ))
        } else {
            Err(CheckFailure::QuoteSignature)
        }
    });

    // 4. Collateral issuer chains, 5. windows.
    run.check(TdxCheck::CollateralChain, || {
        collateral_chains(quote, collateral, anchor)
    });
    run.check(TdxCheck::CollateralFreshness, || {
        freshness(quote, collateral, at)
    });
}

/// Check 6, the DCAP appraisal: its steps, then dcap-qvl (see `appraise`). A
/// failing step is recorded under its own id in place of `tdx.dcap`.
fn dcap(
    run: &mut Run,
    quote: &TdxQuote,
    collateral: &TdxCollateral,
    at: OffsetDateTime,
    platform: Platform,
    anchor: Anchor<'_>,
) -> Option<DcapVerdict> {
    let mut verdict: Option<DcapVerdict> = None;
    if run.failed() {
        run.check(TdxCheck::Dcap, || Ok(String::new()));
    } else {
        match u64::try_from(at.unix_timestamp()) {
            Err(_) => run.record(
                TdxCheck::CollateralFreshness,
                Err(CheckFailure::BeforeEpoch { at: utc(at) }),
            ),
            Ok(secs) => match appraise::appraise(quote, collateral, secs, anchor) {
                Ok(v) => {
                    run.record(
                        TdxCheck::Dcap,
                        Ok(format!(
                            "dcap-qvl 0.7.1: collateral signatures, chains to {} with CRLs, QE \
                             identity and TCB level verified; TCB status {} (platform {}, QE \
                             {}), advisories [{}]",
                            anchor.name(),
                            v.tcb_status,
                            v.platform_status,
                            v.qe_status,
                            v.advisory_ids.join(", ")
                        )),
                    );
                    run.ev.fields.insert("tcb_status", v.tcb_status.clone());
                    run.ev.fields.insert("advisory_ids", v.advisory_ids.clone());
                    run.ev.claims = Some(claims(quote, Some(&v), platform, anchor));
                    verdict = Some(v);
                }
                Err(f) => run.record(f.id, Err(CheckFailure::Appraisal { detail: f.detail })),
            },
        }
    }
    verdict
}

/// Check 7: the policy's rules and the REPORT_DATA binding.
fn policy(
    run: &mut Run,
    quote: &TdxQuote,
    expect: &Expectations<'_>,
    platform: Platform,
    verdict: Option<&DcapVerdict>,
    anchor: Anchor<'_>,
) {
    let policy = expect.policy;
    let td = quote.td_report();
    run.check(TdxCheck::Debug, || debug_check(td.tud(), policy));
    // The platform this quote proves (behind the Azure paravisor:
    // azure-tdx, which a policy may allow alone).
    if anchor.is_sim() {
        // A simulation is no Intel TD: the rules that pin one do not apply
        // (an artifact's `policy` check applies `allowed_platforms` to
        // `simulated`).
        for id in [
            TdxCheck::PolicyPlatform,
            TdxCheck::PolicyMrtd,
            TdxCheck::PolicyRtmr,
            TdxCheck::PolicyConfig,
        ] {
            run.ev.checks.skip(
                id,
                "not applied: simulated evidence; the rule pins a real Intel TD",
            );
        }
    } else {
        run.check(TdxCheck::PolicyPlatform, || {
            match policy.check_platform(platform) {
                Ok(()) => Ok(format!("{platform} is an allowed platform")),
                Err(violation) => Err(CheckFailure::Policy { violation }),
            }
        });
    }
    policy_checks(run, quote, policy, verdict, anchor.is_sim());
    match expect.report_data.as_deref() {
        None if !run.failed() => run
            .ev
            .checks
            .skip(TdxCheck::BindingReportData, "no expected REPORT_DATA given"),
        expected => run.check(TdxCheck::BindingReportData, || {
            binding(quote.report_data(), expected)
        }),
    }
    unsupported_expectations(run, expect);
}

/// The typed claims of a parsed quote; the TCB is the appraisal's (an empty
/// status before it ran). A sim quote's claims are platform `simulated`
/// with their own measurement, TCB and identity types, so that no caller
/// can take them for a TD's.
fn claims(
    q: &TdxQuote,
    verdict: Option<&DcapVerdict>,
    platform: Platform,
    anchor: Anchor<'_>,
) -> Claims {
    let base = &q.td_report().base;
    let identity = Box::new(TdxIdentity {
        mrtd: base.mrtd,
        rtmr: base.rtmr,
        mrconfigid: base.mrconfigid,
        mrowner: base.mrowner,
        mrownerconfig: base.mrownerconfig,
    });
    let (platform, measurement, tcb, identity) = if anchor.is_sim() {
        (
            Platform::Simulated,
            Measurement::SimMrtd(*q.mrtd()),
            Tcb::Simulated,
            Identity::SimulatedTdx(identity),
        )
    } else {
        (
            platform,
            Measurement::TdxMrtd(*q.mrtd()),
            Tcb::Tdx {
                status: verdict.map(|v| v.tcb_status.clone()).unwrap_or_default(),
                advisories: verdict.map(|v| v.advisory_ids.clone()).unwrap_or_default(),
            },
            Identity::Tdx(identity),
        )
    };
    Claims {
        platform,
        measurement,
        report_data: q.report_data().to_vec(),
        tcb,
        debug: q.td_report().debug(),
        identity,
    }
}

fn binding(actual: &[u8; 64], expected: Option<&[u8]>) -> Outcome {
    match expected {
        Some(e) if e == actual.as_slice() => Ok("REPORT_DATA equals the expected value".into()),
        Some(e) if e.len() != actual.len() => Err(CheckFailure::ReportDataLength {
            expected: e.len(),
            actual: actual.len(),
        }),
        Some(e) => Err(CheckFailure::ReportData {
            actual: hex::encode(actual),
            expected: hex::encode(e),
        }),
        None => Ok("no expected REPORT_DATA given".into()),
    }
}

/// A TDX quote has no nonce and no public-key field: expecting one cannot
/// be satisfied (fail closed). Bind such values into REPORT_DATA instead.
fn unsupported_expectations(run: &mut Run, expect: &Expectations<'_>) {
    if expect.nonce.is_some() {
        run.record(TdxCheck::BindingNonce, Err(CheckFailure::NonceUnsupported));
    }
    if expect.public_key.is_some() {
        run.record(
            TdxCheck::BindingPublicKey,
            Err(CheckFailure::PublicKeyUnsupported),
        );
    }
}

/// Rule `debug` on TD_ATTRIBUTES.TUD (bits 7:0). Bit 0 is DEBUG; bits 4..6
/// (profiling) and the reserved ones also mean "TD under debug", which the
/// TDX module ABI says makes the TD untrusted. dcap-qvl's own check of these
/// bits is switched off (`allow_debug(true)`) so the policy decides.
fn debug_check(tud: u8, policy: &Policy) -> Outcome {
    match policy.check_debug(tud != 0) {
        Ok(()) if tud == 0 => Ok("not a debug TD (TD_ATTRIBUTES.TUD = 0x00)".into()),
        Ok(()) => Ok(format!(
            "TD under debug (TD_ATTRIBUTES.TUD = {tud:#04x}) accepted: policy allow_debug = true"
        )),
        Err(violation) => Err(CheckFailure::Debug { tud, violation }),
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
            format!(" + {len} trailing bytes (see {})", TdxCheck::TrailingData)
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
    fn of(q: &TdxQuote, anchor: Anchor<'_>) -> Signatures {
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
            root_pinned: root.is_some_and(|r| r.is_anchor(anchor)),
        }
    }

    fn pck_chain(&self, q: &TdxQuote, anchor: Anchor<'_>) -> Outcome {
        if !self.root_pinned {
            return Err(match anchor {
                Anchor::Intel => CheckFailure::PckRootNotIntel,
                Anchor::Sim(root) => CheckFailure::PckRootNotSim {
                    anchor: anchor.name(),
                    sha256: hex::encode(root.sha256()),
                },
            });
        }
        let ca = q.pck_chain().get(1).map(Cert::subject).unwrap_or_default();
        if !self.chain1 {
            return Err(CheckFailure::PckCaSignature { ca });
        }
        if !self.chain0 {
            return Err(CheckFailure::PckSignature { ca });
        }
        if !self.root_self {
            return Err(CheckFailure::RootSelfSignature);
        }
        Ok(match anchor {
            Anchor::Intel => {
                format!("PCK certificate <- {ca} <- Intel SGX Root CA (pinned); signatures verify")
            }
            Anchor::Sim(_) => format!(
                "PCK certificate <- {ca} <- {} (pinned); signatures verify",
                anchor.name()
            ),
        })
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

fn quote_fields(ev: &mut Evaluation, q: &TdxQuote, sigs: &Signatures) {
    let rep = &mut ev.fields;
    let td = q.td_report();
    let b = &td.base;
    rep.insert("version", q.version());
    rep.insert("body_type", td.body_type);
    rep.insert("tee_type", format!("{:#x}", q.header().tee_type));
    let ext = q.pck_extension();
    rep.insert("fmspc", hex::encode(ext.fmspc));
    if let Some(leaf) = q.pck_chain().first() {
        rep.insert("pck_issuer", leaf.issuer());
        if let Ok((nb, na)) = leaf.validity() {
            rep.insert("pck_validity", json!([utc_offset(nb), utc_offset(na)]));
        }
    }
    rep.insert("pck_sgx_tcb_comps", ext.sgx_tcb_comps.to_vec());
    rep.insert("pck_pcesvn", ext.pcesvn);
    let qe = q.qe_report();
    rep.insert(
        "qe_report",
        json!({
            "mrenclave": hex::encode(qe.mrenclave),
            "mrsigner": hex::encode(qe.mrsigner),
            "isvprodid": qe.isvprodid,
            "isvsvn": qe.isvsvn,
        }),
    );
    rep.insert("internal_sig_checks", sigs.json());
    rep.insert(
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
    rep.insert(
        "td_seam",
        json!({
            "mrsignerseam": hex::encode(b.mrsignerseam),
            "seam_attributes": hex::encode(b.seam_attributes),
        }),
    );
    rep.insert(
        "td15",
        td.td15.as_ref().map(|x| {
            json!({
                "tee_tcb_svn2": hex::encode(x.tee_tcb_svn2),
                "mrservicetd": hex::encode(x.mrservicetd),
            })
        }),
    );
    rep.insert(
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

fn collateral_fields(ev: &mut Evaluation, q: &TdxQuote, c: &TdxCollateral) {
    let rep = &mut ev.fields;
    rep.insert(
        "tcb_evaluation_data_number",
        c.tcb_info().tcb_evaluation_data_number,
    );
    if let Ok((start, end)) = windows(q, c).map(|w| overall(&w)) {
        rep.insert("collateral_window", json!([utc(start), utc(end)]));
    }
}

fn pck_chain_match(q: &TdxQuote, c: &TdxCollateral) -> Outcome {
    match c.pck_certificate_chain() {
        None => Ok("collateral carries no pck_certificate_chain; the quote's chain is used".into()),
        Some(theirs) if theirs == q.pck_chain() => Ok(
            "collateral pck_certificate_chain is identical to the quote's embedded chain".into(),
        ),
        Some(theirs) => {
            let same_leaf = theirs.first() == q.pck_chain().first();
            Err(CheckFailure::PckChainDiffers {
                count: theirs.len(),
                same_leaf,
            })
        }
    }
}

fn collateral_chains(q: &TdxQuote, c: &TdxCollateral, anchor: Anchor<'_>) -> Outcome {
    let chains: [(&'static str, &[Cert]); 3] = [
        ("tcb_info_issuer_chain", c.tcb_info_issuer_chain()),
        ("qe_identity_issuer_chain", c.qe_identity_issuer_chain()),
        ("pck_crl_issuer_chain", c.pck_crl_issuer_chain()),
    ];
    for (name, chain) in chains {
        let (Some(signer), Some(root), None) = (chain.first(), chain.get(1), chain.get(2)) else {
            return Err(CheckFailure::CollateralChainShape { name });
        };
        if !root.is_anchor(anchor) {
            return Err(CheckFailure::CollateralChainAnchor {
                name,
                anchor: anchor.name(),
            });
        }
        if !signer.is_signed_by(root) {
            return Err(CheckFailure::CollateralChainSignature {
                name,
                signer: signer.subject(),
            });
        }
    }
    let crl_ca = c.pck_crl_issuer_chain().first();
    if crl_ca != q.pck_chain().get(1) {
        return Err(CheckFailure::CrlIssuer {
            crl_ca: crl_ca.map(Cert::subject).unwrap_or_default(),
            pck_ca: q.pck_chain().get(1).map(Cert::subject).unwrap_or_default(),
        });
    }
    Ok(format!(
        "TCB Info, QE Identity and PCK CRL issuer chains end in {}; signers signed by it; PCK \
         CRL issuer is the quote's PCK CA",
        anchor.name()
    ))
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

fn freshness(q: &TdxQuote, c: &TdxCollateral, at: OffsetDateTime) -> Outcome {
    let ws = windows(q, c).map_err(|error| CheckFailure::Structure { error })?;
    let problems: Vec<WindowProblem> = ws
        .iter()
        .filter_map(|w| {
            if at < w.start {
                Some(WindowProblem::NotYetValid {
                    name: w.name,
                    start_label: w.start_label,
                    start: utc(w.start),
                    at: utc(at),
                })
            } else if at > w.last() {
                Some(WindowProblem::Expired {
                    name: w.name,
                    end_label: w.end_label,
                    end: utc(w.end),
                    end_inclusive: w.end_inclusive,
                    at: utc(at),
                })
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
        Err(CheckFailure::Windows { problems })
    }
}

/// Which of the four policy checks a violation of `Policy::check_tdx` is.
fn policy_rule(v: &PolicyViolation) -> Option<usize> {
    match v {
        PolicyViolation::TdxMrtd { .. } => Some(0),
        PolicyViolation::TdxRtmr { .. } => Some(1),
        PolicyViolation::TdxTcbStatus { .. } => Some(2),
        PolicyViolation::TdxAdvisory { .. } => Some(3),
        _ => None,
    }
}

/// The policy's TDX rules; with `sim`, the TCB status and advisory rules
/// only (the others pin a real Intel TD and were skipped by the caller).
fn policy_checks(
    run: &mut Run,
    q: &TdxQuote,
    policy: &Policy,
    verdict: Option<&DcapVerdict>,
    sim: bool,
) {
    let rules = [
        TdxCheck::PolicyMrtd,
        TdxCheck::PolicyRtmr,
        TdxCheck::PolicyTcbStatus,
        TdxCheck::PolicyAdvisories,
    ];
    // Sim: the same rules with the TD pins (MRTD, RTMR and configuration
    // allow-lists) left out; their checks were recorded as skipped.
    let unpinned;
    let policy = if sim {
        let mut p = policy.clone();
        p.tdx.mrtd.clear();
        p.tdx.rtmr = Default::default();
        p.tdx.mrconfigid.clear();
        p.tdx.mrowner.clear();
        p.tdx.mrownerconfig.clear();
        unpinned = p;
        &unpinned
    } else {
        policy
    };
    let recorded =
        |c: &TdxCheck| !sim || matches!(c, TdxCheck::PolicyTcbStatus | TdxCheck::PolicyAdvisories);
    let Some(v) = verdict.filter(|_| !run.failed()) else {
        for check in rules
            .into_iter()
            .chain([TdxCheck::PolicyConfig])
            .filter(recorded)
        {
            run.check(check, || Ok(String::new()));
        }
        return;
    };
    let tdx = &policy.tdx;
    let violation = policy
        .check_tdx(q.mrtd(), q.rtmrs(), &v.tcb_status, &v.advisory_ids)
        .err();
    let at = violation.as_ref().map(policy_rule);
    let passes = pass_details(tdx, v);
    for (i, (check, pass)) in rules.into_iter().zip(passes).enumerate() {
        if !recorded(&check) {
            continue;
        }
        match (&violation, at) {
            (Some(viol), Some(Some(k))) if i == k => run.record(
                check,
                Err(CheckFailure::Policy {
                    violation: viol.clone(),
                }),
            ),
            (Some(_), Some(Some(k))) if i > k => run.ev.checks.skip(
                check,
                "not evaluated: kolm-policy reports the first violated rule only",
            ),
            (Some(_), Some(None)) => {}
            _ => run.record(check, Ok(pass)),
        }
    }
    // A violation of a rule this module does not know: fail closed.
    if let (Some(viol), Some(None)) = (&violation, at) {
        run.record(
            TdxCheck::Policy,
            Err(CheckFailure::Policy {
                violation: viol.clone(),
            }),
        );
    }
    if sim {
        return;
    }
    config_check(run, q, policy);
}

/// What each of the four policy checks says when it passes.
fn pass_details(tdx: &kolm_policy::TdxPolicy, v: &DcapVerdict) -> [String; 4] {
    [
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
    ]
}

/// Rule `tdx.policy.config`: MRCONFIGID, MROWNER, MROWNERCONFIG against
/// their allow-lists, if the policy has any.
fn config_check(run: &mut Run, q: &TdxQuote, policy: &Policy) {
    let tdx = &policy.tdx;
    // Host-supplied at TD creation.
    let base = &q.td_report().base;
    let listed: Vec<&str> = [
        ("MRCONFIGID", &tdx.mrconfigid),
        ("MROWNER", &tdx.mrowner),
        ("MROWNERCONFIG", &tdx.mrownerconfig),
    ]
    .into_iter()
    .filter(|(_, l)| !l.is_empty())
    .map(|(n, _)| n)
    .collect();
    if listed.is_empty() {
        run.ev.checks.skip(
            TdxCheck::PolicyConfig,
            "policy has no MRCONFIGID, MROWNER or MROWNERCONFIG allow-list",
        );
    } else {
        run.check(TdxCheck::PolicyConfig, || {
            policy
                .check_tdx_config(&base.mrconfigid, &base.mrowner, &base.mrownerconfig)
                .map(|()| format!("{} in their allow-lists", listed.join(", ")))
                .map_err(|violation| CheckFailure::Policy { violation })
        });
    }
}

fn trailing(q: &TdxQuote) -> Outcome {
    match q.trailing() {
        Trailing::None => Ok("no bytes after the signature data".into()),
        Trailing::ZeroPadding { len } => Ok(format!(
            "{len} zero bytes of padding after the signature data (ignored)"
        )),
        Trailing::Data {
            offset,
            len,
            first_nonzero,
        } => Err(CheckFailure::Structure {
            error: TdxError::TrailingData {
                offset,
                len,
                first_nonzero,
            },
        }),
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
            let err = debug_check(tud, &production).unwrap_err().to_string();
            assert!(err.contains("TD under debug"), "{err}");
            assert!(err.contains("debug"), "{err}");
            assert!(debug_check(tud, &debug_ok).unwrap().contains("allow_debug"));
        }
    }
}
