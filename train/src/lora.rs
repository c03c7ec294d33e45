//! Where LoRA adapters sit and how they start, shared by both backends so
//! that a CPU run and a GPU run train the same adapters from the same
//! numbers.
//!
//! A target projection is a block of rows of one of the stacked kernel
//! matrices (`wqkv` holds q, k, v; `gate_up` holds gate, up). Its adapter
//! is `A` `[rank, in]` and `B` `[rows, rank]`, and the effective weight is
//! `W + (alpha / rank) B A` on those rows. `A` starts uniform in
//! `[-1/sqrt(in), 1/sqrt(in)]` from the job's seed (Kaiming-uniform with
//! `a = sqrt(5)`, as PEFT does), `B` starts at zero, so step 0 computes the
//! base model exactly.

use kolm_kernels::rng::SplitMix64;
use kolm_model_config::{Config, slot};

/// The canonical target names (`kolm_format::job_spec::LORA_TARGETS`).
pub const TARGETS: [&str; 7] = kolm_format::job_spec::LORA_TARGETS;

/// Mixed into the job's seed so the adapter stream differs from any other
/// stream drawn from the same seed.
const SEED_SALT: u64 = 0x6c6f_7261_5f69_6e69; // "lora_ini"

/// One adapter: which rows of which parameter it adds to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// `layers.{l}.{target}`: the checkpoint and artifact name.
    pub name: String,
    /// Index into `Config::params`.
    pub param: usize,
    /// First row of the block within that parameter.
    pub row_offset: usize,
    /// Rows of the block (`B`'s rows).
    pub rows: usize,
    /// Input width (`A`'s columns).
    pub cols: usize,
}

/// A LoRA method that [`Layout::new`] refuses.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// A rank of 0.
    #[error("a LoRA rank of 0")]
    ZeroRank,
    /// An alpha that is not a positive finite number.
    #[error("LoRA alpha {alpha}: must be > 0")]
    BadAlpha { alpha: f64 },
    /// A target outside [`TARGETS`].
    #[error("LoRA target {target:?} (known: {})", TARGETS.join(" "))]
    UnknownTarget { target: String },
    /// No target at all.
    #[error("no LoRA target")]
    NoTarget,
}

/// The adapters of a LoRA job, in layer order then canonical target order.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub rank: usize,
    pub alpha: f64,
    pub sites: Vec<Site>,
}

impl Layout {
    /// The sites of `targets` (canonical names) in every layer of `cfg`.
    /// Refuses an unknown target or a rank of 0.
    pub fn new(
        cfg: &Config,
        rank: usize,
        alpha: f64,
        targets: &[String],
    ) -> Result<Layout, LayoutError> {
        if rank == 0 {
            return Err(LayoutError::ZeroRank);
        }
        if !(alpha.is_finite() && alpha > 0.0) {
            return Err(LayoutError::BadAlpha { alpha });
        }
        let (d, qd, kvd, ffn) = (
            cfg.d_model(),
            cfg.q_heads() * cfg.head_dim(),
            cfg.kv_heads() * cfg.head_dim(),
            cfg.ffn(),
        );
        let mut sites = Vec::new();
        for l in 0..cfg.layers() {
            let base = Config::layer_base(l);
            for t in TARGETS {
                if !targets.iter().any(|x| x == t) {
                    continue;
                }
                let (s, row_offset, rows, cols) = match t {
                    "q" => (slot::WQKV, 0, qd, d),
                    "k" => (slot::WQKV, qd, kvd, d),
                    "v" => (slot::WQKV, qd + kvd, kvd, d),
                    "o" => (slot::WO, 0, d, qd),
                    "gate" => (slot::GATE_UP, 0, ffn, d),
                    "up" => (slot::GATE_UP, ffn, ffn, d),
                    "down" => (slot::DOWN, 0, d, ffn),
                    _ => unreachable!("TARGETS is closed"),
                };
                sites.push(Site {
                    name: format!("layers.{l}.{t}"),
                    param: base + s,
                    row_offset,
                    rows,
                    cols,
                });
            }
        }
        if let Some(bad) = targets.iter().find(|t| !TARGETS.contains(&t.as_str())) {
            return Err(LayoutError::UnknownTarget {
                target: bad.clone(),
            });
        }
        if sites.is_empty() {
            return Err(LayoutError::NoTarget);
        }
        Ok(Layout { rank, alpha, sites })
    }

    /// `alpha / rank`.
    pub fn scale(&self) -> f64 {
        self.alpha / self.rank as f64
    }

    /// Initial `(A, B)` per site, row-major: `A` `[rank, cols]` drawn in
    /// site order from one stream seeded by `seed`, `B` `[rows, rank]` zero.
    pub fn init(&self, seed: u64) -> Vec<(Vec<f32>, Vec<f32>)> {
        let mut rng = SplitMix64::new(seed ^ SEED_SALT);
        self.sites
            .iter()
            .map(|s| {
                let bound = 1.0 / (s.cols as f64).sqrt();
                let a = (0..self.rank * s.cols)
                    .map(|_| rng.symmetric(bound) as f32)
                    .collect();
                (a, vec![0.0; s.rows * self.rank])
            })
            .collect()
    }

    /// Trainable parameters of the adapters.
    pub fn num_params(&self) -> usize {
        self.sites
            .iter()
            .map(|s| self.rank * (s.rows + s.cols))
            .sum()
    }

    /// Adds `scale * B A` to the site's rows of `params` (in
    /// `Config::params` order), in `f64` per element, rounded once.
    pub fn merge_into(&self, params: &mut [Vec<f32>], adapters: &[(Vec<f32>, Vec<f32>)]) {
        let scale = self.scale();
        for (s, (a, b)) in self.sites.iter().zip(adapters) {
            let w = &mut params[s.param];
            for i in 0..s.rows {
                for j in 0..s.cols {
                    let mut acc = 0f64;
                    for k in 0..self.rank {
                        acc += f64::from(b[i * self.rank + k]) * f64::from(a[k * s.cols + j]);
                    }
                    let idx = (s.row_offset + i) * s.cols + j;
                    w[idx] = (f64::from(w[idx]) + scale * acc) as f32;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kolm_kernels::llama::init_params;
    use kolm_model_config::Shape;

    fn tiny() -> Config {
        Config::new(Shape {
            vocab: 32,
            d_model: 16,
            layers: 2,
            q_heads: 2,
            kv_heads: 1,
            head_dim: 64,
            ffn: 24,
            ..Shape::smollm2_135m()
        })
        .unwrap()
    }

    #[test]
    fn every_target_of_every_layer_in_canonical_order() {
        let all: Vec<String> = TARGETS.iter().map(|s| s.to_string()).collect();
        let l = Layout::new(&tiny(), 4, 8.0, &all).unwrap();
        assert_eq!(l.sites.len(), 14);
        assert_eq!(l.sites[1].name, "layers.0.k");
        assert_eq!((l.sites[1].row_offset, l.sites[1].rows), (128, 64));
        assert_eq!(l.sites[13].name, "layers.1.down");
        assert_eq!(l.sites[13].param, Config::layer_base(1) + slot::DOWN);
        assert_eq!(l.scale(), 2.0);
    }

    #[test]
    fn refuses_unknown_targets_rank_zero_and_bad_alpha() {
        let t = vec!["q".to_string(), "wq".to_string()];
        assert!(
            Layout::new(&tiny(), 4, 8.0, &t)
                .unwrap_err()
                .to_string()
                .contains("\"wq\"")
        );
        assert!(Layout::new(&tiny(), 0, 8.0, &["q".into()]).is_err());
        assert!(Layout::new(&tiny(), 4, 0.0, &["q".into()]).is_err());
        assert!(Layout::new(&tiny(), 4, 1.0, &[]).is_err());
    }

    #[test]
    fn init_is_seeded_with_b_zero_and_merge_adds_scaled_product() {
        let cfg = tiny();
        let l = Layout::new(&cfg, 2, 4.0, &["o".into()]).unwrap();
        let a1 = l.init(7);
        assert_eq!(a1, l.init(7));
        assert_ne!(a1, l.init(8));
        assert!(a1.iter().all(|(_, b)| b.iter().all(|&x| x == 0.0)));
        let mut params = init_params(&cfg, 1, 0.02);
        let before = params.clone();
        l.merge_into(&mut params, &a1);
        assert_eq!(params, before, "B = 0 merges to the base model");
        let mut ad = a1.clone();
        ad[0].1[0] = 1.0; // B[0][0]
        l.merge_into(&mut params, &ad);
        let s = &l.sites[0];
        let w = &params[s.param];
        let expect = before[s.param][0] as f64 + 2.0 * ad[0].0[0] as f64;
        assert!((w[0] as f64 - expect).abs() < 1e-6);
        assert_eq!(w[s.cols..], before[s.param][s.cols..]);
    }
}
