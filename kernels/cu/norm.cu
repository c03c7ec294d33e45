// RMSNorm forward and backward. One block per row for the row-wise parts, so
// a row's result depends on that row and the block size alone (the wrapper
// picks the block size from d, never from the number of rows): the same row
// gives the same bits at any batch size.

template <typename T>
__device__ void rmsnorm_fwd_impl(const T* x, const T* w, T* y, float* rstd, int d, float eps) {
    __shared__ float sh[32];
    const u64 base = (u64)blockIdx.x * d;
    float ss = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        const float v = ld(x, base + j);
        ss += v * v;
    }
    ss = block_sum(ss, sh);
    const float r = 1.0f / sqrtf(ss / (float)d + eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        st(y, base + j, ld(x, base + j) * r * ld(w, j));
    }
}

// dx = r g - r^3 x (g . x) / d with g = dy * w.
template <typename T>
__device__ void rmsnorm_bwd_dx_impl(const T* dy, const T* x, const T* w, const float* rstd,
                                    T* dx, int d) {
    __shared__ float sh[32];
    const u64 base = (u64)blockIdx.x * d;
    const float r = rstd[blockIdx.x];
    float c = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        c += ld(dy, base + j) * ld(w, j) * ld(x, base + j);
    }
    c = block_sum(c, sh);
    const float k = r * r * r * c / (float)d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        const float g = ld(dy, base + j) * ld(w, j);
        st(dx, base + j, r * g - k * ld(x, base + j));
    }
}

// dw, first stage: column j of chunk blockIdx.y sums its rows in order.
template <typename T>
__device__ void rmsnorm_dw_partial_impl(const T* dy, const T* x, const float* rstd, float* part,
                                        int n, int d, int rows_per_chunk) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d) return;
    const int r0 = blockIdx.y * rows_per_chunk;
    const int r1 = imin(n, r0 + rows_per_chunk);
    float acc = 0.0f;
    for (int i = r0; i < r1; ++i) {
        const u64 o = (u64)i * d + j;
        acc += ld(dy, o) * ld(x, o) * rstd[i];
    }
    part[(u64)blockIdx.y * d + j] = acc;
}

// Second stage of any column reduction: out[j] (+)= sum over chunks, in
// chunk order.
template <typename T>
__device__ void sum_chunks_impl(const float* part, int chunks, int d, T* out, int accumulate) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d) return;
    float acc = accumulate ? ld(out, j) : 0.0f;
    for (int c = 0; c < chunks; ++c) acc += part[(u64)c * d + j];
    st(out, j, acc);
}

// Vectorised forms for rows of up to 32 * RMS_VEC_CHUNKS chunks of 16
// bytes: one warp per row, the row held in registers between the two
// passes. A row's sum runs in an order fixed by d alone (chunks per lane in
// order, then the warp butterfly), as in the block forms above.
#define RMS_VEC_CHUNKS 8

template <typename T>
__device__ void rmsnorm_fwd_vec_impl(const T* x, const T* w, T* y, float* rstd, int n, int d, float eps) {
    constexpr int N = VecWidth<T>::N;
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= n) return;  // whole warps leave together: no block barrier below
    const int chunks = d / N;
    const u64 base = (u64)row * d;
    float v[RMS_VEC_CHUNKS][N];
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < RMS_VEC_CHUNKS; ++i) {
        const int c = lane + 32 * i;
        if (c < chunks) {
            ld16(x + base + c * N, v[i]);
#pragma unroll
            for (int e = 0; e < N; ++e) ss += v[i][e] * v[i][e];
        }
    }
    ss = warp_sum(ss);
    const float r = 1.0f / sqrtf(ss / (float)d + eps);
    if (lane == 0) rstd[row] = r;
#pragma unroll
    for (int i = 0; i < RMS_VEC_CHUNKS; ++i) {
        const int c = lane + 32 * i;
        if (c < chunks) {
            float wv[N], out[N];
            ld16(w + c * N, wv);
#pragma unroll
            for (int e = 0; e < N; ++e) out[e] = v[i][e] * r * wv[e];
            st16(y + base + c * N, out);
        }
    }
}

template <typename T>
__device__ void rmsnorm_bwd_dx_vec_impl(const T* dy, const T* x, const T* w, const float* rstd,
                                        T* dx, int n, int d) {
    constexpr int N = VecWidth<T>::N;
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= n) return;
    const int chunks = d / N;
    const u64 base = (u64)row * d;
    float gv[RMS_VEC_CHUNKS][N], xv[RMS_VEC_CHUNKS][N];
    float c = 0.0f;
#pragma unroll
    for (int i = 0; i < RMS_VEC_CHUNKS; ++i) {
        const int ch = lane + 32 * i;
        if (ch < chunks) {
            float wv[N];
            ld16(dy + base + ch * N, gv[i]);
            ld16(x + base + ch * N, xv[i]);
            ld16(w + ch * N, wv);
#pragma unroll
            for (int e = 0; e < N; ++e) {
                gv[i][e] *= wv[e];
                c += gv[i][e] * xv[i][e];
            }
        }
    }
    c = warp_sum(c);
    const float r = rstd[row];
    const float k = r * r * r * c / (float)d;
#pragma unroll
    for (int i = 0; i < RMS_VEC_CHUNKS; ++i) {
        const int ch = lane + 32 * i;
        if (ch < chunks) {
            float out[N];
#pragma unroll
            for (int e = 0; e < N; ++e) out[e] = r * gv[i][e] - k * xv[i][e];
            st16(dx + base + ch * N, out);
        }
    }
}

#define KOLM_NORM(S, T)                                                                       \
    extern "C" __global__ void rmsnorm_fwd_##S(const T* x, const T* w, T* y, float* rstd,    \
                                               int d, float eps) {                           \
        rmsnorm_fwd_impl<T>(x, w, y, rstd, d, eps);                                           \
    }                                                                                         \
    extern "C" __global__ void rmsnorm_bwd_dx_##S(const T* dy, const T* x, const T* w,       \
                                                  const float* rstd, T* dx, int d) {         \
        rmsnorm_bwd_dx_impl<T>(dy, x, w, rstd, dx, d);                                        \
    }                                                                                         \
    extern "C" __global__ void rmsnorm_dw_partial_##S(const T* dy, const T* x,               \
                                                      const float* rstd, float* part, int n, \
                                                      int d, int rows_per_chunk) {           \
        rmsnorm_dw_partial_impl<T>(dy, x, rstd, part, n, d, rows_per_chunk);                  \
    }                                                                                         \
    extern "C" __global__ void rmsnorm_fwd_vec_##S(const T* x, const T* w, T* y, float* rstd, \
                                                   int n, int d, float eps) {                \
        rmsnorm_fwd_vec_impl<T>(x, w, y, rstd, n, d, eps);                                    \
    }                                                                                         \
    extern "C" __global__ void rmsnorm_bwd_dx_vec_##S(const T* dy, const T* x, const T* w,   \
                                                      const float* rstd, T* dx, int n,       \
                                                      int d) {                               \
        rmsnorm_bwd_dx_vec_impl<T>(dy, x, w, rstd, dx, n, d);                                 \
    }                                                                                         \
    extern "C" __global__ void sum_chunks_##S(const float* part, int chunks, int d, T* out,  \
                                              int accumulate) {                              \
        sum_chunks_impl<T>(part, chunks, d, out, accumulate);                                 \
    }

KOLM_NORM(f32, float)
KOLM_NORM(bf16, bf16_t)
