//! AWS Nitro Enclaves: the Nitro Secure Module (NSM) over `/dev/nsm`.
//!
//! The driver (`include/uapi/linux/nsm.h`) takes one ioctl,
//! `NSM_IOCTL_RAW`, carrying a CBOR request of at most
//! [`NSM_REQUEST_MAX_SIZE`] bytes and a response buffer of
//! [`NSM_RESPONSE_MAX_SIZE`] bytes; it writes the response length back. The
//! messages are the serde encodings of `aws-nitro-enclaves-nsm-api`'s
//! `Request`/`Response` enums (externally tagged, field names as map keys),
//! written and read here with `ciborium` directly (the NSM crate itself
//! would add `serde_bytes`, `log` and `nix` for the same two messages):
//!
//! ```text
//! {"DescribePCR": {"index": 0}}                 -> {"DescribePCR": {"lock": bool, "data": bstr}}
//! {"Attestation": {"user_data": bstr,           -> {"Attestation": {"document": bstr}}
//!                  "nonce": bstr / null,
//!                  "public_key": bstr / null}}
//! any failure                                   -> {"Error": "InvalidArgument" / ...}
//! ```
//!
//! The document is a COSE_Sign1 (`[protected, unprotected, payload,
//! signature]`, untagged or tag 18) whose payload is the attestation
//! document map (`module_id`, `digest`, `timestamp`, `pcrs`, `certificate`,
//! `cabundle`, `public_key`, `user_data`, `nonce`). Before it is returned,
//! its `user_data` must equal the report data, its `nonce` and `public_key`
//! what was sent, its `digest` `SHA384`, and its PCR0 the locked PCR0 that
//! `DescribePCR` read (the measurement). Signatures are the verifier's job.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use ciborium::Value;
use kolm_policy::Platform;
use kolm_tee_layouts::nitro::{attestation_request as req, document as doc_keys};

use super::sealed::Driver;
use super::{
    CollateralSource, HardwareEvidence, MEASUREMENT_LEN, Measurement, MeasurementKind,
    ProviderError, REPORT_DATA_LEN, Retry, RetryPolicy, blob, is_busy, open_device, sys,
};

/// The NSM device node.
pub const NSM_DEVICE: &str = "/dev/nsm";
/// `NSM_REQUEST_MAX_SIZE` of `include/uapi/linux/nsm.h`.
pub const NSM_REQUEST_MAX_SIZE: usize = 0x1000;
/// `NSM_RESPONSE_MAX_SIZE` of `include/uapi/linux/nsm.h`.
pub const NSM_RESPONSE_MAX_SIZE: usize = 0x3000;
/// Largest `nonce` the NSM accepts (AWS "Nitro Enclaves Attestation
/// Process", section 3.2.2.2); `user_data` has the same cap.
pub const NSM_NONCE_MAX: usize = 512;
/// Largest `public_key` the NSM accepts (same section).
pub const NSM_PUBLIC_KEY_MAX: usize = 1024;
/// COSE_Sign1 tag (RFC 9052).
const COSE_SIGN1_TAG: u64 = 18;
/// Nesting the NSM messages and document need (the document is 3 deep).
const CBOR_RECURSION_LIMIT: usize = 16;

/// The `/dev/nsm` ioctl, behind a trait so the tests can answer it.
pub trait NsmDevice {
    /// The device path, for error messages.
    fn path(&self) -> &Path;
    /// One `NSM_IOCTL_RAW`: sends `request`, fills `response`, returns the
    /// response length. `EBUSY`/`EAGAIN`/`EINTR` mean "ask again".
    fn raw(&self, request: &[u8], response: &mut [u8]) -> io::Result<usize>;
}

/// The real `/dev/nsm`.
#[derive(Debug)]
pub struct NsmFile {
    path: PathBuf,
    file: File,
}

impl NsmFile {
    /// Opens the device read-write (the driver requires it).
    pub fn open(path: impl Into<PathBuf>) -> Result<NsmFile, ProviderError> {
        let (path, file) = open_device(path.into())?;
        Ok(NsmFile { path, file })
    }
}

impl NsmDevice for NsmFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn raw(&self, request: &[u8], response: &mut [u8]) -> io::Result<usize> {
        sys::nsm_raw(self.file.as_fd(), request, response)
    }
}

/// The optional fields of the `Attestation` request besides `user_data`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NitroRequest {
    /// At most [`NSM_NONCE_MAX`] bytes.
    pub nonce: Option<Vec<u8>>,
    /// DER public key, 1 to [`NSM_PUBLIC_KEY_MAX`] bytes.
    pub public_key: Option<Vec<u8>>,
}

/// The Nitro provider.
#[derive(Debug)]
pub struct NitroProvider<D> {
    device: D,
    request: NitroRequest,
    retry: RetryPolicy,
}

impl<D: NsmDevice> NitroProvider<D> {
    /// Checks the request field sizes up front.
    pub fn new(
        device: D,
        request: NitroRequest,
        retry: RetryPolicy,
    ) -> Result<NitroProvider<D>, ProviderError> {
        if let Some(n) = &request.nonce
            && n.len() > NSM_NONCE_MAX
        {
            return Err(ProviderError::TooLarge {
                what: "nonce",
                len: n.len(),
                max: NSM_NONCE_MAX,
            });
        }
        if let Some(k) = &request.public_key
            && (k.is_empty() || k.len() > NSM_PUBLIC_KEY_MAX)
        {
            return Err(ProviderError::TooLarge {
                what: "public_key (1 byte at least)",
                len: k.len(),
                max: NSM_PUBLIC_KEY_MAX,
            });
        }
        Ok(NitroProvider {
            device,
            request,
            retry,
        })
    }

    /// The device, for tests that inspect a fake.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// PCR0 through `DescribePCR`: the launch measurement. It must be
    /// locked (an unlocked PCR0 could still be extended) and 48 bytes.
    pub fn describe_pcr0(&self) -> Result<Measurement, ProviderError> {
        let request = encode_request("DescribePCR", vec![("index", Value::Integer(0.into()))])?;
        let body = self.call("DescribePCR", &request)?;
        let fields = map_fields(body, "DescribePCR response")?;
        let lock = match field(&fields, "lock") {
            Some(Value::Bool(b)) => *b,
            _ => return Err(malformed("DescribePCR response", "lock is not a bool")),
        };
        let data = match field(&fields, "data") {
            Some(Value::Bytes(b)) => b.as_slice(),
            _ => return Err(malformed("DescribePCR response", "data is not bytes")),
        };
        if fields.len() != 2 {
            return Err(malformed(
                "DescribePCR response",
                "keys other than lock and data",
            ));
        }
        if !lock {
            return Err(ProviderError::Pcr {
                index: 0,
                reason: "not locked".into(),
            });
        }
        let value = <[u8; MEASUREMENT_LEN]>::try_from(data).map_err(|_| ProviderError::Pcr {
            index: 0,
            reason: format!("{} bytes, expected {MEASUREMENT_LEN} (SHA-384)", data.len()),
        })?;
        Ok(Measurement {
            kind: MeasurementKind::NitroPcr0,
            value,
        })
    }

    /// Sends one request (with bounded retries when busy) and returns the
    /// body of the one response variant `name`, refusing `Error` and any
    /// other variant.
    fn call(&self, name: &'static str, request: &[u8]) -> Result<Value, ProviderError> {
        let mut response = vec![0u8; NSM_RESPONSE_MAX_SIZE];
        let len = self
            .retry
            .run("NSM request", || {
                match self.device.raw(request, &mut response) {
                    Ok(len) => Ok(len),
                    Err(e) if is_busy(&e) => Err(Retry::Busy),
                    Err(e) => Err(Retry::Fail(ProviderError::io(
                        "NSM_IOCTL_RAW",
                        self.device.path(),
                        e,
                    ))),
                }
            })
            .map_err(super::RetryError::into_inner)?;
        let bytes = response.get(..len).ok_or(ProviderError::TooLarge {
            what: "NSM response",
            len,
            max: NSM_RESPONSE_MAX_SIZE,
        })?;
        let value = decode_exact(bytes, "NSM response")?;
        let mut entries = match value {
            Value::Map(entries) => entries,
            Value::Text(t) => {
                return Err(ProviderError::UnexpectedResponse {
                    request: name,
                    found: t,
                });
            }
            _ => return Err(malformed("NSM response", "not a map")),
        };
        if entries.len() != 1 {
            return Err(malformed("NSM response", "not exactly one variant"));
        }
        let (key, body) = entries.remove(0);
        match key {
            Value::Text(k) if k == name => Ok(body),
            Value::Text(k) if k == "Error" => Err(ProviderError::NsmError {
                code: match body {
                    Value::Text(code) => code,
                    other => format!("{other:?}"),
                },
            }),
            Value::Text(k) => Err(ProviderError::UnexpectedResponse {
                request: name,
                found: k,
            }),
            _ => Err(malformed("NSM response", "variant name is not text")),
        }
    }

    fn attestation(&self, report_data: &[u8; REPORT_DATA_LEN]) -> Result<Vec<u8>, ProviderError> {
        let opt = |v: &Option<Vec<u8>>| v.clone().map_or(Value::Null, Value::Bytes);
        let request = encode_request(
            req::REQUEST,
            vec![
                (req::USER_DATA, Value::Bytes(report_data.to_vec())),
                (req::NONCE, opt(&self.request.nonce)),
                (req::PUBLIC_KEY, opt(&self.request.public_key)),
            ],
        )?;
        let body = self.call(req::REQUEST, &request)?;
        let fields = map_fields(body, "Attestation response")?;
        if fields.len() != 1 {
            return Err(malformed(
                "Attestation response",
                "keys other than document",
            ));
        }
        match field(&fields, req::RESPONSE_DOCUMENT) {
            Some(Value::Bytes(doc)) => Ok(doc.clone()),
            _ => Err(malformed("Attestation response", "document is not bytes")),
        }
    }
}

/// The two steps of a hardware provider, in sealing order (the run path
/// takes them through [`Attesting`](super::select::Attesting)).
impl<D: NsmDevice> NitroProvider<D> {
    /// The platform this provider attests.
    pub fn platform(&self) -> Platform {
        Platform::Nitro
    }

    /// Nitro needs no offline collateral: the document carries its chain.
    pub fn collateral(&mut self) -> Result<(), ProviderError> {
        Ok(())
    }

    /// After the collateral: evidence whose report data is `report_data`,
    /// refused unless the platform echoed it.
    pub fn attest(
        &mut self,
        report_data: &[u8; REPORT_DATA_LEN],
    ) -> Result<HardwareEvidence, ProviderError> {
        let measurement = self.describe_pcr0()?;
        let document = self.attestation(report_data)?;
        let doc = NitroDocument::parse(&document)?;
        if doc.user_data.as_deref() != Some(report_data.as_slice()) {
            return Err(ProviderError::ReportDataMismatch { field: "user_data" });
        }
        if doc.nonce != self.request.nonce {
            return Err(ProviderError::EchoMismatch { field: "nonce" });
        }
        if doc.public_key != self.request.public_key {
            return Err(ProviderError::EchoMismatch {
                field: "public_key",
            });
        }
        if doc.pcr0 != measurement.value {
            return Err(ProviderError::Pcr {
                index: 0,
                reason: "the document's PCR0 differs from DescribePCR's".into(),
            });
        }
        Ok(HardwareEvidence {
            platform: Platform::Nitro,
            report_data: *report_data,
            attestation: blob(Platform::Nitro, "evidence/nitro.cose", document)?,
            collateral: Vec::new(),
            collateral_source: CollateralSource::Embedded,
            measurement,
        })
    }
}

impl<D: NsmDevice> Driver for NitroProvider<D> {
    fn platform(&self) -> Platform {
        NitroProvider::platform(self)
    }

    fn collateral(&mut self) -> Result<(), ProviderError> {
        NitroProvider::collateral(self)
    }

    fn attest(
        &mut self,
        report_data: &[u8; REPORT_DATA_LEN],
    ) -> Result<HardwareEvidence, ProviderError> {
        NitroProvider::attest(self, report_data)
    }
}

/// The fields of an attestation document the provider checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NitroDocument {
    pub user_data: Option<Vec<u8>>,
    pub nonce: Option<Vec<u8>>,
    pub public_key: Option<Vec<u8>>,
    pub pcr0: [u8; MEASUREMENT_LEN],
}

impl NitroDocument {
    /// Parses a COSE_Sign1 document just enough to read the checked
    /// fields: exactly one CBOR item (no trailing bytes), a four-element
    /// array (optionally tag 18) of bstr, map, bstr, bstr; the payload one
    /// map with text keys, `digest` = `SHA384`, `pcrs[0]` 48 bytes, and
    /// `user_data`, `nonce`, `public_key` bytes, null or absent.
    pub fn parse(document: &[u8]) -> Result<NitroDocument, ProviderError> {
        const WHAT: &str = "attestation document";
        let value = match decode_exact(document, WHAT)? {
            Value::Tag(COSE_SIGN1_TAG, inner) => *inner,
            Value::Tag(tag, _) => return Err(malformed(WHAT, &format!("CBOR tag {tag}"))),
            v => v,
        };
        let payload = match value {
            Value::Array(items) => match <[Value; 4]>::try_from(items) {
                Ok(
                    [
                        Value::Bytes(_),
                        Value::Map(_),
                        Value::Bytes(payload),
                        Value::Bytes(_),
                    ],
                ) => payload,
                _ => return Err(malformed(WHAT, "not a COSE_Sign1 [bstr, map, bstr, bstr]")),
            },
            _ => return Err(malformed(WHAT, "not a COSE_Sign1 array")),
        };
        let fields = map_fields(decode_exact(&payload, WHAT)?, WHAT)?;
        let mut keys: Vec<&str> = Vec::with_capacity(fields.len());
        for (k, _) in &fields {
            if keys.contains(&k.as_str()) {
                return Err(malformed(WHAT, &format!("key {k} repeated")));
            }
            keys.push(k);
        }
        match field(&fields, doc_keys::DIGEST) {
            Some(Value::Text(d)) if d == doc_keys::DIGEST_SHA384 => {}
            _ => return Err(malformed(WHAT, "digest is not SHA384")),
        }
        let pcrs = match field(&fields, doc_keys::PCRS) {
            Some(Value::Map(pcrs)) => pcrs,
            _ => return Err(malformed(WHAT, "pcrs is not a map")),
        };
        let mut pcr0 = None;
        for (k, v) in pcrs {
            if k.as_integer() == Some(0.into()) {
                if pcr0.is_some() {
                    return Err(malformed(WHAT, "PCR0 repeated"));
                }
                pcr0 = match v {
                    Value::Bytes(b) => <[u8; MEASUREMENT_LEN]>::try_from(b.as_slice()).ok(),
                    _ => None,
                };
                if pcr0.is_none() {
                    return Err(malformed(WHAT, "PCR0 is not 48 bytes"));
                }
            }
        }
        let pcr0 = pcr0.ok_or_else(|| malformed(WHAT, "no PCR0"))?;
        let optional = |name: &'static str| match field(&fields, name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bytes(b)) => Ok(Some(b.clone())),
            Some(_) => Err(malformed(WHAT, &format!("{name} is not bytes"))),
        };
        Ok(NitroDocument {
            user_data: optional(doc_keys::USER_DATA)?,
            nonce: optional(doc_keys::NONCE)?,
            public_key: optional(doc_keys::PUBLIC_KEY)?,
            pcr0,
        })
    }
}

fn malformed(what: &'static str, reason: &str) -> ProviderError {
    ProviderError::Malformed {
        what,
        reason: reason.to_string(),
    }
}

/// `{name: {fields...}}`, as serde encodes a struct variant.
pub(crate) fn encode_variant(
    name: &str,
    fields: Vec<(&str, Value)>,
    what: &'static str,
) -> Result<Vec<u8>, ProviderError> {
    let body = Value::Map(
        fields
            .into_iter()
            .map(|(k, v)| (Value::Text(k.to_string()), v))
            .collect(),
    );
    let value = Value::Map(vec![(Value::Text(name.to_string()), body)]);
    let mut out = Vec::new();
    ciborium::ser::into_writer(&value, &mut out).map_err(|e| ProviderError::Malformed {
        what,
        reason: e.to_string(),
    })?;
    Ok(out)
}

/// An NSM request, at most [`NSM_REQUEST_MAX_SIZE`] bytes.
pub(crate) fn encode_request(
    name: &str,
    fields: Vec<(&str, Value)>,
) -> Result<Vec<u8>, ProviderError> {
    let out = encode_variant(name, fields, "NSM request")?;
    if out.len() > NSM_REQUEST_MAX_SIZE {
        return Err(ProviderError::TooLarge {
            what: "NSM request",
            len: out.len(),
            max: NSM_REQUEST_MAX_SIZE,
        });
    }
    Ok(out)
}

/// Exactly one CBOR item: bytes after it are refused.
pub(crate) fn decode_exact(bytes: &[u8], what: &'static str) -> Result<Value, ProviderError> {
    let mut rest = bytes;
    let value: Value =
        ciborium::de::from_reader_with_recursion_limit(&mut rest, CBOR_RECURSION_LIMIT)
            .map_err(|e| malformed(what, &format!("CBOR: {e}")))?;
    if !rest.is_empty() {
        return Err(malformed(
            what,
            &format!("{} bytes after the CBOR item", rest.len()),
        ));
    }
    Ok(value)
}

/// A CBOR map with text keys, as `(key, value)` pairs.
pub(crate) fn map_fields(
    value: Value,
    what: &'static str,
) -> Result<Vec<(String, Value)>, ProviderError> {
    match value {
        Value::Map(entries) => entries
            .into_iter()
            .map(|(k, v)| match k {
                Value::Text(k) => Ok((k, v)),
                _ => Err(malformed(what, "a key is not text")),
            })
            .collect(),
        _ => Err(malformed(what, "not a map")),
    }
}

pub(crate) fn field<'a>(fields: &'a [(String, Value)], name: &str) -> Option<&'a Value> {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_encode_like_the_nsm_api() {
        // serde's externally tagged enum through ciborium: a one-entry map
        // from the variant name to the struct's fields in declaration order.
        let bytes = encode_request("DescribePCR", vec![("index", Value::Integer(0.into()))])
            .expect("encode");
        assert_eq!(
            hex::encode(&bytes),
            // {"DescribePCR": {"index": 0}}
            "a16b4465736372696265504352a165696e64657800"
        );
        let bytes = encode_request(
            "Attestation",
            vec![
                ("user_data", Value::Bytes(vec![0xAB])),
                ("nonce", Value::Null),
                ("public_key", Value::Null),
            ],
        )
        .expect("encode");
        assert_eq!(
            hex::encode(&bytes),
            concat!(
                "a1",
                "6b",
                "4174746573746174696f6e", // "Attestation"
                "a3",
                "69",
                "757365725f64617461",
                "41ab", // "user_data": h'AB'
                "65",
                "6e6f6e6365",
                "f6", // "nonce": null
                "6a",
                "7075626c69635f6b6579",
                "f6" // "public_key": null
            )
        );
    }

    #[test]
    fn decode_exact_refuses_trailing_bytes() {
        assert!(decode_exact(&[0xf6], "x").is_ok());
        assert!(matches!(
            decode_exact(&[0xf6, 0x00], "x"),
            Err(ProviderError::Malformed { .. })
        ));
        assert!(decode_exact(&[0x42, 0x00], "x").is_err());
    }
}
