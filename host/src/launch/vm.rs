//! Running a [`Recipe`]: start the command, wait for the enclave service
//! to answer on vsock (bounded), and stop the enclave again on failure,
//! on Ctrl-C or when the job is done.
//!
//! Both launchers return once the enclave is set up: `nitro-cli
//! run-enclave` by design, QEMU because the recipe passes `-daemonize`.
//! A launcher that exits non-zero is reported with its stderr, and nothing
//! is connected to.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kolm_transport::{Address, AddressConnector, Connector, Stream};

use super::LaunchError;
use super::nitro;
use super::recipe::{Recipe, Stop};

/// How long the launcher command may run.
const LAUNCHER_TIMEOUT: Duration = Duration::from_secs(300);
/// Most bytes of a launcher's stdout or stderr kept.
const MAX_OUTPUT: u64 = 64 * 1024;
/// Pause between connection attempts while the guest boots.
const RETRY_PAUSE: Duration = Duration::from_millis(500);
/// How long a stopped QEMU gets before SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(10);

/// A started enclave; stopped when dropped.
#[derive(Debug)]
pub struct StartedVm {
    handle: Option<Handle>,
    address: Address,
}

#[derive(Debug)]
enum Handle {
    Nitro { program: String, enclave_id: String },
    Qemu { pid: i32 },
}

/// What a finished command left.
struct Finished {
    status: std::process::ExitStatus,
    stdout: Vec<u8>,
    stderr: String,
}

/// Runs `argv` to its end (at most `limit`), keeping its output.
fn run(argv: &[String], limit: Duration) -> Result<Finished, LaunchError> {
    let (program, args) = argv.split_first().ok_or_else(|| LaunchError::Launcher {
        command: String::new(),
        status: "not run".into(),
        stderr: "empty command line".into(),
    })?;
    let mut tries = 0;
    let mut child = loop {
        let spawned = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        match spawned {
            // ETXTBSY: a program file just written (an installer, a test's
            // fake) can still be open in a child some other thread forked
            // and has not yet exec'd; that passes within milliseconds.
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 20 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(25));
            }
            other => {
                break other.map_err(|source| LaunchError::Spawn {
                    path: program.clone(),
                    source,
                })?;
            }
        }
    };
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            if let Some(p) = pipe {
                let mut p = p.take(MAX_OUTPUT);
                let _ = p.read_to_end(&mut out);
                // Drain the rest so the child never blocks on a full pipe.
                let _ = std::io::copy(p.get_mut(), &mut std::io::sink());
            }
            out
        })
    };
    let out = reader(child.stdout.take().map(|p| Box::new(p) as _));
    let err = reader(child.stderr.take().map(|p| Box::new(p) as _));
    let end = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(LaunchError::Launcher {
                    command: command_name(argv),
                    status: format!("killed after {limit:?}"),
                    stderr: String::new(),
                });
            }
        }
    };
    Ok(Finished {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: String::from_utf8_lossy(&err.join().unwrap_or_default())
            .trim()
            .to_string(),
    })
}

/// `nitro-cli run-enclave`, or the QEMU program: what an error names.
fn command_name(argv: &[String]) -> String {
    match argv {
        [p, sub, ..] if !sub.starts_with('-') => format!("{p} {sub}"),
        [p, ..] => p.clone(),
        [] => String::new(),
    }
}

/// Runs the recipe's launcher; the enclave is up (not yet listening)
/// when this returns.
pub fn start(recipe: &Recipe) -> Result<StartedVm, LaunchError> {
    let done = run(&recipe.argv, LAUNCHER_TIMEOUT)?;
    let command = command_name(&recipe.argv);
    if !done.status.success() {
        return Err(LaunchError::Launcher {
            command,
            status: done.status.to_string(),
            stderr: done.stderr,
        });
    }
    let handle = match &recipe.stop {
        Stop::NitroTerminate { program } => {
            let started = nitro::parse_run_output(&done.stdout)
                .map_err(|error| LaunchError::NitroOutput { command, error })?;
            let vm = StartedVm {
                handle: Some(Handle::Nitro {
                    program: program.clone(),
                    enclave_id: started.enclave_id,
                }),
                address: recipe.connect.clone(),
            };
            let asked = match &recipe.connect {
                Address::Vsock(v) => u64::from(v.raw_cid()),
                Address::Unix(_) => u64::MAX,
            };
            if started.cid != asked {
                // Dropping `vm` terminates the enclave.
                return Err(LaunchError::WrongCid {
                    command: command_name(&recipe.argv),
                    started: started.cid,
                    asked,
                });
            }
            return Ok(vm);
        }
        Stop::KillPidfile { pidfile } => Handle::Qemu {
            pid: read_pidfile(pidfile, &recipe.argv[0])
                .map_err(|error| LaunchError::Pidfile { command, error })?,
        },
    };
    Ok(StartedVm {
        handle: Some(handle),
        address: recipe.connect.clone(),
    })
}

/// Why QEMU's pid file names no live QEMU.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PidfileError {
    // The OS error is part of the message, not a `source`: shown with
    // anyhow's `{:#}`, a source would print it twice.
    /// It cannot be read (QEMU wrote none).
    #[error("its pid file {path}: {error}")]
    Unreadable { path: String, error: std::io::Error },
    /// It holds no pid above 1.
    #[error("its pid file {path} holds {text:?}")]
    NotAPid { path: String, text: String },
    /// The pid is not a running process of the launcher program.
    #[error("pid {pid} from {path} is not a running {program}")]
    NotTheProgram {
        pid: i32,
        path: String,
        program: String,
    },
}

/// The pid QEMU wrote, checked to be a live process of `program`.
fn read_pidfile(pidfile: &Path, program: &str) -> Result<i32, PidfileError> {
    let path = || pidfile.display().to_string();
    let text = std::fs::read_to_string(pidfile).map_err(|error| PidfileError::Unreadable {
        path: path(),
        error,
    })?;
    let pid: i32 = text
        .trim()
        .parse()
        .ok()
        .filter(|&p: &i32| p > 1)
        .ok_or_else(|| PidfileError::NotAPid {
            path: path(),
            text: text.clone(),
        })?;
    if !is_program(pid, program) {
        return Err(PidfileError::NotTheProgram {
            pid,
            path: path(),
            program: program.to_owned(),
        });
    }
    Ok(pid)
}

/// Whether `pid` runs `program` (its argv[0], or the file name of both).
fn is_program(pid: i32, program: &str) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let argv0 = cmdline.split(|&b| b == 0).next().unwrap_or_default();
    let argv0 = String::from_utf8_lossy(argv0);
    let base = |s: &str| Path::new(s).file_name().map(|n| n.to_os_string());
    argv0 == program || (base(&argv0).is_some() && base(&argv0) == base(program))
}

impl StartedVm {
    /// Where the enclave service will listen.
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// Connects once the enclave service listens: retried every
    /// [`RETRY_PAUSE`] for at most `boot`, while the guest is alive and
    /// `cancelled` is not set.
    pub fn connect(
        &self,
        boot: Duration,
        cancelled: &AtomicBool,
    ) -> Result<Box<dyn Stream>, LaunchError> {
        let connector = AddressConnector::new(self.address.clone())?;
        let start = Instant::now();
        loop {
            if cancelled.load(Ordering::SeqCst) {
                return Err(LaunchError::Cancelled);
            }
            if let Some(Handle::Qemu { pid }) = &self.handle
                && !Path::new(&format!("/proc/{pid}")).exists()
            {
                return Err(LaunchError::GuestGone {
                    address: self.address.to_string(),
                });
            }
            match connector.connect() {
                Ok(s) => return Ok(s),
                Err(_) if start.elapsed() < boot => std::thread::sleep(RETRY_PAUSE),
                Err(e) => {
                    return Err(LaunchError::BootTimeout {
                        address: self.address.to_string(),
                        waited: boot,
                        last: e.to_string(),
                    });
                }
            }
        }
    }

    /// Stops the enclave: `nitro-cli terminate-enclave`, or SIGTERM to
    /// QEMU (SIGKILL after a grace period).
    pub fn stop(mut self) -> Result<(), LaunchError> {
        match self.handle.take() {
            Some(h) => stop(h),
            None => Ok(()),
        }
    }
}

fn stop(h: Handle) -> Result<(), LaunchError> {
    match h {
        Handle::Nitro {
            program,
            enclave_id,
        } => {
            let argv = nitro::terminate_argv(&program, &enclave_id);
            let done = run(&argv, LAUNCHER_TIMEOUT)?;
            if done.status.success() {
                Ok(())
            } else {
                Err(LaunchError::Launcher {
                    command: command_name(&argv),
                    status: done.status.to_string(),
                    stderr: done.stderr,
                })
            }
        }
        Handle::Qemu { pid } => {
            use nix::sys::signal::{Signal, kill};
            use nix::unistd::Pid;
            let alive = || Path::new(&format!("/proc/{pid}")).exists();
            let pid_t = Pid::from_raw(pid);
            if alive() {
                let _ = kill(pid_t, Signal::SIGTERM);
                let end = Instant::now() + KILL_GRACE;
                while alive() && Instant::now() < end {
                    std::thread::sleep(Duration::from_millis(50));
                }
                if alive() {
                    let _ = kill(pid_t, Signal::SIGKILL);
                }
            }
            Ok(())
        }
    }
}

impl Drop for StartedVm {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take()
            && let Err(e) = stop(h)
        {
            eprintln!("kolm-host: stopping the enclave: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::recipe::{self, Recipe, Stop};
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A fake launcher: a shell script in `dir`.
    fn script(dir: &Path, name: &str, body: &str) -> String {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p.display().to_string()
    }

    fn nitro_recipe(program: &str) -> Recipe {
        Recipe {
            argv: vec![program.into(), "run-enclave".into(), "--eif-path".into()],
            connect: recipe::vsock(16, 5005).unwrap(),
            stop: Stop::NitroTerminate {
                program: program.into(),
            },
        }
    }

    #[test]
    fn a_failing_launcher_is_named_with_its_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let p = script(
            dir.path(),
            "nitro-cli",
            "echo 'E19 no enclave support' >&2; exit 3",
        );
        let e = start(&nitro_recipe(&p)).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, LaunchError::Launcher { .. }), "{e:?}");
        assert!(text.contains(&format!("{p} run-enclave")), "{text}");
        assert!(text.contains("exit status: 3"), "{text}");
        assert!(text.contains("E19 no enclave support"), "{text}");

        let q = script(
            dir.path(),
            "qemu",
            "echo 'qemu: sev-snp-guest: not supported' >&2; exit 1",
        );
        let r = Recipe {
            argv: vec![q.clone(), "-accel".into(), "kvm".into()],
            connect: recipe::vsock(7, 5005).unwrap(),
            stop: Stop::KillPidfile {
                pidfile: dir.path().join("q.pid"),
            },
        };
        let e = start(&r).unwrap_err().to_string();
        assert!(
            e.contains(&q) && e.contains("sev-snp-guest: not supported"),
            "{e}"
        );

        let e = start(&Recipe {
            argv: vec![dir.path().join("absent").display().to_string()],
            ..r.clone()
        })
        .unwrap_err();
        assert!(matches!(e, LaunchError::Spawn { .. }), "{e:?}");
    }

    #[test]
    fn a_launcher_that_succeeds_without_an_enclave_is_refused_and_cleaned_up() {
        let dir = tempfile::tempdir().unwrap();
        // Not run-enclave's JSON: refused, nothing to connect to.
        let p = script(dir.path(), "nitro-cli", "echo 'Started.'");
        let e = start(&nitro_recipe(&p)).unwrap_err().to_string();
        assert!(e.contains("not the run-enclave JSON"), "{e}");

        // Another CID than asked: refused, and the enclave it did start is
        // terminated (the fake records the call).
        let marker = dir.path().join("terminated");
        let body = format!(
            "if [ \"$1\" = terminate-enclave ]; then echo \"$3\" > {}; exit 0; fi\n\
             echo '{{\"EnclaveID\":\"i-1-enc2\",\"EnclaveCID\":17}}'",
            marker.display()
        );
        let p = script(dir.path(), "nitro-cli2", &body);
        let e = start(&nitro_recipe(&p)).unwrap_err().to_string();
        assert!(e.contains("it started CID 17, not 16"), "{e}");
        assert_eq!(std::fs::read_to_string(&marker).unwrap(), "i-1-enc2\n");

        // QEMU "succeeded" but left no pid file of a live QEMU.
        let q = script(dir.path(), "qemu", "exit 0");
        let r = Recipe {
            argv: vec![q],
            connect: recipe::vsock(7, 5005).unwrap(),
            stop: Stop::KillPidfile {
                pidfile: dir.path().join("q.pid"),
            },
        };
        let e = start(&r).unwrap_err().to_string();
        assert!(e.contains("pid file"), "{e}");
        std::fs::write(dir.path().join("q.pid"), "1\n").unwrap();
        let e = start(&r).unwrap_err().to_string();
        assert!(e.contains("holds"), "{e}");
    }
}
