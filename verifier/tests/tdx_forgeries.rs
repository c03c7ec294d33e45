//! TDX forgeries committed in `attestation-samples/tdx/` (see its
//! `INDEX.md`): built here from the shared genuine samples with a fake Intel
//! PKI (same names, deterministic P-256 keys, RFC 6979 signatures), so the
//! committed bytes can be regenerated and compared.
//!
//! Regenerate with
//! `KOLM_WRITE_FORGERIES=1 cargo test -p kolm-verifier --test tdx_forgeries`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use std::path::{Path, PathBuf};

use der::asn1::BitString;
use der::{Decode, Encode};
use kolm_format::timefmt::parse_rfc3339;
use kolm_policy::Policy;
use kolm_verifier::attested::{Expectations, Outcome, Rejection};
use kolm_verifier::check::TdxCheck;
use kolm_verifier::tdx::{self, TdxEvidence, TdxQuote, parse_tdx_collateral, parse_tdx_quote};
use p256::ecdsa::signature::Signer;
use p256::ecdsa::{Signature, SigningKey, VerifyingKey};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use x509_cert::Certificate;
use x509_cert::crl::CertificateList;

fn samples_dir() -> Option<PathBuf> {
    kolm_testkit::samples("tdx/expected.json").map(|d| d.join("tdx"))
}

fn fixtures_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../attestation-samples/tdx"
    ))
}

/// A deterministic P-256 key: the scalar `byte` repeated 32 times.
fn key(byte: u8) -> SigningKey {
    SigningKey::from_bytes(&[byte; 32].into()).unwrap()
}

fn public_point(k: &SigningKey) -> Vec<u8> {
    VerifyingKey::from(k)
        .to_encoded_point(false)
        .as_bytes()
        .to_vec()
}

/// `r || s`.
fn sign_raw(k: &SigningKey, msg: &[u8]) -> Vec<u8> {
    let sig: Signature = k.sign(msg);
    sig.to_bytes().to_vec()
}

/// DER `Ecdsa-Sig-Value`.
fn sign_der(k: &SigningKey, msg: &[u8]) -> Vec<u8> {
    let sig: Signature = k.sign(msg);
    sig.to_der().as_bytes().to_vec()
}

/// `cert` with its public key replaced by `subject_key`'s, TBS bytes passed
/// through `patch`, and re-signed by `issuer_key`.
fn resign_cert(
    cert_der: &[u8],
    subject_key: &SigningKey,
    issuer_key: &SigningKey,
    patch: impl FnOnce(&mut Vec<u8>),
) -> Vec<u8> {
    let mut cert = Certificate::from_der(cert_der).unwrap();
    cert.tbs_certificate
        .subject_public_key_info
        .subject_public_key = BitString::from_bytes(&public_point(subject_key)).unwrap();
    let mut tbs = cert.tbs_certificate.to_der().unwrap();
    patch(&mut tbs);
    cert.tbs_certificate = x509_cert::TbsCertificate::from_der(&tbs).unwrap();
    cert.signature = BitString::from_bytes(&sign_der(issuer_key, &tbs)).unwrap();
    cert.to_der().unwrap()
}

/// `crl` re-signed by `issuer_key`, contents unchanged.
fn resign_crl(crl_der: &[u8], issuer_key: &SigningKey) -> Vec<u8> {
    let mut crl = CertificateList::from_der(crl_der).unwrap();
    let tbs = crl.tbs_cert_list.to_der().unwrap();
    crl.signature = BitString::from_bytes(&sign_der(issuer_key, &tbs)).unwrap();
    crl.to_der().unwrap()
}

fn pem(certs: &[&[u8]], nul: bool) -> String {
    let mut out = String::new();
    for c in certs {
        out.push_str(&der::pem::encode_string("CERTIFICATE", der::pem::LineEnding::LF, c).unwrap());
    }
    if nul {
        out.push('\0');
    }
    out
}

fn pem_ders(pem_text: &str) -> Vec<Vec<u8>> {
    pem_text
        .split_inclusive("-----END CERTIFICATE-----")
        .filter(|b| b.contains("BEGIN"))
        .map(|b| {
            let b = b.trim_start_matches(['\n', '\r', '\0']);
            der::pem::decode_vec(b.as_bytes()).unwrap().1
        })
        .collect()
}

/// Sets SGX TCB component `n` (1..=16) of a PCK TBSCertificate to `value`:
/// OID `1.2.840.113741.1.13.1.2.n` followed by `INTEGER` of one byte.
fn patch_sgx_comp(tbs: &mut [u8], n: u8, value: u8) {
    let pat = [
        0x06, 0x0b, 0x2a, 0x86, 0x48, 0x86, 0xf8, 0x4d, 0x01, 0x0d, 0x01, 0x02, n, 0x02, 0x01,
    ];
    let at = tbs
        .windows(pat.len())
        .position(|w| w == pat.as_slice())
        .unwrap()
        + pat.len();
    assert!(value < 0x80);
    tbs[at] = value;
}

/// Serialises a quote: `signed` (header + body) and the signature data.
fn assemble_quote(
    signed: &[u8],
    signature: &[u8],
    ak: &[u8],
    qe_report: &[u8],
    qe_report_sig: &[u8],
    qe_auth: &[u8],
    chain_pem: &[u8],
) -> Vec<u8> {
    let mut cert = Vec::new();
    cert.extend_from_slice(qe_report);
    cert.extend_from_slice(qe_report_sig);
    cert.extend_from_slice(&(qe_auth.len() as u16).to_le_bytes());
    cert.extend_from_slice(qe_auth);
    cert.extend_from_slice(&5u16.to_le_bytes());
    cert.extend_from_slice(&(chain_pem.len() as u32).to_le_bytes());
    cert.extend_from_slice(chain_pem);
    let mut sig = Vec::new();
    sig.extend_from_slice(signature);
    sig.extend_from_slice(ak);
    sig.extend_from_slice(&6u16.to_le_bytes());
    sig.extend_from_slice(&(cert.len() as u32).to_le_bytes());
    sig.extend_from_slice(&cert);
    let mut q = signed.to_vec();
    q.extend_from_slice(&(sig.len() as u32).to_le_bytes());
    q.extend_from_slice(&sig);
    q
}

fn collateral_json(map: Map<String, Value>) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(&Value::Object(map)).unwrap();
    out.push(b'\n');
    out
}

/// The fake PKI: keys and the certificates they sign, copied from Intel's
/// (same subject, issuer, validity, extensions), with fake keys.
struct FakePki {
    root_key: SigningKey,
    ca_key: SigningKey,
    leaf_key: SigningKey,
    tcb_key: SigningKey,
    ak: SigningKey,
    root: Vec<u8>,
    ca: Vec<u8>,
    tcb_signer: Vec<u8>,
}

impl FakePki {
    fn new(genuine_quote: &TdxQuote, genuine_collateral: &Map<String, Value>) -> FakePki {
        let root_key = key(0x11);
        let ca_key = key(0x22);
        let leaf_key = key(0x33);
        let tcb_key = key(0x44);
        let ak = key(0x55);
        let chain = genuine_quote.pck_chain();
        let root = resign_cert(chain[2].der(), &root_key, &root_key, |_| {});
        let ca = resign_cert(chain[1].der(), &ca_key, &root_key, |_| {});
        let tcb = pem_ders(
            genuine_collateral["tcb_info_issuer_chain"]
                .as_str()
                .unwrap(),
        );
        let tcb_signer = resign_cert(&tcb[0], &tcb_key, &root_key, |_| {});
        FakePki {
            root_key,
            ca_key,
            leaf_key,
            tcb_key,
            ak,
            root,
            ca,
            tcb_signer,
        }
    }
}

struct Forgeries {
    /// `(file name, bytes)`.
    files: Vec<(&'static str, Vec<u8>)>,
}

const V4: &str = "v4-b0c06f-dcapqvl-2025-06";
const V4_AT: &str = "2025-07-01T00:00:00Z";
const V5_TCB: &str = "v5-90c06f-dcapqvl-2026-02-tcb-not-found";
const V5_TCB_AT: &str = "2026-03-01T00:00:00Z";

/// REPORT_DATA an attacker wants bound: SHA-256("kolm forged report data")
/// followed by zeros.
fn forged_report_data() -> [u8; 64] {
    let mut rd = [0u8; 64];
    rd[..32].copy_from_slice(&Sha256::digest(b"kolm forged report data"));
    rd
}

fn build(dir: &Path) -> Forgeries {
    let quote_bytes = std::fs::read(dir.join(V4).join("quote.bin")).unwrap();
    let genuine = parse_tdx_quote(&quote_bytes).unwrap();
    let col_bytes = std::fs::read(dir.join(V4).join("collateral.json")).unwrap();
    let col: Map<String, Value> = serde_json::from_slice(&col_bytes).unwrap();
    let pki = FakePki::new(&genuine, &col);
    let mut files = Vec::new();

    // 1. Fake root with Intel's name: quote and collateral, every signature
    // valid under the fake PKI.
    {
        let leaf = resign_cert(
            genuine.pck_chain()[0].der(),
            &pki.leaf_key,
            &pki.ca_key,
            |_| {},
        );
        let chain_pem = pem(&[&leaf, &pki.ca, &pki.root], true);
        let ak_point = public_point(&pki.ak);
        let ak = &ak_point[1..];
        let mut signed = genuine.signed_bytes().to_vec();
        let rd_at = signed.len() - 64;
        signed[rd_at..].copy_from_slice(&forged_report_data());
        let mut qe_report = genuine.qe_report().raw().to_vec();
        let mut h = Sha256::new();
        h.update(ak);
        h.update(genuine.qe_auth_data());
        qe_report[320..352].copy_from_slice(&h.finalize());
        qe_report[352..].fill(0);
        let quote = assemble_quote(
            &signed,
            &sign_raw(&pki.ak, &signed),
            ak,
            &qe_report,
            &sign_raw(&pki.leaf_key, &qe_report),
            genuine.qe_auth_data(),
            chain_pem.as_bytes(),
        );
        let mut c = col.clone();
        let tcb_chain = pem(&[&pki.tcb_signer, &pki.root], false);
        let tcb_info = col["tcb_info"].as_str().unwrap();
        let qe_identity = col["qe_identity"].as_str().unwrap();
        c.insert("tcb_info_issuer_chain".into(), tcb_chain.clone().into());
        c.insert("qe_identity_issuer_chain".into(), tcb_chain.into());
        c.insert(
            "pck_crl_issuer_chain".into(),
            pem(&[&pki.ca, &pki.root], false).into(),
        );
        c.insert(
            "tcb_info_signature".into(),
            hex::encode(sign_raw(&pki.tcb_key, tcb_info.as_bytes())).into(),
        );
        c.insert(
            "qe_identity_signature".into(),
            hex::encode(sign_raw(&pki.tcb_key, qe_identity.as_bytes())).into(),
        );
        for (k, signer) in [("root_ca_crl", &pki.root_key), ("pck_crl", &pki.ca_key)] {
            let crl = hex::decode(col[k].as_str().unwrap()).unwrap();
            c.insert(k.into(), hex::encode(resign_crl(&crl, signer)).into());
        }
        files.push(("forged-fake-root-quote.bin", quote));
        files.push(("forged-fake-root-collateral.json", collateral_json(c)));
    }

    // 2. A genuine quote whose TCB level genuinely does not match, with
    // TCB Info rewritten so that it would (every SGX and TDX component
    // requirement of every level set to 0), re-signed by a fake TCB Signing
    // certificate under the fake root.
    {
        let col5: Map<String, Value> = serde_json::from_slice(
            &std::fs::read(dir.join(V5_TCB).join("collateral.json")).unwrap(),
        )
        .unwrap();
        let mut tcb_info: Value = serde_json::from_str(col5["tcb_info"].as_str().unwrap()).unwrap();
        for level in tcb_info["tcbLevels"].as_array_mut().unwrap() {
            for comps in ["sgxtcbcomponents", "tdxtcbcomponents"] {
                for comp in level["tcb"][comps].as_array_mut().unwrap() {
                    comp["svn"] = 0.into();
                }
            }
            level["tcb"]["pcesvn"] = 0.into();
        }
        let text = serde_json::to_string(&tcb_info).unwrap();
        let mut c = col5.clone();
        c.insert(
            "tcb_info_signature".into(),
            hex::encode(sign_raw(&pki.tcb_key, text.as_bytes())).into(),
        );
        c.insert("tcb_info".into(), text.into());
        c.insert(
            "tcb_info_issuer_chain".into(),
            pem(&[&pki.tcb_signer, &pki.root], false).into(),
        );
        files.push((
            "forged-tcb-info-fake-signer-collateral.json",
            collateral_json(c),
        ));
    }

    // 3. The pck_certificate_chain trap: the genuine quote (genuine QE
    // report, attestation key and signatures) with its embedded PCK chain
    // replaced by a fake one that claims a different TCB (SGX TCB components
    // 1 and 2 raised to 15), and the genuine collateral plus the genuine PCK
    // chain as `pck_certificate_chain`. dcap-qvl verifies the collateral's
    // chain and accepts; the embedded chain, whose FMSPC and TCB a reader of
    // the quote sees, was never checked.
    {
        let leaf = resign_cert(
            genuine.pck_chain()[0].der(),
            &pki.leaf_key,
            &pki.ca_key,
            |tbs| {
                patch_sgx_comp(tbs, 1, 15);
                patch_sgx_comp(tbs, 2, 15);
            },
        );
        let chain_pem = pem(&[&leaf, &pki.ca, &pki.root], true);
        let quote = assemble_quote(
            genuine.signed_bytes(),
            genuine.signature(),
            genuine.attestation_key(),
            genuine.qe_report().raw(),
            genuine.qe_report_signature(),
            genuine.qe_auth_data(),
            chain_pem.as_bytes(),
        );
        let mut c = col.clone();
        c.insert(
            "pck_certificate_chain".into(),
            String::from_utf8(genuine.pck_chain_pem().to_vec())
                .unwrap()
                .into(),
        );
        files.push(("forged-embedded-chain-quote.bin", quote));
        files.push(("forged-embedded-chain-collateral.json", collateral_json(c)));
    }
    Forgeries { files }
}

fn file<'a>(f: &'a Forgeries, name: &str) -> &'a [u8] {
    &f.files.iter().find(|(n, _)| *n == name).unwrap().1
}

fn dcap_alone(quote: &[u8], collateral: &[u8], at: &str) -> Result<String, String> {
    let col = parse_tdx_collateral(collateral).unwrap();
    let now = parse_rfc3339(at).unwrap().unix_timestamp() as u64;
    dcap_qvl::verify::QuoteVerifier::<dcap_qvl::configs::RustCryptoConfig>::new_with_config(
        kolm_verifier::tdx::INTEL_SGX_ROOT_CA_DER.to_vec(),
    )
    .allow_debug(true)
    .verify(quote, col.as_dcap(), now)
    .map(|r| r.status)
    .map_err(|e| format!("{e:#}"))
}

#[test]
fn committed_forgeries_are_reproducible_and_rejected() {
    let Some(dir) = samples_dir() else { return };
    let forged = build(&dir);
    let out = fixtures_dir();
    if std::env::var_os("KOLM_WRITE_FORGERIES").is_some() {
        for (name, bytes) in &forged.files {
            std::fs::write(out.join(name), bytes).unwrap();
        }
    }
    for (name, bytes) in &forged.files {
        let committed = std::fs::read(out.join(name))
            .unwrap_or_else(|e| panic!("attestation-samples/tdx/{name}: {e}"));
        assert!(
            committed == *bytes,
            "attestation-samples/tdx/{name} differs from a fresh generation \
             (KOLM_WRITE_FORGERIES=1 regenerates it)"
        );
        eprintln!(
            "{name}: {} bytes, sha256 {}",
            bytes.len(),
            hex::encode(Sha256::digest(bytes))
        );
    }
    check_verdicts(&dir, &forged);
}

/// Verifies under the production policy; asserts a rejection whose first
/// failing check is `id`.
fn reject(quote: &[u8], collateral: &[u8], at: &str, id: TdxCheck) -> Rejection {
    let production = Policy::production();
    let r = tdx::verify(
        &TdxEvidence { quote, collateral },
        &Expectations::new(&production),
        parse_rfc3339(at).unwrap(),
    );
    let checks = || {
        Outcome::of(&r)
            .checks()
            .iter()
            .map(|c| format!("{:?} {} {}", c.status, c.id, c.detail))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let first = Outcome::of(&r).checks().first_failure().map(|c| c.id);
    assert_eq!(first, Some(id.into()), "{}", checks());
    r.unwrap_err()
}

fn check_verdicts(dir: &Path, f: &Forgeries) {
    // 1. Fake root: every signature checks out under the fake PKI; only the
    // root pin rejects it. dcap-qvl on its own rejects it too (the root CA
    // CRL does not verify with the real root key).
    let q = file(f, "forged-fake-root-quote.bin");
    let c = file(f, "forged-fake-root-collateral.json");
    let parsed = parse_tdx_quote(q).unwrap();
    assert_eq!(parsed.report_data(), &forged_report_data());
    let rej = reject(q, c, V4_AT, TdxCheck::PckChain);
    assert_eq!(
        rej.fields.get("internal_sig_checks").unwrap(),
        &serde_json::json!({
            "quote_sig": true, "qe_report_sig_by_pck": true, "qe_report_data_binds_ak": true,
            "chain0": true, "chain1": true, "root_self": true
        })
    );
    assert!(dcap_alone(q, c, V4_AT).is_err());

    // 2. Forged TCB Info under a fake signer, genuine quote.
    let genuine5 = std::fs::read(dir.join(V5_TCB).join("quote.bin")).unwrap();
    let c = file(f, "forged-tcb-info-fake-signer-collateral.json");
    let rej = reject(&genuine5, c, V5_TCB_AT, TdxCheck::CollateralChain);
    assert!(rej.reason.contains("tcb_info_issuer_chain"));
    assert!(dcap_alone(&genuine5, c, V5_TCB_AT).is_err());

    // 3. The pck_certificate_chain trap: dcap-qvl alone ACCEPTS it.
    let q = file(f, "forged-embedded-chain-quote.bin");
    let c = file(f, "forged-embedded-chain-collateral.json");
    assert_eq!(dcap_alone(q, c, V4_AT).as_deref(), Ok("UpToDate"));
    let rej = reject(q, c, V4_AT, TdxCheck::PckChainMatch);
    // The embedded chain's claims are what a reader of the quote sees.
    assert_eq!(
        rej.fields.get("pck_sgx_tcb_comps").unwrap(),
        &serde_json::json!([15, 15, 2, 2, 4, 1, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0])
    );
    // Without the collateral's chain, the fake embedded one fails the pin.
    let mut without: Map<String, Value> = serde_json::from_slice(c).unwrap();
    without.remove("pck_certificate_chain");
    reject(
        q,
        &serde_json::to_vec(&without).unwrap(),
        V4_AT,
        TdxCheck::PckChain,
    );
}
