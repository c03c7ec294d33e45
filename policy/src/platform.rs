//! TEE platforms a policy can allow, and the TDX TCB status values a policy
//! can accept.
//!
//! Both are closed enums with one canonical spelling each (the spelling used in
//! policy files and receipts); `parse` accepts exactly that spelling.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::PolicyError;

/// The platform a job ran on, as named in policies and receipts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Platform {
    /// No TEE at all (development only). Spelled `none`.
    None,
    /// A software simulation of a TEE (tests only). Spelled `simulated`.
    Simulated,
    /// AWS Nitro Enclaves. Spelled `nitro`.
    Nitro,
    /// AMD SEV-SNP on bare metal or a non-Azure cloud. Spelled `sev-snp`.
    SevSnp,
    /// Intel TDX. Spelled `tdx`.
    Tdx,
    /// AMD SEV-SNP behind the Azure paravisor. Spelled `azure-sev-snp`.
    AzureSevSnp,
    /// Intel TDX behind the Azure paravisor. Spelled `azure-tdx`.
    AzureTdx,
}

impl Platform {
    /// Every platform, in `Ord` order.
    pub const ALL: [Platform; 7] = [
        Platform::None,
        Platform::Simulated,
        Platform::Nitro,
        Platform::SevSnp,
        Platform::Tdx,
        Platform::AzureSevSnp,
        Platform::AzureTdx,
    ];

    /// The five platforms backed by hardware attestation.
    pub const HARDWARE: [Platform; 5] = [
        Platform::Nitro,
        Platform::SevSnp,
        Platform::Tdx,
        Platform::AzureSevSnp,
        Platform::AzureTdx,
    ];

    /// The canonical spelling (`"sev-snp"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Platform::None => "none",
            Platform::Simulated => "simulated",
            Platform::Nitro => "nitro",
            Platform::SevSnp => "sev-snp",
            Platform::Tdx => "tdx",
            Platform::AzureSevSnp => "azure-sev-snp",
            Platform::AzureTdx => "azure-tdx",
        }
    }

    /// Parses the canonical spelling; anything else (other case included)
    /// is [`PolicyError::UnknownPlatform`].
    pub fn parse(s: &str) -> Result<Platform, PolicyError> {
        Platform::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| PolicyError::UnknownPlatform {
                value: s.to_owned(),
            })
    }

    /// Whether evidence from this platform is hardware-attested
    /// (false for `none` and `simulated`).
    pub fn is_attested(self) -> bool {
        !matches!(self, Platform::None | Platform::Simulated)
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Platform {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Platform {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Platform::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A TDX TCB status as reported by Intel's quote verification collateral.
///
/// `Revoked` and other statuses are deliberately absent: no policy can accept
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TdxTcbStatus {
    /// `UpToDate`.
    UpToDate,
    /// `SWHardeningNeeded`.
    SwHardeningNeeded,
    /// `ConfigurationNeeded`.
    ConfigurationNeeded,
    /// `ConfigurationAndSWHardeningNeeded`.
    ConfigurationAndSwHardeningNeeded,
    /// `OutOfDate`.
    OutOfDate,
    /// `OutOfDateConfigurationNeeded`.
    OutOfDateConfigurationNeeded,
}

impl TdxTcbStatus {
    /// Every status a policy may list.
    pub const ALL: [TdxTcbStatus; 6] = [
        TdxTcbStatus::UpToDate,
        TdxTcbStatus::SwHardeningNeeded,
        TdxTcbStatus::ConfigurationNeeded,
        TdxTcbStatus::ConfigurationAndSwHardeningNeeded,
        TdxTcbStatus::OutOfDate,
        TdxTcbStatus::OutOfDateConfigurationNeeded,
    ];

    /// Intel's spelling (`"SWHardeningNeeded"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            TdxTcbStatus::UpToDate => "UpToDate",
            TdxTcbStatus::SwHardeningNeeded => "SWHardeningNeeded",
            TdxTcbStatus::ConfigurationNeeded => "ConfigurationNeeded",
            TdxTcbStatus::ConfigurationAndSwHardeningNeeded => "ConfigurationAndSWHardeningNeeded",
            TdxTcbStatus::OutOfDate => "OutOfDate",
            TdxTcbStatus::OutOfDateConfigurationNeeded => "OutOfDateConfigurationNeeded",
        }
    }

    /// Parses Intel's exact spelling; anything else is
    /// [`PolicyError::UnknownTcbStatus`].
    pub fn parse(s: &str) -> Result<TdxTcbStatus, PolicyError> {
        TdxTcbStatus::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| PolicyError::UnknownTcbStatus {
                value: s.to_owned(),
            })
    }
}

impl fmt::Display for TdxTcbStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for TdxTcbStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for TdxTcbStatus {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        TdxTcbStatus::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn platform_spellings_round_trip() {
        for p in Platform::ALL {
            assert_eq!(Platform::parse(p.as_str()), Ok(p));
            assert_eq!(p.to_string(), p.as_str());
        }
        assert_eq!(Platform::parse("sev-snp"), Ok(Platform::SevSnp));
        assert_eq!(Platform::parse("azure-tdx"), Ok(Platform::AzureTdx));
    }

    #[test]
    fn platform_parse_rejects_other_spellings() {
        for bad in ["", "SEV-SNP", "sev_snp", "sevsnp", "Nitro", " tdx", "sgx"] {
            let err = Platform::parse(bad).unwrap_err();
            assert_eq!(
                err,
                PolicyError::UnknownPlatform {
                    value: bad.to_owned()
                }
            );
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn only_hardware_platforms_are_attested() {
        let attested: Vec<Platform> = Platform::ALL
            .into_iter()
            .filter(|p| p.is_attested())
            .collect();
        assert_eq!(attested, Platform::HARDWARE.to_vec());
        assert!(!Platform::None.is_attested());
        assert!(!Platform::Simulated.is_attested());
    }

    #[test]
    fn tcb_status_spellings_round_trip() {
        for t in TdxTcbStatus::ALL {
            assert_eq!(TdxTcbStatus::parse(t.as_str()), Ok(t));
        }
        assert_eq!(
            TdxTcbStatus::parse("SWHardeningNeeded"),
            Ok(TdxTcbStatus::SwHardeningNeeded)
        );
        for bad in ["Revoked", "uptodate", "SwHardeningNeeded", ""] {
            assert!(TdxTcbStatus::parse(bad).is_err(), "{bad}");
        }
    }
}
