//! `kolm-verify`: offline verification of kolm sealed artifacts and of raw
//! TEE evidence (Nitro, SEV-SNP, TDX, Azure CVM).
//!
//! Exit codes: 0 verified/accepted, 1 rejected (or unattested), 2 usage or
//! I/O error. `--json` prints one versioned document on stdout; warnings and
//! errors go to stderr.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, anyhow, bail};
use clap::{Args, Parser, Subcommand};
use kolm_format::timefmt;
use kolm_policy::Policy;
use kolm_verifier::artifact::{self, VerifyOptions};
use kolm_verifier::attestation::{AttestationReport, AttestationVerdict};
use time::OffsetDateTime;

#[derive(Debug, Parser)]
#[command(
    name = "kolm-verify",
    version,
    about = "Verify kolm sealed artifacts and TEE evidence offline",
    args_conflicts_with_subcommands = true,
    after_help = "Exit status: 0 verified/accepted, 1 rejected or unattested, 2 usage or I/O error."
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
    /// INSECURE: accept artifacts whose platform is `none` (no hardware attestation).
    #[arg(long)]
    dangerous_allow_unattested: bool,
    #[command(flatten)]
    common: Common,
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
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Verify a sealed artifact (same as giving the path without a subcommand).
    Artifact {
        artifact: PathBuf,
        #[arg(long, value_name = "FILE")]
        previous: Option<PathBuf>,
        #[arg(long)]
        dangerous_allow_unattested: bool,
    },
    /// Verify an AWS Nitro Enclaves attestation document (CBOR, base64, hex,
    /// or a DER/PEM TLS certificate carrying it).
    Nitro {
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
    },
    /// Verify an AMD SEV-SNP attestation report (binary or hex) against its
    /// VCEK/VLEK and the AMD chain (default: the embedded roots).
    Snp {
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
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
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

fn load_policy(path: &Option<PathBuf>) -> anyhow::Result<Option<Policy>> {
    let Some(p) = path else { return Ok(None) };
    let text = std::fs::read_to_string(p)
        .with_context(|| format!("cannot read policy {}", p.display()))?;
    Ok(Some(
        Policy::from_toml_str(&text).map_err(|e| anyhow!("policy {}: {e}", p.display()))?,
    ))
}

fn parse_at(at: &Option<String>) -> anyhow::Result<Option<OffsetDateTime>> {
    match at.as_deref() {
        None => Ok(None),
        Some("now") => Ok(Some(OffsetDateTime::now_utc())),
        Some(s) => Ok(Some(
            timefmt::parse_rfc3339(s).map_err(|e| anyhow!("--at: {e}"))?,
        )),
    }
}

fn required_at(at: &Option<String>) -> anyhow::Result<OffsetDateTime> {
    parse_at(at)?.ok_or_else(|| {
        anyhow!("--at is required for raw evidence: give an RFC 3339 instant, or `now`")
    })
}

fn hex_arg(name: &str, v: &Option<String>) -> anyhow::Result<Option<Vec<u8>>> {
    v.as_deref()
        .map(|s| hex::decode(s.trim()).map_err(|e| anyhow!("--{name}: not hex: {e}")))
        .transpose()
}

fn report_data_arg(v: &Option<String>) -> anyhow::Result<Option<[u8; 64]>> {
    match hex_arg("report-data", v)? {
        None => Ok(None),
        Some(b) => Ok(Some(
            <[u8; 64]>::try_from(b.as_slice())
                .map_err(|_| anyhow!("--report-data must be 64 bytes"))?,
        )),
    }
}

fn read(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {what} {}", path.display()))
}

fn emit(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        // A closed pipe (`| head`) is a normal end.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn emit_attestation(report: &AttestationReport, json: bool) -> anyhow::Result<u8> {
    if json {
        emit(&format!("{}\n", serde_json::to_string_pretty(report)?))?;
    } else {
        emit(&report.to_table())?;
    }
    Ok(match report.verdict {
        AttestationVerdict::Accept => 0,
        AttestationVerdict::Reject => 1,
    })
}

fn run(cli: Cli) -> anyhow::Result<u8> {
    let common = cli.artifact.common.clone();
    let policy = load_policy(&common.policy)?;
    match cli.command {
        None => {
            let Some(path) = cli.artifact.artifact else {
                bail!("no artifact given (see --help for the evidence subcommands)");
            };
            verify_artifact(
                &path,
                cli.artifact.previous,
                cli.artifact.dangerous_allow_unattested,
                policy,
                &common,
            )
        }
        Some(Command::Artifact {
            artifact,
            previous,
            dangerous_allow_unattested,
        }) => verify_artifact(
            &artifact,
            previous,
            dangerous_allow_unattested,
            policy,
            &common,
        ),
        Some(Command::Nitro {
            document,
            user_data,
            nonce,
            public_key,
        }) => {
            let at = required_at(&common.at)?;
            let expect = kolm_verifier::nitro::NitroExpectations {
                user_data: hex_arg("user-data", &user_data)?,
                nonce: hex_arg("nonce", &nonce)?,
                public_key: hex_arg("public-key", &public_key)?,
            };
            let bytes = read(&document, "document")?;
            let policy = policy.unwrap_or_else(Policy::production);
            let report = kolm_verifier::nitro::verify_nitro(&bytes, at, &policy, &expect);
            emit_attestation(&report, common.json)
        }
        Some(Command::Snp {
            report,
            vcek,
            chain,
            report_data,
        }) => {
            let at = required_at(&common.at)?;
            let rd = report_data_arg(&report_data)?;
            let report_bytes = read(&report, "report")?;
            let vcek = read(&vcek, "VCEK/VLEK certificate")?;
            let chain = chain.as_deref().map(|p| read(p, "chain")).transpose()?;
            let policy = policy.unwrap_or_else(Policy::production);
            let out = kolm_verifier::snp::verify_snp(
                &report_bytes,
                &vcek,
                chain.as_deref(),
                at,
                &policy,
                rd.as_ref(),
            );
            emit_attestation(&out, common.json)
        }
        Some(Command::Tdx {
            quote,
            collateral,
            report_data,
        }) => {
            let at = required_at(&common.at)?;
            let rd = report_data_arg(&report_data)?;
            let quote = read(&quote, "quote")?;
            let collateral = read(&collateral, "collateral")?;
            let policy = policy.unwrap_or_else(Policy::production);
            let out = kolm_verifier::tdx::verify_tdx(&quote, &collateral, at, &policy, rd.as_ref());
            emit_attestation(&out, common.json)
        }
        Some(Command::Collateral(CollateralCommand::Inspect { files })) => {
            use kolm_verifier::collateral;
            let mut items = Vec::new();
            for f in &files {
                items.push(collateral::inspect(
                    &f.display().to_string(),
                    &read(f, "file")?,
                ));
            }
            let common_window = collateral::common_window(&items);
            let unknown = items.iter().any(|i| i.kind == "unknown");
            if common.json {
                let doc = serde_json::json!({
                    "schema": "kolm.collateral-inspect.v1",
                    "items": items,
                    "common_window": common_window,
                });
                emit(&format!("{}\n", serde_json::to_string_pretty(&doc)?))?;
            } else {
                let mut text = String::new();
                for i in &items {
                    text.push_str(&format!("{}: {} (sha256 {})\n", i.file, i.kind, i.sha256));
                    for (k, v) in &i.details {
                        text.push_str(&format!("  {k}: {v}\n"));
                    }
                    for w in &i.windows {
                        text.push_str(&format!(
                            "  valid {} .. {}  {}\n",
                            w.not_before, w.not_after, w.what
                        ));
                    }
                    if let Some(e) = &i.error {
                        text.push_str(&format!("  error: {e}\n"));
                    }
                }
                match &common_window {
                    Some((a, b)) => text.push_str(&format!("all valid together: {a} .. {b}\n")),
                    None => text.push_str("all valid together: never (or no windows)\n"),
                }
                emit(&text)?;
            }
            Ok(if unknown { 1 } else { 0 })
        }
        Some(Command::Collateral(CollateralCommand::Bundle {
            platform,
            out,
            files,
        })) => {
            let platform =
                kolm_policy::Platform::parse(&platform).map_err(|e| anyhow!("--platform: {e}"))?;
            let mut inputs = Vec::new();
            for f in &files {
                inputs.push((f.display().to_string(), read(f, "file")?));
            }
            let slots = match kolm_verifier::collateral::bundle(platform, &inputs) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("kolm-verify: bundle rejected: {e}");
                    return Ok(1);
                }
            };
            let entries = slots
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        kolm_format::container::EntryData::Bytes(v.clone()),
                    )
                })
                .collect();
            kolm_format::container::write_canonical_zip(&out, entries)
                .with_context(|| format!("writing {}", out.display()))?;
            let names: Vec<&str> = slots.keys().copied().collect();
            emit(&format!("{}: {}\n", out.display(), names.join(", ")))?;
            Ok(0)
        }
        Some(Command::Azure {
            evidence,
            nonce,
            user_data,
            tdx_collateral,
        }) => {
            let at = required_at(&common.at)?;
            let user_data = match hex_arg("user-data", &user_data)? {
                None => None,
                Some(v) => Some(
                    <[u8; 64]>::try_from(v.as_slice())
                        .map_err(|_| anyhow!("--user-data must be 64 bytes"))?,
                ),
            };
            let expect = kolm_verifier::azure::AzureExpectations {
                nonce: hex_arg("nonce", &nonce)?,
                user_data,
            };
            let bytes = read(&evidence, "evidence")?;
            let collateral = tdx_collateral
                .as_deref()
                .map(|p| read(p, "TDX collateral"))
                .transpose()?;
            let policy = policy.unwrap_or_else(Policy::production);
            let report = kolm_verifier::azure::verify_azure(
                &bytes,
                at,
                &policy,
                &expect,
                collateral.as_deref(),
            );
            emit_attestation(&report, common.json)
        }
    }
}

fn verify_artifact(
    path: &Path,
    previous: Option<PathBuf>,
    dangerous_allow_unattested: bool,
    policy: Option<Policy>,
    common: &Common,
) -> anyhow::Result<u8> {
    let opts = VerifyOptions {
        policy,
        at: parse_at(&common.at)?,
        previous,
        dangerous_allow_unattested,
    };
    let report = artifact::verify_artifact(path, &opts)?;
    let text = if common.json {
        format!("{}\n", serde_json::to_string_pretty(&report)?)
    } else {
        report.to_table()
    };
    emit(&text)?;
    if dangerous_allow_unattested && !common.json {
        eprintln!("kolm-verify: WARNING: --dangerous-allow-unattested: platform `none` accepted");
    }
    Ok(report.verdict.exit_code())
}
