//! The sim evidence in the AMD SEV-SNP format: an `ATTESTATION_REPORT` of
//! version 3 (AMD, *SEV Secure Nested Paging Firmware ABI Specification*,
//! publication 56860, table 22 "ATTESTATION_REPORT Structure"; table
//! "ECDSA P-384 with SHA-384 Signature" for the signature), little-endian,
//! written through [`kolm_tee_layouts::snp::report`] (the table the
//! verifier reads with), signed by the installation's VCEK-shaped key
//! ([`super::snp_root`]) exactly as AMD firmware signs with a VCEK: ECDSA
//! P-384 over SHA-384 of bytes `0x000..0x2A0`, R and S written
//! little-endian and zero-extended to 72 bytes each.
//!
//! The fields a real guest gets from hardware are stand-ins, in the shape
//! a Genoa part writes them (the verifier picks the product, and so the
//! TCB layout, from CPUID):
//!
//! | offset | field | value |
//! |---|---|---|
//! | 0x000 | VERSION | 3 |
//! | 0x004 | GUEST_SVN | 0 |
//! | 0x008 | POLICY | [`SIM_POLICY`]: SMT allowed (bit 16), the must-be-one bit 17; DEBUG (bit 19) and MIGRATE_MA (bit 18) clear |
//! | 0x010, 0x020 | FAMILY_ID, IMAGE_ID | zero (no ID block) |
//! | 0x030 | VMPL | 0 |
//! | 0x034 | SIGNATURE_ALGO | 1 (ECDSA P-384 with SHA-384) |
//! | 0x038, 0x180, 0x1E0, 0x1F0 | CURRENT, REPORTED, COMMITTED, LAUNCH TCB | [`SIM_TCB`] (Genoa layout), what the VCEK's SPL extensions say |
//! | 0x040 | PLATFORM_INFO | [`SIM_PLATFORM_INFO`]: SMT enabled |
//! | 0x048 | KEY_INFO | 0: signed by the VCEK, CHIP_ID not masked, no author key |
//! | 0x050 | REPORT_DATA | the 64 bytes asked for |
//! | 0x090 | MEASUREMENT | the sim measurement: SHA-384 of the `kolm-enclave` binary (as the Nitro form's PCR0) |
//! | 0x0C0, 0x0E0, 0x110 | HOST_DATA, ID_KEY_DIGEST, AUTHOR_KEY_DIGEST | zero |
//! | 0x140 | REPORT_ID | random, one per provider instance (one "guest") |
//! | 0x160 | REPORT_ID_MA | all `0xFF` (no migration agent, as firmware writes it) |
//! | 0x188 | CPUID_FAM_ID, _MOD_ID, _STEP | 19h, 11h, 01h ([`SIM_CPUID`]: Genoa) |
//! | 0x1A0 | CHIP_ID | the installation's stand-in chip id, the VCEK's hwID |
//! | 0x1E8, 0x1EC | CURRENT, COMMITTED firmware | [`SIM_FIRMWARE`] (build, minor, major) |
//! | 0x2A0 | SIGNATURE | R, S little-endian, 72 bytes each; the rest of the 512 bytes zero |
//!
//! Every other byte (the reserved ranges) is zero.

use kolm_tee_layouts::snp::report as layout;
use ring::rand::SystemRandom;
use ring::signature::EcdsaKeyPair;

use super::SimError;

/// Size of an ATTESTATION_REPORT.
pub const REPORT_LEN: usize = layout::SIZE;
/// The report VERSION written (ABI 1.56: version 3 adds CPUID).
pub const REPORT_VERSION: u32 = 3;
/// End (exclusive) of the signed bytes.
pub const SIGNED_LEN: usize = layout::SIGNED_LEN;
/// Bytes of one signature component field (48 used, 24 zero).
pub const SIG_COMPONENT_LEN: usize = layout::SIGNATURE_R.size();
/// Bytes of a P-384 scalar.
const SCALAR_LEN: usize = layout::SIGNATURE_SCALAR_LEN;

/// SIGNATURE_ALGO 1: ECDSA P-384 with SHA-384.
pub const SIGNATURE_ALGO_ECDSA_P384_SHA384: u32 = layout::SIGNATURE_ALGO_ECDSA_P384_SHA384;
/// POLICY: bit 16 SMT allowed, bit 17 reserved and must be one; ABI
/// minimum 0.0; DEBUG (bit 19) and MIGRATE_MA (bit 18) clear.
pub const SIM_POLICY: u64 = (1 << 17) | (1 << 16);
/// PLATFORM_INFO: bit 0, SMT enabled.
pub const SIM_PLATFORM_INFO: u64 = 1;
/// CPUID family, model, stepping: 19h/11h/01h, a Genoa B1 part.
pub const SIM_CPUID: [u8; 3] = [0x19, 0x11, 0x01];
/// The product name the VCEK-shaped certificate carries (as a Genoa
/// VCEK's productName extension).
pub const SIM_PRODUCT_NAME: &str = "Genoa";
/// Firmware version `[build, minor, major]`, as the report stores it.
pub const SIM_FIRMWARE: [u8; 3] = [21, 55, 1];

/// Security patch levels of the stand-in TCB (boot loader, TEE, SNP
/// firmware, microcode), the same in every TCB field of the report and in
/// the VCEK's SPL extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimTcb {
    pub bootloader: u8,
    pub tee: u8,
    pub snp: u8,
    pub microcode: u8,
}

impl SimTcb {
    /// The 8-byte TCB_VERSION in the Milan/Genoa layout: `[0]` boot
    /// loader, `[1]` TEE, `[2..6]` reserved, `[6]` SNP, `[7]` microcode.
    pub fn to_bytes(self) -> [u8; 8] {
        [
            self.bootloader,
            self.tee,
            0,
            0,
            0,
            0,
            self.snp,
            self.microcode,
        ]
    }
}

/// The stand-in TCB.
pub const SIM_TCB: SimTcb = SimTcb {
    bootloader: 7,
    tee: 0,
    snp: 14,
    microcode: 72,
};

/// What one report attests; the rest is fixed (module docs).
#[derive(Debug, Clone, Copy)]
pub struct ReportRequest<'a> {
    /// REPORT_DATA: a kolm enclave's 64-byte report data.
    pub report_data: &'a [u8; 64],
    /// MEASUREMENT: the sim measurement.
    pub measurement: &'a [u8; 48],
    /// REPORT_ID: this "guest"'s id.
    pub report_id: &'a [u8; 32],
    /// CHIP_ID: the installation's stand-in, equal to the VCEK's hwID.
    pub chip_id: &'a [u8; 64],
}

/// The unsigned report: every field but the signature.
pub(crate) fn unsigned_report(req: &ReportRequest<'_>) -> Box<[u8; REPORT_LEN]> {
    use layout as l;
    let mut r = Box::new([0u8; REPORT_LEN]);
    let tcb = SIM_TCB.to_bytes();
    l::VERSION.set_u32_le(&mut r, REPORT_VERSION);
    l::GUEST_SVN.set_u32_le(&mut r, 0);
    l::POLICY.set_u64_le(&mut r, SIM_POLICY);
    l::VMPL.set_u32_le(&mut r, 0);
    l::SIGNATURE_ALGO.set_u32_le(&mut r, SIGNATURE_ALGO_ECDSA_P384_SHA384);
    l::CURRENT_TCB.set(&mut r, &tcb);
    l::PLATFORM_INFO.set_u64_le(&mut r, SIM_PLATFORM_INFO);
    l::KEY_INFO.set_u32_le(&mut r, 0);
    l::REPORT_DATA.set(&mut r, req.report_data);
    l::MEASUREMENT.set(&mut r, req.measurement);
    l::REPORT_ID.set(&mut r, req.report_id);
    l::REPORT_ID_MA.set(&mut r, &[0xFF; 32]);
    l::REPORTED_TCB.set(&mut r, &tcb);
    l::CPUID.set(&mut r, &SIM_CPUID);
    l::CHIP_ID.set(&mut r, req.chip_id);
    l::COMMITTED_TCB.set(&mut r, &tcb);
    l::CURRENT_VERSION.set(&mut r, &SIM_FIRMWARE);
    l::COMMITTED_VERSION.set(&mut r, &SIM_FIRMWARE);
    l::LAUNCH_TCB.set(&mut r, &tcb);
    r
}

/// Converts ring's fixed-length signature (R then S, 48 bytes each,
/// big-endian) into the report's SIGNATURE layout: R and S each
/// little-endian in a 72-byte field (48 bytes and 24 zero bytes): `[R, S]`.
pub(crate) fn amd_signature(fixed: &[u8]) -> Result<[[u8; SIG_COMPONENT_LEN]; 2], SimError> {
    if fixed.len() != 2 * SCALAR_LEN {
        return Err(SimError::Crypto("ECDSA P-384 signature is not 96 bytes"));
    }
    let mut out = [[0u8; SIG_COMPONENT_LEN]; 2];
    for (component, field) in fixed.chunks_exact(SCALAR_LEN).zip(out.iter_mut()) {
        for (dst, src) in field.iter_mut().zip(component.iter().rev()) {
            *dst = *src;
        }
    }
    Ok(out)
}

/// One signed report for `req`, signed with `vcek` (a P-384 key made with
/// `ECDSA_P384_SHA384_FIXED_SIGNING`).
pub(crate) fn report(vcek: &EcdsaKeyPair, req: &ReportRequest<'_>) -> Result<Vec<u8>, SimError> {
    let mut r = unsigned_report(req);
    let signed = r
        .get(..SIGNED_LEN)
        .ok_or(SimError::Crypto("report shorter than its signed part"))?;
    let sig = vcek
        .sign(&SystemRandom::new(), signed)
        .map_err(|_| SimError::Crypto("ECDSA P-384 report signing failed"))?;
    let [sig_r, sig_s] = amd_signature(sig.as_ref())?;
    layout::SIGNATURE_R.set(&mut r, &sig_r);
    layout::SIGNATURE_S.set(&mut r, &sig_s);
    Ok(r.to_vec())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use ring::signature::{
        ECDSA_P384_SHA384_FIXED, ECDSA_P384_SHA384_FIXED_SIGNING, KeyPair as _, UnparsedPublicKey,
    };

    use super::*;

    fn key() -> EcdsaKeyPair {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P384_SHA384_FIXED_SIGNING, &rng).unwrap();
        EcdsaKeyPair::from_pkcs8(&ECDSA_P384_SHA384_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap()
    }

    fn req<'a>(
        data: &'a [u8; 64],
        m: &'a [u8; 48],
        id: &'a [u8; 32],
        chip: &'a [u8; 64],
    ) -> ReportRequest<'a> {
        ReportRequest {
            report_data: data,
            measurement: m,
            report_id: id,
            chip_id: chip,
        }
    }

    /// Each field at its table-22 offset, every reserved byte zero.
    #[test]
    fn fields_sit_at_their_spec_offsets() {
        let (data, m, id, chip) = ([0xD1; 64], [0x3E; 48], [0x1D; 32], [0xC1; 64]);
        let r = report(&key(), &req(&data, &m, &id, &chip)).unwrap();
        assert_eq!(r.len(), REPORT_LEN);
        let le32 = |at: usize| u32::from_le_bytes(r[at..at + 4].try_into().unwrap());
        let le64 = |at: usize| u64::from_le_bytes(r[at..at + 8].try_into().unwrap());
        assert_eq!(le32(0x000), 3);
        assert_eq!(le32(0x004), 0);
        assert_eq!(le64(0x008), 0x3_0000);
        assert_eq!(le64(0x008) & (1 << 19), 0, "DEBUG is off");
        assert_eq!(le32(0x030), 0, "VMPL 0");
        assert_eq!(le32(0x034), 1, "ECDSA P-384 with SHA-384");
        assert_eq!(le32(0x048), 0, "KEY_INFO: VCEK");
        assert_eq!(&r[0x050..0x090], &data);
        assert_eq!(&r[0x090..0x0C0], &m);
        assert_eq!(&r[0x140..0x160], &id);
        assert_eq!(&r[0x160..0x180], &[0xFF; 32]);
        let tcb = [7, 0, 0, 0, 0, 0, 14, 72];
        for at in [0x038, 0x180, 0x1E0, 0x1F0] {
            assert_eq!(&r[at..at + 8], &tcb, "TCB at {at:#x}");
        }
        assert_eq!(&r[0x188..0x18B], &[0x19, 0x11, 0x01]);
        assert_eq!(&r[0x1A0..0x1E0], &chip);
        assert_eq!(&r[0x1E8..0x1EB], &[21, 55, 1]);
        assert_eq!(&r[0x1EC..0x1EF], &[21, 55, 1]);
        assert_eq!(le64(0x040), 1, "PLATFORM_INFO: SMT enabled");
        // Zero: HOST_DATA, ID and author key digests, the reserved ranges,
        // the signature's zero extensions and the rest of its field.
        for (from, to) in [
            (0x010, 0x030),
            (0x04C, 0x050),
            (0x0C0, 0x140),
            (0x18B, 0x1A0),
            (0x1EB, 0x1EC),
            (0x1EF, 0x1F0),
            (0x1F8, 0x2A0),
            (0x2A0 + 48, 0x2E8),
            (0x2E8 + 48, 0x330),
            (0x330, REPORT_LEN),
        ] {
            assert!(r[from..to].iter().all(|&b| b == 0), "{from:#x}..{to:#x}");
        }
    }

    /// ring's big-endian R || S becomes two 72-byte little-endian fields.
    #[test]
    fn the_signature_is_written_little_endian() {
        let fixed: Vec<u8> = (1..=96).collect();
        let [amd_r, amd_s] = amd_signature(&fixed).unwrap();
        let r: Vec<u8> = (1..=48).rev().collect();
        let s: Vec<u8> = (49..=96).rev().collect();
        assert_eq!(&amd_r[..48], r.as_slice());
        assert_eq!(&amd_r[48..], &[0; 24]);
        assert_eq!(&amd_s[..48], s.as_slice());
        assert_eq!(&amd_s[48..], &[0; 24]);
        assert!(amd_signature(&fixed[..95]).is_err());
    }

    /// Turned back to big-endian, the report's R and S verify over bytes
    /// 0x000..0x2A0 with the key; a changed signed byte does not.
    #[test]
    fn the_report_signature_verifies_over_the_signed_bytes() {
        let k = key();
        let r = report(&k, &req(&[5; 64], &[6; 48], &[7; 32], &[8; 64])).unwrap();
        let mut fixed = Vec::new();
        for at in [0x2A0, 0x2E8] {
            fixed.extend(r[at..at + 48].iter().rev());
        }
        let public = UnparsedPublicKey::new(&ECDSA_P384_SHA384_FIXED, k.public_key().as_ref());
        public.verify(&r[..0x2A0], &fixed).unwrap();
        let mut flipped = r.clone();
        flipped[0x050] ^= 1;
        assert!(public.verify(&flipped[..0x2A0], &fixed).is_err());
    }
}
