//! A small seeded generator for test and benchmark inputs.
//!
//! Tests draw fresh inputs on every run (the seed comes from the clock and is
//! printed), so a kernel must be right on any input, not one fixed vector;
//! a printed seed replays a failure. SplitMix64 is enough for that and keeps
//! `rand` out of the dependency tree.

/// SplitMix64 (Steele, Lea, Flood 2014): one 64-bit state, full period.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator that replays the same stream for the same seed.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A seed from the clock, for fresh inputs on every test run.
    pub fn fresh_seed() -> u64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        // Fold the 128-bit nanosecond count; only variety matters here.
        (now as u64) ^ ((now >> 64) as u64) ^ u64::from(std::process::id())
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [-a, a).
    pub fn symmetric(&mut self, a: f64) -> f64 {
        (2.0 * self.uniform() - 1.0) * a
    }

    /// Uniform integer in [0, n); `n` must be non-zero.
    pub fn below(&mut self, n: u64) -> u64 {
        // Multiply-shift: bias is at most n / 2^64, irrelevant for test data.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// `len` values uniform in [-a, a).
    pub fn vec(&mut self, len: usize, a: f64) -> Vec<f64> {
        (0..len).map(|_| self.symmetric(a)).collect()
    }
}
