//! The little DER the simulated TEE needs: a writer for the two X.509
//! certificates it issues (the sim root and each attestation's leaf,
//! RFC 5280 section 4.1) and a reader that takes its own root certificate
//! apart again (subject and public key). Nothing here parses certificates
//! from anyone else: the enclave never links an X.509 parser (the verifier
//! does, `kolm_verifier::nitro`, and reads these certificates with it).

use time::OffsetDateTime;

/// DER tags used here (X.690 section 8; universal class unless noted).
pub(crate) mod tag {
    pub const BOOLEAN: u8 = 0x01;
    pub const ENUMERATED: u8 = 0x0a;
    pub const INTEGER: u8 = 0x02;
    pub const BIT_STRING: u8 = 0x03;
    pub const OCTET_STRING: u8 = 0x04;
    pub const OID: u8 = 0x06;
    pub const UTF8_STRING: u8 = 0x0c;
    pub const UTC_TIME: u8 = 0x17;
    pub const GENERALIZED_TIME: u8 = 0x18;
    pub const SEQUENCE: u8 = 0x30;
    pub const SET: u8 = 0x31;
    /// `[0]` constructed, context-specific (TBSCertificate `version`).
    pub const CONTEXT_0: u8 = 0xa0;
    /// `[3]` constructed, context-specific (TBSCertificate `extensions`).
    pub const CONTEXT_3: u8 = 0xa3;
    /// `[0]` primitive, context-specific (AuthorityKeyIdentifier
    /// `keyIdentifier`).
    pub const CONTEXT_0_PRIMITIVE: u8 = 0x80;
}

/// Object identifiers, as arcs.
pub(crate) mod oid {
    /// ecdsa-with-SHA384 and ecdsa-with-SHA256 (RFC 5758 section 3.2).
    pub const ECDSA_WITH_SHA384: &[u64] = &[1, 2, 840, 10045, 4, 3, 3];
    pub const ECDSA_WITH_SHA256: &[u64] = &[1, 2, 840, 10045, 4, 3, 2];
    /// id-ecPublicKey (RFC 5480 section 2.1.1).
    pub const EC_PUBLIC_KEY: &[u64] = &[1, 2, 840, 10045, 2, 1];
    /// secp384r1 (RFC 5480 section 2.1.1.1).
    pub const SECP384R1: &[u64] = &[1, 3, 132, 0, 34];
    /// prime256v1 / secp256r1 (RFC 5480 section 2.1.1.1).
    pub const PRIME256V1: &[u64] = &[1, 2, 840, 10045, 3, 1, 7];
    /// id-at-commonName, organizationName, organizationalUnitName.
    pub const COMMON_NAME: &[u64] = &[2, 5, 4, 3];
    pub const ORGANIZATION: &[u64] = &[2, 5, 4, 10];
    pub const ORGANIZATIONAL_UNIT: &[u64] = &[2, 5, 4, 11];
    /// id-ce-subjectKeyIdentifier, keyUsage, basicConstraints,
    /// authorityKeyIdentifier (RFC 5280 section 4.2.1).
    pub const SUBJECT_KEY_IDENTIFIER: &[u64] = &[2, 5, 29, 14];
    pub const KEY_USAGE: &[u64] = &[2, 5, 29, 15];
    pub const BASIC_CONSTRAINTS: &[u64] = &[2, 5, 29, 19];
    pub const AUTHORITY_KEY_IDENTIFIER: &[u64] = &[2, 5, 29, 35];
    /// id-ce-cRLNumber (RFC 5280 section 5.2.3).
    pub const CRL_NUMBER: &[u64] = &[2, 5, 29, 20];
    /// Intel's SGX extension of a PCK certificate and its members (Intel
    /// SGX PCK Certificate and CRL Profile, section 1.5).
    pub const SGX_EXTENSION: &[u64] = &[1, 2, 840, 113741, 1, 13, 1];
}

/// One TLV: `tag`, the definite length (short or long form, minimal), the
/// content.
pub(crate) fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let len = content.len();
    let mut out = Vec::with_capacity(len.saturating_add(6));
    out.push(tag);
    if len < 0x80 {
        // Short form: fits in 7 bits (checked just above).
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        let significant = bytes.get(skip..).unwrap_or_default();
        // At most 8 length octets (a usize), so this fits in 7 bits.
        out.push(0x80 | significant.len() as u8);
        out.extend_from_slice(significant);
    }
    out.extend_from_slice(content);
    out
}

/// A constructed value of `tag` over the concatenation of `parts`.
pub(crate) fn constructed(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    tlv(tag, &parts.concat())
}

pub(crate) fn sequence(parts: &[&[u8]]) -> Vec<u8> {
    constructed(tag::SEQUENCE, parts)
}

/// An OBJECT IDENTIFIER (X.690 section 8.19). `arcs` has at least two
/// arcs, the first 0..=2 (all constants here do).
pub(crate) fn oid(arcs: &[u64]) -> Vec<u8> {
    let mut content = Vec::new();
    let (first, second, rest) = match arcs {
        [a, b, rest @ ..] => (*a, *b, rest),
        _ => (0, 0, &[][..]),
    };
    let mut push_arc = |arc: u64| {
        let mut groups = vec![(arc & 0x7f) as u8];
        let mut v = arc >> 7;
        while v > 0 {
            groups.push(0x80 | (v & 0x7f) as u8);
            v >>= 7;
        }
        content.extend(groups.iter().rev());
    };
    push_arc(first.saturating_mul(40).saturating_add(second));
    for &arc in rest {
        push_arc(arc);
    }
    tlv(tag::OID, &content)
}

/// A non-negative INTEGER from big-endian magnitude bytes: leading zeros
/// dropped, one zero added when the top bit is set (X.690 section 8.3).
pub(crate) fn unsigned_integer(magnitude: &[u8]) -> Vec<u8> {
    let skip = magnitude.iter().take_while(|&&b| b == 0).count();
    let trimmed = magnitude.get(skip..).unwrap_or_default();
    let mut content = Vec::with_capacity(trimmed.len().saturating_add(1));
    if trimmed.first().is_none_or(|&b| b & 0x80 != 0) {
        content.push(0);
    }
    content.extend_from_slice(trimmed);
    tlv(tag::INTEGER, &content)
}

pub(crate) fn boolean_true() -> Vec<u8> {
    tlv(tag::BOOLEAN, &[0xff])
}

/// A BOOLEAN (DER: 0xff for true).
pub(crate) fn boolean(v: bool) -> Vec<u8> {
    tlv(tag::BOOLEAN, &[if v { 0xff } else { 0 }])
}

/// An ENUMERATED of one small value.
pub(crate) fn enumerated(v: u8) -> Vec<u8> {
    unsigned_integer(&[v])
        .get(1..)
        .map_or_else(Vec::new, |rest| [&[tag::ENUMERATED][..], rest].concat())
}

pub(crate) fn octet_string(bytes: &[u8]) -> Vec<u8> {
    tlv(tag::OCTET_STRING, bytes)
}

/// A BIT STRING of whole octets (no unused bits).
pub(crate) fn bit_string(bytes: &[u8]) -> Vec<u8> {
    let mut content = Vec::with_capacity(bytes.len().saturating_add(1));
    content.push(0);
    content.extend_from_slice(bytes);
    tlv(tag::BIT_STRING, &content)
}

/// The KeyUsage BIT STRING of the named bits `bits` (0 = digitalSignature
/// .. 8 = decipherOnly, RFC 5280 section 4.2.1.3), DER: trailing zero bits
/// removed and counted as unused.
pub(crate) fn key_usage_bits(bits: &[u8]) -> Vec<u8> {
    let mut octets = [0u8; 2];
    for &b in bits {
        if let Some(o) = octets.get_mut(usize::from(b / 8)) {
            *o |= 0x80 >> (b % 8);
        }
    }
    let len = if octets[1] == 0 { 1 } else { 2 };
    let used = octets.get(..len).unwrap_or_default();
    let unused = used
        .last()
        .map_or(0, |last| last.trailing_zeros().min(7) as u8);
    let mut content = vec![unused];
    content.extend_from_slice(used);
    tlv(tag::BIT_STRING, &content)
}

/// A Name of one RDN per `(attribute type, UTF8String value)`, in order
/// (RFC 5280 section 4.1.2.4).
pub(crate) fn name(attributes: &[(&[u64], &str)]) -> Vec<u8> {
    let rdns: Vec<Vec<u8>> = attributes
        .iter()
        .map(|(ty, value)| {
            let atv = sequence(&[&oid(ty), &tlv(tag::UTF8_STRING, value.as_bytes())]);
            constructed(tag::SET, &[&atv])
        })
        .collect();
    let parts: Vec<&[u8]> = rdns.iter().map(Vec::as_slice).collect();
    sequence(&parts)
}

/// A certificate Time: UTCTime through 2049, GeneralizedTime from 2050
/// (RFC 5280 section 4.1.2.5), whole seconds, `Z`.
pub(crate) fn time(t: OffsetDateTime) -> Vec<u8> {
    let t = t.to_offset(time::UtcOffset::UTC);
    let rest = format!(
        "{:02}{:02}{:02}{:02}{:02}Z",
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    );
    if (1950..2050).contains(&t.year()) {
        let yy = t.year().rem_euclid(100);
        tlv(tag::UTC_TIME, format!("{yy:02}{rest}").as_bytes())
    } else {
        tlv(
            tag::GENERALIZED_TIME,
            format!("{:04}{rest}", t.year()).as_bytes(),
        )
    }
}

/// One Extension (RFC 5280 section 4.1): `critical` is written only when
/// true (DER omits a DEFAULT value).
pub(crate) fn extension(id: &[u64], critical: bool, value: &[u8]) -> Vec<u8> {
    let id = oid(id);
    let value = octet_string(value);
    if critical {
        sequence(&[&id, &boolean_true(), &value])
    } else {
        sequence(&[&id, &value])
    }
}

/// Why DER could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("DER: {0}")]
pub struct DerError(pub &'static str);

/// One TLV read from the front of some input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tlv<'a> {
    pub tag: u8,
    pub content: &'a [u8],
    /// Tag, length and content.
    pub whole: &'a [u8],
    /// What follows it.
    pub rest: &'a [u8],
}

/// Reads one TLV from the front of `input`. Definite lengths only, minimal
/// long form.
pub(crate) fn read_tlv(input: &[u8]) -> Result<Tlv<'_>, DerError> {
    let (&tag, after_tag) = input.split_first().ok_or(DerError("truncated tag"))?;
    let (&first, after_len) = after_tag
        .split_first()
        .ok_or(DerError("truncated length"))?;
    let (len, header_rest) = if first < 0x80 {
        (usize::from(first), after_len)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return Err(DerError("unsupported length form"));
        }
        let bytes = after_len.get(..n).ok_or(DerError("truncated length"))?;
        if bytes.first() == Some(&0) {
            return Err(DerError("non-minimal length"));
        }
        let len = bytes
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        if len < 0x80 {
            return Err(DerError("non-minimal length"));
        }
        (len, after_len.get(n..).unwrap_or_default())
    };
    let content = header_rest
        .get(..len)
        .ok_or(DerError("content runs past the end"))?;
    let rest = header_rest.get(len..).unwrap_or_default();
    let whole_len = input.len().saturating_sub(rest.len());
    let whole = input.get(..whole_len).unwrap_or_default();
    Ok(Tlv {
        tag,
        content,
        whole,
        rest,
    })
}

/// Reads one TLV of tag `expected` (else the error `what`).
pub(crate) fn expect_tlv<'a>(
    input: &'a [u8],
    expected: u8,
    what: &'static str,
) -> Result<Tlv<'a>, DerError> {
    let tlv = read_tlv(input)?;
    if tlv.tag != expected {
        return Err(DerError(what));
    }
    Ok(tlv)
}

/// What the sim root's certificate is read back for: its subject (the
/// issuer of every leaf) and its public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CertParts {
    /// The subject Name, DER.
    pub subject: Vec<u8>,
    /// The subjectPublicKey BIT STRING's key bytes (an uncompressed point).
    pub public_key: Vec<u8>,
}

/// Takes a certificate this module wrote apart: Certificate ->
/// TBSCertificate -> version, serial, signature, issuer, validity,
/// subject, subjectPublicKeyInfo. No trailing bytes anywhere it reads.
pub(crate) fn cert_parts(cert: &[u8]) -> Result<CertParts, DerError> {
    let outer = expect_tlv(cert, tag::SEQUENCE, "Certificate is not a SEQUENCE")?;
    if !outer.rest.is_empty() {
        return Err(DerError("trailing bytes after the Certificate"));
    }
    let tbs = expect_tlv(
        outer.content,
        tag::SEQUENCE,
        "TBSCertificate is not a SEQUENCE",
    )?;
    let r = expect_tlv(tbs.content, tag::CONTEXT_0, "version [0] missing")?.rest;
    let r = expect_tlv(r, tag::INTEGER, "serialNumber missing")?.rest;
    let r = expect_tlv(r, tag::SEQUENCE, "signature missing")?.rest;
    let r = expect_tlv(r, tag::SEQUENCE, "issuer missing")?.rest;
    let r = expect_tlv(r, tag::SEQUENCE, "validity missing")?.rest;
    let subject = expect_tlv(r, tag::SEQUENCE, "subject missing")?;
    let spki = expect_tlv(subject.rest, tag::SEQUENCE, "subjectPublicKeyInfo missing")?;
    let r = expect_tlv(spki.content, tag::SEQUENCE, "algorithm missing")?.rest;
    let bits = expect_tlv(r, tag::BIT_STRING, "subjectPublicKey missing")?;
    if !bits.rest.is_empty() {
        return Err(DerError("trailing bytes in subjectPublicKeyInfo"));
    }
    let subject = subject.whole;
    let public_key = match bits.content.split_first() {
        Some((0, key)) => key.to_vec(),
        _ => return Err(DerError("subjectPublicKey has unused bits")),
    };
    Ok(CertParts {
        subject: subject.to_vec(),
        public_key,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn encodings_match_the_published_bytes() {
        // X.690 examples and the OIDs' well-known encodings.
        assert_eq!(
            oid(oid::ECDSA_WITH_SHA384),
            hex::decode("06082a8648ce3d040303").unwrap()
        );
        assert_eq!(
            oid(oid::EC_PUBLIC_KEY),
            hex::decode("06072a8648ce3d0201").unwrap()
        );
        assert_eq!(oid(oid::SECP384R1), hex::decode("06052b81040022").unwrap());
        assert_eq!(oid(oid::KEY_USAGE), hex::decode("0603551d0f").unwrap());
        assert_eq!(unsigned_integer(&[0x00, 0x7f]), vec![0x02, 0x01, 0x7f]);
        assert_eq!(unsigned_integer(&[0x80]), vec![0x02, 0x02, 0x00, 0x80]);
        assert_eq!(unsigned_integer(&[]), vec![0x02, 0x01, 0x00]);
        // keyUsage digitalSignature: 03 02 07 80; keyCertSign + cRLSign: 03 02 01 06.
        assert_eq!(key_usage_bits(&[0]), vec![0x03, 0x02, 0x07, 0x80]);
        assert_eq!(key_usage_bits(&[5, 6]), vec![0x03, 0x02, 0x01, 0x06]);
        let long = tlv(tag::OCTET_STRING, &[0u8; 300]);
        assert_eq!(long.get(..4).unwrap(), &[0x04, 0x82, 0x01, 0x2c]);
        let t = read_tlv(&long).unwrap();
        assert_eq!(
            (t.tag, t.content.len(), t.whole.len(), t.rest.len()),
            (0x04, 300, 304, 0)
        );
    }

    #[test]
    fn times_switch_to_generalized_in_2050() {
        let t = OffsetDateTime::from_unix_timestamp(1_736_179_622).unwrap();
        assert_eq!(time(t), tlv(tag::UTC_TIME, b"250106160702Z"));
        let late = OffsetDateTime::from_unix_timestamp(2_556_143_999 + 1).unwrap();
        assert_eq!(time(late), tlv(tag::GENERALIZED_TIME, b"20510101000000Z"));
    }

    #[test]
    fn the_reader_refuses_what_it_cannot_trust() {
        assert!(read_tlv(&[0x30]).is_err());
        assert!(read_tlv(&[0x30, 0x05, 0x00]).is_err());
        assert!(read_tlv(&[0x30, 0x81, 0x05, 0, 0, 0, 0, 0]).is_err());
        assert!(read_tlv(&[0x30, 0x82, 0x00, 0x80]).is_err());
        assert!(cert_parts(&[0x30, 0x00, 0x00]).is_err());
    }
}
