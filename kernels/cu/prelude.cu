// Prelude prepended to every kolm kernel source before NVRTC compiles it.
//
// Header-free on purpose: NVRTC then needs no CUDA include directory, so the
// CI compile check runs with nothing but the libnvrtc wheel. bf16 travels as
// raw 16-bit values; conversions are bit casts with round-to-nearest-even.
//
// Determinism rules every kernel follows: each output element is written by
// exactly one thread; sums run in an order fixed by the launch shape and the
// tensor shape alone (per-thread strided loops, then an xor-butterfly across
// the warp, then warps in index order); no float atomics anywhere.

typedef unsigned short bf16_t;
typedef unsigned int u32;
typedef unsigned long long u64;

#define KOLM_INF __int_as_float(0x7f800000)
#define KOLM_NAN __int_as_float(0x7fc00000)

__device__ __forceinline__ float bf16_to_f32(bf16_t h) {
    return __uint_as_float(((u32)h) << 16);
}

__device__ __forceinline__ bf16_t f32_to_bf16(float f) {
    u32 x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (bf16_t)((x >> 16) | 0x0040u);  // keep NaN a (quiet) NaN
    }
    x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest, ties to even
    return (bf16_t)(x >> 16);
}

__device__ __forceinline__ float ld(const float* p, u64 i) { return p[i]; }
__device__ __forceinline__ float ld(const bf16_t* p, u64 i) { return bf16_to_f32(p[i]); }
__device__ __forceinline__ void st(float* p, u64 i, float v) { p[i] = v; }
__device__ __forceinline__ void st(bf16_t* p, u64 i, float v) { p[i] = f32_to_bf16(v); }

// Every lane ends with the same bits: at each step lane i adds v[i ^ o] to
// v[i] and lane i ^ o adds the same two values in the other order, and IEEE
// addition is commutative.
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum_f64(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block; every thread gets the result. `sh` holds 32 floats.
// blockDim.x must be a multiple of 32.
__device__ __forceinline__ float block_sum(float v, float* sh) {
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    __syncthreads();  // sh may still be read by a previous call
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float r = lane < warps ? sh[lane] : 0.0f;
    return warp_sum(r);
}

__device__ __forceinline__ double block_sum_f64(double v, double* sh) {
    v = warp_sum_f64(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    double r = lane < warps ? sh[lane] : 0.0;
    return warp_sum_f64(r);
}

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }
