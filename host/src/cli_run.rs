//! `kolm-host run JOB.toml`, as named steps: read and check everything
//! the run needs before anything starts ([`prepare`]), reach an enclave
//! ([`connect`]), converse with it under the deadlines and the identity
//! judgement ([`converse`]), then keep the artifact under the host's own
//! name only once the verifier and [`kolm_host::accept`] took it
//! ([`keep`]), and say what came of it ([`tell`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use kolm_host::accept::Acceptance;
use kolm_host::identity::SimRootLoadError;
use kolm_host::job::{self, Job};
use kolm_host::launch::{self, LocalEnclave, PlatformChoice};
use kolm_host::session::{self, Event};
use kolm_policy::{Platform, Policy};
use kolm_transport::{Channel, Connector, FrameOptions, Stream};
use kolm_verifier::artifact::{VerifyAt, VerifyOptions, verify_artifact};
use kolm_verifier::report::{Verdict, VerifyReport};

use crate::display::{self, Display, say};
use crate::{DEFAULT_OUT_DIR, MAX_INPUT_BYTES, RunArgs};

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

/// Everything read and checked before anything starts.
struct Prepared {
    job: Job,
    policy: Policy,
    recipe: Option<launch::recipe::Recipe>,
    /// The collateral files sent in job-submit.
    bundle: Vec<kolm_transport::message::CollateralFile>,
}

/// The switches that decide what the host trusts, from the flags and
/// whether the enclave is one this host starts itself.
struct Trust {
    sim: SimTrust,
    allow_unattested: bool,
}

/// The enclave reached: the local one this host started (stopped after
/// the job), the stream, and the enclave binary (for the sim root).
struct Connected {
    local: Option<launch::Running>,
    stream: Box<dyn Stream>,
    binary: Option<PathBuf>,
}

pub(crate) fn run(a: &RunArgs) -> anyhow::Result<ExitCode> {
    let p = prepare(a)?;
    if a.dry_run {
        print_plan(&p.job, a, p.recipe.as_ref());
        return Ok(ExitCode::SUCCESS);
    }
    let runtime = tempfile::Builder::new()
        .prefix("kolm-host-")
        .tempdir()
        .context("runtime directory")?;
    let cancelled = cancel_on_ctrl_c()?;
    let trust = trust(a, p.recipe.is_some());
    // A guest started by a launch recipe: stopped when dropped (on any
    // error), or after the job.
    let mut vm: Option<launch::vm::StartedVm> = None;
    let Some(enclave) = connect(a, &p, runtime.path(), &cancelled, &mut vm)? else {
        return Ok(ExitCode::from(130));
    };
    let binary = enclave.binary.clone();
    let sim_root = || trusted_sim_root(&trust.sim, runtime.path(), binary.as_deref());
    let outcome = match converse(a, &p, enclave, &trust, &sim_root, &cancelled)? {
        Some(o) => o,
        None => return Ok(ExitCode::from(130)),
    };
    if let Some(vm) = vm.take()
        && let Err(e) = vm.stop()
    {
        // The artifact is in hand: say so, do not lose it.
        eprintln!("kolm-host: WARNING: stopping the enclave after the job: {e}");
    }
    let (out, report, judged) = keep(a, &p, &outcome, &trust, &sim_root)?;
    tell(a, &p, &out, &outcome, &report, &judged);
    Ok(if judged.accepted {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The job, its policy, the launch recipe and the bundle, each checked,
/// and `--out` free: before anything starts, so a job is never run for
/// nothing.
fn prepare(a: &RunArgs) -> anyhow::Result<Prepared> {
    let job = job::load(&a.job, a.policy.as_deref(), None, MAX_INPUT_BYTES)?;
    let policy =
        Policy::from_toml_str(std::str::from_utf8(&job.policy).context("the policy is not UTF-8")?)
            .with_context(|| format!("policy {}", job.policy_path.display()))?;
    let platform = PlatformChoice::parse(&a.platform)?;
    let recipe = a.recipe.recipe(platform)?;
    // The bundle travels in job-submit: read (and size-checked) first.
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
        anyhow::ensure!(
            a.force || !out.exists(),
            kolm_host::output::OutputError::Exists {
                path: out.display().to_string()
            }
        );
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
    Ok(Prepared {
        job,
        policy,
        recipe,
        bundle,
    })
}

/// Ctrl-C: while the enclave starts, it is stopped; while the job runs,
/// the enclave is told to kill the job (nothing is sealed). Exit 130,
/// within a second whatever the host waits on (a stalled peer included):
/// the enclave cleans up on its own when the connection ends (it runs in
/// its own process group, so the terminal's Ctrl-C does not kill it
/// before it can).
fn cancel_on_ctrl_c() -> anyhow::Result<Arc<AtomicBool>> {
    let cancelled = Arc::new(AtomicBool::new(false));
    let flag = cancelled.clone();
    ctrlc::set_handler(move || {
        flag.store(true, Ordering::SeqCst);
        std::thread::sleep(INTERRUPT_EXIT);
        eprintln!("kolm-host: interrupted: no artifact");
        std::process::exit(130);
    })
    .context("installing the Ctrl-C handler")?;
    Ok(cancelled)
}

/// A local enclave this host starts with `--attest none` or `--attest sim`
/// is trusted as what it was told to be; anything else only under the
/// `--dangerous-*` switches.
fn trust(a: &RunArgs, has_recipe: bool) -> Trust {
    let local = a.connect.is_none() && !has_recipe;
    Trust {
        sim: match &a.dangerous_trust_sim_root {
            Some(pem) => SimTrust::Explicit(pem.clone()),
            None if local && a.attest == "sim" => SimTrust::Installation,
            None => SimTrust::None,
        },
        allow_unattested: a.dangerous_allow_unattested || (local && a.attest == "none"),
    }
}

/// Reaches the enclave: a guest started by the launch recipe, a running
/// service (`--connect`), or a local one started for this job. `None`:
/// cancelled while a guest booted (it was stopped).
fn connect(
    a: &RunArgs,
    p: &Prepared,
    runtime: &Path,
    cancelled: &AtomicBool,
    vm: &mut Option<launch::vm::StartedVm>,
) -> anyhow::Result<Option<Connected>> {
    Ok(Some(match &a.connect {
        None if let Some(recipe) = &p.recipe => {
            std::fs::create_dir_all(a.recipe.runtime_dir())
                .with_context(|| format!("creating {}", a.recipe.runtime_dir().display()))?;
            eprintln!("kolm-host: starting: {}", recipe.shell_line());
            let started = vm.insert(launch::vm::start(recipe)?);
            eprintln!(
                "kolm-host: waiting for the enclave service at {}",
                recipe.connect
            );
            let stream = match started.connect(a.recipe.boot_timeout(), cancelled) {
                Err(launch::LaunchError::Cancelled) => {
                    drop(vm.take());
                    eprintln!("kolm-host: cancelled: the enclave was stopped; no artifact");
                    return Ok(None);
                }
                other => other?,
            };
            Connected {
                local: None,
                stream,
                binary: launch::enclave_binary(a.enclave_bin.as_deref()).ok(),
            }
        }
        Some(address) => {
            let address = kolm_transport::Address::parse(address)?;
            Connected {
                local: None,
                stream: kolm_transport::AddressConnector::new(address)?.connect()?,
                binary: launch::enclave_binary(a.enclave_bin.as_deref()).ok(),
            }
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
                runtime_dir: runtime.to_path_buf(),
            })?;
            let stream = enclave.connect()?;
            Connected {
                local: Some(enclave),
                stream,
                binary: Some(binary),
            }
        }
    }))
}

/// The conversation: the hello judged before anything is sent, then the
/// job, under the hello, frame and job deadlines. `None`: cancelled
/// (Ctrl-C), the enclave killed the job.
fn converse(
    a: &RunArgs,
    p: &Prepared,
    enclave: Connected,
    trust: &Trust,
    sim_root: &dyn Fn() -> Result<kolm_verifier::sim::SimRoots, SimRootLoadError>,
    cancelled: &AtomicBool,
) -> anyhow::Result<Option<session::Outcome>> {
    let deadlines = session::Deadlines {
        hello: Duration::from_secs(a.hello_timeout.max(1)),
        job: Duration::from_secs(a.job_timeout.unwrap_or_else(|| {
            p.policy
                .limits
                .max_job_seconds
                .map_or(24 * 3600, |s| s.saturating_add(SEAL_ALLOWANCE_SECONDS))
        })),
        ..session::Deadlines::default()
    };
    // A frame that began must end, and a write must not block, within
    // FRAME_TIMEOUT: a peer that stalls mid-frame ends the conversation.
    let frames = FrameOptions::default()
        .with_frame_timeout(Some(FRAME_TIMEOUT))?
        .with_write_timeout(Some(FRAME_TIMEOUT))?;
    let mut ch = Channel::new(enclave.stream, frames);
    let mut display = Display::new(a.json);
    let mut on_event = |e: Event| display.event(e);
    let mut get_sim_root = || sim_root();
    let mut identity = kolm_host::identity::IdentityTrust {
        policy: &p.policy,
        bundle: a.bundle.as_deref(),
        sim_root: &mut get_sim_root,
        dangerous_allow_unattested: trust.allow_unattested,
        dangerous_any_measurement: a.dangerous_any_measurement,
    };
    let mut check_identity = |hello: &kolm_transport::message::Hello| {
        kolm_host::identity::verify(hello, &mut identity, time::OffsetDateTime::now_utc())
    };
    let outcome = session::submit(
        &mut ch,
        &p.job,
        &p.bundle,
        &mut check_identity,
        cancelled,
        deadlines,
        &mut on_event,
    );
    display.finish();
    let outcome = match outcome {
        Err(session::SessionError::Cancelled) => {
            eprintln!("kolm-host: cancelled: the enclave killed the job; no artifact");
            return Ok(None);
        }
        other => other?,
    };
    drop(ch);
    if let Some(local) = enclave.local {
        local.finish(Duration::from_secs(10));
    }
    Ok(Some(outcome))
}

/// Writes the artifact's bytes to a temp file beside the destination,
/// verifies them there (the artifact is only bytes until the verifier
/// has judged it), and puts them at the host's own name only once
/// [`kolm_host::accept`] took them; else as `NAME.rejected.zip`.
fn keep(
    a: &RunArgs,
    p: &Prepared,
    outcome: &session::Outcome,
    trust: &Trust,
    sim_root: &dyn Fn() -> Result<kolm_verifier::sim::SimRoots, SimRootLoadError>,
) -> anyhow::Result<(PathBuf, VerifyReport, Acceptance)> {
    let out_dir = match &a.out {
        Some(path) => match path.parent() {
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
    let dangerous_trust_sim_root = if outcome.hello.platform == Platform::Simulated {
        Some(sim_root()?)
    } else {
        None
    };
    let opts = VerifyOptions {
        policy: Some(p.policy.clone()),
        dangerous_trust_sim_root,
        dangerous_allow_unattested: trust.allow_unattested,
        dangerous_any_measurement: a.dangerous_any_measurement,
        ..VerifyOptions::at(VerifyAt::Instant(time::OffsetDateTime::now_utc()))
    };
    let report = verify_artifact(staged.path(), &opts).context("verifying the artifact")?;
    let judged = kolm_host::accept::judge(
        &report,
        outcome.hello.platform,
        &outcome.hello.identity_key,
        &p.job,
        a.dangerous_any_measurement,
    );
    let sequence = report.manifest.as_ref().map(|m| m.chain.sequence);
    let wanted = match &a.out {
        Some(path) => path.clone(),
        None => kolm_host::output::default_path(&out_dir, &p.job, sequence),
    };
    let out = if judged.accepted {
        match a.out {
            Some(_) => staged.place(&wanted, a.force)?,
            // A default name that is taken (another chain's artifact of
            // the same job and sequence) is not replaced: the next free
            // name is used, and said.
            None => {
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
    if let Err(why) = &judged.for_this_job {
        eprintln!("kolm-host: REJECTED: the artifact is not the one for this job: {why}");
    }
    Ok((out, report, judged))
}

/// The result: the summary of the sealed metrics, the verdict line (a
/// `done` JSON line with `--json`), the warnings of a simulated or
/// unattested run, and the offline check to run.
fn tell(
    a: &RunArgs,
    p: &Prepared,
    out: &Path,
    outcome: &session::Outcome,
    report: &VerifyReport,
    judged: &Acceptance,
) {
    let json = a.json;
    let mut check = format!(
        "kolm-verify {} --policy {}",
        out.display(),
        p.job.policy_path.display()
    );
    if outcome.hello.platform == Platform::Simulated {
        check.push_str(" --dangerous-trust-sim-root target/kolm-host/sim-root.pem");
    }
    let verdict = judged.verdict;
    let verdict_text = format!("{verdict:?}").to_lowercase();
    if let Some(m) = &report.manifest {
        display::summary(json, m, Some(&p.policy), judged.accepted);
    }
    say(
        json,
        serde_json::json!({
            "event": "done",
            "artifact": out.display().to_string(),
            "platform": outcome.hello.platform.to_string(),
            "verdict": verdict_text,
            "reason": report.reason,
            "signed_by_the_enclave": judged.signed_by_the_enclave,
            "identity": outcome.identity.name(),
            "accepted": judged.accepted,
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
            if judged.signed_by_the_enclave {
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
) -> Result<kolm_verifier::sim::SimRoots, SimRootLoadError> {
    match trust {
        SimTrust::Explicit(pem) => {
            let path = || pem.display().to_string();
            let bytes = std::fs::read(pem).map_err(|error| SimRootLoadError::Unreadable {
                path: path(),
                error,
            })?;
            kolm_verifier::sim::SimRoots::parse(&bytes).map_err(|error| SimRootLoadError::Invalid {
                path: path(),
                error,
            })
        }
        SimTrust::Installation => load_sim_root(runtime, enclave_bin)
            .map_err(|e| SimRootLoadError::Installation { error: e.into() }),
        SimTrust::None => Err(SimRootLoadError::NotTrusted),
    }
}

/// The sim roots of the enclave binary this host launches (every format
/// root the installation has), exported into `dir` and parsed.
fn load_sim_root(
    dir: &Path,
    enclave_bin: Option<&Path>,
) -> anyhow::Result<kolm_verifier::sim::SimRoots> {
    let pem = dir.join("sim-root.pem");
    crate::sim_root(&pem, enclave_bin, false)?;
    let bytes = std::fs::read(&pem).context("reading the sim roots")?;
    kolm_verifier::sim::SimRoots::parse(&bytes).context("the sim roots")
}
