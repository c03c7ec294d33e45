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

/// Which elements of a head vector are rotated together, and the RoPE
/// tables (`[positions, d/2]`, built on the host in `f64` and rounded to
/// `f32` once, so the GPU and the reference rotate by exactly the same
/// angles; only the rotation arithmetic is then under test): the model
/// configuration's, shared with the CPU model and the trainers.
pub use kolm_model_config::{RopeLayout, RopeTable};

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
