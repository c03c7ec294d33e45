//! Landlock, best effort: defence in depth under the seccomp filters.
//!
//! The ruleset handles every file-system right of ABI 7, TCP bind/connect
//! (no port is allowed) and the abstract-unix-socket and signal scopes. The
//! job may read its inputs, read and write its output directory, and read and
//! execute the program and the system's library directories. When `/dev`
//! holds an `nvidia*` entry (the rule the private root binds the GPU by,
//! `gpu.rs`), the CUDA driver also gets its device nodes (read, write,
//! ioctl), `/sys` (read only), its own `/proc/self/maps` (read only) and
//! `/proc/self/task` (write, for thread names); without one, no GPU rule
//! exists. On a kernel without Landlock (stock Nitro kernels) the status
//! is recorded as `not_enforced` and seccomp alone holds the line.

use std::path::{Path, PathBuf};

use kolm_format::sandbox_record::{LandlockRecord, LandlockStatus as RecordStatus};

use super::gpu;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus,
    PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus,
    Scope,
};

/// The ABI the rules are written against (what this kernel offers).
const TARGET_ABI: ABI = ABI::V7;

/// Directories the dynamic loader and the C library live in: read and
/// execute. Missing ones are skipped.
const SYSTEM_DIRS: [&str; 6] = ["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"];
/// Single files a program commonly opens: read only.
const SYSTEM_READ_FILES: [&str; 3] = ["/etc/ld.so.cache", "/dev/urandom", "/dev/random"];
/// Device files that are safe to read and write.
const SYSTEM_RW_FILES: [&str; 2] = ["/dev/null", "/dev/zero"];

/// What a job may touch.
#[derive(Debug, Clone, Default)]
pub(super) struct Paths {
    /// The program file (read + execute).
    pub program: PathBuf,
    /// Read-only trees (the inputs).
    pub read_only: Vec<PathBuf>,
    /// Read-write trees (the outputs; no execute).
    pub read_write: Vec<PathBuf>,
    /// Shared-library directories (read + execute, as the system ones).
    pub library_dirs: Vec<PathBuf>,
}

/// Why the ruleset could not be built (a path the caller named is missing,
/// or the kernel refused a rule it claims to support).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LandlockError {
    #[error("landlock path {path}: {reason}")]
    Path { path: String, reason: String },
    #[error("landlock ruleset: {0}")]
    Ruleset(String),
}

/// A ruleset with all rules added, not yet enforced. Built before the uid
/// switch (path lookups as root), enforced after `NO_NEW_PRIVS`.
#[derive(Debug)]
pub(super) struct Prepared(RulesetCreated);

fn rule(path: &Path, access: BitFlags<AccessFs>) -> Result<PathBeneath<PathFd>, LandlockError> {
    let fd = PathFd::new(path).map_err(|e| LandlockError::Path {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    Ok(PathBeneath::new(fd, access))
}

/// The rules a GPU job gets in addition, with `root` as the job's root
/// (`/`; a scratch directory in tests). None at all unless `root/dev` holds
/// an `nvidia*` entry; paths that do not exist are skipped. Each was
/// measured necessary on an H200 with the CUDA 13 driver (`docs/sandbox.md`,
/// "GPU jobs"), except `/sys`.
fn gpu_rules(root: &Path, abi: ABI) -> Vec<(PathBuf, BitFlags<AccessFs>)> {
    let at = |p: &str| root.join(p.trim_start_matches('/'));
    let nodes = gpu::nvidia_nodes(&at("/dev"));
    if nodes.is_empty() {
        return Vec::new();
    }
    let file = AccessFs::from_file(abi);
    // The driver opens `nvidiactl`, `nvidia<N>` and `nvidia-uvm` read-write
    // and drives the GPU through ioctls on them (`IoctlDev`, ABI 5 on;
    // without it `cuInit` returns 100, no device). Execute, truncate and
    // every directory right stay denied; `nvidia-caps` is a directory, so
    // its capability nodes are granted beneath it.
    let device = (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev) & file;
    let mut out: Vec<(PathBuf, BitFlags<AccessFs>)> = nodes
        .into_iter()
        .map(|n| (at("/dev").join(n), device))
        .collect();
    // PCI topology, NUMA nodes, CPU and memory layout, read only (the
    // private root binds `/sys` read-only for GPU jobs alone). `cuInit` and
    // a memory round trip succeed without it; the driver reads it for
    // topology and affinity queries.
    let sys = at("/sys");
    if sys.is_dir() {
        out.push((sys, AccessFs::ReadFile | AccessFs::ReadDir));
    }
    // The driver reads its own process's memory map at initialisation
    // (`cuInit` returns 2, out of memory, without it). `/proc/self` is
    // resolved by the process that enforces the ruleset, which is the
    // job's first process ([`add_own_proc_rules`]): the rule covers it
    // only, and this one file.
    // The kernel module's version line, read only, for the job's record of
    // its environment (`environment.gpu.driver_version`); one file.
    let version = at("/proc/driver/nvidia/version");
    if version.exists() {
        out.push((version, BitFlags::from(AccessFs::ReadFile) & file));
    }
    let maps = at("/proc/self/maps");
    if maps.exists() {
        out.push((maps, BitFlags::from(AccessFs::ReadFile) & file));
    }
    // The driver names the threads it starts by rewriting
    // `/proc/self/task/<tid>/comm` (`open` with `O_TRUNC`; `cuInit` returns
    // 304 without it). The threads do not exist yet, so the grant is on
    // the job's `task` directory: write and truncate beneath it, no read,
    // no create or remove (procfs allows neither anyway).
    let task = at("/proc/self/task");
    if task.is_dir() {
        out.push((task, (AccessFs::WriteFile | AccessFs::Truncate) & file));
    }
    out
}

/// Builds the ruleset for `paths`.
pub(super) fn prepare(paths: &Paths) -> Result<Prepared, LandlockError> {
    let abi = TARGET_ABI;
    let rs = |e: landlock::RulesetError| LandlockError::Ruleset(e.to_string());
    let read_exec = AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir;
    let file_read = BitFlags::from(AccessFs::ReadFile) & AccessFs::from_file(abi);
    let file_rw = (AccessFs::ReadFile | AccessFs::WriteFile) & AccessFs::from_file(abi);
    let tree_ro = AccessFs::ReadFile | AccessFs::ReadDir;
    let tree_rw = AccessFs::from_all(abi) & !AccessFs::Execute;

    let mut created = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(rs)?
        .handle_access(AccessNet::from_all(abi))
        .map_err(rs)?
        .scope(Scope::from_all(abi))
        .map_err(rs)?
        .create()
        .map_err(rs)?;
    for dir in SYSTEM_DIRS {
        let p = Path::new(dir);
        if p.exists() {
            created = created.add_rule(rule(p, read_exec)?).map_err(rs)?;
        }
    }
    for file in SYSTEM_READ_FILES {
        let p = Path::new(file);
        if p.exists() {
            created = created.add_rule(rule(p, file_read)?).map_err(rs)?;
        }
    }
    for file in SYSTEM_RW_FILES {
        let p = Path::new(file);
        if p.exists() {
            created = created.add_rule(rule(p, file_rw)?).map_err(rs)?;
        }
    }
    let program_access = (AccessFs::Execute | AccessFs::ReadFile) & AccessFs::from_file(abi);
    created = created
        .add_rule(rule(&paths.program, program_access)?)
        .map_err(rs)?;
    for (p, access) in gpu_rules(Path::new("/"), abi) {
        if !p.starts_with(OWN_PROC) {
            created = created.add_rule(rule(&p, access)?).map_err(rs)?;
        }
    }
    for p in &paths.read_only {
        created = created.add_rule(rule(p, tree_ro)?).map_err(rs)?;
    }
    for p in &paths.library_dirs {
        created = created.add_rule(rule(p, read_exec)?).map_err(rs)?;
    }
    for p in &paths.read_write {
        created = created.add_rule(rule(p, tree_rw)?).map_err(rs)?;
    }
    Ok(Prepared(created))
}

/// Where the GPU rules for the job's own process live.
const OWN_PROC: &str = "/proc/self";

/// Adds the GPU rules under `/proc/self`, resolved now: call it in the
/// process that enforces the ruleset and becomes the job (as root that is
/// the job forked by kolm's init, pid 2, not stage 2 itself).
pub(super) fn add_own_proc_rules(prepared: Prepared) -> Result<Prepared, LandlockError> {
    let mut created = prepared.0;
    for (p, access) in gpu_rules(Path::new("/"), TARGET_ABI) {
        if p.starts_with(OWN_PROC) {
            created = created
                .add_rule(rule(&p, access)?)
                .map_err(|e| LandlockError::Ruleset(e.to_string()))?;
        }
    }
    Ok(Prepared(created))
}

/// Adds the `/proc/self` rules and enforces the ruleset on this process,
/// the one that becomes the job: the record's `landlock`. `None` (the
/// caller disabled Landlock) is `dangerous_disabled`; a failure is recorded
/// as `error: ...` and the job runs under seccomp alone (best effort; the
/// policy's `require_landlock` refuses such a record).
pub(super) fn enforce_on_self(prepared: Option<Prepared>, probed_abi: u32) -> LandlockRecord {
    let Some(p) = prepared else {
        return LandlockRecord {
            abi: probed_abi,
            status: RecordStatus::DangerousDisabled,
        };
    };
    match add_own_proc_rules(p).and_then(enforce) {
        Ok((abi, status)) => LandlockRecord { abi, status },
        Err(e) => LandlockRecord {
            abi: probed_abi,
            status: RecordStatus::Error(e.to_string()),
        },
    }
}

/// Enforces the ruleset on this process; returns `(kernel ABI, status)`.
pub(super) fn enforce(prepared: Prepared) -> Result<(u32, RecordStatus), LandlockError> {
    let status = prepared
        .0
        .restrict_self()
        .map_err(|e| LandlockError::Ruleset(e.to_string()))?;
    let abi = match status.landlock {
        LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        } => kernel_abi.unwrap_or(effective_abi as i32),
        _ => 0,
    };
    let record = match status.ruleset {
        RulesetStatus::FullyEnforced => RecordStatus::FullyEnforced,
        RulesetStatus::PartiallyEnforced => RecordStatus::PartiallyEnforced,
        RulesetStatus::NotEnforced => RecordStatus::NotEnforced,
    };
    Ok((u32::try_from(abi).unwrap_or(0), record))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch root holding `dev` with `devices`, `sys` and the `/proc`
    /// entries the GPU rules name.
    fn root_with(devices: &[&str]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let p = root.path();
        std::fs::create_dir_all(p.join("dev")).unwrap();
        std::fs::create_dir_all(p.join("sys/bus/pci")).unwrap();
        std::fs::create_dir_all(p.join("proc/self/task/1")).unwrap();
        std::fs::write(p.join("proc/self/maps"), b"").unwrap();
        std::fs::create_dir_all(p.join("proc/driver/nvidia")).unwrap();
        std::fs::write(p.join("proc/driver/nvidia/version"), b"").unwrap();
        for d in devices {
            std::fs::write(p.join("dev").join(d), b"").unwrap();
        }
        root
    }

    #[test]
    fn no_gpu_rule_without_an_nvidia_node() {
        let root = root_with(&["null", "zero", "urandom", "nvme0"]);
        assert!(gpu_rules(root.path(), TARGET_ABI).is_empty());
        // Nor without a /dev at all.
        let empty = tempfile::tempdir().unwrap();
        assert!(gpu_rules(empty.path(), TARGET_ABI).is_empty());
    }

    #[test]
    fn gpu_nodes_get_read_write_ioctl_and_the_rest_the_least_it_needs() {
        let root = root_with(&["null", "nvidiactl", "nvidia0", "nvidia-uvm"]);
        let p = root.path();
        let rules = gpu_rules(p, TARGET_ABI);
        let device = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev;
        let expected: Vec<(PathBuf, BitFlags<AccessFs>)> = vec![
            (p.join("dev/nvidia-uvm"), device),
            (p.join("dev/nvidia0"), device),
            (p.join("dev/nvidiactl"), device),
            (p.join("sys"), AccessFs::ReadFile | AccessFs::ReadDir),
            (
                p.join("proc/driver/nvidia/version"),
                AccessFs::ReadFile.into(),
            ),
            (p.join("proc/self/maps"), AccessFs::ReadFile.into()),
            (
                p.join("proc/self/task"),
                AccessFs::WriteFile | AccessFs::Truncate,
            ),
        ];
        assert_eq!(rules, expected);
        // Nothing executable, nothing created, removed or renamed; write
        // only on the device nodes and the job's own threads.
        let dir_rights = AccessFs::from_all(TARGET_ABI) & !AccessFs::from_file(TARGET_ABI);
        for (path, access) in &rules {
            assert!(!access.contains(AccessFs::Execute), "{}", path.display());
            assert!(
                (*access & dir_rights & !AccessFs::ReadDir).is_empty(),
                "{}",
                path.display()
            );
            if access.contains(AccessFs::WriteFile) {
                assert!(
                    path.starts_with(p.join("dev")) || path == &p.join("proc/self/task"),
                    "{}",
                    path.display()
                );
            }
        }
    }

    #[test]
    fn ioctl_is_granted_only_where_the_abi_has_it() {
        let root = root_with(&["nvidiactl"]);
        let rules = gpu_rules(root.path(), ABI::V4);
        assert_eq!(rules[0].1, AccessFs::ReadFile | AccessFs::WriteFile);
    }
}
