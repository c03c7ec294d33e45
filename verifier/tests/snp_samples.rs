//! SEV-SNP verification against the genuine samples of
//! `shared/attestation-samples/sev-snp/` (table-driven from its
//! `expected.json`), and negative tests made from them at test time.
//! Nothing from the shared samples is copied into the repository.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

mod snp_common;

use std::collections::BTreeSet;

use kolm_policy::{Platform, Policy, SnpTcb};
use kolm_verifier::attested::{EvidenceKind, Expectations, Measurement, Outcome, Tcb};
use kolm_verifier::check::{CheckId, CheckStatus, SnpCheck};
use kolm_verifier::snp::{
    self, LeafKind, Product, SnpError, SnpEvidence, SnpReport, decode_report_forms,
    parse_snp_report, verify_chain,
};
use serde_json::{Value, json};
use snp_common::*;

/// The chain-only case (turin-chain-only): "accept (certificate chain only
/// ...)", with the supplied and with the embedded chain.
fn check_chain_only(root: &std::path::Path, case: &Case) {
    let name = case.name();
    assert!(case.accepts(), "{name}");
    let leaf = case.leaf_bytes(root);
    let chain = case.chain_bytes(root);
    for supplied in [Some(chain.as_slice()), None] {
        let r = verify_chain(&leaf, supplied, case.at());
        let v = match r {
            Ok(v) => v,
            Err(e) => panic!("{name}: {e}"),
        };
        assert_eq!(v.product, Product::Turin);
        assert_eq!(v.leaf_kind, LeafKind::Vcek);
        for id in [
            SnpCheck::ChainArk,
            SnpCheck::ChainAsk,
            SnpCheck::ChainVcek,
            SnpCheck::Freshness,
        ] {
            assert_eq!(
                v.checks.status_of(id),
                Some(CheckStatus::Pass),
                "{name} {id}"
            );
        }
        // Only the chain's checks are listed.
        assert_eq!(v.checks.status_of(SnpCheck::Signature), None);
        let product = &v.checks.get(SnpCheck::Product).unwrap().detail;
        assert!(product.starts_with("Turin"), "{name}");
        assert_eq!(v.fields.get("product"), Some(&json!("Turin")));
        assert_eq!(v.fields.get("signing_key"), Some(&json!("VCEK")));
        // The note's window: VCEK valid 2024-11-06T21:14:00Z..2031-11-06T21:14:00Z.
        assert_eq!(
            v.fields.get("window"),
            Some(&json!(["2024-11-06T21:14:00Z", "2031-11-06T21:14:00Z"]))
        );
    }
    // After the VCEK's notAfter the chain is stale.
    let late = verify_chain(&leaf, None, at("2032-01-01T00:00:00Z")).unwrap_err();
    assert!(
        late.reason.starts_with("snp.freshness: "),
        "{}",
        late.reason
    );
}

#[test]
fn expected_json_every_case() {
    let Some(root) = samples_dir() else { return };
    let cases = cases(&root);
    assert_eq!(cases.len(), 7, "expected.json case count changed");
    let mut report_cases = 0;
    for case in &cases {
        if case.report.is_none() {
            check_chain_only(&root, case);
            continue;
        }
        report_cases += 1;
        check_report_case(&root, case);
    }
    assert_eq!(report_cases, 6);
}

fn check_report_case(root: &std::path::Path, case: &Case) {
    let name = case.name();
    let leaf = case.leaf_bytes(root);
    let chain = case.chain_bytes(root);
    let report = case.report_bytes(root);
    // The bytes are the ones expected.json describes (for hex text, of the
    // decoded REPORT_LEN bytes).
    if let Some(want) = case.json.get("report_sha256").and_then(Value::as_str) {
        use sha2::Digest;
        assert_eq!(hex::encode(sha2::Sha256::digest(&report)), want, "{name}");
    }
    let r = run(&report, &leaf, Some(&chain), case.at(), &permissive(), None);
    if case.accepts() {
        assert_accept(&r, &name);
    } else {
        // "reject (VLEK certificate expired 2025-12-10T22:14:21Z)".
        assert!(
            case.expected.contains("expired"),
            "{name}: {}",
            case.expected
        );
        assert_reject(&r, SnpCheck::Freshness, &name);
        let reason = reason(&r);
        assert!(reason.contains("expired"), "{reason}");
        assert!(reason.contains("2025-12-10T22:14:21Z"), "{reason}");
        if case.expected.contains("VLEK") {
            assert!(reason.contains("VLEK certificate expired"), "{reason}");
            assert_eq!(field(&r, "signing_key"), "VLEK");
        }
        // Everything else about the evidence still checks out.
        for c in Outcome::of(&r).checks() {
            if c.id != CheckId::from(SnpCheck::Freshness) {
                assert_ne!(c.status, CheckStatus::Fail, "{name}: {}", c.id);
            }
        }
    }

    // Every listed field, by name and value.
    let fields = case.fields();
    assert!(!fields.is_empty() || !case.accepts(), "{name}");
    for (k, want) in &fields {
        assert_eq!(field(&r, k), want, "{name}: field {k}");
    }
    // The typed claims say what the fields say.
    let parsed = SnpReport::from_raw(&report).unwrap();
    let claims = match &r {
        Ok(a) => a.claims.clone(),
        Err(_) => snp::evaluate(
            &SnpEvidence {
                report: &report,
                vcek: &leaf,
                chain: Some(&chain),
            },
            &Expectations::new(&permissive()),
            case.at(),
        )
        .claims
        .unwrap(),
    };
    assert_eq!(claims.platform, Platform::SevSnp, "{name}");
    assert_eq!(claims.measurement, Measurement::Snp(*parsed.measurement()));
    assert_eq!(
        hex::encode(claims.measurement.as_bytes()),
        field(&r, "measurement").as_str().unwrap()
    );
    assert_eq!(claims.report_data.as_slice(), parsed.report_data());
    assert_eq!(
        claims.tcb,
        Tcb::Snp {
            reported: u64::from_le_bytes(parsed.reported_tcb().0)
        }
    );
    assert_eq!(
        Some(claims.debug),
        field(&r, "debug_allowed").as_bool(),
        "{name}"
    );

    // The per-case facts.
    let j = &case.json;
    if let Some(checks) = j.get("checks").and_then(Value::as_object) {
        for (k, id) in [
            ("ark_self", SnpCheck::ChainArk),
            ("ask_by_ark", SnpCheck::ChainAsk),
            ("leaf_by_ask", SnpCheck::ChainVcek),
            ("report_sig", SnpCheck::Signature),
        ] {
            let want = if checks[k].as_bool().unwrap() {
                CheckStatus::Pass
            } else {
                CheckStatus::Fail
            };
            assert_eq!(status(&r, id), want, "{name}: {k}");
        }
    }
    if let Some(window) = j.get("window").and_then(Value::as_array) {
        let got = field(&r, "window").as_array().unwrap();
        assert_eq!(got.len(), 2);
        for (w, g) in window.iter().zip(got) {
            assert_eq!(
                at(w.as_str().unwrap()),
                at(g.as_str().unwrap()),
                "{name}: window"
            );
        }
    }
    if let Some(v) = j.get("hwid_matches_chip_id") {
        assert_eq!(field(&r, "hwid_matches_chip_id"), v, "{name}");
        let want = match v.as_bool() {
            Some(true) => CheckStatus::Pass,
            Some(false) => CheckStatus::Fail,
            None => CheckStatus::Skip,
        };
        assert_eq!(status(&r, SnpCheck::VcekHwid), want, "{name}");
    }
    if let Some(v) = j.get("tcb_ext_matches_reported") {
        assert_eq!(field(&r, "tcb_ext_matches_reported"), v, "{name}");
        assert_eq!(status(&r, SnpCheck::VcekTcb), CheckStatus::Pass, "{name}");
    }
    for key in ["product", "signing_key"] {
        if let Some(v) = j.get(key) {
            assert_eq!(field(&r, key), v, "{name}: {key}");
        }
    }

    // The embedded chain gives the same outcome as the supplied one.
    let e = run(&report, &leaf, None, case.at(), &permissive(), None);
    assert_eq!(
        e.is_ok(),
        r.is_ok(),
        "{name}: embedded chain\n{}",
        table(&e)
    );
    assert_eq!(Outcome::of(&e).reason(), Outcome::of(&r).reason(), "{name}");
    assert_eq!(field(&e, "chain_source"), "embedded");
    assert_eq!(field(&r, "chain_source"), "supplied");

    // Under the production policy, only the policy checks the sample
    // itself predicts fail: DEBUG first, then VMPL > 0.
    let p = run(
        &report,
        &leaf,
        Some(&chain),
        case.at(),
        &Policy::production(),
        None,
    );
    let debug = field(&r, "debug_allowed").as_bool().unwrap();
    let vmpl = field(&r, "vmpl").as_u64().unwrap();
    let mut want_fail = BTreeSet::new();
    if !case.accepts() {
        want_fail.insert(SnpCheck::Freshness);
    }
    if debug {
        want_fail.insert(SnpCheck::Debug);
    }
    if vmpl > 0 {
        want_fail.insert(SnpCheck::PolicyVmpl);
    }
    let failed: BTreeSet<SnpCheck> = SnpCheck::ALL
        .iter()
        .copied()
        .filter(|&id| Outcome::of(&p).status_of(id) == Some(CheckStatus::Fail))
        .collect();
    assert_eq!(failed, want_fail, "{name}: production\n{}", table(&p));
    match want_fail.first() {
        None => assert_accept(&p, &name),
        Some(&id) => assert_reject(&p, id, &name),
    }

    // REPORT_DATA binding, right and wrong.
    let rd = hex::decode(field(&r, "report_data").as_str().unwrap()).unwrap();
    let mut wrong = rd.clone();
    wrong[63] ^= 1;
    for (what, expected, want) in [
        ("right", rd.as_slice(), CheckStatus::Pass),
        ("wrong", wrong.as_slice(), CheckStatus::Fail),
        ("short", &rd[..32], CheckStatus::Fail),
    ] {
        let b = run(
            &report,
            &leaf,
            Some(&chain),
            case.at(),
            &permissive(),
            Some(expected),
        );
        assert_eq!(
            status(&b, SnpCheck::BindingReportData),
            want,
            "{name}: {what}"
        );
        if want == CheckStatus::Pass {
            assert_eq!(b.is_ok(), r.is_ok(), "{name}: {what}");
        } else {
            assert!(b.is_err(), "{name}: {what}");
        }
    }
}

#[test]
fn check_ids_and_order() {
    let Some(root) = samples_dir() else { return };
    let c = case(&root, "milan-v5-gcp", "report.bin");
    let r = run(
        &c.report_bytes(&root),
        &c.leaf_bytes(&root),
        Some(&c.chain_bytes(&root)),
        c.at(),
        &permissive(),
        None,
    );
    let o = Outcome::of(&r);
    let got: Vec<&str> = o.checks().iter().map(|c| c.id.as_str()).collect();
    let want: Vec<&str> = SnpCheck::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(got, want);
    assert!(got.iter().all(|id| id.starts_with("snp.")));
    assert_eq!(o.kind(), EvidenceKind::SevSnp);
    assert_eq!(o.kind().as_str(), "sev-snp");
    assert_eq!(o.verified_at(), at("2026-01-01T00:00:00Z"));
    assert_eq!(status(&r, SnpCheck::Revocation), CheckStatus::Skip);
    // The display fields carry the values as in expected.json.
    let doc = serde_json::to_value(o.fields()).unwrap();
    assert_eq!(doc["reported_tcb"]["ucode"], 222);
    assert!(o.accepted());
    let a = r.as_ref().unwrap();
    assert_eq!(a.platform(), Platform::SevSnp);
    assert!(
        a.measurement()
            .to_string()
            .starts_with("MEASUREMENT b747d55452e0b9e9")
    );
}

/// An expected nonce or public key cannot be checked on SEV-SNP: the
/// evidence fails, on the binding check alone.
#[test]
fn uncheckable_expectations_fail_closed() {
    let Some(root) = samples_dir() else { return };
    let c = case(&root, "milan-v5-gcp", "report.bin");
    let report = c.report_bytes(&root);
    let leaf = c.leaf_bytes(&root);
    let policy = permissive();
    let ev = SnpEvidence {
        report: &report,
        vcek: &leaf,
        chain: None,
    };
    let rd = SnpReport::from_raw(&report).unwrap().report_data().to_vec();
    let base = Expectations::new(&policy).with_report_data(rd);
    assert_accept(&snp::verify(&ev, &base, c.at()), "REPORT_DATA only");
    let mut nonce = base.clone();
    nonce.nonce = Some(vec![1; 32]);
    let mut key = base.clone();
    key.public_key = Some(vec![2; 97]);
    for (what, expect) in [("nonce", nonce), ("public key", key)] {
        let r = snp::verify(&ev, &expect, c.at());
        assert_reject(&r, SnpCheck::BindingReportData, what);
        assert!(
            detail(&r, SnpCheck::BindingReportData)
                .contains(&format!("an expected {what} cannot be checked")),
            "{}",
            table(&r)
        );
        // Nothing else failed: only the expectation is refused.
        let failed = Outcome::of(&r)
            .checks()
            .iter()
            .filter(|c| c.status == CheckStatus::Fail)
            .count();
        assert_eq!(failed, 1, "{what}");
    }
}

#[test]
fn parser_agrees_with_sev_crate() {
    use sev::parser::ByteParser;
    let Some(root) = samples_dir() else { return };
    for c in cases(&root).iter().filter(|c| c.report.is_some()) {
        let ours = SnpReport::from_raw(&c.report_bytes(&root)).unwrap();
        let theirs = sev::firmware::guest::AttestationReport::from_bytes(ours.raw()).unwrap();
        let name = c.name();
        assert_eq!(theirs.version, ours.version().number(), "{name}");
        assert_eq!(u64::from(theirs.policy), ours.policy().0, "{name}");
        assert_eq!(theirs.vmpl, ours.vmpl(), "{name}");
        assert_eq!(theirs.guest_svn, ours.guest_svn(), "{name}");
        assert_eq!(&theirs.report_data, ours.report_data(), "{name}");
        assert_eq!(&theirs.measurement, ours.measurement(), "{name}");
        assert_eq!(&theirs.host_data, ours.host_data(), "{name}");
        assert_eq!(&theirs.chip_id, ours.chip_id(), "{name}");
        assert_eq!(u64::from(theirs.plat_info), ours.platform_info(), "{name}");
        assert_eq!(
            theirs.cpuid_fam_id,
            ours.cpuid().map(|c| c.family),
            "{name}"
        );
        assert_eq!(theirs.cpuid_mod_id, ours.cpuid().map(|c| c.model), "{name}");
        assert_eq!(
            theirs.cpuid_step,
            ours.cpuid().map(|c| c.stepping),
            "{name}"
        );
        assert_eq!(theirs.launch_mit_vector, ours.launch_mit_vector(), "{name}");
        assert_eq!(
            theirs.current_mit_vector,
            ours.current_mit_vector(),
            "{name}"
        );
        let v = ours.current_version();
        assert_eq!(
            (
                theirs.current.major,
                theirs.current.minor,
                theirs.current.build
            ),
            (v.major, v.minor, v.build),
            "{name}"
        );
        let mine = ours.reported_tcb().decode(Product::Milan.tcb_layout());
        let t = theirs.reported_tcb;
        assert_eq!(
            (t.bootloader, t.tee, t.snp, t.microcode),
            (mine.bootloader, mine.tee, mine.snp, mine.microcode),
            "{name}"
        );
        assert_eq!(&theirs.signature, &ours.signature(), "{name}");
        // Accessors used by the artifact path.
        assert_eq!(ours.report_data().len(), 64);
        assert_eq!(ours.measurement().len(), 48);
    }
}

#[test]
fn hex_text_is_decoded_before_verification() {
    let Some(root) = samples_dir() else { return };
    let c = case(&root, "milan-v2-sevcrate", "report.hex");
    let hex_upper = c.report_file(&root);
    assert!(hex_upper.iter().all(|b| !b.is_ascii_lowercase()));
    let lower = String::from_utf8(hex_upper.clone()).unwrap().to_lowercase();
    let raw = decode_report_forms(&hex_upper).unwrap();
    assert_eq!(raw.len(), kolm_verifier::snp::report::REPORT_LEN);
    assert_eq!(decode_report_forms(lower.as_bytes()).unwrap(), raw);
    // Raw bytes pass through untouched.
    assert!(matches!(
        decode_report_forms(&raw).unwrap(),
        std::borrow::Cow::Borrowed(_)
    ));
    let from_upper = parse_snp_report(&hex_upper).unwrap();
    assert_eq!(from_upper, parse_snp_report(lower.as_bytes()).unwrap());
    assert_eq!(from_upper, SnpReport::from_raw(&raw).unwrap());
    let leaf = c.leaf_bytes(&root);
    let chain = c.chain_bytes(&root);
    let r = run(&raw, &leaf, Some(&chain), c.at(), &permissive(), None);
    assert_accept(&r, "raw bytes of the hex sample");
    // verify takes the binary form only: the hex text itself is a format
    // error.
    let r = run(&hex_upper, &leaf, Some(&chain), c.at(), &permissive(), None);
    assert_reject(&r, SnpCheck::ReportFormat, "hex text given to verify");
    assert!(reason(&r).contains("2368 bytes"), "{}", reason(&r));
    // A hex spelling with a stray character does not decode.
    let mut bad = hex_upper;
    bad[100] = b'Z';
    assert_eq!(
        decode_report_forms(&bad).unwrap_err(),
        SnpError::ReportHex {
            offset: 100,
            byte: b'Z'
        }
    );
    assert_eq!(
        SnpError::ReportHex { offset: 0, byte: 0 }.check(),
        SnpCheck::ReportFormat
    );
}

#[test]
fn leaf_as_der_or_pem() {
    let Some(root) = samples_dir() else { return };
    let c = case(&root, "milan-v2-gosevguest", "report.bin");
    let report = c.report_bytes(&root);
    let der = c.leaf_bytes(&root);
    let mut trailing = der.clone();
    trailing.push(0);
    let mut two = pem(&der);
    two.extend(pem(&der));
    let ask = snp::roots::embedded_ca(Product::Milan, LeafKind::Vcek).unwrap();
    for (what, leaf, want) in [
        ("VCEK as PEM", pem(&der), Expect::Accept),
        // DER with a trailing byte, and two PEM certificates, are not a leaf.
        (
            "VCEK DER + trailing byte",
            trailing,
            Expect::Reject(SnpCheck::VcekFormat),
        ),
        (
            "two PEM certificates as the leaf",
            two,
            Expect::Reject(SnpCheck::VcekFormat),
        ),
        // The ASK is not a leaf.
        (
            "ASK as the leaf",
            ask.ask.der().to_vec(),
            Expect::Reject(SnpCheck::VcekFormat),
        ),
    ] {
        let chain = c.chain_bytes(&root);
        let r = run(&report, &leaf, Some(&chain), c.at(), &permissive(), None);
        assert_outcome(&r, want, what);
    }
}

#[test]
fn truncation_and_trailing_bytes_are_format_errors() {
    let Some(root) = samples_dir() else { return };
    let c = case(&root, "milan-v5-gcp", "report.bin");
    let report = c.report_bytes(&root);
    let leaf = c.leaf_bytes(&root);
    let chain = c.chain_bytes(&root);
    let with = |tail: &[u8]| [report.as_slice(), tail].concat();
    let hex_with = |tail: &[u8]| [hex::encode(&report).as_bytes(), tail].concat();
    let variants: [(&str, Vec<u8>); 7] = [
        ("empty", vec![]),
        ("one byte short", report[..report.len() - 1].to_vec()),
        ("signed part only", report[..0x2A0].to_vec()),
        ("one trailing byte", with(&[0])),
        ("doubled", with(&report)),
        ("hex with a trailing byte", hex_with(b"00")),
        ("hex with a trailing space", hex_with(b" ")),
    ];
    for (what, bytes) in variants {
        assert!(parse_snp_report(&bytes).is_err(), "{what}");
        assert!(decode_report_forms(&bytes).is_err(), "{what}");
        let r = run(&bytes, &leaf, Some(&chain), c.at(), &permissive(), None);
        assert_reject(&r, SnpCheck::ReportFormat, what);
        assert_eq!(
            reason(&r),
            format!(
                "snp.report.format: report is {} bytes; an ATTESTATION_REPORT is exactly {}",
                bytes.len(),
                kolm_verifier::snp::report::REPORT_LEN
            )
        );
        // The chain is still checked and shown; the report yields no claims.
        assert_eq!(status(&r, SnpCheck::ChainVcek), CheckStatus::Pass, "{what}");
        assert_eq!(status(&r, SnpCheck::Signature), CheckStatus::Skip, "{what}");
        assert_eq!(
            detail(&r, SnpCheck::Signature),
            "not run: the report did not parse"
        );
        assert_eq!(Outcome::of(&r).checks().len(), SnpCheck::ALL.len());
    }
}

#[test]
fn signature_bytes_flipped() {
    let Some(root) = samples_dir() else { return };
    let c = case(&root, "milan-v3-vlek-trustee", "report.bin");
    let report = c.report_bytes(&root);
    let leaf = c.leaf_bytes(&root);
    let chain = c.chain_bytes(&root);
    let mut rows: Vec<(String, Vec<u8>, SnpCheck)> = Vec::new();
    // R and S: 48 significant bytes each, then the zero extension.
    for (base, name) in [(0x2A0usize, "R"), (0x2E8, "S")] {
        for i in (0..72).step_by(3) {
            for mask in [0x01u8, 0x80] {
                let mut m = report.clone();
                m[base + i] ^= mask;
                let want = if i < 48 {
                    SnpCheck::Signature
                } else {
                    SnpCheck::ReportFormat
                };
                rows.push((format!("{name}[{i}] ^ {mask:#x}"), m, want));
            }
        }
    }
    for off in [0x330usize, 0x3FF, 0x49F] {
        let mut m = report.clone();
        m[off] ^= 0x01;
        let what = format!("reserved signature byte {off:#x}");
        rows.push((what, m, SnpCheck::ReportFormat));
    }
    // An all-zero signature is no signature.
    let mut m = report.clone();
    m[0x2A0..0x330].fill(0);
    rows.push(("zero signature".into(), m, SnpCheck::Signature));
    for (what, m, want) in &rows {
        let r = run(m, &leaf, Some(&chain), c.at(), &permissive(), None);
        assert_reject(&r, *want, what);
    }
    eprintln!("signature mutations: {}", rows.len());
}

#[test]
fn wrong_product_chain_is_rejected_by_the_ark_check() {
    let Some(root) = samples_dir() else { return };
    let amd = |f: &str| std::fs::read(root.join("roots/amd").join(f)).unwrap();
    let genoa = amd("ask_ark_genoa.pem");
    let turin = amd("ask_ark_turin_vcek.pem");
    let milan_vlek = amd("ask_ark_milan_vlek.pem");
    let milan = amd("ask_ark_milan.pem");
    let vcek_cases = [
        ("milan-v2-sevcrate", "report.hex"),
        ("milan-v2-gosevguest", "report.bin"),
        ("milan-v5-gcp", "report.bin"),
    ];
    let mut rows: Vec<(Case, &str, &[u8], SnpCheck)> = Vec::new();
    for (dir, report) in vcek_cases {
        let c = case(&root, dir, report);
        rows.push((c.clone(), "the Genoa chain", &genoa, SnpCheck::ChainArk));
        rows.push((c.clone(), "the Turin chain", &turin, SnpCheck::ChainArk));
        // Milan's ARK with the ASVK (VLEK intermediate) for a VCEK.
        rows.push((c, "the ASVK", &milan_vlek, SnpCheck::ChainAsk));
    }
    // A VLEK with the VCEK chain of its product.
    let vlek = case(&root, "milan-v3-vlek-trustee", "report.bin");
    rows.push((vlek, "the ASK chain", &milan, SnpCheck::ChainAsk));
    for (c, what, chain, want) in rows {
        let what = format!("{} with {what}", c.name());
        let r = run(
            &c.report_bytes(&root),
            &c.leaf_bytes(&root),
            Some(chain),
            c.at(),
            &permissive(),
            None,
        );
        assert_reject(&r, want, &what);
        if want == SnpCheck::ChainArk {
            assert!(reason(&r).contains("ARK-Milan"), "{what}");
            // The report signature itself is fine: only the chain is wrong.
            assert_eq!(status(&r, SnpCheck::Signature), CheckStatus::Pass, "{what}");
        }
    }
}

#[test]
fn vcek_of_another_chip_is_rejected() {
    let Some(root) = samples_dir() else { return };
    let sevcrate = case(&root, "milan-v2-sevcrate", "report.hex");
    let gosev = case(&root, "milan-v2-gosevguest", "report.bin");
    let gcp = case(&root, "milan-v5-gcp", "report.bin");
    let vlek = case(&root, "milan-v3-vlek-trustee", "report.bin");
    // (report of, leaf of, at, the check that must fail besides the
    // signature).
    for (report, leaf, at, also) in [
        (&sevcrate, &gosev, sevcrate.at(), SnpCheck::VcekHwid),
        (&gosev, &sevcrate, gosev.at(), SnpCheck::VcekHwid),
        (&gcp, &sevcrate, gcp.at(), SnpCheck::VcekHwid),
        (&sevcrate, &gcp, gcp.at(), SnpCheck::VcekHwid),
        // A VCEK report checked against a VLEK, and the other way round.
        (&gcp, &vlek, vlek.at(), SnpCheck::SigningKey),
        (&vlek, &gcp, gcp.at(), SnpCheck::SigningKey),
    ] {
        let what = format!("{} with the leaf of {}", report.name(), leaf.name());
        let r = run(
            &report.report_bytes(&root),
            &leaf.leaf_bytes(&root),
            None,
            at,
            &permissive(),
            None,
        );
        assert_reject(&r, SnpCheck::Signature, &what);
        assert_eq!(status(&r, also), CheckStatus::Fail, "{what}");
        if also == SnpCheck::VcekHwid {
            assert_eq!(status(&r, SnpCheck::ChainVcek), CheckStatus::Pass, "{what}");
            assert_eq!(field(&r, "hwid_matches_chip_id"), false);
        }
    }
}

#[test]
fn tampered_vcek_signature_is_rejected() {
    let Some(root) = samples_dir() else { return };
    let c = case(&root, "milan-v2-gosevguest", "report.bin");
    let der = c.leaf_bytes(&root);
    // The last bytes of the DER are the RSA signature.
    let mut bad = der.clone();
    let n = bad.len();
    bad[n - 10] ^= 0x01;
    let r = run(
        &c.report_bytes(&root),
        &bad,
        None,
        c.at(),
        &permissive(),
        None,
    );
    assert_reject(&r, SnpCheck::ChainVcek, "VCEK signature flipped");
    assert!(reason(&r).contains("does not verify"));
}

#[test]
fn freshness_window_edges() {
    let Some(root) = samples_dir() else { return };
    let gcp = case(&root, "milan-v5-gcp", "report.bin");
    let vlek = case(&root, "milan-v3-vlek-trustee", "report.bin");
    let fresh = Expect::Reject(SnpCheck::Freshness);
    // (case, instant, verdict, words of the reason)
    let rows = [
        // VCEK valid 2025-12-05T06:04:27Z..2032-12-05T06:04:27Z, both ends included.
        (&gcp, "2025-12-05T06:04:27Z", Expect::Accept, ""),
        (&gcp, "2032-12-05T06:04:27Z", Expect::Accept, ""),
        (&gcp, "2025-12-05T06:04:26Z", fresh, "not yet valid"),
        (&gcp, "2032-12-05T06:04:28Z", fresh, "expired"),
        // Before the ARK existed, and after every AMD root has expired.
        (&gcp, "2019-01-01T00:00:00Z", fresh, ""),
        (&gcp, "2050-01-01T00:00:00Z", fresh, ""),
        // The VLEK sample is valid only for a year.
        (
            &vlek,
            "2024-12-10T22:14:20Z",
            fresh,
            "VLEK certificate not yet valid",
        ),
    ];
    for (c, t, want, words) in rows {
        let what = format!("{} at {t}", c.name());
        let r = run(
            &c.report_bytes(&root),
            &c.leaf_bytes(&root),
            Some(&c.chain_bytes(&root)),
            at(t),
            &permissive(),
            None,
        );
        assert_outcome(&r, want, &what);
        if !words.is_empty() {
            assert!(reason(&r).contains(words), "{what}: {}", reason(&r));
        }
    }
}

#[test]
fn second_verification_hits_the_ca_cache() {
    let Some(root) = samples_dir() else { return };
    let c = case(&root, "milan-v2-sevcrate", "report.hex");
    let run_at = |t| {
        run(
            &c.report_bytes(&root),
            &c.leaf_bytes(&root),
            Some(&c.chain_bytes(&root)),
            t,
            &permissive(),
            None,
        )
    };
    let _first = run_at(c.at());
    let second = run_at(c.at());
    assert_accept(&second, "second run");
    for id in [SnpCheck::ChainArk, SnpCheck::ChainAsk, SnpCheck::ChainVcek] {
        assert!(detail(&second, id).contains("(cached)"), "{id}");
    }
    assert!(snp::certs::ca_cache_len() >= 1);
    assert!(snp::certs::leaf_cache_len() >= 1);
    // A cached pair still gets its validity checked.
    let late = run_at(at("2046-01-01T00:00:00Z"));
    assert_reject(
        &late,
        SnpCheck::Freshness,
        "after the ARK's notAfter, cached",
    );
}

#[test]
fn policy_rules_each_report_their_own_outcome() {
    let Some(root) = samples_dir() else { return };
    let c = case(&root, "milan-v3-vlek-trustee", "report.bin");
    let report = c.report_bytes(&root);
    let leaf = c.leaf_bytes(&root);
    let parsed = SnpReport::from_raw(&report).unwrap();
    let run = |p: &Policy| run(&report, &leaf, None, c.at(), p, None);
    let rules = [
        SnpCheck::PolicyMeasurement,
        SnpCheck::PolicyHostData,
        SnpCheck::PolicyVmpl,
        SnpCheck::PolicyTcb,
    ];

    let mut p = permissive();
    p.sev_snp.measurements.insert(*parsed.measurement());
    p.sev_snp.host_data.insert(*parsed.host_data());
    p.sev_snp.min_tcb = Some(SnpTcb {
        bootloader: 4,
        tee: 0,
        snp: 24,
        microcode: 217,
        fmc: None,
    });
    let r = run(&p);
    assert_accept(&r, "allow-listed");
    for id in rules {
        assert_eq!(status(&r, id), CheckStatus::Pass, "{id}");
    }

    // Everything wrong at once: each rule fails on its own, the signature
    // and chain checks still run, and the first failure is named.
    let mut bad = Policy::production();
    bad.sev_snp.measurements.insert([0xAA; 48]);
    bad.sev_snp.host_data.insert([0xBB; 32]);
    bad.sev_snp.min_tcb = Some(SnpTcb {
        bootloader: 4,
        tee: 0,
        snp: 24,
        microcode: 218,
        fmc: None,
    });
    let r = run(&bad);
    assert_reject(&r, SnpCheck::PolicyMeasurement, "everything wrong");
    for id in rules {
        assert_eq!(status(&r, id), CheckStatus::Fail, "{id}");
    }
    assert!(detail(&r, SnpCheck::PolicyTcb).contains("microcode"));
    assert!(detail(&r, SnpCheck::PolicyVmpl).starts_with("sev_snp.vmpl"));
    assert_eq!(status(&r, SnpCheck::Signature), CheckStatus::Pass);
    assert_eq!(status(&r, SnpCheck::ChainVcek), CheckStatus::Pass);

    // A platform list without sev-snp.
    let mut no_snp = permissive();
    no_snp.allowed_platforms = [Platform::Tdx].into_iter().collect();
    assert_reject(
        &run(&no_snp),
        SnpCheck::PolicyPlatform,
        "sev-snp not allowed",
    );
}

#[test]
fn product_is_taken_from_cpuid_or_the_issuer() {
    let Some(root) = samples_dir() else { return };
    let v2 = case(&root, "milan-v2-gosevguest", "report.bin");
    let v5 = case(&root, "milan-v5-gcp", "report.bin");
    let turin = std::fs::read(root.join("sev-snp/turin-chain-only/vcek.der")).unwrap();
    let (v2_leaf, v5_leaf) = (v2.leaf_bytes(&root), v5.leaf_bytes(&root));
    // (report, leaf, instant, verdict, the snp.product detail or its start)
    let rows: [(&Case, &[u8], &Case, Expect, &str); 4] = [
        (
            &v2,
            &v2_leaf,
            &v2,
            Expect::Accept,
            "Milan (from issuer CN SEV-Milan, productName Milan-B0)",
        ),
        (
            &v5,
            &v5_leaf,
            &v5,
            Expect::Accept,
            "Milan (from CPUID 19h/01h, issuer CN SEV-Milan, productName Milan-B0)",
        ),
        // A Turin VCEK for a Milan v5 report: CPUID and issuer disagree.
        (
            &v5,
            &turin,
            &v5,
            Expect::Reject(SnpCheck::Product),
            "product mismatch",
        ),
        // ... and for a v2 report (no CPUID) the Turin chain is used and
        // the signature fails.
        (
            &v2,
            &turin,
            &v5,
            Expect::Reject(SnpCheck::Signature),
            "Turin",
        ),
    ];
    for (c, leaf, when, want, product) in rows {
        let what = format!("{} with {product}", c.name());
        let r = run(
            &c.report_bytes(&root),
            leaf,
            None,
            when.at(),
            &permissive(),
            None,
        );
        assert_outcome(&r, want, &what);
        assert!(
            detail(&r, SnpCheck::Product).starts_with(product),
            "{what}: {}",
            detail(&r, SnpCheck::Product)
        );
        if product == "Turin" {
            assert!(field(&r, "reported_tcb").get("fmc").is_some());
        }
    }
}

#[test]
fn every_signed_byte_flipped() {
    let Some(root) = samples_dir() else { return };
    let mut total = 0usize;
    let mut by_check: std::collections::BTreeMap<SnpCheck, usize> = Default::default();
    // Every genuine report: v2 (2), v3 (VLEK), v5 (2).
    let reports: Vec<Case> = cases(&root)
        .into_iter()
        .filter(|c| c.report.is_some() && c.accepts())
        .collect();
    assert_eq!(reports.len(), 5);
    for c in &reports {
        let report = SnpReport::from_raw(&c.report_bytes(&root)).unwrap();
        let raw = report.raw().to_vec();
        let leaf = c.leaf_bytes(&root);
        let chain = c.chain_bytes(&root);
        let v = report.version().number();
        // Offsets where a flip may break the structure rather than the
        // signature: VERSION, SIGNATURE_ALGO, KEY_INFO's reserved bits and
        // every reserved byte; CPUID (v3+) may name another product.
        let structural = |off: usize, mask: u8| -> bool {
            (0x00..0x04).contains(&off)
                || (0x34..0x38).contains(&off)
                || (off == 0x48 && mask == 0x80)
                || (0x49..0x50).contains(&off)
                || (0x18B..0x1A0).contains(&off)
                || (v == 2 && (0x188..0x18B).contains(&off))
                || off == 0x1EB
                || off == 0x1EF
                || (v != 5 && (0x1F8..0x208).contains(&off))
                || (0x208..0x2A0).contains(&off)
        };
        let cpuid = |off: usize| v != 2 && (0x188..0x18A).contains(&off);
        let results: Vec<(usize, u8, SnpCheck)> = std::thread::scope(|s| {
            let handles: Vec<_> = [0usize, 1]
                .into_iter()
                .map(|half| {
                    let (raw, leaf, chain) = (&raw, &leaf, &chain);
                    s.spawn(move || {
                        let mut out = Vec::new();
                        for off in (0..0x2A0).filter(|o| o % 2 == half) {
                            for mask in [0x01u8, 0x80] {
                                let mut m = raw.clone();
                                m[off] ^= mask;
                                let r = run(&m, leaf, Some(chain), c.at(), &permissive(), None);
                                assert!(r.is_err());
                                if status(&r, SnpCheck::ReportFormat) == CheckStatus::Pass {
                                    // Whatever else, the signature breaks.
                                    assert_eq!(
                                        status(&r, SnpCheck::Signature),
                                        CheckStatus::Fail,
                                        "{} offset {off:#x} mask {mask:#x}",
                                        c.name()
                                    );
                                }
                                out.push((off, mask, first_failure(&r).unwrap()));
                            }
                        }
                        out
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        for (off, mask, first) in results {
            let what = format!("{} offset {off:#x} mask {mask:#x}: {first}", c.name());
            if structural(off, mask) {
                assert!(
                    [
                        SnpCheck::ReportFormat,
                        SnpCheck::Product,
                        SnpCheck::Signature
                    ]
                    .contains(&first),
                    "{what}"
                );
            } else if cpuid(off) {
                assert!(
                    [SnpCheck::Product, SnpCheck::Signature].contains(&first),
                    "{what}"
                );
            } else {
                assert_eq!(first, SnpCheck::Signature, "{what}");
            }
            *by_check.entry(first).or_default() += 1;
            total += 1;
        }
    }
    eprintln!(
        "signed-region mutations: {total} over {} reports; first failing check: {by_check:?}",
        reports.len()
    );
    assert_eq!(total, 5 * 0x2A0 * 2);
}

#[test]
fn parse_never_panics_on_mangled_samples() {
    let Some(root) = samples_dir() else { return };
    let mut n = 0;
    for c in cases(&root).iter().filter(|c| c.report.is_some()) {
        let raw = c.report_bytes(&root);
        for len in (0..=raw.len() + 2).step_by(37) {
            let mut b = raw.clone();
            b.resize(len, 0xFF);
            let _ = parse_snp_report(&b);
            let _ = SnpReport::from_raw(&b);
            n += 1;
        }
        for off in 0..raw.len() {
            let mut b = raw.clone();
            b[off] = 0xFF;
            match SnpReport::from_raw(&b) {
                Ok(r) => assert_eq!(r.raw().as_slice(), b.as_slice()),
                Err(e) => assert_eq!(e.check(), SnpCheck::ReportFormat, "{e}"),
            }
            n += 1;
        }
    }
    eprintln!("parser-only mutations: {n}");
    // A typed error names its check.
    for e in [
        SnpError::ReportSize { len: 3 },
        SnpError::ReportLength { len: 3 },
    ] {
        assert_eq!(e.check(), SnpCheck::ReportFormat);
    }
}
