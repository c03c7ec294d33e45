//! `kolm-enclave`: the kolm runtime binary.
//!
//! `kolm-enclave run` runs a job (by default the bundled demo job) in the
//! egress = 0 sandbox, seals its outputs into an artifact with a signed
//! receipt, and reads it back with the strict format readers (`kolm-verify`
//! judges it). `kolm-enclave sim-root --out ROOT.pem` exports the
//! certificates of this installation's simulated-TEE roots as one PEM
//! bundle (what `kolm-verify --dangerous-trust-sim-root` takes). `kolm-enclave sandbox-exec` runs any program under exactly the
//! sandbox a sealed job gets and writes the sandbox record.
//!
//! One hidden subcommand is the runtime's own: `__sandbox-stage2` (the
//! single-threaded helper that sandboxes itself and execs the job). The
//! job itself is another binary, `kolm-jobs` (beside this one by default,
//! or `--jobs-bin PATH`), which links the ML crates this one does not.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use kolm_enclave::providers;
#[cfg(feature = "sim")]
use kolm_enclave::providers::sim;
use kolm_enclave::run::{self, RunRequest};
use kolm_enclave::sandbox::{self, LandlockMode, Profile, SandboxCommand};
use kolm_format::container;
use kolm_format::manifest::{MAX_MANIFEST_BYTES, Manifest};
use kolm_format::receipt::{self, MAX_RECEIPT_BYTES};
use kolm_format::seal::{MANIFEST_PATH, RECEIPT_PATH};

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
    /// Run a job and seal its outputs with a signed receipt (check it with kolm-verify).
    ///
    /// Without --spec this runs the bundled demo job. On a machine without a
    /// TEE, pass `--attest none` (kolm-verify reports `unattested`) or
    /// `--attest sim` (`simulated`): `auto` finds no device there.
    Run(RunOptions),
    /// Run as the enclave service: take jobs from the host agent over
    /// LISTEN (`vsock://ANY:PORT` inside a TEE, `unix:PATH` locally), one at
    /// a time, each sandboxed and sealed as `run` does, and send each
    /// artifact back (docs/sealed-run.md).
    Start(StartOptions),
    /// Export this installation's simulated-TEE roots as one PEM bundle.
    ///
    /// The root (a P-384 CA, subject "kolm simulated TEE root (NOT A
    /// TEE)") is created on first use in `kolm-sim-root/` beside this
    /// binary, or in $KOLM_SIM_ROOT_DIR; each further --sim-format has its
    /// own root there, created on that format's first use. The bundle
    /// holds the P-384 root first, then every format root that exists.
    /// Give it to `kolm-verify --dangerous-trust-sim-root`; it proves
    /// nothing about hardware.
    #[cfg(feature = "sim")]
    #[command(name = "sim-root")]
    SimRoot(SimRootArgs),
    /// Run PROGRAM under exactly the sandbox a sealed job gets.
    ///
    /// Network sockets (every family but AF_UNIX; AF_UNIX too with
    /// --profile strict) and io_uring are refused and counted; the record
    /// (docs/sandbox.md) is written to --record. The exit status is the
    /// program's (128 + N when signal N killed it); 125 when the sandbox
    /// could not be set up, in which case the program never ran.
    #[command(name = "sandbox-exec")]
    SandboxExec(SandboxExecArgs),
    /// Re-run a sealed fine-tune from its artifact and the same inputs,
    /// and check every output byte for byte.
    ///
    /// Equality is claimed only on the hardware/software tuple the
    /// artifact records (environment.json); on another one each differing
    /// element is named and nothing is claimed. Wall-clock measurements
    /// (the latency term, the K-score that weighs it, the training
    /// throughput) are the only values allowed to differ, each named.
    /// Exit status 0: equal; 1: not equal (or another tuple); 2: no replay
    /// (unreadable artifact, inputs that are not the receipt's).
    Replay(ReplayArgs),
}

// `run`'s options.
/// Where a run's or the service's evidence comes from (`run` and `start`
/// take the same three options).
#[derive(Debug, clap::Args)]
struct ProviderOptions {
    /// Where the evidence comes from: `auto` (the default, as for
    /// `kolm-host`: the one TEE device this machine has; an error naming
    /// `--attest sim` and `--attest none` if none), `nitro`, `sev-snp`,
    /// `tdx`, `sim` (the software TEE, never trusted by default) or
    /// `none`.
    #[arg(long, default_value = "auto", value_name = "PROVIDER")]
    attest: String,
    /// Offline collateral (`snp-vcek.der`, `snp-ask-ark.pem`,
    /// `tdx-collateral.json`) for SEV-SNP and TDX. For `start`, used where
    /// the platform supplies none; without it, each job's comes from the
    /// host's bundle sent with the job (`kolm-host run --bundle DIR`).
    #[arg(long, value_name = "DIR")]
    bundle: Option<PathBuf>,
    /// With `--attest sim`: the format of the simulated evidence,
    /// `nitro` (default), `sev-snp` or `tdx`.
    #[arg(long, value_name = "FORMAT")]
    sim_format: Option<String>,
}

#[derive(Debug, clap::Args)]
struct RunOptions {
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
    /// Print the run's summary as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    provider: ProviderOptions,
    /// Fine-tune jobs: keep checkpoints here (every
    /// `train.checkpoint_every` steps), outside the job's work
    /// directory, so that a killed run can be resumed.
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: Option<PathBuf>,
    /// Fine-tune jobs: continue from the newest checkpoint in
    /// --checkpoint-dir; the run ends with the same bytes as one that
    /// was never interrupted.
    #[arg(long, requires = "checkpoint_dir")]
    resume: bool,
    /// The job binary the sandbox runs; default: `kolm-jobs` beside
    /// this binary.
    #[arg(long, value_name = "PATH")]
    jobs_bin: Option<PathBuf>,
}

// `sandbox-exec`'s options.
#[derive(Debug, clap::Args)]
struct SandboxExecArgs {
    /// Sandbox profile.
    #[arg(long, default_value = "default", value_parser = ["default", "strict"])]
    profile: String,
    /// Where to write the sandbox record (JSON). It must lie outside
    /// every --read-write tree (the job could otherwise plant a link or
    /// a directory there that the record is written through).
    #[arg(long, value_name = "RECORD.json")]
    record: Option<PathBuf>,
    /// A tree the program may read (repeatable).
    #[arg(long = "read-only", value_name = "DIR")]
    read_only: Vec<PathBuf>,
    /// A tree the program may read and write (repeatable); the first is
    /// the working directory. As root, the tree (its directories and
    /// single-link files) is handed to the run's own uid/gid for the
    /// run and back to its owner after.
    #[arg(long = "read-write", value_name = "DIR")]
    read_write: Vec<PathBuf>,
    /// An environment entry for the program (repeatable); it gets
    /// nothing else but PATH.
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Kill the program after this many seconds.
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<u64>,
    /// Do not apply Landlock (recorded as `dangerous_disabled`): shows
    /// what seccomp alone covers, as on kernels without Landlock.
    #[arg(long)]
    dangerous_no_landlock: bool,
    /// The program and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM ARGS"
    )]
    command: Vec<OsString>,
}

// `replay`'s options.
#[derive(Debug, clap::Args)]
struct ReplayArgs {
    /// The sealed artifact (.zip).
    artifact: PathBuf,
    /// Directory holding the job's input files (checked against the
    /// receipt's hashes before anything runs).
    #[arg(long, value_name = "DIR")]
    inputs: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// The job binary the sandbox runs; default: `kolm-jobs` beside
    /// this binary.
    #[arg(long, value_name = "PATH")]
    jobs_bin: Option<PathBuf>,
}

// `sim-root`'s options.
#[cfg(feature = "sim")]
#[derive(Debug, clap::Args)]
struct SimRootArgs {
    /// Where to write the bundle (PEM), atomically.
    #[arg(long, value_name = "ROOT.pem")]
    out: PathBuf,
    /// Create the roots of the formats not used yet first, so that the
    /// bundle has all of them.
    #[arg(long)]
    all_formats: bool,
}

/// `start`'s options.
#[derive(Debug, clap::Args)]
struct StartOptions {
    /// Where to listen.
    #[arg(long, value_name = "ADDRESS")]
    listen: String,
    #[command(flatten)]
    provider: ProviderOptions,
    /// Artifacts and the receipt chain state.
    #[arg(long, value_name = "DIR")]
    state: PathBuf,
    /// The largest bundle of inputs a job may declare, in bytes.
    #[arg(long, default_value_t = 1 << 30, value_name = "BYTES")]
    max_input_bytes: u64,
    /// The largest frame, in bytes (at least 65536).
    #[arg(long, default_value_t = 64 << 20, value_name = "BYTES")]
    max_frame: u32,
    /// Serve one connection, then exit.
    #[arg(long)]
    once: bool,
    /// How long the host may stay silent when the service waits for it
    /// (its job, its next input chunk), and take to send one frame;
    /// then the connection is closed with a `timeout` error.
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    idle_timeout: u64,
    /// The job binary the sandbox runs; default: `kolm-jobs` beside this
    /// binary. Opened at start, as this binary is: a rebuild under the
    /// service changes nothing for it.
    #[arg(long, value_name = "PATH")]
    jobs_bin: Option<PathBuf>,
}

/// The provider `--attest`, `--bundle` and `--sim-format` name (`run` and
/// `start` alike).
fn select_provider(o: &ProviderOptions) -> anyhow::Result<providers::select::BoxedProvider> {
    Ok(providers::select::select(
        providers::select::AttestChoice::parse(&o.attest)?,
        &providers::select::DevicePaths::default(),
        o.bundle.as_deref(),
        o.sim_format
            .as_deref()
            .map(providers::select::parse_sim_format)
            .transpose()?,
    )?)
}

/// Says on stderr, as `who`, that the evidence is the simulated TEE's.
#[cfg(feature = "sim")]
fn warn_simulated(who: &str) -> anyhow::Result<()> {
    eprintln!(
        "{who}: WARNING: simulated TEE (NOT A TEE): evidence signed by this installation's sim \
         root ({})",
        sim::root_dir()?.display()
    );
    Ok(())
}

/// Without the `sim` feature no provider is the simulated TEE.
#[cfg(not(feature = "sim"))]
fn warn_simulated(_who: &str) -> anyhow::Result<()> {
    Ok(())
}

/// `start`: the enclave service.
fn start_cmd(o: &StartOptions) -> anyhow::Result<()> {
    // First, before any thread: the stop signals are taken by one thread
    // that cancels the running job and removes its files before exiting.
    kolm_enclave::service::handle_stop_signals().context("taking the stop signals")?;
    // The service log (stderr, which `kolm-host launch` sends to its log
    // file): every job's start, end or failure, never job data.
    let _ = tracing::subscriber::set_global_default(StderrLog);
    let provider = select_provider(&o.provider)?;
    if provider.platform() == kolm_policy::Platform::Simulated {
        warn_simulated("kolm-enclave start")?;
    }
    let address = kolm_transport::Address::parse(&o.listen)?;
    let wait = Some(Duration::from_secs(o.idle_timeout.max(1)));
    let frames = kolm_transport::FrameOptions::default()
        .with_max_frame(o.max_frame)?
        .with_idle_timeout(wait)?
        .with_frame_timeout(wait)?
        .with_write_timeout(wait)?;
    let config = kolm_enclave::service::ServiceConfig {
        state_dir: o.state.clone(),
        max_input_bytes: o.max_input_bytes,
        frames,
        once: o.once,
        runtime_exe: None,
        jobs_exe: o.jobs_bin.clone(),
    };
    let service = kolm_enclave::service::Service::new(provider.as_ref(), config)?;
    let listener = kolm_transport::listen(&address)?;
    eprintln!(
        "kolm-enclave start: listening on {} (platform {}, identity key {})",
        o.listen,
        provider.platform(),
        hex::encode(service.identity_key())
    );
    service.serve(listener.as_ref())?;
    Ok(())
}

/// `sim-root --out`: loads (or first creates) the P-384 root, and the
/// format roots with `--all-formats`; writes the bundle.
#[cfg(feature = "sim")]
fn sim_root_cmd(out: &Path, all_formats: bool) -> anyhow::Result<()> {
    let dir = sim::root_dir()?;
    let (pem, roots) = sim::bundle_pem(&dir, all_formats, time::OffsetDateTime::now_utc())?;
    kolm_enclave::fsutil::write_atomic(out, pem.as_bytes())
        .with_context(|| format!("writing {}", out.display()))?;
    for root in &roots {
        eprintln!(
            "kolm-enclave: {} sim root of the {} form, {} (sha256 {}), written to {}; it is NOT \
             a TEE root",
            if root.created() {
                "created"
            } else {
                "exported"
            },
            root.form(),
            root.dir().display(),
            hex::encode(root.sha256()),
            out.display()
        );
    }
    Ok(())
}

/// Exit status of `sandbox-exec` when the sandbox could not be set up.
const SANDBOX_FAILED: u8 = 125;

fn main() -> ExitCode {
    // Stage 2 must stay single-threaded and do nothing else first.
    if std::env::args_os().nth(1).as_deref() == Some(sandbox::STAGE2_SUBCOMMAND.as_ref()) {
        sandbox::stage2_main();
    }
    match Cli::parse().command {
        Command::SandboxExec(args) => match sandbox_exec(args) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                eprintln!("kolm-enclave sandbox-exec: error: {e:#}");
                ExitCode::from(SANDBOX_FAILED)
            }
        },
        Command::Start(opts) => match start_cmd(&opts) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("kolm-enclave start: error: {e:#}");
                ExitCode::from(2)
            }
        },
        Command::Run(opts) => match run_cmd(opts) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                eprintln!("kolm-enclave: error: {e:#}");
                // A model below the policy's quality gate is a verdict,
                // not a failure to run.
                let gate = matches!(
                    e.downcast_ref::<run::RunError>(),
                    Some(run::RunError::QualityGate(_))
                );
                ExitCode::from(if gate { 1 } else { 2 })
            }
        },
        Command::Replay(args) => replay_cmd(&args),
        #[cfg(feature = "sim")]
        Command::SimRoot(SimRootArgs { out, all_formats }) => {
            match sim_root_cmd(&out, all_formats) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("kolm-enclave sim-root: error: {e:#}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

/// `replay`: its report on stdout, its verdict as the exit status.
fn replay_cmd(args: &ReplayArgs) -> ExitCode {
    let report = match kolm_enclave::finetune::replay::replay(
        &args.artifact,
        &args.inputs,
        None,
        args.jobs_bin.as_deref(),
    ) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("kolm-enclave replay: error: {e}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        match serde_json::to_string(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("kolm-enclave replay: error: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print_replay(&report);
    }
    ExitCode::from(if report.equal { 0 } else { 1 })
}

/// `run`: select the provider, run and seal the job, read the artifact
/// back, say how to verify it.
fn run_cmd(o: RunOptions) -> anyhow::Result<u8> {
    let provider = select_provider(&o.provider)?;
    let (spec_bytes, input_dir) = job_spec_and_inputs(o.spec.as_deref(), o.input_dir, &o.out)?;
    let policy_bytes = match &o.policy {
        Some(p) => std::fs::read(p).with_context(|| format!("reading policy {}", p.display()))?,
        None => DEMO_POLICY.to_vec(),
    };
    let req = RunRequest {
        spec: &spec_bytes,
        policy: &policy_bytes,
        input_dir: &input_dir,
        out_dir: &o.out,
        runtime_exe: None,
        jobs_exe: o.jobs_bin.as_deref(),
        fine_tune: run::FineTuneRunOptions {
            checkpoint_dir: o.checkpoint_dir,
            resume: o.resume,
            progress: progress_mode(o.json),
            progress_lines: None,
        },
    };
    let simulated = provider.platform() == kolm_policy::Platform::Simulated;
    if simulated {
        warn_simulated("kolm-enclave")?;
    }
    let result = run::run(&req, provider.as_ref())?;
    log_sealed(&result);

    // Read the artifact back with the strict format readers: the container
    // profile, the manifest, and the receipt signature over it. Judging the
    // artifact (attestation, policy, chain) is the verifier's work, in a
    // separate binary: the enclave does not link the TEE verifiers.
    let manifest = read_back(&result.artifact)?;
    let recheck = recheck_command(&result.artifact, o.policy.is_none(), simulated);
    if o.json {
        let doc = serde_json::json!({
            "artifact": result.artifact.display().to_string(),
            "manifest_cid": result.cid.to_string(),
            "chain_sequence": result.sequence,
            "platform": manifest.environment.platform.to_string(),
            "metrics": result.metrics,
            "gate_failure": result.gate_failure,
            "verify_with": recheck,
        });
        println!("{}", serde_json::to_string(&doc)?);
    } else {
        println!(
            "sealed {} (platform {}, manifest {}, receipt signature checked)",
            result.artifact.display(),
            manifest.environment.platform,
            result.cid
        );
        println!("verify it offline with: {recheck}");
        if simulated {
            println!(
                "(export the sim root first: kolm-enclave sim-root --out sim-root.pem; it is NOT \
                 a TEE root)"
            );
        }
    }
    Ok(if result.gate_failure.is_some() { 1 } else { 0 })
}

/// Training progress: a bar on a terminal, JSON lines with --json (the
/// summary stays the last line), nothing otherwise.
fn progress_mode(json: bool) -> Option<kolm_format::job_io::ProgressMode> {
    use std::io::IsTerminal;
    if json {
        Some(kolm_format::job_io::ProgressMode::Json)
    } else if std::io::stdout().is_terminal() {
        Some(kolm_format::job_io::ProgressMode::Bar)
    } else {
        None
    }
}

/// The job's spec and input directory: `--spec` and `--input-dir`, or the
/// bundled demo job with its input written under `out`.
fn job_spec_and_inputs(
    spec: Option<&Path>,
    input_dir: Option<PathBuf>,
    out: &Path,
) -> anyhow::Result<(Vec<u8>, PathBuf)> {
    Ok(match spec {
        Some(p) => (
            std::fs::read(p).with_context(|| format!("reading spec {}", p.display()))?,
            input_dir.context("--input-dir is required with --spec")?,
        ),
        None => {
            let dir = out.join("demo-inputs");
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            kolm_enclave::fsutil::write_atomic(&dir.join("corpus.txt"), DEMO_CORPUS)
                .context("writing demo input")?;
            (DEMO_SPEC.to_vec(), dir)
        }
    })
}

/// The sealed run on stderr: the artifact, its metrics, a failed gate.
fn log_sealed(result: &run::RunResult) {
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
}

/// The `kolm-verify` command line that checks `artifact`.
fn recheck_command(artifact: &Path, demo_policy: bool, simulated: bool) -> String {
    format!(
        "cargo run --locked -p kolm-verify -- {}{}{}",
        artifact.display(),
        if demo_policy {
            " --policy enclave/demo/policy.toml"
        } else {
            ""
        },
        // The root as `kolm-enclave sim-root --out sim-root.pem` exports it.
        if simulated {
            " --dangerous-trust-sim-root sim-root.pem"
        } else {
            ""
        }
    )
}

fn print_replay(report: &kolm_enclave::finetune::replay::ReplayReport) {
    use kolm_enclave::finetune::replay::FileVerdict;
    for d in &report.tuple_differences {
        println!("tuple differs: {d}");
    }
    for (path, v) in &report.files {
        let text = match v {
            FileVerdict::Equal => "byte-equal".to_owned(),
            FileVerdict::EqualExceptTiming { fields } => {
                format!("equal except wall-clock fields {}", fields.join(", "))
            }
            FileVerdict::Differs { first_difference } => {
                format!("DIFFERS (first at byte {first_difference})")
            }
            FileVerdict::Missing => "MISSING from the replay".to_owned(),
            FileVerdict::Extra => "EXTRA: not in the artifact".to_owned(),
        };
        println!("{path}: {text}");
    }
    if report.equal {
        println!("replay: every output equal on the recorded tuple");
    } else if !report.tuple_differences.is_empty() {
        println!("replay: another hardware/software tuple; equality is not claimed");
    } else {
        println!("replay: outputs differ");
    }
}

/// Reads a freshly sealed artifact back: canonical container, canonical
/// manifest, receipt signature by the manifest's signer.
fn read_back(path: &Path) -> anyhow::Result<Manifest> {
    let mut f = std::io::BufReader::new(
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?,
    );
    let zip = container::read_canonical_zip(&mut f).context("reading the sealed container")?;
    let get = |f: &mut std::io::BufReader<std::fs::File>, name: &str, cap: u64| {
        let e = zip
            .entry(name)
            .with_context(|| format!("sealed artifact has no {name}"))?;
        container::read_entry(f, e, cap).with_context(|| format!("reading {name}"))
    };
    let manifest_bytes = get(&mut f, MANIFEST_PATH, MAX_MANIFEST_BYTES)?;
    let receipt_bytes = get(&mut f, RECEIPT_PATH, MAX_RECEIPT_BYTES)?;
    let manifest = Manifest::from_canonical_bytes(&manifest_bytes).context("sealed manifest")?;
    receipt::verify_for(
        manifest.version().context("sealed manifest")?,
        &receipt_bytes,
        &manifest_bytes,
        &manifest.signer.public_key.0,
    )
    .context("sealed receipt")?;
    Ok(manifest)
}

/// `PROGRAM` as `execvp` would find it: a name without `/` is looked up in
/// `PATH`.
fn resolve_program(program: &Path) -> anyhow::Result<PathBuf> {
    if program.as_os_str().as_encoded_bytes().contains(&b'/') {
        return Ok(std::path::absolute(program)?);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(program);
        if candidate.is_file() {
            return Ok(std::path::absolute(candidate)?);
        }
    }
    anyhow::bail!("{} not found in PATH", program.display())
}

/// Refuses a `--record` path inside a `--read-write` tree: the job can
/// write there, so it could replace the record's directory with a link and
/// have the (root) supervisor write the record through it, or leave a file
/// in its place. Both sides are compared with every link resolved (the
/// record's own name is not, it need not exist yet).
fn refuse_record_inside(record: &Path, read_write: &[PathBuf]) -> anyhow::Result<()> {
    let record = std::path::absolute(record)?;
    let name = record
        .file_name()
        .with_context(|| format!("--record {} names no file", record.display()))?;
    let parent = record.parent().unwrap_or(Path::new("/"));
    let parent = std::fs::canonicalize(parent)
        .with_context(|| format!("--record {}: its directory", record.display()))?;
    let resolved = parent.join(name);
    for tree in read_write {
        let tree = std::fs::canonicalize(tree)
            .with_context(|| format!("--read-write {}", tree.display()))?;
        if resolved.starts_with(&tree) {
            anyhow::bail!(
                "--record {} lies inside the --read-write tree {}, which the job can change: \
                 write the record outside the job's trees",
                record.display(),
                tree.display()
            );
        }
    }
    Ok(())
}

fn sandbox_exec(opts: SandboxExecArgs) -> anyhow::Result<u8> {
    let mut parts = opts.command.into_iter();
    let program = parts.next().context("no PROGRAM given")?;
    let program = resolve_program(Path::new(&program))?;
    let runtime = std::env::current_exe().context("locating the kolm-enclave binary")?;
    let mut cmd = SandboxCommand::new(runtime, program);
    cmd.profile = opts.profile.parse::<Profile>()?;
    cmd.args = parts.collect();
    for entry in &opts.env {
        let (k, v) = entry
            .split_once('=')
            .with_context(|| format!("--env {entry:?} is not KEY=VALUE"))?;
        cmd.env.retain(|(name, _)| name != k);
        cmd.env.push((k.into(), v.into()));
    }
    cmd.read_only = opts
        .read_only
        .iter()
        .map(std::path::absolute)
        .collect::<Result<_, _>>()?;
    cmd.read_write = opts
        .read_write
        .iter()
        .map(std::path::absolute)
        .collect::<Result<_, _>>()?;
    if let Some(record) = &opts.record {
        refuse_record_inside(record, &cmd.read_write)?;
    }
    cmd.timeout = opts.timeout.map(Duration::from_secs);
    if opts.dangerous_no_landlock {
        cmd.landlock = LandlockMode::DangerousDisabled;
    }
    let outcome = cmd.run()?;
    let rec = &outcome.record;
    if let Some(path) = &opts.record {
        let mut bytes = serde_json::to_vec_pretty(rec)?;
        bytes.push(b'\n');
        kolm_enclave::fsutil::write_atomic(path, &bytes)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!(
        "kolm-enclave sandbox-exec: profile {} blocked_total {} landlock {} (ABI {}) listener {}{}",
        rec.profile,
        rec.blocked_total,
        rec.landlock.status,
        rec.landlock.abi,
        if rec.listener.alive_whole_run {
            "alive"
        } else {
            "FAILED"
        },
        if outcome.timed_out {
            " (timed out)"
        } else {
            ""
        },
    );
    if let Some(e) = &rec.exit.exec_error {
        anyhow::bail!("{e}");
    }
    use std::os::unix::process::ExitStatusExt;
    Ok(match (outcome.status.code(), outcome.status.signal()) {
        (Some(c), _) => u8::try_from(c).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(255),
        (None, None) => 1,
    })
}

/// The service log: `tracing` events of level INFO and above, one line
/// each on stderr (`kolm-enclave start: LEVEL message key=value ...`).
/// Spans are not recorded.
#[derive(Debug)]
struct StderrLog;

impl tracing::Subscriber for StderrLog {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::INFO
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        struct Line(String, String);
        impl tracing::field::Visit for Line {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                } else {
                    self.1.push_str(&format!(" {}={value:?}", field.name()));
                }
            }
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "message" {
                    self.0 = value.to_string();
                } else {
                    self.1.push_str(&format!(" {}={value:?}", field.name()));
                }
            }
        }
        let mut line = Line(String::new(), String::new());
        event.record(&mut line);
        let now = time::OffsetDateTime::now_utc();
        let at = kolm_format::timefmt::format_utc_seconds(now).unwrap_or_default();
        eprintln!(
            "{at} kolm-enclave start: {} {}{}",
            event.metadata().level(),
            line.0,
            line.1
        );
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}
