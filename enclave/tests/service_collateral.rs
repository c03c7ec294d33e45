//! The host's collateral bundle reaching the enclave over the wire
//! (`job-submit.collateral`): the enclave service in this process, spoken
//! to over an in-memory pipe (`kolm_transport::memory`; no vsock, no
//! socket), attesting with the fake configfs-tsm (feature `fakes`) fed a
//! genuine TDX quote from `shared/attestation-samples` (never copied here),
//! and no enclave-side bundle, as on a TDX guest whose host keeps the
//! bundle. A job whose submit carries the DCAP collateral is sealed with
//! exactly those bytes in its evidence slot, bound by the manifest; the next
//! job may bring other collateral; a submit whose collateral breaks the
//! wire rules or is garbage is refused before any input byte is stored;
//! a job with none is not sealed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kolm_enclave::providers::RetryPolicy;
use kolm_enclave::providers::fake::{FakeTsm, patch_tdx_quote};
use kolm_enclave::providers::select::Attesting;
use kolm_enclave::providers::tdx::{TdxOptions, TdxProvider};
use kolm_enclave::service::{Outcome, Service, ServiceConfig};
use kolm_format::container;
use kolm_format::evidence::{EvidenceIndex, EvidenceRole};
use kolm_format::manifest::Manifest;
use kolm_policy::Platform;
use kolm_transport::frame::{FrameOptions, read_frame, write_frame};
use kolm_transport::memory::{self, MemoryStream};
use kolm_transport::message::{
    CollateralFile, ErrorCode, FileName, InputChunk, InputDecl, JobSubmit, Message,
};
use sha2::{Digest, Sha256};

const SPEC: &[u8] = b"id = \"wire-collateral\"\nkind = \"demo\"\ninputs = [\"corpus.txt\"]\n\
                      eval_every = 7\n";
const POLICY: &[u8] = b"schema = \"kolm.policy.v1\"\nallowed_platforms = [\"tdx\"]\n";
const TDX_COLLATERAL: &str = "evidence/tdx-collateral.json";

/// A genuine TDX quote and its collateral, and a second sample's
/// collateral (another job's).
struct Sample {
    quote: Vec<u8>,
    collateral: Vec<u8>,
    other_collateral: Vec<u8>,
}

fn sample() -> Option<Sample> {
    let root = kolm_testkit::samples("tdx/expected.json")?.join("tdx");
    let read = |p: PathBuf| std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let dir = root.join("v4-b0c06f-dcapqvl-2025-06");
    Some(Sample {
        quote: read(dir.join("quote.bin")),
        collateral: read(dir.join("collateral.json")),
        other_collateral: read(
            root.join("v5-90c06f-dcapqvl-2026-02-tcb-not-found/collateral.json"),
        ),
    })
}

/// TDX through the fake configfs-tsm, no enclave-side bundle.
fn provider(quote: Vec<u8>) -> Attesting<TdxProvider<FakeTsm>> {
    let fs = FakeTsm::new(Box::new(move |inblob| patch_tdx_quote(&quote, inblob))).unwrap();
    let root = fs.root().to_path_buf();
    Attesting::new(TdxProvider::new(
        fs,
        TdxOptions {
            root,
            collateral: None,
            retry: RetryPolicy::immediate(1),
        },
    ))
}

/// A state directory (under the returned guard) and a provider for one
/// service.
fn fresh(quote: &[u8]) -> (tempfile::TempDir, PathBuf, Attesting<TdxProvider<FakeTsm>>) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    (dir, state, provider(quote.to_vec()))
}

fn options() -> FrameOptions {
    FrameOptions::default()
        .with_idle_timeout(Some(Duration::from_secs(30)))
        .unwrap()
}

fn service<'a>(provider: &'a Attesting<TdxProvider<FakeTsm>>, state: &Path) -> Service<'a> {
    Service::new(
        provider,
        ServiceConfig {
            state_dir: state.to_path_buf(),
            max_input_bytes: 1 << 20,
            frames: options(),
            once: true,
            runtime_exe: Some(PathBuf::from(env!("CARGO_BIN_EXE_kolm-enclave"))),
            jobs_exe: Some(common::jobs()),
        },
    )
    .unwrap()
}

/// One connection: the service's end handled in a thread, `host` on the
/// other end.
fn converse<T>(service: &Service<'_>, host: impl FnOnce(&mut MemoryStream) -> T) -> (Outcome, T) {
    let (mut host_end, enclave_end) = memory::pipe();
    std::thread::scope(|scope| {
        let enclave = scope.spawn(move || service.handle(enclave_end));
        let got = host(&mut host_end);
        drop(host_end);
        (enclave.join().unwrap(), got)
    })
}

fn recv(s: &mut MemoryStream) -> Message {
    let payload = read_frame(s, &options()).unwrap().expect("a frame");
    Message::decode(&payload).unwrap()
}

fn send_raw(s: &mut MemoryStream, payload: &[u8]) {
    write_frame(s, payload, &options()).unwrap();
}

fn corpus() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/quickstart/corpus.txt"
    ))
    .unwrap()
}

fn submit(collateral: Vec<CollateralFile>) -> JobSubmit {
    let corpus = corpus();
    JobSubmit {
        spec: SPEC.to_vec(),
        inputs: vec![InputDecl {
            name: FileName::parse("corpus.txt").unwrap(),
            size: corpus.len() as u64,
            sha256: Sha256::digest(&corpus).into(),
        }],
        policy: POLICY.to_vec(),
        collateral,
    }
}

fn input_chunk() -> Message {
    Message::InputChunk(InputChunk {
        data: corpus(),
        name: FileName::parse("corpus.txt").unwrap(),
        offset: 0,
    })
}

/// What the host saw of a job: its log lines, then the artifact or the
/// error report.
#[derive(Debug)]
struct Seen {
    hello_paths: Vec<String>,
    logs: Vec<String>,
    end: Result<Vec<u8>, (ErrorCode, String)>,
}

/// The host's side: hello, `payload` as the submit, the input, then
/// everything until `bye` or `error`.
fn host_sends(payload: Vec<u8>) -> impl FnOnce(&mut MemoryStream) -> Seen {
    move |s| {
        let Message::Hello(hello) = recv(s) else {
            panic!("no hello")
        };
        assert_eq!(hello.platform, Platform::Tdx);
        let hello_paths = hello.evidence.iter().map(|f| f.path.clone()).collect();
        send_raw(s, &payload);
        // The input follows at once, as kolm-host sends it; the enclave may
        // already have refused the submit and closed.
        let _ = write_frame(s, &input_chunk().encode().unwrap(), &options());
        let mut logs = Vec::new();
        let mut artifact = Vec::new();
        let end = loop {
            match recv(s) {
                Message::Progress(_) => {}
                Message::Log(l) => logs.push(l.line),
                Message::ArtifactChunk(c) => artifact.extend_from_slice(&c.data),
                Message::Bye => break Ok(artifact),
                Message::Error(e) => break Err((e.code, e.message)),
                other => panic!("{other:?}"),
            }
        };
        Seen {
            hello_paths,
            logs,
            end,
        }
    }
}

/// What the state directory holds, less the empty `.lock` file a job
/// that reached the run takes (one job per state directory).
fn entries(state: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(state)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".lock")
        .collect();
    names.sort();
    names
}

/// The evidence index's collateral records and the bytes of each
/// collateral file in the artifact, checked against the manifest's
/// binding.
fn sealed_collateral(artifact: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut r = std::io::Cursor::new(artifact);
    let c = container::read_canonical_zip(&mut r).unwrap();
    let mut get = |name: &str| {
        let e = c.entries.iter().find(|e| e.name == name).unwrap();
        container::read_entry(&mut r, e, 64 << 20).unwrap()
    };
    let manifest = Manifest::from_canonical_bytes(&get("manifest.json")).unwrap();
    let index = EvidenceIndex::from_canonical_bytes(&get("evidence/index.json")).unwrap();
    assert_eq!(index.platform, Platform::Tdx);
    let listed = manifest.bound_collateral().unwrap();
    let mut out = Vec::new();
    for f in index
        .files
        .iter()
        .filter(|f| f.role == EvidenceRole::Collateral)
    {
        let bytes = get(&f.file.path);
        assert_eq!(f.file.size, bytes.len() as u64);
        assert_eq!(f.file.sha256.to_hex(), hex::encode(Sha256::digest(&bytes)));
        assert!(listed.contains(&f.file), "{:?} not bound", f.file.path);
        out.push((f.file.path.clone(), bytes));
    }
    assert_eq!(listed.len(), out.len());
    out
}

#[test]
fn the_hosts_collateral_is_sealed_byte_for_byte_and_each_job_brings_its_own() {
    let Some(s) = sample() else { return };
    let (_dir, state, p) = fresh(&s.quote);
    let svc = service(&p, &state);

    for (n, collateral) in [&s.collateral, &s.other_collateral].into_iter().enumerate() {
        let payload = Message::JobSubmit(submit(vec![CollateralFile {
            data: collateral.clone(),
            path: TDX_COLLATERAL.into(),
        }]))
        .encode()
        .unwrap();
        let (outcome, seen) = converse(&svc, host_sends(payload));
        let artifact = seen.end.unwrap_or_else(|e| panic!("job {n}: {e:?}"));
        // The enclave has no collateral of its own: its hello carries the
        // quote alone.
        assert_eq!(seen.hello_paths, ["evidence/tdx-quote.bin"]);
        let Outcome::Sealed { artifact: path } = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(std::fs::read(&path).unwrap(), artifact);
        assert_eq!(
            sealed_collateral(&artifact),
            [(TDX_COLLATERAL.to_string(), collateral.clone())],
            "job {n}"
        );
        assert!(
            seen.logs.iter().any(|l| l.contains(
                "collateral from the host's bundle (job-submit): evidence/tdx-collateral.json"
            )),
            "{:?}",
            seen.logs
        );
    }
    assert_ne!(s.collateral, s.other_collateral);
}

#[test]
fn collateral_off_the_wire_rules_or_garbage_is_refused_before_any_input_byte_is_stored() {
    let Some(s) = sample() else { return };
    let file = |path: &str, data: &[u8]| CollateralFile {
        data: data.to_vec(),
        path: path.into(),
    };
    let encoded = |files: Vec<CollateralFile>| Message::JobSubmit(submit(files)).encode().unwrap();
    // The encoder refuses what breaks the wire rules: such submits are
    // made from valid ones with a path swapped in (same encoding rules).
    let swap = |bytes: Vec<u8>, from: &[u8], to: &[u8]| {
        let at = bytes
            .windows(from.len())
            .position(|w| w == from)
            .expect("pattern");
        let mut out = bytes[..at].to_vec();
        out.extend_from_slice(to);
        out.extend_from_slice(&bytes[at + from.len()..]);
        out
    };
    let vcek_key = b"\x75evidence/snp-vcek.der".as_slice();
    let der = [0x30, 0x01, 0x00];
    let cases: Vec<(&str, Vec<u8>, ErrorCode, &str)> = vec![
        (
            "an attestation's path",
            swap(
                encoded(vec![file("evidence/snp-vcek.der", &der)]),
                vcek_key,
                b"\x76evidence/tdx-quote.bin",
            ),
            ErrorCode::Malformed,
            "\"evidence/tdx-quote.bin\" is not a collateral file of any hardware platform",
        ),
        (
            "a duplicate",
            swap(
                encoded(vec![
                    file("evidence/snp-vcek.der", &der),
                    file("evidence/snp-ask-ark.pem", &der),
                ]),
                b"\x78\x18evidence/snp-ask-ark.pem",
                vcek_key,
            ),
            ErrorCode::Malformed,
            "\"evidence/snp-vcek.der\" is listed twice",
        ),
        (
            "a file over its slot's cap",
            swap(
                encoded(vec![file(TDX_COLLATERAL, &[0x30; 16 * 1024 + 1])]),
                b"\x78\x1cevidence/tdx-collateral.json",
                vcek_key,
            ),
            ErrorCode::Malformed,
            "has 16385 bytes, its slot holds at most 16384",
        ),
        (
            "garbage",
            encoded(vec![file(TDX_COLLATERAL, b"[\"not collateral\"]")]),
            ErrorCode::InputRejected,
            "the host's collateral \"evidence/tdx-collateral.json\": not a JSON object",
        ),
        (
            "a VCEK that is not DER",
            encoded(vec![
                file(TDX_COLLATERAL, &s.collateral),
                file("evidence/snp-vcek.der", b"-----BEGIN CERTIFICATE-----"),
            ]),
            ErrorCode::InputRejected,
            "\"evidence/snp-vcek.der\": the VCEK is not one DER certificate",
        ),
    ];
    for (what, payload, code, says) in cases {
        let (_dir, state, p) = fresh(&s.quote);
        let svc = service(&p, &state);
        let (outcome, seen) = converse(&svc, host_sends(payload));
        let (got, message) = seen.end.expect_err(what);
        assert_eq!(got, code, "{what}: {message}");
        assert!(message.contains(says), "{what}: {message}");
        assert!(message.contains("collateral"), "{what}: {message}");
        assert!(matches!(outcome, Outcome::Failed { .. }), "{what}");
        // No scratch directory, no input, no artifact, no chain state.
        assert!(entries(&state).is_empty(), "{what}: {:?}", entries(&state));
    }
}

#[test]
fn a_tdx_job_without_collateral_from_anyone_is_not_sealed() {
    let Some(s) = sample() else { return };
    let (_dir, state, p) = fresh(&s.quote);
    let svc = service(&p, &state);
    let payload = Message::JobSubmit(submit(vec![])).encode().unwrap();
    let (outcome, seen) = converse(&svc, host_sends(payload));
    let (code, message) = seen.end.unwrap_err();
    assert_eq!(code, ErrorCode::JobFailed, "{message}");
    assert!(
        message.contains("platform tdx needs evidence/tdx-collateral.json"),
        "{message}"
    );
    assert!(message.contains("kolm-host run --bundle"), "{message}");
    assert!(matches!(outcome, Outcome::Failed { .. }));
    assert!(entries(&state).is_empty(), "{:?}", entries(&state));
}
