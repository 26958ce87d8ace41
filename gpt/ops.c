/* ops.c: the CPU table of ops.h: kernels-cpu.c's kernels on host memory. */
#include "ops.h"

#include "kernels.h"

#include <string.h>

static void c_upload(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
static void c_zero(void *dst, size_t n) { memset(dst, 0, n); }
static int c_sync(char *err, size_t len) { (void)err; (void)len; return 0; }
static void c_embed_bwd(float *dwte, const float *dout, const int *tok, int M, int C, int V) {
    (void)V;
    k_embed_bwd(dwte, dout, tok, M, C);
}
static void c_moe_combine_fwd(float *out, const float *wts, const int *idx, const int *slot, const float *const *ye,
                              int M, int C, int K, int E) {
    (void)E;
    k_moe_combine_fwd(out, wts, idx, slot, ye, M, C, K);
}
static void c_moe_combine_bwd(float *const *dye, float *dwts, const float *dout, const float *wts, const int *idx,
                              const int *slot, const float *const *ye, int M, int C, int K, int E) {
    (void)E;
    k_moe_combine_bwd(dye, dwts, dout, wts, idx, slot, ye, M, C, K);
}

const gpt_ops gpt_ops_cpu = {
    .name = "cpu", .device_memory = 0, .has_moe = 1, .describe = gpt_kernels_describe,
    .upload = c_upload, .download = c_upload, .copy = c_upload, .zero = c_zero,
    .ints_alloc = NULL, .ints_free = NULL, .sync = c_sync,
    .matmul_fwd = k_matmul_fwd, .matmul_bwd = k_matmul_bwd,
    .rmsnorm_fwd = k_rmsnorm_fwd, .rmsnorm_bwd = k_rmsnorm_bwd,
    .rope_fwd = k_rope_fwd, .rope_bwd = k_rope_bwd,
    .attn_fwd = k_attn_fwd, .attn_bwd = k_attn_bwd,
    .flash_attn_fwd = k_flash_attn_fwd, .flash_attn_bwd = k_flash_attn_bwd,
    .swiglu_fwd = k_swiglu_fwd, .swiglu_bwd = k_swiglu_bwd,
    .add_fwd = k_add_fwd, .accumulate = k_accumulate,
    .embed_fwd = k_embed_fwd, .embed_bwd = c_embed_bwd,
    .xent_fwd = k_xent_fwd, .xent_bwd = k_xent_bwd,
    .xent_lse_fwd = k_xent_lse_fwd, .xent_lse_bwd = k_xent_lse_bwd,
    .moe_route_fwd = k_moe_route_fwd, .moe_route_bwd = k_moe_route_bwd,
    .moe_gather_fwd = k_moe_gather_fwd, .moe_gather_bwd = k_moe_gather_bwd,
    .moe_combine_fwd = c_moe_combine_fwd, .moe_combine_bwd = c_moe_combine_bwd,
    .adamw = k_adamw,
    .to_bf16 = k_to_bf16, .from_bf16 = k_from_bf16,
    .matmul_fwd_bf16 = NULL, .matmul_bwd_bf16 = NULL,   /* the model widens (the same products) */
};
