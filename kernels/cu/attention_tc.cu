// Causal grouped-query attention for bf16 with head dimension 64 on the
// tensor cores (mma.sync m16n8k16, bf16 in, f32 accumulate), flash-style.
// Same layouts and same determinism argument as attention.cu: a block owns
// 128 query rows (forward) or 128 key rows (backward), four warps of 32
// rows each (two m-tiles of 16), and walks the other side tile by tile in
// an order fixed by the shapes; every output element is accumulated by one
// thread in a fixed order, and the only cross-thread sums are fixed
// xor-shuffles within a row's four threads, a sum of per-head dk/dv
// partials in head order by a second kernel (long sequences), and dq's sum
// over key blocks, added one block after another in key-block order
// (fused_dq). P and dS are rounded to bf16 before their products, as
// FlashAttention-2 does; l and the softmax statistics stay in f32.
//
// Why 32 rows per warp: a warp that owns 16 rows uses each B fragment (one
// ldmatrix.x4 of a K, V, Q or dO tile, 512 bytes of shared memory) for two
// MMAs; with two m-tiles it uses it for four, and each K/V tile in shared
// memory serves 128 rows instead of 64. The price is registers (254 to 255,
// two blocks per SM), which measured cheaper than the shared-memory traffic.
//
// The MMA loops are fully unrolled with compile-time bounds: skipping the
// masked column tiles of a diagonal tile with run-time bounds saved MMAs but
// was slower overall (the compiler no longer interleaves the ldmatrix and
// MMA streams across the branches). Only whole warps or 16-query chunks
// that lie entirely past the diagonal are skipped.
//
// Grids are (batch * heads, tiles): blocks start in index order, x first,
// so every head's longest block (the last query tile, or the first key
// tile) starts before any shorter one. Causal blocks differ in length up to
// seq / 128 times, and longest-first leaves only short blocks for the end of
// the launch. The order of blocks changes no result.

#define TC_ROWS 64   // rows per tile
#define TC_LD 72     // padded row (bf16): 144 bytes, so the 8 rows a warp
                     // reads at once fall in different banks

__device__ __forceinline__ u32 smem_u32addr(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// d += a * b for one 16x8x16 tile.
__device__ __forceinline__ void mma_bf16(float* d, const u32* a, const u32* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

#define TC_LOG2E 1.4426950408889634f

// 2^x by the special-function unit (ex2.approx, flush-to-zero): one
// instruction, where expf is a range reduction plus fix-ups. Scores are
// pre-multiplied by scale * log2(e) with one FFMA, as FlashAttention does;
// ex2.approx(-inf) = +0, so masked scores give p = 0. Deterministic: the
// instruction's result depends on its input alone.
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Loads rows [r0, r0 + 64) of head h (64 bf16 each) into a padded tile,
// zeros past seq. 16-byte accesses.
__device__ __forceinline__ void tc_load_tile(bf16_t* s, const bf16_t* src, int b, int r0, int h,
                                             int seq, int heads) {
    for (int c = threadIdx.x; c < TC_ROWS * 8; c += blockDim.x) {
        const int r = c >> 3, part = c & 7;
        chunk16 val = {0u, 0u, 0u, 0u};
        if (r0 + r < seq) {
            val = *(const chunk16*)(src + (((u64)b * seq + r0 + r) * heads + h) * 64 + part * 8);
        }
        *(chunk16*)(s + r * TC_LD + part * 8) = val;
    }
}

// Asynchronous global -> shared copy of a 64-row tile (cp.async, 16 bytes
// per instruction, zero-filled past seq): the copy holds no registers while
// in flight.
__device__ __forceinline__ void tc_async_tile(bf16_t* s, const bf16_t* src, int b, int r0, int h,
                                              int seq, int heads) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int c = threadIdx.x + i * 128;
        const int row = c >> 3, part = c & 7;
        const bool in = r0 + row < seq;
        const bf16_t* gp = src + (((u64)b * seq + (in ? r0 + row : 0)) * heads + h) * 64 + part * 8;
        const u32 dst = smem_u32addr(s + row * TC_LD + part * 8);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gp),
                     "r"(in ? 16 : 0));
    }
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// A fragments (16 rows starting at r0, all four 16-wide k steps of d = 64)
// of a row-major tile, one ldmatrix.x4 per k step: lanes 0..15 address rows
// r0 + 0..15 at column kk * 16, lanes 16..31 the same rows at kk * 16 + 8,
// so matrices 0..3 are exactly fragment registers a0..a3.
__device__ __forceinline__ void tc_a_frags(u32 (*a)[4], const bf16_t* s, int r0, int lane) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        const u32 addr = smem_u32addr(s + (r0 + (lane & 15)) * TC_LD + kk * 16 + (lane >> 4) * 8);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(a[kk][0]), "=r"(a[kk][1]), "=r"(a[kk][2]), "=r"(a[kk][3])
                     : "r"(addr));
    }
}

// The 16 x (16 KS) f32 accumulator tiles as bf16 A fragments (k = the columns).
template <int KS = 4>
__device__ __forceinline__ void tc_c_to_a(u32 (*a)[4], const float (*c)[4]) {
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
        a[kk][0] = pack2(c[2 * kk][0], c[2 * kk][1]);
        a[kk][1] = pack2(c[2 * kk][2], c[2 * kk][3]);
        a[kk][2] = pack2(c[2 * kk + 1][0], c[2 * kk + 1][1]);
        a[kk][3] = pack2(c[2 * kk + 1][2], c[2 * kk + 1][3]);
    }
}

__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Writes rows r and r + 8 of a 16 x 64 accumulator times `mul0` / `mul1`.
__device__ __forceinline__ void tc_store_rows(bf16_t* dst, const float (*acc)[4], int b, int r,
                                              int h, int seq, int heads, float mul0, float mul1,
                                              int t) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int row = r + 8 * half;
        if (row >= seq) continue;
        const float mul = half ? mul1 : mul0;
        bf16_t* out = dst + (((u64)b * seq + row) * heads + h) * 64;
#pragma unroll
        for (int nd = 0; nd < 8; ++nd) {
            *(u32*)(out + nd * 8 + 2 * t) =
                pack2(acc[nd][2 * half] * mul, acc[nd][2 * half + 1] * mul);
        }
    }
}

#define TC_TILE (TC_ROWS * TC_LD)

// Bytes of dynamic shared memory of the backward kernel (ops/attention.rs
// passes the same number): eight padded 64-row tiles (K, V, two stages of
// Q and dO), two stages of 64 lse and 64 delta values, and dS^T of one
// step (two more padded tiles).
#define TC_DKVQ_SMEM (10 * TC_TILE * 2 + 4 * TC_ROWS * 4)

// 4-byte asynchronous copy, zero-filled when `in` is false.
__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool in) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_u32addr(dst)), "l"(src),
                 "r"(in ? 4 : 0));
}

// acc[mt] (16 x 8 NT) += A[mt] (16 x 64) * M^T for MT m-tiles, where M is
// a tile whose rows are the output columns: B[k][n] = M[n][k]. k steps
// outer, column tiles inner: consecutive MMAs write different accumulators
// (a chain's links are 2 NT MMAs apart, not adjacent), and each accumulator
// takes its k steps in increasing order. One ldmatrix.x4 per (k step, pair
// of column tiles): matrix j = lane / 8 covers rows (nt + j / 2) * 8 + 0..7
// at columns kk * 16 + (j % 2) * 8, used by all MT m-tiles. NT column
// tiles of 8 (m points at the first one's row), NT even.
template <int MT, int NT>
__device__ __forceinline__ void tc_mul_rows(float (*acc)[NT][4], const u32 (*a)[4][4],
                                            const bf16_t* m, int lane) {
    static_assert(NT % 2 == 0, "column tiles in pairs");
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
        for (int nt = 0; nt < NT; nt += 2) {
            u32 bb[4];
            const u32 addr = smem_u32addr(m + ((nt + (lane >> 4)) * 8 + (lane & 7)) * TC_LD +
                                          kk * 16 + ((lane >> 3) & 1) * 8);
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                         : "=r"(bb[0]), "=r"(bb[1]), "=r"(bb[2]), "=r"(bb[3])
                         : "r"(addr));
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma_bf16(acc[mt][nt], a[mt][kk], bb);
                mma_bf16(acc[mt][nt + 1], a[mt][kk], bb + 2);
            }
        }
    }
}

// acc[mt] (16 x 64) += A[mt] (k = KS steps of 16 tile rows) * M for MT
// m-tiles, where M's rows are k: B[k][n] = M[k][n], fetched transposed by
// ldmatrix. One x4 fetches two column tiles (matrices 0, 1 are rows
// kk*16 + 0..7, 8..15 of columns nd*8, matrices 2, 3 the same rows of
// columns (nd + 1) * 8), used by all MT m-tiles. k steps outer, so an
// accumulator's links are 4 MT MMAs apart, and they arrive in increasing
// order.
template <int MT, int KS>
__device__ __forceinline__ void tc_mul_cols(float (*acc)[8][4], const u32 (*a)[KS][4],
                                            const bf16_t* m, int lane) {
#pragma unroll
    for (int o = 0; o < 4 * KS; ++o) {
        // o = kk * 4 + nd / 2; with one k step (the backward's 16-query
        // chunks) o is just the column pair.
        const int nd = KS == 1 ? 2 * o : 2 * (o % 4), kk = KS == 1 ? 0 : o / 4;
        u32 bb[4];
        const int row = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int col = (nd + (lane >> 4)) * 8;
        const u32 addr = smem_u32addr(m + row * TC_LD + col);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(bb[0]), "=r"(bb[1]), "=r"(bb[2]), "=r"(bb[3])
                     : "r"(addr));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            mma_bf16(acc[mt][nd], a[mt][kk], bb);
            mma_bf16(acc[mt][nd + 1], a[mt][kk], bb + 2);
        }
    }
}

// Forward over blocks of 4 * 16 * MT (<= 128) query rows, 64-key tiles.
// The Q rows pass through the second K/V stage once (their fragments then
// live in registers), so 36 KB of static shared memory suffice (`smem`:
// four padded tiles, stage i's K then its V). Warp w owns rows
// wr = q0 + 16 MT w .. + 16 MT - 1; it skips a key tile that lies wholly
// past its rows and masks only where the tile reaches its rows.
template <int MT>
__device__ __forceinline__ void fwd_body(const bf16_t* q, const bf16_t* k, const bf16_t* v,
                                         bf16_t* o, float* lse, int seq, int hq, int hkv,
                                         float scale, bf16_t* smem) {
    constexpr int R = 16 * MT, BR = 4 * R;
    auto kbuf = [&](int i) { return smem + 2 * i * TC_TILE; };
    auto vbuf = [&](int i) { return smem + (2 * i + 1) * TC_TILE; };
    const int bh = blockIdx.x, b = bh / hq, h = bh % hq, hk = h / (hq / hkv);
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR;  // longest first
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int wr = q0 + warp * R;  // the warp's first row
    const int last = imin(seq - 1, q0 + BR - 1);
    // Q rides with the first K/V tile as cp.async copies too (zero-filled
    // past seq): a synchronous load held every thread for its round trip.
    tc_async_tile(kbuf(0), k, b, 0, hk, seq, hkv);
    tc_async_tile(vbuf(0), v, b, 0, hk, seq, hkv);
    tc_async_tile(kbuf(1), q, b, q0, h, seq, hq);
    if (BR > TC_ROWS) tc_async_tile(vbuf(1), q, b, q0 + TC_ROWS, h, seq, hq);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    u32 qa[MT][4][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int lr = warp * R + 16 * mt;  // row within the block
        tc_a_frags(qa[mt], lr < TC_ROWS ? kbuf(1) : vbuf(1), lr & (TC_ROWS - 1), lane);
    }
    __syncthreads();  // stage 1 is refilled by the first iteration
    float acc[MT][8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[mt][i][0] = acc[mt][i][1] = acc[mt][i][2] = acc[mt][i][3] = 0.0f;
    // m[mt][0/1]: running maxima of the raw scores of rows g, g + 8 of
    // m-tile mt (scale > 0); l: the running sums.
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -KOLM_INF, l[mt][0] = l[mt][1] = 0.0f;
    const float sl2 = scale * TC_LOG2E;
    int stage = 0;
    for (int k0 = 0; k0 <= last; k0 += TC_ROWS, stage ^= 1) {
        // The other stage was last read in the previous iteration, which
        // ended with a barrier: refill it now, then wait for this one.
        if (k0 + TC_ROWS <= last) {
            tc_async_tile(kbuf(stage ^ 1), k, b, k0 + TC_ROWS, hk, seq, hkv);
            tc_async_tile(vbuf(stage ^ 1), v, b, k0 + TC_ROWS, hk, seq, hkv);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        // A tile wholly past the warp's rows is skipped; one that reaches
        // them (k0 + 64 > wr) is masked, and keys past seq lie only there.
        if (k0 <= wr + R - 1) {
            const bf16_t* ks = kbuf(stage);
            const bf16_t* vs = vbuf(stage);
            const bool diag = k0 + TC_ROWS > wr;
            float s[MT][8][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int i = 0; i < 8; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
            tc_mul_rows<MT, 8>(s, qa, ks, lane);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                if (diag) {
                    const int r0 = wr + 16 * mt + g - k0, r1 = r0 + 8;  // tile-relative
#pragma unroll
                    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int key = nt * 8 + 2 * t + e;
                            if (key > r0) s[mt][nt][e] = -KOLM_INF;
                            if (key > r1) s[mt][nt][2 + e] = -KOLM_INF;
                        }
                    }
                }
                float mx0 = m[mt][0], mx1 = m[mt][1];
#pragma unroll
                for (int nt = 0; nt < 8; ++nt) {
                    mx0 = fmaxf(mx0, fmaxf(s[mt][nt][0], s[mt][nt][1]));
                    mx1 = fmaxf(mx1, fmaxf(s[mt][nt][2], s[mt][nt][3]));
                }
                mx0 = quad_max(mx0);
                mx1 = quad_max(mx1);
                // 0 on the first tile (m = -inf); every row has key 0, so
                // mx is finite.
                const float c0 = ex2((m[mt][0] - mx0) * sl2), c1 = ex2((m[mt][1] - mx1) * sl2);
                m[mt][0] = mx0;
                m[mt][1] = mx1;
                const float nm0 = -mx0 * sl2, nm1 = -mx1 * sl2;
                l[mt][0] *= c0;
                l[mt][1] *= c1;
#pragma unroll
                for (int nt = 0; nt < 8; ++nt) {
                    acc[mt][nt][0] *= c0;
                    acc[mt][nt][1] *= c0;
                    acc[mt][nt][2] *= c1;
                    acc[mt][nt][3] *= c1;
                    s[mt][nt][0] = ex2(fmaf(s[mt][nt][0], sl2, nm0));
                    s[mt][nt][1] = ex2(fmaf(s[mt][nt][1], sl2, nm0));
                    s[mt][nt][2] = ex2(fmaf(s[mt][nt][2], sl2, nm1));
                    s[mt][nt][3] = ex2(fmaf(s[mt][nt][3], sl2, nm1));
                    l[mt][0] += s[mt][nt][0] + s[mt][nt][1];
                    l[mt][1] += s[mt][nt][2] + s[mt][nt][3];
                }
            }
            u32 pa[MT][4][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) tc_c_to_a(pa[mt], s[mt]);
            tc_mul_cols<MT, 4>(acc, pa, vs, lane);
        }
        __syncthreads();  // this stage is refilled two iterations on
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const float l0 = quad_sum(l[mt][0]), l1 = quad_sum(l[mt][1]);
        const int row0 = wr + 16 * mt + g, row1 = row0 + 8;
        tc_store_rows(o, acc[mt], b, row0, h, seq, hq, 1.0f / l0, 1.0f / l1, t);
        if (t == 0) {
            if (row0 < seq) lse[(u64)bh * seq + row0] = m[mt][0] * scale + logf(l0);
            if (row1 < seq) lse[(u64)bh * seq + row1] = m[mt][1] * scale + logf(l1);
        }
    }
}

// Four warps of 32 rows: 255 registers, no spills (ptxas -v, sm_90), two
// blocks per SM.
extern "C" __global__ void __launch_bounds__(128, 2)
attn_fwd_tc_bf16_d64(const bf16_t* q, const bf16_t* k, const bf16_t* v, bf16_t* o, float* lse,
                     int seq, int hq, int hkv, float scale) {
    __shared__ __attribute__((aligned(16))) bf16_t fwd_smem[4 * TC_TILE];
    fwd_body<2>(q, k, v, o, lse, seq, hq, hkv, scale, fwd_smem);
}

// dq of one 64-query tile in the fused backward (attn_bwd_dkvq): warp w
// takes queries 16 w .. 16 w + 15 of the tile and all 64 columns,
// dq_part = dS (16 x 128 keys, from dst = dS^T in shared memory, fetched
// transposed) times K (128 x 64, the block's keys). The parts of a tile are
// added in key-block order: block 0 stores its part (f32, `dqacc`, layout
// of dq), block j > 0 waits until `sem` of the (b, head, tile) says j,
// adds its part to the stored sum and stores it again, and the last block
// (j = tile / 2, the one holding the diagonal) writes dq = sum * scale as
// bf16 instead. So every dq element is ((p_0 + p_1) + p_2) + ... in key
// order, whatever the timing: no float atomics. Deadlock-free because block
// j only waits on block j - 1 of the same head, which has the lower linear
// index and so was dispatched first. A wait that never ends traps instead
// of hanging.
__device__ __forceinline__ void fused_dq(const bf16_t* dst, const bf16_t* ks, float* dqacc,
                                         const u32* sem, bf16_t* dq, int b, int h, int ti, int jb,
                                         int q0, int seq, int hq, float scale, int warp,
                                         int lane) {
    const int g = lane >> 2, t = lane & 3;
    float acc[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        u32 a[4];
        {
            // Matrix m = lane / 8: keys kk*16 + (m / 2) * 8 + 0..7 (stored
            // rows), queries (m % 2) * 8 + 0..7; .trans makes them A[q][key].
            const int m = lane >> 3;
            const u32 addr = smem_u32addr(dst + (kk * 16 + (lane & 7) + (m >> 1) * 8) * TC_LD +
                                          16 * warp + (m & 1) * 8);
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                         : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                         : "r"(addr));
        }
#pragma unroll
        for (int nd = 0; nd < 8; nd += 2) {
            u32 bb[4];
            const int row = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            const int col = (nd + (lane >> 4)) * 8;
            const u32 addr = smem_u32addr(ks + row * TC_LD + col);
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                         : "=r"(bb[0]), "=r"(bb[1]), "=r"(bb[2]), "=r"(bb[3])
                         : "r"(addr));
            mma_bf16(acc[nd], a, bb);
            mma_bf16(acc[nd + 1], a, bb + 2);
        }
    }
    const bool first = jb == 0, last = (ti >> 1) == jb;
    if (!first) {
        if (lane == 0) {
            const u32* p = sem + ((u64)b * hq + h) * ((seq + TC_ROWS - 1) / TC_ROWS) + ti;
            u32 n = 0;
            for (;;) {
                u32 v;
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
                if (v >= (u32)jb) break;
                __nanosleep(64);
                if (++n > (1u << 26)) __trap();
            }
        }
        __syncwarp();
    }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const int row = q0 + 16 * warp + 8 * hr + g;
        if (row >= seq) continue;
        const u64 base = (((u64)b * seq + row) * hq + h) * 64;
        float2 o[8];
        if (!first) {
#pragma unroll
            for (int nd = 0; nd < 8; ++nd) {
                asm volatile("ld.global.cg.v2.f32 {%0,%1}, [%2];"
                             : "=f"(o[nd].x), "=f"(o[nd].y)
                             : "l"(dqacc + base + nd * 8 + 2 * t)
                             : "memory");
            }
        }
#pragma unroll
        for (int nd = 0; nd < 8; ++nd) {
            float x = acc[nd][2 * hr], y = acc[nd][2 * hr + 1];
            if (!first) {
                x = o[nd].x + x;
                y = o[nd].y + y;
            }
            if (last) {
                *(u32*)(dq + base + nd * 8 + 2 * t) = pack2(x * scale, y * scale);
            } else {
                asm volatile("st.global.cg.v2.f32 [%0], {%1,%2};" ::"l"(dqacc + base + nd * 8 + 2 * t),
                             "f"(x), "f"(y)
                             : "memory");
            }
        }
    }
    // No fence here: dkv_body's barrier, then thread 0's release store
    // (a fence plus the store at gpu scope) publishes every warp's writes,
    // as cooperative groups' grid barrier does.
}

// dk, dv and dq over blocks of 4 * 16 * MT = 128 keys, walking (64-query
// tile, query head of the part) steps, each tile in chunks of QC queries.
// With part non-null, the block stores f32 partial sums of its hp query
// heads of the group instead of dk and dv (attn_bwd_dkv_sum_bf16_d64 adds
// them in part order): more, shorter blocks where one block per group would
// leave the longest blocks alone at the end of the launch.
template <int MT, int QC>
__device__ __forceinline__ void dkv_body(const bf16_t* q, const bf16_t* k, const bf16_t* v,
                                         const bf16_t* dout, const float* lse, const float* delta,
                                         bf16_t* dk, bf16_t* dv, int seq, int hq, int hkv,
                                         float scale, float* part, int hp, bf16_t* tc_smem,
                                         float* dqacc, u32* sem, bf16_t* dq) {
    constexpr int R = 16 * MT, BR = 4 * R, NQ = QC / 8, KQ = QC / 16;
    static_assert(BR == 2 * TC_ROWS, "dkv_body holds 128 keys");
    bf16_t* ks = tc_smem;                // 128 rows
    bf16_t* vs = ks + 2 * TC_TILE;       // 128 rows
    bf16_t* qbuf = vs + 2 * TC_TILE;     // two stages
    bf16_t* dobuf = qbuf + 2 * TC_TILE;  // two stages
    float* lsb = (float*)(dobuf + 2 * TC_TILE);  // [2][64]
    float* dlsb = lsb + 2 * TC_ROWS;              // [2][64]
    // dS^T of the current step, [128 keys][64 queries], padded rows.
    bf16_t* dst = (bf16_t*)(dlsb + 2 * TC_ROWS);
    // Block x = (b, kv head, part): the part walks query heads
    // hk * group + part * hp + 0 .. hp - 1 of the group.
    const int group = hq / hkv, nparts = group / hp;
    const int bx = blockIdx.x, pi = bx % nparts, bhk = bx / nparts, b = bhk / hkv, hk = bhk % hkv;
    const int j0 = blockIdx.y * BR;  // longest (most query tiles) first
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int wk = j0 + warp * R;  // the warp's first key
    const float sl2 = scale * TC_LOG2E;
    const int tiles = (seq - j0 + TC_ROWS - 1) / TC_ROWS;
    const int steps = hp * tiles;
    // Step it -> (head of the part, query tile): tile-major from the last
    // tile down, heads inner. Every key block of a (b, head) then reaches a
    // given (tile, head) at the same step, so key block j adds its dq share
    // of a tile right after block j - 1 did (fused_dq), rarely waiting.
    auto step_head = [&](int it) { return it % hp; };
    auto step_tile = [&](int it) { return tiles - 1 - it / hp; };
    // Queues the tiles of step `it` (and their lse and delta) into stage st.
    auto issue = [&](int it, int st) {
        const int h = hk * group + pi * hp + step_head(it);
        const int q0 = j0 + step_tile(it) * TC_ROWS;
        const u64 bh = (u64)b * hq + h;
        tc_async_tile(qbuf + st * TC_TILE, q, b, q0, h, seq, hq);
        tc_async_tile(dobuf + st * TC_TILE, dout, b, q0, h, seq, hq);
        const int r = threadIdx.x & (TC_ROWS - 1);
        const bool in = q0 + r < seq;
        const u64 at = bh * seq + (in ? q0 + r : 0);
        if (threadIdx.x < TC_ROWS) {
            cp_async4(lsb + st * TC_ROWS + r, lse + at, in);
        } else if (threadIdx.x < 2 * TC_ROWS) {
            cp_async4(dlsb + st * TC_ROWS + r, delta + at, in);
        }
    };
    issue(0, 0);
    cp_async_commit();
    tc_load_tile(ks, k, b, j0, hk, seq, hkv);
    tc_load_tile(ks + TC_TILE, k, b, j0 + TC_ROWS, hk, seq, hkv);
    tc_load_tile(vs, v, b, j0, hk, seq, hkv);
    tc_load_tile(vs + TC_TILE, v, b, j0 + TC_ROWS, hk, seq, hkv);
    __syncthreads();
    float dka[MT][8][4], dva[MT][8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            dka[mt][i][0] = dka[mt][i][1] = dka[mt][i][2] = dka[mt][i][3] = 0.0f;
            dva[mt][i][0] = dva[mt][i][1] = dva[mt][i][2] = dva[mt][i][3] = 0.0f;
        }
    const int jb = j0 / BR;  // this key block's index: its place in dq's order
    for (int it = 0; it < steps; ++it) {
        const int stage = it & 1;
        if (it + 1 < steps) {
            issue(it + 1, stage ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const int q0 = j0 + step_tile(it) * TC_ROWS;
        const bf16_t* qs = qbuf + stage * TC_TILE;
        const bf16_t* dos = dobuf + stage * TC_TILE;
        const float* ls = lsb + stage * TC_ROWS;
        const float* dls = dlsb + stage * TC_ROWS;
        // Transposed scores: rows are this warp's keys, columns queries.
        // dk's and dv's k steps (the chunks) arrive in query order.
        // MODE 2: a step whose every query lies at or after the warp's last
        // key and before seq (no chunk skipped, nothing masked), compiled
        // without those branches; MODE 0 checks per chunk.
        // The unrolled loop instantiates the chunk loop once per mode (NVRTC
        // takes no generic lambdas in device code); `sel` runs one of them.
        const int sel = q0 >= wk + R - 1 && q0 + TC_ROWS <= seq ? 2 : 0;
#pragma unroll
        for (int MODE = 0; MODE < 3; MODE += 2) {
            if (MODE != sel) continue;
#pragma unroll
        for (int qc = 0; qc < TC_ROWS / QC; ++qc) {
            const int qb = q0 + QC * qc;
            if (MODE != 2 && qb + QC - 1 < wk) {  // every query before every key
                // dS^T is 0 there (fused_dq reads all 128 keys).
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int kq = 0; kq < 2 * KQ; ++kq) {
                        bf16_t* d0 = dst + (warp * R + 16 * mt + g) * TC_LD + QC * qc + kq * 8 + 2 * t;
                        *(u32*)d0 = 0u;
                        *(u32*)(d0 + 8 * TC_LD) = 0u;
                    }
                continue;
            }
            const bool edge = MODE != 2 && (qb < wk + R - 1 || qb + QC > seq);
            const bf16_t* qh = qs + QC * qc * TC_LD;
            const bf16_t* doh = dos + QC * qc * TC_LD;
            float s[MT][NQ][4], dp[MT][NQ][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int i = 0; i < NQ; ++i) {
                    s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
                    dp[mt][i][0] = dp[mt][i][1] = dp[mt][i][2] = dp[mt][i][3] = 0.0f;
                }
            {
                // The warp's K, then V, A fragments, re-read per chunk: the
                // 64 registers that would keep them go to fused_dq.
                u32 fa[MT][4][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) tc_a_frags(fa[mt], ks, warp * R + 16 * mt, lane);
                tc_mul_rows<MT, NQ>(s, fa, qh, lane);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) tc_a_frags(fa[mt], vs, warp * R + 16 * mt, lane);
                tc_mul_rows<MT, NQ>(dp, fa, doh, lane);
            }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int key0 = wk + 16 * mt + g, key1 = key0 + 8;
#pragma unroll
                for (int nt = 0; nt < NQ; ++nt) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int c = QC * qc + nt * 8 + 2 * t + e;
                        float s0 = s[mt][nt][e], s1 = s[mt][nt][2 + e];
                        if (edge) {
                            const int qi = q0 + c;
                            const bool in = qi < seq;
                            if (!(in && qi >= key0)) s0 = -KOLM_INF;
                            if (!(in && qi >= key1)) s1 = -KOLM_INF;
                        }
                        const float nl = -ls[c] * TC_LOG2E, dl = dls[c];
                        const float p0 = ex2(fmaf(s0, sl2, nl));
                        const float p1 = ex2(fmaf(s1, sl2, nl));
                        s[mt][nt][e] = p0;
                        s[mt][nt][2 + e] = p1;
                        dp[mt][nt][e] = p0 * (dp[mt][nt][e] - dl);
                        dp[mt][nt][2 + e] = p1 * (dp[mt][nt][2 + e] - dl);
                    }
                }
            }
            {
                u32 pa[MT][KQ][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) tc_c_to_a<KQ>(pa[mt], s[mt]);
                tc_mul_cols<MT, KQ>(dva, pa, doh, lane);
            }
            {
                u32 dsa[MT][KQ][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) tc_c_to_a<KQ>(dsa[mt], dp[mt]);
                tc_mul_cols<MT, KQ>(dka, dsa, qh, lane);
                // dS^T rows (keys) g and g + 8 of each m-tile, 2 queries
                // per 32-bit store (the A fragment's register layout).
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int kq = 0; kq < KQ; ++kq) {
                        bf16_t* d0 = dst + (warp * R + 16 * mt + g) * TC_LD + QC * qc + kq * 16 + 2 * t;
                        *(u32*)d0 = dsa[mt][kq][0];
                        *(u32*)(d0 + 8 * TC_LD) = dsa[mt][kq][1];
                        *(u32*)(d0 + 8) = dsa[mt][kq][2];
                        *(u32*)(d0 + 8 * TC_LD + 8) = dsa[mt][kq][3];
                    }
            }
        }
        }
        __syncthreads();  // dS^T of all four warps is in place
        {
            const int h = hk * group + pi * hp + step_head(it);
            const int ti = q0 >> 6;  // the query tile's global index (64 rows)
            fused_dq(dst, ks, dqacc, sem, dq, b, h, ti, jb, q0, seq, hq, scale, warp, lane);
        }
        __syncthreads();  // this stage is refilled two iterations on
        if (threadIdx.x == 0) {
            // Every warp's dq writes of this step precede the barrier above:
            // release them (fence, then the store) to key block jb + 1.
            __threadfence();
            const int h = hk * group + pi * hp + step_head(it);
            const u64 si = ((u64)b * hq + h) * ((seq + TC_ROWS - 1) / TC_ROWS) + (q0 >> 6);
            asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(sem + si), "r"((u32)jb + 1)
                         : "memory");
        }
    }
    if (part == nullptr) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            tc_store_rows(dk, dka[mt], b, wk + 16 * mt + g, hk, seq, hkv, scale, scale, t);
            tc_store_rows(dv, dva[mt], b, wk + 16 * mt + g, hk, seq, hkv, 1.0f, 1.0f, t);
        }
        return;
    }
    // f32 partial sums, [b, kv head, part, {dk, dv}, seq, 64].
    float* pk = part + ((u64)bx * 2) * seq * 64;
    float* pv = pk + (u64)seq * 64;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            const int row = wk + 16 * mt + 8 * hr + g;
            if (row >= seq) continue;
#pragma unroll
            for (int nd = 0; nd < 8; ++nd) {
                const int c = nd * 8 + 2 * t;
                *(float2*)(pk + (u64)row * 64 + c) =
                    make_float2(dka[mt][nd][2 * hr], dka[mt][nd][2 * hr + 1]);
                *(float2*)(pv + (u64)row * 64 + c) =
                    make_float2(dva[mt][nd][2 * hr], dva[mt][nd][2 * hr + 1]);
            }
        }
    }
}

// Four warps of 32 keys, queries in chunks of 16 (ptxas -v, sm_90: 254
// registers, 8 bytes of spills; two blocks of 91 KB of shared memory per
// SM). The backward but delta in one pass: dk and dv (or, from seq 2048,
// their per-head f32 partials, see attn_bwd_dkv_sum), plus dq added across
// key blocks in key-block order (fused_dq). dqacc: f32 scratch shaped like
// dq (no fill needed: key block 0 stores first); sem: one zeroed u32 per
// (b, query head, 64-query tile).
extern "C" __global__ void __launch_bounds__(128, 2)
attn_bwd_dkvq_tc_bf16_d64(const bf16_t* q, const bf16_t* k, const bf16_t* v, const bf16_t* dout,
                          const float* lse, const float* delta, bf16_t* dk, bf16_t* dv, int seq,
                          int hq, int hkv, float scale, float* part, int hp, float* dqacc,
                          u32* sem, bf16_t* dq) {
    extern __shared__ __attribute__((aligned(16))) bf16_t tc_smem[];
    dkv_body<2, 16>(q, k, v, dout, lse, delta, dk, dv, seq, hq, hkv, scale, part, hp, tc_smem,
                    dqacc, sem, dq);
}

// dk, dv = the sum of the dkv kernel's f32 partials over the parts of a
// group, in part order (then dk times scale), as bf16. Eight threads per
// (b, t, kv head) row, eight columns each.
extern "C" __global__ void attn_bwd_dkv_sum_bf16_d64(const float* part, bf16_t* dk, bf16_t* dv,
                                                     int seq, int hkv, int nparts, u64 rows,
                                                     float scale) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < rows * 8;
         i += (u64)gridDim.x * blockDim.x) {
        const u64 r = i >> 3;  // (b * seq + t) * hkv + hk, the layout of dk
        const int c = (int)(i & 7) * 8;
        const int hk = (int)(r % hkv);
        const u64 bt = r / hkv;
        const u64 b = bt / seq, t = bt % seq;
        float sk[8], sv[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) sk[j] = sv[j] = 0.0f;
        for (int p = 0; p < nparts; ++p) {
            const float* pk = part + (((b * hkv + hk) * nparts + p) * 2 * seq + t) * 64 + c;
            const float* pv = pk + (u64)seq * 64;
            const float4 k0 = *(const float4*)pk, k1 = *(const float4*)(pk + 4);
            const float4 v0 = *(const float4*)pv, v1 = *(const float4*)(pv + 4);
            sk[0] += k0.x; sk[1] += k0.y; sk[2] += k0.z; sk[3] += k0.w;
            sk[4] += k1.x; sk[5] += k1.y; sk[6] += k1.z; sk[7] += k1.w;
            sv[0] += v0.x; sv[1] += v0.y; sv[2] += v0.z; sv[3] += v0.w;
            sv[4] += v1.x; sv[5] += v1.y; sv[6] += v1.z; sv[7] += v1.w;
        }
        chunk16 ok, ov;
        ok.x = pack2(sk[0] * scale, sk[1] * scale);
        ok.y = pack2(sk[2] * scale, sk[3] * scale);
        ok.z = pack2(sk[4] * scale, sk[5] * scale);
        ok.w = pack2(sk[6] * scale, sk[7] * scale);
        ov.x = pack2(sv[0], sv[1]);
        ov.y = pack2(sv[2], sv[3]);
        ov.z = pack2(sv[4], sv[5]);
        ov.w = pack2(sv[6], sv[7]);
        *(chunk16*)(dk + r * 64 + c) = ok;
        *(chunk16*)(dv + r * 64 + c) = ov;
    }
}

// delta[b, h, t] = sum_c dO * O for bf16, d = 64: eight threads per row,
// each reading 16 bytes of o and of dout (the FMA kernel's one thread per
// row reads 2 bytes at a time, 128 bytes apart across a warp), its eight
// products summed in order, then a fixed xor-butterfly over the row's eight
// lanes. The order depends on the row alone.
extern "C" __global__ void attn_bwd_delta_tc_bf16_d64(const bf16_t* o, const bf16_t* dout,
                                                      float* delta, int seq, int hq, u64 rows) {
    const int lane = threadIdx.x & 31;
    const u32 group = 0xffu << (lane & 24);  // the eight lanes of this row
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < rows * 8;
         i += (u64)gridDim.x * blockDim.x) {
        const u64 r = i >> 3;
        const int part = (int)(i & 7);
        float a[8], d[8];
        ld16(o + r * 64 + part * 8, a);
        ld16(dout + r * 64 + part * 8, d);
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) acc += a[j] * d[j];
        acc += __shfl_xor_sync(group, acc, 1);
        acc += __shfl_xor_sync(group, acc, 2);
        acc += __shfl_xor_sync(group, acc, 4);
        if (part == 0) {
            const int h = (int)(r % hq);
            const u64 bt = r / hq;
            const int b = (int)(bt / seq), t = (int)(bt % seq);
            delta[((u64)b * hq + h) * seq + t] = acc;
        }
    }
}
