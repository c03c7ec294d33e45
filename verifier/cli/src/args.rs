//! Argument parsing and output helpers shared by the subcommands.

use std::io::Write as _;
use std::path::Path;

use anyhow::{Context, anyhow, bail};
use kolm_format::timefmt;
use kolm_policy::Policy;
use time::OffsetDateTime;

/// Largest policy file read (a policy is a few KiB).
pub const MAX_POLICY_BYTES: u64 = 1024 * 1024;

/// The policy file, if one was given (at most [`MAX_POLICY_BYTES`]; a
/// directory or an endless device such as `/dev/zero` is an error, exit 2).
pub fn load_policy(path: Option<&Path>) -> anyhow::Result<Option<Policy>> {
    let Some(p) = path else { return Ok(None) };
    let bytes = read_capped(p, "policy", MAX_POLICY_BYTES)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| anyhow!("cannot read policy {}: not UTF-8", p.display()))?;
    Ok(Some(
        Policy::from_toml_str(&text).map_err(|e| anyhow!("policy {}: {e}", p.display()))?,
    ))
}

/// Reads at most `cap` bytes of `path`, refusing more without reading
/// further. A directory is refused before reading; other non-regular files
/// (a pipe, `/dev/stdin`, a device) are read up to the cap, so an endless
/// one ends promptly with an error.
pub fn read_capped(path: &Path, what: &str, cap: u64) -> anyhow::Result<Vec<u8>> {
    use std::io::Read as _;
    let f = std::fs::File::open(path)
        .with_context(|| format!("cannot read {what} {}", path.display()))?;
    let meta = f
        .metadata()
        .with_context(|| format!("cannot read {what} {}", path.display()))?;
    if meta.is_dir() {
        bail!("cannot read {what} {}: a directory", path.display());
    }
    if meta.is_file() && meta.len() > cap {
        bail!(
            "cannot read {what} {}: {} bytes, over the {cap}-byte cap",
            path.display(),
            meta.len()
        );
    }
    let mut out = Vec::new();
    f.take(cap.saturating_add(1))
        .read_to_end(&mut out)
        .with_context(|| format!("cannot read {what} {}", path.display()))?;
    if u64::try_from(out.len()).map_or(true, |n| n > cap) {
        bail!(
            "cannot read {what} {}: more than the {cap}-byte cap",
            path.display()
        );
    }
    Ok(out)
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

/// Reads an evidence or collateral file given on the command line, capped
/// at the largest evidence slot (`kolm_verifier::collateral::MAX_INPUT_FILE_BYTES`,
/// 1 MiB; real ones are 1 to 25 KiB).
pub fn read(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    read_capped(path, what, kolm_verifier::collateral::MAX_INPUT_FILE_BYTES)
}

/// `--dangerous-trust-sim-root`: a bundle of kolm sim root certificates
/// (one per evidence form; an unreadable or unfit file is a usage error,
/// exit 2).
pub fn load_sim_root(path: Option<&Path>) -> anyhow::Result<Option<kolm_verifier::sim::SimRoots>> {
    let Some(p) = path else { return Ok(None) };
    let cap = u64::try_from(kolm_verifier::sim::MAX_SIM_ROOT_BYTES).unwrap_or(u64::MAX);
    let bytes = read_capped(p, "sim root", cap)?;
    let root = kolm_verifier::sim::SimRoots::parse(&bytes)
        .map_err(|e| anyhow!("--dangerous-trust-sim-root {}: {e}", p.display()))?;
    crate::warn_sim_root(&root);
    Ok(Some(root))
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
