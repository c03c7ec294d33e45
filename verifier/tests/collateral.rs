//! `collateral`: identifying evidence/collateral files, their common
//! validity window, and assembling evidence-slot bundles.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use kolm_policy::Platform;
use kolm_verifier::collateral::{self, BundleError};
use kolm_verifier::platform;

/// The samples folder (all platforms; TDX is the marker).
fn samples() -> Option<std::path::PathBuf> {
    kolm_testkit::samples("tdx/expected.json")
}

fn load(s: &std::path::Path, rel: &str) -> (String, Vec<u8>) {
    (rel.to_string(), std::fs::read(s.join(rel)).unwrap())
}

#[test]
fn files_are_identified() {
    let Some(s) = samples() else { return };
    let cases = [
        (
            "tdx/v4-b0c06f-dcapqvl-2025-06/collateral.json",
            "tdx-collateral",
        ),
        ("tdx/v4-b0c06f-dcapqvl-2025-06/quote.bin", "tdx-quote"),
        ("sev-snp/milan-v5-gcp/report.bin", "snp-report"),
        ("sev-snp/milan-v5-gcp/vcek.pem", "x509-certificates"),
        ("roots/amd/ask_ark_milan.pem", "x509-certificates"),
        ("nitro/nitro-euc1-2025-01-06-prod.cose", "nitro-document"),
        ("azure/az-snp-vtpm-milan/evidence.json", "azure-evidence"),
        ("nitro/PROVENANCE.md", "unknown"),
    ];
    for (rel, kind) in cases {
        let (name, bytes) = load(&s, rel);
        let item = collateral::inspect(&name, &bytes);
        assert_eq!(item.kind, kind, "{rel}");
    }
}

#[test]
fn tdx_common_window_is_the_intersection() {
    let Some(s) = samples() else { return };
    let (name, bytes) = load(&s, "tdx/v4-b0c06f-dcapqvl-2025-06/collateral.json");
    let item = collateral::inspect(&name, &bytes);
    // Latest start: QE identity issue date; earliest end: PCK CRL nextUpdate
    // (PROVENANCE: collateral issued 2025-06-19, TCB info to 2025-07-19).
    assert_eq!(
        collateral::common_window(&[item]),
        Some((
            "2025-06-19T10:32:27Z".to_string(),
            "2025-07-19T10:00:35Z".to_string()
        ))
    );
    // Windows that do not overlap have no common instant.
    let (n2, b2) = load(&s, "tdx/v4-50806f-gotdxguest-2023-06/collateral.json");
    let a = collateral::inspect(&name, &bytes);
    let b = collateral::inspect(&n2, &b2);
    assert_eq!(collateral::common_window(&[a, b]), None);
}

#[test]
fn bundles_place_files_and_refuse_misfits() {
    let Some(s) = samples() else { return };
    let snp = [
        load(&s, "sev-snp/milan-v5-gcp/report.bin"),
        load(&s, "sev-snp/milan-v5-gcp/vcek.pem"),
    ];
    let b = collateral::bundle(Platform::SevSnp, &snp).unwrap();
    assert_eq!(
        b.keys().copied().collect::<Vec<_>>(),
        [platform::SNP_REPORT, platform::SNP_VCEK]
    );
    // The VCEK is stored as DER.
    assert_eq!(b[platform::SNP_VCEK][0], 0x30);

    let tdx = [
        load(&s, "tdx/v4-b0c06f-dcapqvl-2025-06/quote.bin"),
        load(&s, "tdx/v4-b0c06f-dcapqvl-2025-06/collateral.json"),
    ];
    assert_eq!(collateral::bundle(Platform::Tdx, &tdx).unwrap().len(), 2);
    assert_eq!(
        collateral::bundle(Platform::Tdx, &tdx[..1]),
        Err(BundleError::Missing {
            platform: Platform::Tdx,
            what: platform::TDX_COLLATERAL
        })
    );
    assert!(matches!(
        collateral::bundle(Platform::Tdx, &snp),
        Err(BundleError::File { .. })
    ));
    let twice = [snp[0].clone(), snp[0].clone(), snp[1].clone()];
    assert_eq!(
        collateral::bundle(Platform::SevSnp, &twice),
        Err(BundleError::Duplicate(platform::SNP_REPORT))
    );
    assert_eq!(
        collateral::bundle(Platform::None, &snp),
        Err(BundleError::NotAttested(Platform::None))
    );
    // Azure TDX needs the DCAP collateral beside the evidence.
    let az = [load(&s, "azure/az-tdx-vtpm/evidence.json")];
    assert!(matches!(
        collateral::bundle(Platform::AzureTdx, &az),
        Err(BundleError::Missing { .. })
    ));
    assert_eq!(
        collateral::bundle(
            Platform::AzureSevSnp,
            &[load(&s, "azure/az-snp-vtpm-milan/evidence.json")]
        )
        .unwrap()
        .len(),
        1
    );
}
