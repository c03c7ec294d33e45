// Causal grouped-query attention backward, bf16, head dimension 64, on
// wgmma (see wgmma.cu). The step order of attn_bwd_dkvq_tc_bf16_d64
// (attention_tc.cu's dkv_body and fused_dq): a block owns 128 keys of one
// (batch, kv head) and walks (64-query tile, query head of the group)
// steps, tile-major from the last tile down, heads inner; the first key
// blocks may be split in two pieces by query tiles (wgb_body). Every dk/dv
// element is accumulated by one thread in step order (each wgmma's own
// summation order is fixed by the instruction), then, for a split key
// block, the two pieces' sums are added; dq's sum over key blocks is built
// one block after another in a fixed order (wgb_rank) behind turn
// counters: ((p_0 + p_1) + p_2) + ... The delta kernel is attention_tc.cu's.
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
// the tensor cores idle through the dq chain's latency; the same kernel
// without the add (wrong dq, timing only) was much faster, so the add was
// the gap. A writer that reads, adds and writes the sum still could not
// keep up with the MMA warpgroups; middle contributors adding with
// red.add.v2 (no read; see wgb_body for why the bits still repeat) can.
// Four-float red.add measured slower than two-float. (Timings:
// docs/notes/kernel-log.md, attention sixth and seventh passes.)
//
// Registers: the block launches at 168 per thread (384 x 168 = 64512);
// setmaxnreg gives the MMA warpgroups 224 (dK, dV, S^T, dP^T are 32 f32
// per thread each, dq's share 16) and the writer 56 (at 40, the writer's
// dq order for split key blocks spilled 4 bytes). ptxas -v (NVRTC 13.0,
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

// dq's order for tile ti among the key blocks that see it (0 .. ti / 2):
// first the split key blocks whose near piece holds ti, in key-block
// order, then the others in key-block order; returns key block jb's place.
// The near piece of split key block j holds tiles [2 j, j + half), so
// those blocks are the range j in [ti - half + 1, min(ti / 2, split - 1)].
// With split = 0 the order is key-block order (rank = jb). Near pieces
// start in the launch's first blocks, halfway down their key block's
// tiles, so this is about the order in which shares arrive; and every
// block waits only for blocks launched before it (see wgb_body).
__device__ __forceinline__ int wgb_rank(int jb, int ti, int split, int half) {
    const int lo = imax(0, ti - half + 1), hi = imin(ti >> 1, split - 1);
    const int n = hi >= lo ? hi - lo + 1 : 0;
    if (jb >= lo && jb <= hi) return jb - lo;
    return jb < lo ? n + jb : jb;
}

// Stores the thread's dk and dv rows (key0, key0 + 8) as bf16, after
// adding, when `other` is not null, the other piece's f32 sums read from
// it (other + r * 64 + c for dk, + 8192 for dv; r the row's offset from
// key0). dk is scaled here, once.
__device__ __forceinline__ void wgb_store_dkv(const float* dka, const float* dva,
                                              const float* other, bf16_t* dk, bf16_t* dv, int b,
                                              int seq, int hkv, int hk, int key0, int t,
                                              float scale) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const int row = key0 + 8 * hr;
        if (row >= seq) continue;
        const u64 at = (((u64)b * seq + row) * hkv + hk) * 64 + 2 * t;
#pragma unroll
        for (int nd = 0; nd < 8; ++nd) {
            float k0 = dka[4 * nd + 2 * hr], k1 = dka[4 * nd + 2 * hr + 1];
            float v0 = dva[4 * nd + 2 * hr], v1 = dva[4 * nd + 2 * hr + 1];
            if (other) {
                const float* o = other + 8 * hr * 64 + nd * 8 + 2 * t;
                const float2 ok = __ldcg((const float2*)o);
                const float2 ov = __ldcg((const float2*)(o + 8192));
                k0 += ok.x;
                k1 += ok.y;
                v0 += ov.x;
                v1 += ov.y;
            }
            *(u32*)(dk + at + nd * 8) = pack2(k0 * scale, k1 * scale);
            *(u32*)(dv + at + nd * 8) = pack2(v0, v1);
        }
    }
}

// dk, dv and dq. dqacc is f32 scratch shaped like dq (the first
// contributor of each tile stores), sem zeroed u32 turn counters, eight
// per (b, query head, 64-query tile) (the first one used), followed by two
// zeroed words per split key block (below).
//
// Pieces. The grid's y runs over ceil(seq / 128) + split blocks per (b, kv
// head): y < split is the near piece of key block y (query tiles [2 y,
// y + half), half = ntiles / 2: the tiles by its diagonal), split <= y < 2
// split the far piece of key block y - split (tiles [y - split + half,
// ntiles)), and the rest whole key blocks y - split. Splitting the longest
// key blocks (the first ones: key block j walks ntiles - 2 j tiles) in two
// evens out the blocks' lengths, so the last wave is shorter (a schedule
// model of the H100's 132 multiprocessors at T = 4096, B = 4: 318 steps
// of one block against 288 ideal unsplit, 288 with 10 blocks split). `part`
// holds, per split key block, the f32 dk and dv sums of the piece that
// finishes first (2 x 128 x 64 floats); the other piece adds them.
// Each piece's dq shares join dq's order at wgb_rank's place. Deadlock-free
// as before: every block waits only for blocks with a lower y (near pieces
// wait for near pieces of lower key blocks; far pieces and whole blocks
// for near pieces and for lower key blocks), which start first.
//
// Warpgroup 2 is the dq writer. The MMA warpgroups park each step's share
// in shared memory (buffer it % 4) and go on; writer warp w takes steps w,
// w + 4, ... whole. Named barriers: 1 = the MMA warps' step barrier,
// 2 + buf = FULL (256 MMA arrivals + writer warp buf's wait), 6 + buf =
// FREE (writer warp buf's arrival + the MMA warps' wait before they refill
// the buffer). Q, dO, lse and delta are prefetched two steps ahead (three
// stages; two measured slower at T = 4096: docs/notes/kernel-log.md,
// attention seventh pass).
__device__ __forceinline__ void wgb_body(const bf16_t* q, const bf16_t* k, const bf16_t* v,
                                         const bf16_t* dout, const float* lse,
                                         const float* delta, bf16_t* dk, bf16_t* dv, int seq,
                                         int hq, int hkv, float scale, float* part, int split,
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
    const int group = hq / hkv;
    const int bx = blockIdx.x, b = bx / hkv, hk = bx % hkv;
    const int ntiles = (seq + 63) / 64, half = ntiles / 2;
    // The block's piece (see wgb_piece): key block jb, query tiles
    // [t_lo, t_hi), walked from the last down.
    int jb, t_lo, t_hi;
    const int y = blockIdx.y;
    if (y < split) {  // near piece of a split key block
        jb = y;
        t_lo = 2 * jb;
        t_hi = jb + half;
    } else if (y < 2 * split) {  // its far piece
        jb = y - split;
        t_lo = jb + half;
        t_hi = ntiles;
    } else {  // a whole key block
        jb = y - split;
        t_lo = 2 * jb;
        t_hi = ntiles;
    }
    const int j0 = jb * 128;
    const int wk = j0 + 64 * wg;  // the warpgroup's first key
    const int key0 = wk + 16 * wq + g, key1 = key0 + 8;  // the thread's rows
    const float sl2 = scale * WG_LOG2E;
    const int tiles = t_hi - t_lo;
    const int steps = group * tiles;
    auto step_head = [&](int it) { return hk * group + it % group; };
    auto step_q0 = [&](int it) { return (t_hi - 1 - it / group) * 64; };
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
        // for, so the split must stay within it: 2 x 128 x 224 + 128 x 56 =
        // 64512. (232 / 48, 512 over, hung on the H100: the MMA warpgroups
        // waited for registers forever.)
        if (__shfl_sync(0xffffffffu, tid >> 7, 0) == 2) {
            asm volatile("setmaxnreg.dec.sync.aligned.u32 56;");
            const int ww = (tid - 256) >> 5;
            // Writer warp ww takes steps ww, ww + 4, ... whole (all eight
            // MMA warps' shares, from park buffer ww; barriers of 256 MMA
            // threads + this warp), so four steps' turn waits and fences
            // overlap. (Every writer warp taking every step, two buffers,
            // measured slower.)
            constexpr int NB = WGB_PARK, BN = 288;
            if (ww < steps) wgb_bar_arrive(2 + NB + ww, BN);
            for (int it = ww; it < steps; it += NB) {
                const int bf = it % NB;
                wgb_bar_sync(2 + bf, BN);
                const int h = step_head(it), q0 = step_q0(it), ti = q0 >> 6;
                const int rank = wgb_rank(jb, ti, split, half);
                const bool first = rank == 0, last = rank == (ti >> 1);
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
                            if (val >= (u32)rank) break;
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
                asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"((u32)rank + 1)
                             : "memory");
            }
            return;
        }
        asm volatile("setmaxnreg.inc.sync.aligned.u32 224;");
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
    // (Read again from blockIdx and the arguments rather than kept live
    // through the loop: the MMA warpgroups' registers are full there.)
    if ((int)blockIdx.y >= 2 * split) {  // a whole key block: the block's sums
        wgb_store_dkv(dka, dva, nullptr, dk, dv, b, seq, hkv, hk, key0, t, scale);
        return;
    }
    // A split key block: the two pieces' f32 sums are added. The piece that
    // finishes first (ticket 0) parks its sums in `part` and raises the
    // ready flag; the other adds them to its own and stores dk and dv. IEEE
    // addition is commutative, so the bits do not depend on which piece
    // finishes first. The tickets follow the turn counters in `sem` (zeroed
    // with them), two words (ticket, ready) per split key block. The ticket
    // is broadcast through the lse stage memory: every MMA thread read its
    // last lse before the last step's barrier.
    volatile u32* wgb_ticket = (volatile u32*)lsf;
    const u64 sb = (u64)blockIdx.x * split + blockIdx.y % split;  // the split key block
    u32* tk = sem + (u64)gridDim.x * (hq / hkv) * ((seq + 63) / 64) * 8 + sb * 2;
    float* pp = part + sb * (2 * 128 * 64);
    if (tid == 0) *wgb_ticket = atomicAdd(tk, 1u);
    wgb_bar_sync(1, 256);
    const int rb = (tid >> 5) * 16 + g;  // the thread's first row of the block's 128
    if (*wgb_ticket == 0) {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
#pragma unroll
            for (int nd = 0; nd < 8; ++nd) {
                const int at = (rb + 8 * hr) * 64 + nd * 8 + 2 * t;
                __stcg((float2*)(pp + at), make_float2(dka[4 * nd + 2 * hr], dka[4 * nd + 2 * hr + 1]));
                __stcg((float2*)(pp + 8192 + at),
                       make_float2(dva[4 * nd + 2 * hr], dva[4 * nd + 2 * hr + 1]));
            }
        }
        __threadfence();
        wgb_bar_sync(1, 256);
        if (tid == 0) {
            asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(tk + 1), "r"(1u) : "memory");
        }
        return;
    }
    if (tid == 0) {
        u32 n = 0;
        for (;;) {
            u32 val;
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(val) : "l"(tk + 1) : "memory");
            if (val != 0) break;
            __nanosleep(64);
            if (++n > (1u << 26)) __trap();
        }
    }
    wgb_bar_sync(1, 256);
    wgb_store_dkv(dka, dva, pp + (u64)rb * 64, dk, dv, b, seq, hkv, hk, key0, t, scale);
}

// 384 threads: two MMA warpgroups and the dq writer (see wgb_body).
extern "C" __global__ void __launch_bounds__(384, 1)
attn_bwd_dkvq_wg_bf16_d64(const bf16_t* q, const bf16_t* k, const bf16_t* v,
                          const bf16_t* dout, const float* lse, const float* delta, bf16_t* dk,
                          bf16_t* dv, int seq, int hq, int hkv, float scale, float* part,
                          int split, float* dqacc, u32* sem, bf16_t* dq) {
    extern __shared__ __attribute__((aligned(1024))) unsigned char wgb_smem[];
    wgb_body(q, k, v, dout, lse, delta, dk, dv, seq, hq, hkv, scale, part, split, dqacc, sem, dq,
             wgb_smem);
}
