//! Offline collateral bundles: the directory `kolm-host run --bundle DIR`
//! (and `kolm-enclave --bundle`) reads, and `kolm-host bundle fetch`, the
//! one kolm command that reaches the network, fills.
//!
//! Fetching is all-or-nothing: every item is downloaded and checked with
//! the verifier library ([`snp`], [`tdx`]) before the first file is
//! written, and each file is written atomically, so a failed fetch leaves
//! the directory as it was and a file is only ever replaced by one that
//! parsed.

pub mod http;
pub mod snp;
pub mod tdx;

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The files a bundle directory may hold.
pub const BUNDLE_FILES: [&str; 4] = [SNP_VCEK, SNP_ASK_ARK, SNP_CRL, TDX_COLLATERAL];
/// The VCEK (DER) of the chip and TCB of an SNP report.
pub const SNP_VCEK: &str = "snp-vcek.der";
/// ASK and ARK of the product (PEM, AMD KDS `cert_chain`).
pub const SNP_ASK_ARK: &str = "snp-ask-ark.pem";
/// The product's CRL (DER, AMD KDS `crl`), signed by the ARK.
pub const SNP_CRL: &str = "snp-crl.der";
/// TDX quote collateral (`QuoteCollateralV3` JSON).
pub const TDX_COLLATERAL: &str = "tdx-collateral.json";

/// Why a fetch failed. [`FetchError::exit_code`] tells usage and I/O
/// problems (2) from collateral that was fetched and refused (1).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    #[error("{what}: {reason}")]
    Input { what: String, reason: String },
    #[error("GET {url}: HTTP {status}{body}")]
    Status {
        url: String,
        status: u16,
        /// The start of the response body, for the server's reason.
        body: String,
    },
    #[error("GET {url}: no complete answer within {after:?}")]
    Timeout { url: String, after: Duration },
    #[error("GET {url}: {detail}")]
    Network { url: String, detail: String },
    #[error("GET {url}: the response is larger than {limit} bytes")]
    TooLarge { url: String, limit: u64 },
    #[error("GET {url}: header {header}: {reason}")]
    Header {
        url: String,
        header: &'static str,
        reason: String,
    },
    #[error("GET {url}: refused {what}: {reason}")]
    Rejected {
        url: String,
        what: &'static str,
        reason: String,
    },
    // The OS error is part of the message and not a `source`: `bundle
    // fetch` prints the message alone (`{e}`), and anyhow's `{:#}` would
    // print a source a second time.
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
}

impl FetchError {
    /// 1 when collateral was fetched and refused (it does not parse, does
    /// not match the evidence, is too large); 2 for usage, network and
    /// I/O errors.
    pub fn exit_code(&self) -> u8 {
        match self {
            FetchError::TooLarge { .. }
            | FetchError::Header { .. }
            | FetchError::Rejected { .. } => 1,
            _ => 2,
        }
    }
}

/// One file of a bundle, fetched and checked, not yet written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// One of [`BUNDLE_FILES`].
    pub file: &'static str,
    pub bytes: Vec<u8>,
    /// Where its parts came from.
    pub urls: Vec<String>,
}

/// What was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub path: PathBuf,
    pub sha256: [u8; 32],
    pub bytes: usize,
    pub urls: Vec<String>,
}

/// Writes checked items into `dir` (created if missing), each atomically.
pub fn write(dir: &Path, items: &[Item]) -> Result<Vec<Written>, FetchError> {
    use sha2::Digest;
    let mut out = Vec::with_capacity(items.len());
    for i in items {
        let path = dir.join(i.file);
        crate::fsutil::write_atomic(&path, &i.bytes).map_err(|error| FetchError::Io {
            path: path.display().to_string(),
            error,
        })?;
        out.push(Written {
            path,
            sha256: sha2::Sha256::digest(&i.bytes).into(),
            bytes: i.bytes.len(),
            urls: i.urls.clone(),
        });
    }
    Ok(out)
}

/// `base` without a trailing `/`, checked to be an http(s) URL with no
/// query or fragment; `flag` names the option in the error.
pub fn base_url(flag: &'static str, base: &str) -> Result<String, FetchError> {
    let trimmed = base.trim_end_matches('/');
    let ok = (trimmed.starts_with("https://") || trimmed.starts_with("http://"))
        && !trimmed.contains(['?', '#', ' '])
        && trimmed.split("://").nth(1).is_some_and(|h| !h.is_empty());
    if !ok {
        return Err(FetchError::Input {
            what: format!("{flag} {base}"),
            reason: "expected an http:// or https:// URL without query or fragment".into(),
        });
    }
    Ok(trimmed.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_checked() {
        assert_eq!(
            base_url("--kds-url", "https://kdsintf.amd.com/").unwrap(),
            "https://kdsintf.amd.com"
        );
        assert_eq!(
            base_url("--pcs-url", "http://127.0.0.1:8080").unwrap(),
            "http://127.0.0.1:8080"
        );
        for bad in ["ftp://x", "kdsintf.amd.com", "https://", "https://x/?a=b"] {
            let e = base_url("--kds-url", bad).unwrap_err();
            assert!(e.to_string().starts_with("--kds-url "), "{e}");
            assert_eq!(e.exit_code(), 2);
        }
    }

    #[test]
    fn writing_is_atomic_per_file_and_reports_hashes() {
        let dir = tempfile::tempdir().unwrap();
        let items = [Item {
            file: SNP_VCEK,
            bytes: b"vcek".to_vec(),
            urls: vec!["http://x/vcek".into()],
        }];
        let w = write(&dir.path().join("new"), &items).unwrap();
        assert_eq!(w.len(), 1);
        assert_eq!(std::fs::read(&w[0].path).unwrap(), b"vcek");
        // sha256sum of the 4 bytes "vcek".
        assert_eq!(
            hex::encode(w[0].sha256),
            "b5f07d6d27726fb09021a27692042dc5f5725fd075b5ff1c02575d5c967c2430"
        );
        assert_eq!(w[0].bytes, 4);
        let names: Vec<_> = std::fs::read_dir(dir.path().join("new"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [SNP_VCEK]);
    }

    /// The OS error is printed once, both as `bundle fetch` prints the
    /// error (`{e}`) and as anyhow's `{:#}` prints a chain (it used to be a
    /// `source` as well as part of the message: `...: File exists (os error
    /// 17): File exists (os error 17)`).
    #[test]
    fn a_write_error_prints_the_os_error_once() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the bundle directory should be.
        let not_a_dir = dir.path().join("file");
        std::fs::write(&not_a_dir, b"x").unwrap();
        let items = [Item {
            file: SNP_VCEK,
            bytes: b"vcek".to_vec(),
            urls: vec![],
        }];
        let e = write(&not_a_dir, &items).unwrap_err();
        let FetchError::Io { path, error } = &e else {
            panic!("expected FetchError::Io, got {e:?}");
        };
        let shown = format!("{path}: {error}");
        assert_eq!(e.to_string(), shown);
        assert_eq!(e.exit_code(), 2);
        assert!(std::error::Error::source(&e).is_none());
        assert_eq!(format!("{:#}", anyhow::Error::from(e)), shown);
    }
}
