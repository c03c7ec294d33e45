//! `kolm-verify nitro|snp|tdx|azure`: raw hardware evidence, offline.

use std::path::Path;

use kolm_policy::Policy;
use kolm_verifier::attested::{Attested, Expectations, Outcome, Rejection};
use kolm_verifier::report::attestation_table;
use kolm_verifier::{azure, nitro, sim, snp, tdx};

use crate::Common;
use crate::args::{emit, hex_arg, hex64_arg, load_sim_root, read, required_at};

/// Prints the outcome; exit 0 accepted (pinned, or unpinned with
/// `--dangerous-any-measurement`), 1 unpinned, simulated or rejected.
fn emit_outcome(r: &Result<Attested, Rejection>, common: &Common) -> anyhow::Result<u8> {
    let o = Outcome::of(r);
    let dangerous = common.dangerous_any_measurement;
    if common.json {
        emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&crate::json::attestation_report(o, dangerous))?
        ))?;
    } else {
        emit(&attestation_table(o, dangerous))?;
    }
    if dangerous {
        crate::warn_any_measurement();
    }
    Ok(o.verdict(dangerous).exit_code())
}

/// The values `kolm-verify nitro` is told to expect (hex).
pub struct NitroExpected {
    pub user_data: Option<String>,
    pub nonce: Option<String>,
    pub public_key: Option<String>,
}

/// `kolm-verify nitro`: against the AWS root, or, with
/// `--dangerous-trust-sim-root`, as kolm simulated TEE evidence against
/// that root only (verdict `simulated`).
pub fn nitro(
    document: &Path,
    expected: &NitroExpected,
    sim_root: Option<&Path>,
    policy: Option<Policy>,
    common: &Common,
) -> anyhow::Result<u8> {
    let at = required_at(common.at.as_deref())?;
    let policy = policy.unwrap_or_else(Policy::production);
    let mut expect = Expectations::new(&policy);
    expect.report_data = hex_arg("user-data", expected.user_data.as_deref())?;
    expect.nonce = hex_arg("nonce", expected.nonce.as_deref())?;
    expect.public_key = hex_arg("public-key", expected.public_key.as_deref())?;
    let sim_root = load_sim_root(sim_root)?;
    let bytes = read(document, "document")?;
    // Raw evidence may come in any form AWS hands out (CBOR, base64, hex, a
    // TLS certificate carrying it); an artifact's nitro.cose is binary only.
    let outcome = match &sim_root {
        Some(root) => sim::evaluate_any_form(&bytes, Some(root), &expect, at).conclude(&policy),
        None => nitro::verify_any_form(&bytes, &expect, at),
    };
    emit_outcome(&outcome, common)
}

pub fn snp(
    report: &Path,
    vcek: &Path,
    chain: Option<&Path>,
    report_data: &Option<String>,
    policy: Option<Policy>,
    common: &Common,
) -> anyhow::Result<u8> {
    let at = required_at(common.at.as_deref())?;
    let policy = policy.unwrap_or_else(Policy::production);
    let mut expect = Expectations::new(&policy);
    expect.report_data = hex64_arg("report-data", report_data.as_deref())?;
    let report_bytes = read(report, "report")?;
    let vcek = read(vcek, "VCEK/VLEK certificate")?;
    let chain = chain.map(|p| read(p, "chain")).transpose()?;
    // Raw evidence may be binary or hex; an artifact's report is binary only.
    // Not hex either: the binary parser names the problem.
    let decoded = snp::decode_report_forms(&report_bytes).map(std::borrow::Cow::into_owned);
    let report = decoded.unwrap_or(report_bytes);
    let ev = snp::SnpEvidence {
        report: &report,
        vcek: &vcek,
        chain: chain.as_deref(),
    };
    let outcome = snp::verify(&ev, &expect, at);
    emit_outcome(&outcome, common)
}

pub fn tdx(
    quote: &Path,
    collateral: &Path,
    report_data: &Option<String>,
    policy: Option<Policy>,
    common: &Common,
) -> anyhow::Result<u8> {
    let at = required_at(common.at.as_deref())?;
    let policy = policy.unwrap_or_else(Policy::production);
    let mut expect = Expectations::new(&policy);
    expect.report_data = hex64_arg("report-data", report_data.as_deref())?;
    let quote = read(quote, "quote")?;
    let collateral = read(collateral, "collateral")?;
    let ev = tdx::TdxEvidence {
        quote: &quote,
        collateral: &collateral,
    };
    emit_outcome(&tdx::verify(&ev, &expect, at), common)
}

pub fn azure(
    evidence: &Path,
    nonce: &Option<String>,
    user_data: &Option<String>,
    tdx_collateral: Option<&Path>,
    policy: Option<Policy>,
    common: &Common,
) -> anyhow::Result<u8> {
    let at = required_at(common.at.as_deref())?;
    let policy = policy.unwrap_or_else(Policy::production);
    let mut expect = Expectations::new(&policy);
    expect.report_data = hex64_arg("user-data", user_data.as_deref())?;
    expect.nonce = hex_arg("nonce", nonce.as_deref())?;
    let bytes = read(evidence, "evidence")?;
    let collateral = tdx_collateral
        .map(|p| read(p, "TDX collateral"))
        .transpose()?;
    let input = azure::AzureInput {
        evidence: &bytes,
        tdx_collateral: collateral.as_deref(),
    };
    emit_outcome(&azure::verify(&input, &expect, at), common)
}
