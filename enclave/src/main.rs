//! `kolm-enclave`: the kolm runtime binary.
//!
//! `kolm-enclave run` runs a job (by default the bundled demo job), seals its
//! outputs into an artifact with a signed receipt, and verifies the artifact
//! with the same library `kolm-verify` uses.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use kolm_enclave::attest::NoneProvider;
use kolm_enclave::run::{self, RunRequest};
use kolm_policy::Policy;
use kolm_verifier::artifact::{VerifyOptions, verify_artifact};
use kolm_verifier::report::Verdict;

const DEMO_SPEC: &[u8] = include_bytes!("../demo/job.toml");
const DEMO_POLICY: &[u8] = include_bytes!("../demo/policy.toml");
const DEMO_CORPUS: &[u8] = include_bytes!("../demo/corpus.txt");

#[derive(Debug, Parser)]
#[command(name = "kolm-enclave", version, about = "kolm enclave runtime")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a job, seal its outputs with a signed receipt, and verify the artifact.
    ///
    /// Without --spec this runs the bundled demo job. On a machine without a
    /// TEE the platform is `none` and the verdict is honestly `unattested`.
    Run {
        /// Job spec (TOML); default: the bundled demo job.
        #[arg(long, value_name = "FILE", requires = "input_dir")]
        spec: Option<PathBuf>,
        /// Directory holding the spec's input files.
        #[arg(long, value_name = "DIR")]
        input_dir: Option<PathBuf>,
        /// Policy the enclave enforces (TOML); default: the demo policy.
        #[arg(long, value_name = "FILE")]
        policy: Option<PathBuf>,
        /// Where the artifact and the receipt chain state are written.
        #[arg(long, value_name = "DIR", default_value = "target/kolm-demo")]
        out: PathBuf,
        /// Print the verification report as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run {
            spec,
            input_dir,
            policy,
            out,
            json,
        } => match run_cmd(spec, input_dir, policy, out, json) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                eprintln!("kolm-enclave: error: {e:#}");
                ExitCode::from(2)
            }
        },
    }
}

fn run_cmd(
    spec: Option<PathBuf>,
    input_dir: Option<PathBuf>,
    policy: Option<PathBuf>,
    out: PathBuf,
    json: bool,
) -> anyhow::Result<u8> {
    let (spec_bytes, input_dir) = match spec {
        Some(p) => (
            std::fs::read(&p).with_context(|| format!("reading spec {}", p.display()))?,
            input_dir.context("--input-dir is required with --spec")?,
        ),
        None => {
            let dir = out.join("demo-inputs");
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            kolm_enclave::fsutil::write_atomic(&dir.join("corpus.txt"), DEMO_CORPUS)
                .context("writing demo input")?;
            (DEMO_SPEC.to_vec(), dir)
        }
    };
    let policy_bytes = match &policy {
        Some(p) => std::fs::read(p).with_context(|| format!("reading policy {}", p.display()))?,
        None => DEMO_POLICY.to_vec(),
    };
    let req = RunRequest {
        spec: &spec_bytes,
        policy: &policy_bytes,
        input_dir: &input_dir,
        out_dir: &out,
    };
    let result = run::run(&req, &NoneProvider)?;
    eprintln!(
        "kolm-enclave: sealed {} (manifest {}, chain sequence {})",
        result.artifact.display(),
        result.cid,
        result.sequence
    );
    for (k, v) in &result.metrics {
        eprintln!("kolm-enclave: metric {k} = {v}");
    }
    if let Some(g) = &result.gate_failure {
        eprintln!("kolm-enclave: WARNING: quality gate failed: {g}");
    }

    // Verify with the policy the run was made under.
    let policy_text = std::str::from_utf8(&policy_bytes).context("policy is not UTF-8")?;
    let opts = VerifyOptions {
        policy: Some(Policy::from_toml_str(policy_text)?),
        ..VerifyOptions::default()
    };
    let report = verify_artifact(&result.artifact, &opts)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.to_table());
        println!(
            "re-check offline with: cargo run --locked -p kolm-verifier --bin kolm-verify -- {}{}",
            result.artifact.display(),
            if policy.is_none() {
                " --policy enclave/demo/policy.toml"
            } else {
                ""
            }
        );
    }
    Ok(match report.verdict {
        Verdict::Verified | Verdict::Unattested => 0,
        Verdict::Rejected => 1,
    })
}
