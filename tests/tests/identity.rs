//! The host judges the enclave's identity evidence (the `hello`'s
//! attestation over the identity key) before it sends anything: an enclave
//! whose key is not what its evidence attests gets an `identity-rejected`
//! error and not one byte of the job.
//!
//! The enclave side is played here over an in-memory pipe, with real
//! simulated-TEE documents (`sim_hello`), so each attack is a document a
//! compromised or impostor enclave could really send. The decision that
//! follows verification (pinned, unpinned, `--dangerous-any-measurement`)
//! is a pure function tested branch by branch beside it
//! (`host/src/identity.rs`, `judge`): no TEE here can attest a test key.

mod sim_hello;

use std::path::Path;
use std::sync::atomic::AtomicBool;

use kolm_enclave::attest::sim::SimulatedProvider;
use kolm_format::binding::identity_report_data;
use kolm_host::identity::{IdentityError, IdentityTrust, IdentityVerdict};
use kolm_host::session::{self, SessionError};
use kolm_policy::Policy;
use kolm_transport::frame::FrameOptions;
use kolm_transport::message::{ErrorCode, Hello, Message};
use kolm_transport::{Channel, memory};
use kolm_verifier::sim::SimRoots as SimRoot;

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("kolm-tests lives one level below the workspace root")
}

/// A policy that admits the simulated TEE (production's admits hardware
/// only, and the host refuses a simulated enclave under it before it
/// looks at the evidence: `tests/tests/host_boundary.rs`).
fn sim_policy() -> Policy {
    Policy::from_toml_str("schema = \"kolm.policy.v1\"\nallowed_platforms = [\"simulated\"]\n")
        .unwrap()
}

struct Installation {
    _dir: tempfile::TempDir,
    provider: SimulatedProvider,
}

fn installation() -> Installation {
    let dir = tempfile::tempdir().unwrap();
    let provider = sim_hello::installation(dir.path());
    Installation {
        _dir: dir,
        provider,
    }
}

fn root_of(i: &Installation) -> SimRoot {
    sim_hello::root(&i.provider)
}

/// A simulated enclave's hello announcing `key`, with a document over
/// `report_data` made by `signer`.
fn hello(signer: &Installation, key: [u8; 32], report_data: [u8; 64]) -> Hello {
    sim_hello::hello(&signer.provider, key, report_data)
}

/// Runs the host's side against an enclave that says `hello` and then
/// records everything the host sends until the connection ends. Returns
/// the host's result and what the enclave received.
fn converse(
    hello: Hello,
    trusted: SimRoot,
) -> (Result<session::Outcome, SessionError>, Vec<Message>) {
    let (host_end, enclave_end) = memory::pipe();
    let enclave = std::thread::spawn(move || {
        let mut ch = Channel::new(enclave_end, FrameOptions::default());
        ch.send(&Message::Hello(hello)).unwrap();
        let mut got = Vec::new();
        while let Ok(m) = ch.recv() {
            // The job arriving is as far as this enclave goes: it closes.
            let end = matches!(m, Message::Error(_) | Message::Bye | Message::JobSubmit(_));
            got.push(m);
            if end {
                break;
            }
        }
        got
    });
    let job = kolm_host::job::load(
        &workspace().join("examples/quickstart/job.toml"),
        None,
        None,
        1 << 30,
    )
    .unwrap();
    let policy = sim_policy();
    let mut root = Some(trusted);
    let mut get_root = || Ok(root.take().expect("the sim root is asked for once"));
    let mut trust = IdentityTrust {
        policy: &policy,
        bundle: None,
        sim_root: &mut get_root,
        dangerous_allow_unattested: false,
        dangerous_any_measurement: false,
    };
    let mut check =
        |h: &Hello| kolm_host::identity::verify(h, &mut trust, time::OffsetDateTime::now_utc());
    let mut ch = Channel::new(host_end, FrameOptions::default());
    let result = session::submit(
        &mut ch,
        &job,
        &[],
        &mut check,
        &AtomicBool::new(false),
        session::Deadlines::default(),
        &mut |_| {},
    );
    drop(ch);
    (result, enclave.join().unwrap())
}

/// Runs the host against `hello`, which it must refuse: the enclave
/// received one identity-rejected error, no job, no input. Returns why.
fn refused(hello: Hello, trusted: SimRoot) -> IdentityError {
    let (result, got) = converse(hello, trusted);
    match &got[..] {
        [Message::Error(e)] => assert_eq!(e.code, ErrorCode::IdentityRejected, "{e:?}"),
        other => panic!("the enclave received {other:?}"),
    }
    match result {
        Err(SessionError::Identity(e)) => e,
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_attested_identity_key_is_accepted_and_the_job_submitted() {
    let i = installation();
    let key = [0x11; 32];
    let h = hello(&i, key, identity_report_data(&key));
    let got_verdict = kolm_host::identity::verify(
        &h,
        &mut IdentityTrust {
            policy: &sim_policy(),
            bundle: None,
            sim_root: &mut || Ok(root_of(&i)),
            dangerous_allow_unattested: false,
            dangerous_any_measurement: false,
        },
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    assert!(
        matches!(got_verdict, IdentityVerdict::Simulated { checks } if checks > 0),
        "{got_verdict:?}"
    );
    // Over the wire: the job is submitted (the fake enclave then closes).
    let (result, got) = converse(h, root_of(&i));
    assert!(
        matches!(got.first(), Some(Message::JobSubmit(_))),
        "{got:?}"
    );
    assert!(result.is_err(), "the fake enclave sends no artifact");
}

#[test]
fn evidence_over_another_key_is_refused_before_anything_is_sent() {
    let i = installation();
    // A genuine document of this installation, but for another key: an
    // impostor replaying a real enclave's hello with its own key.
    let h = hello(&i, [0x22; 32], identity_report_data(&[0x33; 32]));
    let e = refused(h, root_of(&i));
    assert!(matches!(e, IdentityError::Rejected(_)), "{e:?}");
}

#[test]
fn a_receipt_binding_is_not_an_identity_binding() {
    let i = installation();
    let key = [0x44; 32];
    // The raw key in the report data, without the identity domain.
    let mut raw = [0u8; 64];
    raw[..32].copy_from_slice(&key);
    let e = refused(hello(&i, key, raw), root_of(&i));
    assert!(matches!(e, IdentityError::Rejected(_)), "{e:?}");
}

#[test]
fn evidence_under_another_sim_root_is_refused() {
    let ours = installation();
    let theirs = installation();
    let key = [0x55; 32];
    let e = refused(
        hello(&theirs, key, identity_report_data(&key)),
        root_of(&ours),
    );
    assert!(matches!(e, IdentityError::Rejected(_)), "{e:?}");
}

#[test]
fn a_claimed_measurement_other_than_the_attested_one_is_refused() {
    let i = installation();
    let key = [0x66; 32];
    let mut h = hello(&i, key, identity_report_data(&key));
    h.measurement = vec![0xee; 48];
    let e = refused(h, root_of(&i));
    assert!(
        matches!(e, IdentityError::MeasurementMismatch { .. }),
        "{e:?}"
    );
}

#[test]
fn a_tampered_document_is_refused() {
    let i = installation();
    let key = [0x77; 32];
    let mut h = hello(&i, key, identity_report_data(&key));
    let doc = &mut h.evidence[0].data;
    let last = doc.len() - 1;
    doc[last] ^= 1; // the signature's last byte
    let e = refused(h, root_of(&i));
    assert!(matches!(e, IdentityError::Rejected(_)), "{e:?}");
}
