//! Issue 20, the enclave service's exit paths and chain rules, spoken to
//! over its unix socket by a scripted host (`kolm_transport::Channel`):
//!
//! - no file holding a job's input bytes outlives the job, whatever ends
//!   it: SIGTERM to the service, SIGKILL of the supervisor (cleaned at the
//!   next start), SIGKILL of the sandboxed job, the host going away, and
//!   Ctrl-C to a real `kolm-host run`'s process group (exit 130, nothing
//!   left in the state directory, TMPDIR or the staging folder); and the
//!   chain state does not advance;
//! - a cancel racing the seal is answered with what the chain state says;
//! - a job runs from the binary the service started from, even after that
//!   file is deleted, and the service log names its start and end;
//! - one job at a time holds a state directory (a second is refused busy),
//!   and an enclave of another measurement starts a new, announced chain
//!   the verifier accepts;
//! - an input name that breaks the rules is answered with an error frame
//!   naming it.
//!
//! Each test has its own TMPDIR and state directory, and a deadline on
//! every child it starts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kolm_testkit::Deadline as _;

mod linger;
use kolm_transport::frame::{read_frame, write_frame};
use kolm_transport::message::{
    Cancel, ErrorCode, FileName, InputChunk, InputDecl, JobSubmit, LogLine,
};
use kolm_transport::{
    Address, AddressConnector, Channel, Connector, FrameOptions, Message, Stream,
};
use sha2::{Digest, Sha256};

const LIMIT: Duration = Duration::from_secs(120);

fn bin(name: &str) -> PathBuf {
    kolm_testkit::workspace_binary(name)
}

/// Says SKIP when not root (the sandbox needs it).
fn not_root() -> bool {
    let not = !kolm_testkit::is_root();
    if not {
        kolm_testkit::skip("not root: the sandbox needs it");
    }
    not
}

/// A test's own directories: TMPDIR, state, sim root.
struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let env = Env {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir(env.path("tmp")).unwrap();
        env
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn state(&self) -> PathBuf {
        self.path("state")
    }

    fn command(&self, exe: &Path) -> Command {
        let mut c = Command::new(exe);
        c.env("TMPDIR", self.path("tmp"))
            .env("KOLM_SIM_ROOT_DIR", self.path("sim-root"));
        c
    }

    /// `kolm-enclave start` from `exe` (`--once` if asked), its log in
    /// `log`; returns once it listens.
    fn start(&self, exe: &Path, attest: &str, once: bool, log: &str) -> Service {
        let socket = self.path(&format!("{log}.sock"));
        let _ = std::fs::remove_file(&socket);
        let log = self.path(&format!("{log}.log"));
        let mut c = self.command(exe);
        c.args(["start", "--attest", attest, "--listen"])
            .arg(format!("unix:{}", socket.display()))
            .arg("--state")
            .arg(self.state())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        if once {
            c.arg("--once");
        }
        let child = c.spawn().unwrap();
        let t = Instant::now();
        while !socket.exists() {
            assert!(t.elapsed() < Duration::from_secs(30), "never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        Service {
            child: Some(child),
            socket,
            log,
        }
    }
}

struct Service {
    child: Option<Child>,
    socket: PathBuf,
    log: PathBuf,
}

impl Service {
    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    fn signal(&self, sig: &str) {
        kolm_testkit::signal(sig, self.pid());
    }

    /// Waits for the service to exit; its exit status.
    fn exited(&mut self) -> std::process::ExitStatus {
        let out =
            kolm_testkit::wait_within(self.child.take().unwrap(), "kolm-enclave start", LIMIT);
        out.status
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn connect(socket: &Path) -> Channel<Box<dyn Stream>> {
    let s = raw_connect(socket);
    let opts = FrameOptions::default()
        .with_idle_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut ch = Channel::new(s, opts);
    match ch.recv().unwrap() {
        Message::Hello(_) => ch,
        other => panic!("{other:?}"),
    }
}

fn raw_connect(socket: &Path) -> Box<dyn Stream> {
    let a = Address::parse(&format!("unix:{}", socket.display())).unwrap();
    let connector = AddressConnector::new(a).unwrap();
    let t = Instant::now();
    loop {
        match connector.connect() {
            Ok(s) => return s,
            Err(e) => {
                assert!(t.elapsed() < Duration::from_secs(10), "{e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

const POLICY: &str = "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"simulated\", \"none\"]\n\
                      [egress]\nmust_be_zero = true\n";

/// Input bytes no other file holds: the corpus with a random line.
fn secret_corpus() -> (Vec<u8>, Vec<u8>) {
    let mut marker = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut marker))
        .unwrap();
    let marker = format!("SECRET-{}", hex::encode(marker)).into_bytes();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/quickstart/corpus.txt");
    let mut corpus = std::fs::read(src).unwrap();
    corpus.extend_from_slice(&marker);
    corpus.push(b'\n');
    (corpus, marker)
}

fn demo_spec() -> Vec<u8> {
    b"id = \"t\"\nkind = \"demo\"\ninputs = [\"corpus.txt\"]\neval_every = 7\n".to_vec()
}

/// A job that stages the input and then lingers (leaving a process
/// behind, so it is never sealed): `linger` seconds, also its mark.
fn lingering_spec(linger: u32) -> Vec<u8> {
    format!(
        "id = \"t\"\nkind = \"egress-selftest\"\ninputs = [\"corpus.txt\"]\nlinger_seconds = {linger}\n"
    )
    .into_bytes()
}

fn submit(ch: &mut Channel<Box<dyn Stream>>, spec: Vec<u8>, data: &[u8]) {
    ch.send(&Message::JobSubmit(JobSubmit {
        spec,
        inputs: vec![InputDecl {
            name: FileName::parse("corpus.txt").unwrap(),
            size: data.len() as u64,
            sha256: Sha256::digest(data).into(),
        }],
        policy: POLICY.as_bytes().to_vec(),
        collateral: vec![],
    }))
    .unwrap();
}

fn send_input(ch: &mut Channel<Box<dyn Stream>>, data: &[u8]) {
    ch.send(&Message::InputChunk(InputChunk {
        data: data.to_vec(),
        name: FileName::parse("corpus.txt").unwrap(),
        offset: 0,
    }))
    .unwrap();
}

/// How a conversation ended, as the host sees it.
#[derive(Debug)]
enum End {
    Artifact {
        name: String,
        bytes: Vec<u8>,
        logs: Vec<String>,
    },
    Error(ErrorCode, String),
    #[allow(dead_code)] // shown by Debug in a failure
    Closed(String),
}

fn finish(ch: &mut Channel<Box<dyn Stream>>) -> End {
    let mut bytes = Vec::new();
    let mut name = String::new();
    let mut logs = Vec::new();
    loop {
        match ch.recv() {
            Ok(Message::Progress(_)) => {}
            Ok(Message::Log(LogLine { line, .. })) => logs.push(line),
            Ok(Message::ArtifactChunk(c)) => {
                name = c.name.to_string();
                bytes.extend_from_slice(&c.data);
            }
            Ok(Message::Bye) => return End::Artifact { name, bytes, logs },
            Ok(Message::Error(e)) => return End::Error(e.code, e.message),
            Ok(other) => panic!("unexpected {other:?}"),
            Err(e) => return End::Closed(e.to_string()),
        }
    }
}

/// Every file under `dirs` holding `marker` (a job's input bytes).
fn holding(marker: &[u8], dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack: Vec<PathBuf> = dirs.to_vec();
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if m.is_dir() {
                stack.push(p);
            } else if m.is_file()
                && std::fs::read(&p).is_ok_and(|b| b.windows(marker.len()).any(|w| w == marker))
            {
                found.push(p);
            }
        }
    }
    found
}

/// Where input bytes could be: the state directory, TMPDIR, /dev/shm.
fn places(env: &Env) -> Vec<PathBuf> {
    vec![env.state(), env.path("tmp"), PathBuf::from("/dev/shm")]
}

fn wait_for_linger(linger: u32) {
    let mark = linger::mark(linger);
    let t = Instant::now();
    while kolm_testkit::processes_with(&[&mark]).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the job never lingered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn chain_sequence(state: &Path) -> Option<u64> {
    let text = std::fs::read(state.join("chain-state.json")).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
    v["sequence"].as_u64()
}

/// The artifacts and chain state in `state`, by name.
fn sealed_in(state: &Path) -> Vec<String> {
    let mut sealed: Vec<String> = std::fs::read_dir(state)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".zip") || n == "chain-state.json")
                .collect()
        })
        .unwrap_or_default();
    sealed.sort();
    sealed
}

fn nothing_sealed(state: &Path) {
    let sealed = sealed_in(state);
    assert!(sealed.is_empty(), "{sealed:?}");
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kill {
    ServiceTerm,
    Supervisor,
    Job,
    Host,
}

/// Starts a lingering job with secret input, checks its input is staged
/// (so the search below can find it), ends it by `how`, and checks no
/// file holds the input afterwards and nothing was sealed.
fn exit_path(how: Kill, linger: u32) {
    if !kolm_testkit::is_root() {
        kolm_testkit::skip("not root: no PID namespace for the job's processes");
        return;
    }
    let env = Env::new();
    let once = matches!(how, Kill::Job | Kill::Host);
    let mut service = env.start(&bin("kolm-enclave"), "none", once, "service");
    let (corpus, marker) = secret_corpus();
    let mut ch = connect(&service.socket);
    submit(&mut ch, lingering_spec(linger), &corpus);
    send_input(&mut ch, &corpus);
    wait_for_linger(linger);
    assert!(
        !holding(&marker, &places(&env)).is_empty(),
        "the running job's input is not where this test looks"
    );
    match how {
        Kill::ServiceTerm => {
            service.signal("TERM");
            let status = service.exited();
            assert_eq!(status.code(), Some(128 + 15), "{}", service.log());
        }
        Kill::Supervisor => {
            service.signal("KILL");
            service.exited();
            // SIGKILL leaves the files; the next start removes them.
            drop(ch);
            let again = env.start(&bin("kolm-enclave"), "none", false, "again");
            drop(again);
            let left = holding(&marker, &places(&env));
            assert!(left.is_empty(), "after a restart: {left:?}");
            nothing_sealed(&env.state());
            return;
        }
        Kill::Job => {
            let job = linger::job_of(linger);
            assert_eq!(job.len(), 1, "{job:?}");
            kolm_testkit::signal("KILL", job[0]);
            match finish(&mut ch) {
                End::Error(ErrorCode::JobFailed, _) => {}
                other => panic!("{other:?}"),
            }
            service.exited();
        }
        Kill::Host => {
            drop(ch);
            service.exited();
        }
    }
    let left = holding(&marker, &places(&env));
    assert!(left.is_empty(), "{how:?}: {left:?}\n{}", service.log());
    nothing_sealed(&env.state());
}

#[test]
fn sigterm_to_the_service_mid_job_leaves_no_input_and_no_link() {
    exit_path(Kill::ServiceTerm, 61);
}

#[test]
fn sigkill_of_the_supervisor_mid_job_is_cleaned_at_the_next_start() {
    exit_path(Kill::Supervisor, 67);
}

#[test]
fn sigkill_of_the_job_mid_job_leaves_no_input_and_no_link() {
    exit_path(Kill::Job, 71);
}

#[test]
fn the_host_going_away_mid_job_leaves_no_input_and_no_link() {
    exit_path(Kill::Host, 73);
}

/// `kolm-host run --attest none` of the job `spec` with `corpus` as its
/// input, from the folder `dir` (spec, input and policy written there),
/// into this test's state, staging in this test's `staging` folder.
fn host_run(env: &Env, dir: &str, spec: &[u8], corpus: &[u8]) -> Command {
    let dir = env.path(dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("job.toml"), spec).unwrap();
    std::fs::write(dir.join("corpus.txt"), corpus).unwrap();
    std::fs::write(dir.join("policy.toml"), POLICY).unwrap();
    let mut c = env.command(&bin("kolm-host"));
    c.args(["run", "--attest", "none", "--state"])
        .arg(env.state())
        .arg("--enclave-bin")
        .arg(bin("kolm-enclave"))
        .arg("--out")
        .arg(dir.join("artifact.zip"))
        .arg(dir.join("job.toml"))
        .env("KOLM_STAGING_DIR", env.path("staging"));
    c
}

/// The entries of `dirs` (not below them: the enclave makes its job
/// directories right there) whose names say they hold a job's plaintext:
/// a job's work directory, the service's input directory, and the
/// input directory of older versions.
fn job_dirs(dirs: &[PathBuf]) -> Vec<PathBuf> {
    use kolm_enclave::fsutil::{INPUTS_DIR_PREFIX, JOB_DIR_PREFIX, LEGACY_INPUTS_PREFIX};
    dirs.iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            [JOB_DIR_PREFIX, INPUTS_DIR_PREFIX, LEGACY_INPUTS_PREFIX]
                .iter()
                .any(|p| name.starts_with(p))
        })
        .map(|e| e.path())
        .collect()
}

/// Ctrl-C at a terminal is SIGINT to the whole foreground process group.
/// `kolm-host run --attest none` of a lingering job with a secret input
/// runs in a group of its own (as a shell's foreground job) and stages in
/// a folder of this test's (`KOLM_STAGING_DIR`); once the input is staged
/// there, SIGINT goes to the whole group. The host exits 130; the enclave
/// it started, in a group of its own, is told to cancel, kills the job and
/// removes its files: no file holds the input and no job or input
/// directory is left in the state directory, TMPDIR or the staging
/// folder, no job process survives, no artifact is written, and the chain
/// state is byte for byte what the run before left.
#[test]
fn ctrl_c_to_the_hosts_process_group_mid_job_leaves_no_plaintext_and_no_seal() {
    if not_root() {
        return;
    }
    let env = Env::new();
    let staging = env.path("staging");
    std::fs::create_dir(&staging).unwrap();
    let (corpus, marker) = secret_corpus();
    // A job sealed first, so that there is a chain state to advance.
    let first = host_run(&env, "first", &demo_spec(), &corpus).output_within(LIMIT);
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let chain = env.state().join("chain-state.json");
    let chain_before = std::fs::read(&chain).unwrap();
    let sealed_before = sealed_in(&env.state());

    let linger = 79;
    let mut cmd = host_run(&env, "second", &lingering_spec(linger), &corpus);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let host = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_linger(linger);
    let places = [env.state(), env.path("tmp"), staging.clone()];
    assert!(
        !holding(&marker, std::slice::from_ref(&staging)).is_empty(),
        "the running job's input is not staged in KOLM_STAGING_DIR"
    );
    // The host leads its group: the group's id is its pid.
    kolm_testkit::signal_group("INT", host.id());
    let out = kolm_testkit::wait_within(host, "kolm-host after SIGINT to its group", LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    // The enclave cleans up once it has the cancel (or the connection
    // ends), then exits (`--once`).
    let state = env.state().display().to_string();
    let t = Instant::now();
    while !kolm_testkit::processes_with(&[&state, "start"]).is_empty()
        || !kolm_testkit::processes_with(&[&linger::mark(linger)]).is_empty()
    {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the enclave or its job outlived the cancel: {:?}\n{stderr}",
            kolm_testkit::processes_with(&[&state])
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = holding(&marker, &places);
    assert!(left.is_empty(), "input bytes left: {left:?}\n{stderr}");
    let dirs = job_dirs(&places);
    assert!(dirs.is_empty(), "job directories left: {dirs:?}\n{stderr}");
    assert!(!env.path("second/artifact.zip").exists(), "{stderr}");
    assert_eq!(sealed_in(&env.state()), sealed_before, "{stderr}");
    assert_eq!(
        std::fs::read(&chain).unwrap(),
        chain_before,
        "the chain state changed\n{stderr}"
    );
}

/// Issue 20: a cancel right after the last input chunk was answered
/// "cancelled" while the job was sealed anyway. Over a sweep of delays,
/// the answer always matches the chain state: cancelled and the state
/// unchanged, or the artifact delivered and the state one further (24
/// delays, 0 to 575 ms: the demo job takes about 0.3 s here).
#[test]
fn a_cancel_racing_the_seal_is_answered_with_what_the_chain_says() {
    if not_root() {
        return;
    }
    let env = Env::new();
    let service = env.start(&bin("kolm-enclave"), "none", false, "service");
    let (corpus, _) = secret_corpus();
    let (mut cancelled, mut sealed, mut late) = (0, 0, 0);
    for step in 0..24u64 {
        let before = chain_sequence(&env.state()).unwrap_or(0);
        let mut ch = connect(&service.socket);
        submit(&mut ch, demo_spec(), &corpus);
        send_input(&mut ch, &corpus);
        std::thread::sleep(Duration::from_millis(step * 25));
        // The service may have finished and closed: then the send fails.
        let _ = ch.send(&Message::Cancel(Cancel {
            reason: format!("try {step}"),
        }));
        let end = finish(&mut ch);
        let after = chain_sequence(&env.state()).unwrap_or(0);
        match end {
            End::Error(ErrorCode::Cancelled, m) => {
                assert_eq!(
                    after, before,
                    "try {step}: told cancelled ({m}), chain advanced"
                );
                cancelled += 1;
            }
            End::Artifact { name, bytes, logs } => {
                late += usize::from(logs.iter().any(|l| l.contains("after the commit point")));
                assert!(!bytes.is_empty(), "try {step}");
                assert_eq!(
                    after,
                    before + 1,
                    "try {step}: artifact {name}, chain not advanced"
                );
                assert_eq!(name, format!("t-{before}.zip"));
                sealed += 1;
            }
            other => panic!("try {step}: {other:?}"),
        }
    }
    eprintln!(
        "cancelled {cancelled}, sealed and delivered {sealed} ({late} of them after a cancel that \
         came past the commit point)"
    );
    drop(service);
}

/// Issue 20: after a rebuild under a running service every job failed
/// with `program .../kolm-enclave (deleted)`. The service is started from
/// a copy of both binaries (the runtime and, beside it, the job binary it
/// finds there), which are then deleted: the job still seals, each binary
/// run from the service's copy of what it opened at start, and the service
/// log names its start and end.
#[test]
fn deleted_runtime_and_jobs_binaries_change_nothing_and_the_log_names_the_job() {
    if not_root() {
        return;
    }
    let env = Env::new();
    let copy = env.path("kolm-enclave");
    std::fs::copy(bin("kolm-enclave"), &copy).unwrap();
    let jobs = env.path("kolm-jobs");
    std::fs::copy(bin("kolm-jobs"), &jobs).unwrap();
    let mut service = env.start(&copy, "none", true, "service");
    std::fs::remove_file(&copy).unwrap();
    std::fs::remove_file(&jobs).unwrap();
    let (corpus, _) = secret_corpus();
    let mut ch = connect(&service.socket);
    submit(&mut ch, demo_spec(), &corpus);
    send_input(&mut ch, &corpus);
    match finish(&mut ch) {
        End::Artifact { name, .. } => assert_eq!(name, "t-0.zip"),
        other => panic!("{other:?}\n{}", service.log()),
    }
    service.exited();
    let log = service.log();
    for binary in ["runtime binary", "jobs binary"] {
        assert!(
            log.contains(&format!("binary=\"{binary}\"")),
            "the {binary} was not run from a copy: {log}"
        );
    }
    assert!(log.contains("job started job=t kind=demo"), "{log}");
    assert!(
        log.contains("job ended job=t kind=demo outcome=\"sealed\""),
        "{log}"
    );
}

/// `kolm-enclave sim-root`: the root's PEM, for the verifier.
fn sim_root(env: &Env) -> PathBuf {
    let pem = env.path("sim-root.pem");
    let out = kolm_testkit::output_within(
        env.command(&bin("kolm-enclave"))
            .arg("sim-root")
            .arg("--out")
            .arg(&pem),
        LIMIT,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    pem
}

fn verify(env: &Env, artifact: &Path, extra: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    std::fs::write(env.path("policy.toml"), POLICY).unwrap();
    let root = sim_root(env);
    let out = kolm_testkit::output_within(
        Command::new(bin("kolm-verify"))
            .arg(artifact)
            .arg("--policy")
            .arg(env.path("policy.toml"))
            .arg("--dangerous-trust-sim-root")
            .arg(root)
            .args(extra),
        LIMIT,
    );
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `kolm-enclave run --attest sim` of the demo job into the test's state.
fn run_once(env: &Env) -> std::process::Output {
    run_from(env, &bin("kolm-enclave"))
}

fn run_from(env: &Env, exe: &Path) -> std::process::Output {
    let dir = env.path("job");
    std::fs::create_dir_all(&dir).unwrap();
    let (corpus, _) = secret_corpus();
    std::fs::write(dir.join("corpus.txt"), corpus).unwrap();
    std::fs::write(dir.join("job.toml"), demo_spec()).unwrap();
    std::fs::write(dir.join("policy.toml"), POLICY).unwrap();
    kolm_testkit::output_within(
        env.command(exe)
            .args(["run", "--attest", "sim", "--spec"])
            .arg(dir.join("job.toml"))
            .arg("--input-dir")
            .arg(&dir)
            .arg("--policy")
            .arg(dir.join("policy.toml"))
            .arg("--out")
            .arg(env.state()),
        LIMIT,
    )
}

/// Issue 20: two concurrent runs on one state directory were sealed as one
/// chain's sequence 1 and 2, a link the verifier rejects. While a service's
/// job holds the directory (its inputs not yet all sent), a `kolm-enclave
/// run` and a second service's job are refused busy, naming the directory
/// and the holder, before any input is sent; the holder's artifact then
/// verifies with `--previous`.
#[test]
fn a_second_job_on_a_held_state_directory_is_refused_busy() {
    if not_root() {
        return;
    }
    let env = Env::new();
    let first = run_once(&env);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let service = env.start(&bin("kolm-enclave"), "sim", false, "service");
    let (corpus, _) = secret_corpus();
    let mut ch = connect(&service.socket);
    submit(&mut ch, demo_spec(), &corpus);
    // The service holds the state once it has the job-submit.
    let lock = env.state().join(".lock");
    let t = Instant::now();
    while !std::fs::read_to_string(&lock).is_ok_and(|t| t.contains("kolm-enclave start")) {
        assert!(t.elapsed() < Duration::from_secs(30), "never held");
        std::thread::sleep(Duration::from_millis(20));
    }
    let refused = run_once(&env);
    let text = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{text}");
    assert!(text.contains("busy: state directory"), "{text}");
    assert!(
        text.contains(&format!("kolm-enclave start (pid {})", service.pid())),
        "{text}"
    );

    let other = env.start(&bin("kolm-enclave"), "sim", true, "other");
    let mut ch2 = connect(&other.socket);
    submit(&mut ch2, demo_spec(), &corpus);
    match finish(&mut ch2) {
        End::Error(ErrorCode::Busy, m) => {
            assert!(m.contains(&env.state().display().to_string()), "{m}");
        }
        other => panic!("{other:?}"),
    }

    send_input(&mut ch, &corpus);
    match finish(&mut ch) {
        End::Artifact { name, .. } => assert_eq!(name, "t-1.zip"),
        other => panic!("{other:?}"),
    }
    let prev = env.state().join("t-0.zip");
    let (_, out) = verify(
        &env,
        &env.state().join("t-1.zip"),
        &["--previous".as_ref(), prev.as_os_str()],
    );
    assert!(out.contains("verdict: SIMULATED"), "{out}");
    assert!(out.contains("[PASS] chain"), "{out}");
}

/// Issue 20: after a rebuild the enclave linked its next receipt to one of
/// another measurement, which the verifier rejects. A service started from
/// a binary of another measurement (a copy with one byte appended: the
/// simulated measurement is the binary's SHA-384) starts a new chain,
/// announces it naming both measurements, and the verifier accepts the new
/// genesis.
#[test]
fn an_enclave_of_another_measurement_starts_a_new_announced_chain() {
    if not_root() {
        return;
    }
    let env = Env::new();
    let first = run_once(&env);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let state_file = env.state().join("chain-state.json");
    let first_state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state_file).unwrap()).unwrap();
    let rebuilt = env.path("kolm-enclave");
    let mut bytes = std::fs::read(bin("kolm-enclave")).unwrap();
    bytes.push(0);
    std::fs::write(&rebuilt, &bytes).unwrap();
    drop(bytes);
    std::fs::set_permissions(
        &rebuilt,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    // The job binary it finds beside itself.
    std::fs::copy(bin("kolm-jobs"), env.path("kolm-jobs")).unwrap();
    let mut service = env.start(&rebuilt, "sim", true, "service");
    let (corpus, _) = secret_corpus();
    let mut ch = connect(&service.socket);
    submit(&mut ch, demo_spec(), &corpus);
    send_input(&mut ch, &corpus);
    let (name, logs) = match finish(&mut ch) {
        End::Artifact { name, logs, .. } => (name, logs),
        other => panic!("{other:?}\n{}", service.log()),
    };
    service.exited();
    assert_eq!(name, "t-chain1-0.zip");
    let notice = logs
        .iter()
        .find(|l| l.starts_with("new receipt chain 1 started"))
        .unwrap_or_else(|| panic!("{logs:?}"));
    assert_eq!(
        notice.matches("platform simulated measurement ").count(),
        2,
        "{notice}"
    );
    assert!(
        service.log().contains("new receipt chain 1 started"),
        "{}",
        service.log()
    );
    let (_, out) = verify(&env, &env.state().join(&name), &[]);
    assert!(out.contains("verdict: SIMULATED"), "{out}");
    assert!(
        out.contains("first receipt of its chain (sequence 0)"),
        "{out}"
    );
    // A chain state of the old format (no platform, no measurement) is
    // read and linked to as before; the verifier then refuses that link
    // naming both platforms and measurements.
    let old_format = serde_json::json!({
        "previous": first_state["previous"],
        "sequence": 1,
    });
    std::fs::write(&state_file, old_format.to_string()).unwrap();
    let linked = run_from(&env, &rebuilt);
    assert!(
        linked.status.success(),
        "{}",
        String::from_utf8_lossy(&linked.stderr)
    );
    let (code, out) = verify(
        &env,
        &env.state().join("t-1.zip"),
        &[
            "--previous".as_ref(),
            env.state().join("t-0.zip").as_os_str(),
        ],
    );
    assert_ne!(code, Some(0), "{out}");
    let named = "different platform or measurement: previous platform simulated measurement";
    assert!(out.contains(named), "{out}");
    assert!(
        out.contains(", this receipt platform simulated measurement "),
        "{out}"
    );
}

/// Issue 20: input names such as `../escape` were answered by closing the
/// connection. Each is answered with an error frame naming it (escaped)
/// and the rule it breaks.
#[test]
fn bad_input_names_get_an_error_frame_naming_them() {
    let env = Env::new();
    let cases: [(&str, &str, &str); 4] = [
        ("../escape", "AAAAAAAAA", "contains `/`"),
        ("/etc/passwd", "BBBBBBBBBBB", "contains `/`"),
        ("..", "CC", "starts with `.`"),
        ("a\0b", "DDD", "control character"),
    ];
    for (bad, placeholder, rule) in cases {
        let service = env.start(&bin("kolm-enclave"), "none", true, "service");
        let opts = FrameOptions::default()
            .with_idle_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut s = raw_connect(&service.socket);
        let hello = read_frame(&mut *s, &opts).unwrap().unwrap();
        assert!(matches!(
            Message::decode(&hello).unwrap(),
            Message::Hello(_)
        ));
        let job = Message::JobSubmit(JobSubmit {
            spec: demo_spec(),
            inputs: vec![InputDecl {
                name: FileName::parse(placeholder).unwrap(),
                size: 1,
                sha256: [0; 32],
            }],
            policy: POLICY.as_bytes().to_vec(),
            collateral: vec![],
        });
        let mut payload = job.encode().unwrap();
        let at = payload
            .windows(placeholder.len())
            .position(|w| w == placeholder.as_bytes())
            .unwrap();
        payload[at..at + placeholder.len()].copy_from_slice(bad.as_bytes());
        write_frame(&mut *s, &payload, &opts).unwrap();
        // A host sends its input right behind the job-submit.
        let chunk = Message::InputChunk(InputChunk {
            data: vec![b'x'; 256 * 1024],
            name: FileName::parse(placeholder).unwrap(),
            offset: 0,
        });
        let _ = write_frame(&mut *s, &chunk.encode().unwrap(), &opts);
        let reply = read_frame(&mut *s, &opts)
            .unwrap_or_else(|e| panic!("{bad:?}: no error frame: {e}"))
            .unwrap_or_else(|| panic!("{bad:?}: closed without an error frame"));
        match Message::decode(&reply).unwrap() {
            Message::Error(e) => {
                assert!(
                    matches!(e.code, ErrorCode::Malformed | ErrorCode::InputRejected),
                    "{bad:?}: {e:?}"
                );
                let escaped = format!("{bad:?}");
                assert!(e.message.contains(&escaped), "{bad:?}: {}", e.message);
                assert!(e.message.contains(rule), "{bad:?}: {}", e.message);
            }
            other => panic!("{bad:?}: {other:?}"),
        }
        drop(service);
    }
}
