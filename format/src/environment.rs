//! `environment.json`: the hardware/software tuple a fine-tune ran on,
//! written by the job (`kolm-jobs`), read back by the supervisor (the GPU
//! facts go into the manifest's `environment.gpu`) and by `kolm-enclave
//! replay` (equality is claimed only on the recorded tuple). Sealed under
//! `outputs/`.
//!
//! What has to be the same for a replay to give the same bytes: floating
//! point results depend on the code (runtime version), the device, the
//! precision, on the CPU the SIMD paths the matrix library picks and its
//! thread count, and on the GPU its model and the driver and library
//! versions.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::manifest::GpuEnvironment;

/// The file's name among the job's outputs.
pub const ENVIRONMENT_FILE: &str = "environment.json";

/// Largest `environment.json` read back.
pub const MAX_TUPLE_BYTES: u64 = 64 * 1024;

/// Why an `environment.json` was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TupleError {
    #[error("{ENVIRONMENT_FILE} is over {MAX_TUPLE_BYTES} bytes")]
    TooLarge,
    #[error("{ENVIRONMENT_FILE}: {0}")]
    Json(serde_json::Error),
}

/// One run's tuple.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tuple {
    /// `kolm-enclave <version>`: the runtime release (the supervisor and
    /// the job binary are built from one workspace, at one version).
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

impl Tuple {
    /// The file's bytes (pretty JSON, fields in declaration order).
    pub fn to_json_bytes(&self) -> Result<Vec<u8>, TupleError> {
        serde_json::to_vec_pretty(self).map_err(TupleError::Json)
    }

    /// The strict reader: at most [`MAX_TUPLE_BYTES`], no unknown field.
    pub fn from_json_bytes(bytes: &[u8]) -> Result<Tuple, TupleError> {
        if u64::try_from(bytes.len()).map_or(true, |n| n > MAX_TUPLE_BYTES) {
            return Err(TupleError::TooLarge);
        }
        serde_json::from_slice(bytes).map_err(TupleError::Json)
    }

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
        let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
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
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn cpu_tuple() -> Tuple {
        Tuple {
            runtime: "kolm-enclave 0.1.0".into(),
            device: "cpu".into(),
            precision: "f32".into(),
            cpu: CpuTuple {
                arch: "x86_64".into(),
                features: vec!["avx2".into()],
                threads: 2,
            },
            gpu: None,
        }
    }

    #[test]
    fn differences_name_each_element() {
        let a = cpu_tuple();
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

    #[test]
    fn the_reader_is_strict_and_round_trips() {
        let a = cpu_tuple();
        let bytes = a.to_json_bytes().unwrap();
        assert_eq!(Tuple::from_json_bytes(&bytes).unwrap(), a);
        let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        v["extra"] = 1.into();
        assert!(Tuple::from_json_bytes(&serde_json::to_vec(&v).unwrap()).is_err());
        let big = vec![b' '; (MAX_TUPLE_BYTES + 1) as usize];
        assert!(matches!(
            Tuple::from_json_bytes(&big),
            Err(TupleError::TooLarge)
        ));
    }
}
