// Causal grouped-query attention backward on wgmma: not written yet; the
// backward runs attention_tc.cu's kernels.
