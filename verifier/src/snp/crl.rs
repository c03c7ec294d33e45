//! AMD's certificate revocation list for a product's CA certificates (AMD
//! 57230 "VCEK Certificate and KDS Interface Specification": KDS serves it
//! at `GET /vcek/v1/{product}/crl`, DER, X.509 v2 CRL of RFC 5280
//! section 5, issued and signed by the product's ARK with RSASSA-PSS
//! SHA-384 as the ARK signs certificates).
//!
//! [`parse_crl`] parses strictly (size cap, DER that re-encodes to the
//! same bytes, no trailing bytes, v2, AMD's signature algorithm, no
//! critical extension it does not understand) into an [`SnpCrl`], which
//! tells its issuer, window and entries. Only [`SnpCrl::verify`] (issuer =
//! the ARK's subject, signature under the ARK's key) gives a
//! [`VerifiedCrl`], and only a verified list answers whether a certificate
//! is revoked. [`verify_crl`] does both steps.
//!
//! Scope: a CRL speaks for the certificates its issuer issued (RFC 5280
//! section 6.3.3 (b)), so the ARK's list covers the ASK/ASVK. A VCEK is
//! issued by the ASK and is outside it: [`VerifiedCrl::status_of`] says
//! so rather than matching serial numbers across issuers, which would be
//! meaningless (every VCEK seen so far has serial number 0).
//!
//! Time is an argument: [`VerifiedCrl::freshness`] reports where an
//! instant falls in thisUpdate..nextUpdate; nothing here reads a clock.

use const_oid::ObjectIdentifier;
use const_oid::db::rfc5912;
use der::{Decode, Encode, Reader};
use rsa::pkcs1::DecodeRsaPublicKey;
use sha2::{Digest, Sha384};
use time::OffsetDateTime;
use x509_cert::crl::CertificateList;
use x509_cert::ext::Extension;

use super::certs::{SnpCert, check_pss_sha384, format_unix};
use super::error::CertRole;

/// Largest CRL accepted (AMD's list only the CA certificates an ARK
/// issues; the cap is the one `bundle fetch` puts on Intel's CRLs).
pub const MAX_CRL_INPUT: usize = 256 * 1024;

/// CRL and entry extensions this module understands (RFC 5280 sections
/// 5.2 and 5.3): cRLNumber, authorityKeyIdentifier, reasonCode,
/// invalidityDate. A critical extension not in this list makes the CRL
/// unusable (RFC 5280 section 5.2): an indirect CRL's certificateIssuer
/// or a delta CRL indicator would change what the list means.
const UNDERSTOOD: [ObjectIdentifier; 4] = [
    ObjectIdentifier::new_unwrap("2.5.29.20"),
    ObjectIdentifier::new_unwrap("2.5.29.35"),
    ObjectIdentifier::new_unwrap("2.5.29.21"),
    ObjectIdentifier::new_unwrap("2.5.29.24"),
];

/// Why a CRL was refused; each variant is one check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CrlError {
    /// Larger than [`MAX_CRL_INPUT`].
    #[error("CRL is {len} bytes, more than {max}")]
    TooLarge { len: usize, max: usize },
    /// Not a DER `CertificateList`.
    #[error("CRL does not decode as a DER CertificateList: {reason}")]
    Decode { reason: String },
    /// Bytes after the `CertificateList`.
    #[error("CRL is followed by {count} trailing bytes")]
    TrailingBytes { count: usize },
    /// Decodes, but re-encodes to other bytes: not canonical DER, so the
    /// signed bytes are not certain.
    #[error("CRL is not canonical DER (it re-encodes to other bytes)")]
    NotCanonical,
    /// Not an X.509 v2 CRL.
    #[error("CRL version is {found}, not v2")]
    Version { found: String },
    /// A critical extension this module does not understand.
    #[error("CRL {place} has a critical extension {oid} that is not understood")]
    CriticalExtension {
        /// `list` or `entry <serial>`.
        place: String,
        oid: String,
    },
    /// The signature algorithm is not AMD's.
    #[error(
        "CRL signature algorithm is not RSASSA-PSS with SHA-384, MGF1-SHA-384, salt 48: {reason}"
    )]
    SignatureAlgorithm { reason: String },
    /// The issuer is not the ARK.
    #[error("CRL issuer ({issuer}) is not the ARK's subject ({ark})")]
    IssuerMismatch { issuer: String, ark: String },
    /// The ARK's key is not an RSA key.
    #[error("ARK public key is not RSA: {reason}")]
    ArkKey { reason: String },
    /// The signature does not verify under the ARK's key.
    #[error("CRL signature does not verify under the ARK's key: {reason}")]
    Signature { reason: String },
    /// A certificate of the chain is listed.
    #[error(
        "{role} serial {serial} is revoked by the CRL of {issuer} (revocation date {revoked_at})"
    )]
    Revoked {
        role: CertRole,
        /// Hex, as DER carries it.
        serial: String,
        issuer: String,
        revoked_at: String,
    },
}

/// One entry of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevokedEntry {
    /// The serial number's DER content bytes, in hex.
    pub serial: String,
    /// `YYYY-MM-DDTHH:MM:SSZ`.
    pub revoked_at: String,
}

/// What the list says about one certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Revocation {
    /// Issued by the CRL's issuer and listed.
    Revoked(RevokedEntry),
    /// Issued by the CRL's issuer and not listed.
    NotRevoked,
    /// Issued by someone else (a VCEK, issued by the ASK): the list says
    /// nothing about it.
    OutOfScope {
        /// The certificate's issuer.
        issuer: String,
    },
}

/// Where an instant falls in the list's thisUpdate..nextUpdate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Freshness {
    /// thisUpdate <= at <= nextUpdate (or no nextUpdate).
    Current,
    /// at < thisUpdate.
    NotYetIssued,
    /// nextUpdate < at: a newer list should exist.
    Stale,
}

/// A CRL that parsed with the structural checks; whose it is is not yet
/// known, so it answers no revocation question ([`SnpCrl::verify`]).
#[derive(Debug, Clone)]
pub struct SnpCrl {
    crl: CertificateList,
    issuer: String,
    this_update: OffsetDateTime,
    next_update: Option<OffsetDateTime>,
}

/// A CRL whose issuer and signature are the ARK's.
#[derive(Debug, Clone)]
pub struct VerifiedCrl(SnpCrl);

fn to_datetime(t: x509_cert::time::Time) -> Result<OffsetDateTime, CrlError> {
    let secs = i64::try_from(t.to_unix_duration().as_secs()).map_err(|e| CrlError::Decode {
        reason: format!("time out of range: {e}"),
    })?;
    OffsetDateTime::from_unix_timestamp(secs).map_err(|e| CrlError::Decode {
        reason: format!("time out of range: {e}"),
    })
}

fn check_critical(
    exts: Option<&Vec<Extension>>,
    place: impl Fn() -> String,
) -> Result<(), CrlError> {
    for ext in exts.into_iter().flatten() {
        if ext.critical && !UNDERSTOOD.contains(&ext.extn_id) {
            return Err(CrlError::CriticalExtension {
                place: place(),
                oid: ext.extn_id.to_string(),
            });
        }
    }
    Ok(())
}

/// Decodes `bytes` (DER) with the structural checks: everything except
/// whose list it is.
fn parse(bytes: &[u8]) -> Result<CertificateList, CrlError> {
    if bytes.len() > MAX_CRL_INPUT {
        return Err(CrlError::TooLarge {
            len: bytes.len(),
            max: MAX_CRL_INPUT,
        });
    }
    let decode = |e: der::Error| CrlError::Decode {
        reason: e.to_string(),
    };
    let mut reader = der::SliceReader::new(bytes).map_err(decode)?;
    let crl = CertificateList::decode(&mut reader).map_err(decode)?;
    let rest = usize::try_from(reader.remaining_len()).unwrap_or(usize::MAX);
    if rest != 0 {
        return Err(CrlError::TrailingBytes { count: rest });
    }
    if crl.to_der().map_err(decode)? != bytes {
        return Err(CrlError::NotCanonical);
    }
    let tbs = &crl.tbs_cert_list;
    if tbs.version != x509_cert::Version::V2 {
        return Err(CrlError::Version {
            found: format!("{:?}", tbs.version),
        });
    }
    let alg_err = |reason: String| CrlError::SignatureAlgorithm { reason };
    if crl.signature_algorithm != tbs.signature {
        return Err(alg_err("outer and TBS signature algorithms differ".into()));
    }
    check_pss_sha384(&crl.signature_algorithm).map_err(|e| alg_err(e.to_string()))?;
    check_critical(tbs.crl_extensions.as_ref(), || "list".to_string())?;
    for entry in tbs.revoked_certificates.iter().flatten() {
        check_critical(entry.crl_entry_extensions.as_ref(), || {
            format!("entry {}", hex::encode(entry.serial_number.as_bytes()))
        })?;
    }
    Ok(crl)
}

/// Verifies the RSASSA-PSS SHA-384 signature (salt 48) on `crl` with the
/// ARK's key.
fn verify_signature(crl: &CertificateList, ark: &SnpCert) -> Result<(), CrlError> {
    let spki = &ark.x509().tbs_certificate.subject_public_key_info;
    let key_err = |reason: String| CrlError::ArkKey { reason };
    if spki.algorithm.oid != rfc5912::RSA_ENCRYPTION {
        return Err(key_err(format!(
            "algorithm {} is not rsaEncryption",
            spki.algorithm.oid
        )));
    }
    let key_bytes = spki
        .subject_public_key
        .as_bytes()
        .ok_or_else(|| key_err("public key BIT STRING has unused bits".into()))?;
    let key = rsa::RsaPublicKey::from_pkcs1_der(key_bytes).map_err(|e| key_err(e.to_string()))?;
    let sig_err = |reason: String| CrlError::Signature { reason };
    let signature = crl
        .signature
        .as_bytes()
        .ok_or_else(|| sig_err("signature BIT STRING has unused bits".into()))?;
    let tbs = crl
        .tbs_cert_list
        .to_der()
        .map_err(|e| sig_err(e.to_string()))?;
    key.verify(
        rsa::Pss::new_with_salt::<Sha384>(48),
        &Sha384::digest(&tbs),
        signature,
    )
    .map_err(|e| sig_err(e.to_string()))
}

/// Parses `bytes` (a DER CRL) with the structural checks: size, DER
/// (canonical, no trailing bytes), v2, AMD's signature algorithm, no
/// critical extension that is not understood.
pub fn parse_crl(bytes: &[u8]) -> Result<SnpCrl, CrlError> {
    let crl = parse(bytes)?;
    let tbs = &crl.tbs_cert_list;
    let this_update = to_datetime(tbs.this_update)?;
    let next_update = tbs.next_update.map(to_datetime).transpose()?;
    Ok(SnpCrl {
        issuer: tbs.issuer.to_string(),
        this_update,
        next_update,
        crl,
    })
}

/// [`parse_crl`], then [`SnpCrl::verify`] with `ark`.
pub fn verify_crl(bytes: &[u8], ark: &SnpCert) -> Result<VerifiedCrl, CrlError> {
    parse_crl(bytes)?.verify(ark)
}

impl SnpCrl {
    /// Checks that `ark` issued and signed the list. `ark` is whatever ARK
    /// the caller trusts (AMD's embedded one, or the one a verified chain
    /// ends in); this function does not judge it.
    pub fn verify(self, ark: &SnpCert) -> Result<VerifiedCrl, CrlError> {
        if self.crl.tbs_cert_list.issuer != ark.x509().tbs_certificate.subject {
            return Err(CrlError::IssuerMismatch {
                issuer: self.issuer,
                ark: ark.subject(),
            });
        }
        verify_signature(&self.crl, ark)?;
        Ok(VerifiedCrl(self))
    }

    /// The issuer, RFC 4514.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }
    /// thisUpdate.
    pub fn this_update(&self) -> OffsetDateTime {
        self.this_update
    }
    /// nextUpdate, if the list has one.
    pub fn next_update(&self) -> Option<OffsetDateTime> {
        self.next_update
    }

    /// Where `at` falls in thisUpdate..nextUpdate.
    pub fn freshness(&self, at: OffsetDateTime) -> Freshness {
        if at < self.this_update {
            Freshness::NotYetIssued
        } else if self.next_update.is_some_and(|n| n < at) {
            Freshness::Stale
        } else {
            Freshness::Current
        }
    }

    /// Every entry, in the list's order.
    pub fn entries(&self) -> Vec<RevokedEntry> {
        self.crl
            .tbs_cert_list
            .revoked_certificates
            .iter()
            .flatten()
            .map(|e| RevokedEntry {
                serial: hex::encode(e.serial_number.as_bytes()),
                revoked_at: format_unix(
                    i64::try_from(e.revocation_date.to_unix_duration().as_secs())
                        .unwrap_or(i64::MAX),
                ),
            })
            .collect()
    }
}

impl std::ops::Deref for VerifiedCrl {
    type Target = SnpCrl;
    fn deref(&self) -> &SnpCrl {
        &self.0
    }
}

impl VerifiedCrl {
    /// The entry for `serial` (a serial number's DER content bytes), if
    /// listed. Serial numbers are unique per issuer only: see
    /// [`Self::status_of`] for a certificate.
    pub fn entry(&self, serial: &[u8]) -> Option<RevokedEntry> {
        let hex = hex::encode(serial);
        self.entries().into_iter().find(|e| e.serial == hex)
    }

    /// What the list says about `cert`: revoked or not when the CRL's
    /// issuer issued it, else out of scope.
    pub fn status_of(&self, cert: &SnpCert) -> Revocation {
        let tbs = &cert.x509().tbs_certificate;
        if tbs.issuer != self.0.crl.tbs_cert_list.issuer {
            return Revocation::OutOfScope {
                issuer: cert.issuer(),
            };
        }
        match self.entry(tbs.serial_number.as_bytes()) {
            Some(e) => Revocation::Revoked(e),
            None => Revocation::NotRevoked,
        }
    }

    /// [`Self::status_of`], with a listed certificate an error naming
    /// `role` and its serial.
    pub fn check_not_revoked(
        &self,
        cert: &SnpCert,
        role: CertRole,
    ) -> Result<Revocation, CrlError> {
        match self.status_of(cert) {
            Revocation::Revoked(e) => Err(CrlError::Revoked {
                role,
                serial: e.serial,
                issuer: self.0.issuer.clone(),
                revoked_at: e.revoked_at,
            }),
            other => Ok(other),
        }
    }

    /// Checks that the list revokes neither the ASK/ASVK of `pair` nor
    /// `leaf` (a VCEK/VLEK is out of the ARK's scope, [`Self::status_of`]:
    /// checked for the day an issuer's list does cover it). `pair.ark` is
    /// taken to be the ARK the list verified under.
    pub fn check_chain(
        &self,
        pair: &super::CaPair,
        leaf: Option<&SnpCert>,
    ) -> Result<(), CrlError> {
        self.check_not_revoked(&pair.ask, CertRole::Ask)?;
        if let Some(leaf) = leaf {
            self.check_not_revoked(leaf, CertRole::Leaf)?;
        }
        Ok(())
    }
}

/// Test CRLs and a stand-in ARK: RSA-2048 keys (made once per test
/// binary), self-signed certificates and CRLs signed with RSASSA-PSS
/// SHA-384 as AMD signs them.
#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
pub(crate) mod testing {
    use std::sync::OnceLock;

    use der::asn1::BitString;
    use der::{Decode, Encode};
    use rsa::pkcs8::EncodePublicKey;
    use rsa::{Pss, RsaPrivateKey};
    use sha2::{Digest, Sha384};
    use spki::{AlgorithmIdentifierOwned, SubjectPublicKeyInfoOwned};
    use std::str::FromStr;
    use time::OffsetDateTime;
    use x509_cert::crl::{CertificateList, RevokedCert, TbsCertList};
    use x509_cert::ext::Extension;
    use x509_cert::name::Name;
    use x509_cert::serial_number::SerialNumber;
    use x509_cert::time::{Time, Validity};
    use x509_cert::{Certificate, TbsCertificate, Version};

    use crate::snp::LeafKind;
    use crate::snp::certs::SnpCert;
    use crate::snp::error::CertRole;
    use crate::snp::roots::{Product, embedded_ca};

    /// `ring`'s system randomness for the `rsa` crate (its own OS
    /// generator is behind a feature the workspace does not enable).
    pub(crate) struct Rng(ring::rand::SystemRandom);
    impl rsa::rand_core::RngCore for Rng {
        fn next_u32(&mut self) -> u32 {
            rsa::rand_core::impls::next_u32_via_fill(self)
        }
        fn next_u64(&mut self) -> u64 {
            rsa::rand_core::impls::next_u64_via_fill(self)
        }
        fn fill_bytes(&mut self, dest: &mut [u8]) {
            use ring::rand::SecureRandom as _;
            self.0.fill(dest).unwrap();
        }
        fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rsa::rand_core::Error> {
            self.fill_bytes(dest);
            Ok(())
        }
    }
    impl rsa::rand_core::CryptoRng for Rng {}

    pub(crate) fn rng() -> Rng {
        Rng(ring::rand::SystemRandom::new())
    }

    /// Two RSA-2048 keys: the stand-in ARK's and another one.
    pub(crate) fn keys() -> &'static (RsaPrivateKey, RsaPrivateKey) {
        static KEYS: OnceLock<(RsaPrivateKey, RsaPrivateKey)> = OnceLock::new();
        KEYS.get_or_init(|| {
            (
                RsaPrivateKey::new(&mut rng(), 2048).unwrap(),
                RsaPrivateKey::new(&mut rng(), 2048).unwrap(),
            )
        })
    }

    /// AMD's RSASSA-PSS SHA-384 algorithm identifier, exactly as the
    /// Milan ARK spells it.
    pub(crate) fn pss() -> AlgorithmIdentifierOwned {
        embedded_ca(Product::Milan, LeafKind::Vcek)
            .unwrap()
            .ark
            .x509()
            .signature_algorithm
            .clone()
    }

    pub(crate) fn time(unix: i64) -> Time {
        Time::UtcTime(
            der::asn1::UtcTime::from_unix_duration(std::time::Duration::from_secs(
                u64::try_from(unix).unwrap(),
            ))
            .unwrap(),
        )
    }

    pub(crate) fn sign(tbs: &[u8], key: &RsaPrivateKey) -> BitString {
        let sig = key
            .sign_with_rng(
                &mut rng(),
                Pss::new_with_salt::<Sha384>(48),
                &Sha384::digest(tbs),
            )
            .unwrap();
        BitString::from_bytes(&sig).unwrap()
    }

    /// A certificate `subject` issued by `issuer`, signed by `signer`,
    /// certifying `key`'s public half.
    pub(crate) fn cert(
        subject: &str,
        issuer: &str,
        serial: &[u8],
        key: &RsaPrivateKey,
        signer: &RsaPrivateKey,
    ) -> Vec<u8> {
        let spki_der = key.to_public_key().to_public_key_der().unwrap();
        let tbs = TbsCertificate {
            version: Version::V3,
            serial_number: SerialNumber::new(serial).unwrap(),
            signature: pss(),
            issuer: Name::from_str(issuer).unwrap(),
            validity: Validity {
                not_before: time(1_600_000_000),
                not_after: time(2_400_000_000),
            },
            subject: Name::from_str(subject).unwrap(),
            subject_public_key_info: SubjectPublicKeyInfoOwned::from_der(spki_der.as_bytes())
                .unwrap(),
            issuer_unique_id: None,
            subject_unique_id: None,
            extensions: None,
        };
        let signature = sign(&tbs.to_der().unwrap(), signer);
        Certificate {
            tbs_certificate: tbs,
            signature_algorithm: pss(),
            signature,
        }
        .to_der()
        .unwrap()
    }

    pub(crate) const ARK_NAME: &str = "CN=ARK-Test,O=kolm test";
    pub(crate) const ASK_NAME: &str = "CN=SEV-Test,O=kolm test";
    /// The stand-in ASK's serial number (DER content bytes).
    pub(crate) const ASK_SERIAL: &[u8] = &[0x01, 0x00, 0x01];

    /// The stand-in ARK (self-signed with the first key).
    pub(crate) fn ark() -> SnpCert {
        let (k, _) = keys();
        SnpCert::from_der(
            &cert(ARK_NAME, ARK_NAME, &[0x01, 0x00, 0x00], k, k),
            CertRole::Ark,
        )
        .unwrap()
    }

    /// An ASK issued by the stand-in ARK (its key is the second one).
    pub(crate) fn ask() -> SnpCert {
        let (ark_key, ask_key) = keys();
        SnpCert::from_der(
            &cert(ASK_NAME, ARK_NAME, ASK_SERIAL, ask_key, ark_key),
            CertRole::Ask,
        )
        .unwrap()
    }

    /// ASK then ARK, PEM, as KDS serves `cert_chain`.
    pub(crate) fn chain_pem() -> Vec<u8> {
        let pem = |der: &[u8]| {
            der::pem::encode_string("CERTIFICATE", der::pem::LineEnding::LF, der).unwrap()
        };
        format!("{}{}", pem(ask().der()), pem(ark().der())).into_bytes()
    }

    /// What a test CRL looks like.
    pub(crate) struct Spec {
        pub issuer: &'static str,
        pub this_update: i64,
        pub next_update: Option<i64>,
        pub revoked: Vec<Vec<u8>>,
        pub extensions: Option<Vec<Extension>>,
        /// Sign with the second key instead of the ARK's.
        pub wrong_key: bool,
    }

    impl Default for Spec {
        fn default() -> Spec {
            Spec {
                issuer: ARK_NAME,
                this_update: 1_700_000_000,
                next_update: Some(1_800_000_000),
                revoked: Vec::new(),
                extensions: None,
                wrong_key: false,
            }
        }
    }

    /// A CRL of `spec`, DER.
    pub(crate) fn crl(spec: Spec) -> Vec<u8> {
        let revoked = spec
            .revoked
            .iter()
            .map(|s| RevokedCert {
                serial_number: SerialNumber::new(s).unwrap(),
                revocation_date: time(spec.this_update - 86_400),
                crl_entry_extensions: None,
            })
            .collect::<Vec<_>>();
        let tbs = TbsCertList {
            version: Version::V2,
            signature: pss(),
            issuer: Name::from_str(spec.issuer).unwrap(),
            this_update: time(spec.this_update),
            next_update: spec.next_update.map(time),
            revoked_certificates: (!revoked.is_empty()).then_some(revoked),
            crl_extensions: spec.extensions,
        };
        let (ark_key, other) = keys();
        let signer = if spec.wrong_key { other } else { ark_key };
        let signature = sign(&tbs.to_der().unwrap(), signer);
        CertificateList {
            tbs_cert_list: tbs,
            signature_algorithm: pss(),
            signature,
        }
        .to_der()
        .unwrap()
    }

    /// The same instant as [`Spec::this_update`]'s default, plus `days`.
    pub(crate) fn at(days: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_700_000_000 + days * 86_400).unwrap()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::testing::{self, Spec, at, crl};
    use super::*;

    #[test]
    fn a_crl_signed_by_the_ark_verifies_and_reports_its_window() {
        let ark = testing::ark();
        let v = verify_crl(&crl(Spec::default()), &ark).unwrap();
        assert_eq!(v.issuer(), "CN=ARK-Test,O=kolm test");
        assert_eq!(v.this_update().unix_timestamp(), 1_700_000_000);
        assert_eq!(v.next_update().unwrap().unix_timestamp(), 1_800_000_000);
        assert_eq!(v.freshness(at(1)), Freshness::Current);
        assert_eq!(v.freshness(at(-1)), Freshness::NotYetIssued);
        assert!(v.entries().is_empty());
        assert_eq!(
            v.check_not_revoked(&testing::ask(), CertRole::Ask).unwrap(),
            Revocation::NotRevoked
        );
        // A list without nextUpdate never goes stale.
        let v = verify_crl(
            &crl(Spec {
                next_update: None,
                ..Spec::default()
            }),
            &ark,
        )
        .unwrap();
        assert_eq!(v.freshness(at(100_000)), Freshness::Current);
    }

    #[test]
    fn a_next_update_in_the_past_is_reported_stale() {
        let v = verify_crl(
            &crl(Spec {
                next_update: Some(1_700_000_000 + 30 * 86_400),
                ..Spec::default()
            }),
            &testing::ark(),
        )
        .unwrap();
        assert_eq!(v.freshness(at(29)), Freshness::Current);
        assert_eq!(v.freshness(at(31)), Freshness::Stale);
    }

    #[test]
    fn a_listed_ask_is_revoked_naming_its_serial() {
        let v = verify_crl(
            &crl(Spec {
                revoked: vec![vec![0x05], testing::ASK_SERIAL.to_vec()],
                ..Spec::default()
            }),
            &testing::ark(),
        )
        .unwrap();
        assert_eq!(v.entries().len(), 2);
        assert!(v.entry(&[0x05]).is_some());
        assert!(v.entry(&[0x06]).is_none());
        let e = v
            .check_not_revoked(&testing::ask(), CertRole::Ask)
            .unwrap_err();
        assert!(
            matches!(&e, CrlError::Revoked { serial, .. } if serial == "010001"),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "ASK/ASVK serial 010001 is revoked by the CRL of CN=ARK-Test,O=kolm test \
             (revocation date 2023-11-13T22:13:20Z)"
        );
        let pair = crate::snp::CaPair {
            ask: testing::ask(),
            ark: testing::ark(),
        };
        assert_eq!(v.check_chain(&pair, None).unwrap_err(), e);
        // A list that names other serials passes the chain.
        let v = verify_crl(
            &crl(Spec {
                revoked: vec![vec![0x05]],
                ..Spec::default()
            }),
            &pair.ark,
        )
        .unwrap();
        v.check_chain(&pair, None).unwrap();
        // A leaf the list does cover (issued by the ARK) and lists is
        // refused as the leaf.
        let (ark_key, ask_key) = testing::keys();
        let leaf = SnpCert::from_der(
            &testing::cert("CN=SEV-VCEK", testing::ARK_NAME, &[0x05], ask_key, ark_key),
            CertRole::Leaf,
        )
        .unwrap();
        let e = v.check_chain(&pair, Some(&leaf)).unwrap_err();
        assert!(
            matches!(&e, CrlError::Revoked { role: CertRole::Leaf, serial, .. } if serial == "05"),
            "{e}"
        );
    }

    #[test]
    fn a_certificate_of_another_issuer_is_out_of_scope_even_with_a_listed_serial() {
        // The ARK's self-signed certificate is in scope; a VCEK-like
        // certificate issued by the ASK, with a serial the list carries,
        // is not: serials are unique per issuer only.
        let (_, ask_key) = testing::keys();
        let leaf = SnpCert::from_der(
            &testing::cert("CN=SEV-VCEK", testing::ASK_NAME, &[0x00], ask_key, ask_key),
            CertRole::Leaf,
        )
        .unwrap();
        let v = verify_crl(
            &crl(Spec {
                revoked: vec![vec![0x00]],
                ..Spec::default()
            }),
            &testing::ark(),
        )
        .unwrap();
        assert_eq!(
            v.check_not_revoked(&leaf, CertRole::Leaf).unwrap(),
            Revocation::OutOfScope {
                issuer: "CN=SEV-Test,O=kolm test".into()
            }
        );
    }

    #[test]
    fn a_crl_of_another_issuer_is_refused() {
        let e = verify_crl(
            &crl(Spec {
                issuer: "CN=ARK-Other,O=kolm test",
                ..Spec::default()
            }),
            &testing::ark(),
        )
        .unwrap_err();
        assert!(matches!(e, CrlError::IssuerMismatch { .. }), "{e}");
        // AMD's Milan ARK did not issue the stand-in's list either.
        let milan =
            crate::snp::roots::embedded_ca(crate::snp::Product::Milan, crate::snp::LeafKind::Vcek)
                .unwrap();
        let e = verify_crl(&crl(Spec::default()), &milan.ark).unwrap_err();
        assert!(matches!(e, CrlError::IssuerMismatch { .. }), "{e}");
    }

    #[test]
    fn a_bad_signature_is_refused() {
        let e = verify_crl(
            &crl(Spec {
                wrong_key: true,
                ..Spec::default()
            }),
            &testing::ark(),
        )
        .unwrap_err();
        assert!(matches!(e, CrlError::Signature { .. }), "{e}");
        // thisUpdate moved by one second after signing.
        let mut der = crl(Spec::default());
        let time = b"231114221320Z";
        let at = der.windows(time.len()).position(|w| w == time).unwrap();
        der[at + 11] = b'1';
        let e = verify_crl(&der, &testing::ark()).unwrap_err();
        assert!(matches!(e, CrlError::Signature { .. }), "{e}");
    }

    #[test]
    fn trailing_bytes_and_oversize_input_are_refused() {
        let mut der = crl(Spec::default());
        der.extend_from_slice(&[0, 0]);
        assert_eq!(
            verify_crl(&der, &testing::ark()).unwrap_err(),
            CrlError::TrailingBytes { count: 2 }
        );
        let e = verify_crl(&vec![0x30; MAX_CRL_INPUT + 1], &testing::ark()).unwrap_err();
        assert!(matches!(e, CrlError::TooLarge { .. }), "{e}");
        let e = verify_crl(b"not a crl", &testing::ark()).unwrap_err();
        assert!(matches!(e, CrlError::Decode { .. }), "{e}");
    }

    #[test]
    fn unknown_critical_extensions_and_other_algorithms_are_refused() {
        let critical = |oid: &str| Extension {
            extn_id: ObjectIdentifier::new_unwrap(oid),
            critical: true,
            extn_value: der::asn1::OctetString::new(vec![0x05, 0x00]).unwrap(),
        };
        // deltaCRLIndicator: a delta list is not the whole list.
        let e = verify_crl(
            &crl(Spec {
                extensions: Some(vec![critical("2.5.29.27")]),
                ..Spec::default()
            }),
            &testing::ark(),
        )
        .unwrap_err();
        assert_eq!(
            e,
            CrlError::CriticalExtension {
                place: "list".into(),
                oid: "2.5.29.27".into()
            }
        );
        // A cRLNumber marked critical is understood.
        let number = Extension {
            extn_value: der::asn1::OctetString::new(vec![0x02, 0x01, 0x07]).unwrap(),
            ..critical("2.5.29.20")
        };
        assert!(
            verify_crl(
                &crl(Spec {
                    extensions: Some(vec![number]),
                    ..Spec::default()
                }),
                &testing::ark()
            )
            .is_ok()
        );
        // Intel's root CA CRL (ECDSA) is not AMD's kind of list.
        if let Some(root) = kolm_testkit::samples("tdx/expected.json") {
            let intel =
                std::fs::read(root.join("tdx/v4-50806f-gotdxguest-2023-06/raw/root-ca-crl.der"))
                    .unwrap();
            let e = verify_crl(&intel, &testing::ark()).unwrap_err();
            assert!(matches!(e, CrlError::SignatureAlgorithm { .. }), "{e}");
        }
    }
}
