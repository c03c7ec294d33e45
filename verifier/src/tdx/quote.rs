//! Strict parsing of Intel TDX DCAP quotes, versions 4 and 5.
//!
//! Layout (Intel TDX DCAP Quoting Library API, appendix A "Quote format";
//! Intel `sgx_quote_4.h` / `sgx_quote_5.h`; all integers little-endian):
//!
//! ```text
//! header            48  version u16 | att_key_type u16 | tee_type u32 |
//!                       reserved u16 | reserved u16 | qe_vendor_id [16] | user_data [20]
//! v5 only:           6  body_type u16 | body_size u32
//! body         584/648/885  TD report 1.0 (v4, v5 type 2) / 1.5 (type 3) / 1.5-Ex (type 4)
//! sig_data_len       4  u32
//! sig_data              ecdsa_sig [64] | attestation_key [64] |
//!                       cert_type u16 (= 6) | cert_size u32 | cert_data:
//!                         qe_report [384] | qe_report_sig [64] |
//!                         qe_auth_len u16 | qe_auth_data |
//!                         cert_type u16 (= 5) | cert_size u32 | PEM PCK chain
//! ```
//!
//! On top of dcap-qvl's own parser (which is run too and must agree), this
//! one requires: tee_type TDX (0x81) only; attestation key type 2 and Intel's
//! QE vendor id; every length field to match its contents exactly, at both
//! certification-data levels; certification data types 6 and 5 (an offline
//! verifier needs the embedded PCK chain); a strict PEM chain of exactly three
//! certificates; and nothing but zero padding after the signature data.

use kolm_format::reader::Reader;

use super::error::TdxError;
use super::pki::{self, Cert, PckSgxExtension};

/// Largest quote input accepted (a quote with its PEM chain is about 5 KiB).
pub const MAX_QUOTE_BYTES: usize = 64 * 1024;

/// Intel's QE vendor id `939A7233-F79C-4CA9-940A-0DB3957F0607`.
pub const INTEL_QE_VENDOR_ID: [u8; 16] = [
    0x93, 0x9a, 0x72, 0x33, 0xf7, 0x9c, 0x4c, 0xa9, 0x94, 0x0a, 0x0d, 0xb3, 0x95, 0x7f, 0x06, 0x07,
];

/// TEE type of TDX quotes.
pub const TEE_TYPE_TDX: u32 = 0x0000_0081;
/// Attestation key type ECDSA-256-with-P-256.
const ATT_KEY_TYPE_ECDSA_P256: u16 = 2;
/// Quote header size.
const HEADER_LEN: usize = 48;
/// v5 body descriptor size.
const BODY_DESCRIPTOR_LEN: usize = 6;
/// TD report 1.0 size.
const TD_REPORT10_LEN: usize = 584;
/// TD report 1.5 size.
const TD_REPORT15_LEN: usize = 648;
/// TD report 1.5-Ex size.
const TD_REPORT15_EX_LEN: usize = 885;
/// SGX enclave report (QE report) size.
const ENCLAVE_REPORT_LEN: usize = 384;
/// Certification data type: QE report certification data.
const CERT_TYPE_QE_REPORT: u16 = 6;
/// Certification data type: PCK certificate chain (PEM).
const CERT_TYPE_PCK_CHAIN: u16 = 5;

/// The structure read by `r` must end exactly here: bytes left over mean
/// that the length field `field` (which declared `declared` bytes) does not
/// match its contents.
fn finish(r: &Reader<'_>, field: &'static str, declared: usize) -> Result<(), TdxError> {
    if r.remaining() == 0 {
        Ok(())
    } else {
        Err(TdxError::LengthMismatch {
            field,
            declared,
            actual: r.position(),
        })
    }
}

fn to_usize(v: u32) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// Header (+ v5 descriptor) + body length for a body type: the bytes the
/// attestation key signs. `None` for an unknown body type.
const fn signed_len_of(body_type: Option<u16>) -> Option<usize> {
    let (descriptor, body) = match body_type {
        None => (0, TD_REPORT10_LEN),
        Some(2) => (BODY_DESCRIPTOR_LEN, TD_REPORT10_LEN),
        Some(3) => (BODY_DESCRIPTOR_LEN, TD_REPORT15_LEN),
        Some(4) => (BODY_DESCRIPTOR_LEN, TD_REPORT15_EX_LEN),
        Some(_) => return None,
    };
    match HEADER_LEN.checked_add(descriptor) {
        Some(n) => n.checked_add(body),
        None => None,
    }
}

/// The quote header (48 bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuoteHeader {
    /// 4 or 5.
    pub version: u16,
    /// Always 2 (ECDSA P-256) once parsed.
    pub attestation_key_type: u16,
    /// Always 0x81 (TDX) once parsed.
    pub tee_type: u32,
    /// Bytes 8..12: QE SVN / PCE SVN in SGX quotes, reserved in TDX quotes.
    /// Signed, not interpreted.
    pub reserved: [u8; 4],
    /// Always Intel's once parsed.
    pub qe_vendor_id: [u8; 16],
    /// QE-defined; the first 16 bytes are the platform's QE id.
    pub user_data: [u8; 20],
}

/// TD report body fields common to TD reports 1.0, 1.5 and 1.5-Ex
/// (Intel TDX Module ABI specification, TDREPORT/TDINFO; quote body
/// `sgx_report2_body_t`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TdReport10 {
    pub tee_tcb_svn: [u8; 16],
    pub mrseam: [u8; 48],
    pub mrsignerseam: [u8; 48],
    pub seam_attributes: [u8; 8],
    pub td_attributes: [u8; 8],
    pub xfam: [u8; 8],
    pub mrtd: [u8; 48],
    pub mrconfigid: [u8; 48],
    pub mrowner: [u8; 48],
    pub mrownerconfig: [u8; 48],
    pub rtmr: [[u8; 48]; 4],
    pub report_data: [u8; 64],
}

/// Fields TD report 1.5 adds (`sgx_report2_body_v1_5_t`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TdReport15Fields {
    pub tee_tcb_svn2: [u8; 16],
    pub mrservicetd: [u8; 48],
}

/// Fields TD report 1.5-Ex adds (`sgx_report2_body_v1_5_ex_t`, 237 bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TdReport15ExFields {
    pub vmid: u8,
    pub td_id: [u8; 32],
    pub dev_info: [u8; 48],
    pub init_service_td_hash: [u8; 48],
    pub init_service_td_attributes: [u8; 8],
    pub init_cpu_svn: [u8; 16],
    pub init_tee_tcb_svn: [u8; 16],
    pub init_tee_fmspc: [u8; 12],
    pub cur_service_td_hash: [u8; 48],
    pub cur_service_td_attributes: [u8; 8],
}

/// The TD report in the quote body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TdReport {
    /// v5 body type (2, 3 or 4); `None` for a v4 quote.
    pub body_type: Option<u16>,
    pub base: TdReport10,
    /// Present for body types 3 and 4.
    pub td15: Option<TdReport15Fields>,
    /// Present for body type 4.
    pub td15ex: Option<TdReport15ExFields>,
}

impl TdReport {
    fn parse(r: &mut Reader<'_>, body_type: Option<u16>) -> Result<TdReport, TdxError> {
        let base = TdReport10 {
            tee_tcb_svn: r.array("TEE_TCB_SVN")?,
            mrseam: r.array("MRSEAM")?,
            mrsignerseam: r.array("MRSIGNERSEAM")?,
            seam_attributes: r.array("SEAMATTRIBUTES")?,
            td_attributes: r.array("TDATTRIBUTES")?,
            xfam: r.array("XFAM")?,
            mrtd: r.array("MRTD")?,
            mrconfigid: r.array("MRCONFIGID")?,
            mrowner: r.array("MROWNER")?,
            mrownerconfig: r.array("MROWNERCONFIG")?,
            rtmr: [
                r.array("RTMR0")?,
                r.array("RTMR1")?,
                r.array("RTMR2")?,
                r.array("RTMR3")?,
            ],
            report_data: r.array("REPORTDATA")?,
        };
        let td15 = match body_type {
            Some(3 | 4) => Some(TdReport15Fields {
                tee_tcb_svn2: r.array("TEE_TCB_SVN2")?,
                mrservicetd: r.array("MRSERVICETD")?,
            }),
            _ => None,
        };
        let td15ex = match body_type {
            Some(4) => Some(TdReport15ExFields {
                vmid: r.u8("VMID")?,
                td_id: r.array("TD_ID")?,
                dev_info: r.array("DEV_INFO")?,
                init_service_td_hash: r.array("INIT_SERVICE_TD_HASH")?,
                init_service_td_attributes: r.array("INIT_SERVICE_TD_ATTRIBUTES")?,
                init_cpu_svn: r.array("INIT_CPU_SVN")?,
                init_tee_tcb_svn: r.array("INIT_TEE_TCB_SVN")?,
                init_tee_fmspc: r.array("INIT_TEE_FMSPC")?,
                cur_service_td_hash: r.array("CUR_SERVICE_TD_HASH")?,
                cur_service_td_attributes: r.array("CUR_SERVICE_TD_ATTRIBUTES")?,
            }),
            _ => None,
        };
        Ok(TdReport {
            body_type,
            base,
            td15,
            td15ex,
        })
    }

    /// TD_ATTRIBUTES bit 0 (TUD.DEBUG).
    pub fn debug(&self) -> bool {
        self.base.td_attributes[0] & 0x01 != 0
    }

    /// TD_ATTRIBUTES bits 7:0 (TUD, "TD under debug"): any set bit means the
    /// TD is not trustworthy.
    pub fn tud(&self) -> u8 {
        self.base.td_attributes[0]
    }
}

/// The SGX report of the Quoting Enclave (384 bytes), signed by the PCK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QeReport {
    raw: [u8; ENCLAVE_REPORT_LEN],
    pub cpu_svn: [u8; 16],
    pub miscselect: u32,
    pub attributes: [u8; 16],
    pub mrenclave: [u8; 32],
    pub mrsigner: [u8; 32],
    pub isvprodid: u16,
    pub isvsvn: u16,
    pub report_data: [u8; 64],
}

impl QeReport {
    fn parse(raw: [u8; ENCLAVE_REPORT_LEN]) -> Result<QeReport, TdxError> {
        let mut r = Reader::new(&raw);
        let cpu_svn = r.array("QE CPUSVN")?;
        let miscselect = r.u32_le("QE MISCSELECT")?;
        r.take(28, "QE reserved1")?;
        let attributes = r.array("QE ATTRIBUTES")?;
        let mrenclave = r.array("QE MRENCLAVE")?;
        r.take(32, "QE reserved2")?;
        let mrsigner = r.array("QE MRSIGNER")?;
        r.take(96, "QE reserved3")?;
        let isvprodid = r.u16_le("QE ISVPRODID")?;
        let isvsvn = r.u16_le("QE ISVSVN")?;
        r.take(60, "QE reserved4")?;
        let report_data = r.array("QE REPORTDATA")?;
        finish(&r, "QE report", ENCLAVE_REPORT_LEN)?;
        Ok(QeReport {
            raw,
            cpu_svn,
            miscselect,
            attributes,
            mrenclave,
            mrsigner,
            isvprodid,
            isvsvn,
            report_data,
        })
    }

    /// The 384 signed bytes.
    pub fn raw(&self) -> &[u8; ENCLAVE_REPORT_LEN] {
        &self.raw
    }
}

/// What follows the signature data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trailing {
    /// Nothing: the input ends with the signature data.
    None,
    /// `len` zero bytes (buffer padding from the quote-generation interface).
    ZeroPadding { len: usize },
    /// Bytes that are not all zero.
    Data {
        offset: usize,
        len: usize,
        first_nonzero: usize,
    },
}

/// A structurally valid TDX quote (v4 or v5). Obtained from
/// [`parse_tdx_quote`](super::parse_tdx_quote); its signatures are not yet
/// checked.
#[derive(Debug, Clone)]
pub struct TdxQuote {
    /// The quote bytes through the end of the signature data.
    bytes: Vec<u8>,
    header: QuoteHeader,
    report: TdReport,
    /// Length of header (+ v5 descriptor) + body: what the attestation key signs.
    signed_len: usize,
    signature: [u8; 64],
    attestation_key: [u8; 64],
    qe_report: QeReport,
    qe_report_signature: [u8; 64],
    qe_auth_data: Vec<u8>,
    pck_chain_pem: Vec<u8>,
    pck_chain: Vec<Cert>,
    pck_extension: PckSgxExtension,
    trailing: Trailing,
}

impl TdxQuote {
    /// Parses the structure; bytes after the signature data are classified
    /// in [`TdxQuote::trailing`], not rejected.
    pub(crate) fn parse_structure(input: &[u8]) -> Result<TdxQuote, TdxError> {
        if input.len() > MAX_QUOTE_BYTES {
            return Err(TdxError::TooLarge {
                what: "quote",
                len: input.len(),
                max: MAX_QUOTE_BYTES,
            });
        }
        let mut r = Reader::new(input);
        let version = r.u16_le("header.version")?;
        let attestation_key_type = r.u16_le("header.att_key_type")?;
        let tee_type = r.u32_le("header.tee_type")?;
        let reserved = r.array("header.reserved")?;
        let qe_vendor_id = r.array("header.qe_vendor_id")?;
        let user_data = r.array("header.user_data")?;
        if tee_type != TEE_TYPE_TDX {
            return Err(TdxError::WrongTeeType { tee_type });
        }
        if !matches!(version, 4 | 5) {
            return Err(TdxError::UnsupportedVersion { version });
        }
        if attestation_key_type != ATT_KEY_TYPE_ECDSA_P256 {
            return Err(TdxError::UnsupportedAttestationKeyType {
                key_type: attestation_key_type,
            });
        }
        if qe_vendor_id != INTEL_QE_VENDOR_ID {
            return Err(TdxError::UnknownQeVendor {
                vendor_id: hex::encode(qe_vendor_id),
            });
        }
        let header = QuoteHeader {
            version,
            attestation_key_type,
            tee_type,
            reserved,
            qe_vendor_id,
            user_data,
        };

        let body_type = if version == 5 {
            let body_type = r.u16_le("body.type")?;
            let body_size = to_usize(r.u32_le("body.size")?);
            let expected = match body_type {
                2 => TD_REPORT10_LEN,
                3 => TD_REPORT15_LEN,
                4 => TD_REPORT15_EX_LEN,
                _ => return Err(TdxError::UnsupportedBodyType { body_type }),
            };
            if body_size != expected {
                return Err(TdxError::LengthMismatch {
                    field: "body.size",
                    declared: body_size,
                    actual: expected,
                });
            }
            Some(body_type)
        } else {
            None
        };
        let report = TdReport::parse(&mut r, body_type)?;
        let signed_len = r.position();
        debug_assert_eq!(Some(signed_len), signed_len_of(body_type));

        let sig_len = to_usize(r.u32_le("signature data length")?);
        let sig_base = r.offset();
        let sig_data = r.take(sig_len, "signature data")?;
        let end = r.position();
        let trailing_bytes = r.rest();

        let mut s = Reader::with_base(sig_data, sig_base);
        let signature = s.array("quote signature")?;
        let attestation_key = s.array("attestation key")?;
        let cert_type = s.u16_le("certification data type")?;
        if cert_type != CERT_TYPE_QE_REPORT {
            return Err(TdxError::UnsupportedCertificationDataType {
                level: "outer",
                cert_type,
                expected: CERT_TYPE_QE_REPORT,
            });
        }
        let cert_len = to_usize(s.u32_le("certification data size")?);
        let cert_base = s.offset();
        let cert_data = s.take(cert_len, "certification data")?;
        finish(&s, "signature data length", sig_len)?;

        let mut c = Reader::with_base(cert_data, cert_base);
        let qe_report = QeReport::parse(c.array("QE report")?)?;
        let qe_report_signature = c.array("QE report signature")?;
        let auth_len = usize::from(c.u16_le("QE authentication data size")?);
        let qe_auth_data = c.take(auth_len, "QE authentication data")?.to_vec();
        let inner_type = c.u16_le("QE certification data type")?;
        if inner_type != CERT_TYPE_PCK_CHAIN {
            return Err(TdxError::UnsupportedCertificationDataType {
                level: "inner",
                cert_type: inner_type,
                expected: CERT_TYPE_PCK_CHAIN,
            });
        }
        let chain_len = to_usize(c.u32_le("QE certification data size")?);
        let chain_pem = c.take(chain_len, "PCK certificate chain")?;
        finish(&c, "certification data size", cert_len)?;

        let pck_chain = pki::parse_pem_chain(chain_pem, "quote PCK certificate chain", true)?;
        if pck_chain.len() != 3 {
            return Err(TdxError::ChainLength {
                what: "quote PCK certificate chain",
                count: pck_chain.len(),
                expected: 3,
            });
        }
        let pck_extension = pck_chain
            .first()
            .ok_or(TdxError::ChainLength {
                what: "quote PCK certificate chain",
                count: 0,
                expected: 3,
            })?
            .sgx_extension()?;

        let trailing = if trailing_bytes.is_empty() {
            Trailing::None
        } else {
            match trailing_bytes.iter().position(|b| *b != 0) {
                None => Trailing::ZeroPadding {
                    len: trailing_bytes.len(),
                },
                Some(i) => Trailing::Data {
                    offset: end,
                    len: trailing_bytes.len(),
                    first_nonzero: end.saturating_add(i),
                },
            }
        };
        let bytes = input.get(..end).unwrap_or_default().to_vec();

        // dcap-qvl parses the same bytes during appraisal; it must accept
        // what this parser accepted, and read the same TD report.
        let theirs = dcap_qvl::quote::Quote::parse(&bytes).map_err(|e| TdxError::DcapParse {
            detail: format!("{e:#}"),
        })?;
        let agrees = theirs.report.as_td10().is_some_and(|td| {
            td.report_data == report.base.report_data
                && td.mr_td == report.base.mrtd
                && td.td_attributes == report.base.td_attributes
                && td.rt_mr3 == report.base.rtmr[3]
        }) && theirs.header.tee_type == TEE_TYPE_TDX;
        if !agrees {
            return Err(TdxError::DcapParse {
                detail: "dcap-qvl reads a different TD report".into(),
            });
        }

        Ok(TdxQuote {
            bytes,
            header,
            report,
            signed_len,
            signature,
            attestation_key,
            qe_report,
            qe_report_signature,
            qe_auth_data,
            pck_chain_pem: chain_pem.to_vec(),
            pck_chain,
            pck_extension,
            trailing,
        })
    }

    /// The quote bytes through the end of the signature data (no padding).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The header.
    pub fn header(&self) -> &QuoteHeader {
        &self.header
    }

    /// Quote version (4 or 5).
    pub fn version(&self) -> u16 {
        self.header.version
    }

    /// The TD report.
    pub fn td_report(&self) -> &TdReport {
        &self.report
    }

    /// REPORTDATA (64 bytes), e.g. the hash the TD bound into the quote.
    pub fn report_data(&self) -> &[u8; 64] {
        &self.report.base.report_data
    }

    /// MRTD, the TD's build-time measurement.
    pub fn mrtd(&self) -> &[u8; 48] {
        &self.report.base.mrtd
    }

    /// RTMR0..RTMR3.
    pub fn rtmrs(&self) -> &[[u8; 48]; 4] {
        &self.report.base.rtmr
    }

    /// The bytes the attestation key signs: header (+ v5 descriptor) + body.
    pub fn signed_bytes(&self) -> &[u8] {
        self.bytes.get(..self.signed_len).unwrap_or_default()
    }

    /// ECDSA P-256 signature `r || s` over [`TdxQuote::signed_bytes`].
    pub fn signature(&self) -> &[u8; 64] {
        &self.signature
    }

    /// The attestation public key (`x || y`).
    pub fn attestation_key(&self) -> &[u8; 64] {
        &self.attestation_key
    }

    /// The Quoting Enclave's report.
    pub fn qe_report(&self) -> &QeReport {
        &self.qe_report
    }

    /// ECDSA P-256 signature `r || s` over the QE report, by the PCK key.
    pub fn qe_report_signature(&self) -> &[u8; 64] {
        &self.qe_report_signature
    }

    /// QE authentication data (hashed with the attestation key into the QE
    /// report's REPORTDATA).
    pub fn qe_auth_data(&self) -> &[u8] {
        &self.qe_auth_data
    }

    /// The PCK chain as embedded (PEM, with its NUL terminator if any).
    pub fn pck_chain_pem(&self) -> &[u8] {
        &self.pck_chain_pem
    }

    /// The PCK chain: leaf, PCK Platform/Processor CA, root.
    pub fn pck_chain(&self) -> &[Cert] {
        &self.pck_chain
    }

    /// The Intel SGX extension of the PCK leaf (FMSPC, TCB components).
    pub fn pck_extension(&self) -> &PckSgxExtension {
        &self.pck_extension
    }

    /// What followed the signature data in the input.
    pub fn trailing(&self) -> Trailing {
        self.trailing
    }
}
