//! TDX quote verification against the shared samples
//! (`../shared/attestation-samples/tdx/`, located by
//! `kolm_testkit::samples`): every case of `expected.json` with every listed
//! field, the collateral windows, instants just outside each window, and
//! mutations of the quote and the collateral. Without the samples each such
//! test prints `SKIP: ...` and passes (or fails under
//! `KOLM_REQUIRE_SAMPLES=1`). Tests that need only the committed fixtures of
//! `tests/fixtures/tdx/` always run.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use std::path::{Path, PathBuf};

use kolm_format::timefmt::parse_rfc3339;
use kolm_policy::{Platform, Policy};
use kolm_verifier::attested::{
    Attested, EvidenceKind, Expectations, Measurement, Outcome, Rejection, Tcb,
};
use kolm_verifier::check::{Check, CheckId, CheckKind, CheckStatus, TdxCheck};
use kolm_verifier::tdx::{
    self, TdxCollateral, TdxError, TdxEvidence, Trailing, parse_tdx_collateral, parse_tdx_quote,
};
use serde_json::Value;
use sha2::{Digest, Sha256};
use time::{Duration, OffsetDateTime};

fn samples_dir() -> Option<PathBuf> {
    kolm_testkit::samples("tdx/expected.json").map(|d| d.join("tdx"))
}

macro_rules! tdx_dir {
    () => {
        match samples_dir() {
            Some(d) => d,
            None => return,
        }
    };
}

/// A committed fixture of `tests/fixtures/tdx/` (see its README.md).
fn fixture(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tdx")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

const ACCEPT_V4: &str = "v4-b0c06f-dcapqvl-2025-06";
const ACCEPT_V4_AT: &str = "2025-07-01T00:00:00Z";
const ACCEPT_V5: &str = "v5-td15ex-b0c06f-dcapqvl-2026-10";
const ACCEPT_V5_AT: &str = "2026-10-20T00:00:00Z";
const TCB_V5: &str = "v5-90c06f-dcapqvl-2026-02-tcb-not-found";
const TCB_V5_AT: &str = "2026-03-01T00:00:00Z";
const GOTDX_V4: &str = "v4-50806f-gotdxguest-2023-06";
const GOTDX_V4_AT: &str = "2023-06-25T00:00:00Z";

struct Sample {
    quote: Vec<u8>,
    collateral: Vec<u8>,
    at: OffsetDateTime,
}

fn load(dir: &Path, case: &str, at: &str) -> Sample {
    Sample {
        quote: std::fs::read(dir.join(case).join("quote.bin")).unwrap(),
        collateral: std::fs::read(dir.join(case).join("collateral.json")).unwrap(),
        at: parse_rfc3339(at).unwrap(),
    }
}

type Verdict = Result<Attested, Rejection>;

fn verify_with(quote: &[u8], collateral: &[u8], at: OffsetDateTime, e: &Expectations) -> Verdict {
    tdx::verify(&TdxEvidence { quote, collateral }, e, at)
}

/// Under the production policy, nothing else expected.
fn verify(quote: &[u8], collateral: &[u8], at: OffsetDateTime) -> Verdict {
    verify_with(
        quote,
        collateral,
        at,
        &Expectations::new(&Policy::production()),
    )
}

fn verify_parsed(quote: &[u8], collateral: &TdxCollateral, at: OffsetDateTime) -> Verdict {
    let production = Policy::production();
    tdx::evaluate_parsed(quote, collateral, &Expectations::new(&production), at)
        .conclude(&production)
}

/// The checks, one per line, for assertion messages.
fn table(r: &Verdict) -> String {
    Outcome::of(r)
        .checks()
        .iter()
        .map(|c| format!("{:?} {} {}", c.status, c.id, c.detail))
        .collect::<Vec<_>>()
        .join("\n")
}

fn first_failure(r: &Verdict) -> Option<&Check> {
    Outcome::of(r).checks().first_failure()
}

fn field<'a>(r: &'a Verdict, name: &str) -> &'a Value {
    Outcome::of(r)
        .fields()
        .get(name)
        .unwrap_or_else(|| panic!("field {name} missing"))
}

/// Asserts an accept with no failing check.
fn assert_accept(r: &Verdict, what: &str) {
    assert!(r.is_ok(), "{what}:\n{}", table(r));
    assert!(first_failure(r).is_none());
}

/// Asserts a reject whose first failing check is `id`; returns that check.
fn assert_reject<'a>(r: &'a Verdict, id: TdxCheck, what: &str) -> &'a Check {
    let Err(rejection) = r else {
        panic!("{what}: accepted, {id} expected to fail:\n{}", table(r))
    };
    let first = first_failure(r).unwrap_or_else(|| panic!("{what}: nothing failed"));
    assert_eq!(first.id, CheckId::from(id), "{what}:\n{}", table(r));
    assert!(rejection.reason.starts_with(id.as_str()));
    first
}

fn utc(t: OffsetDateTime) -> String {
    kolm_format::timefmt::format_utc_seconds(t).unwrap()
}

/// The reason class named by an `expected` string of expected.json.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expected {
    Accept,
    Expired,
    NotYetValid,
    NoTcbLevel,
}

fn expected_class(text: &str) -> Expected {
    if text.starts_with("accept") {
        Expected::Accept
    } else if text.contains("not yet issued") {
        Expected::NotYetValid
    } else if text.contains("nextUpdate") && text.contains("passed") {
        Expected::Expired
    } else if text.contains("no TCB level matches") {
        Expected::NoTcbLevel
    } else {
        panic!("expected.json has a verdict this test does not know: {text:?}")
    }
}

#[test]
fn expected_json_every_case_and_field() {
    let dir = tdx_dir!();
    let expected: Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    assert_eq!(expected["platform"], "tdx");
    let cases = expected["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 6, "expected.json changed: review this test");
    let mut fields_checked = 0;
    for case in cases {
        let d = case["dir"].as_str().unwrap();
        let quote = std::fs::read(dir.join(d).join(case["quote"].as_str().unwrap())).unwrap();
        let collateral =
            std::fs::read(dir.join(d).join(case["collateral"].as_str().unwrap())).unwrap();
        if let Some(sha) = case["quote_sha256"].as_str() {
            assert_eq!(hex::encode(Sha256::digest(&quote)), sha, "{d}");
        }
        let at_text = case["verify_at"].as_str().unwrap();
        let at = parse_rfc3339(at_text).unwrap();
        let r = verify(&quote, &collateral, at);
        let what = format!("{d} at {at_text}");
        assert_eq!(Outcome::of(&r).kind(), EvidenceKind::Tdx);
        assert_eq!(utc(Outcome::of(&r).verified_at()), at_text);
        let class = expected_class(case["expected"].as_str().unwrap());
        match class {
            Expected::Accept => {
                assert_accept(&r, &what);
                assert_eq!(field(&r, "tcb_status"), "UpToDate", "{what}");
                assert_eq!(field(&r, "advisory_ids"), &serde_json::json!([]), "{what}");
                let claims = &r.as_ref().unwrap().claims;
                assert_eq!(claims.platform, Platform::Tdx);
                assert_eq!(
                    claims.tcb,
                    Tcb::Tdx {
                        status: "UpToDate".into(),
                        advisories: Vec::new()
                    }
                );
                assert!(!claims.debug, "{what}");
            }
            Expected::Expired | Expected::NotYetValid => {
                let first = assert_reject(&r, TdxCheck::CollateralFreshness, &what);
                assert_eq!(first.kind(), CheckKind::Freshness);
                let detail = &first.detail;
                if class == Expected::Expired {
                    assert!(
                        detail.contains("TCBInfo expired: nextUpdate 2025-07-19T10:16:03Z"),
                        "{what}: {detail}"
                    );
                } else {
                    assert!(
                        detail.contains("PCK CRL not yet valid: thisUpdate 2025-06-19T10:00:35Z")
                            && detail
                                .contains("TCBInfo not yet valid: issueDate 2025-06-19T10:16:03Z"),
                        "{what}: {detail}"
                    );
                }
            }
            Expected::NoTcbLevel => {
                // Decided by kolm's own TCB level step (dcap-qvl's pieces
                // `TcbLevel::shortfalls` over the typed TCB Info), not by
                // reading dcap-qvl's error text.
                let first = assert_reject(&r, TdxCheck::TcbLevel, &what);
                assert_eq!(first.kind(), CheckKind::Tcb);
                assert!(
                    first.detail.contains("No matching TCB level found"),
                    "{what}: {}",
                    first.detail
                );
            }
        }
        // Every listed field, by name and value.
        if let Some(fields) = case["fields"].as_object() {
            for (name, want) in fields {
                assert_eq!(field(&r, name), want, "{what}: field {name}");
                fields_checked += 1;
            }
        }
        // The windows the parser read equal the ones listed.
        if let Some(w) = case["collateral_windows"].as_object() {
            let c = parse_tdx_collateral(&collateral).unwrap();
            let ti = &w["tcb_info"];
            let qi = &w["qe_identity"];
            let crl_pair = |crl: &tdx::CrlSummary| {
                let f = |t: OffsetDateTime| utc(t).replace('Z', "+00:00");
                (f(crl.this_update), f(crl.next_update))
            };
            let (root, pck) = (crl_pair(c.root_ca_crl()), crl_pair(c.pck_crl()));
            let text = |v: &Value| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            // (read by the parser, listed in expected.json)
            let pairs: [(String, String); 14] = [
                (c.tcb_info().id.clone(), text(&ti["id"])),
                (c.tcb_info().version.to_string(), text(&ti["version"])),
                (utc(c.tcb_info().issue_date), text(&ti["issueDate"])),
                (utc(c.tcb_info().next_update), text(&ti["nextUpdate"])),
                (
                    c.tcb_info().fmspc.as_deref().unwrap().to_lowercase(),
                    text(&ti["fmspc"]).to_lowercase(),
                ),
                (
                    c.tcb_info().tcb_evaluation_data_number.to_string(),
                    text(&ti["tcbEvaluationDataNumber"]),
                ),
                (c.qe_identity().id.clone(), text(&qi["id"])),
                (utc(c.qe_identity().issue_date), text(&qi["issueDate"])),
                (utc(c.qe_identity().next_update), text(&qi["nextUpdate"])),
                (root.0, text(&w["root_ca_crl"][0])),
                (root.1, text(&w["root_ca_crl"][1])),
                (pck.0, text(&w["pck_crl"][0])),
                (pck.1, text(&w["pck_crl"][1])),
                (
                    format!("entries={}", c.pck_crl().entries),
                    text(&w["pck_crl"][2]),
                ),
            ];
            for (got, want) in pairs {
                assert_eq!(got, want, "{what}");
            }
            assert_eq!(
                c.pck_certificate_chain().is_some(),
                w["has_pck_certificate_chain"].as_bool().unwrap()
            );
        }
    }
    eprintln!("expected.json: 6 cases, {fields_checked} fields compared");
}

/// A window of `collateral_windows` in expected.json, by the name the
/// freshness check uses.
fn listed_windows(case: &Value) -> Vec<(&'static str, OffsetDateTime, OffsetDateTime)> {
    let w = &case["collateral_windows"];
    let t = |v: &Value| parse_rfc3339(v.as_str().unwrap()).unwrap();
    vec![
        (
            "TCBInfo",
            t(&w["tcb_info"]["issueDate"]),
            t(&w["tcb_info"]["nextUpdate"]),
        ),
        (
            "QEIdentity",
            t(&w["qe_identity"]["issueDate"]),
            t(&w["qe_identity"]["nextUpdate"]),
        ),
        (
            "root CA CRL",
            t(&w["root_ca_crl"][0]),
            t(&w["root_ca_crl"][1]),
        ),
        ("PCK CRL", t(&w["pck_crl"][0]), t(&w["pck_crl"][1])),
    ]
}

#[test]
fn instants_just_outside_each_window_are_rejected_as_stale() {
    let dir = tdx_dir!();
    let expected: Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    let mut n = 0;
    for case in expected["cases"].as_array().unwrap() {
        if case.get("collateral_windows").is_none() {
            continue;
        }
        let d = case["dir"].as_str().unwrap();
        let quote = std::fs::read(dir.join(d).join("quote.bin")).unwrap();
        let collateral =
            parse_tdx_collateral(&std::fs::read(dir.join(d).join("collateral.json")).unwrap())
                .unwrap();
        for (name, start, end) in listed_windows(case) {
            for (at, word) in [
                (start - Duration::seconds(1), "not yet valid"),
                (end + Duration::seconds(1), "expired"),
            ] {
                let r = verify_parsed(&quote, &collateral, at);
                let what = format!("{d}: {name} {word} at {}", utc(at));
                let first = assert_reject(&r, TdxCheck::CollateralFreshness, &what);
                assert_eq!(first.kind(), CheckKind::Freshness);
                assert!(
                    first.detail.contains(&format!("{name} {word}")),
                    "{what}: {}",
                    first.detail
                );
                n += 1;
            }
        }
    }
    eprintln!("freshness: {n} instants one second outside a collateral window");
}

#[test]
fn exact_edges_of_the_overall_window_accept() {
    let dir = tdx_dir!();
    for (case, at) in [(ACCEPT_V4, ACCEPT_V4_AT), (ACCEPT_V5, ACCEPT_V5_AT)] {
        let s = load(&dir, case, at);
        let r = verify(&s.quote, &s.collateral, s.at);
        let window = field(&r, "collateral_window").as_array().unwrap().clone();
        let start = parse_rfc3339(window[0].as_str().unwrap()).unwrap();
        let end = parse_rfc3339(window[1].as_str().unwrap()).unwrap();
        for at in [start, end] {
            assert_accept(
                &verify(&s.quote, &s.collateral, at),
                &format!("{case} at {}", utc(at)),
            );
        }
        for at in [start - Duration::seconds(1), end + Duration::seconds(1)] {
            assert_reject(
                &verify(&s.quote, &s.collateral, at),
                TdxCheck::CollateralFreshness,
                &format!("{case} at {}", utc(at)),
            );
        }
    }
}

/// Byte ranges of a quote, from its own parse.
struct Layout {
    signed_len: usize,
    /// Offset of the signature data.
    sig_start: usize,
    /// Offset of the PEM chain inside the quote.
    pem_start: usize,
    end: usize,
}

fn layout(quote: &[u8]) -> Layout {
    let q = match parse_tdx_quote(quote) {
        Err(TdxError::TrailingData { offset, .. }) => parse_tdx_quote(&quote[..offset]),
        other => other,
    }
    .unwrap();
    let signed_len = q.signed_bytes().len();
    let sig_start = signed_len + 4;
    let end = q.bytes().len();
    let pem_start = end - q.pck_chain_pem().len();
    assert_eq!(&q.bytes()[pem_start..end], q.pck_chain_pem());
    Layout {
        signed_len,
        sig_start,
        pem_start,
        end,
    }
}

fn all_samples(dir: &Path) -> Vec<(&'static str, Sample)> {
    [
        (ACCEPT_V4, ACCEPT_V4_AT),
        (ACCEPT_V5, ACCEPT_V5_AT),
        (TCB_V5, TCB_V5_AT),
        (GOTDX_V4, GOTDX_V4_AT),
    ]
    .into_iter()
    .map(|(c, at)| (c, load(dir, c, at)))
    .collect()
}

/// One region of the quote whose bit flips must all be rejected.
struct FlipRegion {
    what: &'static str,
    /// How many of [`all_samples`] to flip.
    samples: usize,
    /// Byte offsets to flip.
    offsets: fn(&Layout) -> Vec<usize>,
    /// Every offset gets mask 0x01; offsets divisible by this also 0x80.
    also_0x80_every: usize,
    /// Whether a first failing check is one this region may produce.
    allowed: fn(&Check) -> bool,
}

const FLIP_REGIONS: &[FlipRegion] = &[
    FlipRegion {
        what: "header and TD report",
        samples: 4,
        offsets: |l| (0..l.signed_len).collect(),
        also_0x80_every: 3,
        allowed: |c| {
            (c.id == CheckId::from(TdxCheck::QuoteSignature) && c.kind() == CheckKind::Signature)
                || (c.id == CheckId::from(TdxCheck::QuoteFormat) && c.kind() == CheckKind::Format)
        },
    },
    FlipRegion {
        // Every byte of the length field, ECDSA signature, attestation key,
        // certification data headers, QE report, QE report signature, QE
        // auth data and inner headers; every 5th byte of the PEM chain.
        what: "signature data",
        samples: 2,
        offsets: |l| {
            (l.signed_len..l.pem_start)
                .chain((l.pem_start..l.end).step_by(5))
                .chain([l.end - 1])
                .collect()
        },
        also_0x80_every: 7,
        allowed: |c| {
            matches!(
                c.kind(),
                CheckKind::Format | CheckKind::Signature | CheckKind::Chain
            ) && c.id != CheckId::from(TdxCheck::Dcap)
        },
    },
];

#[test]
fn every_bit_flip_of_a_quote_region_is_rejected() {
    let dir = tdx_dir!();
    let samples = all_samples(&dir);
    for region in FLIP_REGIONS {
        let start = std::time::Instant::now();
        let mut n = 0;
        for (case, s) in samples.iter().take(region.samples) {
            let col = parse_tdx_collateral(&s.collateral).unwrap();
            let lay = layout(&s.quote);
            for i in (region.offsets)(&lay) {
                let masks: &[u8] = if i % region.also_0x80_every == 0 {
                    &[0x01, 0x80]
                } else {
                    &[0x01]
                };
                for &mask in masks {
                    let mut q = s.quote.clone();
                    q[i] ^= mask;
                    let r = verify_parsed(&q, &col, s.at);
                    n += 1;
                    let first = first_failure(&r)
                        .unwrap_or_else(|| panic!("{case}: byte {i} ^ {mask:#04x} accepted"));
                    assert!(r.is_err());
                    assert!(
                        (region.allowed)(first),
                        "{case}: {} byte {i} ^ {mask:#04x}: {} {}",
                        region.what,
                        first.id,
                        first.detail
                    );
                }
            }
        }
        eprintln!(
            "{}: {n} bit flips, all rejected ({:?})",
            region.what,
            start.elapsed()
        );
    }
}

#[test]
fn truncations_are_rejected_as_format() {
    let dir = tdx_dir!();
    let mut n = 0;
    for (case, s) in all_samples(&dir) {
        let end = layout(&s.quote).end;
        // Every length: cheap, the parser fails before any signature check.
        for len in 0..end {
            let err = parse_tdx_quote(&s.quote[..len]).unwrap_err();
            assert!(
                matches!(
                    err,
                    TdxError::Truncated { .. } | TdxError::LengthMismatch { .. }
                ),
                "{case}: prefix {len}: {err}"
            );
            n += 1;
        }
        // And the full pipeline on a spread.
        let col = parse_tdx_collateral(&s.collateral).unwrap();
        for len in (0..end).step_by(97) {
            let r = verify_parsed(&s.quote[..len], &col, s.at);
            assert_reject(&r, TdxCheck::QuoteFormat, &format!("{case}: prefix {len}"));
        }
    }
    eprintln!("truncations: {n} prefixes rejected");
}

#[test]
fn trailing_bytes() {
    let dir = tdx_dir!();
    let s = load(&dir, ACCEPT_V5, ACCEPT_V5_AT);
    let col = parse_tdx_collateral(&s.collateral).unwrap();
    // Zero padding is tolerated (quote-generation buffers are zero-padded;
    // the v4 sample carries 70 bytes of it).
    let mut padded = s.quote.clone();
    padded.extend_from_slice(&[0; 100]);
    let q = parse_tdx_quote(&padded).unwrap();
    assert_eq!(q.trailing(), Trailing::ZeroPadding { len: 100 });
    assert_accept(&verify_parsed(&padded, &col, s.at), "zero padding");
    // Anything else is rejected, by the parser and by the verifier.
    for tail in [&[1u8][..], b"\nextra bytes", &[0, 0, 0, 7]] {
        let mut q = s.quote.clone();
        q.extend_from_slice(tail);
        let err = parse_tdx_quote(&q).unwrap_err();
        assert!(matches!(err, TdxError::TrailingData { .. }), "{err}");
        let r = verify_parsed(&q, &col, s.at);
        assert_reject(&r, TdxCheck::TrailingData, "trailing data");
        // It is the only failing check.
        let fails = Outcome::of(&r)
            .checks()
            .iter()
            .filter(|c| c.status == CheckStatus::Fail)
            .count();
        assert_eq!(fails, 1);
    }
    // The v4 sample's padding: parse_tdx_quote accepts it.
    let v4 = load(&dir, ACCEPT_V4, ACCEPT_V4_AT);
    assert_eq!(
        parse_tdx_quote(&v4.quote).unwrap().trailing(),
        Trailing::ZeroPadding { len: 70 }
    );
    // go-tdx-guest appended text to its sample: the parser rejects it, the
    // verifier reports the TCB failure first and the trailing data too.
    let g = load(&dir, GOTDX_V4, GOTDX_V4_AT);
    assert!(matches!(
        parse_tdx_quote(&g.quote),
        Err(TdxError::TrailingData { len: 39, .. })
    ));
    let r = verify(&g.quote, &g.collateral, g.at);
    assert_reject(&r, TdxCheck::TcbLevel, "go-tdx-guest");
    assert_eq!(
        Outcome::of(&r).status_of(TdxCheck::TrailingData),
        Some(CheckStatus::Fail)
    );
}

fn put_u32(q: &mut [u8], at: usize, v: u32) {
    q[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn get_u32(q: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(q[at..at + 4].try_into().unwrap())
}

#[test]
fn inconsistent_length_fields_are_rejected() {
    let dir = tdx_dir!();
    let s = load(&dir, ACCEPT_V5, ACCEPT_V5_AT);
    let lay = layout(&s.quote);
    let sig_len_at = lay.signed_len;
    let outer_len_at = lay.sig_start + 128 + 2;
    let inner_len_at = lay.pem_start - 4;
    let body_size_at = 48 + 2;
    for (what, at) in [
        ("signature data length", sig_len_at),
        ("certification data size", outer_len_at),
        ("PCK chain size", inner_len_at),
        ("v5 body size", body_size_at),
    ] {
        for delta in [-1i64, 1, 64, -64] {
            let mut q = s.quote.clone();
            let v = get_u32(&q, at);
            put_u32(&mut q, at, (i64::from(v) + delta) as u32);
            let err = parse_tdx_quote(&q).unwrap_err();
            assert!(
                matches!(
                    err,
                    TdxError::Truncated { .. }
                        | TdxError::LengthMismatch { .. }
                        | TdxError::TrailingData { .. }
                        | TdxError::Pem { .. }
                ),
                "{what} {delta:+}: {err}"
            );
        }
    }
    // A shorter signature data length that leaves the bytes after it as
    // "trailing": the inner structure no longer fits.
    let mut q = s.quote.clone();
    put_u32(&mut q, sig_len_at, get_u32(&s.quote, sig_len_at) - 1);
    assert!(parse_tdx_quote(&q).is_err());
}

#[test]
fn sgx_and_other_tee_types_are_rejected_as_wrong_tee() {
    // The genuine SGX v3 quote shipped in dcap-qvl 0.7.1
    // (`sample/sgx_quote`, committed in tests/fixtures/tdx/).
    let sgx = fixture("dcap-qvl-0.7.1-sgx_quote.bin");
    let err = parse_tdx_quote(&sgx).unwrap_err();
    assert_eq!(err, TdxError::WrongTeeType { tee_type: 0 });
    assert!(err.to_string().contains("SGX quote"));
    let dir = tdx_dir!();
    let s = load(&dir, ACCEPT_V4, ACCEPT_V4_AT);
    assert_reject(
        &verify(&sgx, &s.collateral, s.at),
        TdxCheck::QuoteFormat,
        "SGX v3 quote",
    );
    // tee_type patched to SGX (0) and to garbage.
    for tee in [0u32, 0x80, 0x8100_0000] {
        let mut q = s.quote.clone();
        put_u32(&mut q, 4, tee);
        let err = parse_tdx_quote(&q).unwrap_err();
        assert_eq!(err, TdxError::WrongTeeType { tee_type: tee });
        assert_reject(
            &verify(&q, &s.collateral, s.at),
            TdxCheck::QuoteFormat,
            "wrong tee",
        );
    }
}

#[test]
fn dcap_qvl_embeds_the_same_root() {
    // dcap-qvl embeds its own copy of the root (`src/TrustedRootCA.der`, not
    // exported); this crate passes its own copy to dcap-qvl. The committed
    // copy of dcap-qvl's file must be the same certificate.
    let theirs = fixture("dcap-qvl-0.7.1-TrustedRootCA.der");
    assert_eq!(theirs, tdx::INTEL_SGX_ROOT_CA_DER);
    assert_eq!(
        hex::encode(Sha256::digest(&theirs)),
        tdx::INTEL_SGX_ROOT_CA_SHA256
    );
}

/// Collateral JSON with `f` applied to its object.
fn edit(collateral: &[u8], f: impl FnOnce(&mut serde_json::Map<String, Value>)) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(collateral).unwrap();
    f(v.as_object_mut().unwrap());
    serde_json::to_vec(&v).unwrap()
}

fn json_field(collateral: &[u8], name: &str) -> Value {
    let v: Value = serde_json::from_slice(collateral).unwrap();
    v[name].clone()
}

/// Replaces the first occurrence of `from` in a string field.
fn replace_in(c: &mut serde_json::Map<String, Value>, key: &str, from: &str, to: &str) {
    let s = c[key].as_str().unwrap().to_string();
    assert!(s.contains(from), "{key} has no {from:?}");
    c.insert(key.into(), Value::String(s.replacen(from, to, 1)));
}

/// Flips a bit of the hex field at byte `i`.
fn flip_hex(c: &mut serde_json::Map<String, Value>, key: &str, i: usize) {
    let mut b = hex::decode(c[key].as_str().unwrap()).unwrap();
    let i = i % b.len();
    b[i] ^= 0x01;
    c.insert(key.into(), Value::String(hex::encode(b)));
}

/// Copies field `key` of another collateral.
fn copy_from(other: &[u8], key: &'static str) -> Edit {
    let v = json_field(other, key);
    Box::new(move |c| {
        c.insert(key.into(), v.clone());
    })
}

type Edit = Box<dyn Fn(&mut serde_json::Map<String, Value>)>;

#[test]
fn collateral_mutations_are_rejected_with_the_right_check() {
    let dir = tdx_dir!();
    let s = load(&dir, ACCEPT_V4, ACCEPT_V4_AT);
    let other = load(&dir, ACCEPT_V5, ACCEPT_V5_AT);
    let tcb_v5 = load(&dir, TCB_V5, TCB_V5_AT);
    let gotdx = load(&dir, GOTDX_V4, GOTDX_V4_AT);
    let foreign_pem = String::from_utf8(
        parse_tdx_quote(&other.quote)
            .unwrap()
            .pck_chain_pem()
            .to_vec(),
    )
    .unwrap();
    use TdxCheck as T;
    let cases: Vec<(&str, Edit, TdxCheck)> = vec![
        (
            "tcb_info: one digit of an SVN changed",
            Box::new(|c| replace_in(c, "tcb_info", "\"svn\":2", "\"svn\":3")),
            T::TcbInfoSignature,
        ),
        (
            "tcb_info: one letter of a status changed (still parses)",
            Box::new(|c| replace_in(c, "tcb_info", "\"OutOfDate\"", "\"Revoked\"")),
            T::TcbInfoSignature,
        ),
        (
            "qe_identity: isvprodid changed",
            Box::new(|c| replace_in(c, "qe_identity", "\"isvprodid\":2", "\"isvprodid\":3")),
            T::QeIdentitySignature,
        ),
        (
            "tcb_info_signature: one bit",
            Box::new(|c| flip_hex(c, "tcb_info_signature", 5)),
            T::TcbInfoSignature,
        ),
        (
            "tcb_info_signature swapped with qe_identity_signature",
            Box::new(|c| {
                let q = c["qe_identity_signature"].clone();
                c.insert("tcb_info_signature".into(), q);
            }),
            T::TcbInfoSignature,
        ),
        (
            "tcb_info_signature from another sample",
            copy_from(&other.collateral, "tcb_info_signature"),
            T::TcbInfoSignature,
        ),
        (
            "qe_identity_signature: one bit",
            Box::new(|c| flip_hex(c, "qe_identity_signature", 40)),
            T::QeIdentitySignature,
        ),
        (
            "tcb_info_issuer_chain = pck_crl_issuer_chain (Intel-signed CA as signer)",
            Box::new(|c| {
                let p = c["pck_crl_issuer_chain"].clone();
                c.insert("tcb_info_issuer_chain".into(), p);
            }),
            // A CA certificate cannot be the TCB Info signer (webpki:
            // CaUsedAsEndEntity; here kolm's own signer step).
            T::Chain,
        ),
        (
            "pck_crl from another sample (2026)",
            copy_from(&tcb_v5.collateral, "pck_crl"),
            T::CollateralFreshness,
        ),
        (
            "pck_crl from another sample (2023)",
            copy_from(&gotdx.collateral, "pck_crl"),
            T::CollateralFreshness,
        ),
        (
            "root_ca_crl from another sample (2026)",
            copy_from(&other.collateral, "root_ca_crl"),
            T::CollateralFreshness,
        ),
        (
            "pck_crl: one bit of its signature",
            Box::new(|c| {
                let len = c["pck_crl"].as_str().unwrap().len() / 2;
                flip_hex(c, "pck_crl", len - 3)
            }),
            T::Crl,
        ),
        (
            "root_ca_crl: one bit of its signature",
            Box::new(|c| {
                let len = c["root_ca_crl"].as_str().unwrap().len() / 2;
                flip_hex(c, "root_ca_crl", len - 3)
            }),
            T::Crl,
        ),
        (
            "tcb_info_issuer_chain: the 2018 TCB Signing cert (expired 2025-05-21)",
            copy_from(&gotdx.collateral, "tcb_info_issuer_chain"),
            T::CollateralFreshness,
        ),
        (
            "pck_certificate_chain: another platform's chain",
            Box::new(move |c| {
                c.insert(
                    "pck_certificate_chain".into(),
                    Value::String(foreign_pem.clone()),
                );
            }),
            T::PckChainMatch,
        ),
        (
            "unknown key",
            Box::new(|c| {
                c.insert("tcb_info_v4".into(), Value::String(String::new()));
            }),
            T::CollateralFormat,
        ),
        (
            "missing key",
            Box::new(|c| {
                c.remove("pck_crl");
            }),
            T::CollateralFormat,
        ),
        (
            "non-hex CRL",
            Box::new(|c| replace_in(c, "pck_crl", "30", "zz")),
            T::CollateralFormat,
        ),
        (
            "63-byte signature",
            Box::new(|c| {
                let s = c["tcb_info_signature"].as_str().unwrap()[2..].to_string();
                c.insert("tcb_info_signature".into(), Value::String(s));
            }),
            T::CollateralFormat,
        ),
        (
            "tcb_info not JSON",
            Box::new(|c| replace_in(c, "tcb_info", "{", "[")),
            T::CollateralFormat,
        ),
        (
            "tcb_info without tcbLevels",
            Box::new(|c| replace_in(c, "tcb_info", "tcbLevels", "tcbLevelz")),
            T::CollateralFormat,
        ),
        (
            "issuer chain with three certificates",
            Box::new(|c| {
                let a = c["tcb_info_issuer_chain"].as_str().unwrap().to_string();
                let b = c["pck_crl_issuer_chain"].as_str().unwrap().to_string();
                c.insert("tcb_info_issuer_chain".into(), Value::String(a + &b));
            }),
            T::CollateralFormat,
        ),
    ];
    for (what, f, want) in &cases {
        let mutated = edit(&s.collateral, f);
        assert_reject(&verify(&s.quote, &mutated, s.at), *want, what);
    }
    // The 2025 re-issued TCB Signing cert (notBefore 2025-05-06) on 2023
    // collateral: not valid at the 2023 instant.
    let mutated = edit(
        &gotdx.collateral,
        copy_from(&s.collateral, "tcb_info_issuer_chain"),
    );
    let r = verify(&gotdx.quote, &mutated, gotdx.at);
    let first = assert_reject(
        &r,
        TdxCheck::CollateralFreshness,
        "2025 TCB signing cert in 2023",
    );
    assert!(
        first
            .detail
            .contains("TCB Info signing certificate not yet valid: notBefore 2025-05-06T09:25:00Z")
    );
    // Duplicate keys and oversize input.
    let text = String::from_utf8(s.collateral.clone()).unwrap();
    let dup = text.replacen('{', "{\"pck_crl\":\"00\",", 1);
    assert_reject(
        &verify(&s.quote, dup.as_bytes(), s.at),
        TdxCheck::CollateralFormat,
        "dup",
    );
    let mut big = s.collateral.clone();
    big.resize(tdx::MAX_COLLATERAL_BYTES + 1, b' ');
    assert!(matches!(
        parse_tdx_collateral(&big),
        Err(TdxError::TooLarge { .. })
    ));
    eprintln!("collateral: {} mutations rejected", cases.len() + 3);
}

#[test]
fn collateral_pck_chain_must_be_the_quotes() {
    let dir = tdx_dir!();
    let v4 = load(&dir, ACCEPT_V4, ACCEPT_V4_AT);
    let v5 = load(&dir, ACCEPT_V5, ACCEPT_V5_AT);
    let pem = |q: &[u8]| String::from_utf8(parse_tdx_quote(q).unwrap().pck_chain_pem().to_vec());
    let own = pem(&v4.quote).unwrap();
    let certs: Vec<&str> = own
        .split_inclusive("-----END CERTIFICATE-----\n")
        .filter(|c| c.contains("BEGIN"))
        .collect();
    assert_eq!(certs.len(), 3);
    let with_chain = |chain: String| {
        edit(&v4.collateral, |c| {
            c.insert("pck_certificate_chain".into(), Value::String(chain));
        })
    };
    // (what, quote, collateral, at, None = accept with the match check
    // passing, Some(detail) = pck_chain_match fails saying so).
    let cases: [(&str, &Sample, Vec<u8>, Option<&str>); 4] = [
        // The td15ex collateral carries the quote's own chain.
        ("td15ex, own chain", &v5, v5.collateral.clone(), None),
        ("v4 + own chain", &v4, with_chain(own.clone()), None),
        // Same leaf but another intermediate order, or another platform's
        // chain: rejected before dcap-qvl could use it.
        (
            "reordered",
            &v4,
            with_chain(format!("{}{}{}", certs[0], certs[2], certs[1])),
            Some("same leaf: yes"),
        ),
        (
            "foreign chain",
            &v4,
            with_chain(pem(&v5.quote).unwrap()),
            Some("same leaf: no"),
        ),
    ];
    for (what, s, collateral, want) in cases {
        let r = verify(&s.quote, &collateral, s.at);
        match want {
            None => {
                assert_accept(&r, what);
                let c = Outcome::of(&r)
                    .checks()
                    .get(TdxCheck::PckChainMatch)
                    .unwrap();
                assert_eq!(c.status, CheckStatus::Pass);
                assert!(c.detail.contains("identical"), "{what}: {}", c.detail);
            }
            Some(detail) => {
                let first = assert_reject(&r, TdxCheck::PckChainMatch, what);
                assert!(first.detail.contains(detail), "{what}: {}", first.detail);
            }
        }
    }
}

#[test]
fn policy_allow_lists_tcb_status_and_binding() {
    let dir = tdx_dir!();
    let s = load(&dir, ACCEPT_V5, ACCEPT_V5_AT);
    let q = parse_tdx_quote(&s.quote).unwrap();
    let mrtd = hex::encode(q.mrtd());
    let rtmr2 = hex::encode(q.rtmrs()[2]);
    let other48 = "ab".repeat(48);
    let rd = *q.report_data();
    let mut wrong = rd;
    wrong[63] ^= 1;
    struct Case {
        what: &'static str,
        /// `[tdx]` policy lines; `None`: the production policy.
        policy: Option<String>,
        report_data: Option<Vec<u8>>,
        /// `None`: accepted; else the first failing check.
        fails: Option<TdxCheck>,
        /// A check that must be skipped.
        skipped: Option<TdxCheck>,
    }
    let cases = [
        Case {
            what: "listed MRTD and RTMR2",
            policy: Some(format!("mrtd = [\"{mrtd}\"]\nrtmr2 = [\"{rtmr2}\"]")),
            report_data: None,
            fails: None,
            skipped: Some(TdxCheck::BindingReportData),
        },
        Case {
            what: "unlisted MRTD",
            policy: Some(format!("mrtd = [\"{other48}\"]")),
            report_data: None,
            fails: Some(TdxCheck::PolicyMrtd),
            skipped: None,
        },
        Case {
            // Rules after the violated one are not evaluated by kolm-policy.
            what: "unlisted RTMR0",
            policy: Some(format!("rtmr0 = [\"{other48}\"]")),
            report_data: None,
            fails: Some(TdxCheck::PolicyRtmr),
            skipped: Some(TdxCheck::PolicyTcbStatus),
        },
        Case {
            what: "UpToDate not allowed",
            policy: Some("allowed_tcb_status = [\"OutOfDate\"]".into()),
            report_data: None,
            fails: Some(TdxCheck::PolicyTcbStatus),
            skipped: None,
        },
        Case {
            what: "matching REPORT_DATA",
            policy: None,
            report_data: Some(rd.to_vec()),
            fails: None,
            skipped: None,
        },
        Case {
            what: "other REPORT_DATA",
            policy: None,
            report_data: Some(wrong.to_vec()),
            fails: Some(TdxCheck::BindingReportData),
            skipped: None,
        },
        Case {
            what: "32-byte REPORT_DATA",
            policy: None,
            report_data: Some(rd[..32].to_vec()),
            fails: Some(TdxCheck::BindingReportData),
            skipped: None,
        },
    ];
    for case in cases {
        let what = case.what;
        let policy = match case.policy {
            Some(extra) => Policy::from_toml_str(&format!(
                "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"tdx\"]\n[tdx]\n{extra}"
            ))
            .unwrap(),
            None => Policy::production(),
        };
        let mut e = Expectations::new(&policy);
        e.report_data = case.report_data.clone();
        let r = verify_with(&s.quote, &s.collateral, s.at, &e);
        match case.fails {
            None => {
                assert_accept(&r, what);
                let binding = Outcome::of(&r).status_of(TdxCheck::BindingReportData);
                let want = if case.report_data.is_some() {
                    CheckStatus::Pass
                } else {
                    CheckStatus::Skip
                };
                assert_eq!(binding, Some(want), "{what}");
            }
            Some(id) => {
                assert_reject(&r, id, what);
            }
        }
        if let Some(id) = case.skipped {
            assert_eq!(
                Outcome::of(&r).status_of(id),
                Some(CheckStatus::Skip),
                "{what}"
            );
        }
    }
}

#[test]
fn expectations_a_tdx_quote_cannot_meet_fail_closed() {
    let dir = tdx_dir!();
    let s = load(&dir, ACCEPT_V4, ACCEPT_V4_AT);
    let production = Policy::production();
    for (what, id) in [
        ("nonce", TdxCheck::BindingNonce),
        ("public key", TdxCheck::BindingPublicKey),
    ] {
        let mut e = Expectations::new(&production);
        match id {
            TdxCheck::BindingNonce => e.nonce = Some(b"challenge".to_vec()),
            _ => e.public_key = Some(vec![4; 65]),
        }
        let r = verify_with(&s.quote, &s.collateral, s.at, &e);
        let first = assert_reject(&r, id, what);
        assert_eq!(first.kind(), CheckKind::Binding);
        // Everything else passed: the expectation alone rejects.
        let fails = Outcome::of(&r)
            .checks()
            .iter()
            .filter(|c| c.status == CheckStatus::Fail)
            .count();
        assert_eq!(fails, 1, "{what}:\n{}", table(&r));
        // Also when the quote does not parse.
        let r = verify_with(b"not a quote", &s.collateral, s.at, &e);
        assert_eq!(Outcome::of(&r).status_of(id), Some(CheckStatus::Fail));
    }
}

#[test]
fn check_order_kinds_and_claims_on_accept() {
    let dir = tdx_dir!();
    let s = load(&dir, ACCEPT_V4, ACCEPT_V4_AT);
    let r = verify(&s.quote, &s.collateral, s.at);
    let ids: Vec<(&str, CheckKind, CheckStatus)> = Outcome::of(&r)
        .checks()
        .iter()
        .map(|c| (c.id.as_str(), c.kind(), c.status))
        .collect();
    use CheckKind as K;
    use CheckStatus::{Pass, Skip};
    assert_eq!(
        ids,
        vec![
            ("tdx.quote.format", K::Format, Pass),
            ("tdx.collateral.format", K::Format, Pass),
            ("tdx.collateral.pck_chain_match", K::Chain, Pass),
            ("tdx.pck.chain", K::Chain, Pass),
            ("tdx.qe.report_signature", K::Signature, Pass),
            ("tdx.qe.report_data", K::Signature, Pass),
            ("tdx.quote.signature", K::Signature, Pass),
            ("tdx.collateral.chain", K::Chain, Pass),
            ("tdx.collateral.freshness", K::Freshness, Pass),
            ("tdx.dcap", K::Signature, Pass),
            ("tdx.debug", K::Debug, Pass),
            ("tdx.policy.platform", K::Measurement, Pass),
            ("tdx.policy.mrtd", K::Measurement, Pass),
            ("tdx.policy.rtmr", K::Measurement, Pass),
            ("tdx.policy.tcb_status", K::Tcb, Pass),
            ("tdx.policy.advisories", K::Tcb, Pass),
            ("tdx.policy.config", K::Measurement, Skip),
            ("tdx.binding.report_data", K::Binding, Skip),
            ("tdx.quote.trailing_data", K::Format, Pass),
        ]
    );
    let q = parse_tdx_quote(&s.quote).unwrap();
    let a = r.as_ref().unwrap();
    assert_eq!(a.platform(), Platform::Tdx);
    assert_eq!(a.measurement(), &Measurement::TdxMrtd(*q.mrtd()));
    assert_eq!(a.claims.report_data, q.report_data().to_vec());
    assert!(!a.claims.debug);
    // Issue 12: the production policy pins no MRTD/RTMR: genuine, unpinned.
    assert!(!a.is_pinned(), "{}", a.pinning);
    assert_eq!(
        Outcome::of(&r).verdict(false),
        kolm_verifier::attested::EvidenceVerdict::Unpinned
    );
}

#[test]
fn dcap_qvl_alone_agrees_on_a_spread_of_flips() {
    // Cross-check: flips this crate rejects are rejected by dcap-qvl on its
    // own too (sparse: each dcap-qvl run verifies about ten P-256
    // signatures), except inside the embedded PEM chain, where dcap-qvl's PEM
    // reader is lenient (armour lines) and the root certificate is not used
    // (dcap-qvl anchors on its own copy): there only this crate's strict
    // parser and root pin reject them.
    let dir = tdx_dir!();
    let s = load(&dir, ACCEPT_V4, ACCEPT_V4_AT);
    let col = parse_tdx_collateral(&s.collateral).unwrap();
    let now = s.at.unix_timestamp() as u64;
    let genuine = parse_tdx_quote(&s.quote).unwrap();
    let lay = layout(&s.quote);
    let verifier =
        dcap_qvl::verify::QuoteVerifier::<dcap_qvl::configs::RustCryptoConfig>::new_with_config(
            tdx::INTEL_SGX_ROOT_CA_DER.to_vec(),
        )
        .allow_debug(true);
    verifier
        .verify(genuine.bytes(), col.as_dcap(), now)
        .unwrap();
    let (mut n, mut lenient) = (0, Vec::new());
    for i in (0..lay.end).step_by(53) {
        let mut q = genuine.bytes().to_vec();
        q[i] ^= 0x01;
        if verifier.verify(&q, col.as_dcap(), now).is_ok() {
            assert!(i >= lay.pem_start, "dcap-qvl accepts a flip of byte {i}");
            let r = verify_parsed(&q, &col, s.at);
            let id = first_failure(&r).unwrap().id;
            assert!(
                id == CheckId::from(TdxCheck::QuoteFormat)
                    || id == CheckId::from(TdxCheck::PckChain),
                "byte {i}: {id}"
            );
            lenient.push((i, genuine.bytes()[i] as char, id.to_string()));
        }
        n += 1;
    }
    eprintln!(
        "dcap-qvl alone: {n} flips, {} accepted by dcap-qvl alone and rejected here: \
         {lenient:?}",
        lenient.len()
    );
}

#[test]
fn dcap_qvl_trusted_root_has_the_pinned_key() {
    // dcap-qvl's own embedded root (`new_prod`) reports the SHA-384 of its
    // public key in the claims; it is the key of the root this crate pins.
    let dir = tdx_dir!();
    let s = load(&dir, ACCEPT_V4, ACCEPT_V4_AT);
    let col = parse_tdx_collateral(&s.collateral).unwrap();
    let now = s.at.unix_timestamp() as u64;
    let claims = dcap_qvl::verify::QuoteVerifier::new_prod()
        .with_config::<dcap_qvl::configs::RustCryptoConfig>()
        .allow_debug(true)
        .verify_with_policy(
            parse_tdx_quote(&s.quote).unwrap().bytes(),
            col.as_dcap().clone(),
            now,
            &dcap_qvl::QuotePolicy::claims_only(now),
        )
        .unwrap();
    let root =
        <x509_cert::Certificate as der::Decode>::from_der(tdx::INTEL_SGX_ROOT_CA_DER).unwrap();
    let key = root
        .tbs_certificate
        .subject_public_key_info
        .subject_public_key
        .raw_bytes();
    assert_eq!(
        claims.platform.root_key_id,
        sha2::Sha384::digest(key).to_vec()
    );
}

#[test]
fn parsers_survive_garbage() {
    // Deterministic pseudo-random inputs and byte soups around the samples.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for len in [0usize, 1, 47, 48, 49, 631, 632, 700, 1020, 5000] {
        let buf: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        assert!(parse_tdx_quote(&buf).is_err());
        assert!(parse_tdx_collateral(&buf).is_err());
    }
    // A plausible header followed by garbage.
    let mut q = vec![4, 0, 2, 0, 0x81, 0, 0, 0, 0, 0, 0, 0];
    q.extend_from_slice(&tdx::INTEL_QE_VENDOR_ID);
    q.resize(632, 0);
    q.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        parse_tdx_quote(&q),
        Err(TdxError::Truncated { .. })
    ));
    assert!(parse_tdx_collateral(b"{}").is_err());
    assert!(parse_tdx_collateral(b"null").is_err());
    assert!(parse_tdx_collateral(&[b'['; 10_000]).is_err());
}

#[test]
fn collateral_parser_survives_byte_flips() {
    // Deterministic byte soup over a genuine collateral: the parser must
    // return, never panic; flips inside hex/PEM/JSON syntax are errors.
    let dir = tdx_dir!();
    let s = load(&dir, ACCEPT_V5, ACCEPT_V5_AT);
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let (mut ok, mut err) = (0, 0);
    for _ in 0..600 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut c = s.collateral.clone();
        let i = (x as usize) % c.len();
        c[i] ^= 1 << ((x >> 32) % 8);
        match parse_tdx_collateral(&c) {
            Ok(_) => ok += 1,
            Err(_) => err += 1,
        }
    }
    eprintln!("collateral parser: 600 flips, {err} rejected, {ok} still parse");
}
