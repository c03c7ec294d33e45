//! Offline verification of AMD SEV-SNP attestation reports.
//!
//! [`verify`] checks an [`SnpEvidence`] (the binary report, its VCEK or VLEK
//! certificate, optionally AMD's ASK/ARK chain; else the one embedded in
//! this crate for the report's product) at an instant given by the caller,
//! against [`Expectations`]. It returns [`Attested`] (platform `sev-snp`,
//! [`Measurement::Snp`], REPORT_DATA, [`Tcb::Snp`], the DEBUG bit) or a
//! [`Rejection`] naming the first failing check; both keep one result per
//! [`SnpCheck`], in order, and the report's fields for display.
//! [`evaluate`] gives the same before the verdict (Azure nests it).
//! [`verify_chain`] checks a VCEK/VLEK chain alone; [`parse_snp_report`]
//! only parses; [`decode_report_forms`] turns hex text into the binary form.
//!
//! Design notes, the list of checks and what comes from the `sev` crate are
//! in `docs/attestation-snp.md`.

pub mod certs;
pub mod crl;
pub mod error;
pub mod report;
pub mod roots;

use kolm_policy::{Platform, Policy, PolicyViolation, SnpPolicy};
use serde_json::Value;
use time::OffsetDateTime;

use crate::attested::{
    Attested, Claims, Evaluation, EvidenceKind, Expectations, Fields, Identity, Measurement,
    Rejection, Tcb,
};
use crate::check::{Checklist, SnpCheck};

pub use certs::{CaPair, Leaf, LeafKind, SnpCert};
pub use error::{CertRole, SnpError};
pub use report::{
    Cpuid, FirmwareVersion, GuestPolicy, KeyInfo, RawTcb, ReportVersion, SigningKey, SnpReport,
    TcbLayout, TcbVersion, decode_report_forms,
};
pub use roots::Product;

/// `platform` of the reports this module writes.
pub const PLATFORM: &str = "sev-snp";

/// The evidence of one SEV-SNP guest.
#[derive(Debug, Clone, Copy)]
pub struct SnpEvidence<'a> {
    /// The ATTESTATION_REPORT: exactly [`report::REPORT_LEN`] bytes (hex text is decoded by
    /// [`decode_report_forms`] before, by the caller).
    pub report: &'a [u8],
    /// The VCEK or VLEK certificate, DER or PEM.
    pub vcek: &'a [u8],
    /// PEM bundle of the ASK (ASVK for a VLEK) and the ARK. With `None`, the
    /// chain embedded in this crate for the report's product is used. A
    /// supplied ARK must be AMD's (byte- or key-equal to the embedded one).
    pub chain: Option<&'a [u8]>,
}

/// Parses a report given as raw evidence: [`report::REPORT_LEN`] bytes, or their hex
/// spelling ([`decode_report_forms`]). Checks size, VERSION (2, 3, 5),
/// SIGNATURE_ALGO (1), KEY_INFO and every reserved byte; nothing
/// cryptographic. Never panics, whatever the input. [`SnpReport::from_raw`]
/// takes the binary form only.
pub fn parse_snp_report(bytes: &[u8]) -> Result<SnpReport, SnpError> {
    let raw = decode_report_forms(bytes)?;
    SnpReport::from_raw(&raw)
}

/// Verifies SEV-SNP evidence: [`evaluate`], then the verdict.
pub fn verify(
    evidence: &SnpEvidence<'_>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Result<Attested, Rejection> {
    let out = evaluate(evidence, expect, at).conclude(expect.policy);
    match &out {
        Ok(_) => tracing::debug!("sev-snp report verified"),
        Err(r) => tracing::debug!(reason = %r.reason, "sev-snp report rejected"),
    }
    out
}

/// Runs every check on SEV-SNP evidence at `at`, even after one fails, as
/// far as their inputs allow.
///
/// * the report, the VCEK/VLEK and the chain: see [`SnpEvidence`];
/// * `expect.policy`: debug, platform (`sev-snp`), MEASUREMENT, HOST_DATA,
///   ID_KEY_DIGEST, MIGRATE_MA, VMPL, minimum TCB;
/// * `expect.report_data`: if given, REPORT_DATA must equal it (Azure passes
///   none: it checks its runtime-data binding itself);
/// * `expect.nonce`, `expect.public_key`: an SEV-SNP report has no such
///   fields, so expecting either fails `snp.binding.report_data`.
///
/// The claims are set as soon as the report parses; the checks say whether
/// they can be believed.
pub fn evaluate(
    evidence: &SnpEvidence<'_>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Evaluation {
    evaluate_on(evidence, expect, at, Platform::SevSnp)
}

/// [`evaluate`] for a report that proves `platform`: `sev-snp`, or
/// `azure-sev-snp` for the report behind the Azure paravisor, so that the
/// policy's `allowed_platforms` is asked about the platform the evidence
/// really proves.
pub(crate) fn evaluate_on(
    evidence: &SnpEvidence<'_>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
    platform: Platform,
) -> Evaluation {
    evaluate_parsed(
        SnpReport::from_raw(evidence.report),
        evidence.vcek,
        evidence.chain,
        expect,
        at,
        platform,
        ChainAnchor::Amd,
    )
}

/// What a VCEK chain must end in.
///
/// Crate-private on purpose, and not a field of [`SnpEvidence`]: platform
/// `sev-snp` (and Azure's) evidence is only ever checked against AMD's
/// ARKs embedded in this crate. The one other anchor is a kolm sim SNP
/// root that a caller trusts for platform `simulated`
/// ([`crate::sim`], `--dangerous-trust-sim-root`); no public API lets
/// real-platform evidence chain to it:
///
/// ```compile_fail
/// let _ = kolm_verifier::snp::ChainAnchor::Amd;
/// ```
#[derive(Debug, Clone, Copy)]
pub(crate) enum ChainAnchor<'a> {
    /// AMD's ARK for the report's product, embedded in this crate.
    Amd,
    /// The simulated TEE's stand-in ARK (its exact bytes), and the common
    /// names its ARK and ASK carry instead of `ARK-<product>` and
    /// `SEV-<product>`.
    Sim {
        ark: &'a SnpCert,
        ark_cn: &'a str,
        ask_cn: &'a str,
    },
}

impl ChainAnchor<'_> {
    fn is_sim(self) -> bool {
        matches!(self, ChainAnchor::Sim { .. })
    }
}

/// The SEV-SNP checks of the simulated TEE's SEV-SNP form
/// ([`crate::sim`]): [`evaluate`] with the chain anchored at the sim ARK
/// `anchor`, which the evidence's own ASK/ARK pair (`chain`, required)
/// must end in, byte for byte. Report structure, report signature, VCEK
/// hwID and TCB extensions, the chain's names, constraints, signatures and
/// validity, DEBUG, MIGRATE_MA, VMPL and REPORT_DATA are checked as for
/// real evidence; what pins AMD's products and a real guest is skipped:
/// `snp.policy.platform` (the platform is `simulated`, which an artifact's
/// `policy` check judges), `snp.policy.measurement`, `snp.policy.host_data`,
/// `snp.policy.id_key` and `snp.policy.tcb` (allow-lists of real guests and
/// AMD firmware levels; the values are stand-ins).
pub(crate) fn evaluate_sim(
    evidence: &SnpEvidence<'_>,
    anchor: ChainAnchor<'_>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Evaluation {
    evaluate_parsed(
        SnpReport::from_raw(evidence.report),
        evidence.vcek,
        evidence.chain,
        expect,
        at,
        Platform::Simulated,
        anchor,
    )
}

fn evaluate_parsed(
    parsed: Result<SnpReport, SnpError>,
    vcek: &[u8],
    chain: Option<&[u8]>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
    platform: Platform,
    anchor: ChainAnchor<'_>,
) -> Evaluation {
    let mut out = Evaluation::new(EvidenceKind::SevSnp, at);
    let parsed = match parsed {
        Ok(r) => {
            out.checks.pass(
                SnpCheck::ReportFormat,
                format!(
                    "ATTESTATION_REPORT v{}, {} bytes, ECDSA P-384/SHA-384, reserved fields zero",
                    r.version().number(),
                    report::REPORT_LEN
                ),
            );
            Some(r)
        }
        Err(e) => {
            out.checks.fail(SnpCheck::ReportFormat, e.to_string());
            None
        }
    };
    let state = check_chain(&mut out, vcek, chain, at, parsed.as_ref(), anchor);
    match &parsed {
        Some(r) => {
            let layout = state
                .product
                .map_or(report_layout_guess(r), Product::tcb_layout);
            for (name, value) in r.fields(layout) {
                out.fields.insert(name, value);
            }
            check_report(&mut out, r, &state, expect, platform, anchor.is_sim());
            out.claims = Some(claims(r, platform));
        }
        None => out
            .checks
            .skip_unrecorded(SnpCheck::ALL, "not run: the report did not parse"),
    }
    out
}

/// The typed claims of a parsed report.
fn claims(r: &SnpReport, platform: Platform) -> Claims {
    Claims {
        platform,
        measurement: Measurement::Snp(*r.measurement()),
        report_data: r.report_data().to_vec(),
        tcb: Tcb::Snp {
            reported: u64::from_le_bytes(r.reported_tcb().0),
        },
        debug: r.policy().debug_allowed(),
        identity: Identity::Snp {
            measurement: *r.measurement(),
            host_data: *r.host_data(),
            id_key_digest: *r.id_key_digest(),
            author_key_digest: *r.author_key_digest(),
        },
    }
}

/// A VCEK/VLEK certificate chain that verified on its own.
#[derive(Debug, Clone)]
pub struct VerifiedChain {
    pub verified_at: OffsetDateTime,
    /// The product whose embedded ARK the chain ends in.
    pub product: Product,
    /// VCEK or VLEK.
    pub leaf_kind: LeafKind,
    pub checks: Checklist,
    pub fields: Fields,
}

/// Verifies a VCEK/VLEK certificate chain alone (no report): leaf format,
/// product (from the leaf's issuer and productName), ARK, ASK/ASVK, leaf
/// signature and validity at `at`. For a chain without a report, such as
/// the Turin sample. Only the chain's checks are recorded (the report's are
/// not listed).
pub fn verify_chain(
    vcek: &[u8],
    chain: Option<&[u8]>,
    at: OffsetDateTime,
) -> Result<VerifiedChain, Rejection> {
    let mut out = Evaluation::new(EvidenceKind::SevSnp, at);
    let state = check_chain(&mut out, vcek, chain, at, None, ChainAnchor::Amd);
    if let Some(leaf) = &state.leaf {
        out.fields.insert("signing_key", leaf.kind().name());
    }
    let reason = match out.checks.first_failure() {
        Some(f) => Some(format!("{}: {}", f.id, f.detail)),
        None if !out.checks.any_passed() => Some("no check ran".to_string()),
        None => None,
    };
    match (reason, state.product, &state.leaf) {
        (None, Some(product), Some(leaf)) => Ok(VerifiedChain {
            verified_at: at,
            product,
            leaf_kind: leaf.kind(),
            checks: out.checks,
            fields: out.fields,
        }),
        (reason, _, _) => Err(Rejection {
            kind: EvidenceKind::SevSnp,
            verified_at: at,
            reason: reason.unwrap_or_else(|| "no VCEK/VLEK or product".to_string()),
            checks: out.checks,
            fields: out.fields,
        }),
    }
}

fn verified_at(at: OffsetDateTime) -> String {
    kolm_format::timefmt::format_utc_seconds(at).unwrap_or_else(|_| at.to_string())
}

/// Without a product, the TCB layout a report most likely has: Turin when
/// CPUID says family 1Ah, else Milan/Genoa.
fn report_layout_guess(r: &SnpReport) -> TcbLayout {
    match r.cpuid() {
        Some(c) if c.family == 0x1A => TcbLayout::Turin,
        _ => TcbLayout::PreTurin,
    }
}

/// Records `e` under its own check.
fn fail_err(checks: &mut Checklist, e: &SnpError) {
    checks.fail(e.check(), e.to_string());
}

/// Records check `id`: passed with `detail` when `outcome` is `Ok`, else
/// failed with the error's own check id and text. Returns whether it
/// passed.
fn record(
    checks: &mut Checklist,
    id: SnpCheck,
    outcome: Result<(), SnpError>,
    detail: impl FnOnce() -> String,
) -> bool {
    match outcome {
        Ok(()) => {
            checks.pass(id, detail());
            true
        }
        Err(e) => {
            fail_err(checks, &e);
            false
        }
    }
}

/// What the chain checks established.
struct ChainState {
    leaf: Option<Leaf>,
    product: Option<Product>,
}

enum Supplied {
    None,
    Bad,
    Good(Box<CaPair>),
}

fn check_chain(
    out: &mut Evaluation,
    vcek: &[u8],
    chain: Option<&[u8]>,
    at: OffsetDateTime,
    report: Option<&SnpReport>,
    anchor: ChainAnchor<'_>,
) -> ChainState {
    let checks = &mut out.checks;
    let fields = &mut out.fields;

    // snp.vcek.format
    let leaf = check_vcek_format(checks, fields, vcek);

    // snp.chain.format
    let supplied = check_chain_format(checks, chain, anchor);

    // snp.product
    let product = check_product(checks, report, leaf.as_ref(), &supplied, anchor);

    let chain_checks = [SnpCheck::ChainArk, SnpCheck::ChainAsk, SnpCheck::ChainVcek];
    let (Some(leaf_ref), Some(product)) = (leaf.as_ref(), product) else {
        checks.skip_unrecorded(&chain_checks, "not run: no usable VCEK/VLEK or product");
        check_freshness(checks, at, None, leaf.as_ref());
        return ChainState { leaf, product };
    };
    let kind = leaf_ref.kind();
    if let ChainAnchor::Sim {
        ark,
        ark_cn,
        ask_cn,
    } = anchor
    {
        let pair = match supplied {
            Supplied::Good(pair) => *pair,
            Supplied::None | Supplied::Bad => {
                checks.skip_unrecorded(&chain_checks, "not run: no usable ASK/ARK chain");
                check_freshness(checks, at, None, leaf.as_ref());
                return ChainState {
                    leaf,
                    product: Some(product),
                };
            }
        };
        check_sim_chain(out, &pair, leaf_ref, ark, ark_cn, ask_cn);
        check_freshness(&mut out.checks, at, Some(&pair), leaf.as_ref());
        return ChainState {
            leaf,
            product: Some(product),
        };
    }
    let embedded = match roots::embedded_ca(product, kind) {
        Ok(e) => e,
        Err(e) => {
            // An embedded-root defect fails snp.chain.ark; the ASK and leaf
            // checks have nothing to run against.
            fail_err(checks, &e);
            checks.skip_unrecorded(&chain_checks, "not run: embedded roots unusable");
            check_freshness(checks, at, None, leaf.as_ref());
            return ChainState {
                leaf,
                product: Some(product),
            };
        }
    };
    let (pair, source) = match supplied {
        Supplied::Good(pair) => (*pair, "supplied"),
        Supplied::None => (embedded.clone(), "embedded"),
        Supplied::Bad => {
            checks.skip_unrecorded(&chain_checks, "not run: the supplied chain did not decode");
            check_freshness(checks, at, None, leaf.as_ref());
            return ChainState {
                leaf,
                product: Some(product),
            };
        }
    };
    fields.insert("chain_source", source);
    fields.insert("ark_sha256", hex::encode(pair.ark.sha256()));
    fields.insert("ask_sha256", hex::encode(pair.ask.sha256()));

    // snp.chain.ark, .ask, .vcek
    check_amd_chain(checks, &pair, &embedded, source, product, leaf_ref);

    check_freshness(checks, at, Some(&pair), leaf.as_ref());
    ChainState {
        leaf,
        product: Some(product),
    }
}

/// Check `snp.vcek.format`: the VCEK or VLEK certificate decodes.
fn check_vcek_format(checks: &mut Checklist, fields: &mut Fields, vcek: &[u8]) -> Option<Leaf> {
    match certs::parse_leaf(vcek) {
        Ok(leaf) => {
            checks.pass(
                SnpCheck::VcekFormat,
                format!(
                    "{} certificate (sha256 {}), ECDSA P-384 key",
                    leaf.kind().name(),
                    hex::encode(leaf.cert().sha256())
                ),
            );
            fields.insert("vcek_sha256", hex::encode(leaf.cert().sha256()));
            fields.insert(
                "product",
                leaf.product_name().map_or(Value::Null, Value::from),
            );
            fields.insert(
                "window",
                vec![
                    certs::format_unix(leaf.cert().not_before()),
                    certs::format_unix(leaf.cert().not_after()),
                ],
            );
            Some(leaf)
        }
        Err(e) => {
            fail_err(checks, &e);
            None
        }
    }
}

/// Check `snp.chain.format`: the supplied ASK/ARK chain, if any, decodes.
fn check_chain_format(
    checks: &mut Checklist,
    chain: Option<&[u8]>,
    anchor: ChainAnchor<'_>,
) -> Supplied {
    match chain {
        // The sim form carries its ASK/ARK pair; nothing is embedded for it.
        None if anchor.is_sim() => {
            checks.fail(
                SnpCheck::ChainFormat,
                "no ASK/ARK chain supplied: the simulated TEE's SEV-SNP form carries its own \
                 (evidence/sim-snp-ask-ark.pem)",
            );
            Supplied::Bad
        }
        None => {
            checks.pass(
                SnpCheck::ChainFormat,
                "no chain supplied: AMD's ASK/ASVK and ARK embedded in kolm-verifier are used",
            );
            Supplied::None
        }
        Some(bytes) => match certs::parse_chain(bytes) {
            Ok(pair) => {
                checks.pass(
                    SnpCheck::ChainFormat,
                    format!(
                        "supplied chain: {} and self-issued {}",
                        pair.ask.subject(),
                        pair.ark.subject()
                    ),
                );
                Supplied::Good(Box::new(pair))
            }
            Err(e) => {
                checks.fail(SnpCheck::ChainFormat, e.to_string());
                Supplied::Bad
            }
        },
    }
}

/// Check `snp.product`: the one product the report, the leaf and the
/// supplied chain name.
fn check_product(
    checks: &mut Checklist,
    report: Option<&SnpReport>,
    leaf: Option<&Leaf>,
    supplied: &Supplied,
    anchor: ChainAnchor<'_>,
) -> Option<Product> {
    let supplied_pair = match supplied {
        Supplied::Good(p) => Some(p.as_ref()),
        _ => None,
    };
    match select_product(report, leaf, supplied_pair) {
        Ok((product, how)) => {
            let stand_in = if anchor.is_sim() {
                "; stand-in values of the simulated TEE, which picks the TCB layout only"
            } else {
                ""
            };
            checks.pass(SnpCheck::Product, format!("{product} ({how}){stand_in}"));
            Some(product)
        }
        Err(e) => {
            fail_err(checks, &e);
            None
        }
    }
}

/// Checks `snp.chain.ark`, `.ask` and `.vcek` against AMD's embedded roots
/// for `product`, with `pair` the chain used (`source`: supplied or
/// embedded).
fn check_amd_chain(
    checks: &mut Checklist,
    pair: &CaPair,
    embedded: &CaPair,
    source: &'static str,
    product: Product,
    leaf_ref: &Leaf,
) {
    let kind = leaf_ref.kind();
    // snp.chain.ark
    let ark_trusted = pair.ark.der() == embedded.ark.der()
        || (pair.ark.x509().tbs_certificate.subject_public_key_info
            == embedded.ark.x509().tbs_certificate.subject_public_key_info
            && pair.ark.subject() == embedded.ark.subject());
    let cached = ark_trusted && certs::ca_cache_contains(&pair.ark, &pair.ask);
    let cached_note = if cached { " (cached)" } else { "" };
    let ark_ok = if !ark_trusted {
        fail_err(
            checks,
            &SnpError::ArkNotTrusted {
                product,
                subject: pair.ark.subject(),
                sha256: hex::encode(pair.ark.sha256()),
            },
        );
        false
    } else {
        record(
            checks,
            SnpCheck::ChainArk,
            certs::verify_ark(&pair.ark, &product.ark_cn(), !cached),
            || {
                format!(
                    "{} (sha256 {}, {source}) is AMD's embedded root for {product}; \
                     self-signature verified{cached_note}",
                    product.ark_cn(),
                    hex::encode(pair.ark.sha256())
                )
            },
        )
    };
    let untrusted_note = if ark_ok {
        ""
    } else {
        " (but the ARK is not trusted)"
    };

    // snp.chain.ask
    let ask_cn = product.ask_cn(kind);
    let ask_ok = record(
        checks,
        SnpCheck::ChainAsk,
        certs::verify_ask(&pair.ask, &pair.ark, &ask_cn, !cached),
        || {
            format!(
                "{ask_cn} (sha256 {}) signed by {} (RSASSA-PSS SHA-384){cached_note}{untrusted_note}",
                hex::encode(pair.ask.sha256()),
                product.ark_cn()
            )
        },
    );
    if ark_ok && ask_ok && !cached {
        certs::ca_cache_insert(&pair.ark, &pair.ask);
    }

    // snp.chain.vcek
    let ca_trusted = ark_ok && ask_ok;
    let leaf_cached = ca_trusted && certs::leaf_cache_contains(&pair.ask, leaf_ref.cert());
    match certs::verify_leaf(leaf_ref, &pair.ask, !leaf_cached) {
        Ok(()) => {
            if ca_trusted && !leaf_cached {
                certs::leaf_cache_insert(&pair.ask, leaf_ref.cert());
            }
            checks.pass(
                SnpCheck::ChainVcek,
                format!(
                    "{} signed by {ask_cn} (RSASSA-PSS SHA-384){}{}",
                    kind.name(),
                    if leaf_cached { " (cached)" } else { "" },
                    if ca_trusted {
                        ""
                    } else {
                        " (but the ASK/ARK is not trusted)"
                    }
                ),
            );
        }
        Err(e) => fail_err(checks, &e),
    }
}

/// `snp.chain.ark`, `.ask` and `.vcek` under a sim ARK: the supplied ARK
/// must be `trusted` byte for byte and named `ark_cn`, the ASK `ask_cn`;
/// every signature is verified (the caches of AMD pairs are neither read
/// nor written).
fn check_sim_chain(
    out: &mut Evaluation,
    pair: &CaPair,
    leaf: &Leaf,
    trusted: &SnpCert,
    ark_cn: &str,
    ask_cn: &str,
) {
    let checks = &mut out.checks;
    out.fields.insert("chain_source", "supplied");
    out.fields
        .insert("ark_sha256", hex::encode(pair.ark.sha256()));
    out.fields
        .insert("ask_sha256", hex::encode(pair.ask.sha256()));

    // snp.chain.ark
    let ark_ok = if pair.ark.der() != trusted.der() {
        fail_err(
            checks,
            &SnpError::SimArkNotTrusted {
                subject: pair.ark.subject(),
                sha256: hex::encode(pair.ark.sha256()),
                trusted: hex::encode(trusted.sha256()),
            },
        );
        false
    } else {
        record(
            checks,
            SnpCheck::ChainArk,
            certs::verify_ark(&pair.ark, ark_cn, true),
            || {
                format!(
                    "{ark_cn} (sha256 {}) is the kolm sim SEV-SNP root given with \
                     --dangerous-trust-sim-root, NOT AMD's; self-signature verified",
                    hex::encode(pair.ark.sha256())
                )
            },
        )
    };
    let untrusted_note = if ark_ok {
        ""
    } else {
        " (but the ARK is not trusted)"
    };

    // snp.chain.ask
    let ask_ok = record(
        checks,
        SnpCheck::ChainAsk,
        certs::verify_ask(&pair.ask, &pair.ark, ask_cn, true),
        || {
            format!(
                "{ask_cn} (sha256 {}) signed by the sim ARK (RSASSA-PSS SHA-384){untrusted_note}",
                hex::encode(pair.ask.sha256()),
            )
        },
    );

    // snp.chain.vcek
    match certs::verify_leaf(leaf, &pair.ask, true) {
        Ok(()) => checks.pass(
            SnpCheck::ChainVcek,
            format!(
                "{} signed by {ask_cn} (RSASSA-PSS SHA-384){}",
                leaf.kind().name(),
                if ark_ok && ask_ok {
                    ""
                } else {
                    " (but the ASK/ARK is not trusted)"
                }
            ),
        ),
        Err(e) => fail_err(checks, &e),
    }
}

fn check_freshness(
    checks: &mut Checklist,
    at: OffsetDateTime,
    pair: Option<&CaPair>,
    leaf: Option<&Leaf>,
) {
    let ask_name = match leaf.map(Leaf::kind) {
        Some(LeafKind::Vlek) => "ASVK",
        _ => "ASK",
    };
    let mut certs: Vec<(&SnpCert, &'static str)> = Vec::new();
    if let Some(p) = pair {
        certs.push((&p.ark, "ARK"));
        certs.push((&p.ask, ask_name));
    }
    if let Some(l) = leaf {
        certs.push((l.cert(), l.kind().name()));
    }
    if certs.is_empty() {
        checks.skip(SnpCheck::Freshness, "not run: no certificate decoded");
        return;
    }
    // The leaf is named first when several fail: it is the usual culprit.
    let mut failure = None;
    for (cert, name) in certs.iter().rev() {
        if let Err(e) = certs::check_validity(cert, name, at) {
            failure = Some(e);
            break;
        }
    }
    match (failure, leaf) {
        (Some(e), _) => fail_err(checks, &e),
        (None, Some(l)) => checks.pass(
            SnpCheck::Freshness,
            format!(
                "{} at {}; {} valid {}..{}",
                if pair.is_some() {
                    "ARK, ASK/ASVK and VCEK/VLEK valid"
                } else {
                    "VCEK/VLEK valid"
                },
                verified_at(at),
                l.kind().name(),
                certs::format_unix(l.cert().not_before()),
                certs::format_unix(l.cert().not_after())
            ),
        ),
        (None, None) => checks.pass(
            SnpCheck::Freshness,
            format!("ARK and ASK/ASVK valid at {}", verified_at(at)),
        ),
    }
}

/// Picks the product: CPUID (report v3+), the leaf's issuer CN and its
/// productName must agree where present; with none of them, the product
/// whose embedded ARK is the supplied one, else whose embedded ASK/ASVK
/// signs the leaf.
fn select_product(
    report: Option<&SnpReport>,
    leaf: Option<&Leaf>,
    supplied: Option<&CaPair>,
) -> Result<(Product, String), SnpError> {
    let mut sources: Vec<(&'static str, Product, String)> = Vec::new();
    if let Some(c) = report.and_then(SnpReport::cpuid) {
        let p = Product::from_cpuid(c.family, c.model)?;
        sources.push((
            "CPUID",
            p,
            format!("CPUID {:02x}h/{:02x}h", c.family, c.model),
        ));
    }
    if let Some(l) = leaf {
        if let Some(p) = l.product_from_issuer() {
            let cn = l.cert().issuer_common_name().unwrap_or_default();
            sources.push(("the VCEK/VLEK issuer", p, format!("issuer CN {cn}")));
        }
        if let Some(p) = l.product_from_name() {
            let name = l.product_name().unwrap_or_default();
            sources.push((
                "the VCEK/VLEK productName",
                p,
                format!("productName {name}"),
            ));
        }
    }
    if let Some((first, p0, _)) = sources.first() {
        if let Some((second, p, _)) = sources.iter().find(|(_, p, _)| p != p0) {
            return Err(SnpError::ProductMismatch {
                first,
                a: p0.to_string(),
                second,
                b: p.to_string(),
            });
        }
        let how: Vec<&str> = sources.iter().map(|(_, _, h)| h.as_str()).collect();
        return Ok((*p0, format!("from {}", how.join(", "))));
    }
    // Nothing names it: try each product.
    if let Some(pair) = supplied {
        for p in Product::ALL {
            if roots::embedded_ark(p).is_ok_and(|ark| ark.der() == pair.ark.der()) {
                return Ok((p, "the supplied ARK is this product's".into()));
            }
        }
    }
    if let Some(l) = leaf {
        for p in Product::ALL {
            if let Ok(pair) = roots::embedded_ca(p, l.kind())
                && certs::verify_issued_by(l.cert(), &pair.ask, CertRole::Leaf).is_ok()
            {
                return Ok((p, "this product's embedded ASK/ASVK signs the leaf".into()));
            }
        }
    }
    Err(SnpError::ProductUnknown {
        reason: "no CPUID in the report, and neither the leaf's issuer, its productName \
                 nor any embedded chain identifies one"
            .into(),
    })
}

/// hwID == CHIP_ID, with a clear reason when the guest masked CHIP_ID.
fn check_vcek_hwid(leaf: &Leaf, r: &SnpReport) -> Result<(), SnpError> {
    if r.key_info().mask_chip_key && r.chip_id().iter().all(|&b| b == 0) {
        return Err(SnpError::ChipIdMasked);
    }
    leaf.check_hwid(r.chip_id())
}

/// Checks `snp.signature`, `snp.signing_key`, `snp.vcek.hwid` and
/// `snp.vcek.tcb`: what ties the report to the VCEK or VLEK.
fn check_leaf(checks: &mut Checklist, fields: &mut Fields, r: &SnpReport, state: &ChainState) {
    let signing_key = r.key_info().signing_key;
    match &state.leaf {
        None => {
            for id in [
                SnpCheck::Signature,
                SnpCheck::SigningKey,
                SnpCheck::VcekHwid,
                SnpCheck::VcekTcb,
            ] {
                checks.skip(id, "not run: no usable VCEK/VLEK");
            }
            fields.insert("hwid_matches_chip_id", Value::Null);
            fields.insert("tcb_ext_matches_reported", Value::Null);
        }
        Some(leaf) => {
            let kind = leaf.kind();
            match certs::verify_report_signature(leaf, r) {
                Ok(()) => checks.pass(
                    SnpCheck::Signature,
                    format!(
                        "report signed by the {} key (ECDSA P-384, SHA-384 over 0x000..0x29F)",
                        kind.name()
                    ),
                ),
                Err(e) => fail_err(checks, &e),
            }
            let matches = matches!(
                (signing_key, kind),
                (SigningKey::Vcek, LeafKind::Vcek) | (SigningKey::Vlek, LeafKind::Vlek)
            );
            if matches {
                checks.pass(
                    SnpCheck::SigningKey,
                    format!("KEY_INFO SIGNING_KEY is {}", signing_key.name()),
                );
            } else {
                fail_err(
                    checks,
                    &SnpError::SigningKeyMismatch {
                        report: signing_key.name(),
                        cert: kind.name(),
                    },
                );
            }
            match kind {
                LeafKind::Vlek => {
                    checks.skip(
                        SnpCheck::VcekHwid,
                        "VLEK certificates carry no hwID: not tied to a chip",
                    );
                    fields.insert("hwid_matches_chip_id", Value::Null);
                }
                LeafKind::Vcek => match check_vcek_hwid(leaf, r) {
                    Ok(()) => {
                        checks.pass(SnpCheck::VcekHwid, "VCEK hwID equals CHIP_ID");
                        fields.insert("hwid_matches_chip_id", true);
                    }
                    Err(e) => {
                        fail_err(checks, &e);
                        fields.insert("hwid_matches_chip_id", false);
                    }
                },
            }
            match state.product {
                None => {
                    checks.skip(SnpCheck::VcekTcb, "not run: product (TCB layout) unknown");
                    fields.insert("tcb_ext_matches_reported", Value::Null);
                }
                Some(p) => match leaf.check_tcb(r.reported_tcb(), p.tcb_layout()) {
                    Ok(tcb) => {
                        checks.pass(
                            SnpCheck::VcekTcb,
                            format!(
                                "{} TCB extensions equal REPORTED_TCB ({})",
                                kind.name(),
                                tcb.to_policy()
                            ),
                        );
                        fields.insert("tcb_ext_matches_reported", true);
                    }
                    Err(e) => {
                        fail_err(checks, &e);
                        fields.insert("tcb_ext_matches_reported", false);
                    }
                },
            }
        }
    }
}

fn check_report(
    out: &mut Evaluation,
    r: &SnpReport,
    state: &ChainState,
    expect: &Expectations<'_>,
    platform: Platform,
    sim: bool,
) {
    let checks = &mut out.checks;
    let fields = &mut out.fields;
    let policy = expect.policy;

    // snp.signature, snp.signing_key, snp.vcek.hwid, snp.vcek.tcb
    check_leaf(checks, fields, r, state);

    checks.skip(
        SnpCheck::Revocation,
        "not checked: no AMD CRL is consulted offline (ARK/ASK CRLs are not part of the evidence)",
    );

    // snp.debug
    let debug = r.policy().debug_allowed();
    match policy.check_debug(debug) {
        Ok(()) if debug => checks.pass(
            SnpCheck::Debug,
            "POLICY bit 19 (DEBUG) is set, and the policy allows debug",
        ),
        Ok(()) => checks.pass(SnpCheck::Debug, "POLICY bit 19 (DEBUG) is clear"),
        Err(v) => checks.fail(
            SnpCheck::Debug,
            format!("POLICY bit 19 (DEBUG) is set: {v}"),
        ),
    }

    // snp.policy.platform: the platform this report proves (behind the
    // Azure paravisor: azure-sev-snp, which a policy may allow alone).
    match policy.check_platform(platform) {
        _ if sim => checks.skip(
            SnpCheck::PolicyPlatform,
            "simulated evidence: the platform is `simulated`, not sev-snp (an artifact's policy \
             check judges it)",
        ),
        Ok(()) => checks.pass(
            SnpCheck::PolicyPlatform,
            format!("{platform} is an allowed platform"),
        ),
        Err(v) => checks.fail(SnpCheck::PolicyPlatform, v.to_string()),
    }

    check_snp_policy(checks, r, state, policy, sim);

    // snp.binding.report_data
    match check_binding(r, expect) {
        Ok(false) => checks.skip(SnpCheck::BindingReportData, "no expected REPORT_DATA given"),
        Ok(true) => checks.pass(
            SnpCheck::BindingReportData,
            "REPORT_DATA equals the expected value",
        ),
        Err(e) => fail_err(checks, &e),
    }
}

/// REPORT_DATA against the expectations: `Ok(true)` when it equals the
/// expected value, `Ok(false)` when none is expected. A nonce or public key
/// cannot be checked on SEV-SNP (the report has no such field): expecting
/// one fails, whatever REPORT_DATA says.
fn check_binding(r: &SnpReport, expect: &Expectations<'_>) -> Result<bool, SnpError> {
    if expect.nonce.is_some() {
        return Err(SnpError::ExpectationUnsupported { what: "nonce" });
    }
    if expect.public_key.is_some() {
        return Err(SnpError::ExpectationUnsupported { what: "public key" });
    }
    match &expect.report_data {
        None => Ok(false),
        Some(want) if want.as_slice() == r.report_data().as_slice() => Ok(true),
        Some(want) => Err(SnpError::ReportDataMismatch {
            found: hex::encode(r.report_data()),
            expected: hex::encode(want),
        }),
    }
}

/// The policy's `[sev_snp]` rules, one check each: `Policy::check_snp` is
/// called once per rule with only that rule configured, so every rule's
/// outcome is reported, then once with the whole policy as a backstop.
fn check_snp_policy(
    checks: &mut Checklist,
    r: &SnpReport,
    state: &ChainState,
    policy: &Policy,
    sim: bool,
) {
    // The simulated TEE's MEASUREMENT, HOST_DATA, ID key and TCB are
    // stand-ins: the policy's allow-lists of real guests and its AMD
    // firmware minimum do not apply (the artifact's checks compare the
    // sim measurement with the manifest). The rest is about the report's
    // own bits and runs.
    let stand_ins_removed;
    let policy = if sim {
        stand_ins_removed = without_stand_ins(policy);
        &stand_ins_removed
    } else {
        policy
    };
    let snp = &policy.sev_snp;
    let only = |sub: SnpPolicy| only(policy, sub);
    let tcb = state
        .product
        .map(|p| r.reported_tcb().decode(p.tcb_layout()).to_policy());
    // Neutral values for the rules not under test.
    let neutral_tcb = tcb.unwrap_or_default();
    let m = r.measurement();
    let h = r.host_data();

    let mut rec = PolicyRecorder { any_failed: false };
    check_identity_rules(checks, &mut rec, r, policy, sim, neutral_tcb);

    let migrate_ma = r.policy().migrate_ma_allowed();
    rec.record(
        checks,
        SnpCheck::PolicyMigration,
        policy.check_snp_migration(migrate_ma),
        if migrate_ma {
            "POLICY bit 18 (MIGRATE_MA) is set, and the policy has sev_snp.allow_migration"
                .to_string()
        } else {
            "POLICY bit 18 (MIGRATE_MA) is clear: no migration agent".to_string()
        },
    );

    let p = only(SnpPolicy {
        max_vmpl: snp.max_vmpl,
        ..SnpPolicy::default()
    });
    let res = p.check_snp(m, h, r.vmpl(), neutral_tcb);
    rec.record(
        checks,
        SnpCheck::PolicyVmpl,
        res,
        format!("VMPL {} <= max_vmpl {}", r.vmpl(), snp.max_vmpl),
    );

    check_tcb_rule(checks, &mut rec, r, policy, sim, tcb);

    // Backstop: the whole policy at once must agree.
    if !rec.any_failed
        && let Some(tcb) = tcb.or(snp.min_tcb.is_none().then_some(neutral_tcb))
        && let Err(v) = policy.check_snp(m, h, r.vmpl(), tcb)
    {
        let id = match v.rule() {
            "sev_snp.measurement" => SnpCheck::PolicyMeasurement,
            "sev_snp.host_data" => SnpCheck::PolicyHostData,
            "sev_snp.vmpl" => SnpCheck::PolicyVmpl,
            _ => SnpCheck::PolicyTcb,
        };
        checks.fail(id, v.to_string());
    }
}

/// The simulated TEE's SEV-SNP policy: `policy` without the rules on
/// stand-in values (MEASUREMENT, HOST_DATA, ID key allow-lists, minimum TCB).
fn without_stand_ins(policy: &Policy) -> Policy {
    Policy {
        sev_snp: SnpPolicy {
            measurements: Default::default(),
            firmware_measurements: Default::default(),
            host_data: Default::default(),
            id_key_digests: Default::default(),
            min_tcb: None,
            ..policy.sev_snp.clone()
        },
        ..policy.clone()
    }
}

/// `policy` with `sub` as its only `[sev_snp]` rules.
fn only(policy: &Policy, sub: SnpPolicy) -> Policy {
    Policy {
        sev_snp: sub,
        ..policy.clone()
    }
}

/// Records the policy checks, remembering whether one failed.
struct PolicyRecorder {
    any_failed: bool,
}

impl PolicyRecorder {
    fn record(
        &mut self,
        checks: &mut Checklist,
        id: SnpCheck,
        res: Result<(), PolicyViolation>,
        ok: String,
    ) {
        match res {
            Ok(()) => checks.pass(id, ok),
            Err(v) => {
                self.any_failed = true;
                checks.fail(id, v.to_string());
            }
        }
    }
}

/// Skip detail of the rules on the simulated TEE's stand-in values.
const SIM_SKIP: &str =
    "simulated evidence: stand-in value, not judged by the policy's sev_snp rules";

/// Rules `sev_snp.measurement`, `.host_data` and `.id_key`, each alone;
/// skipped for simulated evidence (stand-in values).
fn check_identity_rules(
    checks: &mut Checklist,
    rec: &mut PolicyRecorder,
    r: &SnpReport,
    policy: &Policy,
    sim: bool,
    neutral_tcb: kolm_policy::SnpTcb,
) {
    let snp = &policy.sev_snp;
    let only = |sub: SnpPolicy| only(policy, sub);
    let (m, h) = (r.measurement(), r.host_data());
    if sim {
        checks.skip(SnpCheck::PolicyMeasurement, SIM_SKIP);
    } else if snp.measurements.is_empty() && snp.firmware_measurements.is_empty() {
        checks.skip(
            SnpCheck::PolicyMeasurement,
            "policy has no MEASUREMENT allow-list: any accepted",
        );
    } else {
        let p = only(SnpPolicy {
            measurements: snp.measurements.clone(),
            firmware_measurements: snp.firmware_measurements.clone(),
            ..SnpPolicy::default()
        });
        let res = p.check_snp(m, h, 0, neutral_tcb);
        rec.record(
            checks,
            SnpCheck::PolicyMeasurement,
            res,
            if snp.measurements.contains(m) {
                format!(
                    "MEASUREMENT is one of the policy's {} guest image digests",
                    snp.measurements.len()
                )
            } else {
                format!(
                    "MEASUREMENT is one of the policy's {} firmware digests (identifies no guest)",
                    snp.firmware_measurements.len()
                )
            },
        );
    }

    if sim {
        checks.skip(SnpCheck::PolicyHostData, SIM_SKIP);
    } else if snp.host_data.is_empty() {
        checks.skip(
            SnpCheck::PolicyHostData,
            "policy has no HOST_DATA allow-list: any accepted",
        );
    } else {
        let p = only(SnpPolicy {
            host_data: snp.host_data.clone(),
            ..SnpPolicy::default()
        });
        let res = p.check_snp(m, h, 0, neutral_tcb);
        rec.record(
            checks,
            SnpCheck::PolicyHostData,
            res,
            format!(
                "HOST_DATA is one of the policy's {} allowed values",
                snp.host_data.len()
            ),
        );
    }

    if sim {
        checks.skip(SnpCheck::PolicyIdKey, SIM_SKIP);
    } else if snp.id_key_digests.is_empty() {
        checks.skip(
            SnpCheck::PolicyIdKey,
            "policy has no ID_KEY_DIGEST allow-list: any accepted",
        );
    } else {
        rec.record(
            checks,
            SnpCheck::PolicyIdKey,
            policy.check_snp_id_key(r.id_key_digest()),
            format!(
                "ID_KEY_DIGEST is one of the policy's {} allowed values",
                snp.id_key_digests.len()
            ),
        );
    }
}

/// Rule `sev_snp.min_tcb` on REPORTED_TCB (`tcb`, decoded for the
/// product; `None` when the product is unknown).
fn check_tcb_rule(
    checks: &mut Checklist,
    rec: &mut PolicyRecorder,
    r: &SnpReport,
    policy: &Policy,
    sim: bool,
    tcb: Option<kolm_policy::SnpTcb>,
) {
    let snp = &policy.sev_snp;
    let (m, h) = (r.measurement(), r.host_data());
    match (&snp.min_tcb, tcb) {
        _ if sim => checks.skip(SnpCheck::PolicyTcb, SIM_SKIP),
        (None, _) => checks.skip(SnpCheck::PolicyTcb, "policy has no minimum TCB"),
        (Some(_), None) => {
            rec.any_failed = true;
            checks.fail(
                SnpCheck::PolicyTcb,
                "sev_snp.min_tcb: cannot compare, the product (TCB layout) is unknown",
            );
        }
        (Some(min), Some(tcb)) => {
            let p = only(
                policy,
                SnpPolicy {
                    min_tcb: Some(*min),
                    ..SnpPolicy::default()
                },
            );
            let res = p.check_snp(m, h, 0, tcb);
            rec.record(
                checks,
                SnpCheck::PolicyTcb,
                res,
                format!("REPORTED_TCB {tcb} >= minimum {min}"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    /// A v5 report with DEBUG clear that parses (its signature is zero).
    fn blank_report() -> Vec<u8> {
        let mut b = vec![0u8; report::REPORT_LEN];
        b[0] = 5;
        b[0x34] = 1;
        b[0x188] = 0x19;
        b[0x189] = 0x01;
        b[0x50] = 0xAB;
        b
    }

    fn at() -> OffsetDateTime {
        kolm_format::timefmt::parse_rfc3339("2026-01-01T00:00:00Z").unwrap()
    }

    #[test]
    fn unparsed_report_skips_every_later_check_in_order() {
        let policy = Policy::production();
        let e = evaluate(
            &SnpEvidence {
                report: b"short",
                vcek: b"",
                chain: None,
            },
            &Expectations::new(&policy),
            at(),
        );
        assert!(e.claims.is_none());
        let ids: Vec<SnpCheck> = e
            .checks
            .iter()
            .map(|c| match c.id {
                crate::check::CheckId::SnpCheck(id) => id,
                other => panic!("{other}"),
            })
            .collect();
        assert_eq!(ids, SnpCheck::ALL);
        for c in e.checks.iter().skip(8) {
            assert_eq!(c.status, crate::check::CheckStatus::Skip, "{}", c.id);
            assert_eq!(c.detail, "not run: the report did not parse");
        }
        let r = e.conclude(&policy).unwrap_err();
        assert!(r.reason.starts_with("snp.report.format: report is 5 bytes"));
    }

    #[test]
    fn claims_come_from_the_parsed_report() {
        let policy = Policy::production();
        let report = blank_report();
        let mut tcb = report.clone();
        tcb[0x180..0x188].copy_from_slice(&[4, 0, 0, 0, 0, 0, 24, 0xDB]);
        tcb[0x008 + 2] = 0x08; // POLICY bit 19: DEBUG
        let e = evaluate(
            &SnpEvidence {
                report: &tcb,
                vcek: b"",
                chain: None,
            },
            &Expectations::new(&policy),
            at(),
        );
        let claims = e.claims.unwrap();
        assert_eq!(claims.platform, Platform::SevSnp);
        assert_eq!(claims.measurement, Measurement::Snp([0; 48]));
        assert_eq!(claims.report_data[0], 0xAB);
        assert_eq!(
            claims.tcb,
            Tcb::Snp {
                reported: 0xDB18_0000_0000_0004
            }
        );
        assert!(claims.debug);
        // No VCEK: rejected, but the claims were still read.
        assert!(e.checks.first_failure().is_some());
    }

    /// Issue 12: a guest whose POLICY lets a migration agent export its
    /// memory (MIGRATE_MA, bit 18) is refused unless the policy allows it.
    #[test]
    fn migrate_ma_is_refused_by_default() {
        let mut report = blank_report();
        report[0x008 + 2] |= 0x04; // POLICY bit 18: MIGRATE_MA
        let status = |report: &[u8], policy: &Policy| {
            let e = evaluate(
                &SnpEvidence {
                    report,
                    vcek: b"",
                    chain: None,
                },
                &Expectations::new(policy),
                at(),
            );
            e.checks.get(SnpCheck::PolicyMigration).cloned().unwrap()
        };
        let refused = status(&report, &Policy::production());
        assert_eq!(refused.status, crate::check::CheckStatus::Fail);
        assert!(
            refused.detail.starts_with("sev_snp.migrate_ma"),
            "{}",
            refused.detail
        );
        let mut allow = Policy::production();
        allow.sev_snp.allow_migration = true;
        assert_eq!(
            status(&report, &allow).status,
            crate::check::CheckStatus::Pass
        );
        // Without the bit the default passes.
        assert_eq!(
            status(&blank_report(), &Policy::production()).status,
            crate::check::CheckStatus::Pass
        );
    }

    /// Behind the Azure paravisor the platform asked of the policy is
    /// `azure-sev-snp`, which a policy may allow without `sev-snp`.
    #[test]
    fn platform_rule_asks_about_the_platform_proved() {
        let report = blank_report();
        let mut azure_only = Policy::production();
        azure_only.allowed_platforms = [Platform::AzureSevSnp].into();
        let status = |platform| {
            let e = evaluate_on(
                &SnpEvidence {
                    report: &report,
                    vcek: b"",
                    chain: None,
                },
                &Expectations::new(&azure_only),
                at(),
                platform,
            );
            e.checks.status_of(SnpCheck::PolicyPlatform).unwrap()
        };
        assert_eq!(
            status(Platform::AzureSevSnp),
            crate::check::CheckStatus::Pass
        );
        assert_eq!(status(Platform::SevSnp), crate::check::CheckStatus::Fail);
    }

    #[test]
    fn verify_is_binary_only_and_decode_report_forms_takes_hex() {
        let policy = Policy::production();
        let hex = hex::encode(blank_report());
        let new = verify(
            &SnpEvidence {
                report: hex.as_bytes(),
                vcek: b"",
                chain: None,
            },
            &Expectations::new(&policy),
            at(),
        )
        .unwrap_err();
        assert_eq!(
            new.first_failure().map(|c| c.id),
            Some(SnpCheck::ReportFormat.into())
        );
        let decoded = decode_report_forms(hex.as_bytes()).unwrap();
        assert_eq!(decoded.as_ref(), blank_report().as_slice());
    }

    #[test]
    fn every_error_names_a_check_of_this_layer() {
        for (e, id) in [
            (SnpError::ReportLength { len: 1 }, SnpCheck::ReportFormat),
            (SnpError::ChipIdMasked, SnpCheck::VcekHwid),
            (
                SnpError::ExpectationUnsupported { what: "nonce" },
                SnpCheck::BindingReportData,
            ),
            (
                SnpError::CertDecode {
                    role: CertRole::Ask,
                    reason: String::new(),
                },
                SnpCheck::ChainFormat,
            ),
            (
                SnpError::CertSignature {
                    role: CertRole::Leaf,
                    reason: String::new(),
                },
                SnpCheck::ChainVcek,
            ),
        ] {
            assert_eq!(e.check(), id, "{e}");
        }
    }
}
