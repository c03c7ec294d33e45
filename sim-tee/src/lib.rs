//! kolm-sim-tee: the simulated TEE, a software stand-in for a TEE that
//! proves nothing. Its evidence is in the real formats (an AWS Nitro
//! attestation document, an SEV-SNP report, a TDX v4 quote), so the real
//! verifier code runs on it, but it is signed under a root this
//! installation made for itself (`kolm-sim-root/`), not a hardware
//! vendor's: anyone who can read that root's key (or run this code) can
//! produce such evidence for any report data. The verifier checks it only
//! against a root the caller names (`kolm-verify
//! --dangerous-trust-sim-root ROOT.pem`) and reports it as `simulated`,
//! never `verified`.
//!
//! It is its own crate so that a hardware image can leave it out:
//! `kolm-enclave` links it only with its `sim` feature (on by default, for
//! tests and demos; `cargo build -p kolm-enclave --no-default-features`
//! has no simulated TEE, `--attest sim` is refused there, and
//! `tests/tests/no_sim_build.rs` checks that binary holds none of this
//! code). It depends on the format crates only, never on `kolm-enclave`:
//! the enclave's `providers::sim` adapts [`SimTee`] to its provider trait.
//!
//! `--sim-format` ([`SimFormat`]) picks the format: `nitro` (the default,
//! below), `tdx` (a TDX v4 quote with DCAP collateral under the
//! installation's TDX format root) or `sev-snp`. The platform is
//! `simulated` in every form; the evidence file names say which form it is
//! (receipt v2 section 6), and each form chains to its own root
//! ([`root`]).
//!
//! In the Nitro form, each attestation is an AWS-Nitro-format attestation document
//! ([`nitro`]): the NSM's COSE_Sign1 and CBOR payload, signed by a fresh
//! P-384 leaf that the installation's sim root ([`root`]) issues. It is
//! sealed as `evidence/sim-nitro.cose` under platform `simulated`
//! (receipt v2), never as `nitro`.
//!
//! The PCRs are stand-ins, not measurements of an enclave image:
//!
//! | PCR | value |
//! |---|---|
//! | 0 | SHA-384 of the running `kolm-enclave` binary (the manifest's `environment.measurement`) |
//! | 1 | SHA-384 of [`PCR1_LABEL`] (no kernel is measured) |
//! | 2 | SHA-384 of [`PCR2_LABEL`] (no application is measured apart from PCR0) |
//! | 3 | zero (no parent IAM role) |
//! | 4 | SHA-384 of the sim root certificate (the installation stands for the parent instance) |
//! | 8 | zero (no signing certificate) |

mod der;
pub mod nitro;
pub mod root;
pub mod snp;
pub mod snp_root;
pub mod tdx;

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use kolm_format::evidence::{
    EvidenceRole, SIM_NITRO_DOC_PATH, SIM_SNP_CHAIN_PATH, SIM_SNP_REPORT_PATH, SIM_SNP_VCEK_PATH,
    SIM_TDX_COLLATERAL_PATH, SIM_TDX_QUOTE_PATH,
};
use kolm_format::seal::{CollateralBundle, EvidenceBundle};
use kolm_policy::Platform;
use ring::rand::{SecureRandom as _, SystemRandom};
use time::OffsetDateTime;

pub use kolm_format::evidence::SimFormat;
pub use nitro::DocumentRequest;
pub use root::{
    ROOT_DIR_ENV, SimRoot, SimRootError, bundle_pem, default_root_dir, format_root_dir, root_dir,
};
pub use snp_root::SimSnpRoot;

/// What PCR1 is the SHA-384 of.
pub const PCR1_LABEL: &str =
    "kolm simulated TEE PCR1: no kernel or bootstrap is measured (NOT A TEE)";
/// What PCR2 is the SHA-384 of.
pub const PCR2_LABEL: &str =
    "kolm simulated TEE PCR2: no application is measured apart from PCR0 (NOT A TEE)";
/// The PCRs a sim document reports (the ones a Nitro document does).
pub const SIM_PCRS: [u8; 6] = [0, 1, 2, 3, 4, 8];

/// Why sim evidence could not be produced.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    #[error(transparent)]
    Root(#[from] SimRootError),
    #[error("measuring {path} for PCR0: {error}")]
    Measure {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("sim document field {field}: {reason}")]
    Field { field: &'static str, reason: String },
    #[error("sim evidence: {0}")]
    Crypto(&'static str),
    #[error("sim document encoding: {0}")]
    Encode(String),
    /// A form this build cannot write.
    #[error("--sim-format {format}: not built in this build")]
    NotBuilt { format: SimFormat },
    /// A request for another form's evidence (a Nitro document from a
    /// provider of another form).
    #[error("this simulated TEE writes the {format} form, not {asked}")]
    OtherForm { format: SimFormat, asked: SimFormat },
}

/// The simulated TEE. Open it once per process: it loads (or first
/// creates) the root of its form and measures the binary.
#[derive(Debug)]
pub struct SimTee {
    root: SimRoot,
    /// SHA-384 of the `kolm-enclave` binary: the stand-in launch
    /// measurement of every form.
    binary_sha384: [u8; 48],
    form: Form,
}

/// What one form keeps between attestations.
#[derive(Debug)]
enum Form {
    Nitro {
        pcrs: BTreeMap<u8, [u8; nitro::PCR_BYTES]>,
        module_id: String,
    },
    Tdx(Box<tdx::TdxSim>),
    /// The SEV-SNP form: the installation's ARK, ASK and VCEK, and this
    /// instance's REPORT_ID (one "guest" per provider).
    SevSnp {
        // Boxed: its chain and key dwarf the Nitro form's fields.
        snp: Box<SimSnpRoot>,
        report_id: [u8; 32],
    },
}

fn sha384(bytes: &[u8]) -> [u8; 48] {
    let d = ring::digest::digest(&ring::digest::SHA384, bytes);
    let mut out = [0u8; 48];
    out.copy_from_slice(d.as_ref());
    out
}

/// SHA-384 of a file, streamed.
fn sha384_file(path: &Path) -> Result<[u8; 48], SimError> {
    let err = |source| SimError::Measure {
        path: path.to_path_buf(),
        error: source,
    };
    let mut f = std::fs::File::open(path).map_err(err)?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA384);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(err)?;
        match buf.get(..n) {
            Some([]) | None => break,
            Some(chunk) => ctx.update(chunk),
        }
    }
    let mut out = [0u8; 48];
    out.copy_from_slice(ctx.finish().as_ref());
    Ok(out)
}

impl SimTee {
    /// Opens the simulated TEE of `format` with the installation's roots
    /// in `root_dir` (`format`'s root is created there, atomically, on
    /// first use; see [`default_root_dir`]); its launch measurement is the
    /// SHA-384 of `measured_exe` (the running `kolm-enclave`).
    pub fn open(
        root_dir: &Path,
        measured_exe: &Path,
        format: SimFormat,
    ) -> Result<SimTee, SimError> {
        if format == SimFormat::SevSnp {
            return SimTee::open_snp(root_dir, measured_exe);
        }
        let now = OffsetDateTime::now_utc();
        let (root, created) = SimRoot::load_or_create_form(root_dir, format, now)?;
        if created {
            tracing::info!(
                dir = %root.dir().display(),
                %format,
                "created a kolm sim root (NOT A TEE)"
            );
        }
        let binary_sha384 = sha384_file(measured_exe)?;
        if format == SimFormat::Tdx {
            let stand_ins = tdx::TdStandIns::new(binary_sha384, &root);
            let sim = tdx::TdxSim::new(&root, stand_ins, now)?;
            return Ok(SimTee {
                root,
                binary_sha384,
                form: Form::Tdx(Box::new(sim)),
            });
        }
        let pcr0 = binary_sha384;
        let pcrs = BTreeMap::from([
            (0, pcr0),
            (1, sha384(PCR1_LABEL.as_bytes())),
            (2, sha384(PCR2_LABEL.as_bytes())),
            (3, [0u8; 48]),
            (4, sha384(root.certificate_der())),
            (8, [0u8; 48]),
        ]);
        let mut enclave = [0u8; 8];
        SystemRandom::new()
            .fill(&mut enclave)
            .map_err(|_| SimError::Crypto("no randomness"))?;
        let module_id = format!(
            "kolm-sim-{}-enc{}",
            hex::encode(root.sha256().get(..8).unwrap_or_default()),
            hex::encode(enclave)
        );
        Ok(SimTee {
            root,
            binary_sha384,
            form: Form::Nitro { pcrs, module_id },
        })
    }

    /// The SEV-SNP form: the installation's P-384 root (made first if
    /// missing) and its SNP root, made on the form's first use.
    fn open_snp(root_dir: &Path, measured_exe: &Path) -> Result<SimTee, SimError> {
        let now = OffsetDateTime::now_utc();
        let (root, _) = SimRoot::load_or_create(root_dir, now)?;
        let (snp, created) = SimSnpRoot::load_or_create_in(root_dir, now)?;
        if created {
            tracing::info!(
                dir = %snp.dir().display(),
                format = %SimFormat::SevSnp,
                "created a kolm sim root (NOT A TEE)"
            );
        }
        let binary_sha384 = sha384_file(measured_exe)?;
        let mut report_id = [0u8; 32];
        SystemRandom::new()
            .fill(&mut report_id)
            .map_err(|_| SimError::Crypto("no randomness"))?;
        Ok(SimTee {
            root,
            binary_sha384,
            form: Form::SevSnp {
                snp: Box::new(snp),
                report_id,
            },
        })
    }

    /// The form this provider writes.
    pub fn format(&self) -> SimFormat {
        match &self.form {
            Form::Nitro { .. } => SimFormat::Nitro,
            Form::Tdx(_) => SimFormat::Tdx,
            Form::SevSnp { .. } => SimFormat::SevSnp,
        }
    }

    /// The SEV-SNP form's root (its ARK, ASK and VCEK); `None` in the
    /// other forms.
    pub fn snp_root(&self) -> Option<&SimSnpRoot> {
        match &self.form {
            Form::SevSnp { snp, .. } => Some(snp),
            _ => None,
        }
    }

    /// The PEM of the root this form's evidence chains to, as a verifier
    /// is given it (`--dangerous-trust-sim-root`): the P-384 sim root for
    /// the Nitro form, the ARK for the SEV-SNP form.
    pub fn form_root_pem(&self) -> String {
        match &self.form {
            Form::SevSnp { snp, .. } => root::pem_encode(snp.ark_der()),
            _ => self.root.certificate_pem(),
        }
    }

    /// The root the evidence chains to: the P-384 sim root (Nitro form) or
    /// the form's format root; the installation's P-384 root in the
    /// SEV-SNP form, whose own root is an RSA ARK ([`Self::snp_root`]).
    pub fn root(&self) -> &SimRoot {
        &self.root
    }

    /// The PCRs every document reports (Nitro form; empty in the others).
    pub fn pcrs(&self) -> &BTreeMap<u8, [u8; nitro::PCR_BYTES]> {
        static NONE: BTreeMap<u8, [u8; nitro::PCR_BYTES]> = BTreeMap::new();
        match &self.form {
            Form::Nitro { pcrs, .. } => pcrs,
            Form::Tdx(_) => &NONE,
            Form::SevSnp { .. } => &NONE,
        }
    }

    /// This instance's NSM-style module id (`kolm-sim-<root>-enc<random>`;
    /// Nitro form; empty in the others, which have no such field).
    pub fn module_id(&self) -> &str {
        match &self.form {
            Form::Nitro { module_id, .. } => module_id,
            Form::Tdx(_) => "",
            Form::SevSnp { .. } => "",
        }
    }

    /// One Nitro-format document for `req` (Nitro form only).
    pub fn document(&self, req: &DocumentRequest<'_>) -> Result<Vec<u8>, SimError> {
        match &self.form {
            Form::Nitro { pcrs, module_id } => nitro::document(&self.root, module_id, pcrs, req),
            Form::Tdx(_) => Err(SimError::OtherForm {
                format: SimFormat::Tdx,
                asked: SimFormat::Nitro,
            }),
            Form::SevSnp { .. } => Err(SimError::OtherForm {
                format: SimFormat::SevSnp,
                asked: SimFormat::Nitro,
            }),
        }
    }

    /// One TDX v4 quote whose REPORTDATA is `report_data` (TDX form only).
    pub fn tdx_quote(&self, report_data: &[u8; 64]) -> Result<Vec<u8>, SimError> {
        match &self.form {
            Form::Tdx(t) => t.quote(report_data),
            _ => Err(SimError::OtherForm {
                format: self.format(),
                asked: SimFormat::Tdx,
            }),
        }
    }

    /// The TDX form's collateral JSON, issued at `at` (TDX form only).
    pub fn tdx_collateral(&self, at: OffsetDateTime) -> Result<Vec<u8>, SimError> {
        match &self.form {
            Form::Tdx(t) => t.collateral(&self.root, at),
            _ => Err(SimError::OtherForm {
                format: self.format(),
                asked: SimFormat::Tdx,
            }),
        }
    }
}

/// What the enclave's provider trait asks of a TEE, under names of their
/// own (the enclave's `providers::sim` adapts them).
impl SimTee {
    /// The SHA-384 of the `kolm-enclave` binary (a stand-in, not an
    /// enclave image measurement): what the verifier reads as the launch
    /// measurement of every form (the Nitro form's PCR0).
    pub fn launch_measurement(&self) -> [u8; 48] {
        self.binary_sha384
    }

    /// The collateral the verifier needs offline, as the form's platform
    /// serves it; none in the Nitro form, whose document carries its chain.
    pub fn collateral_bundle(&self) -> Result<CollateralBundle, SimError> {
        match &self.form {
            // The document carries its chain.
            Form::Nitro { .. } => Ok(CollateralBundle::empty(Platform::Simulated)),
            Form::Tdx(_) => Ok(CollateralBundle {
                platform: Platform::Simulated,
                files: vec![(
                    SIM_TDX_COLLATERAL_PATH.to_string(),
                    self.tdx_collateral(OffsetDateTime::now_utc())?,
                )],
            }),
            // As AMD KDS serves them for a real chip: the VCEK, and the
            // ASK and ARK of its product.
            Form::SevSnp { snp, .. } => Ok(CollateralBundle {
                platform: Platform::Simulated,
                files: vec![
                    (
                        SIM_SNP_CHAIN_PATH.to_string(),
                        snp.ask_ark_pem().into_bytes(),
                    ),
                    (SIM_SNP_VCEK_PATH.to_string(), snp.vcek_der().to_vec()),
                ],
            }),
        }
    }

    /// The attestation whose report data is `report_data`, in this form
    /// (the attestation file only; the collateral is
    /// [`Self::collateral_bundle`]).
    pub fn evidence(&self, report_data: &[u8; 64]) -> Result<EvidenceBundle, SimError> {
        let (path, bytes) = match &self.form {
            Form::Nitro { .. } => (
                SIM_NITRO_DOC_PATH,
                self.document(&DocumentRequest {
                    user_data: report_data,
                    nonce: None,
                    public_key: None,
                    at: OffsetDateTime::now_utc(),
                })?,
            ),
            Form::Tdx(t) => (SIM_TDX_QUOTE_PATH, t.quote(report_data)?),
            Form::SevSnp { snp, report_id } => (
                SIM_SNP_REPORT_PATH,
                snp.report(report_data, &self.binary_sha384, report_id)?,
            ),
        };
        Ok(EvidenceBundle {
            platform: Platform::Simulated,
            files: vec![(path.to_string(), bytes, EvidenceRole::Attestation)],
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    /// The document has the NSM's shape: an untagged COSE_Sign1 whose
    /// protected header names ES384 and whose payload keys are the NSM's,
    /// in its order, with the sim PCRs. (Its signatures and chain are
    /// checked by the verifier's Nitro code in `tests/tests/sim_tee.rs`.)
    #[test]
    fn the_document_has_the_nsm_layout() {
        use coset::{CborSerializable as _, CoseSign1};
        let base = tempfile::tempdir().unwrap();
        let exe = base.path().join("kolm-enclave");
        std::fs::write(&exe, b"binary").unwrap();
        let p = SimTee::open(&base.path().join("root"), &exe, SimFormat::Nitro).unwrap();
        assert_eq!(p.launch_measurement(), sha384(b"binary"));
        let bundle = p.evidence(&[7u8; 64]).unwrap();
        assert_eq!(bundle.platform, Platform::Simulated);
        let [(path, doc, role)] = &bundle.files[..] else {
            panic!("one file expected")
        };
        assert_eq!(
            (path.as_str(), *role),
            (SIM_NITRO_DOC_PATH, EvidenceRole::Attestation)
        );
        assert_eq!(doc[0], 0x84, "untagged COSE_Sign1 array of four");
        let sign1 = CoseSign1::from_slice(doc).unwrap();
        assert_eq!(
            sign1.protected.header.alg,
            Some(coset::RegisteredLabelWithPrivate::Assigned(
                coset::iana::Algorithm::ES384
            ))
        );
        assert_eq!(sign1.signature.len(), 96);
        let payload: ciborium::Value =
            ciborium::de::from_reader(sign1.payload.unwrap().as_slice()).unwrap();
        let ciborium::Value::Map(entries) = payload else {
            panic!("payload is not a map")
        };
        let keys: Vec<String> = entries
            .iter()
            .map(|(k, _)| k.as_text().unwrap().to_string())
            .collect();
        assert_eq!(
            keys,
            [
                "module_id",
                "digest",
                "timestamp",
                "pcrs",
                "certificate",
                "cabundle",
                "public_key",
                "user_data",
                "nonce"
            ]
        );
        let get = |k: &str| {
            &entries
                .iter()
                .find(|(n, _)| n.as_text() == Some(k))
                .unwrap()
                .1
        };
        assert_eq!(get("user_data").as_bytes().unwrap(), &vec![7u8; 64]);
        assert!(get("nonce").is_null());
        let pcrs = get("pcrs").as_map().unwrap();
        let indices: Vec<i128> = pcrs
            .iter()
            .map(|(k, _)| k.as_integer().unwrap().into())
            .collect();
        assert_eq!(indices, SIM_PCRS.map(i128::from));
        let cabundle = get("cabundle").as_array().unwrap();
        assert_eq!(
            cabundle[0].as_bytes().unwrap().as_slice(),
            p.root().certificate_der()
        );
    }

    #[test]
    fn oversized_fields_are_refused() {
        let base = tempfile::tempdir().unwrap();
        let exe = base.path().join("exe");
        std::fs::write(&exe, b"x").unwrap();
        let p = SimTee::open(&base.path().join("root"), &exe, SimFormat::Nitro).unwrap();
        let big = vec![0u8; 1025];
        let at = OffsetDateTime::now_utc();
        let req = |user_data, nonce, public_key| DocumentRequest {
            user_data,
            nonce,
            public_key,
            at,
        };
        for r in [
            req(&big, None, None),
            req(&[], Some(&big), None),
            req(&[], None, Some(&big)),
            req(&[], None, Some(&[])),
        ] {
            assert!(matches!(p.document(&r), Err(SimError::Field { .. })));
        }
        let missing = SimTee::open(
            &base.path().join("root"),
            &base.path().join("no"),
            SimFormat::Nitro,
        );
        assert!(matches!(missing, Err(SimError::Measure { .. })));
    }
}
