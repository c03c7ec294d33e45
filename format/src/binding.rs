//! Step 5 of the receipt chain: the value a platform's hardware report carries
//! (SNP/TDX `REPORT_DATA`, Nitro `user_data`) to bind a manifest.
//!
//! `report_data = SHA-512(DOMAIN || cid_bytes)`, 64 bytes: exactly the size of
//! SNP and TDX report data. The domain separator keeps a kolm binding from
//! being confused with any other use of the same report field. The manifest
//! names the per-run signing key, so binding the CID binds the key too.

use sha2::{Digest, Sha512};

use crate::content_id::ContentId;

/// Domain separator, NUL-terminated so no CID byte can extend it.
pub const REPORT_DATA_DOMAIN: &[u8] = b"kolm/receipt/v1/report-data\0";

/// The 64-byte report data that binds `manifest`.
pub fn report_data(manifest: &ContentId) -> [u8; 64] {
    let mut h = Sha512::new();
    h.update(REPORT_DATA_DOMAIN);
    h.update(manifest.to_bytes());
    h.finalize().into()
}
