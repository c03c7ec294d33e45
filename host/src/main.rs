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
use kolm_host::job::{self, Job};
use kolm_host::launch::{self, LocalEnclave, PlatformChoice};
use kolm_host::session::{self, Event};
use kolm_policy::Policy;
use kolm_transport::{Channel, Connector, FrameOptions};
use kolm_verifier::artifact::{VerifyAt, VerifyOptions, verify_artifact};
use kolm_verifier::report::Verdict;

mod cli_bundle;
mod cli_launch;
mod display;

use display::{Display, say};

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
        Command::Run(args) => run(&args),
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

/// Seconds allowed beyond the policy's `max_job_seconds` for sealing and
/// sending the artifact.
const SEAL_ALLOWANCE_SECONDS: u64 = 600;

/// How long a frame may take to arrive once it began, or to be written.
const FRAME_TIMEOUT: Duration = Duration::from_secs(120);

/// How long after Ctrl-C (or SIGTERM) the host exits, whatever it waits on.
const INTERRUPT_EXIT: Duration = Duration::from_millis(900);

/// Which sim root the host trusts for this run.
enum SimTrust {
    /// `--dangerous-trust-sim-root`.
    Explicit(PathBuf),
    /// The root of the installation whose enclave this host started with
    /// `--attest sim`.
    Installation,
    /// None: a simulated enclave is refused.
    None,
}

fn run(a: &RunArgs) -> anyhow::Result<ExitCode> {
    let job = job::load(&a.job, a.policy.as_deref(), None, MAX_INPUT_BYTES)?;
    let policy =
        Policy::from_toml_str(std::str::from_utf8(&job.policy).context("the policy is not UTF-8")?)
            .with_context(|| format!("policy {}", job.policy_path.display()))?;
    let platform = PlatformChoice::parse(&a.platform)?;
    let recipe = a.recipe.recipe(platform)?;
    // The bundle travels in job-submit: read (and size-checked) before
    // anything starts.
    let bundle = match &a.bundle {
        Some(dir) => {
            let files = session::read_bundle(dir)?;
            anyhow::ensure!(
                !files.is_empty(),
                "--bundle {}: holds none of {}",
                dir.display(),
                kolm_host::bundle::BUNDLE_FILES.join(", ")
            );
            files
        }
        None => Vec::new(),
    };
    if let Some(out) = &a.out {
        // Before anything starts: a job is never run for nothing.
        anyhow::ensure!(
            a.force || !out.exists(),
            kolm_host::output::OutputError::Exists {
                path: out.display().to_string()
            }
        );
    }
    if a.dry_run {
        print_plan(&job, a, recipe.as_ref());
        return Ok(ExitCode::SUCCESS);
    }
    if recipe.is_some() {
        // The enclave's provider is part of its image (and so of its
        // measurement) on these platforms: the host has no say. `--bundle`
        // stays: the host completes the enclave's identity evidence with it
        // and sends its files with the job.
        anyhow::ensure!(
            a.connect.is_none() && a.attest == "auto",
            "--platform {}: --connect and --attest apply to local enclaves only (the guest \
             image carries its own provider)",
            a.platform
        );
    }
    let runtime = tempfile::Builder::new()
        .prefix("kolm-host-")
        .tempdir()
        .context("runtime directory")?;
    // Ctrl-C: while the enclave starts, it is stopped; while the job runs,
    // the enclave is told to kill the job (nothing is sealed). Exit 130,
    // within a second whatever the host waits on (a stalled peer
    // included): the enclave cleans up on its own when the connection
    // ends (it runs in its own process group, so the terminal's Ctrl-C
    // does not kill it before it can).
    let cancelled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = cancelled.clone();
    ctrlc::set_handler(move || {
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        std::thread::sleep(INTERRUPT_EXIT);
        eprintln!("kolm-host: interrupted: no artifact");
        std::process::exit(130);
    })
    .context("installing the Ctrl-C handler")?;
    let local = a.connect.is_none() && recipe.is_none();
    let sim_trust = match &a.dangerous_trust_sim_root {
        Some(pem) => SimTrust::Explicit(pem.clone()),
        None if local && a.attest == "sim" => SimTrust::Installation,
        None => SimTrust::None,
    };
    let allow_unattested = a.dangerous_allow_unattested || (local && a.attest == "none");
    let deadlines = session::Deadlines {
        hello: Duration::from_secs(a.hello_timeout.max(1)),
        job: Duration::from_secs(a.job_timeout.unwrap_or_else(|| {
            policy
                .limits
                .max_job_seconds
                .map_or(24 * 3600, |s| s.saturating_add(SEAL_ALLOWANCE_SECONDS))
        })),
        ..session::Deadlines::default()
    };
    // A guest started by a launch recipe: stopped when dropped (on any
    // error), or after the job.
    let mut vm: Option<launch::vm::StartedVm> = None;
    // A running service (`--connect`), a guest started by a launch recipe,
    // or a local one started for this job.
    let (enclave, stream, binary) = match &a.connect {
        None if let Some(recipe) = &recipe => {
            std::fs::create_dir_all(a.recipe.runtime_dir())
                .with_context(|| format!("creating {}", a.recipe.runtime_dir().display()))?;
            eprintln!("kolm-host: starting: {}", recipe.shell_line());
            let started = vm.insert(launch::vm::start(recipe)?);
            eprintln!(
                "kolm-host: waiting for the enclave service at {}",
                recipe.connect
            );
            let stream = match started.connect(a.recipe.boot_timeout(), &cancelled) {
                Err(launch::LaunchError::Cancelled) => {
                    drop(vm.take());
                    eprintln!("kolm-host: cancelled: the enclave was stopped; no artifact");
                    return Ok(ExitCode::from(130));
                }
                other => other?,
            };
            (
                None,
                stream,
                launch::enclave_binary(a.enclave_bin.as_deref()).ok(),
            )
        }
        Some(address) => {
            let address = kolm_transport::Address::parse(address)?;
            let stream = kolm_transport::AddressConnector::new(address)?.connect()?;
            (
                None,
                stream,
                launch::enclave_binary(a.enclave_bin.as_deref()).ok(),
            )
        }
        None => {
            let binary = launch::enclave_binary(a.enclave_bin.as_deref())?;
            let enclave = launch::start_local(&LocalEnclave {
                binary: binary.clone(),
                attest: a.attest.clone(),
                // Not passed as the enclave's own `--bundle`: its files
                // reach the enclave in job-submit, as on a guest, so a
                // local run takes the path a guest's takes (and the
                // enclave-side bundle, which would win, is not a second
                // copy of the same files).
                bundle: None,
                sim_format: a.sim_format.clone(),
                state: a.state.clone(),
                runtime_dir: runtime.path().to_path_buf(),
            })?;
            let stream = enclave.connect()?;
            (Some(enclave), stream, Some(binary))
        }
    };
    // A frame that began must end, and a write must not block, within
    // FRAME_TIMEOUT: a peer that stalls mid-frame ends the conversation.
    let frames = FrameOptions::default()
        .with_frame_timeout(Some(FRAME_TIMEOUT))?
        .with_write_timeout(Some(FRAME_TIMEOUT))?;
    let mut ch = Channel::new(stream, frames);
    let json = a.json;
    let mut display = Display::new(json);
    let mut on_event = |e: Event| display.event(e);
    // The enclave's identity key is judged before anything is sent.
    let mut get_sim_root = || trusted_sim_root(&sim_trust, runtime.path(), binary.as_deref());
    let mut trust = kolm_host::identity::IdentityTrust {
        policy: &policy,
        bundle: a.bundle.as_deref(),
        sim_root: &mut get_sim_root,
        dangerous_allow_unattested: allow_unattested,
        dangerous_any_measurement: a.dangerous_any_measurement,
    };
    let mut check_identity = |hello: &kolm_transport::message::Hello| {
        kolm_host::identity::verify(hello, &mut trust, time::OffsetDateTime::now_utc())
    };
    let outcome = session::submit(
        &mut ch,
        &job,
        &bundle,
        &mut check_identity,
        &cancelled,
        deadlines,
        &mut on_event,
    );
    display.finish();
    let outcome = match outcome {
        Err(session::SessionError::Cancelled) => {
            eprintln!("kolm-host: cancelled: the enclave killed the job; no artifact");
            return Ok(ExitCode::from(130));
        }
        other => other?,
    };
    drop(ch);
    if let Some(enclave) = enclave {
        enclave.finish(Duration::from_secs(10));
    }
    if let Some(vm) = vm.take()
        && let Err(e) = vm.stop()
    {
        // The artifact is in hand: say so, do not lose it.
        eprintln!("kolm-host: WARNING: stopping the enclave after the job: {e}");
    }

    // The bytes go to a temp file beside the destination and are judged
    // there; only an accepted artifact is put at the path of one.
    let out_dir = match &a.out {
        Some(p) => match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        },
        None => PathBuf::from(DEFAULT_OUT_DIR),
    };
    let staged =
        kolm_host::output::Staged::write(&out_dir, &outcome.artifact).with_context(|| {
            format!(
                "the artifact for {} was not written",
                a.out.as_deref().unwrap_or(&out_dir).display()
            )
        })?;

    // Verify before reporting success: the artifact is only bytes until
    // the verifier has judged it.
    let sim_root = if outcome.hello.platform == kolm_policy::Platform::Simulated {
        Some(
            trusted_sim_root(&sim_trust, runtime.path(), binary.as_deref())
                .map_err(|e| anyhow::anyhow!(e))?,
        )
    } else {
        None
    };
    let opts = VerifyOptions {
        policy: Some(policy),
        dangerous_trust_sim_root: sim_root,
        dangerous_allow_unattested: allow_unattested,
        dangerous_any_measurement: a.dangerous_any_measurement,
        ..VerifyOptions::at(VerifyAt::Instant(time::OffsetDateTime::now_utc()))
    };
    let report = verify_artifact(staged.path(), &opts).context("verifying the artifact")?;
    let signer = report
        .manifest
        .as_ref()
        .map(|m| m.signer.public_key.to_hex());
    let signer_ok = signer.as_deref() == Some(hex::encode(outcome.hello.identity_key).as_str());
    // The artifact must be this job's: the spec, policy and inputs sent.
    let for_this_job = match &report.manifest {
        Some(m) => kolm_host::output::matches_job(m, &job),
        None => Err("the artifact has no readable manifest".into()),
    };
    let verdict = report.verdict;
    let acceptable = signer_ok
        && for_this_job.is_ok()
        && matches!(
            (verdict, outcome.hello.platform),
            (Verdict::Verified, _)
                | (Verdict::Simulated, kolm_policy::Platform::Simulated)
                | (Verdict::Unattested, kolm_policy::Platform::None)
        );
    let sequence = report.manifest.as_ref().map(|m| m.chain.sequence);
    let wanted = match &a.out {
        Some(p) => p.clone(),
        None => kolm_host::output::default_path(&out_dir, &job, sequence),
    };
    let out = if acceptable {
        match (&a.out, a.force) {
            (Some(_), force) => staged.place(&wanted, force)?,
            // A default name that is taken (another chain's artifact of
            // the same job and sequence) is not replaced: the next free
            // name is used, and said.
            (None, _) => {
                let free = kolm_host::output::first_free(&wanted);
                if free != wanted {
                    eprintln!(
                        "kolm-host: {} exists (not replaced): writing {}",
                        wanted.display(),
                        free.display()
                    );
                }
                staged.place(&free, false)?
            }
        }
    } else {
        let kept = kolm_host::output::first_free(&kolm_host::output::rejected_path(&wanted));
        let kept = staged.place(&kept, false)?;
        eprintln!(
            "kolm-host: the artifact was REJECTED: kept as {} for inspection, not at {}",
            kept.display(),
            wanted.display()
        );
        kept
    };
    if let Err(why) = &for_this_job {
        eprintln!("kolm-host: REJECTED: the artifact is not the one for this job: {why}");
    }
    let mut check = format!(
        "kolm-verify {} --policy {}",
        out.display(),
        job.policy_path.display()
    );
    if outcome.hello.platform == kolm_policy::Platform::Simulated {
        check.push_str(" --dangerous-trust-sim-root target/kolm-host/sim-root.pem");
    }
    let verdict_text = format!("{verdict:?}").to_lowercase();
    if let Some(m) = &report.manifest {
        display::summary(json, m, opts.policy.as_ref(), acceptable);
    }
    say(
        json,
        serde_json::json!({
            "event": "done",
            "artifact": out.display().to_string(),
            "platform": outcome.hello.platform.to_string(),
            "verdict": verdict_text,
            "reason": report.reason,
            "signed_by_the_enclave": signer_ok,
            "identity": outcome.identity.name(),
            "accepted": acceptable,
            "verify_with": check,
        }),
        &format!(
            "sealed {} (platform {}); verdict {}{}{}",
            out.display(),
            outcome.hello.platform,
            verdict_text.to_uppercase(),
            report
                .reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default(),
            if signer_ok {
                ""
            } else {
                "; NOT signed by the enclave's identity key"
            }
        ),
    );
    if !json {
        match verdict {
            Verdict::Simulated => eprintln!(
                "kolm-host: WARNING: simulated TEE, NOT a TEE: the evidence is software-signed \
                 under this installation's sim root (export it with `kolm-host sim-root --out \
                 target/kolm-host/sim-root.pem`)"
            ),
            Verdict::Unattested => {
                eprintln!("kolm-host: no TEE: nothing proves where the job ran");
            }
            _ => {}
        }
        eprintln!("kolm-host: verify it offline with: {check}");
    }
    Ok(if acceptable {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
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
        instances::hello(&i.socket, Duration::from_secs(10))
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

fn print_plan(job: &Job, a: &RunArgs, recipe: Option<&launch::recipe::Recipe>) {
    let inputs: Vec<_> = job
        .inputs
        .iter()
        .map(|i| {
            serde_json::json!({"name": i.name, "size": i.size, "sha256": hex::encode(i.sha256)})
        })
        .collect();
    let mut plan = serde_json::json!({
        "event": "plan",
        "job": job.spec_path.display().to_string(),
        "policy": job.policy_path.display().to_string(),
        "platform": a.platform,
        "attest": a.attest,
        "inputs": inputs,
        "input_bytes": job.input_bytes(),
    });
    if let (Some(r), Some(map)) = (recipe, plan.as_object_mut()) {
        map.insert("argv".into(), r.argv.clone().into());
        map.insert("connect".into(), r.connect.to_string().into());
    }
    if a.json {
        println!("{plan}");
    } else {
        println!(
            "would run {} (policy {}) on platform {} with --attest {}:",
            job.spec_path.display(),
            job.policy_path.display(),
            a.platform,
            a.attest
        );
        for i in &job.inputs {
            println!(
                "  {} {} bytes sha256 {}",
                i.name,
                i.size,
                hex::encode(i.sha256)
            );
        }
        if let Some(r) = recipe {
            println!("would start: {}", r.shell_line());
            println!("then connect to: {}", r.connect);
        }
    }
}

/// The sim root `trust` names, parsed; an error when the operator trusts
/// none (a simulated enclave then gets nothing).
fn trusted_sim_root(
    trust: &SimTrust,
    runtime: &Path,
    enclave_bin: Option<&Path>,
) -> Result<kolm_verifier::sim::SimRoots, String> {
    match trust {
        SimTrust::Explicit(pem) => std::fs::read(pem)
            .map_err(|e| format!("--dangerous-trust-sim-root {}: {e}", pem.display()))
            .and_then(|b| {
                kolm_verifier::sim::SimRoots::parse(&b)
                    .map_err(|e| format!("--dangerous-trust-sim-root {}: {e}", pem.display()))
            }),
        SimTrust::Installation => load_sim_root(runtime, enclave_bin).map_err(|e| format!("{e:#}")),
        SimTrust::None => Err(
            "no sim root is trusted: the simulated TEE proves nothing, so the host sends it \
             nothing unless told to trust a sim root (--dangerous-trust-sim-root ROOT.pem, or \
             --attest sim on an enclave this host starts itself)"
                .into(),
        ),
    }
}

/// The sim roots of the enclave binary this host launches (every format
/// root the installation has), exported into `dir` and parsed.
fn load_sim_root(
    dir: &Path,
    enclave_bin: Option<&Path>,
) -> anyhow::Result<kolm_verifier::sim::SimRoots> {
    let pem = dir.join("sim-root.pem");
    sim_root(&pem, enclave_bin, false)?;
    let bytes = std::fs::read(&pem).context("reading the sim roots")?;
    kolm_verifier::sim::SimRoots::parse(&bytes).context("the sim roots")
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
