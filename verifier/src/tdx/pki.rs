//! Certificates for TDX: the embedded Intel SGX Root CA, strict PEM chain
//! parsing, ECDSA P-256 signature checks through `ring`, and the Intel SGX
//! extension of a PCK certificate.
//!
//! dcap-qvl validates the chains in full (webpki path building, validity,
//! CRLs). The checks here are the verifier's own, independent ones: every
//! chain must end in the embedded root (byte-identical), each certificate must
//! be signed by the next, and the values shown to the auditor (issuer,
//! validity, FMSPC, TCB components) are read from the certificates here.

use der::asn1::{Any, ObjectIdentifier, OctetStringRef};
use der::{Decode, Encode, Reader, SliceReader, Tag, Tagged};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use x509_cert::Certificate;

use super::error::TdxError;

/// DER of the Intel SGX Root CA ("Intel SGX Root CA", ECDSA P-256, valid
/// 2018-05-21T10:45:10Z..2049-12-31T23:59:59Z), as published by Intel at
/// `https://certificates.trustedservices.intel.com/Intel_SGX_Provisioning_Certification_RootCA.cer`.
/// Byte-identical to dcap-qvl 0.7.1 `src/TrustedRootCA.der`.
pub const INTEL_SGX_ROOT_CA_DER: &[u8] = include_bytes!("intel_sgx_root_ca.der");

/// SHA-256 of [`INTEL_SGX_ROOT_CA_DER`]; checked at every verification.
pub const INTEL_SGX_ROOT_CA_SHA256: &str =
    "44a0196b2b99f889b8e149e95b807a350e7424964399e885a7cbb8ccfab674d3";

/// Most certificates accepted in one PEM chain.
const MAX_CHAIN_CERTS: usize = 4;

const PEM_BEGIN: &[u8] = b"-----BEGIN CERTIFICATE-----";
const PEM_END: &[u8] = b"-----END CERTIFICATE-----";

/// ecdsa-with-SHA256.
pub(crate) const ECDSA_WITH_SHA256: ObjectIdentifier =
    ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.2");
/// id-ecPublicKey.
const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
/// prime256v1 / secp256r1.
const PRIME256V1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
/// Intel SGX extension of PCK certificates.
const SGX_EXTENSION: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113741.1.13.1");
/// SGX extension: TCB (SEQUENCE of components, PCESVN, CPUSVN).
const SGX_TCB: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113741.1.13.1.2");
/// SGX extension: FMSPC.
const SGX_FMSPC: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113741.1.13.1.4");

/// The root a quote's chains must end in: the embedded Intel SGX Root CA
/// (platform `tdx`), or, for the kolm simulated TEE's TDX form only (platform
/// `simulated`, [`crate::sim`]), the TDX format root the caller trusts.
/// Crate-private: no caller can point real `tdx` evidence at another root.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Anchor<'a> {
    Intel,
    Sim(&'a crate::sim::SimRoot),
}

impl Anchor<'_> {
    /// The root's DER.
    pub(crate) fn der(&self) -> &[u8] {
        match self {
            Anchor::Intel => INTEL_SGX_ROOT_CA_DER,
            Anchor::Sim(root) => root.der(),
        }
    }

    /// How reports name it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Anchor::Intel => "the embedded Intel SGX Root CA",
            Anchor::Sim(_) => "the kolm sim TDX root given with --dangerous-trust-sim-root",
        }
    }

    pub(crate) fn is_sim(&self) -> bool {
        matches!(self, Anchor::Sim(_))
    }
}

/// Whether the embedded root still has its pinned hash.
pub fn root_pin_holds() -> bool {
    hex::encode(Sha256::digest(INTEL_SGX_ROOT_CA_DER)) == INTEL_SGX_ROOT_CA_SHA256
}

/// One decoded certificate with its exact DER bytes.
#[derive(Debug, Clone)]
pub struct Cert {
    der: Vec<u8>,
    cert: Certificate,
}

impl PartialEq for Cert {
    fn eq(&self, other: &Self) -> bool {
        self.der == other.der
    }
}

impl Eq for Cert {}

impl Cert {
    /// Decodes one DER certificate; trailing bytes are an error.
    pub fn from_der(der: &[u8], what: &'static str) -> Result<Cert, TdxError> {
        let cert = Certificate::from_der(der).map_err(|e| TdxError::Certificate {
            what,
            detail: format!("not a DER certificate: {e}"),
        })?;
        Ok(Cert {
            der: der.to_vec(),
            cert,
        })
    }

    /// The exact DER bytes.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// Whether this is the embedded Intel SGX Root CA, byte for byte.
    pub fn is_pinned_root(&self) -> bool {
        self.der == INTEL_SGX_ROOT_CA_DER && root_pin_holds()
    }

    /// Whether this is `anchor`'s root, byte for byte.
    pub(crate) fn is_anchor(&self, anchor: Anchor<'_>) -> bool {
        match anchor {
            Anchor::Intel => self.is_pinned_root(),
            Anchor::Sim(root) => self.der == root.der(),
        }
    }

    /// Issuer DN as an RFC 4514 string, e.g.
    /// `C=US,ST=CA,L=Santa Clara,O=Intel Corporation,CN=Intel SGX PCK Platform CA`.
    pub fn issuer(&self) -> String {
        self.cert.tbs_certificate.issuer.to_string()
    }

    /// Subject DN as an RFC 4514 string.
    pub fn subject(&self) -> String {
        self.cert.tbs_certificate.subject.to_string()
    }

    /// `(notBefore, notAfter)`.
    pub fn validity(&self) -> Result<(OffsetDateTime, OffsetDateTime), TdxError> {
        let v = &self.cert.tbs_certificate.validity;
        let conv = |t: x509_cert::time::Time| {
            let secs = i64::try_from(t.to_unix_duration().as_secs()).ok()?;
            OffsetDateTime::from_unix_timestamp(secs).ok()
        };
        match (conv(v.not_before), conv(v.not_after)) {
            (Some(nb), Some(na)) => Ok((nb, na)),
            _ => Err(TdxError::Certificate {
                what: "certificate validity",
                detail: "time out of range".into(),
            }),
        }
    }

    /// The uncompressed P-256 point of the subject public key (65 bytes).
    pub fn p256_public_key(&self) -> Option<&[u8]> {
        let spki = &self.cert.tbs_certificate.subject_public_key_info;
        if spki.algorithm.oid != EC_PUBLIC_KEY {
            return None;
        }
        let curve = spki.algorithm.parameters.as_ref()?;
        if curve.decode_as::<ObjectIdentifier>().ok()? != PRIME256V1 {
            return None;
        }
        let key = spki.subject_public_key.as_bytes()?;
        (key.len() == 65 && key.first() == Some(&0x04)).then_some(key)
    }

    /// Whether basicConstraints says this is a CA certificate (`cA` TRUE).
    /// A certificate without the extension, or one that does not decode,
    /// is not a CA.
    pub fn is_ca(&self) -> bool {
        matches!(
            self.cert
                .tbs_certificate
                .get::<x509_cert::ext::pkix::BasicConstraints>(),
            Ok(Some((_, bc))) if bc.ca
        )
    }

    /// The serial number's content octets, as a CRL lists them.
    pub fn serial(&self) -> &[u8] {
        self.cert.tbs_certificate.serial_number.as_bytes()
    }

    /// Whether this certificate's issuer name is `issuer`'s subject name.
    pub fn names_issuer(&self, issuer: &Cert) -> bool {
        self.cert.tbs_certificate.issuer == issuer.cert.tbs_certificate.subject
    }

    /// The subject name.
    pub(crate) fn subject_name(&self) -> &x509_cert::name::Name {
        &self.cert.tbs_certificate.subject
    }

    /// The issuer name.
    pub(crate) fn issuer_name(&self) -> &x509_cert::name::Name {
        &self.cert.tbs_certificate.issuer
    }

    /// Whether this certificate's P-256 key verifies `sig`, an ECDSA
    /// P-256/SHA-256 signature over `msg`, given as 64 bytes `r || s`
    /// (`fixed`) or DER `Ecdsa-Sig-Value`.
    pub fn verifies(&self, msg: &[u8], sig: &[u8], fixed: bool) -> bool {
        let alg = if fixed {
            &ring::signature::ECDSA_P256_SHA256_FIXED
        } else {
            &ring::signature::ECDSA_P256_SHA256_ASN1
        };
        self.p256_public_key().is_some_and(|key| {
            ring::signature::UnparsedPublicKey::new(alg, key)
                .verify(msg, sig)
                .is_ok()
        })
    }

    /// Whether `issuer`'s P-256 key verifies this certificate's
    /// ecdsa-with-SHA256 signature over its TBSCertificate.
    pub fn is_signed_by(&self, issuer: &Cert) -> bool {
        if self.cert.signature_algorithm.oid != ECDSA_WITH_SHA256
            || self.cert.tbs_certificate.signature.oid != ECDSA_WITH_SHA256
        {
            return false;
        }
        let (Some(key), Ok(tbs), Some(sig)) = (
            issuer.p256_public_key(),
            self.cert.tbs_certificate.to_der(),
            self.cert.signature.as_bytes(),
        ) else {
            return false;
        };
        ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_ASN1, key)
            .verify(&tbs, sig)
            .is_ok()
    }

    /// The Intel SGX extension of a PCK certificate.
    pub fn sgx_extension(&self) -> Result<PckSgxExtension, TdxError> {
        let err = |detail: String| TdxError::Certificate {
            what: "PCK certificate SGX extension",
            detail,
        };
        let exts = self
            .cert
            .tbs_certificate
            .extensions
            .as_deref()
            .unwrap_or(&[]);
        let mut found = exts.iter().filter(|e| e.extn_id == SGX_EXTENSION);
        let (Some(ext), None) = (found.next(), found.next()) else {
            return Err(err("missing or repeated".into()));
        };
        PckSgxExtension::parse(ext.extn_value.as_bytes()).map_err(|e| err(e.to_string()))
    }
}

/// Values of the Intel SGX extension of a PCK certificate (Intel SGX PCK
/// Certificate and CRL Profile, section 1.3.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PckSgxExtension {
    /// SGX TCB components 1..=16 (`...13.1.2.1` .. `...13.1.2.16`).
    pub sgx_tcb_comps: [u8; 16],
    /// PCESVN (`...13.1.2.17`).
    pub pcesvn: u16,
    /// CPUSVN (`...13.1.2.18`).
    pub cpusvn: [u8; 16],
    /// FMSPC (`...13.1.4`).
    pub fmspc: [u8; 6],
}

/// Why the Intel SGX extension of a PCK certificate is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SgxExtensionError {
    /// The DER does not decode.
    #[error("{error}")]
    Der {
        /// What the decoder said.
        error: String,
    },
    /// An entry of a `SEQUENCE OF` is not a SEQUENCE.
    #[error("entry tag {tag} is not SEQUENCE")]
    EntryTag {
        /// The tag found.
        tag: Tag,
    },
    /// A value that should be an INTEGER is not one.
    #[error("{tag} is not INTEGER")]
    NotInteger {
        /// The tag found.
        tag: Tag,
    },
    /// An INTEGER outside `0..=65535` or not minimally encoded.
    #[error("INTEGER is negative, not minimally encoded or above 65535")]
    IntegerRange,
    /// A value that should be an OCTET STRING does not decode as one.
    #[error("{name}: {error}")]
    OctetString {
        /// The field.
        name: &'static str,
        /// What the decoder said.
        error: String,
    },
    /// An OCTET STRING of the wrong length.
    #[error("{name} is {len} bytes, {expected} expected")]
    OctetLength {
        /// The field.
        name: &'static str,
        /// Its length.
        len: usize,
        /// The length it must have.
        expected: usize,
    },
    /// A top-level entry is absent or appears twice.
    #[error("{name} missing or repeated")]
    MissingOrRepeated {
        /// The entry (`FMSPC`, `TCB`).
        name: &'static str,
    },
    /// An OID inside the TCB entry that the profile does not define.
    #[error("unexpected OID {oid} in TCB")]
    UnexpectedTcbOid {
        /// The OID.
        oid: ObjectIdentifier,
    },
    /// A TCB component number with no slot.
    #[error("TCB component {n}")]
    TcbComponentSlot {
        /// The component number.
        n: u32,
    },
    /// A TCB component above 255.
    #[error("TCB component {n} is {value}")]
    TcbComponentRange {
        /// The component number.
        n: u32,
        /// Its value.
        value: u16,
    },
    /// A TCB component that appears twice.
    #[error("TCB component {n} repeated")]
    TcbComponentRepeated {
        /// The component number.
        n: u32,
    },
    /// A TCB component that is absent.
    #[error("TCB component {n} missing")]
    TcbComponentMissing {
        /// The component number (1..=16).
        n: usize,
    },
    /// PCESVN appears twice.
    #[error("PCESVN repeated")]
    PcesvnRepeated,
    /// CPUSVN appears twice.
    #[error("CPUSVN repeated")]
    CpusvnRepeated,
    /// PCESVN is absent.
    #[error("PCESVN missing")]
    PcesvnMissing,
    /// CPUSVN is absent.
    #[error("CPUSVN missing")]
    CpusvnMissing,
}

impl SgxExtensionError {
    fn der(error: der::Error) -> SgxExtensionError {
        SgxExtensionError::Der {
            error: error.to_string(),
        }
    }
}

/// `SEQUENCE OF SEQUENCE { OBJECT IDENTIFIER, ANY }` as `(oid, value)`.
fn oid_value_pairs(der: &[u8]) -> Result<Vec<(ObjectIdentifier, Any)>, SgxExtensionError> {
    let entries = Vec::<Any>::from_der(der).map_err(SgxExtensionError::der)?;
    entries
        .into_iter()
        .map(|entry| {
            if entry.tag() != Tag::Sequence {
                return Err(SgxExtensionError::EntryTag { tag: entry.tag() });
            }
            let mut r = SliceReader::new(entry.value()).map_err(SgxExtensionError::der)?;
            let oid: ObjectIdentifier = r.decode().map_err(SgxExtensionError::der)?;
            let value: Any = r.decode().map_err(SgxExtensionError::der)?;
            r.finish(()).map_err(SgxExtensionError::der)?;
            Ok((oid, value))
        })
        .collect()
}

/// A non-negative, minimally encoded INTEGER that fits in `u16`.
fn small_uint(value: &Any) -> Result<u16, SgxExtensionError> {
    if value.tag() != Tag::Integer {
        return Err(SgxExtensionError::NotInteger { tag: value.tag() });
    }
    match value.value() {
        [b] if *b < 0x80 => Ok(u16::from(*b)),
        [0, b] if *b >= 0x80 => Ok(u16::from(*b)),
        [hi, lo] if *hi != 0 && *hi < 0x80 => Ok(u16::from_be_bytes([*hi, *lo])),
        [0, hi, lo] if *hi >= 0x80 => Ok(u16::from_be_bytes([*hi, *lo])),
        _ => Err(SgxExtensionError::IntegerRange),
    }
}

fn octets<const N: usize>(value: &Any, name: &'static str) -> Result<[u8; N], SgxExtensionError> {
    let s =
        value
            .decode_as::<OctetStringRef<'_>>()
            .map_err(|e| SgxExtensionError::OctetString {
                name,
                error: e.to_string(),
            })?;
    <[u8; N]>::try_from(s.as_bytes()).map_err(|_| SgxExtensionError::OctetLength {
        name,
        len: s.as_bytes().len(),
        expected: N,
    })
}

impl PckSgxExtension {
    fn parse(der: &[u8]) -> Result<PckSgxExtension, SgxExtensionError> {
        let top = oid_value_pairs(der)?;
        let one = |oid: &ObjectIdentifier, name: &'static str| -> Result<&Any, SgxExtensionError> {
            let mut it = top.iter().filter(|(o, _)| o == oid);
            match (it.next(), it.next()) {
                (Some((_, v)), None) => Ok(v),
                _ => Err(SgxExtensionError::MissingOrRepeated { name }),
            }
        };
        let fmspc = octets::<6>(one(&SGX_FMSPC, "FMSPC")?, "FMSPC")?;
        let tcb = one(&SGX_TCB, "TCB")?;
        let tcb = oid_value_pairs(&tcb.to_der().map_err(SgxExtensionError::der)?)?;
        let mut comps = [None::<u8>; 16];
        let mut pcesvn = None;
        let mut cpusvn = None;
        for (oid, value) in &tcb {
            if oid.parent() != Some(SGX_TCB) {
                return Err(SgxExtensionError::UnexpectedTcbOid { oid: *oid });
            }
            match oid.arcs().last() {
                Some(n @ 1..=16) => {
                    let slot = usize::try_from(n)
                        .ok()
                        .and_then(|n| n.checked_sub(1))
                        .and_then(|i| comps.get_mut(i))
                        .ok_or(SgxExtensionError::TcbComponentSlot { n })?;
                    let v = small_uint(value)?;
                    let v = u8::try_from(v)
                        .map_err(|_| SgxExtensionError::TcbComponentRange { n, value: v })?;
                    if slot.replace(v).is_some() {
                        return Err(SgxExtensionError::TcbComponentRepeated { n });
                    }
                }
                Some(17) => {
                    if pcesvn.replace(small_uint(value)?).is_some() {
                        return Err(SgxExtensionError::PcesvnRepeated);
                    }
                }
                Some(18) => {
                    if cpusvn.replace(octets::<16>(value, "CPUSVN")?).is_some() {
                        return Err(SgxExtensionError::CpusvnRepeated);
                    }
                }
                _ => return Err(SgxExtensionError::UnexpectedTcbOid { oid: *oid }),
            }
        }
        let mut sgx_tcb_comps = [0u8; 16];
        for (i, (dst, src)) in sgx_tcb_comps.iter_mut().zip(comps).enumerate() {
            *dst = src.ok_or(SgxExtensionError::TcbComponentMissing {
                n: i.saturating_add(1),
            })?;
        }
        Ok(PckSgxExtension {
            sgx_tcb_comps,
            pcesvn: pcesvn.ok_or(SgxExtensionError::PcesvnMissing)?,
            cpusvn: cpusvn.ok_or(SgxExtensionError::CpusvnMissing)?,
            fmspc,
        })
    }
}

/// Parses a PEM certificate chain strictly: one or more
/// `-----BEGIN CERTIFICATE-----` blocks (RFC 7468 strict: 64-column base64,
/// canonical encoding) separated only by line breaks, then at most line
/// breaks and, where `nul_terminated` allows it, one terminating NUL byte (the
/// quote's certification data carries one). Each block must hold exactly one
/// DER certificate.
pub fn parse_pem_chain(
    input: &[u8],
    what: &'static str,
    nul_terminated: bool,
) -> Result<Vec<Cert>, TdxError> {
    let perr = |detail: String| TdxError::Pem { what, detail };
    let mut rest = match input.split_last() {
        Some((0, head)) if nul_terminated => head,
        _ => input,
    };
    let mut certs = Vec::new();
    loop {
        let start = rest
            .iter()
            .position(|b| !matches!(b, b'\n' | b'\r'))
            .unwrap_or(rest.len());
        rest = rest.get(start..).unwrap_or_default();
        if rest.is_empty() {
            break;
        }
        if !rest.starts_with(PEM_BEGIN) {
            let at = input.len().saturating_sub(rest.len());
            return Err(perr(format!(
                "expected -----BEGIN CERTIFICATE----- at offset {at}"
            )));
        }
        if certs.len() >= MAX_CHAIN_CERTS {
            return Err(perr(format!("more than {MAX_CHAIN_CERTS} certificates")));
        }
        let end = rest
            .windows(PEM_END.len())
            .position(|w| w == PEM_END)
            .and_then(|p| p.checked_add(PEM_END.len()))
            .ok_or_else(|| perr("missing -----END CERTIFICATE-----".into()))?;
        let (block, tail) = rest
            .split_at_checked(end)
            .ok_or_else(|| perr("bad block".into()))?;
        let (label, der) = der::pem::decode_vec(block)
            .map_err(|e| perr(format!("certificate {}: {e}", certs.len())))?;
        if label != "CERTIFICATE" {
            return Err(perr(format!("unexpected PEM label {label:?}")));
        }
        certs.push(Cert::from_der(&der, what)?);
        rest = tail;
    }
    if certs.is_empty() {
        return Err(perr("no certificate".into()));
    }
    Ok(certs)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn embedded_root_matches_pin() {
        assert!(root_pin_holds());
        let root = Cert::from_der(INTEL_SGX_ROOT_CA_DER, "root").unwrap();
        assert!(root.is_pinned_root());
        assert_eq!(root.subject(), root.issuer());
        assert_eq!(
            root.subject(),
            "C=US,ST=CA,L=Santa Clara,O=Intel Corporation,CN=Intel SGX Root CA"
        );
        assert!(root.is_signed_by(&root), "root is self-signed");
    }

    #[test]
    fn pem_chain_rejects_junk() {
        assert!(parse_pem_chain(b"", "t", false).is_err());
        assert!(parse_pem_chain(b"\0", "t", true).is_err());
        assert!(parse_pem_chain(b"hello", "t", false).is_err());
        assert!(parse_pem_chain(b"-----BEGIN CERTIFICATE-----\n", "t", false).is_err());
        let pem = der::pem::encode_string(
            "CERTIFICATE",
            der::pem::LineEnding::LF,
            INTEL_SGX_ROOT_CA_DER,
        )
        .unwrap();
        let one = parse_pem_chain(pem.as_bytes(), "t", false).unwrap();
        assert_eq!(one.len(), 1);
        let mut nul = pem.clone().into_bytes();
        nul.push(0);
        assert!(parse_pem_chain(&nul, "t", false).is_err());
        assert_eq!(parse_pem_chain(&nul, "t", true).unwrap().len(), 1);
        nul.push(0);
        assert!(parse_pem_chain(&nul, "t", true).is_err());
        let mut trailing = pem.clone();
        trailing.push_str(" x");
        assert!(parse_pem_chain(trailing.as_bytes(), "t", false).is_err());
        let five = pem.repeat(5);
        assert!(parse_pem_chain(five.as_bytes(), "t", false).is_err());
        let wrong_label = pem.replace("CERTIFICATE", "X509 CRL");
        assert!(parse_pem_chain(wrong_label.as_bytes(), "t", false).is_err());
    }

    #[test]
    fn small_uint_forms() {
        let int = |bytes: &[u8]| Any::new(Tag::Integer, bytes).unwrap();
        assert_eq!(small_uint(&int(&[5])), Ok(5));
        assert_eq!(small_uint(&int(&[0, 0x80])), Ok(0x80));
        assert_eq!(small_uint(&int(&[1, 2])), Ok(0x102));
        assert!(small_uint(&int(&[0x80])).is_err());
        assert!(small_uint(&int(&[1, 2, 3])).is_err());
        assert!(small_uint(&int(&[0, 5])).is_err());
    }
}
