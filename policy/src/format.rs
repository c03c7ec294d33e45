//! The `kolm.policy.v1` TOML format: raw serde shapes and their conversion
//! to and from the typed [`Policy`].
//!
//! The raw shapes mirror the file one to one, with `deny_unknown_fields`
//! on every table, so toml reports an unknown key by name, line and column.
//! Values are kept [`Spanned`] so the checks done here (hex, duplicates,
//! ranges, gate bounds) can name the dotted key path and the line.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::policy::SCHEMA_V1;
use crate::{
    AzurePolicy, EgressPolicy, FreshnessPolicy, LimitsPolicy, NitroPolicy, Platform, Policy,
    PolicyError, QualityGate, QualityPolicy, SnpPolicy, SnpTcb, TdxPolicy, TdxTcbStatus,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    schema: Spanned<String>,
    allowed_platforms: Spanned<Vec<Spanned<Platform>>>,
    #[serde(default)]
    allow_debug: bool,
    #[serde(default)]
    nitro: Option<RawNitro>,
    #[serde(default)]
    sev_snp: Option<RawSnp>,
    #[serde(default)]
    tdx: Option<RawTdx>,
    #[serde(default)]
    azure: Option<RawAzure>,
    #[serde(default)]
    egress: Option<RawEgress>,
    #[serde(default)]
    freshness: Option<RawFreshness>,
    #[serde(default)]
    quality: Option<RawQuality>,
    #[serde(default)]
    limits: Option<RawLimits>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    #[serde(default)]
    max_input_bytes: Option<u64>,
    #[serde(default)]
    max_job_seconds: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNitro {
    #[serde(default)]
    pcrs: BTreeMap<String, Spanned<Vec<Spanned<String>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAzure {
    #[serde(default)]
    pcrs: BTreeMap<String, Spanned<Vec<Spanned<String>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSnp {
    #[serde(default)]
    measurements: Vec<Spanned<String>>,
    #[serde(default)]
    firmware_measurements: Vec<Spanned<String>>,
    #[serde(default)]
    id_key_digests: Vec<Spanned<String>>,
    #[serde(default)]
    host_data: Vec<Spanned<String>>,
    #[serde(default)]
    allow_migration: bool,
    #[serde(default)]
    max_vmpl: Option<Spanned<u64>>,
    #[serde(default)]
    min_tcb: Option<SnpTcb>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTdx {
    #[serde(default)]
    mrtd: Vec<Spanned<String>>,
    #[serde(default)]
    rtmr0: Vec<Spanned<String>>,
    #[serde(default)]
    rtmr1: Vec<Spanned<String>>,
    #[serde(default)]
    rtmr2: Vec<Spanned<String>>,
    #[serde(default)]
    rtmr3: Vec<Spanned<String>>,
    #[serde(default)]
    mrconfigid: Vec<Spanned<String>>,
    #[serde(default)]
    mrowner: Vec<Spanned<String>>,
    #[serde(default)]
    mrownerconfig: Vec<Spanned<String>>,
    #[serde(default)]
    allowed_tcb_status: Option<Spanned<Vec<Spanned<TdxTcbStatus>>>>,
    #[serde(default)]
    allowed_advisories: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEgress {
    #[serde(default)]
    must_be_zero: Option<bool>,
    #[serde(default)]
    max_blocked_attempts: Option<u64>,
    #[serde(default)]
    require_landlock: Option<bool>,
    #[serde(default)]
    require_network_namespace: Option<bool>,
    #[serde(default)]
    require_isolation: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFreshness {
    #[serde(default)]
    nitro_max_skew_seconds: Option<Spanned<u64>>,
    #[serde(default)]
    tdx_min_tcb_evaluation_data_number: Option<Spanned<u64>>,
    #[serde(default)]
    require_snp_min_tcb: Option<bool>,
    #[serde(default)]
    require_bound_collateral: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQuality {
    #[serde(default)]
    gates: Vec<Spanned<RawGate>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGate {
    metric: Spanned<String>,
    #[serde(default)]
    min: Option<Spanned<f64>>,
    #[serde(default)]
    max: Option<Spanned<f64>>,
}

/// Parses and checks a policy document; see [`Policy::from_toml_str`].
pub(crate) fn parse(src: &str) -> Result<Policy, PolicyError> {
    let raw: RawPolicy = toml::from_str(src).map_err(|e| PolicyError::Toml {
        message: e.to_string().trim_end().to_owned(),
    })?;
    Converter { src }.policy(raw)
}

/// Turns raw shapes into typed values, with `src` to turn spans into lines.
struct Converter<'a> {
    src: &'a str,
}

impl Converter<'_> {
    /// 1-based line of the start of `span`.
    fn line(&self, span: Range<usize>) -> usize {
        self.src
            .get(..span.start)
            .map_or(0, |before| before.bytes().filter(|&b| b == b'\n').count())
            .saturating_add(1)
    }

    fn policy(&self, raw: RawPolicy) -> Result<Policy, PolicyError> {
        if raw.schema.get_ref() != SCHEMA_V1 {
            return Err(PolicyError::Schema {
                line: self.line(raw.schema.span()),
                found: raw.schema.into_inner(),
            });
        }
        Ok(Policy {
            allowed_platforms: self.platforms(raw.allowed_platforms)?,
            allow_debug: raw.allow_debug,
            nitro: raw
                .nitro
                .map(|n| self.nitro(n))
                .transpose()?
                .unwrap_or_default(),
            sev_snp: raw
                .sev_snp
                .map(|s| self.snp(s))
                .transpose()?
                .unwrap_or_default(),
            tdx: raw
                .tdx
                .map(|t| self.tdx(t))
                .transpose()?
                .unwrap_or_default(),
            azure: raw
                .azure
                .map(|a| self.azure(a))
                .transpose()?
                .unwrap_or_default(),
            egress: raw.egress.map(egress).unwrap_or_default(),
            freshness: raw
                .freshness
                .map(|f| self.freshness(f))
                .transpose()?
                .unwrap_or_default(),
            quality: raw
                .quality
                .map(|q| self.quality(q))
                .transpose()?
                .unwrap_or_default(),
            limits: raw
                .limits
                .map(|l| LimitsPolicy {
                    max_input_bytes: l.max_input_bytes,
                    max_job_seconds: l.max_job_seconds,
                })
                .unwrap_or_default(),
        })
    }

    fn platforms(
        &self,
        list: Spanned<Vec<Spanned<Platform>>>,
    ) -> Result<BTreeSet<Platform>, PolicyError> {
        const KEY: &str = "allowed_platforms";
        let line = self.line(list.span());
        let list = list.into_inner();
        if list.is_empty() {
            return Err(PolicyError::Empty {
                key: KEY.to_owned(),
                line,
            });
        }
        let mut set = BTreeSet::new();
        for (i, p) in list.iter().enumerate() {
            if !set.insert(*p.get_ref()) {
                return Err(PolicyError::Duplicate {
                    key: format!("{KEY}[{i}]"),
                    line: self.line(p.span()),
                    value: p.get_ref().to_string(),
                });
            }
        }
        Ok(set)
    }

    fn nitro(&self, raw: RawNitro) -> Result<NitroPolicy, PolicyError> {
        Ok(NitroPolicy {
            pcrs: self.pcr_map::<48>("nitro.pcrs", raw.pcrs, 31)?,
        })
    }

    fn azure(&self, raw: RawAzure) -> Result<AzurePolicy, PolicyError> {
        Ok(AzurePolicy {
            pcrs: self.pcr_map::<32>("azure.pcrs", raw.pcrs, 23)?,
        })
    }

    /// A PCR table `"index" = [hex, ...]`: index `0..=max` in canonical
    /// decimal, each list non-empty, `N`-byte values.
    fn pcr_map<const N: usize>(
        &self,
        table: &str,
        raw: BTreeMap<String, Spanned<Vec<Spanned<String>>>>,
        max: u8,
    ) -> Result<BTreeMap<u8, BTreeSet<[u8; N]>>, PolicyError> {
        let mut pcrs = BTreeMap::new();
        for (index, list) in raw {
            let line = self.line(list.span());
            let Some(parsed) = pcr_index(&index).filter(|&i| i <= max) else {
                return Err(PolicyError::PcrIndex {
                    key: table.to_owned(),
                    line,
                    value: index,
                    max,
                });
            };
            let key = format!("{table}.\"{index}\"");
            if list.get_ref().is_empty() {
                return Err(PolicyError::Empty { key, line });
            }
            // Keys are distinct strings and `pcr_index` accepts one spelling
            // per number, so no index is seen twice.
            pcrs.insert(parsed, self.hex_set::<N>(&key, list.into_inner())?);
        }
        Ok(pcrs)
    }

    fn snp(&self, raw: RawSnp) -> Result<SnpPolicy, PolicyError> {
        let max_vmpl = match raw.max_vmpl {
            None => 0,
            Some(v) => u8::try_from(*v.get_ref())
                .ok()
                .filter(|&v| v <= 3)
                .ok_or_else(|| PolicyError::OutOfRange {
                    key: "sev_snp.max_vmpl".to_owned(),
                    line: self.line(v.span()),
                    value: *v.get_ref(),
                    range: "0..=3",
                })?,
        };
        let measurements = self.hex_set::<48>("sev_snp.measurements", raw.measurements)?;
        let firmware_key = "sev_snp.firmware_measurements";
        let firmware_line = raw
            .firmware_measurements
            .first()
            .map(|s| self.line(s.span()));
        let firmware_measurements = self.hex_set::<48>(firmware_key, raw.firmware_measurements)?;
        // A digest is either a guest image's or a firmware's, not both.
        if let Some(both) = firmware_measurements.intersection(&measurements).next() {
            return Err(PolicyError::Duplicate {
                key: firmware_key.to_owned(),
                line: firmware_line.unwrap_or(1),
                value: hex::encode(both),
            });
        }
        let zero = raw
            .id_key_digests
            .iter()
            .enumerate()
            .find(|(_, s)| matches!(decode_hex::<48>(s.get_ref()), Ok(d) if d == [0u8; 48]));
        if let Some((at, s)) = zero {
            return Err(PolicyError::ZeroIdKeyDigest {
                key: format!("sev_snp.id_key_digests[{at}]"),
                line: self.line(s.span()),
            });
        }
        let id_key_digests = self.hex_set::<48>("sev_snp.id_key_digests", raw.id_key_digests)?;
        Ok(SnpPolicy {
            measurements,
            firmware_measurements,
            id_key_digests,
            host_data: self.hex_set::<32>("sev_snp.host_data", raw.host_data)?,
            allow_migration: raw.allow_migration,
            max_vmpl,
            min_tcb: raw.min_tcb,
        })
    }

    fn tdx(&self, raw: RawTdx) -> Result<TdxPolicy, PolicyError> {
        let allowed_tcb_status = match raw.allowed_tcb_status {
            None => TdxPolicy::default().allowed_tcb_status,
            Some(list) => {
                const KEY: &str = "tdx.allowed_tcb_status";
                let line = self.line(list.span());
                let list = list.into_inner();
                if list.is_empty() {
                    return Err(PolicyError::Empty {
                        key: KEY.to_owned(),
                        line,
                    });
                }
                let mut set = BTreeSet::new();
                for (i, status) in list.iter().enumerate() {
                    if !set.insert(*status.get_ref()) {
                        return Err(PolicyError::Duplicate {
                            key: format!("{KEY}[{i}]"),
                            line: self.line(status.span()),
                            value: status.get_ref().to_string(),
                        });
                    }
                }
                set
            }
        };
        Ok(TdxPolicy {
            mrtd: self.hex_set::<48>("tdx.mrtd", raw.mrtd)?,
            rtmr: [
                self.hex_set::<48>("tdx.rtmr0", raw.rtmr0)?,
                self.hex_set::<48>("tdx.rtmr1", raw.rtmr1)?,
                self.hex_set::<48>("tdx.rtmr2", raw.rtmr2)?,
                self.hex_set::<48>("tdx.rtmr3", raw.rtmr3)?,
            ],
            mrconfigid: self.hex_set::<48>("tdx.mrconfigid", raw.mrconfigid)?,
            mrowner: self.hex_set::<48>("tdx.mrowner", raw.mrowner)?,
            mrownerconfig: self.hex_set::<48>("tdx.mrownerconfig", raw.mrownerconfig)?,
            allowed_tcb_status,
            allowed_advisories: self.name_set("tdx.allowed_advisories", raw.allowed_advisories)?,
        })
    }

    fn freshness(&self, raw: RawFreshness) -> Result<FreshnessPolicy, PolicyError> {
        let default = FreshnessPolicy::default();
        // A skew of more than a day is not a skew: refuse it rather than
        // let a typo accept backdated evidence.
        let nitro_max_skew_seconds = match raw.nitro_max_skew_seconds {
            None => default.nitro_max_skew_seconds,
            Some(v) if *v.get_ref() <= 86_400 => *v.get_ref(),
            Some(v) => {
                return Err(PolicyError::OutOfRange {
                    key: "freshness.nitro_max_skew_seconds".to_owned(),
                    line: self.line(v.span()),
                    value: *v.get_ref(),
                    range: "0..=86400",
                });
            }
        };
        let tdx_min_tcb_evaluation_data_number = match raw.tdx_min_tcb_evaluation_data_number {
            None => default.tdx_min_tcb_evaluation_data_number,
            Some(v) => u32::try_from(*v.get_ref()).map_err(|_| PolicyError::OutOfRange {
                key: "freshness.tdx_min_tcb_evaluation_data_number".to_owned(),
                line: self.line(v.span()),
                value: *v.get_ref(),
                range: "0..=4294967295",
            })?,
        };
        Ok(FreshnessPolicy {
            nitro_max_skew_seconds,
            tdx_min_tcb_evaluation_data_number,
            require_snp_min_tcb: raw
                .require_snp_min_tcb
                .unwrap_or(default.require_snp_min_tcb),
            require_bound_collateral: raw
                .require_bound_collateral
                .unwrap_or(default.require_bound_collateral),
        })
    }

    fn quality(&self, raw: RawQuality) -> Result<QualityPolicy, PolicyError> {
        let mut seen = BTreeSet::new();
        let mut gates = Vec::with_capacity(raw.gates.len());
        for (i, gate) in raw.gates.into_iter().enumerate() {
            let key = format!("quality.gates[{i}]");
            let line = self.line(gate.span());
            let gate = gate.into_inner();
            let metric = self.name(&format!("{key}.metric"), gate.metric)?;
            if !seen.insert(metric.clone()) {
                return Err(PolicyError::Duplicate {
                    key: format!("{key}.metric"),
                    line,
                    value: metric,
                });
            }
            let min = self.finite(&format!("{key}.min"), gate.min)?;
            let max = self.finite(&format!("{key}.max"), gate.max)?;
            match (min, max) {
                (None, None) => {
                    return Err(PolicyError::GateWithoutBound { key, line, metric });
                }
                (Some(min), Some(max)) if min > max => {
                    return Err(PolicyError::MinAboveMax {
                        key,
                        line,
                        metric,
                        min,
                        max,
                    });
                }
                _ => {}
            }
            gates.push(QualityGate { metric, min, max });
        }
        Ok(QualityPolicy { gates })
    }

    /// A gate bound: absent, or a finite number.
    fn finite(&self, key: &str, v: Option<Spanned<f64>>) -> Result<Option<f64>, PolicyError> {
        match v {
            Some(v) if !v.get_ref().is_finite() => Err(PolicyError::NotFinite {
                key: key.to_owned(),
                line: self.line(v.span()),
                value: *v.get_ref(),
            }),
            v => Ok(v.map(Spanned::into_inner)),
        }
    }

    /// A name: non-empty, no whitespace anywhere.
    fn name(&self, key: &str, s: Spanned<String>) -> Result<String, PolicyError> {
        if s.get_ref().is_empty() || s.get_ref().chars().any(char::is_whitespace) {
            return Err(PolicyError::BadName {
                key: key.to_owned(),
                line: self.line(s.span()),
                value: s.into_inner(),
            });
        }
        Ok(s.into_inner())
    }

    /// A set of names; a repeated name is an error.
    fn name_set(
        &self,
        key: &str,
        list: Vec<Spanned<String>>,
    ) -> Result<BTreeSet<String>, PolicyError> {
        let mut set = BTreeSet::new();
        for (i, s) in list.into_iter().enumerate() {
            let key = format!("{key}[{i}]");
            let line = self.line(s.span());
            let name = self.name(&key, s)?;
            if set.contains(&name) {
                return Err(PolicyError::Duplicate {
                    key,
                    line,
                    value: name,
                });
            }
            set.insert(name);
        }
        Ok(set)
    }

    /// A set of `N`-byte hex values; a repeated value (compared as bytes)
    /// is an error.
    fn hex_set<const N: usize>(
        &self,
        key: &str,
        list: Vec<Spanned<String>>,
    ) -> Result<BTreeSet<[u8; N]>, PolicyError> {
        let mut set = BTreeSet::new();
        for (i, s) in list.iter().enumerate() {
            let key = format!("{key}[{i}]");
            let line = self.line(s.span());
            let bytes = decode_hex::<N>(s.get_ref()).map_err(|problem| match problem {
                HexProblem::NotHex => PolicyError::NotHex {
                    key: key.clone(),
                    line,
                    value: s.get_ref().clone(),
                },
                HexProblem::Length => PolicyError::HexLength {
                    key: key.clone(),
                    line,
                    expected_bytes: N,
                    expected_chars: N.saturating_mul(2),
                    found_chars: s.get_ref().chars().count(),
                },
            })?;
            if !set.insert(bytes) {
                return Err(PolicyError::Duplicate {
                    key,
                    line,
                    value: hex::encode(bytes),
                });
            }
        }
        Ok(set)
    }
}

fn egress(raw: RawEgress) -> EgressPolicy {
    let default = EgressPolicy::default();
    EgressPolicy {
        must_be_zero: raw.must_be_zero.unwrap_or(default.must_be_zero),
        max_blocked_attempts: raw.max_blocked_attempts,
        require_landlock: raw.require_landlock.unwrap_or(default.require_landlock),
        require_network_namespace: raw
            .require_network_namespace
            .unwrap_or(default.require_network_namespace),
        require_isolation: raw.require_isolation.unwrap_or(default.require_isolation),
    }
}

/// A PCR index: `0`..`31` in decimal, without sign or leading zeros (a
/// table may allow fewer).
fn pcr_index(s: &str) -> Option<u8> {
    let canonical = s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    s.parse::<u8>().ok().filter(|&i| canonical && i <= 31)
}

enum HexProblem {
    NotHex,
    Length,
}

/// Decodes exactly `N` bytes of hex (either case).
fn decode_hex<const N: usize>(s: &str) -> Result<[u8; N], HexProblem> {
    if !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(HexProblem::NotHex);
    }
    let mut out = [0u8; N];
    // Every character is a hex digit, so the only possible error is length.
    hex::decode_to_slice(s, &mut out).map_err(|_| HexProblem::Length)?;
    Ok(out)
}

#[derive(Serialize)]
struct OutPolicy {
    schema: &'static str,
    allowed_platforms: Vec<Platform>,
    allow_debug: bool,
    nitro: OutNitro,
    sev_snp: OutSnp,
    tdx: OutTdx,
    azure: OutAzure,
    egress: OutEgress,
    freshness: OutFreshness,
    quality: OutQuality,
    limits: OutLimits,
}

#[derive(Serialize)]
struct OutLimits {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_input_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_job_seconds: Option<u64>,
}

#[derive(Serialize)]
struct OutNitro {
    pcrs: BTreeMap<String, Vec<String>>,
}

#[derive(Serialize)]
struct OutAzure {
    pcrs: BTreeMap<String, Vec<String>>,
}

#[derive(Serialize)]
struct OutSnp {
    measurements: Vec<String>,
    firmware_measurements: Vec<String>,
    id_key_digests: Vec<String>,
    host_data: Vec<String>,
    allow_migration: bool,
    max_vmpl: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_tcb: Option<SnpTcb>,
}

#[derive(Serialize)]
struct OutTdx {
    mrtd: Vec<String>,
    rtmr0: Vec<String>,
    rtmr1: Vec<String>,
    rtmr2: Vec<String>,
    rtmr3: Vec<String>,
    mrconfigid: Vec<String>,
    mrowner: Vec<String>,
    mrownerconfig: Vec<String>,
    allowed_tcb_status: Vec<TdxTcbStatus>,
    allowed_advisories: Vec<String>,
}

#[derive(Serialize)]
struct OutEgress {
    must_be_zero: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_blocked_attempts: Option<u64>,
    require_landlock: bool,
    require_network_namespace: bool,
    require_isolation: bool,
}

#[derive(Serialize)]
struct OutFreshness {
    nitro_max_skew_seconds: u64,
    tdx_min_tcb_evaluation_data_number: u32,
    require_snp_min_tcb: bool,
    require_bound_collateral: bool,
}

#[derive(Serialize)]
struct OutQuality {
    gates: Vec<OutGate>,
}

#[derive(Serialize)]
struct OutGate {
    metric: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    min: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max: Option<f64>,
}

fn hex_list<const N: usize>(set: &BTreeSet<[u8; N]>) -> Vec<String> {
    set.iter().map(hex::encode).collect()
}

/// Renders a policy; see [`Policy::to_toml_string`].
pub(crate) fn render(policy: &Policy) -> Result<String, PolicyError> {
    let [rtmr0, rtmr1, rtmr2, rtmr3] = &policy.tdx.rtmr;
    let out = OutPolicy {
        schema: SCHEMA_V1,
        allowed_platforms: policy.allowed_platforms.iter().copied().collect(),
        allow_debug: policy.allow_debug,
        nitro: OutNitro {
            pcrs: policy
                .nitro
                .pcrs
                .iter()
                .map(|(i, set)| (i.to_string(), hex_list(set)))
                .collect(),
        },
        sev_snp: OutSnp {
            measurements: hex_list(&policy.sev_snp.measurements),
            firmware_measurements: hex_list(&policy.sev_snp.firmware_measurements),
            id_key_digests: hex_list(&policy.sev_snp.id_key_digests),
            host_data: hex_list(&policy.sev_snp.host_data),
            allow_migration: policy.sev_snp.allow_migration,
            max_vmpl: policy.sev_snp.max_vmpl,
            min_tcb: policy.sev_snp.min_tcb,
        },
        tdx: OutTdx {
            mrtd: hex_list(&policy.tdx.mrtd),
            rtmr0: hex_list(rtmr0),
            rtmr1: hex_list(rtmr1),
            rtmr2: hex_list(rtmr2),
            rtmr3: hex_list(rtmr3),
            mrconfigid: hex_list(&policy.tdx.mrconfigid),
            mrowner: hex_list(&policy.tdx.mrowner),
            mrownerconfig: hex_list(&policy.tdx.mrownerconfig),
            allowed_tcb_status: policy.tdx.allowed_tcb_status.iter().copied().collect(),
            allowed_advisories: policy.tdx.allowed_advisories.iter().cloned().collect(),
        },
        azure: OutAzure {
            pcrs: policy
                .azure
                .pcrs
                .iter()
                .map(|(i, set)| (i.to_string(), hex_list(set)))
                .collect(),
        },
        egress: OutEgress {
            must_be_zero: policy.egress.must_be_zero,
            max_blocked_attempts: policy.egress.max_blocked_attempts,
            require_landlock: policy.egress.require_landlock,
            require_network_namespace: policy.egress.require_network_namespace,
            require_isolation: policy.egress.require_isolation,
        },
        freshness: OutFreshness {
            nitro_max_skew_seconds: policy.freshness.nitro_max_skew_seconds,
            tdx_min_tcb_evaluation_data_number: policy.freshness.tdx_min_tcb_evaluation_data_number,
            require_snp_min_tcb: policy.freshness.require_snp_min_tcb,
            require_bound_collateral: policy.freshness.require_bound_collateral,
        },
        quality: OutQuality {
            gates: policy
                .quality
                .gates
                .iter()
                .map(|g| OutGate {
                    metric: g.metric.clone(),
                    min: g.min,
                    max: g.max,
                })
                .collect(),
        },
        limits: OutLimits {
            max_input_bytes: policy.limits.max_input_bytes,
            max_job_seconds: policy.limits.max_job_seconds,
        },
    };
    toml::to_string(&out).map_err(|e| PolicyError::Render {
        message: e.to_string(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn pcr_index_accepts_only_canonical_decimal_0_to_31() {
        assert_eq!(pcr_index("0"), Some(0));
        assert_eq!(pcr_index("9"), Some(9));
        assert_eq!(pcr_index("31"), Some(31));
        for bad in [
            "32", "00", "07", "+1", "-0", " 1", "1 ", "", "0x1", "256", "1e1",
        ] {
            assert_eq!(pcr_index(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn decode_hex_checks_characters_then_length() {
        assert_eq!(decode_hex::<2>("aBcD").ok(), Some([0xab, 0xcd]));
        assert!(matches!(decode_hex::<2>("abc"), Err(HexProblem::Length)));
        assert!(matches!(decode_hex::<2>("abcdef"), Err(HexProblem::Length)));
        assert!(matches!(decode_hex::<2>(""), Err(HexProblem::Length)));
        assert!(matches!(decode_hex::<2>("0xab"), Err(HexProblem::NotHex)));
        assert!(matches!(decode_hex::<2>("abcg"), Err(HexProblem::NotHex)));
        assert!(matches!(
            decode_hex::<2>("ab\u{e9}"),
            Err(HexProblem::NotHex)
        ));
    }

    #[test]
    fn line_numbers_are_one_based() {
        let c = Converter {
            src: "a\nbb\n\nccc",
        };
        assert_eq!(c.line(0..1), 1);
        assert_eq!(c.line(1..2), 1);
        assert_eq!(c.line(2..3), 2);
        assert_eq!(c.line(5..6), 3);
        assert_eq!(c.line(6..9), 4);
        // A span past the end (cannot come from toml) does not panic.
        assert_eq!(c.line(100..101), 1);
    }
}
