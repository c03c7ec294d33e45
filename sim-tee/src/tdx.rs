//! The sim evidence in the Intel TDX format (`--sim-format tdx`): a TDX
//! DCAP quote v4 exactly as a TD quoting enclave writes it (Intel TDX DCAP
//! Quoting Library API, appendix A "Quote format"; `sgx_quote_4.h`), and
//! its collateral in dcap-qvl's `QuoteCollateralV3` JSON layout (what
//! `evidence/tdx-collateral.json` holds for real TDX), both under the
//! installation's TDX format root instead of the Intel SGX Root CA.
//!
//! The quote (all integers little-endian; every fixed part written through
//! [`kolm_tee_layouts::tdx`], the tables the verifier reads with):
//!
//! | part | layout | content |
//! |---|---|---|
//! | header | `header` | version 4, attestation key type 2 (ECDSA-P256), TEE type 0x81, 4 reserved zero bytes, Intel's QE vendor id, 20 zero bytes of user data |
//! | TD report body (TD report 1.0) | `td_report10` | the stand-ins below; REPORTDATA = the 64 bytes asked |
//! | signature data length | u32 | |
//! | signature | `signature_data` | ECDSA P-256 `r \|\| s` by the attestation key over header and body |
//! | attestation key | `signature_data` | its public point, `x \|\| y` |
//! | certification data | `signature_data`, `qe_certification_data`, `qe_report` | type 6 (QE report certification data): QE report, its signature by the PCK key, QE authentication data (2 + 32), certification data type 5 (2 + 4 + PEM PCK chain: leaf, PCK CA, the TDX format root, NUL-terminated) |
//!
//! The QE report's REPORTDATA is SHA-256(attestation key || QE
//! authentication data) || 32 zero bytes, as a real quoting enclave's. The
//! PCK leaf carries Intel's SGX extension (OID 1.2.840.113741.1.13.1: PPID,
//! TCB components 1..16, PCESVN, CPUSVN, PCE-ID, FMSPC, SGX type, platform
//! instance id, configuration), so the verifier's TCB matching runs on it.
//!
//! The TD report's measurements are stand-ins, not measurements of a TD:
//!
//! | field | value |
//! |---|---|
//! | TEE_TCB_SVN | [`TEE_TCB_SVN`] (a TDX module 1.x, SVN 6) |
//! | MRSEAM | SHA-384 of [`MRSEAM_LABEL`] (no TDX module is measured) |
//! | MRSIGNERSEAM, SEAMATTRIBUTES | zero (as Intel's modules) |
//! | TD_ATTRIBUTES | SEPT_VE_DISABLE only (not a debug TD) |
//! | XFAM | 0x06e7 (x87, SSE, AVX, AVX-512 state; a common TD's) |
//! | MRTD | SHA-384 of the running `kolm-enclave` binary (the manifest's `environment.measurement`) |
//! | MRCONFIGID, MROWNER, MROWNERCONFIG | zero |
//! | RTMR0 | SHA-384 of [`RTMR0_LABEL`] (no firmware is measured) |
//! | RTMR1 | SHA-384 of [`RTMR1_LABEL`] (no kernel is measured) |
//! | RTMR2 | SHA-384 of the TDX format root certificate (the installation stands for the platform) |
//! | RTMR3 | zero (nothing extended at run time) |
//!
//! The collateral: TCB Info v3 (`id` `TDX`) for the quote's FMSPC with one
//! TCB level, `UpToDate`, met exactly by the PCK's CPUSVN/PCESVN and the
//! TEE_TCB_SVN, and the TDX module identity `TDX_01`; QE Identity v2
//! (`TD_QE`) for the stand-in QE; both signed by a TCB-signing certificate
//! the format root issues; the root CA CRL (signed by the root) and the PCK
//! CRL (signed by the PCK CA), both empty. Documents and CRLs are issued at
//! the second they are made and valid for [`COLLATERAL_VALIDITY`] (Intel's
//! are for 30 days). Every key is P-256 (Intel's DCAP uses nothing else);
//! the certificates below the root are made once per process.

use kolm_tee_layouts::tdx::{header, qe_report as qe_layout, signature_data, td_report10};
use ring::rand::{SecureRandom as _, SystemRandom};
use ring::signature::{
    ECDSA_P256_SHA256_ASN1_SIGNING, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _,
};
use time::{Duration, OffsetDateTime};

use super::SimError;
use super::der::{self, oid, tag};
use super::root::{self, KeyAlg, SIM_ORG_UNIT, SimRoot, TbsFields};

/// What MRSEAM is the SHA-384 of.
pub const MRSEAM_LABEL: &str = "kolm simulated TEE MRSEAM: no TDX module is measured (NOT A TEE)";
/// What RTMR0 is the SHA-384 of.
pub const RTMR0_LABEL: &str = "kolm simulated TEE RTMR0: no firmware is measured (NOT A TEE)";
/// What RTMR1 is the SHA-384 of.
pub const RTMR1_LABEL: &str = "kolm simulated TEE RTMR1: no kernel is measured (NOT A TEE)";
/// What the stand-in quoting enclave's MRENCLAVE is the SHA-256 of.
pub const QE_MRENCLAVE_LABEL: &str = "kolm simulated TEE TD quoting enclave (NOT A TEE)";
/// What the stand-in quoting enclave's MRSIGNER is the SHA-256 of.
pub const QE_MRSIGNER_LABEL: &str = "kolm simulated TEE QE signer (NOT A TEE)";

/// TEE_TCB_SVN: TDX module SVN 6, major version 1 (module identity
/// `TDX_01`), TDX late microcode SVN 3.
pub const TEE_TCB_SVN: [u8; 16] = [6, 1, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
/// The PCK's CPUSVN (its TCB components 1..16, as Intel encodes both).
pub const CPUSVN: [u8; 16] = [3, 3, 2, 2, 4, 1, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0];
/// The PCK's PCESVN.
pub const PCESVN: u16 = 11;
/// The FMSPC of the simulated platform (a value no Intel platform uses:
/// the family byte is 0xff).
pub const FMSPC: [u8; 6] = [0xff, 0x5e, 0x51, 0x00, 0x00, 0x00];
/// The QE's ISVSVN and ISVPRODID (2: the TD quoting enclave).
pub const QE_ISVSVN: u16 = 4;
pub const QE_ISVPRODID: u16 = 2;
/// TCB evaluation data number of the collateral (at least the policy's
/// default minimum, 17).
pub const TCB_EVALUATION_DATA_NUMBER: u32 = 17;
/// How long the collateral documents and CRLs are valid.
pub const COLLATERAL_VALIDITY: Duration = Duration::days(30);
/// How long the certificates below the root are valid (Intel issues PCK
/// certificates for 7 years).
pub const CERT_VALIDITY: Duration = Duration::days(7 * 365);

/// Intel's QE vendor id (`939A7233F79C4CA9940A0DB3957F0607`): the format
/// requires it; the signatures say who made the quote.
const INTEL_QE_VENDOR_ID: [u8; 16] = header::INTEL_QE_VENDOR_ID;
/// Sizes of the Intel TDX DCAP quote v4 (`sgx_quote_4.h`).
pub const HEADER_BYTES: usize = header::SIZE;
pub const TD_REPORT_BYTES: usize = td_report10::SIZE;
pub const QE_REPORT_BYTES: usize = qe_layout::SIZE;
const QE_AUTH_DATA_BYTES: usize = 32;
const TEE_TYPE_TDX: u32 = header::TEE_TYPE_TDX;
const ATT_KEY_TYPE_ECDSA_P256: u16 = header::ATT_KEY_TYPE_ECDSA_P256;
const CERT_TYPE_QE_REPORT: u16 = signature_data::CERT_TYPE_QE_REPORT;
const CERT_TYPE_PCK_CHAIN: u16 = signature_data::CERT_TYPE_PCK_CHAIN;
/// TD_ATTRIBUTES: SEPT_VE_DISABLE (bit 28) only.
const TD_ATTRIBUTES: [u8; 8] = [0, 0, 0, 0x10, 0, 0, 0, 0];
const XFAM: [u8; 8] = [0xe7, 0x02, 0x06, 0, 0, 0, 0, 0];

fn sha384(bytes: &[u8]) -> [u8; 48] {
    let mut out = [0u8; 48];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA384, bytes).as_ref());
    out
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref());
    out
}

fn crypto(what: &'static str) -> impl FnOnce(ring::error::Unspecified) -> SimError {
    move |_| SimError::Crypto(what)
}

fn key(alg: &'static ring::signature::EcdsaSigningAlgorithm) -> Result<EcdsaKeyPair, SimError> {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).map_err(crypto("key generation failed"))?;
    EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng)
        .map_err(|_| SimError::Crypto("generated key does not load"))
}

fn sign(key: &EcdsaKeyPair, msg: &[u8]) -> Result<Vec<u8>, SimError> {
    key.sign(&SystemRandom::new(), msg)
        .map(|s| s.as_ref().to_vec())
        .map_err(crypto("ECDSA signing failed"))
}

/// `CN=<cn>, OU=simulated TEE, not hardware, O=kolm`.
fn name(cn: &str) -> Vec<u8> {
    der::name(&[
        (oid::ORGANIZATION, "kolm"),
        (oid::ORGANIZATIONAL_UNIT, SIM_ORG_UNIT),
        (oid::COMMON_NAME, cn),
    ])
}

/// The measurement registers and SVNs of the TD report, the ones that do
/// not change between quotes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TdStandIns {
    pub mrseam: [u8; 48],
    pub mrtd: [u8; 48],
    pub rtmr: [[u8; 48]; 4],
}

impl TdStandIns {
    /// The stand-ins of the module table for a binary of SHA-384
    /// `binary_sha384` under `root`.
    pub fn new(binary_sha384: [u8; 48], root: &SimRoot) -> TdStandIns {
        TdStandIns {
            mrseam: sha384(MRSEAM_LABEL.as_bytes()),
            mrtd: binary_sha384,
            rtmr: [
                sha384(RTMR0_LABEL.as_bytes()),
                sha384(RTMR1_LABEL.as_bytes()),
                sha384(root.certificate_der()),
                [0u8; 48],
            ],
        }
    }
}

/// The TDX form's keys and certificates below the format root, made once
/// per process.
pub(crate) struct TdxSim {
    stand_ins: TdStandIns,
    /// The PCK CA (signs the PCK CRL).
    pck_ca_key: EcdsaKeyPair,
    pck_ca_subject: Vec<u8>,
    /// The TCB signing certificate (signs TCB Info and QE Identity, raw
    /// `r || s`) and its PEM chain (signer, root).
    tcb_key: EcdsaKeyPair,
    tcb_chain_pem: String,
    /// The PCK CRL issuer chain (PCK CA, root).
    pck_crl_chain_pem: String,
    /// The attestation key (signs each quote, raw `r || s`).
    att_key: EcdsaKeyPair,
    /// The certification data (type 6), signed once: the QE report binds
    /// the attestation key, which does not change.
    certification_data: Vec<u8>,
}

impl std::fmt::Debug for TdxSim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys.
        f.debug_struct("TdxSim")
            .field("stand_ins", &self.stand_ins)
            .finish_non_exhaustive()
    }
}

/// Signs a DER structure with an issuer's key (ASN.1 signature): the root's
/// or the PCK CA's.
type IssuerSign<'a> = dyn Fn(&[u8]) -> Result<Vec<u8>, SimError> + 'a;

/// A certificate the root or the PCK CA issues.
struct Issued<'a> {
    issuer_key: &'a IssuerSign<'a>,
    issuer_subject: &'a [u8],
    issuer_public_key: &'a [u8],
    subject: &'a [u8],
    public_key: &'a [u8],
    ca: Option<u8>,
    extra: &'a [Vec<u8>],
    not_before: OffsetDateTime,
}

fn issue(i: &Issued<'_>) -> Result<Vec<u8>, SimError> {
    let tbs = root::tbs_certificate(&TbsFields {
        serial: root::random_serial()?,
        issuer: i.issuer_subject,
        subject: i.subject,
        not_before: i.not_before,
        not_after: i.not_before.saturating_add(CERT_VALIDITY),
        public_key: i.public_key,
        key_alg: KeyAlg::P256,
        signature_alg: KeyAlg::P256,
        ca: i.ca,
        authority_key_id: Some(root::key_id(i.issuer_public_key)),
        extra_extensions: i.extra,
    });
    let sig = (i.issuer_key)(&tbs)?;
    Ok(root::certificate(&tbs, KeyAlg::P256, &sig))
}

/// `SEQUENCE { OID 1.2.840.113741.1.13.1.<n>, value }`.
fn sgx_member(path: &[u64], value: &[u8]) -> Vec<u8> {
    let arcs: Vec<u64> = oid::SGX_EXTENSION.iter().chain(path).copied().collect();
    der::sequence(&[&der::oid(&arcs), value])
}

/// Intel's SGX extension of a PCK certificate, in Intel's order: PPID,
/// TCB (components 1..16, PCESVN, CPUSVN), PCE-ID, FMSPC, SGX type
/// (Scalable: 1), platform instance id, configuration.
fn sgx_extension(ppid: &[u8; 16], instance: &[u8; 16]) -> Vec<u8> {
    let mut tcb: Vec<Vec<u8>> = CPUSVN
        .iter()
        .zip(1u64..)
        .map(|(&svn, n)| sgx_member(&[2, n], &der::unsigned_integer(&[svn])))
        .collect();
    tcb.push(sgx_member(
        &[2, 17],
        &der::unsigned_integer(&PCESVN.to_be_bytes()),
    ));
    tcb.push(sgx_member(&[2, 18], &der::octet_string(&CPUSVN)));
    let tcb_parts: Vec<&[u8]> = tcb.iter().map(Vec::as_slice).collect();
    let config = der::sequence(&[
        &sgx_member(&[7, 1], &der::boolean(false)),
        &sgx_member(&[7, 2], &der::boolean(false)),
        &sgx_member(&[7, 3], &der::boolean(false)),
    ]);
    let value = der::sequence(&[
        &sgx_member(&[1], &der::octet_string(ppid)),
        &sgx_member(&[2], &der::sequence(&tcb_parts)),
        &sgx_member(&[3], &der::octet_string(&[0, 0])),
        &sgx_member(&[4], &der::octet_string(&FMSPC)),
        &sgx_member(&[5], &der::enumerated(1)),
        &sgx_member(&[6], &der::octet_string(instance)),
        &sgx_member(&[7], &config),
    ]);
    der::extension(oid::SGX_EXTENSION, false, &value)
}

/// A QE report (SGX `REPORT` body, [`qe_layout`]; `sgx_report_body_t`).
fn qe_report(report_data: &[u8; 64]) -> [u8; QE_REPORT_BYTES] {
    use qe_layout as q;
    let mut r = [0u8; QE_REPORT_BYTES];
    q::CPU_SVN.set(
        &mut r,
        &[3, 3, 0x19, 0x1b, 4, 0xff, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0],
    );
    // MISCSELECT zero; the reserved fields zero.
    // ATTRIBUTES: INIT | MODE64BIT; XFRM.
    q::ATTRIBUTES.set(
        &mut r,
        &[0x11, 0, 0, 0, 0, 0, 0, 0, 0xe7, 0, 0, 0, 0, 0, 0, 0],
    );
    q::MRENCLAVE.set(&mut r, &sha256(QE_MRENCLAVE_LABEL.as_bytes()));
    q::MRSIGNER.set(&mut r, &sha256(QE_MRSIGNER_LABEL.as_bytes()));
    q::ISVPRODID.set_u16_le(&mut r, QE_ISVPRODID);
    q::ISVSVN.set_u16_le(&mut r, QE_ISVSVN);
    q::REPORTDATA.set(&mut r, report_data);
    r
}

/// The TCB Info `tcb` of the one level: the components equal what the
/// quote reports.
fn tcb_level_json() -> serde_json::Value {
    let comps = |svns: &[u8]| -> Vec<serde_json::Value> {
        svns.iter()
            .map(|&svn| serde_json::json!({ "svn": svn }))
            .collect()
    };
    serde_json::json!({
        "tcb": {
            "sgxtcbcomponents": comps(&CPUSVN),
            "pcesvn": PCESVN,
            "tdxtcbcomponents": comps(&TEE_TCB_SVN),
        },
        "tcbDate": "2025-01-01T00:00:00Z",
        "tcbStatus": "UpToDate",
    })
}

fn rfc3339(t: OffsetDateTime) -> String {
    kolm_format::timefmt::format_utc_seconds(t).unwrap_or_else(|_| t.to_string())
}

impl TdxSim {
    /// Makes the chain below `root` (a TDX format root) at `now`.
    pub(crate) fn new(
        root: &SimRoot,
        stand_ins: TdStandIns,
        now: OffsetDateTime,
    ) -> Result<TdxSim, SimError> {
        let not_before = now.replace_nanosecond(0).unwrap_or(now);
        let root_sign = |tbs: &[u8]| root.sign_tbs(tbs).map_err(SimError::from);
        let mut rand = [0u8; 32];
        SystemRandom::new()
            .fill(&mut rand)
            .map_err(crypto("no randomness"))?;
        let (ppid, instance) = rand.split_at(16);
        let ppid: [u8; 16] = ppid.try_into().unwrap_or([0u8; 16]);
        let instance: [u8; 16] = instance.try_into().unwrap_or([0u8; 16]);

        let pck_ca_key = key(&ECDSA_P256_SHA256_ASN1_SIGNING)?;
        let pck_ca_subject = name("kolm simulated TEE TDX PCK Platform CA (NOT A TEE)");
        let pck_ca = issue(&Issued {
            issuer_key: &root_sign,
            issuer_subject: root.subject_der(),
            issuer_public_key: root.public_key(),
            subject: &pck_ca_subject,
            public_key: pck_ca_key.public_key().as_ref(),
            ca: Some(0),
            extra: &[],
            not_before,
        })?;
        let pck_key = key(&ECDSA_P256_SHA256_FIXED_SIGNING)?;
        let ca_sign = |tbs: &[u8]| sign(&pck_ca_key, tbs);
        let pck = issue(&Issued {
            issuer_key: &ca_sign,
            issuer_subject: &pck_ca_subject,
            issuer_public_key: pck_ca_key.public_key().as_ref(),
            subject: &name("kolm simulated TEE TDX PCK Certificate (NOT A TEE)"),
            public_key: pck_key.public_key().as_ref(),
            ca: None,
            extra: &[sgx_extension(&ppid, &instance)],
            not_before,
        })?;
        let tcb_key = key(&ECDSA_P256_SHA256_FIXED_SIGNING)?;
        let tcb_signer = issue(&Issued {
            issuer_key: &root_sign,
            issuer_subject: root.subject_der(),
            issuer_public_key: root.public_key(),
            subject: &name("kolm simulated TEE TDX TCB Signing (NOT A TEE)"),
            public_key: tcb_key.public_key().as_ref(),
            ca: None,
            extra: &[],
            not_before,
        })?;
        let root_pem = root.certificate_pem();
        let pck_chain_pem = [
            root::pem_encode(&pck),
            root::pem_encode(&pck_ca),
            root_pem.clone(),
        ]
        .concat();
        let tcb_chain_pem = [root::pem_encode(&tcb_signer), root_pem.clone()].concat();
        let pck_crl_chain_pem = [root::pem_encode(&pck_ca), root_pem].concat();

        // The QE: its report binds the attestation key and the auth data,
        // and the PCK key signs it.
        let att_key = key(&ECDSA_P256_SHA256_FIXED_SIGNING)?;
        let att_public = att_key
            .public_key()
            .as_ref()
            .get(1..)
            .ok_or(SimError::Crypto("attestation key is not a point"))?
            .to_vec();
        let auth_data: Vec<u8> = (0u8..).take(QE_AUTH_DATA_BYTES).collect();
        let mut qe_report_data = [0u8; 64];
        qe_report_data
            .get_mut(..32)
            .ok_or(SimError::Crypto("report data"))?
            .copy_from_slice(&sha256(&[att_public.as_slice(), &auth_data].concat()));
        let qe = qe_report(&qe_report_data);
        let qe_sig = sign(&pck_key, &qe)?;
        let mut chain = pck_chain_pem.into_bytes();
        // Real quoting enclaves NUL-terminate the PEM.
        chain.push(0);
        let mut inner = Vec::new();
        inner.extend_from_slice(&qe);
        inner.extend_from_slice(&qe_sig);
        inner.extend_from_slice(&u16_len(auth_data.len())?.to_le_bytes());
        inner.extend_from_slice(&auth_data);
        inner.extend_from_slice(&CERT_TYPE_PCK_CHAIN.to_le_bytes());
        inner.extend_from_slice(&u32_len(chain.len())?.to_le_bytes());
        inner.extend_from_slice(&chain);
        let mut certification_data = Vec::new();
        certification_data.extend_from_slice(&att_public);
        certification_data.extend_from_slice(&CERT_TYPE_QE_REPORT.to_le_bytes());
        certification_data.extend_from_slice(&u32_len(inner.len())?.to_le_bytes());
        certification_data.extend_from_slice(&inner);
        Ok(TdxSim {
            stand_ins,
            pck_ca_key,
            pck_ca_subject,
            tcb_key,
            tcb_chain_pem,
            pck_crl_chain_pem,
            att_key,
            certification_data,
        })
    }

    /// The header and TD report body: what the attestation key signs.
    fn signed_part(&self, report_data: &[u8; 64]) -> Vec<u8> {
        let mut h = [0u8; HEADER_BYTES];
        header::VERSION.set_u16_le(&mut h, 4);
        header::ATT_KEY_TYPE.set_u16_le(&mut h, ATT_KEY_TYPE_ECDSA_P256);
        header::TEE_TYPE.set_u32_le(&mut h, TEE_TYPE_TDX);
        // RESERVED and USER_DATA zero.
        header::QE_VENDOR_ID.set(&mut h, &INTEL_QE_VENDOR_ID);
        let s = &self.stand_ins;
        let mut b = [0u8; TD_REPORT_BYTES];
        use td_report10 as t;
        t::TEE_TCB_SVN.set(&mut b, &TEE_TCB_SVN);
        t::MRSEAM.set(&mut b, &s.mrseam);
        // MRSIGNERSEAM, SEAMATTRIBUTES zero.
        t::TDATTRIBUTES.set(&mut b, &TD_ATTRIBUTES);
        t::XFAM.set(&mut b, &XFAM);
        t::MRTD.set(&mut b, &s.mrtd);
        // MRCONFIGID, MROWNER, MROWNERCONFIG zero.
        for (field, value) in t::RTMRS.iter().zip(&s.rtmr) {
            field.set(&mut b, value);
        }
        t::REPORTDATA.set(&mut b, report_data);
        [h.as_slice(), b.as_slice()].concat()
    }

    /// One quote whose REPORTDATA is `report_data`.
    pub(crate) fn quote(&self, report_data: &[u8; 64]) -> Result<Vec<u8>, SimError> {
        let mut q = self.signed_part(report_data);
        let sig = sign(&self.att_key, &q)?;
        let sig_len = sig.len().saturating_add(self.certification_data.len());
        q.extend_from_slice(&u32_len(sig_len)?.to_le_bytes());
        q.extend_from_slice(&sig);
        q.extend_from_slice(&self.certification_data);
        Ok(q)
    }

    /// A CRL of no entries issued by `issuer` (CRL v2, RFC 5280 section
    /// 5.1; CRL number and authority key identifier as Intel's).
    fn crl(
        issuer_subject: &[u8],
        issuer_public_key: &[u8],
        issuer_sign: &IssuerSign<'_>,
        at: OffsetDateTime,
    ) -> Result<Vec<u8>, SimError> {
        let aki = der::sequence(&[&der::tlv(
            tag::CONTEXT_0_PRIMITIVE,
            &root::key_id(issuer_public_key),
        )]);
        let exts = der::constructed(
            tag::CONTEXT_0,
            &[&der::sequence(&[
                &der::extension(oid::CRL_NUMBER, false, &der::unsigned_integer(&[1])),
                &der::extension(oid::AUTHORITY_KEY_IDENTIFIER, false, &aki),
            ])],
        );
        let tbs = der::sequence(&[
            &der::unsigned_integer(&[1]),
            &KeyAlg::P256.signature_algorithm(),
            issuer_subject,
            &der::time(at),
            &der::time(at.saturating_add(COLLATERAL_VALIDITY)),
            &exts,
        ]);
        let sig = issuer_sign(&tbs)?;
        Ok(root::certificate(&tbs, KeyAlg::P256, &sig))
    }

    /// The `QuoteCollateralV3` JSON of the quotes, issued at `at`.
    pub(crate) fn collateral(
        &self,
        root: &SimRoot,
        at: OffsetDateTime,
    ) -> Result<Vec<u8>, SimError> {
        let at = at.replace_nanosecond(0).unwrap_or(at);
        let issue = rfc3339(at);
        let next = rfc3339(at.saturating_add(COLLATERAL_VALIDITY));
        let zeros48 = hex::encode_upper([0u8; 48]);
        let tcb_info = serde_json::json!({
            "id": "TDX",
            "version": 3,
            "issueDate": issue,
            "nextUpdate": next,
            "fmspc": hex::encode_upper(FMSPC),
            "pceId": "0000",
            "tcbType": 0,
            "tcbEvaluationDataNumber": TCB_EVALUATION_DATA_NUMBER,
            "tdxModule": {
                "mrsigner": zeros48,
                "attributes": "0000000000000000",
                "attributesMask": "FFFFFFFFFFFFFFFF",
            },
            "tdxModuleIdentities": [{
                "id": "TDX_01",
                "mrsigner": zeros48,
                "attributes": "0000000000000000",
                "attributesMask": "FFFFFFFFFFFFFFFF",
                "tcbLevels": [{
                    "tcb": { "isvsvn": TEE_TCB_SVN[0] },
                    "tcbDate": "2025-01-01T00:00:00Z",
                    "tcbStatus": "UpToDate",
                }],
            }],
            "tcbLevels": [tcb_level_json()],
        })
        .to_string();
        let qe_identity = serde_json::json!({
            "id": "TD_QE",
            "version": 2,
            "issueDate": issue,
            "nextUpdate": next,
            "tcbEvaluationDataNumber": TCB_EVALUATION_DATA_NUMBER,
            "miscselect": "00000000",
            "miscselectMask": "FFFFFFFF",
            "attributes": "11000000000000000000000000000000",
            "attributesMask": "FBFFFFFFFFFFFFFF0000000000000000",
            "mrsigner": hex::encode_upper(sha256(QE_MRSIGNER_LABEL.as_bytes())),
            "isvprodid": QE_ISVPRODID,
            "tcbLevels": [{
                "tcb": { "isvsvn": QE_ISVSVN },
                "tcbDate": "2025-01-01T00:00:00Z",
                "tcbStatus": "UpToDate",
            }],
        })
        .to_string();
        let root_sign = |tbs: &[u8]| root.sign_tbs(tbs).map_err(SimError::from);
        let ca_sign = |tbs: &[u8]| sign(&self.pck_ca_key, tbs);
        let root_ca_crl = Self::crl(root.subject_der(), root.public_key(), &root_sign, at)?;
        let pck_crl = Self::crl(
            &self.pck_ca_subject,
            self.pck_ca_key.public_key().as_ref(),
            &ca_sign,
            at,
        )?;
        let doc = serde_json::json!({
            "pck_crl_issuer_chain": self.pck_crl_chain_pem,
            "root_ca_crl": hex::encode(root_ca_crl),
            "pck_crl": hex::encode(pck_crl),
            "tcb_info_issuer_chain": self.tcb_chain_pem,
            "tcb_info_signature": hex::encode(sign(&self.tcb_key, tcb_info.as_bytes())?),
            "tcb_info": tcb_info,
            "qe_identity_issuer_chain": self.tcb_chain_pem,
            "qe_identity_signature": hex::encode(sign(&self.tcb_key, qe_identity.as_bytes())?),
            "qe_identity": qe_identity,
        });
        serde_json::to_vec(&doc).map_err(|e| SimError::Encode(e.to_string()))
    }
}

fn u16_len(n: usize) -> Result<u16, SimError> {
    u16::try_from(n).map_err(|_| SimError::Encode(format!("{n} bytes do not fit a u16 length")))
}

fn u32_len(n: usize) -> Result<u32, SimError> {
    u32::try_from(n).map_err(|_| SimError::Encode(format!("{n} bytes do not fit a u32 length")))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn sim() -> (tempfile::TempDir, SimRoot, TdxSim) {
        let base = tempfile::tempdir().unwrap();
        let now = OffsetDateTime::now_utc();
        let (root, _) = SimRoot::load_or_create_form(
            &base.path().join("root"),
            kolm_format::evidence::SimFormat::Tdx,
            now,
        )
        .unwrap();
        let stand_ins = TdStandIns::new(sha384(b"binary"), &root);
        let t = TdxSim::new(&root, stand_ins, now).unwrap();
        (base, root, t)
    }

    fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
    }

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    /// Offsets and sizes of the Intel TDX DCAP quote v4 (`sgx_quote_4.h`,
    /// appendix A of the Quoting Library API): header 48 bytes, the TD
    /// report 1.0 body at 48 (MRTD at 48+136, RTMRs at 48+328,
    /// REPORTDATA at 48+520), signature data length at 632, then signature,
    /// attestation key and the nested certification data, every length
    /// field matching what follows it, and nothing after.
    #[test]
    fn the_quote_has_the_v4_layout() {
        let (_d, root, t) = sim();
        let rd = [0xa5u8; 64];
        let q = t.quote(&rd).unwrap();
        // Header.
        assert_eq!(u16_at(&q, 0), 4, "version");
        assert_eq!(u16_at(&q, 2), 2, "attestation key type ECDSA-P256");
        assert_eq!(u32_at(&q, 4), 0x81, "TEE type TDX");
        assert_eq!(&q[8..12], &[0; 4]);
        assert_eq!(&q[12..28], &INTEL_QE_VENDOR_ID);
        // TD report body.
        let body = &q[HEADER_BYTES..HEADER_BYTES + TD_REPORT_BYTES];
        assert_eq!(&body[0..16], &TEE_TCB_SVN);
        assert_eq!(&body[16..64], &sha384(MRSEAM_LABEL.as_bytes()));
        assert_eq!(&body[120..128], &TD_ATTRIBUTES);
        assert_eq!(&body[136..184], &sha384(b"binary"), "MRTD");
        assert_eq!(&body[328..376], &sha384(RTMR0_LABEL.as_bytes()));
        assert_eq!(&body[424..472], &sha384(root.certificate_der()), "RTMR2");
        assert_eq!(&body[472..520], &[0u8; 48], "RTMR3");
        assert_eq!(&body[520..], &rd, "REPORTDATA");
        // Signature data.
        let sig_len = usize::try_from(u32_at(&q, 632)).unwrap();
        assert_eq!(q.len(), 636 + sig_len, "nothing after the signature data");
        let sd = &q[636..];
        let att_key = &sd[64..128];
        let mut point = vec![4u8];
        point.extend_from_slice(att_key);
        ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, &point)
            .verify(&q[..632], &sd[..64])
            .unwrap();
        assert_eq!(u16_at(sd, 128), 6, "QE report certification data");
        let cert_len = usize::try_from(u32_at(sd, 130)).unwrap();
        assert_eq!(sd.len(), 134 + cert_len);
        let c = &sd[134..];
        let qe = &c[..QE_REPORT_BYTES];
        assert_eq!(u16_at(qe, 256), QE_ISVPRODID);
        assert_eq!(u16_at(qe, 258), QE_ISVSVN);
        let auth_len = usize::from(u16_at(c, 448));
        assert_eq!(auth_len, 32);
        let auth = &c[450..450 + auth_len];
        let binding = sha256(&[att_key, auth].concat());
        assert_eq!(
            &qe[320..352],
            &binding,
            "QE REPORTDATA = SHA-256(key || auth)"
        );
        assert_eq!(&qe[352..], &[0u8; 32]);
        let inner = &c[450 + auth_len..];
        assert_eq!(u16_at(inner, 0), 5, "PCK certificate chain");
        let chain_len = usize::try_from(u32_at(inner, 2)).unwrap();
        assert_eq!(inner.len(), 6 + chain_len);
        let chain = &inner[6..];
        assert_eq!(chain.last(), Some(&0), "NUL-terminated");
        let pem = std::str::from_utf8(&chain[..chain.len() - 1]).unwrap();
        assert_eq!(pem.matches("BEGIN CERTIFICATE").count(), 3);
        assert!(pem.ends_with(&root.certificate_pem()), "leaf, PCK CA, root");
        // Another quote differs only in REPORTDATA and the signature.
        let q2 = t.quote(&[0u8; 64]).unwrap();
        assert_eq!(q2.len(), q.len());
        assert_eq!(&q2[..568], &q[..568]);
        assert_eq!(&q2[700..], &q[700..]);
    }

    #[test]
    fn the_collateral_has_the_quote_collateral_v3_keys() {
        let (_d, root, t) = sim();
        let at = OffsetDateTime::from_unix_timestamp(1_767_225_600).unwrap();
        let c: serde_json::Value =
            serde_json::from_slice(&t.collateral(&root, at).unwrap()).unwrap();
        // Sorted here: serde_json's map order depends on its features.
        let mut keys: Vec<&str> = c.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "pck_crl",
                "pck_crl_issuer_chain",
                "qe_identity",
                "qe_identity_issuer_chain",
                "qe_identity_signature",
                "root_ca_crl",
                "tcb_info",
                "tcb_info_issuer_chain",
                "tcb_info_signature"
            ]
        );
        let info: serde_json::Value =
            serde_json::from_str(c["tcb_info"].as_str().unwrap()).unwrap();
        assert_eq!(info["issueDate"], "2026-01-01T00:00:00Z");
        assert_eq!(info["nextUpdate"], "2026-01-31T00:00:00Z");
        assert_eq!(info["fmspc"], "FF5E51000000");
        assert_eq!(c["tcb_info_signature"].as_str().unwrap().len(), 128);
    }
}
