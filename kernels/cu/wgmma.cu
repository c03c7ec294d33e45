// Hopper warpgroup MMA (wgmma, sm_90a) helpers shared by the attention
// kernels in attention_wg_fwd.cu and attention_wg_bwd.cu.
//
// Why wgmma: the mma.sync kernels (attention_tc.cu) keep every MMA's
// operands and accumulators in the issuing warp's registers, and measured
// latency-bound at 255 registers and 8 warps per SM. A wgmma is issued by
// a warpgroup (4 warps, 128 threads) for a 64 x N x 16 product, reads B
// (and optionally A) straight from shared memory, and runs asynchronously:
// the warps go on until they wait for the group. Fewer registers per row,
// no ldmatrix stream, and one warpgroup's softmax overlaps another's MMAs.
//
// Shared-memory tiles: 64 rows of 64 bf16 (128 bytes, one row per key or
// query), 8 KB, 1024-byte aligned, in the 128-byte swizzle wgmma reads:
// the 16-byte chunk c of row r sits at chunk c ^ (r % 8) of the row. The
// same tile serves as a K-major operand (rows = m or n, k along the row:
// Q, K, dO as left or right factors of S = Q K^T) and as an MN-major one
// (rows = k: V in O += P V, Q and dO in the backward's dK, dV). Both
// descriptors then take a stride of 1024 bytes between 8-row groups, and
// the leading offset is unused (n or m extent of one 64-element atom).
// A k step of 16 moves 32 bytes along a row (K-major) or 16 rows = 2048
// bytes (MN-major). Determinism: a wgmma's f32 accumulation order depends
// on the instruction alone, and each accumulator takes its k steps in a
// fixed order.

#define WG_LOG2E 1.4426950408889634f
#define WG_TILE 8192  // bytes of one swizzled 64 x 64 bf16 tile

__device__ __forceinline__ u32 wg_smem_addr(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// Byte offset of 16-byte chunk `chunk` (0..7) of row `row` in a swizzled tile.
__device__ __forceinline__ u32 wg_swz(int row, int chunk) {
    return (u32)(row * 128 + ((chunk ^ (row & 7)) << 4));
}

// Descriptor of a swizzled tile at shared address `saddr` (1024-aligned, or
// advanced from such an address by a k step): start address >> 4 in bits
// 0..13, leading byte offset 16 (>> 4 = 1; unused here) in bits 16..29,
// stride byte offset 1024 (>> 4) in bits 32..45, base offset 0, 128-byte
// swizzle (mode 1) in bits 62..63.
__device__ __forceinline__ u64 wg_desc(u32 saddr) {
    return (u64)((saddr & 0x3FFFFu) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) |
           ((u64)1 << 62);
}

// Descriptor offsets (in the descriptor's 16-byte units) of k step kk.
__device__ __forceinline__ u64 wg_kmajor_step(int kk) { return (u64)(kk * 2); }
__device__ __forceinline__ u64 wg_mnmajor_step(int kk) { return (u64)(kk * 128); }

// Orders this warpgroup's register writes (accumulators, A fragments)
// before the wgmmas that follow.
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Pins accumulator registers across an asynchronous group, so the compiler
// neither reads them early nor moves them while the tensor cores write.
__device__ __forceinline__ void wg_pin(float* d, int n) {
#pragma unroll
    for (int i = 0; i < n; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d (64 x 64, f32) = A * B (+ d when `accumulate`), k = 16, both operands in
// shared memory through descriptors. A is K-major (rows of the tile are the
// m rows); B is K-major (rows are the n columns: S = Q K^T with K's rows).
__device__ __forceinline__ void wg_mma_ss(float* d, u64 da, u64 db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),
          "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
          "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(accumulate));
}

// d (64 x 64, f32) = A * B (+ d when `accumulate`), k = 16, A in registers (the warpgroup's 64 x 16
// slice in mma.sync's m16n8k16 A-fragment layout, per warp 16 rows), B in
// shared memory. TRANS_B = 1: B is N-major (its rows are k: O += P V with
// V's rows), 0: K-major.
template <int TRANS_B>
__device__ __forceinline__ void wg_mma_rs(float* d, const u32* a, u64 db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %37;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),
          "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
          "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(TRANS_B), "r"(accumulate));
}

// cp.async of rows [r0, r0 + 64) of head h (rows of `heads` heads of 64
// bf16, token-major as everywhere in kolm) into the swizzled tile at shared
// address `dst`, zero-filled past seq; NT threads, thread index `tid`.
template <int NT>
__device__ __forceinline__ void wg_async_tile(u32 dst, const bf16_t* src, int b, int r0, int h,
                                              int seq, int heads, int tid) {
#pragma unroll
    for (int i = 0; i < (512 + NT - 1) / NT; ++i) {
        const int c = tid + i * NT;
        if (512 % NT != 0 && c >= 512) break;
        const int row = c >> 3, part = c & 7;
        const bool in = r0 + row < seq;
        const bf16_t* gp = src + (((u64)b * seq + (in ? r0 + row : 0)) * heads + h) * 64 + part * 8;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst + wg_swz(row, part)),
                     "l"(gp), "r"(in ? 16 : 0));
    }
}

__device__ __forceinline__ void wg_cp_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void wg_cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// 2^x on the special-function unit (see attention_tc.cu's ex2).
__device__ __forceinline__ float wg_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float wg_quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float wg_quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// A 64 x 64 f32 accumulator (a warp's 16 rows, n tiles of 8) as bf16 A
// fragments of its four 16-column k steps: accumulator and A layouts agree
// row for row, so no data leaves the thread.
__device__ __forceinline__ void wg_acc_to_a(u32 (*a)[4], const float* c) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        a[kk][0] = pack2(c[8 * kk + 0], c[8 * kk + 1]);
        a[kk][1] = pack2(c[8 * kk + 2], c[8 * kk + 3]);
        a[kk][2] = pack2(c[8 * kk + 4], c[8 * kk + 5]);
        a[kk][3] = pack2(c[8 * kk + 6], c[8 * kk + 7]);
    }
}
