//! Evidence of the kolm simulated TEE (platform `simulated`): an
//! AWS-Nitro-format attestation document that `kolm-enclave run --attest
//! sim` writes as `evidence/sim-nitro.cose` (receipt v2), signed under the
//! installation's kolm sim root instead of AWS's.
//!
//! It is checked by the Nitro code ([`crate::nitro`]), with the chain
//! pinned by its exact bytes to a [`SimRoot`] the caller names
//! (`kolm-verify --dangerous-trust-sim-root ROOT.pem`), never to anything
//! embedded, and it is never accepted as a TEE's: the verdict is
//! `simulated` ([`crate::attested::EvidenceVerdict::Simulated`],
//! [`crate::report::Verdict::Simulated`]). The sim root stands in for AWS's
//! only here; the `nitro` verifier never takes it. Checks, in order:
//!
//! | id | kind | fails when |
//! |---|---|---|
//! | `sim.trust` | chain | no sim root is trusted (the Nitro checks are then skipped) |
//! | `nitro.*` | | as [`crate::nitro`], with `nitro.chain` pinned to the sim root; `nitro.policy.platform` and `nitro.policy.pcr` are skipped (they pin Nitro enclaves; an artifact's `policy` check applies `allowed_platforms` to `simulated` under `--dangerous-allow-unattested`) |
//!
//! The claims are platform `simulated`, [`Measurement::SimPcr0`] (the
//! SHA-384 of the `kolm-enclave` binary), [`Tcb::Simulated`],
//! [`Identity::Simulated`]. What a sim root proves: that the evidence was
//! made by whoever holds that installation's root key; nothing about
//! hardware (docs/attestation.md, "Simulated evidence").
//!
//! [`Measurement::SimPcr0`]: crate::attested::Measurement::SimPcr0
//! [`Tcb::Simulated`]: crate::attested::Tcb::Simulated
//! [`Identity::Simulated`]: crate::attested::Identity::Simulated

use der::Decode as _;
use der::asn1::Utf8StringRef;
use kolm_format::evidence::SIM_ROOT_COMMON_NAME;
use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;
use x509_cert::Certificate;

use crate::attested::{Attested, Evaluation, EvidenceKind, Expectations, Rejection};
use crate::check::{NitroCheck, SimCheck};
use crate::nitro::chain::Anchor;

/// Largest sim root file read (a P-384 root is under 1 KiB).
pub const MAX_SIM_ROOT_BYTES: usize = 64 * 1024;

/// Why a file is not a sim root the verifier can trust.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SimRootError {
    #[error("sim root is {size} bytes, over the {max}-byte cap")]
    TooLarge { size: usize, max: usize },
    #[error("sim root is not one CERTIFICATE PEM block or DER certificate: {reason}")]
    NotACertificate { reason: String },
    #[error(
        "sim root's subject common name is {found:?}, not {SIM_ROOT_COMMON_NAME:?}: only a kolm \
         sim root (as `kolm-enclave sim-root` exports it) is trusted for simulated evidence"
    )]
    NotASimRoot { found: Option<String> },
    #[error("sim root: {reason}")]
    BadRoot { reason: String },
}

/// A kolm sim root certificate the caller chose to trust for platform
/// `simulated` (`--dangerous-trust-sim-root`): a self-signed CA whose
/// subject common name is [`SIM_ROOT_COMMON_NAME`], pinned by its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimRoot {
    der: Vec<u8>,
    sha256: [u8; 32],
    subject: String,
}

/// The common name of a certificate's subject, if it has a UTF8String one.
fn common_name(cert: &Certificate) -> Option<String> {
    cert.tbs_certificate
        .subject
        .0
        .iter()
        .flat_map(|rdn| rdn.0.iter())
        .find(|atv| atv.oid == const_oid::db::rfc4519::CN)
        .and_then(|atv| Utf8StringRef::try_from(&atv.value).ok())
        .map(|s| s.as_str().to_owned())
}

/// Whether `der` is a certificate that names itself a kolm sim root (for
/// error messages: such a root never stands in for AWS's).
pub(crate) fn names_a_sim_root(der: &[u8]) -> bool {
    Certificate::from_der(der)
        .ok()
        .and_then(|c| common_name(&c))
        .is_some_and(|cn| cn == SIM_ROOT_COMMON_NAME)
}

impl SimRoot {
    /// Reads a sim root: one `CERTIFICATE` PEM block (what
    /// `kolm-enclave sim-root` writes) or its DER; checks it is a
    /// self-signed CA named [`SIM_ROOT_COMMON_NAME`].
    pub fn parse(bytes: &[u8]) -> Result<SimRoot, SimRootError> {
        if bytes.len() > MAX_SIM_ROOT_BYTES {
            return Err(SimRootError::TooLarge {
                size: bytes.len(),
                max: MAX_SIM_ROOT_BYTES,
            });
        }
        let not_cert = |reason: String| SimRootError::NotACertificate { reason };
        let der = if bytes.trim_ascii_start().starts_with(b"-----BEGIN") {
            let text = std::str::from_utf8(bytes).map_err(|_| not_cert("not UTF-8".into()))?;
            let (label, der) = der::pem::decode_vec(text.trim().as_bytes())
                .map_err(|e| not_cert(e.to_string()))?;
            if label != "CERTIFICATE" {
                return Err(not_cert(format!("PEM label {label:?}")));
            }
            der
        } else {
            bytes.to_vec()
        };
        let cert = Certificate::from_der(&der).map_err(|e| not_cert(e.to_string()))?;
        match common_name(&cert) {
            Some(cn) if cn == SIM_ROOT_COMMON_NAME => {}
            found => return Err(SimRootError::NotASimRoot { found }),
        }
        let subject = crate::nitro::chain::check_root(&der)
            .map_err(|reason| SimRootError::BadRoot { reason })?;
        Ok(SimRoot {
            sha256: Sha256::digest(&der).into(),
            der,
            subject,
        })
    }

    /// The certificate, DER (what `cabundle[0]` must equal).
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// SHA-256 of [`Self::der`].
    pub fn sha256(&self) -> [u8; 32] {
        self.sha256
    }

    /// The subject, RFC 4514.
    pub fn subject(&self) -> &str {
        &self.subject
    }
}

/// Checks a binary COSE_Sign1 sim document (an artifact's
/// `evidence/sim-nitro.cose`) at `at` against `root` and `expect`.
pub fn evaluate(
    document: &[u8],
    root: Option<&SimRoot>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Evaluation {
    evaluate_parsed(
        crate::nitro::parse_cose_document(document),
        root,
        expect,
        at,
    )
}

/// [`evaluate`] for raw evidence in any Nitro input form (the
/// `kolm-verify nitro` command).
pub fn evaluate_any_form(
    input: &[u8],
    root: Option<&SimRoot>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Evaluation {
    evaluate_parsed(crate::nitro::parse_nitro_document(input), root, expect, at)
}

/// [`evaluate`], concluded.
pub fn verify(
    document: &[u8],
    root: Option<&SimRoot>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Result<Attested, Rejection> {
    evaluate(document, root, expect, at).conclude(expect.policy)
}

fn evaluate_parsed(
    parsed: Result<crate::nitro::NitroDocument, crate::nitro::NitroError>,
    root: Option<&SimRoot>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Evaluation {
    let mut ev = Evaluation::new(EvidenceKind::Simulated, at.to_offset(time::UtcOffset::UTC));
    let Some(root) = root else {
        ev.checks.fail(
            SimCheck::Trust,
            "no kolm sim root is trusted: simulated evidence is signed by a software root on the \
             machine that made it; pass --dangerous-trust-sim-root ROOT.pem (`kolm-enclave \
             sim-root --out ROOT.pem` exports it) to check it, knowing that it proves nothing \
             about hardware",
        );
        ev.checks
            .skip_unrecorded(NitroCheck::ALL, "not evaluated: no sim root is trusted");
        return ev;
    };
    ev.checks.pass(
        SimCheck::Trust,
        format!(
            "NOT A TEE: the caller trusts the kolm sim root {} (sha256 {}), given with \
             --dangerous-trust-sim-root; the Nitro-format checks run against it",
            root.subject(),
            hex::encode(root.sha256())
        ),
    );
    let inner = crate::nitro::evaluate_anchored(parsed, expect, at, Anchor::Sim(root));
    ev.verified_at = inner.verified_at;
    ev.checks.extend(inner.checks);
    ev.fields = inner.fields;
    ev.claims = inner.claims;
    ev
}
