//! `kolm-verify`: offline verification of kolm sealed artifacts and of raw
//! TEE evidence (Nitro, SEV-SNP, TDX, Azure CVM).
//!
//! Exit codes: 0 verified/accepted, 1 rejected (or unattested, unpinned,
//! or simulated), 2 usage or I/O error. `--json` prints one versioned document on stdout; warnings and
//! errors go to stderr.

//!
//! This binary only wires: arguments in, a `kolm-verifier` call, the result
//! out (table or JSON, built in `json.rs`).

mod args;
mod artifact_cmd;
mod collateral_cmd;
mod evidence_cmd;
mod json;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "kolm-verify",
    version,
    about = "Verify kolm sealed artifacts and TEE evidence offline",
    args_conflicts_with_subcommands = true,
    after_help = "Exit status: 0 verified/accepted, 1 rejected, unattested, unpinned or simulated, 2 usage or I/O error."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    artifact: ArtifactArgs,
}

#[derive(Debug, Args)]
struct ArtifactArgs {
    /// The sealed artifact (ZIP) to verify.
    artifact: Option<PathBuf>,
    /// The previous artifact or receipt.cose of the same enclave, to check the chain link.
    #[arg(long, value_name = "FILE")]
    previous: Option<PathBuf>,
    /// INSECURE: accept artifacts whose platform is `none` (no hardware
    /// attestation), or `simulated` with --dangerous-trust-sim-root (exit 0;
    /// the verdict stays `simulated`).
    #[arg(long)]
    dangerous_allow_unattested: bool,
    #[command(flatten)]
    sim: SimRootArg,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args, Clone)]
struct SimRootArg {
    /// NOT A TEE: check platform `simulated` evidence against these kolm
    /// sim roots (a PEM bundle of 1 to 8, from `kolm-enclave sim-root --out
    /// ROOT.pem`; each evidence form against its own root). Such evidence
    /// gets the verdict `simulated` (exit 1), never `verified`; the roots
    /// are never used for any other platform.
    #[arg(long, value_name = "ROOT.pem")]
    dangerous_trust_sim_root: Option<PathBuf>,
}

#[derive(Debug, Args, Clone)]
struct Common {
    /// Policy file (TOML, kolm.policy.v1); default: the production policy.
    #[arg(long, value_name = "FILE", global = true)]
    policy: Option<PathBuf>,
    /// Verification instant (RFC 3339, or `now` for the wall clock).
    /// Artifacts default to the receipt's own time; raw evidence requires it.
    #[arg(long, value_name = "RFC3339", global = true)]
    at: Option<String>,
    /// Print one JSON document instead of a table.
    #[arg(long, global = true)]
    json: bool,
    /// INSECURE: accept hardware evidence whose launch identity the policy
    /// does not pin (verdict `unpinned` otherwise): any workload in a
    /// genuine TEE could have produced it.
    #[arg(long, global = true)]
    dangerous_any_measurement: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Verify a sealed artifact (same as giving the path without a subcommand).
    Artifact {
        /// The sealed artifact (ZIP).
        artifact: PathBuf,
        /// The previous artifact or receipt.cose of the same enclave, to
        /// check the chain link.
        #[arg(long, value_name = "FILE")]
        previous: Option<PathBuf>,
        /// Accept platform `none` (nothing attested) when the policy also
        /// allows it.
        #[arg(long)]
        dangerous_allow_unattested: bool,
        #[command(flatten)]
        sim: SimRootArg,
    },
    /// Verify an AWS Nitro Enclaves attestation document (CBOR, base64, hex,
    /// or a DER/PEM TLS certificate carrying it).
    Nitro {
        /// The attestation document (or a TLS certificate carrying it).
        document: PathBuf,
        /// Expected user_data (hex).
        #[arg(long, value_name = "HEX")]
        user_data: Option<String>,
        /// Expected nonce (hex).
        #[arg(long, value_name = "HEX")]
        nonce: Option<String>,
        /// Expected public_key (hex).
        #[arg(long, value_name = "HEX")]
        public_key: Option<String>,
        /// NOT A TEE: check the document as kolm simulated TEE evidence
        /// against this sim root instead of the AWS root (verdict
        /// `simulated`, exit 1).
        #[command(flatten)]
        sim: SimRootArg,
    },
    /// Verify an AMD SEV-SNP attestation report (binary or hex) against its
    /// VCEK/VLEK and the AMD chain (default: the embedded roots).
    Snp {
        /// The attestation report (binary or hex).
        report: PathBuf,
        /// The VCEK or VLEK certificate (DER or PEM).
        #[arg(long, value_name = "CERT")]
        vcek: PathBuf,
        /// ASK (or ASVK) + ARK PEM bundle; default: the embedded roots for the report's product.
        #[arg(long, value_name = "PEM")]
        chain: Option<PathBuf>,
        /// Expected REPORT_DATA (hex, 64 bytes).
        #[arg(long, value_name = "HEX")]
        report_data: Option<String>,
    },
    /// Verify an Intel TDX DCAP quote (v4/v5) with its collateral (JSON).
    Tdx {
        /// The DCAP quote (binary or hex).
        quote: PathBuf,
        /// DCAP collateral in the JSON layout of the samples (QuoteCollateralV3).
        #[arg(long, value_name = "FILE")]
        collateral: PathBuf,
        /// Expected REPORTDATA (hex, 64 bytes).
        #[arg(long, value_name = "HEX")]
        report_data: Option<String>,
    },
    /// Inspect or assemble offline collateral (never fetches anything).
    #[command(subcommand)]
    Collateral(CollateralCommand),
    /// Verify an Azure confidential VM evidence document (vTPM + HCL report).
    Azure {
        /// The evidence document (JSON).
        evidence: PathBuf,
        /// Expected TPM quote nonce (hex).
        #[arg(long, value_name = "HEX")]
        nonce: Option<String>,
        /// Expected runtime-data user-data (hex, 64 bytes).
        #[arg(long, value_name = "HEX")]
        user_data: Option<String>,
        /// DCAP collateral (JSON) for the TD quote of TDX-based evidence.
        #[arg(long, value_name = "FILE")]
        tdx_collateral: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum CollateralCommand {
    /// Identify each file (certificates, TDX collateral, quotes, reports,
    /// documents) and print its validity windows and the instants at which
    /// all of them hold together.
    Inspect {
        /// The files to identify.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Check and place evidence/collateral files under their evidence-slot
    /// names for a platform, written as one canonical ZIP bundle.
    Bundle {
        /// nitro, sev-snp, tdx, azure-sev-snp or azure-tdx.
        #[arg(long)]
        platform: String,
        /// Output bundle (ZIP), written atomically.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// The evidence and collateral files to place in the bundle.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

/// The stderr warning of `--dangerous-trust-sim-root` (printed in `--json`
/// mode too).
pub(crate) fn warn_sim_root(roots: &kolm_verifier::sim::SimRoots) {
    for root in roots.roots() {
        eprintln!(
            "kolm-verify: WARNING: --dangerous-trust-sim-root: evidence of platform `simulated` \
             ({} form) is checked against the kolm sim root sha256 {}; it is NOT A TEE and \
             proves nothing about hardware",
            root.form().map_or("no known", |f| f.name()),
            hex::encode(root.sha256())
        );
    }
}

/// The stderr warning of `--dangerous-any-measurement` (printed in `--json`
/// mode too: stdout stays one document).
pub(crate) fn warn_any_measurement() {
    eprintln!(
        "kolm-verify: WARNING: --dangerous-any-measurement: evidence whose launch identity the \
         policy does not pin is accepted; any workload in a genuine TEE could have produced it"
    );
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
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("kolm-verify: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Dispatches to the subcommand; returns the exit code (errors: 2).
fn run(cli: Cli) -> anyhow::Result<u8> {
    let common = cli.artifact.common;
    let policy = args::load_policy(common.policy.as_deref())?;
    match cli.command {
        None => {
            let Some(path) = cli.artifact.artifact else {
                bail!("no artifact given (see --help for the evidence subcommands)");
            };
            let a = artifact_cmd::ArtifactRequest {
                path,
                previous: cli.artifact.previous,
                dangerous_allow_unattested: cli.artifact.dangerous_allow_unattested,
                dangerous_trust_sim_root: cli.artifact.sim.dangerous_trust_sim_root,
            };
            artifact_cmd::run(a, policy, &common)
        }
        Some(Command::Artifact {
            artifact,
            previous,
            dangerous_allow_unattested,
            sim,
        }) => {
            let a = artifact_cmd::ArtifactRequest {
                path: artifact,
                previous,
                dangerous_allow_unattested,
                dangerous_trust_sim_root: sim.dangerous_trust_sim_root,
            };
            artifact_cmd::run(a, policy, &common)
        }
        Some(Command::Nitro {
            document,
            user_data,
            nonce,
            public_key,
            sim,
        }) => {
            let expected = evidence_cmd::NitroExpected {
                user_data,
                nonce,
                public_key,
            };
            let sim_root = sim.dangerous_trust_sim_root.as_deref();
            evidence_cmd::nitro(&document, &expected, sim_root, policy, &common)
        }
        Some(Command::Snp {
            report,
            vcek,
            chain,
            report_data,
        }) => evidence_cmd::snp(
            &report,
            &vcek,
            chain.as_deref(),
            &report_data,
            policy,
            &common,
        ),
        Some(Command::Tdx {
            quote,
            collateral,
            report_data,
        }) => evidence_cmd::tdx(&quote, &collateral, &report_data, policy, &common),
        Some(Command::Azure {
            evidence,
            nonce,
            user_data,
            tdx_collateral,
        }) => evidence_cmd::azure(
            &evidence,
            &nonce,
            &user_data,
            tdx_collateral.as_deref(),
            policy,
            &common,
        ),
        Some(Command::Collateral(CollateralCommand::Inspect { files })) => {
            collateral_cmd::inspect(&files, &common)
        }
        Some(Command::Collateral(CollateralCommand::Bundle {
            platform,
            out,
            files,
        })) => collateral_cmd::bundle(&platform, &out, &files),
    }
}
