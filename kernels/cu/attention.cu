// Causal grouped-query attention, flash-style: the T x T score matrix is
// never stored. q is [b, seq, hq, D]; k and v are [b, seq, hkv, D]; query
// head h reads key/value head h / (hq / hkv). lse is [b, hq, seq].
//
// One thread owns one query row (forward, dq) or one key row (dk/dv) and
// walks the other side in index order, so every output element is one
// thread's sequential sum: deterministic without atomics, and a row's result
// does not depend on the batch size. The backward is split in two kernels
// (dq by query rows; dk and dv by key rows, looping over the group's query
// heads in order) instead of accumulating dq with atomics.
//
// This is the plain-FMA version: correct and deterministic, not yet on the
// tensor cores.

#define ATTN_BQ 64  // query rows per block (forward, dq): one per thread
#define ATTN_BKV 64 // key rows per block (dk/dv): one per thread
#define ATTN_QT 16  // query rows per shared tile in the dk/dv kernel

__device__ __forceinline__ u64 row_off(int b, int t, int h, int seq, int heads, int d) {
    return (((u64)b * seq + t) * heads + h) * d;
}

// Loads keys [k0, k0 + BK) of kv head hk into shared tiles, zero past seq.
template <typename T, int D, int BK>
__device__ __forceinline__ void load_kv_tile(const T* k, const T* v, float (*ks)[D], float (*vs)[D],
                                             int b, int hk, int k0, int seq, int hkv) {
    for (int e = threadIdx.x; e < BK * D; e += blockDim.x) {
        const int r = e / D, c = e % D;
        const int kj = k0 + r;
        float kv = 0.0f, vv = 0.0f;
        if (kj < seq) {
            const u64 o = row_off(b, kj, hk, seq, hkv, D) + c;
            kv = ld(k, o);
            vv = ld(v, o);
        }
        ks[r][c] = kv;
        vs[r][c] = vv;
    }
}

template <typename T, int D>
__device__ void attn_fwd_impl(const T* q, const T* k, const T* v, T* o, float* lse, int seq,
                              int hq, int hkv, float scale) {
    constexpr int BK = 4096 / D;  // 32 KB of f32 K and V tiles
    __shared__ float ks[BK][D];
    __shared__ float vs[BK][D];
    const int bh = blockIdx.y, b = bh / hq, h = bh % hq, hk = h / (hq / hkv);
    const int i = blockIdx.x * ATTN_BQ + threadIdx.x;
    const bool active = i < seq;
    const u64 qo = row_off(b, active ? i : 0, h, seq, hq, D);
    float qr[D], acc[D];
#pragma unroll
    for (int c = 0; c < D; ++c) {
        qr[c] = active ? ld(q, qo + c) * scale : 0.0f;
        acc[c] = 0.0f;
    }
    float m = -KOLM_INF, l = 0.0f;
    const int last = imin(seq - 1, blockIdx.x * ATTN_BQ + ATTN_BQ - 1);
    for (int k0 = 0; k0 <= last; k0 += BK) {
        __syncthreads();
        load_kv_tile<T, D, BK>(k, v, ks, vs, b, hk, k0, seq, hkv);
        __syncthreads();
        if (!active) continue;
        const int jn = imin(BK, i - k0 + 1);  // keys k0 .. i are visible
        for (int j = 0; j < jn; ++j) {
            float x = 0.0f;
#pragma unroll
            for (int c = 0; c < D; ++c) x += qr[c] * ks[j][c];
            // Online softmax: rescale only when the running maximum grows
            // (rarely, after the first keys), not once per key.
            if (x > m) {
                const float corr = expf(m - x);  // 0 for the first key (m = -inf)
                l *= corr;
#pragma unroll
                for (int c = 0; c < D; ++c) acc[c] *= corr;
                m = x;
            }
            const float p = expf(x - m);
            l += p;
#pragma unroll
            for (int c = 0; c < D; ++c) acc[c] += p * vs[j][c];
        }
    }
    if (active) {
        const float inv = 1.0f / l;
#pragma unroll
        for (int c = 0; c < D; ++c) st(o, qo + c, acc[c] * inv);
        lse[(u64)bh * seq + i] = m + logf(l);
    }
}

// delta[b, h, t] = sum_c dO * O, the softmax backward's row term.
template <typename T, int D>
__device__ void attn_bwd_delta_impl(const T* o, const T* dout, float* delta, int seq, int hq, u64 rows) {
    for (u64 r = (u64)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (u64)gridDim.x * blockDim.x) {
        const int h = (int)(r % hq);
        const u64 bt = r / hq;
        const int b = (int)(bt / seq), t = (int)(bt % seq);
        const u64 base = r * D;
        float acc = 0.0f;
#pragma unroll
        for (int c = 0; c < D; ++c) acc += ld(o, base + c) * ld(dout, base + c);
        delta[((u64)b * hq + h) * seq + t] = acc;
    }
}

template <typename T, int D>
__device__ void attn_bwd_dq_impl(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                                 const float* delta, T* dq, int seq, int hq, int hkv, float scale) {
    constexpr int BK = 4096 / D;
    __shared__ float ks[BK][D];
    __shared__ float vs[BK][D];
    const int bh = blockIdx.y, b = bh / hq, h = bh % hq, hk = h / (hq / hkv);
    const int i = blockIdx.x * ATTN_BQ + threadIdx.x;
    const bool active = i < seq;
    const u64 qo = row_off(b, active ? i : 0, h, seq, hq, D);
    float qr[D], dor[D], acc[D];
#pragma unroll
    for (int c = 0; c < D; ++c) {
        qr[c] = active ? ld(q, qo + c) * scale : 0.0f;
        dor[c] = active ? ld(dout, qo + c) : 0.0f;
        acc[c] = 0.0f;
    }
    const float li = active ? lse[(u64)bh * seq + i] : 0.0f;
    const float di = active ? delta[(u64)bh * seq + i] : 0.0f;
    const int last = imin(seq - 1, blockIdx.x * ATTN_BQ + ATTN_BQ - 1);
    for (int k0 = 0; k0 <= last; k0 += BK) {
        __syncthreads();
        load_kv_tile<T, D, BK>(k, v, ks, vs, b, hk, k0, seq, hkv);
        __syncthreads();
        if (!active) continue;
        const int jn = imin(BK, i - k0 + 1);
        for (int j = 0; j < jn; ++j) {
            float s = 0.0f, dp = 0.0f;
#pragma unroll
            for (int c = 0; c < D; ++c) {
                s += qr[c] * ks[j][c];
                dp += dor[c] * vs[j][c];
            }
            const float ds = expf(s - li) * (dp - di);
#pragma unroll
            for (int c = 0; c < D; ++c) acc[c] += ds * ks[j][c];
        }
    }
    if (active) {
#pragma unroll
        for (int c = 0; c < D; ++c) st(dq, qo + c, acc[c] * scale);
    }
}

// Dynamic shared memory: own K and V rows padded to D + 1 floats (thread t
// reads row t: the pad puts consecutive threads in consecutive banks), then a
// tile of scaled q rows, a tile of dO rows, and their lse and delta.
template <typename T, int D>
__device__ void attn_bwd_dkv_impl(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                                  const float* delta, T* dk, T* dv, int seq, int hq, int hkv, float scale) {
    extern __shared__ float smem[];
    float* kself = smem;
    float* vself = kself + ATTN_BKV * (D + 1);
    float* qs = vself + ATTN_BKV * (D + 1);
    float* dos = qs + ATTN_QT * D;
    float* ls = dos + ATTN_QT * D;
    float* dls = ls + ATTN_QT;
    const int bhk = blockIdx.y, b = bhk / hkv, hk = bhk % hkv;
    const int group = hq / hkv;
    const int j0 = blockIdx.x * ATTN_BKV;
    const int j = j0 + threadIdx.x;
    const bool active = j < seq;
    for (int e = threadIdx.x; e < ATTN_BKV * D; e += blockDim.x) {
        const int r = e / D, c = e % D;
        float kv = 0.0f, vv = 0.0f;
        if (j0 + r < seq) {
            const u64 o = row_off(b, j0 + r, hk, seq, hkv, D) + c;
            kv = ld(k, o);
            vv = ld(v, o);
        }
        kself[r * (D + 1) + c] = kv;
        vself[r * (D + 1) + c] = vv;
    }
    float dka[D], dva[D];
#pragma unroll
    for (int c = 0; c < D; ++c) {
        dka[c] = 0.0f;
        dva[c] = 0.0f;
    }
    const float* kr = kself + threadIdx.x * (D + 1);
    const float* vr = vself + threadIdx.x * (D + 1);
    for (int g = 0; g < group; ++g) {
        const int h = hk * group + g;
        const u64 bh = (u64)b * hq + h;
        for (int q0 = j0; q0 < seq; q0 += ATTN_QT) {
            __syncthreads();
            for (int e = threadIdx.x; e < ATTN_QT * D; e += blockDim.x) {
                const int r = e / D, c = e % D;
                float qv = 0.0f, dv_ = 0.0f;
                if (q0 + r < seq) {
                    const u64 o = row_off(b, q0 + r, h, seq, hq, D) + c;
                    qv = ld(q, o) * scale;
                    dv_ = ld(dout, o);
                }
                qs[e] = qv;
                dos[e] = dv_;
            }
            for (int r = threadIdx.x; r < ATTN_QT; r += blockDim.x) {
                const bool in = q0 + r < seq;
                ls[r] = in ? lse[bh * seq + q0 + r] : 0.0f;
                dls[r] = in ? delta[bh * seq + q0 + r] : 0.0f;
            }
            __syncthreads();
            if (!active) continue;
            for (int u = 0; u < ATTN_QT; ++u) {
                const int i = q0 + u;
                if (i < j || i >= seq) continue;
                float s = 0.0f, dp = 0.0f;
#pragma unroll
                for (int c = 0; c < D; ++c) {
                    s += qs[u * D + c] * kr[c];
                    dp += dos[u * D + c] * vr[c];
                }
                const float p = expf(s - ls[u]);
                const float ds = p * (dp - dls[u]);
#pragma unroll
                for (int c = 0; c < D; ++c) {
                    dva[c] += p * dos[u * D + c];
                    dka[c] += ds * qs[u * D + c];
                }
            }
        }
    }
    if (active) {
        const u64 o = row_off(b, j, hk, seq, hkv, D);
#pragma unroll
        for (int c = 0; c < D; ++c) {
            st(dk, o + c, dka[c]);  // qs already carries the scale
            st(dv, o + c, dva[c]);
        }
    }
}

#define KOLM_ATTN(S, T, D)                                                                       \
    extern "C" __global__ void attn_fwd_##S##_d##D(const T* q, const T* k, const T* v, T* o,    \
                                                   float* lse, int seq, int hq, int hkv,        \
                                                   float scale) {                               \
        attn_fwd_impl<T, D>(q, k, v, o, lse, seq, hq, hkv, scale);                               \
    }                                                                                            \
    extern "C" __global__ void attn_bwd_delta_##S##_d##D(const T* o, const T* dout, float* delta,\
                                                         int seq, int hq, u64 rows) {           \
        attn_bwd_delta_impl<T, D>(o, dout, delta, seq, hq, rows);                                \
    }                                                                                            \
    extern "C" __global__ void attn_bwd_dq_##S##_d##D(const T* q, const T* k, const T* v,        \
                                                      const T* dout, const float* lse,           \
                                                      const float* delta, T* dq, int seq,        \
                                                      int hq, int hkv, float scale) {            \
        attn_bwd_dq_impl<T, D>(q, k, v, dout, lse, delta, dq, seq, hq, hkv, scale);              \
    }                                                                                            \
    extern "C" __global__ void attn_bwd_dkv_##S##_d##D(const T* q, const T* k, const T* v,       \
                                                       const T* dout, const float* lse,          \
                                                       const float* delta, T* dk, T* dv,         \
                                                       int seq, int hq, int hkv, float scale) {  \
        attn_bwd_dkv_impl<T, D>(q, k, v, dout, lse, delta, dk, dv, seq, hq, hkv, scale);         \
    }

// Instantiated per head dimension by the Rust side (compile.rs appends
// `KOLM_ATTN(...)` lines), so a model with d = 64 never waits for the
// d = 128 kernels to compile.
