//! CI check: every kernel source compiles with NVRTC for sm_90, with no GPU
//! and no driver. libnvrtc comes from the PyPI wheel `nvidia-cuda-nvrtc`
//! (13.0.x); see docs/kernels.md for the install line.
//!
//! How libnvrtc is found: if this process can already load it, it is used.
//! Otherwise its directory comes from `KOLM_NVRTC_LIB` (the directory, or
//! the library file) or from asking `python3` where the wheel put it, and
//! the test re-runs itself with that directory on `LD_LIBRARY_PATH` (the
//! loader reads that variable only at process start). With no libnvrtc
//! anywhere it prints `SKIP: <reason>`; `KOLM_REQUIRE_NVRTC=1` turns that
//! skip into a failure, for CI jobs that installed the wheel.

use std::path::PathBuf;
use std::process::Command;

use kolm_kernels::compile::{self, SOURCES};

use kolm_testkit::Deadline as _;

/// The most one child of these tests may take: compiling the kernels takes
/// under a minute; a hung one fails with `DEADLINE` (issue 20 section 6).
const LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

const CHILD_MARKER: &str = "KOLM_NVRTC_TEST_CHILD";

/// Every entry point the Rust wrappers launch, per storage type.
const ENTRIES: &[&str] = &[
    "rmsnorm_fwd",
    "rmsnorm_fwd_vec1",
    "rmsnorm_fwd_vec2",
    "rmsnorm_fwd_vec3",
    "rmsnorm_fwd_vec4",
    "rmsnorm_fwd_vec5",
    "rmsnorm_fwd_vec6",
    "rmsnorm_fwd_vec7",
    "rmsnorm_fwd_vec8",
    "rmsnorm_bwd_svec1",
    "rmsnorm_bwd_svec2",
    "rmsnorm_bwd_svec3",
    "rmsnorm_bwd_svec4",
    "rmsnorm_bwd_vec5",
    "rmsnorm_bwd_vec6",
    "rmsnorm_bwd_vec7",
    "rmsnorm_bwd_vec8",
    "rmsnorm_bwd_gvec8x5",
    "rmsnorm_bwd_gvec8x7",
    "rmsnorm_bwd_gvec8x9",
    "rmsnorm_bwd_gvec16x5",
    "rmsnorm_bwd_gvec16x7",
    "rmsnorm_bwd_gvec16x9",
    "swiglu_fwd_vec",
    "xent_fwd_vec",
    "swiglu_bwd_vec",
    "rmsnorm_bwd_dx",
    "rmsnorm_dw_partial",
    "sum_chunks",
    "silu_fwd",
    "silu_bwd",
    "swiglu_fwd",
    "swiglu_bwd",
    "rope",
    "rope_vec",
    "rope_qkv_split",
    "rope_qkv_merge",
    "xent_fwd",
    "xent_bwd",
    "embedding_fwd",
    "embedding_bwd",
    "embedding_fwd_vec",
    "embedding_bwd_vec",
    "embedding_bwd_vec2d",
    "sumsq_partial",
    "scale",
    "adamw",
    "adamw_multi",
    "sumsq_multi",
    "add_inplace",
    "add_inplace_vec",
    "copy_cols",
    "swiglu_fused_fwd",
    "swiglu_fused_bwd",
    "swiglu_fused_fwd_vec",
    "swiglu_fused_bwd_vec",
    "attn_fwd",
    "attn_bwd_delta",
    "attn_bwd_dq",
    "attn_bwd_dkv",
];

fn wheel_lib_dir() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("KOLM_NVRTC_LIB") {
        let p = PathBuf::from(p);
        return Some(if p.is_file() {
            p.parent()?.to_path_buf()
        } else {
            p
        });
    }
    // The wheel installs into the `nvidia` namespace package, under
    // cu13/lib in 13.x (cuda_nvrtc/lib in 12.x).
    let script = r#"
import importlib.util, os
spec = importlib.util.find_spec("nvidia")
for base in (spec.submodule_search_locations if spec else []):
    for sub in ("cu13/lib", "cuda_nvrtc/lib"):
        d = os.path.join(base, sub)
        if os.path.isdir(d) and any(f.startswith("libnvrtc.so") for f in os.listdir(d)):
            print(d)
            raise SystemExit(0)
"#;
    let child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    let out = kolm_testkit::wait_within(child, "python3 finding libnvrtc", LIMIT);
    let dir = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!dir.is_empty()).then(|| PathBuf::from(dir))
}

fn skip(reason: &str) {
    if std::env::var("KOLM_REQUIRE_NVRTC").is_ok_and(|v| v == "1") {
        panic!("KOLM_REQUIRE_NVRTC=1 but: {reason}");
    }
    {
        // Straight to the stderr handle: libtest does not capture it, so
        // the reason shows in every run, not only in failing ones.
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "SKIP: {reason}");
    };
}

#[test]
fn nvrtc_compiles_every_kernel_for_sm90() {
    if !compile::nvrtc_available() {
        if std::env::var_os(CHILD_MARKER).is_some() {
            panic!("libnvrtc still not loadable with LD_LIBRARY_PATH set");
        }
        let Some(dir) = wheel_lib_dir() else {
            skip(
                "libnvrtc is not loadable, KOLM_NVRTC_LIB is unset and python3 finds no nvidia-cuda-nvrtc wheel",
            );
            return;
        };
        let mut path = dir.into_os_string();
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            path.push(":");
            path.push(old);
        }
        let status = Command::new(std::env::current_exe().expect("the test binary's own path"))
            .args([
                "--exact",
                "nvrtc_compiles_every_kernel_for_sm90",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("LD_LIBRARY_PATH", path)
            .env(CHILD_MARKER, "1")
            .status_within(LIMIT);
        assert!(
            status.success(),
            "the NVRTC compile check failed in the re-run"
        );
        return;
    }
    let version = compile::nvrtc_version().expect("nvrtcVersion");
    println!("NVRTC {}.{}", version.0, version.1);
    let mut all = String::new();
    for source in SOURCES {
        let start = std::time::Instant::now();
        let options = compile::options_for_source(&source, 9, 0).expect("sm_90 options");
        let ptx = compile::compile_ptx(source.name, &source.full_text(), &options)
            .unwrap_or_else(|e| panic!("{e}"));
        let entries = ptx.matches(".entry ").count();
        println!(
            "{}: {} entry points, {} bytes of PTX, {:.1} s",
            source.name,
            entries,
            ptx.len(),
            start.elapsed().as_secs_f64()
        );
        assert!(entries > 0, "{} has no entry point", source.name);
        all.push_str(&ptx);
    }
    // Every name the wrappers launch exists, for both storage types.
    for base in ENTRIES {
        for suffix in ["f32", "bf16"] {
            let names = if base.starts_with("attn_") {
                vec![
                    format!("{base}_{suffix}_d64"),
                    format!("{base}_{suffix}_d128"),
                ]
            } else {
                vec![format!("{base}_{suffix}")]
            };
            for name in names {
                assert!(
                    all.contains(&format!(".entry {name}(")),
                    "no entry point {name}"
                );
            }
        }
    }
    for name in [
        "clip_finalize",
        "copy_cols_vec",
        "gpu_spin",
        "attn_fwd_tc_bf16_d64",
        "attn_bwd_dkvq_tc_bf16_d64",
        "attn_bwd_delta_tc_bf16_d64",
        "attn_bwd_dkv_sum_bf16_d64",
        "attn_fwd_wg_bf16_d64",
        "attn_bwd_dkvq_wg_bf16_d64",
    ] {
        assert!(
            all.contains(&format!(".entry {name}(")),
            "no entry point {name}"
        );
    }
}
