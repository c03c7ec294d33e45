//! Issue 20, section 5: mistakes are found before anything starts, and
//! what the user sees is true, complete and said once.
//! - a typo in the job spec makes `kolm-host run` (and `--dry-run`) exit 2
//!   naming the file, the key and the line, and no enclave is started;
//! - every flag of every subcommand of kolm-host, kolm-enclave and
//!   kolm-verify has a description in `--help`;
//! - a missing file is named once, not with its OS error doubled.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kolm_testkit::output_within;

const LIMIT: Duration = Duration::from_secs(60);

fn bin(name: &str) -> PathBuf {
    kolm_testkit::workspace_binary(name)
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The tiny example copied into `dir` with `old` replaced by `new` in its
/// spec (which must be there: no silent no-op edit).
fn tiny_with(dir: &Path, old: &str, new: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/tiny");
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
        }
    }
    let spec = std::fs::read_to_string(dir.join("job.toml")).unwrap();
    assert!(spec.contains(old), "{old:?} is not in the tiny spec");
    std::fs::write(dir.join("job.toml"), spec.replacen(old, new, 1)).unwrap();
    dir.join("job.toml")
}

/// A stand-in enclave that records that it ran (it must not).
fn recording_enclave(dir: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let mark = dir.join("enclave-ran");
    let script = dir.join("fake-enclave");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$@\" >> '{}'\nexit 1\n", mark.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (script, mark)
}

#[test]
fn a_typo_in_the_spec_is_named_by_file_key_and_line_and_nothing_starts() {
    let d = tempfile::tempdir().unwrap();
    let job = tiny_with(d.path(), "warmup_steps = 10", "warmup_step = 10");
    let line = std::fs::read_to_string(&job)
        .unwrap()
        .lines()
        .position(|l| l.starts_with("warmup_step ="))
        .unwrap()
        + 1;
    let (fake, mark) = recording_enclave(d.path());
    for dry in [false, true] {
        let mut cmd = Command::new(bin("kolm-host"));
        cmd.arg("run")
            .arg(&job)
            .args(["--attest", "sim", "--enclave-bin"])
            .arg(&fake)
            .arg("--state")
            .arg(d.path().join("state"))
            .arg("--out")
            .arg(d.path().join("out.zip"));
        if dry {
            cmd.arg("--dry-run");
        }
        let o = output_within(&mut cmd, LIMIT);
        let said = text(&o);
        assert_eq!(o.status.code(), Some(2), "dry run {dry}: {said}");
        assert!(said.contains(&job.display().to_string()), "{said}");
        assert!(said.contains("warmup_step"), "{said}");
        assert!(said.contains(&format!("line {line}")), "{said}");
        assert!(
            !mark.exists(),
            "the enclave was started for an invalid spec"
        );
        assert!(!d.path().join("out.zip").exists());
    }
    // The same job without the typo passes the dry run.
    let good = tempfile::tempdir().unwrap();
    let job = tiny_with(good.path(), "warmup_steps = 10", "warmup_steps = 10");
    let o = output_within(
        Command::new(bin("kolm-host"))
            .arg("run")
            .arg(&job)
            .args(["--dry-run", "--enclave-bin"])
            .arg(&fake),
        LIMIT,
    );
    assert!(o.status.success(), "{}", text(&o));
}

/// The subcommand paths of a clap binary, from its `--help` "Commands:"
/// section, recursively (`help` itself left out).
fn subcommands(binary: &Path, path: &[String]) -> Vec<Vec<String>> {
    let o = output_within(
        Command::new(binary).args(path).arg("--help"),
        Duration::from_secs(20),
    );
    assert!(o.status.success(), "{path:?}: {}", text(&o));
    let help = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut out = vec![path.to_vec()];
    let mut in_commands = false;
    for line in help.lines() {
        if line.trim_end() == "Commands:" {
            in_commands = true;
            continue;
        }
        if in_commands {
            if !line.starts_with("  ") {
                in_commands = false;
                continue;
            }
            let Some(name) = line.split_whitespace().next() else {
                continue;
            };
            // An indented continuation of a description is not a command.
            if line.starts_with("   ") || name == "help" {
                continue;
            }
            let mut sub = path.to_vec();
            sub.push(name.to_owned());
            out.extend(subcommands(binary, &sub));
        }
    }
    out
}

/// Flags in a `--help` "Options:" section that have no description: an
/// option line (`  -x, --flag <V>` or `      --flag`) that is neither
/// followed on its own line by a description nor carries one.
fn undescribed(help: &str) -> Vec<String> {
    let lines: Vec<&str> = help.lines().collect();
    let mut missing = Vec::new();
    let mut in_options = false;
    for (i, line) in lines.iter().enumerate() {
        if line.trim_end().ends_with(':') && !line.starts_with(' ') {
            in_options = line.trim_end() == "Options:" || line.trim_end() == "Arguments:";
            continue;
        }
        let t = line.trim_start();
        let indent = line.len() - t.len();
        // Option heads are indented 2 (`  -h, --help`) or 6 (`      --x`);
        // deeper lines continue a description.
        if !in_options
            || indent > 6
            || !(t.starts_with('-') || t.starts_with('<') || t.starts_with('['))
        {
            continue;
        }
        // clap writes "  --flag <V>  Description" on one line, or the
        // description on the next lines, indented deeper. A default or the
        // possible values alone (`[default: x]`) describe nothing.
        let head_end = t.find("  ").unwrap_or(t.len());
        let inline = t[head_end..].trim();
        let inline = if inline.starts_with('[') { "" } else { inline };
        let next_deeper = lines.get(i + 1).is_some_and(|n| {
            let nt = n.trim_start();
            n.len() - nt.len() > indent && !nt.is_empty() && !nt.starts_with('[')
        });
        if inline.is_empty() && !next_deeper {
            missing.push(t[..head_end].to_owned());
        }
    }
    missing
}

#[test]
fn every_flag_of_every_subcommand_has_a_description() {
    let mut missing = Vec::new();
    for name in ["kolm-host", "kolm-enclave", "kolm-verify"] {
        let binary = bin(name);
        for path in subcommands(&binary, &[]) {
            let o = output_within(
                Command::new(&binary).args(&path).arg("--help"),
                Duration::from_secs(20),
            );
            for flag in undescribed(&String::from_utf8_lossy(&o.stdout)) {
                missing.push(format!("{name} {}: {flag}", path.join(" ")));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "flags without a description:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_help_checker_finds_an_undescribed_flag() {
    let help = "Usage: x\n\nOptions:\n      --name <NAME>  [default: local]\n      --bare\n      \
                --ok  Said.\n      --long <L>\n          Said below.\n          \
                [default: x]\n      --only <O>\n          [default: y]\n  -h, --help  Print help\n";
    assert_eq!(undescribed(help), ["--name <NAME>", "--bare", "--only <O>"]);
}

#[test]
fn a_missing_file_is_named_once_not_with_its_os_error_doubled() {
    // Each of these said its OS error twice (`...: No such file or
    // directory (os error 2): No such file or directory (os error 2)`).
    let d = tempfile::tempdir().unwrap();
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/tiny/job.toml");
    let missing = d.path().join("missing");
    let socket = format!("unix:{}", missing.join("s.sock").display());
    let cases: Vec<(&str, Vec<std::ffi::OsString>)> = vec![
        (
            "kolm-host",
            vec!["run".into(), missing.join("job.toml").into()],
        ),
        (
            "kolm-host",
            vec![
                "run".into(),
                tiny.clone().into(),
                "--policy".into(),
                missing.clone().into(),
            ],
        ),
        (
            "kolm-host",
            vec![
                "run".into(),
                tiny.into(),
                "--connect".into(),
                socket.clone().into(),
            ],
        ),
        ("kolm-verify", vec![missing.join("a.zip").into()]),
        (
            "kolm-enclave",
            vec![
                "start".into(),
                "--attest".into(),
                "none".into(),
                "--state".into(),
                d.path().join("state").into(),
                "--listen".into(),
                socket.into(),
            ],
        ),
    ];
    // A regular file where a directory or a program is expected.
    let file = d.path().join("a-file");
    std::fs::write(&file, b"not a program").unwrap();
    let mut cases = cases;
    cases.push((
        "kolm-host",
        vec!["status".into(), "--runtime-dir".into(), file.clone().into()],
    ));
    // A state directory under a regular file: the chain state's error
    // came through the run's, its source printed again at each level.
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/tiny");
    cases.push((
        "kolm-enclave",
        vec![
            "run".into(),
            "--attest".into(),
            "none".into(),
            "--spec".into(),
            examples.join("job.toml").into(),
            "--input-dir".into(),
            examples.clone().into(),
            "--policy".into(),
            examples.join("policy.toml").into(),
            "--out".into(),
            file.join("state").into(),
        ],
    ));
    cases.push((
        "kolm-host",
        vec![
            "launch".into(),
            "--runtime-dir".into(),
            d.path().join("run").into(),
            "--enclave-bin".into(),
            file.into(),
        ],
    ));
    for (name, args) in cases {
        let o = output_within(Command::new(bin(name)).args(&args), LIMIT);
        let said = text(&o);
        assert_eq!(o.status.code(), Some(2), "{name} {args:?}: {said}");
        assert_eq!(
            said.matches("(os error").count(),
            1,
            "{name} {args:?}: {said}"
        );
    }
}

#[test]
fn kolm_enclave_run_defaults_to_attest_auto_like_the_others() {
    let present = [
        "/dev/nsm",
        "/dev/sev-guest",
        "/sys/kernel/config/tsm/report",
    ]
    .iter()
    .any(|p| Path::new(p).exists());
    if present {
        kolm_testkit::skip("this machine has a TEE device: auto would use it");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let o = output_within(
        Command::new(bin("kolm-enclave"))
            .arg("run")
            .arg("--out")
            .arg(d.path()),
        LIMIT,
    );
    let said = text(&o);
    // `auto` on a machine without a TEE: a clear error naming the choices,
    // not a silent `none`.
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(said.contains("no TEE device found"), "{said}");
    assert!(said.contains("--attest sim or --attest none"), "{said}");
}

/// The README's main command with `--json`: the run ends with a summary
/// of what it produced (the sealed metrics and the policy's gates).
#[test]
fn the_tiny_fine_tune_ends_with_a_summary_of_its_result() {
    let d = tempfile::tempdir().unwrap();
    let job = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/tiny/job.toml");
    let o = output_within(
        Command::new(bin("kolm-host"))
            .arg("run")
            .arg(&job)
            .args(["--attest", "sim", "--json", "--enclave-bin"])
            .arg(bin("kolm-enclave"))
            .arg("--state")
            .arg(d.path().join("state"))
            .arg("--out")
            .arg(d.path().join("tiny.zip"))
            .env("KOLM_SIM_ROOT_DIR", d.path().join("sim-root")),
        Duration::from_secs(900),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let summary = events
        .iter()
        .find(|e| e["event"] == "summary")
        .unwrap_or_else(|| panic!("no summary event: {events:?}"));
    let perplexity = summary["perplexity"].as_f64().unwrap();
    let base = summary["base_perplexity"].as_f64().unwrap();
    assert!(perplexity > 1.0 && perplexity < base, "{summary}");
    assert!(summary["k_score"].as_f64().is_some(), "{summary}");
    assert!(summary["tokens_per_s"].as_f64().unwrap() > 0.0, "{summary}");
    assert_eq!(summary["verified"], true, "{summary}");
    let gates = summary["gates"].as_array().unwrap();
    let metrics: Vec<_> = gates
        .iter()
        .map(|g| g["metric"].as_str().unwrap())
        .collect();
    assert_eq!(metrics, ["perplexity", "k_score"], "{summary}");
    assert!(gates.iter().all(|g| g["pass"] == true), "{summary}");
    // Before the final `done` line.
    let at = |name: &str| events.iter().position(|e| e["event"] == name).unwrap();
    assert!(at("summary") < at("done"));
    // The training progress, relayed while it ran: steps rising to the
    // spec's 100, a loss, a rate, a time left; the last step always.
    let train: Vec<_> = events.iter().filter(|e| e["event"] == "train").collect();
    assert!(!train.is_empty(), "no train events: {events:?}");
    let steps: Vec<u64> = train.iter().map(|e| e["step"].as_u64().unwrap()).collect();
    assert!(steps.windows(2).all(|w| w[0] < w[1]), "{steps:?}");
    assert_eq!(steps.last(), Some(&100), "{steps:?}");
    for e in &train {
        assert_eq!(e["steps"], 100, "{e}");
        let loss = e["loss"].as_f64().unwrap();
        assert!(loss > 0.0 && loss < 20.0, "{e}");
        assert!(e["tokens_per_s"].as_u64().unwrap() > 0, "{e}");
        assert!(e["eta_s"].as_u64().is_some(), "{e}");
    }
    assert!(at("train") < at("summary"));
}

/// `bundle inspect` of a bundle whose files are no longer valid together
/// says so, naming the window and now, and exits 1; at an instant inside
/// the window it passes.
#[test]
fn bundle_inspect_says_when_the_bundle_has_expired() {
    let Some(root) = kolm_testkit::samples("tdx/expected.json") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    std::fs::copy(
        root.join("tdx/v4-b0c06f-dcapqvl-2025-06/collateral.json"),
        d.path().join("tdx-collateral.json"),
    )
    .unwrap();
    let inspect = |extra: &[&str]| {
        output_within(
            Command::new(bin("kolm-host"))
                .args(["bundle", "inspect"])
                .arg(d.path())
                .args(extra),
            LIMIT,
        )
    };
    // Its PCK CRL, TCB info and QE identity hold for 30 days from
    // 2025-06-19: long past.
    let o = inspect(&[]);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(1), "{said}");
    assert!(said.contains("EXPIRED"), "{said}");
    assert!(
        said.contains("from 2025-06-19T10:32:27Z to 2025-07-19T10:00:35Z"),
        "{said}"
    );
    assert!(said.contains("and now is "), "{said}");
    let o = inspect(&["--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["usable_now"], false, "{v}");
    assert_eq!(o.status.code(), Some(1));
    let o = inspect(&["--at", "2025-07-01T00:00:00Z"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = inspect(&["--at", "2025-01-01T00:00:00Z"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("not valid yet"), "{}", text(&o));
}
