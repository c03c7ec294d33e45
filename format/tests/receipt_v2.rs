//! Receipt v2 (issue 12 item 5, format part; `docs/receipt-v2.md`): the
//! manifest's `evidence.collateral`, the index held to it, and the names
//! that keep v1 and v2 bytes apart. The manifest and receipt are those of
//! the committed `receipt-v2` vector, which kolm's writer produced.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use kolm_format::content_id::ContentId;
use kolm_format::evidence::{
    CollateralBinding, EVIDENCE_SCHEMA_V1, EVIDENCE_SCHEMA_V2, EvidenceError, EvidenceFile,
    EvidenceIndex, EvidenceRole,
};
use kolm_format::hexbytes::HexBytes;
use kolm_format::manifest::{
    EvidenceBinding, FileRecord, MANIFEST_SCHEMA_V1, Manifest, ManifestError,
};
use kolm_format::version::SpecVersion;
use kolm_format::{binding, jcs, receipt};
use kolm_policy::Platform;

const MANIFEST: &[u8] = include_bytes!("../../verifier/tests/vectors/receipt-v2/manifest.json");
const RECEIPT: &[u8] = include_bytes!("../../verifier/tests/vectors/receipt-v2/receipt.cose");

fn v2() -> Manifest {
    Manifest::from_canonical_bytes(MANIFEST).unwrap()
}

fn record(path: &str, byte: u8) -> FileRecord {
    FileRecord {
        path: path.into(),
        size: 100,
        sha256: HexBytes([byte; 32]),
    }
}

/// Writer and reader refuse alike; returns the reader's error.
fn refused(m: &Manifest) -> ManifestError {
    assert!(m.to_canonical_bytes().is_err());
    Manifest::from_canonical_bytes(&jcs::to_canonical_vec(m).unwrap()).unwrap_err()
}

#[test]
fn the_evidence_field_belongs_to_v2_only() {
    let m = v2();
    assert_eq!(m.version().unwrap(), SpecVersion::V2);
    assert_eq!(m.to_canonical_bytes().unwrap(), MANIFEST);
    // v2 without it, or with null: refused.
    let mut none = m.clone();
    none.evidence = None;
    assert!(matches!(refused(&none), ManifestError::Schema(_)));
    let text = String::from_utf8(MANIFEST.to_vec()).unwrap();
    let null = text.replace("\"evidence\":{\"collateral\":[]}", "\"evidence\":null");
    assert_ne!(null, text);
    assert!(Manifest::from_canonical_bytes(null.as_bytes()).is_err());
    // v1 with it (in any form): refused; v1 without it reads.
    let mut v1 = m.clone();
    v1.schema = MANIFEST_SCHEMA_V1.into();
    assert!(matches!(refused(&v1), ManifestError::Schema(_)));
    let v1_null = null.replace("kolm.manifest.v2", MANIFEST_SCHEMA_V1);
    assert!(Manifest::from_canonical_bytes(v1_null.as_bytes()).is_err());
    v1.evidence = None;
    let v1_bytes = v1.to_canonical_bytes().unwrap();
    assert_eq!(Manifest::from_canonical_bytes(&v1_bytes).unwrap(), v1);
    assert!(!String::from_utf8(v1_bytes).unwrap().contains("evidence"));
}

#[test]
fn collateral_records_are_sorted_unique_collateral_slots_within_their_caps() {
    let mut m = v2();
    m.environment.platform = Platform::SevSnp;
    m.environment.measurement = Some(kolm_format::hexbytes::HexVec(vec![0; 48]));
    let vcek = record("evidence/snp-vcek.der", 1);
    let chain = record("evidence/snp-ask-ark.pem", 2);
    m.evidence = Some(EvidenceBinding {
        collateral: vec![chain.clone(), vcek.clone()],
    });
    assert_eq!(
        Manifest::from_canonical_bytes(&m.to_canonical_bytes().unwrap()).unwrap(),
        m
    );
    let on = |platform: Platform, files: Vec<FileRecord>| {
        let mut m = m.clone();
        m.environment.platform = platform;
        m.evidence = Some(EvidenceBinding { collateral: files });
        refused(&m).to_string()
    };
    let with = |files| on(Platform::SevSnp, files);
    assert!(with(vec![vcek.clone(), chain.clone()]).contains("not sorted"));
    assert!(with(vec![vcek.clone(), vcek.clone()]).contains("not sorted by path or duplicate"));
    // The attestation is never collateral: it is made after the manifest.
    let report = record("evidence/snp-report.bin", 3);
    assert!(with(vec![report]).contains("is not a collateral file of platform sev-snp"),);
    assert!(with(vec![record("evidence/extra.pem", 4)]).contains("not a collateral file"));
    let mut big = vcek.clone();
    big.size = 16 * 1024 + 1;
    assert!(with(vec![big]).contains("over its 16384-byte cap"));
    // Nitro has no collateral files at all.
    assert!(on(Platform::Nitro, vec![vcek]).contains("collateral: none"));
}

fn index(
    schema: &str,
    platform: Platform,
    files: Vec<(FileRecord, EvidenceRole)>,
) -> EvidenceIndex {
    let cid = ContentId::for_json(MANIFEST);
    EvidenceIndex {
        schema: schema.into(),
        platform,
        manifest_cid: cid,
        report_data: HexBytes(binding::report_data_for(SpecVersion::V2, &cid)),
        files: files
            .into_iter()
            .map(|(file, role)| EvidenceFile { file, role })
            .collect(),
    }
}

#[test]
fn the_v2_index_holds_exactly_the_manifest_s_collateral() {
    let mut m = v2();
    m.environment.platform = Platform::Tdx;
    m.environment.measurement = Some(kolm_format::hexbytes::HexVec(vec![0; 48]));
    let coll = record("evidence/tdx-collateral.json", 1);
    let quote = record("evidence/tdx-quote.bin", 2);
    m.evidence = Some(EvidenceBinding {
        collateral: vec![coll.clone()],
    });
    let idx = |schema: &str, files| index(schema, Platform::Tdx, files);
    let good = idx(
        EVIDENCE_SCHEMA_V2,
        vec![
            (coll.clone(), EvidenceRole::Collateral),
            (quote.clone(), EvidenceRole::Attestation),
        ],
    );
    assert_eq!(
        good.collateral_binding(&m).unwrap(),
        CollateralBinding::Bound { files: 1 }
    );
    // Another file under the listed name.
    let mut other = coll.clone();
    other.sha256 = HexBytes([9; 32]);
    let swapped = idx(
        EVIDENCE_SCHEMA_V2,
        vec![
            (other, EvidenceRole::Collateral),
            (quote.clone(), EvidenceRole::Attestation),
        ],
    );
    assert!(matches!(
        swapped.collateral_binding(&m),
        Err(EvidenceError::CollateralDiffers { .. })
    ));
    // The listed file left out.
    let dropped = idx(
        EVIDENCE_SCHEMA_V2,
        vec![(quote.clone(), EvidenceRole::Attestation)],
    );
    assert!(matches!(
        dropped.collateral_binding(&m),
        Err(EvidenceError::CollateralMissing { .. })
    ));
    // A collateral file the manifest does not list.
    let mut listed_none = m.clone();
    listed_none.evidence = Some(EvidenceBinding { collateral: vec![] });
    assert!(matches!(
        good.collateral_binding(&listed_none),
        Err(EvidenceError::CollateralUnlisted { .. })
    ));
    // Versions must match both ways; v1 with collateral is unbound.
    let v1_index = idx(
        EVIDENCE_SCHEMA_V1,
        vec![
            (coll, EvidenceRole::Collateral),
            (quote, EvidenceRole::Attestation),
        ],
    );
    assert!(matches!(
        v1_index.collateral_binding(&m),
        Err(EvidenceError::VersionMismatch { .. })
    ));
    let mut v1 = m.clone();
    v1.schema = MANIFEST_SCHEMA_V1.into();
    v1.evidence = None;
    assert!(matches!(
        good.collateral_binding(&v1),
        Err(EvidenceError::VersionMismatch { .. })
    ));
    assert_eq!(
        v1_index.collateral_binding(&v1).unwrap(),
        CollateralBinding::Unbound
    );
    // Both index versions read on their own.
    for i in [&good, &v1_index] {
        let bytes = i.to_canonical_bytes().unwrap();
        assert_eq!(&EvidenceIndex::from_canonical_bytes(&bytes).unwrap(), i);
    }
}

#[test]
fn v1_and_v2_receipts_never_verify_as_each_other() {
    let m = v2();
    let pk = m.signer.public_key.0;
    receipt::verify_for(SpecVersion::V2, RECEIPT, MANIFEST, &pk).unwrap();
    let e = receipt::verify(RECEIPT, MANIFEST, &pk).unwrap_err();
    assert!(e.to_string().contains("content type must be"), "{e}");
    // The same key and bytes signed as v1: refused as v2.
    let key = ring::signature::Ed25519KeyPair::from_seed_unchecked(&[7; 32]).unwrap();
    let as_v1 = receipt::sign(MANIFEST, &key).unwrap();
    assert!(receipt::verify_for(SpecVersion::V2, &as_v1, MANIFEST, &pk).is_err());
    assert_eq!(
        receipt::sign_for(SpecVersion::V2, MANIFEST, &key).unwrap(),
        RECEIPT
    );
    // The two headers differ only in the content type's version digit.
    let (h1, h2) = (
        receipt::protected_header_bytes_for(SpecVersion::V1, &pk),
        receipt::protected_header_bytes_for(SpecVersion::V2, &pk),
    );
    assert_eq!(h1.len(), 78);
    assert_eq!(h2.len(), 78);
    assert_eq!(h1.iter().zip(&h2).filter(|(a, b)| a != b).count(), 1);
}
