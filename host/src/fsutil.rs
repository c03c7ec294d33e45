//! Nothing kolm-host writes is left half-written.

use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` through a temp file in the same directory,
/// fsynced and renamed over the target, then syncs the directory; on any
/// failure (a full disk included) the temp file is removed and `path` is
/// untouched.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()
}
