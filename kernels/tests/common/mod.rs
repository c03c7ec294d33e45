//! Helpers shared by the GPU test binaries (`gpu.rs`, `llama.rs`).

use std::sync::OnceLock;

use kolm_kernels::{Gpu, gpu_unavailable_reason};

/// The GPU, opened and warmed once per test binary; `None` (after printing
/// `SKIP: <reason>`) when there is none. `KOLM_REQUIRE_GPU=1` turns a
/// missing GPU into a failure.
pub fn gpu() -> Option<&'static Gpu> {
    static GPU: OnceLock<Option<Gpu>> = OnceLock::new();
    let gpu = GPU.get_or_init(|| {
        if let Some(reason) = gpu_unavailable_reason() {
            if std::env::var("KOLM_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("KOLM_REQUIRE_GPU=1 but: {reason}");
            }
            return None;
        }
        let gpu = Gpu::new(0).expect("a GPU is visible, so opening it must work");
        gpu.warm_up().expect("every kernel compiles and loads");
        Some(gpu)
    });
    if gpu.is_none() {
        // Straight to the stderr handle: libtest does not capture it, so
        // the reason shows in every run, not only in failing ones.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: {}",
            gpu_unavailable_reason().unwrap_or_default()
        );
    }
    gpu.as_ref()
}

/// `||got - want|| / ||want||`; NaN (a poisoned element left unwritten)
/// becomes infinity, so it never passes a tolerance.
pub fn rel_l2(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let (mut num, mut den) = (0.0, 0.0);
    for (a, b) in got.iter().zip(want) {
        num += (a - b) * (a - b);
        den += b * b;
    }
    let e = (num / den.max(f64::MIN_POSITIVE)).sqrt();
    if e.is_nan() { f64::INFINITY } else { e }
}
