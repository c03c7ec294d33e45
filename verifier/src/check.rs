//! Typed check results shared by every layer of the verifier: one enum of
//! check ids per layer (artifact, Nitro, SEV-SNP, TDX, Azure), one
//! [`Checklist`] that records them in order, and [`CheckStatus`]. The dotted
//! id strings (`snp.vcek.hwid`, `receipt.signature`, ...) are the stable
//! names of the JSON documents and the tables; they are produced from the
//! enums, never parsed back.

use std::fmt;

use serde::{Serialize, Serializer};

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckStatus {
    Pass,
    Fail,
    /// Not run (not applicable, not configured by policy, or an earlier
    /// check failed first).
    Skip,
    /// The evidence carries no hardware attestation (platform `none`).
    Unattested,
    /// The evidence is genuine, but the policy pins no launch identity: any
    /// workload in a genuine TEE could have produced it.
    Unpinned,
    /// (`attestation` only) The evidence is the kolm simulated TEE's and
    /// passed every check against the sim root the caller trusts
    /// (`--dangerous-trust-sim-root`): software evidence, NOT a TEE.
    Simulated,
    /// (`evidence.index` only) The evidence's collateral is outside the
    /// receipt signature (a receipt v1 artifact of a platform with
    /// collateral files), and the policy accepts that
    /// (`freshness.require_bound_collateral = false`); by default it is a
    /// failure instead.
    Unbound,
}

/// The class of a check, so results from different platforms line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum CheckKind {
    /// Structure: sizes, versions, reserved fields, trailing bytes.
    Format,
    /// The signature over the report/document/quote/receipt.
    Signature,
    /// Certificate chain to the embedded vendor root.
    Chain,
    /// CRLs.
    Revocation,
    /// TCB level, advisories, minimum TCB.
    Tcb,
    /// Validity windows at the verification instant.
    Freshness,
    /// Launch measurements against the policy.
    Measurement,
    /// Debug enclaves/VMs, and other guest settings that expose its memory
    /// (SEV-SNP MIGRATE_MA).
    Debug,
    /// report_data / user_data / nonce / key binding.
    Binding,
    /// Integrity of the artifact's files and governance documents.
    Integrity,
    /// The receipt chain and the policy over the whole artifact.
    Policy,
}

/// Declares one layer's check-id enum: variant, stable id string, kind.
macro_rules! check_ids {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = ($id:literal, $kind:ident),)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every check of this layer, in report order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The stable dotted id.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $id,)+
                }
            }

            /// The class of the check.
            pub const fn kind(self) -> CheckKind {
                match self {
                    $($name::$variant => CheckKind::$kind,)+
                }
            }
        }

        impl From<$name> for CheckId {
            fn from(id: $name) -> CheckId {
                CheckId::$name(id)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

check_ids! {
    /// The artifact checks of receipt spec v1 section 8, in order.
    ArtifactCheck {
        Container = ("container", Format),
        Manifest = ("manifest", Format),
        EvidenceIndex = ("evidence.index", Format),
        Entries = ("entries", Integrity),
        Files = ("files", Integrity),
        Governance = ("governance", Integrity),
        ManifestCid = ("manifest.cid", Integrity),
        ReceiptSignature = ("receipt.signature", Signature),
        Binding = ("binding", Binding),
        Attestation = ("attestation", Measurement),
        Time = ("time", Freshness),
        Chain = ("chain", Policy),
        Policy = ("policy", Policy),
    }
}

check_ids! {
    /// AWS Nitro attestation document checks.
    NitroCheck {
        Format = ("nitro.format", Format),
        Chain = ("nitro.chain", Chain),
        Signature = ("nitro.signature", Signature),
        Freshness = ("nitro.freshness", Freshness),
        PolicyPlatform = ("nitro.policy.platform", Measurement),
        Debug = ("nitro.debug", Debug),
        PolicyPcr = ("nitro.policy.pcr", Measurement),
        BindingUserData = ("nitro.binding.user_data", Binding),
        BindingNonce = ("nitro.binding.nonce", Binding),
        BindingPublicKey = ("nitro.binding.public_key", Binding),
        BindingTlsSpki = ("nitro.binding.tls_spki", Binding),
    }
}

check_ids! {
    /// Checks of kolm simulated TEE evidence (platform `simulated`) before
    /// its Nitro-format checks ([`NitroCheck`], run against the sim root).
    SimCheck {
        Trust = ("sim.trust", Chain),
    }
}

check_ids! {
    /// AMD SEV-SNP report checks.
    SnpCheck {
        ReportFormat = ("snp.report.format", Format),
        VcekFormat = ("snp.vcek.format", Format),
        ChainFormat = ("snp.chain.format", Format),
        Product = ("snp.product", Chain),
        ChainArk = ("snp.chain.ark", Chain),
        ChainAsk = ("snp.chain.ask", Chain),
        ChainVcek = ("snp.chain.vcek", Chain),
        Freshness = ("snp.freshness", Freshness),
        Signature = ("snp.signature", Signature),
        SigningKey = ("snp.signing_key", Chain),
        VcekHwid = ("snp.vcek.hwid", Chain),
        VcekTcb = ("snp.vcek.tcb", Tcb),
        Revocation = ("snp.revocation", Revocation),
        Debug = ("snp.debug", Debug),
        PolicyPlatform = ("snp.policy.platform", Measurement),
        PolicyMeasurement = ("snp.policy.measurement", Measurement),
        PolicyHostData = ("snp.policy.host_data", Measurement),
        PolicyIdKey = ("snp.policy.id_key_digest", Measurement),
        PolicyMigration = ("snp.policy.migrate_ma", Debug),
        PolicyVmpl = ("snp.policy.vmpl", Measurement),
        PolicyTcb = ("snp.policy.tcb", Tcb),
        BindingReportData = ("snp.binding.report_data", Binding),
    }
}

check_ids! {
    /// Intel TDX quote checks, in report order. `Crl` .. `TdAttributes` are
    /// the steps of the DCAP appraisal: one of them is recorded in place of
    /// `Dcap` when that step fails (`Dcap` itself fails only when dcap-qvl
    /// rejects what every step accepted). `BindingNonce` and
    /// `BindingPublicKey` are recorded only when such a value is expected: a
    /// TDX quote has no field for them, so they fail (fail closed).
    TdxCheck {
        QuoteFormat = ("tdx.quote.format", Format),
        CollateralFormat = ("tdx.collateral.format", Format),
        PckChainMatch = ("tdx.collateral.pck_chain_match", Chain),
        PckChain = ("tdx.pck.chain", Chain),
        QeReportSignature = ("tdx.qe.report_signature", Signature),
        QeReportData = ("tdx.qe.report_data", Signature),
        QuoteSignature = ("tdx.quote.signature", Signature),
        CollateralChain = ("tdx.collateral.chain", Chain),
        CollateralFreshness = ("tdx.collateral.freshness", Freshness),
        Dcap = ("tdx.dcap", Signature),
        Crl = ("tdx.crl", Revocation),
        Chain = ("tdx.chain", Chain),
        TcbInfoSignature = ("tdx.tcb_info.signature", Signature),
        QeIdentitySignature = ("tdx.qe_identity.signature", Signature),
        QeIdentity = ("tdx.qe.identity", Tcb),
        TcbLevel = ("tdx.tcb.level", Tcb),
        TdAttributes = ("tdx.td_attributes", Measurement),
        Debug = ("tdx.debug", Debug),
        PolicyPlatform = ("tdx.policy.platform", Measurement),
        PolicyMrtd = ("tdx.policy.mrtd", Measurement),
        PolicyRtmr = ("tdx.policy.rtmr", Measurement),
        PolicyTcbStatus = ("tdx.policy.tcb_status", Tcb),
        PolicyAdvisories = ("tdx.policy.advisories", Tcb),
        Policy = ("tdx.policy", Tcb),
        PolicyConfig = ("tdx.policy.config", Measurement),
        BindingReportData = ("tdx.binding.report_data", Binding),
        BindingNonce = ("tdx.binding.nonce", Binding),
        BindingPublicKey = ("tdx.binding.public_key", Binding),
        TrailingData = ("tdx.quote.trailing_data", Format),
    }
}

check_ids! {
    /// Azure confidential VM (vTPM + HCL) checks; the hardware report's own
    /// checks follow as [`SnpCheck`] or [`TdxCheck`].
    AzureCheck {
        EvidenceFormat = ("azure.evidence.format", Format),
        BindingRuntimeData = ("azure.binding.runtime_data", Binding),
        TpmSignature = ("azure.tpm.signature", Signature),
        TpmPcrDigest = ("azure.tpm.pcr_digest", Measurement),
        PolicyPcr = ("azure.policy.pcr", Measurement),
        BindingNonce = ("azure.binding.nonce", Binding),
        BindingUserData = ("azure.binding.user_data", Binding),
        TdxQuote = ("azure.tdx.quote", Format),
        TdxTdReport = ("azure.tdx.td_report", Binding),
        TdxCollateral = ("azure.tdx.collateral", Tcb),
    }
}

/// A check id of any layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum CheckId {
    ArtifactCheck(ArtifactCheck),
    NitroCheck(NitroCheck),
    SnpCheck(SnpCheck),
    TdxCheck(TdxCheck),
    AzureCheck(AzureCheck),
    SimCheck(SimCheck),
}

impl CheckId {
    /// The stable dotted id.
    pub const fn as_str(self) -> &'static str {
        match self {
            CheckId::ArtifactCheck(c) => c.as_str(),
            CheckId::NitroCheck(c) => c.as_str(),
            CheckId::SnpCheck(c) => c.as_str(),
            CheckId::TdxCheck(c) => c.as_str(),
            CheckId::AzureCheck(c) => c.as_str(),
            CheckId::SimCheck(c) => c.as_str(),
        }
    }

    /// The class of the check.
    pub const fn kind(self) -> CheckKind {
        match self {
            CheckId::ArtifactCheck(c) => c.kind(),
            CheckId::NitroCheck(c) => c.kind(),
            CheckId::SnpCheck(c) => c.kind(),
            CheckId::TdxCheck(c) => c.kind(),
            CheckId::AzureCheck(c) => c.kind(),
            CheckId::SimCheck(c) => c.kind(),
        }
    }
}

impl fmt::Display for CheckId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for CheckId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Lets tests and tables compare an id with its documented string.
impl PartialEq<&str> for CheckId {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// One check and what it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub id: CheckId,
    pub status: CheckStatus,
    pub detail: String,
}

impl Check {
    /// The class of the check (from its id).
    pub fn kind(&self) -> CheckKind {
        self.id.kind()
    }
}

/// The checks of one verification, in the order they ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checklist {
    checks: Vec<Check>,
}

impl Checklist {
    pub fn new() -> Checklist {
        Checklist::default()
    }

    /// Records a check.
    pub fn record(
        &mut self,
        id: impl Into<CheckId>,
        status: CheckStatus,
        detail: impl Into<String>,
    ) {
        self.checks.push(Check {
            id: id.into(),
            status,
            detail: detail.into(),
        });
    }

    /// Records a passing check.
    pub fn pass(&mut self, id: impl Into<CheckId>, detail: impl Into<String>) {
        self.record(id, CheckStatus::Pass, detail);
    }

    /// Records a failing check.
    pub fn fail(&mut self, id: impl Into<CheckId>, detail: impl Into<String>) {
        self.record(id, CheckStatus::Fail, detail);
    }

    /// Records a check that did not run, and why.
    pub fn skip(&mut self, id: impl Into<CheckId>, detail: impl Into<String>) {
        self.record(id, CheckStatus::Skip, detail);
    }

    /// Records `Skip` with `why` for every id of `ids` not recorded yet, so
    /// the list always names every check of the layer.
    pub fn skip_unrecorded<I: Into<CheckId> + Copy>(&mut self, ids: &[I], why: &str) {
        for &id in ids {
            let id = id.into();
            if self.status_of(id).is_none() {
                self.skip(id, why);
            }
        }
    }

    /// Appends another list (a nested layer's checks).
    pub fn extend(&mut self, other: Checklist) {
        self.checks.extend(other.checks);
    }

    /// The first failed check, if any.
    pub fn first_failure(&self) -> Option<&Check> {
        self.checks.iter().find(|c| c.status == CheckStatus::Fail)
    }

    /// The status of the first record of `id`, if it was recorded.
    pub fn status_of(&self, id: impl Into<CheckId>) -> Option<CheckStatus> {
        let id = id.into();
        self.checks.iter().find(|c| c.id == id).map(|c| c.status)
    }

    /// The first record of `id`.
    pub fn get(&self, id: impl Into<CheckId>) -> Option<&Check> {
        let id = id.into();
        self.checks.iter().find(|c| c.id == id)
    }

    /// Whether any check passed.
    pub fn any_passed(&self) -> bool {
        self.checks.iter().any(|c| c.status == CheckStatus::Pass)
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Check> {
        self.checks.iter()
    }

    pub fn len(&self) -> usize {
        self.checks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
    }
}

impl<'a> IntoIterator for &'a Checklist {
    type Item = &'a Check;
    type IntoIter = std::slice::Iter<'a, Check>;

    fn into_iter(self) -> Self::IntoIter {
        self.checks.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_across_layers_and_keep_their_documented_strings() {
        let mut seen = std::collections::BTreeSet::new();
        let all = ArtifactCheck::ALL
            .iter()
            .map(|&c| CheckId::from(c))
            .chain(NitroCheck::ALL.iter().map(|&c| c.into()))
            .chain(SnpCheck::ALL.iter().map(|&c| c.into()))
            .chain(TdxCheck::ALL.iter().map(|&c| c.into()))
            .chain(AzureCheck::ALL.iter().map(|&c| c.into()))
            .chain(SimCheck::ALL.iter().map(|&c| c.into()));
        for id in all {
            assert!(seen.insert(id.as_str()), "duplicate id {id}");
        }
        assert_eq!(SnpCheck::VcekHwid.as_str(), "snp.vcek.hwid");
        assert_eq!(
            ArtifactCheck::ReceiptSignature.as_str(),
            "receipt.signature"
        );
        assert_eq!(CheckId::from(TdxCheck::Dcap), "tdx.dcap");
    }

    #[test]
    fn checklist_names_the_first_failure_and_fills_in_skips() {
        let mut c = Checklist::new();
        c.pass(NitroCheck::Format, "ok");
        c.fail(NitroCheck::Chain, "bad chain");
        c.fail(NitroCheck::Signature, "bad signature");
        c.skip_unrecorded(NitroCheck::ALL, "not run");
        assert_eq!(c.len(), NitroCheck::ALL.len());
        let first = c.first_failure().map(|f| f.id);
        assert_eq!(first, Some(NitroCheck::Chain.into()));
        assert_eq!(c.status_of(NitroCheck::Debug), Some(CheckStatus::Skip));
        assert_eq!(
            c.get(NitroCheck::Debug).map(Check::kind),
            Some(CheckKind::Debug)
        );
    }
}
