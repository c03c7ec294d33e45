//! Whether a policy pins the launch identity of a guest: the rule that
//! turns "some genuine TEE" into "our enclave".
//!
//! Hardware evidence proves that *some* workload ran in a genuine TEE. It
//! proves that *this* workload ran only when the policy compares the fields
//! that identify the guest's code with allow-lists. [`Policy::pinning`]
//! says which fields those are for a platform, and whether the policy's
//! allow-lists cover enough of them; the verifier calls it only after the
//! evidence matched every allow-list, so "pinned" means "the evidence's
//! identity is one the policy names".
//!
//! What pins, per platform (the reasoning is in `docs/attestation.md`):
//!
//! | platform | pinned by | never pins alone |
//! |---|---|---|
//! | `nitro` | PCR0 (the whole image), or PCR1 and PCR2 together | PCR3, PCR4, PCR8 |
//! | `sev-snp` | MEASUREMENT in `sev_snp.measurements`, or `sev_snp.id_key_digests` | HOST_DATA, a MEASUREMENT from `sev_snp.firmware_measurements` |
//! | `tdx` | MRTD and RTMR0, RTMR1, RTMR2 together | MRTD alone, MRCONFIGID, MROWNER, MROWNERCONFIG |
//! | `azure-sev-snp`, `azure-tdx` | vTPM PCR4 and one of PCR8, PCR9, PCR11 in `azure.pcrs` | the hardware report's MEASUREMENT/MRTD (the paravisor's) |
//! | `none`, `simulated` | nothing (no hardware evidence) | |

use std::fmt;

use crate::{Platform, Policy, TdxConfigField};

/// The reason given for evidence whose identity the policy does not pin.
pub const UNPINNED_REASON: &str =
    "no measurement pinned: any workload in a genuine TEE could have produced this";

/// A launch-identity field a policy can compare with an allow-list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum IdentityField {
    /// A Nitro PCR (`nitro.pcrs`).
    NitroPcr(u8),
    /// SEV-SNP MEASUREMENT as a guest image digest (`sev_snp.measurements`).
    SnpMeasurement,
    /// SEV-SNP MEASUREMENT as a generic firmware's digest
    /// (`sev_snp.firmware_measurements`).
    SnpFirmwareMeasurement,
    /// SEV-SNP ID_KEY_DIGEST (`sev_snp.id_key_digests`).
    SnpIdKeyDigest,
    /// SEV-SNP HOST_DATA (`sev_snp.host_data`).
    SnpHostData,
    /// TDX MRTD (`tdx.mrtd`).
    TdxMrtd,
    /// TDX RTMR0..RTMR3 (`tdx.rtmr0`..`tdx.rtmr3`).
    TdxRtmr(u8),
    /// TDX MRCONFIGID, MROWNER or MROWNERCONFIG.
    TdxConfig(TdxConfigField),
    /// An Azure vTPM PCR (`azure.pcrs`).
    AzurePcr(u8),
}

impl fmt::Display for IdentityField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdentityField::NitroPcr(i) => write!(f, "PCR{i}"),
            IdentityField::SnpMeasurement => f.write_str("MEASUREMENT"),
            IdentityField::SnpFirmwareMeasurement => f.write_str("MEASUREMENT (firmware)"),
            IdentityField::SnpIdKeyDigest => f.write_str("ID_KEY_DIGEST"),
            IdentityField::SnpHostData => f.write_str("HOST_DATA"),
            IdentityField::TdxMrtd => f.write_str("MRTD"),
            IdentityField::TdxRtmr(i) => write!(f, "RTMR{i}"),
            IdentityField::TdxConfig(c) => f.write_str(c.name()),
            IdentityField::AzurePcr(i) => write!(f, "vTPM PCR{i}"),
        }
    }
}

/// Whether the policy pins the guest's launch identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pinning {
    /// The policy's allow-lists identify the guest. `by`: every identity
    /// field the policy compared, the identifying ones included.
    Pinned {
        /// The compared fields, in [`IdentityField`] order.
        by: Vec<IdentityField>,
    },
    /// Nothing the policy compares identifies the guest: any workload in a
    /// genuine TEE of this platform could have produced the evidence.
    Unpinned {
        /// The identity fields the policy did compare (none of which pins).
        compared: Vec<IdentityField>,
        /// What the policy would need to pin this platform.
        needs: &'static str,
    },
}

impl Pinning {
    /// Whether the identity is pinned.
    pub fn is_pinned(&self) -> bool {
        matches!(self, Pinning::Pinned { .. })
    }

    /// The compared identity fields.
    pub fn compared(&self) -> &[IdentityField] {
        match self {
            Pinning::Pinned { by } => by,
            Pinning::Unpinned { compared, .. } => compared,
        }
    }
}

impl fmt::Display for Pinning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |fields: &[IdentityField]| {
            fields
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Pinning::Pinned { by } => write!(f, "pinned by {}", list(by)),
            Pinning::Unpinned { compared, needs } if compared.is_empty() => {
                write!(f, "{UNPINNED_REASON} (pinning needs {needs})")
            }
            Pinning::Unpinned { compared, needs } => write!(
                f,
                "{UNPINNED_REASON} (compared {} only; pinning needs {needs})",
                list(compared)
            ),
        }
    }
}

impl Policy {
    /// Whether this policy pins the launch identity of `platform` evidence
    /// that satisfied every allow-list of the policy. `snp_measurement` is
    /// the SEV-SNP report's MEASUREMENT (bare `sev-snp` only): it decides
    /// whether it matched `sev_snp.measurements` (pins) or
    /// `sev_snp.firmware_measurements` (does not).
    ///
    /// A pure function of the policy (and that one value); the table in the
    /// module documentation is the rule.
    pub fn pinning(&self, platform: Platform, snp_measurement: Option<&[u8; 48]>) -> Pinning {
        let mut compared = Vec::new();
        let (pinned, needs) = match platform {
            Platform::None | Platform::Simulated => (false, "hardware evidence"),
            Platform::Nitro => {
                compared.extend(self.nitro.pcrs.keys().map(|&i| IdentityField::NitroPcr(i)));
                let has = |i: u8| self.nitro.pcrs.contains_key(&i);
                (
                    has(0) || (has(1) && has(2)),
                    "nitro.pcrs with PCR0 (the enclave image), or PCR1 and PCR2",
                )
            }
            Platform::SevSnp => {
                let snp = &self.sev_snp;
                let image = match snp_measurement {
                    Some(m) => snp.measurements.contains(m),
                    None => false,
                };
                let firmware =
                    snp_measurement.is_some_and(|m| snp.firmware_measurements.contains(m));
                if image {
                    compared.push(IdentityField::SnpMeasurement);
                }
                if firmware {
                    compared.push(IdentityField::SnpFirmwareMeasurement);
                }
                if !snp.id_key_digests.is_empty() {
                    compared.push(IdentityField::SnpIdKeyDigest);
                }
                if !snp.host_data.is_empty() {
                    compared.push(IdentityField::SnpHostData);
                }
                (
                    image || !snp.id_key_digests.is_empty(),
                    "sev_snp.measurements (a launch digest that covers the guest image) or \
                     sev_snp.id_key_digests",
                )
            }
            Platform::Tdx => {
                let tdx = &self.tdx;
                if !tdx.mrtd.is_empty() {
                    compared.push(IdentityField::TdxMrtd);
                }
                for (i, list) in (0u8..).zip(&tdx.rtmr) {
                    if !list.is_empty() {
                        compared.push(IdentityField::TdxRtmr(i));
                    }
                }
                for (field, list) in [
                    (TdxConfigField::MrConfigId, &tdx.mrconfigid),
                    (TdxConfigField::MrOwner, &tdx.mrowner),
                    (TdxConfigField::MrOwnerConfig, &tdx.mrownerconfig),
                ] {
                    if !list.is_empty() {
                        compared.push(IdentityField::TdxConfig(field));
                    }
                }
                let [r0, r1, r2, _] = &tdx.rtmr;
                (
                    !tdx.mrtd.is_empty() && !r0.is_empty() && !r1.is_empty() && !r2.is_empty(),
                    "tdx.mrtd and tdx.rtmr0, tdx.rtmr1, tdx.rtmr2 (firmware, kernel, initrd and \
                     command line)",
                )
            }
            Platform::AzureSevSnp | Platform::AzureTdx => {
                compared.extend(self.azure.pcrs.keys().map(|&i| IdentityField::AzurePcr(i)));
                let has = |i: u8| self.azure.pcrs.contains_key(&i);
                (
                    has(4) && (has(8) || has(9) || has(11)),
                    "azure.pcrs with vTPM PCR4 (boot loader) and PCR8, PCR9 or PCR11 (kernel, \
                     initrd, command line); the hardware report's measurement is the paravisor's",
                )
            }
        };
        if pinned {
            Pinning::Pinned { by: compared }
        } else {
            Pinning::Unpinned { compared, needs }
        }
    }
}
