// Prelude prepended to every kolm kernel source before NVRTC compiles it.
//
// Header-free on purpose: NVRTC then needs no CUDA include directory, so the
// CI compile check runs with nothing but the libnvrtc wheel. bf16 travels as
// raw 16-bit values; conversions are bit casts with round-to-nearest-even.
//
// Determinism rules every kernel follows: every sum runs in an order fixed
// by the launch shape and the tensor shape alone (per-thread strided loops,
// then an xor-butterfly across the warp, then warps in index order). An
// output element is written by one thread, except where blocks must combine
// partial sums (the tensor-core attention backward's dq across key blocks):
// there the blocks take turns behind counters, one after another in a fixed
// order. The wgmma backward adds its middle shares with float atomics
// (red.add), but only inside those turns, never two at once on an element
// (attention_wg_bwd.cu), so the order, and the bits, still repeat.

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

// 16-byte vector access: 4 f32 or 8 bf16 per chunk. Callers check that the
// row length is a multiple of the chunk and the buffer 16-byte aligned
// (every tensor is its own device allocation, 256-byte aligned).
struct __attribute__((aligned(16))) chunk16 {
    u32 x, y, z, w;
};

__device__ __forceinline__ u32 pack2(float lo, float hi) {
    return (u32)f32_to_bf16(lo) | ((u32)f32_to_bf16(hi) << 16);
}

template <typename T> struct VecWidth;
template <> struct VecWidth<float> { static constexpr int N = 4; };
template <> struct VecWidth<bf16_t> { static constexpr int N = 8; };

__device__ __forceinline__ void ld16(const float* p, float* v) {
    const chunk16 c = *(const chunk16*)p;
    v[0] = __uint_as_float(c.x);
    v[1] = __uint_as_float(c.y);
    v[2] = __uint_as_float(c.z);
    v[3] = __uint_as_float(c.w);
}

__device__ __forceinline__ void ld16(const bf16_t* p, float* v) {
    const chunk16 c = *(const chunk16*)p;
    const u32 w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        v[2 * i] = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

__device__ __forceinline__ void st16(float* p, const float* v) {
    chunk16 c;
    c.x = __float_as_uint(v[0]);
    c.y = __float_as_uint(v[1]);
    c.z = __float_as_uint(v[2]);
    c.w = __float_as_uint(v[3]);
    *(chunk16*)p = c;
}

__device__ __forceinline__ void st16(bf16_t* p, const float* v) {
    chunk16 c;
    c.x = pack2(v[0], v[1]);
    c.y = pack2(v[2], v[3]);
    c.z = pack2(v[4], v[5]);
    c.w = pack2(v[6], v[7]);
    *(chunk16*)p = c;
}

// Unpacks a 16-byte chunk as loaded (bf16 pairs widened by shifts and masks).
template <typename T> __device__ __forceinline__ void unpack16(const chunk16& c, float* v);
template <> __device__ __forceinline__ void unpack16<float>(const chunk16& c, float* v) {
    v[0] = __uint_as_float(c.x);
    v[1] = __uint_as_float(c.y);
    v[2] = __uint_as_float(c.z);
    v[3] = __uint_as_float(c.w);
}
template <> __device__ __forceinline__ void unpack16<bf16_t>(const chunk16& c, float* v) {
    const u32 w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        v[2 * i] = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

// Stores a chunk of outputs: for bf16 each pair is rounded to nearest even
// by one cvt instruction, the same value as f32_to_bf16 for every non-NaN
// input (a NaN comes out as the canonical bf16 NaN).
__device__ __forceinline__ void st16_rn(float* p, const float* v) { st16(p, v); }
__device__ __forceinline__ void st16_rn(bf16_t* p, const float* v) {
    u32 w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w[i]) : "f"(v[2 * i + 1]), "f"(v[2 * i]));
    }
    chunk16 c;
    c.x = w[0];
    c.y = w[1];
    c.z = w[2];
    c.w = w[3];
    *(chunk16*)p = c;
}
