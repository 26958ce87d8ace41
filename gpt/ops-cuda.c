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
#include <stdint.h>
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
    .name = "cuda", .device_memory = 1, .has_moe = 0, .describe = gpt_cuda_describe,
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
};

const gpt_ops *gpt_ops_cuda(char *err, size_t len) {
    if (gpt_cuda_init(err, len)) return NULL;
    gpt_cuda_set_stream(NULL);
    return &g_cuda;
}

/* --dtype bf16: the same table, but each matrix product rounds its inputs (the activation, the
 * weight, the output gradient) to bf16 into scratch buffers and multiplies with bf16 inputs,
 * fp32 accumulation and fp32 outputs (kc_matmul_*_bf16). Everything else, the tensors the model
 * stores included, stays fp32. The three scratch buffers are plain cudaMalloc memory outside the
 * smartswap budget, grown to the largest product seen (bf16 copies of one product's operands);
 * they are reused in stream order, so no product waits for another. */
static uint16_t *g_b16[3];
static size_t g_b16_cap[3];

static uint16_t *b16_scratch(int i, size_t n) {
    if (n > g_b16_cap[i]) {
        if (g_b16[i]) note(cudaFree(g_b16[i]), "cudaFree (bf16 scratch)");   /* waits for the device */
        g_b16[i] = NULL;
        g_b16_cap[i] = 0;
        void *p = NULL;
        cudaError_t e = cudaMalloc(&p, n * sizeof(uint16_t));
        note(e, "cudaMalloc (bf16 scratch)");
        if (e != cudaSuccess) return NULL;
        g_b16[i] = p;
        g_b16_cap[i] = n;
    }
    return g_b16[i];
}
static const uint16_t *b16_of(int i, const float *x, size_t n) {
    uint16_t *b = b16_scratch(i, n);
    if (b) kc_to_bf16(b, x, n);
    return b;
}
static void b_matmul_fwd(float *out, const float *inp, const float *w, int M, int K, int N) {
    const uint16_t *bi = b16_of(0, inp, (size_t)M * K), *bw = b16_of(1, w, (size_t)N * K);
    if (bi && bw) kc_matmul_fwd_bf16(out, bi, bw, M, K, N);
}
static void b_matmul_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w, int M, int K,
                         int N) {
    const uint16_t *bd = b16_of(2, dout, (size_t)M * N);
    const uint16_t *bw = dinp ? b16_of(1, w, (size_t)N * K) : NULL, *bi = dw ? b16_of(0, inp, (size_t)M * K) : NULL;
    if (bd && (!dinp || bw) && (!dw || bi)) kc_matmul_bwd_bf16(dinp, dw, bd, bi, bw, M, K, N);
}
static char g_b16_desc[320];
static const char *b_describe(void) {   /* the fp32 table's words, less their closing ", fp32" */
    const char *base = gpt_cuda_describe();
    size_t n = strlen(base);
    if (n >= 6 && !strcmp(base + n - 6, ", fp32")) n -= 6;
    snprintf(g_b16_desc, sizeof g_b16_desc, "%.*s; bf16: matrix products on bf16-rounded inputs with fp32 "
             "accumulation and outputs, every stored tensor (activations, weights, gradients, AdamW state) fp32",
             (int)n, base);
    return g_b16_desc;
}
static gpt_ops g_cuda_bf16;

const gpt_ops *gpt_ops_cuda_bf16(char *err, size_t len) {
    if (!gpt_ops_cuda(err, len)) return NULL;
    g_cuda_bf16 = g_cuda;
    g_cuda_bf16.name = "cuda-bf16";
    g_cuda_bf16.describe = b_describe;
    g_cuda_bf16.matmul_fwd = b_matmul_fwd;
    g_cuda_bf16.matmul_bwd = b_matmul_bwd;
    return &g_cuda_bf16;
}
