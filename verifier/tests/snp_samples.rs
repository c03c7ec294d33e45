//! SEV-SNP verification against the genuine samples of
//! `shared/attestation-samples/sev-snp/` (table-driven from its
//! `expected.json`), and negative tests made from them at test time.
//! Nothing from the shared samples is copied into the repository.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod snp_common;

use std::collections::BTreeSet;

use kolm_policy::{Policy, SnpTcb};
use kolm_verifier::attestation::AttestationVerdict;
use kolm_verifier::report::CheckStatus;
use kolm_verifier::snp::{
    self, LeafKind, Product, SnpError, ids, parse_snp_report, verify_snp, verify_snp_chain,
};
use serde_json::Value;
use snp_common::*;

#[test]
fn expected_json_every_case() {
    let Some(root) = samples_dir() else { return };
    let cases = cases(&root);
    assert_eq!(cases.len(), 7, "expected.json case count changed");
    let mut report_cases = 0;
    for case in &cases {
        let name = case.name();
        let leaf = case.leaf_bytes(&root);
        let chain = case.chain_bytes(&root);
        if case.report.is_none() {
            // Chain only (turin-chain-only): "accept (certificate chain only ...)".
            assert!(case.accepts(), "{name}");
            for supplied in [Some(chain.as_slice()), None] {
                let r = verify_snp_chain(&leaf, supplied, case.at());
                assert_accept(&r, &name);
                for id in [
                    ids::CHAIN_ARK,
                    ids::CHAIN_ASK,
                    ids::CHAIN_VCEK,
                    ids::FRESHNESS,
                ] {
                    assert_eq!(status(&r, id), CheckStatus::Pass, "{name} {id}");
                }
                assert!(detail(&r, ids::PRODUCT).starts_with("Turin"), "{name}");
                assert_eq!(r.fields["product"], "Turin");
                assert_eq!(r.fields["signing_key"], "VCEK");
                // The note's window: VCEK valid 2024-11-06T21:14:00Z..2031-11-06T21:14:00Z.
                assert_eq!(
                    r.fields["window"],
                    serde_json::json!(["2024-11-06T21:14:00Z", "2031-11-06T21:14:00Z"])
                );
            }
            continue;
        }
        report_cases += 1;
        let report = case.report_bytes(&root);
        // The bytes are the ones expected.json describes.
        // (for hex text, of the decoded 1184 bytes).
        if let Some(want) = case.json.get("report_sha256").and_then(Value::as_str) {
            use sha2::Digest;
            let raw = parse_snp_report(&report).unwrap();
            assert_eq!(hex::encode(sha2::Sha256::digest(raw.raw())), want, "{name}");
        }
        let r = verify_snp(&report, &leaf, Some(&chain), case.at(), &permissive(), None);
        if case.accepts() {
            assert_accept(&r, &name);
        } else {
            // "reject (VLEK certificate expired 2025-12-10T22:14:21Z)".
            assert!(
                case.expected.contains("expired"),
                "{name}: {}",
                case.expected
            );
            assert_reject(&r, ids::FRESHNESS, &name);
            let reason = r.reason.as_deref().unwrap();
            assert!(reason.contains("expired"), "{reason}");
            assert!(reason.contains("2025-12-10T22:14:21Z"), "{reason}");
            if case.expected.contains("VLEK") {
                assert!(reason.contains("VLEK certificate expired"), "{reason}");
                assert_eq!(r.fields["signing_key"], "VLEK");
            }
            // Everything else about the evidence still checks out.
            for c in &r.checks {
                if c.id != ids::FRESHNESS {
                    assert_ne!(c.status, CheckStatus::Fail, "{name}: {}", c.id);
                }
            }
        }

        // Every listed field, by name and value.
        let fields = case.fields();
        assert!(!fields.is_empty() || !case.accepts(), "{name}");
        for (k, want) in &fields {
            assert_eq!(r.fields.get(k), Some(want), "{name}: field {k}");
        }
        // The per-case facts.
        let j = &case.json;
        if let Some(checks) = j.get("checks").and_then(Value::as_object) {
            for (k, id) in [
                ("ark_self", ids::CHAIN_ARK),
                ("ask_by_ark", ids::CHAIN_ASK),
                ("leaf_by_ask", ids::CHAIN_VCEK),
                ("report_sig", ids::SIGNATURE),
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
            let got = r.fields["window"].as_array().unwrap();
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
            assert_eq!(&r.fields["hwid_matches_chip_id"], v, "{name}");
            let want = match v.as_bool() {
                Some(true) => CheckStatus::Pass,
                Some(false) => CheckStatus::Fail,
                None => CheckStatus::Skip,
            };
            assert_eq!(status(&r, ids::VCEK_HWID), want, "{name}");
        }
        if let Some(v) = j.get("tcb_ext_matches_reported") {
            assert_eq!(&r.fields["tcb_ext_matches_reported"], v, "{name}");
            assert_eq!(status(&r, ids::VCEK_TCB), CheckStatus::Pass, "{name}");
        }
        for key in ["product", "signing_key"] {
            if let Some(v) = j.get(key) {
                assert_eq!(&r.fields[key], v, "{name}: {key}");
            }
        }

        // The embedded chain gives the same outcome as the supplied one.
        let e = verify_snp(&report, &leaf, None, case.at(), &permissive(), None);
        assert_eq!(
            e.verdict,
            r.verdict,
            "{name}: embedded chain\n{}",
            e.to_table()
        );
        assert_eq!(e.reason, r.reason, "{name}");
        assert_eq!(e.fields["chain_source"], "embedded");
        assert_eq!(r.fields["chain_source"], "supplied");

        // Under the production policy, only the policy checks the sample
        // itself predicts fail: DEBUG first, then VMPL > 0.
        let p = verify_snp(
            &report,
            &leaf,
            Some(&chain),
            case.at(),
            &Policy::production(),
            None,
        );
        let debug = r.fields["debug_allowed"].as_bool().unwrap();
        let vmpl = r.fields["vmpl"].as_u64().unwrap();
        let mut want_fail = BTreeSet::new();
        if !case.accepts() {
            want_fail.insert(ids::FRESHNESS);
        }
        if debug {
            want_fail.insert(ids::DEBUG);
        }
        if vmpl > 0 {
            want_fail.insert(ids::POLICY_VMPL);
        }
        let failed: BTreeSet<&str> = p
            .checks
            .iter()
            .filter(|c| c.status == CheckStatus::Fail)
            .map(|c| c.id.as_str())
            .collect();
        assert_eq!(failed, want_fail, "{name}: production\n{}", p.to_table());
        let first = [ids::FRESHNESS, ids::DEBUG, ids::POLICY_VMPL]
            .into_iter()
            .find(|id| want_fail.contains(id));
        match first {
            None => assert_accept(&p, &name),
            Some(id) => assert_reject(&p, id, &name),
        }

        // REPORT_DATA binding, right and wrong.
        let rd: [u8; 64] = hex::decode(r.fields["report_data"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        let b = verify_snp(
            &report,
            &leaf,
            Some(&chain),
            case.at(),
            &permissive(),
            Some(&rd),
        );
        assert_eq!(status(&b, ids::BINDING_REPORT_DATA), CheckStatus::Pass);
        assert_eq!(b.verdict, r.verdict, "{name}");
        let mut wrong = rd;
        wrong[63] ^= 1;
        let b = verify_snp(
            &report,
            &leaf,
            Some(&chain),
            case.at(),
            &permissive(),
            Some(&wrong),
        );
        assert_eq!(status(&b, ids::BINDING_REPORT_DATA), CheckStatus::Fail);
        assert_eq!(b.verdict, AttestationVerdict::Reject);
    }
    assert_eq!(report_cases, 6);
}

fn case(root: &std::path::Path, dir: &str, report: &str) -> Case {
    cases(root)
        .into_iter()
        .find(|c| c.dir == dir && c.report.as_deref() == Some(report) && c.accepts())
        .unwrap()
}

#[test]
fn check_ids_and_order() {
    let Some(root) = samples_dir() else { return };
    let c = case(&root, "milan-v5-gcp", "report.bin");
    let r = verify_snp(
        &c.report_bytes(&root),
        &c.leaf_bytes(&root),
        Some(&c.chain_bytes(&root)),
        c.at(),
        &permissive(),
        None,
    );
    let got: Vec<&str> = r.checks.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(got, ids::ALL.to_vec());
    assert!(got.iter().all(|id| id.starts_with("snp.")));
    assert_eq!(r.platform, "sev-snp");
    assert_eq!(r.verified_at, "2026-01-01T00:00:00Z");
    assert_eq!(status(&r, ids::REVOCATION), CheckStatus::Skip);
    // The JSON document carries the fields as in expected.json.
    let doc = serde_json::to_value(&r).unwrap();
    assert_eq!(doc["fields"]["reported_tcb"]["ucode"], 222);
    assert_eq!(doc["verdict"], "accept");
}

#[test]
fn parser_agrees_with_sev_crate() {
    use sev::parser::ByteParser;
    let Some(root) = samples_dir() else { return };
    for c in cases(&root).iter().filter(|c| c.report.is_some()) {
        let ours = parse_snp_report(&c.report_bytes(&root)).unwrap();
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
fn hex_and_raw_inputs_agree() {
    let Some(root) = samples_dir() else { return };
    let c = case(&root, "milan-v2-sevcrate", "report.hex");
    let hex_upper = c.report_bytes(&root);
    assert!(hex_upper.iter().all(|b| !b.is_ascii_lowercase()));
    let from_upper = parse_snp_report(&hex_upper).unwrap();
    let lower = String::from_utf8(hex_upper.clone()).unwrap().to_lowercase();
    let from_lower = parse_snp_report(lower.as_bytes()).unwrap();
    let from_raw = parse_snp_report(from_upper.raw()).unwrap();
    assert_eq!(from_upper, from_lower);
    assert_eq!(from_upper, from_raw);
    let r = verify_snp(
        from_upper.raw(),
        &c.leaf_bytes(&root),
        Some(&c.chain_bytes(&root)),
        c.at(),
        &permissive(),
        None,
    );
    assert_accept(&r, "raw bytes of the hex sample");
    // A hex spelling with a stray character is a format error.
    let mut bad = hex_upper;
    bad[100] = b'Z';
    let r = verify_snp(
        &bad,
        &c.leaf_bytes(&root),
        None,
        c.at(),
        &permissive(),
        None,
    );
    assert_reject(&r, ids::REPORT_FORMAT, "non-hex character");
}

#[test]
fn leaf_as_der_or_pem() {
    let Some(root) = samples_dir() else { return };
    let c = case(&root, "milan-v2-gosevguest", "report.bin");
    let der = c.leaf_bytes(&root);
    let r = verify_snp(
        &c.report_bytes(&root),
        &pem(&der),
        Some(&c.chain_bytes(&root)),
        c.at(),
        &permissive(),
        None,
    );
    assert_accept(&r, "VCEK as PEM");
    // DER with a trailing byte, and two PEM certificates, are not a leaf.
    let mut trailing = der.clone();
    trailing.push(0);
    let r = verify_snp(
        &c.report_bytes(&root),
        &trailing,
        None,
        c.at(),
        &permissive(),
        None,
    );
    assert_reject(&r, ids::VCEK_FORMAT, "VCEK DER + trailing byte");
    let mut two = pem(&der);
    two.extend(pem(&der));
    let r = verify_snp(
        &c.report_bytes(&root),
        &two,
        None,
        c.at(),
        &permissive(),
        None,
    );
    assert_reject(&r, ids::VCEK_FORMAT, "two PEM certificates as the leaf");
    // The ASK is not a leaf.
    let ask = kolm_verifier::snp::roots::embedded_ca(Product::Milan, LeafKind::Vcek).unwrap();
    let r = verify_snp(
        &c.report_bytes(&root),
        ask.ask.der(),
        None,
        c.at(),
        &permissive(),
        None,
    );
    assert_reject(&r, ids::VCEK_FORMAT, "ASK as the leaf");
}

#[test]
fn truncation_and_trailing_bytes_are_format_errors() {
    let Some(root) = samples_dir() else { return };
    let c = case(&root, "milan-v5-gcp", "report.bin");
    let report = c.report_bytes(&root);
    let leaf = c.leaf_bytes(&root);
    let chain = c.chain_bytes(&root);
    let mut variants: Vec<(String, Vec<u8>)> = vec![
        ("empty".into(), vec![]),
        ("one byte short".into(), report[..report.len() - 1].to_vec()),
        ("signed part only".into(), report[..0x2A0].to_vec()),
    ];
    let mut long = report.clone();
    long.push(0);
    variants.push(("one trailing byte".into(), long));
    let mut long = report.clone();
    long.extend_from_slice(&report);
    variants.push(("doubled".into(), long));
    let mut hex_long = hex::encode(&report).into_bytes();
    hex_long.extend_from_slice(b"00");
    variants.push(("hex with a trailing byte".into(), hex_long));
    let mut hex_space = hex::encode(&report).into_bytes();
    hex_space.push(b' ');
    variants.push(("hex with a trailing space".into(), hex_space));
    for (what, bytes) in variants {
        assert!(parse_snp_report(&bytes).is_err(), "{what}");
        let r = verify_snp(&bytes, &leaf, Some(&chain), c.at(), &permissive(), None);
        assert_reject(&r, ids::REPORT_FORMAT, &what);
        // The chain is still checked and shown.
        assert_eq!(status(&r, ids::CHAIN_VCEK), CheckStatus::Pass, "{what}");
        assert_eq!(status(&r, ids::SIGNATURE), CheckStatus::Skip, "{what}");
    }
}

#[test]
fn signature_bytes_flipped() {
    let Some(root) = samples_dir() else { return };
    let c = case(&root, "milan-v3-vlek-trustee", "report.bin");
    let report = c.report_bytes(&root);
    let leaf = c.leaf_bytes(&root);
    let chain = c.chain_bytes(&root);
    let mut n = 0;
    // R and S: 48 significant bytes each, then the zero extension.
    for (base, name) in [(0x2A0usize, "R"), (0x2E8, "S")] {
        for i in (0..72).step_by(3) {
            for mask in [0x01u8, 0x80] {
                let mut m = report.clone();
                m[base + i] ^= mask;
                let r = verify_snp(&m, &leaf, Some(&chain), c.at(), &permissive(), None);
                let want = if i < 48 {
                    ids::SIGNATURE
                } else {
                    ids::REPORT_FORMAT
                };
                assert_reject(&r, want, &format!("{name}[{i}] ^ {mask:#x}"));
                n += 1;
            }
        }
    }
    for off in [0x330usize, 0x3FF, 0x49F] {
        let mut m = report.clone();
        m[off] ^= 0x01;
        let r = verify_snp(&m, &leaf, Some(&chain), c.at(), &permissive(), None);
        assert_reject(
            &r,
            ids::REPORT_FORMAT,
            &format!("reserved signature byte {off:#x}"),
        );
        n += 1;
    }
    // An all-zero signature is no signature.
    let mut m = report.clone();
    m[0x2A0..0x330].fill(0);
    let r = verify_snp(&m, &leaf, Some(&chain), c.at(), &permissive(), None);
    assert_reject(&r, ids::SIGNATURE, "zero signature");
    n += 1;
    eprintln!("signature mutations: {n}");
}

#[test]
fn wrong_product_chain_is_rejected_by_the_ark_check() {
    let Some(root) = samples_dir() else { return };
    let genoa = std::fs::read(root.join("roots/amd/ask_ark_genoa.pem")).unwrap();
    let turin = std::fs::read(root.join("roots/amd/ask_ark_turin_vcek.pem")).unwrap();
    let milan_vlek = std::fs::read(root.join("roots/amd/ask_ark_milan_vlek.pem")).unwrap();
    for (dir, report) in [
        ("milan-v2-sevcrate", "report.hex"),
        ("milan-v2-gosevguest", "report.bin"),
        ("milan-v5-gcp", "report.bin"),
    ] {
        let c = case(&root, dir, report);
        for (what, chain) in [("Genoa", &genoa), ("Turin", &turin)] {
            let r = verify_snp(
                &c.report_bytes(&root),
                &c.leaf_bytes(&root),
                Some(chain),
                c.at(),
                &permissive(),
                None,
            );
            assert_reject(
                &r,
                ids::CHAIN_ARK,
                &format!("{} with the {what} chain", c.name()),
            );
            assert!(r.reason.as_deref().unwrap().contains("ARK-Milan"));
            // The report signature itself is fine: only the chain is wrong.
            assert_eq!(status(&r, ids::SIGNATURE), CheckStatus::Pass);
        }
        // Milan's ARK with the ASVK (VLEK intermediate) for a VCEK.
        let r = verify_snp(
            &c.report_bytes(&root),
            &c.leaf_bytes(&root),
            Some(&milan_vlek),
            c.at(),
            &permissive(),
            None,
        );
        assert_reject(&r, ids::CHAIN_ASK, &format!("{} with the ASVK", c.name()));
    }
    // A VLEK with the VCEK chain of its product.
    let c = case(&root, "milan-v3-vlek-trustee", "report.bin");
    let milan = std::fs::read(root.join("roots/amd/ask_ark_milan.pem")).unwrap();
    let r = verify_snp(
        &c.report_bytes(&root),
        &c.leaf_bytes(&root),
        Some(&milan),
        c.at(),
        &permissive(),
        None,
    );
    assert_reject(&r, ids::CHAIN_ASK, "VLEK with the ASK chain");
}

#[test]
fn vcek_of_another_chip_is_rejected() {
    let Some(root) = samples_dir() else { return };
    let sevcrate = case(&root, "milan-v2-sevcrate", "report.hex");
    let gosev = case(&root, "milan-v2-gosevguest", "report.bin");
    let gcp = case(&root, "milan-v5-gcp", "report.bin");
    let vlek = case(&root, "milan-v3-vlek-trustee", "report.bin");
    for (report, leaf, at) in [
        (&sevcrate, &gosev, sevcrate.at()),
        (&gosev, &sevcrate, gosev.at()),
        (&gcp, &sevcrate, gcp.at()),
        (&sevcrate, &gcp, gcp.at()),
    ] {
        let what = format!("{} with the VCEK of {}", report.name(), leaf.name());
        let r = verify_snp(
            &report.report_bytes(&root),
            &leaf.leaf_bytes(&root),
            None,
            at,
            &permissive(),
            None,
        );
        assert_reject(&r, ids::SIGNATURE, &what);
        assert_eq!(status(&r, ids::VCEK_HWID), CheckStatus::Fail, "{what}");
        assert_eq!(status(&r, ids::CHAIN_VCEK), CheckStatus::Pass, "{what}");
        assert_eq!(r.fields["hwid_matches_chip_id"], false);
    }
    // A VCEK report checked against a VLEK, and the other way round.
    let r = verify_snp(
        &gcp.report_bytes(&root),
        &vlek.leaf_bytes(&root),
        None,
        vlek.at(),
        &permissive(),
        None,
    );
    assert_reject(&r, ids::SIGNATURE, "VCEK report with a VLEK");
    assert_eq!(status(&r, ids::SIGNING_KEY), CheckStatus::Fail);
    let r = verify_snp(
        &vlek.report_bytes(&root),
        &gcp.leaf_bytes(&root),
        None,
        gcp.at(),
        &permissive(),
        None,
    );
    assert_reject(&r, ids::SIGNATURE, "VLEK report with a VCEK");
    assert_eq!(status(&r, ids::SIGNING_KEY), CheckStatus::Fail);
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
    let r = verify_snp(
        &c.report_bytes(&root),
        &bad,
        None,
        c.at(),
        &permissive(),
        None,
    );
    assert_reject(&r, ids::CHAIN_VCEK, "VCEK signature flipped");
    assert!(r.reason.as_deref().unwrap().contains("does not verify"));
}

#[test]
fn freshness_window_edges() {
    let Some(root) = samples_dir() else { return };
    let c = case(&root, "milan-v5-gcp", "report.bin");
    let report = c.report_bytes(&root);
    let leaf = c.leaf_bytes(&root);
    let chain = c.chain_bytes(&root);
    let run = |t: &str| verify_snp(&report, &leaf, Some(&chain), at(t), &permissive(), None);
    // VCEK valid 2025-12-05T06:04:27Z..2032-12-05T06:04:27Z, both ends included.
    assert_accept(&run("2025-12-05T06:04:27Z"), "at notBefore");
    assert_accept(&run("2032-12-05T06:04:27Z"), "at notAfter");
    let early = run("2025-12-05T06:04:26Z");
    assert_reject(&early, ids::FRESHNESS, "one second before notBefore");
    assert!(early.reason.as_deref().unwrap().contains("not yet valid"));
    let late = run("2032-12-05T06:04:28Z");
    assert_reject(&late, ids::FRESHNESS, "one second after notAfter");
    assert!(late.reason.as_deref().unwrap().contains("expired"));
    // Before the ARK existed, and after every AMD root has expired.
    assert_reject(&run("2019-01-01T00:00:00Z"), ids::FRESHNESS, "2019");
    assert_reject(&run("2050-01-01T00:00:00Z"), ids::FRESHNESS, "2050");
    // The VLEK sample is valid only for a year.
    let v = case(&root, "milan-v3-vlek-trustee", "report.bin");
    let r = verify_snp(
        &v.report_bytes(&root),
        &v.leaf_bytes(&root),
        None,
        at("2024-12-10T22:14:20Z"),
        &permissive(),
        None,
    );
    assert_reject(&r, ids::FRESHNESS, "VLEK before its notBefore");
}

#[test]
fn second_verification_hits_the_ca_cache() {
    let Some(root) = samples_dir() else { return };
    let c = case(&root, "milan-v2-sevcrate", "report.hex");
    let run = || {
        verify_snp(
            &c.report_bytes(&root),
            &c.leaf_bytes(&root),
            Some(&c.chain_bytes(&root)),
            c.at(),
            &permissive(),
            None,
        )
    };
    let _first = run();
    let second = run();
    assert_accept(&second, "second run");
    assert!(detail(&second, ids::CHAIN_ARK).contains("(cached)"));
    assert!(detail(&second, ids::CHAIN_ASK).contains("(cached)"));
    assert!(detail(&second, ids::CHAIN_VCEK).contains("(cached)"));
    assert!(snp::certs::ca_cache_len() >= 1);
    assert!(snp::certs::leaf_cache_len() >= 1);
    // A cached pair still gets its validity checked.
    let late = verify_snp(
        &c.report_bytes(&root),
        &c.leaf_bytes(&root),
        Some(&c.chain_bytes(&root)),
        at("2046-01-01T00:00:00Z"),
        &permissive(),
        None,
    );
    assert_reject(&late, ids::FRESHNESS, "after the ARK's notAfter, cached");
}

#[test]
fn policy_rules_each_report_their_own_outcome() {
    let Some(root) = samples_dir() else { return };
    let c = case(&root, "milan-v3-vlek-trustee", "report.bin");
    let report = c.report_bytes(&root);
    let leaf = c.leaf_bytes(&root);
    let parsed = parse_snp_report(&report).unwrap();
    let run = |p: &Policy| verify_snp(&report, &leaf, None, c.at(), p, None);

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
    for id in [
        ids::POLICY_MEASUREMENT,
        ids::POLICY_HOST_DATA,
        ids::POLICY_VMPL,
        ids::POLICY_TCB,
    ] {
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
    assert_reject(&r, ids::POLICY_MEASUREMENT, "everything wrong");
    for id in [
        ids::POLICY_MEASUREMENT,
        ids::POLICY_HOST_DATA,
        ids::POLICY_VMPL,
        ids::POLICY_TCB,
    ] {
        assert_eq!(status(&r, id), CheckStatus::Fail, "{id}");
    }
    assert!(detail(&r, ids::POLICY_TCB).contains("microcode"));
    assert!(detail(&r, ids::POLICY_VMPL).starts_with("sev_snp.vmpl"));
    assert_eq!(status(&r, ids::SIGNATURE), CheckStatus::Pass);
    assert_eq!(status(&r, ids::CHAIN_VCEK), CheckStatus::Pass);

    // A platform list without sev-snp.
    let mut no_snp = permissive();
    no_snp.allowed_platforms = [kolm_policy::Platform::Tdx].into_iter().collect();
    assert_reject(&run(&no_snp), ids::POLICY_PLATFORM, "sev-snp not allowed");
}

#[test]
fn product_is_taken_from_cpuid_or_the_issuer() {
    let Some(root) = samples_dir() else { return };
    let v2 = case(&root, "milan-v2-gosevguest", "report.bin");
    let r = verify_snp(
        &v2.report_bytes(&root),
        &v2.leaf_bytes(&root),
        None,
        v2.at(),
        &permissive(),
        None,
    );
    assert_eq!(
        detail(&r, ids::PRODUCT),
        "Milan (from issuer CN SEV-Milan, productName Milan-B0)"
    );
    let v5 = case(&root, "milan-v5-gcp", "report.bin");
    let r = verify_snp(
        &v5.report_bytes(&root),
        &v5.leaf_bytes(&root),
        None,
        v5.at(),
        &permissive(),
        None,
    );
    assert_eq!(
        detail(&r, ids::PRODUCT),
        "Milan (from CPUID 19h/01h, issuer CN SEV-Milan, productName Milan-B0)"
    );
    // A Turin VCEK for a Milan v5 report: CPUID and issuer disagree.
    let turin = std::fs::read(root.join("sev-snp/turin-chain-only/vcek.der")).unwrap();
    let r = verify_snp(
        &v5.report_bytes(&root),
        &turin,
        None,
        v5.at(),
        &permissive(),
        None,
    );
    assert_reject(&r, ids::PRODUCT, "Turin VCEK, Milan CPUID");
    // ... and for a v2 report (no CPUID) the Turin chain is used and the
    // signature fails.
    let r = verify_snp(
        &v2.report_bytes(&root),
        &turin,
        None,
        v5.at(),
        &permissive(),
        None,
    );
    assert_reject(&r, ids::SIGNATURE, "Turin VCEK, Milan v2 report");
    assert!(detail(&r, ids::PRODUCT).starts_with("Turin"));
    assert!(r.fields["reported_tcb"].get("fmc").is_some());
}

#[test]
fn every_signed_byte_flipped() {
    let Some(root) = samples_dir() else { return };
    let mut total = 0usize;
    let mut by_check: std::collections::BTreeMap<String, usize> = Default::default();
    // Every genuine report: v2 (2), v3 (VLEK), v5 (2).
    let reports: Vec<Case> = cases(&root)
        .into_iter()
        .filter(|c| c.report.is_some() && c.accepts())
        .collect();
    assert_eq!(reports.len(), 5);
    for c in &reports {
        let report = parse_snp_report(&c.report_bytes(&root)).unwrap();
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
        let results: Vec<(usize, u8, String)> = std::thread::scope(|s| {
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
                                let r =
                                    verify_snp(&m, leaf, Some(chain), c.at(), &permissive(), None);
                                assert_eq!(r.verdict, AttestationVerdict::Reject);
                                if status(&r, ids::REPORT_FORMAT) == CheckStatus::Pass {
                                    // Whatever else, the signature breaks.
                                    assert_eq!(
                                        status(&r, ids::SIGNATURE),
                                        CheckStatus::Fail,
                                        "{} offset {off:#x} mask {mask:#x}",
                                        c.name()
                                    );
                                }
                                out.push((off, mask, first_failure(&r).unwrap().to_string()));
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
                    first == ids::REPORT_FORMAT || first == ids::PRODUCT || first == ids::SIGNATURE,
                    "{what}"
                );
            } else if cpuid(off) {
                assert!(first == ids::PRODUCT || first == ids::SIGNATURE, "{what}");
            } else {
                assert_eq!(first, ids::SIGNATURE, "{what}");
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
        let raw = parse_snp_report(&c.report_bytes(&root))
            .unwrap()
            .raw()
            .to_vec();
        for len in (0..=raw.len() + 2).step_by(37) {
            let mut b = raw.clone();
            b.resize(len, 0xFF);
            let _ = parse_snp_report(&b);
            n += 1;
        }
        for off in 0..raw.len() {
            let mut b = raw.clone();
            b[off] = 0xFF;
            match parse_snp_report(&b) {
                Ok(r) => assert_eq!(r.raw().as_slice(), b.as_slice()),
                Err(e) => assert_eq!(e.check_id(), ids::REPORT_FORMAT, "{e}"),
            }
            n += 1;
        }
    }
    eprintln!("parser-only mutations: {n}");
    // A typed error names its check.
    assert_eq!(
        SnpError::ReportSize { len: 3 }.check_id(),
        ids::REPORT_FORMAT
    );
}
