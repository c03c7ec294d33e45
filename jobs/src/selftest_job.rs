//! `kind = "egress-selftest"`: a job that tries to reach the network the
//! ways programs commonly do (TCP and UDP over IPv4 and IPv6, connecting,
//! binding, listening), so that an auditor sees in a sealed receipt that
//! each attempt was refused and counted: `metrics.json` says how many
//! probes ran and how many were refused, `selftest.json` what each got, and
//! the sandbox record counts one blocked `socket` call per probe.
//!
//! With `linger_seconds`, the job also leaves a process behind that tried
//! to escape (`setsid`) and waits that long itself: a failure test kills
//! the service meanwhile and checks that nothing of the job survives.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use serde::Serialize;

/// What one probe got.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Probe {
    pub name: &'static str,
    /// `refused: <error>` or `reached`.
    pub result: String,
}

/// One probe: an attempt that makes one `socket(2)` call.
type ProbeFn = Box<dyn Fn() -> std::io::Result<()>>;

/// The probes, each one `socket(2)` call.
fn probes() -> Vec<(&'static str, ProbeFn)> {
    let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, 9));
    let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, 9));
    let t = Duration::from_secs(1);
    vec![
        (
            "tcp4-connect",
            Box::new(move || TcpStream::connect_timeout(&v4, t).map(drop)),
        ),
        (
            "tcp6-connect",
            Box::new(move || TcpStream::connect_timeout(&v6, t).map(drop)),
        ),
        (
            "udp4-bind",
            Box::new(|| UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).map(drop)),
        ),
        (
            "udp6-bind",
            Box::new(|| UdpSocket::bind((Ipv6Addr::UNSPECIFIED, 0)).map(drop)),
        ),
        (
            "tcp4-listen",
            Box::new(|| TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).map(drop)),
        ),
    ]
}

/// Runs every probe; returns what each got.
pub fn run_probes() -> Vec<Probe> {
    probes()
        .into_iter()
        .map(|(name, probe)| Probe {
            name,
            result: match probe() {
                Ok(()) => "reached".to_string(),
                Err(e) => format!("refused: {}", e.kind()),
            },
        })
        .collect()
}

/// The argument the lingering process sleeps with: its length in seconds
/// plus this fraction, so a test can find it by its command line.
pub const LINGER_MARK: &str = ".424242";

/// Leaves a `setsid` process behind that sleeps `seconds`, then sleeps as
/// long itself.
pub fn linger(seconds: u32) -> std::io::Result<()> {
    std::process::Command::new("/usr/bin/setsid")
        .args(["-f", "/bin/sleep", &format!("{seconds}{LINGER_MARK}")])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()?;
    std::thread::sleep(Duration::from_secs(u64::from(seconds)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_probe_is_named_once() {
        let names: Vec<_> = probes().into_iter().map(|(n, _)| n).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names.len(), 5);
        assert_eq!(sorted.len(), names.len());
    }
}
