//! Collateral as a job brings it and as the providers check its shape:
//! the host's bundle sent with a job ([`HostCollateral`]), what a job's
//! collateral became ([`JobCollateral`]), and the shape checks every
//! collateral file passes before it is used, whichever source it came from
//! ([`check_collateral_shape`]).

use kolm_format::reader::ReadError;

use super::{snp, tdx};

/// The host's collateral bundle as a job's submit carried it
/// (`job-submit.collateral`), each file checked for its shape
/// ([`HostCollateral::parse`]): a DER certificate, a PEM pair, a
/// `QuoteCollateralV3` JSON object. Whether it is genuine, current and
/// for this chip is the verifier's to judge: the receipt binds what is
/// used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostCollateral {
    /// `(slot path, bytes)`, in the order the host sent them.
    files: Vec<(&'static str, Vec<u8>)>,
}

/// A file of the host's collateral that is refused (the job is refused
/// before any input byte is stored).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the host's collateral {path:?}: {reason}")]
pub struct HostCollateralError {
    pub path: String,
    pub reason: String,
}

// The host's bytes: the verifier's lint set holds.
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
impl HostCollateral {
    /// Checks each submitted file against its slot's shape. The wire
    /// decoder already held the paths to hardware collateral slots, once
    /// each, within their caps; that is checked again here, so this type
    /// holds whatever way the files arrived.
    pub fn parse(
        files: &[kolm_transport::message::CollateralFile],
    ) -> Result<HostCollateral, HostCollateralError> {
        let mut out: Vec<(&'static str, Vec<u8>)> = Vec::with_capacity(files.len());
        for f in files {
            let err = |reason: String| HostCollateralError {
                path: f.path.clone(),
                reason,
            };
            let slot = kolm_transport::message::collateral_slot(&f.path)
                .ok_or_else(|| err("not a collateral file of any hardware platform".into()))?;
            if out.iter().any(|(p, _)| *p == slot.path) {
                return Err(err("sent twice".into()));
            }
            if u64::try_from(f.data.len()).map_or(true, |n| n > slot.max_bytes) {
                return Err(err(format!(
                    "{} bytes, over its slot's {}",
                    f.data.len(),
                    slot.max_bytes
                )));
            }
            check_collateral_shape(slot.path, &f.data).map_err(|e| err(e.to_string()))?;
            out.push((slot.path, f.data.clone()));
        }
        Ok(HostCollateral { files: out })
    }

    /// No files (the host has no bundle).
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The files' slot paths, in the order sent.
    pub fn paths(&self) -> Vec<&'static str> {
        self.files.iter().map(|(p, _)| *p).collect()
    }

    /// The files, `(slot path, bytes)`.
    pub fn files(&self) -> &[(&'static str, Vec<u8>)] {
        &self.files
    }
}

/// Where a job's collateral came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CollateralOrigin {
    /// The enclave's own: the platform (the SEV-SNP host's extended-report
    /// certificates), the enclave-side `--bundle`, or none needed (the
    /// evidence carries its chain, or there is no TEE).
    Enclave,
    /// The host's bundle, sent with the job: neither the platform nor the
    /// enclave had any.
    HostBundle,
}

/// A job's collateral
/// ([`AttestationProvider::job_collateral`](super::AttestationProvider::job_collateral))
/// and what became of the host's.
#[derive(Debug, Clone)]
pub struct JobCollateral {
    /// What the manifest lists and the evidence slot holds.
    pub bundle: kolm_format::seal::CollateralBundle,
    pub origin: CollateralOrigin,
    /// The host's files not used (the enclave's own won, or they are not
    /// this platform's).
    pub ignored: Vec<&'static str>,
}

/// Why bytes are not one DER certificate's outer shape
/// ([`check_der_sequence`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DerShapeError {
    /// The bytes end inside the tag, the length or the content.
    #[error("{error}")]
    Truncated { error: ReadError },
    #[error("tag {tag:#04x}, not a DER SEQUENCE")]
    NotSequence { tag: u8 },
    #[error("length of {bytes} bytes is not definite DER")]
    IndefiniteLength { bytes: usize },
    #[error("length is not minimal")]
    NonMinimalLength,
    #[error("{len} bytes after the certificate")]
    TrailingBytes { len: usize },
}

/// Why a collateral file does not have its slot's shape
/// ([`check_collateral_shape`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CollateralShapeError {
    #[error("empty")]
    Empty,
    /// `evidence/snp-vcek.der` is not one DER certificate.
    #[error("the VCEK is not one DER certificate: {error}")]
    Vcek { error: DerShapeError },
    /// The ASK/ARK file does not hold exactly two PEM certificates.
    #[error("{count} PEM certificates, expected 2 (ASK, ARK)")]
    PemCount { count: usize },
    /// The TDX collateral is not JSON.
    #[error("not JSON: {error}")]
    NotJson { error: serde_json::Error },
    #[error("not a JSON object")]
    NotObject,
    /// A key `QuoteCollateralV3` does not have.
    #[error("unknown key {key:?}")]
    UnknownKey { key: String },
    #[error("{key} is not a string")]
    NotString { key: &'static str },
    #[error("missing {key}")]
    MissingKey { key: &'static str },
    /// The path is no collateral slot.
    #[error("{path:?} is not a collateral file kolm reads")]
    NotCollateral { path: String },
}

/// Checks that a collateral file has the shape of its slot `path`, as the
/// offline bundle's files are checked: the VCEK one DER certificate, the
/// ASK/ARK file two PEM certificates, the TDX collateral a
/// `QuoteCollateralV3` JSON object; none empty. Used on the host's
/// collateral before a job runs, so garbage is refused naming the file;
/// the certificates and signatures are the verifier's to judge.
pub fn check_collateral_shape(path: &str, bytes: &[u8]) -> Result<(), CollateralShapeError> {
    if bytes.is_empty() {
        return Err(CollateralShapeError::Empty);
    }
    match path {
        "evidence/snp-vcek.der" => {
            check_der_sequence(bytes).map_err(|error| CollateralShapeError::Vcek { error })
        }
        "evidence/snp-ask-ark.pem" => snp::check_ask_ark_pem(bytes),
        "evidence/tdx-collateral.json" => tdx::check_collateral_json(bytes),
        other => Err(CollateralShapeError::NotCollateral {
            path: other.to_string(),
        }),
    }
}

/// Checks that `der` is exactly one DER SEQUENCE (a certificate's outer
/// shape): tag 0x30, a definite minimal length, nothing after it. The
/// certificate itself is the verifier's concern.
pub(super) fn check_der_sequence(der: &[u8]) -> Result<(), DerShapeError> {
    let truncated = |error| DerShapeError::Truncated { error };
    let mut r = kolm_format::reader::Reader::new(der);
    let tag = r.u8("tag").map_err(truncated)?;
    if tag != 0x30 {
        return Err(DerShapeError::NotSequence { tag });
    }
    let first = r.u8("length").map_err(truncated)?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return Err(DerShapeError::IndefiniteLength { bytes: n });
        }
        let bytes = r.take(n, "length").map_err(truncated)?;
        if bytes.first() == Some(&0) {
            return Err(DerShapeError::NonMinimalLength);
        }
        let len = bytes
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        if len < 0x80 {
            return Err(DerShapeError::NonMinimalLength);
        }
        len
    };
    r.take(len, "content").map_err(truncated)?;
    if r.remaining() != 0 {
        return Err(DerShapeError::TrailingBytes { len: r.remaining() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_sequence_shape() {
        assert!(check_der_sequence(&[0x30, 0x01, 0x05]).is_ok());
        assert!(check_der_sequence(&[0x30, 0x01, 0x05, 0x00]).is_err());
        assert!(check_der_sequence(&[0x30, 0x02, 0x05]).is_err());
        assert!(check_der_sequence(&[0x31, 0x01, 0x05]).is_err());
        assert!(check_der_sequence(&[0x30, 0x81, 0x01, 0x05]).is_err());
        let mut long = vec![0x30, 0x82, 0x01, 0x00];
        long.extend(std::iter::repeat_n(0u8, 256));
        assert!(check_der_sequence(&long).is_ok());
        long.pop();
        assert!(check_der_sequence(&long).is_err());
    }
}
