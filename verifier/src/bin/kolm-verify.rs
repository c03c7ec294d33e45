//! `kolm-verify`: offline verification of kolm sealed artifacts.
//!
//! Exit codes: 0 verified, 1 rejected or unattested, 2 usage or I/O error.
//! `--json` prints one `kolm.verify-report.v1` document on stdout.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use kolm_policy::Policy;
use kolm_verifier::artifact::{self, VerifyOptions};
use kolm_verifier::timefmt;

#[derive(Debug, Parser)]
#[command(
    name = "kolm-verify",
    version,
    about = "Verify a kolm sealed artifact offline",
    after_help = "Exit status: 0 verified, 1 rejected or unattested, 2 usage or I/O error."
)]
struct Cli {
    /// The sealed artifact (ZIP) to verify.
    artifact: PathBuf,
    /// Policy file (TOML, kolm.policy.v1); default: the production policy.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Verification instant (RFC 3339); default: the receipt's finished_at.
    #[arg(long, value_name = "RFC3339")]
    at: Option<String>,
    /// The previous artifact or receipt.cose of the same enclave, to check the chain link.
    #[arg(long, value_name = "FILE")]
    previous: Option<PathBuf>,
    /// Print one JSON report document instead of a table.
    #[arg(long)]
    json: bool,
    /// INSECURE: accept artifacts whose platform is `none` (no hardware attestation).
    #[arg(long)]
    dangerous_allow_unattested: bool,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    ExitCode::SUCCESS
                }
                _ => ExitCode::from(2),
            };
        }
    };
    match run(&cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("kolm-verify: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: &Cli) -> anyhow::Result<u8> {
    let policy = match &cli.policy {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| anyhow::anyhow!("cannot read policy {}: {e}", p.display()))?;
            Some(
                Policy::from_toml_str(&text)
                    .map_err(|e| anyhow::anyhow!("policy {}: {e}", p.display()))?,
            )
        }
        None => None,
    };
    let at = match &cli.at {
        Some(s) => Some(timefmt::parse_rfc3339(s).map_err(|e| anyhow::anyhow!("--at: {e}"))?),
        None => None,
    };
    let opts = VerifyOptions {
        policy,
        at,
        previous: cli.previous.clone(),
        dangerous_allow_unattested: cli.dangerous_allow_unattested,
    };
    let report = artifact::verify_artifact(&cli.artifact, &opts)?;
    let text = if cli.json {
        let mut s = serde_json::to_string_pretty(&report)?;
        s.push('\n');
        s
    } else {
        report.to_table()
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => {}
        // A closed pipe (`| head`) is a normal end.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => return Err(e.into()),
    }
    if cli.dangerous_allow_unattested && !cli.json {
        eprintln!("kolm-verify: WARNING: --dangerous-allow-unattested: platform `none` accepted");
    }
    Ok(report.verdict.exit_code())
}
