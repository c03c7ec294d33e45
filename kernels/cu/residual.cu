// The residual stream of a transformer: `acc += x` (the gradient flowing
// around a block meets the gradient through it). Elementwise, so every
// element is one add in a fixed order: the same bits at any size.

template <typename T>
__device__ void add_inplace_impl(T* acc, const T* x, u64 n) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        st(acc, i, ld(acc, i) + ld(x, i));
    }
}

// 16-byte form: `chunks` chunks of VecWidth<T>::N elements.
template <typename T>
__device__ void add_inplace_vec_impl(T* acc, const T* x, u64 chunks) {
    constexpr int N = VecWidth<T>::N;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 c = (u64)blockIdx.x * blockDim.x + threadIdx.x; c < chunks; c += stride) {
        float a[N], b[N];
        ld16(acc + c * N, a);
        ld16(x + c * N, b);
#pragma unroll
        for (int j = 0; j < N; ++j) a[j] += b[j];
        st16(acc + c * N, a);
    }
}

// A block of columns from one row-major matrix to another: row r's
// elements [so, so + w) of src (row stride ss) to [dso, dso + w) of dst
// (row stride ds). Moves v into and out of the fused q/k/v projection.
// `n` counts elements (scalar form) or 16-byte chunks (vector form, when
// every offset, stride and w are multiples of the chunk; then all of them
// are passed in chunks).
template <typename T>
__device__ void copy_cols_impl(const T* src, u64 ss, u64 so, T* dst, u64 ds, u64 dso, u64 w, u64 n) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const u64 r = i / w, j = i - r * w;
        dst[r * ds + dso + j] = src[r * ss + so + j];
    }
}

__device__ void copy_cols_vec_impl(const chunk16* src, u64 ss, u64 so, chunk16* dst, u64 ds, u64 dso,
                                   u64 w, u64 n) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const u64 r = i / w, j = i - r * w;
        dst[r * ds + dso + j] = src[r * ss + so + j];
    }
}

extern "C" __global__ void copy_cols_vec(const chunk16* src, u64 ss, u64 so, chunk16* dst, u64 ds,
                                         u64 dso, u64 w, u64 n) {
    copy_cols_vec_impl(src, ss, so, dst, ds, dso, w, n);
}

// Element conversions between a storage type and f32 (round to nearest
// even into bf16), one thread per element: the LoRA update moves a block
// of rows of a weight or its gradient through f32 with these.
template <typename T>
__device__ void to_f32_impl(const T* src, float* dst, u64 n) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = ld(src, i);
}

template <typename T>
__device__ void from_f32_impl(const float* src, T* dst, u64 n) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) st(dst, i, src[i]);
}

#define KOLM_RESIDUAL(S, T)                                                       \
    extern "C" __global__ void add_inplace_##S(T* acc, const T* x, u64 n) {       \
        add_inplace_impl<T>(acc, x, n);                                           \
    }                                                                             \
    extern "C" __global__ void add_inplace_vec_##S(T* acc, const T* x, u64 n) {   \
        add_inplace_vec_impl<T>(acc, x, n);                                       \
    }                                                                             \
    extern "C" __global__ void copy_cols_##S(const T* src, u64 ss, u64 so, T* dst, u64 ds,  \
                                             u64 dso, u64 w, u64 n) {             \
        copy_cols_impl<T>(src, ss, so, dst, ds, dso, w, n);                       \
    }                                                                             \
    extern "C" __global__ void to_f32_##S(const T* src, float* dst, u64 n) {      \
        to_f32_impl<T>(src, dst, n);                                              \
    }                                                                             \
    extern "C" __global__ void from_f32_##S(const float* src, T* dst, u64 n) {    \
        from_f32_impl<T>(src, dst, n);                                            \
    }

KOLM_RESIDUAL(f32, float)
KOLM_RESIDUAL(bf16, bf16_t)
