//! The certificate chain `cabundle[0]` (root) -> ... -> `certificate`
//! (leaf), checked against the embedded AWS Nitro Enclaves Root G1 (or,
//! for platform `simulated` only, a kolm sim root the caller names:
//! [`Anchor`]).
//!
//! Path validation after RFC 5280 §6.1, for the one shape AWS issues:
//! the root is pinned by its exact bytes (never by name); each certificate
//! must be DER, X.509 v3, signed by the one before it with ECDSA P-384 /
//! SHA-384 (P-256 / SHA-256 is also accepted, nothing else), name its
//! issuer by the issuer's exact subject bytes, carry no duplicate and no
//! unrecognised critical extension; every issuer must be a CA
//! (basicConstraints cA, keyCertSign if keyUsage is present, path length
//! respected); the leaf must hold a P-384 key and, if it has keyUsage,
//! digitalSignature. Validity against the verification instant is the
//! caller's `nitro.freshness` check, from [`ChainOutcome::validity`].

use der::asn1::{Ia5StringRef, PrintableStringRef, Utf8StringRef};
use der::{Decode as _, Encode as _, Reader as _, Tag, Tagged as _};
use ring::signature::{self, UnparsedPublicKey, VerificationAlgorithm};
use time::OffsetDateTime;
use x509_cert::Certificate;
use x509_cert::certificate::Version;
use x509_cert::ext::pkix::{BasicConstraints, KeyUsage};
use x509_cert::name::Name;

use const_oid::ObjectIdentifier;
use const_oid::db::rfc5280::{ID_CE_BASIC_CONSTRAINTS, ID_CE_KEY_USAGE};
use const_oid::db::rfc5912::{
    ECDSA_WITH_SHA_256, ECDSA_WITH_SHA_384, ID_EC_PUBLIC_KEY, SECP_256_R_1, SECP_384_R_1,
};

use super::NitroDocument;
use super::root::AWS_NITRO_ROOT_G1_DER;

/// The root a chain is pinned to, by its exact bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Anchor<'a> {
    /// The embedded AWS Nitro Enclaves Root G1: platform `nitro`.
    AwsG1,
    /// A kolm sim root the caller trusts: platform `simulated` only.
    Sim(&'a crate::sim::SimRoot),
}

impl Anchor<'_> {
    /// The pinned bytes.
    pub(crate) fn root_der(&self) -> &[u8] {
        match self {
            Anchor::AwsG1 => AWS_NITRO_ROOT_G1_DER,
            Anchor::Sim(r) => r.der(),
        }
    }

    /// SHA-256 of the pinned bytes, hex.
    pub(crate) fn sha256_hex(&self) -> String {
        match self {
            Anchor::AwsG1 => super::root::AWS_NITRO_ROOT_G1_SHA256.to_string(),
            Anchor::Sim(r) => hex::encode(r.sha256()),
        }
    }

    /// How reports name it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Anchor::AwsG1 => "the pinned AWS Nitro Enclaves Root G1",
            Anchor::Sim(_) => "the kolm sim root given with --dangerous-trust-sim-root",
        }
    }
}

/// Why one certificate of the chain is rejected: the certificate's label
/// (`cabundle[1]`, `certificate`, `root`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{label}: {defect}")]
pub(crate) struct CertError {
    /// How reports name the certificate.
    label: String,
    /// What is wrong with it.
    defect: CertDefect,
}

/// What is wrong with one certificate, structurally.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum CertDefect {
    #[error("not an X.509 certificate: {error}")]
    NotX509 { error: String },
    #[error("TBSCertificate: {error}")]
    Tbs { error: String },
    #[error("TBSCertificate is not DER-encoded")]
    TbsNotDer,
    #[error("version {version:?}, expected v3")]
    Version { version: Version },
    #[error("signature algorithm inside and outside the TBSCertificate differ")]
    SignatureAlgorithmsDiffer,
    #[error(
        "signature algorithm {oid} is not ecdsa-with-SHA384 or ecdsa-with-SHA256 \
         (without parameters)"
    )]
    SignatureAlgorithm { oid: ObjectIdentifier },
    #[error("signature BIT STRING has unused bits")]
    SignatureUnusedBits,
    #[error("public key algorithm {oid} is not id-ecPublicKey")]
    KeyAlgorithm { oid: ObjectIdentifier },
    #[error("EC public key without a named curve")]
    NoNamedCurve,
    #[error("curve {oid} is not P-384 or P-256")]
    Curve { oid: ObjectIdentifier },
    #[error("public key is not an uncompressed {curve:?} point")]
    Point { curve: Curve },
    #[error("extension {oid} appears twice")]
    DuplicateExtension { oid: ObjectIdentifier },
    #[error("basicConstraints: {error}")]
    BasicConstraints { error: String },
    #[error("keyUsage: {error}")]
    KeyUsage { error: String },
    #[error("unrecognised critical extension {oid}")]
    CriticalExtension { oid: ObjectIdentifier },
    #[error("notBefore out of range")]
    NotBeforeRange,
    #[error("notAfter out of range")]
    NotAfterRange,
    #[error("notAfter is before notBefore")]
    ValidityInverted,
    #[error("issuer: {error}")]
    Issuer { error: String },
    #[error("subject: {error}")]
    Subject { error: String },
}

/// Why a certificate may not issue the one below it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum IssuerError {
    #[error("{label}: issues a certificate but is not a CA (basicConstraints cA)")]
    NotCa { label: String },
    #[error("{label}: pathLenConstraint {max} but {below} intermediates follow")]
    PathLength {
        label: String,
        max: u8,
        below: usize,
    },
    #[error("{label}: keyUsage lacks keyCertSign")]
    NoKeyCertSign { label: String },
}

/// Why a certificate's signature by its issuer does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum SignatureError {
    #[error("{alg:?} with an issuer key on {curve:?} is not accepted")]
    Unaccepted { alg: SigAlg, curve: Curve },
    #[error("bad signature")]
    Bad,
}

/// Why a certificate is not fit to pin as a chain's root ([`check_root`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum RootError {
    #[error("{error}")]
    Certificate { error: CertError },
    #[error("root: not self-issued (issuer is not the subject)")]
    NotSelfIssued,
    #[error("{error}")]
    Issuer { error: IssuerError },
    #[error("root: self-signature: {error}")]
    SelfSignature { error: SignatureError },
}

/// How reports name the leaf certificate.
const LEAF_LABEL: &str = "certificate (leaf)";

/// An elliptic curve the chain may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Curve {
    P256,
    P384,
}

/// An ECDSA signature algorithm the chain may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SigAlg {
    EcdsaSha256,
    EcdsaSha384,
}

/// One certificate, parsed and structurally checked.
#[derive(Debug)]
pub(crate) struct ParsedCert {
    label: String,
    tbs_der: Vec<u8>,
    issuer_der: Vec<u8>,
    subject_der: Vec<u8>,
    subject: Name,
    sig_alg: SigAlg,
    signature: Vec<u8>,
    curve: Curve,
    /// Uncompressed SEC1 point.
    point: Vec<u8>,
    pub(crate) not_before: OffsetDateTime,
    pub(crate) not_after: OffsetDateTime,
    basic_constraints: Option<BasicConstraints>,
    key_usage: Option<KeyUsage>,
}

/// What the chain walk found.
#[derive(Debug)]
pub(crate) struct ChainOutcome {
    /// `cabundle[0]` is byte-equal to the anchor.
    pub(crate) root_pinned: bool,
    /// Every certificate parsed and every signature (root self-signature
    /// included) verified.
    pub(crate) sig_ok: bool,
    /// The first chain failure, if any.
    pub(crate) failure: Option<String>,
    /// Each certificate, root first, leaf last, when all of them parsed.
    pub(crate) certs: Vec<ParsedCert>,
}

impl ChainOutcome {
    /// `(label, notBefore, notAfter)` of each certificate, root first.
    pub(crate) fn validity(&self) -> impl Iterator<Item = (&str, OffsetDateTime, OffsetDateTime)> {
        self.certs
            .iter()
            .map(|c| (c.label.as_str(), c.not_before, c.not_after))
    }

    /// `[max notBefore, min notAfter]` over the chain.
    pub(crate) fn window(&self) -> Option<(OffsetDateTime, OffsetDateTime)> {
        let nb = self.certs.iter().map(|c| c.not_before).max()?;
        let na = self.certs.iter().map(|c| c.not_after).min()?;
        Some((nb, na))
    }

    pub(crate) fn leaf(&self) -> Option<&ParsedCert> {
        self.certs.last()
    }
}

impl ParsedCert {
    /// The leaf's uncompressed P-384 point, for the COSE signature.
    pub(crate) fn p384_point(&self) -> Option<&[u8]> {
        (self.curve == Curve::P384).then_some(self.point.as_slice())
    }

    /// The subject as an RFC 4514 string.
    pub(crate) fn subject_rfc4514(&self) -> String {
        rfc4514(&self.subject)
    }
}

/// Walks `cabundle[0]` -> ... -> `certificate`, `cabundle[0]` pinned to
/// `anchor`.
pub(crate) fn verify_chain(doc: &NitroDocument, anchor: Anchor<'_>) -> ChainOutcome {
    let root_pinned = doc
        .cabundle()
        .first()
        .is_some_and(|root| root.as_slice() == anchor.root_der());
    let mut out = ChainOutcome {
        root_pinned,
        sig_ok: false,
        failure: None,
        certs: Vec::new(),
    };
    let ders = doc
        .cabundle()
        .iter()
        .enumerate()
        .map(|(i, d)| (format!("cabundle[{i}]"), d.as_slice()))
        .chain(std::iter::once((
            "certificate".to_string(),
            doc.certificate(),
        )));
    for (label, der) in ders {
        match parse_cert(label, der) {
            Ok(c) => out.certs.push(c),
            Err(e) => {
                out.certs.clear();
                out.failure = Some(match root_pinned {
                    true => e.to_string(),
                    false => format!("{}; {e}", root_mismatch(doc, anchor)),
                });
                return out;
            }
        }
    }

    let mut failures: Vec<String> = Vec::new();
    if !root_pinned {
        failures.push(root_mismatch(doc, anchor));
    }
    let mut sig_ok = true;
    if let Some(root) = out.certs.first()
        && let Err(e) = verify_signed_by(root, root)
    {
        sig_ok = false;
        failures.push(format!("cabundle[0] self-signature: {e}"));
    }
    let n = out.certs.len();
    for (j, pair) in out.certs.windows(2).enumerate() {
        let [parent, child] = pair else { continue };
        if child.issuer_der != parent.subject_der {
            failures.push(format!(
                "{}: issuer is not the subject of {} ({})",
                child.label,
                parent.label,
                parent.subject_rfc4514()
            ));
        }
        if let Err(e) = check_issuer(parent, n.saturating_sub(2).saturating_sub(j)) {
            failures.push(e.to_string());
        }
        if let Err(e) = verify_signed_by(child, parent) {
            sig_ok = false;
            failures.push(format!(
                "{}: signature by {} does not verify: {e}",
                child.label, parent.label
            ));
        }
    }
    if let Some(leaf) = out.certs.last() {
        if leaf.curve != Curve::P384 {
            failures.push(format!(
                "{LEAF_LABEL}: the key is not P-384, which ES384 needs"
            ));
        }
        if leaf.key_usage.is_some_and(|ku| !ku.digital_signature()) {
            failures.push(format!("{LEAF_LABEL}: keyUsage lacks digitalSignature"));
        }
    }
    out.sig_ok = sig_ok;
    out.failure = failures.into_iter().next();
    out
}

/// A certificate fit to pin as a chain's root: it parses under the rules
/// above, is a CA that may sign certificates, and its self-signature
/// verifies. Returns its subject (RFC 4514).
pub(crate) fn check_root(der: &[u8]) -> Result<String, RootError> {
    let root = parse_cert("root".into(), der).map_err(|error| RootError::Certificate { error })?;
    if root.issuer_der != root.subject_der {
        return Err(RootError::NotSelfIssued);
    }
    check_issuer(&root, 0).map_err(|error| RootError::Issuer { error })?;
    verify_signed_by(&root, &root).map_err(|error| RootError::SelfSignature { error })?;
    Ok(root.subject_rfc4514())
}

fn root_mismatch(doc: &NitroDocument, anchor: Anchor<'_>) -> String {
    use sha2::{Digest as _, Sha256};
    let first = doc.cabundle().first();
    let found = first
        .map(|r| hex::encode(Sha256::digest(r)))
        .unwrap_or_default();
    // Say so when a kolm sim root stands where AWS's should: the sim
    // root never stands in for AWS (only platform `simulated` takes one).
    let sim_note = match (anchor, first.map(|r| crate::sim::names_a_sim_root(r))) {
        (Anchor::AwsG1, Some(true)) => {
            "; it is a kolm SIMULATED TEE root, which never stands in for AWS's (simulated \
             evidence is platform `simulated`)"
        }
        _ => "",
    };
    format!(
        "cabundle[0] is not {} (sha256 {found}, expected {}){sim_note}",
        anchor.name(),
        anchor.sha256_hex()
    )
}

/// Checks that `parent` may issue a certificate followed by `below`
/// further intermediates (leaf excluded).
fn check_issuer(parent: &ParsedCert, below: usize) -> Result<(), IssuerError> {
    let label = || parent.label.clone();
    let Some(bc) = parent.basic_constraints.as_ref().filter(|bc| bc.ca) else {
        return Err(IssuerError::NotCa { label: label() });
    };
    if let Some(max) = bc.path_len_constraint
        && below > usize::from(max)
    {
        return Err(IssuerError::PathLength {
            label: label(),
            max,
            below,
        });
    }
    if parent.key_usage.is_some_and(|ku| !ku.key_cert_sign()) {
        return Err(IssuerError::NoKeyCertSign { label: label() });
    }
    Ok(())
}

fn verify_signed_by(child: &ParsedCert, issuer: &ParsedCert) -> Result<(), SignatureError> {
    let alg: &'static dyn VerificationAlgorithm = match (child.sig_alg, issuer.curve) {
        (SigAlg::EcdsaSha384, Curve::P384) => &signature::ECDSA_P384_SHA384_ASN1,
        (SigAlg::EcdsaSha256, Curve::P256) => &signature::ECDSA_P256_SHA256_ASN1,
        (alg, curve) => return Err(SignatureError::Unaccepted { alg, curve }),
    };
    UnparsedPublicKey::new(alg, &issuer.point)
        .verify(&child.tbs_der, &child.signature)
        .map_err(|_| SignatureError::Bad)
}

fn parse_cert(label: String, der: &[u8]) -> Result<ParsedCert, CertError> {
    let err = |defect: CertDefect| CertError {
        label: label.clone(),
        defect,
    };
    let cert = Certificate::from_der(der).map_err(|e| {
        err(CertDefect::NotX509 {
            error: e.to_string(),
        })
    })?;
    let tbs_der = raw_tbs(der).map_err(|e| {
        err(CertDefect::Tbs {
            error: e.to_string(),
        })
    })?;
    let tbs = &cert.tbs_certificate;
    // What is signed must be what was interpreted: DER, one encoding.
    if tbs.to_der().ok().as_deref() != Some(tbs_der.as_slice()) {
        return Err(err(CertDefect::TbsNotDer));
    }
    if tbs.version != Version::V3 {
        return Err(err(CertDefect::Version {
            version: tbs.version,
        }));
    }
    if tbs.signature != cert.signature_algorithm {
        return Err(err(CertDefect::SignatureAlgorithmsDiffer));
    }
    let sig_alg = match (
        &cert.signature_algorithm.oid,
        &cert.signature_algorithm.parameters,
    ) {
        (oid, None) if *oid == ECDSA_WITH_SHA_384 => SigAlg::EcdsaSha384,
        (oid, None) if *oid == ECDSA_WITH_SHA_256 => SigAlg::EcdsaSha256,
        (oid, _) => {
            return Err(err(CertDefect::SignatureAlgorithm { oid: *oid }));
        }
    };
    let signature = cert
        .signature
        .as_bytes()
        .ok_or_else(|| err(CertDefect::SignatureUnusedBits))?
        .to_vec();

    let (curve, point) = parse_ec_key(&tbs.subject_public_key_info).map_err(err)?;
    let (basic_constraints, key_usage) = parse_extensions(tbs).map_err(err)?;

    let not_before =
        to_datetime(tbs.validity.not_before).ok_or_else(|| err(CertDefect::NotBeforeRange))?;
    let not_after =
        to_datetime(tbs.validity.not_after).ok_or_else(|| err(CertDefect::NotAfterRange))?;
    if not_after < not_before {
        return Err(err(CertDefect::ValidityInverted));
    }

    let issuer_der = tbs.issuer.to_der().map_err(|e| {
        err(CertDefect::Issuer {
            error: e.to_string(),
        })
    })?;
    let subject_der = tbs.subject.to_der().map_err(|e| {
        err(CertDefect::Subject {
            error: e.to_string(),
        })
    })?;
    Ok(ParsedCert {
        label,
        tbs_der,
        issuer_der,
        subject_der,
        subject: tbs.subject.clone(),
        sig_alg,
        signature,
        curve,
        point,
        not_before,
        not_after,
        basic_constraints,
        key_usage,
    })
}

/// The subject's public key: an uncompressed point on P-384 or P-256.
fn parse_ec_key(spki: &spki::SubjectPublicKeyInfoOwned) -> Result<(Curve, Vec<u8>), CertDefect> {
    if spki.algorithm.oid != ID_EC_PUBLIC_KEY {
        return Err(CertDefect::KeyAlgorithm {
            oid: spki.algorithm.oid,
        });
    }
    let curve_oid = spki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.decode_as::<ObjectIdentifier>().ok())
        .ok_or(CertDefect::NoNamedCurve)?;
    let (curve, point_len) = if curve_oid == SECP_384_R_1 {
        (Curve::P384, 97)
    } else if curve_oid == SECP_256_R_1 {
        (Curve::P256, 65)
    } else {
        return Err(CertDefect::Curve { oid: curve_oid });
    };
    let point = spki
        .subject_public_key
        .as_bytes()
        .filter(|p| p.len() == point_len && p.first() == Some(&0x04))
        .ok_or(CertDefect::Point { curve })?
        .to_vec();
    Ok((curve, point))
}

/// basicConstraints and keyUsage; no duplicate and no other critical
/// extension.
fn parse_extensions(
    tbs: &x509_cert::TbsCertificate,
) -> Result<(Option<BasicConstraints>, Option<KeyUsage>), CertDefect> {
    let mut basic_constraints = None;
    let mut key_usage = None;
    let mut seen: Vec<&ObjectIdentifier> = Vec::new();
    for ext in tbs.extensions.iter().flatten() {
        if seen.contains(&&ext.extn_id) {
            return Err(CertDefect::DuplicateExtension { oid: ext.extn_id });
        }
        seen.push(&ext.extn_id);
        let value = ext.extn_value.as_bytes();
        if ext.extn_id == ID_CE_BASIC_CONSTRAINTS {
            basic_constraints = Some(BasicConstraints::from_der(value).map_err(|e| {
                CertDefect::BasicConstraints {
                    error: e.to_string(),
                }
            })?);
        } else if ext.extn_id == ID_CE_KEY_USAGE {
            key_usage = Some(KeyUsage::from_der(value).map_err(|e| CertDefect::KeyUsage {
                error: e.to_string(),
            })?);
        } else if ext.critical {
            return Err(CertDefect::CriticalExtension { oid: ext.extn_id });
        }
    }
    Ok((basic_constraints, key_usage))
}

/// The raw TBSCertificate TLV: the first element of the outer SEQUENCE.
fn raw_tbs(der: &[u8]) -> der::Result<Vec<u8>> {
    let mut reader = der::SliceReader::new(der)?;
    let header = der::Header::decode(&mut reader)?;
    header.tag.assert_eq(Tag::Sequence)?;
    Ok(reader.tlv_bytes()?.to_vec())
}

fn to_datetime(t: x509_cert::time::Time) -> Option<OffsetDateTime> {
    let secs = i64::try_from(t.to_unix_duration().as_secs()).ok()?;
    OffsetDateTime::from_unix_timestamp(secs).ok()
}

/// RFC 4514 string of a Name: RDNs last-to-first, `+` inside an RDN,
/// short names for the common attribute types, `OID=#hex` otherwise.
pub(crate) fn rfc4514(name: &Name) -> String {
    const SHORT: [(&str, &str); 9] = [
        ("2.5.4.3", "CN"),
        ("2.5.4.7", "L"),
        ("2.5.4.8", "ST"),
        ("2.5.4.10", "O"),
        ("2.5.4.11", "OU"),
        ("2.5.4.6", "C"),
        ("2.5.4.9", "STREET"),
        ("0.9.2342.19200300.100.1.25", "DC"),
        ("0.9.2342.19200300.100.1.1", "UID"),
    ];
    let mut rdns = Vec::new();
    for rdn in name.0.iter().rev() {
        let mut atvs = Vec::new();
        for atv in rdn.0.iter() {
            let oid = atv.oid.to_string();
            let short = SHORT.iter().find(|(o, _)| *o == oid).map(|(_, s)| *s);
            let text = match atv.value.tag() {
                Tag::PrintableString => PrintableStringRef::try_from(&atv.value)
                    .ok()
                    .map(|s| s.as_str().to_owned()),
                Tag::Utf8String => Utf8StringRef::try_from(&atv.value)
                    .ok()
                    .map(|s| s.as_str().to_owned()),
                Tag::Ia5String => Ia5StringRef::try_from(&atv.value)
                    .ok()
                    .map(|s| s.as_str().to_owned()),
                _ => None,
            };
            atvs.push(match (short, text) {
                (Some(short), Some(text)) => format!("{short}={}", escape_rfc4514(&text)),
                _ => format!(
                    "{oid}=#{}",
                    atv.value.to_der().map(hex::encode).unwrap_or_default()
                ),
            });
        }
        rdns.push(atvs.join("+"));
    }
    rdns.join(",")
}

fn escape_rfc4514(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let last = s.chars().count().saturating_sub(1);
    for (i, c) in s.chars().enumerate() {
        match c {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '#' if i == 0 => out.push_str("\\#"),
            ' ' if i == 0 || i == last => out.push_str("\\ "),
            '\0' => out.push_str("\\00"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn rfc4514_escapes_specials() {
        assert_eq!(escape_rfc4514("a,b+c"), "a\\,b\\+c");
        assert_eq!(escape_rfc4514("#x "), "\\#x\\ ");
        assert_eq!(escape_rfc4514(" lead"), "\\ lead");
        assert_eq!(escape_rfc4514("plain.name-1"), "plain.name-1");
    }

    #[test]
    fn embedded_root_parses_as_a_p384_ca() {
        let root = parse_cert("root".into(), AWS_NITRO_ROOT_G1_DER).unwrap();
        assert_eq!(root.curve, Curve::P384);
        assert!(root.basic_constraints.as_ref().is_some_and(|bc| bc.ca));
        verify_signed_by(&root, &root).unwrap();
        assert_eq!(
            root.subject_rfc4514(),
            "CN=aws.nitro-enclaves,OU=AWS,O=Amazon,C=US"
        );
    }
}
