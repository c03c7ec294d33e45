// AdamW and global gradient-norm clipping.
//
// The norm is a two-stage reduction with a grid fixed by the wrapper (not by
// the device), accumulated in f64 so 10^8 squares lose nothing that shows in
// f32. The clip factor stays on the device and AdamW reads it from there:
// clipping costs no host round trip.

template <typename T>
__device__ void sumsq_partial_impl(const T* g, u64 n, double* partial) {
    __shared__ double sh[32];
    double acc = 0.0;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    // Four independent loads in flight per step; the order of the adds is
    // still fixed by n and the (fixed) grid.
    for (; i + 3 * stride < n; i += 4 * stride) {
        const double a = (double)ld(g, i), b = (double)ld(g, i + stride);
        const double c = (double)ld(g, i + 2 * stride), d = (double)ld(g, i + 3 * stride);
        acc += (a * a + b * b) + (c * c + d * d);
    }
    for (; i < n; i += stride) {
        const double v = (double)ld(g, i);
        acc += v * v;
    }
    acc = block_sum_f64(acc, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

extern "C" __global__ void clip_finalize(const double* partial, int count, float max_norm,
                                         float* norm_out, float* scale_out) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
    acc = block_sum_f64(acc, sh);
    if (threadIdx.x == 0) {
        const double norm = sqrt(acc);
        const double scale = (double)max_norm / (norm + 1e-6);
        norm_out[0] = (float)norm;
        scale_out[0] = (float)(scale < 1.0 ? scale : 1.0);
    }
}

template <typename T>
__device__ void scale_impl(T* g, u64 n, const float* scale) {
    const float s = scale[0];
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        st(g, i, ld(g, i) * s);
    }
}

// PyTorch's AdamW order: decay, moments (lerp for m), then the step.
// `scale` (nullable) is the clip factor; step_size = lr / (1 - beta1^t),
// bc2_sqrt = sqrt(1 - beta2^t), both computed on the host in f64.
// `out` (nullable) receives the new weight rounded to T: the working copy
// the next forward reads, written in the same pass as the f32 master.
template <typename T>
__device__ void adamw_impl(float* p, const T* g, float* m, float* v, u64 n, float lr, float beta1,
                           float beta2, float eps, float wd, float step_size, float bc2_sqrt,
                           const float* scale, T* out) {
    const float sc = scale != 0 ? scale[0] : 1.0f;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const float gi = ld(g, i) * sc;
        float pi = p[i] * (1.0f - lr * wd);
        const float mi = m[i] + (1.0f - beta1) * (gi - m[i]);
        const float vi = v[i] * beta2 + (1.0f - beta2) * gi * gi;
        const float denom = sqrtf(vi) / bc2_sqrt + eps;
        pi -= step_size * mi / denom;
        p[i] = pi;
        if (out != 0) st(out, i, pi);
        m[i] = mi;
        v[i] = vi;
    }
}

#define KOLM_OPTIM(S, T)                                                                        \
    extern "C" __global__ void sumsq_partial_##S(const T* g, u64 n, double* partial) {         \
        sumsq_partial_impl<T>(g, n, partial);                                                   \
    }                                                                                           \
    extern "C" __global__ void scale_##S(T* g, u64 n, const float* scale) {                    \
        scale_impl<T>(g, n, scale);                                                             \
    }                                                                                           \
    extern "C" __global__ void adamw_##S(float* p, const T* g, float* m, float* v, u64 n,      \
                                         float lr, float beta1, float beta2, float eps,         \
                                         float wd, float step_size, float bc2_sqrt,             \
                                         const float* scale, T* out) {                          \
        adamw_impl<T>(p, g, m, v, n, lr, beta1, beta2, eps, wd, step_size, bc2_sqrt, scale,     \
                      out);                                                                     \
    }

KOLM_OPTIM(f32, float)
KOLM_OPTIM(bf16, bf16_t)
