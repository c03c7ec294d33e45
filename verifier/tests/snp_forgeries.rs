//! Forged SEV-SNP evidence: the fixtures of `attestation-samples/snp/`
//! (made here from fixed-seed ECDSA keys, so the bytes are reproducible;
//! regenerate with `KOLM_REGENERATE_SNP_FIXTURES=1 cargo test --test
//! snp_forgeries`), their verdicts, and forgeries derived from the shared
//! genuine samples at test time.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

mod snp_common;

use std::path::Path;
use std::time::Duration;

use const_oid::ObjectIdentifier;
use const_oid::db::{rfc4519, rfc5912};
use der::asn1::{BitString, Ia5StringRef, OctetString, UtcTime};
use der::{Any, Decode, Encode, Tagged};
use kolm_policy::Policy;
use kolm_verifier::attested::Expectations;
use kolm_verifier::check::{CheckStatus, SnpCheck};
use kolm_verifier::snp::{
    self, CertRole, LeafKind, Product, SnpEvidence, certs, decode_report_forms, parse_snp_report,
    roots,
};
use p384::ecdsa::signature::Signer;
use p384::ecdsa::{Signature, SigningKey};
use sha2::{Digest, Sha256, Sha384, Sha512};
use snp_common::*;
use x509_cert::attr::AttributeTypeAndValue;
use x509_cert::certificate::{Certificate, TbsCertificate, Version};
use x509_cert::ext::Extension;
use x509_cert::ext::pkix::BasicConstraints;
use x509_cert::name::{Name, RdnSequence, RelativeDistinguishedName};
use x509_cert::serial_number::SerialNumber;
use x509_cert::spki::{AlgorithmIdentifierOwned, SubjectPublicKeyInfoOwned};
use x509_cert::time::{Time, Validity};

const ARK_SEED: [u8; 48] = [0xA1; 48];
const ASK_SEED: [u8; 48] = [0xA2; 48];
const VCEK_SEED: [u8; 48] = [0xA3; 48];

/// 2025-01-01T00:00:00Z and 2032-01-01T00:00:00Z.
const NOT_BEFORE: u64 = 1_735_689_600;
const NOT_AFTER: u64 = 1_956_528_000;
const VERIFY_AT: &str = "2026-01-01T00:00:00Z";

/// TCB of the synthetic reports: bl 4, tee 0, snp 27, ucode 222 (Milan layout).
const TCB: [u8; 8] = [4, 0, 0, 0, 0, 0, 27, 222];

fn key(seed: &[u8; 48]) -> SigningKey {
    SigningKey::from_slice(seed).unwrap()
}

fn digest<D: Digest>(label: &str) -> Vec<u8> {
    D::digest(label.as_bytes()).to_vec()
}

/// A synthetic ATTESTATION_REPORT of `version` for a Milan CPU, signed with
/// `signer`. POLICY 0xB0000: SMT, reserved bit 17, DEBUG.
fn synthetic_report(version: u32, signer: &SigningKey) -> Vec<u8> {
    let mut b = vec![0u8; kolm_verifier::snp::report::REPORT_LEN];
    let mut put = |off: usize, v: &[u8]| b[off..off + v.len()].copy_from_slice(v);
    put(0x000, &version.to_le_bytes());
    put(0x004, &1u32.to_le_bytes());
    put(0x008, &0xB0000u64.to_le_bytes());
    put(0x034, &1u32.to_le_bytes());
    put(0x038, &TCB);
    put(0x040, &0x25u64.to_le_bytes());
    put(0x050, &digest::<Sha512>("kolm forged report_data"));
    put(0x090, &digest::<Sha384>("kolm forged measurement"));
    put(0x140, &digest::<Sha256>("kolm forged report_id"));
    put(0x160, &[0xFF; 32]);
    put(0x180, &TCB);
    if version >= 3 {
        put(0x188, &[0x19, 0x01, 0x01]);
    }
    put(0x1A0, &digest::<Sha512>("kolm forged chip_id"));
    put(0x1E0, &TCB);
    put(0x1E8, &[35, 55, 1, 0, 35, 55, 1, 0]);
    put(0x1F0, &TCB);
    sign_report(&mut b, signer);
    b
}

/// Re-signs bytes 0x000..0x2A0 with `signer`, R and S little-endian.
fn sign_report(b: &mut [u8], signer: &SigningKey) {
    let sig: Signature = signer.sign(&b[..0x2A0]);
    let (r, s) = sig.split_bytes();
    b[0x2A0..0x330].fill(0);
    for (i, v) in r.iter().rev().enumerate() {
        b[0x2A0 + i] = *v;
    }
    for (i, v) in s.iter().rev().enumerate() {
        b[0x2E8 + i] = *v;
    }
}

fn ext(oid: &str, value: Vec<u8>) -> Extension {
    Extension {
        extn_id: ObjectIdentifier::new_unwrap(oid),
        critical: false,
        extn_value: OctetString::new(value).unwrap(),
    }
}

/// `name` with its CN replaced by `cn` (same string type).
fn with_cn(name: &Name, cn: &str) -> Name {
    let rdns = name
        .0
        .iter()
        .map(|rdn| {
            let atvs: Vec<AttributeTypeAndValue> = rdn
                .0
                .iter()
                .map(|atv| {
                    if atv.oid == rfc4519::CN {
                        AttributeTypeAndValue {
                            oid: atv.oid,
                            value: Any::new(atv.value.tag(), cn.as_bytes()).unwrap(),
                        }
                    } else {
                        atv.clone()
                    }
                })
                .collect();
            RelativeDistinguishedName(atvs.try_into().unwrap())
        })
        .collect();
    RdnSequence(rdns)
}

fn ecdsa_spki(k: &SigningKey) -> SubjectPublicKeyInfoOwned {
    let point = k.verifying_key().to_encoded_point(false);
    SubjectPublicKeyInfoOwned {
        algorithm: AlgorithmIdentifierOwned {
            oid: rfc5912::ID_EC_PUBLIC_KEY,
            parameters: Some(Any::encode_from(&rfc5912::SECP_384_R_1).unwrap()),
        },
        subject_public_key: BitString::from_bytes(point.as_bytes()).unwrap(),
    }
}

fn validity() -> Validity {
    let t = |s| Time::UtcTime(UtcTime::from_unix_duration(Duration::from_secs(s)).unwrap());
    Validity {
        not_before: t(NOT_BEFORE),
        not_after: t(NOT_AFTER),
    }
}

/// A certificate signed with ECDSA P-384/SHA-384 by `signer`.
fn ecdsa_cert(
    subject: Name,
    issuer: Name,
    spki: SubjectPublicKeyInfoOwned,
    signer: &SigningKey,
    extensions: Vec<Extension>,
) -> Vec<u8> {
    let alg = AlgorithmIdentifierOwned {
        oid: rfc5912::ECDSA_WITH_SHA_384,
        parameters: None,
    };
    let tbs = TbsCertificate {
        version: Version::V3,
        serial_number: SerialNumber::new(&[1]).unwrap(),
        signature: alg.clone(),
        issuer,
        validity: validity(),
        subject,
        subject_public_key_info: spki,
        issuer_unique_id: None,
        subject_unique_id: None,
        extensions: Some(extensions),
    };
    let sig: Signature = signer.sign(&tbs.to_der().unwrap());
    Certificate {
        tbs_certificate: tbs,
        signature_algorithm: alg,
        signature: BitString::from_bytes(sig.to_der().as_bytes()).unwrap(),
    }
    .to_der()
    .unwrap()
}

fn ca_ext() -> Extension {
    Extension {
        extn_id: ObjectIdentifier::new_unwrap("2.5.29.19"),
        critical: true,
        extn_value: OctetString::new(
            BasicConstraints {
                ca: true,
                path_len_constraint: None,
            }
            .to_der()
            .unwrap(),
        )
        .unwrap(),
    }
}

/// AMD's VCEK extensions for `tcb` (Milan layout) and `chip_id`.
fn vcek_extensions(tcb: [u8; 8], chip_id: &[u8]) -> Vec<Extension> {
    let int = |v: u8| v.to_der().unwrap();
    vec![
        ext("1.3.6.1.4.1.3704.1.1", int(0)),
        ext(
            "1.3.6.1.4.1.3704.1.2",
            Ia5StringRef::new("Milan-B0").unwrap().to_der().unwrap(),
        ),
        ext("1.3.6.1.4.1.3704.1.3.1", int(tcb[0])),
        ext("1.3.6.1.4.1.3704.1.3.2", int(tcb[1])),
        ext("1.3.6.1.4.1.3704.1.3.4", int(0)),
        ext("1.3.6.1.4.1.3704.1.3.5", int(0)),
        ext("1.3.6.1.4.1.3704.1.3.6", int(0)),
        ext("1.3.6.1.4.1.3704.1.3.7", int(0)),
        ext("1.3.6.1.4.1.3704.1.3.3", int(tcb[6])),
        ext("1.3.6.1.4.1.3704.1.3.8", int(tcb[7])),
        ext("1.3.6.1.4.1.3704.1.4", chip_id.to_vec()),
    ]
}

fn amd_milan() -> (Name, Name) {
    let pair = roots::embedded_ca(Product::Milan, LeafKind::Vcek).unwrap();
    (
        pair.ark.x509().tbs_certificate.subject.clone(),
        pair.ask.x509().tbs_certificate.subject.clone(),
    )
}

/// Every fixture file, by path under `attestation-samples/snp/`.
fn generate() -> Vec<(&'static str, Vec<u8>)> {
    let (ark_name, ask_name) = amd_milan();
    let vcek_name = with_cn(&ask_name, "SEV-VCEK");
    let (ark_k, ask_k, vcek_k) = (key(&ARK_SEED), key(&ASK_SEED), key(&VCEK_SEED));

    let report = synthetic_report(5, &vcek_k);
    let chip_id = report[0x1A0..0x1E0].to_vec();
    let ark = ecdsa_cert(
        ark_name.clone(),
        ark_name.clone(),
        ecdsa_spki(&ark_k),
        &ark_k,
        vec![ca_ext()],
    );
    let ask = ecdsa_cert(
        ask_name.clone(),
        ark_name,
        ecdsa_spki(&ask_k),
        &ark_k,
        vec![ca_ext()],
    );
    let vcek = ecdsa_cert(
        vcek_name,
        ask_name,
        ecdsa_spki(&vcek_k),
        &ask_k,
        vcek_extensions(TCB, &chip_id),
    );
    let mut chain = pem(&ask);
    chain.extend(pem(&ark));

    // The same VCEK, claiming AMD's RSASSA-PSS signature: the algorithm
    // identifier of the embedded ASK, and 512 bytes that are no signature.
    let pss_vcek = {
        let mut c = Certificate::from_der(&vcek).unwrap();
        let amd = roots::embedded_ca(Product::Milan, LeafKind::Vcek).unwrap();
        let pss = amd.ask.x509().signature_algorithm.clone();
        c.tbs_certificate.signature = pss.clone();
        c.signature_algorithm = pss;
        let mut sig = Vec::new();
        for i in 0u8..8 {
            sig.extend(Sha512::digest([i]));
        }
        c.signature = BitString::from_bytes(&sig).unwrap();
        c.to_der().unwrap()
    };

    let mut v5_hex = hex::encode(synthetic_report(5, &vcek_k)).into_bytes();
    v5_hex.push(b'\n');
    let mut trailing = synthetic_report(5, &vcek_k);
    trailing.push(0);

    vec![
        ("forged-debug-fake-ark/report.bin", report),
        ("forged-debug-fake-ark/vcek.der", vcek),
        ("forged-debug-fake-ark/ask_ark.pem", chain),
        ("forged-pss-vcek/vcek.der", pss_vcek),
        ("seeds/report-v2.bin", synthetic_report(2, &vcek_k)),
        ("seeds/report-v3.bin", synthetic_report(3, &vcek_k)),
        ("seeds/report-v5.hex", v5_hex),
        ("seeds/report-v5-trailing-byte.bin", trailing),
    ]
}

#[test]
fn fixtures_are_reproducible() {
    let dir = fixtures_dir();
    let files = generate();
    if std::env::var_os("KOLM_REGENERATE_SNP_FIXTURES").is_some() {
        for (path, bytes) in &files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, bytes).unwrap();
        }
    }
    for (path, bytes) in &files {
        let on_disk = std::fs::read(dir.join(path)).unwrap_or_else(|e| {
            panic!("{path}: {e} (regenerate with KOLM_REGENERATE_SNP_FIXTURES=1)")
        });
        assert!(
            on_disk == *bytes,
            "{path} differs from what the generator makes"
        );
    }
    // INDEX.md lists every file, and nothing else is there.
    let index = std::fs::read_to_string(dir.join("INDEX.md")).unwrap();
    let mut on_disk = Vec::new();
    walk(&dir, &dir, &mut on_disk);
    on_disk.sort();
    let mut want: Vec<String> = files.iter().map(|(p, _)| p.to_string()).collect();
    want.push("INDEX.md".into());
    want.sort();
    assert_eq!(on_disk, want);
    for (path, _) in &files {
        assert!(
            index.contains(&format!("`{path}`")),
            "INDEX.md does not list {path}"
        );
    }
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(root, &p, out);
        } else {
            out.push(
                p.strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/"),
            );
        }
    }
}

fn fixture(path: &str) -> Vec<u8> {
    std::fs::read(fixtures_dir().join(path)).unwrap()
}

#[test]
fn forged_chain_under_a_fake_ark_is_rejected() {
    let report = fixture("forged-debug-fake-ark/report.bin");
    let vcek = fixture("forged-debug-fake-ark/vcek.der");
    let chain = fixture("forged-debug-fake-ark/ask_ark.pem");
    let r = run(
        &report,
        &vcek,
        Some(&chain),
        at(VERIFY_AT),
        &Policy::production(),
        None,
    );
    assert_reject(&r, SnpCheck::ChainArk, "fake ARK with AMD's subject");
    assert!(reason(&r).contains("is not AMD's ARK-Milan"));
    // The forgery is internally consistent: only trust and policy fail.
    for id in [
        SnpCheck::ReportFormat,
        SnpCheck::VcekFormat,
        SnpCheck::ChainFormat,
        SnpCheck::Product,
        SnpCheck::Freshness,
        SnpCheck::Signature,
        SnpCheck::SigningKey,
        SnpCheck::VcekHwid,
        SnpCheck::VcekTcb,
    ] {
        assert_eq!(status(&r, id), CheckStatus::Pass, "{id}\n{}", table(&r));
    }
    assert_eq!(status(&r, SnpCheck::Debug), CheckStatus::Fail);
    assert_eq!(*field(&r, "debug_allowed"), true);
    // Even a policy that allows debug does not make it acceptable.
    let r = run(
        &report,
        &vcek,
        Some(&chain),
        at(VERIFY_AT),
        &permissive(),
        None,
    );
    assert_reject(&r, SnpCheck::ChainArk, "fake ARK, permissive policy");
    assert_eq!(status(&r, SnpCheck::Debug), CheckStatus::Pass);
    // Nothing of a rejected chain enters the verified-pair caches, which
    // only this crate's chain check can fill (their insertion is not public
    // API: see the compile_fail doc tests of `certs`).
    let pair = certs::parse_chain(&chain).unwrap();
    let leaf = certs::parse_leaf(&vcek).unwrap();
    assert!(!certs::ca_cache_contains(&pair.ark, &pair.ask));
    assert!(!certs::leaf_cache_contains(&pair.ask, leaf.cert()));
}

/// Expectations an SEV-SNP report cannot prove fail the binding check,
/// with or without the right REPORT_DATA beside them.
#[test]
fn nonce_and_public_key_expectations_fail_closed() {
    let report = fixture("forged-debug-fake-ark/report.bin");
    let vcek = fixture("forged-debug-fake-ark/vcek.der");
    let chain = fixture("forged-debug-fake-ark/ask_ark.pem");
    let ev = SnpEvidence {
        report: &report,
        vcek: &vcek,
        chain: Some(&chain),
    };
    let policy = permissive();
    let rd = report[0x50..0x90].to_vec();
    let (nonce, key) = (Some(vec![7u8; 32]), Some(vec![4u8; 97]));
    // (what, report_data, nonce, public_key, status, words of the detail)
    let rows = [
        (
            "nothing",
            None,
            None,
            None,
            CheckStatus::Skip,
            "no expected REPORT_DATA",
        ),
        (
            "REPORT_DATA",
            Some(&rd),
            None,
            None,
            CheckStatus::Pass,
            "equals",
        ),
        (
            "nonce",
            None,
            nonce.clone(),
            None,
            CheckStatus::Fail,
            "expected nonce",
        ),
        (
            "REPORT_DATA + nonce",
            Some(&rd),
            nonce,
            None,
            CheckStatus::Fail,
            "expected nonce",
        ),
        (
            "REPORT_DATA + key",
            Some(&rd),
            None,
            key,
            CheckStatus::Fail,
            "expected public key",
        ),
    ];
    for (what, report_data, nonce, public_key, want, words) in rows {
        let expect = Expectations {
            policy: &policy,
            report_data: report_data.cloned(),
            nonce,
            public_key,
        };
        let e = snp::evaluate(&ev, &expect, at(VERIFY_AT));
        let c = e.checks.get(SnpCheck::BindingReportData).unwrap();
        assert_eq!(c.status, want, "{what}: {}", c.detail);
        assert!(c.detail.contains(words), "{what}: {}", c.detail);
        if want == CheckStatus::Fail && what != "nonce" {
            assert!(
                c.detail.contains("cannot be checked"),
                "{what}: {}",
                c.detail
            );
        }
        // The claims are there whatever the checks say.
        assert_eq!(e.claims.unwrap().report_data, rd, "{what}");
    }
}

#[test]
fn forged_vcek_fails_under_the_embedded_chain() {
    let report = fixture("forged-debug-fake-ark/report.bin");
    for (leaf, why) in [
        ("forged-debug-fake-ark/vcek.der", "is not RSASSA-PSS"),
        ("forged-pss-vcek/vcek.der", "does not verify"),
    ] {
        let vcek = fixture(leaf);
        let r = run(&report, &vcek, None, at(VERIFY_AT), &permissive(), None);
        assert_reject(&r, SnpCheck::ChainVcek, leaf);
        assert!(reason(&r).contains(why), "{leaf}: {}", reason(&r));
        assert_eq!(status(&r, SnpCheck::ChainArk), CheckStatus::Pass);
        assert_eq!(status(&r, SnpCheck::ChainAsk), CheckStatus::Pass);
        assert_eq!(status(&r, SnpCheck::Signature), CheckStatus::Pass, "{leaf}");
    }
}

#[test]
fn seeds_parse_as_indexed() {
    for (path, version) in [
        ("seeds/report-v2.bin", 2),
        ("seeds/report-v3.bin", 3),
        ("seeds/report-v5.hex", 5),
        ("forged-debug-fake-ark/report.bin", 5),
    ] {
        let r = parse_snp_report(&fixture(path)).unwrap();
        assert_eq!(r.version().number(), version, "{path}");
        assert!(r.policy().debug_allowed());
        // Signed by the fake VCEK: the embedded chain rejects it. (The hex
        // seed is decoded first: verification takes the binary form.)
        let v = run(
            &decode_report_forms(&fixture(path)).unwrap(),
            &fixture("forged-debug-fake-ark/vcek.der"),
            None,
            at(VERIFY_AT),
            &permissive(),
            None,
        );
        assert_reject(&v, SnpCheck::ChainVcek, path);
        assert_eq!(status(&v, SnpCheck::Signature), CheckStatus::Pass, "{path}");
    }
    let e = parse_snp_report(&fixture("seeds/report-v5-trailing-byte.bin")).unwrap_err();
    assert_eq!(e.check(), SnpCheck::ReportFormat);
}

/// A genuine GCP report with DEBUG set, re-signed by a fake key, and the
/// genuine VCEK with that key put in: hwID and TCB still match, the report
/// signature verifies, and the chain still rejects it.
#[test]
fn debug_bit_set_and_resigned_real_report_is_rejected_by_the_chain() {
    let Some(root) = samples_dir() else { return };
    let c = cases(&root)
        .into_iter()
        .find(|c| c.dir == "milan-v5-gcp" && c.report.as_deref() == Some("report.bin"))
        .unwrap();
    let mut report = c.report_bytes(&root);
    report[0x008 + 2] |= 0x08; // POLICY bit 19
    let fake = key(&VCEK_SEED);
    sign_report(&mut report, &fake);

    let genuine = certs::parse_cert(&c.leaf_bytes(&root), CertRole::Leaf).unwrap();
    let mut vcek = Certificate::from_der(genuine.der()).unwrap();
    vcek.tbs_certificate.subject_public_key_info = ecdsa_spki(&fake);
    let vcek = vcek.to_der().unwrap();

    for chain in [None, Some(c.chain_bytes(&root))] {
        let r = run(
            &report,
            &vcek,
            chain.as_deref(),
            c.at(),
            &Policy::production(),
            None,
        );
        assert_reject(&r, SnpCheck::ChainVcek, "re-signed real report");
        assert!(reason(&r).contains("does not verify"));
        for id in [
            SnpCheck::Signature,
            SnpCheck::VcekHwid,
            SnpCheck::VcekTcb,
            SnpCheck::ChainArk,
            SnpCheck::ChainAsk,
        ] {
            assert_eq!(status(&r, id), CheckStatus::Pass, "{id}\n{}", table(&r));
        }
        assert_eq!(status(&r, SnpCheck::Debug), CheckStatus::Fail);
    }
    // With the genuine VCEK, the altered report fails its signature.
    let r = run(
        &report,
        &c.leaf_bytes(&root),
        None,
        c.at(),
        &permissive(),
        None,
    );
    assert_reject(&r, SnpCheck::Signature, "re-signed report, genuine VCEK");
}

/// A fake leaf for `report` under AMD's `product` issuer name, with the
/// given extensions, signed by the fake ASK.
fn fake_leaf(product: Product, extensions: Vec<Extension>) -> Vec<u8> {
    let ask = roots::embedded_ca(product, LeafKind::Vcek).unwrap().ask;
    let ask_name = ask.x509().tbs_certificate.subject.clone();
    ecdsa_cert(
        with_cn(&ask_name, "SEV-VCEK"),
        ask_name,
        ecdsa_spki(&key(&VCEK_SEED)),
        &key(&ASK_SEED),
        extensions,
    )
}

#[test]
fn hwid_and_tcb_mismatches_name_the_component() {
    let report = fixture("forged-debug-fake-ark/report.bin");
    let chip_id = report[0x1A0..0x1E0].to_vec();
    let run =
        |leaf: &[u8], report: &[u8]| run(report, leaf, None, at(VERIFY_AT), &permissive(), None);
    // Certificate issued for microcode 221, report says 222.
    let mut tcb = TCB;
    tcb[7] = 221;
    let r = run(
        &fake_leaf(Product::Milan, vcek_extensions(tcb, &chip_id)),
        &report,
    );
    assert_eq!(status(&r, SnpCheck::VcekTcb), CheckStatus::Fail);
    assert!(
        detail(&r, SnpCheck::VcekTcb).contains("ucode SPL 221"),
        "{}",
        detail(&r, SnpCheck::VcekTcb)
    );
    assert_eq!(*field(&r, "tcb_ext_matches_reported"), false);
    // Missing SNP SPL extension.
    let mut exts = vcek_extensions(TCB, &chip_id);
    exts.retain(|e| e.extn_id != ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.3.3"));
    let r = run(&fake_leaf(Product::Milan, exts), &report);
    assert!(detail(&r, SnpCheck::VcekTcb).contains("1.3.6.1.4.1.3704.1.3.3 (snp) is missing"));
    // hwID of another chip.
    let r = run(
        &fake_leaf(Product::Milan, vcek_extensions(TCB, &[7u8; 64])),
        &report,
    );
    assert_eq!(status(&r, SnpCheck::VcekHwid), CheckStatus::Fail);
    assert_eq!(status(&r, SnpCheck::Signature), CheckStatus::Pass);
    // A masked CHIP_ID cannot be bound to a VCEK.
    let mut masked = report.clone();
    masked[0x48] |= 0x02;
    masked[0x1A0..0x1E0].fill(0);
    sign_report(&mut masked, &key(&VCEK_SEED));
    let r = run(&fixture("forged-debug-fake-ark/vcek.der"), &masked);
    assert_eq!(status(&r, SnpCheck::VcekHwid), CheckStatus::Fail);
    assert!(detail(&r, SnpCheck::VcekHwid).contains("masked"));
    assert_eq!(*field(&r, "mask_chip_key"), true);
    assert_eq!(*field(&r, "hwid_matches_chip_id"), false);
}

/// Turin's TCB layout and 8-byte hwID, on a forged Turin report and VCEK.
#[test]
fn turin_layout_forgery() {
    // [0] FMC, [1] boot loader, [2] TEE, [3] SNP, [7] microcode.
    let tcb = [1u8, 4, 0, 27, 0, 0, 0, 222];
    let mut report = synthetic_report(5, &key(&VCEK_SEED));
    report[0x188..0x18B].copy_from_slice(&[0x1A, 0x02, 0x01]);
    for off in [0x038, 0x180, 0x1E0, 0x1F0] {
        report[off..off + 8].copy_from_slice(&tcb);
    }
    let hwid = [0x1E, 0x55, 0x0A, 0x8E, 0xE5, 0xCF, 0x9F, 0x4D];
    report[0x1A0..0x1E0].fill(0);
    report[0x1A0..0x1A8].copy_from_slice(&hwid);
    sign_report(&mut report, &key(&VCEK_SEED));
    let int = |v: u8| v.to_der().unwrap();
    let exts = vec![
        ext(
            "1.3.6.1.4.1.3704.1.2",
            Ia5StringRef::new("Turin").unwrap().to_der().unwrap(),
        ),
        ext("1.3.6.1.4.1.3704.1.3.9", int(1)),
        ext("1.3.6.1.4.1.3704.1.3.1", int(4)),
        ext("1.3.6.1.4.1.3704.1.3.2", int(0)),
        ext("1.3.6.1.4.1.3704.1.3.3", int(27)),
        ext("1.3.6.1.4.1.3704.1.3.8", int(222)),
        ext("1.3.6.1.4.1.3704.1.4", hwid.to_vec()),
    ];
    let leaf = fake_leaf(Product::Turin, exts);
    let r = run(&report, &leaf, None, at(VERIFY_AT), &permissive(), None);
    assert_reject(&r, SnpCheck::ChainVcek, "forged Turin VCEK");
    assert!(detail(&r, SnpCheck::Product).starts_with("Turin (from CPUID 1ah/02h"));
    for id in [
        SnpCheck::Signature,
        SnpCheck::VcekHwid,
        SnpCheck::VcekTcb,
        SnpCheck::ChainArk,
        SnpCheck::ChainAsk,
    ] {
        assert_eq!(status(&r, id), CheckStatus::Pass, "{id}\n{}", table(&r));
    }
    assert_eq!(
        *field(&r, "reported_tcb"),
        serde_json::json!({"fmc": 1, "bl": 4, "tee": 0, "snp": 27, "ucode": 222})
    );
    assert_eq!(*field(&r, "product"), "Turin");
    // The minimum TCB compares FMC too.
    let mut p = permissive();
    p.sev_snp.min_tcb = Some(kolm_policy::SnpTcb {
        bootloader: 4,
        tee: 0,
        snp: 27,
        microcode: 222,
        fmc: Some(2),
    });
    let r = run(&report, &leaf, None, at(VERIFY_AT), &p, None);
    assert_eq!(status(&r, SnpCheck::PolicyTcb), CheckStatus::Fail);
    assert!(detail(&r, SnpCheck::PolicyTcb).contains("fmc"));
    // A Milan chain for the Turin report is the wrong product.
    let milan = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/snp/roots/ask_ark_milan.pem"),
    )
    .unwrap();
    let r = run(
        &report,
        &leaf,
        Some(&milan),
        at(VERIFY_AT),
        &permissive(),
        None,
    );
    assert_reject(&r, SnpCheck::ChainArk, "Milan chain for a Turin report");
}
