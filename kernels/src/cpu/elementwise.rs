//! SiLU, SwiGLU and rotary position embeddings.

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// `silu(x) = x * sigmoid(x)`, elementwise.
pub fn silu(x: &[f64]) -> Vec<f64> {
    x.iter().map(|&v| v * sigmoid(v)).collect()
}

/// `dx = dy * sigmoid(x) * (1 + x (1 - sigmoid(x)))`.
pub fn silu_bwd(dy: &[f64], x: &[f64]) -> Vec<f64> {
    dy.iter()
        .zip(x)
        .map(|(&g, &v)| {
            let s = sigmoid(v);
            g * s * (1.0 + v * (1.0 - s))
        })
        .collect()
}

/// SwiGLU: `y = silu(gate) * up`, elementwise over equal-length inputs.
pub fn swiglu_fwd(gate: &[f64], up: &[f64]) -> Vec<f64> {
    gate.iter()
        .zip(up)
        .map(|(&g, &u)| g * sigmoid(g) * u)
        .collect()
}

/// Backward of [`swiglu_fwd`]: `(dgate, dup)`.
pub fn swiglu_bwd(dy: &[f64], gate: &[f64], up: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let mut dgate = Vec::with_capacity(gate.len());
    let mut dup = Vec::with_capacity(up.len());
    for ((&d, &g), &u) in dy.iter().zip(gate).zip(up) {
        let s = sigmoid(g);
        dgate.push(d * u * s * (1.0 + g * (1.0 - s)));
        dup.push(d * g * s);
    }
    (dgate, dup)
}

/// Which elements of a head vector are rotated together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RopeLayout {
    /// Adjacent pairs `(2i, 2i+1)`: the layout of GGUF Llama weights.
    Interleaved,
    /// Halves `(i, i + d/2)`: the "rotate half" layout of Hugging Face Llama.
    RotateHalf,
}

/// Cosine and sine tables for positions `0..positions`, `[positions, d/2]`.
///
/// Built on the host in `f64` and rounded to `f32` once, so the GPU and the
/// reference rotate by exactly the same angles; only the rotation arithmetic
/// is then under test. Frequencies are `base^(-2i/d)`.
#[derive(Debug, Clone)]
pub struct RopeTable {
    /// Head dimension (even).
    pub head_dim: usize,
    /// Number of positions covered.
    pub positions: usize,
    /// `cos(pos * freq_i)` at `[pos * head_dim/2 + i]`.
    pub cos: Vec<f32>,
    /// `sin(pos * freq_i)`, same layout.
    pub sin: Vec<f32>,
}

impl RopeTable {
    /// Tables for `positions` positions of an even `head_dim` with the given base.
    pub fn new(positions: usize, head_dim: usize, base: f64) -> Self {
        let half = head_dim / 2;
        let mut cos = Vec::with_capacity(positions * half);
        let mut sin = Vec::with_capacity(positions * half);
        for p in 0..positions {
            for i in 0..half {
                let freq = base.powf(-2.0 * i as f64 / head_dim as f64);
                let angle = p as f64 * freq;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        Self {
            head_dim,
            positions,
            cos,
            sin,
        }
    }
}

fn pair(layout: RopeLayout, i: usize, half: usize) -> (usize, usize) {
    match layout {
        RopeLayout::Interleaved => (2 * i, 2 * i + 1),
        RopeLayout::RotateHalf => (i, i + half),
    }
}

fn rope_apply(
    x: &[f64],
    table: &RopeTable,
    seq: usize,
    heads: usize,
    layout: RopeLayout,
    sign: f64,
) -> Vec<f64> {
    let d = table.head_dim;
    let half = d / 2;
    assert_eq!(x.len() % (seq * heads * d), 0, "x is [b, t, h, d]");
    let mut y = vec![0.0; x.len()];
    for (v, (xs, ys)) in x.chunks(d).zip(y.chunks_mut(d)).enumerate() {
        let t = (v / heads) % seq;
        for i in 0..half {
            let c = f64::from(table.cos[t * half + i]);
            let s = sign * f64::from(table.sin[t * half + i]);
            let (a, b) = pair(layout, i, half);
            ys[a] = xs[a] * c - xs[b] * s;
            ys[b] = xs[a] * s + xs[b] * c;
        }
    }
    y
}

/// Rotates `x` of shape `[b, seq, heads, d]`; position is the `seq` index.
pub fn rope_fwd(
    x: &[f64],
    table: &RopeTable,
    seq: usize,
    heads: usize,
    layout: RopeLayout,
) -> Vec<f64> {
    rope_apply(x, table, seq, heads, layout, 1.0)
}

/// Backward of [`rope_fwd`]: the rotation is orthogonal, so `dx` is `dy`
/// rotated by the opposite angle.
pub fn rope_bwd(
    dy: &[f64],
    table: &RopeTable,
    seq: usize,
    heads: usize,
    layout: RopeLayout,
) -> Vec<f64> {
    rope_apply(dy, table, seq, heads, layout, -1.0)
}
