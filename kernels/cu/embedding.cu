// Embedding lookup and its backward. The backward never adds into memory
// another thread writes: the host sorts positions by token id (a CSR plan,
// see ops::EmbeddingPlan), and block v sums the rows of token v in position
// order, so every vocabulary row is written once, in a fixed order.

template <typename T>
__device__ void embedding_fwd_impl(const T* table, const u32* ids, T* out, u64 n, int d, u32 vocab) {
    const u64 total = n * (u64)d;
    for (u64 e = (u64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (u64)gridDim.x * blockDim.x) {
        const u64 i = e / d;
        const int j = (int)(e % d);
        const u32 id = ids[i];
        // An id out of range reads nothing and leaves a NaN to be seen.
        st(out, e, id < vocab ? ld(table, (u64)id * d + j) : KOLM_NAN);
    }
}

template <typename T>
__device__ void embedding_bwd_impl(const T* dout, const u32* offsets, const u32* positions,
                                   T* dtable, int d, int accumulate) {
    const u32 v = blockIdx.x;
    const u32 k0 = offsets[v], k1 = offsets[v + 1];
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        const u64 o = (u64)v * d + j;
        float acc = accumulate ? ld(dtable, o) : 0.0f;
        for (u32 k = k0; k < k1; ++k) acc += ld(dout, (u64)positions[k] * d + j);
        st(dtable, o, acc);
    }
}

// 16-byte forms, for d a multiple of the chunk (8 bf16, 4 f32). Forward:
// one thread per chunk of the output, copied as raw bits; the wrapper
// checks that the chunk count fits 32 bits.
template <typename T>
__device__ void embedding_fwd_vec_impl(const T* table, const u32* ids, T* out, u32 total, int d,
                                       u32 vocab) {
    constexpr int N = VecWidth<T>::N;
    const u32 p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= total) return;
    const u32 cpr = (u32)(d / N);
    const u32 i = p / cpr;
    const u32 c = p - i * cpr;
    const u32 id = ids[i];
    chunk16* dst = (chunk16*)(out + (u64)i * d + c * N);
    if (id < vocab) {
        *dst = *(const chunk16*)(table + (u64)id * d + c * N);
    } else {
        float nan[N];
#pragma unroll
        for (int e = 0; e < N; ++e) nan[e] = KOLM_NAN;
        st16(out + (u64)i * d + c * N, nan);
    }
}

// Backward: one thread per 16-byte chunk of dtable (chunk p of the flat
// [vocab, d / N] grid), as the forward, so every lane has work whatever d
// is (a warp per row left lanes idle when d / N is not a multiple of 32).
// The thread sums its token's rows in position order, as above; the chunks
// of one row share the two offsets in L1. The wrapper checks that the
// chunk count fits 32 bits.
template <typename T>
__device__ void embedding_bwd_vec_impl(const T* dout, const u32* offsets, const u32* positions,
                                       T* dtable, int d, u32 total, int accumulate) {
    constexpr int N = VecWidth<T>::N;
    const u32 p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= total) return;
    const u32 cpr = (u32)(d / N);
    const u32 v = p / cpr;
    const u32 c = p - v * cpr;
    const u32 k0 = offsets[v], k1 = offsets[v + 1];
    const u64 o = (u64)v * d + c * N;
    float acc[N];
    if (accumulate) {
        ld16(dtable + o, acc);
    } else {
#pragma unroll
        for (int e = 0; e < N; ++e) acc[e] = 0.0f;
    }
    for (u32 k = k0; k < k1; ++k) {
        float g[N];
        ld16(dout + (u64)positions[k] * d + c * N, g);
#pragma unroll
        for (int e = 0; e < N; ++e) acc[e] += g[e];
    }
    st16(dtable + o, acc);
}

// The same backward on a 2D block: threadIdx.x is the chunk of a row
// (blockDim.x = d / N chunks per row), threadIdx.y and blockIdx.x pick the
// row, so no thread divides by the chunk count (the flat form above is
// bound by instruction issue, and a 32-bit division is most of its
// instructions). Each chunk gets the same sum, in the same order, as above.
// Two positions, then their two rows, are loaded together (two dependent
// loads per two rows rather than per row: most tokens that occur at all
// occur once or twice); the rows are still added one at a time in position
// order. Stores round by one cvt per pair (st16_rn: the same bits as st16
// for every non-NaN sum). 32 registers (two rows in flight; four took 40
// and cost occupancy: 7 blocks of 288 threads per SM at 32).
template <typename T>
__device__ void embedding_bwd_vec2d_impl(const T* dout, const u32* offsets, const u32* positions,
                                         T* dtable, int d, u32 vocab, int accumulate) {
    constexpr int N = VecWidth<T>::N;
    constexpr int B = 2;
    const u32 v = blockIdx.x * blockDim.y + threadIdx.y;
    if (v >= vocab) return;
    const int c = threadIdx.x;
    const u32 k0 = offsets[v], k1 = offsets[v + 1];
    const u64 o = (u64)v * d + c * N;
    float acc[N];
    if (accumulate) {
        ld16(dtable + o, acc);
    } else {
#pragma unroll
        for (int e = 0; e < N; ++e) acc[e] = 0.0f;
    }
    for (u32 k = k0; k < k1; k += B) {
        u32 pos[B];
#pragma unroll
        for (int i = 0; i < B; ++i) pos[i] = k + i < k1 ? positions[k + i] : 0u;
        chunk16 g[B];
#pragma unroll
        for (int i = 0; i < B; ++i) {
            if (k + i < k1) g[i] = *(const chunk16*)(dout + (u64)pos[i] * d + c * N);
        }
#pragma unroll
        for (int i = 0; i < B; ++i) {
            if (k + i < k1) {
                float gv[N];
                unpack16<T>(g[i], gv);
#pragma unroll
                for (int e = 0; e < N; ++e) acc[e] += gv[e];
            }
        }
    }
    st16_rn(dtable + o, acc);
}

#define KOLM_EMBEDDING(S, T)                                                                       \
    extern "C" __global__ void embedding_fwd_##S(const T* table, const u32* ids, T* out, u64 n,  \
                                                 int d, u32 vocab) {                             \
        embedding_fwd_impl<T>(table, ids, out, n, d, vocab);                                       \
    }                                                                                              \
    extern "C" __global__ void embedding_bwd_##S(const T* dout, const u32* offsets,              \
                                                 const u32* positions, T* dtable, int d,         \
                                                 int accumulate) {                               \
        embedding_bwd_impl<T>(dout, offsets, positions, dtable, d, accumulate);                    \
    }                                                                                              \
    extern "C" __global__ void embedding_fwd_vec_##S(const T* table, const u32* ids, T* out,     \
                                                     u32 total, int d, u32 vocab) {            \
        embedding_fwd_vec_impl<T>(table, ids, out, total, d, vocab);                               \
    }                                                                                              \
    extern "C" __global__ void embedding_bwd_vec_##S(const T* dout, const u32* offsets,          \
                                                     const u32* positions, T* dtable, int d,   \
                                                     u32 total, int accumulate) {              \
        embedding_bwd_vec_impl<T>(dout, offsets, positions, dtable, d, total, accumulate);         \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(1024, 2) embedding_bwd_vec2d_##S(                \
        const T* dout, const u32* offsets, const u32* positions, T* dtable, int d, u32 vocab,   \
        int accumulate) {                                                                        \
        embedding_bwd_vec2d_impl<T>(dout, offsets, positions, dtable, d, vocab, accumulate);       \
    }

KOLM_EMBEDDING(f32, float)
KOLM_EMBEDDING(bf16, bf16_t)
