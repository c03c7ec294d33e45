//! Offline verification of AMD SEV-SNP attestation reports.
//!
//! [`verify_snp`] checks a report against its VCEK or VLEK certificate and
//! AMD's certificate chain (supplied, or the one embedded in this crate for
//! the report's product), at an instant given by the caller, under a
//! [`kolm_policy::Policy`]. It returns an [`AttestationReport`] with one
//! result per check (ids in [`ids`], in the order they run), the verdict
//! naming the first failure, and the report's fields. [`verify_snp_chain`]
//! checks a VCEK/VLEK chain alone; [`parse_snp_report`] only parses.
//!
//! Design notes, the list of checks and what comes from the `sev` crate are
//! in `docs/attestation-snp.md`.

pub mod certs;
pub mod error;
pub mod report;
pub mod roots;

use kolm_policy::{Platform, Policy, PolicyViolation, SnpPolicy};
use serde_json::Value;
use time::OffsetDateTime;

use crate::attestation::{AttestationReport, CheckKind};

pub use certs::{CaPair, Leaf, LeafKind, SnpCert};
pub use error::{CertRole, SnpError};
pub use report::{
    Cpuid, FirmwareVersion, GuestPolicy, KeyInfo, RawTcb, ReportVersion, SigningKey, SnpReport,
    TcbLayout, TcbVersion,
};
pub use roots::Product;

/// `platform` of the reports this module writes.
pub const PLATFORM: &str = "sev-snp";

/// Check ids, in the order the checks run.
pub mod ids {
    /// Report size, version, signature algorithm, reserved fields.
    pub const REPORT_FORMAT: &str = "snp.report.format";
    /// The VCEK/VLEK decodes (DER or PEM), is SEV-VCEK or SEV-VLEK, has a P-384 key.
    pub const VCEK_FORMAT: &str = "snp.vcek.format";
    /// The supplied ASK/ASVK + ARK bundle decodes (or none is supplied).
    pub const CHAIN_FORMAT: &str = "snp.chain.format";
    /// Milan, Genoa or Turin, from CPUID (v3+), the leaf's issuer and productName.
    pub const PRODUCT: &str = "snp.product";
    /// The ARK is AMD's (embedded, pinned) for the product and self-signed.
    pub const CHAIN_ARK: &str = "snp.chain.ark";
    /// The ASK/ASVK is signed by the ARK.
    pub const CHAIN_ASK: &str = "snp.chain.ask";
    /// The VCEK/VLEK is signed by the ASK/ASVK.
    pub const CHAIN_VCEK: &str = "snp.chain.vcek";
    /// Every certificate is valid at the instant.
    pub const FRESHNESS: &str = "snp.freshness";
    /// The report's ECDSA P-384 signature verifies under the VCEK/VLEK.
    pub const SIGNATURE: &str = "snp.signature";
    /// KEY_INFO SIGNING_KEY names the certificate's key type.
    pub const SIGNING_KEY: &str = "snp.signing_key";
    /// VCEK hwID == CHIP_ID (skipped for VLEK).
    pub const VCEK_HWID: &str = "snp.vcek.hwid";
    /// VCEK/VLEK TCB extensions == REPORTED_TCB.
    pub const VCEK_TCB: &str = "snp.vcek.tcb";
    /// Certificate revocation (not checked offline: always skipped).
    pub const REVOCATION: &str = "snp.revocation";
    /// POLICY bit 19 (DEBUG) against `allow_debug`.
    pub const DEBUG: &str = "snp.debug";
    /// `sev-snp` is an allowed platform.
    pub const POLICY_PLATFORM: &str = "snp.policy.platform";
    /// MEASUREMENT allow-list.
    pub const POLICY_MEASUREMENT: &str = "snp.policy.measurement";
    /// HOST_DATA allow-list.
    pub const POLICY_HOST_DATA: &str = "snp.policy.host_data";
    /// VMPL <= max_vmpl.
    pub const POLICY_VMPL: &str = "snp.policy.vmpl";
    /// REPORTED_TCB >= min_tcb.
    pub const POLICY_TCB: &str = "snp.policy.tcb";
    /// REPORT_DATA == the expected value.
    pub const BINDING_REPORT_DATA: &str = "snp.binding.report_data";

    /// Every id, in order.
    pub const ALL: [&str; 20] = [
        REPORT_FORMAT,
        VCEK_FORMAT,
        CHAIN_FORMAT,
        PRODUCT,
        CHAIN_ARK,
        CHAIN_ASK,
        CHAIN_VCEK,
        FRESHNESS,
        SIGNATURE,
        SIGNING_KEY,
        VCEK_HWID,
        VCEK_TCB,
        REVOCATION,
        DEBUG,
        POLICY_PLATFORM,
        POLICY_MEASUREMENT,
        POLICY_HOST_DATA,
        POLICY_VMPL,
        POLICY_TCB,
        BINDING_REPORT_DATA,
    ];
}

/// Parses a report: 1184 raw bytes, or their hex spelling (upper or lower
/// case, one optional trailing newline). Checks size, VERSION (2, 3, 5),
/// SIGNATURE_ALGO (1), KEY_INFO and every reserved byte; nothing
/// cryptographic. Never panics, whatever the input.
pub fn parse_snp_report(bytes: &[u8]) -> Result<SnpReport, SnpError> {
    let raw = report::decode_report_input(bytes)?;
    SnpReport::from_raw(&raw)
}

/// Verifies an SEV-SNP report.
///
/// * `report`: 1184 bytes, or their hex text.
/// * `vcek`: the VCEK or VLEK certificate, DER or PEM.
/// * `chain`: PEM bundle of the ASK (ASVK for a VLEK) and the ARK. With
///   `None`, the chain embedded in this crate for the report's product is
///   used. A supplied ARK must be AMD's (byte- or key-equal to the embedded
///   one).
/// * `at`: the instant every certificate must be valid at.
/// * `policy`: debug, platform, MEASUREMENT, HOST_DATA, VMPL, minimum TCB.
/// * `expected_report_data`: if given, REPORT_DATA must equal it.
///
/// All checks run even after one fails, as far as their inputs allow; the
/// verdict is Accept only when none failed.
pub fn verify_snp(
    report: &[u8],
    vcek: &[u8],
    chain: Option<&[u8]>,
    at: OffsetDateTime,
    policy: &Policy,
    expected_report_data: Option<&[u8; 64]>,
) -> AttestationReport {
    let mut out = AttestationReport::new(PLATFORM, verified_at(at));
    let parsed = match parse_snp_report(report) {
        Ok(r) => {
            out.pass(
                ids::REPORT_FORMAT,
                CheckKind::Format,
                format!(
                    "ATTESTATION_REPORT v{}, 1184 bytes, ECDSA P-384/SHA-384, reserved fields zero",
                    r.version().number()
                ),
            );
            Some(r)
        }
        Err(e) => {
            out.fail(ids::REPORT_FORMAT, CheckKind::Format, e.to_string());
            None
        }
    };
    let state = check_chain(&mut out, vcek, chain, at, parsed.as_ref());
    if let Some(r) = &parsed {
        let layout = state
            .product
            .map_or(report_layout_guess(r), Product::tcb_layout);
        for (name, value) in r.fields(layout) {
            out.field(name, value);
        }
        check_report(&mut out, r, &state, policy, expected_report_data);
    } else {
        for id in ids::ALL.iter().skip(8) {
            skip_kind(&mut out, id, "not run: the report did not parse");
        }
    }
    out.conclude();
    tracing::debug!(verdict = ?out.verdict, reason = ?out.reason, "sev-snp report verified");
    out
}

/// Verifies a VCEK/VLEK certificate chain alone (no report): leaf format,
/// product (from the leaf's issuer and productName), ARK, ASK/ASVK, leaf
/// signature and validity at `at`. For a chain without a report, such as
/// the Turin sample.
pub fn verify_snp_chain(
    vcek: &[u8],
    chain: Option<&[u8]>,
    at: OffsetDateTime,
) -> AttestationReport {
    let mut out = AttestationReport::new(PLATFORM, verified_at(at));
    let state = check_chain(&mut out, vcek, chain, at, None);
    if let Some(leaf) = &state.leaf {
        out.field("signing_key", leaf.kind().name());
    }
    out.conclude();
    out
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

/// The kind a check id belongs to.
fn kind_of(id: &str) -> CheckKind {
    match id {
        ids::REPORT_FORMAT | ids::VCEK_FORMAT | ids::CHAIN_FORMAT => CheckKind::Format,
        ids::PRODUCT | ids::CHAIN_ARK | ids::CHAIN_ASK | ids::CHAIN_VCEK => CheckKind::Chain,
        ids::SIGNING_KEY | ids::VCEK_HWID => CheckKind::Chain,
        ids::FRESHNESS => CheckKind::Freshness,
        ids::SIGNATURE => CheckKind::Signature,
        ids::VCEK_TCB | ids::POLICY_TCB => CheckKind::Tcb,
        ids::REVOCATION => CheckKind::Revocation,
        ids::DEBUG => CheckKind::Debug,
        ids::BINDING_REPORT_DATA => CheckKind::Binding,
        _ => CheckKind::Measurement,
    }
}

fn pass_kind(out: &mut AttestationReport, id: &str, detail: impl Into<String>) {
    out.pass(id, kind_of(id), detail);
}

fn fail_kind(out: &mut AttestationReport, id: &str, detail: impl Into<String>) {
    out.fail(id, kind_of(id), detail);
}

fn skip_kind(out: &mut AttestationReport, id: &str, detail: impl Into<String>) {
    out.skip(id, kind_of(id), detail);
}

/// Records `e` under its own check id.
fn fail_err(out: &mut AttestationReport, e: &SnpError) {
    fail_kind(out, e.check_id(), e.to_string());
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
    out: &mut AttestationReport,
    vcek: &[u8],
    chain: Option<&[u8]>,
    at: OffsetDateTime,
    report: Option<&SnpReport>,
) -> ChainState {
    // snp.vcek.format
    let leaf = match certs::parse_leaf(vcek) {
        Ok(leaf) => {
            pass_kind(
                out,
                ids::VCEK_FORMAT,
                format!(
                    "{} certificate (sha256 {}), ECDSA P-384 key",
                    leaf.kind().name(),
                    hex::encode(leaf.cert().sha256())
                ),
            );
            out.field("vcek_sha256", hex::encode(leaf.cert().sha256()));
            out.field(
                "product",
                leaf.product_name().map_or(Value::Null, Value::from),
            );
            out.field(
                "window",
                vec![
                    certs::format_unix(leaf.cert().not_before()),
                    certs::format_unix(leaf.cert().not_after()),
                ],
            );
            Some(leaf)
        }
        Err(e) => {
            fail_err(out, &e);
            None
        }
    };

    // snp.chain.format
    let supplied = match chain {
        None => {
            pass_kind(
                out,
                ids::CHAIN_FORMAT,
                "no chain supplied: AMD's ASK/ASVK and ARK embedded in kolm-verifier are used",
            );
            Supplied::None
        }
        Some(bytes) => match certs::parse_chain(bytes) {
            Ok(pair) => {
                pass_kind(
                    out,
                    ids::CHAIN_FORMAT,
                    format!(
                        "supplied chain: {} and self-issued {}",
                        pair.ask.subject(),
                        pair.ark.subject()
                    ),
                );
                Supplied::Good(Box::new(pair))
            }
            Err(e) => {
                fail_kind(out, ids::CHAIN_FORMAT, e.to_string());
                Supplied::Bad
            }
        },
    };

    // snp.product
    let supplied_pair = match &supplied {
        Supplied::Good(p) => Some(p.as_ref()),
        _ => None,
    };
    let product = match select_product(report, leaf.as_ref(), supplied_pair) {
        Ok((product, how)) => {
            pass_kind(out, ids::PRODUCT, format!("{product} ({how})"));
            Some(product)
        }
        Err(e) => {
            fail_err(out, &e);
            None
        }
    };

    let chain_ids = [ids::CHAIN_ARK, ids::CHAIN_ASK, ids::CHAIN_VCEK];
    let (Some(leaf_ref), Some(product)) = (leaf.as_ref(), product) else {
        for id in chain_ids {
            skip_kind(out, id, "not run: no usable VCEK/VLEK or product");
        }
        check_freshness(out, at, None, leaf.as_ref());
        return ChainState { leaf, product };
    };
    let kind = leaf_ref.kind();
    let embedded = match roots::embedded_ca(product, kind) {
        Ok(e) => e,
        Err(e) => {
            fail_err(out, &e);
            for id in chain_ids.iter().skip(1) {
                skip_kind(out, id, "not run: embedded roots unusable");
            }
            check_freshness(out, at, None, leaf.as_ref());
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
            for id in chain_ids {
                skip_kind(out, id, "not run: the supplied chain did not decode");
            }
            check_freshness(out, at, None, leaf.as_ref());
            return ChainState {
                leaf,
                product: Some(product),
            };
        }
    };
    out.field("chain_source", source);
    out.field("ark_sha256", hex::encode(pair.ark.sha256()));
    out.field("ask_sha256", hex::encode(pair.ask.sha256()));

    // snp.chain.ark
    let ark_trusted = pair.ark.der() == embedded.ark.der()
        || (pair.ark.x509().tbs_certificate.subject_public_key_info
            == embedded.ark.x509().tbs_certificate.subject_public_key_info
            && pair.ark.subject() == embedded.ark.subject());
    let cached = ark_trusted && certs::ca_cache_contains(&pair.ark, &pair.ask);
    let cached_note = if cached { " (cached)" } else { "" };
    let ark_ok = if !ark_trusted {
        fail_err(
            out,
            &SnpError::ArkNotTrusted {
                product,
                subject: pair.ark.subject(),
                sha256: hex::encode(pair.ark.sha256()),
            },
        );
        false
    } else {
        match certs::verify_ark(&pair.ark, &product.ark_cn(), !cached) {
            Ok(()) => {
                pass_kind(
                    out,
                    ids::CHAIN_ARK,
                    format!(
                        "{} (sha256 {}, {source}) is AMD's embedded root for {product}; \
                         self-signature verified{cached_note}",
                        product.ark_cn(),
                        hex::encode(pair.ark.sha256())
                    ),
                );
                true
            }
            Err(e) => {
                fail_err(out, &e);
                false
            }
        }
    };
    let untrusted_note = if ark_ok {
        ""
    } else {
        " (but the ARK is not trusted)"
    };

    // snp.chain.ask
    let ask_cn = product.ask_cn(kind);
    let ask_ok = match certs::verify_ask(&pair.ask, &pair.ark, &ask_cn, !cached) {
        Ok(()) => {
            pass_kind(
                out,
                ids::CHAIN_ASK,
                format!(
                    "{ask_cn} (sha256 {}) signed by {} (RSASSA-PSS SHA-384){cached_note}{untrusted_note}",
                    hex::encode(pair.ask.sha256()),
                    product.ark_cn()
                ),
            );
            true
        }
        Err(e) => {
            fail_err(out, &e);
            false
        }
    };
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
            pass_kind(
                out,
                ids::CHAIN_VCEK,
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
        Err(e) => fail_err(out, &e),
    }

    check_freshness(out, at, Some(&pair), leaf.as_ref());
    ChainState {
        leaf,
        product: Some(product),
    }
}

fn check_freshness(
    out: &mut AttestationReport,
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
        skip_kind(out, ids::FRESHNESS, "not run: no certificate decoded");
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
        (Some(e), _) => fail_err(out, &e),
        (None, Some(l)) => pass_kind(
            out,
            ids::FRESHNESS,
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
        (None, None) => pass_kind(
            out,
            ids::FRESHNESS,
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

fn check_report(
    out: &mut AttestationReport,
    r: &SnpReport,
    state: &ChainState,
    policy: &Policy,
    expected_report_data: Option<&[u8; 64]>,
) {
    let signing_key = r.key_info().signing_key;

    // snp.signature, snp.signing_key, snp.vcek.hwid, snp.vcek.tcb
    match &state.leaf {
        None => {
            for id in [
                ids::SIGNATURE,
                ids::SIGNING_KEY,
                ids::VCEK_HWID,
                ids::VCEK_TCB,
            ] {
                skip_kind(out, id, "not run: no usable VCEK/VLEK");
            }
            out.field("hwid_matches_chip_id", Value::Null);
            out.field("tcb_ext_matches_reported", Value::Null);
        }
        Some(leaf) => {
            let kind = leaf.kind();
            match certs::verify_report_signature(leaf, r) {
                Ok(()) => pass_kind(
                    out,
                    ids::SIGNATURE,
                    format!(
                        "report signed by the {} key (ECDSA P-384, SHA-384 over 0x000..0x29F)",
                        kind.name()
                    ),
                ),
                Err(e) => fail_err(out, &e),
            }
            let matches = matches!(
                (signing_key, kind),
                (SigningKey::Vcek, LeafKind::Vcek) | (SigningKey::Vlek, LeafKind::Vlek)
            );
            if matches {
                pass_kind(
                    out,
                    ids::SIGNING_KEY,
                    format!("KEY_INFO SIGNING_KEY is {}", signing_key.name()),
                );
            } else {
                fail_err(
                    out,
                    &SnpError::SigningKeyMismatch {
                        report: signing_key.name(),
                        cert: kind.name(),
                    },
                );
            }
            match kind {
                LeafKind::Vlek => {
                    skip_kind(
                        out,
                        ids::VCEK_HWID,
                        "VLEK certificates carry no hwID: not tied to a chip",
                    );
                    out.field("hwid_matches_chip_id", Value::Null);
                }
                LeafKind::Vcek => match check_vcek_hwid(leaf, r) {
                    Ok(()) => {
                        pass_kind(out, ids::VCEK_HWID, "VCEK hwID equals CHIP_ID");
                        out.field("hwid_matches_chip_id", true);
                    }
                    Err(e) => {
                        fail_err(out, &e);
                        out.field("hwid_matches_chip_id", false);
                    }
                },
            }
            match state.product {
                None => {
                    skip_kind(out, ids::VCEK_TCB, "not run: product (TCB layout) unknown");
                    out.field("tcb_ext_matches_reported", Value::Null);
                }
                Some(p) => match leaf.check_tcb(r.reported_tcb(), p.tcb_layout()) {
                    Ok(tcb) => {
                        pass_kind(
                            out,
                            ids::VCEK_TCB,
                            format!(
                                "{} TCB extensions equal REPORTED_TCB ({})",
                                kind.name(),
                                tcb.to_policy()
                            ),
                        );
                        out.field("tcb_ext_matches_reported", true);
                    }
                    Err(e) => {
                        fail_err(out, &e);
                        out.field("tcb_ext_matches_reported", false);
                    }
                },
            }
        }
    }

    skip_kind(
        out,
        ids::REVOCATION,
        "not checked: no AMD CRL is consulted offline (ARK/ASK CRLs are not part of the evidence)",
    );

    // snp.debug
    let debug = r.policy().debug_allowed();
    match policy.check_debug(debug) {
        Ok(()) if debug => pass_kind(
            out,
            ids::DEBUG,
            "POLICY bit 19 (DEBUG) is set, and the policy allows debug",
        ),
        Ok(()) => pass_kind(out, ids::DEBUG, "POLICY bit 19 (DEBUG) is clear"),
        Err(v) => fail_kind(
            out,
            ids::DEBUG,
            format!("POLICY bit 19 (DEBUG) is set: {v}"),
        ),
    }

    // snp.policy.platform
    match policy.check_platform(Platform::SevSnp) {
        Ok(()) => pass_kind(out, ids::POLICY_PLATFORM, "sev-snp is an allowed platform"),
        Err(v) => fail_kind(out, ids::POLICY_PLATFORM, v.to_string()),
    }

    check_snp_policy(out, r, state, policy);

    // snp.binding.report_data
    match expected_report_data {
        None => skip_kind(
            out,
            ids::BINDING_REPORT_DATA,
            "no expected REPORT_DATA given",
        ),
        Some(want) if want == r.report_data() => pass_kind(
            out,
            ids::BINDING_REPORT_DATA,
            "REPORT_DATA equals the expected value",
        ),
        Some(want) => fail_err(
            out,
            &SnpError::ReportDataMismatch {
                found: hex::encode(r.report_data()),
                expected: hex::encode(want),
            },
        ),
    }
}

/// The policy's `[sev_snp]` rules, one check each: `Policy::check_snp` is
/// called once per rule with only that rule configured, so every rule's
/// outcome is reported, then once with the whole policy as a backstop.
fn check_snp_policy(
    out: &mut AttestationReport,
    r: &SnpReport,
    state: &ChainState,
    policy: &Policy,
) {
    let snp = &policy.sev_snp;
    let only = |sub: SnpPolicy| Policy {
        sev_snp: sub,
        ..policy.clone()
    };
    let tcb = state
        .product
        .map(|p| r.reported_tcb().decode(p.tcb_layout()).to_policy());
    // Neutral values for the rules not under test.
    let neutral_tcb = tcb.unwrap_or_default();
    let m = r.measurement();
    let h = r.host_data();

    let mut any_failed = false;
    let mut record = |out: &mut AttestationReport,
                      id: &str,
                      res: Result<(), PolicyViolation>,
                      ok: String| match res {
        Ok(()) => pass_kind(out, id, ok),
        Err(v) => {
            any_failed = true;
            fail_kind(out, id, v.to_string());
        }
    };

    if snp.measurements.is_empty() {
        skip_kind(
            out,
            ids::POLICY_MEASUREMENT,
            "policy has no MEASUREMENT allow-list: any accepted",
        );
    } else {
        let p = only(SnpPolicy {
            measurements: snp.measurements.clone(),
            ..SnpPolicy::default()
        });
        let res = p.check_snp(m, h, 0, neutral_tcb);
        record(
            out,
            ids::POLICY_MEASUREMENT,
            res,
            format!(
                "MEASUREMENT is one of the policy's {} allowed values",
                snp.measurements.len()
            ),
        );
    }

    if snp.host_data.is_empty() {
        skip_kind(
            out,
            ids::POLICY_HOST_DATA,
            "policy has no HOST_DATA allow-list: any accepted",
        );
    } else {
        let p = only(SnpPolicy {
            host_data: snp.host_data.clone(),
            ..SnpPolicy::default()
        });
        let res = p.check_snp(m, h, 0, neutral_tcb);
        record(
            out,
            ids::POLICY_HOST_DATA,
            res,
            format!(
                "HOST_DATA is one of the policy's {} allowed values",
                snp.host_data.len()
            ),
        );
    }

    let p = only(SnpPolicy {
        max_vmpl: snp.max_vmpl,
        ..SnpPolicy::default()
    });
    let res = p.check_snp(m, h, r.vmpl(), neutral_tcb);
    record(
        out,
        ids::POLICY_VMPL,
        res,
        format!("VMPL {} <= max_vmpl {}", r.vmpl(), snp.max_vmpl),
    );

    match (&snp.min_tcb, tcb) {
        (None, _) => skip_kind(out, ids::POLICY_TCB, "policy has no minimum TCB"),
        (Some(_), None) => {
            any_failed = true;
            fail_kind(
                out,
                ids::POLICY_TCB,
                "sev_snp.min_tcb: cannot compare, the product (TCB layout) is unknown",
            );
        }
        (Some(min), Some(tcb)) => {
            let p = only(SnpPolicy {
                min_tcb: Some(*min),
                ..SnpPolicy::default()
            });
            let res = p.check_snp(m, h, 0, tcb);
            record(
                out,
                ids::POLICY_TCB,
                res,
                format!("REPORTED_TCB {tcb} >= minimum {min}"),
            );
        }
    }

    // Backstop: the whole policy at once must agree.
    if !any_failed
        && let Some(tcb) = tcb.or(snp.min_tcb.is_none().then_some(neutral_tcb))
        && let Err(v) = policy.check_snp(m, h, r.vmpl(), tcb)
    {
        let id = match v.rule() {
            "sev_snp.measurement" => ids::POLICY_MEASUREMENT,
            "sev_snp.host_data" => ids::POLICY_HOST_DATA,
            "sev_snp.vmpl" => ids::POLICY_VMPL,
            _ => ids::POLICY_TCB,
        };
        fail_kind(out, id, v.to_string());
    }
}
