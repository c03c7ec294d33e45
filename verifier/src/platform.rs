//! Dispatch from an artifact's evidence slot to the platform verifiers.
//!
//! Evidence file names per platform (receipt spec v1, section 6):
//!
//! | platform | attestation | collateral |
//! |---|---|---|
//! | `nitro` | `evidence/nitro.cose` | (the document carries its chain) |
//! | `sev-snp` | `evidence/snp-report.bin` | `evidence/snp-vcek.der` (required), `evidence/snp-ask-ark.pem` (optional; default: embedded roots) |
//! | `tdx` | `evidence/tdx-quote.bin` | `evidence/tdx-collateral.json` (required) |
//! | `azure-sev-snp`, `azure-tdx` | `evidence/azure-evidence.json` | `evidence/tdx-collateral.json` (azure-tdx; without it: rejected, fail closed) |
//!
//! The 64-byte report data of the binding goes to: Nitro `user_data`, SNP
//! `REPORT_DATA`, TDX `REPORTDATA`, Azure runtime-data `user-data`.

use std::collections::BTreeMap;

use kolm_policy::{Platform, Policy};
use time::OffsetDateTime;

use crate::attestation::AttestationReport;

pub const NITRO_DOC: &str = "evidence/nitro.cose";
pub const SNP_REPORT: &str = "evidence/snp-report.bin";
pub const SNP_VCEK: &str = "evidence/snp-vcek.der";
pub const SNP_CHAIN: &str = "evidence/snp-ask-ark.pem";
pub const TDX_QUOTE: &str = "evidence/tdx-quote.bin";
pub const TDX_COLLATERAL: &str = "evidence/tdx-collateral.json";
pub const AZURE_EVIDENCE: &str = "evidence/azure-evidence.json";

/// Why the evidence slot cannot be handed to a verifier.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotError {
    #[error("platform {platform} evidence needs {file}")]
    Missing {
        platform: Platform,
        file: &'static str,
    },
    #[error("platform {0} carries no hardware evidence")]
    NotAttested(Platform),
}

/// Verifies the evidence files of an artifact for `platform`, bound to
/// `report_data`. `at`: the verification instant (`None`: the evidence's own
/// time where it has one, else `fallback`).
pub fn verify_slot(
    platform: Platform,
    files: &BTreeMap<String, Vec<u8>>,
    at: Option<OffsetDateTime>,
    fallback: OffsetDateTime,
    policy: &Policy,
    report_data: &[u8; 64],
) -> Result<AttestationReport, SlotError> {
    let need = |file: &'static str| {
        files
            .get(file)
            .map(Vec::as_slice)
            .ok_or(SlotError::Missing { platform, file })
    };
    match platform {
        Platform::None | Platform::Simulated => Err(SlotError::NotAttested(platform)),
        Platform::Nitro => {
            let doc = need(NITRO_DOC)?;
            // A document is produced after the manifest: judge it at its own
            // timestamp unless the auditor names an instant.
            let at = at.unwrap_or_else(|| {
                crate::nitro::parse_nitro_document(doc)
                    .map(|d| d.timestamp())
                    .unwrap_or(fallback)
            });
            let expect = crate::nitro::NitroExpectations {
                user_data: Some(report_data.to_vec()),
                ..Default::default()
            };
            Ok(crate::nitro::verify_nitro(doc, at, policy, &expect))
        }
        Platform::AzureSevSnp | Platform::AzureTdx => {
            let ev = need(AZURE_EVIDENCE)?;
            let collateral = files.get(TDX_COLLATERAL).map(Vec::as_slice);
            let expect = crate::azure::AzureExpectations {
                nonce: None,
                user_data: Some(*report_data),
            };
            Ok(crate::azure::verify_azure(
                ev,
                at.unwrap_or(fallback),
                policy,
                &expect,
                collateral,
            ))
        }
        Platform::SevSnp => {
            let report = need(SNP_REPORT)?;
            let vcek = need(SNP_VCEK)?;
            let chain = files.get(SNP_CHAIN).map(Vec::as_slice);
            Ok(crate::snp::verify_snp(
                report,
                vcek,
                chain,
                at.unwrap_or(fallback),
                policy,
                Some(report_data),
            ))
        }
        Platform::Tdx => {
            let quote = need(TDX_QUOTE)?;
            let collateral = need(TDX_COLLATERAL)?;
            Ok(crate::tdx::verify_tdx(
                quote,
                collateral,
                at.unwrap_or(fallback),
                policy,
                Some(report_data),
            ))
        }
    }
}

/// The launch measurement a platform verifier reported (Nitro PCR0, SNP
/// MEASUREMENT, TDX MRTD), as bytes.
pub fn attested_measurement(att: &AttestationReport) -> Option<Vec<u8>> {
    let hex_of = |v: &serde_json::Value| v.as_str().and_then(|s| hex::decode(s).ok());
    let f = &att.fields;
    f.get("pcrs")
        .and_then(|p| p.get("0"))
        .and_then(hex_of)
        .or_else(|| f.get("measurement").and_then(hex_of))
        .or_else(|| f.get("td").and_then(|td| td.get("mrtd")).and_then(hex_of))
        .or_else(|| f.get("mrtd").and_then(hex_of))
}
