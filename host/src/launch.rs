//! Launching an enclave service. `--platform local` starts
//! `kolm-enclave start --listen unix:PATH --once` as a child process on this
//! machine (no TEE: `--attest sim` or `none`, or a device if the machine is
//! itself a TEE guest) and connects over its unix socket. `nitro`,
//! `qemu-snp` and `qemu-tdx` build the command that starts the enclave
//! ([`nitro`], [`qemu`]; what they share in [`recipe`]), run it and
//! connect over vsock ([`vm`]).

pub mod nitro;
pub mod qemu;
pub mod recipe;
pub mod vm;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kolm_transport::{Address, AddressConnector, Connector, Stream};

/// How long a local enclave may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a refused connection to a just-started enclave is retried.
const CONNECT_RETRY: Duration = Duration::from_secs(5);

/// Where the enclave runs (`--platform`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlatformChoice {
    Local,
    Nitro,
    QemuSnp,
    QemuTdx,
}

impl PlatformChoice {
    pub fn parse(s: &str) -> Result<PlatformChoice, LaunchError> {
        Ok(match s {
            "local" => PlatformChoice::Local,
            "nitro" => PlatformChoice::Nitro,
            "qemu-snp" => PlatformChoice::QemuSnp,
            "qemu-tdx" => PlatformChoice::QemuTdx,
            other => {
                return Err(LaunchError::UnknownPlatform {
                    value: other.to_string(),
                });
            }
        })
    }
}

/// Why the enclave could not be started or reached.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    #[error("--platform {value:?}: expected local, nitro, qemu-snp or qemu-tdx")]
    UnknownPlatform { value: String },
    #[error(
        "the kolm-enclave binary {path} does not exist (set --enclave-bin or KOLM_ENCLAVE_BIN)"
    )]
    NoEnclaveBinary { path: String },
    // The OS error is the source: `{:#}` prints it (once).
    #[error("starting {path}")]
    Spawn {
        path: String,
        source: std::io::Error,
    },
    #[error("the enclave exited before it listened ({status}): {stderr}")]
    Exited { status: String, stderr: String },
    #[error("the enclave did not listen within {0:?}")]
    Timeout(Duration),
    #[error("a service already answers on {socket}: stop it first (kolm-host stop)")]
    SocketInUse { socket: String },
    #[error(transparent)]
    Recipe(#[from] recipe::RecipeError),
    #[error("{command} failed ({status}): {stderr}")]
    Launcher {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("{command}: {error}")]
    NitroOutput {
        command: String,
        error: nitro::RunOutputError,
    },
    #[error("{command}: it started CID {started}, not {asked}")]
    WrongCid {
        command: String,
        started: u64,
        asked: u64,
    },
    #[error("{command}: {error}")]
    Pidfile {
        command: String,
        error: vm::PidfileError,
    },
    #[error(
        "the enclave service at {address} did not answer within {waited:?} (last attempt: \
         {last}); see the console log"
    )]
    BootTimeout {
        address: String,
        waited: Duration,
        last: String,
    },
    #[error("the guest behind {address} exited before its enclave service answered")]
    GuestGone { address: String },
    #[error("cancelled while the enclave started")]
    Cancelled,
    #[error(
        "--platform {0}: `launch` starts long-lived local enclaves only; for {0}, use `kolm-host \
         run --platform {0}` (one enclave per job)"
    )]
    LongLivedLocalOnly(String),
    #[error(transparent)]
    Transport(#[from] kolm_transport::TransportError),
    #[error(transparent)]
    Address(#[from] kolm_transport::AddressError),
}

/// What the local enclave is started with.
#[derive(Debug, Clone)]
pub struct LocalEnclave {
    pub binary: PathBuf,
    pub attest: String,
    pub bundle: Option<PathBuf>,
    /// `--sim-format` for the enclave (with `--attest sim`); the enclave
    /// judges the value.
    pub sim_format: Option<String>,
    pub state: PathBuf,
    /// The directory the socket is made in (private to this run).
    pub runtime_dir: PathBuf,
}

/// A started local enclave; killed and reaped when dropped.
#[derive(Debug)]
pub struct Running {
    child: Option<Child>,
    address: Address,
}

impl Running {
    /// Connects to it. The socket file exists from `bind()`, a moment
    /// before `listen()`: a refused connection is retried for a while.
    pub fn connect(&self) -> Result<Box<dyn Stream>, LaunchError> {
        let connector = AddressConnector::new(self.address.clone())?;
        let start = Instant::now();
        loop {
            match connector.connect() {
                Ok(s) => return Ok(s),
                Err(e) if start.elapsed() < CONNECT_RETRY => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Waits for it to exit on its own (it serves one connection), at most
    /// `limit`; then kills it.
    pub fn finish(mut self, limit: Duration) {
        if let Some(mut c) = self.child.take() {
            let end = Instant::now() + limit;
            while Instant::now() < end {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            terminate(&mut c, TERM_GRACE);
        }
    }
}

impl Drop for Running {
    /// SIGTERM first, so the service kills its job and removes the job's
    /// files itself; SIGKILL only if it has not gone after
    /// [`TERM_GRACE`] (its next start cleans up what that leaves).
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            terminate(&mut c, TERM_GRACE);
        }
    }
}

/// How long a local enclave has to clean up after SIGTERM.
const TERM_GRACE: Duration = Duration::from_secs(5);

/// SIGTERM to `child`, then SIGKILL if it is still there after `grace`;
/// reaped either way.
fn terminate(child: &mut Child, grace: Duration) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let end = Instant::now() + grace;
    while Instant::now() < end {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The `kolm-enclave` binary: `explicit`, else `$KOLM_ENCLAVE_BIN`, else
/// the one beside this program.
pub fn enclave_binary(explicit: Option<&Path>) -> Result<PathBuf, LaunchError> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => match std::env::var_os("KOLM_ENCLAVE_BIN") {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => std::env::current_exe()
                .ok()
                .and_then(|e| e.parent().map(|d| d.join("kolm-enclave")))
                .unwrap_or_else(|| PathBuf::from("kolm-enclave")),
        },
    };
    if !path.is_file() {
        return Err(LaunchError::NoEnclaveBinary {
            path: path.display().to_string(),
        });
    }
    Ok(path)
}

/// Starts `kolm-enclave start --once` and waits until its socket exists.
pub fn start_local(cfg: &LocalEnclave) -> Result<Running, LaunchError> {
    start(cfg, "enclave", true, Stdio::piped())
}

/// Starts a long-lived `kolm-enclave start` (many jobs, one at a time)
/// listening on `<runtime_dir>/<name>.sock`, its log in `<name>.log`
/// there; returns its pid once it listens. It outlives this process.
pub fn start_detached(cfg: &LocalEnclave, name: &str) -> Result<u32, LaunchError> {
    let log_path = cfg.runtime_dir.join(format!("{name}.log"));
    // Before the log is truncated: a live service on the socket keeps its
    // log.
    clear_stale_socket(&cfg.runtime_dir.join(format!("{name}.sock")))?;
    let log = std::fs::File::create(&log_path).map_err(|source| LaunchError::Spawn {
        path: log_path.display().to_string(),
        source,
    })?;
    let mut running = match start(cfg, name, false, Stdio::from(log)) {
        // Its stderr went to the log: say what the log says.
        Err(LaunchError::Exited { status, stderr }) if stderr.is_empty() => {
            return Err(LaunchError::Exited {
                status,
                stderr: log_tail(&log_path),
            });
        }
        other => other?,
    };
    let Some(mut child) = running.child.take() else {
        return Err(LaunchError::Timeout(START_TIMEOUT));
    };
    // Up means it answers: a hello, not merely a socket file.
    let socket = cfg.runtime_dir.join(format!("{name}.sock"));
    let start = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(LaunchError::Exited {
                status: status.to_string(),
                stderr: log_tail(&log_path),
            });
        }
        match crate::instances::hello(&socket, Duration::from_secs(2)) {
            Ok(_) => return Ok(child.id()),
            Err(_) if start.elapsed() < START_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(_) => {
                terminate(&mut child, TERM_GRACE);
                return Err(LaunchError::Timeout(START_TIMEOUT));
            }
        }
    }
}

/// The last lines of a service log, for an error message.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(10);
    lines.get(from..).unwrap_or_default().join("\n")
}

/// A socket file left at `socket` by a service that is gone is removed;
/// one that a live service still answers on is an error (two services
/// cannot share it).
fn clear_stale_socket(socket: &Path) -> Result<(), LaunchError> {
    if std::fs::symlink_metadata(socket).is_err() {
        return Ok(());
    }
    match std::os::unix::net::UnixStream::connect(socket) {
        Ok(_) => Err(LaunchError::SocketInUse {
            socket: socket.display().to_string(),
        }),
        Err(_) => std::fs::remove_file(socket).map_err(|source| LaunchError::Spawn {
            path: socket.display().to_string(),
            source,
        }),
    }
}

fn start(
    cfg: &LocalEnclave,
    name: &str,
    once: bool,
    stderr: Stdio,
) -> Result<Running, LaunchError> {
    let socket = cfg.runtime_dir.join(format!("{name}.sock"));
    let listen = format!("unix:{}", socket.display());
    let address = Address::parse(&listen)?;
    clear_stale_socket(&socket)?;
    let mut cmd = Command::new(&cfg.binary);
    cmd.arg("start")
        .arg("--listen")
        .arg(&listen)
        .arg("--attest")
        .arg(&cfg.attest)
        .arg("--state")
        .arg(&cfg.state)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    // Its own process group: a terminal's Ctrl-C (SIGINT to the
    // foreground group) reaches kolm-host, which cancels the job, and not
    // the enclave, which would die before it could remove the job's files.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    if once {
        cmd.arg("--once");
    }
    if let Some(f) = &cfg.sim_format {
        cmd.arg("--sim-format").arg(f);
    }
    if let Some(b) = &cfg.bundle {
        cmd.arg("--bundle").arg(b);
    }
    let mut child = cmd.spawn().map_err(|source| LaunchError::Spawn {
        path: cfg.binary.display().to_string(),
        source,
    })?;
    let start = Instant::now();
    loop {
        if socket.exists() {
            // Its stderr is drained so it never blocks on a full pipe.
            if let Some(mut err) = child.stderr.take() {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut err, &mut std::io::sink());
                });
            }
            return Ok(Running {
                child: Some(child),
                address,
            });
        }
        if let Ok(Some(status)) = child.try_wait() {
            let mut stderr = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut stderr);
            }
            return Err(LaunchError::Exited {
                status: status.to_string(),
                stderr: stderr.trim().to_string(),
            });
        }
        if start.elapsed() > START_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(LaunchError::Timeout(START_TIMEOUT));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
