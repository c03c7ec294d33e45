//! TDX quote verification against the shared samples
//! (`../shared/attestation-samples/tdx/`, or `$KOLM_SAMPLES_DIR/tdx/`):
//! every case of `expected.json` with every listed field, the collateral
//! windows, instants just outside each window, and mutations of the quote and
//! the collateral. Without the samples each test prints `SKIP: ...` and passes.

mod common;

use std::path::PathBuf;

use kolm_format::timefmt::parse_rfc3339;
use kolm_policy::Policy;
use kolm_verifier::attestation::{AttestationReport, AttestationVerdict, CheckKind};
use kolm_verifier::report::CheckStatus;
use kolm_verifier::tdx::{
    self, TdxError, Trailing, parse_tdx_collateral, parse_tdx_quote, verify_tdx, verify_tdx_parsed,
};
use serde_json::Value;
use sha2::{Digest, Sha256};
use time::{Duration, OffsetDateTime};

fn samples_dir() -> Option<PathBuf> {
    common::samples_dir("tdx/expected.json").map(|d| d.join("tdx"))
}

macro_rules! tdx_dir {
    () => {
        match samples_dir() {
            Some(d) => d,
            None => return,
        }
    };
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

fn load(dir: &std::path::Path, case: &str, at: &str) -> Sample {
    Sample {
        quote: std::fs::read(dir.join(case).join("quote.bin")).unwrap(),
        collateral: std::fs::read(dir.join(case).join("collateral.json")).unwrap(),
        at: parse_rfc3339(at).unwrap(),
    }
}

fn verify(quote: &[u8], collateral: &[u8], at: OffsetDateTime) -> AttestationReport {
    verify_tdx(quote, collateral, at, &Policy::production(), None)
}

/// `(id, kind, detail)` of the first failing check.
fn first_failure(rep: &AttestationReport) -> Option<(&str, CheckKind, &str)> {
    rep.first_failure()
        .map(|c| (c.id.as_str(), c.kind, c.detail.as_str()))
}

/// Asserts an accept with no failing check.
fn assert_accept(rep: &AttestationReport, what: &str) {
    assert_eq!(
        rep.verdict,
        AttestationVerdict::Accept,
        "{what}: {}",
        rep.to_table()
    );
    assert!(first_failure(rep).is_none());
    assert!(rep.reason.is_none());
}

/// Asserts a reject whose first failing check is `id`.
fn assert_reject(rep: &AttestationReport, id: &str, what: &str) {
    assert_eq!(
        rep.verdict,
        AttestationVerdict::Reject,
        "{what}: {}",
        rep.to_table()
    );
    let (got, _, _) = first_failure(rep).unwrap();
    assert_eq!(got, id, "{what}: {}", rep.to_table());
    assert!(rep.reason.as_deref().unwrap().starts_with(id));
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
        let rep = verify(&quote, &collateral, at);
        let what = format!("{d} at {at_text}");
        assert_eq!(rep.platform, "tdx");
        assert_eq!(rep.verified_at, at_text);
        let class = expected_class(case["expected"].as_str().unwrap());
        match class {
            Expected::Accept => {
                assert_accept(&rep, &what);
                assert_eq!(rep.fields["tcb_status"], "UpToDate", "{what}");
                assert_eq!(rep.fields["advisory_ids"], serde_json::json!([]), "{what}");
            }
            Expected::Expired | Expected::NotYetValid => {
                assert_reject(&rep, "tdx.collateral.freshness", &what);
                let (_, kind, detail) = first_failure(&rep).unwrap();
                assert_eq!(kind, CheckKind::Freshness);
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
                assert_reject(&rep, "tdx.tcb.level", &what);
                let (_, kind, detail) = first_failure(&rep).unwrap();
                assert_eq!(kind, CheckKind::Tcb);
                assert!(
                    detail.contains("No matching TCB level found"),
                    "{what}: {detail}"
                );
            }
        }
        // Every listed field, by name and value.
        if let Some(fields) = case["fields"].as_object() {
            for (name, want) in fields {
                let got = rep
                    .fields
                    .get(name)
                    .unwrap_or_else(|| panic!("{what}: field {name} missing"));
                assert_eq!(got, want, "{what}: field {name}");
                fields_checked += 1;
            }
        }
        // The windows the parser read equal the ones listed.
        if let Some(w) = case["collateral_windows"].as_object() {
            let c = parse_tdx_collateral(&collateral).unwrap();
            let ti = &w["tcb_info"];
            assert_eq!(c.tcb_info().id, ti["id"].as_str().unwrap());
            assert_eq!(
                u64::from(c.tcb_info().version),
                ti["version"].as_u64().unwrap()
            );
            assert_eq!(
                utc(c.tcb_info().issue_date),
                ti["issueDate"].as_str().unwrap()
            );
            assert_eq!(
                utc(c.tcb_info().next_update),
                ti["nextUpdate"].as_str().unwrap()
            );
            assert_eq!(
                c.tcb_info().fmspc.as_deref().unwrap().to_lowercase(),
                ti["fmspc"].as_str().unwrap().to_lowercase()
            );
            assert_eq!(
                u64::from(c.tcb_info().tcb_evaluation_data_number),
                ti["tcbEvaluationDataNumber"].as_u64().unwrap()
            );
            let qi = &w["qe_identity"];
            assert_eq!(c.qe_identity().id, qi["id"].as_str().unwrap());
            assert_eq!(
                utc(c.qe_identity().issue_date),
                qi["issueDate"].as_str().unwrap()
            );
            assert_eq!(
                utc(c.qe_identity().next_update),
                qi["nextUpdate"].as_str().unwrap()
            );
            let crl_pair = |crl: &tdx::CrlSummary| {
                let f = |t: OffsetDateTime| utc(t).replace('Z', "+00:00");
                (f(crl.this_update), f(crl.next_update))
            };
            let root = crl_pair(c.root_ca_crl());
            assert_eq!(root.0, w["root_ca_crl"][0].as_str().unwrap());
            assert_eq!(root.1, w["root_ca_crl"][1].as_str().unwrap());
            let pck = crl_pair(c.pck_crl());
            assert_eq!(pck.0, w["pck_crl"][0].as_str().unwrap());
            assert_eq!(pck.1, w["pck_crl"][1].as_str().unwrap());
            assert_eq!(
                format!("entries={}", c.pck_crl().entries),
                w["pck_crl"][2].as_str().unwrap()
            );
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
                let rep = verify_tdx_parsed(&quote, &collateral, at, &Policy::production(), None);
                let what = format!("{d}: {name} {word} at {}", utc(at));
                assert_reject(&rep, "tdx.collateral.freshness", &what);
                let (_, kind, detail) = first_failure(&rep).unwrap();
                assert_eq!(kind, CheckKind::Freshness);
                assert!(
                    detail.contains(&format!("{name} {word}")),
                    "{what}: {detail}"
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
        let rep = verify(&s.quote, &s.collateral, s.at);
        let window = rep.fields["collateral_window"].as_array().unwrap().clone();
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
                "tdx.collateral.freshness",
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

/// Verifies `quote` with the byte at `i` XORed with `mask`, and returns the
/// report.
fn flipped(s: &Sample, col: &tdx::TdxCollateral, i: usize, mask: u8) -> AttestationReport {
    let mut q = s.quote.clone();
    q[i] ^= mask;
    verify_tdx_parsed(&q, col, s.at, &Policy::production(), None)
}

fn all_samples(dir: &std::path::Path) -> Vec<(&'static str, Sample)> {
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

#[test]
fn every_header_and_td_report_bit_flip_is_rejected() {
    let dir = tdx_dir!();
    let start = std::time::Instant::now();
    let mut n = 0;
    for (case, s) in all_samples(&dir) {
        let col = parse_tdx_collateral(&s.collateral).unwrap();
        let lay = layout(&s.quote);
        for i in 0..lay.signed_len {
            // 0x01 on every byte, 0x80 on every third.
            let masks: &[u8] = if i % 3 == 0 { &[0x01, 0x80] } else { &[0x01] };
            for &mask in masks {
                let rep = flipped(&s, &col, i, mask);
                n += 1;
                let (id, kind, detail) = first_failure(&rep)
                    .unwrap_or_else(|| panic!("{case}: byte {i} ^ {mask:#04x} accepted"));
                assert_eq!(rep.verdict, AttestationVerdict::Reject);
                assert!(
                    (id == "tdx.quote.signature" && kind == CheckKind::Signature)
                        || (id == "tdx.quote.format" && kind == CheckKind::Format),
                    "{case}: byte {i} ^ {mask:#04x}: {id} {detail}"
                );
            }
        }
    }
    eprintln!(
        "header/TD report: {n} bit flips, all rejected ({:?})",
        start.elapsed()
    );
}

#[test]
fn signature_data_flips_are_rejected() {
    let dir = tdx_dir!();
    let start = std::time::Instant::now();
    let mut n = 0;
    for (case, s) in all_samples(&dir).into_iter().take(2) {
        let col = parse_tdx_collateral(&s.collateral).unwrap();
        let lay = layout(&s.quote);
        // Every byte of the length field, ECDSA signature, attestation key,
        // certification data headers, QE report, QE report signature, QE
        // auth data and inner headers; every 5th byte of the PEM chain.
        let fixed = lay.signed_len..lay.pem_start;
        let pem = (lay.pem_start..lay.end).step_by(5);
        for i in fixed.chain(pem).chain([lay.end - 1]) {
            let masks: &[u8] = if i % 7 == 0 { &[0x01, 0x80] } else { &[0x01] };
            for &mask in masks {
                let rep = flipped(&s, &col, i, mask);
                n += 1;
                let (id, kind, detail) = first_failure(&rep)
                    .unwrap_or_else(|| panic!("{case}: byte {i} ^ {mask:#04x} accepted"));
                let region = if i < lay.sig_start {
                    "length"
                } else if i < lay.sig_start + 128 {
                    "sig/ak"
                } else {
                    "certification data"
                };
                assert!(
                    matches!(
                        kind,
                        CheckKind::Format | CheckKind::Signature | CheckKind::Chain
                    ) && id != "tdx.dcap",
                    "{case}: byte {i} ({region}) ^ {mask:#04x}: {id} {detail}"
                );
            }
        }
    }
    eprintln!(
        "signature data: {n} bit flips, all rejected ({:?})",
        start.elapsed()
    );
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
            let rep = verify_tdx_parsed(&s.quote[..len], &col, s.at, &Policy::production(), None);
            assert_reject(&rep, "tdx.quote.format", &format!("{case}: prefix {len}"));
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
    assert_accept(
        &verify_tdx_parsed(&padded, &col, s.at, &Policy::production(), None),
        "zero padding",
    );
    // Anything else is rejected, by the parser and by the verifier.
    for tail in [&[1u8][..], b"\nextra bytes", &[0, 0, 0, 7]] {
        let mut q = s.quote.clone();
        q.extend_from_slice(tail);
        let err = parse_tdx_quote(&q).unwrap_err();
        assert!(matches!(err, TdxError::TrailingData { .. }), "{err}");
        let rep = verify_tdx_parsed(&q, &col, s.at, &Policy::production(), None);
        assert_reject(&rep, "tdx.quote.trailing_data", "trailing data");
        // It is the only failing check.
        let fails: Vec<_> = rep
            .checks
            .iter()
            .filter(|c| c.status == CheckStatus::Fail)
            .collect();
        assert_eq!(fails.len(), 1);
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
    let rep = verify(&g.quote, &g.collateral, g.at);
    assert!(
        rep.checks
            .iter()
            .any(|c| c.id == "tdx.quote.trailing_data" && c.status == CheckStatus::Fail)
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
    let dir = tdx_dir!();
    let s = load(&dir, ACCEPT_V4, ACCEPT_V4_AT);
    // tee_type patched to SGX (0) and to garbage.
    for tee in [0u32, 0x80, 0x8100_0000] {
        let mut q = s.quote.clone();
        put_u32(&mut q, 4, tee);
        let err = parse_tdx_quote(&q).unwrap_err();
        assert_eq!(err, TdxError::WrongTeeType { tee_type: tee });
        let rep = verify(&q, &s.collateral, s.at);
        assert_reject(&rep, "tdx.quote.format", "wrong tee");
    }
    // The genuine SGX v3 quote shipped in dcap-qvl 0.7.1 (sample/sgx_quote),
    // read from the cargo registry when it is there.
    match dcap_qvl_sample("sgx_quote") {
        Some(sgx) => {
            let err = parse_tdx_quote(&sgx).unwrap_err();
            assert_eq!(err, TdxError::WrongTeeType { tee_type: 0 });
            assert!(err.to_string().contains("SGX quote"));
            let rep = verify(&sgx, &s.collateral, s.at);
            assert_reject(&rep, "tdx.quote.format", "SGX v3 quote");
        }
        None => {
            // Straight to the stderr handle: libtest does not capture it, so
            // the reason shows in every run, not only in failing ones.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIP: dcap-qvl 0.7.1 sample/sgx_quote not found in the cargo registry"
            );
        }
    }
}

/// A file of the dcap-qvl 0.7.1 crate source in the local cargo registry.
fn dcap_qvl_sample(name: &str) -> Option<Vec<u8>> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    let src = home.join("registry/src");
    for index in std::fs::read_dir(src).ok()?.flatten() {
        let p = index.path().join("dcap-qvl-0.7.1/sample").join(name);
        if let Ok(bytes) = std::fs::read(p) {
            return Some(bytes);
        }
    }
    None
}

/// Collateral JSON with `f` applied to its object.
fn edit(collateral: &[u8], f: impl FnOnce(&mut serde_json::Map<String, Value>)) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(collateral).unwrap();
    f(v.as_object_mut().unwrap());
    serde_json::to_vec(&v).unwrap()
}

fn field(collateral: &[u8], name: &str) -> Value {
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

#[test]
fn collateral_mutations_are_rejected_with_the_right_check() {
    let dir = tdx_dir!();
    let s = load(&dir, ACCEPT_V4, ACCEPT_V4_AT);
    let other = load(&dir, ACCEPT_V5, ACCEPT_V5_AT);
    let tcb_v5 = load(&dir, TCB_V5, TCB_V5_AT);
    let gotdx = load(&dir, GOTDX_V4, GOTDX_V4_AT);
    type Edit = Box<dyn Fn(&mut serde_json::Map<String, Value>)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "tcb_info: one digit of an SVN changed",
            Box::new(|c| replace_in(c, "tcb_info", "\"svn\":2", "\"svn\":3")),
            "tdx.tcb_info.signature",
        ),
        (
            "tcb_info: one letter of a status changed (still parses)",
            Box::new(|c| replace_in(c, "tcb_info", "\"OutOfDate\"", "\"Revoked\"")),
            "tdx.tcb_info.signature",
        ),
        (
            "qe_identity: isvprodid changed",
            Box::new(|c| replace_in(c, "qe_identity", "\"isvprodid\":2", "\"isvprodid\":3")),
            "tdx.qe_identity.signature",
        ),
        (
            "tcb_info_signature: one bit",
            Box::new(|c| flip_hex(c, "tcb_info_signature", 5)),
            "tdx.tcb_info.signature",
        ),
        (
            "tcb_info_signature swapped with qe_identity_signature",
            Box::new(|c| {
                let q = c["qe_identity_signature"].clone();
                c.insert("tcb_info_signature".into(), q);
            }),
            "tdx.tcb_info.signature",
        ),
        (
            "tcb_info_signature from another sample",
            {
                let sig = field(&other.collateral, "tcb_info_signature");
                Box::new(move |c| {
                    c.insert("tcb_info_signature".into(), sig.clone());
                })
            },
            "tdx.tcb_info.signature",
        ),
        (
            "qe_identity_signature: one bit",
            Box::new(|c| flip_hex(c, "qe_identity_signature", 40)),
            "tdx.qe_identity.signature",
        ),
        (
            "tcb_info_issuer_chain = pck_crl_issuer_chain (Intel-signed CA as signer)",
            Box::new(|c| {
                let p = c["pck_crl_issuer_chain"].clone();
                c.insert("tcb_info_issuer_chain".into(), p);
            }),
            // webpki: a CA certificate cannot be the TCB Info signer.
            "tdx.chain",
        ),
        (
            "pck_crl from another sample (2026)",
            {
                let crl = field(&tcb_v5.collateral, "pck_crl");
                Box::new(move |c| {
                    c.insert("pck_crl".into(), crl.clone());
                })
            },
            "tdx.collateral.freshness",
        ),
        (
            "pck_crl from another sample (2023)",
            {
                let crl = field(&gotdx.collateral, "pck_crl");
                Box::new(move |c| {
                    c.insert("pck_crl".into(), crl.clone());
                })
            },
            "tdx.collateral.freshness",
        ),
        (
            "root_ca_crl from another sample (2026)",
            {
                let crl = field(&other.collateral, "root_ca_crl");
                Box::new(move |c| {
                    c.insert("root_ca_crl".into(), crl.clone());
                })
            },
            "tdx.collateral.freshness",
        ),
        (
            "pck_crl: one bit of its signature",
            Box::new(|c| {
                let len = c["pck_crl"].as_str().unwrap().len() / 2;
                flip_hex(c, "pck_crl", len - 3)
            }),
            "tdx.crl",
        ),
        (
            "root_ca_crl: one bit of its signature",
            Box::new(|c| {
                let len = c["root_ca_crl"].as_str().unwrap().len() / 2;
                flip_hex(c, "root_ca_crl", len - 3)
            }),
            "tdx.crl",
        ),
        (
            "tcb_info_issuer_chain: the 2018 TCB Signing cert (expired 2025-05-21)",
            {
                let chain = field(&gotdx.collateral, "tcb_info_issuer_chain");
                Box::new(move |c| {
                    c.insert("tcb_info_issuer_chain".into(), chain.clone());
                })
            },
            "tdx.collateral.freshness",
        ),
        (
            "pck_certificate_chain: another platform's chain",
            {
                let q = parse_tdx_quote(&other.quote).unwrap();
                let pem = String::from_utf8(q.pck_chain_pem().to_vec()).unwrap();
                Box::new(move |c| {
                    c.insert("pck_certificate_chain".into(), Value::String(pem.clone()));
                })
            },
            "tdx.collateral.pck_chain_match",
        ),
        (
            "unknown key",
            Box::new(|c| {
                c.insert("tcb_info_v4".into(), Value::String(String::new()));
            }),
            "tdx.collateral.format",
        ),
        (
            "missing key",
            Box::new(|c| {
                c.remove("pck_crl");
            }),
            "tdx.collateral.format",
        ),
        (
            "non-hex CRL",
            Box::new(|c| replace_in(c, "pck_crl", "30", "zz")),
            "tdx.collateral.format",
        ),
        (
            "63-byte signature",
            Box::new(|c| {
                let s = c["tcb_info_signature"].as_str().unwrap()[2..].to_string();
                c.insert("tcb_info_signature".into(), Value::String(s));
            }),
            "tdx.collateral.format",
        ),
        (
            "tcb_info not JSON",
            Box::new(|c| replace_in(c, "tcb_info", "{", "[")),
            "tdx.collateral.format",
        ),
        (
            "issuer chain with three certificates",
            Box::new(|c| {
                let a = c["tcb_info_issuer_chain"].as_str().unwrap().to_string();
                let b = c["pck_crl_issuer_chain"].as_str().unwrap().to_string();
                c.insert("tcb_info_issuer_chain".into(), Value::String(a + &b));
            }),
            "tdx.collateral.format",
        ),
    ];
    for (what, f, want) in &cases {
        let mutated = edit(&s.collateral, f);
        let rep = verify(&s.quote, &mutated, s.at);
        assert_reject(&rep, want, what);
    }
    // The 2025 re-issued TCB Signing cert (notBefore 2025-05-06) on 2023
    // collateral: not valid at the 2023 instant.
    let mutated = edit(&gotdx.collateral, |c| {
        let chain = field(&s.collateral, "tcb_info_issuer_chain");
        c.insert("tcb_info_issuer_chain".into(), chain);
    });
    let rep = verify(&gotdx.quote, &mutated, gotdx.at);
    assert_reject(
        &rep,
        "tdx.collateral.freshness",
        "2025 TCB signing cert in 2023",
    );
    assert!(
        first_failure(&rep)
            .unwrap()
            .2
            .contains("TCB Info signing certificate not yet valid: notBefore 2025-05-06T09:25:00Z")
    );
    // Duplicate keys and oversize input.
    let text = String::from_utf8(s.collateral.clone()).unwrap();
    let dup = text.replacen('{', "{\"pck_crl\":\"00\",", 1);
    assert_reject(
        &verify(&s.quote, dup.as_bytes(), s.at),
        "tdx.collateral.format",
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
    // The td15ex collateral carries the quote's own chain: accepted.
    let s = load(&dir, ACCEPT_V5, ACCEPT_V5_AT);
    let rep = verify(&s.quote, &s.collateral, s.at);
    assert_accept(&rep, "td15ex");
    assert!(
        rep.checks
            .iter()
            .any(|c| c.id == "tdx.collateral.pck_chain_match"
                && c.status == CheckStatus::Pass
                && c.detail.contains("identical"))
    );
    // Adding the quote's own chain to the v4 collateral: still accepted.
    let v4 = load(&dir, ACCEPT_V4, ACCEPT_V4_AT);
    let own =
        String::from_utf8(parse_tdx_quote(&v4.quote).unwrap().pck_chain_pem().to_vec()).unwrap();
    let with_own = edit(&v4.collateral, |c| {
        c.insert("pck_certificate_chain".into(), Value::String(own.clone()));
    });
    assert_accept(&verify(&v4.quote, &with_own, v4.at), "v4 + own chain");
    // Same leaf but a different intermediate order, or another platform's
    // chain: rejected before dcap-qvl could use it.
    let certs: Vec<&str> = own
        .split_inclusive("-----END CERTIFICATE-----\n")
        .filter(|c| c.contains("BEGIN"))
        .collect();
    assert_eq!(certs.len(), 3);
    let reordered = format!("{}{}{}", certs[0], certs[2], certs[1]);
    let other = edit(&v4.collateral, |c| {
        c.insert(
            "pck_certificate_chain".into(),
            Value::String(reordered.clone()),
        );
    });
    let rep = verify(&v4.quote, &other, v4.at);
    assert_reject(&rep, "tdx.collateral.pck_chain_match", "reordered");
    assert!(first_failure(&rep).unwrap().2.contains("same leaf: yes"));
    let foreign =
        String::from_utf8(parse_tdx_quote(&s.quote).unwrap().pck_chain_pem().to_vec()).unwrap();
    let other = edit(&v4.collateral, |c| {
        c.insert(
            "pck_certificate_chain".into(),
            Value::String(foreign.clone()),
        );
    });
    let rep = verify(&v4.quote, &other, v4.at);
    assert_reject(&rep, "tdx.collateral.pck_chain_match", "foreign chain");
    assert!(first_failure(&rep).unwrap().2.contains("same leaf: no"));
}

#[test]
fn policy_allow_lists_tcb_status_and_binding() {
    let dir = tdx_dir!();
    let s = load(&dir, ACCEPT_V5, ACCEPT_V5_AT);
    let q = parse_tdx_quote(&s.quote).unwrap();
    let mrtd = hex::encode(q.mrtd());
    let rtmr2 = hex::encode(q.rtmrs()[2]);
    let policy = |extra: &str| {
        Policy::from_toml_str(&format!(
            "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"tdx\"]\n[tdx]\n{extra}"
        ))
        .unwrap()
    };
    let other48 = "ab".repeat(48);
    let run = |p: &Policy, rd: Option<&[u8; 64]>| verify_tdx(&s.quote, &s.collateral, s.at, p, rd);

    assert_accept(
        &run(
            &policy(&format!("mrtd = [\"{mrtd}\"]\nrtmr2 = [\"{rtmr2}\"]")),
            None,
        ),
        "listed MRTD and RTMR2",
    );
    assert_reject(
        &run(&policy(&format!("mrtd = [\"{other48}\"]")), None),
        "tdx.policy.mrtd",
        "unlisted MRTD",
    );
    let rep = run(&policy(&format!("rtmr0 = [\"{other48}\"]")), None);
    assert_reject(&rep, "tdx.policy.rtmr", "unlisted RTMR0");
    // Rules after the violated one are not evaluated by kolm-policy.
    assert!(
        rep.checks
            .iter()
            .any(|c| c.id == "tdx.policy.tcb_status" && c.status == CheckStatus::Skip)
    );
    assert_reject(
        &run(&policy("allowed_tcb_status = [\"OutOfDate\"]"), None),
        "tdx.policy.tcb_status",
        "UpToDate not allowed",
    );
    // REPORT_DATA binding.
    let rd = *q.report_data();
    let rep = run(&Policy::production(), Some(&rd));
    assert_accept(&rep, "matching REPORT_DATA");
    assert!(
        rep.checks
            .iter()
            .any(|c| c.id == "tdx.binding.report_data" && c.status == CheckStatus::Pass)
    );
    let mut wrong = rd;
    wrong[63] ^= 1;
    assert_reject(
        &run(&Policy::production(), Some(&wrong)),
        "tdx.binding.report_data",
        "other REPORT_DATA",
    );
}

#[test]
fn check_order_and_kinds_on_accept() {
    let dir = tdx_dir!();
    let s = load(&dir, ACCEPT_V4, ACCEPT_V4_AT);
    let rep = verify(&s.quote, &s.collateral, s.at);
    let ids: Vec<(&str, CheckKind, CheckStatus)> = rep
        .checks
        .iter()
        .map(|c| (c.id.as_str(), c.kind, c.status))
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
            ("tdx.policy.mrtd", K::Measurement, Pass),
            ("tdx.policy.rtmr", K::Measurement, Pass),
            ("tdx.policy.tcb_status", K::Tcb, Pass),
            ("tdx.policy.advisories", K::Tcb, Pass),
            ("tdx.binding.report_data", K::Binding, Skip),
            ("tdx.quote.trailing_data", K::Format, Pass),
        ]
    );
    // The report serialises (the integrator's --json).
    let json = serde_json::to_value(&rep).unwrap();
    assert_eq!(json["verdict"], "accept");
    assert_eq!(json["schema"], "kolm.attestation-report.v1");
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
            let rep = verify_tdx_parsed(&q, &col, s.at, &Policy::production(), None);
            let (id, _, _) = first_failure(&rep).unwrap();
            assert!(
                matches!(id, "tdx.quote.format" | "tdx.pck.chain"),
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
