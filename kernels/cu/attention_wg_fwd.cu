// Causal grouped-query attention forward, bf16, head dimension 64, on
// wgmma (see wgmma.cu). Same layouts, grid and determinism argument as
// attn_fwd_tc_bf16_d64 (attention_tc.cu): a block owns 128 query rows of
// one (batch, head), walks the 64-key tiles up to its diagonal in key
// order, and every output element is accumulated by one thread in a fixed
// order; the only cross-thread sums are fixed xor-shuffles within a row's
// four threads. P is rounded to bf16 before P V, l stays f32.
//
// Two warpgroups of 64 rows each (256 threads). Per key tile a warpgroup
// computes S = Q K^T (four k steps, Q and K from shared memory), the online
// softmax in registers, then O += P V (P from registers as A fragments, V
// from shared memory). K/V tiles are double-buffered by cp.async; both
// warpgroups read the same stage, so one barrier per tile hands it on.
// Registers: O and S are 32 f32 each per thread (half of the mma.sync
// kernel's 32-rows-per-warp tiles), so two blocks (16 warps) fit an SM.

#define WG_FWD_SMEM (6 * WG_TILE + 1024)  // Q (2 tiles), K and V x 2 stages, alignment

extern "C" __global__ void __launch_bounds__(256, 2)
attn_fwd_wg_bf16_d64(const bf16_t* q, const bf16_t* k, const bf16_t* v, bf16_t* o, float* lse,
                     int seq, int hq, int hkv, float scale) {
    extern __shared__ __attribute__((aligned(1024))) unsigned char wg_fwd_smem[];
    // The swizzle pattern follows address bits, so tiles start 1024-aligned.
    const u32 base = (wg_smem_addr(wg_fwd_smem) + 1023u) & ~1023u;
    const u32 qs = base;  // warpgroup w's 64 rows at qs + w * WG_TILE
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, wq = (tid >> 5) & 3;
    const int g = lane >> 2, t = lane & 3;
    const int bh = blockIdx.x, b = bh / hq, h = bh % hq, hk = h / (hq / hkv);
    const int q0 = (gridDim.y - 1 - blockIdx.y) * 128;  // longest first
    const int wr = q0 + 64 * wg;                         // the warpgroup's first row
    const int last = imin(seq - 1, q0 + 127);
    auto kst = [&](int st) { return base + (2 + 2 * st) * WG_TILE; };
    auto vst = [&](int st) { return base + (3 + 2 * st) * WG_TILE; };
    wg_async_tile<256>(qs, q, b, q0, h, seq, hq, tid);
    wg_async_tile<256>(qs + WG_TILE, q, b, q0 + 64, h, seq, hq, tid);
    wg_async_tile<256>(kst(0), k, b, 0, hk, seq, hkv, tid);
    wg_async_tile<256>(vst(0), v, b, 0, hk, seq, hkv, tid);
    wg_cp_commit();
    float acc[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
    // Running maxima of the raw scores of the thread's rows g and g + 8 of
    // its warp's 16 (scale > 0), and the running sums.
    float m0 = -KOLM_INF, m1 = -KOLM_INF, l0 = 0.0f, l1 = 0.0f;
    const float sl2 = scale * WG_LOG2E;
    const u64 qdesc = wg_desc(qs + wg * WG_TILE);
    const int r0 = wr + 16 * wq + g;  // the thread's first row
    int stage = 0;
    for (int k0 = 0; k0 <= last; k0 += 64, stage ^= 1) {
        // The other stage was last read in the previous iteration, whose
        // wgmmas completed before its closing barrier: refill it now.
        if (k0 + 64 <= last) {
            wg_async_tile<256>(kst(stage ^ 1), k, b, k0 + 64, hk, seq, hkv, tid);
            wg_async_tile<256>(vst(stage ^ 1), v, b, k0 + 64, hk, seq, hkv, tid);
            wg_cp_commit();
            wg_cp_wait<1>();
        } else {
            wg_cp_wait<0>();
        }
        // cp.async writes by other threads become visible to the async
        // proxy (wgmma's reads) through the barrier and a proxy fence.
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        // A tile wholly past the warpgroup's rows is skipped; the one that
        // starts at its first row is its diagonal (k0 and wr are multiples
        // of 64), the only one masked. Keys past seq lie only there.
        if (k0 <= wr) {
            float s[32];
            const u64 kd = wg_desc(kst(stage));
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                wg_mma_ss(s, qdesc + wg_kmajor_step(kk), kd + wg_kmajor_step(kk), kk);
            }
            wg_commit();
            wg_wait<0>();
            wg_pin(s, 32);
            if (k0 == wr) {
                const int d0 = r0 - k0, d1 = d0 + 8;  // tile-relative rows
#pragma unroll
                for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int key = nt * 8 + 2 * t + e;
                        if (key > d0) s[4 * nt + e] = -KOLM_INF;
                        if (key > d1) s[4 * nt + 2 + e] = -KOLM_INF;
                    }
                }
            }
            float mx0 = m0, mx1 = m1;
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
                mx0 = fmaxf(mx0, fmaxf(s[4 * nt], s[4 * nt + 1]));
                mx1 = fmaxf(mx1, fmaxf(s[4 * nt + 2], s[4 * nt + 3]));
            }
            mx0 = wg_quad_max(mx0);
            mx1 = wg_quad_max(mx1);
            // 0 on the first tile (m = -inf); every row has key 0, so mx is
            // finite.
            const float c0 = wg_ex2((m0 - mx0) * sl2), c1 = wg_ex2((m1 - mx1) * sl2);
            m0 = mx0;
            m1 = mx1;
            const float nm0 = -mx0 * sl2, nm1 = -mx1 * sl2;
            l0 *= c0;
            l1 *= c1;
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
                acc[4 * nt] *= c0;
                acc[4 * nt + 1] *= c0;
                acc[4 * nt + 2] *= c1;
                acc[4 * nt + 3] *= c1;
                s[4 * nt] = wg_ex2(fmaf(s[4 * nt], sl2, nm0));
                s[4 * nt + 1] = wg_ex2(fmaf(s[4 * nt + 1], sl2, nm0));
                s[4 * nt + 2] = wg_ex2(fmaf(s[4 * nt + 2], sl2, nm1));
                s[4 * nt + 3] = wg_ex2(fmaf(s[4 * nt + 3], sl2, nm1));
                l0 += s[4 * nt] + s[4 * nt + 1];
                l1 += s[4 * nt + 2] + s[4 * nt + 3];
            }
            u32 pa[4][4];
            wg_acc_to_a(pa, s);
            const u64 vd = wg_desc(vst(stage));
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) wg_mma_rs<1>(acc, pa[kk], vd + wg_mnmajor_step(kk), 1);
            wg_commit();
            wg_wait<0>();
            wg_pin(acc, 32);
        }
        __syncthreads();  // this stage is refilled at the next iteration
    }
    l0 = wg_quad_sum(l0);
    l1 = wg_quad_sum(l1);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int row = r0 + 8 * half;
        if (row >= seq) continue;
        const float mul = 1.0f / (half ? l1 : l0);
        bf16_t* out = o + (((u64)b * seq + row) * hq + h) * 64;
#pragma unroll
        for (int nd = 0; nd < 8; ++nd) {
            *(u32*)(out + nd * 8 + 2 * t) =
                pack2(acc[4 * nd + 2 * half] * mul, acc[4 * nd + 2 * half + 1] * mul);
        }
        if (t == 0) lse[(u64)bh * seq + row] = (half ? m1 : m0) * scale + logf(half ? l1 : l0);
    }
}
