/* ops-cuda.c: the CUDA table of ops.h: kernels-cuda.cu's kc_* launchers on device memory, on the
 * legacy default stream (gpt_cuda_set_stream(NULL)), which is the compute stream the smartswap
 * executor wraps on the cuda device (ss_stream_wrap(dev, NULL)): the executor's copies run on
 * its own streams, ordered against these kernels by events it records on that stream. Built
 * only with the CUDA kernels (the Makefile's USE_CUDA with nvcc). Transfers are async copies on
 * the same stream, so they are ordered with the kernels; upload and download wait for the copy
 * (the host buffer is the caller's to reuse at once). */
#include "ops.h"

#include "kernels-cuda.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

static cudaError_t g_err = cudaSuccess;   /* the first failed transfer (sticky) */
static const char *g_err_what = "";

static void note(cudaError_t e, const char *what) {
    if (e != cudaSuccess && g_err == cudaSuccess) { g_err = e; g_err_what = what; }
}

static void u_upload(void *dst, const void *src, size_t n) {
    note(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, NULL), "cudaMemcpyAsync (host to device)");
    note(cudaStreamSynchronize(NULL), "cudaStreamSynchronize");
}
static void u_download(void *dst, const void *src, size_t n) {
    note(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, NULL), "cudaMemcpyAsync (device to host)");
    note(cudaStreamSynchronize(NULL), "cudaStreamSynchronize");
}
static void u_copy(void *dst, const void *src, size_t n) {
    note(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, NULL), "cudaMemcpyAsync (device to device)");
}
static void u_zero(void *dst, size_t n) { note(cudaMemsetAsync(dst, 0, n, NULL), "cudaMemsetAsync"); }
static void *u_ints_alloc(size_t n) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, n ? n * sizeof(int) : sizeof(int));
    note(e, "cudaMalloc");
    return e == cudaSuccess ? p : NULL;
}
static void u_ints_free(void *p) {
    if (p) note(cudaFree(p), "cudaFree");
}
static int u_sync(char *err, size_t len) {
    if (g_err != cudaSuccess) {
        snprintf(err, len, "CUDA: %s failed: %s", g_err_what, cudaGetErrorString(g_err));
        return -1;
    }
    return gpt_cuda_sync(err, len);
}

static const gpt_ops g_cuda = {
    .name = "cuda", .device_memory = 1, .has_moe = 1, .moe_runs_max = GPT_CUDA_MOE_MAX, .describe = gpt_cuda_describe,
    .upload = u_upload, .download = u_download, .copy = u_copy, .zero = u_zero,
    .ints_alloc = u_ints_alloc, .ints_free = u_ints_free, .sync = u_sync,
    .matmul_fwd = kc_matmul_fwd, .matmul_bwd = kc_matmul_bwd,
    .rmsnorm_fwd = kc_rmsnorm_fwd, .rmsnorm_bwd = kc_rmsnorm_bwd,
    .rope_fwd = kc_rope_fwd, .rope_bwd = kc_rope_bwd,
    .attn_fwd = kc_attn_fwd, .attn_bwd = kc_attn_bwd,
    .flash_attn_fwd = kc_flash_attn_fwd, .flash_attn_bwd = kc_flash_attn_bwd,
    .swiglu_fwd = kc_swiglu_fwd, .swiglu_bwd = kc_swiglu_bwd,
    .add_fwd = kc_add_fwd, .accumulate = kc_accumulate,
    .embed_fwd = kc_embed_fwd, .embed_bwd = kc_embed_bwd,
    .xent_fwd = kc_xent_fwd, .xent_bwd = kc_xent_bwd,
    .xent_lse_fwd = kc_xent_lse_fwd, .xent_lse_bwd = kc_xent_lse_bwd,
    .moe_route_fwd = kc_moe_route_fwd, .moe_route_bwd = kc_moe_route_bwd,
    .moe_gather_fwd = kc_moe_gather_fwd, .moe_gather_bwd = kc_moe_gather_bwd,
    .moe_combine_fwd = kc_moe_combine_fwd, .moe_combine_bwd = kc_moe_combine_bwd,
    .adamw = kc_adamw,
    /* --dtype bf16 (the model stores activations as bf16 and rounds the products' other operands,
     * model.c): the conversions, and the products on bf16 operands (cublasGemmEx, fp32 accumulation) */
    .to_bf16 = kc_to_bf16, .from_bf16 = kc_from_bf16,
    .matmul_fwd_bf16 = kc_matmul_fwd_bf16, .matmul_bwd_bf16 = kc_matmul_bwd_bf16,
};

const gpt_ops *gpt_ops_cuda(char *err, size_t len) {
    if (gpt_cuda_init(err, len)) return NULL;
    gpt_cuda_set_stream(NULL);
    return &g_cuda;
}
