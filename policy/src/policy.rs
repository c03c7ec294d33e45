//! The typed [`Policy`] and the checks the enclave and the verifier run
//! against it.
//!
//! Every check is a pure function of the policy and the evidence it is given;
//! each returns the first rule that fails as a [`PolicyViolation`]. A value
//! built in memory rather than parsed may break the file format's invariants
//! (an empty allow-list for a listed PCR, a NaN gate bound, `min > max`); the
//! checks fail closed on such values rather than accept everything.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Platform, PolicyViolation, TdxConfigField, TdxTcbStatus};

/// The value of `schema` in every v1 policy file.
pub const SCHEMA_V1: &str = "kolm.policy.v1";

/// A parsed, valid `kolm.policy.v1` policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Platforms whose evidence is accepted (`allowed_platforms`).
    pub allowed_platforms: BTreeSet<Platform>,
    /// Whether debug enclaves/VMs are accepted (`allow_debug`, default false).
    pub allow_debug: bool,
    /// `[nitro]`.
    pub nitro: NitroPolicy,
    /// `[sev_snp]`, also applied to `azure-sev-snp`.
    pub sev_snp: SnpPolicy,
    /// `[tdx]`, also applied to `azure-tdx`.
    pub tdx: TdxPolicy,
    /// `[azure]`: the vTPM PCRs that identify an Azure confidential VM's
    /// guest (the hardware report there describes the paravisor).
    pub azure: AzurePolicy,
    /// `[egress]`.
    pub egress: EgressPolicy,
    /// `[freshness]`: how old evidence and collateral may be, and how far
    /// the evidence's own time may be from the receipt's.
    pub freshness: FreshnessPolicy,
    /// `[quality]`.
    pub quality: QualityPolicy,
    /// `[limits]`: what the enclave accepts and how long it lets a job run.
    pub limits: LimitsPolicy,
}

/// `[limits]`, enforced by the enclave (the verifier has nothing to check:
/// an artifact exists only for a job that kept them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LimitsPolicy {
    /// The largest bundle of inputs a job may declare, in bytes; refused
    /// before any byte is stored. `None`: the service's own limit.
    pub max_input_bytes: Option<u64>,
    /// How long the job may run, in seconds; then it is killed and nothing
    /// is sealed. `None`: no limit.
    pub max_job_seconds: Option<u64>,
}

/// `[nitro]`: PCR allow-lists.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NitroPolicy {
    /// PCR index (0..=31) to the SHA-384 values accepted for it. A PCR not
    /// in the map may hold anything.
    pub pcrs: BTreeMap<u8, BTreeSet<[u8; 48]>>,
}

/// `[sev_snp]`. The default (no allow-lists, VMPL 0, no minimum TCB, no
/// migration agent) is the production default.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnpPolicy {
    /// Accepted launch MEASUREMENTs that identify the guest image (a direct
    /// boot whose digest covers kernel, initrd and command line). With
    /// `firmware_measurements`, MEASUREMENT must be in one of the two lists;
    /// both empty accept any.
    pub measurements: BTreeSet<[u8; 48]>,
    /// Accepted MEASUREMENTs of a generic firmware that loads whatever guest
    /// the disk holds (GCP's): accepted, but they pin nothing.
    pub firmware_measurements: BTreeSet<[u8; 48]>,
    /// Accepted ID_KEY_DIGESTs (SHA-384 of the key that signed the launch's
    /// ID block); empty accepts any.
    pub id_key_digests: BTreeSet<[u8; 48]>,
    /// Accepted HOST_DATA values; empty accepts any. The launching host
    /// writes HOST_DATA, so it narrows but never pins.
    pub host_data: BTreeSet<[u8; 32]>,
    /// Accept a guest whose POLICY sets MIGRATE_MA (bit 18: a migration
    /// agent may export the guest's memory). Default false.
    pub allow_migration: bool,
    /// Highest VMPL a report may have been requested at (0..=3, default 0).
    pub max_vmpl: u8,
    /// Component-wise minimum of the reported TCB; `None` accepts any.
    pub min_tcb: Option<SnpTcb>,
}

/// An SEV-SNP TCB version: the security version numbers of its components.
///
/// `fmc` exists on Turin (family 1Ah) and later. As a minimum it is
/// compared component by component, never as a packed integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnpTcb {
    /// Boot loader SVN.
    pub bootloader: u8,
    /// PSP OS (TEE) SVN.
    pub tee: u8,
    /// SNP firmware SVN.
    pub snp: u8,
    /// CPU microcode patch level.
    pub microcode: u8,
    /// Firmware mask/FMC SVN (Turin and later); `None` where the CPU has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fmc: Option<u8>,
}

impl SnpTcb {
    /// The first component of `self` below `minimum`, as
    /// `(component, reported, minimum)`. A minimum `fmc` with no reported
    /// `fmc` counts as below.
    fn first_below(&self, minimum: &SnpTcb) -> Option<(&'static str, Option<u8>, u8)> {
        let pairs = [
            ("bootloader", self.bootloader, minimum.bootloader),
            ("tee", self.tee, minimum.tee),
            ("snp", self.snp, minimum.snp),
            ("microcode", self.microcode, minimum.microcode),
        ];
        if let Some((name, got, min)) = pairs.into_iter().find(|(_, got, min)| got < min) {
            return Some((name, Some(got), min));
        }
        match minimum.fmc {
            Some(min) if self.fmc.is_none_or(|got| got < min) => Some(("fmc", self.fmc, min)),
            _ => None,
        }
    }
}

impl fmt::Display for SnpTcb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bootloader={} tee={} snp={} microcode={}",
            self.bootloader, self.tee, self.snp, self.microcode
        )?;
        match self.fmc {
            Some(fmc) => write!(f, " fmc={fmc}"),
            None => Ok(()),
        }
    }
}

/// `[tdx]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TdxPolicy {
    /// Accepted MRTD values; empty accepts any.
    pub mrtd: BTreeSet<[u8; 48]>,
    /// Accepted values of RTMR0..RTMR3 (`rtmr0`..`rtmr3`); an empty set
    /// accepts any.
    pub rtmr: [BTreeSet<[u8; 48]>; 4],
    /// Accepted MRCONFIGID values; empty accepts any. Host-supplied at TD
    /// creation: narrows, never pins.
    pub mrconfigid: BTreeSet<[u8; 48]>,
    /// Accepted MROWNER values; empty accepts any (host-supplied).
    pub mrowner: BTreeSet<[u8; 48]>,
    /// Accepted MROWNERCONFIG values; empty accepts any (host-supplied).
    pub mrownerconfig: BTreeSet<[u8; 48]>,
    /// Accepted TCB statuses (default `UpToDate` only).
    pub allowed_tcb_status: BTreeSet<TdxTcbStatus>,
    /// Advisory ids the TCB may be affected by (default none).
    pub allowed_advisories: BTreeSet<String>,
}

impl Default for TdxPolicy {
    fn default() -> Self {
        TdxPolicy {
            mrtd: BTreeSet::new(),
            rtmr: Default::default(),
            mrconfigid: BTreeSet::new(),
            mrowner: BTreeSet::new(),
            mrownerconfig: BTreeSet::new(),
            allowed_tcb_status: BTreeSet::from([TdxTcbStatus::UpToDate]),
            allowed_advisories: BTreeSet::new(),
        }
    }
}

/// `[azure]`: vTPM PCR allow-lists for Azure confidential VMs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AzurePolicy {
    /// vTPM SHA-256 PCR index (0..=23) to the values accepted for it. A PCR
    /// not in the map may hold anything; a listed PCR must be covered by
    /// the TPM quote's selection.
    pub pcrs: BTreeMap<u8, BTreeSet<[u8; 32]>>,
}

/// `[egress]`: what the run's sandbox record must show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EgressPolicy {
    /// The run's sandbox record must exist and show network egress blocked
    /// (default true).
    pub must_be_zero: bool,
    /// Most blocked egress attempts accepted; `None` accepts any count. A
    /// record whose count is only a lower bound (`exactness`) cannot show
    /// the limit was kept and fails this rule.
    pub max_blocked_attempts: Option<u64>,
    /// The record must show Landlock `fully_enforced` (default true). Stock
    /// Nitro Enclaves kernels have no Landlock: a deployment on one sets
    /// this to false, knowingly (docs/policy.md).
    pub require_landlock: bool,
    /// The record must show the job in its own, empty network namespace
    /// (`hygiene.network_namespace = "empty"`; default true). A shared
    /// namespace leaves the host's abstract `AF_UNIX` sockets reachable.
    pub require_network_namespace: bool,
    /// The record must show the job isolated from other jobs and from the
    /// host (`hygiene.isolation`; default true): a uid/gid leased for the
    /// run alone (`per_run`), its own PID and IPC namespaces (`private`)
    /// and a private root (`private_root`). Without them (not root) a
    /// process a job leaves behind can read the next job's files and
    /// memory, and SysV IPC or a host socket path carries data out.
    pub require_isolation: bool,
}

impl Default for EgressPolicy {
    fn default() -> Self {
        EgressPolicy {
            must_be_zero: true,
            max_blocked_attempts: None,
            require_landlock: true,
            require_network_namespace: true,
            require_isolation: true,
        }
    }
}

/// What a run's sandbox record says, as the `[egress]` rules read it. The
/// caller has authenticated the record (it is sealed and its summary
/// agrees) and checked it against itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxFacts<'a> {
    /// `egress_blocked`.
    pub egress_blocked: bool,
    /// `blocked_total`.
    pub blocked_total: u64,
    /// `landlock.status` (`fully_enforced`, `partially_enforced`, ...).
    pub landlock_status: &'a str,
    /// `hygiene.network_namespace` (`empty`, or `shared: <why>`).
    pub network_namespace: &'a str,
    /// `exactness.blocked_total` is `exact` (else the count is a lower
    /// bound).
    pub count_exact: bool,
    /// `hygiene.isolation`, when the record has it.
    pub isolation: Option<IsolationFacts<'a>>,
}

/// `hygiene.isolation` of a sandbox record, as `egress.require_isolation`
/// reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IsolationFacts<'a> {
    /// `per_run`, `fixed` or `inherited`.
    pub job_ids: &'a str,
    /// `private` or `shared: <why>`.
    pub pid_namespace: &'a str,
    /// `private` or `shared: <why>`.
    pub ipc_namespace: &'a str,
    /// `private_root` or `shared: <why>`.
    pub mount_namespace: &'a str,
}

/// How the job's process ended, as the rule `job.exit` reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobEnd<'a> {
    /// Exit code, when it exited.
    pub code: Option<i32>,
    /// Signal number, when a signal killed it.
    pub signal: Option<i32>,
    /// Why the program could not be executed, if it could not.
    pub exec_error: Option<&'a str>,
}

/// `[freshness]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreshnessPolicy {
    /// Largest distance, either way, between a Nitro document's signed
    /// `timestamp` and the receipt's `finished_at`, in seconds (default
    /// 300).
    pub nitro_max_skew_seconds: u64,
    /// Lowest accepted `tcbEvaluationDataNumber` of the TDX collateral
    /// (TCB info); 0 accepts any. Default 17, the oldest TCB Recovery
    /// event Intel's PCS still listed as supported in June 2025 (17:
    /// 2024-03-12, 18: 2024-11-12, 19: 2025-05-13).
    pub tdx_min_tcb_evaluation_data_number: u32,
    /// SEV-SNP evidence is accepted only when `sev_snp.min_tcb` is set
    /// (default true): TCB numbering differs per product (Milan, Genoa,
    /// Turin), so no one production minimum exists and the auditor names
    /// the fleet's.
    pub require_snp_min_tcb: bool,
    /// Artifacts whose evidence has collateral files (`sev-snp`, `tdx`,
    /// `azure-tdx`) must list that collateral in the signed manifest
    /// (receipt v2) (default true). A v1 artifact leaves it outside the
    /// signature: a host can swap it for any other genuine set after
    /// sealing. `false` accepts such artifacts, reported as `unbound`.
    pub require_bound_collateral: bool,
}

/// The default of `freshness.nitro_max_skew_seconds`.
pub const DEFAULT_NITRO_MAX_SKEW_SECONDS: u64 = 300;
/// The default of `freshness.tdx_min_tcb_evaluation_data_number`.
pub const DEFAULT_TDX_MIN_TCB_EVALUATION_DATA_NUMBER: u32 = 17;

impl Default for FreshnessPolicy {
    fn default() -> Self {
        FreshnessPolicy {
            nitro_max_skew_seconds: DEFAULT_NITRO_MAX_SKEW_SECONDS,
            tdx_min_tcb_evaluation_data_number: DEFAULT_TDX_MIN_TCB_EVALUATION_DATA_NUMBER,
            require_snp_min_tcb: true,
            require_bound_collateral: true,
        }
    }
}

/// `[quality]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QualityPolicy {
    /// `[[quality.gates]]`, checked in order.
    pub gates: Vec<QualityGate>,
}

/// One `[[quality.gates]]` entry: `min <= metrics[metric] <= max`.
#[derive(Debug, Clone, PartialEq)]
pub struct QualityGate {
    /// The metric's name.
    pub metric: String,
    /// Inclusive lower bound.
    pub min: Option<f64>,
    /// Inclusive upper bound.
    pub max: Option<f64>,
}

impl QualityGate {
    /// Whether `value` passes: finite and within both bounds present.
    /// NaN bounds admit nothing.
    fn admits(&self, value: f64) -> bool {
        value.is_finite()
            && self.min.is_none_or(|min| value >= min)
            && self.max.is_none_or(|max| value <= max)
    }

    /// Rule `quality.gates` for this one gate: the metric is reported,
    /// finite and within the bounds. Callers that list every violated gate
    /// (the enclave's binding gate, the evaluation's verdict) judge each
    /// gate through this.
    pub fn check(&self, metrics: &BTreeMap<String, f64>) -> Result<(), PolicyViolation> {
        let Some(&value) = metrics.get(&self.metric) else {
            return Err(PolicyViolation::MetricMissing {
                metric: self.metric.clone(),
            });
        };
        if !self.admits(value) {
            return Err(PolicyViolation::MetricOutOfBounds {
                metric: self.metric.clone(),
                value,
                min: self.min,
                max: self.max,
            });
        }
        Ok(())
    }
}

impl Policy {
    /// Parses a `kolm.policy.v1` TOML document. The result is valid: there
    /// is no separate validation step.
    pub fn from_toml_str(s: &str) -> Result<Policy, crate::PolicyError> {
        crate::format::parse(s)
    }

    /// Renders the policy as a `kolm.policy.v1` TOML document, every section
    /// written out (defaults included). Parsing the result gives back an
    /// equal policy.
    pub fn to_toml_string(&self) -> Result<String, crate::PolicyError> {
        crate::format::render(self)
    }

    /// The policy applied when an auditor supplies none: the five hardware
    /// platforms, no debug, no measurement allow-lists (so no evidence is
    /// pinned: see [`Policy::pinning`]), SNP VMPL 0 without migration agent,
    /// TDX `UpToDate` only with no advisories, egress blocked, no quality
    /// gates.
    pub fn production() -> Policy {
        Policy {
            allowed_platforms: Platform::HARDWARE.into_iter().collect(),
            allow_debug: false,
            nitro: NitroPolicy::default(),
            sev_snp: SnpPolicy::default(),
            tdx: TdxPolicy::default(),
            azure: AzurePolicy::default(),
            egress: EgressPolicy::default(),
            freshness: FreshnessPolicy::default(),
            quality: QualityPolicy::default(),
            limits: LimitsPolicy::default(),
        }
    }

    /// Rule `platform.allowed`: `p` is in `allowed_platforms`.
    pub fn check_platform(&self, p: Platform) -> Result<(), PolicyViolation> {
        if self.allowed_platforms.contains(&p) {
            Ok(())
        } else {
            Err(PolicyViolation::PlatformNotAllowed { platform: p })
        }
    }

    /// Rule `debug`: a debug enclave/VM is accepted only with `allow_debug`.
    pub fn check_debug(&self, debug: bool) -> Result<(), PolicyViolation> {
        if debug && !self.allow_debug {
            Err(PolicyViolation::DebugNotAllowed)
        } else {
            Ok(())
        }
    }

    /// Rules `egress.must_be_zero` and `egress.max_blocked_attempts`.
    ///
    /// `egress_blocked` is `None` when the run has no sandbox record;
    /// `blocked_attempts` is `None` when the record has no count. With
    /// `max_blocked_attempts` set, a missing count is a violation.
    pub fn check_egress(
        &self,
        egress_blocked: Option<bool>,
        blocked_attempts: Option<u64>,
    ) -> Result<(), PolicyViolation> {
        if self.egress.must_be_zero {
            match egress_blocked {
                None => return Err(PolicyViolation::EgressRecordMissing),
                Some(false) => return Err(PolicyViolation::EgressNotBlocked),
                Some(true) => {}
            }
        }
        if let Some(max) = self.egress.max_blocked_attempts {
            match blocked_attempts {
                None => return Err(PolicyViolation::BlockedAttemptsUnknown { max }),
                Some(attempts) if attempts > max => {
                    return Err(PolicyViolation::TooManyBlockedAttempts { attempts, max });
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Rules `egress.must_be_zero`, `egress.max_blocked_attempts`,
    /// `egress.require_landlock`, `egress.require_network_namespace` and
    /// `egress.require_isolation`, in that order, over the run's sandbox record (`None`: the run has none;
    /// the last two then do not apply, the first fails).
    pub fn check_sandbox(&self, record: Option<&SandboxFacts<'_>>) -> Result<(), PolicyViolation> {
        self.check_egress(
            record.map(|r| r.egress_blocked),
            record.map(|r| r.blocked_total),
        )?;
        let Some(r) = record else { return Ok(()) };
        // A lower bound can show the limit exceeded (above), never kept.
        if let Some(max) = self.egress.max_blocked_attempts
            && !r.count_exact
        {
            return Err(PolicyViolation::BlockedAttemptsLowerBound {
                attempts: r.blocked_total,
                max,
            });
        }
        if self.egress.require_landlock && r.landlock_status != "fully_enforced" {
            return Err(PolicyViolation::LandlockNotEnforced {
                status: r.landlock_status.to_owned(),
            });
        }
        if self.egress.require_network_namespace && r.network_namespace != "empty" {
            return Err(PolicyViolation::NetworkNamespaceShared {
                value: r.network_namespace.to_owned(),
            });
        }
        if self.egress.require_isolation {
            let Some(i) = r.isolation else {
                return Err(PolicyViolation::NotIsolated {
                    field: "hygiene.isolation",
                    value: "absent".to_owned(),
                    required: "present",
                });
            };
            for (field, value, required) in [
                ("isolation.job_ids", i.job_ids, "per_run"),
                ("isolation.pid_namespace", i.pid_namespace, "private"),
                ("isolation.ipc_namespace", i.ipc_namespace, "private"),
                (
                    "isolation.mount_namespace",
                    i.mount_namespace,
                    "private_root",
                ),
            ] {
                if value != required {
                    return Err(PolicyViolation::NotIsolated {
                        field,
                        value: value.to_owned(),
                        required,
                    });
                }
            }
        }
        Ok(())
    }

    /// Rule `job.exit` (not configurable): the job's process exited with
    /// code 0, was not killed by a signal, and was executed at all. A failed
    /// job's artifact may be genuine, but it never verifies as a result.
    pub fn check_job_end(&self, end: &JobEnd<'_>) -> Result<(), PolicyViolation> {
        let failed = match (end.exec_error, end.signal, end.code) {
            (Some(e), _, _) => Some(format!("the program could not be executed: {e}")),
            (None, Some(sig), _) => Some(format!("killed by signal {sig}")),
            (None, None, Some(0)) => None,
            (None, None, Some(code)) => Some(format!("exit code {code}")),
            (None, None, None) => Some("no exit status".to_owned()),
        };
        match failed {
            Some(detail) => Err(PolicyViolation::JobFailed { detail }),
            None => Ok(()),
        }
    }

    /// Rule `freshness.nitro_max_skew_seconds`: the Nitro document's signed
    /// timestamp lies within `nitro_max_skew_seconds` of the receipt's
    /// `finished_at`, either way. `document_minus_finished_ms` is the
    /// document's timestamp minus `finished_at`, in milliseconds.
    pub fn check_nitro_skew(
        &self,
        document_minus_finished_ms: i128,
    ) -> Result<(), PolicyViolation> {
        let max_ms = i128::from(self.freshness.nitro_max_skew_seconds).saturating_mul(1000);
        if document_minus_finished_ms.unsigned_abs() > max_ms.unsigned_abs() {
            return Err(PolicyViolation::NitroSkew {
                skew_ms: document_minus_finished_ms,
                max_seconds: self.freshness.nitro_max_skew_seconds,
            });
        }
        Ok(())
    }

    /// Rule `freshness.tdx_min_tcb_evaluation_data_number`: the TDX
    /// collateral's TCB info is at least this TCB Recovery event's.
    pub fn check_tdx_evaluation_number(&self, number: u32) -> Result<(), PolicyViolation> {
        let minimum = self.freshness.tdx_min_tcb_evaluation_data_number;
        if number < minimum {
            return Err(PolicyViolation::TdxEvaluationNumberTooLow { number, minimum });
        }
        Ok(())
    }

    /// Rule `freshness.require_snp_min_tcb`: SEV-SNP evidence is judged
    /// against a minimum TCB (`sev_snp.min_tcb` is set).
    pub fn check_snp_min_tcb_set(&self) -> Result<(), PolicyViolation> {
        if self.freshness.require_snp_min_tcb && self.sev_snp.min_tcb.is_none() {
            return Err(PolicyViolation::SnpMinTcbUnset);
        }
        Ok(())
    }

    /// Rule `freshness.require_bound_collateral`: evidence with collateral
    /// files that the signed manifest does not list (a receipt v1 artifact
    /// of `platform`) is refused unless the policy turns the rule off.
    pub fn check_collateral_bound(&self, platform: Platform) -> Result<(), PolicyViolation> {
        if self.freshness.require_bound_collateral {
            return Err(PolicyViolation::CollateralNotBound { platform });
        }
        Ok(())
    }

    /// Rule `quality.gate`: every gated metric is reported, finite and
    /// within its bounds (inclusive). NaN and infinities never pass.
    pub fn check_quality(&self, metrics: &BTreeMap<String, f64>) -> Result<(), PolicyViolation> {
        self.quality
            .gates
            .iter()
            .try_for_each(|gate| gate.check(metrics))
    }

    /// Rule `nitro.pcr`: every PCR in `nitro.pcrs` is present in `pcrs`
    /// and its value is in that PCR's allow-list. PCRs the policy does not
    /// list are ignored.
    pub fn check_nitro_pcrs(&self, pcrs: &BTreeMap<u8, Vec<u8>>) -> Result<(), PolicyViolation> {
        for (&index, allowed) in &self.nitro.pcrs {
            let Some(value) = pcrs.get(&index) else {
                return Err(PolicyViolation::NitroPcrMissing { index });
            };
            let listed =
                <[u8; 48]>::try_from(value.as_slice()).is_ok_and(|value| allowed.contains(&value));
            if !listed {
                return Err(PolicyViolation::NitroPcrNotAllowed {
                    index,
                    value: hex::encode(value),
                });
            }
        }
        Ok(())
    }

    /// Rules `sev_snp.measurement`, `sev_snp.host_data`, `sev_snp.vmpl` and
    /// `sev_snp.min_tcb`, in that order. `reported_tcb` is the report's
    /// REPORTED_TCB.
    pub fn check_snp(
        &self,
        measurement: &[u8; 48],
        host_data: &[u8; 32],
        vmpl: u32,
        reported_tcb: SnpTcb,
    ) -> Result<(), PolicyViolation> {
        let snp = &self.sev_snp;
        let listed = snp.measurements.contains(measurement)
            || snp.firmware_measurements.contains(measurement);
        let any_listed = !snp.measurements.is_empty() || !snp.firmware_measurements.is_empty();
        if any_listed && !listed {
            return Err(PolicyViolation::SnpMeasurement {
                value: hex::encode(measurement),
            });
        }
        if !snp.host_data.is_empty() && !snp.host_data.contains(host_data) {
            return Err(PolicyViolation::SnpHostData {
                value: hex::encode(host_data),
            });
        }
        if vmpl > u32::from(snp.max_vmpl) {
            return Err(PolicyViolation::SnpVmpl {
                vmpl,
                max: snp.max_vmpl,
            });
        }
        if let Some(minimum) = &snp.min_tcb
            && let Some((component, reported, minimum)) = reported_tcb.first_below(minimum)
        {
            return Err(PolicyViolation::SnpTcbTooLow {
                component,
                reported,
                minimum,
            });
        }
        Ok(())
    }

    /// Rule `sev_snp.id_key_digest`: with a non-empty `id_key_digests`,
    /// the report's ID_KEY_DIGEST is in it.
    pub fn check_snp_id_key(&self, id_key_digest: &[u8; 48]) -> Result<(), PolicyViolation> {
        let list = &self.sev_snp.id_key_digests;
        if list.is_empty() || list.contains(id_key_digest) {
            Ok(())
        } else {
            Err(PolicyViolation::SnpIdKeyDigest {
                value: hex::encode(id_key_digest),
            })
        }
    }

    /// Rule `sev_snp.migrate_ma`: a guest POLICY with MIGRATE_MA (bit 18)
    /// set is accepted only with `sev_snp.allow_migration`.
    pub fn check_snp_migration(&self, migrate_ma: bool) -> Result<(), PolicyViolation> {
        if migrate_ma && !self.sev_snp.allow_migration {
            Err(PolicyViolation::SnpMigrateMa)
        } else {
            Ok(())
        }
    }

    /// Rules `tdx.mrconfigid`, `tdx.mrowner`, `tdx.mrownerconfig`, in that
    /// order: each non-empty list contains the quote's value.
    pub fn check_tdx_config(
        &self,
        mrconfigid: &[u8; 48],
        mrowner: &[u8; 48],
        mrownerconfig: &[u8; 48],
    ) -> Result<(), PolicyViolation> {
        let tdx = &self.tdx;
        for (field, list, value) in [
            (TdxConfigField::MrConfigId, &tdx.mrconfigid, mrconfigid),
            (TdxConfigField::MrOwner, &tdx.mrowner, mrowner),
            (
                TdxConfigField::MrOwnerConfig,
                &tdx.mrownerconfig,
                mrownerconfig,
            ),
        ] {
            if !list.is_empty() && !list.contains(value) {
                return Err(PolicyViolation::TdxOwner {
                    field,
                    value: hex::encode(value),
                });
            }
        }
        Ok(())
    }

    /// Rule `azure.pcr`: every PCR in `azure.pcrs` is among `quoted` (the
    /// PCRs the vTPM quote's signature covers, with their values) and its
    /// value is in that PCR's allow-list. A PCR reported but not quoted
    /// proves nothing, so it does not count.
    pub fn check_azure_pcrs(&self, quoted: &BTreeMap<u8, [u8; 32]>) -> Result<(), PolicyViolation> {
        for (&index, allowed) in &self.azure.pcrs {
            let Some(value) = quoted.get(&index) else {
                return Err(PolicyViolation::AzurePcrNotQuoted { index });
            };
            if !allowed.contains(value) {
                return Err(PolicyViolation::AzurePcrNotAllowed {
                    index,
                    value: hex::encode(value),
                });
            }
        }
        Ok(())
    }

    /// Rules `tdx.mrtd`, `tdx.rtmr`, `tdx.tcb_status` and `tdx.advisory`,
    /// in that order. `tcb_status` and `advisories` are the outcome of quote
    /// verification against Intel's collateral; every advisory must be
    /// allowed.
    pub fn check_tdx(
        &self,
        mrtd: &[u8; 48],
        rtmrs: &[[u8; 48]; 4],
        tcb_status: &str,
        advisories: &[String],
    ) -> Result<(), PolicyViolation> {
        let tdx = &self.tdx;
        if !tdx.mrtd.is_empty() && !tdx.mrtd.contains(mrtd) {
            return Err(PolicyViolation::TdxMrtd {
                value: hex::encode(mrtd),
            });
        }
        for (index, (allowed, value)) in (0u8..).zip(tdx.rtmr.iter().zip(rtmrs)) {
            if !allowed.is_empty() && !allowed.contains(value) {
                return Err(PolicyViolation::TdxRtmr {
                    index,
                    value: hex::encode(value),
                });
            }
        }
        let status_ok = TdxTcbStatus::parse(tcb_status)
            .is_ok_and(|status| tdx.allowed_tcb_status.contains(&status));
        if !status_ok {
            return Err(PolicyViolation::TdxTcbStatus {
                status: tcb_status.to_owned(),
            });
        }
        if let Some(advisory) = advisories
            .iter()
            .find(|a| !tdx.allowed_advisories.contains(a.as_str()))
        {
            return Err(PolicyViolation::TdxAdvisory {
                advisory: advisory.clone(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: SnpTcb = SnpTcb {
        bootloader: 3,
        tee: 1,
        snp: 8,
        microcode: 115,
        fmc: None,
    };

    #[test]
    fn first_below_reports_the_first_low_component() {
        assert_eq!(MIN.first_below(&MIN), None);
        let low = SnpTcb {
            bootloader: 2,
            tee: 0,
            ..MIN
        };
        assert_eq!(low.first_below(&MIN), Some(("bootloader", Some(2), 3)));
        let low = SnpTcb {
            microcode: 114,
            bootloader: 200,
            ..MIN
        };
        assert_eq!(low.first_below(&MIN), Some(("microcode", Some(114), 115)));
    }

    #[test]
    fn first_below_fmc() {
        let min = SnpTcb {
            fmc: Some(1),
            ..MIN
        };
        assert_eq!(MIN.first_below(&min), Some(("fmc", None, 1)));
        let zero = SnpTcb {
            fmc: Some(0),
            ..MIN
        };
        assert_eq!(zero.first_below(&min), Some(("fmc", Some(0), 1)));
        let one = SnpTcb {
            fmc: Some(1),
            ..MIN
        };
        assert_eq!(one.first_below(&min), None);
        assert_eq!(one.first_below(&MIN), None);
    }

    #[test]
    fn gate_admits() {
        let gate = QualityGate {
            metric: "m".to_owned(),
            min: Some(0.5),
            max: Some(1.0),
        };
        assert!(gate.admits(0.5));
        assert!(gate.admits(1.0));
        assert!(!gate.admits(0.4999));
        assert!(!gate.admits(1.0001));
        assert!(!gate.admits(f64::NAN));
        let open = QualityGate {
            metric: "m".to_owned(),
            min: None,
            max: None,
        };
        assert!(open.admits(-1e300));
        assert!(!open.admits(f64::INFINITY));
        let nan_bound = QualityGate {
            metric: "m".to_owned(),
            min: None,
            max: Some(f64::NAN),
        };
        assert!(!nan_bound.admits(0.0));
    }
}
