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
//!
//! The architecture check seccompiler puts at the head of every program
//! kills the process on any other ABI (32-bit `int 0x80` on x86_64, AArch32
//! on arm64). A kill is seen only by the dead process's parent, so a
//! descendant's 32-bit `socketcall` would be blocked but never counted
//! (issue 12 item 4). So no installed filter kills: the counted filter's
//! architecture check becomes `USER_NOTIF` (every foreign-ABI call goes to
//! the supervisor, which counts it as `foreign_abi` and answers `ENOSYS`),
//! and the deny filters' becomes `ALLOW` (they leave foreign calls to the
//! counted filter; `USER_NOTIF` outranks `ALLOW`, and with the listener
//! gone the kernel answers `ENOSYS` itself).

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
const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
/// Offset of `arch` in `struct seccomp_data`.
const SECCOMP_DATA_ARCH: u32 = 4;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_TRAP: u32 = 0x0003_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_USER_NOTIF: u32 = 0x7fc0_0000;
const RET_ALLOW: u32 = 0x7fff_0000;

/// `AUDIT_ARCH_*` of the native ABI, as `seccomp_data.arch` carries it.
#[cfg(target_arch = "x86_64")]
pub(super) const AUDIT_ARCH_NATIVE: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
pub(super) const AUDIT_ARCH_NATIVE: u32 = 0xc000_00b7;
/// No filters are compiled for other architectures (the sandbox refuses
/// to start), so no notification ever carries this.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(super) const AUDIT_ARCH_NATIVE: u32 = 0;

/// What a filter does to the calls it matches: the record's
/// `filters[].role`.
pub(super) use kolm_format::sandbox_record::FilterRole as Role;

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

    /// Whether any return of the program kills or traps (never, once
    /// rewritten: checked here rather than assumed where the record relies
    /// on it).
    pub(super) fn kills(&self) -> bool {
        self.program.iter().any(|i| {
            i.code == BPF_RET_K && matches!(i.k & 0xffff_0000, RET_KILL_PROCESS | 0 | RET_TRAP)
        })
    }

    /// The filter as the record lists it.
    pub(super) fn record(&self) -> FilterRecord {
        FilterRecord {
            name: self.name.to_string(),
            role: self.role,
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
    #[error(
        "filter {0:?} does not start with the architecture check (load arch, jump if native, \
         kill)"
    )]
    NoArchCheck(&'static str),
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

/// Replaces the `RET KILL_PROCESS` of the architecture check at the head
/// of a seccompiler program (load `arch`, jump over the kill if native,
/// kill) with `RET foreign`.
fn rewrite_arch_check(
    name: &'static str,
    program: &mut [Insn],
    foreign: u32,
) -> Result<(), FilterError> {
    match program {
        [
            Insn {
                code: BPF_LD_W_ABS,
                k: SECCOMP_DATA_ARCH,
                ..
            },
            Insn {
                code: BPF_JEQ_K,
                jt: 1,
                jf: 0,
                k: AUDIT_ARCH_NATIVE,
            },
            kill @ Insn {
                code: BPF_RET_K,
                k: RET_KILL_PROCESS,
                ..
            },
            ..,
        ] => {
            kill.k = foreign;
            Ok(())
        }
        _ => Err(FilterError::NoArchCheck(name)),
    }
}

/// Rewrites the counted filter: its architecture check to USER_NOTIF, its
/// TRAP returns to USER_NOTIF. Afterwards it returns only ALLOW and
/// USER_NOTIF.
pub(super) fn rewrite_trap_to_notif(
    name: &'static str,
    mut program: Vec<Insn>,
) -> Result<Vec<Insn>, FilterError> {
    rewrite_arch_check(name, &mut program, RET_USER_NOTIF)?;
    let mut rewritten = 0usize;
    for (index, insn) in program.iter_mut().enumerate().skip(3) {
        if insn.code != BPF_RET_K {
            continue;
        }
        match insn.k {
            RET_TRAP => {
                insn.k = RET_USER_NOTIF;
                rewritten += 1;
            }
            RET_ALLOW => {}
            k => return Err(FilterError::UnexpectedReturn { name, index, k }),
        }
    }
    if rewritten == 0 {
        return Err(FilterError::NothingToRewrite(name));
    }
    Ok(program)
}

/// Rewrites a deny filter's architecture check to ALLOW and checks it
/// returns nothing but ALLOW and `errno`.
fn rewrite_deny(
    name: &'static str,
    mut program: Vec<Insn>,
    errno: u32,
) -> Result<Vec<Insn>, FilterError> {
    rewrite_arch_check(name, &mut program, RET_ALLOW)?;
    for (index, insn) in program.iter().enumerate() {
        if insn.code == BPF_RET_K && insn.k != RET_ALLOW && insn.k != (RET_ERRNO | errno) {
            return Err(FilterError::UnexpectedReturn {
                name,
                index,
                k: insn.k,
            });
        }
    }
    Ok(program)
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
        let program = rewrite_deny(name, compiled(name)?, errno as u32)?;
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
            // The architecture check comes first and hands foreign-ABI
            // calls (int 0x80) to the supervisor.
            assert_eq!(counted.program[2].code, BPF_RET_K);
            assert_eq!(counted.program[2].k, RET_USER_NOTIF);
        }
    }

    /// Issue 12 item 4: a kill is seen only by the dead process's parent,
    /// so no installed filter may kill or trap; the deny filters let
    /// foreign-ABI calls through to the counted filter.
    #[test]
    fn no_installed_filter_kills_or_traps() {
        let all = Extra {
            deny_sysv_ipc: true,
            deny_memfd: true,
        };
        for profile in [Profile::Default, Profile::Strict] {
            for f in for_profile(profile, all).unwrap() {
                for i in f.program.iter().filter(|i| i.code == BPF_RET_K) {
                    assert!(
                        !matches!(action(i.k), RET_KILL_PROCESS | 0 | RET_TRAP),
                        "{}: {:#x}",
                        f.name,
                        i.k
                    );
                }
                if f.role != Role::Counted {
                    assert_eq!(f.program[2].k, RET_ALLOW, "{}", f.name);
                }
                assert!(!f.kills(), "{}", f.name);
            }
        }
    }

    fn arch_check() -> Vec<Insn> {
        vec![
            Insn {
                code: BPF_LD_W_ABS,
                jt: 0,
                jf: 0,
                k: SECCOMP_DATA_ARCH,
            },
            Insn {
                code: BPF_JEQ_K,
                jt: 1,
                jf: 0,
                k: AUDIT_ARCH_NATIVE,
            },
            Insn {
                code: BPF_RET_K,
                jt: 0,
                jf: 0,
                k: RET_KILL_PROCESS,
            },
        ]
    }

    #[test]
    fn a_program_without_the_architecture_check_is_refused() {
        let trap = Insn {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: RET_TRAP,
        };
        assert!(matches!(
            rewrite_trap_to_notif("t", vec![trap]),
            Err(FilterError::NoArchCheck("t"))
        ));
        // A check of another architecture is not the check.
        let mut p = arch_check();
        p[1].k ^= 1;
        p.push(trap);
        assert!(matches!(
            rewrite_trap_to_notif("t", p),
            Err(FilterError::NoArchCheck("t"))
        ));
        let mut p = arch_check();
        p.push(trap);
        let f = Filter {
            name: "t",
            role: Role::Counted,
            program: arch_check(),
        };
        assert!(f.kills());
        let p = rewrite_trap_to_notif("t", p).unwrap();
        assert_eq!((p[2].k, p[3].k), (RET_USER_NOTIF, RET_USER_NOTIF));
    }

    #[test]
    fn rewrite_refuses_unexpected_actions() {
        let mut p = arch_check();
        p.extend([
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
        ]);
        assert!(matches!(
            rewrite_trap_to_notif("t", p),
            Err(FilterError::UnexpectedReturn { index: 3, .. })
        ));
        let mut none = arch_check();
        none.push(Insn {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: RET_ALLOW,
        });
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
