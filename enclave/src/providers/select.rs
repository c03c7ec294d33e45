//! The hardware providers as the run path's
//! [`AttestationProvider`](crate::attest::AttestationProvider), and the
//! choice of provider at start (`--attest auto|nitro|sev-snp|tdx|sim|none`).
//!
//! The run path asks for the collateral before it writes the manifest
//! (receipt v2 lists it there) and for the attestation after. Where the
//! collateral depends on the chip (the SEV-SNP VCEK comes with an extended
//! report), [`Attesting`] learns it from a probe: one attestation with
//! all-zero report data, whose collateral and measurement are kept. The
//! real attestation must then come with the same collateral and the same
//! measurement, or the run fails before sealing (a TCB update between the
//! two requests, or a host that changed what it serves).
//!
//! `auto` probes the devices and picks the one TEE it finds; it never
//! falls back to `none` or `sim` when there is none (or more than one).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use kolm_format::seal::{CollateralBundle, EvidenceBundle};
use kolm_policy::Platform;

use super::nitro::{NSM_DEVICE, NitroProvider, NitroRequest, NsmFile};
use super::snp::{SEV_GUEST_DEVICE, SevGuestFile, SnpBundle, SnpOptions, SnpProvider};
use super::tdx::{ConfigFs, TSM_REPORT_ROOT, TdxOptions, TdxProvider};
use super::{EvidenceBlob, HardwareEvidence, HardwareProvider, ProviderError, RetryPolicy};
use crate::attest::sim::SimFormat;
use crate::attest::{AttestError, AttestationProvider, NoneProvider, SimulatedProvider};

/// What the probe learnt: the collateral every later attestation must
/// carry, and the launch measurement.
#[derive(Debug)]
struct Probed {
    collateral: Vec<EvidenceBlob>,
    measurement: Vec<u8>,
}

#[derive(Debug)]
struct State<P> {
    provider: P,
    probed: Option<Probed>,
}

/// A [`HardwareProvider`] as an [`AttestationProvider`].
#[derive(Debug)]
pub struct Attesting<P> {
    platform: Platform,
    state: Mutex<State<P>>,
}

impl<P: HardwareProvider> Attesting<P> {
    pub fn new(provider: P) -> Attesting<P> {
        Attesting {
            platform: provider.platform(),
            state: Mutex::new(State {
                provider,
                probed: None,
            }),
        }
    }
}

fn device(e: ProviderError) -> AttestError {
    AttestError::Device(e.to_string())
}

fn lock<P>(m: &Mutex<State<P>>) -> std::sync::MutexGuard<'_, State<P>> {
    // A panic while holding the lock leaves nothing half-done that a
    // later call could misuse: the probe is replaced whole.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<P: HardwareProvider> AttestationProvider for Attesting<P> {
    fn platform(&self) -> Platform {
        self.platform
    }

    /// The measurement the probe saw; `None` before [`Self::collateral`].
    fn measurement(&self) -> Option<Vec<u8>> {
        lock(&self.state)
            .probed
            .as_ref()
            .map(|p| p.measurement.clone())
    }

    fn collateral(&self) -> Result<CollateralBundle, AttestError> {
        let mut state = lock(&self.state);
        state.provider.collateral().map_err(device)?;
        let probe: HardwareEvidence = state.provider.attest(&[0u8; 64]).map_err(device)?;
        let files = probe
            .collateral
            .iter()
            .map(|b| (b.path.to_string(), b.bytes.clone()))
            .collect();
        state.probed = Some(Probed {
            collateral: probe.collateral,
            measurement: probe.measurement.value.to_vec(),
        });
        Ok(CollateralBundle {
            platform: self.platform,
            files,
        })
    }

    fn attest(&self, report_data: &[u8; 64]) -> Result<EvidenceBundle, AttestError> {
        let mut guard = lock(&self.state);
        let State { provider, probed } = &mut *guard;
        let Some(probed) = probed.as_ref() else {
            return Err(AttestError::Device(
                "attestation requested before the collateral".into(),
            ));
        };
        let evidence = provider.attest(report_data).map_err(device)?;
        if evidence.collateral != probed.collateral {
            return Err(AttestError::Device(
                "the collateral changed between the probe and the attestation (a TCB update, \
                 or the host served other certificates); nothing was sealed"
                    .into(),
            ));
        }
        if evidence.measurement.value[..] != probed.measurement[..] {
            return Err(AttestError::Device(
                "the launch measurement changed between the probe and the attestation".into(),
            ));
        }
        let a = &evidence.attestation;
        Ok(EvidenceBundle {
            platform: self.platform,
            files: vec![(a.path.to_string(), a.bytes.clone(), a.role)],
        })
    }
}

/// `--attest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttestChoice {
    /// The one TEE device this machine has.
    Auto,
    Nitro,
    SevSnp,
    Tdx,
    /// The software TEE (tests, demos; its root is never trusted by
    /// default).
    Sim,
    /// No TEE; artifacts verify as `unattested`.
    None,
}

impl AttestChoice {
    /// The `--attest` spelling.
    pub const fn name(self) -> &'static str {
        match self {
            AttestChoice::Auto => "auto",
            AttestChoice::Nitro => "nitro",
            AttestChoice::SevSnp => "sev-snp",
            AttestChoice::Tdx => "tdx",
            AttestChoice::Sim => "sim",
            AttestChoice::None => "none",
        }
    }

    /// Parses a `--attest` value.
    pub fn parse(s: &str) -> Result<AttestChoice, SelectError> {
        Ok(match s {
            "auto" => AttestChoice::Auto,
            "nitro" => AttestChoice::Nitro,
            "sev-snp" => AttestChoice::SevSnp,
            "tdx" => AttestChoice::Tdx,
            "sim" => AttestChoice::Sim,
            "none" => AttestChoice::None,
            other => {
                return Err(SelectError::Unknown {
                    value: other.to_string(),
                });
            }
        })
    }
}

/// Where the devices are (the real paths, or a test's fakes of them).
#[derive(Debug, Clone)]
pub struct DevicePaths {
    pub nsm: PathBuf,
    pub sev_guest: PathBuf,
    pub tsm_report: PathBuf,
}

impl Default for DevicePaths {
    fn default() -> DevicePaths {
        DevicePaths {
            nsm: PathBuf::from(NSM_DEVICE),
            sev_guest: PathBuf::from(SEV_GUEST_DEVICE),
            tsm_report: PathBuf::from(TSM_REPORT_ROOT),
        }
    }
}

/// The offline collateral bundle (`--bundle DIR`): `snp-vcek.der` and
/// optionally `snp-ask-ark.pem` for SEV-SNP, `tdx-collateral.json` for TDX.
pub const BUNDLE_SNP_VCEK: &str = "snp-vcek.der";
pub const BUNDLE_SNP_ASK_ARK: &str = "snp-ask-ark.pem";
pub const BUNDLE_TDX_COLLATERAL: &str = "tdx-collateral.json";

/// Why no provider could be chosen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SelectError {
    #[error("--attest {value:?}: expected auto, nitro, sev-snp, tdx, sim or none")]
    Unknown { value: String },
    #[error(
        "--attest auto: no TEE device found ({nsm}, {sev_guest}, {tsm} are absent); this machine \
         is not a Nitro enclave, SEV-SNP or TDX guest. Pass --attest sim or --attest none \
         explicitly (neither proves anything about hardware)"
    )]
    NoDevice {
        nsm: String,
        sev_guest: String,
        tsm: String,
    },
    #[error("--attest auto: more than one TEE device found ({found:?}); name one")]
    Ambiguous { found: Vec<&'static str> },
    #[error("--attest {platform}: {source}")]
    Provider {
        platform: &'static str,
        #[source]
        source: ProviderError,
    },
    #[error(
        "--attest tdx needs the offline DCAP collateral: --bundle DIR with {BUNDLE_TDX_COLLATERAL}"
    )]
    TdxNeedsBundle,
    #[error("--attest sim: {0}")]
    Sim(String),
    #[error("--sim-format {value:?}: expected nitro, sev-snp or tdx")]
    UnknownSimFormat { value: String },
    /// `--sim-format` picks the simulated TEE's evidence format; any other
    /// provider writes its own.
    #[error("--sim-format {format} is only meaningful with --attest sim, not --attest {attest}")]
    SimFormatWithoutSim {
        format: SimFormat,
        attest: &'static str,
    },
}

/// Parses a `--sim-format` value (`nitro`, `sev-snp`, `tdx`).
pub fn parse_sim_format(s: &str) -> Result<SimFormat, SelectError> {
    SimFormat::parse(s).ok_or_else(|| SelectError::UnknownSimFormat {
        value: s.to_string(),
    })
}

/// The TEE devices present, by `--attest` name.
pub fn probe(paths: &DevicePaths) -> Vec<&'static str> {
    let mut found = Vec::new();
    if paths.nsm.exists() {
        found.push("nitro");
    }
    if paths.sev_guest.exists() {
        found.push("sev-snp");
    }
    if paths.tsm_report.is_dir() {
        found.push("tdx");
    }
    found
}

/// A choice with `auto` resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Concrete {
    Nitro,
    SevSnp,
    Tdx,
    Sim,
    None,
}

fn resolve(choice: AttestChoice, paths: &DevicePaths) -> Result<Concrete, SelectError> {
    Ok(match choice {
        AttestChoice::Auto => match probe(paths).as_slice() {
            [] => {
                return Err(SelectError::NoDevice {
                    nsm: paths.nsm.display().to_string(),
                    sev_guest: paths.sev_guest.display().to_string(),
                    tsm: paths.tsm_report.display().to_string(),
                });
            }
            ["nitro"] => Concrete::Nitro,
            ["sev-snp"] => Concrete::SevSnp,
            ["tdx"] => Concrete::Tdx,
            found => {
                return Err(SelectError::Ambiguous {
                    found: found.to_vec(),
                });
            }
        },
        AttestChoice::Nitro => Concrete::Nitro,
        AttestChoice::SevSnp => Concrete::SevSnp,
        AttestChoice::Tdx => Concrete::Tdx,
        AttestChoice::Sim => Concrete::Sim,
        AttestChoice::None => Concrete::None,
    })
}

/// A provider the run path can share.
pub type BoxedProvider = Box<dyn AttestationProvider + Send + Sync>;

/// The provider for `choice`. `bundle` is the offline collateral directory
/// (`--bundle`); `sim_format` is `--sim-format` (`None`: not given, the
/// Nitro form), refused with any choice but `sim`.
pub fn select(
    choice: AttestChoice,
    paths: &DevicePaths,
    bundle: Option<&Path>,
    sim_format: Option<SimFormat>,
) -> Result<BoxedProvider, SelectError> {
    if let Some(format) = sim_format
        && choice != AttestChoice::Sim
    {
        return Err(SelectError::SimFormatWithoutSim {
            format,
            attest: choice.name(),
        });
    }
    let retry = RetryPolicy::default();
    Ok(match resolve(choice, paths)? {
        Concrete::None => Box::new(NoneProvider),
        Concrete::Sim => {
            let sim = |e: String| SelectError::Sim(e);
            let dir = crate::attest::sim::root_dir().map_err(|e| sim(e.to_string()))?;
            let exe = std::env::current_exe().map_err(|e| sim(e.to_string()))?;
            let format = sim_format.unwrap_or(SimFormat::Nitro);
            Box::new(SimulatedProvider::open(&dir, &exe, format).map_err(|e| sim(e.to_string()))?)
        }
        Concrete::Nitro => {
            let err = |source| SelectError::Provider {
                platform: "nitro",
                source,
            };
            let device = NsmFile::open(&paths.nsm).map_err(err)?;
            let request = NitroRequest {
                nonce: None,
                public_key: None,
            };
            Box::new(Attesting::new(
                NitroProvider::new(device, request, retry).map_err(err)?,
            ))
        }
        Concrete::SevSnp => {
            let device =
                SevGuestFile::open(&paths.sev_guest).map_err(|source| SelectError::Provider {
                    platform: "sev-snp",
                    source,
                })?;
            let bundle = bundle.map(|dir| SnpBundle {
                vcek_der: dir.join(BUNDLE_SNP_VCEK),
                ask_ark_pem: Some(dir.join(BUNDLE_SNP_ASK_ARK)).filter(|p| p.exists()),
            });
            let options = SnpOptions {
                bundle,
                ..SnpOptions::default()
            };
            Box::new(Attesting::new(SnpProvider::new(device, options)))
        }
        Concrete::Tdx => {
            let dir = bundle.ok_or(SelectError::TdxNeedsBundle)?;
            let options = TdxOptions {
                root: paths.tsm_report.clone(),
                collateral: dir.join(BUNDLE_TDX_COLLATERAL),
                retry,
            };
            Box::new(Attesting::new(TdxProvider::new(ConfigFs, options)))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(root: &Path) -> DevicePaths {
        DevicePaths {
            nsm: root.join("nsm"),
            sev_guest: root.join("sev-guest"),
            tsm_report: root.join("tsm/report"),
        }
    }

    #[test]
    fn auto_never_falls_back_and_never_guesses() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(dir.path());
        let e = resolve(AttestChoice::Auto, &p).unwrap_err();
        assert!(matches!(e, SelectError::NoDevice { .. }), "{e}");
        assert!(
            e.to_string().contains("--attest sim or --attest none"),
            "{e}"
        );
        std::fs::write(&p.sev_guest, b"").unwrap();
        assert_eq!(resolve(AttestChoice::Auto, &p).unwrap(), Concrete::SevSnp);
        std::fs::create_dir_all(&p.tsm_report).unwrap();
        let e = resolve(AttestChoice::Auto, &p).unwrap_err();
        assert!(matches!(e, SelectError::Ambiguous { .. }), "{e}");
        // Named, it is taken whatever else is there.
        assert_eq!(resolve(AttestChoice::Tdx, &p).unwrap(), Concrete::Tdx);
    }

    /// A provider whose collateral and measurement the test changes
    /// between calls.
    struct Scripted {
        vcek: Vec<u8>,
        measurement: u8,
        calls: Vec<[u8; 64]>,
    }

    impl HardwareProvider for Scripted {
        fn platform(&self) -> Platform {
            Platform::SevSnp
        }

        fn collateral(&mut self) -> Result<(), ProviderError> {
            Ok(())
        }

        fn attest(&mut self, rd: &[u8; 64]) -> Result<HardwareEvidence, ProviderError> {
            use kolm_format::evidence::EvidenceRole;
            self.calls.push(*rd);
            Ok(HardwareEvidence {
                platform: Platform::SevSnp,
                report_data: *rd,
                attestation: EvidenceBlob {
                    path: "evidence/snp-report.bin",
                    role: EvidenceRole::Attestation,
                    bytes: rd.to_vec(),
                },
                collateral: vec![EvidenceBlob {
                    path: "evidence/snp-vcek.der",
                    role: EvidenceRole::Collateral,
                    bytes: self.vcek.clone(),
                }],
                collateral_source: super::super::CollateralSource::Host,
                measurement: super::super::Measurement {
                    kind: super::super::MeasurementKind::SnpMeasurement,
                    value: [self.measurement; 48],
                },
            })
        }
    }

    fn scripted() -> Attesting<Scripted> {
        Attesting::new(Scripted {
            vcek: b"vcek".to_vec(),
            measurement: 7,
            calls: Vec::new(),
        })
    }

    #[test]
    fn collateral_comes_from_a_zero_probe_and_the_attestation_carries_only_itself() {
        let a = scripted();
        assert_eq!(a.measurement(), None);
        assert!(a.attest(&[1; 64]).is_err(), "attestation before collateral");
        let c = a.collateral().unwrap();
        assert_eq!(
            c.files,
            [("evidence/snp-vcek.der".to_string(), b"vcek".to_vec())]
        );
        assert_eq!(a.measurement(), Some(vec![7; 48]));
        let e = a.attest(&[1; 64]).unwrap();
        assert_eq!(e.files.len(), 1);
        assert_eq!(e.files[0].0, "evidence/snp-report.bin");
        assert_eq!(e.files[0].1, vec![1; 64]);
        let calls = &lock(&a.state).provider.calls;
        assert_eq!(calls[..], [[0; 64], [1; 64]]);
    }

    #[test]
    fn collateral_or_measurement_changed_after_the_probe_is_refused() {
        let a = scripted();
        a.collateral().unwrap();
        lock(&a.state).provider.vcek = b"another vcek".to_vec();
        let e = a.attest(&[1; 64]).unwrap_err();
        assert!(e.to_string().contains("collateral changed"), "{e}");
        let a = scripted();
        a.collateral().unwrap();
        lock(&a.state).provider.measurement = 8;
        let e = a.attest(&[1; 64]).unwrap_err();
        assert!(e.to_string().contains("measurement changed"), "{e}");
    }

    #[test]
    fn choices_parse_and_unknown_ones_are_named() {
        for (s, c) in [
            ("auto", AttestChoice::Auto),
            ("nitro", AttestChoice::Nitro),
            ("sev-snp", AttestChoice::SevSnp),
            ("tdx", AttestChoice::Tdx),
            ("sim", AttestChoice::Sim),
            ("none", AttestChoice::None),
        ] {
            assert_eq!(AttestChoice::parse(s).unwrap(), c);
            assert_eq!(c.name(), s);
        }
        let e = AttestChoice::parse("snp").unwrap_err();
        assert!(e.to_string().contains("\"snp\""), "{e}");
    }

    #[test]
    fn a_missing_device_or_bundle_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(dir.path());
        let e = select(AttestChoice::Nitro, &p, None, None).err().unwrap();
        assert!(e.to_string().starts_with("--attest nitro: "), "{e}");
        let e = select(AttestChoice::Tdx, &p, None, None).err().unwrap();
        assert!(matches!(e, SelectError::TdxNeedsBundle), "{e}");
        // --sim-format belongs to --attest sim only.
        let e = select(AttestChoice::None, &p, None, Some(SimFormat::Tdx))
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            "--sim-format tdx is only meaningful with --attest sim, not --attest none"
        );
        let e = parse_sim_format("sgx").unwrap_err();
        assert!(e.to_string().contains("\"sgx\": expected nitro"), "{e}");
        assert_eq!(parse_sim_format("sev-snp").unwrap(), SimFormat::SevSnp);
        assert_eq!(
            select(AttestChoice::None, &p, None, None)
                .unwrap()
                .platform(),
            Platform::None
        );
    }
}
