//! TPM 2.0 quote: `TPMS_ATTEST` parsing (TPM 2.0 Library, Part 2, 10.12.8
//! and 10.12.1) and its RSASSA-PKCS1-v1_5/SHA-256 signature by the vTPM
//! attestation key.

use kolm_format::reader::{ReadError, Reader};
use sha2::{Digest, Sha256};

/// `TPM_GENERATED_VALUE`.
const TPM_GENERATED: u32 = 0xff54_4347;
/// `TPM_ST_ATTEST_QUOTE`.
const TPM_ST_ATTEST_QUOTE: u16 = 0x8018;
/// `TPM_ALG_SHA256`.
const TPM_ALG_SHA256: u16 = 0x000b;
/// Largest TPMS_ATTEST accepted.
pub const MAX_QUOTE_BYTES: usize = 4096;

/// Why a TPM quote is rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum TpmError {
    #[error("TPMS_ATTEST truncated reading {0}")]
    Truncated(&'static str),
    #[error("TPMS_ATTEST has {0} trailing bytes")]
    Trailing(usize),
    #[error("TPMS_ATTEST magic is {0:#010x}, not TPM_GENERATED_VALUE")]
    Magic(u32),
    #[error("TPMS_ATTEST type is {0:#06x}, not TPM_ST_ATTEST_QUOTE")]
    Type(u16),
    #[error("TPMS_ATTEST is {0} bytes, over the cap")]
    TooLarge(usize),
    #[error("PCR selection uses hash algorithm {0:#06x}; only SHA-256 banks are supported")]
    Bank(u16),
    #[error("PCR selection bitmap of {0} bytes is invalid")]
    Select(usize),
}

/// A parsed `TPMS_ATTEST` of type quote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpmQuote {
    pub qualified_signer: Vec<u8>,
    /// `extraData`: the verifier's nonce.
    pub extra_data: Vec<u8>,
    pub clock: u64,
    pub reset_count: u32,
    pub restart_count: u32,
    pub safe: bool,
    pub firmware_version: u64,
    /// Selected SHA-256 PCR indices, ascending.
    pub pcrs: Vec<u8>,
    pub pcr_digest: Vec<u8>,
}

/// `TPM2B_*`: a big-endian u16 size, then that many bytes.
fn tpm2b(r: &mut Reader<'_>, what: &'static str) -> Result<Vec<u8>, TpmError> {
    let n = r.u16_be(what)?;
    Ok(r.take(usize::from(n), what)?.to_vec())
}

impl From<ReadError> for TpmError {
    fn from(e: ReadError) -> TpmError {
        match e {
            ReadError::Trailing { count, .. } => TpmError::Trailing(count),
            ReadError::Truncated { what, .. } | ReadError::ReservedNonZero { what, .. } => {
                TpmError::Truncated(what)
            }
            // ReadError is non-exhaustive.
            _ => TpmError::Truncated("TPMS_ATTEST"),
        }
    }
}

impl TpmQuote {
    /// Parses a `TPMS_ATTEST` quote; trailing bytes are an error.
    pub fn parse(bytes: &[u8]) -> Result<TpmQuote, TpmError> {
        if bytes.len() > MAX_QUOTE_BYTES {
            return Err(TpmError::TooLarge(bytes.len()));
        }
        let mut r = Reader::new(bytes);
        let magic = r.u32_be("magic")?;
        if magic != TPM_GENERATED {
            return Err(TpmError::Magic(magic));
        }
        let ty = r.u16_be("type")?;
        if ty != TPM_ST_ATTEST_QUOTE {
            return Err(TpmError::Type(ty));
        }
        let qualified_signer = tpm2b(&mut r, "qualifiedSigner")?;
        let extra_data = tpm2b(&mut r, "extraData")?;
        let clock = r.u64_be("clockInfo.clock")?;
        let reset_count = r.u32_be("clockInfo.resetCount")?;
        let restart_count = r.u32_be("clockInfo.restartCount")?;
        let safe = r.u8("clockInfo.safe")? != 0;
        let firmware_version = r.u64_be("firmwareVersion")?;
        let count = r.u32_be("pcrSelect.count")?;
        let mut pcrs = Vec::new();
        for _ in 0..count.min(16) {
            let alg = r.u16_be("pcrSelect.hash")?;
            let size = usize::from(r.u8("pcrSelect.sizeofSelect")?);
            if !(1..=4).contains(&size) {
                return Err(TpmError::Select(size));
            }
            let bitmap = r.take(size, "pcrSelect.pcrSelect")?;
            let any = bitmap.iter().any(|b| *b != 0);
            if alg != TPM_ALG_SHA256 {
                if any {
                    return Err(TpmError::Bank(alg));
                }
                continue;
            }
            for (byte_index, byte) in bitmap.iter().enumerate() {
                for bit in 0..8u8 {
                    if byte & (1 << bit) != 0 {
                        // byte_index <= 3, so this fits in u8.
                        pcrs.push((byte_index as u8).saturating_mul(8).saturating_add(bit));
                    }
                }
            }
        }
        if count > 16 {
            return Err(TpmError::Select(count as usize));
        }
        let pcr_digest = tpm2b(&mut r, "pcrDigest")?;
        r.finish("TPMS_ATTEST")?;
        pcrs.sort_unstable();
        pcrs.dedup();
        Ok(TpmQuote {
            qualified_signer,
            extra_data,
            clock,
            reset_count,
            restart_count,
            safe,
            firmware_version,
            pcrs,
            pcr_digest,
        })
    }

    /// The digest the quote should carry for these SHA-256 PCR values.
    pub fn expected_pcr_digest(&self, values: &[[u8; 32]]) -> Option<[u8; 32]> {
        let mut h = Sha256::new();
        for &i in &self.pcrs {
            h.update(values.get(usize::from(i))?);
        }
        Some(h.finalize().into())
    }
}

/// Verifies an RSASSA-PKCS1-v1_5/SHA-256 signature with an RSA public key
/// given as big-endian modulus and exponent (a JWK's `n`, `e`).
pub fn verify_rsa_pkcs1_sha256(n: &[u8], e: &[u8], message: &[u8], signature: &[u8]) -> bool {
    let key = ring::signature::RsaPublicKeyComponents { n, e };
    key.verify(
        &ring::signature::RSA_PKCS1_2048_8192_SHA256,
        message,
        signature,
    )
    .is_ok()
}
