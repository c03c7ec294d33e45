//! Command-line pieces shared by `kolm-kernels-bench` and `kolm-train-bench`.

use anyhow::{Context, Result};
use kolm_kernels::Gpu;

/// Which kernels run bf16, head dimension 64 attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AttentionKernels {
    /// The device's default: `wgmma` on a compute capability 9.0 GPU
    /// (H100, H200), `mma.sync` elsewhere.
    Auto,
    /// The Hopper `wgmma` kernels (attention_wg_*.cu); an error on a GPU
    /// without sm_90a.
    Wgmma,
    /// The `mma.sync` kernels (attention_tc.cu), on any GPU.
    MmaSync,
}

impl AttentionKernels {
    /// Applies the choice to `gpu` and says on stderr which kernels run.
    pub fn apply(self, gpu: &Gpu) -> Result<()> {
        match self {
            Self::Auto => {}
            Self::Wgmma => gpu.set_wgmma_attention(true).context("--attention wgmma")?,
            Self::MmaSync => gpu.set_wgmma_attention(false)?,
        }
        eprintln!(
            "attention kernels: {}",
            if gpu.wgmma_attention() {
                "wgmma"
            } else {
                "mma.sync"
            }
        );
        Ok(())
    }
}
