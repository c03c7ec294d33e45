//! The hardware providers as the run path's [`AttestationProvider`], and
//! the choice of provider at start (`--attest auto|nitro|sev-snp|tdx|sim|none`;
//! `sim` only in a build with the `sim` feature: without it, `--attest sim`
//! is refused with [`SelectError::NoSimulatedTee`]).
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
//! Collateral sources, in order of preference: the platform's own (the
//! SEV-SNP hypervisor's extended-report certificates), the enclave-side
//! bundle (`kolm-enclave start --bundle DIR`), the host's bundle sent with
//! the job (`job-submit.collateral`, [`AttestationProvider::job_collateral`]).
//! The host's files are used only when the provider has none of its own,
//! and then all of them that are this platform's: sources are not mixed
//! file by file. They are fixed for the job (the probe keeps them), may
//! differ from job to job (each receipt binds its own), and a platform
//! that cannot be checked offline without a file (SEV-SNP's VCEK, TDX's
//! DCAP collateral) gets no seal when no source has it.
//!
//! `auto` probes the devices and picks the one TEE it finds; it never
//! falls back to `none` or `sim` when there is none (or more than one).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use kolm_format::evidence::{EvidenceRole, evidence_slots};
use kolm_format::seal::{CollateralBundle, EvidenceBundle};
use kolm_format::version::SpecVersion;
use kolm_policy::Platform;

use super::nitro::{NSM_DEVICE, NitroProvider, NitroRequest, NsmFile};
use super::snp::{SEV_GUEST_DEVICE, SevGuestFile, SnpBundle, SnpOptions, SnpProvider};
use super::tdx::{ConfigFs, TSM_REPORT_ROOT, TdxOptions, TdxProvider};
use kolm_format::evidence::SimFormat;

use super::sealed::Driver;
use super::{
    AttestationProvider, CollateralOrigin, EvidenceBlob, HardwareEvidence, HostCollateral,
    JobCollateral, NoneProvider, ProviderError, RetryPolicy,
};

/// What the probe learnt: the collateral of the provider's own every later
/// attestation must carry, and the launch measurement.
#[derive(Debug)]
struct Probed {
    collateral: Vec<EvidenceBlob>,
    measurement: Vec<u8>,
}

#[derive(Debug)]
struct State<P> {
    provider: P,
    probed: Option<Probed>,
    /// The measurement of the last identity evidence, for a `hello` sent
    /// before any job probed.
    seen_measurement: Option<Vec<u8>>,
}

/// A hardware provider ([`NitroProvider`], [`SnpProvider`],
/// [`TdxProvider`]) as an [`AttestationProvider`].
#[derive(Debug)]
pub struct Attesting<P> {
    platform: Platform,
    state: Mutex<State<P>>,
}

impl<P: Driver> Attesting<P> {
    pub fn new(provider: P) -> Attesting<P> {
        Attesting {
            platform: provider.platform(),
            state: Mutex::new(State {
                provider,
                probed: None,
                seen_measurement: None,
            }),
        }
    }
}

/// The collateral file without which `platform`'s evidence cannot be
/// checked offline, if there is one (the SEV-SNP ASK/ARK is optional: the
/// verifier embeds AMD's roots).
fn required_collateral(platform: Platform) -> Option<&'static str> {
    match platform {
        Platform::SevSnp => Some("evidence/snp-vcek.der"),
        Platform::Tdx => Some("evidence/tdx-collateral.json"),
        _ => None,
    }
}

/// A job's collateral from the provider's own (`own`: what the probe
/// carried) and the host's: the provider's own when it has any, else the
/// host's files of `platform`; refused when the required file is in
/// neither.
fn choose_collateral(
    platform: Platform,
    own: &[EvidenceBlob],
    host: &HostCollateral,
) -> Result<JobCollateral, ProviderError> {
    let is_ours = |path: &str| {
        evidence_slots(SpecVersion::V2, platform)
            .iter()
            .any(|s| s.role == EvidenceRole::Collateral && s.path == path)
    };
    let (files, origin, ignored): (Vec<(String, Vec<u8>)>, _, _) = if own.is_empty() {
        let (used, ignored): (Vec<_>, Vec<_>) = host.files().iter().partition(|(p, _)| is_ours(p));
        let origin = if used.is_empty() {
            CollateralOrigin::Enclave
        } else {
            CollateralOrigin::HostBundle
        };
        (
            used.into_iter()
                .map(|(p, d)| ((*p).to_string(), d.clone()))
                .collect(),
            origin,
            ignored.into_iter().map(|(p, _)| *p).collect(),
        )
    } else {
        (
            own.iter()
                .map(|b| (b.path.to_string(), b.bytes.clone()))
                .collect(),
            CollateralOrigin::Enclave,
            host.paths(),
        )
    };
    if let Some(path) = required_collateral(platform)
        && !files.iter().any(|(p, _)| p == path)
    {
        return Err(ProviderError::MissingCollateral { platform, path });
    }
    match origin {
        CollateralOrigin::HostBundle => tracing::info!(
            %platform,
            files = ?files.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
            "collateral from the host's bundle (job-submit): the platform and the enclave have none"
        ),
        CollateralOrigin::Enclave if !ignored.is_empty() => tracing::info!(
            %platform,
            ?ignored,
            "the host's collateral is not used: the enclave's own is (or it is not this platform's)"
        ),
        CollateralOrigin::Enclave => {}
    }
    Ok(JobCollateral {
        bundle: CollateralBundle { platform, files },
        origin,
        ignored,
    })
}

fn lock<P>(m: &Mutex<State<P>>) -> std::sync::MutexGuard<'_, State<P>> {
    // A panic while holding the lock leaves nothing half-done that a
    // later call could misuse: the probe is replaced whole.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<P: Driver> AttestationProvider for Attesting<P> {
    fn platform(&self) -> Platform {
        self.platform
    }

    /// The measurement the probe saw, else the one of the last identity
    /// evidence; `None` before either.
    fn measurement(&self) -> Option<Vec<u8>> {
        let state = lock(&self.state);
        state
            .probed
            .as_ref()
            .map(|p| p.measurement.clone())
            .or_else(|| state.seen_measurement.clone())
    }

    /// The collateral of a job that brought none: the provider's own.
    fn collateral(&self) -> Result<CollateralBundle, ProviderError> {
        self.job_collateral(&HostCollateral::default())
            .map(|j| j.bundle)
    }

    fn job_collateral(&self, host: &HostCollateral) -> Result<JobCollateral, ProviderError> {
        let mut state = lock(&self.state);
        state.probed = None;
        state.provider.collateral().map_err(ProviderError::device)?;
        let probe: HardwareEvidence = state
            .provider
            .attest(&[0u8; 64])
            .map_err(ProviderError::device)?;
        let chosen = choose_collateral(self.platform, &probe.collateral, host)?;
        state.probed = Some(Probed {
            collateral: probe.collateral,
            measurement: probe.measurement.value.to_vec(),
        });
        Ok(chosen)
    }

    /// One attestation with the provider's own collateral, possibly none;
    /// the probe of a job is left as it is.
    fn identity_evidence(&self, report_data: &[u8; 64]) -> Result<EvidenceBundle, ProviderError> {
        let mut state = lock(&self.state);
        state.provider.collateral().map_err(ProviderError::device)?;
        let evidence = state
            .provider
            .attest(report_data)
            .map_err(ProviderError::device)?;
        state.seen_measurement = Some(evidence.measurement.value.to_vec());
        Ok(evidence.to_bundle())
    }

    fn attest(&self, report_data: &[u8; 64]) -> Result<EvidenceBundle, ProviderError> {
        let mut guard = lock(&self.state);
        let State {
            provider, probed, ..
        } = &mut *guard;
        let Some(probed) = probed.as_ref() else {
            return Err(ProviderError::AttestBeforeCollateral);
        };
        let evidence = provider
            .attest(report_data)
            .map_err(ProviderError::device)?;
        if evidence.collateral != probed.collateral {
            return Err(ProviderError::CollateralChanged);
        }
        if evidence.measurement.value[..] != probed.measurement[..] {
            return Err(ProviderError::MeasurementChanged);
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
    #[error("--attest {platform}: {error}")]
    Provider {
        platform: &'static str,
        error: ProviderError,
    },
    /// The simulated TEE could not be opened (its root, the binary it
    /// measures).
    #[cfg(feature = "sim")]
    #[error("--attest sim: {error}")]
    Sim { error: super::sim::SimError },
    /// The running binary, which the simulated TEE measures, is not found.
    #[error("--attest sim: {error}")]
    SimExe { error: std::io::Error },
    /// This build has no simulated TEE (built without the `sim` feature,
    /// as hardware images are).
    #[error(
        "--attest sim: this build of kolm-enclave has no simulated TEE (built without the `sim` \
         feature, as images for hardware are); use a hardware provider or --attest none"
    )]
    NoSimulatedTee,
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
        Concrete::Sim => simulated(sim_format.unwrap_or(SimFormat::Nitro))?,
        Concrete::Nitro => {
            let err = |source| SelectError::Provider {
                platform: "nitro",
                error: source,
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
                    error: source,
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
            // Without an enclave-side bundle, each job's DCAP collateral
            // comes from the host's bundle sent with it (a job whose submit
            // carries none is refused before sealing).
            let options = TdxOptions {
                root: paths.tsm_report.clone(),
                collateral: bundle.map(|dir| dir.join(BUNDLE_TDX_COLLATERAL)),
                retry,
            };
            Box::new(Attesting::new(TdxProvider::new(ConfigFs, options)))
        }
    })
}

/// The simulated TEE of `format`, its roots in the installation's root
/// directory, measuring this binary.
#[cfg(feature = "sim")]
fn simulated(format: SimFormat) -> Result<BoxedProvider, SelectError> {
    use super::sim::{SimError, SimulatedProvider, root_dir};
    let sim = |error: SimError| SelectError::Sim { error };
    let dir = root_dir().map_err(|e| sim(SimError::Root(e)))?;
    let exe = std::env::current_exe().map_err(|error| SelectError::SimExe { error })?;
    Ok(Box::new(
        SimulatedProvider::open(&dir, &exe, format).map_err(sim)?,
    ))
}

/// Without the `sim` feature there is no simulated TEE to open.
#[cfg(not(feature = "sim"))]
fn simulated(_format: SimFormat) -> Result<BoxedProvider, SelectError> {
    Err(SelectError::NoSimulatedTee)
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
    /// between calls; `vcek` empty: the platform supplies none.
    struct Scripted {
        vcek: Vec<u8>,
        measurement: u8,
        calls: Vec<[u8; 64]>,
    }

    impl Driver for Scripted {
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
                collateral: if self.vcek.is_empty() {
                    Vec::new()
                } else {
                    vec![EvidenceBlob {
                        path: "evidence/snp-vcek.der",
                        role: EvidenceRole::Collateral,
                        bytes: self.vcek.clone(),
                    }]
                },
                collateral_source: if self.vcek.is_empty() {
                    super::super::CollateralSource::Absent
                } else {
                    super::super::CollateralSource::Host
                },
                measurement: super::super::Measurement {
                    kind: super::super::MeasurementKind::SnpMeasurement,
                    value: [self.measurement; 48],
                },
            })
        }
    }

    /// A platform that supplies no collateral (no enclave-side bundle).
    fn scripted_without_collateral() -> Attesting<Scripted> {
        Attesting::new(Scripted {
            vcek: Vec::new(),
            measurement: 7,
            calls: Vec::new(),
        })
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

    /// The host's collateral as a job's submit would carry it.
    fn host(files: &[(&str, &[u8])]) -> HostCollateral {
        let wire: Vec<_> = files
            .iter()
            .map(|(p, d)| kolm_transport::message::CollateralFile {
                data: d.to_vec(),
                path: (*p).to_string(),
            })
            .collect();
        HostCollateral::parse(&wire).unwrap()
    }

    /// The shape of a `QuoteCollateralV3` (the values are not checked here).
    const TDX_JSON: &str = r#"{"pck_crl_issuer_chain":"","root_ca_crl":"","pck_crl":"",
        "tcb_info_issuer_chain":"","tcb_info":"","tcb_info_signature":"",
        "qe_identity_issuer_chain":"","qe_identity":"","qe_identity_signature":""}"#;
    const DER: &[u8] = &[0x30, 0x01, 0x00];
    const OTHER_DER: &[u8] = &[0x30, 0x01, 0x01];
    const PEM: &[u8] = b"-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n\
                         -----BEGIN CERTIFICATE-----\nAQ==\n-----END CERTIFICATE-----\n";

    #[test]
    fn the_platforms_own_collateral_wins_and_the_hosts_is_ignored() {
        let a = scripted();
        let host = host(&[
            ("evidence/snp-vcek.der", OTHER_DER),
            ("evidence/snp-ask-ark.pem", PEM),
        ]);
        let j = a.job_collateral(&host).unwrap();
        assert_eq!(j.origin, CollateralOrigin::Enclave);
        assert_eq!(
            j.bundle.files,
            [("evidence/snp-vcek.der".to_string(), b"vcek".to_vec())]
        );
        assert_eq!(
            j.ignored,
            ["evidence/snp-vcek.der", "evidence/snp-ask-ark.pem"]
        );
        assert_eq!(a.attest(&[1; 64]).unwrap().files.len(), 1);
    }

    #[test]
    fn without_collateral_of_its_own_the_job_takes_the_hosts_of_its_platform() {
        let a = scripted_without_collateral();
        // A bundle with every platform's files: this one's are used, the
        // TDX collateral is not (and said so).
        let host = host(&[
            ("evidence/tdx-collateral.json", TDX_JSON.as_bytes()),
            ("evidence/snp-vcek.der", DER),
            ("evidence/snp-ask-ark.pem", PEM),
        ]);
        let j = a.job_collateral(&host).unwrap();
        assert_eq!(j.origin, CollateralOrigin::HostBundle);
        assert_eq!(
            j.bundle.files,
            [
                ("evidence/snp-vcek.der".to_string(), DER.to_vec()),
                ("evidence/snp-ask-ark.pem".to_string(), PEM.to_vec())
            ]
        );
        assert_eq!(j.ignored, ["evidence/tdx-collateral.json"]);
        // The attestation that follows carries only itself; the probe's
        // (empty) own collateral is what it is checked against.
        let e = a.attest(&[1; 64]).unwrap();
        assert_eq!(e.files.len(), 1);
        // The next job brings other collateral: it is that job's.
        let next = self::host(&[("evidence/snp-vcek.der", OTHER_DER)]);
        let j = a.job_collateral(&next).unwrap();
        assert_eq!(
            j.bundle.files,
            [("evidence/snp-vcek.der".to_string(), OTHER_DER.to_vec())]
        );
        // A job with none: refused, naming the file and where it could
        // have come from.
        let e = a.job_collateral(&HostCollateral::default()).unwrap_err();
        assert!(
            matches!(
                e,
                ProviderError::MissingCollateral {
                    platform: Platform::SevSnp,
                    path: "evidence/snp-vcek.der"
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("kolm-host run --bundle"), "{e}");
        assert!(a.collateral().is_err());
        // Only the ASK/ARK: still no VCEK.
        let e = a
            .job_collateral(&self::host(&[("evidence/snp-ask-ark.pem", PEM)]))
            .unwrap_err();
        assert!(matches!(e, ProviderError::MissingCollateral { .. }), "{e}");
    }

    #[test]
    fn identity_evidence_needs_no_collateral_and_leaves_the_jobs_probe() {
        let a = scripted_without_collateral();
        let ev = a.identity_evidence(&[3; 64]).unwrap();
        assert_eq!(ev.files.len(), 1);
        assert_eq!(ev.files[0].2, EvidenceRole::Attestation);
        assert_eq!(a.measurement(), Some(vec![7; 48]));
        assert!(a.attest(&[1; 64]).is_err(), "no job probed yet");
        // With collateral of its own, it rides along.
        let a = scripted();
        a.job_collateral(&HostCollateral::default()).unwrap();
        let ev = a.identity_evidence(&[3; 64]).unwrap();
        assert_eq!(
            ev.files.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(),
            ["evidence/snp-report.bin", "evidence/snp-vcek.der"]
        );
        assert!(a.attest(&[1; 64]).is_ok(), "the job's probe is kept");
    }

    #[test]
    fn the_hosts_collateral_is_refused_when_it_is_garbage() {
        use kolm_transport::message::CollateralFile;
        let one = |path: &str, data: &[u8]| {
            HostCollateral::parse(&[CollateralFile {
                data: data.to_vec(),
                path: path.into(),
            }])
        };
        for (path, data, says) in [
            ("evidence/snp-vcek.der", b"".as_slice(), "empty"),
            (
                "evidence/snp-vcek.der",
                b"not der",
                "not one DER certificate",
            ),
            ("evidence/snp-ask-ark.pem", DER, "0 PEM certificates"),
            ("evidence/tdx-collateral.json", b"[1]", "not a JSON object"),
            ("evidence/tdx-collateral.json", b"{}", "missing"),
            ("evidence/tdx-quote.bin", DER, "not a collateral file"),
        ] {
            let e = one(path, data).unwrap_err();
            assert_eq!(e.path, path);
            assert!(e.to_string().contains(says), "{path}: {e}");
        }
        let twice = HostCollateral::parse(&[
            CollateralFile {
                data: DER.to_vec(),
                path: "evidence/snp-vcek.der".into(),
            },
            CollateralFile {
                data: DER.to_vec(),
                path: "evidence/snp-vcek.der".into(),
            },
        ])
        .unwrap_err();
        assert!(twice.to_string().contains("sent twice"), "{twice}");
        let big = one("evidence/snp-vcek.der", &vec![0x30; 16 * 1024 + 1]).unwrap_err();
        assert!(big.to_string().contains("over its slot's 16384"), "{big}");
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
        // TDX without an enclave-side bundle: each job brings the host's.
        let tdx = select(AttestChoice::Tdx, &p, None, None).unwrap();
        assert_eq!(tdx.platform(), Platform::Tdx);
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
