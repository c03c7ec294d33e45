//! The sim root: the P-384 CA of the simulated TEE, one per installation.
//!
//! It lives in a directory (by default `kolm-sim-root/` beside the
//! `kolm-enclave` binary: [`default_root_dir`]) holding `root.pem` (the
//! self-signed certificate, subject `CN=kolm simulated TEE root (NOT A
//! TEE)`) and `key.pk8` (its PKCS#8 private key, mode 0600). The first use
//! creates both in a fresh temporary directory, fsyncs them and renames
//! the directory into place, so a reader sees either no root or a whole
//! one; a second process that loses the race uses the winner's root.
//! Later uses load it and check that the key is the certificate's.
//!
//! Whoever can read `key.pk8` can sign sim evidence: the root proves
//! nothing about hardware, only that evidence came from this installation
//! (docs/attestation.md, "Simulated evidence").
//!
//! That root signs the Nitro form. Each other form (`--sim-format tdx`,
//! `sev-snp`) has its own *format root*, a P-256 CA whose subject names the
//! form ([`SimFormat::root_common_name`], e.g. `CN=kolm simulated TEE TDX
//! root (NOT A TEE)`), created the same way on first use of that form in a
//! subdirectory named after it (`tdx/root.pem`, `tdx/key.pk8`). [`bundle_pem`]
//! exports the P-384 root and every format root the installation has.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use ring::rand::{SecureRandom as _, SystemRandom};
use ring::signature::{ECDSA_P384_SHA384_ASN1_SIGNING, EcdsaKeyPair, KeyPair as _};
use time::{Duration, OffsetDateTime};

use kolm_format::evidence::SimFormat;

use super::der::{self, oid, tag};
use super::snp_root::SimSnpRoot;

/// The directory name beside the binary.
pub const ROOT_DIR_NAME: &str = "kolm-sim-root";
/// The certificate's file name in the root directory.
pub const ROOT_CERT_FILE: &str = "root.pem";
/// The private key's file name in the root directory.
pub const ROOT_KEY_FILE: &str = "key.pk8";
/// The root certificate's common name: it says what it is (the verifier
/// trusts no sim root without it).
pub use kolm_format::evidence::SIM_ROOT_COMMON_NAME as ROOT_COMMON_NAME;
/// The organizational unit of every sim certificate.
pub const SIM_ORG_UNIT: &str = "simulated TEE, not hardware";
/// How long a new root is valid.
pub const ROOT_VALIDITY: Duration = Duration::days(20 * 365);

/// The key type of a sim certificate: the P-384 root and the Nitro form's
/// leaves are P-384 (ecdsa-with-SHA384, as AWS's); the TDX form's root and
/// chain are P-256 (ecdsa-with-SHA256: dcap-qvl accepts nothing else). The
/// SEV-SNP form's root is RSA, as AMD's ARK ([`super::snp_root`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyAlg {
    P384,
    P256,
}

impl KeyAlg {
    pub(crate) fn signing(self) -> &'static ring::signature::EcdsaSigningAlgorithm {
        match self {
            KeyAlg::P384 => &ECDSA_P384_SHA384_ASN1_SIGNING,
            KeyAlg::P256 => &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING,
        }
    }

    /// The AlgorithmIdentifier of signatures by such a key.
    pub(crate) fn signature_algorithm(self) -> Vec<u8> {
        der::sequence(&[&der::oid(match self {
            KeyAlg::P384 => oid::ECDSA_WITH_SHA384,
            KeyAlg::P256 => oid::ECDSA_WITH_SHA256,
        })])
    }

    /// The SubjectPublicKeyInfo of `public_key` (an uncompressed point).
    pub(crate) fn spki(self, public_key: &[u8]) -> Vec<u8> {
        let curve = match self {
            KeyAlg::P384 => oid::SECP384R1,
            KeyAlg::P256 => oid::PRIME256V1,
        };
        der::sequence(&[
            &der::sequence(&[&der::oid(oid::EC_PUBLIC_KEY), &der::oid(curve)]),
            &der::bit_string(public_key),
        ])
    }
}

/// What kind of root a directory holds.
#[derive(Debug, Clone, Copy)]
struct RootSpec {
    alg: KeyAlg,
    common_name: &'static str,
    /// basicConstraints pathLenConstraint: 0 for the P-384 root (it signs
    /// leaves), 1 for a format root (it signs an intermediate CA, as
    /// Intel's and AMD's roots do).
    path_len: u8,
}

impl RootSpec {
    fn of(form: SimFormat) -> RootSpec {
        match form {
            SimFormat::Nitro => RootSpec {
                alg: KeyAlg::P384,
                common_name: ROOT_COMMON_NAME,
                path_len: 0,
            },
            SimFormat::SevSnp | SimFormat::Tdx => RootSpec {
                alg: KeyAlg::P256,
                common_name: form.root_common_name(),
                path_len: 1,
            },
        }
    }
}

/// Where `form`'s root lives under the installation's root directory
/// `dir`: `dir` itself for the Nitro form (the P-384 root), else
/// `dir/<form name>`.
pub fn format_root_dir(dir: &Path, form: SimFormat) -> PathBuf {
    match form {
        SimFormat::Nitro => dir.to_path_buf(),
        other => dir.join(other.name()),
    }
}

/// Largest `root.pem` / `key.pk8` read back (a P-384 root is under 1 KiB).
const MAX_FILE_BYTES: u64 = 16 * 1024;
const PEM_BEGIN: &str = "-----BEGIN CERTIFICATE-----";
const PEM_END: &str = "-----END CERTIFICATE-----";

/// Why the sim root could not be created or loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimRootError {
    #[error("sim root {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("sim root {path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("sim root key {path} has mode {mode:o}: others may read it; it must be 0600")]
    KeyMode { path: PathBuf, mode: u32 },
    #[error("sim root key {key} is not the key of the certificate {cert}")]
    KeyMismatch { key: PathBuf, cert: PathBuf },
    #[error("sim root: {0}")]
    Crypto(&'static str),
    #[error("sim root: no directory beside the binary: {0}")]
    NoDefaultDir(String),
    #[error("the {form} form's root is not an ECDSA sim root (it is made with its own chain)")]
    NotEcdsaForm { form: SimFormat },
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SimRootError + '_ {
    move |source| SimRootError::Io {
        path: path.to_path_buf(),
        error: source,
    }
}

/// Names another directory for the sim root (tests, or an installation
/// that keeps it elsewhere).
pub const ROOT_DIR_ENV: &str = "KOLM_SIM_ROOT_DIR";

/// Where the sim root lives: `$KOLM_SIM_ROOT_DIR`, else
/// [`default_root_dir`].
pub fn root_dir() -> Result<PathBuf, SimRootError> {
    match std::env::var_os(ROOT_DIR_ENV) {
        Some(d) if !d.is_empty() => Ok(PathBuf::from(d)),
        _ => default_root_dir(),
    }
}

/// `<directory of the running binary>/kolm-sim-root`.
pub fn default_root_dir() -> Result<PathBuf, SimRootError> {
    let exe = std::env::current_exe().map_err(|e| SimRootError::NoDefaultDir(e.to_string()))?;
    let dir = exe
        .parent()
        .ok_or_else(|| SimRootError::NoDefaultDir(format!("{} has no parent", exe.display())))?;
    Ok(dir.join(ROOT_DIR_NAME))
}

/// A loaded sim root (the P-384 root or a format root): its certificate
/// and the key that signs what it issues.
pub struct SimRoot {
    dir: PathBuf,
    form: SimFormat,
    alg: KeyAlg,
    cert_der: Vec<u8>,
    subject: Vec<u8>,
    key: EcdsaKeyPair,
}

impl std::fmt::Debug for SimRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("SimRoot")
            .field("dir", &self.dir)
            .field("form", &self.form)
            .field("sha256", &hex::encode(self.sha256()))
            .finish_non_exhaustive()
    }
}

impl SimRoot {
    /// Loads the root in `dir`, creating it first (atomically) if `dir`
    /// does not exist; `now` dates a new root. Returns whether it was
    /// created by this call.
    pub fn load_or_create(
        dir: &Path,
        now: OffsetDateTime,
    ) -> Result<(SimRoot, bool), SimRootError> {
        SimRoot::load_or_create_form(dir, SimFormat::Nitro, now)
    }

    /// The root of `form` in the installation's root directory `dir`
    /// ([`format_root_dir`]), created first (atomically) if it does not
    /// exist; a format root needs the P-384 root's directory, which is
    /// created first too. Returns whether `form`'s root was created by
    /// this call.
    ///
    /// The SEV-SNP form's root is an RSA ARK with its own chain, not an
    /// ECDSA root: it is refused here ([`SimSnpRoot::load_or_create_in`]
    /// makes it).
    pub fn load_or_create_form(
        dir: &Path,
        form: SimFormat,
        now: OffsetDateTime,
    ) -> Result<(SimRoot, bool), SimRootError> {
        if form == SimFormat::SevSnp {
            return Err(SimRootError::NotEcdsaForm { form });
        }
        if form != SimFormat::Nitro {
            SimRoot::load_or_create(dir, now)?;
        }
        let spec = RootSpec::of(form);
        let dir = &format_root_dir(dir, form);
        let created = install_dir(dir, ".kolm-sim-root.tmp-", |tmp| {
            let (cert_der, pkcs8) = generate(spec, now)?;
            write_synced(&tmp.join(ROOT_KEY_FILE), &pkcs8, 0o600)?;
            write_synced(
                &tmp.join(ROOT_CERT_FILE),
                pem_encode(&cert_der).as_bytes(),
                0o644,
            )
        })?;
        // Ours, or the one another process renamed into place first.
        SimRoot::load_form(dir, form).map(|r| (r, created))
    }

    /// Loads an existing root: the certificate (one PEM block), the key
    /// (PKCS#8, mode 0600 at most), and checks the key is the
    /// certificate's.
    pub fn load(dir: &Path) -> Result<SimRoot, SimRootError> {
        SimRoot::load_form(dir, SimFormat::Nitro)
    }

    /// Loads `form`'s root from its own directory (`format_root_dir`): as
    /// [`SimRoot::load`], with the form's key type, and its subject must
    /// be the form's root name.
    fn load_form(dir: &Path, form: SimFormat) -> Result<SimRoot, SimRootError> {
        let spec = RootSpec::of(form);
        let cert_path = dir.join(ROOT_CERT_FILE);
        let key_path = dir.join(ROOT_KEY_FILE);
        let pem = read_capped(&cert_path)?;
        let cert_der = pem_decode(&pem).map_err(|reason| SimRootError::Invalid {
            path: cert_path.clone(),
            reason: reason.to_string(),
        })?;
        let mode = std::fs::metadata(&key_path)
            .map_err(io_err(&key_path))?
            .permissions()
            .mode()
            & 0o777;
        if mode & 0o077 != 0 {
            return Err(SimRootError::KeyMode {
                path: key_path,
                mode,
            });
        }
        let pkcs8 = read_capped(&key_path)?;
        let rng = SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(spec.alg.signing(), &pkcs8, &rng).map_err(|e| {
            SimRootError::Invalid {
                path: key_path.clone(),
                reason: format!("not a {:?} PKCS#8 key: {e}", spec.alg),
            }
        })?;
        let parts = der::cert_parts(&cert_der).map_err(|e| SimRootError::Invalid {
            path: cert_path.clone(),
            reason: e.to_string(),
        })?;
        if parts.public_key != key.public_key().as_ref() {
            return Err(SimRootError::KeyMismatch {
                key: key_path,
                cert: cert_path,
            });
        }
        if parts.subject != root_name(spec.common_name) {
            return Err(SimRootError::Invalid {
                path: cert_path,
                reason: format!("its subject is not CN={}", spec.common_name),
            });
        }
        Ok(SimRoot {
            dir: dir.to_path_buf(),
            form,
            alg: spec.alg,
            cert_der,
            subject: parts.subject,
            key,
        })
    }

    /// The directory the root was loaded from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The form whose evidence this root signs.
    pub fn form(&self) -> SimFormat {
        self.form
    }

    /// The root's key type.
    pub(crate) fn alg(&self) -> KeyAlg {
        self.alg
    }

    /// The self-signed certificate, DER (what a sim document's
    /// `cabundle[0]` is).
    pub fn certificate_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// The certificate as one PEM block (what `kolm-enclave sim-root`
    /// exports and `kolm-verify --dangerous-trust-sim-root` reads).
    pub fn certificate_pem(&self) -> String {
        pem_encode(&self.cert_der)
    }

    /// SHA-256 of the certificate DER (how reports name the root).
    pub fn sha256(&self) -> [u8; 32] {
        let d = ring::digest::digest(&ring::digest::SHA256, &self.cert_der);
        let mut out = [0u8; 32];
        out.copy_from_slice(d.as_ref());
        out
    }

    /// The subject Name DER (the issuer of every leaf).
    pub(crate) fn subject_der(&self) -> &[u8] {
        &self.subject
    }

    /// The root's public key (uncompressed point).
    pub(crate) fn public_key(&self) -> &[u8] {
        self.key.public_key().as_ref()
    }

    /// Signs a TBSCertificate (or a TBSCertList, or any message): ECDSA
    /// with the root's curve and hash (P-384/SHA-384 or P-256/SHA-256),
    /// DER signature.
    pub(crate) fn sign_tbs(&self, tbs: &[u8]) -> Result<Vec<u8>, SimRootError> {
        let rng = SystemRandom::new();
        self.key
            .sign(&rng, tbs)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| SimRootError::Crypto("ECDSA signing failed"))
    }
}

pub(crate) fn is_lost_race(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOTEMPTY) | Some(libc::EEXIST))
}

/// A fresh key and its self-signed certificate: `(certificate DER,
/// PKCS#8)`.
fn generate(spec: RootSpec, now: OffsetDateTime) -> Result<(Vec<u8>, Vec<u8>), SimRootError> {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(spec.alg.signing(), &rng)
        .map_err(|_| SimRootError::Crypto("key generation failed"))?;
    let key = EcdsaKeyPair::from_pkcs8(spec.alg.signing(), pkcs8.as_ref(), &rng)
        .map_err(|_| SimRootError::Crypto("generated key does not load"))?;
    let subject = root_name(spec.common_name);
    let not_before = now.replace_nanosecond(0).unwrap_or(now);
    let tbs = tbs_certificate(&TbsFields {
        serial: random_serial()?,
        issuer: &subject,
        subject: &subject,
        not_before,
        not_after: not_before.saturating_add(ROOT_VALIDITY),
        public_key: key.public_key().as_ref(),
        key_alg: spec.alg,
        signature_alg: spec.alg,
        ca: Some(spec.path_len),
        authority_key_id: None,
        extra_extensions: &[],
    });
    let sig = key
        .sign(&rng, &tbs)
        .map_err(|_| SimRootError::Crypto("ECDSA signing failed"))?;
    Ok((
        certificate(&tbs, spec.alg, sig.as_ref()),
        pkcs8.as_ref().to_vec(),
    ))
}

/// `CN=<common_name>, OU=..., O=kolm`.
fn root_name(common_name: &str) -> Vec<u8> {
    der::name(&[
        (oid::ORGANIZATION, "kolm"),
        (oid::ORGANIZATIONAL_UNIT, SIM_ORG_UNIT),
        (oid::COMMON_NAME, common_name),
    ])
}

/// One root of a [`bundle_pem`] bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundledRoot {
    form: SimFormat,
    dir: PathBuf,
    cert_der: Vec<u8>,
    created: bool,
}

impl BundledRoot {
    /// The form whose root it is.
    pub fn form(&self) -> SimFormat {
        self.form
    }
    /// The directory it lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The certificate, DER.
    pub fn certificate_der(&self) -> &[u8] {
        &self.cert_der
    }
    /// The certificate as one PEM block.
    pub fn certificate_pem(&self) -> String {
        pem_encode(&self.cert_der)
    }
    /// SHA-256 of the certificate DER.
    pub fn sha256(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, &self.cert_der).as_ref());
        out
    }
    /// Whether this call created it.
    pub fn created(&self) -> bool {
        self.created
    }
}

/// What `sim-root --out` exports: the installation's roots as one PEM
/// bundle, the P-384 root first, then each format root that exists (in
/// [`SimFormat::ALL`] order; the SEV-SNP form's is its ARK). With
/// `all_formats`, missing format roots are created first; without it,
/// none is (a form's root appears on its first use). The P-384 root is
/// created if the installation has none. Returns the PEM and the roots in
/// it with whether each was created now.
pub fn bundle_pem(
    dir: &Path,
    all_formats: bool,
    now: OffsetDateTime,
) -> Result<(String, Vec<BundledRoot>), SimRootError> {
    let ecdsa = |(r, created): (SimRoot, bool)| BundledRoot {
        form: r.form,
        dir: r.dir,
        cert_der: r.cert_der,
        created,
    };
    let mut roots = vec![ecdsa(SimRoot::load_or_create(dir, now)?)];
    for form in SimFormat::ALL {
        if form == SimFormat::Nitro {
            continue;
        }
        let exists = std::fs::symlink_metadata(format_root_dir(dir, form)).is_ok();
        if !exists && !all_formats {
            continue;
        }
        roots.push(match form {
            SimFormat::SevSnp => {
                let (snp, created) = SimSnpRoot::load_or_create_in(dir, now)?;
                BundledRoot {
                    form,
                    dir: snp.dir().to_path_buf(),
                    cert_der: snp.ark_der().to_vec(),
                    created,
                }
            }
            _ => ecdsa(SimRoot::load_or_create_form(dir, form, now)?),
        });
    }
    let pem = roots.iter().map(BundledRoot::certificate_pem).collect();
    Ok((pem, roots))
}

/// A positive 16-byte serial number (RFC 5280 section 4.1.2.2: at most 20
/// octets), never zero.
pub(crate) fn random_serial() -> Result<[u8; 16], SimRootError> {
    let mut serial = [0u8; 16];
    SystemRandom::new()
        .fill(&mut serial)
        .map_err(|_| SimRootError::Crypto("no randomness"))?;
    serial[0] = (serial[0] & 0x7f) | 0x40;
    Ok(serial)
}

/// What differs between the certificates the sim issues.
pub(crate) struct TbsFields<'a> {
    pub serial: [u8; 16],
    pub issuer: &'a [u8],
    pub subject: &'a [u8],
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    pub public_key: &'a [u8],
    /// The subject key's type.
    pub key_alg: KeyAlg,
    /// The issuer key's type (the signature algorithm).
    pub signature_alg: KeyAlg,
    /// A CA with this pathLenConstraint (keyCertSign + cRLSign) or, `None`,
    /// a leaf (digitalSignature).
    pub ca: Option<u8>,
    /// The issuer's key identifier (all but self-signed roots).
    pub authority_key_id: Option<[u8; 20]>,
    /// Further extensions, DER, after the standard ones (the PCK
    /// certificate's SGX extension).
    pub extra_extensions: &'a [Vec<u8>],
}

/// The key identifier of a public key: the first 160 bits of its SHA-256
/// (RFC 7093 section 2, method 1).
pub(crate) fn key_id(public_key: &[u8]) -> [u8; 20] {
    let d = ring::digest::digest(&ring::digest::SHA256, public_key);
    let mut out = [0u8; 20];
    out.copy_from_slice(d.as_ref().get(..20).unwrap_or(&[0u8; 20]));
    out
}

/// A v3 TBSCertificate.
pub(crate) fn tbs_certificate(f: &TbsFields<'_>) -> Vec<u8> {
    let version = der::constructed(tag::CONTEXT_0, &[&der::unsigned_integer(&[2])]);
    let alg = f.signature_alg.signature_algorithm();
    let validity = der::sequence(&[&der::time(f.not_before), &der::time(f.not_after)]);
    let spki = f.key_alg.spki(f.public_key);
    let (basic, usage) = match f.ca {
        Some(path_len) => (
            der::sequence(&[&der::boolean_true(), &der::unsigned_integer(&[path_len])]),
            der::key_usage_bits(&[5, 6]),
        ),
        None => (der::sequence(&[]), der::key_usage_bits(&[0])),
    };
    let mut exts = vec![
        der::extension(oid::BASIC_CONSTRAINTS, true, &basic),
        der::extension(oid::KEY_USAGE, true, &usage),
        der::extension(
            oid::SUBJECT_KEY_IDENTIFIER,
            false,
            &der::octet_string(&key_id(f.public_key)),
        ),
    ];
    if let Some(aki) = f.authority_key_id {
        let value = der::sequence(&[&der::tlv(tag::CONTEXT_0_PRIMITIVE, &aki)]);
        exts.push(der::extension(oid::AUTHORITY_KEY_IDENTIFIER, false, &value));
    }
    exts.extend(f.extra_extensions.iter().cloned());
    let ext_parts: Vec<&[u8]> = exts.iter().map(Vec::as_slice).collect();
    let extensions = der::constructed(tag::CONTEXT_3, &[&der::sequence(&ext_parts)]);
    der::sequence(&[
        &version,
        &der::unsigned_integer(&f.serial),
        &alg,
        f.issuer,
        &validity,
        f.subject,
        &spki,
        &extensions,
    ])
}

/// Certificate ::= SEQUENCE { tbs, signatureAlgorithm, signatureValue }
/// (the same shape signs a CertificateList).
pub(crate) fn certificate(tbs: &[u8], signature_alg: KeyAlg, signature_der: &[u8]) -> Vec<u8> {
    der::sequence(&[
        tbs,
        &signature_alg.signature_algorithm(),
        &der::bit_string(signature_der),
    ])
}

pub(crate) fn write_synced(path: &Path, bytes: &[u8], mode: u32) -> Result<(), SimRootError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io_err(path))?;
    // The umask may have narrowed the mode; the key must be exactly 0600.
    f.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(io_err(path))?;
    f.write_all(bytes).map_err(io_err(path))?;
    f.sync_all().map_err(io_err(path))
}

pub(crate) fn read_capped(path: &Path) -> Result<Vec<u8>, SimRootError> {
    let f = std::fs::File::open(path).map_err(io_err(path))?;
    let mut out = Vec::new();
    f.take(MAX_FILE_BYTES.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(io_err(path))?;
    if out.len() as u64 > MAX_FILE_BYTES {
        return Err(SimRootError::Invalid {
            path: path.to_path_buf(),
            reason: format!("over the {MAX_FILE_BYTES}-byte cap"),
        });
    }
    Ok(out)
}

/// One `CERTIFICATE` PEM block, 64-column base64 (RFC 7468 section 2).
pub fn pem_encode(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from(PEM_BEGIN);
    out.push('\n');
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(PEM_END);
    out.push('\n');
    out
}

/// Why a root's certificate file is not one PEM certificate
/// ([`pem_decode`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PemError {
    #[error("not UTF-8 PEM")]
    NotUtf8,
    #[error("not exactly one CERTIFICATE PEM block")]
    NotOneBlock,
    #[error("PEM base64: {error}")]
    Base64 { error: base64::DecodeError },
}

/// The DER of exactly one `CERTIFICATE` PEM block (nothing else but
/// whitespace around it).
pub(crate) fn pem_decode(pem: &[u8]) -> Result<Vec<u8>, PemError> {
    let text = std::str::from_utf8(pem).map_err(|_| PemError::NotUtf8)?;
    let body = text
        .trim()
        .strip_prefix(PEM_BEGIN)
        .and_then(|t| t.strip_suffix(PEM_END))
        .ok_or(PemError::NotOneBlock)?;
    if body.contains("-----") {
        return Err(PemError::NotOneBlock);
    }
    let b64: String = body.split_whitespace().collect();
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|error| PemError::Base64 { error })
}

/// Creates `dir` whole: `write` fills a fresh temporary directory beside
/// it (mode 0700), which is fsynced and renamed onto `dir`. Returns
/// `false`, writing nothing, if `dir` exists (or another process renamed
/// its own into place first); `true` if this call created it.
pub(crate) fn install_dir(
    dir: &Path,
    tmp_prefix: &str,
    write: impl FnOnce(&Path) -> Result<(), SimRootError>,
) -> Result<bool, SimRootError> {
    use std::os::unix::fs::PermissionsExt as _;
    match std::fs::symlink_metadata(dir) {
        Ok(_) => return Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(dir)(e)),
    }
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(parent).map_err(io_err(parent))?;
    let tmp = tempfile::Builder::new()
        .prefix(tmp_prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(parent)
        .map_err(io_err(parent))?;
    write(tmp.path())?;
    std::fs::File::open(tmp.path())
        .and_then(|d| d.sync_all())
        .map_err(io_err(tmp.path()))?;
    match std::fs::rename(tmp.path(), dir) {
        Ok(()) => {
            // The directory lives on under its own name.
            let _ = tmp.keep();
            std::fs::File::open(parent)
                .and_then(|d| d.sync_all())
                .map_err(io_err(parent))?;
            Ok(true)
        }
        // Another process created it first (rename onto a non-empty
        // directory fails): theirs is used; ours is removed with `tmp`.
        Err(e) if dir.is_dir() && is_lost_race(&e) => Ok(false),
        Err(e) => Err(io_err(dir)(e)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_767_225_600).unwrap()
    }

    /// Created once (key 0600, directory renamed into place whole), then
    /// loaded: the same bytes on a second call.
    #[test]
    fn the_root_is_created_once_and_reused() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("sub").join(ROOT_DIR_NAME);
        let (first, created) = SimRoot::load_or_create(&dir, now()).unwrap();
        assert!(created);
        let mode = std::fs::metadata(dir.join(ROOT_KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let later = now() + Duration::days(3);
        let (second, created) = SimRoot::load_or_create(&dir, later).unwrap();
        assert!(!created);
        assert_eq!(first.certificate_der(), second.certificate_der());
        assert_eq!(first.public_key(), second.public_key());
        let pem = std::fs::read_to_string(dir.join(ROOT_CERT_FILE)).unwrap();
        assert_eq!(pem, first.certificate_pem());
        assert_eq!(pem_decode(pem.as_bytes()).unwrap(), first.certificate_der());
        // Only the root directory is left in the parent: no temporaries.
        let names: Vec<_> = std::fs::read_dir(dir.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(ROOT_DIR_NAME)]);
    }

    /// Many processes' worth of first uses at once: one root wins, every
    /// caller gets it.
    #[test]
    fn concurrent_first_uses_agree_on_one_root() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join(ROOT_DIR_NAME);
        let roots: Vec<Vec<u8>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..6)
                .map(|_| s.spawn(|| SimRoot::load_or_create(&dir, now()).unwrap().0))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap().certificate_der().to_vec())
                .collect()
        });
        assert!(roots.windows(2).all(|w| w[0] == w[1]));
        let names = std::fs::read_dir(base.path()).unwrap().count();
        assert_eq!(names, 1);
    }

    #[test]
    fn a_readable_key_a_foreign_key_or_a_broken_certificate_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let a = base.path().join("a");
        let b = base.path().join("b");
        SimRoot::load_or_create(&a, now()).unwrap();
        SimRoot::load_or_create(&b, now()).unwrap();
        let key = a.join(ROOT_KEY_FILE);
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            SimRoot::load(&a),
            Err(SimRootError::KeyMode { mode: 0o644, .. })
        ));
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        // b's certificate with a's key.
        std::fs::copy(b.join(ROOT_CERT_FILE), a.join(ROOT_CERT_FILE)).unwrap();
        assert!(matches!(
            SimRoot::load(&a),
            Err(SimRootError::KeyMismatch { .. })
        ));
        std::fs::write(a.join(ROOT_CERT_FILE), "not pem").unwrap();
        assert!(matches!(
            SimRoot::load(&a),
            Err(SimRootError::Invalid { .. })
        ));
        // An existing but empty directory is not silently filled.
        let empty = base.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert!(matches!(
            SimRoot::load_or_create(&empty, now()),
            Err(SimRootError::Io { .. })
        ));
    }

    #[test]
    fn the_root_names_itself_not_a_tee() {
        let base = tempfile::tempdir().unwrap();
        let (root, _) = SimRoot::load_or_create(&base.path().join("r"), now()).unwrap();
        let parts = der::cert_parts(root.certificate_der()).unwrap();
        assert_eq!(parts.subject, root_name(ROOT_COMMON_NAME));
        assert!(root.certificate_der().len() < 1024);
    }

    /// A format root is made on first use of its form, in its own
    /// subdirectory, P-256 and named after the form; the bundle lists the
    /// P-384 root first, then the format roots that exist, and creates the
    /// missing ones only when asked to.
    #[test]
    fn format_roots_are_created_on_first_use_and_bundled() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join(ROOT_DIR_NAME);
        let (pem, roots) = bundle_pem(&dir, false, now()).unwrap();
        assert_eq!(roots.len(), 1);
        assert_eq!(pem, roots[0].certificate_pem());
        let (tdx, created) = SimRoot::load_or_create_form(&dir, SimFormat::Tdx, now()).unwrap();
        assert!(created);
        assert_eq!((tdx.form(), tdx.alg()), (SimFormat::Tdx, KeyAlg::P256));
        assert_eq!(tdx.dir(), dir.join("tdx"));
        let parts = der::cert_parts(tdx.certificate_der()).unwrap();
        assert_eq!(
            parts.subject,
            root_name("kolm simulated TEE TDX root (NOT A TEE)")
        );
        let mode = std::fs::metadata(dir.join("tdx").join(ROOT_KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let (again, created) = SimRoot::load_or_create_form(&dir, SimFormat::Tdx, now()).unwrap();
        assert!(!created);
        assert_eq!(again.certificate_der(), tdx.certificate_der());
        let (pem, roots) = bundle_pem(&dir, false, now()).unwrap();
        let forms: Vec<_> = roots.iter().map(BundledRoot::form).collect();
        assert_eq!(forms, [SimFormat::Nitro, SimFormat::Tdx]);
        assert_eq!(pem.matches("BEGIN CERTIFICATE").count(), 2);
        assert!(pem.starts_with(&roots[0].certificate_pem()));
        let (_, roots) = bundle_pem(&dir, true, now()).unwrap();
        let made: Vec<_> = roots.iter().map(|r| (r.form(), r.created())).collect();
        assert_eq!(
            made,
            [
                (SimFormat::Nitro, false),
                (SimFormat::SevSnp, true),
                (SimFormat::Tdx, false)
            ]
        );
        // The SEV-SNP form's root is its RSA ARK, in the bundle, never
        // an ECDSA format root.
        let ark = SimSnpRoot::load(&dir.join("sev-snp")).unwrap();
        assert_eq!(roots[1].certificate_der(), ark.ark_der());
        assert!(matches!(
            SimRoot::load_or_create_form(&dir, SimFormat::SevSnp, now()),
            Err(SimRootError::NotEcdsaForm { .. })
        ));
        // A format root's directory holding another form's root is refused.
        for f in [ROOT_CERT_FILE, ROOT_KEY_FILE] {
            std::fs::copy(dir.join("tdx").join(f), dir.join("sev-snp").join(f)).unwrap();
        }
        assert!(matches!(
            bundle_pem(&dir, true, now()),
            Err(SimRootError::Invalid { .. })
        ));
    }
}
