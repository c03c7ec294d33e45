//! The Azure HCL (paravisor) attestation report: a 32-byte header, the
//! hardware report (SEV-SNP report, or TDX TDREPORT padded to the same size),
//! then the runtime data whose SHA-256 the hardware report's first 32 bytes of
//! report data carry.

use kolm_tee_layouts::snp::report as snp_report;
use kolm_tee_layouts::tdx::tdreport;
use sha2::{Digest, Sha256};

/// Header size.
const HEADER_LEN: usize = 32;
/// Size of the hardware report slot (the SNP report size).
const HW_REPORT_LEN: usize = snp_report::SIZE;
/// TDREPORT size inside the slot.
const TDREPORT_LEN: usize = tdreport::SIZE;
/// Runtime data header: data_size, version, report_type, hash_type, var_size.
const RUNTIME_HEADER_LEN: usize = 20;
/// Runtime data JSON cap.
const MAX_RUNTIME_DATA: usize = 64 * 1024;

/// Which hardware report the HCL report carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HclKind {
    Snp,
    Tdx,
}

/// Why an HCL report is rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum HclError {
    #[error("HCL report truncated: {0}")]
    Truncated(&'static str),
    #[error("HCL report signature is not \"HCLA\"")]
    Signature,
    #[error("HCL report field {field} is {found}, expected {expected}")]
    Field {
        field: &'static str,
        found: u64,
        expected: String,
    },
    #[error("HCL report has non-zero bytes after its declared size at offset {0}")]
    TrailingData(usize),
    #[error("HCL report hash type {0} is not SHA-256 (1)")]
    HashType(u32),
}

/// A parsed HCL report.
#[derive(Debug, Clone)]
pub struct HclReport {
    pub version: u32,
    pub kind: HclKind,
    /// The hardware report bytes (an SNP `ATTESTATION_REPORT` or a
    /// `TDREPORT_STRUCT`).
    pub hw_report: Vec<u8>,
    /// The runtime data JSON, exactly as hashed.
    pub runtime_data: Vec<u8>,
}

/// The little-endian u32 at `off` (the HCL layout is read by offset).
fn u32_at(b: &[u8], off: usize, what: &'static str) -> Result<u32, HclError> {
    let rest = b.get(off..).ok_or(HclError::Truncated(what))?;
    kolm_format::reader::Reader::with_base(rest, off)
        .u32_le(what)
        .map_err(|_| HclError::Truncated(what))
}

fn field(field: &'static str, found: u32, expected: impl Into<String>) -> HclError {
    HclError::Field {
        field,
        found: u64::from(found),
        expected: expected.into(),
    }
}

impl HclReport {
    /// Parses the report; bytes after the declared size must be zero padding.
    pub fn parse(b: &[u8]) -> Result<HclReport, HclError> {
        if b.get(..4) != Some(b"HCLA".as_slice()) {
            return Err(if b.len() < 4 {
                HclError::Truncated("signature")
            } else {
                HclError::Signature
            });
        }
        let version = u32_at(b, 4, "version")?;
        if !(1..=2).contains(&version) {
            return Err(field("version", version, "1 or 2"));
        }
        let report_size = u32_at(b, 8, "report_size")? as usize;
        let request_type = u32_at(b, 12, "request_type")?;
        if request_type != 2 {
            return Err(field("request_type", request_type, "2"));
        }
        let status = u32_at(b, 16, "status")?;
        if status != 0 {
            return Err(field("status", status, "0"));
        }
        if b.get(20..HEADER_LEN)
            .is_none_or(|r| r.iter().any(|x| *x != 0))
        {
            return Err(HclError::Truncated(
                "reserved header bytes (missing or non-zero)",
            ));
        }
        let rt = HEADER_LEN + HW_REPORT_LEN;
        let data_size = u32_at(b, rt, "runtime data_size")? as usize;
        let rt_version = u32_at(b, rt + 4, "runtime version")?;
        if rt_version != 1 {
            return Err(field("runtime version", rt_version, "1"));
        }
        let report_type = u32_at(b, rt + 8, "runtime report_type")?;
        let kind = match report_type {
            2 => HclKind::Snp,
            4 => HclKind::Tdx,
            other => return Err(field("runtime report_type", other, "2 (SNP) or 4 (TDX)")),
        };
        let hash_type = u32_at(b, rt + 12, "runtime hash_type")?;
        if hash_type != 1 {
            return Err(HclError::HashType(hash_type));
        }
        let var_size = u32_at(b, rt + 16, "runtime var_size")? as usize;
        // var_size is capped first, so 20 + var_size cannot overflow; the
        // saturating forms only say so to the reader.
        let expected_size = RUNTIME_HEADER_LEN.saturating_add(var_size);
        if var_size > MAX_RUNTIME_DATA || data_size != expected_size {
            return Err(field(
                "runtime data_size",
                u32::try_from(data_size).unwrap_or(u32::MAX),
                format!("{expected_size} (20 + var_size)"),
            ));
        }
        let end = rt.saturating_add(data_size);
        if report_size != end {
            return Err(field(
                "report_size",
                u32::try_from(report_size).unwrap_or(u32::MAX),
                end.to_string(),
            ));
        }
        let runtime_data = b
            .get(rt + RUNTIME_HEADER_LEN..end)
            .ok_or(HclError::Truncated("runtime data"))?
            .to_vec();
        if let Some(pos) = b.get(end..).and_then(|t| t.iter().position(|x| *x != 0)) {
            return Err(HclError::TrailingData(end.saturating_add(pos)));
        }
        let slot = b
            .get(HEADER_LEN..HEADER_LEN + HW_REPORT_LEN)
            .ok_or(HclError::Truncated("hardware report"))?;
        let hw_report = match kind {
            HclKind::Snp => slot.to_vec(),
            HclKind::Tdx => {
                let (td, pad) = slot.split_at(TDREPORT_LEN);
                if pad.iter().any(|x| *x != 0) {
                    return Err(HclError::TrailingData(HEADER_LEN + TDREPORT_LEN));
                }
                if td.first() != Some(&tdreport::REPORT_TYPE_TDX) {
                    return Err(field(
                        "TDREPORT type",
                        u32::from(td.first().copied().unwrap_or(0)),
                        "0x81 (TDX)",
                    ));
                }
                td.to_vec()
            }
        };
        Ok(HclReport {
            version,
            kind,
            hw_report,
            runtime_data,
        })
    }

    /// The 64 report-data bytes of the hardware report.
    pub fn hw_report_data(&self) -> Option<&[u8]> {
        match self.kind {
            HclKind::Snp => self.hw_report.get(snp_report::REPORT_DATA.range()),
            // REPORTMACSTRUCT's REPORTDATA.
            HclKind::Tdx => self.hw_report.get(tdreport::REPORTDATA.range()),
        }
    }

    /// MRTD from the TDREPORT's TDINFO.
    pub fn tdx_mrtd(&self) -> Option<&[u8]> {
        match self.kind {
            HclKind::Tdx => self.hw_report.get(tdreport::MRTD.range()),
            HclKind::Snp => None,
        }
    }

    /// SHA-256 of the runtime data, which report_data[0..32] must equal.
    pub fn runtime_data_sha256(&self) -> [u8; 32] {
        Sha256::digest(&self.runtime_data).into()
    }
}
