//! `kolm-jobs`: the job binary the supervisor (`kolm-enclave`) execs inside
//! the sandbox; not meant to be run by hand. Its command line is
//! `kolm_format::job_io::JobArgs`:
//!
//! ```text
//! kolm-jobs --spec JOB.toml [--policy POLICY.toml] --input-dir DIR --output-dir DIR
//!           [--checkpoint-dir DIR] [--resume] [--progress none|bar|json]
//!           [--host-available-bytes N]
//! ```
//!
//! Exit status 0: the job wrote its outputs; 1: it failed (a fine-tune
//! leaves `failure.json` saying why); 2: the command line is wrong.

use std::process::ExitCode;

use kolm_format::job_io::JobArgs;

fn main() -> ExitCode {
    let args = match JobArgs::parse(std::env::args_os().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("kolm-jobs: {e} (this binary is run by kolm-enclave)");
            return ExitCode::from(2);
        }
    };
    match kolm_jobs::job::run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kolm-jobs: error: {e}");
            ExitCode::from(1)
        }
    }
}
