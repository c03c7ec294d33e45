//! The SEV-SNP `ATTESTATION_REPORT` (AMD, *SEV Secure Nested Paging Firmware
//! ABI Specification*, publication 56860, table 22 "ATTESTATION_REPORT
//! Structure", and table 135 "ECDSA P-384 with SHA-384 Signature" for the
//! signature), read through its one layout,
//! [`kolm_tee_layouts::snp::report`] (offsets, sizes and which fields each
//! version defines are in that table). Little-endian; the signature covers
//! the bytes before `SIGNATURE_R` ([`SIGNED_LEN`]).
//!
//! Reserved ranges must be zero (this is what AMD firmware writes and what
//! the genuine v2, v3 and v5 samples hold), and they are checked in offset
//! order, so the first bad byte is the one named. Bits inside fields
//! (POLICY, PLATFORM_INFO, the TCB bytes) are signed data and kept as they
//! are; only whole reserved bytes and the KEY_INFO reserved bits are format
//! errors.

use std::borrow::Cow;
use std::fmt;

use kolm_policy::SnpTcb;
use kolm_tee_layouts::Field;
use kolm_tee_layouts::snp::report as layout;
use serde_json::{Value, json};

use super::error::SnpError;

/// Size of an ATTESTATION_REPORT.
pub const REPORT_LEN: usize = layout::SIZE;
/// End (exclusive) of the signed part of the report.
pub const SIGNED_LEN: usize = layout::SIGNED_LEN;
/// Hex digits of a report's hex spelling.
pub const REPORT_HEX_LEN: usize = 2 * REPORT_LEN;

/// Report format version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ReportVersion {
    /// ABI 1.51 to 1.55: no CPUID fields.
    V2,
    /// ABI 1.56: adds CPUID_FAM_ID/MOD_ID/STEP.
    V3,
    /// ABI 1.57 and later: adds LAUNCH_MIT_VECTOR and CURRENT_MIT_VECTOR.
    V5,
}

impl ReportVersion {
    /// The VERSION number.
    pub fn number(self) -> u32 {
        match self {
            ReportVersion::V2 => 2,
            ReportVersion::V3 => 3,
            ReportVersion::V5 => 5,
        }
    }
}

/// The guest POLICY (64 bits, kept whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestPolicy(pub u64);

impl GuestPolicy {
    /// Bit 19, DEBUG: the hypervisor may debug (decrypt) the guest.
    pub fn debug_allowed(self) -> bool {
        self.0 & (1 << 19) != 0
    }
    /// Bit 16, SMT allowed.
    pub fn smt_allowed(self) -> bool {
        self.0 & (1 << 16) != 0
    }
    /// Bit 18, MIGRATE_MA allowed.
    pub fn migrate_ma_allowed(self) -> bool {
        self.0 & (1 << 18) != 0
    }
    /// Bits 15:8, minimum ABI major.
    pub fn abi_major(self) -> u8 {
        (self.0 >> 8) as u8
    }
    /// Bits 7:0, minimum ABI minor.
    pub fn abi_minor(self) -> u8 {
        self.0 as u8
    }
}

/// KEY_INFO SIGNING_KEY: which key signed the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SigningKey {
    /// 0: the Versioned Chip Endorsement Key.
    Vcek,
    /// 1: the Versioned Loaded Endorsement Key.
    Vlek,
    /// 7: no key; the report is unsigned.
    None,
}

impl SigningKey {
    /// `VCEK`, `VLEK` or `none`.
    pub fn name(self) -> &'static str {
        match self {
            SigningKey::Vcek => "VCEK",
            SigningKey::Vlek => "VLEK",
            SigningKey::None => "none",
        }
    }
}

/// KEY_INFO (offset 0x48).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyInfo {
    /// Bit 0: the ID block was signed by an author key.
    pub author_key_en: bool,
    /// Bit 1: CHIP_ID is masked (all zero).
    pub mask_chip_key: bool,
    /// Bits 4:2.
    pub signing_key: SigningKey,
}

/// CPUID family, model and stepping (report v3 and later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cpuid {
    /// Extended family + base family, e.g. 19h (Milan, Genoa) or 1Ah (Turin).
    pub family: u8,
    /// Extended model << 4 | base model.
    pub model: u8,
    /// Stepping.
    pub stepping: u8,
}

/// A firmware version `major.minor.build`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirmwareVersion {
    pub major: u8,
    pub minor: u8,
    pub build: u8,
}

impl FirmwareVersion {
    /// From the report's bytes, `[build, minor, major]`.
    fn from_le([build, minor, major]: [u8; 3]) -> FirmwareVersion {
        FirmwareVersion {
            major,
            minor,
            build,
        }
    }
}

impl fmt::Display for FirmwareVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.build)
    }
}

/// How the 8 bytes of a TCB_VERSION are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TcbLayout {
    /// Milan and Genoa: `[0]` boot loader, `[1]` TEE, `[6]` SNP, `[7]` microcode.
    PreTurin,
    /// Turin: `[0]` FMC, `[1]` boot loader, `[2]` TEE, `[3]` SNP, `[7]` microcode.
    Turin,
}

/// An undecoded TCB_VERSION (its layout depends on the product).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawTcb(pub [u8; 8]);

impl RawTcb {
    /// Decodes the security version numbers for `layout`.
    pub fn decode(self, layout: TcbLayout) -> TcbVersion {
        let [b0, b1, b2, b3, _, _, b6, b7] = self.0;
        match layout {
            TcbLayout::PreTurin => TcbVersion {
                fmc: None,
                bootloader: b0,
                tee: b1,
                snp: b6,
                microcode: b7,
            },
            TcbLayout::Turin => TcbVersion {
                fmc: Some(b0),
                bootloader: b1,
                tee: b2,
                snp: b3,
                microcode: b7,
            },
        }
    }
}

/// A decoded TCB_VERSION.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcbVersion {
    /// FMC SVN (Turin and later).
    pub fmc: Option<u8>,
    pub bootloader: u8,
    pub tee: u8,
    pub snp: u8,
    pub microcode: u8,
}

impl TcbVersion {
    /// As the policy crate's type.
    pub fn to_policy(self) -> SnpTcb {
        SnpTcb {
            bootloader: self.bootloader,
            tee: self.tee,
            snp: self.snp,
            microcode: self.microcode,
            fmc: self.fmc,
        }
    }

    /// `{"bl", "tee", "snp", "ucode"}`, plus `"fmc"` on Turin: the
    /// spelling of `expected.json`.
    pub fn to_json(self) -> Value {
        let mut v = json!({
            "bl": self.bootloader,
            "tee": self.tee,
            "snp": self.snp,
            "ucode": self.microcode,
        });
        if let (Some(fmc), Some(map)) = (self.fmc, v.as_object_mut()) {
            map.insert("fmc".into(), fmc.into());
        }
        v
    }
}

/// A parsed, structurally valid ATTESTATION_REPORT. Holding one says nothing
/// about its signature: that is [`super::verify`]'s job.
#[derive(Clone, PartialEq, Eq)]
pub struct SnpReport {
    raw: Box<[u8; REPORT_LEN]>,
    version: ReportVersion,
    guest_svn: u32,
    policy: GuestPolicy,
    family_id: [u8; 16],
    image_id: [u8; 16],
    vmpl: u32,
    current_tcb: RawTcb,
    platform_info: u64,
    key_info: KeyInfo,
    report_data: [u8; 64],
    measurement: [u8; 48],
    host_data: [u8; 32],
    id_key_digest: [u8; 48],
    author_key_digest: [u8; 48],
    report_id: [u8; 32],
    report_id_ma: [u8; 32],
    reported_tcb: RawTcb,
    cpuid: Option<Cpuid>,
    chip_id: [u8; 64],
    committed_tcb: RawTcb,
    current_version: FirmwareVersion,
    committed_version: FirmwareVersion,
    launch_tcb: RawTcb,
    launch_mit_vector: Option<u64>,
    current_mit_vector: Option<u64>,
    sig_r: [u8; 72],
    sig_s: [u8; 72],
}

impl fmt::Debug for SnpReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnpReport")
            .field("version", &self.version)
            .field("policy", &format_args!("{:#x}", self.policy.0))
            .field("vmpl", &self.vmpl)
            .field("signing_key", &self.key_info.signing_key)
            .field("measurement", &hex::encode(self.measurement))
            .field("report_data", &hex::encode(self.report_data))
            .finish_non_exhaustive()
    }
}

/// Reads one signature component: 48 little-endian bytes and a 24-byte zero
/// extension.
fn sig_component(
    raw: &[u8; REPORT_LEN],
    field: Field<72, REPORT_LEN>,
    component: &'static str,
) -> Result<[u8; 72], SnpError> {
    let v = field.get(raw);
    match v
        .iter()
        .skip(layout::SIGNATURE_SCALAR_LEN)
        .position(|&b| b != 0)
    {
        None => Ok(v),
        Some(i) => Err(SnpError::SignaturePadding {
            component,
            offset: field
                .offset()
                .saturating_add(layout::SIGNATURE_SCALAR_LEN)
                .saturating_add(i),
        }),
    }
}

/// A reserved field must be zero; `label` is the name the error gives.
fn reserved<const N: usize>(
    raw: &[u8; REPORT_LEN],
    field: Field<N, REPORT_LEN>,
    label: &'static str,
) -> Result<(), SnpError> {
    match field.first_nonzero(raw) {
        None => Ok(()),
        Some(offset) => Err(SnpError::ReservedNonZero {
            field: label,
            offset,
        }),
    }
}

/// KEY_INFO: reserved bits 31:5 zero, SIGNING_KEY a defined value.
fn key_info(raw: &[u8; REPORT_LEN]) -> Result<KeyInfo, SnpError> {
    use layout as l;
    let key_info_raw = l::KEY_INFO.u32_le(raw);
    if key_info_raw >> l::KEY_INFO_RESERVED_SHIFT != 0 {
        return Err(SnpError::ReservedNonZero {
            field: "KEY_INFO bits 31:5",
            offset: l::KEY_INFO.offset(),
        });
    }
    let signing_key =
        match (key_info_raw >> l::KEY_INFO_SIGNING_KEY_SHIFT) & l::KEY_INFO_SIGNING_KEY_MASK {
            l::SIGNING_KEY_VCEK => SigningKey::Vcek,
            l::SIGNING_KEY_VLEK => SigningKey::Vlek,
            l::SIGNING_KEY_NONE => SigningKey::None,
            value => return Err(SnpError::ReservedSigningKey { value }),
        };
    Ok(KeyInfo {
        author_key_en: key_info_raw & 1 != 0,
        mask_chip_key: key_info_raw & 2 != 0,
        signing_key,
    })
}

/// CPUID_FAM_ID, CPUID_MOD_ID, CPUID_STEP (v3 and later; reserved in v2).
fn cpuid(raw: &[u8; REPORT_LEN], version: ReportVersion) -> Result<Option<Cpuid>, SnpError> {
    use layout as l;
    Ok(match version {
        ReportVersion::V2 => {
            reserved(raw, l::CPUID, "CPUID (v2: reserved)")?;
            None
        }
        ReportVersion::V3 | ReportVersion::V5 => {
            let [family, model, stepping] = l::CPUID.get(raw);
            Some(Cpuid {
                family,
                model,
                stepping,
            })
        }
    })
}

/// LAUNCH_MIT_VECTOR and CURRENT_MIT_VECTOR (v5; reserved before).
fn mit_vectors(
    raw: &[u8; REPORT_LEN],
    version: ReportVersion,
) -> Result<(Option<u64>, Option<u64>), SnpError> {
    use layout as l;
    Ok(match version {
        ReportVersion::V2 | ReportVersion::V3 => {
            const V2_V3: &str = "mitigation vectors (v2/v3: reserved)";
            reserved(raw, l::LAUNCH_MIT_VECTOR, V2_V3)?;
            reserved(raw, l::CURRENT_MIT_VECTOR, V2_V3)?;
            (None, None)
        }
        ReportVersion::V5 => (
            Some(l::LAUNCH_MIT_VECTOR.u64_le(raw)),
            Some(l::CURRENT_MIT_VECTOR.u64_le(raw)),
        ),
    })
}

impl SnpReport {
    /// Parses exactly [`REPORT_LEN`] raw bytes (the one binary form; hex text is
    /// decoded by [`super::decode_report_forms`] first). Never panics.
    pub fn from_raw(bytes: &[u8]) -> Result<SnpReport, SnpError> {
        use layout as l;
        let len = bytes.len();
        let raw: &[u8; REPORT_LEN] = l::exact(bytes).map_err(|_| SnpError::ReportLength { len })?;

        let version = match l::VERSION.u32_le(raw) {
            2 => ReportVersion::V2,
            3 => ReportVersion::V3,
            5 => ReportVersion::V5,
            version => return Err(SnpError::UnsupportedVersion { version }),
        };
        let guest_svn = l::GUEST_SVN.u32_le(raw);
        let policy = GuestPolicy(l::POLICY.u64_le(raw));
        let family_id = l::FAMILY_ID.get(raw);
        let image_id = l::IMAGE_ID.get(raw);
        let vmpl = l::VMPL.u32_le(raw);
        match l::SIGNATURE_ALGO.u32_le(raw) {
            l::SIGNATURE_ALGO_ECDSA_P384_SHA384 => {}
            algo => return Err(SnpError::UnsupportedSignatureAlgorithm { algo }),
        }
        let current_tcb = RawTcb(l::CURRENT_TCB.get(raw));
        let platform_info = l::PLATFORM_INFO.u64_le(raw);
        let key_info = key_info(raw)?;
        reserved(raw, l::RESERVED_04C, "0x04C")?;
        let report_data = l::REPORT_DATA.get(raw);
        let measurement = l::MEASUREMENT.get(raw);
        let host_data = l::HOST_DATA.get(raw);
        let id_key_digest = l::ID_KEY_DIGEST.get(raw);
        let author_key_digest = l::AUTHOR_KEY_DIGEST.get(raw);
        let report_id = l::REPORT_ID.get(raw);
        let report_id_ma = l::REPORT_ID_MA.get(raw);
        let reported_tcb = RawTcb(l::REPORTED_TCB.get(raw));
        let cpuid = cpuid(raw, version)?;
        reserved(raw, l::RESERVED_18B, "0x18B..0x19F")?;
        let chip_id = l::CHIP_ID.get(raw);
        let committed_tcb = RawTcb(l::COMMITTED_TCB.get(raw));
        let current_version = FirmwareVersion::from_le(l::CURRENT_VERSION.get(raw));
        reserved(raw, l::RESERVED_1EB, "0x1EB")?;
        let committed_version = FirmwareVersion::from_le(l::COMMITTED_VERSION.get(raw));
        reserved(raw, l::RESERVED_1EF, "0x1EF")?;
        let launch_tcb = RawTcb(l::LAUNCH_TCB.get(raw));
        let (launch_mit_vector, current_mit_vector) = mit_vectors(raw, version)?;
        reserved(raw, l::RESERVED_208, "0x208..0x29F")?;
        let sig_r = sig_component(raw, l::SIGNATURE_R, "R")?;
        let sig_s = sig_component(raw, l::SIGNATURE_S, "S")?;
        reserved(raw, l::RESERVED_330, "signature 0x330..0x49F")?;

        Ok(SnpReport {
            raw: Box::new(*raw),
            version,
            guest_svn,
            policy,
            family_id,
            image_id,
            vmpl,
            current_tcb,
            platform_info,
            key_info,
            report_data,
            measurement,
            host_data,
            id_key_digest,
            author_key_digest,
            report_id,
            report_id_ma,
            reported_tcb,
            cpuid,
            chip_id,
            committed_tcb,
            current_version,
            committed_version,
            launch_tcb,
            launch_mit_vector,
            current_mit_vector,
            sig_r,
            sig_s,
        })
    }

    /// The [`REPORT_LEN`] bytes as parsed.
    pub fn raw(&self) -> &[u8; REPORT_LEN] {
        &self.raw
    }
    /// Bytes `0x000..0x2A0`, the signed part.
    pub fn signed_bytes(&self) -> &[u8] {
        self.raw.get(..SIGNED_LEN).unwrap_or_default()
    }
    pub fn version(&self) -> ReportVersion {
        self.version
    }
    pub fn guest_svn(&self) -> u32 {
        self.guest_svn
    }
    pub fn policy(&self) -> GuestPolicy {
        self.policy
    }
    pub fn family_id(&self) -> &[u8; 16] {
        &self.family_id
    }
    pub fn image_id(&self) -> &[u8; 16] {
        &self.image_id
    }
    pub fn vmpl(&self) -> u32 {
        self.vmpl
    }
    pub fn current_tcb(&self) -> RawTcb {
        self.current_tcb
    }
    pub fn platform_info(&self) -> u64 {
        self.platform_info
    }
    pub fn key_info(&self) -> KeyInfo {
        self.key_info
    }
    /// REPORT_DATA: the 64 bytes the guest asked the firmware to sign.
    pub fn report_data(&self) -> &[u8; 64] {
        &self.report_data
    }
    /// MEASUREMENT: the launch digest.
    pub fn measurement(&self) -> &[u8; 48] {
        &self.measurement
    }
    pub fn host_data(&self) -> &[u8; 32] {
        &self.host_data
    }
    pub fn id_key_digest(&self) -> &[u8; 48] {
        &self.id_key_digest
    }
    pub fn author_key_digest(&self) -> &[u8; 48] {
        &self.author_key_digest
    }
    pub fn report_id(&self) -> &[u8; 32] {
        &self.report_id
    }
    pub fn report_id_ma(&self) -> &[u8; 32] {
        &self.report_id_ma
    }
    pub fn reported_tcb(&self) -> RawTcb {
        self.reported_tcb
    }
    /// CPUID family/model/stepping (v3 and later).
    pub fn cpuid(&self) -> Option<Cpuid> {
        self.cpuid
    }
    pub fn chip_id(&self) -> &[u8; 64] {
        &self.chip_id
    }
    pub fn committed_tcb(&self) -> RawTcb {
        self.committed_tcb
    }
    /// CURRENT_MAJOR.CURRENT_MINOR.CURRENT_BUILD.
    pub fn current_version(&self) -> FirmwareVersion {
        self.current_version
    }
    pub fn committed_version(&self) -> FirmwareVersion {
        self.committed_version
    }
    pub fn launch_tcb(&self) -> RawTcb {
        self.launch_tcb
    }
    /// LAUNCH_MIT_VECTOR (v5 and later).
    pub fn launch_mit_vector(&self) -> Option<u64> {
        self.launch_mit_vector
    }
    /// CURRENT_MIT_VECTOR (v5 and later).
    pub fn current_mit_vector(&self) -> Option<u64> {
        self.current_mit_vector
    }
    /// The signature as the `sev` crate's type (R and S, 72 bytes each,
    /// little-endian).
    pub fn signature(&self) -> sev::certs::snp::ecdsa::Signature {
        sev::certs::snp::ecdsa::Signature::new(self.sig_r, self.sig_s)
    }

    /// The report's values under the names and formats of the samples'
    /// `expected.json` (`fields`); TCBs decoded with `layout`.
    pub fn fields(&self, layout: TcbLayout) -> Vec<(&'static str, Value)> {
        let cpuid = match self.cpuid {
            Some(c) => json!([c.family, c.model, c.stepping]),
            None => Value::Null,
        };
        let opt = |v: Option<u64>| v.map_or(Value::Null, Value::from);
        vec![
            ("version", self.version.number().into()),
            ("guest_svn", self.guest_svn.into()),
            ("policy", self.policy.0.into()),
            ("debug_allowed", self.policy.debug_allowed().into()),
            ("family_id", hex::encode(self.family_id).into()),
            ("image_id", hex::encode(self.image_id).into()),
            ("vmpl", self.vmpl.into()),
            ("platform_info", self.platform_info.into()),
            ("signing_key", self.key_info.signing_key.name().into()),
            ("author_key_en", self.key_info.author_key_en.into()),
            ("mask_chip_key", self.key_info.mask_chip_key.into()),
            ("report_data", hex::encode(self.report_data).into()),
            ("measurement", hex::encode(self.measurement).into()),
            ("host_data", hex::encode(self.host_data).into()),
            ("id_key_digest", hex::encode(self.id_key_digest).into()),
            (
                "author_key_digest",
                hex::encode(self.author_key_digest).into(),
            ),
            ("report_id", hex::encode(self.report_id).into()),
            ("report_id_ma", hex::encode(self.report_id_ma).into()),
            ("chip_id", hex::encode(self.chip_id).into()),
            ("current_tcb", self.current_tcb.decode(layout).to_json()),
            ("reported_tcb", self.reported_tcb.decode(layout).to_json()),
            ("committed_tcb", self.committed_tcb.decode(layout).to_json()),
            ("launch_tcb", self.launch_tcb.decode(layout).to_json()),
            ("fw", self.current_version.to_string().into()),
            ("committed_fw", self.committed_version.to_string().into()),
            ("cpuid_fam_mod_step", cpuid),
            ("launch_mit_vector", opt(self.launch_mit_vector)),
            ("current_mit_vector", opt(self.current_mit_vector)),
        ]
    }
}

/// Decodes raw evidence as a user hands it to the CLI: [`REPORT_LEN`] raw bytes, or
/// their hex spelling (upper or lower case, one optional trailing `\n` or
/// `\r\n`). Anything else is an error; no other whitespace or prefix is
/// accepted. [`super::verify`] itself takes the binary form only (receipt
/// spec v1 section 6 names one form for `evidence/snp-report.bin`).
pub fn decode_report_forms(input: &[u8]) -> Result<Cow<'_, [u8]>, SnpError> {
    if input.len() == REPORT_LEN {
        return Ok(Cow::Borrowed(input));
    }
    let text = input
        .strip_suffix(b"\r\n")
        .or_else(|| input.strip_suffix(b"\n"))
        .unwrap_or(input);
    if text.len() != REPORT_HEX_LEN {
        return Err(SnpError::ReportSize { len: input.len() });
    }
    let nibble = |offset: usize| -> Result<u8, SnpError> {
        let byte = text.get(offset).copied().unwrap_or(0);
        char::from(byte)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
            .ok_or(SnpError::ReportHex { offset, byte })
    };
    let mut out = Vec::with_capacity(REPORT_LEN);
    for i in 0..REPORT_LEN {
        // i < REPORT_LEN, so neither 2 * i nor 2 * i + 1 can overflow.
        let at = i.saturating_mul(2);
        let hi = nibble(at)?;
        let lo = nibble(at.saturating_add(1))?;
        // hi < 16: the shift keeps every bit.
        out.push(hi.wrapping_shl(4) | lo);
    }
    Ok(Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn blank(version: u32) -> Vec<u8> {
        let mut b = vec![0u8; REPORT_LEN];
        b[0..4].copy_from_slice(&version.to_le_bytes());
        b[0x34] = 1;
        b
    }

    #[test]
    fn minimal_reports_parse() {
        for v in [2, 3, 5] {
            let r = SnpReport::from_raw(&blank(v)).unwrap();
            assert_eq!(r.version().number(), v);
            assert_eq!(r.cpuid().is_some(), v >= 3);
            assert_eq!(r.launch_mit_vector().is_some(), v >= 5);
        }
    }

    #[test]
    fn versions_and_algorithms() {
        for v in [0, 1, 4, 6, u32::MAX] {
            assert_eq!(
                SnpReport::from_raw(&blank(v)),
                Err(SnpError::UnsupportedVersion { version: v })
            );
        }
        let mut b = blank(2);
        b[0x34] = 2;
        assert_eq!(
            SnpReport::from_raw(&b),
            Err(SnpError::UnsupportedSignatureAlgorithm { algo: 2 })
        );
    }

    #[test]
    fn sizes() {
        let b = blank(2);
        assert_eq!(
            SnpReport::from_raw(&b[..REPORT_LEN - 1]),
            Err(SnpError::ReportLength {
                len: REPORT_LEN - 1
            })
        );
        let mut long = b.clone();
        long.push(0);
        assert_eq!(
            SnpReport::from_raw(&long),
            Err(SnpError::ReportLength {
                len: REPORT_LEN + 1
            })
        );
        assert_eq!(
            decode_report_forms(&long),
            Err(SnpError::ReportSize {
                len: REPORT_LEN + 1
            })
        );
        assert!(decode_report_forms(&[]).is_err());
        // The binary parser takes no hex text.
        let hex = hex::encode(&b);
        assert_eq!(
            SnpReport::from_raw(hex.as_bytes()),
            Err(SnpError::ReportLength {
                len: 2 * REPORT_LEN
            })
        );
    }

    #[test]
    fn reserved_errors_name_field_and_offset() {
        for (v, off, field) in [
            (2, 0x4C, "0x04C"),
            (2, 0x189, "CPUID (v2: reserved)"),
            (3, 0x19F, "0x18B..0x19F"),
            (3, 0x1F9, "mitigation vectors (v2/v3: reserved)"),
            (5, 0x250, "0x208..0x29F"),
            (5, 0x400, "signature 0x330..0x49F"),
        ] {
            let mut b = blank(v);
            b[off] = 1;
            let e = SnpReport::from_raw(&b).unwrap_err();
            assert_eq!(e, SnpError::ReservedNonZero { field, offset: off });
            assert_eq!(
                e.to_string(),
                format!("reserved field {field} is not zero (byte at offset 0x{off:03x})")
            );
        }
        let mut b = blank(5);
        b[0x2A0 + 50] = 1;
        assert_eq!(
            SnpReport::from_raw(&b),
            Err(SnpError::SignaturePadding {
                component: "R",
                offset: 0x2A0 + 50
            })
        );
    }

    #[test]
    fn reserved_by_version() {
        // v2: CPUID bytes and mitigation vectors are reserved.
        for (v, off, ok) in [
            (2, 0x188, false),
            (3, 0x188, true),
            (5, 0x188, true),
            (3, 0x18B, false),
            (2, 0x1F8, false),
            (3, 0x200, false),
            (5, 0x1F8, true),
            (5, 0x207, true),
            (5, 0x208, false),
            (5, 0x29F, false),
            (2, 0x4C, false),
            (2, 0x1EB, false),
            (2, 0x1EF, false),
            (2, 0x2A0 + 47, true),
            (2, 0x2A0 + 48, false),
            (2, 0x2E8 + 71, false),
            (2, 0x330, false),
            (2, 0x49F, false),
        ] {
            let mut b = blank(v);
            b[off] = 0x80;
            assert_eq!(SnpReport::from_raw(&b).is_ok(), ok, "v{v} offset {off:#x}");
        }
    }

    #[test]
    fn key_info() {
        let mut b = blank(3);
        b[0x48] = 0b111 << 2 | 0b11;
        let k = SnpReport::from_raw(&b).unwrap().key_info();
        assert_eq!(k.signing_key, SigningKey::None);
        assert!(k.author_key_en && k.mask_chip_key);
        b[0x48] = 2 << 2;
        assert_eq!(
            SnpReport::from_raw(&b),
            Err(SnpError::ReservedSigningKey { value: 2 })
        );
        b[0x48] = 0x20;
        assert!(matches!(
            SnpReport::from_raw(&b),
            Err(SnpError::ReservedNonZero { .. })
        ));
    }

    #[test]
    fn hex_input() {
        let b = blank(5);
        let up = hex::encode_upper(&b);
        assert_eq!(decode_report_forms(up.as_bytes()).unwrap(), b);
        for nl in ["\n", "\r\n"] {
            let text = format!("{}{nl}", hex::encode(&b));
            assert_eq!(decode_report_forms(text.as_bytes()).unwrap(), b);
        }
        assert!(matches!(decode_report_forms(&b), Ok(Cow::Borrowed(_))));
        let mut bad = up.into_bytes();
        bad[10] = b'g';
        assert_eq!(
            decode_report_forms(&bad),
            Err(SnpError::ReportHex {
                offset: 10,
                byte: b'g'
            })
        );
        let spaced = format!(" {}", hex::encode(&b));
        assert!(decode_report_forms(spaced.as_bytes()).is_err());
        // A non-ASCII byte is named as it is.
        let mut high = hex::encode(&b).into_bytes();
        high[2367] = 0xC3;
        assert_eq!(
            decode_report_forms(&high),
            Err(SnpError::ReportHex {
                offset: 2367,
                byte: 0xC3
            })
        );
    }

    #[test]
    fn tcb_layouts() {
        let raw = RawTcb([1, 2, 3, 4, 0, 0, 6, 7]);
        let pre = raw.decode(TcbLayout::PreTurin);
        assert_eq!(
            (pre.bootloader, pre.tee, pre.snp, pre.microcode, pre.fmc),
            (1, 2, 6, 7, None)
        );
        let turin = raw.decode(TcbLayout::Turin);
        assert_eq!(
            (
                turin.fmc,
                turin.bootloader,
                turin.tee,
                turin.snp,
                turin.microcode
            ),
            (Some(1), 2, 3, 4, 7)
        );
        assert_eq!(
            turin.to_json(),
            json!({"fmc": 1, "bl": 2, "tee": 3, "snp": 4, "ucode": 7})
        );
    }
}
