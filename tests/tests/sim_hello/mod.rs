//! The enclave's side of a `hello` under the simulated TEE, shared by the
//! tests that play the enclave to `kolm-host` (`host_boundary.rs` over a
//! unix socket, `identity.rs` over an in-memory pipe): an installation,
//! and the hello it signs, with real simulated-TEE documents (the code
//! `kolm-enclave start --attest sim` runs), so that each hello is one a
//! compromised or impostor enclave could really send.
#![allow(dead_code)]

use std::path::Path;

use kolm_enclave::attest::AttestationProvider as _;
use kolm_enclave::attest::sim::{DocumentRequest, SimFormat, SimulatedProvider};
use kolm_format::evidence::SIM_NITRO_DOC_PATH;
use kolm_policy::Platform;
use kolm_transport::message::{Hello, HelloEvidence, SUPPORTED_VERSIONS};
use kolm_verifier::sim::SimRoots;

/// A simulated-TEE installation (Nitro form) under `dir`: its root in
/// `dir/sim`, its measurement that of a stand-in `dir/kolm-enclave`.
pub fn installation(dir: &Path) -> SimulatedProvider {
    let exe = dir.join("kolm-enclave");
    std::fs::write(&exe, b"a kolm-enclave binary").unwrap();
    SimulatedProvider::open(&dir.join("sim"), &exe, SimFormat::Nitro).unwrap()
}

/// The installation's root, as a host that trusts it holds it.
pub fn root(provider: &SimulatedProvider) -> SimRoots {
    SimRoots::parse(provider.root().certificate_pem().as_bytes()).unwrap()
}

/// A simulated enclave's hello announcing `key`, with a document of
/// `signer` over `report_data` (`identity_report_data(&key)` for a
/// genuine one).
pub fn hello(signer: &SimulatedProvider, key: [u8; 32], report_data: [u8; 64]) -> Hello {
    let doc = signer
        .document(&DocumentRequest {
            user_data: &report_data,
            nonce: None,
            public_key: None,
            at: time::OffsetDateTime::now_utc(),
        })
        .unwrap();
    Hello {
        versions: SUPPORTED_VERSIONS.to_vec(),
        platform: Platform::Simulated,
        max_frame: 64 << 20,
        measurement: signer.measurement().unwrap(),
        identity_key: key,
        evidence: vec![HelloEvidence {
            data: doc,
            path: SIM_NITRO_DOC_PATH.into(),
        }],
    }
}
