//! The `kolm-verify` binary: exit codes, `--json`, usage errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::Command;

use kolm_testkit::Deadline as _;

/// The most one child of these tests may take: each verification ends in well
/// under a second; a hung one fails with `DEADLINE` (issue 20 section 6).
const LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

fn kolm_verify() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kolm-verify"))
}

const DEV_POLICY: &str =
    "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"none\"]\n[egress]\nmust_be_zero = false\n";

#[test]
fn exit_codes_and_json_report() {
    let dir = tempfile::tempdir().unwrap();
    let art = common::build_default(dir.path());
    let policy = dir.path().join("dev.toml");
    std::fs::write(&policy, DEV_POLICY).unwrap();

    // Unattested: exit 1, one JSON document naming the verdict.
    let out = kolm_verify()
        .arg(&art)
        .arg("--policy")
        .arg(&policy)
        .arg("--json")
        .output_within(LIMIT);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["schema"], "kolm.verify-report.v1");
    assert_eq!(doc["verdict"], "unattested");
    assert_eq!(doc["checks"].as_array().unwrap().len(), 13);
    assert_eq!(doc["fields"]["platform"], "none");

    // Dangerous switch with a policy allowing `none`: exit 0 and a warning.
    let out = kolm_verify()
        .arg(&art)
        .args(["--policy"])
        .arg(&policy)
        .arg("--dangerous-allow-unattested")
        .output_within(LIMIT);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("WARNING"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("verdict: VERIFIED"));

    // Tampered: exit 1, reason names the check.
    let mut bytes = std::fs::read(&art).unwrap();
    let n = bytes.len() / 3;
    bytes[n] ^= 0x20;
    let bad = dir.path().join("bad.zip");
    std::fs::write(&bad, &bytes).unwrap();
    let out = kolm_verify().arg(&bad).arg("--json").output_within(LIMIT);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["verdict"], "rejected");
    assert!(doc["reason"].as_str().unwrap().contains(':'));
}

#[test]
fn usage_and_io_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let art = common::build_default(dir.path());
    let cases: Vec<Vec<std::ffi::OsString>> = vec![
        vec!["/nonexistent/a.zip".into()],
        vec![art.clone().into(), "--at".into(), "yesterday".into()],
        vec![
            art.clone().into(),
            "--policy".into(),
            "/nonexistent.toml".into(),
        ],
        vec![art.clone().into(), "--bogus".into()],
        vec![],
    ];
    for args in cases {
        let out = kolm_verify().args(&args).output_within(LIMIT);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}");
    }
    // A policy with an unknown key is a usage error naming the key.
    let bad_policy = dir.path().join("p.toml");
    std::fs::write(&bad_policy, format!("{DEV_POLICY}bogus_key = 1\n")).unwrap();
    let out = kolm_verify()
        .arg(&art)
        .arg("--policy")
        .arg(&bad_policy)
        .output_within(LIMIT);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bogus_key"));
}

fn samples() -> Option<std::path::PathBuf> {
    common::samples_dir("nitro/expected.json")
}

#[test]
fn evidence_subcommands_exit_codes_and_json() {
    let Some(s) = samples() else { return };
    let run = |args: &[&std::ffi::OsStr]| {
        let out = kolm_verify().args(args).output_within(LIMIT);
        (out.status.code(), out.stdout, out.stderr)
    };
    let p = |rel: &str| s.join(rel).into_os_string();
    let os = |x: &str| std::ffi::OsString::from(x);

    // Issue 12: a genuine document of any enclave is `unpinned` (exit 1)
    // until a policy pins the enclave's identity.
    let dir = tempfile::tempdir().unwrap();
    let pins = pinning_policies(&s, dir.path());
    let pol = |name: &str| pins.join(name).into_os_string();

    // Nitro: production document accepted at its instant under a policy
    // pinning its PCR0; JSON document.
    let (code, stdout, _) = run(&[
        &os("nitro"),
        &p("nitro/nitro-euc1-2025-01-06-prod.cose"),
        &os("--at"),
        &os("2025-01-06T17:00:00Z"),
        &os("--policy"),
        &pol("nitro.toml"),
        &os("--json"),
    ]);
    assert_eq!(code, Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    assert_eq!(doc["schema"], "kolm.attestation-report.v1");
    assert_eq!(doc["verdict"], "accept");
    assert_eq!(doc["pinning"]["pinned"], true);
    assert_eq!(doc["pinning"]["compared"][0], "PCR0");
    // The same document under the production policy: unpinned, exit 1.
    let (code, stdout, stderr) = run(&[
        &os("nitro"),
        &p("nitro/nitro-euc1-2025-01-06-prod.cose"),
        &os("--at"),
        &os("2025-01-06T17:00:00Z"),
        &os("--json"),
    ]);
    assert_eq!(code, Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    assert_eq!(doc["verdict"], "unpinned");
    assert!(
        doc["reason"].as_str().unwrap().starts_with(
            "no measurement pinned: any workload in a genuine TEE could have produced this"
        ),
        "{}",
        doc["reason"]
    );
    assert_eq!(doc["pinning"]["pinned"], false);
    assert!(stderr.is_empty());
    // --dangerous-any-measurement: a loud pass.
    let (code, stdout, stderr) = run(&[
        &os("nitro"),
        &p("nitro/nitro-euc1-2025-01-06-prod.cose"),
        &os("--at"),
        &os("2025-01-06T17:00:00Z"),
        &os("--dangerous-any-measurement"),
    ]);
    assert_eq!(code, Some(0));
    assert!(String::from_utf8_lossy(&stderr).contains("WARNING: --dangerous-any-measurement"));
    let table = String::from_utf8_lossy(&stdout);
    assert!(
        table.contains("verdict: ACCEPT (accepted WITHOUT a pinned measurement"),
        "{table}"
    );
    assert_eq!(
        doc["fields"]["module_id"],
        "i-0bee92034f3d60691-enc01943c5eaab3ad6a"
    );
    // Debug enclave: rejected under the default production policy.
    let (code, stdout, _) = run(&[
        &os("nitro"),
        &p("nitro/nitro-use1-2022-10-12-debug.cose"),
        &os("--at"),
        &os("2022-10-12T15:00:00Z"),
    ]);
    assert_eq!(code, Some(1));
    assert!(String::from_utf8_lossy(&stdout).contains("nitro.debug"));
    // Raw evidence needs an explicit instant.
    let (code, _, stderr) = run(&[&os("nitro"), &p("nitro/nitro-euc1-2025-01-06-prod.cose")]);
    assert_eq!(code, Some(2));
    assert!(String::from_utf8_lossy(&stderr).contains("--at"));

    // SEV-SNP with the embedded AMD roots: unpinned under the production
    // policy, accepted under one listing its MEASUREMENT.
    let snp = |policy: Option<&str>| {
        let mut args = vec![
            os("snp"),
            p("sev-snp/milan-v5-gcp/report.bin"),
            os("--vcek"),
            p("sev-snp/milan-v5-gcp/vcek.pem"),
            os("--at"),
            os("2026-01-01T00:00:00Z"),
        ];
        if let Some(name) = policy {
            args.extend([os("--policy"), pol(name)]);
        }
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        run(&refs)
    };
    let (code, stdout, _) = snp(None);
    assert_eq!(code, Some(1));
    assert!(String::from_utf8_lossy(&stdout).contains("verdict: UNPINNED"));
    let (code, stdout, _) = snp(Some("snp.toml"));
    assert_eq!(code, Some(0), "{}", String::from_utf8_lossy(&stdout));

    // TDX (pinned by MRTD and RTMR0..2): accepted inside the collateral
    // window, rejected after it.
    let tdx = |at: &str| {
        run(&[
            &os("tdx"),
            &p("tdx/v4-b0c06f-dcapqvl-2025-06/quote.bin"),
            &os("--collateral"),
            &p("tdx/v4-b0c06f-dcapqvl-2025-06/collateral.json"),
            &os("--at"),
            &os(at),
            &os("--policy"),
            &pol("tdx.toml"),
        ])
    };
    assert_eq!(tdx("2025-07-01T00:00:00Z").0, Some(0));
    assert_eq!(tdx("2025-07-20T00:00:00Z").0, Some(1));

    // Azure: SNP-based accepted when its vTPM PCRs are pinned, unpinned
    // without; TDX-based fails closed without collateral.
    let azure = |rel: &str, policy: &str| {
        run(&[
            &os("azure"),
            &p(rel),
            &os("--at"),
            &os("2026-01-01T00:00:00Z"),
            &os("--policy"),
            &pol(policy),
        ])
    };
    assert_eq!(
        azure("azure/az-snp-vtpm-milan/evidence.json", "azure.toml").0,
        Some(0)
    );
    let (code, stdout, _) = azure("azure/az-snp-vtpm-milan/evidence.json", "paravisor.toml");
    assert_eq!(code, Some(1));
    assert!(String::from_utf8_lossy(&stdout).contains("verdict: UNPINNED"));
    let azure = |rel: &str| azure(rel, "azure.toml");
    let (code, stdout, _) = azure("azure/az-tdx-vtpm/evidence.json");
    assert_eq!(code, Some(1));
    assert!(String::from_utf8_lossy(&stdout).contains("azure.tdx.collateral"));

    // A missing input file is an I/O error.
    let (code, _, _) = run(&[
        &os("snp"),
        &os("/nonexistent"),
        &os("--vcek"),
        &os("/nonexistent"),
        &os("--at"),
        &os("now"),
    ]);
    assert_eq!(code, Some(2));
}

/// Policies that pin each sample's identity (and one that "pins" only the
/// Azure paravisor's MEASUREMENT), written under `dir`.
fn pinning_policies(s: &std::path::Path, dir: &std::path::Path) -> std::path::PathBuf {
    use kolm_verifier::snp::parse_snp_report;
    use kolm_verifier::tdx::parse_tdx_quote;
    let head = |platforms: &str| {
        format!("schema = \"kolm.policy.v1\"\nallowed_platforms = [{platforms}]\n")
    };
    let write = |name: &str, body: String| std::fs::write(dir.join(name), body).unwrap();
    let pcr0 = "8bb159f202bb95d6d4d98e0e103918246cea734f1d57cd263e4fd56075ed53f6fa8c68854817a32749a241e11874c26b";
    write(
        "nitro.toml",
        format!("{}[nitro.pcrs]\n0 = [\"{pcr0}\"]\n", head("\"nitro\"")),
    );
    let report =
        parse_snp_report(&std::fs::read(s.join("sev-snp/milan-v5-gcp/report.bin")).unwrap())
            .unwrap();
    write(
        "snp.toml",
        format!(
            "{}[sev_snp]\nmeasurements = [\"{}\"]\n",
            head("\"sev-snp\""),
            hex::encode(report.measurement())
        ),
    );
    let q =
        parse_tdx_quote(&std::fs::read(s.join("tdx/v4-b0c06f-dcapqvl-2025-06/quote.bin")).unwrap())
            .unwrap();
    let r = q.rtmrs();
    write(
        "tdx.toml",
        format!(
            "{}[tdx]\nmrtd = [\"{}\"]\nrtmr0 = [\"{}\"]\nrtmr1 = [\"{}\"]\nrtmr2 = [\"{}\"]\n",
            head("\"tdx\""),
            hex::encode(q.mrtd()),
            hex::encode(r[0]),
            hex::encode(r[1]),
            hex::encode(r[2])
        ),
    );
    let ev = kolm_verifier::azure::parse_azure_evidence(
        &std::fs::read(s.join("azure/az-snp-vtpm-milan/evidence.json")).unwrap(),
    )
    .unwrap();
    let quoted = ev.quoted_pcrs();
    write(
        "azure.toml",
        format!(
            "{}[azure.pcrs]\n4 = [\"{}\"]\n9 = [\"{}\"]\n",
            head("\"azure-sev-snp\", \"azure-tdx\""),
            hex::encode(quoted[&4]),
            hex::encode(quoted[&9])
        ),
    );
    let hw = kolm_verifier::snp::SnpReport::from_raw(&ev.hcl.hw_report).unwrap();
    write(
        "paravisor.toml",
        format!(
            "{}[sev_snp]\nmeasurements = [\"{}\"]\n",
            head("\"azure-sev-snp\""),
            hex::encode(hw.measurement())
        ),
    );
    dir.to_path_buf()
}

#[test]
fn explicit_artifact_subcommand_matches_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let art = common::build_default(dir.path());
    let a = kolm_verify().arg(&art).arg("--json").output_within(LIMIT);
    let b = kolm_verify()
        .arg("artifact")
        .arg(&art)
        .arg("--json")
        .output_within(LIMIT);
    assert_eq!(a.status.code(), b.status.code());
    assert_eq!(a.stdout, b.stdout);
}

#[test]
fn cli_bundle_is_a_canonical_zip() {
    let Some(s) = samples() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bundle.zip");
    let st = kolm_verify()
        .args(["collateral", "bundle", "--platform", "nitro", "--out"])
        .arg(&out)
        .arg(s.join("nitro/nitro-euc1-2025-01-06-prod.cose"))
        .status_within(LIMIT);
    assert_eq!(st.code(), Some(0));
    let mut f = std::fs::File::open(&out).unwrap();
    let zip = kolm_format::container::read_canonical_zip(&mut f).unwrap();
    assert_eq!(zip.entries.len(), 1);
    assert_eq!(zip.entries[0].name, kolm_verifier::platform::NITRO_DOC);
}

/// Runs `kolm-verify` with `args`, killing it after `secs` seconds; returns
/// its exit code, stdout and stderr (`None` code: it had to be killed).
fn run_bounded(args: &[&std::ffi::OsStr], secs: u64) -> (Option<i32>, String, String) {
    use std::io::Read as _;
    let mut child = kolm_verify()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.and_then(|s| s.code()), out, err)
}

/// Issue 12 item 9: `--policy /dev/zero` never returned, and a directory
/// given as the artifact was reported REJECTED. Every file the CLI reads is
/// capped and a non-file is an I/O error: exit 2, promptly.
#[test]
fn endless_and_non_file_inputs_exit_2_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let art = common::build_default(dir.path());
    let policy = dir.path().join("dev.toml");
    std::fs::write(&policy, DEV_POLICY).unwrap();
    let os = |s: &str| std::ffi::OsString::from(s);
    let d = dir.path().as_os_str().to_owned();
    let cases: Vec<(Vec<std::ffi::OsString>, &str)> = vec![
        (
            vec![art.clone().into(), os("--policy"), os("/dev/zero")],
            "more than the 1048576-byte cap",
        ),
        (
            vec![art.clone().into(), os("--policy"), d.clone()],
            "a directory",
        ),
        (
            vec![d.clone(), os("--policy"), policy.clone().into()],
            "a directory",
        ),
        (
            vec![os("/dev/zero"), os("--policy"), policy.clone().into()],
            "not a regular file",
        ),
        (
            vec![
                art.clone().into(),
                os("--policy"),
                policy.clone().into(),
                os("--previous"),
                d.clone(),
            ],
            "a directory",
        ),
        (
            vec![
                os("tdx"),
                os("/dev/zero"),
                os("--collateral"),
                os("/dev/zero"),
                os("--at"),
                os("now"),
            ],
            "cap",
        ),
        (
            vec![os("collateral"), os("inspect"), os("/dev/zero")],
            "cap",
        ),
    ];
    for (args, needle) in cases {
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let started = std::time::Instant::now();
        let (code, out, err) = run_bounded(&refs, 20);
        assert_eq!(code, Some(2), "{args:?}: stdout {out} stderr {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!out.contains("REJECTED"), "{args:?}: {out}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{args:?} took {:?}",
            started.elapsed()
        );
    }
}

/// Issue 12 item 5: the report says which instant it judged at and why, in
/// the table and in `--json` (`verified_at_source`).
#[test]
fn judged_at_instant_and_its_source_are_printed() {
    let dir = tempfile::tempdir().unwrap();
    let art = common::build_default(dir.path());
    let policy = dir.path().join("dev.toml");
    std::fs::write(&policy, DEV_POLICY).unwrap();
    let json = |extra: &[&str]| {
        let out = kolm_verify()
            .arg(&art)
            .arg("--policy")
            .arg(&policy)
            .arg("--json")
            .args(extra)
            .output_within(LIMIT);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let doc = json(&[]);
    assert_eq!(doc["verified_at"], "2026-01-02T03:05:06Z");
    assert_eq!(doc["verified_at_source"], "finished_at");
    let doc = json(&["--at", "2027-05-06T07:08:09Z"]);
    assert_eq!(doc["verified_at"], "2027-05-06T07:08:09Z");
    assert_eq!(doc["verified_at_source"], "given");
    let out = kolm_verify()
        .arg(&art)
        .arg("--policy")
        .arg(&policy)
        .output_within(LIMIT);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("verified_at: 2026-01-02T03:05:06Z (the receipt's own time (finished_at)"),
        "{table}"
    );
}
