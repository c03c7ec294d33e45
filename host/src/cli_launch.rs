//! `kolm-host run`'s launch-recipe flags (`--platform nitro|qemu-snp|
//! qemu-tdx`), turned into the library's typed options.

use std::path::PathBuf;
use std::time::Duration;

use kolm_host::launch::recipe::{self, Recipe, RecipeError};
use kolm_host::launch::{PlatformChoice, nitro, qemu};

/// The flags of the nitro and QEMU recipes (ignored by `--platform
/// local`).
#[derive(Debug, Clone, clap::Args)]
pub struct RecipeArgs {
    /// nitro: the enclave image file.
    #[arg(long, value_name = "PATH", help_heading = "Launch recipes")]
    eif: Option<PathBuf>,
    /// nitro, qemu-*: vCPUs given to the enclave.
    #[arg(long, default_value_t = 2, help_heading = "Launch recipes")]
    cpus: u32,
    /// nitro, qemu-*: memory given to the enclave, in MiB.
    #[arg(long, default_value_t = 4096, help_heading = "Launch recipes")]
    memory_mib: u64,
    /// nitro, qemu-*: the enclave's vsock CID (3 and up; 4 and up on
    /// Nitro).
    #[arg(long, default_value_t = 16, help_heading = "Launch recipes")]
    cid: u32,
    /// nitro, qemu-*: the vsock port the enclave service listens on.
    #[arg(long, default_value_t = recipe::DEFAULT_PORT, help_heading = "Launch recipes")]
    port: u32,
    /// nitro, qemu-*: allow a debug enclave (Nitro --debug-mode, the SNP
    /// policy's debug bit, the TD DEBUG attribute): the host can then read
    /// its memory. Its evidence says so and is rejected by default.
    #[arg(long, help_heading = "Launch recipes")]
    dangerous_debug_enclave: bool,
    /// nitro: the nitro-cli program.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "nitro-cli",
        help_heading = "Launch recipes"
    )]
    nitro_cli: String,
    /// qemu-*: the QEMU program.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "qemu-system-x86_64",
        help_heading = "Launch recipes"
    )]
    qemu: String,
    /// qemu-*: the firmware (OVMF built for SEV-SNP, or TDVF).
    #[arg(long, value_name = "PATH", help_heading = "Launch recipes")]
    firmware: Option<PathBuf>,
    /// qemu-*: the guest kernel (measured).
    #[arg(long, value_name = "PATH", help_heading = "Launch recipes")]
    kernel: Option<PathBuf>,
    /// qemu-*: the guest initrd (measured).
    #[arg(long, value_name = "PATH", help_heading = "Launch recipes")]
    initrd: Option<PathBuf>,
    /// qemu-*: the guest kernel command line (measured).
    #[arg(long, value_name = "CMDLINE", help_heading = "Launch recipes")]
    append: Option<String>,
    /// qemu-*: the -cpu model (default EPYC-v4 for SNP, host for TDX).
    #[arg(long, value_name = "MODEL", help_heading = "Launch recipes")]
    cpu_model: Option<String>,
    /// qemu-snp: the C-bit position.
    #[arg(long, default_value_t = 51, help_heading = "Launch recipes")]
    cbitpos: u32,
    /// qemu-snp: physical address bits lost to memory encryption.
    #[arg(long, default_value_t = 1, help_heading = "Launch recipes")]
    reduced_phys_bits: u32,
    /// qemu-snp: the guest policy, hex (bit 19, debug, needs
    /// --dangerous-debug-enclave).
    #[arg(
        long,
        value_name = "HEX",
        default_value = "0x30000",
        help_heading = "Launch recipes"
    )]
    snp_policy: String,
    /// qemu-*: where the console log and QEMU's pid file go.
    #[arg(
        long,
        value_name = "DIR",
        default_value = "target/kolm-host/run",
        help_heading = "Launch recipes"
    )]
    runtime_dir: PathBuf,
    /// nitro, qemu-*: how long the enclave service may take to answer
    /// on vsock after the launch, in seconds.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 180,
        help_heading = "Launch recipes"
    )]
    boot_timeout: u64,
}

impl RecipeArgs {
    /// The boot wait.
    pub fn boot_timeout(&self) -> Duration {
        Duration::from_secs(self.boot_timeout)
    }

    /// The runtime directory.
    pub fn runtime_dir(&self) -> &std::path::Path {
        &self.runtime_dir
    }

    /// The recipe for `platform`; `None` for `local`.
    pub fn recipe(&self, platform: PlatformChoice) -> Result<Option<Recipe>, RecipeError> {
        let qemu = || -> Result<qemu::QemuOptions, RecipeError> {
            // Absolute without touching the disk: a dry run creates
            // nothing.
            let runtime_dir =
                std::path::absolute(&self.runtime_dir).map_err(|e| RecipeError::File {
                    flag: "--runtime-dir",
                    path: self.runtime_dir.display().to_string(),
                    reason: e.to_string(),
                })?;
            Ok(qemu::QemuOptions {
                qemu: self.qemu.clone(),
                firmware: self.firmware.clone(),
                kernel: self.kernel.clone(),
                initrd: self.initrd.clone(),
                append: self.append.clone(),
                cpus: self.cpus,
                memory_mib: self.memory_mib,
                cid: self.cid,
                port: self.port,
                cpu_model: self.cpu_model.clone(),
                runtime_dir,
                dangerous_debug: self.dangerous_debug_enclave,
            })
        };
        Ok(Some(match platform {
            PlatformChoice::Local => return Ok(None),
            PlatformChoice::Nitro => nitro::recipe(&nitro::NitroOptions {
                nitro_cli: self.nitro_cli.clone(),
                eif: self.eif.clone(),
                cpus: self.cpus,
                memory_mib: self.memory_mib,
                cid: self.cid,
                port: self.port,
                dangerous_debug: self.dangerous_debug_enclave,
            })?,
            PlatformChoice::QemuSnp => qemu::snp_recipe(
                &qemu()?,
                &qemu::SnpOptions {
                    cbitpos: self.cbitpos,
                    reduced_phys_bits: self.reduced_phys_bits,
                    policy: qemu::parse_snp_policy(&self.snp_policy)?,
                },
            )?,
            PlatformChoice::QemuTdx => qemu::tdx_recipe(&qemu()?)?,
        }))
    }
}
