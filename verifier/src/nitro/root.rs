//! The trust anchor: the AWS Nitro Enclaves Root G1, embedded by its exact
//! DER bytes. AWS publishes it in `AWS_NitroEnclaves_Root-G1.zip` (SHA-256
//! of the zip `8cf60e2b2efca96c6a9e71e851d00c1b6991cc09eadbe64a6a1d1b1eb9faff7c`);
//! the file here is its `root.pem` converted to DER. ECDSA P-384, subject
//! `CN=aws.nitro-enclaves,OU=AWS,O=Amazon,C=US`, valid 2019-10-28T13:28:05Z
//! to 2049-10-28T14:28:05Z.
//!
//! `cabundle[0]` of a document must equal these bytes. A certificate with
//! the same subject but another key is not this root.

/// DER of the AWS Nitro Enclaves Root G1.
pub const AWS_NITRO_ROOT_G1_DER: &[u8] = include_bytes!("aws-nitro-enclaves-root-g1.der");

/// SHA-256 of [`AWS_NITRO_ROOT_G1_DER`], lower-case hex.
pub const AWS_NITRO_ROOT_G1_SHA256: &str =
    "641a0321a3e244efe456463195d606317ed7cdcc3c1756e09893f3c68f79bb5b";

#[cfg(test)]
mod tests {
    use sha2::{Digest as _, Sha256};

    use super::*;

    #[test]
    fn embedded_root_is_the_published_aws_nitro_root_g1() {
        let digest = hex::encode(Sha256::digest(AWS_NITRO_ROOT_G1_DER));
        assert_eq!(
            digest,
            "641a0321a3e244efe456463195d606317ed7cdcc3c1756e09893f3c68f79bb5b"
        );
        assert_eq!(digest, AWS_NITRO_ROOT_G1_SHA256);
        assert_eq!(AWS_NITRO_ROOT_G1_DER.len(), 533);
    }
}
