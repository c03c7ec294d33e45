//! `kolm-verify ARTIFACT`: a sealed artifact.

use std::path::PathBuf;

use kolm_policy::Policy;
use kolm_verifier::artifact::{self, VerifyAt, VerifyOptions};

use crate::Common;
use crate::args::{emit, load_sim_root, parse_at};

pub struct ArtifactRequest {
    pub path: PathBuf,
    pub previous: Option<PathBuf>,
    pub dangerous_allow_unattested: bool,
    pub dangerous_trust_sim_root: Option<PathBuf>,
}

pub fn run(req: ArtifactRequest, policy: Option<Policy>, common: &Common) -> anyhow::Result<u8> {
    // Without --at an artifact is judged at its own time (the receipt's).
    let at = parse_at(common.at.as_deref())?.map_or(VerifyAt::ReceiptTime, VerifyAt::Instant);
    let opts = VerifyOptions {
        policy,
        at,
        previous: req.previous,
        dangerous_allow_unattested: req.dangerous_allow_unattested,
        dangerous_any_measurement: common.dangerous_any_measurement,
        dangerous_trust_sim_root: load_sim_root(req.dangerous_trust_sim_root.as_deref())?,
    };
    let report = artifact::verify_artifact(&req.path, &opts)?;
    let text = if common.json {
        format!(
            "{}\n",
            serde_json::to_string_pretty(&crate::json::verify_report(&report)?)?
        )
    } else {
        report.to_table()
    };
    emit(&text)?;
    if req.dangerous_allow_unattested && !common.json {
        let platform = report
            .platform()
            .map_or_else(|| "none".to_string(), |p| p.to_string());
        eprintln!(
            "kolm-verify: WARNING: --dangerous-allow-unattested: platform `{platform}` accepted"
        );
    }
    if common.dangerous_any_measurement {
        crate::warn_any_measurement();
    }
    Ok(report.exit_code())
}
