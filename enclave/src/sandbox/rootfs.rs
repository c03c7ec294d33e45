//! The job's private root (issue 12, item 3): in a new mount namespace,
//! stage 2 builds a root that holds only what the job may use and pivots
//! into it, so no socket path of the host exists for the job to `connect()`
//! to (Landlock ABI 7 does not mediate connecting to a pathname socket), no
//! other job's files are reachable by path, and the writable trees are
//! `noexec`.
//!
//! The root is a tmpfs owned by root (mode 0755, then remounted read-only)
//! holding bind mounts of, and nothing else:
//!
//! | path | mount flags |
//! | --- | --- |
//! | the system directories (`/usr`, `/lib`, `/lib64`, `/lib32`, `/bin`, `/sbin`; a symbolic link is copied as a link) | read-only, nosuid, nodev |
//! | `/etc/ld.so.cache` | read-only, nosuid, nodev, noexec |
//! | `/dev/null`, `/dev/zero`, `/dev/random`, `/dev/urandom`, and every `/dev/nvidia*` node when present (GPU jobs) | nosuid, noexec |
//! | `/sys`, only when a `/dev/nvidia*` node is present (the CUDA driver reads PCI topology there; sysfs has no sockets) | read-only, nosuid, nodev, noexec |
//! | the program | read-only, nosuid, nodev |
//! | the read-only trees | read-only, nosuid, nodev, noexec |
//! | the read-write trees | nosuid, nodev, noexec |
//! | `/proc`: a fresh procfs of the job's PID namespace (the host's `/proc`, bound, only when there is none) | nosuid, nodev, noexec |
//!
//! This is the same list Landlock allows (`landlock_rules.rs`), so Landlock
//! and the mount namespace each hold the line alone. There is no `/tmp`,
//! `/run`, `/var` or `/dev/shm`: the places where host daemons keep their
//! sockets do not exist. Abstract unix sockets live in the network
//! namespace, which is empty (`hygiene.network_namespace`), and Landlock's
//! abstract-socket scope stops them too.
//!
//! The construction follows bubblewrap: a tmpfs on `/tmp` becomes the root
//! with the old root under `/oldroot`, the binds are made from there into
//! `/newroot`, the old root is detached, and `pivot_root(".", ".")` moves
//! into `/newroot`.

use std::ffi::CStr;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use super::{gpu, sys};

/// Directories the dynamic loader and the C library live in (as Landlock's
/// `SYSTEM_DIRS`).
const SYSTEM_DIRS: [&str; 6] = ["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"];
/// Single system files (as Landlock's `SYSTEM_READ_FILES`, devices apart).
const SYSTEM_FILES: [&str; 1] = ["/etc/ld.so.cache"];
/// Device nodes every job gets.
const DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"];

const RO_EXEC: u64 = sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV;
const RO_DATA: u64 = RO_EXEC | sys::MOUNT_ATTR_NOEXEC;
const RW_DATA: u64 = sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV | sys::MOUNT_ATTR_NOEXEC;
const DEVICE: u64 = sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NOEXEC;

/// What the job's root holds beyond the system files.
#[derive(Debug, Clone)]
pub(super) struct Layout {
    pub program: PathBuf,
    pub read_only: Vec<PathBuf>,
    pub read_write: Vec<PathBuf>,
    /// Shared-library directories, bound as the system directories are.
    pub library_dirs: Vec<PathBuf>,
    /// Mount a fresh procfs (the job is in a PID namespace of its own);
    /// else the host's `/proc` is bound.
    pub fresh_proc: bool,
}

/// One bind mount into the new root.
#[derive(Debug, Clone)]
struct Bind {
    path: PathBuf,
    attrs: u64,
    /// Copy a symbolic link as a link instead of binding its target.
    copy_symlink: bool,
}

/// Why the root could not be built; the run does not start.
#[derive(Debug, thiserror::Error)]
#[error("private root: {what}: {error}")]
pub(super) struct RootError {
    what: String,
    error: std::io::Error,
}

fn err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RootError {
    let what = what.into();
    move |source| RootError {
        what,
        error: source,
    }
}

/// `base` joined with the absolute path `p` (its root component dropped).
fn under(base: &Path, p: &Path) -> PathBuf {
    let mut out = base.to_path_buf();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

fn depth(p: &Path) -> usize {
    p.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count()
}

/// The binds for `layout`, shallowest first so a deeper bind (the program
/// inside a tree) lands on top. `old` is where the host's root is visible.
fn binds(layout: &Layout, old: &Path) -> Vec<Bind> {
    let mut out = Vec::new();
    let exists = |p: &str| std::fs::symlink_metadata(under(old, Path::new(p))).is_ok();
    for d in SYSTEM_DIRS.iter().filter(|d| exists(d)) {
        out.push(Bind {
            path: PathBuf::from(d),
            attrs: RO_EXEC,
            copy_symlink: true,
        });
    }
    for f in SYSTEM_FILES.iter().filter(|f| exists(f)) {
        out.push(Bind {
            path: PathBuf::from(f),
            attrs: RO_DATA,
            copy_symlink: false,
        });
    }
    let mut devices: Vec<PathBuf> = DEVICES
        .iter()
        .filter(|d| exists(d))
        .map(PathBuf::from)
        .collect();
    // The same rule Landlock uses to grant the GPU (`gpu::nvidia_nodes`).
    let nvidia = gpu::nvidia_nodes(&under(old, Path::new("/dev")));
    let gpu = !nvidia.is_empty();
    devices.extend(nvidia.into_iter().map(|n| Path::new("/dev").join(n)));
    for d in devices {
        out.push(Bind {
            path: d,
            attrs: DEVICE,
            copy_symlink: false,
        });
    }
    if gpu && exists("/sys") {
        out.push(Bind {
            path: PathBuf::from("/sys"),
            attrs: RO_DATA,
            copy_symlink: false,
        });
    }
    if !layout.fresh_proc {
        out.push(Bind {
            path: PathBuf::from("/proc"),
            attrs: RW_DATA,
            copy_symlink: false,
        });
    }
    for p in &layout.read_write {
        out.push(Bind {
            path: p.clone(),
            attrs: RW_DATA,
            copy_symlink: false,
        });
    }
    for p in &layout.read_only {
        out.push(Bind {
            path: p.clone(),
            attrs: RO_DATA,
            copy_symlink: false,
        });
    }
    for p in &layout.library_dirs {
        out.push(Bind {
            path: p.clone(),
            attrs: RO_EXEC,
            copy_symlink: false,
        });
    }
    out.push(Bind {
        path: layout.program.clone(),
        attrs: RO_EXEC,
        copy_symlink: false,
    });
    // Stable: at equal depth the order above holds (read-only after
    // read-write, so a tree named both ways ends up read-only).
    out.sort_by_key(|b| depth(&b.path));
    out
}

fn mkdir_all(p: &Path) -> Result<(), RootError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(p)
        .map_err(err(format!("creating {}", p.display())))
}

/// Makes the mount point for `source` at `target`: a directory for a
/// directory, an empty file for anything else.
fn mount_point(source: &Path, target: &Path) -> Result<(), RootError> {
    let meta = std::fs::metadata(source).map_err(err(format!("{}", source.display())))?;
    if let Some(parent) = target.parent() {
        mkdir_all(parent)?;
    }
    if meta.is_dir() {
        mkdir_all(target)
    } else {
        if std::fs::symlink_metadata(target).is_err() {
            std::fs::File::create(target).map_err(err(format!("creating {}", target.display())))?;
        }
        Ok(())
    }
}

/// Builds the private root and moves into it. The caller is root, in a new
/// mount namespace (`unshare(CLONE_NEWNS)`), single-threaded; on return the
/// current directory is `/` of the new root.
pub(super) fn enter(layout: &Layout) -> Result<(), RootError> {
    const TMPFS: &CStr = c"tmpfs";
    let root = Path::new("/");
    // Nothing done here propagates back to the host's mounts.
    sys::mount(None, root, None, libc::MS_REC | libc::MS_PRIVATE, None)
        .map_err(err("making / private"))?;
    let base = Path::new("/tmp");
    sys::mount(
        Some(Path::new("tmpfs")),
        base,
        Some(TMPFS),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(c"mode=0755"),
    )
    .map_err(err("mounting a tmpfs on /tmp"))?;
    std::env::set_current_dir(base).map_err(err("chdir /tmp"))?;
    for d in ["newroot", "oldroot"] {
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(d)
            .map_err(err(format!("mkdir {d}")))?;
    }
    sys::pivot_root(Path::new("."), Path::new("oldroot"))
        .map_err(err("pivot_root to the tmpfs"))?;
    std::env::set_current_dir(root).map_err(err("chdir /"))?;
    let old = Path::new("/oldroot");
    let new = Path::new("/newroot");
    sys::mount(Some(new), new, None, libc::MS_BIND, None).map_err(err("binding /newroot"))?;
    std::fs::set_permissions(new, std::fs::Permissions::from_mode(0o755))
        .map_err(err("chmod /newroot"))?;

    for b in binds(layout, old) {
        let source = under(old, &b.path);
        let target = under(new, &b.path);
        let meta =
            std::fs::symlink_metadata(&source).map_err(err(format!("{}", b.path.display())))?;
        if b.copy_symlink && meta.file_type().is_symlink() {
            let link = std::fs::read_link(&source)
                .map_err(err(format!("reading link {}", b.path.display())))?;
            if let Some(parent) = target.parent() {
                mkdir_all(parent)?;
            }
            std::os::unix::fs::symlink(&link, &target)
                .map_err(err(format!("copying link {}", b.path.display())))?;
            continue;
        }
        mount_point(&source, &target)?;
        sys::mount(
            Some(&source),
            &target,
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        )
        .map_err(err(format!("binding {}", b.path.display())))?;
        sys::mount_setattr_recursive(&target, b.attrs)
            .map_err(err(format!("mount flags on {}", b.path.display())))?;
    }
    if layout.fresh_proc {
        let proc_dir = new.join("proc");
        mkdir_all(&proc_dir)?;
        sys::mount(
            Some(Path::new("proc")),
            &proc_dir,
            Some(c"proc"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None,
        )
        .map_err(err("mounting /proc"))?;
    }

    // Detach the host's root, then make /newroot the root.
    sys::umount2(old, libc::MNT_DETACH).map_err(err("detaching the old root"))?;
    std::env::set_current_dir(new).map_err(err("chdir /newroot"))?;
    sys::pivot_root(Path::new("."), Path::new(".")).map_err(err("pivot_root to /newroot"))?;
    sys::umount2(Path::new("."), libc::MNT_DETACH).map_err(err("detaching the tmpfs root"))?;
    std::env::set_current_dir(root).map_err(err("chdir /"))?;
    // The root itself: read-only (only the trees below are writable).
    sys::mount(
        None,
        root,
        None,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
        None,
    )
    .map_err(err("remounting / read-only"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_joined_under_a_base() {
        assert_eq!(
            under(Path::new("/oldroot"), Path::new("/usr/lib")),
            PathBuf::from("/oldroot/usr/lib")
        );
        assert_eq!(
            under(Path::new("/newroot"), Path::new("/a/../b")),
            PathBuf::from("/newroot/b")
        );
    }

    #[test]
    fn deeper_binds_come_later_and_trees_are_noexec() {
        let layout = Layout {
            program: PathBuf::from("/work/in/bin/prog"),
            read_only: vec![PathBuf::from("/work/in")],
            read_write: vec![PathBuf::from("/work/out")],
            library_dirs: vec![PathBuf::from("/opt/cuda/lib")],
            fresh_proc: true,
        };
        let b = binds(&layout, Path::new("/"));
        // Library directories are loadable (no noexec), never writable.
        let lib = b[b
            .iter()
            .position(|b| b.path == Path::new("/opt/cuda/lib"))
            .unwrap()]
        .attrs;
        assert_eq!(lib & sys::MOUNT_ATTR_NOEXEC, 0);
        assert_ne!(lib & sys::MOUNT_ATTR_RDONLY, 0);
        let pos = |p: &str| b.iter().position(|b| b.path == Path::new(p)).unwrap();
        assert!(pos("/work/in") < pos("/work/in/bin/prog"));
        assert_eq!(
            b[pos("/work/out")].attrs & sys::MOUNT_ATTR_NOEXEC,
            sys::MOUNT_ATTR_NOEXEC
        );
        assert_eq!(b[pos("/work/in")].attrs, RO_DATA);
        assert_eq!(
            b[pos("/work/in/bin/prog")].attrs & sys::MOUNT_ATTR_NOEXEC,
            0
        );
        // No host directory that holds daemons' sockets is ever bound.
        for p in [
            "/run", "/var/run", "/tmp", "/var", "/dev/shm", "/home", "/etc",
        ] {
            assert!(b.iter().all(|b| b.path != Path::new(p)), "{p}");
        }
        assert!(b.iter().all(|b| b.path != Path::new("/proc")));
    }
}
