//! The COSE_Sign1 envelope and the NSM attestation document inside it,
//! parsed into [`NitroDocument`]. Parsing checks structure only: no
//! signature, chain or clock.
//!
//! The payload schema is the NSM attestation document (AWS Nitro Enclaves
//! User Guide, "Verifying the root of trust", attestation document
//! specification):
//!
//! ```text
//! AttestationDocument = {
//!     module_id: text,                 ; non-empty
//!     digest: digest,                  ; "SHA384"
//!     timestamp: uint .size 8,         ; ms since the UNIX epoch, > 0
//!     pcrs: { + index => pcr },        ; 1..=32 entries
//!     certificate: cert,
//!     cabundle: [* cert],              ; root first; non-empty
//!     ? public_key: user_data,         ; 1..=1024 bytes when present
//!     ? user_data: user_data,
//!     ? nonce: user_data,
//! }
//! cert = bytes .size (1..1024)
//! user_data = bytes .size (0..1024)
//! pcr = bytes .size (32/48/64)         ; 48 for SHA384
//! index = 0..31
//! ```
//!
//! The NSM writes absent optional fields as CBOR `null`; `null` and absence
//! are both read as "not present". Any key outside the schema, a duplicate
//! key, a missing mandatory key or a value of the wrong type or size is an
//! error. The keys and bounds are [`kolm_tee_layouts::nitro::document`],
//! the table the simulated TEE writes with.

use std::collections::BTreeMap;

use ciborium::Value;
use coset::{CborSerializable as _, CoseSign1, TaggedCborSerializable as _, iana};
use kolm_tee_layouts::nitro::document as keys;
use sha2::{Digest as _, Sha256};

use super::NitroError;
use super::input::{Extracted, NitroInputForm};

/// The ES384 COSE signature length: r || s, 48 bytes each.
pub const ES384_SIGNATURE_BYTES: usize = 96;
/// Largest certificate (leaf or cabundle entry), per the NSM schema.
pub const MAX_CERT_BYTES: usize = keys::MAX_CERT_BYTES;
/// Largest `public_key`, `user_data` or `nonce`, per the NSM schema.
pub const MAX_USER_DATA_BYTES: usize = keys::MAX_USER_DATA_BYTES;
/// Most certificates in `cabundle` (AWS issues 4: root, regional, zonal,
/// instance). A cap, not a schema rule: it bounds the chain walk.
pub const MAX_CABUNDLE_LEN: usize = 16;
/// Most PCRs (indices 0..=31).
pub const MAX_PCRS: usize = keys::PCR_COUNT;
/// The one PCR size for the SHA384 digest.
pub const PCR_BYTES: usize = keys::PCR_BYTES;

/// The digest function of the PCRs. Only SHA-384 is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NitroDigest {
    /// `"SHA384"`.
    Sha384,
}

impl NitroDigest {
    /// The spelling in the document.
    pub fn as_str(self) -> &'static str {
        match self {
            NitroDigest::Sha384 => "SHA384",
        }
    }
}

/// A parsed, structurally valid Nitro attestation document and the
/// envelope it came in. Nothing in it is authenticated until
/// [`verify`](super::verify) says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NitroDocument {
    form: NitroInputForm,
    cose: Vec<u8>,
    tls_spki: Option<Vec<u8>>,
    sig_structure: Vec<u8>,
    signature: [u8; ES384_SIGNATURE_BYTES],
    module_id: String,
    digest: NitroDigest,
    timestamp_ms: u64,
    pcrs: BTreeMap<u8, Vec<u8>>,
    certificate: Vec<u8>,
    cabundle: Vec<Vec<u8>>,
    public_key: Option<Vec<u8>>,
    user_data: Option<Vec<u8>>,
    nonce: Option<Vec<u8>>,
}

impl NitroDocument {
    /// The form the input arrived in.
    pub fn input_form(&self) -> NitroInputForm {
        self.form
    }
    /// The COSE_Sign1 bytes (decoded from base64 or hex where needed).
    pub fn cose_bytes(&self) -> &[u8] {
        &self.cose
    }
    /// SHA-256 of [`cose_bytes`](Self::cose_bytes).
    pub fn doc_sha256(&self) -> [u8; 32] {
        Sha256::digest(&self.cose).into()
    }
    /// For a document taken from a TLS certificate, that certificate's
    /// SubjectPublicKeyInfo DER.
    pub fn tls_spki(&self) -> Option<&[u8]> {
        self.tls_spki.as_deref()
    }
    /// The COSE Sig_structure the signature covers
    /// (`["Signature1", protected, h'', payload]`).
    pub fn sig_structure(&self) -> &[u8] {
        &self.sig_structure
    }
    /// The ES384 signature, r || s.
    pub fn signature(&self) -> &[u8; ES384_SIGNATURE_BYTES] {
        &self.signature
    }
    /// `module_id`: the enclave's NSM module id.
    pub fn module_id(&self) -> &str {
        &self.module_id
    }
    /// `digest`.
    pub fn digest(&self) -> NitroDigest {
        self.digest
    }
    /// `timestamp`, milliseconds since the UNIX epoch.
    pub fn timestamp_ms(&self) -> u64 {
        self.timestamp_ms
    }
    /// `timestamp` as an instant (parse guarantees it is representable).
    pub fn timestamp(&self) -> time::OffsetDateTime {
        ms_to_datetime(self.timestamp_ms).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
    }
    /// `pcrs`: index to value (48 bytes each).
    pub fn pcrs(&self) -> &BTreeMap<u8, Vec<u8>> {
        &self.pcrs
    }
    /// One PCR.
    pub fn pcr(&self, index: u8) -> Option<&[u8]> {
        self.pcrs.get(&index).map(Vec::as_slice)
    }
    /// A debug-mode enclave: PCR0, PCR1 and PCR2 are all present and all
    /// zero (the NSM zeroes them for `--debug-mode`).
    pub fn is_debug(&self) -> bool {
        (0u8..=2).all(|i| self.pcr(i).is_some_and(|v| v.iter().all(|&b| b == 0)))
    }
    /// `certificate`: the leaf (signing) certificate, DER.
    pub fn certificate(&self) -> &[u8] {
        &self.certificate
    }
    /// `cabundle`: root first, then each intermediate, DER.
    pub fn cabundle(&self) -> &[Vec<u8>] {
        &self.cabundle
    }
    /// `public_key`, if present.
    pub fn public_key(&self) -> Option<&[u8]> {
        self.public_key.as_deref()
    }
    /// `user_data`, if present: where a kolm enclave puts the 64-byte
    /// report data that binds its manifest (see [`kolm_format::binding`]).
    pub fn user_data(&self) -> Option<&[u8]> {
        self.user_data.as_deref()
    }
    /// `nonce`, if present.
    pub fn nonce(&self) -> Option<&[u8]> {
        self.nonce.as_deref()
    }
}

pub(crate) fn ms_to_datetime(ms: u64) -> Option<time::OffsetDateTime> {
    let nanos = i128::from(ms).checked_mul(1_000_000)?;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos).ok()
}

/// Parses the COSE_Sign1 in `x` and the document in its payload.
pub(crate) fn parse(x: Extracted) -> Result<NitroDocument, NitroError> {
    let sign1 = if x.tagged {
        CoseSign1::from_tagged_slice(&x.cose)
    } else {
        CoseSign1::from_slice(&x.cose)
    }
    .map_err(|e| NitroError::cose(e.to_string()))?;

    let protected = &sign1.protected.header;
    match &protected.alg {
        Some(coset::RegisteredLabelWithPrivate::Assigned(iana::Algorithm::ES384)) => {}
        Some(other) => {
            return Err(NitroError::Algorithm {
                found: format!("{other:?}"),
            });
        }
        None => {
            return Err(NitroError::Algorithm {
                found: "none".into(),
            });
        }
    }
    if !protected.crit.is_empty() {
        return Err(NitroError::cose(
            "protected header lists critical parameters, which this verifier does not process",
        ));
    }
    if sign1.unprotected.alg.is_some() {
        return Err(NitroError::cose(
            "unprotected header carries an algorithm; it belongs in the protected header",
        ));
    }
    let Some(payload) = &sign1.payload else {
        return Err(NitroError::cose(
            "detached payload (nil); the document must be embedded",
        ));
    };
    let signature: [u8; ES384_SIGNATURE_BYTES] =
        sign1.signature.as_slice().try_into().map_err(|_| {
            NitroError::cose(format!(
                "signature is {} bytes; ES384 needs {ES384_SIGNATURE_BYTES} (r || s)",
                sign1.signature.len()
            ))
        })?;
    let sig_structure = sign1.tbs_data(b"");

    let mut slice = payload.as_slice();
    let value: Value = ciborium::de::from_reader(&mut slice).map_err(|e| NitroError::Payload {
        reason: format!("not CBOR: {e}"),
    })?;
    if !slice.is_empty() {
        return Err(NitroError::Payload {
            reason: format!("{} trailing bytes after the document map", slice.len()),
        });
    }
    let fields = Fields::from_value(value)?;

    Ok(NitroDocument {
        form: x.form,
        cose: x.cose,
        tls_spki: x.tls_spki,
        sig_structure,
        signature,
        module_id: fields.module_id,
        digest: fields.digest,
        timestamp_ms: fields.timestamp_ms,
        pcrs: fields.pcrs,
        certificate: fields.certificate,
        cabundle: fields.cabundle,
        public_key: fields.public_key,
        user_data: fields.user_data,
        nonce: fields.nonce,
    })
}

/// The payload's fields, each already checked.
struct Fields {
    module_id: String,
    digest: NitroDigest,
    timestamp_ms: u64,
    pcrs: BTreeMap<u8, Vec<u8>>,
    certificate: Vec<u8>,
    cabundle: Vec<Vec<u8>>,
    public_key: Option<Vec<u8>>,
    user_data: Option<Vec<u8>>,
    nonce: Option<Vec<u8>>,
}

const KEYS: [&str; 9] = keys::KEYS;

impl Fields {
    fn from_value(value: Value) -> Result<Fields, NitroError> {
        let Value::Map(entries) = value else {
            return Err(NitroError::Payload {
                reason: format!("expected a map, found {}", kind(&value)),
            });
        };
        let mut by_key: BTreeMap<&'static str, Value> = BTreeMap::new();
        for (k, v) in entries {
            let Value::Text(name) = &k else {
                return Err(NitroError::UnknownKey {
                    key: describe_key(&k),
                });
            };
            let Some(&known) = KEYS.iter().find(|&&known| known == name) else {
                return Err(NitroError::UnknownKey {
                    key: format!("{name:?}"),
                });
            };
            if by_key.insert(known, v).is_some() {
                return Err(NitroError::DuplicateKey { key: name.clone() });
            }
        }
        let mut take = |key: &'static str| by_key.remove(key);
        let required =
            |key: &'static str, v: Option<Value>| v.ok_or(NitroError::MissingKey { key });

        let module_id = match required(keys::MODULE_ID, take(keys::MODULE_ID))? {
            Value::Text(s) if !s.is_empty() => s,
            Value::Text(_) => return Err(NitroError::field(keys::MODULE_ID, "empty")),
            other => return Err(wrong_type(keys::MODULE_ID, "text", &other)),
        };
        let digest = match required(keys::DIGEST, take(keys::DIGEST))? {
            Value::Text(s) if s == keys::DIGEST_SHA384 => NitroDigest::Sha384,
            Value::Text(s) => {
                return Err(NitroError::field(
                    keys::DIGEST,
                    format!("{s:?}; only \"SHA384\" is accepted"),
                ));
            }
            other => return Err(wrong_type(keys::DIGEST, "text", &other)),
        };
        let timestamp_ms = match required(keys::TIMESTAMP, take(keys::TIMESTAMP))? {
            Value::Integer(i) => {
                let ms = u64::try_from(i)
                    .map_err(|_| NitroError::field(keys::TIMESTAMP, "negative or over 64 bits"))?;
                if ms == 0 {
                    return Err(NitroError::field(keys::TIMESTAMP, "zero"));
                }
                if ms_to_datetime(ms).is_none() {
                    return Err(NitroError::field(
                        keys::TIMESTAMP,
                        format!("{ms} ms is out of range"),
                    ));
                }
                ms
            }
            other => return Err(wrong_type(keys::TIMESTAMP, "unsigned integer", &other)),
        };
        let pcrs = parse_pcrs(required(keys::PCRS, take(keys::PCRS))?)?;
        let certificate = cert_bytes(
            keys::CERTIFICATE,
            required(keys::CERTIFICATE, take(keys::CERTIFICATE))?,
        )?;
        let cabundle = match required(keys::CABUNDLE, take(keys::CABUNDLE))? {
            Value::Array(items) => {
                if items.is_empty() {
                    return Err(NitroError::field(keys::CABUNDLE, "empty"));
                }
                if items.len() > MAX_CABUNDLE_LEN {
                    return Err(NitroError::field(
                        keys::CABUNDLE,
                        format!(
                            "{} certificates, over the cap of {MAX_CABUNDLE_LEN}",
                            items.len()
                        ),
                    ));
                }
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| cert_bytes(&format!("cabundle[{i}]"), v))
                    .collect::<Result<Vec<_>, _>>()?
            }
            other => return Err(wrong_type(keys::CABUNDLE, "array", &other)),
        };
        let public_key = optional_bytes(keys::PUBLIC_KEY, take(keys::PUBLIC_KEY), 1)?;
        let user_data = optional_bytes(keys::USER_DATA, take(keys::USER_DATA), 0)?;
        let nonce = optional_bytes(keys::NONCE, take(keys::NONCE), 0)?;
        Ok(Fields {
            module_id,
            digest,
            timestamp_ms,
            pcrs,
            certificate,
            cabundle,
            public_key,
            user_data,
            nonce,
        })
    }
}

fn parse_pcrs(value: Value) -> Result<BTreeMap<u8, Vec<u8>>, NitroError> {
    let Value::Map(entries) = value else {
        return Err(wrong_type("pcrs", "map", &value));
    };
    if entries.is_empty() || entries.len() > MAX_PCRS {
        return Err(NitroError::field(
            "pcrs",
            format!("{} entries; 1..={MAX_PCRS} required", entries.len()),
        ));
    }
    let mut pcrs = BTreeMap::new();
    for (k, v) in entries {
        let index = match &k {
            Value::Integer(i) => u8::try_from(*i)
                .ok()
                .filter(|&i| usize::from(i) < MAX_PCRS)
                .ok_or_else(|| {
                    NitroError::field("pcrs", format!("index {} outside 0..=31", i128::from(*i)))
                })?,
            other => return Err(wrong_type("pcrs", "integer index", other)),
        };
        let field = format!("pcrs[{index}]");
        let bytes = match v {
            Value::Bytes(b) => b,
            other => return Err(wrong_type(&field, "byte string", &other)),
        };
        if bytes.len() != PCR_BYTES {
            return Err(NitroError::field(
                field,
                format!("{} bytes; SHA384 PCRs are {PCR_BYTES}", bytes.len()),
            ));
        }
        if pcrs.insert(index, bytes).is_some() {
            return Err(NitroError::field(
                "pcrs",
                format!("duplicate index {index}"),
            ));
        }
    }
    Ok(pcrs)
}

fn cert_bytes(field: &str, value: Value) -> Result<Vec<u8>, NitroError> {
    match value {
        Value::Bytes(b) if (1..=MAX_CERT_BYTES).contains(&b.len()) => Ok(b),
        Value::Bytes(b) => Err(NitroError::field(
            field,
            format!("{} bytes; 1..={MAX_CERT_BYTES} allowed", b.len()),
        )),
        other => Err(wrong_type(field, "byte string", &other)),
    }
}

fn optional_bytes(
    field: &str,
    value: Option<Value>,
    min: usize,
) -> Result<Option<Vec<u8>>, NitroError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bytes(b)) if (min..=MAX_USER_DATA_BYTES).contains(&b.len()) => Ok(Some(b)),
        Some(Value::Bytes(b)) => Err(NitroError::field(
            field,
            format!("{} bytes; {min}..={MAX_USER_DATA_BYTES} allowed", b.len()),
        )),
        Some(other) => Err(wrong_type(field, "byte string or null", &other)),
    }
}

fn wrong_type(field: &str, expected: &str, found: &Value) -> NitroError {
    NitroError::field(field, format!("expected {expected}, found {}", kind(found)))
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Integer(_) => "integer",
        Value::Bytes(_) => "byte string",
        Value::Float(_) => "float",
        Value::Text(_) => "text",
        Value::Bool(_) => "bool",
        Value::Null => "null",
        Value::Tag(..) => "tag",
        Value::Array(_) => "array",
        Value::Map(_) => "map",
        _ => "other CBOR item",
    }
}

fn describe_key(k: &Value) -> String {
    match k {
        Value::Integer(i) => format!("{}", i128::from(*i)),
        other => format!("({})", kind(other)),
    }
}
