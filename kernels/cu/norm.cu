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
    extern "C" __global__ void sum_chunks_##S(const float* part, int chunks, int d, T* out,  \
                                              int accumulate) {                              \
        sum_chunks_impl<T>(part, chunks, d, out, accumulate);                                 \
    }

KOLM_NORM(f32, float)
KOLM_NORM(bf16, bf16_t)
