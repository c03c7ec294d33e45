//! AMD SEV-SNP (*SEV Secure Nested Paging Firmware ABI Specification*,
//! publication 56860; table numbers of revision 1.57).

/// The `ATTESTATION_REPORT` structure: table 22 of spec 56860, and table
/// 135 ("ECDSA P-384 with SHA-384 Signature") for its signature field.
/// Little-endian; the signature covers bytes `0x000..0x2A0`
/// ([`SIGNED_LEN`](report::SIGNED_LEN)).
///
/// | offset | size | field | v2 | v3 | v5 |
/// |---|---|---|---|---|---|
/// | 0x000 | 4 | VERSION | 2 | 3 | 5 |
/// | 0x004 | 4 | GUEST_SVN | x | x | x |
/// | 0x008 | 8 | POLICY (table 9) | x | x | x |
/// | 0x010 | 16 | FAMILY_ID | x | x | x |
/// | 0x020 | 16 | IMAGE_ID | x | x | x |
/// | 0x030 | 4 | VMPL | x | x | x |
/// | 0x034 | 4 | SIGNATURE_ALGO (table 133; 1: ECDSA P-384 with SHA-384) | x | x | x |
/// | 0x038 | 8 | CURRENT_TCB (TCB_VERSION, tables 3 and 4) | x | x | x |
/// | 0x040 | 8 | PLATFORM_INFO | x | x | x |
/// | 0x048 | 4 | KEY_INFO: bit 0 AUTHOR_KEY_EN, bit 1 MASK_CHIP_KEY, bits 4:2 SIGNING_KEY, bits 31:5 reserved | x | x | x |
/// | 0x04C | 4 | reserved | 0 | 0 | 0 |
/// | 0x050 | 64 | REPORT_DATA | x | x | x |
/// | 0x090 | 48 | MEASUREMENT | x | x | x |
/// | 0x0C0 | 32 | HOST_DATA | x | x | x |
/// | 0x0E0 | 48 | ID_KEY_DIGEST | x | x | x |
/// | 0x110 | 48 | AUTHOR_KEY_DIGEST | x | x | x |
/// | 0x140 | 32 | REPORT_ID | x | x | x |
/// | 0x160 | 32 | REPORT_ID_MA | x | x | x |
/// | 0x180 | 8 | REPORTED_TCB | x | x | x |
/// | 0x188 | 3 | CPUID_FAM_ID, CPUID_MOD_ID, CPUID_STEP | 0 | x | x |
/// | 0x18B | 21 | reserved | 0 | 0 | 0 |
/// | 0x1A0 | 64 | CHIP_ID | x | x | x |
/// | 0x1E0 | 8 | COMMITTED_TCB | x | x | x |
/// | 0x1E8 | 3 | CURRENT_BUILD, CURRENT_MINOR, CURRENT_MAJOR | x | x | x |
/// | 0x1EB | 1 | reserved | 0 | 0 | 0 |
/// | 0x1EC | 3 | COMMITTED_BUILD, COMMITTED_MINOR, COMMITTED_MAJOR | x | x | x |
/// | 0x1EF | 1 | reserved | 0 | 0 | 0 |
/// | 0x1F0 | 8 | LAUNCH_TCB | x | x | x |
/// | 0x1F8 | 8 | LAUNCH_MIT_VECTOR | 0 | 0 | x |
/// | 0x200 | 8 | CURRENT_MIT_VECTOR | 0 | 0 | x |
/// | 0x208 | 152 | reserved | 0 | 0 | 0 |
/// | 0x2A0 | 72 | SIGNATURE R (little-endian, 48 bytes + 24 zero) | x | x | x |
/// | 0x2E8 | 72 | SIGNATURE S (idem) | x | x | x |
/// | 0x330 | 368 | reserved (the rest of the 512-byte signature) | 0 | 0 | 0 |
pub mod report {
    use crate::field::layout;

    layout! {
        name: "ATTESTATION_REPORT",
        size: 0x4A0,
        fields: {
            VERSION: [4] @ 0x000 => "VERSION",
            GUEST_SVN: [4] @ 0x004 => "GUEST_SVN",
            POLICY: [8] @ 0x008 => "POLICY",
            FAMILY_ID: [16] @ 0x010 => "FAMILY_ID",
            IMAGE_ID: [16] @ 0x020 => "IMAGE_ID",
            VMPL: [4] @ 0x030 => "VMPL",
            SIGNATURE_ALGO: [4] @ 0x034 => "SIGNATURE_ALGO",
            CURRENT_TCB: [8] @ 0x038 => "CURRENT_TCB",
            PLATFORM_INFO: [8] @ 0x040 => "PLATFORM_INFO",
            KEY_INFO: [4] @ 0x048 => "KEY_INFO",
            RESERVED_04C: [4] @ 0x04C => "reserved 0x04C",
            REPORT_DATA: [64] @ 0x050 => "REPORT_DATA",
            MEASUREMENT: [48] @ 0x090 => "MEASUREMENT",
            HOST_DATA: [32] @ 0x0C0 => "HOST_DATA",
            ID_KEY_DIGEST: [48] @ 0x0E0 => "ID_KEY_DIGEST",
            AUTHOR_KEY_DIGEST: [48] @ 0x110 => "AUTHOR_KEY_DIGEST",
            REPORT_ID: [32] @ 0x140 => "REPORT_ID",
            REPORT_ID_MA: [32] @ 0x160 => "REPORT_ID_MA",
            REPORTED_TCB: [8] @ 0x180 => "REPORTED_TCB",
            /// CPUID_FAM_ID, CPUID_MOD_ID, CPUID_STEP (v3 and later;
            /// reserved in v2).
            CPUID: [3] @ 0x188 => "CPUID_FAM_ID/MOD_ID/STEP",
            RESERVED_18B: [21] @ 0x18B => "reserved 0x18B",
            CHIP_ID: [64] @ 0x1A0 => "CHIP_ID",
            COMMITTED_TCB: [8] @ 0x1E0 => "COMMITTED_TCB",
            /// `[build, minor, major]`.
            CURRENT_VERSION: [3] @ 0x1E8 => "CURRENT_BUILD/MINOR/MAJOR",
            RESERVED_1EB: [1] @ 0x1EB => "reserved 0x1EB",
            /// `[build, minor, major]`.
            COMMITTED_VERSION: [3] @ 0x1EC => "COMMITTED_BUILD/MINOR/MAJOR",
            RESERVED_1EF: [1] @ 0x1EF => "reserved 0x1EF",
            LAUNCH_TCB: [8] @ 0x1F0 => "LAUNCH_TCB",
            /// v5 and later; reserved before.
            LAUNCH_MIT_VECTOR: [8] @ 0x1F8 => "LAUNCH_MIT_VECTOR",
            /// v5 and later; reserved before.
            CURRENT_MIT_VECTOR: [8] @ 0x200 => "CURRENT_MIT_VECTOR",
            RESERVED_208: [152] @ 0x208 => "reserved 0x208",
            /// R: [`SIGNATURE_SCALAR_LEN`] little-endian bytes, then zero.
            SIGNATURE_R: [72] @ 0x2A0 => "SIGNATURE R",
            /// S: [`SIGNATURE_SCALAR_LEN`] little-endian bytes, then zero.
            SIGNATURE_S: [72] @ 0x2E8 => "SIGNATURE S",
            RESERVED_330: [368] @ 0x330 => "reserved 0x330",
        }
    }

    /// End (exclusive) of the signed bytes: everything before the signature.
    pub const SIGNED_LEN: usize = SIGNATURE_R.offset();
    /// The signature field (R, S and reserved bytes), table 135.
    pub const SIGNATURE_FIELD_LEN: usize = SIZE - SIGNED_LEN;
    /// Bytes of a P-384 scalar: the used part of R and of S.
    pub const SIGNATURE_SCALAR_LEN: usize = 48;
    /// SIGNATURE_ALGO 1: ECDSA P-384 with SHA-384 (table 133).
    pub const SIGNATURE_ALGO_ECDSA_P384_SHA384: u32 = 1;
    /// KEY_INFO bits 4:2, SIGNING_KEY: shift and mask.
    pub const KEY_INFO_SIGNING_KEY_SHIFT: u32 = 2;
    pub const KEY_INFO_SIGNING_KEY_MASK: u32 = 0b111;
    /// KEY_INFO bits 31:5 are reserved.
    pub const KEY_INFO_RESERVED_SHIFT: u32 = 5;
    /// SIGNING_KEY values: VCEK, VLEK, none (the others are reserved).
    pub const SIGNING_KEY_VCEK: u32 = 0;
    pub const SIGNING_KEY_VLEK: u32 = 1;
    pub const SIGNING_KEY_NONE: u32 = 7;

    const _: () = assert!(SIGNED_LEN == SIGNATURE_R.offset());
    const _: () = assert!(SIGNATURE_S.offset() == SIGNATURE_R.end());
    const _: () = assert!(SIGNATURE_FIELD_LEN == 512);
    const _: () = assert!(SIGNATURE_SCALAR_LEN < SIGNATURE_R.size());
}

/// `MSG_REPORT_RSP` (spec 56860, table "MSG_REPORT_RSP Message
/// Structure"): the firmware's reply to a report request, which the Linux
/// sev-guest driver hands back at the start of `snp_report_resp.data`.
pub mod msg_report_rsp {
    use crate::field::layout;

    layout! {
        name: "MSG_REPORT_RSP",
        size: 0x20 + super::report::SIZE,
        fields: {
            /// 0: success.
            STATUS: [4] @ 0x00 => "STATUS",
            /// The report's size, [`super::report::SIZE`].
            REPORT_SIZE: [4] @ 0x04 => "REPORT_SIZE",
            RESERVED_08: [0x18] @ 0x08 => "reserved 0x08",
            REPORT: [super::report::SIZE] @ 0x20 => "REPORT",
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::report::*;

    #[test]
    fn the_report_table() {
        assert_eq!(FIELDS.len(), 34);
        assert_eq!(FIELDS.first().unwrap().name, "VERSION");
        assert_eq!(FIELDS.last().unwrap().end(), SIZE);
        assert_eq!(
            crate::field_at(FIELDS, 0x51).map(|f| f.name),
            Some("REPORT_DATA")
        );
        let mut r = [0u8; SIZE];
        REPORT_DATA.set(&mut r, &[7; 64]);
        assert_eq!(r[0x4F..0x51], [0, 7]);
        assert_eq!(r[0x8F..0x91], [7, 0]);
        assert!(exact(&r[..SIZE - 1]).is_err());
        assert_eq!(exact(&r).unwrap(), &r);
        assert_eq!(super::msg_report_rsp::REPORT.offset(), 0x20);
        assert_eq!(
            super::msg_report_rsp::REPORT.end(),
            super::msg_report_rsp::SIZE
        );
    }
}
