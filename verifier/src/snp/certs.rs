//! AMD SEV-SNP certificates: VCEK/VLEK leaves, ASK/ASVK intermediates and
//! ARK roots (AMD publications 57230 "VCEK Certificate and KDS Interface
//! Specification" and 58369 "VLEK Certificate").
//!
//! The RSASSA-PSS signature of a certificate by its issuer is checked by the
//! `sev` crate (`sev::certs::snp::Verifiable` for a pair of
//! `sev::certs::snp::Certificate`, RustCrypto `rsa` underneath); this module
//! adds what `sev` leaves out: strict DER/PEM input, the signature
//! algorithm's parameters, issuer/subject names, CA basic constraints,
//! validity windows, the key type of the leaf, and AMD's extensions.

use std::collections::BTreeSet;
use std::sync::Mutex;

use const_oid::ObjectIdentifier;
use const_oid::db::{rfc4519, rfc5912};
use der::{Decode, Encode};
use rsa::pkcs1::{RsaPssParams, TrailerField};
use sev::certs::snp::Verifiable;
use time::OffsetDateTime;
use x509_cert::Certificate;
use x509_cert::ext::pkix::BasicConstraints;
use x509_cert::name::Name;

use super::error::{CertRole, SnpError};
use super::report::{RawTcb, TcbLayout, TcbVersion};
use super::roots::sha256;

/// Largest certificate input accepted (AMD certificates are under 2 KiB).
const MAX_CERT_INPUT: usize = 16 * 1024;
/// Largest chain input accepted.
const MAX_CHAIN_INPUT: usize = 64 * 1024;
/// Most PEM blocks read from one input.
const MAX_PEM_BLOCKS: usize = 4;

const PEM_BEGIN: &str = "-----BEGIN ";
const PEM_END: &str = "-----END ";

/// AMD's extensions (VCEK spec 57230, table "VCEK Certificate Extensions").
pub mod oid {
    use const_oid::ObjectIdentifier;
    /// Product name, IA5String, e.g. `Milan-B0`.
    pub const PRODUCT_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.2");
    /// Boot loader SPL, INTEGER.
    pub const BL_SPL: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.3.1");
    /// TEE SPL, INTEGER.
    pub const TEE_SPL: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.3.2");
    /// SNP SPL, INTEGER.
    pub const SNP_SPL: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.3.3");
    /// Microcode SPL, INTEGER.
    pub const UCODE_SPL: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.3.8");
    /// FMC SPL, INTEGER (Turin and later).
    pub const FMC_SPL: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.3.9");
    /// Hardware ID (VCEK only): the raw CHIP_ID bytes (64 bytes; 8 on Turin).
    pub const HWID: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.4");
    /// Cloud service provider name (VLEK only).
    pub const CSP_ID: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.5");
}

/// An SPL extension: its OID, the OID's spelling, the component name.
type Spl = (ObjectIdentifier, &'static str, &'static str);
const SPL_BL: Spl = (oid::BL_SPL, "1.3.6.1.4.1.3704.1.3.1", "bl");
const SPL_TEE: Spl = (oid::TEE_SPL, "1.3.6.1.4.1.3704.1.3.2", "tee");
const SPL_SNP: Spl = (oid::SNP_SPL, "1.3.6.1.4.1.3704.1.3.3", "snp");
const SPL_UCODE: Spl = (oid::UCODE_SPL, "1.3.6.1.4.1.3704.1.3.8", "ucode");
const SPL_FMC: Spl = (oid::FMC_SPL, "1.3.6.1.4.1.3704.1.3.9", "fmc");

/// VCEK or VLEK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum LeafKind {
    /// Versioned Chip Endorsement Key: per chip and TCB, signed by the ASK.
    Vcek,
    /// Versioned Loaded Endorsement Key: per cloud provider, signed by the ASVK.
    Vlek,
}

impl LeafKind {
    /// `VCEK` or `VLEK`.
    pub fn name(self) -> &'static str {
        match self {
            LeafKind::Vcek => "VCEK",
            LeafKind::Vlek => "VLEK",
        }
    }
}

/// A decoded X.509 certificate with its DER and SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnpCert {
    der: Vec<u8>,
    cert: Certificate,
    sha256: [u8; 32],
}

impl SnpCert {
    /// Decodes one DER certificate; trailing bytes are an error.
    pub fn from_der(der: &[u8], role: CertRole) -> Result<SnpCert, SnpError> {
        let cert = Certificate::from_der(der).map_err(|e| SnpError::CertDecode {
            role,
            reason: e.to_string(),
        })?;
        Ok(SnpCert {
            der: der.to_vec(),
            cert,
            sha256: sha256(der),
        })
    }

    /// The DER bytes.
    pub fn der(&self) -> &[u8] {
        &self.der
    }
    /// SHA-256 of the DER.
    pub fn sha256(&self) -> [u8; 32] {
        self.sha256
    }
    /// The decoded certificate.
    pub fn x509(&self) -> &Certificate {
        &self.cert
    }
    /// Subject as an RFC 4514 string.
    pub fn subject(&self) -> String {
        self.cert.tbs_certificate.subject.to_string()
    }
    /// Issuer as an RFC 4514 string.
    pub fn issuer(&self) -> String {
        self.cert.tbs_certificate.issuer.to_string()
    }
    /// The subject's single common name, if it has exactly one.
    pub fn common_name(&self) -> Option<String> {
        common_name(&self.cert.tbs_certificate.subject)
    }
    /// The issuer's single common name, if it has exactly one.
    pub fn issuer_common_name(&self) -> Option<String> {
        common_name(&self.cert.tbs_certificate.issuer)
    }
    /// Whether subject and issuer are the same name.
    pub fn is_self_issued(&self) -> bool {
        self.cert.tbs_certificate.subject == self.cert.tbs_certificate.issuer
    }
    /// notBefore, seconds since the Unix epoch.
    pub fn not_before(&self) -> i64 {
        unix_secs(self.cert.tbs_certificate.validity.not_before)
    }
    /// notAfter, seconds since the Unix epoch.
    pub fn not_after(&self) -> i64 {
        unix_secs(self.cert.tbs_certificate.validity.not_after)
    }

    /// The value of the extension `id`; `Ok(None)` if absent, an error if
    /// present more than once.
    fn extension(&self, id: ObjectIdentifier) -> Result<Option<&[u8]>, DuplicateExtension> {
        let mut found = None;
        for ext in self.cert.tbs_certificate.extensions.iter().flatten() {
            if ext.extn_id == id {
                if found.is_some() {
                    return Err(DuplicateExtension);
                }
                found = Some(ext.extn_value.as_bytes());
            }
        }
        Ok(found)
    }

    /// As the `sev` crate's certificate type.
    fn to_sev(&self) -> sev::certs::snp::Certificate {
        sev::certs::snp::Certificate::from(self.cert.clone())
    }
}

/// An extension that a certificate carries more than once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("appears more than once")]
pub(crate) struct DuplicateExtension;

/// Why PEM text is not a sequence of `CERTIFICATE` blocks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum PemError {
    #[error("PEM text is not UTF-8")]
    NotUtf8,
    #[error("text outside PEM blocks")]
    TextOutside,
    #[error("more than {max} PEM blocks")]
    TooMany { max: usize },
    #[error("unterminated PEM block")]
    Unterminated,
    #[error("unterminated PEM END line")]
    UnterminatedEndLine,
    #[error("{error}")]
    Decode { error: String },
    #[error("PEM label {label:?} is not CERTIFICATE")]
    Label { label: String },
}

fn unix_secs(t: x509_cert::time::Time) -> i64 {
    i64::try_from(t.to_unix_duration().as_secs()).unwrap_or(i64::MAX)
}

fn common_name(name: &Name) -> Option<String> {
    let mut cns = name
        .0
        .iter()
        .flat_map(|rdn| rdn.0.iter())
        .filter(|atv| atv.oid == rfc4519::CN);
    let atv = cns.next()?;
    if cns.next().is_some() {
        return None;
    }
    use der::{Tag, Tagged};
    match atv.value.tag() {
        Tag::Utf8String | Tag::PrintableString | Tag::Ia5String => {
            String::from_utf8(atv.value.value().to_vec()).ok()
        }
        _ => None,
    }
}

/// Splits PEM text into DER documents labelled `CERTIFICATE`. Only
/// whitespace may surround the blocks.
fn pem_certificates(bytes: &[u8], max: usize) -> Result<Vec<Vec<u8>>, PemError> {
    let text = std::str::from_utf8(bytes).map_err(|_| PemError::NotUtf8)?;
    let mut rest = text;
    let mut out = Vec::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            return Ok(out);
        }
        if !rest.starts_with(PEM_BEGIN) {
            return Err(PemError::TextOutside);
        }
        if out.len() >= max {
            return Err(PemError::TooMany { max });
        }
        let end = rest.find(PEM_END).ok_or(PemError::Unterminated)?;
        // The END line runs to the next "-----" after "-----END ".
        let after_end = end.saturating_add(PEM_END.len());
        let tail = rest.get(after_end..).unwrap_or_default();
        let close = tail.find("-----").ok_or(PemError::UnterminatedEndLine)?;
        let block_end = after_end.saturating_add(close).saturating_add(5);
        let block = rest.get(..block_end).unwrap_or_default();
        let (label, der) =
            der::pem::decode_vec(block.as_bytes()).map_err(|e| PemError::Decode {
                error: e.to_string(),
            })?;
        if label != "CERTIFICATE" {
            return Err(PemError::Label {
                label: label.to_string(),
            });
        }
        out.push(der);
        rest = rest.get(block_end..).unwrap_or_default();
    }
}

fn looks_like_pem(bytes: &[u8]) -> bool {
    bytes.trim_ascii_start().starts_with(PEM_BEGIN.as_bytes())
}

/// Decodes one certificate given as DER or as a single PEM block.
pub fn parse_cert(bytes: &[u8], role: CertRole) -> Result<SnpCert, SnpError> {
    if bytes.len() > MAX_CERT_INPUT {
        return Err(SnpError::CertDecode {
            role,
            reason: format!("input is {} bytes, more than {MAX_CERT_INPUT}", bytes.len()),
        });
    }
    if looks_like_pem(bytes) {
        let mut blocks = pem_certificates(bytes, 1).map_err(|e| SnpError::CertDecode {
            role,
            reason: e.to_string(),
        })?;
        match (blocks.pop(), blocks.is_empty()) {
            (Some(der), true) => SnpCert::from_der(&der, role),
            _ => Err(SnpError::CertDecode {
                role,
                reason: "expected exactly one PEM certificate".into(),
            }),
        }
    } else {
        SnpCert::from_der(bytes, role)
    }
}

/// An AMD CA pair: the ARK and the ASK (or ASVK) it signs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaPair {
    /// ASK (VCEK chains) or ASVK (VLEK chains).
    pub ask: SnpCert,
    /// ARK.
    pub ark: SnpCert,
}

/// Decodes a PEM bundle of exactly two certificates, the ASK/ASVK and the
/// self-issued ARK, in either order (AMD KDS serves ASK first).
pub fn parse_chain(bytes: &[u8]) -> Result<CaPair, SnpError> {
    if bytes.len() > MAX_CHAIN_INPUT {
        return Err(SnpError::ChainShape {
            reason: format!(
                "input is {} bytes, more than {MAX_CHAIN_INPUT}",
                bytes.len()
            ),
        });
    }
    if !looks_like_pem(bytes) {
        return Err(SnpError::ChainShape {
            reason: "input is not PEM".into(),
        });
    }
    let blocks = pem_certificates(bytes, MAX_PEM_BLOCKS).map_err(|e| SnpError::ChainShape {
        reason: e.to_string(),
    })?;
    let [first, second] = <[Vec<u8>; 2]>::try_from(blocks).map_err(|b| SnpError::ChainShape {
        reason: format!("found {} certificates", b.len()),
    })?;
    let decode = |der: &[u8], n: usize| {
        SnpCert::from_der(der, CertRole::Ask).map_err(|e| SnpError::ChainShape {
            reason: format!("certificate {n} of 2 does not decode: {e}"),
        })
    };
    let first = decode(&first, 1)?;
    let second = decode(&second, 2)?;
    match (first.is_self_issued(), second.is_self_issued()) {
        (false, true) => Ok(CaPair {
            ask: first,
            ark: second,
        }),
        (true, false) => Ok(CaPair {
            ask: second,
            ark: first,
        }),
        (a, b) => Err(SnpError::ChainShape {
            reason: format!(
                "{} self-issued certificates",
                usize::from(a).saturating_add(usize::from(b))
            ),
        }),
    }
}

/// A VCEK or VLEK with its ECDSA P-384 key.
#[derive(Debug, Clone)]
pub struct Leaf {
    cert: SnpCert,
    kind: LeafKind,
    key: p384::ecdsa::VerifyingKey,
}

/// Decodes a VCEK/VLEK (DER or PEM): the subject CN must be `SEV-VCEK` or
/// `SEV-VLEK` and the key an ECDSA P-384 point.
pub fn parse_leaf(bytes: &[u8]) -> Result<Leaf, SnpError> {
    let cert = parse_cert(bytes, CertRole::Leaf)?;
    let kind = match cert.common_name().as_deref() {
        Some("SEV-VCEK") => LeafKind::Vcek,
        Some("SEV-VLEK") => LeafKind::Vlek,
        _ => {
            return Err(SnpError::LeafKindUnknown {
                cn: cert.common_name(),
            });
        }
    };
    let spki = &cert.cert.tbs_certificate.subject_public_key_info;
    let key_err = |reason: String| SnpError::LeafKey { reason };
    if spki.algorithm.oid != rfc5912::ID_EC_PUBLIC_KEY {
        return Err(key_err(format!(
            "algorithm {} is not id-ecPublicKey",
            spki.algorithm.oid
        )));
    }
    let curve = spki
        .algorithm
        .parameters
        .as_ref()
        .ok_or_else(|| key_err("no curve parameter".into()))?
        .decode_as::<ObjectIdentifier>()
        .map_err(|e| key_err(format!("curve parameter: {e}")))?;
    if curve != rfc5912::SECP_384_R_1 {
        return Err(key_err(format!("curve {curve} is not secp384r1")));
    }
    let point = spki
        .subject_public_key
        .as_bytes()
        .ok_or_else(|| key_err("public key BIT STRING has unused bits".into()))?;
    let key = p384::ecdsa::VerifyingKey::from_sec1_bytes(point)
        .map_err(|e| key_err(format!("not a P-384 point: {e}")))?;
    Ok(Leaf { cert, kind, key })
}

impl Leaf {
    /// The certificate.
    pub fn cert(&self) -> &SnpCert {
        &self.cert
    }
    /// VCEK or VLEK.
    pub fn kind(&self) -> LeafKind {
        self.kind
    }
    /// The report-signing key.
    pub fn key(&self) -> &p384::ecdsa::VerifyingKey {
        &self.key
    }

    /// The productName extension (e.g. `Milan-B0`, `Genoa`), if present
    /// and an IA5String.
    pub fn product_name(&self) -> Option<String> {
        let raw = self.cert.extension(oid::PRODUCT_NAME).ok()??;
        der::asn1::Ia5StringRef::from_der(raw)
            .ok()
            .map(|s| s.as_str().to_owned())
    }

    /// The product named by productName, up to its first `-` (`Milan-B0`
    /// is Milan).
    pub fn product_from_name(&self) -> Option<super::roots::Product> {
        let name = self.product_name()?;
        let base = name.split('-').next().unwrap_or_default();
        super::roots::Product::from_name(base)
    }

    /// The product named by the issuer CN: `SEV-<p>` (VCEK) or
    /// `SEV-VLEK-<p>` (VLEK).
    pub fn product_from_issuer(&self) -> Option<super::roots::Product> {
        let cn = self.cert.issuer_common_name()?;
        let rest = match self.kind {
            LeafKind::Vcek => cn.strip_prefix("SEV-")?,
            LeafKind::Vlek => cn.strip_prefix("SEV-VLEK-")?,
        };
        super::roots::Product::from_name(rest)
    }

    /// The hwID extension (VCEK).
    pub fn hwid(&self) -> Result<Vec<u8>, SnpError> {
        let err = |reason: String| SnpError::HwidExtension { reason };
        match self
            .cert
            .extension(oid::HWID)
            .map_err(|e| err(e.to_string()))?
        {
            Some(v) => Ok(v.to_vec()),
            None => Err(err("is missing".into())),
        }
    }

    /// Checks the hwID extension against CHIP_ID: all 64 bytes on Milan
    /// and Genoa; on Turin the 8-byte hwID is the start of CHIP_ID and the
    /// rest of CHIP_ID is zero.
    pub fn check_hwid(&self, chip_id: &[u8; 64]) -> Result<(), SnpError> {
        let hwid = self.hwid()?;
        let n = hwid.len();
        if n != 64 && n != 8 {
            return Err(SnpError::HwidExtension {
                reason: format!("is {n} bytes, not 64 (Milan, Genoa) or 8 (Turin)"),
            });
        }
        let (head, tail) = chip_id.split_at(n);
        if head == hwid.as_slice() && tail.iter().all(|&b| b == 0) {
            Ok(())
        } else {
            Err(SnpError::HwidMismatch {
                hwid: hex::encode(&hwid),
                chip_id: hex::encode(chip_id),
            })
        }
    }

    fn spl(&self, (id, oid, component): Spl) -> Result<u8, SnpError> {
        let err = |reason: String| SnpError::TcbExtension {
            oid,
            component,
            reason,
        };
        let raw = self
            .cert
            .extension(id)
            .map_err(|e| err(e.to_string()))?
            .ok_or_else(|| err("is missing".into()))?;
        u8::from_der(raw).map_err(|e| err(format!("is not an INTEGER 0..=255: {e}")))
    }

    /// The TCB the certificate was issued for (its SPL extensions).
    pub fn tcb(&self, layout: TcbLayout) -> Result<TcbVersion, SnpError> {
        Ok(TcbVersion {
            fmc: match layout {
                TcbLayout::PreTurin => None,
                TcbLayout::Turin => Some(self.spl(SPL_FMC)?),
            },
            bootloader: self.spl(SPL_BL)?,
            tee: self.spl(SPL_TEE)?,
            snp: self.spl(SPL_SNP)?,
            microcode: self.spl(SPL_UCODE)?,
        })
    }

    /// Checks the SPL extensions against REPORTED_TCB decoded with `layout`.
    pub fn check_tcb(&self, reported: RawTcb, layout: TcbLayout) -> Result<TcbVersion, SnpError> {
        let cert = self.tcb(layout)?;
        let rep = reported.decode(layout);
        let pairs = [
            ("fmc", cert.fmc, rep.fmc),
            ("bl", Some(cert.bootloader), Some(rep.bootloader)),
            ("tee", Some(cert.tee), Some(rep.tee)),
            ("snp", Some(cert.snp), Some(rep.snp)),
            ("ucode", Some(cert.microcode), Some(rep.microcode)),
        ];
        for (component, c, r) in pairs {
            if let (Some(c), Some(r)) = (c, r)
                && c != r
            {
                return Err(SnpError::TcbMismatch {
                    component,
                    cert: c,
                    report: r,
                });
            }
        }
        Ok(cert)
    }
}

/// Checks that `cert` is valid at `at` (notBefore <= at <= notAfter);
/// `name` says which certificate it is in the error.
pub fn check_validity(
    cert: &SnpCert,
    name: &'static str,
    at: OffsetDateTime,
) -> Result<(), SnpError> {
    let now = at.unix_timestamp();
    if now < cert.not_before() {
        return Err(SnpError::NotYetValid {
            cert: name,
            not_before: format_unix(cert.not_before()),
            at: format_unix(now),
        });
    }
    if now > cert.not_after() {
        return Err(SnpError::Expired {
            cert: name,
            not_after: format_unix(cert.not_after()),
            at: format_unix(now),
        });
    }
    Ok(())
}

/// `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_unix(secs: i64) -> String {
    OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| kolm_format::timefmt::format_utc_seconds(t).ok())
        .unwrap_or_else(|| format!("@{secs}"))
}

/// Checks that `cert`'s signature algorithm is RSASSA-PSS with SHA-384,
/// MGF1 with SHA-384, a 48-byte salt and trailer field 1, the same inside
/// and outside the TBS part. AMD signs ASKs, ASVKs, VCEKs and VLEKs so.
fn check_pss_algorithm(cert: &SnpCert, role: CertRole) -> Result<(), SnpError> {
    let err = |reason: String| SnpError::CertSignatureAlgorithm { role, reason };
    let c = &cert.cert;
    if c.signature_algorithm != c.tbs_certificate.signature {
        return Err(err("outer and TBS signature algorithms differ".into()));
    }
    check_pss_sha384(&c.signature_algorithm).map_err(|e| err(e.to_string()))
}

/// Why an algorithm identifier is not RSASSA-PSS with SHA-384
/// ([`check_pss_sha384`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum PssAlgorithmError {
    #[error("algorithm {oid} is not RSASSA-PSS")]
    NotPss { oid: ObjectIdentifier },
    #[error("no RSASSA-PSS parameters")]
    NoParameters,
    #[error("{error}")]
    Parameters { error: String },
    #[error("hash {oid} is not SHA-384")]
    Hash { oid: ObjectIdentifier },
    #[error("mask generation is not MGF1 with SHA-384")]
    MaskGeneration,
    #[error("salt length {salt_len} is not 48")]
    SaltLength { salt_len: u8 },
    #[error("trailer field is not 1")]
    TrailerField,
}

/// Checks that `alg` is RSASSA-PSS with SHA-384, MGF1 with SHA-384, a
/// 48-byte salt and trailer field 1: how AMD's ARK signs certificates and
/// its CRL ([`super::crl`]).
pub(crate) fn check_pss_sha384(
    alg: &spki::AlgorithmIdentifierOwned,
) -> Result<(), PssAlgorithmError> {
    if alg.oid != rfc5912::ID_RSASSA_PSS {
        return Err(PssAlgorithmError::NotPss { oid: alg.oid });
    }
    let params_der = alg
        .parameters
        .as_ref()
        .ok_or(PssAlgorithmError::NoParameters)?
        .to_der()
        .map_err(|e| PssAlgorithmError::Parameters {
            error: e.to_string(),
        })?;
    let p = RsaPssParams::from_der(&params_der).map_err(|e| PssAlgorithmError::Parameters {
        error: e.to_string(),
    })?;
    if p.hash.oid != rfc5912::ID_SHA_384 {
        return Err(PssAlgorithmError::Hash { oid: p.hash.oid });
    }
    let mgf_hash = p.mask_gen.parameters.map(|h| h.oid);
    if p.mask_gen.oid != rfc5912::ID_MGF_1 || mgf_hash != Some(rfc5912::ID_SHA_384) {
        return Err(PssAlgorithmError::MaskGeneration);
    }
    if p.salt_len != 48 {
        return Err(PssAlgorithmError::SaltLength {
            salt_len: p.salt_len,
        });
    }
    if p.trailer_field != TrailerField::BC {
        return Err(PssAlgorithmError::TrailerField);
    }
    Ok(())
}

/// Checks the names and the algorithm of `signee` against `signer`, without
/// the signature itself.
fn check_issued_by_names(
    signee: &SnpCert,
    signer: &SnpCert,
    role: CertRole,
) -> Result<(), SnpError> {
    if signee.cert.tbs_certificate.issuer != signer.cert.tbs_certificate.subject {
        return Err(SnpError::IssuerMismatch {
            role,
            issuer: signee.issuer(),
            signer: signer.subject(),
        });
    }
    check_pss_algorithm(signee, role)
}

/// Verifies the RSASSA-PSS signature on `signee` by `signer`'s key, through
/// the `sev` crate.
fn verify_rsa_signature(
    signee: &SnpCert,
    signer: &SnpCert,
    role: CertRole,
) -> Result<(), SnpError> {
    let signer = signer.to_sev();
    let signee = signee.to_sev();
    (&signer, &signee)
        .verify()
        .map_err(|e| SnpError::CertSignature {
            role,
            reason: e.to_string(),
        })
}

/// Checks that a CA certificate says CA:TRUE.
fn check_ca(cert: &SnpCert, role: CertRole) -> Result<(), SnpError> {
    let err = |reason: String| SnpError::NotCa { role, reason };
    match cert.cert.tbs_certificate.get::<BasicConstraints>() {
        Ok(Some((_, bc))) if bc.ca => Ok(()),
        Ok(Some(_)) => Err(err("CA is false".into())),
        Ok(None) => Err(err("extension missing".into())),
        Err(e) => Err(err(e.to_string())),
    }
}

/// Full check of `signee` as issued by `signer`: names, algorithm and
/// signature.
pub fn verify_issued_by(
    signee: &SnpCert,
    signer: &SnpCert,
    role: CertRole,
) -> Result<(), SnpError> {
    check_issued_by_names(signee, signer, role)?;
    verify_rsa_signature(signee, signer, role)
}

/// The leaf's checks against the ASK/ASVK: issuer name and algorithm; with
/// `verify_signature`, the signature too.
pub fn verify_leaf(leaf: &Leaf, ask: &SnpCert, verify_signature: bool) -> Result<(), SnpError> {
    check_issued_by_names(&leaf.cert, ask, CertRole::Leaf)?;
    if verify_signature {
        verify_rsa_signature(&leaf.cert, ask, CertRole::Leaf)?;
    }
    Ok(())
}

/// The ARK's own checks: self-issued, CA, the expected name, PSS
/// parameters; with `verify_signature`, its self-signature too.
pub fn verify_ark(
    ark: &SnpCert,
    expected_cn: &str,
    verify_signature: bool,
) -> Result<(), SnpError> {
    let cn = ark.common_name();
    if cn.as_deref() != Some(expected_cn) {
        return Err(SnpError::SubjectMismatch {
            role: CertRole::Ark,
            found: cn,
            expected: expected_cn.to_owned(),
        });
    }
    check_ca(ark, CertRole::Ark)?;
    check_issued_by_names(ark, ark, CertRole::Ark)?;
    if verify_signature {
        verify_rsa_signature(ark, ark, CertRole::Ark)?;
    }
    Ok(())
}

/// The ASK/ASVK's checks: the expected name, CA, issued by the ARK; with
/// `verify_signature`, the ARK's signature on it too.
pub fn verify_ask(
    ask: &SnpCert,
    ark: &SnpCert,
    expected_cn: &str,
    verify_signature: bool,
) -> Result<(), SnpError> {
    let cn = ask.common_name();
    if cn.as_deref() != Some(expected_cn) {
        return Err(SnpError::SubjectMismatch {
            role: CertRole::Ask,
            found: cn,
            expected: expected_cn.to_owned(),
        });
    }
    check_ca(ask, CertRole::Ask)?;
    check_issued_by_names(ask, ark, CertRole::Ask)?;
    if verify_signature {
        verify_rsa_signature(ask, ark, CertRole::Ask)?;
    }
    Ok(())
}

/// A set of (signer, signee) certificate pairs, keyed by the SHA-256 of
/// both DERs, whose RSA signatures verified in this process. Identical
/// bytes verify identically, so a hit only skips the RSA-4096 arithmetic;
/// names, constraints and validity are checked every time.
#[derive(Debug)]
struct PairCache {
    set: Mutex<BTreeSet<([u8; 32], [u8; 32])>>,
    max: usize,
}

impl PairCache {
    const fn new(max: usize) -> PairCache {
        PairCache {
            set: Mutex::new(BTreeSet::new()),
            max,
        }
    }
    fn contains(&self, signer: &SnpCert, signee: &SnpCert) -> bool {
        self.set
            .lock()
            .map(|c| c.contains(&(signer.sha256, signee.sha256)))
            .unwrap_or(false)
    }
    /// Records a pair; a full cache is left as it is.
    fn insert(&self, signer: &SnpCert, signee: &SnpCert) {
        if let Ok(mut c) = self.set.lock()
            && c.len() < self.max
        {
            c.insert((signer.sha256, signee.sha256));
        }
    }
    fn len(&self) -> usize {
        self.set.lock().map(|c| c.len()).unwrap_or(0)
    }
}

/// Verified ARK -> ASK/ASVK pairs (ARK self-signature and ARK over ASK).
/// AMD has two per product.
static CA_CACHE: PairCache = PairCache::new(64);
/// Verified ASK/ASVK -> VCEK/VLEK pairs, recorded only under a trusted ARK.
static LEAF_CACHE: PairCache = PairCache::new(1024);

/// Whether the ARK's self-signature and its signature on the ASK are known
/// good.
pub fn ca_cache_contains(ark: &SnpCert, ask: &SnpCert) -> bool {
    CA_CACHE.contains(ark, ask)
}

/// Records an ARK -> ASK pair whose signatures verified.
///
/// Crate-private on purpose: an entry makes every later verification skip
/// the RSA signatures of that pair, so only the chain check of this crate,
/// right after it verified them under a trusted ARK, may add one. A library
/// caller cannot mark a pair as verified:
///
/// ```compile_fail
/// use kolm_verifier::snp::{LeafKind, Product, roots};
/// let pair = roots::embedded_ca(Product::Milan, LeafKind::Vcek).unwrap();
/// kolm_verifier::snp::certs::ca_cache_insert(&pair.ark, &pair.ask);
/// ```
pub(crate) fn ca_cache_insert(ark: &SnpCert, ask: &SnpCert) {
    CA_CACHE.insert(ark, ask);
}

/// Number of ARK -> ASK pairs in the cache.
pub fn ca_cache_len() -> usize {
    CA_CACHE.len()
}

/// Whether the ASK's signature on the leaf is known good.
pub fn leaf_cache_contains(ask: &SnpCert, leaf: &SnpCert) -> bool {
    LEAF_CACHE.contains(ask, leaf)
}

/// Records an ASK -> leaf pair whose signature verified, under an ASK that
/// verified under a trusted ARK. Crate-private for the same reason as
/// `ca_cache_insert`:
///
/// ```compile_fail
/// use kolm_verifier::snp::{LeafKind, Product, roots};
/// let pair = roots::embedded_ca(Product::Milan, LeafKind::Vcek).unwrap();
/// kolm_verifier::snp::certs::leaf_cache_insert(&pair.ask, &pair.ask);
/// ```
pub(crate) fn leaf_cache_insert(ask: &SnpCert, leaf: &SnpCert) {
    LEAF_CACHE.insert(ask, leaf);
}

/// Number of ASK -> leaf pairs in the cache.
pub fn leaf_cache_len() -> usize {
    LEAF_CACHE.len()
}

/// Verifies the report signature (ECDSA P-384 over SHA-384 of bytes
/// `0x000..0x2A0`) with the leaf key. R and S are converted from AMD's
/// little-endian layout by the `sev` crate (which also rejects zero and
/// out-of-range scalars); the verification itself is ring's
/// `ECDSA_P384_SHA384_FIXED`.
pub fn verify_report_signature(
    leaf: &Leaf,
    report: &super::report::SnpReport,
) -> Result<(), SnpError> {
    let key = leaf.kind.name();
    let sig = p384::ecdsa::Signature::try_from(&report.signature()).map_err(|e| {
        SnpError::ReportSignature {
            key,
            reason: e.to_string(),
        }
    })?;
    let point = leaf.key.to_encoded_point(false);
    ring::signature::UnparsedPublicKey::new(
        &ring::signature::ECDSA_P384_SHA384_FIXED,
        point.as_bytes(),
    )
    .verify(report.signed_bytes(), &sig.to_bytes())
    .map_err(|_| SnpError::ReportSignature {
        key,
        reason: "ECDSA P-384/SHA-384 verification failed".into(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use crate::snp::roots::{Product, embedded_ca};

    #[test]
    fn embedded_chains_verify() {
        for product in Product::ALL {
            for kind in [LeafKind::Vcek, LeafKind::Vlek] {
                let pair = embedded_ca(product, kind).unwrap();
                verify_ark(&pair.ark, &product.ark_cn(), true).unwrap();
                verify_ask(&pair.ask, &pair.ark, &product.ask_cn(kind), true).unwrap();
            }
        }
    }

    #[test]
    fn cross_product_chains_fail() {
        let milan = embedded_ca(Product::Milan, LeafKind::Vcek).unwrap();
        let genoa = embedded_ca(Product::Genoa, LeafKind::Vcek).unwrap();
        let e = verify_ask(&milan.ask, &genoa.ark, "SEV-Milan", true).unwrap_err();
        assert!(matches!(e, SnpError::IssuerMismatch { .. }), "{e}");
        // Same names, wrong key: the signature itself must fail.
        let e = verify_rsa_signature(&milan.ask, &genoa.ark, CertRole::Ask).unwrap_err();
        assert!(matches!(e, SnpError::CertSignature { .. }), "{e}");
    }

    #[test]
    fn pem_strictness() {
        let pem = include_bytes!("roots/ask_ark_milan.pem");
        assert!(parse_chain(pem).is_ok());
        let mut trailing = pem.to_vec();
        trailing.extend_from_slice(b"junk");
        assert!(matches!(
            parse_chain(&trailing),
            Err(SnpError::ChainShape { .. })
        ));
        let text = std::str::from_utf8(pem).unwrap();
        let one = &text[..text.find("-----END CERTIFICATE-----").unwrap() + 25];
        assert!(matches!(
            parse_chain(one.as_bytes()),
            Err(SnpError::ChainShape { .. })
        ));
        // One block is a certificate, so parse_cert takes it.
        assert!(parse_cert(one.as_bytes(), CertRole::Ask).is_ok());
        assert!(parse_cert(pem, CertRole::Ask).is_err());
        let mut twice = text.to_string();
        twice.push_str(text);
        assert!(parse_chain(twice.as_bytes()).is_err());
    }

    #[test]
    fn der_trailing_bytes_rejected() {
        let pair = embedded_ca(Product::Milan, LeafKind::Vcek).unwrap();
        let mut der = pair.ark.der().to_vec();
        assert!(SnpCert::from_der(&der, CertRole::Ark).is_ok());
        der.push(0);
        assert!(SnpCert::from_der(&der, CertRole::Ark).is_err());
    }

    #[test]
    fn cache_records_pairs() {
        let pair = embedded_ca(Product::Genoa, LeafKind::Vlek).unwrap();
        ca_cache_insert(&pair.ark, &pair.ask);
        assert!(ca_cache_contains(&pair.ark, &pair.ask));
        assert!(!ca_cache_contains(&pair.ask, &pair.ark));
        assert!(ca_cache_len() >= 1);
    }
}
