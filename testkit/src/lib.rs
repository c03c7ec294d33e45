//! Test support shared by every crate's tests; a dev-dependency only.
//!
//! The real hardware evidence lives outside the repository, in
//! `../shared/attestation-samples/` beside the checkout (or wherever
//! [`SAMPLES_ENV`] points). Tests ask [`samples`] for it: when it is absent
//! they print `SKIP: ...` and return, unless [`REQUIRE_ENV`] is `1` (CI sets
//! it), in which case the absence is a test failure, so the samples can never
//! vanish silently.
//!
//! The real model and corpus (issue 14) are found the same way by
//! [`assets`]: `$KOLM_ASSETS` (default `~/.cache/kolm`, where
//! `scripts/fetch-assets.sh` puts them), `SKIP` when absent unless
//! [`REQUIRE_ASSETS_ENV`] is `1`.
#![forbid(unsafe_code)]

use std::path::PathBuf;

/// Environment variable naming the samples folder.
pub const SAMPLES_ENV: &str = "KOLM_SAMPLES_DIR";

/// Set to `1` to make a missing samples folder fail instead of skip.
pub const REQUIRE_ENV: &str = "KOLM_REQUIRE_SAMPLES";

/// The samples folder: [`SAMPLES_ENV`], else `../shared/attestation-samples`
/// beside the workspace.
pub fn samples_root() -> PathBuf {
    std::env::var_os(SAMPLES_ENV).map_or_else(
        || {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../shared/attestation-samples"
            ))
        },
        PathBuf::from,
    )
}

/// The samples folder if `marker` (a file path relative to it, such as
/// `nitro/expected.json`) exists. Otherwise prints `SKIP` and returns `None`;
/// panics instead when [`REQUIRE_ENV`] is `1`.
pub fn samples(marker: &str) -> Option<PathBuf> {
    let dir = samples_root();
    if dir.join(marker).is_file() {
        return Some(dir);
    }
    let why = format!(
        "attestation samples not found: {} is missing (set {SAMPLES_ENV})",
        dir.join(marker).display()
    );
    if std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1") {
        panic!("{why}, and {REQUIRE_ENV}=1 says they must be there");
    }
    skip(&why);
    None
}

/// Environment variable naming the asset cache (`scripts/fetch-assets.sh`).
pub const ASSETS_ENV: &str = "KOLM_ASSETS";

/// Set to `1` to make missing assets fail instead of skip.
pub const REQUIRE_ASSETS_ENV: &str = "KOLM_REQUIRE_ASSETS";

/// The asset cache: [`ASSETS_ENV`], else `~/.cache/kolm` (the default of
/// `scripts/fetch-assets.sh`); `None` when neither is set.
pub fn assets_root() -> Option<PathBuf> {
    std::env::var_os(ASSETS_ENV)
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/kolm")))
}

/// The path of asset `file` (relative to the cache, such as
/// `smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`) if it exists. Otherwise prints
/// `SKIP` with the reason and returns `None`; panics instead when
/// [`REQUIRE_ASSETS_ENV`] is `1`.
pub fn assets(file: &str) -> Option<PathBuf> {
    let why = match assets_root() {
        Some(root) if root.join(file).is_file() => return Some(root.join(file)),
        Some(root) => format!(
            "asset {} is missing (run scripts/fetch-assets.sh, or set {ASSETS_ENV})",
            root.join(file).display()
        ),
        None => format!("no asset cache: neither {ASSETS_ENV} nor HOME is set"),
    };
    if std::env::var(REQUIRE_ASSETS_ENV).is_ok_and(|v| v == "1") {
        panic!("{why}, and {REQUIRE_ASSETS_ENV}=1 says it must be there");
    }
    skip(&why);
    None
}

/// Prints `SKIP: <why>` straight to the stderr handle: libtest does not
/// capture it, so the reason shows in every run, not only in failing ones.
pub fn skip(why: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIP: {why}");
}

/// A binary of this workspace that `cargo test` built into the same target
/// profile directory as the running test (the one above its `deps/`), such as
/// `kolm-enclave`. Panics, naming the build command, when it is missing.
pub fn workspace_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let path = exe
        .parent()
        .and_then(std::path::Path::parent)
        .map(|profile| profile.join(name))
        .unwrap_or_else(|| panic!("{} has no profile directory", exe.display()));
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo build -p {name}`",
        path.display()
    );
    path
}
