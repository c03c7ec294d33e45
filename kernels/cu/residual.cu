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

#define KOLM_RESIDUAL(S, T)                                                       \
    extern "C" __global__ void add_inplace_##S(T* acc, const T* x, u64 n) {       \
        add_inplace_impl<T>(acc, x, n);                                           \
    }                                                                             \
    extern "C" __global__ void add_inplace_vec_##S(T* acc, const T* x, u64 n) {   \
        add_inplace_vec_impl<T>(acc, x, n);                                       \
    }

KOLM_RESIDUAL(f32, float)
KOLM_RESIDUAL(bf16, bf16_t)
