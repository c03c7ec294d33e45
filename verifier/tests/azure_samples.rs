//! Azure CVM evidence (vTPM + HCL report) from real Azure machines:
//! `../shared/attestation-samples/azure/`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use kolm_verifier::attestation::AttestationReport;
use kolm_verifier::azure::{self, AzureExpectations};
use kolm_verifier::report::CheckStatus;

fn samples() -> Option<std::path::PathBuf> {
    common::samples_dir("azure/expected.json")
}

fn status(r: &AttestationReport, id: &str) -> Option<CheckStatus> {
    r.checks.iter().find(|c| c.id == id).map(|c| c.status)
}

fn layer(input: &[u8], expect: &AzureExpectations) -> AttestationReport {
    let mut r = AttestationReport::new("azure", "test".into());
    azure::check_azure_layer(input, expect, &mut r);
    r
}

#[test]
fn azure_layer_of_every_sample() {
    let Some(dir) = samples() else { return };
    let expected: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("azure/expected.json")).unwrap()).unwrap();
    for case in expected["cases"].as_array().unwrap() {
        let file = case["file"].as_str().unwrap();
        let input = std::fs::read(dir.join("azure").join(file)).unwrap();
        let nonce = hex::decode(case["tpm_quote_extra_data(nonce)"].as_str().unwrap()).unwrap();
        let r = layer(
            &input,
            &AzureExpectations {
                nonce: Some(nonce.clone()),
                user_data: None,
            },
        );
        for id in [
            "azure.evidence.format",
            "azure.binding.runtime_data",
            "azure.tpm.signature",
            "azure.tpm.pcr_digest",
            "azure.binding.nonce",
        ] {
            assert_eq!(
                status(&r, id),
                Some(CheckStatus::Pass),
                "{file} {id}\n{}",
                r.to_table()
            );
        }
        assert_eq!(
            r.fields["hcl_report_type"], case["hcl_report_type"],
            "{file}"
        );
        assert_eq!(
            r.fields["runtime_data_sha256"], case["runtime_data_sha256"],
            "{file}"
        );
        assert_eq!(
            r.fields["tpm_quote_extra_data(nonce)"],
            case["tpm_quote_extra_data(nonce)"]
        );

        // The extracted runtime data hashes to the recorded value.
        let rt = std::fs::read(
            dir.join("azure")
                .join(case["dir"].as_str().unwrap())
                .join("extracted/runtime-data.json"),
        )
        .unwrap();
        let ev = azure::parse_azure_evidence(&input).unwrap();
        assert_eq!(ev.hcl.runtime_data, rt);

        // A wrong nonce or user-data is a binding failure.
        let r = layer(
            &input,
            &AzureExpectations {
                nonce: Some(b"other".to_vec()),
                user_data: Some([1; 64]),
            },
        );
        assert_eq!(status(&r, "azure.binding.nonce"), Some(CheckStatus::Fail));
        assert_eq!(
            status(&r, "azure.binding.user_data"),
            Some(CheckStatus::Fail)
        );
    }
}

/// Re-encodes a mutated evidence document.
fn with(input: &[u8], f: impl Fn(&mut serde_json::Value)) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_slice(input).unwrap();
    f(&mut v);
    serde_json::to_vec(&v).unwrap()
}

#[test]
fn azure_layer_mutations_are_rejected() {
    let Some(dir) = samples() else { return };
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut count = 0;
    for file in [
        "az-snp-vtpm-milan/evidence.json",
        "az-tdx-vtpm/evidence.json",
    ] {
        let input = std::fs::read(dir.join("azure").join(file)).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&input).unwrap();
        // Every byte of the TPM quote message.
        let msg = hex::decode(v["tpm_quote"]["message"].as_str().unwrap()).unwrap();
        for i in 0..msg.len() {
            let mut m = msg.clone();
            m[i] ^= 0x01;
            let bad = with(&input, |v| {
                v["tpm_quote"]["message"] = hex::encode(&m).into()
            });
            let r = layer(&bad, &AzureExpectations::default());
            let rejected = r.checks.iter().any(|c| c.status == CheckStatus::Fail);
            assert!(rejected, "{file} message byte {i}");
            count += 1;
        }
        // Signature bytes.
        let sig = hex::decode(v["tpm_quote"]["signature"].as_str().unwrap()).unwrap();
        for i in (0..sig.len()).step_by(5) {
            let mut s = sig.clone();
            s[i] ^= 0x80;
            let bad = with(&input, |v| {
                v["tpm_quote"]["signature"] = hex::encode(&s).into()
            });
            let r = layer(&bad, &AzureExpectations::default());
            assert_eq!(
                status(&r, "azure.tpm.signature"),
                Some(CheckStatus::Fail),
                "{file} sig {i}"
            );
            count += 1;
        }
        // Runtime data and the report_data it must match.
        let hcl = b64
            .decode(v["hcl_report"].as_str().unwrap().trim_end_matches('='))
            .unwrap();
        let rt_start = 32 + 1184 + 20;
        for i in (rt_start..rt_start + 400).step_by(3) {
            let mut h = hcl.clone();
            h[i] ^= 0x01;
            let bad = with(&input, |v| v["hcl_report"] = b64.encode(&h).into());
            let r = layer(&bad, &AzureExpectations::default());
            assert!(
                r.checks.iter().any(|c| c.status == CheckStatus::Fail),
                "{file} hcl byte {i}"
            );
            count += 1;
        }
        // A PCR value changed.
        let bad = with(&input, |v| {
            v["tpm_quote"]["pcrs"][0] = "00".repeat(32).into()
        });
        let r = layer(&bad, &AzureExpectations::default());
        assert_eq!(
            status(&r, "azure.tpm.pcr_digest"),
            Some(CheckStatus::Fail),
            "{file}"
        );
        // Truncated, unknown field, garbage.
        for bad in [
            input[..input.len() / 2].to_vec(),
            with(&input, |v| v["extra"] = 1.into()),
            b"{}".to_vec(),
            vec![0xff; 10],
        ] {
            let r = layer(&bad, &AzureExpectations::default());
            assert_eq!(
                status(&r, "azure.evidence.format"),
                Some(CheckStatus::Fail),
                "{file}"
            );
            count += 1;
        }
    }
    eprintln!("azure layer: {count} mutations rejected");
}

#[test]
fn azure_verdicts_of_every_sample() {
    let Some(dir) = samples() else { return };
    let expected: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("azure/expected.json")).unwrap()).unwrap();
    let policy = kolm_policy::Policy::production();
    for case in expected["cases"].as_array().unwrap() {
        let file = case["file"].as_str().unwrap();
        let input = std::fs::read(dir.join("azure").join(file)).unwrap();
        let at = kolm_format::timefmt::parse_rfc3339(case["verify_at"].as_str().unwrap()).unwrap();
        let r = azure::verify_azure(&input, at, &policy, &AzureExpectations::default(), None);
        match case["hcl_report_type"].as_str().unwrap() {
            "SNP" => {
                assert_eq!(
                    r.verdict,
                    kolm_verifier::attestation::AttestationVerdict::Accept,
                    "{file}\n{}",
                    r.to_table()
                );
                for (k, v) in case["snp_fields"].as_object().unwrap() {
                    assert_eq!(&r.fields[k.as_str()], v, "{file} field {k}");
                }
                // A year after the VCEK expires the same evidence is stale.
                let late = kolm_format::timefmt::parse_rfc3339("2033-01-01T00:00:00Z").unwrap();
                let r =
                    azure::verify_azure(&input, late, &policy, &AzureExpectations::default(), None);
                assert_eq!(
                    r.first_failure().unwrap().id,
                    "snp.freshness",
                    "{}",
                    r.to_table()
                );
            }
            "TDX" => {
                // Signatures inside are genuine, but without DCAP collateral
                // the TCB cannot be appraised: fail closed.
                assert_eq!(
                    r.verdict,
                    kolm_verifier::attestation::AttestationVerdict::Reject
                );
                assert_eq!(
                    r.first_failure().unwrap().id,
                    "azure.tdx.collateral",
                    "{}",
                    r.to_table()
                );
                assert_eq!(status(&r, "azure.tdx.td_report"), Some(CheckStatus::Pass));
                assert_eq!(r.fields["mrtd"], case["td_quote"]["mrtd"]);
            }
            other => panic!("unknown HCL type {other}"),
        }
    }
}

#[test]
fn azure_snp_hardware_report_flips_are_rejected() {
    let Some(dir) = samples() else { return };
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let input = std::fs::read(dir.join("azure/az-snp-vtpm-milan/evidence.json")).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&input).unwrap();
    let hcl = b64
        .decode(v["hcl_report"].as_str().unwrap().trim_end_matches('='))
        .unwrap();
    let at = kolm_format::timefmt::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
    let policy = kolm_policy::Policy::production();
    let mut n = 0;
    // The signed part of the SNP report sits at HCL offset 32..32+0x2A0.
    for i in (32..32 + 0x2a0).step_by(7) {
        let mut h = hcl.clone();
        h[i] ^= 0x01;
        let bad = with(&input, |v| v["hcl_report"] = b64.encode(&h).into());
        let r = azure::verify_azure(&bad, at, &policy, &AzureExpectations::default(), None);
        assert_eq!(
            r.verdict,
            kolm_verifier::attestation::AttestationVerdict::Reject,
            "byte {i}"
        );
        n += 1;
    }
    eprintln!("azure snp: {n} hardware-report flips rejected");
}
