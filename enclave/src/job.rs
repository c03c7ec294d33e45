//! The supervisor's side of a job's outputs: how it collects what the job
//! (`kolm-jobs`, inside the sandbox) wrote into its output directory:
//! `metrics.json` (a flat JSON object of finite numbers) and anything else,
//! sealed under `outputs/`. The job has no network, no key and no view of
//! the supervisor; the supervisor treats everything it wrote as untrusted
//! input.
//!
//! Everything the job wrote is untrusted: the verifier's lint set holds
//! (no unwrap, no indexing, no unchecked arithmetic).
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kolm_format::container;
use kolm_format::manifest::OUTPUTS_PREFIX;

pub use kolm_format::job_io::METRICS_FILE;

/// Most files a job may leave in its output directory.
pub const MAX_OUTPUT_FILES: usize = 10_000;
/// Most bytes a job may leave in its output directory, all files together.
pub const MAX_OUTPUT_BYTES: u64 = 1024 * 1024 * 1024;
/// Deepest directory level under the output directory that is collected
/// (`a/b/c.txt` is at depth 3): a job that nests deeper is refused.
pub const MAX_OUTPUT_DEPTH: usize = 64;
/// Most directories a job may leave in its output directory.
pub const MAX_OUTPUT_DIRS: usize = 1_000;

/// Why the supervisor refused what a job left behind.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CollectError {
    #[error("output {path}: {reason}")]
    Entry { path: String, reason: EntryError },
    #[error("output directory holds more than {MAX_OUTPUT_FILES} files")]
    TooManyFiles,
    #[error("output directory holds more than {MAX_OUTPUT_BYTES} bytes")]
    TooLarge,
    #[error("output {path}: nested deeper than {MAX_OUTPUT_DEPTH} levels (the depth cap)")]
    TooDeep { path: String },
    #[error("output directory holds more than {MAX_OUTPUT_DIRS} directories (the directory cap)")]
    TooManyDirs,
    #[error("metrics: {0}")]
    Metrics(MetricsError),
}

/// Why one entry of the output directory was refused
/// ([`CollectError::Entry`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EntryError {
    #[error("opening the output directory: {error}")]
    OpenRoot { error: std::io::Error },
    #[error("listing: {error}")]
    List { error: std::io::Error },
    #[error("name is not UTF-8")]
    NotUtf8,
    /// The name breaks the container's portable name rules (alone, or
    /// against another name).
    #[error("{error}")]
    Name {
        error: Box<container::ContainerError>,
    },
    /// `openat2` refused a symbolic link (`ELOOP`).
    #[error("is a symbolic link (not followed)")]
    SymbolicLink,
    /// `openat2` refused an escape or a mount crossing (`EXDEV`).
    #[error("leaves the output directory (not followed)")]
    LeavesDirectory,
    /// `ENXIO`: a socket, most likely.
    #[error("not a regular file or directory (a socket?)")]
    Unopenable,
    #[error("openat2 is not available (Linux 5.6 or later needed)")]
    NoOpenat2,
    #[error("opening: {error}")]
    Open { error: std::io::Error },
    #[error("fstat: {error}")]
    Fstat { error: std::io::Error },
    #[error("has {links} hard links (a link to a file outside the output directory is not sealed)")]
    HardLinks { links: u64 },
    #[error("not a regular file or directory")]
    NotFileOrDirectory,
}

/// Why the job's `metrics.json` was refused ([`CollectError::Metrics`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetricsError {
    #[error("the job wrote no {METRICS_FILE}")]
    Missing,
    /// Not a flat JSON object of numbers.
    #[error("{error}")]
    Json { error: serde_json::Error },
    #[error("{name} is not finite")]
    NotFinite { name: String },
}

/// What a job produced, read once by the supervisor: the bytes hashed are
/// the bytes sealed.
#[derive(Debug, Clone)]
pub struct Collected {
    /// `(outputs/<relative path>, bytes)`, sorted by path.
    pub files: Vec<(String, Vec<u8>)>,
    pub metrics: BTreeMap<String, f64>,
}

/// Reads every regular file under `dir` and the metrics, as untrusted
/// input: call it only once every job process is gone (the sandbox record's
/// `listener.all_processes_gone`), so nothing can change the tree while it
/// is read.
///
/// It does not rely on that alone. Every entry is opened relative to its
/// parent's descriptor with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
/// RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)` and judged by `fstat` on the
/// descriptor it will be read from: a symbolic link anywhere (a file, a
/// directory, one swapped in after the listing) is refused by the kernel
/// rather than followed, and the type, link count and size checked are
/// those of the very file read. So a process that survived the job and
/// swapped a file for a link to a host file between listing and reading
/// gets a refusal, never the host file sealed. Only regular files with one
/// link (no hard link to a file elsewhere) and directories are accepted;
/// the walk is iterative and depth, directory count, file count and total
/// size are capped (each refusal names its cap); names must pass the container's portable
/// name rules, across names too.
pub fn collect_outputs(dir: &Path) -> Result<Collected, CollectError> {
    use std::os::unix::fs::OpenOptionsExt;
    let root_err = |error| CollectError::Entry {
        path: String::new(),
        reason: EntryError::OpenRoot { error },
    };
    let root = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .map_err(root_err)?;
    let mut files = Vec::new();
    let mut total: u64 = 0;
    let mut dirs: usize = 0;
    let mut stack: Vec<(PathBuf, std::fs::File)> = vec![(PathBuf::new(), root)];
    while let Some((rel_dir, dir_file)) = stack.pop() {
        for name in list_dir(&dir_file).map_err(|error| CollectError::Entry {
            path: rel_dir.display().to_string(),
            reason: EntryError::List { error },
        })? {
            let rel = rel_dir.join(&name);
            let text = rel
                .to_str()
                .ok_or_else(|| CollectError::Entry {
                    path: rel.display().to_string(),
                    reason: EntryError::NotUtf8,
                })?
                .to_string();
            let err = |reason: EntryError| CollectError::Entry {
                path: text.clone(),
                reason,
            };
            let entry = format!("{OUTPUTS_PREFIX}{text}");
            container::check_entry_name(&entry).map_err(|error| {
                err(EntryError::Name {
                    error: Box::new(error),
                })
            })?;
            let file = open_beneath(&dir_file, Path::new(&name)).map_err(err)?;
            let meta = file
                .metadata()
                .map_err(|error| err(EntryError::Fstat { error }))?;
            let ft = meta.file_type();
            if ft.is_dir() {
                // Caps before descending: the walk's memory and open
                // descriptors stay bounded whatever the job nested.
                if rel.components().count() >= MAX_OUTPUT_DEPTH {
                    return Err(CollectError::TooDeep { path: text });
                }
                dirs = dirs.saturating_add(1);
                if dirs > MAX_OUTPUT_DIRS {
                    return Err(CollectError::TooManyDirs);
                }
                stack.push((rel, file));
            } else if ft.is_file() {
                use std::os::unix::fs::MetadataExt;
                if meta.nlink() != 1 {
                    return Err(err(EntryError::HardLinks {
                        links: meta.nlink(),
                    }));
                }
                if files.len() >= MAX_OUTPUT_FILES {
                    return Err(CollectError::TooManyFiles);
                }
                let room = MAX_OUTPUT_BYTES.saturating_sub(total);
                if meta.len() > room {
                    return Err(CollectError::TooLarge);
                }
                let bytes = read_fd_capped(file, room)?;
                total = total.saturating_add(bytes.len() as u64);
                files.push((entry, bytes));
            } else {
                return Err(err(EntryError::NotFileOrDirectory));
            }
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    container::check_name_collisions(files.iter().map(|(p, _)| p.as_str())).map_err(|error| {
        CollectError::Entry {
            path: String::new(),
            reason: EntryError::Name {
                error: Box::new(error),
            },
        }
    })?;
    let metrics_entry = format!("{OUTPUTS_PREFIX}{METRICS_FILE}");
    let metrics_bytes = files
        .iter()
        .find(|(p, _)| *p == metrics_entry)
        .map(|(_, b)| b.as_slice())
        .ok_or(CollectError::Metrics(MetricsError::Missing))?;
    let metrics: BTreeMap<String, f64> = serde_json::from_slice(metrics_bytes)
        .map_err(|error| CollectError::Metrics(MetricsError::Json { error }))?;
    if let Some((k, _)) = metrics.iter().find(|(_, v)| !v.is_finite()) {
        return Err(CollectError::Metrics(MetricsError::NotFinite {
            name: k.clone(),
        }));
    }
    Ok(Collected { files, metrics })
}

/// The names in the directory `dir` refers to, sorted. Listed through
/// `/proc/self/fd/N`, which names the open directory itself (no path is
/// walked again), so the names are those of the directory whose entries
/// are then opened relative to `dir`.
fn list_dir(dir: &std::fs::File) -> std::io::Result<Vec<std::ffi::OsString>> {
    use std::os::fd::AsRawFd;
    let mut names = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<Vec<_>, _>>()?;
    names.sort();
    Ok(names)
}

/// Opens one entry of `dir` for reading, never through a link: the kernel
/// refuses a symbolic link (`ELOOP`), an escape or a mount crossing
/// (`EXDEV`). `O_NONBLOCK` so that a FIFO cannot stall the supervisor (it
/// is then refused by type).
fn open_beneath(dir: &std::fs::File, name: &Path) -> Result<std::fs::File, EntryError> {
    use std::os::fd::AsFd;
    crate::fsutil::openat2::openat2(
        dir.as_fd(),
        name,
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
        crate::fsutil::openat2::RESOLVE_STRICT,
    )
    .map(std::fs::File::from)
    .map_err(|error| match error.raw_os_error() {
        Some(libc::ELOOP) => EntryError::SymbolicLink,
        Some(libc::EXDEV) => EntryError::LeavesDirectory,
        Some(libc::ENXIO) => EntryError::Unopenable,
        Some(libc::ENOSYS) => EntryError::NoOpenat2,
        _ => EntryError::Open { error },
    })
}

/// At most `cap` bytes of `f`: more (the file grew since its `fstat`), or
/// a failed read, is [`CollectError::TooLarge`], as it always was.
fn read_fd_capped(f: std::fs::File, cap: u64) -> Result<Vec<u8>, CollectError> {
    use std::io::Read;
    let mut data = Vec::new();
    f.take(cap.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(|_| CollectError::TooLarge)?;
    if data.len() as u64 > cap {
        return Err(CollectError::TooLarge);
    }
    Ok(data)
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
mod tests {
    use super::*;

    fn entry_reason(r: Result<Collected, CollectError>) -> String {
        match r {
            Err(CollectError::Entry { path, reason }) => format!("{path}: {reason}"),
            other => panic!("expected an entry refusal, got {other:?}"),
        }
    }

    #[test]
    fn collection_refuses_links_and_missing_metrics() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), b"x").unwrap();
        assert!(matches!(
            collect_outputs(dir.path()),
            Err(CollectError::Metrics(_))
        ));
        std::fs::write(dir.path().join(METRICS_FILE), b"{\"m\": 1.0}").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("leak")).unwrap();
        let why = entry_reason(collect_outputs(dir.path()));
        assert!(why.contains("symbolic link (not followed)"), "{why}");
        std::fs::remove_file(dir.path().join("leak")).unwrap();
        let got = collect_outputs(dir.path()).unwrap();
        assert_eq!(got.metrics["m"], 1.0);
        assert_eq!(got.files.len(), 2);
    }

    /// A host file outside the output directory, and an output directory
    /// with a valid metrics file.
    fn host_and_output() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("host-secret.txt");
        std::fs::write(&host, b"HOST SECRET").unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join(METRICS_FILE), b"{\"m\": 1.0}").unwrap();
        (dir, host, out)
    }

    #[test]
    fn links_to_host_files_are_refused_not_followed() {
        // A link as a file, as a directory, and a link inside a real
        // directory: refused by the kernel at open, never read.
        let (_d, host, out) = host_and_output();
        std::os::unix::fs::symlink(&host, out.join("model.bin")).unwrap();
        let why = entry_reason(collect_outputs(&out));
        assert!(why.starts_with("model.bin: is a symbolic link"), "{why}");

        let (d, _host, out) = host_and_output();
        std::os::unix::fs::symlink(d.path(), out.join("sub")).unwrap();
        let why = entry_reason(collect_outputs(&out));
        assert!(why.starts_with("sub: is a symbolic link"), "{why}");

        let (_d, host, out) = host_and_output();
        std::fs::create_dir(out.join("sub")).unwrap();
        std::os::unix::fs::symlink(&host, out.join("sub/x")).unwrap();
        let why = entry_reason(collect_outputs(&out));
        assert!(why.starts_with("sub/x: is a symbolic link"), "{why}");
    }

    #[test]
    fn hard_links_fifos_and_colliding_names_are_refused() {
        let (_d, host, out) = host_and_output();
        std::fs::hard_link(&host, out.join("model.bin")).unwrap();
        let why = entry_reason(collect_outputs(&out));
        assert!(why.contains("2 hard links"), "{why}");

        // A FIFO must neither stall collection nor be read.
        let (_d, _host, out) = host_and_output();
        let made = std::process::Command::new("mkfifo")
            .arg(out.join("pipe"))
            .status()
            .unwrap();
        assert!(made.success());
        let why = entry_reason(collect_outputs(&out));
        assert!(why.contains("not a regular file or directory"), "{why}");

        let (_d, _host, out) = host_and_output();
        std::fs::write(out.join("Report.txt"), b"1").unwrap();
        std::fs::write(out.join("report.txt"), b"2").unwrap();
        let why = entry_reason(collect_outputs(&out));
        assert!(why.contains("differ only in ASCII case"), "{why}");

        let (_d, _host, out) = host_and_output();
        std::fs::write(out.join("aux.txt"), b"1").unwrap();
        let why = entry_reason(collect_outputs(&out));
        assert!(why.contains("Windows reserved"), "{why}");
    }

    /// The race of issue 12 item 6: a surviving job process swaps an output
    /// file for a link to a host file (and back) while the supervisor
    /// collects. Whatever the interleaving, the host file is never read:
    /// the entry is either the job's file or refused as a link.
    #[test]
    fn a_file_swapped_for_a_link_during_collection_is_never_followed() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let (d, host, out) = host_and_output();
        let staging = d.path().join("staging");
        std::fs::create_dir(&staging).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (stop, out, staging) = (stop.clone(), out.clone(), staging.clone());
            std::thread::spawn(move || {
                let target = out.join("model.bin");
                let (file, link) = (staging.join("file"), staging.join("link"));
                while !stop.load(Ordering::Relaxed) {
                    std::fs::write(&file, b"job data").unwrap();
                    std::fs::rename(&file, &target).unwrap();
                    let _ = std::fs::remove_file(&link);
                    std::os::unix::fs::symlink(&host, &link).unwrap();
                    std::fs::rename(&link, &target).unwrap();
                }
            })
        };
        let (mut read_file, mut refused) = (0u32, 0u32);
        for _ in 0..10_000 {
            match collect_outputs(&out) {
                Ok(c) => {
                    for (name, bytes) in &c.files {
                        assert_ne!(bytes.as_slice(), b"HOST SECRET", "{name} leaked");
                    }
                    if c.files.iter().any(|(n, _)| n == "outputs/model.bin") {
                        read_file += 1;
                    }
                }
                // Refused: a link seen at open, or an entry gone between
                // listing and open.
                Err(CollectError::Entry { .. }) => refused += 1,
                Err(e) => panic!("{e:?}"),
            }
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        // The link was in place at open time in many rounds (how many were
        // read as the job's file depends on scheduling). The code before
        // openat2 (lstat, then open by path) leaked the host file in some
        // runs of this test.
        eprintln!("read the job's file {read_file} times, refused a link {refused} times");
        assert!(refused > 0, "{read_file} {refused}");
    }

    #[test]
    fn openat2_refuses_links_in_any_component_and_escapes() {
        use crate::fsutil::openat2::{RESOLVE_STRICT, openat2};
        use std::os::fd::AsFd;
        let (d, _host, out) = host_and_output();
        std::fs::create_dir(out.join("real")).unwrap();
        std::fs::write(out.join("real/f"), b"ok").unwrap();
        std::os::unix::fs::symlink(out.join("real"), out.join("link")).unwrap();
        let root = std::fs::File::open(&out).unwrap();
        let open = |p: &str| openat2(root.as_fd(), Path::new(p), libc::O_RDONLY, RESOLVE_STRICT);
        assert!(open("real/f").is_ok());
        assert_eq!(
            open("link/f").unwrap_err().raw_os_error(),
            Some(libc::ELOOP)
        );
        assert_eq!(open("link").unwrap_err().raw_os_error(), Some(libc::ELOOP));
        assert_eq!(
            open("../host-secret.txt").unwrap_err().raw_os_error(),
            Some(libc::EXDEV)
        );
        let abs = d.path().join("host-secret.txt");
        assert_eq!(
            open(abs.to_str().unwrap()).unwrap_err().raw_os_error(),
            Some(libc::EXDEV)
        );
        assert!(open("/proc/self/root/etc/passwd").is_err());
    }

    /// Issue 20: a 100,000-deep directory chain (made one level at a time
    /// relative to the last, far past `PATH_MAX`) is refused by the depth
    /// cap, and the walk neither crashes nor runs out of descriptors.
    #[test]
    fn a_100000_deep_output_tree_is_refused_by_the_depth_cap() {
        use std::os::fd::{AsFd, AsRawFd};
        let (_d, _host, out) = host_and_output();
        let mut cur = std::fs::File::open(&out).unwrap();
        for _ in 0..100_000 {
            std::fs::create_dir(format!("/proc/self/fd/{}/d", cur.as_raw_fd())).unwrap();
            cur = std::fs::File::from(
                crate::fsutil::openat2::openat2(
                    cur.as_fd(),
                    Path::new("d"),
                    libc::O_RDONLY | libc::O_DIRECTORY,
                    crate::fsutil::openat2::RESOLVE_STRICT,
                )
                .unwrap(),
            );
        }
        drop(cur);
        let got = std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(move || collect_outputs(&out).map(|_| ()))
            .unwrap()
            .join()
            .unwrap();
        match got {
            Err(e @ CollectError::TooDeep { .. }) => {
                assert!(e.to_string().contains("the depth cap"), "{e}");
            }
            other => panic!("expected the depth cap, got {other:?}"),
        }
        crate::fsutil::remove_tree(_d.path()).unwrap();
    }
}
