//! Input forms: raw COSE_Sign1 bytes (tagged or untagged), base64 or hex
//! text of them, or an X.509 TLS certificate (DER or PEM) that carries the
//! document hex-encoded in a SubjectAltName DNS name.
//!
//! Detection, in order: PEM armour; a first byte of `0x84` (untagged) or
//! `0xd2` (tag 18); text made only of hex digits and whitespace whose
//! decoding starts like a COSE_Sign1; text in the base64 alphabet (standard
//! or URL-safe, padding optional, whitespace ignored); a first byte of
//! `0x30` (DER certificate). Hex is tried before base64 because every hex
//! digit is also a base64 character; base64 of a COSE_Sign1 always contains
//! a non-hex character in its first four (`hESh`, `0oRE`).
//!
//! The certificate form is Evervault Cages': the document is the first DNS
//! label of the certificate's longest SubjectAltName, as one hex string (the
//! 2023 sample carries 4775 bytes as a single 9550-character label; it is not
//! split over several labels), and the document's `user_data` is the
//! certificate's SubjectPublicKeyInfo DER, which binds the TLS key to the
//! enclave.

use base64::Engine as _;
use der::{Decode as _, Encode as _};
use x509_cert::Certificate;
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;

use super::NitroError;

/// Largest input accepted, in any form (a document is about 5 KiB; as hex
/// in a certificate, about 11 KiB).
pub const MAX_INPUT_BYTES: usize = 256 * 1024;
/// Largest COSE_Sign1 document accepted after decoding. The NSM schema
/// bounds a document well below this (16 certificates of at most 1024
/// bytes, 32 PCRs of at most 64 bytes, three fields of at most 1024 bytes).
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;

/// The CBOR tag of a COSE_Sign1 (RFC 9052 §2), in its one-byte encoding.
const COSE_SIGN1_TAG_BYTE: u8 = 0xd2;
/// A definite-length CBOR array of four items: an untagged COSE_Sign1.
const ARRAY4_BYTE: u8 = 0x84;

/// The form in which the document arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NitroInputForm {
    /// Raw CBOR, untagged COSE_Sign1 (what the NSM returns).
    CoseSign1Untagged,
    /// Raw CBOR, COSE_Sign1 behind tag 18.
    CoseSign1Tagged,
    /// Base64 text (standard or URL-safe alphabet, padding optional,
    /// whitespace ignored) of either of the above.
    CoseSign1Base64,
    /// Hex text (either case, whitespace ignored) of either of the above.
    CoseSign1Hex,
    /// A DER X.509 certificate whose longest SubjectAltName carries the
    /// document.
    TlsCertificateDer,
    /// The same certificate as PEM.
    TlsCertificatePem,
}

impl NitroInputForm {
    /// The spelling used in reports and in `expected.json` (`format`).
    pub fn as_str(self) -> &'static str {
        match self {
            NitroInputForm::CoseSign1Untagged => "cose-sign1-untagged-binary",
            NitroInputForm::CoseSign1Tagged => "cose-sign1-tagged-binary",
            NitroInputForm::CoseSign1Base64 => "cose-sign1-base64-text",
            NitroInputForm::CoseSign1Hex => "cose-sign1-hex-text",
            NitroInputForm::TlsCertificateDer => "tls-cert-der",
            NitroInputForm::TlsCertificatePem => "tls-cert-pem",
        }
    }

    /// Whether the document came out of a TLS certificate.
    pub fn is_tls_certificate(self) -> bool {
        matches!(
            self,
            NitroInputForm::TlsCertificateDer | NitroInputForm::TlsCertificatePem
        )
    }
}

/// The COSE_Sign1 bytes found in an input.
#[derive(Debug, Clone)]
pub(crate) struct Extracted {
    pub(crate) form: NitroInputForm,
    /// Whether the COSE bytes carry tag 18.
    pub(crate) tagged: bool,
    pub(crate) cose: Vec<u8>,
    /// SubjectPublicKeyInfo DER of the carrying certificate.
    pub(crate) tls_spki: Option<Vec<u8>>,
}

/// Detects the form of `input` and returns the COSE_Sign1 bytes in it.
pub(crate) fn extract(input: &[u8]) -> Result<Extracted, NitroError> {
    check_input_size(input)?;
    if input.trim_ascii_start().starts_with(b"-----BEGIN") {
        return from_certificate(&pem_certificate(input)?, NitroInputForm::TlsCertificatePem);
    }
    match input.first() {
        Some(&ARRAY4_BYTE | &COSE_SIGN1_TAG_BYTE) => extract_binary(input),
        // Text is checked before DER: base64 may start with `0` (0x30), the
        // DER SEQUENCE tag, but a DER certificate is never all base64.
        Some(_) if is_text(input, |b| b.is_ascii_hexdigit()) => {
            match hex::decode(compact(input)) {
                Ok(bytes) if starts_like_cose(&bytes) => cose(bytes, NitroInputForm::CoseSign1Hex),
                // Hex digits are base64 characters too.
                _ => from_base64(input),
            }
        }
        Some(_) if is_text(input, is_base64_char) => from_base64(input),
        Some(0x30) => from_certificate(input, NitroInputForm::TlsCertificateDer),
        _ => Err(NitroError::UnrecognisedInput {
            prefix: prefix_hex(input),
        }),
    }
}

/// Takes `input` as binary COSE_Sign1 bytes only, untagged or behind tag
/// 18: the form receipt v1 section 6 names for `evidence/nitro.cose` ("as
/// the NSM returns it"). Text and certificate forms are refused, not
/// decoded.
pub(crate) fn extract_binary(input: &[u8]) -> Result<Extracted, NitroError> {
    check_input_size(input)?;
    match input.first() {
        Some(&ARRAY4_BYTE) => cose(input.to_vec(), NitroInputForm::CoseSign1Untagged),
        Some(&COSE_SIGN1_TAG_BYTE) => cose(input.to_vec(), NitroInputForm::CoseSign1Tagged),
        _ => Err(NitroError::NotBinaryCose {
            prefix: prefix_hex(input),
        }),
    }
}

fn check_input_size(input: &[u8]) -> Result<(), NitroError> {
    if input.len() > MAX_INPUT_BYTES {
        return Err(NitroError::TooLarge {
            size: input.len(),
            max: MAX_INPUT_BYTES,
        });
    }
    Ok(())
}

fn cose(bytes: Vec<u8>, form: NitroInputForm) -> Result<Extracted, NitroError> {
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(NitroError::TooLarge {
            size: bytes.len(),
            max: MAX_DOCUMENT_BYTES,
        });
    }
    Ok(Extracted {
        form,
        tagged: bytes.first() == Some(&COSE_SIGN1_TAG_BYTE),
        cose: bytes,
        tls_spki: None,
    })
}

/// Non-empty, and only `allowed` characters and ASCII whitespace.
fn is_text(input: &[u8], allowed: impl Fn(&u8) -> bool) -> bool {
    input.iter().any(|b| !b.is_ascii_whitespace())
        && input.iter().all(|b| allowed(b) || b.is_ascii_whitespace())
}

/// Both base64 alphabets and padding.
fn is_base64_char(b: &u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_' | b'=')
}

fn compact(input: &[u8]) -> Vec<u8> {
    input
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect()
}

fn starts_like_cose(bytes: &[u8]) -> bool {
    matches!(bytes.first(), Some(&ARRAY4_BYTE | &COSE_SIGN1_TAG_BYTE))
}

/// Standard or URL-safe base64 (not a mix), padding optional.
fn from_base64(input: &[u8]) -> Result<Extracted, NitroError> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const LENIENT: GeneralPurposeConfig =
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
    const STANDARD: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::STANDARD, LENIENT);
    const URL_SAFE: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::URL_SAFE, LENIENT);
    let text = compact(input);
    let url_safe = text.iter().any(|b| matches!(b, b'-' | b'_'));
    let engine = if url_safe { &URL_SAFE } else { &STANDARD };
    let bytes = engine.decode(&text).map_err(|e| NitroError::Base64 {
        reason: e.to_string(),
    })?;
    if !starts_like_cose(&bytes) {
        return Err(NitroError::Base64 {
            reason: format!(
                "decoded bytes are not a COSE_Sign1 (first bytes {})",
                prefix_hex(&bytes)
            ),
        });
    }
    cose(bytes, NitroInputForm::CoseSign1Base64)
}

fn prefix_hex(bytes: &[u8]) -> String {
    let n = bytes.len().min(8);
    bytes.get(..n).map(hex::encode).unwrap_or_default()
}

/// The SubjectPublicKeyInfo DER of an X.509 certificate (DER or PEM): the
/// value a Cages-style document's `user_data` must equal.
pub fn certificate_spki_der(cert: &[u8]) -> Result<Vec<u8>, NitroError> {
    let der = if cert.trim_ascii_start().starts_with(b"-----BEGIN") {
        pem_certificate(cert)?
    } else {
        cert.to_vec()
    };
    let cert = Certificate::from_der(&der).map_err(|e| NitroError::tls(format!("X.509: {e}")))?;
    cert.tbs_certificate
        .subject_public_key_info
        .to_der()
        .map_err(|e| NitroError::tls(format!("SubjectPublicKeyInfo: {e}")))
}

/// The DER inside a PEM `CERTIFICATE` block.
fn pem_certificate(pem: &[u8]) -> Result<Vec<u8>, NitroError> {
    let (label, der) =
        der::pem::decode_vec(pem).map_err(|e| NitroError::tls(format!("PEM: {e}")))?;
    if label != "CERTIFICATE" {
        return Err(NitroError::tls(format!(
            "PEM label is {label:?}, expected \"CERTIFICATE\""
        )));
    }
    Ok(der)
}

/// The document in the first DNS label of the longest SubjectAltName.
fn from_certificate(der: &[u8], form: NitroInputForm) -> Result<Extracted, NitroError> {
    let cert = Certificate::from_der(der).map_err(|e| NitroError::tls(format!("X.509: {e}")))?;
    let tbs = &cert.tbs_certificate;
    let spki = tbs
        .subject_public_key_info
        .to_der()
        .map_err(|e| NitroError::tls(format!("SubjectPublicKeyInfo: {e}")))?;
    let mut sans = tbs
        .extensions
        .iter()
        .flatten()
        .filter(|e| e.extn_id == const_oid::db::rfc5280::ID_CE_SUBJECT_ALT_NAME);
    let (Some(ext), None) = (sans.next(), sans.next()) else {
        return Err(NitroError::tls(
            "expected exactly one SubjectAltName extension",
        ));
    };
    let san = SubjectAltName::from_der(ext.extn_value.as_bytes())
        .map_err(|e| NitroError::tls(format!("SubjectAltName: {e}")))?;
    let dns: Vec<&str> = san
        .0
        .iter()
        .filter_map(|g| match g {
            GeneralName::DnsName(name) => Some(name.as_str()),
            _ => None,
        })
        .collect();
    let longest = dns.iter().map(|n| n.len()).max().unwrap_or(0);
    let mut candidates = dns.iter().filter(|n| n.len() == longest);
    let (Some(name), None) = (candidates.next(), candidates.next()) else {
        return Err(NitroError::tls(format!(
            "no single longest DNS SubjectAltName ({} DNS names)",
            dns.len()
        )));
    };
    let label = name.split('.').next().unwrap_or_default();
    let bytes = hex::decode(label).map_err(|e| {
        NitroError::tls(format!(
            "first label of the longest DNS SubjectAltName is not hex: {e}"
        ))
    })?;
    if !starts_like_cose(&bytes) {
        return Err(NitroError::tls(format!(
            "the longest DNS SubjectAltName carries no COSE_Sign1 (first bytes {})",
            prefix_hex(&bytes)
        )));
    }
    let mut out = cose(bytes, form)?;
    out.tls_spki = Some(spki);
    Ok(out)
}
