//! [`PolicyViolation`]: evidence that a valid policy rejects.
//!
//! Each variant names the rule that failed and the offending value (bytes in
//! lowercase hex). [`PolicyViolation::rule`] gives a stable dotted id for
//! machine-readable output; those ids are part of the `kolm.policy.v1`
//! contract and do not change.

use crate::Platform;

/// Why evidence does not satisfy a [`Policy`](crate::Policy).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyViolation {
    /// The platform is not in `allowed_platforms`.
    #[error("platform.allowed: platform {platform} is not in allowed_platforms")]
    PlatformNotAllowed {
        /// The platform the evidence came from.
        platform: Platform,
    },
    /// The enclave or VM runs in debug mode and `allow_debug` is false.
    #[error("debug: the enclave/VM runs in debug mode and the policy has allow_debug = false")]
    DebugNotAllowed,
    /// `egress.must_be_zero` is set and there is no sandbox record.
    #[error(
        "egress.must_be_zero: the run has no sandbox egress record, but the policy requires egress to be blocked"
    )]
    EgressRecordMissing,
    /// `egress.must_be_zero` is set and the sandbox record shows egress open.
    #[error(
        "egress.must_be_zero: the sandbox record shows network egress was not blocked, but the policy requires it"
    )]
    EgressNotBlocked,
    /// More blocked egress attempts than `egress.max_blocked_attempts`.
    #[error(
        "egress.max_blocked_attempts: {attempts} blocked egress attempts, policy allows at most {max}"
    )]
    TooManyBlockedAttempts {
        /// Attempts in the sandbox record.
        attempts: u64,
        /// The policy's limit.
        max: u64,
    },
    /// `egress.max_blocked_attempts` is set but the record's count is only a
    /// lower bound: it can show a limit exceeded, never kept.
    #[error(
        "egress.max_blocked_attempts: the sandbox record counts at least {attempts} blocked egress attempts (a lower bound, not an exact count), so it cannot show the policy's limit of {max} was kept"
    )]
    BlockedAttemptsLowerBound {
        /// Attempts in the sandbox record (at least this many were made).
        attempts: u64,
        /// The policy's limit.
        max: u64,
    },
    /// `egress.max_blocked_attempts` is set and the record has no count.
    #[error(
        "egress.max_blocked_attempts: the sandbox record has no blocked-attempt count, policy allows at most {max}"
    )]
    BlockedAttemptsUnknown {
        /// The policy's limit.
        max: u64,
    },
    /// `egress.require_landlock` is set and Landlock was not fully enforced.
    #[error(
        "egress.require_landlock: the sandbox record shows Landlock {status:?}, the policy requires fully_enforced"
    )]
    LandlockNotEnforced {
        /// `landlock.status` of the record.
        status: String,
    },
    /// `egress.require_network_namespace` is set and the job shared a
    /// network namespace.
    #[error(
        "egress.require_network_namespace: the sandbox record shows network namespace {value:?}, the policy requires \"empty\""
    )]
    NetworkNamespaceShared {
        /// `hygiene.network_namespace` of the record.
        value: String,
    },
    /// `egress.require_isolation` is set and the record does not show the
    /// job isolated (per-run ids, private PID/IPC namespaces, private root).
    #[error(
        "egress.require_isolation: the sandbox record shows {field} = {value:?}, the policy requires {required:?}"
    )]
    NotIsolated {
        /// The record field that fell short.
        field: &'static str,
        /// Its value (`absent` when the record has no isolation section).
        value: String,
        /// What the policy requires there.
        required: &'static str,
    },
    /// The job did not end with exit code 0.
    #[error("job.exit: the job failed ({detail}); a failed job never verifies")]
    JobFailed {
        /// How it ended.
        detail: String,
    },
    /// The Nitro document's timestamp is too far from `finished_at`.
    #[error(
        "freshness.nitro_max_skew_seconds: the Nitro document's timestamp is {} from the receipt's finished_at, the policy allows {max_seconds} s",
        skew_text(*skew_ms)
    )]
    NitroSkew {
        /// Document timestamp minus `finished_at`, milliseconds.
        skew_ms: i128,
        /// The policy's limit.
        max_seconds: u64,
    },
    /// The TDX collateral's TCB evaluation data number is too low.
    #[error(
        "freshness.tdx_min_tcb_evaluation_data_number: the TDX collateral's tcbEvaluationDataNumber is {number}, the policy requires at least {minimum}"
    )]
    TdxEvaluationNumberTooLow {
        /// The collateral's number.
        number: u32,
        /// The policy's minimum.
        minimum: u32,
    },
    /// SEV-SNP evidence under a policy without `sev_snp.min_tcb`.
    #[error(
        "freshness.require_snp_min_tcb: SEV-SNP evidence needs a minimum TCB, and the policy sets no sev_snp.min_tcb"
    )]
    SnpMinTcbUnset,
    /// Evidence with collateral files the signed manifest does not list (a
    /// receipt v1 artifact).
    #[error(
        "freshness.require_bound_collateral: the {platform} collateral is not listed in the signed manifest (a kolm.manifest.v1 artifact): a host could have swapped it for any other genuine set after sealing"
    )]
    CollateralNotBound {
        /// The artifact's platform.
        platform: Platform,
    },
    /// A gated metric is absent from the run's metrics.
    #[error("quality.gate: metric {metric:?} is gated by the policy but was not reported")]
    MetricMissing {
        /// The gated metric.
        metric: String,
    },
    /// A gated metric is outside its bounds, or is NaN or infinite.
    #[error("quality.gate: metric {metric:?} = {value} is outside {}", bounds(*min, *max))]
    MetricOutOfBounds {
        /// The gated metric.
        metric: String,
        /// The reported value.
        value: f64,
        /// The gate's lower bound.
        min: Option<f64>,
        /// The gate's upper bound.
        max: Option<f64>,
    },
    /// A PCR listed in `nitro.pcrs` is absent from the attestation document.
    #[error("nitro.pcr: PCR{index} is in the policy but absent from the attestation")]
    NitroPcrMissing {
        /// PCR index.
        index: u8,
    },
    /// A PCR value is not in its allow-list.
    #[error("nitro.pcr: PCR{index} = {value} is not in nitro.pcrs.\"{index}\"")]
    NitroPcrNotAllowed {
        /// PCR index.
        index: u8,
        /// The attested value, hex.
        value: String,
    },
    /// The SNP launch measurement is not in `sev_snp.measurements`.
    #[error("sev_snp.measurement: MEASUREMENT {value} is not in sev_snp.measurements")]
    SnpMeasurement {
        /// The attested MEASUREMENT, hex.
        value: String,
    },
    /// The SNP HOST_DATA is not in `sev_snp.host_data`.
    #[error("sev_snp.host_data: HOST_DATA {value} is not in sev_snp.host_data")]
    SnpHostData {
        /// The attested HOST_DATA, hex.
        value: String,
    },
    /// The report's VMPL is above `sev_snp.max_vmpl`.
    #[error("sev_snp.vmpl: report VMPL {vmpl} is above sev_snp.max_vmpl = {max}")]
    SnpVmpl {
        /// The report's VMPL.
        vmpl: u32,
        /// The policy's maximum.
        max: u8,
    },
    /// One TCB component is below `sev_snp.min_tcb`.
    #[error(
        "sev_snp.min_tcb: reported TCB {component} = {} is below the minimum {minimum}",
        reported.map_or_else(|| "(absent)".to_owned(), |r| r.to_string())
    )]
    SnpTcbTooLow {
        /// `bootloader`, `tee`, `snp`, `microcode` or `fmc`.
        component: &'static str,
        /// The reported SVN (`None`: the report has no such component).
        reported: Option<u8>,
        /// The policy's minimum SVN.
        minimum: u8,
    },
    /// ID_KEY_DIGEST is not in `sev_snp.id_key_digests`.
    #[error("sev_snp.id_key_digest: ID_KEY_DIGEST {value} is not in sev_snp.id_key_digests")]
    SnpIdKeyDigest {
        /// The attested ID_KEY_DIGEST, hex.
        value: String,
    },
    /// The guest POLICY sets MIGRATE_MA and `sev_snp.allow_migration` is
    /// false.
    #[error(
        "sev_snp.migrate_ma: guest POLICY bit 18 (MIGRATE_MA) is set: a migration agent may \
         export the guest's memory, and the policy has sev_snp.allow_migration = false"
    )]
    SnpMigrateMa,
    /// MRTD is not in `tdx.mrtd`.
    #[error("tdx.mrtd: MRTD {value} is not in tdx.mrtd")]
    TdxMrtd {
        /// The attested MRTD, hex.
        value: String,
    },
    /// An RTMR is not in its allow-list.
    #[error("tdx.rtmr: RTMR{index} = {value} is not in tdx.rtmr{index}")]
    TdxRtmr {
        /// RTMR index, 0..=3.
        index: u8,
        /// The attested RTMR, hex.
        value: String,
    },
    /// MRCONFIGID, MROWNER or MROWNERCONFIG is not in its allow-list.
    #[error("tdx.{}: {} {value} is not in tdx.{}", field.key(), field.name(), field.key())]
    TdxOwner {
        /// Which of the three.
        field: TdxConfigField,
        /// The attested value, hex.
        value: String,
    },
    /// A PCR listed in `azure.pcrs` is not covered by the vTPM quote.
    #[error(
        "azure.pcr: vTPM PCR{index} is in the policy but not in the TPM quote's PCR selection \
         (its reported value is not signed)"
    )]
    AzurePcrNotQuoted {
        /// PCR index.
        index: u8,
    },
    /// A quoted vTPM PCR value is not in its allow-list.
    #[error("azure.pcr: vTPM PCR{index} = {value} is not in azure.pcrs.\"{index}\"")]
    AzurePcrNotAllowed {
        /// PCR index.
        index: u8,
        /// The quoted value, hex.
        value: String,
    },
    /// The TCB status is not in `tdx.allowed_tcb_status` (or is not a
    /// status any policy can accept).
    #[error("tdx.tcb_status: TCB status {status:?} is not in tdx.allowed_tcb_status")]
    TdxTcbStatus {
        /// The status from quote verification.
        status: String,
    },
    /// An advisory is not in `tdx.allowed_advisories`.
    #[error("tdx.advisory: advisory {advisory:?} is not in tdx.allowed_advisories")]
    TdxAdvisory {
        /// The advisory id from quote verification.
        advisory: String,
    },
}

impl PolicyViolation {
    /// The stable dotted id of the rule that failed.
    pub fn rule(&self) -> &'static str {
        match self {
            PolicyViolation::PlatformNotAllowed { .. } => "platform.allowed",
            PolicyViolation::DebugNotAllowed => "debug",
            PolicyViolation::EgressRecordMissing | PolicyViolation::EgressNotBlocked => {
                "egress.must_be_zero"
            }
            PolicyViolation::TooManyBlockedAttempts { .. }
            | PolicyViolation::BlockedAttemptsLowerBound { .. }
            | PolicyViolation::BlockedAttemptsUnknown { .. } => "egress.max_blocked_attempts",
            PolicyViolation::LandlockNotEnforced { .. } => "egress.require_landlock",
            PolicyViolation::NetworkNamespaceShared { .. } => "egress.require_network_namespace",
            PolicyViolation::NotIsolated { .. } => "egress.require_isolation",
            PolicyViolation::JobFailed { .. } => "job.exit",
            PolicyViolation::NitroSkew { .. } => "freshness.nitro_max_skew_seconds",
            PolicyViolation::TdxEvaluationNumberTooLow { .. } => {
                "freshness.tdx_min_tcb_evaluation_data_number"
            }
            PolicyViolation::SnpMinTcbUnset => "freshness.require_snp_min_tcb",
            PolicyViolation::CollateralNotBound { .. } => "freshness.require_bound_collateral",
            PolicyViolation::MetricMissing { .. } | PolicyViolation::MetricOutOfBounds { .. } => {
                "quality.gate"
            }
            PolicyViolation::NitroPcrMissing { .. }
            | PolicyViolation::NitroPcrNotAllowed { .. } => "nitro.pcr",
            PolicyViolation::SnpMeasurement { .. } => "sev_snp.measurement",
            PolicyViolation::SnpHostData { .. } => "sev_snp.host_data",
            PolicyViolation::SnpVmpl { .. } => "sev_snp.vmpl",
            PolicyViolation::SnpTcbTooLow { .. } => "sev_snp.min_tcb",
            PolicyViolation::SnpIdKeyDigest { .. } => "sev_snp.id_key_digest",
            PolicyViolation::SnpMigrateMa => "sev_snp.migrate_ma",
            PolicyViolation::TdxOwner { field, .. } => match field {
                TdxConfigField::MrConfigId => "tdx.mrconfigid",
                TdxConfigField::MrOwner => "tdx.mrowner",
                TdxConfigField::MrOwnerConfig => "tdx.mrownerconfig",
            },
            PolicyViolation::AzurePcrNotQuoted { .. }
            | PolicyViolation::AzurePcrNotAllowed { .. } => "azure.pcr",
            PolicyViolation::TdxMrtd { .. } => "tdx.mrtd",
            PolicyViolation::TdxRtmr { .. } => "tdx.rtmr",
            PolicyViolation::TdxTcbStatus { .. } => "tdx.tcb_status",
            PolicyViolation::TdxAdvisory { .. } => "tdx.advisory",
        }
    }
}

/// Renders a skew in milliseconds as `+1.5 s` / `-300 s` (document after /
/// before `finished_at`).
fn skew_text(ms: i128) -> String {
    let sign = if ms < 0 { "-" } else { "+" };
    let abs = ms.unsigned_abs();
    let (secs, frac) = (abs / 1000, abs % 1000);
    if frac == 0 {
        format!("{sign}{secs} s")
    } else {
        format!("{sign}{secs}.{frac:03} s")
    }
}

/// The host-supplied TD configuration fields a policy can allow-list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TdxConfigField {
    /// MRCONFIGID.
    MrConfigId,
    /// MROWNER.
    MrOwner,
    /// MROWNERCONFIG.
    MrOwnerConfig,
}

impl TdxConfigField {
    /// The policy key (`mrconfigid`, ...).
    pub fn key(self) -> &'static str {
        match self {
            TdxConfigField::MrConfigId => "mrconfigid",
            TdxConfigField::MrOwner => "mrowner",
            TdxConfigField::MrOwnerConfig => "mrownerconfig",
        }
    }

    /// The TD report's name (`MRCONFIGID`, ...).
    pub fn name(self) -> &'static str {
        match self {
            TdxConfigField::MrConfigId => "MRCONFIGID",
            TdxConfigField::MrOwner => "MROWNER",
            TdxConfigField::MrOwnerConfig => "MROWNERCONFIG",
        }
    }
}

/// Renders gate bounds as `[min, max]`, with `-inf`/`inf` for an absent side.
fn bounds(min: Option<f64>, max: Option<f64>) -> String {
    let lo = min.map_or_else(|| "-inf".to_owned(), |v| v.to_string());
    let hi = max.map_or_else(|| "inf".to_owned(), |v| v.to_string());
    format!("[{lo}, {hi}]")
}
