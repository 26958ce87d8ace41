/* ops.h: where the trainer's tensors live and which kernels run on them, as one table (the
 * only dispatch point between the CPU reference and the GPU). gpt/model.c calls every operator
 * and every host<->tensor transfer through the gpt_ops of its gpt_mem (mem.h: gpt_mem.ops):
 *
 *   - gpt_ops_cpu (ops.c): tensor memory is host-addressable (malloc, cpu-sim), the kernels are
 *     kernels-cpu.c's k_*, transfers are memcpy/memset;
 *   - gpt_ops_cuda() (ops-cuda.c, built with the CUDA kernels): tensor memory is device memory
 *     (the smartswap allocator on the cuda device), the kernels are kernels-cuda.cu's kc_*
 *     launched on the legacy default stream (the compute stream the smartswap executor wraps on
 *     the cuda device, so its copy streams are ordered against the kernels by its events), and
 *     transfers are cudaMemcpyAsync/cudaMemsetAsync on that stream.
 *
 * Signatures are kernels.h's, with two additions the GPU needs: embed_bwd takes V, moe_combine
 * takes E. upload/download return once the bytes have arrived (the host buffer may be reused).
 */
#ifndef GPT_OPS_H
#define GPT_OPS_H

#include <stddef.h>
#include <stdint.h>

typedef struct gpt_ops {
    const char *name;        /* "cpu", "cuda" */
    int device_memory;       /* 1: tensor memory is not host-addressable */
    int has_moe;             /* 0: the MoE routing (host index arrays) is not supported */
    int moe_runs_max;        /* the most expert runs moe_combine takes (its E); 0: no limit */
    const char *(*describe)(void);   /* the kernels, in words (static text) */

    /* transfers between host memory and tensor memory */
    void (*upload)(void *dst, const void *src_host, size_t bytes);
    void (*download)(void *dst_host, const void *src, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);   /* tensor -> tensor */
    void (*zero)(void *dst, size_t bytes);
    /* int arrays in tensor memory outside any budget (the micro-batch's tokens); NULL on the CPU
     * table (host ints are used as they are) */
    void *(*ints_alloc)(size_t n);
    void (*ints_free)(void *p);
    /* waits for every queued kernel and transfer; 0, or -1 with err naming the first failed one
     * (sticky). The model calls it after each micro-batch's backward, after each update and
     * before it frees its memory, so step times count the GPU's work and nothing is freed under
     * a running kernel. */
    int (*sync)(char *err, size_t len);

    void (*matmul_fwd)(float *out, const float *inp, const float *w, int M, int K, int N);
    void (*matmul_bwd)(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                       int M, int K, int N);
    void (*rmsnorm_fwd)(float *out, float *rstd, const float *x, const float *w, int M, int C, float eps);
    void (*rmsnorm_bwd)(float *dx, float *dw, const float *dout, const float *x, const float *rstd,
                        const float *w, int M, int C);
    void (*rope_fwd)(float *out, const float *x, const float *cos_t, const float *sin_t, int B, int T, int H,
                     int hd);
    void (*rope_bwd)(float *dx, const float *dout, const float *cos_t, const float *sin_t, int B, int T, int H,
                     int hd);
    void (*attn_fwd)(float *out, float *att, const float *q, const float *k, const float *v, int B, int T, int A,
                     int KV, int hd);
    void (*attn_bwd)(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                     const float *v, const float *att, int B, int T, int A, int KV, int hd);
    void (*flash_attn_fwd)(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,
                           int A, int KV, int hd);
    void (*flash_attn_bwd)(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                           const float *v, const float *lse, int B, int T, int A, int KV, int hd);
    void (*swiglu_fwd)(float *out, const float *g, const float *u, size_t n);
    void (*swiglu_bwd)(float *dg, float *du, const float *dout, const float *g, const float *u, size_t n);
    void (*add_fwd)(float *out, const float *a, const float *b, size_t n);
    void (*accumulate)(float *dst, const float *src, size_t n);
    void (*embed_fwd)(float *out, const int *tok, const float *wte, int M, int C);
    void (*embed_bwd)(float *dwte, const float *dout, const int *tok, int M, int C, int V);
    float (*xent_fwd)(float *probs, float *losses, const float *logits, const int *targets, int M, int V);
    void (*xent_bwd)(float *dlogits, const float *probs, const int *targets, int M, int V, float dloss);
    void (*xent_lse_fwd)(float *lse, float *losses, const float *logits, const int *targets, int M, int V);
    void (*xent_lse_bwd)(float *logits, const float *lse, const int *targets, int M, int V, float scale);
    void (*moe_route_fwd)(float *probs, float *wts, int *idx, const float *logits, int M, int E, int K);
    void (*moe_route_bwd)(float *dlogits, const float *dwts, const float *probs, const int *idx, int M, int E,
                          int K);
    void (*moe_gather_fwd)(float *xe, const float *x, const int *rows, int n, int C);
    void (*moe_gather_bwd)(float *dx, const float *dxe, const int *rows, int n, int C);
    void (*moe_combine_fwd)(float *out, const float *wts, const int *idx, const int *slot, const float *const *ye,
                            int M, int C, int K, int E);
    void (*moe_combine_bwd)(float *const *dye, float *dwts, const float *dout, const float *wts, const int *idx,
                            const int *slot, const float *const *ye, int M, int C, int K, int E);
    void (*adamw)(float *p, float *m, float *v, const float *g, size_t n, float lr, float b1, float b2, float eps,
                  float wd, int t);

    /* bf16 storage (--dtype bf16, model.c "bf16 activations"): dst = the bf16 bits of src (round
     * to nearest even), dst = the exact fp32 of the bf16 bits src */
    void (*to_bf16)(uint16_t *dst, const float *src, size_t n);
    void (*from_bf16)(float *dst, const uint16_t *src, size_t n);
    /* Optional (NULL: the model widens the bf16 operands into fp32 scratch and calls matmul_fwd /
     * matmul_bwd, which gives the same products): matrix products reading bf16 operands directly,
     * fp32 accumulation and outputs (+= in backward), as matmul_fwd / matmul_bwd otherwise. */
    void (*matmul_fwd_bf16)(float *out, const uint16_t *inp, const uint16_t *w, int M, int K, int N);
    void (*matmul_bwd_bf16)(float *dinp, float *dw, const uint16_t *dout, const uint16_t *inp, const uint16_t *w,
                            int M, int K, int N);
} gpt_ops;

extern const gpt_ops gpt_ops_cpu;

/* The CUDA table (ops-cuda.c; only in builds with the CUDA kernels): initialises the kernels
 * (gpt_cuda_init: device 0, cuBLAS) on first use. NULL with err saying why when that fails. */
const gpt_ops *gpt_ops_cuda(char *err, size_t len);
#endif /* GPT_OPS_H */
