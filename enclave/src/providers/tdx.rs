//! Intel TDX: the Linux configfs-tsm report interface
//! (`Documentation/ABI/testing/configfs-tsm`).
//!
//! Under `/sys/kernel/config/tsm/report/` each `mkdir` creates a report
//! directory with attribute files; the ones used here:
//!
//! | file | access | meaning |
//! |---|---|---|
//! | `inblob` | write | up to 64 bytes of report data (written as one 64-byte write) |
//! | `outblob` | read | the quote for the current `inblob` (generated on read) |
//! | `provider` | read | the TSM driver, `tdx_guest` for TDX |
//! | `generation` | read | decimal counter, incremented by every write to `inblob` (and the other options) |
//!
//! The provider makes a directory with a name unique to this process,
//! checks `provider`, reads `generation`, writes `inblob`, reads `outblob`,
//! re-reads `generation` and refuses the quote unless it moved by exactly
//! the one write made here (another writer in the same directory would
//! have changed `inblob` under it), then removes the directory (also on
//! error). The root is a parameter so the tests run against a temporary
//! directory laid out the same way (`fake::FakeTsm`, feature `fakes`).
//!
//! The quote (Intel TDX DCAP Quoting Library API, "Quote format"; v4:
//! header + TD report 1.0; v5: header + body descriptor (`body_type` u16,
//! `body_size` u32) + TD report 1.0 (type 2), 1.5 (type 3) or 1.5-Ex (type
//! 4); then `sig_data_len` u32 + signature data; the layouts are
//! [`kolm_tee_layouts::tdx`], the verifier's) is read just far enough to
//! check it: TEE type TDX (0x81), the lengths, `REPORTDATA` equal to the
//! request, and `MRTD` as the measurement. Zero bytes after the signature
//! data (buffer padding) are dropped, anything else after it is refused.
//!
//! DCAP collateral is not fetched here: it is read from the enclave-side
//! offline bundle (dcap-qvl `QuoteCollateralV3` JSON) in `collateral()`
//! and stored as `evidence/tdx-collateral.json` so the artifact verifies
//! offline. Without an enclave-side bundle the evidence carries none
//! ([`CollateralSource::Absent`]) and the run path completes it with the
//! host's bundle sent with the job (`select::Attesting`).

use std::io::{self, Read as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use kolm_format::reader::Reader;
use kolm_policy::Platform;
use kolm_tee_layouts::LayoutError;
use kolm_tee_layouts::tdx::{body_descriptor, header, quote, td_report10};

use super::collateral::CollateralShapeError;
use super::sealed::Driver;
use super::{
    CollateralSource, HardwareEvidence, MEASUREMENT_LEN, Measurement, MeasurementKind,
    ProviderError, REPORT_DATA_LEN, Retry, RetryPolicy, blob, is_busy, read_bundle_file,
};

/// The configfs-tsm report root.
pub const TSM_REPORT_ROOT: &str = "/sys/kernel/config/tsm/report";
/// `provider` of the TDX guest driver.
pub const TDX_PROVIDER: &str = "tdx_guest";
/// Largest quote read from `outblob` (the evidence slot's cap).
pub const MAX_QUOTE_BYTES: usize = 64 * 1024;
/// Largest collateral file read from the bundle (the evidence slot's cap).
pub const MAX_COLLATERAL_BYTES: usize = 1024 * 1024;
/// Quote header length.
pub const QUOTE_HEADER_LEN: usize = header::SIZE;
/// TEE type of a TDX quote.
pub const TEE_TYPE_TDX: u32 = header::TEE_TYPE_TDX;

/// The keys of dcap-qvl's `QuoteCollateralV3` JSON; the last is optional.
const COLLATERAL_KEYS: [&str; 10] = [
    "pck_crl_issuer_chain",
    "root_ca_crl",
    "pck_crl",
    "tcb_info_issuer_chain",
    "tcb_info",
    "tcb_info_signature",
    "qe_identity_issuer_chain",
    "qe_identity",
    "qe_identity_signature",
    "pck_certificate_chain",
];

/// The file operations on configfs-tsm, behind a trait so the tests can
/// stand in for the kernel.
pub trait TsmFs {
    fn mkdir(&self, path: &Path) -> io::Result<()>;
    fn rmdir(&self, path: &Path) -> io::Result<()>;
    /// Reads at most `max + 1` bytes (so the caller can tell "too long").
    fn read(&self, path: &Path, max: usize) -> io::Result<Vec<u8>>;
    /// One write of `bytes`, then close (configfs commits binary
    /// attributes on close).
    fn write(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
}

/// The real configfs: plain file-system calls.
#[derive(Debug, Default, Clone, Copy)]
pub struct ConfigFs;

impl TsmFs for ConfigFs {
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir(path)
    }

    fn rmdir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir(path)
    }

    fn read(&self, path: &Path, max: usize) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        std::fs::File::open(path)?
            .take(u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1))
            .read_to_end(&mut out)?;
        Ok(out)
    }

    fn write(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
        let n = f.write(bytes)?;
        if n != bytes.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write: {n} of {} bytes", bytes.len()),
            ));
        }
        Ok(())
    }
}

/// Provider settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TdxOptions {
    /// The configfs-tsm report root ([`TSM_REPORT_ROOT`] on a real guest).
    pub root: PathBuf,
    /// The enclave-side offline bundle's DCAP collateral
    /// (`QuoteCollateralV3` JSON); `None`: the enclave has none, and the
    /// evidence carries none ([`CollateralSource::Absent`]) for the run
    /// path to complete with the host's bundle.
    pub collateral: Option<PathBuf>,
    pub retry: RetryPolicy,
}

/// The TDX provider.
#[derive(Debug)]
pub struct TdxProvider<F> {
    fs: F,
    options: TdxOptions,
    /// `None` until [`TdxProvider::collateral`] ran; then the
    /// bundle's file, if one is configured.
    collateral: Option<Option<Vec<u8>>>,
}

/// A checked quote: the fields the provider uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TdxQuote {
    /// The quote without any trailing zero padding.
    pub bytes: Vec<u8>,
    pub version: u16,
    /// v5 body type; `None` for v4.
    pub body_type: Option<u16>,
    pub mrtd: [u8; MEASUREMENT_LEN],
    pub report_data: [u8; REPORT_DATA_LEN],
    /// Zero bytes dropped after the signature data.
    pub padding: usize,
}

const QUOTE_WHAT: &str = "TDX quote";

impl TdxQuote {
    /// Reads a v4 or v5 TDX quote's header, body and signature length.
    pub fn parse(bytes: &[u8]) -> Result<TdxQuote, ProviderError> {
        let m = |e| ProviderError::malformed(QUOTE_WHAT, e);
        let bad = |reason: String| ProviderError::Malformed {
            what: QUOTE_WHAT,
            reason,
        };
        if bytes.len() > MAX_QUOTE_BYTES {
            return Err(ProviderError::TooLarge {
                what: QUOTE_WHAT,
                len: bytes.len(),
                max: MAX_QUOTE_BYTES,
            });
        }
        let mut r = Reader::new(bytes);
        let version = r.u16_le("header.version").map_err(m)?;
        let _key_type = r.u16_le("header.att_key_type").map_err(m)?;
        let tee_type = r.u32_le("header.tee_type").map_err(m)?;
        const { assert!(header::TEE_TYPE.end() == 8) };
        r.take(QUOTE_HEADER_LEN - header::TEE_TYPE.end(), "header rest")
            .map_err(m)?;
        if tee_type != TEE_TYPE_TDX {
            return Err(bad(format!("TEE type {tee_type:#x}, expected 0x81 (TDX)")));
        }
        let (body_type, body_len) = match version {
            4 => (None, td_report10::SIZE),
            5 => {
                const { assert!(body_descriptor::SIZE == 6) };
                let body_type = r.u16_le("body.type").map_err(m)?;
                let size = r.u32_le("body.size").map_err(m)?;
                let expected = match quote::body_size(Some(body_type)) {
                    Some(n) => n,
                    None => {
                        return Err(bad(format!("v5 body type {body_type}, expected 2, 3 or 4")));
                    }
                };
                if usize::try_from(size).ok() != Some(expected) {
                    return Err(bad(format!(
                        "v5 body type {body_type} declares {size} bytes, expected {expected}"
                    )));
                }
                (Some(body_type), expected)
            }
            v => return Err(bad(format!("version {v}, expected 4 or 5"))),
        };
        let body = r.take(body_len, "TD report").map_err(m)?;
        // Every TD report starts with a TD report 1.0 (MRTD, REPORTDATA).
        let l = |e: LayoutError| bad(e.to_string());
        let mrtd = td_report10::MRTD.read(body).map_err(l)?;
        let report_data = td_report10::REPORTDATA.read(body).map_err(l)?;
        let sig_len = r.u32_le("signature data length").map_err(m)?;
        let sig_len = usize::try_from(sig_len).unwrap_or(usize::MAX);
        r.take(sig_len, "signature data").map_err(m)?;
        let end = r.position();
        let rest = bytes.get(end..).unwrap_or_default();
        if let Some(i) = rest.iter().position(|b| *b != 0) {
            return Err(bad(format!(
                "{} bytes after the signature data, non-zero at offset {}",
                rest.len(),
                end.saturating_add(i)
            )));
        }
        Ok(TdxQuote {
            bytes: bytes.get(..end).unwrap_or_default().to_vec(),
            version,
            body_type,
            mrtd,
            report_data,
            padding: rest.len(),
        })
    }
}

/// Checks the bundle's collateral is one JSON object with exactly the
/// `QuoteCollateralV3` keys (the optional PCK chain aside), all strings.
pub fn check_collateral(path: &Path, bytes: &[u8]) -> Result<(), ProviderError> {
    check_collateral_json(bytes).map_err(|reason| ProviderError::Bundle {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    })
}

/// [`check_collateral`] of bytes from anywhere (the host's collateral sent
/// with a job, too); the error says what is wrong.
pub fn check_collateral_json(bytes: &[u8]) -> Result<(), CollateralShapeError> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|error| CollateralShapeError::NotJson { error })?;
    let obj = value.as_object().ok_or(CollateralShapeError::NotObject)?;
    for key in obj.keys() {
        if !COLLATERAL_KEYS.contains(&key.as_str()) {
            return Err(CollateralShapeError::UnknownKey { key: key.clone() });
        }
    }
    for (i, key) in COLLATERAL_KEYS.iter().enumerate() {
        match obj.get(*key) {
            Some(serde_json::Value::String(_)) => {}
            Some(_) => return Err(CollateralShapeError::NotString { key }),
            None if i + 1 == COLLATERAL_KEYS.len() => {}
            None => return Err(CollateralShapeError::MissingKey { key }),
        }
    }
    Ok(())
}

static REPORT_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A report directory name no other request of this process uses, and
/// unlikely to collide with another process (pid, counter, clock).
fn unique_name() -> String {
    let n = REPORT_COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("kolm-{}-{n}-{nanos:08x}", std::process::id())
}

fn parse_generation(path: &Path, bytes: &[u8]) -> Result<u64, ProviderError> {
    let text = std::str::from_utf8(bytes).ok();
    text.and_then(|t| t.strip_suffix('\n').or(Some(t)))
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| ProviderError::Malformed {
            what: "configfs-tsm generation",
            reason: format!(
                "{} holds {:?}, not a decimal counter",
                path.display(),
                String::from_utf8_lossy(bytes)
            ),
        })
}

impl<F: TsmFs> TdxProvider<F> {
    pub fn new(fs: F, options: TdxOptions) -> TdxProvider<F> {
        TdxProvider {
            fs,
            options,
            collateral: None,
        }
    }

    /// The file system, for tests that inspect a fake.
    pub fn fs(&self) -> &F {
        &self.fs
    }

    fn read_attr(&self, dir: &Path, name: &str, max: usize) -> Result<Vec<u8>, ProviderError> {
        let path = dir.join(name);
        let bytes = self
            .options
            .retry
            .run("configfs-tsm read", || match self.fs.read(&path, max) {
                Ok(b) => Ok(b),
                Err(e) if is_busy(&e) => Err(Retry::Busy),
                Err(e) => Err(Retry::Fail(ProviderError::io("read", &path, e))),
            })
            .map_err(super::RetryError::into_inner)?;
        if bytes.len() > max {
            return Err(ProviderError::TooLarge {
                what: "configfs-tsm attribute",
                len: bytes.len(),
                max,
            });
        }
        Ok(bytes)
    }

    fn generation(&self, dir: &Path) -> Result<u64, ProviderError> {
        let bytes = self.read_attr(dir, "generation", 32)?;
        parse_generation(&dir.join("generation"), &bytes)
    }

    /// The steps between mkdir and rmdir.
    fn quote_in(
        &self,
        dir: &Path,
        report_data: &[u8; REPORT_DATA_LEN],
    ) -> Result<Vec<u8>, ProviderError> {
        let provider = self.read_attr(dir, "provider", 256)?;
        let provider = String::from_utf8_lossy(&provider);
        let provider = provider.strip_suffix('\n').unwrap_or(&provider);
        if provider != TDX_PROVIDER {
            return Err(ProviderError::WrongProvider {
                expected: TDX_PROVIDER,
                found: provider.to_string(),
            });
        }
        let before = self.generation(dir)?;
        let inblob = dir.join("inblob");
        self.options
            .retry
            .run("configfs-tsm write", || {
                match self.fs.write(&inblob, report_data) {
                    Ok(()) => Ok(()),
                    Err(e) if is_busy(&e) => Err(Retry::Busy),
                    Err(e) => Err(Retry::Fail(ProviderError::io("write", &inblob, e))),
                }
            })
            .map_err(super::RetryError::into_inner)?;
        let quote = self.read_attr(dir, "outblob", MAX_QUOTE_BYTES)?;
        let after = self.generation(dir)?;
        let expected = before.saturating_add(1);
        if after != expected {
            return Err(ProviderError::GenerationChanged {
                before,
                after,
                expected,
            });
        }
        Ok(quote)
    }
}

/// The two steps of a hardware provider, in sealing order (the run path
/// takes them through [`Attesting`](super::select::Attesting)).
impl<F: TsmFs> TdxProvider<F> {
    /// The platform this provider attests.
    pub fn platform(&self) -> Platform {
        Platform::Tdx
    }

    /// Reads and checks the bundle's DCAP collateral, if a bundle is
    /// configured.
    pub fn collateral(&mut self) -> Result<(), ProviderError> {
        let loaded = match &self.options.collateral {
            None => None,
            Some(path) => {
                let bytes = read_bundle_file(path, MAX_COLLATERAL_BYTES)?;
                check_collateral(path, &bytes)?;
                Some(bytes)
            }
        };
        self.collateral = Some(loaded);
        Ok(())
    }

    /// After the collateral: evidence whose report data is `report_data`,
    /// refused unless the platform echoed it.
    pub fn attest(
        &mut self,
        report_data: &[u8; REPORT_DATA_LEN],
    ) -> Result<HardwareEvidence, ProviderError> {
        let collateral = self
            .collateral
            .clone()
            .ok_or(ProviderError::CollateralNotLoaded)?;
        let dir = self.options.root.join(unique_name());
        self.fs.mkdir(&dir).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                ProviderError::DeviceMissing {
                    path: self.options.root.clone(),
                }
            } else {
                ProviderError::io("mkdir", &dir, e)
            }
        })?;
        let result = self.quote_in(&dir, report_data);
        let removed = self.fs.rmdir(&dir);
        let raw = match (result, removed) {
            (Ok(q), Ok(())) => q,
            (Ok(_), Err(e)) => return Err(ProviderError::io("rmdir", &dir, e)),
            (Err(e), Ok(())) => return Err(e),
            (Err(e), Err(rm)) => {
                tracing::warn!(dir = %dir.display(), error = %rm, "configfs-tsm: rmdir failed after an error");
                return Err(e);
            }
        };
        let quote = TdxQuote::parse(&raw)?;
        if quote.report_data != *report_data {
            return Err(ProviderError::ReportDataMismatch {
                field: "REPORTDATA",
            });
        }
        Ok(HardwareEvidence {
            platform: Platform::Tdx,
            report_data: *report_data,
            measurement: Measurement {
                kind: MeasurementKind::TdxMrtd,
                value: quote.mrtd,
            },
            attestation: blob(Platform::Tdx, "evidence/tdx-quote.bin", quote.bytes)?,
            collateral: match collateral {
                Some(c) => vec![blob(Platform::Tdx, "evidence/tdx-collateral.json", c)?],
                None => Vec::new(),
            },
            collateral_source: match &self.options.collateral {
                Some(path) => CollateralSource::OfflineBundle { path: path.clone() },
                None => CollateralSource::Absent,
            },
        })
    }
}

impl<F: TsmFs> Driver for TdxProvider<F> {
    fn platform(&self) -> Platform {
        TdxProvider::platform(self)
    }

    fn collateral(&mut self) -> Result<(), ProviderError> {
        TdxProvider::collateral(self)
    }

    fn attest(
        &mut self,
        report_data: &[u8; REPORT_DATA_LEN],
    ) -> Result<HardwareEvidence, ProviderError> {
        TdxProvider::attest(self, report_data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kolm_tee_layouts::tdx::{td_report15, td_report15_ex};

    #[test]
    fn offsets_in_the_quote() {
        // v4: header + REPORTDATA offset; v5 adds the 6-byte body descriptor.
        assert_eq!(QUOTE_HEADER_LEN + td_report10::REPORTDATA.offset(), 568);
        assert_eq!(QUOTE_HEADER_LEN + td_report10::MRTD.offset(), 184);
        assert_eq!(td_report10::REPORTDATA.size(), REPORT_DATA_LEN);
        assert_eq!(td_report10::MRTD.size(), MEASUREMENT_LEN);
        assert_eq!(td_report10::REPORTDATA.end(), td_report10::SIZE);
        assert_eq!(td_report15::SIZE, td_report10::SIZE + 16 + 48);
        assert_eq!(td_report15_ex::SIZE, td_report15::SIZE + 237);
    }

    #[test]
    fn generation_text() {
        let p = Path::new("g");
        assert_eq!(parse_generation(p, b"0\n").ok(), Some(0));
        assert_eq!(parse_generation(p, b"17").ok(), Some(17));
        assert!(parse_generation(p, b"").is_err());
        assert!(parse_generation(p, b"-1\n").is_err());
        assert!(parse_generation(p, b"1 \n").is_err());
    }

    #[test]
    fn names_are_unique() {
        assert_ne!(unique_name(), unique_name());
    }

    #[test]
    fn collateral_keys() {
        let p = Path::new("c.json");
        let full: serde_json::Map<String, serde_json::Value> = COLLATERAL_KEYS[..9]
            .iter()
            .map(|k| (k.to_string(), serde_json::Value::String("x".into())))
            .collect();
        let ok = serde_json::to_vec(&full).expect("json");
        assert!(check_collateral(p, &ok).is_ok());
        let mut extra = full.clone();
        extra.insert("x".into(), "y".into());
        assert!(check_collateral(p, &serde_json::to_vec(&extra).expect("json")).is_err());
        let mut missing = full.clone();
        missing.remove("pck_crl");
        assert!(check_collateral(p, &serde_json::to_vec(&missing).expect("json")).is_err());
        let mut wrong = full;
        wrong.insert("tcb_info".into(), serde_json::json!(1));
        assert!(check_collateral(p, &serde_json::to_vec(&wrong).expect("json")).is_err());
        assert!(check_collateral(p, b"[]").is_err());
    }
}
