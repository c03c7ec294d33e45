//! Step 5 of the receipt chain: the value a platform's hardware report carries
//! (SNP/TDX `REPORT_DATA`, Nitro `user_data`) to bind a manifest.
//!
//! `report_data = SHA-512(DOMAIN || cid_bytes)`, 64 bytes: exactly the size of
//! SNP and TDX report data. Each receipt spec version has its own domain
//! ([`SpecVersion::report_data_domain`]), so a v1 report data never binds a
//! v2 manifest or back. The domain separator keeps a kolm binding from
//! being confused with any other use of the same report field. The manifest
//! names the per-run signing key, so binding the CID binds the key too.

use sha2::{Digest, Sha512};

use crate::content_id::ContentId;
use crate::version::SpecVersion;

/// Domain separator of receipt v1, NUL-terminated so no CID byte can
/// extend it.
pub const REPORT_DATA_DOMAIN: &[u8] = b"kolm/receipt/v1/report-data\0";
/// Domain separator of receipt v2.
pub const REPORT_DATA_DOMAIN_V2: &[u8] = b"kolm/receipt/v2/report-data\0";

/// The 64-byte report data that binds the v1 `manifest` (receipt v1).
pub fn report_data(manifest: &ContentId) -> [u8; 64] {
    report_data_for(SpecVersion::V1, manifest)
}

/// The 64-byte report data that binds `manifest` under receipt spec
/// `version`.
pub fn report_data_for(version: SpecVersion, manifest: &ContentId) -> [u8; 64] {
    let mut h = Sha512::new();
    h.update(version.report_data_domain());
    h.update(manifest.to_bytes());
    h.finalize().into()
}

/// Domain separator of the enclave identity binding: the report data of
/// the evidence a `hello` carries (`docs/sealed-run.md`, "Identity
/// evidence"). Its own domain, so identity evidence can never stand for a
/// receipt's and back.
pub const IDENTITY_REPORT_DATA_DOMAIN: &[u8] = b"kolm/enclave-identity/v1/report-data\0";

/// The 64-byte report data that binds an enclave service's Ed25519
/// identity public key: `SHA-512(IDENTITY_REPORT_DATA_DOMAIN || key)`.
pub fn identity_report_data(identity_key: &[u8; 32]) -> [u8; 64] {
    let mut h = Sha512::new();
    h.update(IDENTITY_REPORT_DATA_DOMAIN);
    h.update(identity_key);
    h.finalize().into()
}
