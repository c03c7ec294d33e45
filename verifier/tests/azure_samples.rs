//! Azure CVM evidence (vTPM + HCL report) from real Azure machines:
//! `../shared/attestation-samples/azure/`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use kolm_policy::Policy;
use kolm_verifier::attested::{Attested, Evaluation, EvidenceKind, Expectations, Rejection};
use kolm_verifier::azure::{self, AzureInput};
use kolm_verifier::check::{AzureCheck, CheckId, CheckStatus, SnpCheck};
use kolm_verifier::report::attestation_table;
use time::OffsetDateTime;

fn samples() -> Option<std::path::PathBuf> {
    kolm_testkit::samples("azure/expected.json")
}

fn status(r: &Evaluation, id: AzureCheck) -> Option<CheckStatus> {
    r.checks.status_of(id)
}

fn any_failed(r: &Evaluation) -> bool {
    r.checks.first_failure().is_some()
}

/// The Azure layer alone (no hardware report), with `nonce` and
/// `report_data` expected.
fn layer(input: &[u8], nonce: Option<Vec<u8>>, report_data: Option<Vec<u8>>) -> Evaluation {
    let policy = Policy::production();
    let mut expect = Expectations::new(&policy);
    expect.nonce = nonce;
    expect.report_data = report_data;
    let mut r = Evaluation::new(EvidenceKind::Azure, OffsetDateTime::UNIX_EPOCH);
    azure::check_azure_layer(input, &expect, &mut r);
    r
}

fn verify(input: &[u8], at: OffsetDateTime) -> Result<Attested, Rejection> {
    let policy = Policy::production();
    let input = AzureInput {
        evidence: input,
        tdx_collateral: None,
    };
    azure::verify(&input, &Expectations::new(&policy), at)
}

fn table(r: &Result<Attested, Rejection>) -> String {
    attestation_table(kolm_verifier::attested::Outcome::of(r), false)
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
        let r = layer(&input, Some(nonce.clone()), None);
        for id in [
            AzureCheck::EvidenceFormat,
            AzureCheck::BindingRuntimeData,
            AzureCheck::TpmSignature,
            AzureCheck::TpmPcrDigest,
            AzureCheck::BindingNonce,
        ] {
            assert_eq!(
                status(&r, id),
                Some(CheckStatus::Pass),
                "{file} {id}\n{:?}",
                r.checks
            );
        }
        for name in [
            "hcl_report_type",
            "runtime_data_sha256",
            "tpm_quote_extra_data(nonce)",
        ] {
            assert_eq!(r.fields.get(name), Some(&case[name]), "{file} {name}");
        }

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
        let r = layer(&input, Some(b"other".to_vec()), Some(vec![1; 64]));
        assert_eq!(
            status(&r, AzureCheck::BindingNonce),
            Some(CheckStatus::Fail)
        );
        assert_eq!(
            status(&r, AzureCheck::BindingUserData),
            Some(CheckStatus::Fail)
        );
        // The right user-data passes.
        let ev = azure::parse_azure_evidence(&input).unwrap();
        if let Some(u) = ev.runtime.user_data.clone() {
            let r = layer(&input, None, Some(u));
            assert_eq!(
                status(&r, AzureCheck::BindingUserData),
                Some(CheckStatus::Pass)
            );
        }
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
            let r = layer(&bad, None, None);
            let rejected = any_failed(&r);
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
            let r = layer(&bad, None, None);
            assert_eq!(
                status(&r, AzureCheck::TpmSignature),
                Some(CheckStatus::Fail),
                "{file} sig {i}"
            );
            count += 1;
        }
        // Runtime data and the report_data it must match.
        let hcl = b64
            .decode(v["hcl_report"].as_str().unwrap().trim_end_matches('='))
            .unwrap();
        let rt_start = 32 + kolm_verifier::snp::report::REPORT_LEN + 20;
        for i in (rt_start..rt_start + 400).step_by(3) {
            let mut h = hcl.clone();
            h[i] ^= 0x01;
            let bad = with(&input, |v| v["hcl_report"] = b64.encode(&h).into());
            let r = layer(&bad, None, None);
            assert!(any_failed(&r), "{file} hcl byte {i}");
            count += 1;
        }
        // A PCR value changed.
        let bad = with(&input, |v| {
            v["tpm_quote"]["pcrs"][0] = "00".repeat(32).into()
        });
        let r = layer(&bad, None, None);
        assert_eq!(
            status(&r, AzureCheck::TpmPcrDigest),
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
            let r = layer(&bad, None, None);
            assert_eq!(
                status(&r, AzureCheck::EvidenceFormat),
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
    for case in expected["cases"].as_array().unwrap() {
        let file = case["file"].as_str().unwrap();
        let input = std::fs::read(dir.join("azure").join(file)).unwrap();
        let at = kolm_format::timefmt::parse_rfc3339(case["verify_at"].as_str().unwrap()).unwrap();
        let r = verify(&input, at);
        match case["hcl_report_type"].as_str().unwrap() {
            "SNP" => {
                let a = r
                    .as_ref()
                    .unwrap_or_else(|_| panic!("{file}\n{}", table(&r)));
                assert_eq!(a.platform(), kolm_policy::Platform::AzureSevSnp);
                for (k, v) in case["snp_fields"].as_object().unwrap() {
                    assert_eq!(a.fields.get(k), Some(v), "{file} field {k}");
                }
                // The claimed measurement is the hardware report's.
                let m = hex::encode(a.measurement().as_bytes());
                assert_eq!(
                    Some(&serde_json::Value::from(m)),
                    a.fields.get("measurement")
                );
                // A year after the VCEK expires the same evidence is stale.
                let late = kolm_format::timefmt::parse_rfc3339("2033-01-01T00:00:00Z").unwrap();
                let r = verify(&input, late);
                let first = r.as_ref().unwrap_err().first_failure().unwrap().id;
                assert_eq!(first, CheckId::from(SnpCheck::Freshness), "{}", table(&r));
            }
            "TDX" => {
                // Signatures inside are genuine, but without DCAP collateral
                // the TCB cannot be appraised: fail closed.
                let j = r.as_ref().unwrap_err();
                assert_eq!(
                    j.first_failure().unwrap().id,
                    CheckId::from(AzureCheck::TdxCollateral),
                    "{}",
                    table(&r)
                );
                assert_eq!(
                    j.checks.status_of(AzureCheck::TdxTdReport),
                    Some(CheckStatus::Pass)
                );
                assert_eq!(j.fields.get("mrtd"), Some(&case["td_quote"]["mrtd"]));
            }
            other => panic!("unknown HCL type {other}"),
        }
    }
}

#[test]
fn azure_expectations_it_cannot_check_fail_closed() {
    let Some(dir) = samples() else { return };
    let input = std::fs::read(dir.join("azure/az-snp-vtpm-milan/evidence.json")).unwrap();
    let policy = Policy::production();
    let mut expect = Expectations::new(&policy);
    expect.public_key = Some(vec![1, 2, 3]);
    let at = kolm_format::timefmt::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
    let input = AzureInput {
        evidence: &input,
        tdx_collateral: None,
    };
    let r = azure::verify(&input, &expect, at);
    assert_eq!(
        r.unwrap_err().first_failure().unwrap().id,
        CheckId::from(AzureCheck::BindingUserData)
    );
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
    let mut n = 0;
    // The signed part of the SNP report sits at HCL offset 32..32+0x2A0.
    for i in (32..32 + 0x2a0).step_by(7) {
        let mut h = hcl.clone();
        h[i] ^= 0x01;
        let bad = with(&input, |v| v["hcl_report"] = b64.encode(&h).into());
        assert!(verify(&bad, at).is_err(), "byte {i}");
        n += 1;
    }
    eprintln!("azure snp: {n} hardware-report flips rejected");
}
