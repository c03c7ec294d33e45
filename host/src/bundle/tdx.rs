//! TDX quote collateral from Intel's Provisioning Certification Service
//! (PCS) API v4 and Intel's root CRL, assembled into the
//! `QuoteCollateralV3` JSON the verifier reads
//! (`kolm_verifier::tdx::parse_tdx_collateral`):
//!
//! | field | from |
//! |---|---|
//! | `tcb_info`, `tcb_info_signature` | `GET {pcs}/tdx/certification/v4/tcb?fmspc=F`: the body's `tcbInfo` (the exact signed text) and `signature` |
//! | `tcb_info_issuer_chain` | its `TCB-Info-Issuer-Chain` header (URL-encoded PEM) |
//! | `qe_identity`, `qe_identity_signature` | `GET {pcs}/tdx/certification/v4/qe/identity`: `enclaveIdentity` and `signature` |
//! | `qe_identity_issuer_chain` | its `SGX-Enclave-Identity-Issuer-Chain` header |
//! | `pck_crl` | `GET {pcs}/sgx/certification/v4/pckcrl?ca=platform\|processor&encoding=der`, as hex |
//! | `pck_crl_issuer_chain` | its `SGX-PCK-CRL-Issuer-Chain` header |
//! | `root_ca_crl` | `GET https://certificates.trustedservices.intel.com/IntelSGXRootCA.der`, as hex |
//!
//! The FMSPC and the PCK CA (platform or processor) come from the quote's
//! PCK certificate, or from `--fmspc` / `--pck-ca`. The assembled JSON
//! must parse with the verifier and its TCB Info must be for that FMSPC
//! before it is written.

use serde::Serialize;
use serde_json::value::RawValue;

use super::http::{self, Client};
use super::{FetchError, Item, TDX_COLLATERAL};

/// Intel PCS.
pub const DEFAULT_PCS_URL: &str = "https://api.trustedservices.intel.com";
/// Intel's CRL of the SGX Root CA.
pub const DEFAULT_ROOT_CRL_URL: &str =
    "https://certificates.trustedservices.intel.com/IntelSGXRootCA.der";
/// Largest TCB Info / QE Identity response accepted.
const MAX_DOC: u64 = 512 * 1024;
/// Largest CRL accepted.
const MAX_CRL: u64 = 256 * 1024;

/// Which PCK CA issued the platform's PCK certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PckCa {
    Platform,
    Processor,
}

impl PckCa {
    /// `platform` or `processor`, as the PCS query spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            PckCa::Platform => "platform",
            PckCa::Processor => "processor",
        }
    }

    /// `--pck-ca`.
    pub fn parse(s: &str) -> Result<PckCa, FetchError> {
        match s {
            "platform" => Ok(PckCa::Platform),
            "processor" => Ok(PckCa::Processor),
            _ => Err(FetchError::Input {
                what: format!("--pck-ca {s}"),
                reason: "expected platform or processor".into(),
            }),
        }
    }
}

/// What to fetch for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TdxRequest {
    pub fmspc: [u8; 6],
    pub ca: PckCa,
}

impl TdxRequest {
    /// From a quote: the FMSPC of its PCK certificate and the CA that
    /// issued it.
    pub fn from_quote(quote: &[u8]) -> Result<TdxRequest, FetchError> {
        let input = |reason: String| FetchError::Input {
            what: "--tdx-quote".into(),
            reason,
        };
        let q = kolm_verifier::tdx::parse_tdx_quote(quote).map_err(|e| input(e.to_string()))?;
        let issuer = q
            .pck_chain()
            .get(1)
            .map(|c| c.subject())
            .ok_or_else(|| input("its PCK chain has no PCK CA".into()))?;
        let ca = if issuer.contains("CN=Intel SGX PCK Platform CA") {
            PckCa::Platform
        } else if issuer.contains("CN=Intel SGX PCK Processor CA") {
            PckCa::Processor
        } else {
            return Err(input(format!(
                "its PCK CA {issuer:?} is neither Intel's platform nor processor CA"
            )));
        };
        Ok(TdxRequest {
            fmspc: q.pck_extension().fmspc,
            ca,
        })
    }

    /// From `--fmspc HEX` (12 hex digits) and `--pck-ca`.
    pub fn from_fmspc(fmspc: &str, ca: PckCa) -> Result<TdxRequest, FetchError> {
        let mut out = [0u8; 6];
        hex::decode_to_slice(fmspc, &mut out).map_err(|e| FetchError::Input {
            what: format!("--fmspc {fmspc}"),
            reason: format!("expected 12 hex digits: {e}"),
        })?;
        Ok(TdxRequest { fmspc: out, ca })
    }
}

/// A PCS signed-document response: the document's exact text and its
/// signature.
fn signed_doc(url: &str, body: &[u8], key: &'static str) -> Result<(String, String), FetchError> {
    #[derive(serde::Deserialize)]
    struct Envelope<'a> {
        #[serde(rename = "tcbInfo", borrow, default)]
        tcb_info: Option<&'a RawValue>,
        #[serde(rename = "enclaveIdentity", borrow, default)]
        enclave_identity: Option<&'a RawValue>,
        signature: String,
    }
    let refused = |reason: String| FetchError::Rejected {
        url: url.to_string(),
        what: key,
        reason,
    };
    let text = std::str::from_utf8(body).map_err(|e| refused(format!("not UTF-8: {e}")))?;
    let env: Envelope<'_> =
        serde_json::from_str(text).map_err(|e| refused(format!("not PCS JSON: {e}")))?;
    let doc = match key {
        "tcbInfo" => env.tcb_info,
        _ => env.enclave_identity,
    }
    .ok_or_else(|| refused(format!("no {key:?} member")))?;
    Ok((doc.get().to_string(), env.signature))
}

/// A required issuer-chain header, decoded.
fn chain_header(f: &http::Fetched, header: &'static str) -> Result<String, FetchError> {
    let v = f.header(header).ok_or_else(|| FetchError::Header {
        url: f.url.clone(),
        header,
        reason: "missing".into(),
    })?;
    http::percent_decode(&f.url, header, v)
}

/// The JSON layout the verifier reads, in dcap-qvl's field order.
#[derive(Serialize)]
struct CollateralOut<'a> {
    pck_crl_issuer_chain: &'a str,
    root_ca_crl: String,
    pck_crl: String,
    tcb_info_issuer_chain: &'a str,
    tcb_info: &'a str,
    tcb_info_signature: &'a str,
    qe_identity_issuer_chain: &'a str,
    qe_identity: &'a str,
    qe_identity_signature: &'a str,
}

/// Fetches, assembles and checks `tdx-collateral.json` for `req`.
pub fn fetch(
    client: &Client,
    pcs: &str,
    root_crl_url: &str,
    req: &TdxRequest,
) -> Result<Vec<Item>, FetchError> {
    const TCB_CHAIN: &str = "TCB-Info-Issuer-Chain";
    const QE_CHAIN: &str = "SGX-Enclave-Identity-Issuer-Chain";
    const CRL_CHAIN: &str = "SGX-PCK-CRL-Issuer-Chain";
    let fmspc = hex::encode(req.fmspc);
    let tcb_url = format!("{pcs}/tdx/certification/v4/tcb?fmspc={fmspc}");
    let tcb = client.get(&tcb_url, MAX_DOC, &[TCB_CHAIN])?;
    let tcb_chain = chain_header(&tcb, TCB_CHAIN)?;
    let (tcb_info, tcb_sig) = signed_doc(&tcb_url, &tcb.body, "tcbInfo")?;

    let qe_url = format!("{pcs}/tdx/certification/v4/qe/identity");
    let qe = client.get(&qe_url, MAX_DOC, &[QE_CHAIN])?;
    let qe_chain = chain_header(&qe, QE_CHAIN)?;
    let (qe_identity, qe_sig) = signed_doc(&qe_url, &qe.body, "enclaveIdentity")?;

    let crl_url = format!(
        "{pcs}/sgx/certification/v4/pckcrl?ca={}&encoding=der",
        req.ca.as_str()
    );
    let crl = client.get(&crl_url, MAX_CRL, &[CRL_CHAIN])?;
    let crl_chain = chain_header(&crl, CRL_CHAIN)?;
    let root = client.get(root_crl_url, MAX_CRL, &[])?;

    let out = CollateralOut {
        pck_crl_issuer_chain: &crl_chain,
        root_ca_crl: hex::encode(&root.body),
        pck_crl: hex::encode(&crl.body),
        tcb_info_issuer_chain: &tcb_chain,
        tcb_info: &tcb_info,
        tcb_info_signature: &tcb_sig,
        qe_identity_issuer_chain: &qe_chain,
        qe_identity: &qe_identity,
        qe_identity_signature: &qe_sig,
    };
    // One-space indentation, no final newline: the layout of the
    // collateral files dcap-qvl's tools write.
    let mut bytes = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(
        &mut bytes,
        serde_json::ser::PrettyFormatter::with_indent(b" "),
    );
    out.serialize(&mut ser).map_err(|e| FetchError::Input {
        what: TDX_COLLATERAL.into(),
        reason: e.to_string(),
    })?;

    let urls = vec![tcb_url, qe_url, crl_url, root_crl_url.to_string()];
    let refused = |reason: String| FetchError::Rejected {
        url: urls.join(", "),
        what: "the TDX collateral",
        reason,
    };
    let parsed =
        kolm_verifier::tdx::parse_tdx_collateral(&bytes).map_err(|e| refused(e.to_string()))?;
    let info = parsed.tcb_info();
    if info.id != "TDX" {
        return Err(refused(format!(
            "the TCB Info is for {:?}, not TDX",
            info.id
        )));
    }
    if !info
        .fmspc
        .as_deref()
        .is_some_and(|f| f.eq_ignore_ascii_case(&fmspc))
    {
        return Err(refused(format!(
            "the TCB Info is for FMSPC {:?}, not {fmspc}",
            info.fmspc
        )));
    }
    if parsed.qe_identity().id != "TD_QE" {
        return Err(refused(format!(
            "the QE Identity is for {:?}, not TD_QE",
            parsed.qe_identity().id
        )));
    }
    Ok(vec![Item {
        file: TDX_COLLATERAL,
        bytes,
        urls,
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_come_from_the_quote_or_the_flags() {
        assert_eq!(
            TdxRequest::from_fmspc("50806F000000", PckCa::Processor).unwrap(),
            TdxRequest {
                fmspc: [0x50, 0x80, 0x6f, 0, 0, 0],
                ca: PckCa::Processor
            }
        );
        for bad in ["50806f", "zz806f000000", "50806f0000000"] {
            let e = TdxRequest::from_fmspc(bad, PckCa::Platform).unwrap_err();
            assert!(e.to_string().starts_with("--fmspc "), "{e}");
        }
        assert!(PckCa::parse("both").is_err());
        let Some(root) = kolm_testkit::samples("tdx/expected.json") else {
            return;
        };
        let quote = std::fs::read(root.join("tdx/v4-b0c06f-dcapqvl-2025-06/quote.bin")).unwrap();
        assert_eq!(
            TdxRequest::from_quote(&quote).unwrap(),
            TdxRequest {
                fmspc: [0xb0, 0xc0, 0x6f, 0, 0, 0],
                ca: PckCa::Platform
            }
        );
        let e = TdxRequest::from_quote(&quote[..600]).unwrap_err();
        assert!(e.to_string().starts_with("--tdx-quote: "), "{e}");
        // The verifier's strict parser refuses trailing data; so does
        // fetch (pass --fmspc for such a quote).
        let gotdx = std::fs::read(root.join("tdx/v4-50806f-gotdxguest-2023-06/quote.bin")).unwrap();
        assert!(TdxRequest::from_quote(&gotdx).is_err());
    }

    #[test]
    fn signed_documents_keep_their_exact_text() {
        let body = br#"{"tcbInfo":{"id":"TDX", "b" :[1,2]},"signature":"ab12"}"#;
        let (doc, sig) = signed_doc("u", body, "tcbInfo").unwrap();
        assert_eq!(doc, r#"{"id":"TDX", "b" :[1,2]}"#);
        assert_eq!(sig, "ab12");
        let e = signed_doc("u", body, "enclaveIdentity").unwrap_err();
        assert_eq!(e.exit_code(), 1);
        assert!(signed_doc("u", b"{}", "tcbInfo").is_err());
    }
}
