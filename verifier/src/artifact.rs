//! Verifying a sealed artifact: every check of receipt spec v1 and v2 section
//! 8, in order, from the container's bytes to the policy. The artifact was
//! written by `kolm_format::seal`; this reads it with the same format code.
//! The manifest's `schema` picks the version; v2 adds the collateral rules
//! (the evidence index holds exactly the collateral the signed manifest
//! lists, and `finished_at` is no earlier than its signed dates).

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::{Path, PathBuf};

use kolm_format::container::{self, Container, ContainerError};
use kolm_format::content_id::ContentId;
use kolm_format::eval_report::MAX_EVAL_REPORT_BYTES;
use kolm_format::evidence::{
    CollateralBinding, EVIDENCE_INDEX_PATH, EvidenceIndex, carries_attestation,
};
use kolm_format::manifest::{FileRecord, MAX_MANIFEST_BYTES, Manifest};
use kolm_format::receipt::{self, MAX_RECEIPT_BYTES};
use kolm_format::sandbox_record::{CountExactness, SandboxRecord};
use kolm_format::seal::{MANIFEST_PATH, RECEIPT_PATH, checksums_text};
use kolm_format::sealed_outputs::{EVAL_REPORT_PATH, MAX_SEALED_POLICY_BYTES, SEALED_POLICY_PATH};
use kolm_format::version::SpecVersion;
use kolm_format::{binding, timefmt};
use kolm_policy::{IsolationFacts, JobEnd, Policy, SandboxFacts};
use time::OffsetDateTime;

use crate::check::{ArtifactCheck, CheckStatus};
use crate::quality::{JobPolicy, QualityError, QualityJudgement, SealedMetrics};
use crate::report::VerifyReport;

/// Largest SBOM read into memory for the governance check (a runtime SBOM
/// is a few KiB). SHA256SUMS is compared by length before it is read, and
/// the sandbox record has its own cap
/// ([`kolm_format::sandbox_record::MAX_RECORD_BYTES`]).
pub const MAX_GOVERNANCE_BYTES: u64 = 16 * 1024 * 1024;

/// The instant an artifact is judged at. There is no default: a caller
/// names one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyAt {
    /// The artifact's own time: the receipt's `finished_at` (for Nitro
    /// evidence, produced after the manifest, the document's own
    /// timestamp). Answers "was this valid when it was made?"; certificates
    /// and collateral that have expired since do not reject it.
    ReceiptTime,
    /// A named instant, e.g. now: answers "is this still valid?".
    Instant(OffsetDateTime),
}

/// Why the artifact was judged at the instant it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtSource {
    /// [`VerifyAt::ReceiptTime`]: the receipt's own `finished_at`, a time
    /// the guest's clock gave (Nitro evidence: at the document's own signed
    /// timestamp, which must lie within `freshness.nitro_max_skew_seconds`
    /// of it).
    FinishedAt,
    /// [`VerifyAt::Instant`]: an instant the caller named.
    Given,
}

impl AtSource {
    /// The JSON name (`verified_at_source`).
    pub const fn as_str(self) -> &'static str {
        match self {
            AtSource::FinishedAt => "finished_at",
            AtSource::Given => "given",
        }
    }
}

impl VerifyAt {
    /// Why this instant.
    pub const fn source(self) -> AtSource {
        match self {
            VerifyAt::ReceiptTime => AtSource::FinishedAt,
            VerifyAt::Instant(_) => AtSource::Given,
        }
    }
}

/// What the verifier is asked to do.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// The auditor's policy; `None` means [`Policy::production`].
    pub policy: Option<Policy>,
    /// The verification instant.
    pub at: VerifyAt,
    /// The previous artifact or `receipt.cose` in the enclave's chain.
    pub previous: Option<PathBuf>,
    /// Accept evidence of platform `none`. Insecure: nothing proves where the
    /// job ran.
    pub dangerous_allow_unattested: bool,
    /// Accept hardware evidence whose launch identity the policy does not
    /// pin. Insecure: any workload in a genuine TEE could have produced it.
    pub dangerous_any_measurement: bool,
    /// The kolm sim roots that evidence of platform `simulated` may chain
    /// to, one per evidence form (and no other platform's). With the root
    /// of its form, such evidence that passes every check gets the verdict
    /// `simulated`, never `verified`; without it, it is rejected
    /// (`sim.trust`).
    pub dangerous_trust_sim_root: Option<crate::sim::SimRoots>,
}

impl VerifyOptions {
    /// The production policy, no previous receipt, judged at `at`.
    pub fn at(at: VerifyAt) -> VerifyOptions {
        VerifyOptions {
            policy: None,
            at,
            previous: None,
            dangerous_allow_unattested: false,
            dangerous_any_measurement: false,
            dangerous_trust_sim_root: None,
        }
    }
}

/// An I/O failure (exit code 2), as opposed to a rejected artifact.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyIoError {
    // `{:#}` (anyhow) prints the OS error as the source: not here too.
    #[error("cannot read {path}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot read {path}: {what}, not a regular file")]
    NotAFile { path: String, what: &'static str },
}

/// What a non-regular file is, for the error message.
pub fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

/// What a verified (or at least signature-checked) manifest is, for chaining.
#[derive(Debug, Clone)]
pub struct ChainPoint {
    pub cid: ContentId,
    pub manifest: Manifest,
    /// A previous *artifact*'s evidence index and evidence files (`None`
    /// for a bare `receipt.cose`), so the chain check can compare the
    /// guest's whole identity, not only the manifest's measurement.
    pub evidence: Option<(EvidenceIndex, std::collections::BTreeMap<String, Vec<u8>>)>,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> VerifyIoError + '_ {
    move |source| VerifyIoError::Read {
        path: path.display().to_string(),
        source,
    }
}

/// Verifies a sealed artifact; never panics on any content. Returns `Err` only
/// when the file cannot be read at all.
pub fn verify_artifact(path: &Path, opts: &VerifyOptions) -> Result<VerifyReport, VerifyIoError> {
    let file = File::open(path).map_err(io_err(path))?;
    // A ZIP is read from its end: only a regular file has one. A directory,
    // a device or a pipe is an I/O error (exit 2), never a verdict.
    let meta = file.metadata().map_err(io_err(path))?;
    if !meta.is_file() {
        return Err(VerifyIoError::NotAFile {
            path: path.display().to_string(),
            what: file_kind(&meta),
        });
    }
    verify_artifact_reader(&path.display().to_string(), &mut BufReader::new(file), opts)
}

/// Verifies an artifact from any seekable reader (`name` is only reported).
pub fn verify_artifact_reader<R: Read + Seek>(
    name: &str,
    r: &mut R,
    opts: &VerifyOptions,
) -> Result<VerifyReport, VerifyIoError> {
    let mut report = VerifyReport::new(
        name.to_string(),
        opts.dangerous_allow_unattested,
        opts.dangerous_any_measurement,
    );
    report.dangerous_trust_sim_root = opts
        .dangerous_trust_sim_root
        .as_ref()
        .map(crate::sim::SimRoots::sha256);
    let outcome = run_checks(r, opts, &mut report);
    if let Err(Stop::Io(e)) = outcome {
        return Err(VerifyIoError::Read {
            path: name.to_string(),
            source: e,
        });
    }
    report.conclude();
    Ok(report)
}

enum Stop {
    /// A check failed; the report already says which.
    Failed,
    Io(std::io::Error),
}

fn fail(report: &mut VerifyReport, id: ArtifactCheck, detail: impl Into<String>) -> Stop {
    report.checks.record(id, CheckStatus::Fail, detail);
    Stop::Failed
}

fn container_stop(report: &mut VerifyReport, id: ArtifactCheck, e: ContainerError) -> Stop {
    match e {
        ContainerError::Io(io) => Stop::Io(io),
        other => fail(report, id, other.to_string()),
    }
}

fn run_checks<R: Read + Seek>(
    r: &mut R,
    opts: &VerifyOptions,
    report: &mut VerifyReport,
) -> Result<(), Stop> {
    let result = run_checks_inner(r, opts, report);
    // Name every check that did not get to run, so the list is always complete.
    report
        .checks
        .skip_unrecorded(ArtifactCheck::ALL, "not run: an earlier check failed");
    result
}

fn run_checks_inner<R: Read + Seek>(
    r: &mut R,
    opts: &VerifyOptions,
    report: &mut VerifyReport,
) -> Result<(), Stop> {
    let zip = check_container(r, report)?;
    let (manifest_bytes, manifest, version) = check_manifest(r, &zip, report)?;
    let index = check_evidence_index(r, &zip, &manifest, version, opts, report)?;
    let listed = check_entries(&zip, &manifest, &index, report)?;
    check_files(r, &zip, &listed, report)?;
    // 6. governance: checksum list, SBOM, and the sandbox record read
    // whole and checked against itself and the manifest.
    let sandbox = check_governance(r, &zip, &manifest, report)?;
    let cid = check_manifest_cid(&manifest_bytes, &index, report)?;
    check_receipt_signature(r, &zip, &manifest_bytes, &manifest, version, report)?;
    let rd = check_binding(r, &zip, &manifest, version, &cid, &index, report)?;
    // 10. attestation: the platform's evidence, bound to the report data.
    check_attestation(r, &zip, &index, &manifest, version, opts, &rd, report)?;
    check_time(r, &zip, &manifest, &index, version, opts, report)?;
    // 12. chain.
    check_chain(opts, &manifest, report)?;
    // 13. policy.
    check_policy(r, &zip, &index, opts, &manifest, sandbox.as_ref(), report)?;
    Ok(())
}

/// Check 1, container: the canonical ZIP profile, every byte outside file data.
fn check_container<R: Read + Seek>(
    r: &mut R,
    report: &mut VerifyReport,
) -> Result<Container, Stop> {
    let zip = container::read_canonical_zip(r)
        .map_err(|e| container_stop(report, ArtifactCheck::Container, e))?;
    report.checks.record(
        ArtifactCheck::Container,
        CheckStatus::Pass,
        format!(
            "canonical ZIP, {} entries, {} bytes",
            zip.entries.len(),
            zip.total_len
        ),
    );
    Ok(zip)
}

/// Check 2, manifest: canonical JSON, schema, rules. Returns its bytes, the
/// manifest and its spec version.
fn check_manifest<R: Read + Seek>(
    r: &mut R,
    zip: &Container,
    report: &mut VerifyReport,
) -> Result<(Vec<u8>, Manifest, SpecVersion), Stop> {
    let manifest_bytes = read_named(r, zip, MANIFEST_PATH, MAX_MANIFEST_BYTES)
        .map_err(|e| entry_stop(report, ArtifactCheck::Manifest, e))?;
    let manifest = Manifest::from_canonical_bytes(&manifest_bytes)
        .map_err(|e| fail(report, ArtifactCheck::Manifest, e.to_string()))?;
    let version = manifest
        .version()
        .map_err(|e| fail(report, ArtifactCheck::Manifest, e.to_string()))?;
    report.checks.record(
        ArtifactCheck::Manifest,
        CheckStatus::Pass,
        format!("RFC 8785 canonical, schema {}", manifest.schema),
    );
    report.manifest = Some(manifest.clone());
    Ok((manifest_bytes, manifest, version))
}

/// Check 3, evidence index: the manifest's platform, only the platform's slot
/// files, and (v2) exactly the collateral the signed manifest lists.
fn check_evidence_index<R: Read + Seek>(
    r: &mut R,
    zip: &Container,
    manifest: &Manifest,
    version: SpecVersion,
    opts: &VerifyOptions,
    report: &mut VerifyReport,
) -> Result<EvidenceIndex, Stop> {
    let index_bytes = read_named(r, zip, EVIDENCE_INDEX_PATH, MAX_MANIFEST_BYTES)
        .map_err(|e| entry_stop(report, ArtifactCheck::EvidenceIndex, e))?;
    let index = EvidenceIndex::from_canonical_bytes(&index_bytes)
        .map_err(|e| fail(report, ArtifactCheck::EvidenceIndex, e.to_string()))?;
    if index.platform != manifest.environment.platform {
        return Err(fail(
            report,
            ArtifactCheck::EvidenceIndex,
            format!(
                "evidence is for platform {}, manifest says {}",
                index.platform, manifest.environment.platform
            ),
        ));
    }
    // Only the files receipt-v1 section 6 names for the platform, each in
    // its role and within its size cap, checked on the declared sizes before
    // any evidence byte is read (the `files` check then holds each entry to
    // its declared size). The index is outside the signature: this is what
    // keeps added files and oversized junk out.
    for f in &index.files {
        crate::collateral::check_slot_file(
            version,
            index.platform,
            &f.file.path,
            f.role,
            f.file.size,
        )
        .map_err(|e| fail(report, ArtifactCheck::EvidenceIndex, e.to_string()))?;
    }
    // The index's version is the manifest's and, in v2, its collateral is
    // exactly what the signed manifest lists: the attestation is the one
    // file the manifest does not name.
    let binding = index
        .collateral_binding(manifest)
        .map_err(|e| fail(report, ArtifactCheck::EvidenceIndex, e.to_string()))?;
    record_collateral_binding(&index, manifest, binding, opts, report)?;
    Ok(index)
}

/// The evidence index check's verdict on the collateral's binding to the
/// signed manifest (unbound collateral passes only where the policy says
/// `freshness.require_bound_collateral = false`).
fn record_collateral_binding(
    index: &EvidenceIndex,
    manifest: &Manifest,
    binding: CollateralBinding,
    opts: &VerifyOptions,
    report: &mut VerifyReport,
) -> Result<(), Stop> {
    let slots = format!(
        "platform {}, {} evidence files, each a named slot within its cap",
        index.platform,
        index.files.len()
    );
    match binding {
        CollateralBinding::NoCollateral => {
            report
                .checks
                .record(ArtifactCheck::EvidenceIndex, CheckStatus::Pass, slots);
        }
        CollateralBinding::Bound { files } => report.checks.record(
            ArtifactCheck::EvidenceIndex,
            CheckStatus::Pass,
            format!(
                "{slots}; collateral bound: the {files} collateral files are exactly those the \
                 signed manifest lists (evidence.collateral)"
            ),
        ),
        CollateralBinding::Unbound => {
            let production = Policy::production();
            let policy = opts.policy.as_ref().unwrap_or(&production);
            let unbound = format!(
                "{slots}; collateral NOT bound: a {} artifact lists no collateral in its signed \
                 manifest, so a host could have swapped it for any other genuine set after sealing",
                manifest.schema
            );
            match policy.check_collateral_bound(index.platform) {
                Err(v) => {
                    return Err(fail(report, ArtifactCheck::EvidenceIndex, v.to_string()));
                }
                Ok(()) => report.checks.record(
                    ArtifactCheck::EvidenceIndex,
                    CheckStatus::Unbound,
                    format!("{unbound}; accepted: freshness.require_bound_collateral = false"),
                ),
            }
        }
    }
    Ok(())
}

/// Check 4, entries: the ZIP holds exactly what manifest and index name. Returns
/// every listed file record (sealed files, then evidence files).
fn check_entries<'a>(
    zip: &Container,
    manifest: &'a Manifest,
    index: &'a EvidenceIndex,
    report: &mut VerifyReport,
) -> Result<Vec<&'a FileRecord>, Stop> {
    let mut expected: BTreeSet<&str> = [MANIFEST_PATH, RECEIPT_PATH, EVIDENCE_INDEX_PATH].into();
    let mut listed: Vec<&FileRecord> = manifest.sealed_files();
    listed.extend(index.files.iter().map(|f| &f.file));
    for f in &listed {
        if !expected.insert(f.path.as_str()) {
            return Err(fail(
                report,
                ArtifactCheck::Entries,
                format!("{:?} is listed twice", f.path),
            ));
        }
    }
    let present: BTreeSet<&str> = zip.entries.iter().map(|e| e.name.as_str()).collect();
    if let Some(extra) = present.difference(&expected).next() {
        return Err(fail(
            report,
            ArtifactCheck::Entries,
            format!("unlisted entry {extra:?} in the ZIP"),
        ));
    }
    if let Some(missing) = expected.difference(&present).next() {
        return Err(fail(
            report,
            ArtifactCheck::Entries,
            format!("listed entry {missing:?} is missing"),
        ));
    }
    report.checks.record(
        ArtifactCheck::Entries,
        CheckStatus::Pass,
        format!("{} entries, none extra or missing", present.len()),
    );
    Ok(listed)
}

/// Check 5, files: size and sha256 of every listed file.
fn check_files<R: Read + Seek>(
    r: &mut R,
    zip: &Container,
    listed: &[&FileRecord],
    report: &mut VerifyReport,
) -> Result<(), Stop> {
    for f in listed {
        let Some(e) = zip.entry(&f.path) else {
            return Err(fail(
                report,
                ArtifactCheck::Files,
                format!("{:?} missing", f.path),
            ));
        };
        if e.size != f.size {
            return Err(fail(
                report,
                ArtifactCheck::Files,
                format!("{:?} is {} bytes, manifest says {}", f.path, e.size, f.size),
            ));
        }
        let digest = container::hash_entry(r, e)
            .map_err(|e| container_stop(report, ArtifactCheck::Files, e))?;
        if digest != f.sha256.0 {
            return Err(fail(
                report,
                ArtifactCheck::Files,
                format!("{:?} sha256 differs from the record", f.path),
            ));
        }
    }
    report.checks.record(
        ArtifactCheck::Files,
        CheckStatus::Pass,
        format!("{} files match size and sha256", listed.len()),
    );
    Ok(())
}

/// 7. manifest CID, as named by the evidence index.
fn check_manifest_cid(
    manifest_bytes: &[u8],
    index: &EvidenceIndex,
    report: &mut VerifyReport,
) -> Result<ContentId, Stop> {
    let cid = ContentId::for_json(manifest_bytes);
    report.manifest_cid = Some(cid);
    if index.manifest_cid != cid {
        return Err(fail(
            report,
            ArtifactCheck::ManifestCid,
            format!(
                "evidence names {}, manifest bytes give {cid}",
                index.manifest_cid
            ),
        ));
    }
    report.checks.record(
        ArtifactCheck::ManifestCid,
        CheckStatus::Pass,
        cid.to_string(),
    );
    Ok(cid)
}

/// 8. receipt signature.
fn check_receipt_signature<R: Read + Seek>(
    r: &mut R,
    zip: &Container,
    manifest_bytes: &[u8],
    manifest: &Manifest,
    version: SpecVersion,
    report: &mut VerifyReport,
) -> Result<(), Stop> {
    let receipt_bytes = read_named(r, zip, RECEIPT_PATH, MAX_RECEIPT_BYTES)
        .map_err(|e| entry_stop(report, ArtifactCheck::ReceiptSignature, e))?;
    receipt::verify_for(
        version,
        &receipt_bytes,
        manifest_bytes,
        &manifest.signer.public_key.0,
    )
    .map_err(|e| fail(report, ArtifactCheck::ReceiptSignature, e.to_string()))?;
    report.checks.record(
        ArtifactCheck::ReceiptSignature,
        CheckStatus::Pass,
        "COSE_Sign1 Ed25519 by the manifest's signer key",
    );
    Ok(())
}

/// Check 9, binding: manifest CID -> report data; in v2 also the bound
/// collateral's signed dates -> finished_at. Returns the report data.
fn check_binding<R: Read + Seek>(
    r: &mut R,
    zip: &Container,
    manifest: &Manifest,
    version: SpecVersion,
    cid: &ContentId,
    index: &EvidenceIndex,
    report: &mut VerifyReport,
) -> Result<[u8; 64], Stop> {
    let rd = binding::report_data_for(version, cid);
    if index.report_data.0 != rd {
        return Err(fail(
            report,
            ArtifactCheck::Binding,
            "report_data is not SHA-512(domain || manifest CID)",
        ));
    }
    report.report_data = Some(rd);
    let mut detail = format!(
        "report_data = SHA-512({:?} || CID)",
        String::from_utf8_lossy(version.report_data_domain())
    );
    if let Some(listed) = manifest.bound_collateral() {
        let note = check_not_backdated(r, zip, manifest, listed).map_err(|e| match e {
            Backdating::Entry(e) => entry_stop(report, ArtifactCheck::Binding, e),
            Backdating::Rejected(why) => fail(report, ArtifactCheck::Binding, why),
        })?;
        if let Some(note) = note {
            detail.push_str("; ");
            detail.push_str(&note);
        }
    }
    report
        .checks
        .record(ArtifactCheck::Binding, CheckStatus::Pass, detail);
    Ok(rd)
}

/// Check 11, time: `finished_at` no later than the verification instant, and,
/// for a Nitro document, its signed timestamp within the policy's skew.
fn check_time<R: Read + Seek>(
    r: &mut R,
    zip: &Container,
    manifest: &Manifest,
    index: &EvidenceIndex,
    version: SpecVersion,
    opts: &VerifyOptions,
    report: &mut VerifyReport,
) -> Result<(), Stop> {
    let finished = timefmt::parse_utc_seconds(&manifest.job.finished_at)
        .map_err(|e| fail(report, ArtifactCheck::Time, e.to_string()))?;
    let at = match opts.at {
        VerifyAt::ReceiptTime => finished,
        VerifyAt::Instant(at) => at,
    };
    let at_text = timefmt::format_utc_seconds(at)
        .map_err(|e| fail(report, ArtifactCheck::Time, e.to_string()))?;
    report.verified_at = Some(at);
    report.verified_at_source = Some(opts.at.source());
    if at < finished {
        return Err(fail(
            report,
            ArtifactCheck::Time,
            format!(
                "receipt finished at {}, after the verification instant {at_text}",
                manifest.job.finished_at
            ),
        ));
    }
    let mut detail = format!(
        "finished {} <= {at_text} ({})",
        manifest.job.finished_at,
        match opts.at.source() {
            AtSource::FinishedAt => "the receipt's own time, finished_at",
            AtSource::Given => "the instant given",
        }
    );
    if let Some(doc_path) = nitro_format_document(version, index) {
        // The document's timestamp is signed by the Nitro hypervisor's
        // chain (a sim document: by the sim root's); finished_at is the
        // guest's clock. They must agree.
        let skew = nitro_skew_ms(r, zip, version, index.platform, doc_path, finished)
            .map_err(|e| entry_stop(report, ArtifactCheck::Time, e))?;
        let policy = opts.policy.clone().unwrap_or_else(Policy::production);
        let Some(skew_ms) = skew else {
            return Err(fail(
                report,
                ArtifactCheck::Time,
                "the Nitro document does not parse",
            ));
        };
        policy
            .check_nitro_skew(skew_ms)
            .map_err(|v| fail(report, ArtifactCheck::Time, v.to_string()))?;
        detail.push_str(&format!(
            "; Nitro timestamp {skew_ms:+} ms from finished_at, within {} s",
            policy.freshness.nitro_max_skew_seconds
        ));
    }
    report
        .checks
        .record(ArtifactCheck::Time, CheckStatus::Pass, detail);
    Ok(())
}

/// A Nitro document's signed timestamp minus `finished`, in milliseconds
/// (what rule `freshness.nitro_max_skew_seconds` bounds); `None` if the
/// document does not parse.
pub fn nitro_document_skew_ms(doc: &[u8], finished: OffsetDateTime) -> Option<i128> {
    let ms = |t: OffsetDateTime| t.unix_timestamp_nanos().div_euclid(1_000_000);
    crate::nitro::parse_cose_document(doc)
        .ok()
        .map(|d| ms(d.timestamp()).saturating_sub(ms(finished)))
}

/// The artifact's Nitro-format attestation document, if its evidence has
/// one: `evidence/nitro.cose` (nitro), `evidence/sim-nitro.cose` (a
/// receipt v2 `simulated` artifact of the Nitro form).
fn nitro_format_document(version: SpecVersion, index: &EvidenceIndex) -> Option<&'static str> {
    use kolm_policy::Platform;
    match index.platform {
        Platform::Nitro => Some(crate::platform::NITRO_DOC),
        Platform::Simulated
            if carries_attestation(version, index.platform)
                && index
                    .files
                    .iter()
                    .any(|f| f.file.path == crate::platform::SIM_NITRO_DOC) =>
        {
            Some(crate::platform::SIM_NITRO_DOC)
        }
        _ => None,
    }
}

/// [`nitro_document_skew_ms`] of the artifact's Nitro-format document
/// `path`.
fn nitro_skew_ms<R: Read + Seek>(
    r: &mut R,
    zip: &Container,
    version: SpecVersion,
    platform: kolm_policy::Platform,
    path: &'static str,
    finished: OffsetDateTime,
) -> Result<Option<i128>, EntryProblem> {
    let cap = crate::collateral::slots(version, platform)
        .iter()
        .find(|s| s.path == path)
        .map_or(0, |s| s.max_bytes);
    let doc = read_named(r, zip, path, cap)?;
    Ok(nitro_document_skew_ms(&doc, finished))
}

enum EntryProblem {
    Missing(&'static str),
    Container(ContainerError),
}

enum Backdating {
    Entry(EntryProblem),
    Rejected(String),
}

/// Receipt v2: the bound collateral's latest vendor-signed date is a lower
/// bound on `finished_at` (the enclave obtains the collateral before it
/// reads its clock for `finished_at`); an artifact that finished earlier is
/// backdated. Returns what was compared, `None` when the collateral carries
/// no date (no collateral files).
fn check_not_backdated<R: Read + Seek>(
    r: &mut R,
    zip: &Container,
    manifest: &Manifest,
    listed: &[FileRecord],
) -> Result<Option<String>, Backdating> {
    let platform = manifest.environment.platform;
    let mut files = std::collections::BTreeMap::new();
    for f in listed {
        // The `files` check already held each entry to this record.
        let e = zip
            .entry(&f.path)
            .ok_or(Backdating::Entry(EntryProblem::Missing(
                "a collateral file the manifest lists",
            )))?;
        let bytes = container::read_entry(r, e, f.size)
            .map_err(|c| Backdating::Entry(EntryProblem::Container(c)))?;
        files.insert(f.path.clone(), bytes);
    }
    let bound = crate::collateral::collateral_lower_bound(platform, &files)
        .map_err(|e| Backdating::Rejected(e.to_string()))?;
    let Some(bound) = bound else {
        return Ok(None);
    };
    let finished = timefmt::parse_utc_seconds(&manifest.job.finished_at)
        .map_err(|e| Backdating::Rejected(e.to_string()))?;
    if finished < bound.at {
        return Err(Backdating::Rejected(format!(
            "backdated: finished_at {} is earlier than {bound}, a date the vendor signed into \
             the collateral this manifest binds; the run cannot have finished before it",
            manifest.job.finished_at
        )));
    }
    Ok(Some(format!(
        "finished_at {} is no earlier than the bound collateral's latest signed date {bound}",
        manifest.job.finished_at
    )))
}

fn entry_stop(report: &mut VerifyReport, id: ArtifactCheck, e: EntryProblem) -> Stop {
    match e {
        EntryProblem::Missing(name) => fail(report, id, format!("{name} is missing")),
        EntryProblem::Container(c) => container_stop(report, id, c),
    }
}

fn read_named<R: Read + Seek>(
    r: &mut R,
    zip: &Container,
    name: &'static str,
    cap: u64,
) -> Result<Vec<u8>, EntryProblem> {
    let e = zip.entry(name).ok_or(EntryProblem::Missing(name))?;
    container::read_entry(r, e, cap).map_err(EntryProblem::Container)
}

#[allow(clippy::too_many_arguments)]
fn check_attestation<R: Read + Seek>(
    r: &mut R,
    zip: &Container,
    index: &EvidenceIndex,
    manifest: &Manifest,
    version: SpecVersion,
    opts: &VerifyOptions,
    report_data: &[u8; 64],
    report: &mut VerifyReport,
) -> Result<(), Stop> {
    let id = ArtifactCheck::Attestation;
    if !carries_attestation(version, index.platform) {
        report.checks.record(
            id,
            CheckStatus::Unattested,
            format!("platform `{}`: no hardware evidence", index.platform),
        );
        return Ok(());
    }
    let mut files = std::collections::BTreeMap::new();
    for f in &index.files {
        let e = zip
            .entry(&f.file.path)
            .ok_or_else(|| fail(report, id, format!("{:?} missing", f.file.path)))?;
        let bytes = container::read_entry(r, e, kolm_format::evidence::MAX_EVIDENCE_FILE_BYTES)
            .map_err(|e| container_stop(report, id, e))?;
        files.insert(f.file.path.clone(), bytes);
    }
    let finished = timefmt::parse_utc_seconds(&manifest.job.finished_at)
        .map_err(|e| fail(report, id, e.to_string()))?;
    let production = Policy::production();
    let policy = opts.policy.as_ref().unwrap_or(&production);
    let outcome = crate::platform::verify_slot(
        index.platform,
        &files,
        opts.at,
        finished,
        policy,
        report_data,
        opts.dangerous_trust_sim_root.as_ref(),
    )
    .map_err(|e| fail(report, id, e.to_string()))?;
    let (status, detail) = judge_attestation(
        index.platform,
        &outcome,
        manifest
            .environment
            .measurement
            .as_ref()
            .map(|m| m.0.as_slice()),
    );
    report.attestation = Some(outcome);
    match status {
        CheckStatus::Fail => Err(fail(report, id, detail)),
        status => {
            report.checks.record(id, status, detail);
            Ok(())
        }
    }
}

/// The attestation check's decision on a platform verifier's outcome for an
/// artifact whose evidence index says `index_platform` and whose manifest
/// claims `claimed_measurement`: `Fail` when the verifier rejected the
/// evidence, when the evidence proves another platform than the label (an
/// `azure-tdx` label on SEV-SNP evidence), or when the attested launch
/// measurement is not the manifest's; `Simulated` for kolm simulated TEE
/// evidence that passed every check against the caller's sim root (never
/// `Pass`); `Unpinned` when it is genuine but the policy pins no launch
/// identity; else `Pass`. The detail says why.
pub fn judge_attestation(
    index_platform: kolm_policy::Platform,
    outcome: &Result<crate::attested::Attested, crate::attested::Rejection>,
    claimed_measurement: Option<&[u8]>,
) -> (CheckStatus, String) {
    let att = match outcome {
        Err(rejection) => {
            return (
                CheckStatus::Fail,
                format!("{index_platform} evidence rejected: {}", rejection.reason),
            );
        }
        Ok(att) => att,
    };
    if att.platform() != index_platform {
        return (
            CheckStatus::Fail,
            format!(
                "the evidence proves platform {}, the evidence index says {index_platform}",
                att.platform()
            ),
        );
    }
    // The attested launch measurement must be the one the manifest claims:
    // a typed comparison, nothing read back from display fields.
    let attested = att.measurement().as_bytes();
    if claimed_measurement != Some(attested.as_slice()) {
        return (
            CheckStatus::Fail,
            format!(
                "manifest environment.measurement does not equal the attested launch \
                 measurement ({})",
                hex::encode(attested)
            ),
        );
    }
    if att.platform() == kolm_policy::Platform::Simulated {
        return (
            CheckStatus::Simulated,
            format!(
                "SIMULATED TEE, NOT A TEE: {}-format sim evidence verified at {} ({} checks) \
                 against the kolm sim root given with --dangerous-trust-sim-root, bound to the \
                 manifest; it proves nothing about hardware",
                crate::sim::form_of_checks(&att.checks).map_or("unknown", |f| f.name()),
                crate::attested::Outcome::Accepted(att).verified_at_text(),
                att.checks.len(),
            ),
        );
    }
    let detail = format!(
        "{index_platform} evidence verified at {} ({} checks), bound to the manifest; {}",
        crate::attested::Outcome::Accepted(att).verified_at_text(),
        att.checks.len(),
        att.pinning
    );
    if att.is_pinned() {
        (CheckStatus::Pass, detail)
    } else {
        // Genuine evidence of a guest the policy does not identify: its own
        // status, so the verdict is `unpinned` (or a loud dangerous pass).
        (CheckStatus::Unpinned, detail)
    }
}

fn check_governance<R: Read + Seek>(
    r: &mut R,
    zip: &Container,
    manifest: &Manifest,
    report: &mut VerifyReport,
) -> Result<Option<SandboxRecord>, Stop> {
    let id = ArtifactCheck::Governance;
    let sums_entry = zip
        .entry(&manifest.governance.checksums.path)
        .ok_or_else(|| fail(report, id, "SHA256SUMS missing"))?;
    let expected = checksums_text(&manifest.sealed_files());
    // The one right content is known: compare lengths before reading.
    if u64::try_from(expected.len()).ok() != Some(sums_entry.size) {
        return Err(fail(
            report,
            id,
            "SHA256SUMS does not list exactly the sealed files and their sha256",
        ));
    }
    let sums = container::read_entry(r, sums_entry, sums_entry.size)
        .map_err(|e| container_stop(report, id, e))?;
    if sums != expected {
        return Err(fail(
            report,
            id,
            "SHA256SUMS does not list exactly the sealed files and their sha256",
        ));
    }
    let sbom_entry = zip
        .entry(&manifest.governance.sbom.path)
        .ok_or_else(|| fail(report, id, "SBOM missing"))?;
    let sbom = container::read_entry(r, sbom_entry, MAX_GOVERNANCE_BYTES)
        .map_err(|e| container_stop(report, id, e))?;
    // The subset the runtime writes, read with the writer's own types.
    kolm_format::sbom::SpdxDocument::from_json_bytes(&sbom)
        .map_err(|e| fail(report, id, e.to_string()))?;
    let mut detail = String::from("SHA256SUMS matches; SPDX 2.3 SBOM present");
    let mut record = None;
    if let Some(sb) = &manifest.environment.sandbox {
        // The summary the policy reads must be what the sealed record says.
        let e = zip
            .entry(&sb.record.path)
            .ok_or_else(|| fail(report, id, "sandbox record missing"))?;
        let cap = u64::try_from(kolm_format::sandbox_record::MAX_RECORD_BYTES).unwrap_or(0);
        if e.size > cap {
            return Err(fail(
                report,
                id,
                format!(
                    "sandbox record is {} bytes, over the {cap}-byte cap",
                    e.size
                ),
            ));
        }
        let bytes = container::read_entry(r, e, cap).map_err(|e| container_stop(report, id, e))?;
        // The strict reader checks the schema, the one byte form (no
        // duplicate keys) and that `blocked_total` is the sum of its parts.
        let rec =
            SandboxRecord::from_json_bytes(&bytes).map_err(|e| fail(report, id, e.to_string()))?;
        let agrees = rec.profile.as_str() == sb.profile
            && rec.blocked_total == sb.blocked_total
            && rec.egress_blocked == sb.egress_blocked;
        if !agrees {
            return Err(fail(
                report,
                id,
                "sandbox record (schema, profile, blocked_total, egress_blocked) disagrees with \
                 the manifest's sandbox summary",
            ));
        }
        if let Some(code) = rec.exit.code
            && code != manifest.job.exit_code
        {
            return Err(fail(
                report,
                id,
                format!(
                    "sandbox record exit.code is {code}, the manifest's job.exit_code is {}",
                    manifest.job.exit_code
                ),
            ));
        }
        // Every field against the others and against what the supervisor
        // writes (`egress_blocked`'s conditions included).
        rec.check().map_err(|e| fail(report, id, e.to_string()))?;
        detail.push_str(&format!(
            "; sandbox record agrees (profile {}, blocked_total {}, egress_blocked {}) and is \
             consistent",
            sb.profile, sb.blocked_total, sb.egress_blocked
        ));
        record = Some(rec);
    }
    report.checks.record(id, CheckStatus::Pass, detail);
    Ok(record)
}

/// Reads the previous link target: a sealed artifact or a bare `receipt.cose`.
/// The previous receipt's signature is verified under its own manifest's key.
pub fn load_chain_point(path: &Path) -> Result<ChainPoint, ChainLoadError> {
    let mut f = File::open(path).map_err(|e| ChainLoadError::Io(e.to_string()))?;
    let meta = f
        .metadata()
        .map_err(|e| ChainLoadError::Io(e.to_string()))?;
    if !meta.is_file() {
        return Err(ChainLoadError::Io(format!(
            "{}, not a regular file",
            file_kind(&meta)
        )));
    }
    let mut magic = [0u8; 4];
    let n = f
        .read(&mut magic)
        .map_err(|e| ChainLoadError::Io(e.to_string()))?;
    f.rewind().map_err(|e| ChainLoadError::Io(e.to_string()))?;
    let (manifest_bytes, receipt_bytes, evidence) = if n == 4
        && (magic == *b"PK\x03\x04" || magic == *b"PK\x05\x06")
    {
        let mut r = BufReader::new(f);
        let zip = container::read_canonical_zip(&mut r)
            .map_err(|e| ChainLoadError::Invalid(e.to_string()))?;
        let get = |r: &mut BufReader<File>, name: &'static str, cap| {
            let e = zip
                .entry(name)
                .ok_or_else(|| ChainLoadError::Invalid(format!("{name} missing")))?;
            container::read_entry(r, e, cap).map_err(|e| ChainLoadError::Invalid(e.to_string()))
        };
        let m = get(&mut r, MANIFEST_PATH, MAX_MANIFEST_BYTES)?;
        let rc = get(&mut r, RECEIPT_PATH, MAX_RECEIPT_BYTES)?;
        let index_bytes = get(&mut r, EVIDENCE_INDEX_PATH, MAX_MANIFEST_BYTES)?;
        let index = EvidenceIndex::from_canonical_bytes(&index_bytes)
            .map_err(|e| ChainLoadError::Invalid(e.to_string()))?;
        let mut files = std::collections::BTreeMap::new();
        for f in &index.files {
            let e = zip
                .entry(&f.file.path)
                .ok_or_else(|| ChainLoadError::Invalid(format!("{:?} missing", f.file.path)))?;
            let bytes =
                container::read_entry(&mut r, e, kolm_format::evidence::MAX_EVIDENCE_FILE_BYTES)
                    .map_err(|e| ChainLoadError::Invalid(e.to_string()))?;
            files.insert(f.file.path.clone(), bytes);
        }
        (m, rc, Some((index, files)))
    } else {
        let mut rc = Vec::new();
        f.take(MAX_RECEIPT_BYTES.saturating_add(1))
            .read_to_end(&mut rc)
            .map_err(|e| ChainLoadError::Io(e.to_string()))?;
        if rc.len() as u64 > MAX_RECEIPT_BYTES {
            return Err(ChainLoadError::Invalid("receipt over the size cap".into()));
        }
        let m = receipt::payload(&rc).map_err(|e| ChainLoadError::Invalid(e.to_string()))?;
        (m, rc, None)
    };
    let manifest = Manifest::from_canonical_bytes(&manifest_bytes)
        .map_err(|e| ChainLoadError::Invalid(e.to_string()))?;
    let version = manifest
        .version()
        .map_err(|e| ChainLoadError::Invalid(e.to_string()))?;
    receipt::verify_for(
        version,
        &receipt_bytes,
        &manifest_bytes,
        &manifest.signer.public_key.0,
    )
    .map_err(|e| ChainLoadError::Invalid(e.to_string()))?;
    // A previous artifact's evidence index obeys its manifest's version's
    // rules too (v2: exactly the collateral the manifest lists).
    if let Some((index, _)) = &evidence {
        index
            .collateral_binding(&manifest)
            .map_err(|e| ChainLoadError::Invalid(e.to_string()))?;
    }
    Ok(ChainPoint {
        cid: ContentId::for_json(&manifest_bytes),
        manifest,
        evidence,
    })
}

/// Why the previous receipt could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChainLoadError {
    #[error("cannot read previous receipt: {0}")]
    Io(String),
    #[error("previous receipt is invalid: {0}")]
    Invalid(String),
}

fn check_chain(
    opts: &VerifyOptions,
    manifest: &Manifest,
    report: &mut VerifyReport,
) -> Result<(), Stop> {
    let id = ArtifactCheck::Chain;
    let Some(prev_path) = &opts.previous else {
        let detail = match manifest.chain.previous {
            None => "first receipt of its chain (sequence 0)".to_string(),
            Some(p) => format!(
                "links to {p} (sequence {}); not checked: pass --previous",
                manifest.chain.sequence
            ),
        };
        report.checks.record(id, CheckStatus::Skip, detail);
        return Ok(());
    };
    let prev = match load_chain_point(prev_path) {
        Ok(p) => p,
        Err(ChainLoadError::Io(e)) => {
            return Err(Stop::Io(std::io::Error::other(format!(
                "{}: {e}",
                prev_path.display()
            ))));
        }
        Err(e) => return Err(fail(report, id, e.to_string())),
    };
    if manifest.chain.previous != Some(prev.cid) {
        return Err(fail(
            report,
            id,
            format!(
                "manifest links to {}, the previous receipt is {}",
                manifest
                    .chain
                    .previous
                    .map_or("nothing".to_string(), |c| c.to_string()),
                prev.cid
            ),
        ));
    }
    if prev.manifest.chain.sequence.checked_add(1) != Some(manifest.chain.sequence) {
        return Err(fail(
            report,
            id,
            format!(
                "sequence {} does not follow the previous receipt's {}",
                manifest.chain.sequence, prev.manifest.chain.sequence
            ),
        ));
    }
    let (pe, ce) = (&prev.manifest.environment, &manifest.environment);
    if pe.platform != ce.platform || pe.measurement != ce.measurement {
        // Both sides named: after a rebuild the operator must see which
        // measurement each receipt carries, not only that they differ.
        let m = |e: &kolm_format::manifest::Environment| {
            e.measurement
                .as_ref()
                .map_or("none".to_string(), |m| hex::encode(&m.0))
        };
        return Err(fail(
            report,
            id,
            format!(
                "previous receipt comes from a different platform or measurement: previous \
                 platform {} measurement {}, this receipt platform {} measurement {}",
                pe.platform,
                m(pe),
                ce.platform,
                m(ce)
            ),
        ));
    }
    let identity_note =
        same_guest(opts, &prev, report).map_err(|e| fail(report, id, e.to_string()))?;
    let prev_finished = timefmt::parse_utc_seconds(&prev.manifest.job.finished_at)
        .map_err(|e| fail(report, id, e.to_string()))?;
    let started = timefmt::parse_utc_seconds(&manifest.job.started_at)
        .map_err(|e| fail(report, id, e.to_string()))?;
    if started < prev_finished {
        return Err(fail(
            report,
            id,
            "this run started before the previous one finished",
        ));
    }
    report.checks.record(
        id,
        CheckStatus::Pass,
        format!(
            "follows {} (sequence {}); {identity_note}",
            prev.cid, prev.manifest.chain.sequence
        ),
    );
    Ok(())
}

/// Whether the previous link was signed by the same guest as this one. A
/// previous artifact with hardware evidence: its evidence is verified (same
/// policy, at its own receipt time, bound to its own manifest) and its
/// [`Identity`](crate::attested::Identity) must be this evidence's
/// ([`Identity::same_guest`](crate::attested::Identity::same_guest)). A bare
/// receipt carries no evidence: only the manifests' platform and measurement
/// were compared, and the returned note says so.
fn same_guest(
    opts: &VerifyOptions,
    prev: &ChainPoint,
    report: &VerifyReport,
) -> Result<String, SameGuestError> {
    let platform = prev.manifest.environment.platform;
    let prev_version = prev
        .manifest
        .version()
        .map_err(|error| SameGuestError::Version { error })?;
    if !carries_attestation(prev_version, platform) {
        return Ok(format!(
            "no hardware identity to compare (platform {platform})"
        ));
    }
    let Some((index, files)) = &prev.evidence else {
        return Ok(
            "identity compared: platform and measurement only (a bare receipt carries no \
             evidence; pass the previous artifact to compare the whole identity)"
                .into(),
        );
    };
    let current = match &report.attestation {
        Some(Ok(att)) => att.identity(),
        _ => return Err(SameGuestError::NoIdentity),
    };
    let finished = timefmt::parse_utc_seconds(&prev.manifest.job.finished_at)
        .map_err(|error| SameGuestError::FinishedAt { error })?;
    let production = Policy::production();
    let policy = opts.policy.as_ref().unwrap_or(&production);
    let rd = binding::report_data_for(prev_version, &prev.cid);
    if index.manifest_cid != prev.cid || index.platform != platform {
        return Err(SameGuestError::IndexNamesOther);
    }
    let outcome = crate::platform::verify_slot(
        platform,
        files,
        VerifyAt::ReceiptTime,
        finished,
        policy,
        &rd,
        opts.dangerous_trust_sim_root.as_ref(),
    )
    .map_err(|error| SameGuestError::Slot { error })?;
    let previous = outcome.map_err(|r| SameGuestError::Rejected { reason: r.reason })?;
    current
        .same_guest(previous.identity())
        .map_err(|error| SameGuestError::OtherGuest { error })?;
    Ok("same guest identity as the previous artifact's evidence".into())
}

/// Why the previous artifact could not be shown to come from this
/// artifact's guest (the chain check's failure).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SameGuestError {
    #[error("{error}")]
    Version {
        error: kolm_format::manifest::ManifestError,
    },
    #[error("this artifact's evidence did not verify: no identity to compare")]
    NoIdentity,
    #[error("{error}")]
    FinishedAt { error: timefmt::TimestampError },
    #[error("the previous artifact's evidence index does not name its manifest")]
    IndexNamesOther,
    #[error("previous artifact: {error}")]
    Slot { error: crate::platform::SlotError },
    #[error("the previous artifact's evidence does not verify: {reason}")]
    Rejected { reason: String },
    #[error("the previous artifact comes from another guest: {error}")]
    OtherGuest {
        error: crate::attested::GuestMismatch,
    },
}

fn check_policy<R: Read + Seek>(
    r: &mut R,
    zip: &Container,
    index: &EvidenceIndex,
    opts: &VerifyOptions,
    manifest: &Manifest,
    record: Option<&SandboxRecord>,
    report: &mut VerifyReport,
) -> Result<(), Stop> {
    let id = ArtifactCheck::Policy;
    let production = Policy::production();
    let policy = opts.policy.as_ref().unwrap_or(&production);
    let env = &manifest.environment;
    let platform_result = if env.platform.is_attested() || opts.dangerous_allow_unattested {
        policy.check_platform(env.platform)
    } else {
        // Unattested evidence is already reported by the attestation check;
        // the platform rule is moot when nothing proves the platform.
        Ok(())
    };
    let spelled = record.map(Spelled::of);
    let facts = record.zip(spelled.as_ref()).map(|(rec, s)| s.facts(rec));
    // How the job ended: the record's `exit` when there is one, else the
    // manifest's exit code.
    let end = match record {
        Some(rec) => JobEnd {
            code: rec.exit.code,
            signal: rec.exit.signal,
            exec_error: rec.exit.exec_error.as_deref(),
        },
        None => JobEnd {
            code: Some(manifest.job.exit_code),
            signal: None,
            exec_error: None,
        },
    };
    let collateral =
        collateral_rules(r, zip, index, policy).map_err(|e| entry_stop(report, id, e))?;
    let quality = judge_quality(r, zip, manifest, policy).map_err(|e| entry_stop(report, id, e))?;
    report.quality = match &quality {
        Ok(j) => Some(j.clone()),
        Err(e) => e.judgement().cloned(),
    };
    let results = [
        platform_result,
        policy.check_sandbox(facts.as_ref()),
        policy.check_job_end(&end),
        collateral,
    ];
    for r in results {
        if let Err(v) = r {
            return Err(fail(report, id, format!("{}: {v}", v.rule())));
        }
    }
    let judged = quality.map_err(|e| fail(report, id, e.to_string()))?;
    let name = if opts.policy.is_some() {
        "given policy"
    } else {
        "production policy"
    };
    report.checks.record(
        id,
        CheckStatus::Pass,
        format!(
            "{name}: platform, sandbox, job exit, collateral and quality rules satisfied; {} \
             quality gates met by {}",
            judged.gates.len(),
            judged.source
        ),
    );
    Ok(())
}

/// The record's closed sets as the policy reads them: their JSON spellings.
struct Spelled<'a> {
    landlock_status: Cow<'a, str>,
    network_namespace: Cow<'a, str>,
    isolation: Option<SpelledIsolation<'a>>,
}

struct SpelledIsolation<'a> {
    job_ids: &'static str,
    pid_namespace: Cow<'a, str>,
    ipc_namespace: Cow<'a, str>,
    mount_namespace: Cow<'a, str>,
}

impl<'a> Spelled<'a> {
    fn of(rec: &'a SandboxRecord) -> Spelled<'a> {
        Spelled {
            landlock_status: rec.landlock.status.spelling(),
            network_namespace: rec.hygiene.network_namespace.spelling(),
            isolation: rec.hygiene.isolation.as_ref().map(|i| SpelledIsolation {
                job_ids: i.job_ids.as_str(),
                pid_namespace: i.pid_namespace.spelling(),
                ipc_namespace: i.ipc_namespace.spelling(),
                mount_namespace: i.mount_namespace.spelling(),
            }),
        }
    }

    fn facts<'s>(&'s self, rec: &SandboxRecord) -> SandboxFacts<'s> {
        SandboxFacts {
            egress_blocked: rec.egress_blocked,
            blocked_total: rec.blocked_total,
            landlock_status: &self.landlock_status,
            network_namespace: &self.network_namespace,
            count_exact: rec.exactness.blocked_total == CountExactness::Exact,
            isolation: self.isolation.as_ref().map(|i| IsolationFacts {
                job_ids: i.job_ids,
                pid_namespace: &i.pid_namespace,
                ipc_namespace: &i.ipc_namespace,
                mount_namespace: &i.mount_namespace,
            }),
        }
    }
}

/// The auditor's quality gates on the sealed numbers
/// ([`crate::quality`]): the eval report and the job's policy are read
/// when the manifest lists them (the `files` check already held each to
/// its record).
fn judge_quality<R: Read + Seek>(
    r: &mut R,
    zip: &Container,
    manifest: &Manifest,
    policy: &Policy,
) -> Result<Result<QualityJudgement, QualityError>, EntryProblem> {
    let cap = u64::try_from(MAX_EVAL_REPORT_BYTES).unwrap_or(u64::MAX);
    let report = sealed_output(r, zip, manifest, EVAL_REPORT_PATH, cap)?;
    let job_policy = sealed_output(
        r,
        zip,
        manifest,
        SEALED_POLICY_PATH,
        MAX_SEALED_POLICY_BYTES,
    )?;
    let judged = SealedMetrics::read(&manifest.metrics, report.as_deref()).and_then(|numbers| {
        let job = JobPolicy::read(&manifest.job.policy_sha256, job_policy.as_deref())?;
        crate::quality::judge(&numbers, &job, policy)
    });
    Ok(judged)
}

/// The bytes of output `path` when the manifest lists it, at most `cap`.
fn sealed_output<R: Read + Seek>(
    r: &mut R,
    zip: &Container,
    manifest: &Manifest,
    path: &'static str,
    cap: u64,
) -> Result<Option<Vec<u8>>, EntryProblem> {
    if !manifest.outputs.iter().any(|f| f.path == path) {
        return Ok(None);
    }
    read_named(r, zip, path, cap).map(Some)
}

/// The `[freshness]` rules on the evidence's collateral: the TDX TCB
/// evaluation data number (tdx, azure-tdx), a minimum TCB named for SEV-SNP
/// (sev-snp, azure-sev-snp). Runs after the attestation check passed, so
/// the collateral read here is the one that was verified.
fn collateral_rules<R: Read + Seek>(
    r: &mut R,
    zip: &Container,
    index: &EvidenceIndex,
    policy: &Policy,
) -> Result<Result<(), kolm_policy::PolicyViolation>, EntryProblem> {
    use kolm_policy::Platform;
    Ok(match index.platform {
        Platform::Tdx | Platform::AzureTdx => {
            let path = crate::platform::TDX_COLLATERAL;
            let version = index.version().unwrap_or(SpecVersion::V1);
            let cap = crate::collateral::slots(version, index.platform)
                .iter()
                .find(|s| s.path == path)
                .map_or(0, |s| s.max_bytes);
            let bytes = read_named(r, zip, path, cap)?;
            match crate::tdx::parse_tdx_collateral(&bytes) {
                Ok(c) => {
                    policy.check_tdx_evaluation_number(c.tcb_info().tcb_evaluation_data_number)
                }
                // Verified by the attestation check already; fail closed.
                Err(_) => policy.check_tdx_evaluation_number(0),
            }
        }
        Platform::SevSnp | Platform::AzureSevSnp => policy.check_snp_min_tcb_set(),
        Platform::Nitro | Platform::None | Platform::Simulated => Ok(()),
    })
}
