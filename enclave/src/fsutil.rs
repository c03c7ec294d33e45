//! Small file-system helpers: nothing kolm writes is ever left half-written,
//! nothing a job left behind is opened through a link ([`openat2`]), and a
//! job is refused before its inputs are staged when the staging directory
//! has no room for them ([`check_room`], through [`statvfs`]).

#[allow(unsafe_code)]
pub mod openat2;
#[allow(unsafe_code)]
pub mod statvfs;

use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` through a temp file in the same directory,
/// fsynced and renamed over the target; the temp file is removed on error.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("target has no file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Removes the tree at `path` (a directory, or anything else) without
/// recursion and with two descriptors at most: it descends one directory at
/// a time by descriptor and climbs back through `..`, so a job's
/// 100,000-deep directory chain neither overflows a thread's stack (as
/// `std::fs::remove_dir_all`, which recurses, did on the job thread) nor
/// runs out of descriptors or past `PATH_MAX`. Call it only once every
/// process that could change the tree is gone. Links are removed, never
/// followed.
pub fn remove_tree(path: &Path) -> std::io::Result<()> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::OpenOptionsExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.is_dir() {
        return std::fs::remove_file(path);
    }
    let mut current: std::fs::File = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    // The names from `path` down to `current`.
    let mut names: Vec<std::ffi::OsString> = Vec::new();
    loop {
        match first_entry(&current)? {
            Some(name) => match openat2::unlinkat(current.as_fd(), &name, false) {
                Ok(()) => {}
                // A directory (EISDIR on Linux; EPERM elsewhere): descend.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EISDIR | libc::EPERM)) => {
                    let child = openat2::openat2(
                        current.as_fd(),
                        Path::new(&name),
                        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                        openat2::RESOLVE_STRICT,
                    )?;
                    current = std::fs::File::from(child);
                    names.push(name);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            },
            None => {
                let Some(name) = names.pop() else { break };
                let parent = openat2::openat2(
                    current.as_fd(),
                    Path::new(".."),
                    libc::O_RDONLY | libc::O_DIRECTORY,
                    libc::RESOLVE_NO_MAGICLINKS | libc::RESOLVE_NO_XDEV,
                )?;
                current = std::fs::File::from(parent);
                openat2::unlinkat(current.as_fd(), &name, true)?;
            }
        }
    }
    drop(current);
    std::fs::remove_dir(path)
}

/// One name in the directory `dir` refers to, if it has any (listed
/// through `/proc/self/fd/N`, the open directory itself).
fn first_entry(dir: &std::fs::File) -> std::io::Result<Option<std::ffi::OsString>> {
    use std::os::fd::AsRawFd;
    let mut entries = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))?;
    entries.next().transpose().map(|e| e.map(|e| e.file_name()))
}

/// Prefix of a job's work directory (`run.rs`: its staged inputs, its
/// output directory).
pub const JOB_DIR_PREFIX: &str = "kolm-job-";
/// Prefix of the service's input directory for one job (`service.rs`).
pub const INPUTS_DIR_PREFIX: &str = "kolm-inputs-";
/// Prefix the service's input directories had in the state directory
/// before they moved to the staging root; swept from state directories.
pub const LEGACY_INPUTS_PREFIX: &str = ".job-";

/// Where job plaintext is staged: `/dev/shm` when it is a directory this
/// process can write (memory-backed: nothing of a job survives the machine
/// losing power), else the temporary directory. `KOLM_STAGING_DIR`
/// overrides both.
pub fn staging_root() -> std::path::PathBuf {
    if let Some(d) = std::env::var_os("KOLM_STAGING_DIR") {
        return d.into();
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && tempfile::Builder::new()
            .prefix(".kolm-probe-")
            .tempdir_in(shm)
            .is_ok()
    {
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

/// Why the staging directory cannot take what is about to be staged in it
/// ([`check_room`]). Both texts name the directory and `KOLM_STAGING_DIR`,
/// the way to stage elsewhere.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RoomError {
    /// The file system holding `dir` has fewer than `need` bytes free.
    #[error(
        "staging directory {}: {need} bytes ({}) needed, {available} bytes ({}) available; \
         set KOLM_STAGING_DIR to stage on a file system with more room \
         (memory-backed, such as a tmpfs, keeps job plaintext off disk)",
        .dir.display(),
        human_bytes(*.need),
        human_bytes(*.available)
    )]
    NoRoom {
        dir: std::path::PathBuf,
        need: u64,
        available: u64,
    },
    // The OS error is part of the message and not a `source`: the service
    // sends `to_string()` to the host and the CLI prints anyhow's `{:#}`
    // chain; with both, a source would print twice.
    /// The free space of `dir` could not be read (it is missing, or not
    /// reachable): the job is refused rather than staged blind.
    #[error(
        "staging directory {}: cannot read its free space: {error}; \
         set KOLM_STAGING_DIR to stage elsewhere",
        .dir.display()
    )]
    Unknown {
        dir: std::path::PathBuf,
        error: std::io::Error,
    },
}

/// `n` in the largest binary unit that keeps it at 1 or more, one
/// decimal: for people reading a [`RoomError`] (the exact count is beside
/// it).
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    // Loses precision past 2^53 bytes: harmless, the exact count is beside it.
    let mut value = n as f64 / 1024.0;
    let mut unit = UNITS[0];
    for next in &UNITS[1..] {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = next;
    }
    format!("{value:.1} {unit}")
}

/// Checks that the file system holding `root` has at least `need` bytes
/// free for this process ([`statvfs::available_bytes`]), so a job is
/// refused before its inputs are staged instead of failing with `ENOSPC`
/// halfway through (on a tmpfs such as `/dev/shm`, after filling the
/// machine's memory). The answer is a snapshot: another writer can take the
/// room afterwards, and staging still fails cleanly if one does.
pub fn check_room(root: &Path, need: u64) -> Result<(), RoomError> {
    let available = statvfs::available_bytes(root).map_err(|error| RoomError::Unknown {
        dir: root.to_path_buf(),
        error,
    })?;
    if need > available {
        return Err(RoomError::NoRoom {
            dir: root.to_path_buf(),
            need,
            available,
        });
    }
    Ok(())
}

/// The job directories this process holds now: what a stop signal removes
/// before the process exits (`service.rs`).
static LIVE: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<std::path::PathBuf>> {
    LIVE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Removes every job directory this process holds, and keeps the registry
/// locked (no new one can be made) for as long as the guard lives: for a
/// process about to exit.
pub fn remove_live_job_dirs() -> std::sync::MutexGuard<'static, Vec<std::path::PathBuf>> {
    let mut held = live();
    for p in held.drain(..) {
        if let Err(e) = remove_tree(&p) {
            tracing::warn!(path = %p.display(), error = %e, "removing a job directory");
        }
    }
    held
}

/// A job's directory, holding plaintext while the job runs: a fresh name
/// under `prefix`, locked (`flock` on the directory) by this process for
/// its whole life, so that [`sweep_leftovers`] in another process can tell
/// a live one from one left by a killed process; removed when dropped.
#[derive(Debug)]
pub struct JobDir {
    path: std::path::PathBuf,
    _lock: std::fs::File,
}

impl JobDir {
    /// Creates the directory under `root` with `mode`, and locks it.
    pub fn create(root: &Path, prefix: &str, mode: u32) -> std::io::Result<JobDir> {
        use std::os::unix::fs::PermissionsExt;
        let mut held = live();
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .permissions(std::fs::Permissions::from_mode(mode))
            .tempdir_in(root)?;
        let lock = std::fs::File::open(dir.path())?;
        // Nobody else knows the fresh name yet: the lock cannot be held.
        lock.try_lock()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let path = dir.keep();
        held.push(path.clone());
        Ok(JobDir { path, _lock: lock })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for JobDir {
    fn drop(&mut self) {
        let mut held = live();
        held.retain(|p| *p != self.path);
        if let Err(e) = remove_tree(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "removing a job directory");
        }
    }
}

/// Removes the job directories (names starting with one of `prefixes`)
/// in `root` that are owned by this process's user and that no live
/// process holds (their `flock` can be taken): those a killed supervisor
/// left behind. Returns how many it removed.
pub fn sweep_leftovers(root: &Path, prefixes: &[&str]) -> std::io::Result<usize> {
    use std::os::unix::fs::MetadataExt;
    let me = std::fs::metadata("/proc/self")?.uid();
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(text) = name.to_str() else { continue };
        if !prefixes.iter().any(|p| text.starts_with(p)) {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != me {
            continue;
        }
        let Ok(dir) = std::fs::File::open(&path) else {
            continue;
        };
        // Held: a live process's job. The lock is kept while removing.
        if dir.try_lock().is_err() {
            continue;
        }
        remove_tree(&path)?;
        removed += 1;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain of `depth` directories under `top`, each made relative to
    /// the one before (the path is far past `PATH_MAX`).
    fn deep_chain(top: &Path, depth: usize) {
        use std::os::fd::AsFd;
        std::fs::create_dir(top).unwrap();
        let mut cur = std::fs::File::open(top).unwrap();
        for _ in 0..depth {
            mkdir_at(&cur, "d");
            let next = openat2::openat2(
                cur.as_fd(),
                Path::new("d"),
                libc::O_RDONLY | libc::O_DIRECTORY,
                openat2::RESOLVE_STRICT,
            )
            .unwrap();
            cur = std::fs::File::from(next);
        }
        std::fs::write(format!("/proc/self/fd/{}/f", fd_of(&cur)), b"x").unwrap();
    }

    fn fd_of(f: &std::fs::File) -> i32 {
        std::os::fd::AsRawFd::as_raw_fd(f)
    }

    fn mkdir_at(dir: &std::fs::File, name: &str) {
        std::fs::create_dir(format!("/proc/self/fd/{}/{name}", fd_of(dir))).unwrap();
    }

    #[test]
    fn a_100000_deep_tree_is_removed_on_a_small_stack() {
        let base = tempfile::tempdir().unwrap();
        let top = base.path().join("top");
        deep_chain(&top, 100_000);
        // 64 KiB of stack: a recursive walk (std's remove_dir_all) dies.
        std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn({
                let top = top.clone();
                move || remove_tree(&top).unwrap()
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(!top.exists());
    }

    #[test]
    fn a_need_far_over_the_free_space_is_refused_with_the_numbers() {
        let root = tempfile::tempdir().unwrap();
        let free = statvfs::available_bytes(root.path()).unwrap();
        // A pebibyte more than there is: no concurrent writer frees that.
        let need = free.saturating_add(1 << 50);
        let e = check_room(root.path(), need).unwrap_err();
        let RoomError::NoRoom {
            dir,
            need: said_need,
            available,
        } = &e
        else {
            panic!("expected NoRoom, got {e:?}");
        };
        assert_eq!(dir, root.path());
        assert_eq!(*said_need, need);
        assert!(*available < need);
        let text = e.to_string();
        for part in [
            root.path().display().to_string(),
            format!("{need} bytes"),
            format!("{available} bytes"),
            "KOLM_STAGING_DIR".to_string(),
        ] {
            assert!(text.contains(&part), "{part:?} missing from {text:?}");
        }
        // Nothing underneath to print a second time.
        assert!(std::error::Error::source(&e).is_none());
    }

    #[test]
    fn a_small_need_passes() {
        let root = tempfile::tempdir().unwrap();
        check_room(root.path(), 0).unwrap();
        check_room(root.path(), 4096).unwrap();
    }

    #[test]
    fn a_missing_staging_directory_is_refused_naming_it_once() {
        let base = tempfile::tempdir().unwrap();
        let gone = base.path().join("gone");
        let e = check_room(&gone, 1).unwrap_err();
        assert!(matches!(&e, RoomError::Unknown { dir, error }
            if *dir == gone && error.kind() == std::io::ErrorKind::NotFound));
        let text = e.to_string();
        let os = std::io::Error::from_raw_os_error(libc::ENOENT).to_string();
        assert_eq!(text.matches(&os).count(), 1, "{text}");
        assert_eq!(
            text.matches(&gone.display().to_string()).count(),
            1,
            "{text}"
        );
        assert!(text.contains("KOLM_STAGING_DIR"), "{text}");
        assert!(std::error::Error::source(&e).is_none());
    }

    #[test]
    fn sizes_for_people_round_to_one_decimal() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1024), "1.0 KiB");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
        assert_eq!(human_bytes(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn sweeping_removes_only_unheld_directories_of_the_prefix() {
        let root = tempfile::tempdir().unwrap();
        let held = JobDir::create(root.path(), JOB_DIR_PREFIX, 0o700).unwrap();
        std::fs::write(held.path().join("secret"), b"s").unwrap();
        let left = root.path().join(format!("{JOB_DIR_PREFIX}left"));
        std::fs::create_dir(&left).unwrap();
        std::fs::write(left.join("secret"), b"s").unwrap();
        let other = root.path().join("someone-else");
        std::fs::create_dir(&other).unwrap();
        assert_eq!(sweep_leftovers(root.path(), &[JOB_DIR_PREFIX]).unwrap(), 1);
        assert!(!left.exists());
        assert!(held.path().join("secret").exists());
        assert!(other.exists());
        let p = held.path().to_path_buf();
        drop(held);
        assert!(!p.exists());
    }
}
