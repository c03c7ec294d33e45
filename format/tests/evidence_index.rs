//! The evidence index admits only the files receipt-v1 section 6 names for
//! its platform, each in its role (issue 12 item 5, format part): a host
//! that adds a file to the unsigned evidence slot (a second "collateral",
//! an attestation under another name, anything for platform `none`) gets
//! the index refused by the writer and by the strict reader.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use kolm_format::content_id::ContentId;
use kolm_format::evidence::{
    EVIDENCE_SCHEMA_V1, EVIDENCE_SCHEMA_V2, EvidenceError, EvidenceFile, EvidenceIndex,
    EvidenceRole, SIM_ROOT_COMMON_NAME, SimFormat, carries_attestation, evidence_slots,
    is_sim_root_common_name,
};
use kolm_format::hexbytes::HexBytes;
use kolm_format::jcs;
use kolm_format::manifest::FileRecord;
use kolm_format::version::SpecVersion;
use kolm_policy::Platform;

use EvidenceRole::{Attestation, Collateral};

type Files = &'static [(&'static str, EvidenceRole)];

fn index(platform: Platform, files: &[(&str, EvidenceRole)]) -> EvidenceIndex {
    let cid = ContentId::for_json(b"{}");
    let mut files: Vec<EvidenceFile> = files
        .iter()
        .map(|(p, role)| EvidenceFile {
            file: FileRecord {
                path: p.to_string(),
                size: 1,
                sha256: HexBytes([0x22; 32]),
            },
            role: *role,
        })
        .collect();
    files.sort_by(|a, b| a.file.path.cmp(&b.file.path));
    EvidenceIndex {
        schema: EVIDENCE_SCHEMA_V1.to_string(),
        platform,
        manifest_cid: cid,
        report_data: HexBytes(kolm_format::binding::report_data(&cid)),
        files,
    }
}

/// Writer and reader agree: the error of each, or the round trip.
fn judge(i: &EvidenceIndex) -> Result<(), String> {
    let forged = jcs::to_canonical_vec(i).unwrap();
    match (
        i.to_canonical_bytes(),
        EvidenceIndex::from_canonical_bytes(&forged),
    ) {
        (Ok(w), Ok(r)) => {
            assert_eq!(w, forged);
            assert_eq!(&r, i);
            Ok(())
        }
        (Err(w), Err(r)) => {
            assert_eq!(w.to_string(), r.to_string());
            assert!(matches!(r, EvidenceError::Field { .. }), "{r:?}");
            Err(r.to_string())
        }
        (w, r) => panic!("writer {w:?}, reader {r:?}"),
    }
}

#[test]
fn each_platform_s_own_files_are_accepted() {
    let cases: [(Platform, Files); 8] = [
        (Platform::None, &[]),
        (Platform::Simulated, &[]),
        (Platform::Nitro, &[("evidence/nitro.cose", Attestation)]),
        (
            Platform::SevSnp,
            &[
                ("evidence/snp-report.bin", Attestation),
                ("evidence/snp-vcek.der", Collateral),
                ("evidence/snp-ask-ark.pem", Collateral),
            ],
        ),
        (
            Platform::SevSnp,
            &[
                ("evidence/snp-report.bin", Attestation),
                ("evidence/snp-vcek.der", Collateral),
            ],
        ),
        (
            Platform::Tdx,
            &[
                ("evidence/tdx-quote.bin", Attestation),
                ("evidence/tdx-collateral.json", Collateral),
            ],
        ),
        (
            Platform::AzureSevSnp,
            &[("evidence/azure-evidence.json", Attestation)],
        ),
        (
            Platform::AzureTdx,
            &[
                ("evidence/azure-evidence.json", Attestation),
                ("evidence/tdx-collateral.json", Collateral),
            ],
        ),
    ];
    for (platform, files) in cases {
        judge(&index(platform, files)).unwrap_or_else(|e| panic!("{platform}: {e}"));
    }
    // The table is what the accepted sets are drawn from, sorted by path.
    for v in SpecVersion::ALL {
        for p in Platform::ALL {
            let t = evidence_slots(v, p);
            assert!(t.windows(2).all(|w| w[0].path < w[1].path), "{p}");
        }
    }
}

/// Receipt v2 section 6 adds one row: `simulated` carries exactly one
/// attestation, `evidence/sim-nitro.cose` (a Nitro-format document under
/// the kolm sim root, 64 KiB cap); v1's row stays empty (frozen). The
/// hardware rows are the same in both versions, and no sim file is ever a
/// slot of `nitro` (the sim document is never read as Nitro evidence).
#[test]
fn simulated_carries_its_sim_document_in_v2_only() {
    let v2 = |platform, files: Files| {
        let mut i = index(platform, files);
        i.schema = EVIDENCE_SCHEMA_V2.to_string();
        i.report_data = HexBytes(kolm_format::binding::report_data_for(
            SpecVersion::V2,
            &i.manifest_cid,
        ));
        i
    };
    const SIM: Files = &[("evidence/sim-nitro.cose", Attestation)];
    judge(&v2(Platform::Simulated, SIM)).unwrap();
    let none = judge(&v2(Platform::Simulated, &[])).unwrap_err();
    assert!(
        none.contains("platform simulated needs exactly one attestation, found 0"),
        "{none}"
    );
    let v1 = judge(&index(Platform::Simulated, SIM)).unwrap_err();
    assert!(
        v1.contains("not an evidence file of platform simulated (allowed: none)"),
        "{v1}"
    );
    let as_nitro = judge(&v2(Platform::Nitro, SIM)).unwrap_err();
    assert!(
        as_nitro.contains("allowed: evidence/nitro.cose"),
        "{as_nitro}"
    );
    let wrong_role = judge(&v2(
        Platform::Simulated,
        &[("evidence/sim-nitro.cose", Collateral)],
    ))
    .unwrap_err();
    assert!(
        wrong_role.contains("is attestation evidence"),
        "{wrong_role}"
    );
    let mut big = v2(Platform::Simulated, SIM);
    big.files[0].file.size = 64 * 1024 + 1;
    let over = judge(&big).unwrap_err();
    assert!(over.contains("over its 65536-byte cap"), "{over}");
    assert!(carries_attestation(SpecVersion::V2, Platform::Simulated));
    assert!(!carries_attestation(SpecVersion::V1, Platform::Simulated));
    assert!(!carries_attestation(SpecVersion::V2, Platform::None));
    for v in SpecVersion::ALL {
        for p in Platform::HARDWARE {
            assert_eq!(evidence_slots(v, p), evidence_slots(SpecVersion::V1, p));
            assert!(carries_attestation(v, p));
        }
    }
}

#[test]
fn unlisted_evidence_files_are_refused() {
    let cases: [(Platform, Files, &str); 7] = [
        // Anything at all for a platform without evidence.
        (
            Platform::None,
            &[("evidence/extra.bin", Collateral)],
            "not an evidence file of platform none (allowed: none)",
        ),
        // A second, unlisted collateral file next to the real ones.
        (
            Platform::Tdx,
            &[
                ("evidence/tdx-quote.bin", Attestation),
                ("evidence/tdx-collateral.json", Collateral),
                ("evidence/tdx-collateral-2.json", Collateral),
            ],
            "\"evidence/tdx-collateral-2.json\" is not an evidence file of platform tdx",
        ),
        // The attestation under another name.
        (
            Platform::Nitro,
            &[("evidence/other.cose", Attestation)],
            "not an evidence file of platform nitro (allowed: evidence/nitro.cose)",
        ),
        // Another platform's file.
        (
            Platform::SevSnp,
            &[
                ("evidence/snp-report.bin", Attestation),
                ("evidence/snp-vcek.der", Collateral),
                ("evidence/tdx-collateral.json", Collateral),
            ],
            "not an evidence file of platform sev-snp",
        ),
        (
            Platform::AzureSevSnp,
            &[
                ("evidence/azure-evidence.json", Attestation),
                ("evidence/tdx-collateral.json", Collateral),
            ],
            "not an evidence file of platform azure-sev-snp",
        ),
        // A listed file in the wrong role.
        (
            Platform::SevSnp,
            &[
                ("evidence/snp-report.bin", Attestation),
                ("evidence/snp-vcek.der", Attestation),
            ],
            "is collateral evidence of platform sev-snp, not attestation",
        ),
        (
            Platform::Tdx,
            &[
                ("evidence/tdx-quote.bin", Collateral),
                ("evidence/tdx-collateral.json", Collateral),
            ],
            "is attestation evidence of platform tdx, not collateral",
        ),
    ];
    for (platform, files, says) in cases {
        let e = judge(&index(platform, files)).unwrap_err();
        assert!(e.contains(says), "{platform}: {e}");
    }
}

#[test]
fn declared_sizes_over_the_slot_caps_are_refused_by_writer_and_reader() {
    use kolm_format::evidence::SNP_REPORT_BYTES;
    let mut i = index(
        Platform::SevSnp,
        &[
            ("evidence/snp-report.bin", Attestation),
            ("evidence/snp-vcek.der", Collateral),
        ],
    );
    let report = i
        .files
        .iter()
        .position(|f| f.file.path == "evidence/snp-report.bin")
        .unwrap();
    i.files[report].file.size = SNP_REPORT_BYTES;
    judge(&i).unwrap();
    i.files[report].file.size = SNP_REPORT_BYTES + 1;
    let e = judge(&i).unwrap_err();
    assert!(
        e.contains(&format!("over its {SNP_REPORT_BYTES}-byte cap")),
        "{e}"
    );
    // 60 MiB of "collateral" is refused from its declared size alone.
    let mut i = index(
        Platform::Tdx,
        &[
            ("evidence/tdx-collateral.json", Collateral),
            ("evidence/tdx-quote.bin", Attestation),
        ],
    );
    i.files[0].file.size = 60 << 20;
    assert!(judge(&i).unwrap_err().contains("1048576-byte cap"));
}

/// The `simulated` row holds one of three forms with its collateral: the
/// Nitro document alone, the TDX quote with its collateral JSON, or the SNP
/// report with its VCEK and ASK/ARK pair. Files of two forms in one index
/// are refused by writer and reader, naming both; caps follow the real
/// slots (an SNP-form report is exactly `SNP_REPORT_BYTES` at most).
#[test]
fn simulated_holds_one_form_with_its_collateral() {
    let v2 = |files: &[(&str, EvidenceRole)]| {
        let mut i = index(Platform::Simulated, files);
        i.schema = EVIDENCE_SCHEMA_V2.to_string();
        i.report_data = HexBytes(kolm_format::binding::report_data_for(
            SpecVersion::V2,
            &i.manifest_cid,
        ));
        i
    };
    let tdx: Files = &[
        ("evidence/sim-tdx-quote.bin", Attestation),
        ("evidence/sim-tdx-collateral.json", Collateral),
    ];
    let snp: Files = &[
        ("evidence/sim-snp-report.bin", Attestation),
        ("evidence/sim-snp-vcek.der", Collateral),
        ("evidence/sim-snp-ask-ark.pem", Collateral),
    ];
    for (files, form) in [
        (tdx, SimFormat::Tdx),
        (snp, SimFormat::SevSnp),
        (
            &[("evidence/sim-nitro.cose", Attestation)][..],
            SimFormat::Nitro,
        ),
    ] {
        let i = v2(files);
        judge(&i).unwrap_or_else(|e| panic!("{form}: {e}"));
        assert_eq!(i.sim_format().unwrap(), Some(form));
        assert_eq!(SimFormat::of_path(form.attestation_path()), Some(form));
    }
    let mixed = judge(&v2(&[
        ("evidence/sim-nitro.cose", Attestation),
        ("evidence/sim-tdx-collateral.json", Collateral),
    ]))
    .unwrap_err();
    assert!(
        mixed.contains("mixes simulated evidence forms")
            && mixed.contains("sim-tdx-collateral.json")
            && mixed.contains("sim-nitro.cose"),
        "{mixed}"
    );
    let two = judge(&v2(&[
        ("evidence/sim-nitro.cose", Attestation),
        ("evidence/sim-tdx-quote.bin", Attestation),
    ]))
    .unwrap_err();
    assert!(two.contains("mixes simulated evidence forms"), "{two}");
    let wrong_role = judge(&v2(&[
        ("evidence/sim-tdx-quote.bin", Collateral),
        ("evidence/sim-tdx-collateral.json", Collateral),
    ]))
    .unwrap_err();
    assert!(
        wrong_role.contains("is attestation evidence"),
        "{wrong_role}"
    );
    let mut big = v2(snp);
    let report = big
        .files
        .iter_mut()
        .find(|f| f.file.path == "evidence/sim-snp-report.bin")
        .unwrap();
    use kolm_format::evidence::SNP_REPORT_BYTES;
    report.file.size = SNP_REPORT_BYTES + 1;
    let over = judge(&big).unwrap_err();
    assert!(
        over.contains(&format!("over its {SNP_REPORT_BYTES}-byte cap")),
        "{over}"
    );
    // No sim file is a slot of a hardware platform.
    for p in Platform::HARDWARE {
        for v in SpecVersion::ALL {
            assert!(
                evidence_slots(v, p)
                    .iter()
                    .all(|s| SimFormat::of_path(s.path).is_none()),
                "{p}"
            );
        }
    }
}

/// Sim root names: the P-384 root keeps its name; each form's root has its
/// own, and all of them follow the prefix/suffix rule the verifier checks.
#[test]
fn sim_root_names_follow_the_rule() {
    assert_eq!(SimFormat::Nitro.root_common_name(), SIM_ROOT_COMMON_NAME);
    for f in SimFormat::ALL {
        assert!(is_sim_root_common_name(f.root_common_name()), "{f}");
        assert!(f.root_common_name().contains("NOT A TEE"));
        assert_eq!(
            SimFormat::of_root_common_name(f.root_common_name()),
            Some(f)
        );
        assert_eq!(SimFormat::parse(f.name()), Some(f));
    }
    for cn in [
        "kolm simulated TEE",
        "Intel SGX Root CA",
        "kolm simulated TEE TDX root",
        "root (NOT A TEE)",
    ] {
        assert!(!is_sim_root_common_name(cn), "{cn}");
    }
    assert_eq!(SimFormat::parse("sgx"), None);
}
