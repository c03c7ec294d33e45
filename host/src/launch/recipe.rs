//! What the launch recipes share: the command they build ([`Recipe`]),
//! the checks on their options ([`RecipeError`] names the flag at fault),
//! and the one-line shell spelling `--dry-run` prints.

use std::path::{Path, PathBuf};

use kolm_transport::{Address, VsockAddress, VsockCid};

/// The vsock port the enclave service listens on inside the guest
/// (`kolm-enclave start --listen vsock://ANY:5005` in the image).
pub const DEFAULT_PORT: u32 = 5005;

/// Smallest guest memory accepted (MiB): the guest kernel, the enclave
/// service and one job's inputs and scratch must fit; below this a launch
/// fails later and less clearly (out of memory in the guest).
pub const MIN_MEMORY_MIB: u64 = 256;

/// Largest guest memory accepted (MiB, 4 TiB): a typo guard, far above any
/// machine this runs on.
pub const MAX_MEMORY_MIB: u64 = 4 << 20;

/// Most vCPUs accepted: QEMU's q35 limit is 1024 (288 without an IOMMU
/// setup); more is a typo.
pub const MAX_CPUS: u32 = 1024;

/// The vsock CIDs nobody may take as a guest's: 0 (hypervisor), 1 (local
/// loopback), 2 (the host).
const RESERVED_CIDS: std::ops::RangeInclusive<u32> = 0..=2;

/// A command that starts an enclave, and where the host then connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipe {
    /// `argv[0]` is the program (`nitro-cli`, `qemu-system-x86_64`).
    pub argv: Vec<String>,
    /// The enclave service's address once it is up (`vsock://CID:PORT`).
    pub connect: Address,
    /// How to stop what `argv` started.
    pub stop: Stop,
}

/// How a started enclave is stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// `nitro-cli terminate-enclave --enclave-id ID`, the ID read from
    /// `run-enclave`'s JSON output. `program` is the nitro-cli used.
    NitroTerminate { program: String },
    /// Kill the QEMU process whose pid QEMU wrote to `pidfile`
    /// (`-daemonize -pidfile`).
    KillPidfile { pidfile: PathBuf },
}

impl Recipe {
    /// The command as one shell line, every word quoted where needed.
    pub fn shell_line(&self) -> String {
        self.argv
            .iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Why a recipe cannot be built from its options.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecipeError {
    #[error("{flag} is required for --platform {platform}")]
    Missing {
        flag: &'static str,
        platform: &'static str,
    },
    #[error("{flag} {value}: CIDs 0, 1 and 2 are reserved (hypervisor, loopback, host){extra}")]
    ReservedCid {
        flag: &'static str,
        value: u32,
        extra: &'static str,
    },
    #[error("{flag} {value}: {reason}")]
    Invalid {
        flag: &'static str,
        value: String,
        reason: String,
    },
    #[error("{flag} {path}: {reason}")]
    File {
        flag: &'static str,
        path: String,
        reason: String,
    },
    #[error(
        "{flag} {value}: the debug policy bit lets the host read the guest's memory and \
         registers; pass --dangerous-debug-enclave to allow it (the evidence then says debug \
         and the verifier rejects it by default)"
    )]
    DebugRefused { flag: &'static str, value: String },
}

/// Checks a guest CID: not reserved, not `VMADDR_CID_ANY`.
pub(crate) fn check_cid(flag: &'static str, cid: u32) -> Result<(), RecipeError> {
    if RESERVED_CIDS.contains(&cid) {
        return Err(RecipeError::ReservedCid {
            flag,
            value: cid,
            extra: "",
        });
    }
    if cid == u32::MAX {
        return Err(RecipeError::Invalid {
            flag,
            value: cid.to_string(),
            reason: "4294967295 means any CID (VMADDR_CID_ANY), not a guest".into(),
        });
    }
    Ok(())
}

/// Checks the guest memory size against [`MIN_MEMORY_MIB`] and
/// [`MAX_MEMORY_MIB`].
pub(crate) fn check_memory(flag: &'static str, mib: u64) -> Result<(), RecipeError> {
    if mib < MIN_MEMORY_MIB {
        return Err(RecipeError::Invalid {
            flag,
            value: mib.to_string(),
            reason: format!("below the minimum of {MIN_MEMORY_MIB} MiB"),
        });
    }
    if mib > MAX_MEMORY_MIB {
        return Err(RecipeError::Invalid {
            flag,
            value: mib.to_string(),
            reason: format!("above the maximum of {MAX_MEMORY_MIB} MiB"),
        });
    }
    Ok(())
}

/// Checks a vCPU count: 1 ..= [`MAX_CPUS`].
pub(crate) fn check_cpus(flag: &'static str, n: u32) -> Result<(), RecipeError> {
    if n == 0 || n > MAX_CPUS {
        return Err(RecipeError::Invalid {
            flag,
            value: n.to_string(),
            reason: format!("expected 1 to {MAX_CPUS} vCPUs"),
        });
    }
    Ok(())
}

/// The vsock address the host connects to.
pub(crate) fn vsock(cid: u32, port: u32) -> Result<Address, RecipeError> {
    VsockAddress::new(VsockCid::Id(cid), port)
        .map(Address::Vsock)
        .ok_or_else(|| RecipeError::Invalid {
            flag: "--port",
            value: port.to_string(),
            reason: "4294967295 means any port (VMADDR_PORT_ANY)".into(),
        })
}

/// An existing regular file, made absolute (the command line must not
/// depend on the directory it runs in), as UTF-8 text (it is written into
/// the command line).
pub(crate) fn existing_file(flag: &'static str, path: &Path) -> Result<String, RecipeError> {
    let err = |reason: String| RecipeError::File {
        flag,
        path: path.display().to_string(),
        reason,
    };
    let abs = std::fs::canonicalize(path).map_err(|e| err(e.to_string()))?;
    let meta = std::fs::metadata(&abs).map_err(|e| err(e.to_string()))?;
    if !meta.is_file() {
        return Err(err("not a regular file".into()));
    }
    utf8(flag, &abs)
}

/// A path as UTF-8 text, or an error naming the flag.
pub(crate) fn utf8(flag: &'static str, path: &Path) -> Result<String, RecipeError> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| RecipeError::File {
            flag,
            path: path.display().to_string(),
            reason: "not valid UTF-8".into(),
        })
}

/// Quotes `word` for a POSIX shell: unchanged when it has only characters
/// no shell treats specially, else in single quotes (a single quote inside
/// written as `'\''`).
pub fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/' | b':' | b',' | b'=')
        });
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting_keeps_plain_words_and_quotes_the_rest() {
        assert_eq!(shell_quote("-machine"), "-machine");
        assert_eq!(
            shell_quote("q35,confidential-guest-support=sev0"),
            "q35,confidential-guest-support=sev0"
        );
        assert_eq!(shell_quote("console=ttyS0 quiet"), "'console=ttyS0 quiet'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
    }

    #[test]
    fn cids_memory_and_cpus_are_checked() {
        for cid in [0, 1, 2] {
            assert!(matches!(
                check_cid("--cid", cid),
                Err(RecipeError::ReservedCid { value, .. }) if value == cid
            ));
        }
        assert!(check_cid("--cid", u32::MAX).is_err());
        check_cid("--cid", 3).unwrap();
        let e = check_memory("--memory-mib", 255).unwrap_err();
        assert!(e.to_string().contains("--memory-mib 255"), "{e}");
        check_memory("--memory-mib", 256).unwrap();
        assert!(check_memory("--memory-mib", MAX_MEMORY_MIB + 1).is_err());
        assert!(check_cpus("--cpus", 0).is_err());
        assert!(check_cpus("--cpus", MAX_CPUS + 1).is_err());
        check_cpus("--cpus", 1).unwrap();
        assert!(vsock(3, u32::MAX).is_err());
        assert_eq!(vsock(3, 5005).unwrap().to_string(), "vsock://3:5005");
    }

    #[test]
    fn missing_files_name_the_flag() {
        let e = existing_file("--eif", Path::new("/nonexistent/x.eif")).unwrap_err();
        assert!(
            e.to_string().starts_with("--eif /nonexistent/x.eif: "),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let e = existing_file("--kernel", dir.path()).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }
}
