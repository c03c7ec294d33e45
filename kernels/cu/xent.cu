// Softmax cross-entropy fused with argmax: one block per row reads the row's
// logits once, keeping per thread a running maximum, the sum of exp(x - max)
// and the index of the first maximum; threads then merge in a fixed tree.
// Optionally the same launch writes dlogits (the training path), in place
// over the logits if the caller wants.

__device__ __forceinline__ void lse_merge(float& m, float& s, int& i, float m2, float s2, int i2) {
    const float mn = fmaxf(m, m2);
    // Merging (a, b) and (b, a) gives the same bits: one commutative add.
    const float sn = (m == -KOLM_INF ? 0.0f : s * expf(m - mn)) +
                     (m2 == -KOLM_INF ? 0.0f : s2 * expf(m2 - mn));
    const int in = (m2 > m || (m2 == m && i2 < i)) ? i2 : i;
    m = mn;
    s = sn;
    i = in;
}

__device__ __forceinline__ void lse_warp(float& m, float& s, int& i) {
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        const int i2 = __shfl_xor_sync(0xffffffffu, i, o);
        lse_merge(m, s, i, m2, s2, i2);
    }
}

template <typename T>
__device__ void xent_fwd_impl(const T* logits, const int* targets, float* loss, float* lse_out,
                              int* argmax, T* dlogits, float grad_scale, int v) {
    __shared__ float shm[32], shs[32];
    __shared__ int shi[32];
    __shared__ float target_logit;
    const u64 base = (u64)blockIdx.x * v;
    float m = -KOLM_INF, s = 0.0f;
    int bi = 0x7fffffff;
    for (int j = threadIdx.x; j < v; j += blockDim.x) {
        const float x = ld(logits, base + j);
        if (x > m) {
            s = (m == -KOLM_INF ? 0.0f : s * expf(m - x)) + 1.0f;
            m = x;
            bi = j;
        } else if (m > -KOLM_INF) {
            s += expf(x - m);  // a NaN logit lands here and makes the loss NaN
        }
    }
    lse_warp(m, s, bi);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    if (lane == 0) {
        shm[warp] = m;
        shs[warp] = s;
        shi[warp] = bi;
    }
    const int t = targets[blockIdx.x];
    if (threadIdx.x == 0) {
        target_logit = (t >= 0 && t < v) ? ld(logits, base + t) : 0.0f;
    }
    __syncthreads();  // also orders the read above before any in-place write below
    m = lane < warps ? shm[lane] : -KOLM_INF;
    s = lane < warps ? shs[lane] : 0.0f;
    bi = lane < warps ? shi[lane] : 0x7fffffff;
    lse_warp(m, s, bi);
    const float lse = m + logf(s);
    if (threadIdx.x == 0) {
        lse_out[blockIdx.x] = lse;
        argmax[blockIdx.x] = bi;
        loss[blockIdx.x] = t < 0 ? 0.0f : (t >= v ? KOLM_NAN : lse - target_logit);
    }
    if (dlogits != 0) {
        for (int j = threadIdx.x; j < v; j += blockDim.x) {
            float g = 0.0f;
            if (t >= v) {
                g = KOLM_NAN;
            } else if (t >= 0) {
                const float p = expf(ld(logits, base + j) - lse);
                g = grad_scale * (p - (j == t ? 1.0f : 0.0f));
            }
            st(dlogits, base + j, g);
        }
    }
}

// 16-byte form of xent_fwd for vocabularies that are a multiple of the
// vector width: each thread takes whole chunks, folds a chunk into its
// running (max, sum, argmax) at once, and rewrites whole chunks of dlogits.
#define XENT_LOG2E 1.4426950408889634f
// Chunks each thread has in flight per step of the first pass.
#define XENT_INFLIGHT 3

// 2^x by the hardware approximation (2 ulp), with results below 2^-126
// flushed to 0: exp2f adds a rescaling around it for those, and here they
// never matter (a row's sum is at least 1, and a gradient that small is
// below any tolerance).
__device__ __forceinline__ float ex2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

template <typename T>
__device__ void xent_fwd_vec_impl(const T* logits, const int* targets, float* loss, float* lse_out,
                                  int* argmax, T* dlogits, float grad_scale, int v) {
    constexpr int N = VecWidth<T>::N;
    __shared__ float shm[32], shs[32];
    __shared__ int shi[32];
    __shared__ float target_logit;
    const u64 base = (u64)blockIdx.x * v;
    const int chunks = v / N;
    float m = -KOLM_INF, s = 0.0f;
    int bi = 0x7fffffff;
    // Exponentials as exp2 of (x log2 e - m log2 e), one FMA and one ex2
    // (2 ulp) per element; each thread takes chunks c, c + blockDim, ... in
    // that order, XENT_INFLIGHT loads in flight per step (the order of the
    // sums is that of the chunks, as with one at a time).
    float ml = 0.0f;  // m * log2 e, rounded once
    auto take = [&](const chunk16& raw, int c) {
        float x[N];
        unpack16<T>(raw, x);
        float cm = x[0];
        int ci = 0;
#pragma unroll
        for (int e = 1; e < N; ++e) {
            if (x[e] > cm) {
                cm = x[e];
                ci = e;
            }
        }
        if (cm > m) {
            const float cml = cm * XENT_LOG2E;
            s = m == -KOLM_INF ? 0.0f : s * ex2_ftz(ml - cml);
            m = cm;
            ml = cml;
            bi = c * N + ci;
        }
        if (m > -KOLM_INF) {
#pragma unroll
            for (int e = 0; e < N; ++e) s += ex2_ftz(fmaf(x[e], XENT_LOG2E, -ml));
        }
    };
    const int step = blockDim.x;
    const chunk16* row = (const chunk16*)(logits + base);
    for (int c = threadIdx.x; c < chunks; c += XENT_INFLIGHT * step) {
        chunk16 raw[XENT_INFLIGHT];
#pragma unroll
        for (int u = 0; u < XENT_INFLIGHT; ++u) {
            if (c + u * step < chunks) raw[u] = row[c + u * step];
        }
#pragma unroll
        for (int u = 0; u < XENT_INFLIGHT; ++u) {
            if (c + u * step < chunks) take(raw[u], c + u * step);
        }
    }
    lse_warp(m, s, bi);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    if (lane == 0) {
        shm[warp] = m;
        shs[warp] = s;
        shi[warp] = bi;
    }
    const int t = targets[blockIdx.x];
    if (threadIdx.x == 0) {
        target_logit = (t >= 0 && t < v) ? ld(logits, base + t) : 0.0f;
    }
    __syncthreads();  // also orders every read above before an in-place write below
    m = lane < warps ? shm[lane] : -KOLM_INF;
    s = lane < warps ? shs[lane] : 0.0f;
    bi = lane < warps ? shi[lane] : 0x7fffffff;
    lse_warp(m, s, bi);
    const float lse = m + logf(s);
    if (threadIdx.x == 0) {
        lse_out[blockIdx.x] = lse;
        argmax[blockIdx.x] = bi;
        loss[blockIdx.x] = t < 0 ? 0.0f : (t >= v ? KOLM_NAN : lse - target_logit);
    }
    if (dlogits == 0) return;
    if (t < 0 || t >= v) {
        // An ignored row gets 0, a target past the vocabulary NaN.
        float x[N];
#pragma unroll
        for (int e = 0; e < N; ++e) x[e] = t < 0 ? 0.0f : KOLM_NAN;
        for (int c = threadIdx.x; c < chunks; c += blockDim.x) st16(dlogits + base + (u64)c * N, x);
        return;
    }
    // g = scale (p - onehot); for j != t that is scale * p exactly, so the
    // target's chunk alone takes the subtraction.
    const float lsel = lse * XENT_LOG2E;
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
        float x[N];
        unpack16<T>(row[c], x);
#pragma unroll
        for (int e = 0; e < N; ++e) x[e] = ex2_ftz(fmaf(x[e], XENT_LOG2E, -lsel));
        const int k = t - c * N;
#pragma unroll
        for (int e = 0; e < N; ++e) x[e] = grad_scale * (e == k ? x[e] - 1.0f : x[e]);
        st16_rn(dlogits + base + (u64)c * N, x);
    }
}

// Backward with a per-row upstream gradient, reading the forward's lse.
template <typename T>
__device__ void xent_bwd_impl(const T* logits, const int* targets, const float* lse,
                              const float* dloss, T* dlogits, int v) {
    const u64 base = (u64)blockIdx.x * v;
    const int t = targets[blockIdx.x];
    const float l = lse[blockIdx.x];
    const float dl = dloss[blockIdx.x];
    for (int j = threadIdx.x; j < v; j += blockDim.x) {
        float g = 0.0f;
        if (t >= v) {
            g = KOLM_NAN;
        } else if (t >= 0) {
            g = dl * (expf(ld(logits, base + j) - l) - (j == t ? 1.0f : 0.0f));
        }
        st(dlogits, base + j, g);
    }
}

#define KOLM_XENT(S, T)                                                                         \
    extern "C" __global__ void xent_fwd_##S(const T* logits, const int* targets, float* loss,  \
                                            float* lse, int* argmax, T* dlogits,               \
                                            float grad_scale, int v) {                         \
        xent_fwd_impl<T>(logits, targets, loss, lse, argmax, dlogits, grad_scale, v);           \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(1024, 2) xent_fwd_vec_##S(const T* logits,  const int* targets,           \
                                                float* loss, float* lse, int* argmax,          \
                                                T* dlogits, float grad_scale, int v) {         \
        xent_fwd_vec_impl<T>(logits, targets, loss, lse, argmax, dlogits, grad_scale, v);       \
    }                                                                                           \
    extern "C" __global__ void xent_bwd_##S(const T* logits, const int* targets,               \
                                            const float* lse, const float* dloss, T* dlogits,  \
                                            int v) {                                           \
        xent_bwd_impl<T>(logits, targets, lse, dloss, dlogits, v);                              \
    }

KOLM_XENT(f32, float)
KOLM_XENT(bf16, bf16_t)
