//! LoRA on the GPU over a frozen [`GpuLlama`]: adapters `A` `[rank, cols]`
//! and `B` `[rows, rank]` on blocks of rows of the stacked weight matrices,
//! effective weight `W0 + scale B A` on those rows.
//!
//! The design keeps the model's own forward and backward untouched (so the
//! full fine-tune path runs the same launches at the same speed): the
//! working weights of each site's rows hold `W0 + scale B A` rounded to
//! `T`, [`GpuLlama::forward_backward`] computes the full weight gradient
//! `dW` as it always does, and the adapters' gradients follow from it
//! exactly, since `W = W0 + s B A` gives
//!
//! - `dA = s B^T dW_rows` `[rank, cols]` and `dB = s dW_rows A^T` `[rows, rank]`.
//!
//! Then a global-norm clip over the adapters' gradients, AdamW on `A` and
//! `B` (`f32`, the adapters are their own masters), and the working rows are
//! rebuilt from the frozen `f32` masters: `W_rows = round_T(W0 + s B A)`.
//! All of this is in `f32` (the `dW` rows are widened first), on the one
//! stream, in site order, so a step repeats bit for bit.
//!
//! Cost: the backward still computes every `dW` (embedding and norms
//! included) that a LoRA-aware backward would skip, about a third of the
//! backward's matrix-product work; the adapter arithmetic itself is three
//! `f32` products of `rank x rows x cols` per site and two elementwise
//! passes over each site's rows (under a millisecond for SmolLM2-135M at
//! rank 16). The base model keeps no AdamW moments
//! ([`GpuLlama::new_frozen`]).

use cudarc::cublas::{CudaBlas, Gemm};

use super::{GpuLlama, Optimizer};
use crate::cpu::AdamWConfig;
use crate::ops::{self, AdamWParam, ClipFactor, matmul};
use crate::{Dtype, Gpu, KernelError, Tensor};

/// One adapter's place: rows `row_offset .. row_offset + rows` of parameter
/// `param` (in [`super::Config::params`] order), `cols` wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoraSite {
    /// Index of the parameter.
    pub param: usize,
    /// First row of the block.
    pub row_offset: usize,
    /// Rows of the block (`B`'s rows).
    pub rows: usize,
    /// The parameter's columns (`A`'s columns).
    pub cols: usize,
}

/// Trainable adapters with their gradients and AdamW state.
#[derive(Debug)]
pub struct GpuLora {
    rank: usize,
    scale: f32,
    sites: Vec<LoraSite>,
    a: Vec<Tensor<f32>>,
    b: Vec<Tensor<f32>>,
    ga: Vec<Tensor<f32>>,
    gb: Vec<Tensor<f32>>,
    ma: Vec<Tensor<f32>>,
    va: Vec<Tensor<f32>>,
    mb: Vec<Tensor<f32>>,
    vb: Vec<Tensor<f32>>,
    /// AdamW's working-copy outputs: the masters are `f32` already, so
    /// these only receive the same values (the multi-tensor kernel always
    /// writes one; they are `rank x (rows + cols)` floats a site).
    copy_a: Vec<Tensor<f32>>,
    copy_b: Vec<Tensor<f32>>,
    /// `f32` `[rows, cols]` blocks, one per distinct site shape: a site's
    /// `dW` rows, then its rebuilt weight rows.
    blocks: Vec<Tensor<f32>>,
    /// Index into `blocks` per site.
    block_of: Vec<usize>,
    step: u32,
    clip: Option<ClipFactor>,
}

impl GpuLora {
    /// Uploads the adapters (`(A, B)` per site, row-major) and rebuilds the
    /// working rows of `model` from them. Refuses a site outside its
    /// parameter or adapters of the wrong size.
    pub fn new<T: Dtype>(
        gpu: &Gpu,
        model: &mut GpuLlama<T>,
        sites: &[LoraSite],
        rank: usize,
        scale: f32,
        adapters: &[(Vec<f32>, Vec<f32>)],
    ) -> Result<Self, KernelError>
    where
        CudaBlas: Gemm<T>,
    {
        const OP: &str = "GpuLora::new";
        let bad = |what: String| Err(KernelError::Unsupported { op: OP, what });
        if rank == 0 || sites.is_empty() || !scale.is_finite() {
            return bad(format!("rank {rank}, {} sites, scale {scale}", sites.len()));
        }
        if adapters.len() != sites.len() {
            return bad(format!(
                "{} adapters for {} sites",
                adapters.len(),
                sites.len()
            ));
        }
        let infos = model.config().params();
        for s in sites {
            let fits = infos.get(s.param).is_some_and(|p| {
                p.shape.len() == 2
                    && p.shape[1] == s.cols
                    && s.rows > 0
                    && s.row_offset
                        .checked_add(s.rows)
                        .is_some_and(|e| e <= p.shape[0])
            });
            if !fits {
                return bad(format!("site {s:?} is not a block of rows of a matrix"));
            }
        }
        let z = |shape: &[usize]| Tensor::<f32>::zeros(gpu, shape);
        let mut lora = Self {
            rank,
            scale,
            sites: sites.to_vec(),
            a: Vec::new(),
            b: Vec::new(),
            ga: Vec::new(),
            gb: Vec::new(),
            ma: Vec::new(),
            va: Vec::new(),
            mb: Vec::new(),
            vb: Vec::new(),
            copy_a: Vec::new(),
            copy_b: Vec::new(),
            blocks: Vec::new(),
            block_of: Vec::new(),
            step: 0,
            clip: None,
        };
        let mut shapes: Vec<[usize; 2]> = Vec::new();
        for (s, (a, b)) in sites.iter().zip(adapters) {
            let (sa, sb) = ([rank, s.cols], [s.rows, rank]);
            lora.a.push(Tensor::from_host(gpu, a, &sa)?);
            lora.b.push(Tensor::from_host(gpu, b, &sb)?);
            for list in [&mut lora.ga, &mut lora.ma, &mut lora.va, &mut lora.copy_a] {
                list.push(z(&sa)?);
            }
            for list in [&mut lora.gb, &mut lora.mb, &mut lora.vb, &mut lora.copy_b] {
                list.push(z(&sb)?);
            }
            let shape = [s.rows, s.cols];
            let i = match shapes.iter().position(|x| *x == shape) {
                Some(i) => i,
                None => {
                    shapes.push(shape);
                    lora.blocks.push(z(&shape)?);
                    shapes.len() - 1
                }
            };
            lora.block_of.push(i);
        }
        lora.refresh(gpu, model)?;
        Ok(lora)
    }

    /// Device bytes [`Self::new`] allocates for `sites` at `rank`, and the
    /// most a step allocates and frees (the clip and AdamW tables).
    pub fn planned_bytes(sites: &[LoraSite], rank: usize) -> u64 {
        let bytes = |numel: usize| numel.max(1) as u64 * 4;
        let mut shapes: Vec<(usize, usize)> = Vec::new();
        let mut total = 0;
        let mut chunks = 0;
        for s in sites {
            // A and B each: master, gradient, two moments, AdamW's copy.
            total += 5 * (bytes(rank * s.cols) + bytes(s.rows * rank));
            chunks += (rank * s.cols).div_ceil(32768) + (s.rows * rank).div_ceil(32768);
            if !shapes.contains(&(s.rows, s.cols)) {
                shapes.push((s.rows, s.cols));
                total += bytes(s.rows * s.cols);
            }
        }
        let tensors = 2 * sites.len();
        total + 2 * (tensors as u64 * 48 + chunks as u64 * 8) + chunks as u64 * 8 + 8
    }

    /// The adapters' rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The sites.
    pub fn sites(&self) -> &[LoraSite] {
        &self.sites
    }

    /// AdamW steps taken on the adapters.
    pub fn steps(&self) -> u32 {
        self.step
    }

    /// `A` per site (`f32`, `[rank, cols]`).
    pub fn a(&self) -> &[Tensor<f32>] {
        &self.a
    }

    /// `B` per site (`f32`, `[rows, rank]`).
    pub fn b(&self) -> &[Tensor<f32>] {
        &self.b
    }

    /// The last step's `(dA, dB)` per site, before clipping.
    pub fn grads(&self) -> (&[Tensor<f32>], &[Tensor<f32>]) {
        (&self.ga, &self.gb)
    }

    /// AdamW's moments: `(m of A, v of A, m of B, v of B)` per site.
    pub fn moments(&self) -> [&[Tensor<f32>]; 4] {
        [&self.ma, &self.va, &self.mb, &self.vb]
    }

    /// The global norm of the adapters' gradients before clipping, of the
    /// last step.
    pub fn last_grad_norm(&self, gpu: &Gpu) -> Result<Option<f32>, KernelError> {
        match &self.clip {
            Some(c) => Ok(Some(c.norm.to_host(gpu)?[0])),
            None => Ok(None),
        }
    }

    /// Puts back adapters and their moments (each a list per site in the
    /// order of [`Self::moments`]) after `step` updates, and rebuilds the
    /// working rows of `model`.
    pub fn load_state<T: Dtype>(
        &mut self,
        gpu: &Gpu,
        model: &mut GpuLlama<T>,
        adapters: &[(Vec<f32>, Vec<f32>)],
        moments: [&[Vec<f32>]; 4],
        step: u32,
    ) -> Result<(), KernelError>
    where
        CudaBlas: Gemm<T>,
    {
        let n = self.sites.len();
        if adapters.len() != n || moments.iter().any(|m| m.len() != n) {
            return Err(KernelError::Unsupported {
                op: "GpuLora::load_state",
                what: format!("state for {} sites, expected {n}", adapters.len()),
            });
        }
        for i in 0..n {
            self.a[i].copy_from_host(gpu, &adapters[i].0)?;
            self.b[i].copy_from_host(gpu, &adapters[i].1)?;
            self.ma[i].copy_from_host(gpu, &moments[0][i])?;
            self.va[i].copy_from_host(gpu, &moments[1][i])?;
            self.mb[i].copy_from_host(gpu, &moments[2][i])?;
            self.vb[i].copy_from_host(gpu, &moments[3][i])?;
        }
        self.step = step;
        self.refresh(gpu, model)
    }

    /// After [`GpuLlama::forward_backward`]: the adapters' gradients from
    /// the full ones, clipping to `opt.max_grad_norm` over the adapters,
    /// AdamW on `A` and `B`, and the working rows rebuilt. The base model is
    /// not updated.
    pub fn optimizer_step<T: Dtype>(
        &mut self,
        gpu: &Gpu,
        model: &mut GpuLlama<T>,
        opt: &Optimizer,
    ) -> Result<(), KernelError>
    where
        CudaBlas: Gemm<T>,
    {
        {
            let grads = model.parts_mut().grads;
            for (i, s) in self.sites.iter().enumerate() {
                let block = &mut self.blocks[self.block_of[i]];
                ops::rows_to_f32(gpu, &grads[s.param], s.row_offset, block)?;
                // dB = s dW A^T, dA = s B^T dW.
                matmul::<f32>(
                    gpu,
                    block,
                    false,
                    &self.a[i],
                    true,
                    &mut self.gb[i],
                    self.scale,
                    0.0,
                )?;
                matmul::<f32>(
                    gpu,
                    &self.b[i],
                    true,
                    block,
                    false,
                    &mut self.ga[i],
                    self.scale,
                    0.0,
                )?;
            }
        }
        let refs: Vec<&Tensor<f32>> = self.ga.iter().chain(&self.gb).collect();
        let clip = ops::clip_grad_norm_multi(gpu, &refs, opt.max_grad_norm)?;
        self.step += 1;
        let config = AdamWConfig {
            lr: opt.lr,
            beta1: opt.beta1,
            beta2: opt.beta2,
            eps: opt.eps,
            weight_decay: opt.weight_decay,
            step: self.step,
        };
        let mut params: Vec<AdamWParam<'_, f32>> = Vec::with_capacity(2 * self.sites.len());
        for (((master, grad), (m, v)), working) in self
            .a
            .iter_mut()
            .zip(&self.ga)
            .zip(self.ma.iter_mut().zip(self.va.iter_mut()))
            .zip(self.copy_a.iter_mut())
            .chain(
                self.b
                    .iter_mut()
                    .zip(&self.gb)
                    .zip(self.mb.iter_mut().zip(self.vb.iter_mut()))
                    .zip(self.copy_b.iter_mut()),
            )
        {
            params.push(AdamWParam {
                master,
                grad,
                m,
                v,
                working,
            });
        }
        ops::adamw_multi(gpu, &mut params, &config, &clip.scale)?;
        self.clip = Some(clip);
        self.refresh(gpu, model)
    }

    /// `W_rows = round_T(W0_rows + s B A)` for every site, `W0` being the
    /// model's frozen `f32` masters.
    fn refresh<T: Dtype>(&mut self, gpu: &Gpu, model: &mut GpuLlama<T>) -> Result<(), KernelError>
    where
        CudaBlas: Gemm<T>,
    {
        let parts = model.parts_mut();
        let (weights, master) = (parts.weights, parts.master);
        for (i, s) in self.sites.iter().enumerate() {
            let block = &mut self.blocks[self.block_of[i]];
            ops::copy_rows_f32(gpu, &master[s.param], s.row_offset, block)?;
            matmul::<f32>(
                gpu, &self.b[i], false, &self.a[i], false, block, self.scale, 1.0,
            )?;
            ops::rows_from_f32(gpu, block, &mut weights[s.param], s.row_offset)?;
        }
        Ok(())
    }
}
