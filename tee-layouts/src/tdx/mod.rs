//! Intel TDX DCAP quotes, versions 4 and 5 (*Intel TDX DCAP Quoting Library
//! API*, appendix A "Quote format": A.3 version 4, A.4 version 5; Intel's
//! `sgx_quote_4.h` and `sgx_quote_5.h`), and the `TDREPORT_STRUCT` of the
//! TDX module (*Intel TDX Module ABI specification*). All integers
//! little-endian.
//!
//! ```text
//! v4: header (48) | TD report 1.0 (584)                             | sig_data_len u32 | signature data
//! v5: header (48) | body descriptor (6) | TD report 1.0/1.5/1.5-Ex  | sig_data_len u32 | signature data
//! signature data:        signature (64) | attestation key (64) | cert type u16 (6) | cert size u32 | certification data
//! certification data 6:  QE report (384) | QE report signature (64) | QE auth size u16 | QE auth data |
//!                        cert type u16 (5) | cert size u32 | PEM PCK chain
//! ```
//!
//! The sizes of the variable-length parts are read from the quote; the
//! fixed heads are [`signature_data`] and [`qe_certification_data`].

use crate::field::layout;

/// The quote header (A.3.1 "Quote Header"; `sgx_quote4_header_t`), the
/// same in v4 and v5.
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 2 | version (4 or 5) |
/// | 2 | 2 | attestation key type (2: ECDSA-256 with P-256) |
/// | 4 | 4 | TEE type (0x81: TDX) |
/// | 8 | 4 | reserved (QE SVN and PCE SVN in SGX quotes) |
/// | 12 | 16 | QE vendor id |
/// | 28 | 20 | user data (the first 16 bytes: the platform's QE id) |
pub mod header {
    use super::layout;

    layout! {
        name: "TDX quote header",
        size: 48,
        fields: {
            VERSION: [2] @ 0 => "version",
            ATT_KEY_TYPE: [2] @ 2 => "att_key_type",
            TEE_TYPE: [4] @ 4 => "tee_type",
            RESERVED: [4] @ 8 => "reserved",
            QE_VENDOR_ID: [16] @ 12 => "qe_vendor_id",
            USER_DATA: [20] @ 28 => "user_data",
        }
    }

    /// Attestation key type 2: ECDSA-256-with-P-256.
    pub const ATT_KEY_TYPE_ECDSA_P256: u16 = 2;
    /// TEE type of a TDX quote.
    pub const TEE_TYPE_TDX: u32 = 0x0000_0081;
    /// Intel's QE vendor id `939A7233-F79C-4CA9-940A-0DB3957F0607`.
    pub const INTEL_QE_VENDOR_ID: [u8; 16] = [
        0x93, 0x9a, 0x72, 0x33, 0xf7, 0x9c, 0x4c, 0xa9, 0x94, 0x0a, 0x0d, 0xb3, 0x95, 0x7f, 0x06,
        0x07,
    ];
}

/// The v5 quote's body descriptor after the header (A.4, "Quote Body
/// Descriptor"; `sgx_quote5_t.type` and `.size`).
pub mod body_descriptor {
    use super::layout;

    layout! {
        name: "TDX quote v5 body descriptor",
        size: 6,
        fields: {
            BODY_TYPE: [2] @ 0 => "type",
            BODY_SIZE: [4] @ 2 => "size",
        }
    }

    /// Body type 2: TD report 1.0 ([`super::td_report10`]).
    pub const BODY_TYPE_TD_REPORT10: u16 = 2;
    /// Body type 3: TD report 1.5 ([`super::td_report15`]).
    pub const BODY_TYPE_TD_REPORT15: u16 = 3;
    /// Body type 4: TD report 1.5-Ex ([`super::td_report15_ex`]).
    pub const BODY_TYPE_TD_REPORT15_EX: u16 = 4;
}

/// The TD quote body of a v4 quote and of a v5 quote of body type 2, TD
/// report 1.0 (A.3.2 "TD Quote Body"; `sgx_report2_body_t`). Every later TD
/// report starts with these 584 bytes.
pub mod td_report10 {
    use super::layout;

    layout! {
        name: "TD report 1.0",
        size: 584,
        fields: {
            TEE_TCB_SVN: [16] @ 0 => "TEE_TCB_SVN",
            MRSEAM: [48] @ 16 => "MRSEAM",
            MRSIGNERSEAM: [48] @ 64 => "MRSIGNERSEAM",
            SEAMATTRIBUTES: [8] @ 112 => "SEAMATTRIBUTES",
            TDATTRIBUTES: [8] @ 120 => "TDATTRIBUTES",
            XFAM: [8] @ 128 => "XFAM",
            /// The TD's build-time measurement.
            MRTD: [48] @ 136 => "MRTD",
            MRCONFIGID: [48] @ 184 => "MRCONFIGID",
            MROWNER: [48] @ 232 => "MROWNER",
            MROWNERCONFIG: [48] @ 280 => "MROWNERCONFIG",
            RTMR0: [48] @ 328 => "RTMR0",
            RTMR1: [48] @ 376 => "RTMR1",
            RTMR2: [48] @ 424 => "RTMR2",
            RTMR3: [48] @ 472 => "RTMR3",
            /// The 64 bytes the TD asked to have signed.
            REPORTDATA: [64] @ 520 => "REPORTDATA",
        }
    }

    /// RTMR0..RTMR3 in order.
    pub const RTMRS: [crate::Field<48, SIZE>; 4] = [RTMR0, RTMR1, RTMR2, RTMR3];
}

/// TD report 1.5, the body of a v5 quote of body type 3 (A.4, "TD Quote
/// Body Descriptor" v1.5; `sgx_report2_body_v1_5_t`): a TD report 1.0
/// ([`td_report10`], its fields at the same offsets) and two fields
/// after it.
pub mod td_report15 {
    use super::layout;

    layout! {
        name: "TD report 1.5",
        size: 648,
        fields: {
            /// The whole TD report 1.0.
            TD_REPORT10: [super::td_report10::SIZE] @ 0 => "TD report 1.0",
            TEE_TCB_SVN2: [16] @ 584 => "TEE_TCB_SVN2",
            MRSERVICETD: [48] @ 600 => "MRSERVICETD",
        }
    }
}

/// TD report 1.5-Ex, the body of a v5 quote of body type 4
/// (`sgx_report2_body_v1_5_ex_t`): a TD report 1.5
/// ([`td_report15`]) and 237 bytes after it.
pub mod td_report15_ex {
    use super::layout;

    layout! {
        name: "TD report 1.5-Ex",
        size: 885,
        fields: {
            /// The whole TD report 1.5.
            TD_REPORT15: [super::td_report15::SIZE] @ 0 => "TD report 1.5",
            VMID: [1] @ 648 => "VMID",
            TD_ID: [32] @ 649 => "TD_ID",
            DEV_INFO: [48] @ 681 => "DEV_INFO",
            INIT_SERVICE_TD_HASH: [48] @ 729 => "INIT_SERVICE_TD_HASH",
            INIT_SERVICE_TD_ATTRIBUTES: [8] @ 777 => "INIT_SERVICE_TD_ATTRIBUTES",
            INIT_CPU_SVN: [16] @ 785 => "INIT_CPU_SVN",
            INIT_TEE_TCB_SVN: [16] @ 801 => "INIT_TEE_TCB_SVN",
            INIT_TEE_FMSPC: [12] @ 817 => "INIT_TEE_FMSPC",
            CUR_SERVICE_TD_HASH: [48] @ 829 => "CUR_SERVICE_TD_HASH",
            CUR_SERVICE_TD_ATTRIBUTES: [8] @ 877 => "CUR_SERVICE_TD_ATTRIBUTES",
        }
    }
}

/// The Quoting Enclave's report, an SGX `REPORT` body (A.3, "Enclave
/// Report Body"; `sgx_report_body_t`), signed by the PCK key.
pub mod qe_report {
    use super::layout;

    layout! {
        name: "QE report",
        size: 384,
        fields: {
            CPU_SVN: [16] @ 0 => "CPUSVN",
            MISCSELECT: [4] @ 16 => "MISCSELECT",
            RESERVED1: [28] @ 20 => "reserved1",
            ATTRIBUTES: [16] @ 48 => "ATTRIBUTES",
            MRENCLAVE: [32] @ 64 => "MRENCLAVE",
            RESERVED2: [32] @ 96 => "reserved2",
            MRSIGNER: [32] @ 128 => "MRSIGNER",
            RESERVED3: [96] @ 160 => "reserved3",
            ISVPRODID: [2] @ 256 => "ISVPRODID",
            ISVSVN: [2] @ 258 => "ISVSVN",
            RESERVED4: [60] @ 260 => "reserved4",
            /// SHA-256(attestation key || QE authentication data), then 32
            /// zero bytes.
            REPORTDATA: [64] @ 320 => "REPORTDATA",
        }
    }
}

/// The fixed head of the quote's signature data (A.3, "ECDSA 256-bit
/// Quote Signature Data Structure"; `sgx_ecdsa_sig_data_v4_t` and the head
/// of its `sgx_ql_certification_data_t`): the certification data of
/// `CERT_SIZE` bytes follows.
pub mod signature_data {
    use super::layout;

    layout! {
        name: "TDX quote signature data",
        size: 134,
        fields: {
            /// ECDSA P-256 `r || s` over header (+ v5 descriptor) + body.
            SIGNATURE: [64] @ 0 => "quote signature",
            /// The attestation public key, `x || y`.
            ATTESTATION_KEY: [64] @ 64 => "attestation key",
            CERT_TYPE: [2] @ 128 => "certification data type",
            CERT_SIZE: [4] @ 130 => "certification data size",
        }
    }

    /// Certification data type 6: QE report certification data
    /// ([`super::qe_certification_data`]).
    pub const CERT_TYPE_QE_REPORT: u16 = 6;
    /// Certification data type 5: the PEM PCK certificate chain.
    pub const CERT_TYPE_PCK_CHAIN: u16 = 5;
}

/// The fixed head of certification data type 6 ("QE Report Certification
/// Data"; `sgx_qe_report_certification_data_t`): the QE authentication data of `QE_AUTH_SIZE` bytes follows, then
/// certification data type 5 (u16, u32 size, the PEM chain).
pub mod qe_certification_data {
    use super::layout;

    layout! {
        name: "QE report certification data",
        size: 450,
        fields: {
            QE_REPORT: [super::qe_report::SIZE] @ 0 => "QE report",
            QE_REPORT_SIGNATURE: [64] @ 384 => "QE report signature",
            QE_AUTH_SIZE: [2] @ 448 => "QE authentication data size",
        }
    }
}

/// Where a quote's parts start and how long its body is.
pub mod quote {
    use super::{body_descriptor, header, td_report10, td_report15, td_report15_ex};

    /// Offset of the body in a v4 quote.
    pub const V4_BODY_OFFSET: usize = header::SIZE;
    /// Offset of the body descriptor in a v5 quote.
    pub const V5_DESCRIPTOR_OFFSET: usize = header::SIZE;
    /// Offset of the body in a v5 quote.
    pub const V5_BODY_OFFSET: usize = header::SIZE + body_descriptor::SIZE;
    /// Bytes of the signature-data length field after the body.
    pub const SIG_DATA_LEN_SIZE: usize = 4;

    /// The body's size for a v5 body type (`None`: a v4 quote, TD report
    /// 1.0); `None` for a body type that is not a TD report.
    pub const fn body_size(body_type: Option<u16>) -> Option<usize> {
        match body_type {
            None | Some(body_descriptor::BODY_TYPE_TD_REPORT10) => Some(td_report10::SIZE),
            Some(body_descriptor::BODY_TYPE_TD_REPORT15) => Some(td_report15::SIZE),
            Some(body_descriptor::BODY_TYPE_TD_REPORT15_EX) => Some(td_report15_ex::SIZE),
            Some(_) => None,
        }
    }

    /// Offset of the body for a v5 body type (`None`: v4).
    pub const fn body_offset(body_type: Option<u16>) -> usize {
        match body_type {
            None => V4_BODY_OFFSET,
            Some(_) => V5_BODY_OFFSET,
        }
    }

    /// Header (+ v5 descriptor) + body: the bytes the attestation key
    /// signs. `None` for an unknown body type.
    pub const fn signed_len(body_type: Option<u16>) -> Option<usize> {
        match body_size(body_type) {
            Some(n) => body_offset(body_type).checked_add(n),
            None => None,
        }
    }
}

/// `TDREPORT_STRUCT` (Intel TDX Module ABI specification, "TDREPORT_STRUCT":
/// REPORTMACSTRUCT, TEE_TCB_INFO, TDINFO_STRUCT), as Azure's HCL report
/// carries it.
pub mod tdreport {
    use super::layout;

    layout! {
        name: "TDREPORT_STRUCT",
        size: 1024,
        fields: {
            /// REPORTMACSTRUCT.REPORTTYPE: TYPE (0x81: TDX), SUBTYPE,
            /// VERSION, reserved.
            REPORTTYPE: [4] @ 0 => "REPORTTYPE",
            RESERVED_004: [12] @ 4 => "REPORTMACSTRUCT reserved",
            CPUSVN: [16] @ 16 => "CPUSVN",
            TEE_TCB_INFO_HASH: [48] @ 32 => "TEE_TCB_INFO_HASH",
            TEE_INFO_HASH: [48] @ 80 => "TEE_INFO_HASH",
            REPORTDATA: [64] @ 128 => "REPORTDATA",
            RESERVED_0C0: [32] @ 192 => "REPORTMACSTRUCT reserved",
            MAC: [32] @ 224 => "MAC",
            TEE_TCB_INFO: [239] @ 256 => "TEE_TCB_INFO",
            RESERVED_1EF: [17] @ 495 => "reserved",
            /// TDINFO_STRUCT from here.
            ATTRIBUTES: [8] @ 512 => "ATTRIBUTES",
            XFAM: [8] @ 520 => "XFAM",
            MRTD: [48] @ 528 => "MRTD",
            MRCONFIGID: [48] @ 576 => "MRCONFIGID",
            MROWNER: [48] @ 624 => "MROWNER",
            MROWNERCONFIG: [48] @ 672 => "MROWNERCONFIG",
            RTMR0: [48] @ 720 => "RTMR0",
            RTMR1: [48] @ 768 => "RTMR1",
            RTMR2: [48] @ 816 => "RTMR2",
            RTMR3: [48] @ 864 => "RTMR3",
            SERVTD_HASH: [48] @ 912 => "SERVTD_HASH",
            RESERVED_3C0: [64] @ 960 => "TDINFO reserved",
        }
    }

    /// REPORTTYPE.TYPE of a TDX TDREPORT.
    pub const REPORT_TYPE_TDX: u8 = 0x81;
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn body_sizes_and_offsets() {
        assert_eq!(quote::body_size(None), Some(td_report10::SIZE));
        assert_eq!(quote::body_size(Some(3)), Some(td_report15::SIZE));
        assert_eq!(quote::body_size(Some(4)), Some(td_report15_ex::SIZE));
        assert_eq!(quote::body_size(Some(1)), None);
        assert_eq!(
            quote::signed_len(None),
            Some(header::SIZE + td_report10::SIZE)
        );
        assert_eq!(
            quote::signed_len(Some(2)),
            Some(header::SIZE + body_descriptor::SIZE + td_report10::SIZE)
        );
        assert_eq!(td_report10::REPORTDATA.end(), td_report10::SIZE);
        assert_eq!(td_report15::TEE_TCB_SVN2.offset(), td_report10::SIZE);
        assert_eq!(td_report15_ex::VMID.offset(), td_report15::SIZE);
        assert_eq!(
            qe_certification_data::QE_REPORT_SIGNATURE.offset(),
            qe_report::SIZE
        );
    }

    #[test]
    fn fields_read_from_a_longer_body() {
        // TD report 1.0 fields read the same out of a 1.5 body.
        let mut body = [0u8; td_report15::SIZE];
        td_report10::MRTD.write(&mut body, &[0x3E; 48]).unwrap();
        assert_eq!(td_report10::MRTD.read(&body), Ok([0x3E; 48]));
        assert_eq!(body[136], 0x3E);
        assert!(
            td_report15::MRSERVICETD
                .read(&body[..td_report10::SIZE])
                .is_err()
        );
    }
}
