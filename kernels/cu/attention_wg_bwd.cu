// Causal grouped-query attention backward, bf16, head dimension 64, on
// wgmma (see wgmma.cu). Same grid and step order as
// attn_bwd_dkvq_tc_bf16_d64 (attention_tc.cu's dkv_body and fused_dq): a
// block owns 128 keys of one (batch, kv head[, part]) and walks (64-query
// tile, query head of the part) steps, tile-major from the last tile down,
// heads inner. Every dk/dv element is accumulated by one thread in step
// order (each wgmma's own summation order is fixed by the instruction), and
// dq's sum over key blocks is built one block after another in key-block
// order behind turn counters: ((p_0 + p_1) + p_2) + ... The delta kernel
// and, for split blocks, the ordered dk/dv partial sum are attention_tc.cu's.
//
// Two MMA warpgroups of 64 keys and one dq-writer warpgroup (384 threads).
// Per step an MMA warpgroup computes
//   S^T  = K Q^T    wgmma SS (A = its K tile, B = the Q tile, both K-major)
//   dP^T = V dO^T   wgmma SS (A = its V tile, B = the dO tile)
//   P^T  = exp2(S^T scale log2 e - lse log2 e), causal mask on its diagonal
//   dS^T = P^T (dP^T - delta)
//   dV  += bf16(P^T) dO    wgmma RS (B = dO, N-major: its rows are queries = k)
//   dK  += bf16(dS^T) Q    wgmma RS (B = Q, N-major)
// and stores bf16 dS^T into a swizzled tile. After a barrier, warpgroup w
// computes columns 32 w .. 32 w + 31 of the tile's dq share over the
// block's 128 keys, dq_part = dS K: wgmma m64n32k16 with A = dS read
// M-major from the two dS^T tiles (their rows are keys = k) and B = K read
// N-major (rows are keys = k) from byte 64 w of each row. Splitting n
// rather than k keeps each dq element one wgmma chain, so no partials of
// the two warpgroups need adding. S^T and dP^T are two commit groups, so P
// is computed while dP^T is still in the tensor cores, and dV's wgmma runs
// while dS^T is computed. The share is parked in shared memory and the MMA
// warpgroups go on; the writer warpgroup adds it into dq (wgb_body).
//
// Why a writer: with the add done by the MMA warpgroups at the end of each
// step (wait for the turn, read the running f32 sum from L2, add, write),
// the tensor cores idled through it; the kernel ran 0.39 / 0.71 / 1.37 ms
// at T = 1024 / 2048 / 4096 on the H100 where the same kernel without the
// add (wrong dq, timing only) ran 0.24 / 0.46 / 0.80. A writer that reads,
// adds and writes the sum still could not keep up (0.38 / 0.73 / 1.30);
// middle contributors adding with red.add.v2 (no read; see wgb_body for why
// the bits still repeat) brought it to 0.31 / 0.53 / 0.97 (never split).
// Four-float red.add measured slower than two-float.
//
// Registers: the block launches at 168 per thread (384 x 168 = 64512);
// setmaxnreg gives the MMA warpgroups 232 (dK, dV, S^T, dP^T are 32 f32
// per thread each, dq's share 16) and the writer 40. ptxas -v (NVRTC 13.0,
// sm_90a): 168 registers at launch, no spills; one block per SM.

// Tiles (K, V, three stages of Q and dO, dS^T), lse/delta x 3 stages, four
// parked dq shares of 256 threads x 16 f32, alignment.
#define WGB_PARK 4
#define WGB_SMEM ((6 + 2 * 3) * WG_TILE + 2 * 3 * 64 * 4 + WGB_PARK * 256 * 16 * 4 + 1024)

// d (64 x 32, f32) = A * B (+ d when `accumulate`), k = 16, both from
// shared memory, A M-major (its tile rows are k: dS read from dS^T) and B
// N-major (rows are k: K's rows are the keys). 16 accumulators: per n tile
// j of 8 columns d[4j + 0..1] = (row g, cols 8j + 2t, +1), d[4j + 2..3] =
// (row g + 8, same cols), as for n = 64.
__device__ __forceinline__ void wgb_mma_n32_tt(float* d, u64 da, u64 db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),
          "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(da), "l"(db), "r"(accumulate));
}

// 4-byte asynchronous copy, zero-filled when `in` is false.
__device__ __forceinline__ void wgb_cp4(u32 dst, const float* src, bool in) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src),
                 "r"(in ? 4 : 0));
}

// Named barriers (id 0 is __syncthreads'): bar.sync waits for `n` arrivals
// (its own included), bar.arrive only adds its own. Both order the calling
// threads' earlier shared-memory accesses before the barrier's completion.
__device__ __forceinline__ void wgb_bar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void wgb_bar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}

// dk, dv (or, with part non-null, their f32 per-part partials, summed by
// attn_bwd_dkv_sum_bf16_d64 in part order) and dq. Arguments as
// attn_bwd_dkvq_tc_bf16_d64: dqacc is f32 scratch shaped like dq (key
// block 0 stores first), sem zeroed u32 turn counters, eight per (b, query
// head, 64-query tile) (the first one used).
//
// Warpgroup 2 is the dq writer. The MMA warpgroups park each step's share
// in shared memory (buffer it % 4) and go on; writer warp w takes steps w,
// w + 4, ... whole. Named barriers: 1 = the MMA warps' step barrier,
// 2 + buf = FULL (256 MMA arrivals + writer warp buf's wait), 6 + buf =
// FREE (writer warp buf's arrival + the MMA warps' wait before they refill
// the buffer). Q, dO, lse and delta are prefetched two steps ahead (three
// stages; two stages measured 1 to 2% slower at T = 4096).
__device__ __forceinline__ void wgb_body(const bf16_t* q, const bf16_t* k, const bf16_t* v,
                                         const bf16_t* dout, const float* lse,
                                         const float* delta, bf16_t* dk, bf16_t* dv, int seq,
                                         int hq, int hkv, float scale, float* part, int hp,
                                         float* dqacc, u32* sem, bf16_t* dq,
                                         unsigned char* wgb_smem) {
    constexpr int QS = 3;  // stages of Q, dO, lse, delta (prefetch 2 steps ahead)
    const u32 base = (wg_smem_addr(wgb_smem) + 1023u) & ~1023u;
    // Tiles: K (2, one per warpgroup), V (2), Q and dO (QS stages each),
    // dS^T (2, one per warpgroup: rows = its keys, columns = queries), then
    // lse and delta, [QS stages][64] floats each, then the parked dq
    // shares, [WGB_PARK buffers][16][256 threads].
    const u32 ks = base, vs = base + 2 * WG_TILE, qb = base + 4 * WG_TILE,
              dob = base + (4 + QS) * WG_TILE, dsb = base + (4 + 2 * QS) * WG_TILE;
    const u32 lsb = base + (6 + 2 * QS) * WG_TILE, dlb = lsb + QS * 64 * 4;
    const float* lsf = (const float*)(wgb_smem + (lsb - wg_smem_addr(wgb_smem)));
    const float* dlf = lsf + QS * 64;
    float* park = (float*)(dlf + QS * 64);
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, wq = (tid >> 5) & 3;
    const int g = lane >> 2, t = lane & 3;
    const int group = hq / hkv, nparts = group / hp;
    const int bx = blockIdx.x, pi = bx % nparts, bhk = bx / nparts, b = bhk / hkv, hk = bhk % hkv;
    const int j0 = blockIdx.y * 128;  // longest (most query tiles) first
    const int wk = j0 + 64 * wg;      // the warpgroup's first key
    const int key0 = wk + 16 * wq + g, key1 = key0 + 8;  // the thread's rows
    const float sl2 = scale * WG_LOG2E;
    const int tiles = (seq - j0 + 63) / 64;
    const int steps = hp * tiles;
    const int jb = blockIdx.y;  // this key block's place in dq's order
    const int ntiles = (seq + 63) / 64;
    auto step_head = [&](int it) { return hk * group + pi * hp + it % hp; };
    auto step_q0 = [&](int it) { return j0 + (tiles - 1 - it / hp) * 64; };
    // Queues the Q and dO tiles of step `it` and their lse and delta into
    // stage st.
    auto issue = [&](int it, int st) {
        const int h = step_head(it), q0 = step_q0(it);
        wg_async_tile<256>(qb + st * WG_TILE, q, b, q0, h, seq, hq, tid);
        wg_async_tile<256>(dob + st * WG_TILE, dout, b, q0, h, seq, hq, tid);
        const int r = tid & 63;
        const bool in = q0 + r < seq;
        const u64 at = ((u64)b * hq + h) * seq + (in ? q0 + r : 0);
        if (tid < 64) {
            wgb_cp4(lsb + (st * 64 + r) * 4, lse + at, in);
        } else if (tid < 128) {
            wgb_cp4(dlb + (st * 64 + r) * 4, delta + at, in);
        }
    };
    {
        // The role by warpgroup index, read through a shuffle so the
        // compiler knows it is uniform across the warp (as CUTLASS's
        // canonical_warp_group_idx does): without it ptxas treated the MMA
        // path as divergent and serialized its wgmmas.
        //
        // Registers move from the writer to the MMA warpgroups. The block
        // is launched at 168 per thread (384 x 168 = 64512) and
        // setmaxnreg.inc waits until the block's pool holds what it asks
        // for, so the split must stay within it: 2 x 128 x 232 + 128 x 40 =
        // 64512. (232 / 48, 512 over, hung on the H100: the MMA warpgroups
        // waited for registers forever.)
        if (__shfl_sync(0xffffffffu, tid >> 7, 0) == 2) {
            asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
            const int ww = (tid - 256) >> 5;
            // Writer warp ww takes steps ww, ww + 4, ... whole (all eight
            // MMA warps' shares, from park buffer ww; barriers of 256 MMA
            // threads + this warp), so four steps' turn waits and fences
            // overlap. (Every writer warp taking every step, two buffers,
            // measured 1 to 2% slower.)
            constexpr int NB = WGB_PARK, BN = 288;
            if (ww < steps) wgb_bar_arrive(2 + NB + ww, BN);
            for (int it = ww; it < steps; it += NB) {
                const int bf = it % NB;
                wgb_bar_sync(2 + bf, BN);
                const int h = step_head(it), q0 = step_q0(it), ti = q0 >> 6;
                const bool first = jb == 0, last = (ti >> 1) == jb;
                u32* p = sem + (((u64)b * hq + h) * ntiles + ti) * 8;
                if (!first) {
                    if (lane == 0) {
                        u32 n = 0;
                        for (;;) {
                            u32 val;
                            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];"
                                         : "=r"(val)
                                         : "l"(p)
                                         : "memory");
                            if (val >= (u32)jb) break;
                            __nanosleep(32);
                            if (++n > (1u << 26)) __trap();
                        }
                    }
                    __syncwarp();
                }
                // First contributor (key block 0): plain stores. Middle
                // ones: red.add.v2.f32 of each pair into the running sum,
                // with no read. These are float atomics, but never two at
                // once on an element: each block adds an element once, and
                // block j + 1 issues its adds only after acquiring the turn
                // that block j released after a fence that waited for its
                // adds to complete. So every element still sees ((p0 + p1)
                // + p2) + ... in key-block order, each add one IEEE f32 add
                // (round to nearest; the L2's atomic unit flushes
                // subnormals, the same way every time), and the bits
                // repeat. The last (the diagonal's block): read the sum,
                // add, write bf16 dq.
                if (first || !last) {
#pragma unroll 1
                    for (int w = 0; w < 8; ++w) {
                        const float* pk = park + bf * 4096 + 32 * w + lane;
#pragma unroll
                        for (int hr = 0; hr < 2; ++hr) {
                            const int row = q0 + 16 * (w & 3) + 8 * hr + g;
                            if (row >= seq) continue;
                            const u64 at =
                                (((u64)b * seq + row) * hq + h) * 64 + 32 * (w >> 2) + 2 * t;
#pragma unroll
                            for (int nd = 0; nd < 4; ++nd) {
                                const float x = pk[(4 * nd + 2 * hr) * 256];
                                const float y = pk[(4 * nd + 2 * hr + 1) * 256];
                                float* d0 = dqacc + at + nd * 8;
                                if (last) {  // and first: the only contributor
                                    *(u32*)(dq + at + nd * 8) = pack2(x * scale, y * scale);
                                } else if (first) {
                                    __stcg((float2*)d0, make_float2(x, y));
                                } else {
                                    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(d0),
                                                 "f"(x), "f"(y)
                                                 : "memory");
                                }
                            }
                        }
                    }
                } else {
#pragma unroll 1
                    for (int w = 0; w < 8; ++w) {
                        const float* pk = park + bf * 4096 + 32 * w + lane;
                        float2 o[2][4];
#pragma unroll
                        for (int hr = 0; hr < 2; ++hr) {
                            const int row = q0 + 16 * (w & 3) + 8 * hr + g;
                            const u64 at = (((u64)b * seq + (row < seq ? row : 0)) * hq + h) * 64 +
                                           32 * (w >> 2) + 2 * t;
#pragma unroll
                            for (int nd = 0; nd < 4; ++nd) {
                                o[hr][nd] = __ldcg((const float2*)(dqacc + at + nd * 8));
                            }
                        }
#pragma unroll
                        for (int hr = 0; hr < 2; ++hr) {
                            const int row = q0 + 16 * (w & 3) + 8 * hr + g;
                            if (row >= seq) continue;
                            const u64 at =
                                (((u64)b * seq + row) * hq + h) * 64 + 32 * (w >> 2) + 2 * t;
#pragma unroll
                            for (int nd = 0; nd < 4; ++nd) {
                                const float x = o[hr][nd].x + pk[(4 * nd + 2 * hr) * 256];
                                const float y = o[hr][nd].y + pk[(4 * nd + 2 * hr + 1) * 256];
                                *(u32*)(dq + at + nd * 8) = pack2(x * scale, y * scale);
                            }
                        }
                    }
                }
                // The park is read: hand it back for step it + NB (if any:
                // every arrival has its wait).
                if (it + NB < steps) wgb_bar_arrive(2 + NB + bf, BN);
                // The warp's writes precede the warp barrier, then the fence
                // and release at gpu scope. Every lane stores the same value.
                __syncwarp();
                __threadfence();
                asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"((u32)jb + 1)
                             : "memory");
            }
            return;
        }
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    }
    wg_async_tile<256>(ks, k, b, j0, hk, seq, hkv, tid);
    wg_async_tile<256>(ks + WG_TILE, k, b, j0 + 64, hk, seq, hkv, tid);
    wg_async_tile<256>(vs, v, b, j0, hk, seq, hkv, tid);
    wg_async_tile<256>(vs + WG_TILE, v, b, j0 + 64, hk, seq, hkv, tid);
    issue(0, 0);
    wg_cp_commit();
    if (steps > 1) issue(1, 1);
    wg_cp_commit();
    float dka[32], dva[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) dka[i] = dva[i] = 0.0f;
    const u64 kdesc = wg_desc(ks + wg * WG_TILE), vdesc = wg_desc(vs + wg * WG_TILE);
    const u32 dsw = dsb + wg * WG_TILE;  // this warpgroup's dS^T tile
    float dqa[16];  // the step's dq share
    for (int it = 0; it < steps; ++it) {
        const int stage = it % QS;
        // Stage `stage` (queued QS - 1 steps ago) has landed. The barrier
        // also ends step it - 1 for every thread: its wgmmas completed
        // (each warpgroup waited for them) and its share is parked.
        wg_cp_wait<1>();  // every group but step it + 1's (maybe empty)
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        wgb_bar_sync(1, 256);  // the MMA warps only
        // The stage of step it + QS - 1 was last read by step it - 1,
        // finished at the barrier.
        if (it + 2 < steps) issue(it + 2, (it + 2) % QS);
        wg_cp_commit();  // possibly empty: keeps one group per step
        const int h = step_head(it), q0 = step_q0(it);
        const u32 qs = qb + stage * WG_TILE, dos = dob + stage * WG_TILE;
        // A tile wholly before the warpgroup's keys (only warpgroup 1 at
        // q0 = j0) contributes nothing: dq then takes only warpgroup 0's
        // 64 keys (below), so its dS^T tile is not needed.
        if (q0 >= wk) {
            float s[32], dp[32];
            const u64 qd = wg_desc(qs), dod = wg_desc(dos);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                wg_mma_ss(s, kdesc + wg_kmajor_step(kk), qd + wg_kmajor_step(kk), kk);
            }
            wg_commit();
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                wg_mma_ss(dp, vdesc + wg_kmajor_step(kk), dod + wg_kmajor_step(kk), kk);
            }
            wg_commit();
            wg_wait<1>();
            wg_pin(s, 32);
            // Columns of the thread: queries q0 + 8 nt + 2 t + e.
            const float* ls = lsf + stage * 64;
            const float* dls = dlf + stage * 64;
            // The diagonal tile (q0 = wk) and a tile reaching past seq are
            // masked: key > query, or query >= seq.
            const bool edge = q0 == wk || q0 + 64 > seq;
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
                const int c = nt * 8 + 2 * t;
                const float2 l2 = *(const float2*)(ls + c);
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float s0 = s[4 * nt + e], s1 = s[4 * nt + 2 + e];
                    if (edge) {
                        const int qi = q0 + c + e;
                        const bool in = qi < seq;
                        if (!(in && qi >= key0)) s0 = -KOLM_INF;
                        if (!(in && qi >= key1)) s1 = -KOLM_INF;
                    }
                    const float nl = -(e ? l2.y : l2.x) * WG_LOG2E;
                    s[4 * nt + e] = wg_ex2(fmaf(s0, sl2, nl));
                    s[4 * nt + 2 + e] = wg_ex2(fmaf(s1, sl2, nl));
                }
            }
            u32 pa[4][4];
            wg_acc_to_a(pa, s);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) wg_mma_rs<1>(dva, pa[kk], dod + wg_mnmajor_step(kk), 1);
            wg_commit();
            wg_wait<1>();  // dP^T (dV's group may still run)
            wg_pin(dp, 32);
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
                const float2 d2 = *(const float2*)(dls + nt * 8 + 2 * t);
                dp[4 * nt] = s[4 * nt] * (dp[4 * nt] - d2.x);
                dp[4 * nt + 1] = s[4 * nt + 1] * (dp[4 * nt + 1] - d2.y);
                dp[4 * nt + 2] = s[4 * nt + 2] * (dp[4 * nt + 2] - d2.x);
                dp[4 * nt + 3] = s[4 * nt + 3] * (dp[4 * nt + 3] - d2.y);
            }
            u32 dsa[4][4];
            wg_acc_to_a(dsa, dp);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) wg_mma_rs<1>(dka, dsa[kk], qd + wg_mnmajor_step(kk), 1);
            wg_commit();
            // dS^T rows key0, key1 (tile rows 16 wq + g, + 8), queries
            // 16 kk + 2 t (+1) and + 8: chunk 2 kk and 2 kk + 1 of the row.
            const int r0 = 16 * wq + g;
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                const u32 o = 4 * t;
                asm volatile("st.shared.u32 [%0], %1;" ::"r"(dsw + wg_swz(r0, 2 * kk) + o),
                             "r"(dsa[kk][0]));
                asm volatile("st.shared.u32 [%0], %1;" ::"r"(dsw + wg_swz(r0 + 8, 2 * kk) + o),
                             "r"(dsa[kk][1]));
                asm volatile("st.shared.u32 [%0], %1;" ::"r"(dsw + wg_swz(r0, 2 * kk + 1) + o),
                             "r"(dsa[kk][2]));
                asm volatile("st.shared.u32 [%0], %1;" ::"r"(dsw + wg_swz(r0 + 8, 2 * kk + 1) + o),
                             "r"(dsa[kk][3]));
            }
            // dV's and dK's groups complete with dq's wait below.
        }
        // dS^T stores by generic proxy become visible to wgmma's reads.
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        wgb_bar_sync(1, 256);
        {
            const u64 bd = wg_desc(ks) + (u64)(wg * 4);  // columns 32 wg.. (64 bytes)
            const u64 ad = wg_desc(dsb);
            wg_fence();
            if (q0 == j0) {  // keys j0 + 64.. see none of these queries
#pragma unroll
                for (int kk = 0; kk < 4; ++kk) {
                    wgb_mma_n32_tt(dqa, ad + wg_mnmajor_step(kk), bd + wg_mnmajor_step(kk), kk);
                }
            } else {
#pragma unroll
                for (int kk = 0; kk < 8; ++kk) {
                    // Tiles are adjacent: k step 4.. continues in the
                    // second dS^T tile and the second K tile (+ 8 KB).
                    wgb_mma_n32_tt(dqa, ad + wg_mnmajor_step(kk), bd + wg_mnmajor_step(kk), kk);
                }
            }
            wg_commit();
            wg_wait<0>();
            wg_pin(dqa, 16);
            wg_pin(dva, 32);
            wg_pin(dka, 32);
        }
        // Buffer it % NB is free once the writer has read step it - NB's
        // share from it.
        {
            constexpr int NB = WGB_PARK, BN = 288;
            const int pb = it % NB;
            wgb_bar_sync(2 + NB + pb, BN);
#pragma unroll
            for (int i = 0; i < 16; ++i) park[pb * 4096 + 256 * i + tid] = dqa[i];
            wgb_bar_arrive(2 + pb, BN);
        }
    }
    if (part == nullptr) {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            const int row = key0 + 8 * hr;
            if (row >= seq) continue;
            const u64 at = (((u64)b * seq + row) * hkv + hk) * 64 + 2 * t;
#pragma unroll
            for (int nd = 0; nd < 8; ++nd) {
                *(u32*)(dk + at + nd * 8) =
                    pack2(dka[4 * nd + 2 * hr] * scale, dka[4 * nd + 2 * hr + 1] * scale);
                *(u32*)(dv + at + nd * 8) = pack2(dva[4 * nd + 2 * hr], dva[4 * nd + 2 * hr + 1]);
            }
        }
        return;
    }
    // f32 partial sums, [b, kv head, part, {dk, dv}, seq, 64].
    float* pk = part + ((u64)bx * 2) * seq * 64;
    float* pv = pk + (u64)seq * 64;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const int row = key0 + 8 * hr;
        if (row >= seq) continue;
#pragma unroll
        for (int nd = 0; nd < 8; ++nd) {
            const int c = nd * 8 + 2 * t;
            *(float2*)(pk + (u64)row * 64 + c) =
                make_float2(dka[4 * nd + 2 * hr], dka[4 * nd + 2 * hr + 1]);
            *(float2*)(pv + (u64)row * 64 + c) =
                make_float2(dva[4 * nd + 2 * hr], dva[4 * nd + 2 * hr + 1]);
        }
    }
}

// 384 threads: two MMA warpgroups and the dq writer (see wgb_body).
extern "C" __global__ void __launch_bounds__(384, 1)
attn_bwd_dkvq_wg_bf16_d64(const bf16_t* q, const bf16_t* k, const bf16_t* v,
                          const bf16_t* dout, const float* lse, const float* delta, bf16_t* dk,
                          bf16_t* dv, int seq, int hq, int hkv, float scale, float* part, int hp,
                          float* dqacc, u32* sem, bf16_t* dq) {
    extern __shared__ __attribute__((aligned(1024))) unsigned char wgb_smem[];
    wgb_body(q, k, v, dout, lse, delta, dk, dv, seq, hq, hkv, scale, part, hp, dqacc, sem, dq,
             wgb_smem);
}
