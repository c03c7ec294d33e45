//! `kolm-host bundle fetch` against a loopback HTTP server (std
//! `TcpListener` on 127.0.0.1, plain http) that serves the real sample
//! collateral of `shared/attestation-samples` the way AMD KDS and Intel
//! PCS serve it. Nothing leaves the machine. SKIP when the samples are
//! absent.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn host() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kolm-host"))
}

/// One answer of the test server.
#[derive(Clone)]
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    /// Accept, read the request, never answer.
    stall: bool,
}

fn ok(body: Vec<u8>) -> Reply {
    Reply {
        status: 200,
        headers: Vec::new(),
        body,
        stall: false,
    }
}

fn status(code: u16) -> Reply {
    Reply {
        status: code,
        headers: vec![("Retry-After", "0".into())],
        body: format!("status {code}").into_bytes(),
        stall: false,
    }
}

/// A loopback server: each path (with its query) answers with its replies
/// in order, the last one repeated; other paths get 404. Every request
/// path is logged.
struct Server {
    base: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(routes: Vec<(String, Vec<Reply>)>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        let routes = Arc::new(Mutex::new(routes.into_iter().collect::<HashMap<_, _>>()));
        let l = log.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let (log, routes) = (l.clone(), routes.clone());
                std::thread::spawn(move || {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && head.len() < 65536 {
                        match conn.read(&mut byte) {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let line = String::from_utf8_lossy(&head).to_string();
                    let path = line.split(' ').nth(1).unwrap_or_default().to_string();
                    log.lock().unwrap().push(path.clone());
                    let reply = {
                        let mut r = routes.lock().unwrap();
                        match r.get_mut(&path) {
                            Some(list) if list.len() > 1 => list.remove(0),
                            Some(list) => list[0].clone(),
                            None => Reply {
                                status: 404,
                                headers: Vec::new(),
                                body: b"not found".to_vec(),
                                stall: false,
                            },
                        }
                    };
                    if reply.stall {
                        std::thread::sleep(Duration::from_secs(10));
                        return;
                    }
                    let mut out = format!(
                        "HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n",
                        reply.status,
                        reply.body.len()
                    );
                    for (k, v) in &reply.headers {
                        out.push_str(&format!("{k}: {v}\r\n"));
                    }
                    out.push_str("\r\n");
                    // The client may hang up early (a body over its limit).
                    let _ = conn.write_all(out.as_bytes());
                    let _ = conn.write_all(&reply.body);
                });
            }
        });
        Server { base, log }
    }

    fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters, as
/// Intel PCS encodes its issuer-chain headers.
fn pct(s: &[u8]) -> String {
    s.iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `bundle inspect --json DIR` exits 0 at the start of the files' common
/// window (the samples' collateral expires: judged now, it may not be
/// usable, which inspect says with exit 1).
fn inspect_accepts(dir: &Path) -> Output {
    let o = host()
        .args(["bundle", "inspect", "--json"])
        .arg(dir)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let start = v["common_window"][0]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"));
    let o = host()
        .args(["bundle", "inspect", "--json", "--at", start])
        .arg(dir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    o
}

/// The command failed with `code`, saying `text`, and `dir` holds only
/// `left` afterwards.
fn refused(o: &Output, code: i32, text: &str, dir: &Path, left: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert!(err.contains(text), "{err:?} lacks {text:?}");
    assert_eq!(files_in(dir), left);
}

// ---------------------------------------------------------------- SEV-SNP

struct Snp {
    dir: PathBuf,
    report: PathBuf,
    vcek_path: String,
    chain_path: String,
    crl_path: String,
}

fn snp() -> Option<Snp> {
    let root = kolm_testkit::samples("sev-snp/expected.json")?;
    let dir = root.join("sev-snp/milan-v2-gosevguest");
    let report = std::fs::read(dir.join("report.bin")).unwrap();
    // CHIP_ID at 0x1A0, REPORTED_TCB at 0x180 (SEV-SNP ABI, report
    // layout); Milan: BL, TEE, .., SNP, ucode at bytes 0, 1, 6, 7.
    let chip = hex::encode(&report[0x1A0..0x1E0]);
    let tcb = &report[0x180..0x188];
    let vcek_path = format!(
        "/vcek/v1/Milan/{chip}?blSPL={:02}&teeSPL={:02}&snpSPL={:02}&ucodeSPL={:02}",
        tcb[0], tcb[1], tcb[6], tcb[7]
    );
    Some(Snp {
        report: dir.join("report.bin"),
        dir,
        vcek_path,
        chain_path: "/vcek/v1/Milan/cert_chain".into(),
        crl_path: "/vcek/v1/Milan/crl".into(),
    })
}

/// A CRL in AMD's shape for the ARK of `chain` (ASK then ARK, PEM): v2,
/// issued by the ARK, its RSASSA-PSS SHA-384 algorithm, valid from an hour
/// ago for a month, with `signature` in place of the ARK's (which no test
/// can make).
fn crl_for(chain: &[u8], signature: &[u8]) -> Vec<u8> {
    use der::Encode;
    let certs = x509_cert::Certificate::load_pem_chain(chain).unwrap();
    let ark = &certs[1];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let time = |d: Duration| {
        x509_cert::time::Time::UtcTime(der::asn1::UtcTime::from_unix_duration(d).unwrap())
    };
    let tbs = x509_cert::crl::TbsCertList {
        version: x509_cert::Version::V2,
        signature: ark.signature_algorithm.clone(),
        issuer: ark.tbs_certificate.subject.clone(),
        this_update: time(now - Duration::from_secs(3600)),
        next_update: Some(time(now + Duration::from_secs(30 * 86400))),
        revoked_certificates: None,
        crl_extensions: None,
    };
    x509_cert::crl::CertificateList {
        tbs_cert_list: tbs,
        signature_algorithm: ark.signature_algorithm.clone(),
        signature: der::asn1::BitString::from_bytes(signature).unwrap(),
    }
    .to_der()
    .unwrap()
}

impl Snp {
    /// The sample's VCEK and ASK/ARK, as KDS serves them.
    fn files(&self) -> (Vec<u8>, Vec<u8>) {
        (
            std::fs::read(self.dir.join("vcek.der")).unwrap(),
            std::fs::read(self.dir.join("ask_ark_milan.pem")).unwrap(),
        )
    }
}

fn fetch_snp(s: &Snp, server: &Server, out: &Path, extra: &[&str]) -> Output {
    host()
        .args(["bundle", "fetch", "--out"])
        .arg(out)
        .arg("--snp-report")
        .arg(&s.report)
        .args(["--product", "milan", "--kds-url", &server.base])
        .args(extra)
        .output()
        .unwrap()
}

/// The sample's VCEK and chain pass every check, so the fetch gets as far
/// as the CRL; no test can have AMD's ARK sign one, so each CRL served here
/// is refused and nothing is written (the success path is tested in
/// kolm-verifier with a stand-in ARK).
#[test]
fn snp_fetch_checks_the_crl_against_the_fetched_ark_and_writes_nothing_if_it_fails() {
    let Some(s) = snp() else { return };
    let (vcek, chain) = s.files();
    let crl_url = |server: &Server| format!("{}{}", server.base, s.crl_path);
    let serve = |crl: Reply| {
        Server::start(vec![
            (s.vcek_path.clone(), vec![ok(vcek.clone())]),
            (s.chain_path.clone(), vec![ok(chain.clone())]),
            (s.crl_path.clone(), vec![crl]),
        ])
    };
    let out = tempfile::tempdir().unwrap();

    // AMD's shape and issuer, a signature that is not the ARK's.
    let server = serve(ok(crl_for(&chain, &[0x5a; 512])));
    let o = fetch_snp(&s, &server, out.path(), &["--json"]);
    let text = format!(
        "GET {}: refused the CRL: CRL signature does not verify under the ARK's key",
        crl_url(&server)
    );
    refused(&o, 1, &text, out.path(), &[]);
    assert!(o.stdout.is_empty());
    assert_eq!(
        server.requests(),
        [
            s.vcek_path.clone(),
            s.chain_path.clone(),
            s.crl_path.clone()
        ]
    );

    // Intel's root CA CRL: another issuer's, and ECDSA.
    if let Some(root) = kolm_testkit::samples("tdx/expected.json") {
        let intel = root.join("tdx/v4-50806f-gotdxguest-2023-06/raw/root-ca-crl.der");
        let server = serve(ok(std::fs::read(intel).unwrap()));
        let o = fetch_snp(&s, &server, out.path(), &[]);
        let text = "refused the CRL: CRL signature algorithm is not RSASSA-PSS";
        refused(&o, 1, text, out.path(), &[]);
    }

    // Trailing bytes; not a CRL; too large.
    let mut trailing = crl_for(&chain, &[0x5a; 512]);
    trailing.push(0);
    let server = serve(ok(trailing));
    let o = fetch_snp(&s, &server, out.path(), &[]);
    let text = "refused the CRL: CRL is followed by 1 trailing bytes";
    refused(&o, 1, text, out.path(), &[]);
    let server = serve(ok(b"<html>busy</html>".to_vec()));
    let o = fetch_snp(&s, &server, out.path(), &[]);
    let text = "refused the CRL: CRL does not decode as a DER CertificateList";
    refused(&o, 1, text, out.path(), &[]);
    let server = serve(ok(vec![0x30; 300_000]));
    let o = fetch_snp(&s, &server, out.path(), &[]);
    let text = format!(
        "GET {}: the response is larger than 262144 bytes",
        crl_url(&server)
    );
    refused(&o, 1, &text, out.path(), &[]);

    // KDS without the CRL: an error, nothing written; files already
    // there stay as they were.
    std::fs::write(out.path().join("snp-crl.der"), b"old").unwrap();
    let server = serve(status(404));
    let o = fetch_snp(&s, &server, out.path(), &[]);
    let text = format!("GET {}: HTTP 404", crl_url(&server));
    refused(&o, 2, &text, out.path(), &["snp-crl.der"]);
    assert_eq!(
        std::fs::read(out.path().join("snp-crl.der")).unwrap(),
        b"old"
    );
}

/// `bundle inspect` checks a bundle's CRL against the bundle's ARK: the
/// sample chain and VCEK with a CRL the ARK did not sign exit 1, naming
/// the failure; without the CRL the same bundle is accepted.
#[test]
fn inspect_refuses_a_crl_the_bundle_ark_did_not_sign() {
    let Some(s) = snp() else { return };
    let (vcek, chain) = s.files();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("snp-vcek.der"), &vcek).unwrap();
    std::fs::write(dir.path().join("snp-ask-ark.pem"), &chain).unwrap();
    inspect_accepts(dir.path());
    std::fs::write(
        dir.path().join("snp-crl.der"),
        crl_for(&chain, &[0x5a; 512]),
    )
    .unwrap();
    let o = host()
        .args(["bundle", "inspect", "--json"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let crl = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["file"] == "snp-crl.der")
        .unwrap();
    assert_eq!(crl["kind"], "snp-crl", "{v}");
    assert_eq!(crl["details"]["signature"], "failed", "{v}");
    assert_eq!(crl["details"]["ask_status"], "not-checked", "{v}");
    assert!(
        crl["error"]
            .as_str()
            .unwrap()
            .starts_with("CRL signature does not verify under the ARK's key"),
        "{v}"
    );
    assert_eq!(crl["windows"].as_array().unwrap().len(), 1, "{v}");
    // The text form says the same.
    let o = host()
        .args(["bundle", "inspect"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("snp-crl.der: snp-crl"), "{text}");
    assert!(text.contains("  signature: failed"), "{text}");
}

#[test]
fn snp_fetch_retries_a_rate_limit() {
    let Some(s) = snp() else { return };
    let (vcek, chain) = s.files();
    let bad_crl = crl_for(&chain, &[0x5a; 512]);
    let server = Server::start(vec![
        (
            s.vcek_path.clone(),
            vec![status(429), status(503), ok(vcek)],
        ),
        (s.chain_path.clone(), vec![ok(chain)]),
        (s.crl_path.clone(), vec![status(503), ok(bad_crl)]),
    ]);
    let out = tempfile::tempdir().unwrap();
    let o = fetch_snp(&s, &server, out.path(), &[]);
    // Past the retries, on to the CRL, which no test can have signed.
    refused(&o, 1, "refused the CRL", out.path(), &[]);
    assert_eq!(
        server.requests(),
        [
            s.vcek_path.clone(),
            s.vcek_path.clone(),
            s.vcek_path.clone(),
            s.chain_path.clone(),
            s.crl_path.clone(),
            s.crl_path.clone()
        ]
    );
    // Out of retries: the status is the error.
    let server = Server::start(vec![(s.vcek_path.clone(), vec![status(429)])]);
    let out = tempfile::tempdir().unwrap();
    let o = fetch_snp(&s, &server, out.path(), &["--retries", "1"]);
    refused(&o, 2, "HTTP 429: status 429", out.path(), &[]);
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn snp_fetch_failures_name_the_url_and_write_nothing() {
    let Some(s) = snp() else { return };
    let (vcek, chain) = s.files();
    let vcek_url = |server: &Server| format!("{}{}", server.base, s.vcek_path);

    // 404.
    let server = Server::start(vec![(s.chain_path.clone(), vec![ok(chain.clone())])]);
    let out = tempfile::tempdir().unwrap();
    let o = fetch_snp(&s, &server, out.path(), &[]);
    let url = vcek_url(&server);
    refused(&o, 2, &format!("GET {url}: HTTP 404"), out.path(), &[]);
    assert!(stderr(&o).contains("nothing was written"));

    // A body over the limit (VCEKs are about 1.4 KB).
    let server = Server::start(vec![
        (s.vcek_path.clone(), vec![ok(vec![0x30; 100_000])]),
        (s.chain_path.clone(), vec![ok(chain.clone())]),
    ]);
    let o = fetch_snp(&s, &server, out.path(), &[]);
    let text = "the response is larger than 16384 bytes";
    refused(&o, 1, text, out.path(), &[]);

    // Another chip's VCEK for another TCB: refused on the TCB; a bundle
    // file already there is left as it was.
    std::fs::write(out.path().join("snp-vcek.der"), b"old").unwrap();
    let other = s.dir.parent().unwrap().join("milan-v2-sevcrate/vcek.der");
    let server = Server::start(vec![
        (s.vcek_path.clone(), vec![ok(std::fs::read(other).unwrap())]),
        (s.chain_path.clone(), vec![ok(chain.clone())]),
    ]);
    let o = fetch_snp(&s, &server, out.path(), &[]);
    let text = "refused the VCEK: certificate bl SPL 3 differs from REPORTED_TCB bl 2";
    refused(&o, 1, text, out.path(), &["snp-vcek.der"]);
    assert_eq!(
        std::fs::read(out.path().join("snp-vcek.der")).unwrap(),
        b"old"
    );

    // A server that never answers: the time limit, naming the URL.
    let server = Server::start(vec![(
        s.vcek_path.clone(),
        vec![Reply {
            stall: true,
            ..ok(vcek)
        }],
    )]);
    let started = std::time::Instant::now();
    let o = fetch_snp(&s, &server, out.path(), &["--timeout", "1"]);
    let text = format!("GET {}: no complete answer within 1s", vcek_url(&server));
    refused(&o, 2, &text, out.path(), &["snp-vcek.der"]);
    assert!(started.elapsed() < Duration::from_secs(8));
}

// -------------------------------------------------------------------- TDX

/// The raw Intel PCS answers behind the go-tdx-guest sample's collateral.
struct Tdx {
    raw: PathBuf,
    collateral: Vec<u8>,
}

fn tdx() -> Option<Tdx> {
    let root = kolm_testkit::samples("tdx/expected.json")?;
    let case = root.join("tdx/v4-50806f-gotdxguest-2023-06");
    Some(Tdx {
        raw: case.join("raw"),
        collateral: std::fs::read(case.join("collateral.json")).unwrap(),
    })
}

fn pcs_routes(t: &Tdx) -> Vec<(String, Vec<Reply>)> {
    let read = |f: &str| std::fs::read(t.raw.join(f)).unwrap();
    let with = |body: Vec<u8>, header: &'static str, pem: &str| Reply {
        headers: vec![(header, pct(&read(pem)))],
        ..ok(body)
    };
    vec![
        (
            "/tdx/certification/v4/tcb?fmspc=50806f000000".into(),
            vec![with(
                read("tcbinfo-response.json"),
                "TCB-Info-Issuer-Chain",
                "tcb-info-issuer-chain.pem",
            )],
        ),
        (
            "/tdx/certification/v4/qe/identity".into(),
            vec![with(
                read("qe-identity-response.json"),
                "SGX-Enclave-Identity-Issuer-Chain",
                "tcb-info-issuer-chain.pem",
            )],
        ),
        (
            "/sgx/certification/v4/pckcrl?ca=platform&encoding=der".into(),
            vec![with(
                read("pck-crl-platform.der"),
                "SGX-PCK-CRL-Issuer-Chain",
                "pck-crl-issuer-chain.pem",
            )],
        ),
        (
            "/IntelSGXRootCA.der".into(),
            vec![ok(read("root-ca-crl.der"))],
        ),
    ]
}

fn fetch_tdx(server: &Server, out: &Path, fmspc: &str) -> Output {
    host()
        .args(["bundle", "fetch", "--out"])
        .arg(out)
        .args(["--fmspc", fmspc, "--pcs-url", &server.base])
        .arg("--intel-root-crl-url")
        .arg(format!("{}/IntelSGXRootCA.der", server.base))
        .output()
        .unwrap()
}

#[test]
fn tdx_fetch_assembles_the_sample_collateral_byte_for_byte() {
    let Some(t) = tdx() else { return };
    let server = Server::start(pcs_routes(&t));
    let out = tempfile::tempdir().unwrap();
    let o = fetch_tdx(&server, out.path(), "50806F000000");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(out.path().join("tdx-collateral.json")).unwrap(),
        t.collateral
    );
    assert_eq!(server.requests().len(), 4);
    let o = inspect_accepts(out.path());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["items"][0]["kind"], "tdx-collateral", "{v}");
}

#[test]
fn tdx_fetch_refuses_collateral_for_another_fmspc_or_without_its_chain() {
    let Some(t) = tdx() else { return };
    // The server answers the b0c06f request with the 50806f TCB Info.
    let mut routes = pcs_routes(&t);
    routes[0].0 = "/tdx/certification/v4/tcb?fmspc=b0c06f000000".into();
    let server = Server::start(routes);
    let out = tempfile::tempdir().unwrap();
    let o = fetch_tdx(&server, out.path(), "b0c06f000000");
    let text = "the TCB Info is for FMSPC Some(\"50806f000000\"), not b0c06f000000";
    refused(&o, 1, text, out.path(), &[]);

    // No issuer-chain header: refused, naming it.
    let mut routes = pcs_routes(&t);
    routes[1].1[0].headers.clear();
    let server = Server::start(routes);
    let o = fetch_tdx(&server, out.path(), "50806f000000");
    refused(
        &o,
        1,
        "header SGX-Enclave-Identity-Issuer-Chain: missing",
        out.path(),
        &[],
    );
}

#[test]
fn fetch_without_evidence_is_a_usage_error() {
    let out = tempfile::tempdir().unwrap();
    let o = host()
        .args(["bundle", "fetch", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("nothing to fetch"), "{}", stderr(&o));
    let o = host()
        .args(["bundle", "fetch", "--fmspc", "50806f", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--fmspc 50806f"), "{}", stderr(&o));
    assert!(files_in(out.path()).is_empty());
}
