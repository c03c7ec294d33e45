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
//! | `simulated` (receipt v2), Nitro form | `evidence/sim-nitro.cose` (checked by [`crate::sim`] against the caller's sim root only) | (the document carries its chain) |
//! | `simulated` (receipt v2), TDX form | `evidence/sim-tdx-quote.bin` (checked by [`crate::sim`] against the caller's TDX format root only) | `evidence/sim-tdx-collateral.json` (required) |
//! | `simulated` (receipt v2), SEV-SNP form | `evidence/sim-snp-report.bin` (checked by [`crate::sim`] against the caller's SEV-SNP format root, the sim ARK, only) | `evidence/sim-snp-vcek.der`, `evidence/sim-snp-ask-ark.pem` (both required) |
//!
//! The 64-byte report data of the binding goes to: Nitro `user_data`, SNP
//! `REPORT_DATA`, TDX `REPORTDATA`, Azure runtime-data `user-data`.
//!
//! Each file has exactly one form, the binary one (no base64, hex or PEM
//! variants of `nitro.cose` or `snp-report.bin`).

use std::collections::BTreeMap;

use kolm_policy::{Platform, Policy};
use time::OffsetDateTime;

use crate::artifact::VerifyAt;
use crate::attested::{Attested, Expectations, Rejection};

pub const NITRO_DOC: &str = "evidence/nitro.cose";
pub const SNP_REPORT: &str = "evidence/snp-report.bin";
pub const SNP_VCEK: &str = "evidence/snp-vcek.der";
pub const SNP_CHAIN: &str = "evidence/snp-ask-ark.pem";
pub const TDX_QUOTE: &str = "evidence/tdx-quote.bin";
pub const TDX_COLLATERAL: &str = "evidence/tdx-collateral.json";
pub const AZURE_EVIDENCE: &str = "evidence/azure-evidence.json";
pub const SIM_NITRO_DOC: &str = kolm_format::evidence::SIM_NITRO_DOC_PATH;
pub const SIM_TDX_QUOTE: &str = kolm_format::evidence::SIM_TDX_QUOTE_PATH;
pub const SIM_TDX_COLLATERAL: &str = kolm_format::evidence::SIM_TDX_COLLATERAL_PATH;
pub const SIM_SNP_REPORT: &str = kolm_format::evidence::SIM_SNP_REPORT_PATH;
pub const SIM_SNP_VCEK: &str = kolm_format::evidence::SIM_SNP_VCEK_PATH;
pub const SIM_SNP_CHAIN: &str = kolm_format::evidence::SIM_SNP_CHAIN_PATH;

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
    /// Simulated evidence of a form this verifier cannot check.
    #[error("simulated evidence of the {0} form: not built in this verifier")]
    SimFormNotBuilt(crate::sim::SimFormat),
}

/// Verifies the evidence files of an artifact for `platform`, bound to
/// `report_data`, each file in the one binary form receipt-v1 section 6
/// names. `at`: the verification instant; [`VerifyAt::ReceiptTime`] judges
/// at `finished` (the receipt's own time), or, for a Nitro document, which
/// is produced after the manifest, at the document's own timestamp (a sim
/// document too). `dangerous_sim_root` is the one root `simulated`
/// evidence may chain to (none given: it is rejected, `sim.trust`); no
/// other platform ever sees it.
pub fn verify_slot(
    platform: Platform,
    files: &BTreeMap<String, Vec<u8>>,
    at: VerifyAt,
    finished: OffsetDateTime,
    policy: &Policy,
    report_data: &[u8; 64],
    dangerous_sim_root: Option<&crate::sim::SimRoots>,
) -> Result<Result<Attested, Rejection>, SlotError> {
    let need = |file: &'static str| {
        files
            .get(file)
            .map(Vec::as_slice)
            .ok_or(SlotError::Missing { platform, file })
    };
    let expect = Expectations::new(policy).with_report_data(report_data.to_vec());
    let at_or_finished = match at {
        VerifyAt::Instant(t) => t,
        VerifyAt::ReceiptTime => finished,
    };
    // A Nitro-format document is judged at its own signed timestamp.
    let at_document = |doc: &[u8]| match at {
        VerifyAt::Instant(t) => t,
        VerifyAt::ReceiptTime => crate::nitro::parse_cose_document(doc)
            .map(|d| d.timestamp())
            .unwrap_or(finished),
    };
    match platform {
        Platform::None => Err(SlotError::NotAttested(platform)),
        // The form is the one whose attestation file is there (the index
        // holds one form's files only); receipt v1 `simulated` artifacts
        // carry nothing.
        Platform::Simulated if files.contains_key(SIM_NITRO_DOC) => {
            let doc = need(SIM_NITRO_DOC)?;
            Ok(crate::sim::verify(
                doc,
                dangerous_sim_root,
                &expect,
                at_document(doc),
            ))
        }
        Platform::Simulated if files.contains_key(SIM_TDX_QUOTE) => {
            let ev = crate::tdx::TdxEvidence {
                quote: need(SIM_TDX_QUOTE)?,
                collateral: need(SIM_TDX_COLLATERAL)?,
            };
            Ok(crate::sim::verify_tdx(
                &ev,
                dangerous_sim_root,
                &expect,
                at_or_finished,
            ))
        }
        // The SEV-SNP form: judged, as SEV-SNP evidence is, at the receipt's
        // time (the report carries none).
        Platform::Simulated if files.contains_key(SIM_SNP_REPORT) => {
            let ev = crate::snp::SnpEvidence {
                report: need(SIM_SNP_REPORT)?,
                vcek: need(SIM_SNP_VCEK)?,
                chain: Some(need(SIM_SNP_CHAIN)?),
            };
            Ok(crate::sim::verify_snp(
                &ev,
                dangerous_sim_root,
                &expect,
                at_or_finished,
            ))
        }
        Platform::Simulated => Err(SlotError::NotAttested(platform)),
        Platform::Nitro => {
            let doc = need(NITRO_DOC)?;
            Ok(crate::nitro::verify(doc, &expect, at_document(doc)))
        }
        Platform::AzureSevSnp | Platform::AzureTdx => {
            let input = crate::azure::AzureInput {
                evidence: need(AZURE_EVIDENCE)?,
                tdx_collateral: files.get(TDX_COLLATERAL).map(Vec::as_slice),
            };
            Ok(crate::azure::verify(&input, &expect, at_or_finished))
        }
        Platform::SevSnp => {
            let ev = crate::snp::SnpEvidence {
                report: need(SNP_REPORT)?,
                vcek: need(SNP_VCEK)?,
                chain: files.get(SNP_CHAIN).map(Vec::as_slice),
            };
            Ok(crate::snp::verify(&ev, &expect, at_or_finished))
        }
        Platform::Tdx => {
            let ev = crate::tdx::TdxEvidence {
                quote: need(TDX_QUOTE)?,
                collateral: need(TDX_COLLATERAL)?,
            };
            Ok(crate::tdx::verify(&ev, &expect, at_or_finished))
        }
    }
}
