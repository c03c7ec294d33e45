//! `--platform nitro`: the `nitro-cli run-enclave` invocation.
//!
//! Options as documented in the AWS Nitro Enclaves User Guide,
//! "nitro-cli run-enclave" (cmd-nitro-run-enclave): `--eif-path`,
//! `--cpu-count`, `--memory` (MiB), `--enclave-cid`, `--debug-mode`.
//! `run-enclave` returns once the enclave is started and prints a JSON
//! object whose `EnclaveID` names it for `nitro-cli terminate-enclave
//! --enclave-id ID` (same guide, "nitro-cli terminate-enclave").
//!
//! What is measured: the EIF (PCR0..2: kernel, init, application; PCR8 the
//! signing certificate if signed). The CPU count, memory and CID are not
//! measured: the host chooses them freely, which can starve or refuse the
//! enclave but not change what it runs. `--debug-mode` is not in the PCRs
//! either, but a debug enclave's attestation document has all-zero PCRs,
//! which the verifier rejects against any policy that names a measurement.

use std::path::PathBuf;

use super::recipe::{self, Recipe, RecipeError, Stop};

/// The vsock CID of the parent instance as an enclave sees it
/// (`VMADDR_CID_PARENT`): not an enclave's.
const PARENT_CID: u32 = 3;

/// `--platform nitro` options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NitroOptions {
    /// The `nitro-cli` program.
    pub nitro_cli: String,
    /// The enclave image file (`--eif`).
    pub eif: Option<PathBuf>,
    /// vCPUs (`--cpus`).
    pub cpus: u32,
    /// Memory in MiB (`--memory-mib`).
    pub memory_mib: u64,
    /// The enclave's vsock CID (`--cid`).
    pub cid: u32,
    /// The enclave service's vsock port (`--port`).
    pub port: u32,
    /// `--dangerous-debug-enclave`: start it with `--debug-mode`.
    pub dangerous_debug: bool,
}

/// The `run-enclave` command line.
pub fn recipe(o: &NitroOptions) -> Result<Recipe, RecipeError> {
    let eif = o.eif.as_deref().ok_or(RecipeError::Missing {
        flag: "--eif",
        platform: "nitro",
    })?;
    let eif = recipe::existing_file("--eif", eif)?;
    recipe::check_cpus("--cpus", o.cpus)?;
    recipe::check_memory("--memory-mib", o.memory_mib)?;
    recipe::check_cid("--cid", o.cid)?;
    if o.cid == PARENT_CID {
        return Err(RecipeError::ReservedCid {
            flag: "--cid",
            value: o.cid,
            extra: "; 3 is the parent instance on Nitro",
        });
    }
    let connect = recipe::vsock(o.cid, o.port)?;
    let mut argv = vec![
        o.nitro_cli.clone(),
        "run-enclave".into(),
        "--eif-path".into(),
        eif,
        "--cpu-count".into(),
        o.cpus.to_string(),
        "--memory".into(),
        o.memory_mib.to_string(),
        "--enclave-cid".into(),
        o.cid.to_string(),
    ];
    if o.dangerous_debug {
        argv.push("--debug-mode".into());
    }
    Ok(Recipe {
        argv,
        connect,
        stop: Stop::NitroTerminate {
            program: o.nitro_cli.clone(),
        },
    })
}

/// What `run-enclave` printed that the host needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    pub enclave_id: String,
    pub cid: u64,
}

/// Why `run-enclave`'s output names no enclave.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunOutputError {
    /// Not a JSON object with a text `EnclaveID` and a numeric
    /// `EnclaveCID`.
    // The cause is part of the message, not a `source`: shown with
    // anyhow's `{:#}`, a source would print it twice.
    #[error("its output is not the run-enclave JSON: {error}")]
    NotRunEnclaveJson { error: serde_json::Error },
    /// `EnclaveID` is empty or not letters, digits and `-`.
    #[error("EnclaveID {id:?} is not an enclave id")]
    EnclaveId { id: String },
}

/// Reads `run-enclave`'s JSON output: an object with `EnclaveID` (text)
/// and `EnclaveCID` (number). Other keys are nitro-cli's business.
pub fn parse_run_output(stdout: &[u8]) -> Result<Started, RunOutputError> {
    #[derive(serde::Deserialize)]
    struct Out {
        #[serde(rename = "EnclaveID")]
        enclave_id: String,
        #[serde(rename = "EnclaveCID")]
        enclave_cid: u64,
    }
    let out: Out = serde_json::from_slice(stdout)
        .map_err(|error| RunOutputError::NotRunEnclaveJson { error })?;
    let id_ok = !out.enclave_id.is_empty()
        && out
            .enclave_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !id_ok {
        return Err(RunOutputError::EnclaveId { id: out.enclave_id });
    }
    Ok(Started {
        enclave_id: out.enclave_id,
        cid: out.enclave_cid,
    })
}

/// `nitro-cli terminate-enclave --enclave-id ID`.
pub fn terminate_argv(program: &str, enclave_id: &str) -> Vec<String> {
    vec![
        program.to_string(),
        "terminate-enclave".into(),
        "--enclave-id".into(),
        enclave_id.to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(eif: PathBuf) -> NitroOptions {
        NitroOptions {
            nitro_cli: "nitro-cli".into(),
            eif: Some(eif),
            cpus: 2,
            memory_mib: 4096,
            cid: 16,
            port: recipe::DEFAULT_PORT,
            dangerous_debug: false,
        }
    }

    fn eif() -> (tempfile::TempDir, PathBuf, String) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kolm.eif");
        std::fs::write(&p, b"eif").unwrap();
        let abs = std::fs::canonicalize(&p).unwrap().display().to_string();
        (dir, p, abs)
    }

    #[test]
    fn typical_and_minimal_command_lines_are_exact() {
        let (_d, p, abs) = eif();
        let r = recipe(&options(p.clone())).unwrap();
        assert_eq!(
            r.argv,
            [
                "nitro-cli",
                "run-enclave",
                "--eif-path",
                abs.as_str(),
                "--cpu-count",
                "2",
                "--memory",
                "4096",
                "--enclave-cid",
                "16"
            ]
        );
        assert_eq!(r.connect.to_string(), "vsock://16:5005");
        assert_eq!(
            r.stop,
            Stop::NitroTerminate {
                program: "nitro-cli".into()
            }
        );
        // Minimal: one vCPU, the least memory, another port; debug asked.
        let o = NitroOptions {
            nitro_cli: "/opt/nitro-cli".into(),
            cpus: 1,
            memory_mib: recipe::MIN_MEMORY_MIB,
            cid: 4,
            port: 1,
            dangerous_debug: true,
            ..options(p)
        };
        let r = recipe(&o).unwrap();
        assert_eq!(
            r.argv,
            [
                "/opt/nitro-cli",
                "run-enclave",
                "--eif-path",
                abs.as_str(),
                "--cpu-count",
                "1",
                "--memory",
                "256",
                "--enclave-cid",
                "4",
                "--debug-mode"
            ]
        );
        assert_eq!(r.connect.to_string(), "vsock://4:1");
    }

    #[test]
    fn refusals_name_the_flag() {
        let (_d, p, _) = eif();
        let base = options(p);
        let cases: [(NitroOptions, &str); 6] = [
            (
                NitroOptions {
                    eif: None,
                    ..base.clone()
                },
                "--eif is required",
            ),
            (
                NitroOptions {
                    eif: Some("/nonexistent.eif".into()),
                    ..base.clone()
                },
                "--eif /nonexistent.eif",
            ),
            (
                NitroOptions {
                    cid: 2,
                    ..base.clone()
                },
                "--cid 2: CIDs 0, 1 and 2 are reserved",
            ),
            (
                NitroOptions {
                    cid: 3,
                    ..base.clone()
                },
                "3 is the parent instance",
            ),
            (
                NitroOptions {
                    memory_mib: 64,
                    ..base.clone()
                },
                "--memory-mib 64: below the minimum",
            ),
            (
                NitroOptions {
                    cpus: 0,
                    ..base.clone()
                },
                "--cpus 0",
            ),
        ];
        for (o, want) in cases {
            let e = recipe(&o).unwrap_err().to_string();
            assert!(e.contains(want), "{e:?} lacks {want:?}");
        }
    }

    #[test]
    fn run_enclave_output_is_read_strictly() {
        let out = br#"{"EnclaveName":"kolm","EnclaveID":"i-0123456789abcdef0-enc0123456789abcdef","ProcessID":42,"EnclaveCID":16,"NumberOfCPUs":2,"CPUIDs":[1,3],"MemoryMiB":4096}"#;
        let s = parse_run_output(out).unwrap();
        assert_eq!(s.enclave_id, "i-0123456789abcdef0-enc0123456789abcdef");
        assert_eq!(s.cid, 16);
        assert!(parse_run_output(b"Start allocating memory...").is_err());
        assert!(parse_run_output(br#"{"EnclaveID":"a b","EnclaveCID":16}"#).is_err());
        assert!(parse_run_output(br#"{"EnclaveCID":16}"#).is_err());
        assert_eq!(
            terminate_argv("nitro-cli", "i-1-enc2"),
            ["nitro-cli", "terminate-enclave", "--enclave-id", "i-1-enc2"]
        );
    }
}
