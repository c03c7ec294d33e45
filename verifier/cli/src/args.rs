//! Argument parsing and output helpers shared by the subcommands.

use std::io::Write as _;
use std::path::Path;

use anyhow::{Context, anyhow};
use kolm_format::timefmt;
use kolm_policy::Policy;
use time::OffsetDateTime;

/// The policy file, if one was given.
pub fn load_policy(path: Option<&Path>) -> anyhow::Result<Option<Policy>> {
    let Some(p) = path else { return Ok(None) };
    let text = std::fs::read_to_string(p)
        .with_context(|| format!("cannot read policy {}", p.display()))?;
    Ok(Some(
        Policy::from_toml_str(&text).map_err(|e| anyhow!("policy {}: {e}", p.display()))?,
    ))
}

/// `--at`: an RFC 3339 instant, or `now` (the wall clock, read here at the
/// edge and passed in; the library never reads it).
pub fn parse_at(at: Option<&str>) -> anyhow::Result<Option<OffsetDateTime>> {
    match at {
        None => Ok(None),
        Some("now") => Ok(Some(OffsetDateTime::now_utc())),
        Some(s) => Ok(Some(
            timefmt::parse_rfc3339(s).map_err(|e| anyhow!("--at: {e}"))?,
        )),
    }
}

/// `--at`, required (raw evidence has no time of its own to default to).
pub fn required_at(at: Option<&str>) -> anyhow::Result<OffsetDateTime> {
    parse_at(at)?.ok_or_else(|| {
        anyhow!("--at is required for raw evidence: give an RFC 3339 instant, or `now`")
    })
}

/// A hex argument.
pub fn hex_arg(name: &str, v: Option<&str>) -> anyhow::Result<Option<Vec<u8>>> {
    v.map(|s| hex::decode(s.trim()).map_err(|e| anyhow!("--{name}: not hex: {e}")))
        .transpose()
}

/// A hex argument of exactly 64 bytes.
pub fn hex64_arg(name: &str, v: Option<&str>) -> anyhow::Result<Option<Vec<u8>>> {
    match hex_arg(name, v)? {
        Some(b) if b.len() != 64 => Err(anyhow!("--{name} must be 64 bytes")),
        other => Ok(other),
    }
}

pub fn read(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {what} {}", path.display()))
}

/// Writes to stdout; a closed pipe (`| head`) is a normal end.
pub fn emit(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(e.into()),
    }
}
