//! Strict parsing of Intel TDX DCAP quotes, versions 4 and 5.
//!
//! Layout (Intel TDX DCAP Quoting Library API, appendix A "Quote format";
//! Intel `sgx_quote_4.h` / `sgx_quote_5.h`; all integers little-endian):
//! the one description is [`kolm_tee_layouts::tdx`] (header, v5 body
//! descriptor, TD reports 1.0, 1.5 and 1.5-Ex, the QE report, the fixed
//! heads of the signature data), and every fixed structure is read through
//! it, field by field in offset order.
//!
//! On top of dcap-qvl's own parser (which is run too and must agree), this
//! one requires: tee_type TDX (0x81) only; attestation key type 2 and Intel's
//! QE vendor id; every length field to match its contents exactly, at both
//! certification-data levels; certification data types 6 and 5 (an offline
//! verifier needs the embedded PCK chain); a strict PEM chain of exactly three
//! certificates; and nothing but zero padding after the signature data.

use kolm_format::reader::{ReadError, Reader};
use kolm_tee_layouts::Field;
use kolm_tee_layouts::tdx::{
    body_descriptor, header, qe_certification_data, qe_report, quote, signature_data, td_report10,
    td_report15, td_report15_ex,
};

use super::error::TdxError;
use super::pki::{self, Cert, PckSgxExtension};

/// Largest quote input accepted (a quote with its PEM chain is about 5 KiB).
pub const MAX_QUOTE_BYTES: usize = 64 * 1024;

/// Intel's QE vendor id `939A7233-F79C-4CA9-940A-0DB3957F0607`.
pub const INTEL_QE_VENDOR_ID: [u8; 16] = header::INTEL_QE_VENDOR_ID;

/// TEE type of TDX quotes.
pub const TEE_TYPE_TDX: u32 = header::TEE_TYPE_TDX;
/// Attestation key type ECDSA-256-with-P-256.
const ATT_KEY_TYPE_ECDSA_P256: u16 = header::ATT_KEY_TYPE_ECDSA_P256;
/// TD report 1.0 size.
const TD_REPORT10_LEN: usize = td_report10::SIZE;
/// TD report 1.5 size.
const TD_REPORT15_LEN: usize = td_report15::SIZE;
/// TD report 1.5-Ex size.
const TD_REPORT15_EX_LEN: usize = td_report15_ex::SIZE;
/// SGX enclave report (QE report) size.
const ENCLAVE_REPORT_LEN: usize = qe_report::SIZE;
/// Certification data type: QE report certification data.
const CERT_TYPE_QE_REPORT: u16 = signature_data::CERT_TYPE_QE_REPORT;
/// Certification data type: PCK certificate chain (PEM).
const CERT_TYPE_PCK_CHAIN: u16 = signature_data::CERT_TYPE_PCK_CHAIN;

/// Reads the fields of one fixed structure in order, through its layout:
/// each read takes the field's length from the table and checks (in debug
/// builds, so in every test) that the reader stands at the field's offset,
/// so the order of the reads and the table cannot disagree.
struct Fields<'r, 'a> {
    r: &'r mut Reader<'a>,
    /// The reader's offset at the start of the structure.
    start: usize,
}

impl<'r, 'a> Fields<'r, 'a> {
    fn new(r: &'r mut Reader<'a>) -> Fields<'r, 'a> {
        let start = r.offset();
        Fields { r, start }
    }

    /// `field`, named as the layout names it.
    fn read<const N: usize, const S: usize>(
        &mut self,
        field: Field<N, S>,
    ) -> Result<[u8; N], ReadError> {
        self.read_as(field, field.name())
    }

    /// `field`, named `label` in errors.
    fn read_as<const N: usize, const S: usize>(
        &mut self,
        field: Field<N, S>,
        label: &'static str,
    ) -> Result<[u8; N], ReadError> {
        debug_assert_eq!(
            self.r.offset(),
            self.start.saturating_add(field.offset()),
            "{label}"
        );
        self.r.array(label)
    }
}

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

/// The quote header ([`header`]).
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
        use td_report10 as t;
        let mut f = Fields::new(r);
        let base = TdReport10 {
            tee_tcb_svn: f.read(t::TEE_TCB_SVN)?,
            mrseam: f.read(t::MRSEAM)?,
            mrsignerseam: f.read(t::MRSIGNERSEAM)?,
            seam_attributes: f.read(t::SEAMATTRIBUTES)?,
            td_attributes: f.read(t::TDATTRIBUTES)?,
            xfam: f.read(t::XFAM)?,
            mrtd: f.read(t::MRTD)?,
            mrconfigid: f.read(t::MRCONFIGID)?,
            mrowner: f.read(t::MROWNER)?,
            mrownerconfig: f.read(t::MROWNERCONFIG)?,
            rtmr: [
                f.read(t::RTMR0)?,
                f.read(t::RTMR1)?,
                f.read(t::RTMR2)?,
                f.read(t::RTMR3)?,
            ],
            report_data: f.read(t::REPORTDATA)?,
        };
        let td15 = match body_type {
            Some(
                body_descriptor::BODY_TYPE_TD_REPORT15 | body_descriptor::BODY_TYPE_TD_REPORT15_EX,
            ) => Some(TdReport15Fields {
                tee_tcb_svn2: f.read(td_report15::TEE_TCB_SVN2)?,
                mrservicetd: f.read(td_report15::MRSERVICETD)?,
            }),
            _ => None,
        };
        let td15ex = match body_type {
            Some(body_descriptor::BODY_TYPE_TD_REPORT15_EX) => {
                use td_report15_ex as x;
                let [vmid] = f.read(x::VMID)?;
                Some(TdReport15ExFields {
                    vmid,
                    td_id: f.read(x::TD_ID)?,
                    dev_info: f.read(x::DEV_INFO)?,
                    init_service_td_hash: f.read(x::INIT_SERVICE_TD_HASH)?,
                    init_service_td_attributes: f.read(x::INIT_SERVICE_TD_ATTRIBUTES)?,
                    init_cpu_svn: f.read(x::INIT_CPU_SVN)?,
                    init_tee_tcb_svn: f.read(x::INIT_TEE_TCB_SVN)?,
                    init_tee_fmspc: f.read(x::INIT_TEE_FMSPC)?,
                    cur_service_td_hash: f.read(x::CUR_SERVICE_TD_HASH)?,
                    cur_service_td_attributes: f.read(x::CUR_SERVICE_TD_ATTRIBUTES)?,
                })
            }
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

/// The SGX report of the Quoting Enclave ([`qe_report`]), signed by the PCK.
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
    /// Reads the fields out of the report (a fixed structure: nothing can
    /// fail; the reserved fields are signed data, not checked).
    fn parse(raw: [u8; ENCLAVE_REPORT_LEN]) -> QeReport {
        use qe_report as q;
        QeReport {
            cpu_svn: q::CPU_SVN.get(&raw),
            miscselect: q::MISCSELECT.u32_le(&raw),
            attributes: q::ATTRIBUTES.get(&raw),
            mrenclave: q::MRENCLAVE.get(&raw),
            mrsigner: q::MRSIGNER.get(&raw),
            isvprodid: q::ISVPRODID.u16_le(&raw),
            isvsvn: q::ISVSVN.u16_le(&raw),
            report_data: q::REPORTDATA.get(&raw),
            raw,
        }
    }

    /// The signed bytes.
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
        let header = parse_header(&mut r)?;
        let version = header.version;

        let body_type = parse_body_descriptor(&mut r, version)?;
        let report = TdReport::parse(&mut r, body_type)?;
        let signed_len = r.position();
        debug_assert_eq!(Some(signed_len), quote::signed_len(body_type));

        let sig_len = to_usize(r.u32_le("signature data length")?);
        let sig_base = r.offset();
        let sig_data = r.take(sig_len, "signature data")?;
        let end = r.position();
        let trailing_bytes = r.rest();

        let mut s = Reader::with_base(sig_data, sig_base);
        let mut sf = Fields::new(&mut s);
        let signature = sf.read(signature_data::SIGNATURE)?;
        let attestation_key = sf.read(signature_data::ATTESTATION_KEY)?;
        let cert_type = u16::from_le_bytes(sf.read(signature_data::CERT_TYPE)?);
        if cert_type != CERT_TYPE_QE_REPORT {
            return Err(TdxError::UnsupportedCertificationDataType {
                level: "outer",
                cert_type,
                expected: CERT_TYPE_QE_REPORT,
            });
        }
        let cert_len = to_usize(u32::from_le_bytes(sf.read(signature_data::CERT_SIZE)?));
        let cert_base = s.offset();
        let cert_data = s.take(cert_len, "certification data")?;
        finish(&s, "signature data length", sig_len)?;

        let mut c = Reader::with_base(cert_data, cert_base);
        let mut cf = Fields::new(&mut c);
        let qe_report = QeReport::parse(cf.read(qe_certification_data::QE_REPORT)?);
        let qe_report_signature = cf.read(qe_certification_data::QE_REPORT_SIGNATURE)?;
        let auth_len = usize::from(u16::from_le_bytes(
            cf.read(qe_certification_data::QE_AUTH_SIZE)?,
        ));
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

        let (pck_chain, pck_extension) = parse_pck_chain(chain_pem)?;

        let trailing = classify_trailing(trailing_bytes, end);
        let bytes = input.get(..end).unwrap_or_default().to_vec();

        dcap_agrees(&bytes, &report)?;

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

/// The quote header: a TDX quote, version 4 or 5, signed with an ECDSA
/// P-256 attestation key, from Intel's QE.
fn parse_header(r: &mut Reader<'_>) -> Result<QuoteHeader, TdxError> {
    let mut h = Fields::new(r);
    let version = u16::from_le_bytes(h.read_as(header::VERSION, "header.version")?);
    let attestation_key_type =
        u16::from_le_bytes(h.read_as(header::ATT_KEY_TYPE, "header.att_key_type")?);
    let tee_type = u32::from_le_bytes(h.read_as(header::TEE_TYPE, "header.tee_type")?);
    let reserved = h.read_as(header::RESERVED, "header.reserved")?;
    let qe_vendor_id = h.read_as(header::QE_VENDOR_ID, "header.qe_vendor_id")?;
    let user_data = h.read_as(header::USER_DATA, "header.user_data")?;
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
    Ok(QuoteHeader {
        version,
        attestation_key_type,
        tee_type,
        reserved,
        qe_vendor_id,
        user_data,
    })
}

/// The v5 body descriptor: the body type (`None` for v4, whose body is
/// always a TD report 1.0) and its size, which must be the type's.
fn parse_body_descriptor(r: &mut Reader<'_>, version: u16) -> Result<Option<u16>, TdxError> {
    if version != 5 {
        return Ok(None);
    }
    let mut d = Fields::new(r);
    let body_type = u16::from_le_bytes(d.read_as(body_descriptor::BODY_TYPE, "body.type")?);
    let body_size = to_usize(u32::from_le_bytes(
        d.read_as(body_descriptor::BODY_SIZE, "body.size")?,
    ));
    let expected = match body_type {
        body_descriptor::BODY_TYPE_TD_REPORT10 => TD_REPORT10_LEN,
        body_descriptor::BODY_TYPE_TD_REPORT15 => TD_REPORT15_LEN,
        body_descriptor::BODY_TYPE_TD_REPORT15_EX => TD_REPORT15_EX_LEN,
        _ => return Err(TdxError::UnsupportedBodyType { body_type }),
    };
    if body_size != expected {
        return Err(TdxError::LengthMismatch {
            field: "body.size",
            declared: body_size,
            actual: expected,
        });
    }
    Ok(Some(body_type))
}

/// The quote's PCK chain: three PEM certificates, the leaf's SGX extension.
fn parse_pck_chain(chain_pem: &[u8]) -> Result<(Vec<Cert>, PckSgxExtension), TdxError> {
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
    Ok((pck_chain, pck_extension))
}

/// The bytes after the signature data, which start at `end`.
fn classify_trailing(trailing_bytes: &[u8], end: usize) -> Trailing {
    if trailing_bytes.is_empty() {
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
    }
}

/// dcap-qvl parses the same bytes during appraisal; it must accept what
/// this parser accepted, and read the same TD report.
fn dcap_agrees(bytes: &[u8], report: &TdReport) -> Result<(), TdxError> {
    let theirs = dcap_qvl::quote::Quote::parse(bytes).map_err(|e| TdxError::DcapParse {
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
    Ok(())
}
