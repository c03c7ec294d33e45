//! `--platform qemu-snp` and `--platform qemu-tdx`: the QEMU command lines
//! for an AMD SEV-SNP guest and an Intel TDX guest (a TD).
//!
//! Sources for every option used:
//! - QEMU `docs/system/i386/amd-memory-encryption.rst` ("Launching
//!   (SEV-SNP)": `-machine ...,confidential-guest-support=sev0 -object
//!   sev-snp-guest,id=sev0,cbitpos=51,reduced-phys-bits=1`; "Calculating
//!   expected guest launch measurement": `kernel-hashes=on` puts the hashes
//!   of kernel, initrd and cmdline in the measured firmware) and the QAPI
//!   schema `qapi/qom.json` `SevSnpGuestProperties` (`policy`, `cbitpos`,
//!   `reduced-phys-bits`, `kernel-hashes`).
//! - QEMU `docs/system/i386/tdx.rst` ("Launching a TD (TDX VM)": `-object
//!   tdx-guest,id=tdx0 -machine ...,kernel-irqchip=split,
//!   confidential-guest-support=tdx0 -bios OVMF.fd`; "Debugging": TD
//!   attribute bit 0 is DEBUG) and `TdxGuestProperties` (`attributes`).
//! - QEMU's invocation manual (`-machine memory-backend=`, `-object
//!   memory-backend-memfd|memory-backend-ram`, `-device vhost-vsock-pci,
//!   guest-cid=`, `-nodefaults`, `-nic none`, `-display none`, `-serial
//!   file:`, `-no-reboot`, `-daemonize`, `-pidfile`).
//!
//! What is measured: SNP's launch digest covers the firmware (`-bios`),
//! the vCPUs' initial state (their number and `-cpu` model), the policy,
//! and with `kernel-hashes=on` the kernel, initrd and `-append` line; TDX's
//! MRTD covers the firmware (TDVF) and TDVF measures the kernel, initrd and
//! command line into RTMR 1 and 2. Memory size, the vsock CID, the console
//! log and QEMU's own process are the host's and are not measured: a host
//! can starve or refuse the guest with them, not change what it runs.

use std::path::{Path, PathBuf};

use super::recipe::{self, Recipe, RecipeError, Stop};

/// SEV-SNP guest policy bit 17: reserved, must be one (SEV Secure Nested
/// Paging Firmware ABI Specification, 56860, "Guest Policy" table).
const SNP_POLICY_RESERVED_ONE: u64 = 1 << 17;
/// SEV-SNP guest policy bit 19: DEBUG (same table).
const SNP_POLICY_DEBUG: u64 = 1 << 19;
/// TD ATTRIBUTES bit 0: DEBUG (Intel TDX Module ABI; QEMU tdx.rst,
/// "Debugging").
const TD_ATTRIBUTES_DEBUG: u64 = 1 << 0;
/// TD ATTRIBUTES bit 28: SEPT_VE_DISABLE, which QEMU's `tdx-guest` sets
/// by default; kept when `attributes` is given for a debug TD.
const TD_ATTRIBUTES_SEPT_VE_DISABLE: u64 = 1 << 28;

/// The default SEV-SNP policy: bit 17 (must be one) and bit 16 (SMT
/// allowed), no debug, no migration agent; QEMU's own default.
pub const DEFAULT_SNP_POLICY: u64 = 0x30000;

/// What both QEMU recipes take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QemuOptions {
    /// The QEMU program (`--qemu`).
    pub qemu: String,
    /// OVMF built for SEV-SNP, or TDVF (`--firmware`).
    pub firmware: Option<PathBuf>,
    /// The guest kernel (`--kernel`).
    pub kernel: Option<PathBuf>,
    /// Its initrd (`--initrd`).
    pub initrd: Option<PathBuf>,
    /// Its command line (`--append`).
    pub append: Option<String>,
    /// vCPUs (`--cpus`).
    pub cpus: u32,
    /// Guest memory in MiB (`--memory-mib`).
    pub memory_mib: u64,
    /// The guest's vsock CID (`--cid`).
    pub cid: u32,
    /// The enclave service's vsock port in the guest (`--port`).
    pub port: u32,
    /// The `-cpu` model (`--cpu-model`; default `EPYC-v4` for SNP, `host`
    /// for TDX).
    pub cpu_model: Option<String>,
    /// Where the console log and QEMU's pid file go (`--runtime-dir`);
    /// absolute.
    pub runtime_dir: PathBuf,
    /// `--dangerous-debug-enclave`.
    pub dangerous_debug: bool,
}

/// What only SEV-SNP takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnpOptions {
    /// The C-bit position in a page table entry (`--cbitpos`; 51 on
    /// Milan, Genoa and Turin).
    pub cbitpos: u32,
    /// Physical address bits lost to memory encryption
    /// (`--reduced-phys-bits`).
    pub reduced_phys_bits: u32,
    /// The guest policy (`--snp-policy`).
    pub policy: u64,
}

impl Default for SnpOptions {
    fn default() -> SnpOptions {
        SnpOptions {
            cbitpos: 51,
            reduced_phys_bits: 1,
            policy: DEFAULT_SNP_POLICY,
        }
    }
}

/// Parses `--snp-policy`: `0x` and hex digits.
pub fn parse_snp_policy(s: &str) -> Result<u64, RecipeError> {
    let hex = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .filter(|h| !h.is_empty() && h.len() <= 16)
        .ok_or_else(|| RecipeError::Invalid {
            flag: "--snp-policy",
            value: s.to_string(),
            reason: "expected 0x and 1 to 16 hex digits".into(),
        })?;
    u64::from_str_radix(hex, 16).map_err(|e| RecipeError::Invalid {
        flag: "--snp-policy",
        value: s.to_string(),
        reason: e.to_string(),
    })
}

/// The files, sizes and paths both recipes check the same way.
struct Common {
    firmware: String,
    kernel: String,
    initrd: Option<String>,
    console: String,
    pidfile: PathBuf,
    pidfile_text: String,
}

fn common(o: &QemuOptions, platform: &'static str) -> Result<Common, RecipeError> {
    let firmware = o.firmware.as_deref().ok_or(RecipeError::Missing {
        flag: "--firmware",
        platform,
    })?;
    let firmware = recipe::existing_file("--firmware", firmware)?;
    // Direct kernel boot: the measured (SNP: kernel-hashes) or
    // TDVF-measured kernel, initrd and command line are what the guest is.
    let kernel = o.kernel.as_deref().ok_or(RecipeError::Missing {
        flag: "--kernel",
        platform,
    })?;
    let kernel = recipe::existing_file("--kernel", kernel)?;
    let initrd = o
        .initrd
        .as_deref()
        .map(|p| recipe::existing_file("--initrd", p))
        .transpose()?;
    recipe::check_cpus("--cpus", o.cpus)?;
    recipe::check_memory("--memory-mib", o.memory_mib)?;
    recipe::check_cid("--cid", o.cid)?;
    if let Some(m) = &o.cpu_model
        && (m.is_empty() || m.starts_with('-'))
    {
        return Err(RecipeError::Invalid {
            flag: "--cpu-model",
            value: m.clone(),
            reason: "not a CPU model name".into(),
        });
    }
    let dir = recipe::utf8("--runtime-dir", &o.runtime_dir)?;
    if !o.runtime_dir.is_absolute() || dir.contains(',') {
        // `-serial file:PATH` is a QEMU option string: a comma would end
        // the path.
        return Err(RecipeError::Invalid {
            flag: "--runtime-dir",
            value: dir,
            reason: "must be an absolute path without a comma".into(),
        });
    }
    let name = format!("{platform}-{}", o.cid);
    let console = format!("{dir}/{name}.console.log");
    let pidfile = Path::new(&dir).join(format!("{name}.pid"));
    let pidfile_text = recipe::utf8("--runtime-dir", &pidfile)?;
    Ok(Common {
        firmware,
        kernel,
        initrd,
        console,
        pidfile,
        pidfile_text,
    })
}

/// `-bios`, the kernel, the vsock device and the host-side plumbing: the
/// tail both command lines share.
fn tail(argv: &mut Vec<String>, o: &QemuOptions, c: &Common) {
    argv.extend(["-bios".into(), c.firmware.clone()]);
    argv.extend(["-kernel".into(), c.kernel.clone()]);
    if let Some(i) = &c.initrd {
        argv.extend(["-initrd".into(), i.clone()]);
    }
    if let Some(a) = &o.append {
        argv.extend(["-append".into(), a.clone()]);
    }
    // The only device: vsock to the host. A confidential guest's kernel
    // accepts virtio devices only with VIRTIO_F_ACCESS_PLATFORM
    // (iommu_platform), and modern (non-legacy) virtio.
    argv.extend([
        "-device".into(),
        format!(
            "vhost-vsock-pci,guest-cid={},disable-legacy=on,iommu_platform=true",
            o.cid
        ),
    ]);
    argv.extend(
        [
            // No default devices and no network device at all.
            "-nodefaults",
            "-nic",
            "none",
            "-display",
            "none",
            "-serial",
        ]
        .map(String::from),
    );
    argv.push(format!("file:{}", c.console));
    // A confidential guest cannot be reset (its register state is
    // encrypted): a reboot ends it. `-daemonize` returns once QEMU has set
    // the VM up (or failed to, with the reason on stderr), like
    // `nitro-cli run-enclave`; the VM's pid goes to the pid file.
    argv.extend(["-no-reboot", "-daemonize", "-pidfile"].map(String::from));
    argv.push(c.pidfile_text.clone());
}

/// `QEMU -accel kvm -cpu MODEL -smp N -m SIZE`, and SIZE.
fn head(o: &QemuOptions, default_cpu: &str) -> (Vec<String>, String) {
    let mem = format!("{}M", o.memory_mib);
    let mut argv = vec![o.qemu.clone()];
    argv.extend(["-accel", "kvm", "-cpu"].map(String::from));
    argv.push(o.cpu_model.clone().unwrap_or_else(|| default_cpu.into()));
    argv.extend(["-smp".into(), o.cpus.to_string(), "-m".into(), mem.clone()]);
    (argv, mem)
}

/// Appends the shared tail and makes the recipe.
fn finish(mut argv: Vec<String>, o: &QemuOptions, c: Common) -> Result<Recipe, RecipeError> {
    tail(&mut argv, o, &c);
    Ok(Recipe {
        argv,
        connect: recipe::vsock(o.cid, o.port)?,
        stop: Stop::KillPidfile { pidfile: c.pidfile },
    })
}

/// The QEMU command line of an SEV-SNP guest.
pub fn snp_recipe(o: &QemuOptions, s: &SnpOptions) -> Result<Recipe, RecipeError> {
    let c = common(o, "qemu-snp")?;
    if !(32..=63).contains(&s.cbitpos) {
        return Err(RecipeError::Invalid {
            flag: "--cbitpos",
            value: s.cbitpos.to_string(),
            reason: "expected 32 to 63 (51 on Milan, Genoa and Turin)".into(),
        });
    }
    if !(1..=63).contains(&s.reduced_phys_bits) {
        return Err(RecipeError::Invalid {
            flag: "--reduced-phys-bits",
            value: s.reduced_phys_bits.to_string(),
            reason: "expected 1 to 63".into(),
        });
    }
    let policy = format!("{:#x}", s.policy);
    if s.policy & SNP_POLICY_RESERVED_ONE == 0 {
        return Err(RecipeError::Invalid {
            flag: "--snp-policy",
            value: policy,
            reason: "bit 17 is reserved and must be 1 (SEV-SNP ABI, guest policy)".into(),
        });
    }
    if s.policy & SNP_POLICY_DEBUG != 0 && !o.dangerous_debug {
        return Err(RecipeError::DebugRefused {
            flag: "--snp-policy",
            value: policy,
        });
    }
    let (mut argv, mem) = head(o, "EPYC-v4");
    argv.extend([
        "-machine".into(),
        "q35,confidential-guest-support=sev0,memory-backend=ram0".into(),
        // SNP private memory comes from guest_memfd; the shared part from
        // this memfd backend.
        "-object".into(),
        format!("memory-backend-memfd,id=ram0,size={mem},share=true,prealloc=false"),
        "-object".into(),
        format!(
            "sev-snp-guest,id=sev0,policy={policy},cbitpos={},reduced-phys-bits={},\
             kernel-hashes=on",
            s.cbitpos, s.reduced_phys_bits
        ),
    ]);
    finish(argv, o, c)
}

/// The QEMU command line of a TDX guest.
pub fn tdx_recipe(o: &QemuOptions) -> Result<Recipe, RecipeError> {
    let c = common(o, "qemu-tdx")?;
    let (mut argv, mem) = head(o, "host");
    argv.extend([
        "-machine".into(),
        "q35,kernel-irqchip=split,confidential-guest-support=tdx0,memory-backend=ram0".into(),
        "-object".into(),
        format!("memory-backend-ram,id=ram0,size={mem}"),
        "-object".into(),
        if o.dangerous_debug {
            format!(
                "tdx-guest,id=tdx0,attributes={:#x}",
                TD_ATTRIBUTES_DEBUG | TD_ATTRIBUTES_SEPT_VE_DISABLE
            )
        } else {
            // QEMU's default attributes: DEBUG clear.
            "tdx-guest,id=tdx0".into()
        },
    ]);
    finish(argv, o, c)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Files {
        _dir: tempfile::TempDir,
        root: String,
    }

    fn files() -> Files {
        let dir = tempfile::tempdir().unwrap();
        for f in ["OVMF.fd", "vmlinuz", "initrd.img"] {
            std::fs::write(dir.path().join(f), f).unwrap();
        }
        let root = std::fs::canonicalize(dir.path())
            .unwrap()
            .display()
            .to_string();
        Files { _dir: dir, root }
    }

    fn typical(f: &Files) -> QemuOptions {
        QemuOptions {
            qemu: "qemu-system-x86_64".into(),
            firmware: Some(format!("{}/OVMF.fd", f.root).into()),
            kernel: Some(format!("{}/vmlinuz", f.root).into()),
            initrd: Some(format!("{}/initrd.img", f.root).into()),
            append: Some("console=ttyS0 quiet".into()),
            cpus: 4,
            memory_mib: 8192,
            cid: 7,
            port: recipe::DEFAULT_PORT,
            cpu_model: None,
            runtime_dir: "/run/kolm".into(),
            dangerous_debug: false,
        }
    }

    fn minimal(f: &Files) -> QemuOptions {
        QemuOptions {
            initrd: None,
            append: None,
            cpus: 1,
            memory_mib: 256,
            cid: 3,
            port: 9,
            ..typical(f)
        }
    }

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    /// The expected command line after the guest object: firmware,
    /// kernel (with the typical initrd and append, or without), vsock and
    /// the host-side plumbing.
    fn expected_tail(f: &Files, platform: &str, cid: u32, typical: bool) -> Vec<String> {
        let mut w = words(&format!("-bios {0}/OVMF.fd -kernel {0}/vmlinuz", f.root));
        if typical {
            w.extend(words(&format!("-initrd {}/initrd.img -append", f.root)));
            w.push("console=ttyS0 quiet".into());
        }
        w.extend(words(&format!(
            "-device vhost-vsock-pci,guest-cid={cid},disable-legacy=on,iommu_platform=true \
             -nodefaults -nic none -display none \
             -serial file:/run/kolm/{platform}-{cid}.console.log \
             -no-reboot -daemonize -pidfile /run/kolm/{platform}-{cid}.pid"
        )));
        w
    }

    #[test]
    fn snp_command_lines_are_exact() {
        let f = files();
        let r = snp_recipe(&typical(&f), &SnpOptions::default()).unwrap();
        let mut want = words(
            "qemu-system-x86_64 -accel kvm -cpu EPYC-v4 -smp 4 -m 8192M \
             -machine q35,confidential-guest-support=sev0,memory-backend=ram0 \
             -object memory-backend-memfd,id=ram0,size=8192M,share=true,prealloc=false \
             -object sev-snp-guest,id=sev0,policy=0x30000,cbitpos=51,reduced-phys-bits=1,kernel-hashes=on",
        );
        want.extend(expected_tail(&f, "qemu-snp", 7, true));
        assert_eq!(r.argv, want);
        assert_eq!(r.connect.to_string(), "vsock://7:5005");
        assert_eq!(
            r.stop,
            Stop::KillPidfile {
                pidfile: "/run/kolm/qemu-snp-7.pid".into()
            }
        );
        assert!(r.shell_line().contains(" -append 'console=ttyS0 quiet' "));

        let s = SnpOptions {
            cbitpos: 47,
            reduced_phys_bits: 5,
            policy: 0x20000,
        };
        let o = QemuOptions {
            cpu_model: Some("EPYC-Milan".into()),
            ..minimal(&f)
        };
        let r = snp_recipe(&o, &s).unwrap();
        let mut want = words(
            "qemu-system-x86_64 -accel kvm -cpu EPYC-Milan -smp 1 -m 256M \
             -machine q35,confidential-guest-support=sev0,memory-backend=ram0 \
             -object memory-backend-memfd,id=ram0,size=256M,share=true,prealloc=false \
             -object sev-snp-guest,id=sev0,policy=0x20000,cbitpos=47,reduced-phys-bits=5,kernel-hashes=on",
        );
        want.extend(expected_tail(&f, "qemu-snp", 3, false));
        assert_eq!(r.argv, want);
        assert_eq!(r.connect.to_string(), "vsock://3:9");
    }

    #[test]
    fn tdx_command_lines_are_exact() {
        let f = files();
        let r = tdx_recipe(&typical(&f)).unwrap();
        let mut want = words(
            "qemu-system-x86_64 -accel kvm -cpu host -smp 4 -m 8192M \
             -machine q35,kernel-irqchip=split,confidential-guest-support=tdx0,memory-backend=ram0 \
             -object memory-backend-ram,id=ram0,size=8192M \
             -object tdx-guest,id=tdx0",
        );
        want.extend(expected_tail(&f, "qemu-tdx", 7, true));
        assert_eq!(r.argv, want);
        assert_eq!(r.connect.to_string(), "vsock://7:5005");

        let o = QemuOptions {
            dangerous_debug: true,
            ..minimal(&f)
        };
        let r = tdx_recipe(&o).unwrap();
        let mut want = words(
            "qemu-system-x86_64 -accel kvm -cpu host -smp 1 -m 256M \
             -machine q35,kernel-irqchip=split,confidential-guest-support=tdx0,memory-backend=ram0 \
             -object memory-backend-ram,id=ram0,size=256M \
             -object tdx-guest,id=tdx0,attributes=0x10000001",
        );
        want.extend(expected_tail(&f, "qemu-tdx", 3, false));
        assert_eq!(r.argv, want);
    }

    #[test]
    fn refusals_name_the_flag() {
        let f = files();
        let base = typical(&f);
        let snp = SnpOptions::default();
        let qemu_cases: [(QemuOptions, &str); 8] = [
            (
                QemuOptions {
                    firmware: None,
                    ..base.clone()
                },
                "--firmware is required for --platform qemu-snp",
            ),
            (
                QemuOptions {
                    kernel: None,
                    ..base.clone()
                },
                "--kernel is required",
            ),
            (
                QemuOptions {
                    initrd: Some("/nonexistent/initrd".into()),
                    ..base.clone()
                },
                "--initrd /nonexistent/initrd",
            ),
            (
                QemuOptions {
                    cid: 1,
                    ..base.clone()
                },
                "--cid 1: CIDs 0, 1 and 2 are reserved",
            ),
            (
                QemuOptions {
                    memory_mib: 128,
                    ..base.clone()
                },
                "--memory-mib 128: below the minimum of 256 MiB",
            ),
            (
                QemuOptions {
                    cpus: 0,
                    ..base.clone()
                },
                "--cpus 0",
            ),
            (
                QemuOptions {
                    runtime_dir: "relative/dir".into(),
                    ..base.clone()
                },
                "--runtime-dir relative/dir",
            ),
            (
                QemuOptions {
                    runtime_dir: "/a,b".into(),
                    ..base.clone()
                },
                "without a comma",
            ),
        ];
        for (o, want) in qemu_cases {
            let e = snp_recipe(&o, &snp).unwrap_err().to_string();
            assert!(e.contains(want), "{e:?} lacks {want:?}");
        }
        let e = tdx_recipe(&QemuOptions {
            firmware: None,
            ..base.clone()
        })
        .unwrap_err();
        assert!(e.to_string().contains("--platform qemu-tdx"), "{e}");

        let snp_cases: [(SnpOptions, &str); 4] = [
            (
                SnpOptions {
                    policy: 0x10000,
                    ..snp
                },
                "--snp-policy 0x10000: bit 17 is reserved",
            ),
            (
                SnpOptions {
                    policy: 0xb0000,
                    ..snp
                },
                "pass --dangerous-debug-enclave",
            ),
            (SnpOptions { cbitpos: 12, ..snp }, "--cbitpos 12"),
            (
                SnpOptions {
                    reduced_phys_bits: 0,
                    ..snp
                },
                "--reduced-phys-bits 0",
            ),
        ];
        for (s, want) in snp_cases {
            let e = snp_recipe(&base, &s).unwrap_err().to_string();
            assert!(e.contains(want), "{e:?} lacks {want:?}");
        }
        // Debug asked for: the debug policy is passed through.
        let debug = QemuOptions {
            dangerous_debug: true,
            ..base
        };
        let r = snp_recipe(
            &debug,
            &SnpOptions {
                policy: 0xb0000,
                ..snp
            },
        )
        .unwrap();
        assert!(r.argv.iter().any(|a| a.contains("policy=0xb0000,")));
    }

    #[test]
    fn snp_policies_parse_as_hex() {
        assert_eq!(parse_snp_policy("0x30000").unwrap(), 0x30000);
        assert_eq!(parse_snp_policy("0XB0000").unwrap(), 0xb0000);
        for bad in ["30000", "0x", "0xg", "0x11112222333344445", "-0x1"] {
            let e = parse_snp_policy(bad).unwrap_err();
            assert!(e.to_string().starts_with("--snp-policy"), "{e}");
        }
    }
}
