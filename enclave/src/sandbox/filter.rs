//! The compiled seccomp filters, embedded at build time by `build.rs` from
//! `enclave/seccomp/policy.json` (the one source for every architecture;
//! the target's rules are composed from it), and the one rewrite the
//! sandbox makes to them.
//!
//! seccompiler 0.5 has no user-notification action, so the counted filter is
//! written with `"match_action": "trap"` and every `RET SECCOMP_RET_TRAP` of
//! it is rewritten here to `RET SECCOMP_RET_USER_NOTIF` before installation.
//! The rewrite is checked: the program must return nothing but ALLOW, TRAP
//! and the architecture check's KILL_PROCESS before it, and at least one TRAP
//! must have been rewritten.

use kolm_format::sandbox_record::FilterRecord;
use sha2::{Digest, Sha256};

use super::Profile;

/// `(code, jt, jf, k)` as `build.rs` writes it.
type RawInsn = (u16, u8, u8, u32);

mod generated {
    include!(concat!(env!("OUT_DIR"), "/seccomp_filters.rs"));
}

/// One classic-BPF instruction, laid out as the kernel's `struct sock_filter`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_TRAP: u32 = 0x0003_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_USER_NOTIF: u32 = 0x7fc0_0000;
const RET_ALLOW: u32 = 0x7fff_0000;

/// What a filter does to the calls it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// Counted: `SECCOMP_RET_USER_NOTIF`, answered by the supervisor.
    Counted,
    /// Hard deny: `SECCOMP_RET_ERRNO(EPERM)` from the kernel alone.
    Deny,
    /// Hard deny with `ENOSYS` (clone3, so libc falls back to clone).
    DenyEnosys,
}

impl Role {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Role::Counted => "counted",
            Role::Deny => "deny",
            Role::DenyEnosys => "deny_enosys",
        }
    }
}

/// A filter ready to install.
#[derive(Debug, Clone)]
pub(super) struct Filter {
    pub name: &'static str,
    pub role: Role,
    pub program: Vec<Insn>,
}

impl Filter {
    /// sha256 over the installed bytes: each instruction as the kernel reads
    /// it (`code` u16 LE, `jt`, `jf`, `k` u32 LE).
    pub(super) fn sha256(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        for i in &self.program {
            h.update(i.code.to_le_bytes());
            h.update([i.jt, i.jf]);
            h.update(i.k.to_le_bytes());
        }
        h.finalize().into()
    }

    /// The filter as the record lists it.
    pub(super) fn record(&self) -> FilterRecord {
        FilterRecord {
            name: self.name.to_string(),
            role: self.role.as_str().to_string(),
            instructions: self.program.len(),
            sha256: hex::encode(self.sha256()),
        }
    }
}

/// Why the filters could not be prepared.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FilterError {
    #[error("no seccomp filter is compiled for this architecture ({0})")]
    UnsupportedArch(&'static str),
    #[error("compiled filter {0:?} is missing")]
    Missing(&'static str),
    #[error("filter {name:?}: unexpected return value {k:#010x} at instruction {index}")]
    UnexpectedReturn {
        name: &'static str,
        index: usize,
        k: u32,
    },
    #[error("filter {0:?}: no TRAP return to rewrite to USER_NOTIF")]
    NothingToRewrite(&'static str),
}

/// Where the filters came from, as recorded in `filter_source`: the
/// architecture's policy document (`seccomp/x86_64.json`), which the build
/// composes from the one source `enclave/seccomp/policy.json` and writes to
/// `$OUT_DIR/seccomp/<arch>.json` (byte-identical to the per-arch file that
/// was committed before, so records keep their bytes); empty on an
/// architecture without filters (the sandbox then refuses to start).
pub(super) fn source_file() -> &'static str {
    generated::FILTER_SOURCE
}

fn compiled(name: &'static str) -> Result<Vec<Insn>, FilterError> {
    if generated::PROGRAMS.is_empty() {
        return Err(FilterError::UnsupportedArch(std::env::consts::ARCH));
    }
    generated::PROGRAMS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, p)| {
            p.iter()
                .map(|&(code, jt, jf, k)| Insn { code, jt, jf, k })
                .collect()
        })
        .ok_or(FilterError::Missing(name))
}

/// Rewrites the counted filter's TRAP returns to USER_NOTIF.
pub(super) fn rewrite_trap_to_notif(
    name: &'static str,
    mut program: Vec<Insn>,
) -> Result<Vec<Insn>, FilterError> {
    let mut rewritten = 0usize;
    for (index, insn) in program.iter_mut().enumerate() {
        if insn.code != BPF_RET_K {
            continue;
        }
        match insn.k {
            RET_TRAP => {
                insn.k = RET_USER_NOTIF;
                rewritten += 1;
            }
            RET_ALLOW | RET_KILL_PROCESS => {}
            k => return Err(FilterError::UnexpectedReturn { name, index, k }),
        }
    }
    if rewritten == 0 {
        return Err(FilterError::NothingToRewrite(name));
    }
    Ok(program)
}

/// Checks a deny filter returns only ALLOW, KILL_PROCESS and `errno`.
fn check_deny(name: &'static str, program: &[Insn], errno: u32) -> Result<(), FilterError> {
    for (index, insn) in program.iter().enumerate() {
        if insn.code == BPF_RET_K
            && !matches!(insn.k, RET_ALLOW | RET_KILL_PROCESS)
            && insn.k != (RET_ERRNO | errno)
        {
            return Err(FilterError::UnexpectedReturn {
                name,
                index,
                k: insn.k,
            });
        }
    }
    Ok(())
}

/// The filters a run needs beyond its profile's: what the job's
/// namespaces did not already take away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Extra {
    /// The job shares the host's IPC namespace: deny the SysV IPC calls
    /// (`deny_sysv_ipc`).
    pub deny_sysv_ipc: bool,
    /// `vm.memfd_noexec` could not be set in a PID namespace of the job's
    /// own: deny `memfd_create` (`deny_memfd`).
    pub deny_memfd: bool,
}

/// The filters of `profile` (and `extra`) in installation order: the
/// counted filter first (it needs `seccomp(2)`), then `deny_enosys`, the
/// extra deny filters, and `deny` last (it forbids `seccomp(2)` itself).
pub(super) fn for_profile(profile: Profile, extra: Extra) -> Result<Vec<Filter>, FilterError> {
    let counted_name = match profile {
        Profile::Default => "counted_default",
        Profile::Strict => "counted_strict",
    };
    let counted = rewrite_trap_to_notif(counted_name, compiled(counted_name)?)?;
    let deny = |name: &'static str, role: Role, errno: i32| -> Result<Filter, FilterError> {
        let program = compiled(name)?;
        check_deny(name, &program, errno as u32)?;
        Ok(Filter {
            name,
            role,
            program,
        })
    };
    let mut filters = vec![
        Filter {
            name: counted_name,
            role: Role::Counted,
            program: counted,
        },
        deny("deny_enosys", Role::DenyEnosys, libc::ENOSYS)?,
    ];
    if extra.deny_sysv_ipc {
        filters.push(deny("deny_sysv_ipc", Role::Deny, libc::EPERM)?);
    }
    if extra.deny_memfd {
        filters.push(deny("deny_memfd", Role::Deny, libc::EPERM)?);
    }
    filters.push(deny("deny", Role::Deny, libc::EPERM)?);
    Ok(filters)
}

/// The action part of a return value, for tests and docs.
#[cfg(test)]
fn action(k: u32) -> u32 {
    k & 0xffff_0000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_filters_notify_and_never_trap() {
        for profile in [Profile::Default, Profile::Strict] {
            let filters = for_profile(profile, Extra::default()).unwrap();
            let counted = &filters[0];
            assert_eq!(counted.role, Role::Counted);
            let rets: Vec<u32> = counted
                .program
                .iter()
                .filter(|i| i.code == BPF_RET_K)
                .map(|i| action(i.k))
                .collect();
            assert!(rets.contains(&RET_USER_NOTIF));
            assert!(!rets.contains(&RET_TRAP));
            // The architecture check comes first and kills (int 0x80).
            assert_eq!(counted.program[2].code, BPF_RET_K);
            assert_eq!(counted.program[2].k, RET_KILL_PROCESS);
        }
    }

    #[test]
    fn rewrite_refuses_unexpected_actions() {
        let p = vec![
            Insn {
                code: BPF_RET_K,
                jt: 0,
                jf: 0,
                k: RET_ERRNO | 1,
            },
            Insn {
                code: BPF_RET_K,
                jt: 0,
                jf: 0,
                k: RET_TRAP,
            },
        ];
        assert!(matches!(
            rewrite_trap_to_notif("t", p),
            Err(FilterError::UnexpectedReturn { index: 0, .. })
        ));
        let none = vec![Insn {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: RET_ALLOW,
        }];
        assert!(matches!(
            rewrite_trap_to_notif("t", none),
            Err(FilterError::NothingToRewrite("t"))
        ));
    }

    #[test]
    fn profiles_differ_only_in_the_counted_filter() {
        let d = for_profile(Profile::Default, Extra::default()).unwrap();
        let s = for_profile(Profile::Strict, Extra::default()).unwrap();
        assert_ne!(d[0].sha256(), s[0].sha256());
        assert_eq!(d[1].sha256(), s[1].sha256());
        assert_eq!(d[2].sha256(), s[2].sha256());
        assert_eq!(
            source_file(),
            format!("seccomp/{}.json", std::env::consts::ARCH)
        );
    }

    #[test]
    fn extra_filters_go_between_deny_enosys_and_deny() {
        let all = Extra {
            deny_sysv_ipc: true,
            deny_memfd: true,
        };
        let f = for_profile(Profile::Default, all).unwrap();
        let names: Vec<&str> = f.iter().map(|f| f.name).collect();
        assert_eq!(
            names,
            [
                "counted_default",
                "deny_enosys",
                "deny_sysv_ipc",
                "deny_memfd",
                "deny"
            ]
        );
        let roles: Vec<&str> = f.iter().map(|f| f.role.as_str()).collect();
        assert_eq!(roles, ["counted", "deny_enosys", "deny", "deny", "deny"]);
        // The profile's own filters are the same programs either way.
        let plain = for_profile(Profile::Default, Extra::default()).unwrap();
        assert_eq!(plain.len(), 3);
        assert_eq!(plain[2].sha256(), f[4].sha256());
    }

    #[test]
    fn insn_has_the_kernel_layout() {
        assert_eq!(std::mem::size_of::<Insn>(), 8);
    }
}
