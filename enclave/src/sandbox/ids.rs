//! A uid/gid of its own for every run (issue 12, item 2), and the job's
//! writable trees handed to it for the run and back afterwards.
//!
//! Ids come from Debian's reserved range 65000-65533 (no account or file on
//! the system has them; ids named in `/etc/passwd` or `/etc/group` are
//! skipped, as is [`super::JOB_UID`]). A run holds an exclusive `flock` on
//! `/run/kolm-sandbox/uid-<n>` for as long as it runs, so no two runs, in
//! this process or another, hold the same id at once, and the next run
//! starts after the last one handed out (`next`), so consecutive runs get
//! different ids. A lock dies with its process: nothing is left to clean up.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// First id of the range runs are given.
pub const JOB_ID_FIRST: u32 = 65_000;
/// Last id of the range (65534 is `nobody`, 65535 is `(uid_t) -1` in 16 bits).
pub const JOB_ID_LAST: u32 = 65_533;

/// Where the leases live: root's, not writable by anyone else.
const LEASE_DIR: &str = "/run/kolm-sandbox";

/// Why no id could be leased.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    #[error("job id leases in {dir}: {what}: {error}")]
    Io {
        dir: String,
        what: String,
        error: std::io::Error,
    },
    #[error("job id leases in {0}: not a directory owned by root with mode 0700")]
    UnsafeDir(String),
    #[error("every job id in {JOB_ID_FIRST}-{JOB_ID_LAST} is held by a running job")]
    Exhausted,
}

/// One id held for one run; the lock goes when this is dropped.
#[derive(Debug)]
pub(super) struct Lease {
    pub id: u32,
    _lock: File,
}

fn io(dir: &Path, what: impl Into<String>) -> impl FnOnce(std::io::Error) -> IdError {
    let dir = dir.display().to_string();
    let what = what.into();
    move |source| IdError::Io {
        dir,
        what,
        error: source,
    }
}

/// Ids named in `/etc/passwd` and `/etc/group` (third field).
fn named_ids() -> BTreeSet<u32> {
    let mut ids = BTreeSet::new();
    for file in ["/etc/passwd", "/etc/group"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines() {
            if let Some(id) = line.split(':').nth(2).and_then(|f| f.parse().ok()) {
                ids.insert(id);
            }
        }
    }
    ids
}

fn lease_dir(dir: &Path) -> Result<(), IdError> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(dir, "creating")(e)),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(io(dir, "stat"))?;
    if !meta.is_dir() || meta.uid() != 0 || meta.mode() & 0o077 != 0 {
        return Err(IdError::UnsafeDir(dir.display().to_string()));
    }
    Ok(())
}

fn open_lock(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Leases the next free id (the caller is root).
pub(super) fn lease() -> Result<Lease, IdError> {
    lease_in(Path::new(LEASE_DIR), &named_ids())
}

fn lease_in(dir: &Path, skip: &BTreeSet<u32>) -> Result<Lease, IdError> {
    lease_dir(dir)?;
    // `next` is read and advanced under its own lock.
    let next_path: PathBuf = dir.join("next");
    let mut next_file = open_lock(&next_path).map_err(io(dir, "opening next"))?;
    next_file.lock().map_err(io(dir, "locking next"))?;
    let mut text = String::new();
    next_file
        .read_to_string(&mut text)
        .map_err(io(dir, "reading next"))?;
    let span = JOB_ID_LAST - JOB_ID_FIRST + 1;
    let start = text
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|n| (JOB_ID_FIRST..=JOB_ID_LAST).contains(n))
        .unwrap_or(JOB_ID_FIRST);
    for step in 0..span {
        let id = JOB_ID_FIRST + (start - JOB_ID_FIRST + step) % span;
        if id == super::JOB_UID || skip.contains(&id) {
            continue;
        }
        let path = dir.join(format!("uid-{id}"));
        let lock = open_lock(&path).map_err(io(dir, format!("opening uid-{id}")))?;
        match lock.try_lock() {
            Ok(()) => {
                let following = JOB_ID_FIRST + (id - JOB_ID_FIRST + 1) % span;
                next_file.set_len(0).map_err(io(dir, "writing next"))?;
                next_file.rewind().map_err(io(dir, "writing next"))?;
                next_file
                    .write_all(following.to_string().as_bytes())
                    .map_err(io(dir, "writing next"))?;
                return Ok(Lease { id, _lock: lock });
            }
            Err(std::fs::TryLockError::WouldBlock) => continue,
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(io(dir, format!("locking uid-{id}"))(e));
            }
        }
    }
    Err(IdError::Exhausted)
}

/// The job's writable trees, handed to the run's ids (the top directory and
/// every directory and single-link regular file under it: a tree a job
/// wrote before, such as a checkpoint directory whose supervisor was killed
/// before it could give it back, is writable by the next run's ids) and
/// given back to their owners once every job process is gone.
#[derive(Debug)]
pub(super) struct Handover {
    uid: u32,
    trees: Vec<(PathBuf, u32, u32)>,
}

impl Handover {
    /// `chown`s each tree's top directory, and the directories and
    /// single-link regular files under it (never following a link; a file
    /// with more than one link may be someone else's), to `uid`/`gid`,
    /// remembering the top's owner.
    pub(super) fn give(trees: &[PathBuf], uid: u32, gid: u32) -> std::io::Result<Handover> {
        let mut h = Handover {
            uid,
            trees: Vec::new(),
        };
        for t in trees {
            let meta = std::fs::symlink_metadata(t)?;
            if !meta.is_dir() {
                return Err(std::io::Error::other(format!(
                    "{} is not a directory",
                    t.display()
                )));
            }
            std::os::unix::fs::lchown(t, Some(uid), Some(gid))?;
            h.trees.push((t.clone(), meta.uid(), meta.gid()));
            let mut stack = vec![t.clone()];
            while let Some(dir) = stack.pop() {
                for entry in std::fs::read_dir(&dir)? {
                    let path = entry?.path();
                    let m = std::fs::symlink_metadata(&path)?;
                    if m.is_dir() {
                        stack.push(path.clone());
                    } else if !(m.is_file() && m.nlink() == 1) {
                        continue;
                    }
                    std::os::unix::fs::lchown(&path, Some(uid), Some(gid))?;
                }
            }
        }
        Ok(h)
    }

    /// Gives every entry the job's uid owns (and each top directory) back to
    /// the tree's owner, without following links. Called only after every
    /// job process is gone, so nothing changes the trees meanwhile; entries
    /// the job does not own (a link it made to someone else's file) are
    /// left alone.
    pub(super) fn give_back(self) -> std::io::Result<()> {
        let mut first_error = None;
        for (top, uid, gid) in &self.trees {
            let mut stack = vec![top.clone()];
            while let Some(dir) = stack.pop() {
                let entries = match std::fs::read_dir(&dir) {
                    Ok(e) => e,
                    Err(e) => {
                        first_error.get_or_insert(e);
                        continue;
                    }
                };
                for entry in entries.filter_map(Result::ok) {
                    let path = entry.path();
                    let Ok(meta) = std::fs::symlink_metadata(&path) else {
                        continue;
                    };
                    if meta.is_dir() {
                        stack.push(path.clone());
                    }
                    if meta.uid() == self.uid
                        && let Err(e) = std::os::unix::fs::lchown(&path, Some(*uid), Some(*gid))
                    {
                        first_error.get_or_insert(e);
                    }
                }
            }
            if let Err(e) = std::os::unix::fs::lchown(top, Some(*uid), Some(*gid)) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_distinct_while_held_and_advance() {
        if unsafe_not_root() {
            eprintln!("SKIP: leases need root (the lease directory must be root's)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let leases_dir = dir.path().join("leases");
        let skip = BTreeSet::from([JOB_ID_FIRST + 1]);
        let a = lease_in(&leases_dir, &skip).unwrap();
        let b = lease_in(&leases_dir, &skip).unwrap();
        assert_ne!(a.id, b.id);
        assert!((JOB_ID_FIRST..=JOB_ID_LAST).contains(&a.id));
        assert_ne!(b.id, JOB_ID_FIRST + 1, "a named id is skipped");
        let held = a.id;
        drop(a);
        // Released, but the next lease still moves on.
        let c = lease_in(&leases_dir, &skip).unwrap();
        assert_ne!(c.id, held);
        assert_ne!(c.id, b.id);
    }

    fn unsafe_not_root() -> bool {
        std::fs::metadata("/proc/self")
            .map(|m| m.uid())
            .unwrap_or(1)
            != 0
    }

    #[test]
    fn a_lease_directory_others_can_write_is_refused() {
        if unsafe_not_root() {
            eprintln!("SKIP: needs root");
            return;
        }
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            lease_in(dir.path(), &BTreeSet::new()),
            Err(IdError::UnsafeDir(_))
        ));
    }
}
