//! AMD's SEV-SNP trust anchors, embedded in the crate and pinned by SHA-256
//! of each certificate's DER.
//!
//! The six bundles under `roots/` are AMD KDS `cert_chain` responses
//! (`/vcek/v1/<product>/cert_chain`, `/vlek/v1/<product>/cert_chain`), as
//! published by google/go-sev-guest `verify/trust/` (commit af1c107a); the
//! ARK and ASK certificates are identical to those built into the `sev`
//! crate 8.0.0. Each bundle is `[ASK or ASVK, ARK]` in PEM.

use sha2::{Digest, Sha256};

use super::certs::{CaPair, LeafKind, SnpCert};
use super::error::{CertRole, SnpError};
use super::report::TcbLayout;

/// An AMD EPYC product with SEV-SNP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Product {
    /// 3rd generation EPYC, family 19h models 00h-0Fh.
    Milan,
    /// 4th generation EPYC, family 19h models 10h-1Fh and A0h-AFh.
    Genoa,
    /// 5th generation EPYC, family 1Ah models 00h-11h.
    Turin,
}

impl std::fmt::Display for Product {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Product {
    /// Every supported product, in the order they are tried.
    pub const ALL: [Product; 3] = [Product::Milan, Product::Genoa, Product::Turin];

    /// `Milan`, `Genoa` or `Turin`: AMD's spelling in certificate names.
    pub fn name(self) -> &'static str {
        match self {
            Product::Milan => "Milan",
            Product::Genoa => "Genoa",
            Product::Turin => "Turin",
        }
    }

    /// The product with this name (case-sensitive, as AMD spells it).
    pub fn from_name(name: &str) -> Option<Product> {
        Product::ALL.into_iter().find(|p| p.name() == name)
    }

    /// How this product lays out a TCB_VERSION.
    pub fn tcb_layout(self) -> TcbLayout {
        match self {
            Product::Milan | Product::Genoa => TcbLayout::PreTurin,
            Product::Turin => TcbLayout::Turin,
        }
    }

    /// The product of a CPUID family/model, as the `sev` crate identifies
    /// it (`sev::Generation::identify_cpu`); Venice and unknown CPUs are
    /// unsupported (no embedded root).
    pub fn from_cpuid(family: u8, model: u8) -> Result<Product, SnpError> {
        match sev::Generation::identify_cpu(family, model) {
            Ok(sev::Generation::Milan) => Ok(Product::Milan),
            Ok(sev::Generation::Genoa) => Ok(Product::Genoa),
            Ok(sev::Generation::Turin) => Ok(Product::Turin),
            _ => Err(SnpError::UnsupportedCpu { family, model }),
        }
    }

    /// The subject CN of the intermediate that signs `kind` leaves:
    /// `SEV-<product>` (ASK) or `SEV-VLEK-<product>` (ASVK).
    pub fn ask_cn(self, kind: LeafKind) -> String {
        match kind {
            LeafKind::Vcek => format!("SEV-{}", self.name()),
            LeafKind::Vlek => format!("SEV-VLEK-{}", self.name()),
        }
    }

    /// The subject CN of the root: `ARK-<product>`.
    pub fn ark_cn(self) -> String {
        format!("ARK-{}", self.name())
    }
}

/// One embedded bundle and the SHA-256 of its two certificates' DER.
struct Bundle {
    pem: &'static [u8],
    ask_sha256: &'static str,
    ark_sha256: &'static str,
}

const MILAN_VCEK: Bundle = Bundle {
    pem: include_bytes!("roots/ask_ark_milan.pem"),
    ask_sha256: "67d303bd3905fd38db8b20e0793699870e7fa612eaad5dec358293fd8c0bac1b",
    ark_sha256: "69d063b45344d26a2e94e1f4210de49ef555308287d4c174445c95639a540bcd",
};
const MILAN_VLEK: Bundle = Bundle {
    pem: include_bytes!("roots/ask_ark_milan_vlek.pem"),
    ask_sha256: "c5e081f59b7efab1fe2f8b505e159704e72f29cab7ef7cf628a05a42439082f5",
    ark_sha256: "69d063b45344d26a2e94e1f4210de49ef555308287d4c174445c95639a540bcd",
};
const GENOA_VCEK: Bundle = Bundle {
    pem: include_bytes!("roots/ask_ark_genoa.pem"),
    ask_sha256: "5464738c1546aed5f2cecf1dc98c5c960a92e8913238a61711bc90ec6e828521",
    ark_sha256: "4c6598d19c18719c5dfd4a7d335f674e5bfe1d8f800cea2cf270c10d103db2f1",
};
const GENOA_VLEK: Bundle = Bundle {
    pem: include_bytes!("roots/ask_ark_genoa_vlek.pem"),
    ask_sha256: "197e610743a917d6b9bb982a5a9226ccc0a15b611be0619e626aca9151457372",
    ark_sha256: "4c6598d19c18719c5dfd4a7d335f674e5bfe1d8f800cea2cf270c10d103db2f1",
};
const TURIN_VCEK: Bundle = Bundle {
    pem: include_bytes!("roots/ask_ark_turin_vcek.pem"),
    ask_sha256: "5b77ef5fe7a7a004fd9032668fba9d0fda22f88c4442069a479636a6ae3b3185",
    ark_sha256: "1f084161a44bb6d93778a904877d4819cafa5d05ef4193b2ded9dd9c73dd3f6a",
};
const TURIN_VLEK: Bundle = Bundle {
    pem: include_bytes!("roots/ask_ark_turin_vlek.pem"),
    ask_sha256: "104e10a8bd060a3c20a434261a57d0588fd65a88915b4f65b08bdecaf8df1a3c",
    ark_sha256: "1f084161a44bb6d93778a904877d4819cafa5d05ef4193b2ded9dd9c73dd3f6a",
};

fn bundle(product: Product, kind: LeafKind) -> &'static Bundle {
    match (product, kind) {
        (Product::Milan, LeafKind::Vcek) => &MILAN_VCEK,
        (Product::Milan, LeafKind::Vlek) => &MILAN_VLEK,
        (Product::Genoa, LeafKind::Vcek) => &GENOA_VCEK,
        (Product::Genoa, LeafKind::Vlek) => &GENOA_VLEK,
        (Product::Turin, LeafKind::Vcek) => &TURIN_VCEK,
        (Product::Turin, LeafKind::Vlek) => &TURIN_VLEK,
    }
}

/// The SHA-256 pins `(ASK or ASVK, ARK)` of the embedded chain for
/// `product` and `kind`, lower-case hex.
pub fn pins(product: Product, kind: LeafKind) -> (&'static str, &'static str) {
    let b = bundle(product, kind);
    (b.ask_sha256, b.ark_sha256)
}

/// The embedded `(ASK or ASVK, ARK)` for `product` and `kind`, each checked
/// against its pin.
pub fn embedded_ca(product: Product, kind: LeafKind) -> Result<CaPair, SnpError> {
    let b = bundle(product, kind);
    let pair = super::certs::parse_chain(b.pem).map_err(|_| SnpError::EmbeddedPin {
        product,
        role: CertRole::Ark,
    })?;
    for (cert, pin, role) in [
        (&pair.ask, b.ask_sha256, CertRole::Ask),
        (&pair.ark, b.ark_sha256, CertRole::Ark),
    ] {
        if hex::encode(cert.sha256()) != pin {
            return Err(SnpError::EmbeddedPin { product, role });
        }
    }
    Ok(pair)
}

/// The embedded ARK for `product` (the same for VCEK and VLEK chains).
pub fn embedded_ark(product: Product) -> Result<SnpCert, SnpError> {
    embedded_ca(product, LeafKind::Vcek).map(|pair| pair.ark)
}

/// SHA-256 of `der`.
pub(crate) fn sha256(der: &[u8]) -> [u8; 32] {
    Sha256::digest(der).into()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn every_embedded_chain_matches_its_pins_and_names() {
        for product in Product::ALL {
            for kind in [LeafKind::Vcek, LeafKind::Vlek] {
                let pair = embedded_ca(product, kind).unwrap();
                assert_eq!(pair.ark.common_name().as_deref(), Some(&*product.ark_cn()));
                assert_eq!(
                    pair.ask.common_name().as_deref(),
                    Some(&*product.ask_cn(kind))
                );
                let (ask_pin, ark_pin) = pins(product, kind);
                assert_eq!(hex::encode(sha256(pair.ask.der())), ask_pin);
                assert_eq!(hex::encode(sha256(pair.ark.der())), ark_pin);
            }
        }
    }

    #[test]
    fn the_ark_is_shared_by_vcek_and_vlek_chains() {
        for product in Product::ALL {
            assert_eq!(
                pins(product, LeafKind::Vcek).1,
                pins(product, LeafKind::Vlek).1
            );
        }
    }

    #[test]
    fn embedded_files_are_the_published_bundles() {
        // SHA-256 of the PEM files as published (roots/PROVENANCE.md and
        // sev-snp/PROVENANCE.md of the shared samples).
        let files: [(&Bundle, &str); 6] = [
            (
                &MILAN_VCEK,
                "22e62f8d2c21a156470145fc75f7b5a377cb053ced3e97f0bd3f8d8ca5941ce6",
            ),
            (
                &MILAN_VLEK,
                "3098f7e90ee7049b8cf116448d1bdf33b08847b4250bd99507cf73b5c49d3467",
            ),
            (
                &GENOA_VCEK,
                "e6ecc853fa56d3170a624d40851f98a1036f974b50204ea69e6aec91d777aca3",
            ),
            (
                &GENOA_VLEK,
                "95f8b0deab936fe5d44a7cd6ed32590ad360581da2858a27dc2e59ac6eacb2e8",
            ),
            (
                &TURIN_VCEK,
                "cc9a52fbed3fbc6e4a0a50149a541a75938f975658909c2a6084767829b36e85",
            ),
            (
                &TURIN_VLEK,
                "5928f39615a10790e4c3d985fbe5b025524eab50c0801c2b69d2031e476cdfe5",
            ),
        ];
        for (b, want) in files {
            assert_eq!(hex::encode(sha256(b.pem)), want);
        }
    }

    #[test]
    fn cpuid_products() {
        assert_eq!(Product::from_cpuid(0x19, 0x01).unwrap(), Product::Milan);
        assert_eq!(Product::from_cpuid(0x19, 0x11).unwrap(), Product::Genoa);
        assert_eq!(Product::from_cpuid(0x19, 0xA0).unwrap(), Product::Genoa);
        assert_eq!(Product::from_cpuid(0x1A, 0x02).unwrap(), Product::Turin);
        assert!(Product::from_cpuid(0x1A, 0x50).is_err()); // Venice: no root
        assert!(Product::from_cpuid(0x17, 0x31).is_err());
        assert!(Product::from_cpuid(0x19, 0x81).is_err());
    }
}
