//! SEV-SNP collateral from AMD's Key Distribution Service (KDS), per the
//! "Versioned Chip Endorsement Key (VCEK) Certificate and KDS Interface
//! Specification" (AMD 57230):
//!
//! - `GET {kds}/vcek/v1/{product}/{hwid}?blSPL=..&teeSPL=..&snpSPL=..&ucodeSPL=..`
//!   returns the VCEK (DER). `hwid` is the report's CHIP_ID in hex: all 64
//!   bytes on Milan and Genoa, the first 8 on Turin, whose query also
//!   carries `fmcSPL` first. SPLs are the report's REPORTED_TCB, written
//!   with two digits at least, as AMD's examples do.
//! - `GET {kds}/vcek/v1/{product}/cert_chain` returns the ASK and ARK
//!   (PEM).
//! - `GET {kds}/vcek/v1/{product}/crl` returns the ARK's certificate
//!   revocation list (DER). (VLEK chains have theirs under `/vlek/v1/`;
//!   KDS serves no VLEK, so `bundle fetch` never needs it.)
//!
//! Before anything is written the VCEK must parse, be a VCEK of the
//! product, carry the report's TCB and CHIP_ID, and chain (with the
//! fetched ASK) to the ARK embedded in the verifier; the CRL must verify
//! under that ARK and must not list the ASK. The list speaks only for
//! what the ARK issued: the VCEK (issued by the ASK; the VCEKs seen so far
//! all have serial number 0) is out of its scope, and its serial is never
//! matched against the ARK's entries.

use kolm_verifier::snp::{self, CertRole, LeafKind, Product, SnpReport};
use time::OffsetDateTime;

use super::http::Client;
use super::{FetchError, Item, SNP_ASK_ARK, SNP_CRL, SNP_VCEK};

/// AMD KDS.
pub const DEFAULT_KDS_URL: &str = "https://kdsintf.amd.com";
/// Largest VCEK accepted (they are about 1.4 KB).
const MAX_VCEK: u64 = 16 * 1024;
/// Largest cert_chain accepted (about 4.6 KB).
const MAX_CHAIN: u64 = 64 * 1024;
/// Largest CRL accepted: the verifier's cap.
const MAX_CRL: u64 = snp::crl::MAX_CRL_INPUT as u64;

/// Which VCEK to fetch.
#[derive(Debug, Clone)]
pub struct SnpRequest {
    pub report: SnpReport,
    pub product: Product,
}

impl SnpRequest {
    /// From a report (the raw binary `ATTESTATION_REPORT`) and, for reports without CPUID
    /// (version 2), `--product`. A product given for a report that names
    /// its CPU must agree with it.
    pub fn new(report: &[u8], product: Option<Product>) -> Result<SnpRequest, FetchError> {
        let input = |reason: String| FetchError::Input {
            what: "--snp-report".into(),
            reason,
        };
        let report = snp::parse_snp_report(report).map_err(|e| input(e.to_string()))?;
        let from_cpuid = report
            .cpuid()
            .map(|c| Product::from_cpuid(c.family, c.model))
            .transpose()
            .map_err(|e| input(e.to_string()))?;
        let product = match (from_cpuid, product) {
            (Some(a), Some(b)) if a != b => {
                return Err(FetchError::Input {
                    what: "--product".into(),
                    reason: format!("{b} contradicts the report's CPUID ({a})"),
                });
            }
            (Some(p), _) | (None, Some(p)) => p,
            (None, None) => {
                return Err(FetchError::Input {
                    what: "--product".into(),
                    reason: format!(
                        "a version {} report does not name its CPU: pass --product milan, \
                         genoa or turin",
                        report.version().number()
                    ),
                });
            }
        };
        if report.key_info().signing_key != snp::SigningKey::Vcek {
            return Err(input(format!(
                "signed by the {}, not a VCEK: KDS serves VCEKs only",
                report.key_info().signing_key.name()
            )));
        }
        if report.chip_id().iter().all(|&b| b == 0) {
            return Err(input(
                "CHIP_ID is masked (all zero): KDS cannot name the VCEK".into(),
            ));
        }
        Ok(SnpRequest { report, product })
    }

    /// The VCEK URL under `kds`.
    pub fn vcek_url(&self, kds: &str) -> String {
        let chip = self.report.chip_id();
        let tcb = self.report.reported_tcb().decode(self.product.tcb_layout());
        let (hwid, fmc) = match self.product {
            Product::Turin => (&chip[..8], tcb.fmc.map(|f| format!("fmcSPL={f:02}&"))),
            _ => (&chip[..], None),
        };
        format!(
            "{kds}/vcek/v1/{}/{}?{}blSPL={:02}&teeSPL={:02}&snpSPL={:02}&ucodeSPL={:02}",
            self.product.name(),
            hex::encode(hwid),
            fmc.unwrap_or_default(),
            tcb.bootloader,
            tcb.tee,
            tcb.snp,
            tcb.microcode
        )
    }

    /// The ASK/ARK URL under `kds`.
    pub fn chain_url(&self, kds: &str) -> String {
        format!("{kds}/vcek/v1/{}/cert_chain", self.product.name())
    }

    /// The CRL URL under `kds`.
    pub fn crl_url(&self, kds: &str) -> String {
        format!("{kds}/vcek/v1/{}/crl", self.product.name())
    }
}

/// Fetches and checks the VCEK, the ASK/ARK and the CRL for `req`; `at` is the
/// instant the chain must be valid at (the caller's clock).
pub fn fetch(
    client: &Client,
    kds: &str,
    req: &SnpRequest,
    at: OffsetDateTime,
) -> Result<Vec<Item>, FetchError> {
    let vcek_url = req.vcek_url(kds);
    let vcek = client.get(&vcek_url, MAX_VCEK, &[])?;
    let refused = |url: &str, what: &'static str, reason: String| FetchError::Rejected {
        url: url.to_string(),
        what,
        reason,
    };
    let leaf = snp::certs::parse_leaf(&vcek.body)
        .map_err(|e| refused(&vcek_url, "the VCEK", e.to_string()))?;
    if leaf.kind() != LeafKind::Vcek {
        return Err(refused(&vcek_url, "the VCEK", "it is a VLEK".into()));
    }
    if leaf.product_from_issuer() != Some(req.product) {
        return Err(refused(
            &vcek_url,
            "the VCEK",
            format!(
                "issued by {:?}, not SEV-{}",
                leaf.cert().issuer_common_name(),
                req.product
            ),
        ));
    }
    // The TCB first: a VCEK for another TCB of the same chip is the likely
    // mix-up (the URL carries the TCB).
    leaf.check_tcb(req.report.reported_tcb(), req.product.tcb_layout())
        .map_err(|e| refused(&vcek_url, "the VCEK", e.to_string()))?;
    leaf.check_hwid(req.report.chip_id())
        .map_err(|e| refused(&vcek_url, "the VCEK", e.to_string()))?;

    let chain_url = req.chain_url(kds);
    let chain = client.get(&chain_url, MAX_CHAIN, &[])?;
    let pair = snp::certs::parse_chain(&chain.body)
        .map_err(|e| refused(&chain_url, "the ASK/ARK chain", e.to_string()))?;
    let verified = snp::verify_chain(&vcek.body, Some(&chain.body), at)
        .map_err(|r| refused(&chain_url, "the ASK/ARK chain", r.reason))?;
    if verified.product != req.product {
        return Err(refused(
            &chain_url,
            "the ASK/ARK chain",
            format!("it ends in the {} ARK", verified.product),
        ));
    }

    // The ARK is AMD's now (verify_chain pinned it): the CRL must be its,
    // and must not revoke the chain. Its window is not judged: a list past
    // its nextUpdate is still AMD's latest word (`bundle inspect` shows
    // the window).
    let crl_url = req.crl_url(kds);
    let crl = client.get(&crl_url, MAX_CRL, &[])?;
    snp::crl::verify_crl(&crl.body, &pair.ark)
        .map_err(|e| refused(&crl_url, "the CRL", e.to_string()))?
        .check_chain(&pair, Some(leaf.cert()))
        .map_err(|e| {
            let what = match e {
                snp::crl::CrlError::Revoked {
                    role: CertRole::Leaf,
                    ..
                } => "the VCEK",
                _ => "the ASK/ARK chain",
            };
            refused(&crl_url, what, e.to_string())
        })?;
    Ok(vec![
        Item {
            file: SNP_VCEK,
            bytes: vcek.body,
            urls: vec![vcek_url],
        },
        Item {
            file: SNP_ASK_ARK,
            bytes: chain.body,
            urls: vec![chain_url],
        },
        Item {
            file: SNP_CRL,
            bytes: crl.body,
            urls: vec![crl_url],
        },
    ])
}

/// `--product`: milan, genoa or turin (any case).
pub fn parse_product(s: &str) -> Result<Product, FetchError> {
    Product::ALL
        .into_iter()
        .find(|p| p.name().eq_ignore_ascii_case(s))
        .ok_or_else(|| FetchError::Input {
            what: format!("--product {s}"),
            reason: "expected milan, genoa or turin".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_follow_the_kds_spec() {
        let Some(root) = kolm_testkit::samples("sev-snp/expected.json") else {
            return;
        };
        let report = std::fs::read(root.join("sev-snp/milan-v2-gosevguest/report.bin")).unwrap();
        // Version 2: the product must be named.
        let e = SnpRequest::new(&report, None).unwrap_err();
        assert!(e.to_string().starts_with("--product: "), "{e}");
        let req = SnpRequest::new(&report, Some(Product::Milan)).unwrap();
        let url = req.vcek_url("https://kdsintf.amd.com");
        let chip = hex::encode(req.report.chip_id());
        assert_eq!(
            url,
            format!(
                "https://kdsintf.amd.com/vcek/v1/Milan/{chip}?blSPL=02&teeSPL=00&snpSPL=05&ucodeSPL=68"
            )
        );
        assert_eq!(
            req.chain_url("http://127.0.0.1:1"),
            "http://127.0.0.1:1/vcek/v1/Milan/cert_chain"
        );
        assert_eq!(
            req.crl_url("http://127.0.0.1:1"),
            "http://127.0.0.1:1/vcek/v1/Milan/crl"
        );

        // Version 5 names its CPU: Milan, and a contradicting --product is
        // refused.
        let v5 = std::fs::read(root.join("sev-snp/milan-v5-gcp/report.bin")).unwrap();
        assert_eq!(SnpRequest::new(&v5, None).unwrap().product, Product::Milan);
        let e = SnpRequest::new(&v5, Some(Product::Genoa)).unwrap_err();
        assert!(e.to_string().contains("contradicts"), "{e}");

        // A VLEK-signed report cannot be served by the VCEK endpoint.
        let vlek = std::fs::read(root.join("sev-snp/milan-v3-vlek-trustee/report.bin")).unwrap();
        let e = SnpRequest::new(&vlek, None).unwrap_err();
        assert!(e.to_string().contains("KDS serves VCEKs only"), "{e}");

        // Turin: 8-byte hwid and fmcSPL first (layout from the spec; the
        // report is the Milan one re-labelled, so only the shape counts).
        let turin = SnpRequest {
            report: req.report.clone(),
            product: Product::Turin,
        };
        let url = turin.vcek_url("https://k");
        let tcb = req.report.reported_tcb().0;
        assert_eq!(
            url,
            format!(
                "https://k/vcek/v1/Turin/{}?fmcSPL={:02}&blSPL={:02}&teeSPL={:02}&snpSPL={:02}&ucodeSPL={:02}",
                &chip[..16],
                tcb[0],
                tcb[1],
                tcb[2],
                tcb[3],
                tcb[7]
            )
        );
        assert!(SnpRequest::new(&report[..100], Some(Product::Milan)).is_err());
    }

    #[test]
    fn products_parse() {
        assert_eq!(parse_product("genoa").unwrap(), Product::Genoa);
        assert_eq!(parse_product("Turin").unwrap(), Product::Turin);
        assert!(
            parse_product("naples")
                .unwrap_err()
                .to_string()
                .starts_with("--product naples")
        );
    }
}
