/* kernels-cuda.h: the trainer's operator kernels on the GPU (gpt/kernels-cuda.cu), the same list
 * and contracts as kernels.h with a kc_ prefix instead of k_. fp32 throughout.
 *
 * Every pointer a kc_ launcher takes is DEVICE memory (cudaMalloc or an allocator block on the
 * cuda device) unless its comment says "host"; tokens, targets, rows, idx and slot are device
 * int arrays too. Launchers are asynchronous on the stream set by gpt_cuda_set_stream (the
 * legacy default stream until then) and return nothing: the first failure is kept (sticky) and
 * reported by gpt_cuda_status / gpt_cuda_sync. Backward kernels ACCUMULATE (+=) into the
 * gradients given (NULL: not wanted), as on the CPU.
 *
 * Determinism (docs/cuda.md): no floating-point atomics anywhere. Each output element is written
 * by one thread (or one warp, whose butterfly reductions give every lane the same bits), summed
 * in one fixed order that depends only on the shapes. Matrix products are cuBLAS sgemm with a
 * fixed workspace, atomics disallowed and the default (no TF32) math mode. The file is compiled
 * with --fmad=false, so kernels with no reduction and no exp/log (add, accumulate, rope,
 * embedding, gather, AdamW, the cross-entropy backward) give the CPU reference's exact bits;
 * the embedding backward sums in the CPU's order and matches it exactly too.
 *
 * Not built without the CUDA toolkit (the Makefile's USE_CUDA); the test then skips.
 */
#ifndef GPT_KERNELS_CUDA_H
#define GPT_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Once per process, before any launcher: picks device 0 (cudaSetDevice), creates the cuBLAS
 * handle and its fixed workspace. 0 on success; -1 with err saying why (no GPU, no driver,
 * cuBLAS failed), after which no launcher may be called. Calling it again after success is a
 * no-op returning 0. */
int gpt_cuda_init(char *err, size_t len);
/* Frees the handle, the workspace and the scratch; gpt_cuda_init may be called again. */
void gpt_cuda_shutdown(void);
/* "cuda: <GPU name>, cuBLAS sgemm (fixed 32 MiB workspace, no TF32), fp32" (static buffer). */
const char *gpt_cuda_describe(void);
/* Runs the launchers on stream (a cudaStream_t; NULL: the legacy default stream). cuBLAS
 * follows, keeping the fixed workspace. */
void gpt_cuda_set_stream(void *stream);
/* 0 if no launcher failed since init (also checks cudaGetLastError); else -1 and err names the
 * first failure. gpt_cuda_sync also waits for the stream first. */
int gpt_cuda_status(char *err, size_t len);
int gpt_cuda_sync(char *err, size_t len);

/* Plain device memory for tests and tools: NULL / -1 on failure (recorded as the sticky error). */
void *gpt_cuda_malloc(size_t bytes);
void gpt_cuda_free(void *p);
int gpt_cuda_upload(void *dst_dev, const void *src_host, size_t bytes);     /* synchronous */
int gpt_cuda_download(void *dst_host, const void *src_dev, size_t bytes);   /* synchronous */

/* bf16 (the kernels of `--dtype bf16`; docs/cuda.md "bf16"): fp32 <-> bf16 bits (round to
 * nearest even; NaN stays NaN), and kc_matmul_fwd/bwd with bf16 inputs, fp32 outputs (bwd: +=)
 * and fp32 accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F). */
void kc_to_bf16(uint16_t *dst, const float *src, size_t n);
void kc_from_bf16(float *dst, const uint16_t *src, size_t n);
void kc_matmul_fwd_bf16(float *out, const uint16_t *inp, const uint16_t *w, int M, int K, int N);
void kc_matmul_bwd_bf16(float *dinp, float *dw, const uint16_t *dout, const uint16_t *inp, const uint16_t *w,
                        int M, int K, int N);

/* One thread that keeps the GPU busy for `seconds` (by the GPU's global timer) on the current
 * stream: the overlap tests' compute (tests/test-device-cuda.c). */
void kc_spin(double seconds);

/* --- the operators: shapes and meaning exactly as the k_ kernels of kernels.h ------------- */

void kc_matmul_fwd(float *out, const float *inp, const float *w, int M, int K, int N);
void kc_matmul_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                   int M, int K, int N);

void kc_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *w, int M, int C, float eps);
void kc_rmsnorm_bwd(float *dx, float *dw, const float *dout, const float *x, const float *rstd,
                    const float *w, int M, int C);

void kc_rope_fwd(float *out, const float *x, const float *cos_t, const float *sin_t,
                 int B, int T, int H, int hd);
void kc_rope_bwd(float *dx, const float *dout, const float *cos_t, const float *sin_t,
                 int B, int T, int H, int hd);

/* The attention kernels need hd <= GPT_CUDA_HD_MAX (one warp per row, 8 values per lane). The
 * naive backward and the flash backward use an internal scratch buffer ((B,A,T,T) and (B,A,T)
 * floats), grown on demand with cudaMalloc and kept until gpt_cuda_shutdown. */
#define GPT_CUDA_HD_MAX 256

/* moe_combine_fwd / _bwd take at most GPT_CUDA_MOE_MAX expert outputs (their E: the trainer's
 * expert runs), passed to the kernel by value. */
#define GPT_CUDA_MOE_MAX 64
void kc_attn_fwd(float *out, float *att, const float *q, const float *k, const float *v,
                 int B, int T, int A, int KV, int hd);
void kc_attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                 const float *v, const float *att, int B, int T, int A, int KV, int hd);
void kc_flash_attn_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                       int B, int T, int A, int KV, int hd);
void kc_flash_attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                       const float *v, const float *lse, int B, int T, int A, int KV, int hd);

void kc_swiglu_fwd(float *out, const float *g, const float *u, size_t n);
void kc_swiglu_bwd(float *dg, float *du, const float *dout, const float *g, const float *u, size_t n);
void kc_add_fwd(float *out, const float *a, const float *b, size_t n);
void kc_accumulate(float *dst, const float *src, size_t n);

void kc_embed_fwd(float *out, const int *tok, const float *wte, int M, int C);
/* V (the rows of dwte) is needed on the GPU to split the work by vocabulary rows. */
void kc_embed_bwd(float *dwte, const float *dout, const int *tok, int M, int C, int V);

/* mean (1 float, device) = the mean of losses (M), summed in double in row order (one thread),
 * as the CPU's k_xent_fwd return value and the chunked loss's host sum. */
void kc_loss_mean(float *mean, const float *losses, int M);
/* As k_xent_fwd; returns the mean loss, which waits for the stream (kc_loss_mean, then a copy). */
float kc_xent_fwd(float *probs, float *losses, const float *logits, const int *targets, int M, int V);
void kc_xent_bwd(float *dlogits, const float *probs, const int *targets, int M, int V, float dloss);
void kc_xent_lse_fwd(float *lse, float *losses, const float *logits, const int *targets, int M, int V);
void kc_xent_lse_bwd(float *logits, const float *lse, const int *targets, int M, int V, float scale);

/* MoE: E <= 64 (GPT's limit). ye and dye are HOST arrays of E device pointers (dye may be NULL,
 * and so may any dye[e]); E is needed to pass them to the kernel by value. */
void kc_moe_route_fwd(float *probs, float *wts, int *idx, const float *logits, int M, int E, int K);
void kc_moe_route_bwd(float *dlogits, const float *dwts, const float *probs, const int *idx, int M, int E,
                      int K);
void kc_moe_gather_fwd(float *xe, const float *x, const int *rows, int n, int C);
void kc_moe_gather_bwd(float *dx, const float *dxe, const int *rows, int n, int C);
void kc_moe_combine_fwd(float *out, const float *wts, const int *idx, const int *slot, const float *const *ye,
                        int M, int C, int K, int E);
void kc_moe_combine_bwd(float *const *dye, float *dwts, const float *dout, const float *wts, const int *idx,
                        const int *slot, const float *const *ye, int M, int C, int K, int E);

void kc_adamw(float *p, float *m, float *v, const float *g, size_t n, float lr, float b1, float b2,
              float eps, float wd, int t);

#ifdef __cplusplus
}
#endif

#endif /* GPT_KERNELS_CUDA_H */
