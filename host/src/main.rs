//! `kolm-host`: the host agent's command line.
//!
//! `kolm-host run JOB.toml` launches the enclave service (`--platform
//! local`, or a `nitro`, `qemu-snp` or `qemu-tdx` launch recipe), submits the job and its inputs, receives the sealed
//! artifact, writes it atomically and verifies it with the verifier library
//! before it reports success. Exit status: 0 when the artifact verified (or
//! got the best verdict the chosen attestation can give: `simulated` for
//! `--attest sim`, `unattested` for `--attest none`, each said loudly); 1
//! when it was written but the verifier rejected it; 2 for any error (no
//! artifact, or it could not be checked).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use kolm_host::instances;
use kolm_host::launch::{self, LocalEnclave, PlatformChoice};

mod cli_bundle;
mod cli_launch;
mod cli_run;
mod display;

/// Where launched enclave services keep their sockets, logs and records.
const RUNTIME_DIR: &str = "target/kolm-host/run";

/// Where artifacts go without `--out`.
const DEFAULT_OUT_DIR: &str = "target/kolm-host";

/// Largest bundle of inputs the host sends (the enclave has its own limit).
const MAX_INPUT_BYTES: u64 = 1 << 30;

#[derive(Debug, Parser)]
#[command(name = "kolm-host", version, about = "kolm host agent")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Run JOB.toml in an enclave and verify the sealed artifact.
    Run(RunArgs),
    /// Start a long-lived local enclave service for many jobs.
    Launch {
        /// The service's name: its socket, log and record in --runtime-dir
        /// are NAME.sock, NAME.log and NAME.json.
        #[arg(long, default_value = "local")]
        name: String,
        /// Only `local`: a guest started by a launch recipe serves one job
        /// (`run --platform ...`).
        #[arg(long, default_value = "local")]
        platform: String,
        /// The enclave's attestation provider: auto (the one TEE device
        /// this machine has; an error if none), sim, none, or a platform
        /// name (as `kolm-enclave start --attest`).
        #[arg(long, default_value = "auto")]
        attest: String,
        /// Offline collateral for SEV-SNP and TDX (`kolm-host bundle
        /// fetch`), passed to the service as its `--bundle`.
        #[arg(long, value_name = "DIR")]
        bundle: Option<PathBuf>,
        /// With `--attest sim`: the format of the simulated evidence
        /// (nitro, sev-snp or tdx; default nitro).
        #[arg(long, value_name = "FORMAT")]
        sim_format: Option<String>,
        /// Its artifacts and receipt chain (default: target/kolm-host/NAME-state).
        #[arg(long, value_name = "DIR")]
        state: Option<PathBuf>,
        /// Where the service's socket, log and record are kept.
        #[arg(long, value_name = "DIR", default_value = RUNTIME_DIR)]
        runtime_dir: PathBuf,
        /// The kolm-enclave binary (default: $KOLM_ENCLAVE_BIN, else the
        /// one beside kolm-host).
        #[arg(long, value_name = "PATH")]
        enclave_bin: Option<PathBuf>,
    },
    /// Whether a launched enclave service is up, and what it says it is.
    /// Exit 0 when up, 1 when not.
    Status {
        /// The service's name, as given to `launch`.
        #[arg(long, default_value = "local")]
        name: String,
        /// Where `launch` keeps the service's socket, log and record.
        #[arg(long, value_name = "DIR", default_value = RUNTIME_DIR)]
        runtime_dir: PathBuf,
        /// One JSON object on stdout instead of a line of text.
        #[arg(long)]
        json: bool,
    },
    /// Stop a launched enclave service (a job it runs dies with it; nothing
    /// is sealed).
    Stop {
        /// The service's name, as given to `launch`.
        #[arg(long, default_value = "local")]
        name: String,
        /// Where `launch` keeps the service's socket, log and record.
        #[arg(long, value_name = "DIR", default_value = RUNTIME_DIR)]
        runtime_dir: PathBuf,
    },
    /// Offline collateral bundles (`--bundle DIR` of `run`).
    Bundle {
        #[command(subcommand)]
        command: BundleCommand,
    },
    /// Export this installation's simulated-TEE roots as one PEM bundle
    /// (what `kolm-verify --dangerous-trust-sim-root` takes): the P-384
    /// root, then the root of each --sim-format used so far. NOT TEE roots.
    SimRoot {
        /// Where to write the PEM bundle (e.g. target/kolm-host/sim-root.pem).
        #[arg(long, value_name = "ROOT.pem")]
        out: PathBuf,
        /// The kolm-enclave binary whose installation's roots are exported
        /// (default: $KOLM_ENCLAVE_BIN, else the one beside kolm-host).
        #[arg(long, value_name = "PATH")]
        enclave_bin: Option<PathBuf>,
        /// Create the roots of the formats not used yet first.
        #[arg(long)]
        all_formats: bool,
    },
}

#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum BundleCommand {
    /// What each file of a bundle directory is and when it is valid (the
    /// verifier's own reading; nothing is fetched). The AMD CRL is
    /// checked against the bundle's ARK, ASK and VCEK. Exit 1 if a file is
    /// not recognised, the CRL does not verify or revokes the chain, or
    /// the directory holds none of the bundle's files.
    Inspect {
        /// The bundle directory (as `run --bundle DIR` takes it).
        dir: PathBuf,
        /// One JSON document on stdout instead of text.
        #[arg(long)]
        json: bool,
        /// Judge whether the bundle can be used at this instant (RFC 3339)
        /// instead of now.
        #[arg(long, value_name = "RFC3339")]
        at: Option<String>,
    },
    /// Fetch SEV-SNP (AMD KDS) and TDX (Intel PCS) collateral into a
    /// bundle directory, checked with the verifier before anything is
    /// written. The only command that reaches the network.
    Fetch(cli_bundle::FetchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => cli_run::run(&args),
        Command::Launch { platform, .. } if platform != "local" => {
            Err(match PlatformChoice::parse(&platform) {
                Err(e) => e,
                Ok(_) => launch::LaunchError::LongLivedLocalOnly(platform),
            }
            .into())
        }
        Command::Launch {
            name,
            platform: _,
            attest,
            bundle,
            sim_format,
            state,
            runtime_dir,
            enclave_bin,
        } => launch_cmd(
            &name,
            &attest,
            bundle,
            sim_format,
            state,
            &runtime_dir,
            enclave_bin.as_deref(),
        ),
        Command::Status {
            name,
            runtime_dir,
            json,
        } => status_cmd(&name, &runtime_dir, json),
        Command::Stop { name, runtime_dir } => stop_cmd(&name, &runtime_dir),
        Command::Bundle {
            command: BundleCommand::Inspect { dir, json, at },
        } => cli_bundle::inspect(&dir, json, at.as_deref()),
        Command::Bundle {
            command: BundleCommand::Fetch(args),
        } => cli_bundle::fetch(&args),
        Command::SimRoot {
            out,
            enclave_bin,
            all_formats,
        } => sim_root(&out, enclave_bin.as_deref(), all_formats).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kolm-host: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// `run`'s arguments.
#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The job spec (sent to the enclave byte for byte); its inputs are
    /// read from the same directory.
    job: PathBuf,
    /// Where the enclave runs: local (kolm-enclave on this machine, unix
    /// socket), nitro, qemu-snp or qemu-tdx (started by their launch
    /// recipe, reached over vsock; `--dry-run` prints the command).
    #[arg(long, default_value = "local")]
    platform: String,
    #[command(flatten)]
    recipe: cli_launch::RecipeArgs,
    /// The enclave's attestation provider: sim, none, auto, or a
    /// platform name (as `kolm-enclave start --attest`).
    #[arg(long, default_value = "auto")]
    attest: String,
    /// Offline collateral for SEV-SNP and TDX: it completes the enclave's
    /// identity evidence, and the files of the enclave's platform go to it
    /// with the job (used where the platform and the enclave have none).
    #[arg(long, value_name = "DIR")]
    bundle: Option<PathBuf>,
    /// With `--attest sim`: the format of the simulated evidence, `nitro`
    /// (default), `sev-snp` or `tdx` (passed to the enclave).
    #[arg(long, value_name = "FORMAT")]
    sim_format: Option<String>,
    /// The policy the enclave enforces and the artifact is verified
    /// against (default: policy.toml beside JOB.toml).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Where to write the artifact (default: target/kolm-host/ + the
    /// name the enclave gave it).
    #[arg(long, value_name = "ARTIFACT.zip")]
    out: Option<PathBuf>,
    /// The local enclave's state (artifacts, receipt chain).
    #[arg(long, value_name = "DIR", default_value = "target/kolm-host/enclave")]
    state: PathBuf,
    /// The kolm-enclave binary (default: $KOLM_ENCLAVE_BIN, else the one
    /// beside kolm-host).
    #[arg(long, value_name = "PATH")]
    enclave_bin: Option<PathBuf>,
    /// JSON lines on stdout instead of text on stderr.
    #[arg(long)]
    json: bool,
    /// Read and check the job, print what would be sent, start nothing.
    #[arg(long)]
    dry_run: bool,
    /// Submit to a running enclave service (`unix:PATH`, e.g. one
    /// `launch` started) instead of starting one.
    #[arg(long, value_name = "ADDRESS", conflicts_with_all = ["attest", "sim_format", "state"])]
    connect: Option<String>,
    /// Trust the simulated TEE under this sim root (`kolm-host sim-root
    /// --out ROOT.pem`): NOT a TEE. Without it a simulated enclave gets
    /// nothing, except one this host started itself with `--attest sim`
    /// (this installation's root).
    #[arg(long, value_name = "ROOT.pem")]
    dangerous_trust_sim_root: Option<PathBuf>,
    /// Send the job to an enclave on platform `none` (nothing attested),
    /// if the job's policy allows `none`. Implied by `--attest none` on an
    /// enclave this host starts itself.
    #[arg(long)]
    dangerous_allow_unattested: bool,
    /// Send the job to hardware evidence whose launch measurement the
    /// job's policy does not pin (any workload in a genuine TEE).
    #[arg(long)]
    dangerous_any_measurement: bool,
    /// Replace an existing file at `--out` (otherwise it is never
    /// replaced).
    #[arg(long)]
    force: bool,
    /// Seconds to wait for the enclave's hello.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    hello_timeout: u64,
    /// Seconds the job may take, from the last input byte to the end of
    /// the artifact (default: the policy's limits.max_job_seconds plus 600
    /// to seal and send, else 24 hours).
    #[arg(long, value_name = "SECONDS")]
    job_timeout: Option<u64>,
}

/// `launch`: a long-lived local enclave service.
fn launch_cmd(
    name: &str,
    attest: &str,
    bundle: Option<PathBuf>,
    sim_format: Option<String>,
    state: Option<PathBuf>,
    runtime_dir: &Path,
    enclave_bin: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    instances::record_path(runtime_dir, name)?;
    if let Ok(i) = instances::load(runtime_dir, name)
        && instances::alive(i.pid)
    {
        return Err(instances::InstanceError::Running {
            name: name.to_string(),
            pid: i.pid,
        }
        .into());
    }
    std::fs::create_dir_all(runtime_dir)
        .with_context(|| format!("creating {}", runtime_dir.display()))?;
    let runtime_dir = std::fs::canonicalize(runtime_dir)?;
    let state = state.unwrap_or_else(|| PathBuf::from(format!("target/kolm-host/{name}-state")));
    let cfg = LocalEnclave {
        binary: launch::enclave_binary(enclave_bin)?,
        attest: attest.to_string(),
        bundle,
        sim_format,
        state: state.clone(),
        runtime_dir: runtime_dir.clone(),
    };
    let pid = launch::start_detached(&cfg, name)?;
    let instance = instances::Instance {
        name: name.to_string(),
        pid,
        socket: runtime_dir.join(format!("{name}.sock")),
        state,
        attest: attest.to_string(),
    };
    instances::save(&runtime_dir, &instance)?;
    eprintln!(
        "kolm-host: launched {name} (pid {pid}); submit with: kolm-host run JOB.toml --connect \
         unix:{}",
        instance.socket.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `stop`: exit 0 when it stopped a running service, 1 when none was
/// running (a record left by one that died is removed).
fn stop_cmd(name: &str, runtime_dir: &Path) -> anyhow::Result<ExitCode> {
    let i = match instances::load(runtime_dir, name) {
        Ok(i) => i,
        Err(instances::InstanceError::Unknown { .. }) => {
            eprintln!("kolm-host: {name} is not running (no record: never launched, or stopped)");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.into()),
    };
    let was_alive = instances::alive(i.pid);
    instances::stop(runtime_dir, &i, Duration::from_secs(10))?;
    if was_alive {
        eprintln!("kolm-host: stopped {name} (pid {})", i.pid);
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "kolm-host: {name} was not running (pid {} had exited); removed its record and \
             socket",
            i.pid
        );
        Ok(ExitCode::from(1))
    }
}

/// `status`: up (and what it says it is), or not.
fn status_cmd(name: &str, runtime_dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let i = match instances::load(runtime_dir, name) {
        Ok(i) => i,
        Err(instances::InstanceError::Unknown { .. }) => {
            let why = "no record: never launched, or stopped";
            if json {
                println!(
                    "{}",
                    serde_json::json!({"name": name, "up": false, "why": why})
                );
            } else {
                println!("{name}: down ({why})");
            }
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.into()),
    };
    let hello = if instances::alive(i.pid) {
        instances::hello(&i.socket, Duration::from_secs(10)).map_err(|e| e.to_string())
    } else {
        Err(format!("pid {} is not running", i.pid))
    };
    let up = hello.is_ok();
    if json {
        println!(
            "{}",
            match &hello {
                Ok(h) => serde_json::json!({"name": name, "up": true, "pid": i.pid,
                    "platform": h.platform.to_string(),
                    "identity_key": hex::encode(h.identity_key),
                    "socket": i.socket.display().to_string()}),
                Err(e) => serde_json::json!({"name": name, "up": false, "pid": i.pid, "why": e}),
            }
        );
    } else {
        match &hello {
            Ok(h) => println!(
                "{name}: up (pid {}), platform {}, identity key {}, socket {}",
                i.pid,
                h.platform,
                hex::encode(h.identity_key),
                i.socket.display()
            ),
            Err(e) => println!("{name}: down ({e})"),
        }
    }
    Ok(if up {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `kolm-enclave sim-root --out PATH [--all-formats]` of the enclave
/// binary this host launches (the same installation, so the same roots).
fn sim_root(out: &Path, enclave_bin: Option<&Path>, all_formats: bool) -> anyhow::Result<()> {
    let binary = launch::enclave_binary(enclave_bin)?;
    let mut cmd = std::process::Command::new(&binary);
    cmd.arg("sim-root").arg("--out").arg(out);
    if all_formats {
        cmd.arg("--all-formats");
    }
    let o = cmd
        .output()
        .with_context(|| format!("running {}", binary.display()))?;
    if !o.status.success() {
        anyhow::bail!(
            "{} sim-root failed ({}): {}",
            binary.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(())
}
