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

// Second stage of any column reduction: out[j] (+)= sum over chunks. A
// block of 32 warps takes 32 columns, lane = column; warp w sums chunks
// w, w + 32, ... in order, then warp 0 adds the 32 warp sums in warp order.
// The order depends on `chunks` and `d` alone.
#define SUM_WARPS 32
template <typename T>
__device__ void sum_chunks_impl(const float* part, int chunks, int d, T* out, int accumulate) {
    __shared__ float sh[SUM_WARPS][33];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int j = blockIdx.x * 32 + lane;
    float acc = 0.0f;
    if (j < d) {
#pragma unroll 8
        for (int c = warp; c < chunks; c += SUM_WARPS) acc += part[(u64)c * d + j];
    }
    sh[warp][lane] = acc;
    __syncthreads();
    if (warp == 0 && j < d) {
        float s = accumulate ? ld(out, j) : 0.0f;
#pragma unroll
        for (int w = 0; w < SUM_WARPS; ++w) s += sh[w][lane];
        st(out, j, s);
    }
}

// Vectorised forms for rows of up to 32 * K chunks of 16 bytes (K = 1..8,
// the smallest that holds the row, chosen from d alone): one warp per row,
// the row held in registers between the two passes, as loaded (packed bf16
// stays packed, half the registers of f32 values). A row's sum runs in an
// order fixed by d alone (chunks per lane in order, then the warp
// butterfly), as in the block forms above.

// `xc`, when not null, receives a copy of x (the row as loaded): the
// residual stream's x1 = x before a product adds into it with beta = 1,
// without a separate copy that reads x again.
template <typename T, int K>
__device__ void rmsnorm_fwd_vec_impl(const T* x, const T* w, T* y, float* rstd, T* xc, int n, int d,
                                     float eps) {
    constexpr int N = VecWidth<T>::N;
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= n) return;  // whole warps leave together: no block barrier below
    const int chunks = d / N;
    const u64 base = (u64)row * d;
    chunk16 raw[K];
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < K; ++i) {
        const int c = lane + 32 * i;
        if (c < chunks) raw[i] = *(const chunk16*)(x + base + c * N);
    }
#pragma unroll
    for (int i = 0; i < K; ++i) {
        const int c = lane + 32 * i;
        if (c < chunks) {
            float v[N];
            unpack16<T>(raw[i], v);
#pragma unroll
            for (int e = 0; e < N; ++e) ss += v[e] * v[e];
        }
    }
    ss = warp_sum(ss);
    const float r = 1.0f / sqrtf(ss / (float)d + eps);
    if (lane == 0) rstd[row] = r;
#pragma unroll
    for (int i = 0; i < K; ++i) {
        const int c = lane + 32 * i;
        if (c < chunks) {
            float v[N], wv[N], out[N];
            unpack16<T>(raw[i], v);
            ld16(w + c * N, wv);
#pragma unroll
            for (int e = 0; e < N; ++e) out[e] = v[e] * r * wv[e];
            st16_rn(y + base + c * N, out);
            if (xc) *(chunk16*)(xc + base + c * N) = raw[i];
        }
    }
}

// v rounded to T and back to f32 (round to nearest even, as st16_rn).
template <typename T> __device__ __forceinline__ float round_to(float v);
template <> __device__ __forceinline__ float round_to<float>(float v) { return v; }
template <> __device__ __forceinline__ float round_to<bf16_t>(float v) {
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return __uint_as_float((u32)h << 16);
}

// Stores a chunk of dx. With `res` not null (it may be dx itself), stores
// res + dx instead, with dx first rounded to T: the same bits as storing dx
// and then adding it into res with add_inplace (one f32 add of the two T
// values, rounded to nearest even), without the extra pass over memory.
template <typename T>
__device__ __forceinline__ void st_dx(T* dx, const T* res, u64 at, float* out) {
    constexpr int N = VecWidth<T>::N;
    if (res) {
        float rv[N];
        ld16(res + at, rv);
#pragma unroll
        for (int e = 0; e < N; ++e) out[e] = rv[e] + round_to<T>(out[e]);
    }
    st16_rn(dx + at, out);
}

#define RMS_BWD_WARPS 8
#define RMS_MAX_D 2048

template <typename T, int K>
__device__ __forceinline__ void rms_bwd_load(const T* dy, const T* x, u64 base, int lane,
                                             int chunks, chunk16* gr, chunk16* xr) {
    constexpr int N = VecWidth<T>::N;
#pragma unroll
    for (int i = 0; i < K; ++i) {
        const int ch = lane + 32 * i;
        if (ch < chunks) {
            gr[i] = *(const chunk16*)(dy + base + ch * N);
            xr[i] = *(const chunk16*)(x + base + ch * N);
        }
    }
}

// The backward in one pass, for rows of K <= 4 chunks per lane (bf16 d <=
// 1024, f32 d <= 512): dx for each row (one warp per row, as in the
// forward) and, for dw, the block's partial column sums. Block b (8 warps)
// takes rows [R b, R b + R), R = `rows_per_block` (a multiple of 8 chosen
// from n alone, about 512 blocks, so the partial sums stay small); warp w
// takes rows w, w + 8, ... of those in order and adds dy x r per column
// into its own slice of shared memory (8 d floats of dynamic shared memory
// in all, element-major [e][chunk] so that a warp's lanes touch consecutive
// words). Holding these sums in registers instead took 108 registers at
// K = 3; here it is 64, 4 blocks of 256 per SM. The block then adds its 8
// warps' sums in warp order into part[b]. The order is fixed by n and d
// alone; sum_chunks adds the blocks' rows in block order. dx of a row does
// not depend on n.
template <typename T, int K>
__device__ void rmsnorm_bwd_svec_impl(const T* dy, const T* x, const T* w, const float* rstd,
                                      T* dx, const T* res, float* part, int n, int d,
                                      int rows_per_block) {
    constexpr int N = VecWidth<T>::N;
    extern __shared__ float acc_sh[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int chunks = d / N;
    const int r0 = blockIdx.x * rows_per_block;
    const int r1 = imin(n, r0 + rows_per_block);
    float* my = acc_sh + warp * d;
    for (int j = lane; j < d; j += 32) my[j] = 0.0f;
    __syncwarp();  // the slice is zeroed by lanes other than the ones that add to it
    for (int row = r0 + warp; row < r1; row += RMS_BWD_WARPS) {
        const u64 base = (u64)row * d;
        chunk16 gr[K], xr[K];
        rms_bwd_load<T, K>(dy, x, base, lane, chunks, gr, xr);
        const float r = rstd[row];
        float c = 0.0f;
#pragma unroll
        for (int i = 0; i < K; ++i) {
            const int ch = lane + 32 * i;
            if (ch < chunks) {
                float gv[N], xv[N], wv[N];
                unpack16<T>(gr[i], gv);
                unpack16<T>(xr[i], xv);
                ld16(w + ch * N, wv);
#pragma unroll
                for (int e = 0; e < N; ++e) {
                    my[e * chunks + ch] += gv[e] * xv[e] * r;
                    c += (gv[e] * wv[e]) * xv[e];
                }
            }
        }
        c = warp_sum(c);
        const float k = r * r * r * c / (float)d;
#pragma unroll
        for (int i = 0; i < K; ++i) {
            const int ch = lane + 32 * i;
            if (ch < chunks) {
                float gv[N], xv[N], wv[N], out[N];
                unpack16<T>(gr[i], gv);
                unpack16<T>(xr[i], xv);
                ld16(w + ch * N, wv);
#pragma unroll
                for (int e = 0; e < N; ++e) out[e] = r * (gv[e] * wv[e]) - k * xv[e];
                st_dx<T>(dx, res, base + ch * N, out);
            }
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        const int at = (j % N) * chunks + j / N;
        float s = acc_sh[at];
#pragma unroll
        for (int wi = 1; wi < RMS_BWD_WARPS; ++wi) s += acc_sh[wi * d + at];
        part[(u64)blockIdx.x * d + j] = s;
    }
}

// The backward for rows of K = 5..8 chunks per lane (bf16 d > 1024, f32
// d > 512): as rmsnorm_bwd_svec_impl, but each warp keeps its column sums in
// registers and the block takes R = `rows_per_block` rows (about 256
// blocks); the 8 warps' sums are then added in warp order through shared
// memory into part[b]. The order is fixed by n and d alone; sum_chunks adds
// the blocks' rows in block order.
template <typename T, int K>
__device__ void rmsnorm_bwd_vec_impl(const T* dy, const T* x, const T* w, const float* rstd,
                                     T* dx, const T* res, float* part, int n, int d,
                                     int rows_per_block) {
    constexpr int N = VecWidth<T>::N;
    __shared__ float sh[RMS_MAX_D];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int chunks = d / N;
    const int r0 = blockIdx.x * rows_per_block;
    const int r1 = imin(n, r0 + rows_per_block);
    float acc[K][N];
#pragma unroll
    for (int i = 0; i < K; ++i) {
#pragma unroll
        for (int e = 0; e < N; ++e) acc[i][e] = 0.0f;
    }
    for (int row = r0 + warp; row < r1; row += RMS_BWD_WARPS) {
        const u64 base = (u64)row * d;
        chunk16 gr[K], xr[K];
        rms_bwd_load<T, K>(dy, x, base, lane, chunks, gr, xr);
        const float r = rstd[row];
        float c = 0.0f;
#pragma unroll
        for (int i = 0; i < K; ++i) {
            const int ch = lane + 32 * i;
            if (ch < chunks) {
                float gv[N], xv[N], wv[N];  // w is re-read (from L1), not held
                unpack16<T>(gr[i], gv);
                unpack16<T>(xr[i], xv);
                ld16(w + ch * N, wv);
#pragma unroll
                for (int e = 0; e < N; ++e) {
                    acc[i][e] += gv[e] * xv[e] * r;
                    c += (gv[e] * wv[e]) * xv[e];
                }
            }
        }
        c = warp_sum(c);
        const float k = r * r * r * c / (float)d;
#pragma unroll
        for (int i = 0; i < K; ++i) {
            const int ch = lane + 32 * i;
            if (ch < chunks) {
                float gv[N], xv[N], wv[N], out[N];
                unpack16<T>(gr[i], gv);
                unpack16<T>(xr[i], xv);
                ld16(w + ch * N, wv);
#pragma unroll
                for (int e = 0; e < N; ++e) out[e] = r * (gv[e] * wv[e]) - k * xv[e];
                st_dx<T>(dx, res, base + ch * N, out);
            }
        }
    }
    for (int wi = 0; wi < RMS_BWD_WARPS; ++wi) {
        if (warp == wi) {
#pragma unroll
            for (int i = 0; i < K; ++i) {
                const int ch = lane + 32 * i;
                if (ch < chunks) {
#pragma unroll
                    for (int e = 0; e < N; ++e) {
                        const int j = ch * N + e;
                        sh[j] = wi == 0 ? acc[i][e] : sh[j] + acc[i][e];
                    }
                }
            }
        }
        __syncthreads();
    }
    for (int j = threadIdx.x; j < d; j += blockDim.x) part[(u64)blockIdx.x * d + j] = sh[j];
}

// An f32 bit pattern no partial sum can take (a signalling NaN: every
// partial is the result of an f32 add, and a NaN result of an add is the
// canonical quiet NaN), marking a partial not yet written.
#define RMS_PART_EMPTY 0x7f800001u

__device__ __forceinline__ void st_relaxed(float* p, float v) {
    asm volatile("st.relaxed.gpu.global.f32 [%0], %1;" ::"l"(p), "f"(v) : "memory");
}
__device__ __forceinline__ float ld_relaxed(const float* p) {
    float v;
    asm volatile("ld.relaxed.gpu.global.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
    return v;
}

// dw in the backward's own launch, without a fence or a second launch.
// `part` is the Gpu's persistent partial-sum buffer, every word
// RMS_PART_EMPTY between launches; main block b (b < nb, nb = the row
// blocks) stores its partial row part[b] with relaxed gpu-scope stores and
// exits. The launch has R = `tail_blocks` more blocks after the main ones,
// which do only this: tail block s = blockIdx.x - nb sums the 16-column
// slices s, s + R, ... of dw.
// - Its threads load their partials with relaxed gpu-scope loads from the
//   start and reload those that still read RMS_PART_EMPTY every round
//   (with a short pause) until none does: the value is its own flag, so no
//   release, acquire or fence is needed (a gpu-scope fence waits for the
//   block's dx stores to drain, which measured slower), and no ticket
//   atomics (a round trip each, and a ticketed tail can only start after
//   the last partial, where these blocks are already summing).
// - The sum is sum_chunks's: accumulator a (a = 0..31) adds rows a,
//   a + 32, ... in order from 0.0f, then dw = (accumulate ? dw : 0) +
//   acc_0 + ... + acc_31 in order. Thread (warp w, half-warp h) keeps
//   accumulators 2 w + h and 2 w + h + 16 of its column (16 columns a
//   slice, so R = d / 16 blocks share the work). So dw has sum_chunks's
//   bits whatever R is (R comes from the device: it splits the work, never
//   an order). Each partial read is set back to RMS_PART_EMPTY by the
//   thread that read it.
// - Deadlock-free whatever order the blocks start in: tail blocks wait only
//   for main blocks, main blocks never wait, and R <= the multiprocessor
//   count while two blocks fit on each, so tail blocks never hold every
//   slot. A wait that never ends traps.
template <typename T>
__device__ __noinline__ void rms_dw_tail(float* part, T* dw, int accumulate, int tail_blocks,
                                         int d, u32 nb, float* sh) {
    constexpr int COLS = 16, HALVES = 32 / COLS;
    constexpr int WARPS = RMS_BWD_WARPS;               // 256 threads
    constexpr int M = SUM_WARPS / (WARPS * HALVES);    // accumulators per thread
    constexpr int B = 8;                               // rows per accumulator loaded at once
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int col = lane % COLS, half = lane / COLS;
    const int a0 = warp * HALVES + half;  // accumulators a0 + WARPS HALVES m
    const int slices = (d + COLS - 1) / COLS;
    for (int s = (int)(blockIdx.x - nb); s < slices; s += tail_blocks) {
        const int j = s * COLS + col;
        if (j < d) {
            float acc[M];
#pragma unroll
            for (int m = 0; m < M; ++m) acc[m] = 0.0f;
            for (u32 c0 = 0; c0 < nb; c0 += SUM_WARPS * B) {
                float v[M][B];
#pragma unroll
                for (int m = 0; m < M; ++m) {
#pragma unroll
                    for (int i = 0; i < B; ++i) {
                        const u32 c = c0 + a0 + WARPS * HALVES * m + SUM_WARPS * i;
                        v[m][i] = c < nb ? ld_relaxed(part + (u64)c * d + j) : 0.0f;
                    }
                }
                u32 rounds = 0;
                for (;;) {
                    bool missing = false;
#pragma unroll
                    for (int m = 0; m < M; ++m) {
#pragma unroll
                        for (int i = 0; i < B; ++i) {
                            const u32 c = c0 + a0 + WARPS * HALVES * m + SUM_WARPS * i;
                            missing |= c < nb && __float_as_uint(v[m][i]) == RMS_PART_EMPTY;
                        }
                    }
                    if (!missing) break;
                    __nanosleep(32);
                    if (++rounds > (1u << 24)) __trap();
#pragma unroll
                    for (int m = 0; m < M; ++m) {
#pragma unroll
                        for (int i = 0; i < B; ++i) {
                            const u32 c = c0 + a0 + WARPS * HALVES * m + SUM_WARPS * i;
                            if (c < nb && __float_as_uint(v[m][i]) == RMS_PART_EMPTY) {
                                v[m][i] = ld_relaxed(part + (u64)c * d + j);
                            }
                        }
                    }
                }
#pragma unroll
                for (int m = 0; m < M; ++m) {
#pragma unroll
                    for (int i = 0; i < B; ++i) {
                        const u32 c = c0 + a0 + WARPS * HALVES * m + SUM_WARPS * i;
                        if (c < nb) {
                            acc[m] += v[m][i];
                            st_relaxed(part + (u64)c * d + j, __uint_as_float(RMS_PART_EMPTY));
                        }
                    }
                }
            }
#pragma unroll
            for (int m = 0; m < M; ++m) sh[(a0 + WARPS * HALVES * m) * 33 + col] = acc[m];
        }
        __syncthreads();
        if (warp == 0 && half == 0 && j < d) {
            float o = accumulate ? ld(dw, j) : 0.0f;
#pragma unroll
            for (int a = 0; a < SUM_WARPS; ++a) o += sh[a * 33 + col];
            st(dw, j, o);
        }
        __syncthreads();  // sh is refilled for the next slice
    }
}

// A chunk of w as f32 from the block's copy in shared memory (two 16-byte
// shared loads instead of a global load and an unpack per chunk and pass).
template <int N>
__device__ __forceinline__ void ld_w(const float* w_sh, int at, float* v) {
#pragma unroll
    for (int e = 0; e < N; e += 4) {
        const float4 c = *(const float4*)(w_sh + at + e);
        v[e] = c.x;
        v[e + 1] = c.y;
        v[e + 2] = c.z;
        v[e + 3] = c.w;
    }
}

// The loads of a grouped-backward warp's trip at rows rb + q (lane group
// q): dy and x chunks l, l + L, ... and rstd; zeros for rows past r1.
template <typename T, int L, int K>
__device__ __forceinline__ void gvec_load(const T* dy, const T* x, const float* rstd, int rb,
                                          int q, int l, int r1, int d, chunk16* gr, chunk16* xr,
                                          float& r) {
    constexpr int N = VecWidth<T>::N;
    const int row = rb + q;
    const bool ok = row < r1;
    const u64 base = (u64)(ok ? row : rb) * d;
#pragma unroll
    for (int i = 0; i < K; ++i) {
        const int ch = l + L * i;
        if (ok) {
            gr[i] = *(const chunk16*)(dy + base + ch * N);
            xr[i] = *(const chunk16*)(x + base + ch * N);
        } else {
            gr[i] = chunk16{0u, 0u, 0u, 0u};
            xr[i] = chunk16{0u, 0u, 0u, 0u};
        }
    }
    r = ok ? rstd[row] : 0.0f;
}

// The backward for rows whose 16-byte chunks split evenly over L = 8 or 16
// lanes, K = chunks / L per lane (chosen from d alone, e.g. bf16 d = 576:
// 72 chunks = 8 lanes x 9), where one warp per row would leave lanes idle
// (576 bf16: lanes 8 to 31 in the third chunk). A warp takes G = 32 / L
// rows at once, lane group q = lane / L one row; lane l = lane % L holds
// chunks l, l + L, ... (a group reads contiguous 16 L bytes per step). A
// row's dot product: per-lane partials over its chunks in order, then a
// fixed xor tree over the group's L lanes; dx of a row depends on d alone.
// dw: per chunk, the G rows' column values are reduce-scattered over the
// groups by xor shuffles (lane bit 16, then 8: each step adds the partner's
// half, a fixed tree, float addition being commutative), so that each lane
// ends with N / G of the chunk's columns, summed over the G rows, which it
// adds into its warp's slice of shared memory (element-major with stride P
// = chunks padded to 4 mod 16, so the groups hit different banks). Block b
// (8 warps) takes R = `rows_per_block` rows (a multiple of 8 G from n
// alone); warp w takes rows R b + G (w + 8 t) + q. The warps' slices are
// then added in warp order into part[b], as in the other forms. With
// `tail_blocks` R > 0, the launch's R blocks after the nb = ceil(n / rows
// per block) main blocks add the blocks' rows in block order into dw
// (rms_dw_tail, sum_chunks's order, no second launch); with R = 0, part is
// scratch and the wrapper launches sum_chunks. The order is fixed by n and
// d alone.
//
// Start of a block: w's loads (into registers), then the first trip's row
// loads, then the slice zeroing and w's copy into shared memory, so both
// are in flight at once with w's first. With w loaded and stored before
// the rows were requested the rows waited for w's round trip (per-block
// %globaltimer stamps showed it); with the rows requested first, w queued
// behind them and the first trip's arithmetic waited for it (which
// measured slower). Each later trip's loads are issued at the end of the
// trip before (the same program order as at the top of the loop).
template <typename T, int L, int K>
__device__ void rmsnorm_bwd_gvec_impl(const T* dy, const T* x, const T* w, const float* rstd,
                                      T* dx, const T* res, float* part, int n, int d,
                                      int rows_per_block, T* dw, int accumulate,
                                      int tail_blocks) {
    constexpr int N = VecWidth<T>::N;
    constexpr int G = 32 / L;
    constexpr int H = N / G;  // columns per chunk a lane keeps after the scatter
    extern __shared__ float acc_sh[];
    const u32 nb = (u32)((n + rows_per_block - 1) / rows_per_block);
    if (blockIdx.x >= nb) {  // one of the tail blocks
        rms_dw_tail<T>(part, dw, accumulate, tail_blocks, d, nb, acc_sh);
        return;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int q = lane / L, l = lane % L;
    const int chunks = K * L;
    const int P = chunks + ((4 - chunks) & 15);
    const int r0 = blockIdx.x * rows_per_block;
    const int r1 = imin(n, r0 + rows_per_block);
    constexpr int WR = (16 * L * K / (int)sizeof(T) + 255) / 256;  // w values a thread loads
    float wreg[WR];
#pragma unroll
    for (int i = 0; i < WR; ++i) {
        const int j = threadIdx.x + 256 * i;
        wreg[i] = j < d ? ld(w, j) : 0.0f;
    }
    constexpr int STEP = G * RMS_BWD_WARPS;  // rows the block's warps take per trip
    int rb = r0 + G * warp;
    chunk16 gr[K], xr[K];
    float r;
    gvec_load<T, L, K>(dy, x, rstd, rb, q, l, r1, d, gr, xr, r);
    float* my = acc_sh + warp * N * P;
    for (int j = lane; j < N * P; j += 32) my[j] = 0.0f;
    // w widened to f32 once per block, after the warps' slices: the same
    // values as unpacking it per chunk, fewer instructions per chunk.
    float* w_sh = acc_sh + RMS_BWD_WARPS * N * P;
#pragma unroll
    for (int i = 0; i < WR; ++i) {
        const int j = threadIdx.x + 256 * i;
        if (j < d) w_sh[j] = wreg[i];
    }
    __syncthreads();
    for (; rb < r1; rb += STEP) {
        const int row = rb + q;
        const bool ok = row < r1;
        const u64 base = (u64)(ok ? row : rb) * d;
        float c = 0.0f;
#pragma unroll
        for (int i = 0; i < K; ++i) {
            const int ch = l + L * i;
            float gv[N], xv[N], wv[N], v[N];
            unpack16<T>(gr[i], gv);
            unpack16<T>(xr[i], xv);
            ld_w<N>(w_sh, ch * N, wv);
#pragma unroll
            for (int e = 0; e < N; ++e) {
                v[e] = gv[e] * xv[e] * r;
                c += (gv[e] * wv[e]) * xv[e];
            }
            // Reduce-scatter over the G groups of the warp.
            int e0 = 0;
#pragma unroll
            for (int m = 16, h = N / 2; m >= L; m >>= 1, h >>= 1) {
                const bool hi = (lane & m) != 0;
#pragma unroll
                for (int t = 0; t < h; ++t) {
                    const float send = hi ? v[t] : v[t + h];
                    const float keep = hi ? v[t + h] : v[t];
                    v[t] = keep + __shfl_xor_sync(0xffffffffu, send, m);
                }
                if (hi) e0 += h;
            }
#pragma unroll
            for (int t = 0; t < H; ++t) my[(e0 + t) * P + ch] += v[t];
        }
#pragma unroll
        for (int m = 1; m < L; m <<= 1) c += __shfl_xor_sync(0xffffffffu, c, m);
        const float k = r * r * r * c / (float)d;
        if (ok) {
            // The residual (which may be dx itself) is read three chunks at
            // a time ahead of their stores: the compiler cannot move a read
            // of res past a store to dx. The add is st_dx's, the same bits.
#pragma unroll
            for (int i0 = 0; i0 < K; i0 += 3) {
                chunk16 rr[3];
#pragma unroll
                for (int j = 0; j < 3; ++j) {
                    if (res && i0 + j < K) {
                        rr[j] = *(const chunk16*)(res + base + (l + L * (i0 + j)) * N);
                    }
                }
#pragma unroll
                for (int j = 0; j < 3; ++j) {
                    const int i = i0 + j;
                    if (i < K) {
                        const int ch = l + L * i;
                        float gv[N], xv[N], wv[N], out[N];
                        unpack16<T>(gr[i], gv);
                        unpack16<T>(xr[i], xv);
                        ld_w<N>(w_sh, ch * N, wv);
#pragma unroll
                        for (int e = 0; e < N; ++e) out[e] = r * (gv[e] * wv[e]) - k * xv[e];
                        if (res) {
                            float rv[N];
                            unpack16<T>(rr[j], rv);
#pragma unroll
                            for (int e = 0; e < N; ++e) out[e] = rv[e] + round_to<T>(out[e]);
                        }
                        st16_rn(dx + base + ch * N, out);
                    }
                }
            }
        }
        // The next trip's loads (see the function's comment).
        if (rb + STEP < r1) gvec_load<T, L, K>(dy, x, rstd, rb + STEP, q, l, r1, d, gr, xr, r);
    }
    __syncthreads();
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        const int at = (j % N) * P + j / N;
        float s = acc_sh[at];
#pragma unroll
        for (int wi = 1; wi < RMS_BWD_WARPS; ++wi) s += acc_sh[wi * N * P + at];
        if (tail_blocks > 0) {
            st_relaxed(part + (u64)blockIdx.x * d + j, s);  // read by the tail (see there)
        } else {
            part[(u64)blockIdx.x * d + j] = s;
        }
    }
}

#define KOLM_NORM_VEC(S, T, K)                                                                \
    extern "C" __global__ void rmsnorm_fwd_vec##K##_##S(const T* x, const T* w, T* y,        \
                                                       float* rstd, T* xc, int n, int d,       \
                                                       float eps) {                            \
        rmsnorm_fwd_vec_impl<T, K>(x, w, y, rstd, xc, n, d, eps);                             \
    }
#define KOLM_NORM_BVEC(S, T, K)                                                               \
    extern "C" __global__ void __launch_bounds__(256)                                         \
        rmsnorm_bwd_vec##K##_##S(const T* dy, const T* x, const T* w, const float* rstd,     \
                                 T* dx, const T* res, float* part, int n, int d,             \
                                 int rows_per_block) {                                       \
        rmsnorm_bwd_vec_impl<T, K>(dy, x, w, rstd, dx, res, part, n, d, rows_per_block);      \
    }

#define KOLM_NORM_SVEC(S, T, K)                                                                \
    extern "C" __global__ void __launch_bounds__(256, 4)                                        \
        rmsnorm_bwd_svec##K##_##S(const T* dy, const T* x, const T* w, const float* rstd,      \
                                  T* dx, const T* res, float* part, int n, int d,              \
                                  int rows_per_block) {                                        \
        rmsnorm_bwd_svec_impl<T, K>(dy, x, w, rstd, dx, res, part, n, d, rows_per_block);       \
    }

#define KOLM_NORM_GVEC(S, T, L, K)                                                          \
    extern "C" __global__ void __launch_bounds__(256, 2)                                      \
        rmsnorm_bwd_gvec##L##x##K##_##S(const T* dy, const T* x, const T* w,                 \
                                        const float* rstd, T* dx, const T* res, float* part, \
                                        int n, int d, int rows_per_block, T* dw,            \
                                        int accumulate, int tail_blocks) {                   \
        rmsnorm_bwd_gvec_impl<T, L, K>(dy, x, w, rstd, dx, res, part, n, d, rows_per_block,   \
                                       dw, accumulate, tail_blocks);                           \
    }

#define KOLM_NORM_VECS(S, T) \
    KOLM_NORM_VEC(S, T, 1)   \
    KOLM_NORM_VEC(S, T, 2)   \
    KOLM_NORM_VEC(S, T, 3)   \
    KOLM_NORM_VEC(S, T, 4)   \
    KOLM_NORM_VEC(S, T, 5)   \
    KOLM_NORM_VEC(S, T, 6)   \
    KOLM_NORM_VEC(S, T, 7)   \
    KOLM_NORM_VEC(S, T, 8)   \
    KOLM_NORM_SVEC(S, T, 1)  \
    KOLM_NORM_SVEC(S, T, 2)  \
    KOLM_NORM_SVEC(S, T, 3)  \
    KOLM_NORM_SVEC(S, T, 4)  \
    KOLM_NORM_BVEC(S, T, 5)  \
    KOLM_NORM_BVEC(S, T, 6)  \
    KOLM_NORM_BVEC(S, T, 7)  \
    KOLM_NORM_BVEC(S, T, 8)  \
    KOLM_NORM_GVEC(S, T, 8, 5) \
    KOLM_NORM_GVEC(S, T, 8, 7) \
    KOLM_NORM_GVEC(S, T, 8, 9) \
    KOLM_NORM_GVEC(S, T, 16, 5) \
    KOLM_NORM_GVEC(S, T, 16, 7) \
    KOLM_NORM_GVEC(S, T, 16, 9)

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
KOLM_NORM_VECS(f32, float)
KOLM_NORM_VECS(bf16, bf16_t)
