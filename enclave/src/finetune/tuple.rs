//! The hardware/software tuple a fine-tune ran on (`environment.json`):
//! what has to be the same for a replay to give the same bytes. Floating
//! point results depend on the code (runtime version), the device, the
//! precision, on the CPU the SIMD paths the matrix library picks and its
//! thread count, and on the GPU its model and the driver and library
//! versions.

use std::collections::BTreeMap;

use kolm_format::manifest::GpuEnvironment;
use serde::{Deserialize, Serialize};

/// Largest `environment.json` read back.
pub const MAX_TUPLE_BYTES: u64 = 64 * 1024;

/// One run's tuple.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tuple {
    /// `kolm-enclave <version>`.
    pub runtime: String,
    /// `cpu` or `gpu`.
    pub device: String,
    /// `f32` or `bf16`.
    pub precision: String,
    pub cpu: CpuTuple,
    /// The GPU's, for a GPU job.
    pub gpu: Option<GpuEnvironment>,
}

/// The CPU facts that change `f32` results.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuTuple {
    pub arch: String,
    /// SIMD features the matrix kernels dispatch on, present ones only.
    pub features: Vec<String>,
    /// Threads the CPU matrix library uses.
    pub threads: usize,
}

impl CpuTuple {
    /// This machine's.
    pub fn current() -> CpuTuple {
        let mut features = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            for (name, on) in [
                ("avx", std::arch::is_x86_feature_detected!("avx")),
                ("avx2", std::arch::is_x86_feature_detected!("avx2")),
                ("fma", std::arch::is_x86_feature_detected!("fma")),
                ("f16c", std::arch::is_x86_feature_detected!("f16c")),
                ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
            ] {
                if on {
                    features.push(name.to_owned());
                }
            }
        }
        CpuTuple {
            arch: std::env::consts::ARCH.to_owned(),
            features,
            threads: candle_core::utils::get_num_threads(),
        }
    }
}

impl Tuple {
    /// The elements that differ between `self` (recorded) and `other`
    /// (now), each as `element: recorded -> now`; empty when the tuples
    /// are the same.
    pub fn differences(&self, other: &Tuple) -> Vec<String> {
        let mut out = Vec::new();
        let mut cmp = |k: &str, a: String, b: String| {
            if a != b {
                out.push(format!("{k}: {a} -> {b}"));
            }
        };
        cmp("runtime", self.runtime.clone(), other.runtime.clone());
        cmp("device", self.device.clone(), other.device.clone());
        cmp("precision", self.precision.clone(), other.precision.clone());
        cmp("cpu.arch", self.cpu.arch.clone(), other.cpu.arch.clone());
        if self.device == "cpu" {
            // Only the CPU path's results depend on these.
            cmp(
                "cpu.features",
                self.cpu.features.join(","),
                other.cpu.features.join(","),
            );
            cmp(
                "cpu.threads",
                self.cpu.threads.to_string(),
                other.cpu.threads.to_string(),
            );
        }
        let gpu = |g: &Option<GpuEnvironment>| -> BTreeMap<String, String> {
            let mut m = BTreeMap::new();
            if let Some(g) = g {
                m.insert("gpu.devices".into(), g.devices.join(", "));
                m.insert("gpu.driver_version".into(), g.driver_version.clone());
                m.insert("gpu.cuda_version".into(), g.cuda_version.clone());
                for (k, v) in &g.libraries {
                    m.insert(format!("gpu.libraries.{k}"), v.clone());
                }
            }
            m
        };
        let (a, b) = (gpu(&self.gpu), gpu(&other.gpu));
        let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        for k in keys {
            let none = || "(none)".to_owned();
            cmp(
                k,
                a.get(k).cloned().unwrap_or_else(none),
                b.get(k).cloned().unwrap_or_else(none),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_each_element() {
        let a = Tuple {
            runtime: "kolm-enclave 0.1.0".into(),
            device: "cpu".into(),
            precision: "f32".into(),
            cpu: CpuTuple {
                arch: "x86_64".into(),
                features: vec!["avx2".into()],
                threads: 2,
            },
            gpu: None,
        };
        assert!(a.differences(&a).is_empty());
        let mut b = a.clone();
        b.cpu.threads = 16;
        b.cpu.features.push("avx512f".into());
        let d = a.differences(&b);
        assert_eq!(
            d,
            ["cpu.features: avx2 -> avx2,avx512f", "cpu.threads: 2 -> 16"]
        );
        let mut g = a.clone();
        g.device = "gpu".into();
        let mut h = g.clone();
        h.cpu.threads = 16;
        assert!(
            g.differences(&h).is_empty(),
            "threads do not matter on the GPU"
        );
        h.gpu = Some(GpuEnvironment {
            devices: vec!["NVIDIA H100".into()],
            driver_version: "580".into(),
            cuda_version: "13.0".into(),
            libraries: BTreeMap::new(),
        });
        assert_eq!(g.differences(&h).len(), 3);
    }
}
