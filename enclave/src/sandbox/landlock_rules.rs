//! Landlock, best effort: defence in depth under the seccomp filters.
//!
//! The ruleset handles every file-system right of ABI 7, TCP bind/connect
//! (no port is allowed) and the abstract-unix-socket and signal scopes. The
//! job may read its inputs, read and write its output directory, and read and
//! execute the program and the system's library directories. On a kernel
//! without Landlock (stock Nitro kernels) the status is recorded as
//! `not_enforced` and seccomp alone holds the line.

use std::path::{Path, PathBuf};

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
    for p in &paths.read_only {
        created = created.add_rule(rule(p, tree_ro)?).map_err(rs)?;
    }
    for p in &paths.read_write {
        created = created.add_rule(rule(p, tree_rw)?).map_err(rs)?;
    }
    Ok(Prepared(created))
}

/// Enforces the ruleset on this process; returns `(kernel ABI, status)`.
pub(super) fn enforce(prepared: Prepared) -> Result<(u32, String), LandlockError> {
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
    let text = match status.ruleset {
        RulesetStatus::FullyEnforced => "fully_enforced",
        RulesetStatus::PartiallyEnforced => "partially_enforced",
        RulesetStatus::NotEnforced => "not_enforced",
    };
    Ok((u32::try_from(abi).unwrap_or(0), text.to_string()))
}
