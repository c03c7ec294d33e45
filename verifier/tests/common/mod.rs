//! Builds sealed artifacts for tests with a fixed key and fixed times, so the
//! bytes are reproducible.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kolm_format::container::EntryData;
use kolm_format::content_id::ContentId;
use kolm_format::hexbytes::HexBytes;
use kolm_format::manifest::*;
use kolm_format::seal::{self as artifact, EvidenceBundle};
use kolm_format::version::SpecVersion;
use kolm_policy::Platform;
use ring::signature::{Ed25519KeyPair, KeyPair};

pub const SEED_A: [u8; 32] = [7u8; 32];
pub const SEED_B: [u8; 32] = [9u8; 32];

pub fn key(seed: &[u8; 32]) -> Ed25519KeyPair {
    Ed25519KeyPair::from_seed_unchecked(seed).unwrap()
}

pub const SBOM: &[u8] = br#"{"SPDXID":"SPDXRef-DOCUMENT","dataLicense":"CC0-1.0","name":"test","packages":[],"spdxVersion":"SPDX-2.3"}"#;

/// Knobs for a test artifact.
#[derive(Clone)]
pub struct Spec {
    pub seed: [u8; 32],
    pub previous: Option<ContentId>,
    pub sequence: u64,
    pub started_at: &'static str,
    pub finished_at: &'static str,
    pub outputs: Vec<(&'static str, Vec<u8>)>,
    pub metrics: BTreeMap<String, f64>,
    pub platform: Platform,
    pub measurement: Option<Vec<u8>>,
    /// `(zip path, bytes, role)` evidence files.
    pub evidence: Vec<(String, Vec<u8>, kolm_format::evidence::EvidenceRole)>,
    /// `(profile, egress_blocked, blocked_total, record bytes)` for the
    /// manifest's sandbox summary and `governance/sandbox-record.json`.
    pub sandbox: Option<(&'static str, bool, u64, Vec<u8>)>,
    /// The manifest's `job.exit_code`.
    pub exit_code: i32,
    /// The receipt spec version written (the enclave writes v2; v1 is
    /// frozen, kept for its vector and for v1 artifacts in the field). In
    /// v2 the manifest lists the collateral files of `evidence`.
    pub version: SpecVersion,
    /// `governance/sbom.spdx.json` ([`SBOM`], the minimal form, by default).
    pub sbom: Vec<u8>,
}

impl Default for Spec {
    fn default() -> Self {
        let mut metrics = BTreeMap::new();
        metrics.insert("eval_loss".to_string(), 2.5);
        Spec {
            seed: SEED_A,
            previous: None,
            sequence: 0,
            started_at: "2026-01-02T03:04:05Z",
            finished_at: "2026-01-02T03:05:06Z",
            outputs: vec![
                ("outputs/metrics.json", b"{\"eval_loss\":2.5}\n".to_vec()),
                (
                    "outputs/model/weights.bin",
                    (0u8..=255).cycle().take(3000).collect(),
                ),
            ],
            metrics,
            platform: Platform::None,
            measurement: None,
            evidence: Vec::new(),
            sandbox: None,
            exit_code: 0,
            version: SpecVersion::V2,
            sbom: SBOM.to_vec(),
        }
    }
}

pub fn manifest_for(spec: &Spec) -> (Manifest, Vec<(String, EntryData)>) {
    let k = key(&spec.seed);
    let mut files: Vec<(String, EntryData)> = spec
        .outputs
        .iter()
        .map(|(p, b)| (p.to_string(), EntryData::Bytes(b.clone())))
        .collect();
    let sandbox_record = spec.sandbox.as_ref().map(|(_, _, _, rec)| {
        let path = "governance/sandbox-record.json";
        (
            path,
            artifact::file_record(path, &EntryData::Bytes(rec.clone())).unwrap(),
            rec.clone(),
        )
    });
    files.push((SBOM_PATH.into(), EntryData::Bytes(spec.sbom.clone())));
    let mut records: Vec<FileRecord> = files
        .iter()
        .map(|(p, d)| artifact::file_record(p, d).unwrap())
        .collect();
    let mut summed: Vec<&FileRecord> = records.iter().collect();
    if let Some((_, r, _)) = &sandbox_record {
        summed.push(r);
    }
    let sums = artifact::checksums_text(&summed);
    let sums_rec = artifact::file_record(CHECKSUMS_PATH, &EntryData::Bytes(sums.clone())).unwrap();
    files.push((CHECKSUMS_PATH.into(), EntryData::Bytes(sums)));
    let sbom = records.pop().unwrap();
    if let Some((path, _, bytes)) = &sandbox_record {
        files.push((path.to_string(), EntryData::Bytes(bytes.clone())));
    }
    records.sort_by(|a, b| a.path.cmp(&b.path));
    let mut pk = [0u8; 32];
    pk.copy_from_slice(k.public_key().as_ref());
    // v2: the manifest lists what an enclave could list, the files of
    // `evidence` that are collateral slots of the platform within their
    // caps; any other file is one a forger adds to the (unsigned) index.
    let evidence = match spec.version {
        SpecVersion::V1 => None,
        SpecVersion::V2 => {
            use kolm_format::evidence::{EvidenceRole, evidence_slots};
            let slot = |path: &str, bytes: &[u8], role: EvidenceRole| {
                role == EvidenceRole::Collateral
                    && evidence_slots(spec.version, spec.platform).iter().any(|s| {
                        s.path == path && s.role == role && bytes.len() as u64 <= s.max_bytes
                    })
            };
            let collateral = kolm_format::seal::CollateralBundle {
                platform: spec.platform,
                files: spec
                    .evidence
                    .iter()
                    .filter(|(path, bytes, role)| slot(path, bytes, *role))
                    .map(|(p, b, _)| (p.clone(), b.clone()))
                    .collect(),
            };
            Some(collateral.binding().unwrap())
        }
    };
    let manifest = Manifest {
        schema: spec.version.manifest_schema().into(),
        job: JobRecord {
            id: "test-job".into(),
            kind: "demo".into(),
            spec_sha256: HexBytes([1; 32]),
            policy_sha256: HexBytes([2; 32]),
            started_at: spec.started_at.into(),
            finished_at: spec.finished_at.into(),
            exit_code: spec.exit_code,
            techniques: None,
        },
        inputs: vec![FileRecord {
            path: "data/train.csv".into(),
            size: 12,
            sha256: HexBytes([3; 32]),
        }],
        environment: Environment {
            platform: spec.platform,
            measurement: spec.measurement.clone().map(kolm_format::hexbytes::HexVec),
            runtime: Runtime {
                name: "kolm-enclave".into(),
                version: "0.1.0".into(),
            },
            sandbox: spec.sandbox.as_ref().zip(sandbox_record.as_ref()).map(
                |((profile, blocked, total, _), (_, rec, _))| SandboxSummary {
                    profile: profile.to_string(),
                    egress_blocked: *blocked,
                    blocked_total: *total,
                    record: rec.clone(),
                },
            ),
            gpu: None,
        },
        outputs: records,
        metrics: spec.metrics.clone(),
        governance: Governance {
            sbom,
            checksums: sums_rec,
        },
        chain: ChainLink {
            previous: spec.previous,
            sequence: spec.sequence,
        },
        signer: Signer {
            alg: "Ed25519".into(),
            public_key: HexBytes(pk),
        },
        evidence,
    };
    (manifest, files)
}

/// Seals an artifact for `spec` at `dest` with kolm's own writer; returns
/// its CID. Panics if the writer refuses the spec.
pub fn build(dest: &Path, spec: &Spec) -> ContentId {
    let (manifest, files) = manifest_for(spec);
    let ev = EvidenceBundle {
        platform: spec.platform,
        files: spec.evidence.clone(),
    };
    artifact::seal(dest, &manifest, files, &ev, &key(&spec.seed)).unwrap()
}

/// Forges an artifact for `spec` at `dest` by hand, as an attacker would,
/// for specs kolm's writer refuses (a failed job, evidence files the
/// platform does not name, ...): the verifier's own checks must catch them.
/// Panics if the writer would accept the spec (then use [`build`]).
pub fn build_forged(dest: &Path, spec: &Spec) -> ContentId {
    let (manifest, files) = manifest_for(spec);
    let ev = EvidenceBundle {
        platform: spec.platform,
        files: spec.evidence.clone(),
    };
    let scratch = dest.with_extension("writer-check");
    let accepted = artifact::seal(&scratch, &manifest, files.clone(), &ev, &key(&spec.seed));
    let _ = std::fs::remove_file(&scratch);
    assert!(
        accepted.is_err(),
        "the writer accepts this spec: use build()"
    );
    forge(dest, &manifest, files, &ev, &key(&spec.seed))
}

/// Writes an artifact without the writer's rules: canonical JSON of the
/// given manifest and index, a valid receipt over it, the canonical ZIP.
pub fn forge(
    dest: &Path,
    manifest: &Manifest,
    files: Vec<(String, EntryData)>,
    ev: &EvidenceBundle,
    key: &Ed25519KeyPair,
) -> ContentId {
    use kolm_format::evidence::{EVIDENCE_INDEX_PATH, EvidenceFile, EvidenceIndex};
    // The version the manifest claims (a forged schema: v2's names).
    let version = manifest.version().unwrap_or(SpecVersion::V2);
    let manifest_bytes = kolm_format::jcs::to_canonical_vec(manifest).unwrap();
    let cid = ContentId::for_json(&manifest_bytes);
    let mut entries = files;
    let mut ev_files = Vec::new();
    for (path, bytes, role) in &ev.files {
        let data = EntryData::Bytes(bytes.clone());
        ev_files.push(EvidenceFile {
            file: artifact::file_record(path, &data).unwrap(),
            role: *role,
        });
        entries.push((path.clone(), data));
    }
    ev_files.sort_by(|a, b| a.file.path.cmp(&b.file.path));
    let index = EvidenceIndex {
        schema: version.evidence_schema().to_string(),
        platform: ev.platform,
        manifest_cid: cid,
        report_data: HexBytes(kolm_format::binding::report_data_for(version, &cid)),
        files: ev_files,
    };
    let receipt = kolm_format::receipt::sign_for(version, &manifest_bytes, key).unwrap();
    entries.push((
        EVIDENCE_INDEX_PATH.to_string(),
        EntryData::Bytes(kolm_format::jcs::to_canonical_vec(&index).unwrap()),
    ));
    entries.push((
        artifact::MANIFEST_PATH.to_string(),
        EntryData::Bytes(manifest_bytes),
    ));
    entries.push((
        artifact::RECEIPT_PATH.to_string(),
        EntryData::Bytes(receipt),
    ));
    kolm_format::container::write_canonical_zip(dest, entries).unwrap();
    cid
}

/// The default spec sealed as receipt v1: the artifact of the frozen
/// `tests/vectors/receipt-v1/` vector (platform `none`, which has no
/// collateral, so v1 and v2 verify alike).
/// Verifies the artifact at `p` under `policy`, judged at the RFC 3339
/// instant `at`.
pub fn verify_at(
    p: &Path,
    at: &str,
    policy: kolm_policy::Policy,
) -> kolm_verifier::report::VerifyReport {
    use kolm_verifier::artifact::{VerifyAt, VerifyOptions};
    let opts = VerifyOptions {
        policy: Some(policy),
        at: VerifyAt::Instant(kolm_format::timefmt::parse_rfc3339(at).unwrap()),
        ..VerifyOptions::at(VerifyAt::ReceiptTime)
    };
    kolm_verifier::artifact::verify_artifact(p, &opts).unwrap()
}

/// All entries of an artifact, by name.
pub fn entries(path: &Path) -> BTreeMap<String, Vec<u8>> {
    let bytes = std::fs::read(path).unwrap();
    let mut cur = std::io::Cursor::new(bytes);
    let zip = kolm_format::container::read_canonical_zip(&mut cur).unwrap();
    zip.entries
        .iter()
        .map(|e| {
            (
                e.name.clone(),
                kolm_format::container::read_entry(&mut cur, e, u64::MAX).unwrap(),
            )
        })
        .collect()
}

/// Writes `map` as a canonical ZIP at `dest`: what a host that holds the
/// artifact can do with it.
pub fn rewrite(dest: &Path, map: BTreeMap<String, Vec<u8>>) {
    let list = map
        .into_iter()
        .map(|(k, v)| (k, EntryData::Bytes(v)))
        .collect();
    kolm_format::container::write_canonical_zip(dest, list).unwrap();
}

pub fn build_default(dir: &Path) -> PathBuf {
    let p = dir.join("artifact.zip");
    build(
        &p,
        &Spec {
            version: SpecVersion::V1,
            ..Spec::default()
        },
    );
    p
}

/// The default spec sealed as receipt v2: the artifact of the
/// `tests/vectors/receipt-v2/` vector.
pub fn build_default_v2(dir: &Path) -> PathBuf {
    let p = dir.join("artifact.zip");
    build(&p, &Spec::default());
    p
}

/// The shared real-evidence samples if `marker` (a file relative to them)
/// exists; the one locator is `kolm_testkit::samples` (SKIP, or a failure
/// under `KOLM_REQUIRE_SAMPLES=1`).
pub fn samples_dir(marker: &str) -> Option<PathBuf> {
    kolm_testkit::samples(marker)
}

/// A complete `kolm.sandbox-record.v1` as the supervisor writes it on a
/// production machine (root, Landlock, an empty network namespace), with
/// `sockets` AF_INET `socket` attempts counted and `blocked_total` as given
/// (the truth is `sockets`; anything else is a lying record).
pub fn sandbox_record(sockets: u64, blocked_total: u64) -> Vec<u8> {
    sandbox_record_value(sockets, blocked_total)
        .to_json_bytes()
        .unwrap()
}

/// The record of [`sandbox_record`], typed, for tests that change a field.
pub fn sandbox_record_value(
    sockets: u64,
    blocked_total: u64,
) -> kolm_format::sandbox_record::SandboxRecord {
    use kolm_format::sandbox_record::*;
    let mut counted = Counted::default();
    if sockets > 0 {
        counted.by_syscall.insert("socket".into(), sockets);
        counted.by_family.insert("AF_INET".into(), sockets);
    }
    let filter = |name: &str, role: FilterRole, n: usize, sha: char| FilterRecord {
        name: name.into(),
        role,
        instructions: n,
        sha256: sha.to_string().repeat(64),
    };
    SandboxRecord {
        schema: RECORD_SCHEMA_V1.into(),
        profile: SandboxProfile::Default,
        blocked_total,
        egress_blocked: true,
        counted,
        sigsys_kills: 0,
        exactness: kolm_format::sandbox_record::Exactness::from_reasons(Vec::new()),
        exit: JobExit {
            code: Some(0),
            signal: None,
            exec_error: None,
        },
        filters: vec![
            filter("counted_default", FilterRole::Counted, 34, 'a'),
            filter("deny_enosys", FilterRole::DenyEnosys, 10, 'b'),
            filter("deny", FilterRole::Deny, 60, 'c'),
        ],
        filter_source: FilterSource::X86_64,
        landlock: LandlockRecord {
            abi: 4,
            status: LandlockStatus::FullyEnforced,
        },
        listener: ListenerRecord {
            alive_whole_run: true,
            notifications: sockets,
            replies_to_departed: 0,
            withdrawn_before_read: 0,
            sync_wakeup: true,
            all_processes_gone: true,
            error: None,
        },
        hygiene: HygieneRecord {
            no_new_privs: true,
            fds_above_stderr_closed: true,
            parent_death_signal: DeathSignal::Sigkill,
            uid: Some(65520),
            gid: Some(65520),
            network_namespace: NetworkNamespace::Empty,
            x32_self_test: X32SelfTest::Enosys,
            stage2_single_threaded: true,
            isolation: Some(IsolationRecord {
                job_ids: JobIdOrigin::PerRun,
                pid_namespace: PidNamespace::Private,
                ipc_namespace: IpcNamespace::Private,
                mount_namespace: MountNamespace::PrivateRoot,
                memfd_exec: MemfdExec::NoexecSeal,
            }),
        },
    }
}
