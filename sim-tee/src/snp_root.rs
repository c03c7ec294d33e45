//! The SEV-SNP format root of the simulated TEE: a stand-in for AMD's
//! key hierarchy, one per installation, made the first time the `sev-snp`
//! form is used.
//!
//! | role | key | certificate |
//! |---|---|---|
//! | ARK | RSA-[`RSA_BITS`] | self-signed, RSASSA-PSS SHA-384 (as AMD's ARK), CN [`ARK_COMMON_NAME`], CA |
//! | ASK | RSA-[`RSA_BITS`] | signed by the ARK, RSASSA-PSS SHA-384, CN [`ASK_COMMON_NAME`], CA, pathLen 0 |
//! | VCEK | ECDSA P-384 | signed by the ASK, RSASSA-PSS SHA-384, CN `SEV-VCEK`, AMD's VCEK extensions (VCEK spec 57230): structVersion, productName [`SIM_PRODUCT_NAME`], the SPLs of [`SIM_TCB`], hwID = the installation's CHIP_ID |
//!
//! One VCEK per installation: it stands for one chip. The directory
//! (`sev-snp/` inside the sim root directory) holds `root.pem` (the ARK,
//! the form's root as every format root is named), `ask.pem`, `vcek.der`
//! and the keys `key.pk8` (the ARK's), `ask.pk8`, `vcek.pk8` (PKCS#8, mode
//! 0600); it is written whole in a temporary directory, fsynced and renamed
//! into place, as the sim root is
//! ([`super::root::SimRoot::load_or_create`]).
//!
//! ring cannot generate RSA keys, so the `rsa` crate generates these two
//! (nothing else in the enclave uses it); ring signs with them. They are
//! RSA-2048, not RSA-4096 as AMD's: measured on the 2-core build machine
//! with the bignum crates optimised in debug builds, generating the two
//! took 12 to 48 s at 4096 bits and 1 to 2 s at 2048, and every test that
//! makes a fresh installation pays it. The verifier's chain checks take
//! any RSA size; nothing about a sim root is meant to resist an attacker
//! (its keys sit on disk beside the binary).
//!
//! The ARK's subject says NOT A TEE: the verifier trusts it only when the
//! caller names it (`--dangerous-trust-sim-root`), and never for platform
//! `sev-snp`.

use std::path::{Path, PathBuf};

use kolm_format::evidence::SimFormat;

use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P384_SHA384_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _, RSA_PSS_SHA384, RsaKeyPair,
};
use time::{Duration, OffsetDateTime};

use super::der::{self, oid, tag};
use super::root::{self, SIM_ORG_UNIT, SimRootError, install_dir, io_err};
use super::snp::{self, ReportRequest, SIM_PRODUCT_NAME, SIM_TCB};

/// The directory name inside the sim root directory
/// ([`super::root::format_root_dir`]).
pub const SNP_DIR_NAME: &str = "sev-snp";
/// File names in the SNP root directory: the ARK is the form's root, under
/// the names every format root has.
pub const ARK_CERT_FILE: &str = root::ROOT_CERT_FILE;
pub const ARK_KEY_FILE: &str = root::ROOT_KEY_FILE;
pub const ASK_CERT_FILE: &str = "ask.pem";
pub const ASK_KEY_FILE: &str = "ask.pk8";
pub const VCEK_CERT_FILE: &str = "vcek.der";
pub const VCEK_KEY_FILE: &str = "vcek.pk8";

/// The ARK's common name: the SEV-SNP form's kolm sim root name, not
/// AMD's `ARK-<product>`.
pub const ARK_COMMON_NAME: &str = SimFormat::SevSnp.root_common_name();
/// The ASK's common name (AMD's is `SEV-<product>`).
pub use kolm_format::evidence::SIM_SNP_ASK_COMMON_NAME as ASK_COMMON_NAME;
/// The VCEK's common name: AMD's, which verifiers read the leaf kind from.
pub const VCEK_COMMON_NAME: &str = "SEV-VCEK";

/// RSA modulus size of the ARK and ASK (AMD's are RSA-4096; module docs
/// say why these are not).
pub const RSA_BITS: usize = 2048;
/// How long the ARK and ASK are valid (AMD's: 25 years).
pub const CA_VALIDITY: Duration = Duration::days(25 * 365);
/// How long the VCEK is valid (AMD's: 7 years).
pub const VCEK_VALIDITY: Duration = Duration::days(7 * 365);
/// What CHIP_ID is the SHA-512 of, followed by the ARK certificate.
pub const CHIP_ID_LABEL: &str = "kolm simulated SEV-SNP CHIP_ID (NOT A TEE)";

/// Object identifiers of the SNP certificates.
mod snp_oid {
    /// rsaEncryption (RFC 8017 appendix C).
    pub const RSA_ENCRYPTION: &[u64] = &[1, 2, 840, 113549, 1, 1, 1];
    /// id-RSASSA-PSS, id-mgf1 (RFC 8017 appendix C).
    pub const RSASSA_PSS: &[u64] = &[1, 2, 840, 113549, 1, 1, 10];
    pub const MGF1: &[u64] = &[1, 2, 840, 113549, 1, 1, 8];
    /// id-sha384 (RFC 5754 section 2.3).
    pub const SHA384: &[u64] = &[2, 16, 840, 1, 101, 3, 4, 2, 2];
    /// AMD's VCEK extensions (VCEK spec 57230, "VCEK Certificate
    /// Extensions").
    pub const STRUCT_VERSION: &[u64] = &[1, 3, 6, 1, 4, 1, 3704, 1, 1];
    pub const PRODUCT_NAME: &[u64] = &[1, 3, 6, 1, 4, 1, 3704, 1, 2];
    pub const BL_SPL: &[u64] = &[1, 3, 6, 1, 4, 1, 3704, 1, 3, 1];
    pub const TEE_SPL: &[u64] = &[1, 3, 6, 1, 4, 1, 3704, 1, 3, 2];
    pub const SNP_SPL: &[u64] = &[1, 3, 6, 1, 4, 1, 3704, 1, 3, 3];
    pub const SPL_4: &[u64] = &[1, 3, 6, 1, 4, 1, 3704, 1, 3, 4];
    pub const SPL_5: &[u64] = &[1, 3, 6, 1, 4, 1, 3704, 1, 3, 5];
    pub const SPL_6: &[u64] = &[1, 3, 6, 1, 4, 1, 3704, 1, 3, 6];
    pub const SPL_7: &[u64] = &[1, 3, 6, 1, 4, 1, 3704, 1, 3, 7];
    pub const UCODE_SPL: &[u64] = &[1, 3, 6, 1, 4, 1, 3704, 1, 3, 8];
    pub const HWID: &[u64] = &[1, 3, 6, 1, 4, 1, 3704, 1, 4];
}

/// The loaded SNP format root: the chain's certificates and the key that
/// signs reports.
pub struct SimSnpRoot {
    dir: PathBuf,
    ark_der: Vec<u8>,
    ask_der: Vec<u8>,
    vcek_der: Vec<u8>,
    vcek_key: EcdsaKeyPair,
    chip_id: [u8; 64],
}

impl std::fmt::Debug for SimSnpRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys.
        f.debug_struct("SimSnpRoot")
            .field("dir", &self.dir)
            .field("ark_sha256", &hex::encode(sha256(&self.ark_der)))
            .finish_non_exhaustive()
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref());
    out
}

/// The installation's stand-in CHIP_ID: SHA-512 of [`CHIP_ID_LABEL`] and
/// the ARK certificate.
fn chip_id(ark_der: &[u8]) -> [u8; 64] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA512);
    ctx.update(CHIP_ID_LABEL.as_bytes());
    ctx.update(ark_der);
    let mut out = [0u8; 64];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

impl SimSnpRoot {
    /// Loads the SNP root in `dir`, creating it first (atomically) if
    /// `dir` does not exist; `now` dates new certificates. Returns whether
    /// this call created it.
    pub fn load_or_create(
        dir: &Path,
        now: OffsetDateTime,
    ) -> Result<(SimSnpRoot, bool), SimRootError> {
        let created = install_dir(dir, ".kolm-sim-snp.tmp-", |tmp| {
            let files = generate(now)?;
            for (name, bytes, mode) in files.entries() {
                root::write_synced(&tmp.join(name), bytes, mode)?;
            }
            Ok(())
        })?;
        SimSnpRoot::load(dir).map(|r| (r, created))
    }

    /// [`Self::load_or_create`] in the SEV-SNP form's directory of the
    /// installation's root directory `root_dir`, whose P-384 root is made
    /// first if missing (the form's directory lives inside its directory,
    /// which is renamed into place whole).
    pub fn load_or_create_in(
        root_dir: &Path,
        now: OffsetDateTime,
    ) -> Result<(SimSnpRoot, bool), SimRootError> {
        root::SimRoot::load_or_create(root_dir, now)?;
        SimSnpRoot::load_or_create(&root::format_root_dir(root_dir, SimFormat::SevSnp), now)
    }

    /// Loads an existing SNP root: the three certificates, the keys (mode
    /// 0600 at most), each key the public key of its certificate, and the
    /// VCEK's hwID the installation's CHIP_ID.
    pub fn load(dir: &Path) -> Result<SimSnpRoot, SimRootError> {
        let invalid = |file: &str, reason: String| SimRootError::Invalid {
            path: dir.join(file),
            reason,
        };
        let ark_der = root::pem_decode(&root::read_capped(&dir.join(ARK_CERT_FILE))?)
            .map_err(|r| invalid(ARK_CERT_FILE, r.to_string()))?;
        let ask_der = root::pem_decode(&root::read_capped(&dir.join(ASK_CERT_FILE))?)
            .map_err(|r| invalid(ASK_CERT_FILE, r.to_string()))?;
        let vcek_der = root::read_capped(&dir.join(VCEK_CERT_FILE))?;
        let rng = SystemRandom::new();
        for (key_file, cert_file, cert) in [
            (ARK_KEY_FILE, ARK_CERT_FILE, &ark_der),
            (ASK_KEY_FILE, ASK_CERT_FILE, &ask_der),
        ] {
            let key = RsaKeyPair::from_pkcs8(&read_key(&dir.join(key_file))?)
                .map_err(|e| invalid(key_file, format!("not an RSA PKCS#8 key: {e}")))?;
            check_key_matches(dir, key_file, cert_file, cert, key.public_key().as_ref())?;
        }
        let vcek_key = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P384_SHA384_FIXED_SIGNING,
            &read_key(&dir.join(VCEK_KEY_FILE))?,
            &rng,
        )
        .map_err(|e| invalid(VCEK_KEY_FILE, format!("not a P-384 PKCS#8 key: {e}")))?;
        check_key_matches(
            dir,
            VCEK_KEY_FILE,
            VCEK_CERT_FILE,
            &vcek_der,
            vcek_key.public_key().as_ref(),
        )?;
        let chip_id = chip_id(&ark_der);
        let hwid = extension_value(&vcek_der, &der::oid(snp_oid::HWID))
            .map_err(|e| invalid(VCEK_CERT_FILE, e.to_string()))?;
        if hwid != Some(&chip_id[..]) {
            return Err(invalid(
                VCEK_CERT_FILE,
                "its hwID is not this installation's CHIP_ID (derived from ark.pem)".into(),
            ));
        }
        Ok(SimSnpRoot {
            dir: dir.to_path_buf(),
            ark_der,
            ask_der,
            vcek_der,
            vcek_key,
            chip_id,
        })
    }

    /// The directory the root was loaded from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The ARK certificate, DER: the SNP format root a verifier trusts.
    pub fn ark_der(&self) -> &[u8] {
        &self.ark_der
    }

    /// The ASK certificate, DER.
    pub fn ask_der(&self) -> &[u8] {
        &self.ask_der
    }

    /// The VCEK-shaped certificate, DER (`evidence/sim-snp-vcek.der`).
    pub fn vcek_der(&self) -> &[u8] {
        &self.vcek_der
    }

    /// ASK then ARK in PEM, as AMD KDS serves `cert_chain`
    /// (`evidence/sim-snp-ask-ark.pem`).
    pub fn ask_ark_pem(&self) -> String {
        let mut out = root::pem_encode(&self.ask_der);
        out.push_str(&root::pem_encode(&self.ark_der));
        out
    }

    /// The stand-in CHIP_ID (the VCEK's hwID).
    pub fn chip_id(&self) -> &[u8; 64] {
        &self.chip_id
    }

    /// One signed ATTESTATION_REPORT ([`snp`]) with this installation's
    /// CHIP_ID.
    pub fn report(
        &self,
        report_data: &[u8; 64],
        measurement: &[u8; 48],
        report_id: &[u8; 32],
    ) -> Result<Vec<u8>, crate::SimError> {
        snp::report(
            &self.vcek_key,
            &ReportRequest {
                report_data,
                measurement,
                report_id,
                chip_id: &self.chip_id,
            },
        )
    }
}

/// Reads a private key file, refusing one that others may read.
fn read_key(path: &Path) -> Result<Vec<u8>, SimRootError> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(path)
        .map_err(io_err(path))?
        .permissions()
        .mode()
        & 0o777;
    if mode & 0o077 != 0 {
        return Err(SimRootError::KeyMode {
            path: path.to_path_buf(),
            mode,
        });
    }
    root::read_capped(path)
}

fn check_key_matches(
    dir: &Path,
    key_file: &str,
    cert_file: &str,
    cert: &[u8],
    public_key: &[u8],
) -> Result<(), SimRootError> {
    let parts = der::cert_parts(cert).map_err(|e| SimRootError::Invalid {
        path: dir.join(cert_file),
        reason: e.to_string(),
    })?;
    if parts.public_key != public_key {
        return Err(SimRootError::KeyMismatch {
            key: dir.join(key_file),
            cert: dir.join(cert_file),
        });
    }
    Ok(())
}

/// The files of a new SNP root.
struct NewFiles {
    ark_pem: String,
    ark_pk8: Vec<u8>,
    ask_pem: String,
    ask_pk8: Vec<u8>,
    vcek_der: Vec<u8>,
    vcek_pk8: Vec<u8>,
}

impl NewFiles {
    /// `(file name, bytes, mode)`: keys 0600, certificates 0644.
    fn entries(&self) -> [(&'static str, &[u8], u32); 6] {
        [
            (ARK_KEY_FILE, &self.ark_pk8, 0o600),
            (ASK_KEY_FILE, &self.ask_pk8, 0o600),
            (VCEK_KEY_FILE, &self.vcek_pk8, 0o600),
            (ARK_CERT_FILE, self.ark_pem.as_bytes(), 0o644),
            (ASK_CERT_FILE, self.ask_pem.as_bytes(), 0o644),
            (VCEK_CERT_FILE, &self.vcek_der, 0o644),
        ]
    }
}

/// ring's system randomness as the `rand_core` generator the `rsa` crate
/// asks for. `fill_bytes` cannot fail in that trait, so a failure is
/// remembered and the key it produced is thrown away.
struct RingRng {
    rng: SystemRandom,
    failed: bool,
}

impl rsa::rand_core::RngCore for RingRng {
    fn next_u32(&mut self) -> u32 {
        rsa::rand_core::impls::next_u32_via_fill(self)
    }
    fn next_u64(&mut self) -> u64 {
        rsa::rand_core::impls::next_u64_via_fill(self)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        use ring::rand::SecureRandom as _;
        if self.rng.fill(dest).is_err() {
            self.failed = true;
        }
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rsa::rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl rsa::rand_core::CryptoRng for RingRng {}

/// A new RSA key: `(PKCS#8, ring key pair)`.
fn rsa_key() -> Result<(Vec<u8>, RsaKeyPair), SimRootError> {
    use rsa::pkcs8::EncodePrivateKey as _;
    let mut rng = RingRng {
        rng: SystemRandom::new(),
        failed: false,
    };
    let key = rsa::RsaPrivateKey::new(&mut rng, RSA_BITS)
        .map_err(|_| SimRootError::Crypto("RSA key generation failed"))?;
    if rng.failed {
        return Err(SimRootError::Crypto("no randomness for RSA key generation"));
    }
    let pkcs8 = key
        .to_pkcs8_der()
        .map_err(|_| SimRootError::Crypto("RSA key does not encode as PKCS#8"))?;
    let pair = RsaKeyPair::from_pkcs8(pkcs8.as_bytes())
        .map_err(|_| SimRootError::Crypto("generated RSA key does not load"))?;
    Ok((pkcs8.as_bytes().to_vec(), pair))
}

/// `O=kolm, OU=simulated TEE, not hardware, CN=cn`.
fn name(cn: &str) -> Vec<u8> {
    der::name(&[
        (oid::ORGANIZATION, "kolm"),
        (oid::ORGANIZATIONAL_UNIT, SIM_ORG_UNIT),
        (oid::COMMON_NAME, cn),
    ])
}

fn null() -> Vec<u8> {
    der::tlv(0x05, &[])
}

/// RSASSA-PSS with SHA-384, MGF1 SHA-384, a 48-byte salt and trailer
/// field 1, spelled as AMD spells it (NULL hash parameters, the trailer
/// field written out).
fn pss_sha384() -> Vec<u8> {
    let sha384 = der::sequence(&[&der::oid(snp_oid::SHA384), &null()]);
    let params = der::sequence(&[
        &der::constructed(tag::CONTEXT_0, &[&sha384]),
        &der::constructed(
            0xa1,
            &[&der::sequence(&[&der::oid(snp_oid::MGF1), &sha384])],
        ),
        &der::constructed(0xa2, &[&der::unsigned_integer(&[48])]),
        &der::constructed(tag::CONTEXT_3, &[&der::unsigned_integer(&[1])]),
    ]);
    der::sequence(&[&der::oid(snp_oid::RSASSA_PSS), &params])
}

/// SubjectPublicKeyInfo of an RSA key (`public_key`: RSAPublicKey DER).
fn rsa_spki(public_key: &[u8]) -> Vec<u8> {
    der::sequence(&[
        &der::sequence(&[&der::oid(snp_oid::RSA_ENCRYPTION), &null()]),
        &der::bit_string(public_key),
    ])
}

/// SubjectPublicKeyInfo of a P-384 key (an uncompressed point).
fn p384_spki(point: &[u8]) -> Vec<u8> {
    der::sequence(&[
        &der::sequence(&[&der::oid(oid::EC_PUBLIC_KEY), &der::oid(oid::SECP384R1)]),
        &der::bit_string(point),
    ])
}

/// What differs between the three certificates.
struct Tbs<'a> {
    issuer: &'a [u8],
    subject: &'a [u8],
    not_before: OffsetDateTime,
    validity: Duration,
    spki: &'a [u8],
    extensions: &'a [Vec<u8>],
}

fn tbs_certificate(t: &Tbs<'_>) -> Result<Vec<u8>, SimRootError> {
    let version = der::constructed(tag::CONTEXT_0, &[&der::unsigned_integer(&[2])]);
    let validity = der::sequence(&[
        &der::time(t.not_before),
        &der::time(t.not_before.saturating_add(t.validity)),
    ]);
    let ext_parts: Vec<&[u8]> = t.extensions.iter().map(Vec::as_slice).collect();
    let extensions = der::constructed(tag::CONTEXT_3, &[&der::sequence(&ext_parts)]);
    Ok(der::sequence(&[
        &version,
        &der::unsigned_integer(&root::random_serial()?),
        &pss_sha384(),
        t.issuer,
        &validity,
        t.subject,
        t.spki,
        &extensions,
    ]))
}

/// Signs `tbs` with `signer` (RSASSA-PSS SHA-384, salt 48) into a
/// Certificate.
fn sign_certificate(tbs: &[u8], signer: &RsaKeyPair) -> Result<Vec<u8>, SimRootError> {
    let mut sig = vec![0u8; signer.public().modulus_len()];
    signer
        .sign(&RSA_PSS_SHA384, &SystemRandom::new(), tbs, &mut sig)
        .map_err(|_| SimRootError::Crypto("RSASSA-PSS signing failed"))?;
    Ok(der::sequence(&[tbs, &pss_sha384(), &der::bit_string(&sig)]))
}

/// The CA extensions: basicConstraints (critical; pathLen 0 for the ASK),
/// keyUsage (critical), subject and authority key identifiers.
fn ca_extensions(public_key: &[u8], issuer_key: Option<&[u8]>) -> Vec<Vec<u8>> {
    let (basic, usage) = match issuer_key {
        None => (
            der::sequence(&[&der::boolean_true()]),
            der::key_usage_bits(&[5, 6]),
        ),
        Some(_) => (
            der::sequence(&[&der::boolean_true(), &der::unsigned_integer(&[0])]),
            der::key_usage_bits(&[5]),
        ),
    };
    let mut exts = vec![
        der::extension(
            oid::SUBJECT_KEY_IDENTIFIER,
            false,
            &der::octet_string(&root::key_id(public_key)),
        ),
        der::extension(oid::BASIC_CONSTRAINTS, true, &basic),
        der::extension(oid::KEY_USAGE, true, &usage),
    ];
    if let Some(issuer) = issuer_key {
        let value = der::sequence(&[&der::tlv(tag::CONTEXT_0_PRIMITIVE, &root::key_id(issuer))]);
        exts.push(der::extension(oid::AUTHORITY_KEY_IDENTIFIER, false, &value));
    }
    exts
}

/// AMD's VCEK extensions, in the order AMD KDS writes them: structVersion
/// 0, productName (IA5String), the SPLs (INTEGER; 4 to 7 reserved, 0),
/// hwID (the 64 raw CHIP_ID bytes).
fn vcek_extensions(chip_id: &[u8; 64]) -> Vec<Vec<u8>> {
    let int = |v: u8| der::unsigned_integer(&[v]);
    let ia5 = der::tlv(0x16, SIM_PRODUCT_NAME.as_bytes());
    [
        (snp_oid::STRUCT_VERSION, int(0)),
        (snp_oid::PRODUCT_NAME, ia5),
        (snp_oid::BL_SPL, int(SIM_TCB.bootloader)),
        (snp_oid::TEE_SPL, int(SIM_TCB.tee)),
        (snp_oid::SPL_4, int(0)),
        (snp_oid::SPL_5, int(0)),
        (snp_oid::SPL_6, int(0)),
        (snp_oid::SPL_7, int(0)),
        (snp_oid::SNP_SPL, int(SIM_TCB.snp)),
        (snp_oid::UCODE_SPL, int(SIM_TCB.microcode)),
        (snp_oid::HWID, chip_id.to_vec()),
    ]
    .iter()
    .map(|(id, value)| der::extension(id, false, value))
    .collect()
}

/// A whole new SNP root, dated `now`.
fn generate(now: OffsetDateTime) -> Result<NewFiles, SimRootError> {
    let not_before = now.replace_nanosecond(0).unwrap_or(now);
    let (ark_pk8, ark) = rsa_key()?;
    let (ask_pk8, ask) = rsa_key()?;
    let ark_public = ark.public_key().as_ref();
    let ask_public = ask.public_key().as_ref();
    let ark_name = name(ARK_COMMON_NAME);
    let ask_name = name(ASK_COMMON_NAME);

    let ark_der = sign_certificate(
        &tbs_certificate(&Tbs {
            issuer: &ark_name,
            subject: &ark_name,
            not_before,
            validity: CA_VALIDITY,
            spki: &rsa_spki(ark_public),
            extensions: &ca_extensions(ark_public, None),
        })?,
        &ark,
    )?;
    let ask_der = sign_certificate(
        &tbs_certificate(&Tbs {
            issuer: &ark_name,
            subject: &ask_name,
            not_before,
            validity: CA_VALIDITY,
            spki: &rsa_spki(ask_public),
            extensions: &ca_extensions(ask_public, Some(ark_public)),
        })?,
        &ark,
    )?;

    let rng = SystemRandom::new();
    let vcek_pk8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P384_SHA384_FIXED_SIGNING, &rng)
        .map_err(|_| SimRootError::Crypto("VCEK key generation failed"))?;
    let vcek = EcdsaKeyPair::from_pkcs8(&ECDSA_P384_SHA384_FIXED_SIGNING, vcek_pk8.as_ref(), &rng)
        .map_err(|_| SimRootError::Crypto("VCEK key does not load"))?;
    let vcek_der = sign_certificate(
        &tbs_certificate(&Tbs {
            issuer: &ask_name,
            subject: &name(VCEK_COMMON_NAME),
            not_before,
            validity: VCEK_VALIDITY,
            spki: &p384_spki(vcek.public_key().as_ref()),
            extensions: &vcek_extensions(&chip_id(&ark_der)),
        })?,
        &ask,
    )?;
    Ok(NewFiles {
        ark_pem: root::pem_encode(&ark_der),
        ark_pk8,
        ask_pem: root::pem_encode(&ask_der),
        ask_pk8,
        vcek_der,
        vcek_pk8: vcek_pk8.as_ref().to_vec(),
    })
}

/// The extnValue content of the extension `id_der` (an encoded OID) in a
/// certificate this module wrote; `None` if it has no such extension.
fn extension_value<'a>(cert: &'a [u8], id_der: &[u8]) -> Result<Option<&'a [u8]>, der::DerError> {
    let outer = der::expect_tlv(cert, tag::SEQUENCE, "Certificate is not a SEQUENCE")?;
    let tbs = der::expect_tlv(outer.content, tag::SEQUENCE, "TBSCertificate missing")?;
    let mut r = tbs.content;
    // version, serialNumber, signature, issuer, validity, subject,
    // subjectPublicKeyInfo: skipped.
    for _ in 0..7 {
        r = der::read_tlv(r)?.rest;
    }
    let exts = der::expect_tlv(r, tag::CONTEXT_3, "extensions [3] missing")?;
    let list = der::expect_tlv(exts.content, tag::SEQUENCE, "extensions not a SEQUENCE")?;
    let mut rest = list.content;
    while !rest.is_empty() {
        let ext = der::expect_tlv(rest, tag::SEQUENCE, "Extension not a SEQUENCE")?;
        rest = ext.rest;
        let id = der::expect_tlv(ext.content, tag::OID, "extnID missing")?;
        if id.whole != id_der {
            continue;
        }
        // An optional critical BOOLEAN, then the OCTET STRING.
        let mut after = id.rest;
        if der::read_tlv(after)?.tag == tag::BOOLEAN {
            after = der::read_tlv(after)?.rest;
        }
        let value = der::expect_tlv(after, tag::OCTET_STRING, "extnValue missing")?;
        return Ok(Some(value.content));
    }
    Ok(None)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_767_225_600).unwrap()
    }

    /// One root per test binary: RSA generation is the slow part.
    fn shared() -> &'static (tempfile::TempDir, PathBuf) {
        static ROOT: std::sync::OnceLock<(tempfile::TempDir, PathBuf)> = std::sync::OnceLock::new();
        ROOT.get_or_init(|| {
            let base = tempfile::tempdir().unwrap();
            let dir = base.path().join(SNP_DIR_NAME);
            let (_, created) = SimSnpRoot::load_or_create(&dir, now()).unwrap();
            assert!(created);
            (base, dir)
        })
    }

    /// Created once (keys 0600, nothing left over), then loaded: the same
    /// ARK, ASK and VCEK on every later call.
    #[test]
    fn the_snp_root_is_created_once_and_reused() {
        let (base, dir) = shared();
        for file in [ARK_KEY_FILE, ASK_KEY_FILE, VCEK_KEY_FILE] {
            let mode = std::fs::metadata(dir.join(file))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{file}");
        }
        let first = SimSnpRoot::load(dir).unwrap();
        let (second, created) = SimSnpRoot::load_or_create(dir, now() + Duration::days(1)).unwrap();
        assert!(!created);
        assert_eq!(first.ark_der(), second.ark_der());
        assert_eq!(first.ask_der(), second.ask_der());
        assert_eq!(first.vcek_der(), second.vcek_der());
        assert_eq!(first.chip_id(), second.chip_id());
        let names: Vec<_> = std::fs::read_dir(base.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(SNP_DIR_NAME)]);
        assert_eq!(
            first.ask_ark_pem(),
            std::fs::read_to_string(dir.join(ASK_CERT_FILE)).unwrap()
                + &std::fs::read_to_string(dir.join(ARK_CERT_FILE)).unwrap()
        );
    }

    /// The VCEK carries AMD's extensions with the stand-in TCB, the
    /// product name and the installation's CHIP_ID as hwID, and the RSA
    /// certificates are RSASSA-PSS SHA-384 over RSA-2048 keys.
    #[test]
    fn the_vcek_has_amds_extensions() {
        let r = SimSnpRoot::load(&shared().1).unwrap();
        let ext = |id: &[u64]| {
            extension_value(r.vcek_der(), &der::oid(id))
                .unwrap()
                .unwrap()
                .to_vec()
        };
        assert_eq!(ext(snp_oid::STRUCT_VERSION), [2, 1, 0]);
        assert_eq!(ext(snp_oid::PRODUCT_NAME), b"\x16\x05Genoa");
        assert_eq!(ext(snp_oid::BL_SPL), [2, 1, SIM_TCB.bootloader]);
        assert_eq!(ext(snp_oid::TEE_SPL), [2, 1, SIM_TCB.tee]);
        assert_eq!(ext(snp_oid::SNP_SPL), [2, 1, SIM_TCB.snp]);
        assert_eq!(ext(snp_oid::UCODE_SPL), [2, 1, SIM_TCB.microcode]);
        for id in [
            snp_oid::SPL_4,
            snp_oid::SPL_5,
            snp_oid::SPL_6,
            snp_oid::SPL_7,
        ] {
            assert_eq!(ext(id), [2, 1, 0]);
        }
        assert_eq!(ext(snp_oid::HWID), r.chip_id().to_vec());
        assert_eq!(r.chip_id(), &chip_id(r.ark_der()));
        let parts = der::cert_parts(r.vcek_der()).unwrap();
        assert_eq!(parts.subject, name(VCEK_COMMON_NAME));
        assert_eq!(parts.public_key.len(), 97, "an uncompressed P-384 point");
        assert_eq!(
            extension_value(r.vcek_der(), &der::oid(oid::KEY_USAGE)).unwrap(),
            None
        );
        // RSA-2048 moduli: a 2048-bit key's RSAPublicKey (modulus with its
        // sign byte, exponent 65537) is 270 bytes.
        for cert in [r.ark_der(), r.ask_der()] {
            assert_eq!(RSA_BITS, 2048);
            assert_eq!(der::cert_parts(cert).unwrap().public_key.len(), 270);
        }
        // Each certificate names RSASSA-PSS SHA-384 (inside and outside
        // the TBS part).
        let pss = pss_sha384();
        for cert in [r.ark_der(), r.ask_der(), r.vcek_der()] {
            let count = cert.windows(pss.len()).filter(|w| *w == pss).count();
            assert_eq!(count, 2);
        }
    }

    /// The report it signs carries its CHIP_ID, and verifies with the
    /// VCEK's key.
    #[test]
    fn reports_carry_the_chip_id_and_verify_with_the_vcek() {
        use ring::signature::{ECDSA_P384_SHA384_FIXED, UnparsedPublicKey};
        let r = SimSnpRoot::load(&shared().1).unwrap();
        let report = r.report(&[1; 64], &[2; 48], &[3; 32]).unwrap();
        assert_eq!(&report[0x1A0..0x1E0], r.chip_id());
        let mut fixed = Vec::new();
        for at in [0x2A0, 0x2E8] {
            fixed.extend(report[at..at + 48].iter().rev());
        }
        let point = der::cert_parts(r.vcek_der()).unwrap().public_key;
        UnparsedPublicKey::new(&ECDSA_P384_SHA384_FIXED, point)
            .verify(&report[..0x2A0], &fixed)
            .unwrap();
    }

    /// A readable key, a key of another certificate or a VCEK whose hwID
    /// is not the CHIP_ID is refused.
    #[test]
    fn a_tampered_snp_root_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let copy = base.path().join("copy");
        std::fs::create_dir(&copy).unwrap();
        for e in std::fs::read_dir(&shared().1).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
        }
        SimSnpRoot::load(&copy).unwrap();
        let key = copy.join(ASK_KEY_FILE);
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(matches!(
            SimSnpRoot::load(&copy),
            Err(SimRootError::KeyMode { mode: 0o640, .. })
        ));
        // The ARK's key in the ASK's place.
        std::fs::copy(copy.join(ARK_KEY_FILE), &key).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            SimSnpRoot::load(&copy),
            Err(SimRootError::KeyMismatch { .. })
        ));
        std::fs::copy(shared().1.join(ASK_KEY_FILE), &key).unwrap();
        SimSnpRoot::load(&copy).unwrap();
        // An RSA key where the P-384 VCEK key belongs.
        std::fs::copy(copy.join(ARK_KEY_FILE), copy.join(VCEK_KEY_FILE)).unwrap();
        assert!(matches!(
            SimSnpRoot::load(&copy),
            Err(SimRootError::Invalid { .. })
        ));
    }

    /// The directory is made only when asked for: an existing one is
    /// loaded and never written into.
    #[test]
    fn an_existing_directory_is_not_filled() {
        let base = tempfile::tempdir().unwrap();
        let empty = base.path().join(SNP_DIR_NAME);
        std::fs::create_dir(&empty).unwrap();
        assert!(matches!(
            SimSnpRoot::load_or_create(&empty, now()),
            Err(SimRootError::Io { .. })
        ));
        assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
    }

    /// The provider's SEV-SNP form: its root is made on the form's first
    /// use only (a Nitro-form provider makes none), a second provider
    /// reuses the same ARK, ASK and VCEK, and it seals the report as the
    /// attestation with the VCEK and the ASK/ARK as collateral.
    #[test]
    fn the_sev_snp_form_makes_its_root_lazily_and_reuses_it() {
        use crate::{SimFormat, SimTee};
        use kolm_format::evidence::{
            EvidenceRole, SIM_SNP_CHAIN_PATH, SIM_SNP_REPORT_PATH, SIM_SNP_VCEK_PATH,
        };
        let base = tempfile::tempdir().unwrap();
        let exe = base.path().join("kolm-enclave");
        std::fs::write(&exe, b"binary").unwrap();
        let root_dir = base.path().join("root");
        SimTee::open(&root_dir, &exe, SimFormat::Nitro).unwrap();
        assert!(!root_dir.join(SNP_DIR_NAME).exists());

        let p = SimTee::open(&root_dir, &exe, SimFormat::SevSnp).unwrap();
        assert_eq!(p.format(), SimFormat::SevSnp);
        let snp = p.snp_root().unwrap();
        assert_eq!(snp.dir(), root_dir.join(SNP_DIR_NAME));
        assert_eq!(p.form_root_pem(), root::pem_encode(snp.ark_der()));
        let again = SimTee::open(&root_dir, &exe, SimFormat::SevSnp).unwrap();
        let snp2 = again.snp_root().unwrap();
        assert_eq!(
            (snp.ark_der(), snp.ask_der(), snp.vcek_der()),
            (snp2.ark_der(), snp2.ask_der(), snp2.vcek_der())
        );

        let measurement = ring::digest::digest(&ring::digest::SHA384, b"binary");
        assert_eq!(p.launch_measurement(), measurement.as_ref());
        let bundle = p.evidence(&[9; 64]).unwrap();
        let [(path, report, role)] = &bundle.files[..] else {
            panic!("one file expected")
        };
        assert_eq!(
            (path.as_str(), *role, report.len()),
            (
                SIM_SNP_REPORT_PATH,
                EvidenceRole::Attestation,
                kolm_tee_layouts::snp::report::SIZE
            )
        );
        assert_eq!(&report[0x50..0x90], &[9; 64]);
        assert_eq!(&report[0x90..0xC0], measurement.as_ref());
        let collateral = p.collateral_bundle().unwrap();
        let paths: Vec<&str> = collateral.files.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, [SIM_SNP_CHAIN_PATH, SIM_SNP_VCEK_PATH]);
        assert_eq!(collateral.files[1].1, snp.vcek_der());
        assert!(
            p.document(&crate::DocumentRequest {
                user_data: &[],
                nonce: None,
                public_key: None,
                at: now(),
            })
            .is_err()
        );
    }

    #[test]
    fn extension_reader_refuses_what_it_cannot_read() {
        assert!(extension_value(&[0x30, 0x00], &der::oid(snp_oid::HWID)).is_err());
        assert!(extension_value(&[0x04, 0x00], &der::oid(snp_oid::HWID)).is_err());
    }
}
