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
// `sc` is the clip factor; step_size = lr / (1 - beta1^t), bc2_sqrt =
// sqrt(1 - beta2^t), both computed on the host in f64. One element; the
// single-tensor and multi-tensor kernels share it, so they give the same
// bits.
__device__ __forceinline__ void adamw_one(float& p, float g, float& m, float& v, float lr,
                                          float beta1, float beta2, float eps, float wd,
                                          float step_size, float bc2_sqrt) {
    float pi = p * (1.0f - lr * wd);
    const float mi = m + (1.0f - beta1) * (g - m);
    const float vi = v * beta2 + (1.0f - beta2) * g * g;
    const float denom = sqrtf(vi) / bc2_sqrt + eps;
    pi -= step_size * mi / denom;
    p = pi;
    m = mi;
    v = vi;
}

// `out` (nullable) receives the new weight rounded to T: the working copy
// the next forward reads, written in the same pass as the f32 master.
template <typename T>
__device__ void adamw_impl(float* p, const T* g, float* m, float* v, u64 n, float lr, float beta1,
                           float beta2, float eps, float wd, float step_size, float bc2_sqrt,
                           const float* scale, T* out) {
    const float sc = scale != 0 ? scale[0] : 1.0f;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        float pi = p[i], mi = m[i], vi = v[i];
        adamw_one(pi, ld(g, i) * sc, mi, vi, lr, beta1, beta2, eps, wd, step_size, bc2_sqrt);
        p[i] = pi;
        if (out != 0) st(out, i, pi);
        m[i] = mi;
        v[i] = vi;
    }
}

// Multi-tensor forms: one launch over every parameter of a model instead of
// one (or two) per tensor. `table` holds, per tensor, the device addresses
// of master, gradient, m, v, working copy, then the element count (six
// u64). `chunks` holds (tensor, first element) per block: a partition fixed
// by the tensors' sizes (MT_CHUNK elements each, the last of a tensor
// shorter), so the sums below run in the same order on any device.
#define MT_CHUNK 32768

template <typename T>
__device__ void sumsq_multi_impl(const u64* table, const u32* chunks, double* partial) {
    __shared__ double sh[32];
    const u64* e = table + 6 * chunks[2 * blockIdx.x];
    const T* g = (const T*)e[1];
    const u64 n = e[5];
    const u64 start = chunks[2 * blockIdx.x + 1];
    const u64 end = start + MT_CHUNK < n ? start + MT_CHUNK : n;
    double acc = 0.0;
    for (u64 i = start + threadIdx.x; i < end; i += blockDim.x) {
        const double x = (double)ld(g, i);
        acc += x * x;
    }
    acc = block_sum_f64(acc, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

template <typename T>
__device__ void adamw_multi_impl(const u64* table, const u32* chunks, float lr, float beta1,
                                 float beta2, float eps, float wd, float step_size, float bc2_sqrt,
                                 const float* scale) {
    const u64* e = table + 6 * chunks[2 * blockIdx.x];
    float* p = (float*)e[0];
    const T* g = (const T*)e[1];
    float* m = (float*)e[2];
    float* v = (float*)e[3];
    T* w = (T*)e[4];
    const u64 n = e[5];
    const u64 start = chunks[2 * blockIdx.x + 1];
    const u64 end = start + MT_CHUNK < n ? start + MT_CHUNK : n;
    const float sc = scale[0];
    // Four elements per thread with 16-byte loads while a whole group of
    // four remains (start is a multiple of MT_CHUNK and every buffer is
    // 256-byte aligned, so the groups are aligned); the tail one by one.
    u64 i = start + 4 * (u64)threadIdx.x;
    for (; i + 3 < end; i += 4 * (u64)blockDim.x) {
        float4 p4 = *(float4*)(p + i), m4 = *(float4*)(m + i), v4 = *(float4*)(v + i);
        float gs[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) gs[j] = ld(g, i + j) * sc;
        adamw_one(p4.x, gs[0], m4.x, v4.x, lr, beta1, beta2, eps, wd, step_size, bc2_sqrt);
        adamw_one(p4.y, gs[1], m4.y, v4.y, lr, beta1, beta2, eps, wd, step_size, bc2_sqrt);
        adamw_one(p4.z, gs[2], m4.z, v4.z, lr, beta1, beta2, eps, wd, step_size, bc2_sqrt);
        adamw_one(p4.w, gs[3], m4.w, v4.w, lr, beta1, beta2, eps, wd, step_size, bc2_sqrt);
        *(float4*)(p + i) = p4;
        *(float4*)(m + i) = m4;
        *(float4*)(v + i) = v4;
        st(w, i, p4.x);
        st(w, i + 1, p4.y);
        st(w, i + 2, p4.z);
        st(w, i + 3, p4.w);
    }
    // At most three elements remain past the last whole group of the chunk.
    const u64 tail = end - (end - start) % 4;
    for (u64 j = tail + threadIdx.x; j < end; j += blockDim.x) {
        float pj = p[j], mj = m[j], vj = v[j];
        adamw_one(pj, ld(g, j) * sc, mj, vj, lr, beta1, beta2, eps, wd, step_size, bc2_sqrt);
        p[j] = pj;
        st(w, j, pj);
        m[j] = mj;
        v[j] = vj;
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
    }                                                                                           \
    extern "C" __global__ void sumsq_multi_##S(const u64* table, const u32* chunks,            \
                                               double* partial) {                              \
        sumsq_multi_impl<T>(table, chunks, partial);                                            \
    }                                                                                           \
    extern "C" __global__ void adamw_multi_##S(const u64* table, const u32* chunks, float lr,  \
                                               float beta1, float beta2, float eps, float wd,  \
                                               float step_size, float bc2_sqrt,                \
                                               const float* scale) {                           \
        adamw_multi_impl<T>(table, chunks, lr, beta1, beta2, eps, wd, step_size, bc2_sqrt,      \
                            scale);                                                             \
    }

KOLM_OPTIM(f32, float)
KOLM_OPTIM(bf16, bf16_t)
