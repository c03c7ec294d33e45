//! Evidence of the kolm simulated TEE (platform `simulated`), in one of
//! the real formats `kolm-enclave run --attest sim --sim-format F` writes
//! (receipt v2 section 6): the Nitro form, an AWS-Nitro-format attestation
//! document `evidence/sim-nitro.cose` signed under the installation's P-384
//! kolm sim root instead of AWS's; the TDX form, a TDX quote with its
//! collateral under the installation's TDX format root; the SEV-SNP form,
//! an SNP v3 report with its VCEK-shaped certificate and ASK/ARK pair under
//! the installation's sim ARK (its SEV-SNP format root).
//!
//! The caller names the roots it trusts (`kolm-verify
//! --dangerous-trust-sim-root ROOT.pem`, a bundle of 1..=8 self-signed
//! certificates each named as a kolm sim root, [`SimRoots`]); each form is
//! checked against the root of that form in the bundle, pinned by its
//! exact bytes, never against anything embedded. A form whose root is not
//! in the bundle is rejected (`sim.trust` names the missing root).
//!
//! The Nitro form is checked by the Nitro code ([`crate::nitro`]), the
//! SEV-SNP form by the SEV-SNP code ([`crate::snp`], [`verify_snp`]), and no
//! form is ever accepted as a TEE's: the verdict is
//! `simulated` ([`crate::attested::EvidenceVerdict::Simulated`],
//! [`crate::report::Verdict::Simulated`]). The sim root stands in for AWS's
//! only here; the `nitro` verifier never takes it. Checks, in order:
//!
//! | id | kind | fails when |
//! |---|---|---|
//! | `sim.trust` | chain | the trusted bundle has no root of the evidence's form, or none is given (the form's checks are then skipped) |
//! | `nitro.*` | | as [`crate::nitro`], with `nitro.chain` pinned to the sim root; `nitro.policy.platform` and `nitro.policy.pcr` are skipped (they pin Nitro enclaves; an artifact's `policy` check applies `allowed_platforms` to `simulated` under `--dangerous-allow-unattested`) |
//! | `snp.*` | | as [`crate::snp`], with the chain anchored at the bundle's sim ARK (the evidence's ARK must be it byte for byte; ARK and ASK carry the sim's names); `snp.policy.platform`, `.measurement`, `.host_data`, `.id_key` and `.tcb` are skipped (they pin AMD products and real guests; the values are stand-ins) |
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
use kolm_format::evidence::{
    SIM_ROOT_CN_PREFIX, SIM_ROOT_CN_SUFFIX, SIM_SNP_ASK_COMMON_NAME, is_sim_root_common_name,
};
use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;
use x509_cert::Certificate;

pub use kolm_format::evidence::SimFormat;

use crate::attested::{
    Attested, Claims, Evaluation, EvidenceKind, Expectations, Identity, Measurement, Rejection, Tcb,
};
use crate::check::{NitroCheck, SimCheck, SnpCheck};
use crate::nitro::chain::Anchor;
use crate::snp::{CertRole, SnpCert, SnpEvidence};

/// Largest sim root bundle read (a root is under 1 KiB).
pub const MAX_SIM_ROOT_BYTES: usize = 64 * 1024;
/// Most certificates in a sim root bundle.
pub const MAX_SIM_ROOTS: usize = 8;

/// Why a file is not a sim root bundle the verifier can trust.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SimRootError {
    #[error("sim root is {size} bytes, over the {max}-byte cap")]
    TooLarge { size: usize, max: usize },
    #[error("sim root is not CERTIFICATE PEM blocks or one DER certificate: {reason}")]
    NotACertificate { reason: String },
    #[error(
        "sim root's subject common name is {found:?}, not a kolm sim root's \
         ({SIM_ROOT_CN_PREFIX:?}...{SIM_ROOT_CN_SUFFIX:?}): only kolm sim roots (as \
         `kolm-enclave sim-root` exports them) are trusted for simulated evidence"
    )]
    NotASimRoot { found: Option<String> },
    #[error("sim root: {reason}")]
    BadRoot { reason: String },
    #[error("sim root bundle holds {count} certificates; 1..={max} are accepted")]
    Count { count: usize, max: usize },
    #[error("sim root bundle holds two roots of the {form} form")]
    Duplicate { form: SimFormat },
}

/// One kolm sim root certificate the caller chose to trust for platform
/// `simulated`: a self-signed CA whose subject common name follows the
/// kolm sim root rule ([`is_sim_root_common_name`]), pinned by its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimRoot {
    der: Vec<u8>,
    sha256: [u8; 32],
    subject: String,
    form: Option<SimFormat>,
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
/// error messages: such a root never stands in for a vendor's).
pub(crate) fn names_a_sim_root(der: &[u8]) -> bool {
    Certificate::from_der(der)
        .ok()
        .and_then(|c| common_name(&c))
        .is_some_and(|cn| is_sim_root_common_name(&cn))
}

impl SimRoot {
    /// Checks one DER certificate: a kolm sim root name, a self-signed CA.
    fn from_der(der: Vec<u8>) -> Result<SimRoot, SimRootError> {
        let not_cert = |reason: String| SimRootError::NotACertificate { reason };
        let cert = Certificate::from_der(&der).map_err(|e| not_cert(e.to_string()))?;
        let cn = match common_name(&cert) {
            Some(cn) if is_sim_root_common_name(&cn) => cn,
            found => return Err(SimRootError::NotASimRoot { found }),
        };
        let form = SimFormat::of_root_common_name(&cn);
        let subject = match form {
            // The SEV-SNP form's root is an RSA ARK, checked as AMD's are
            // (self-issued CA, RSASSA-PSS SHA-384 self-signature).
            Some(SimFormat::SevSnp) => {
                let ark =
                    SnpCert::from_der(&der, CertRole::Ark).map_err(|e| SimRootError::BadRoot {
                        reason: e.to_string(),
                    })?;
                crate::snp::certs::verify_ark(&ark, &cn, true).map_err(|e| {
                    SimRootError::BadRoot {
                        reason: e.to_string(),
                    }
                })?;
                ark.subject()
            }
            _ => crate::nitro::chain::check_root(&der).map_err(|e| SimRootError::BadRoot {
                reason: e.to_string(),
            })?,
        };
        Ok(SimRoot {
            sha256: Sha256::digest(&der).into(),
            der,
            subject,
            form,
        })
    }

    /// Reads one sim root: a `CERTIFICATE` PEM block or its DER (a bundle
    /// of exactly one certificate; see [`SimRoots::parse`]).
    pub fn parse(bytes: &[u8]) -> Result<SimRoot, SimRootError> {
        let roots = SimRoots::parse(bytes)?;
        match <[SimRoot; 1]>::try_from(roots.roots) {
            Ok([one]) => Ok(one),
            Err(v) => Err(SimRootError::Count {
                count: v.len(),
                max: 1,
            }),
        }
    }

    /// The certificate, DER.
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

    /// The evidence form whose root this is (by its common name), if a
    /// known one.
    pub fn form(&self) -> Option<SimFormat> {
        self.form
    }
}

/// The kolm sim roots the caller trusts (`--dangerous-trust-sim-root`):
/// what `kolm-enclave sim-root --out` exports, the P-384 root (Nitro form)
/// and each format root, at most one per form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimRoots {
    roots: Vec<SimRoot>,
    sha256: [u8; 32],
}

const PEM_BEGIN: &str = "-----BEGIN ";
const PEM_END: &str = "-----END CERTIFICATE-----";

/// Why a sim root's PEM text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PemBlockError {
    #[error("text outside the PEM blocks")]
    TextOutside,
    #[error("a PEM block has no END CERTIFICATE line")]
    NoEnd,
    #[error("{error}")]
    Pem { error: der::pem::Error },
    #[error("PEM label {label:?}")]
    Label { label: String },
}

/// The DER of each `CERTIFICATE` PEM block of `text`; anything but
/// whitespace outside the blocks is an error.
fn pem_blocks(text: &str) -> Result<Vec<Vec<u8>>, PemBlockError> {
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    // One block over the cap is enough for the caller to refuse.
    while !rest.is_empty() && out.len() <= MAX_SIM_ROOTS {
        if !rest.starts_with(PEM_BEGIN) {
            return Err(PemBlockError::TextOutside);
        }
        let end = rest
            .find(PEM_END)
            .ok_or(PemBlockError::NoEnd)?
            .saturating_add(PEM_END.len());
        let block = rest.get(..end).unwrap_or_default();
        let (label, der) =
            der::pem::decode_vec(block.as_bytes()).map_err(|error| PemBlockError::Pem { error })?;
        if label != "CERTIFICATE" {
            return Err(PemBlockError::Label {
                label: label.to_owned(),
            });
        }
        out.push(der);
        rest = rest.get(end..).unwrap_or_default().trim_start();
    }
    Ok(out)
}

impl SimRoots {
    /// Reads a bundle: 1..=8 `CERTIFICATE` PEM blocks (what
    /// `kolm-enclave sim-root` writes) or one DER certificate; each must be
    /// a self-signed CA named as a kolm sim root, no two of one form.
    pub fn parse(bytes: &[u8]) -> Result<SimRoots, SimRootError> {
        if bytes.len() > MAX_SIM_ROOT_BYTES {
            return Err(SimRootError::TooLarge {
                size: bytes.len(),
                max: MAX_SIM_ROOT_BYTES,
            });
        }
        let not_cert = |reason: String| SimRootError::NotACertificate { reason };
        let ders = if bytes.trim_ascii_start().starts_with(b"-----BEGIN") {
            let text = std::str::from_utf8(bytes).map_err(|_| not_cert("not UTF-8".into()))?;
            pem_blocks(text).map_err(|e| not_cert(e.to_string()))?
        } else {
            vec![bytes.to_vec()]
        };
        if ders.is_empty() || ders.len() > MAX_SIM_ROOTS {
            return Err(SimRootError::Count {
                count: ders.len(),
                max: MAX_SIM_ROOTS,
            });
        }
        let mut roots: Vec<SimRoot> = Vec::with_capacity(ders.len());
        let mut all = Sha256::new();
        for der in ders {
            all.update(&der);
            let root = SimRoot::from_der(der)?;
            if let Some(form) = root.form
                && roots.iter().any(|r| r.form == Some(form))
            {
                return Err(SimRootError::Duplicate { form });
            }
            roots.push(root);
        }
        Ok(SimRoots {
            roots,
            sha256: all.finalize().into(),
        })
    }

    /// The roots, in the bundle's order.
    pub fn roots(&self) -> &[SimRoot] {
        &self.roots
    }

    /// The root of `form`, if the bundle has it.
    pub fn of_form(&self, form: SimFormat) -> Option<&SimRoot> {
        self.roots.iter().find(|r| r.form == Some(form))
    }

    /// SHA-256 over the certificates' DER in bundle order (for one
    /// certificate: that certificate's SHA-256). How reports name the
    /// trusted bundle.
    pub fn sha256(&self) -> [u8; 32] {
        self.sha256
    }
}

impl From<SimRoot> for SimRoots {
    fn from(root: SimRoot) -> SimRoots {
        SimRoots {
            sha256: root.sha256,
            roots: vec![root],
        }
    }
}

/// The form of simulated evidence that `checks` were run on, from the
/// layer its checks belong to (`nitro.*`, `snp.*`, `tdx.*`); `None` when
/// only `sim.trust` (or nothing) ran.
pub fn form_of_checks(checks: &crate::check::Checklist) -> Option<SimFormat> {
    use crate::check::CheckId;
    checks.iter().find_map(|c| match c.id {
        CheckId::NitroCheck(_) => Some(SimFormat::Nitro),
        CheckId::SnpCheck(_) => Some(SimFormat::SevSnp),
        CheckId::TdxCheck(_) => Some(SimFormat::Tdx),
        _ => None,
    })
}

/// Records `sim.trust` for `form`: the root of that form in `roots`, or a
/// failure naming what is missing (and `skip` skips the form's checks).
fn trust<'r>(
    ev: &mut Evaluation,
    roots: Option<&'r SimRoots>,
    form: SimFormat,
) -> Option<&'r SimRoot> {
    let Some(roots) = roots else {
        ev.checks.fail(
            SimCheck::Trust,
            "no kolm sim root is trusted: simulated evidence is signed by a software root on the \
             machine that made it; pass --dangerous-trust-sim-root ROOT.pem (`kolm-enclave \
             sim-root --out ROOT.pem` exports it) to check it, knowing that it proves nothing \
             about hardware",
        );
        return None;
    };
    let Some(root) = roots.of_form(form) else {
        ev.checks.fail(
            SimCheck::Trust,
            format!(
                "the trusted sim root bundle (sha256 {}, {} certificates) has no root of the {form} \
                 form (CN={}): export the installation's roots again after a --sim-format {form} \
                 run, or with `kolm-enclave sim-root --all-formats --out ROOT.pem`",
                hex::encode(roots.sha256()),
                roots.roots().len(),
                form.root_common_name()
            ),
        );
        return None;
    };
    ev.checks.pass(
        SimCheck::Trust,
        format!(
            "NOT A TEE: the caller trusts the kolm sim root {} (sha256 {}), given with \
             --dangerous-trust-sim-root; the {form}-format checks run against it",
            root.subject(),
            hex::encode(root.sha256())
        ),
    );
    Some(root)
}

/// Checks a binary COSE_Sign1 sim document (an artifact's
/// `evidence/sim-nitro.cose`) at `at` against the Nitro-form root of
/// `roots` and `expect`.
pub fn evaluate(
    document: &[u8],
    root: Option<&SimRoots>,
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
    root: Option<&SimRoots>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Evaluation {
    evaluate_parsed(crate::nitro::parse_nitro_document(input), root, expect, at)
}

/// [`evaluate`], concluded.
pub fn verify(
    document: &[u8],
    root: Option<&SimRoots>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Result<Attested, Rejection> {
    evaluate(document, root, expect, at).conclude(expect.policy)
}

fn evaluate_parsed(
    parsed: Result<crate::nitro::NitroDocument, crate::nitro::NitroError>,
    roots: Option<&SimRoots>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Evaluation {
    let mut ev = Evaluation::new(EvidenceKind::Simulated, at.to_offset(time::UtcOffset::UTC));
    let Some(root) = trust(&mut ev, roots, SimFormat::Nitro) else {
        ev.checks.skip_unrecorded(
            NitroCheck::ALL,
            "not evaluated: no trusted sim root of the nitro form",
        );
        return ev;
    };
    let inner = crate::nitro::evaluate_anchored(parsed, expect, at, Anchor::Sim(root));
    ev.verified_at = inner.verified_at;
    ev.checks.extend(inner.checks);
    ev.fields = inner.fields;
    ev.claims = inner.claims;
    ev
}

/// Checks a TDX-form sim quote and its collateral (an artifact's
/// `evidence/sim-tdx-quote.bin` and `evidence/sim-tdx-collateral.json`) at
/// `at` against the TDX-form root of `roots` and `expect`: `sim.trust`,
/// then every `tdx.*` check of [`crate::tdx`] with the chains pinned to
/// that root instead of Intel's (`tdx.policy.platform`, `tdx.policy.mrtd`,
/// `tdx.policy.rtmr` and `tdx.policy.config` are skipped: they pin real
/// Intel TDs). The claims are platform `simulated`,
/// [`Measurement::SimMrtd`](crate::attested::Measurement::SimMrtd),
/// [`Tcb::Simulated`](crate::attested::Tcb::Simulated),
/// [`Identity::SimulatedTdx`](crate::attested::Identity::SimulatedTdx).
pub fn evaluate_tdx(
    evidence: &crate::tdx::TdxEvidence<'_>,
    roots: Option<&SimRoots>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Evaluation {
    let mut ev = Evaluation::new(EvidenceKind::Simulated, at.to_offset(time::UtcOffset::UTC));
    let Some(root) = trust(&mut ev, roots, SimFormat::Tdx) else {
        ev.checks.skip_unrecorded(
            crate::check::TdxCheck::ALL,
            "not evaluated: no trusted sim root of the tdx form",
        );
        return ev;
    };
    let inner = crate::tdx::evaluate_sim(evidence, expect, at, root);
    ev.verified_at = inner.verified_at;
    ev.checks.extend(inner.checks);
    ev.fields = inner.fields;
    ev.claims = inner.claims;
    ev
}

/// [`evaluate_tdx`], concluded.
pub fn verify_tdx(
    evidence: &crate::tdx::TdxEvidence<'_>,
    roots: Option<&SimRoots>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Result<Attested, Rejection> {
    evaluate_tdx(evidence, roots, expect, at).conclude(expect.policy)
}

/// Checks the SEV-SNP form's evidence (an artifact's
/// `evidence/sim-snp-report.bin` with its `sim-snp-vcek.der` and
/// `sim-snp-ask-ark.pem`) at `at` against the SEV-SNP-form root (the sim
/// ARK) of `roots` and `expect`: the SEV-SNP checks ([`crate::snp`]) with
/// the chain anchored at that ARK instead of AMD's, and the checks that
/// pin AMD products and real guests skipped (`snp.policy.platform`,
/// `.measurement`, `.host_data`, `.id_key`, `.tcb`; the ARK and ASK names
/// are the sim's, the product only picks the TCB layout).
pub fn evaluate_snp(
    evidence: &SnpEvidence<'_>,
    roots: Option<&SimRoots>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Evaluation {
    let mut ev = Evaluation::new(EvidenceKind::Simulated, at.to_offset(time::UtcOffset::UTC));
    let Some(root) = trust(&mut ev, roots, SimFormat::SevSnp) else {
        ev.checks.skip_unrecorded(
            SnpCheck::ALL,
            "not evaluated: no trusted sim root of the sev-snp form",
        );
        return ev;
    };
    // SimRoots::parse decoded and checked it already.
    let ark = match SnpCert::from_der(root.der(), CertRole::Ark) {
        Ok(ark) => ark,
        Err(e) => {
            ev.checks.fail(SnpCheck::ChainArk, e.to_string());
            ev.checks
                .skip_unrecorded(SnpCheck::ALL, "not evaluated: the sim ARK does not decode");
            return ev;
        }
    };
    let anchor = crate::snp::ChainAnchor::Sim {
        ark: &ark,
        ark_cn: SimFormat::SevSnp.root_common_name(),
        ask_cn: SIM_SNP_ASK_COMMON_NAME,
    };
    let inner = crate::snp::evaluate_sim(evidence, anchor, expect, at);
    ev.verified_at = inner.verified_at;
    ev.checks.extend(inner.checks);
    ev.fields = inner.fields;
    ev.fields
        .insert("sim_root_sha256", hex::encode(root.sha256()));
    ev.claims = inner.claims.map(sim_snp_claims);
    ev
}

/// [`evaluate_snp`], concluded.
pub fn verify_snp(
    evidence: &SnpEvidence<'_>,
    roots: Option<&SimRoots>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Result<Attested, Rejection> {
    evaluate_snp(evidence, roots, expect, at).conclude(expect.policy)
}

/// A sim SEV-SNP report's claims in the simulated TEE's own types, so that
/// no caller takes them for a real guest's: MEASUREMENT is the sim
/// measurement (the SHA-384 of the `kolm-enclave` binary, what the Nitro
/// form reports as PCR0), the TCB is [`Tcb::Simulated`], and the identity
/// is that measurement as PCR0 (the form has no other launch identity:
/// HOST_DATA and the ID key digests are zero).
fn sim_snp_claims(c: Claims) -> Claims {
    let m = *c.measurement.as_bytes();
    Claims {
        platform: kolm_policy::Platform::Simulated,
        measurement: Measurement::SimPcr0(m),
        tcb: Tcb::Simulated,
        identity: Identity::Simulated {
            pcrs: [(0u8, m.to_vec())].into(),
        },
        ..c
    }
}
