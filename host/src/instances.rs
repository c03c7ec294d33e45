//! Long-lived local enclave services (`kolm-host launch / status / stop`):
//! one `kolm-enclave start` per name, listening on a unix socket in the
//! runtime directory, recorded in `<name>.json` there (pid, socket, state,
//! attestation). `kolm-host run --connect unix:PATH` submits jobs to one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kolm_transport::message::{Hello, Message};
use kolm_transport::{Address, AddressConnector, Channel, Connector, FrameOptions};
use serde::{Deserialize, Serialize};

/// What `launch` records about an instance.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Instance {
    pub name: String,
    pub pid: u32,
    pub socket: PathBuf,
    pub state: PathBuf,
    pub attest: String,
}

/// Why an instance could not be recorded, found or reached.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InstanceError {
    #[error("instance name {0:?}: use letters, digits, '-' and '_' only")]
    Name(String),
    #[error("no enclave named {name:?} is recorded in {dir}")]
    Unknown { name: String, dir: String },
    // The OS error is the source: `{:#}` prints it (once).
    #[error("{path}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Record { path: String, reason: String },
    #[error("an enclave named {name:?} is already running (pid {pid})")]
    Running { name: String, pid: u32 },
    #[error("stopping pid {pid}: {reason}")]
    Stop { pid: u32, reason: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> InstanceError + '_ {
    move |source| InstanceError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// `<dir>/<name>.json`, the name checked.
pub fn record_path(dir: &Path, name: &str) -> Result<PathBuf, InstanceError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !ok {
        return Err(InstanceError::Name(name.to_string()));
    }
    Ok(dir.join(format!("{name}.json")))
}

/// Records `instance` atomically.
pub fn save(dir: &Path, instance: &Instance) -> Result<(), InstanceError> {
    let path = record_path(dir, &instance.name)?;
    let bytes = serde_json::to_vec_pretty(instance).map_err(|e| InstanceError::Record {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    crate::fsutil::write_atomic(&path, &bytes).map_err(io(&path))
}

/// The record of `name`.
pub fn load(dir: &Path, name: &str) -> Result<Instance, InstanceError> {
    let path = record_path(dir, name)?;
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(InstanceError::Unknown {
                name: name.to_string(),
                dir: dir.display().to_string(),
            });
        }
        Err(e) => return Err(io(&path)(e)),
    };
    serde_json::from_slice(&bytes).map_err(|e| InstanceError::Record {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// Whether `pid` is a live `kolm-enclave` process.
pub fn alive(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            let argv0 = c.split(|&b| b == 0).next().unwrap_or_default();
            String::from_utf8_lossy(argv0).ends_with("kolm-enclave")
        })
        .unwrap_or(false)
}

/// Why [`hello`] got no hello from an instance: one variant per step.
// Each cause is the whole message (it names the socket where it can), not
// a `source`: shown with anyhow's `{:#}`, a source would print it twice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HelloError {
    /// The socket path is not a transport address.
    #[error("{error}")]
    Address { error: kolm_transport::AddressError },
    /// Nothing could be connected to it.
    #[error("{error}")]
    Connect {
        error: kolm_transport::TransportError,
    },
    /// The wait is not a frame timeout (zero).
    #[error("{error}")]
    Wait {
        error: kolm_transport::FrameOptionsError,
    },
    /// Nothing readable came within the wait.
    #[error("{error}")]
    Receive { error: kolm_transport::ChannelError },
    /// The first message was not a hello.
    #[error("expected hello, got {}", .got.as_str())]
    NotHello { got: kolm_transport::message::Kind },
}

/// Connects, reads `hello`, says `bye`: what the enclave says it is.
pub fn hello(socket: &Path, wait: Duration) -> Result<Hello, HelloError> {
    let address = Address::parse(&format!("unix:{}", socket.display()))
        .map_err(|error| HelloError::Address { error })?;
    let stream = AddressConnector::new(address)
        .and_then(|c| c.connect())
        .map_err(|error| HelloError::Connect { error })?;
    let options = FrameOptions::default()
        .with_idle_timeout(Some(wait))
        .map_err(|error| HelloError::Wait { error })?;
    let mut ch = Channel::new(stream, options);
    match ch.recv().map_err(|error| HelloError::Receive { error })? {
        Message::Hello(h) => {
            let _ = ch.close();
            Ok(h)
        }
        other => Err(HelloError::NotHello { got: other.kind() }),
    }
}

/// Stops the instance: SIGTERM, then SIGKILL after `grace`; removes its
/// record and socket. A job it was running dies with it (nothing sealed).
pub fn stop(dir: &Path, instance: &Instance, grace: Duration) -> Result<(), InstanceError> {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if alive(instance.pid) {
        let pid = Pid::from_raw(
            i32::try_from(instance.pid).map_err(|_| InstanceError::Stop {
                pid: instance.pid,
                reason: "not a pid".into(),
            })?,
        );
        kill(pid, Signal::SIGTERM).map_err(|e| InstanceError::Stop {
            pid: instance.pid,
            reason: e.to_string(),
        })?;
        let end = std::time::Instant::now() + grace;
        while alive(instance.pid) && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
        }
        if alive(instance.pid) {
            let _ = kill(pid, Signal::SIGKILL);
        }
    }
    let record = record_path(dir, &instance.name)?;
    let _ = std::fs::remove_file(&instance.socket);
    std::fs::remove_file(&record).map_err(io(&record))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_service_on_the_socket_is_a_connect_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = hello(&dir.path().join("absent.sock"), Duration::from_secs(1)).unwrap_err();
        assert!(matches!(e, HelloError::Connect { .. }), "{e:?}");
        assert!(e.to_string().contains("absent.sock"), "{e}");
    }

    #[test]
    fn records_round_trip_and_names_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let i = Instance {
            name: "gpu-1".into(),
            pid: 4_000_000,
            socket: dir.path().join("gpu-1.sock"),
            state: dir.path().join("state"),
            attest: "sim".into(),
        };
        save(dir.path(), &i).unwrap();
        assert_eq!(load(dir.path(), "gpu-1").unwrap(), i);
        assert!(matches!(
            load(dir.path(), "other"),
            Err(InstanceError::Unknown { .. })
        ));
        for bad in ["", "../x", "a/b", "a b"] {
            assert!(matches!(
                record_path(dir.path(), bad),
                Err(InstanceError::Name(_))
            ));
        }
        assert!(!alive(4_000_000));
        // Stopping an instance that is gone still removes its record.
        stop(dir.path(), &i, Duration::from_millis(10)).unwrap();
        assert!(matches!(
            load(dir.path(), "gpu-1"),
            Err(InstanceError::Unknown { .. })
        ));
    }
}
