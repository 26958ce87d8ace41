/* kernels-shim.c: the kc_* launchers of gpt/kernels-cuda.h running the CPU kernels (kernels.h)
 * instead of GPU code, for the trainer's plumbing test on the stand-in runtime
 * (scripts/cuda-emu-check.sh, part "train"; build/smartswap-cuda-emu). Each launcher copies its
 * arguments and enqueues the CPU kernel with cudaLaunchHostFunc on the stream set by
 * gpt_cuda_set_stream, so on tests/cuda-emu/fake-cudart.c (device memory is host memory, a
 * stream is a worker thread) the kernels run asynchronously, in stream order, and only events
 * order them against the smartswap executor's copy streams, as on a GPU: a copy that the
 * executor failed to order after a kernel (or a kernel before a swap-in) reads or writes the
 * wrong bytes, and the run stops being bit-identical. What it does not test: the GPU kernels
 * themselves (tests/test-gpt-cuda.c and the lockstep emulator do). */
#include "kernels-cuda.h"
#include "kernels.h"
#include "bf16.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cudaStream_t g_stream;
static cudaError_t g_err = cudaSuccess;
static const char *g_what = "";

static void note(cudaError_t e, const char *what) {
    if (e != cudaSuccess && g_err == cudaSuccess) { g_err = e; g_what = what; }
}

int gpt_cuda_init(char *err, size_t len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1) {
        snprintf(err, len, "no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return -1;
    }
    return 0;
}
void gpt_cuda_shutdown(void) {}
const char *gpt_cuda_describe(void) {
    return "cuda-emu: the CPU kernels as host functions on the stream (tests/cuda-emu/kernels-shim.c), fp32";
}
void gpt_cuda_set_stream(void *stream) { g_stream = (cudaStream_t)stream; }
int gpt_cuda_status(char *err, size_t len) {
    if (g_err == cudaSuccess) return 0;
    snprintf(err, len, "cuda-emu shim: %s: %s", g_what, cudaGetErrorString(g_err));
    return -1;
}
int gpt_cuda_sync(char *err, size_t len) {
    note(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
    return gpt_cuda_status(err, len);
}

/* a = the launch's arguments (malloc'd, freed by the host function) */
static void post(cudaHostFn_t fn, void *a) {
    if (!a) { note(cudaErrorMemoryAllocation, "malloc"); return; }
    note(cudaLaunchHostFunc(g_stream, fn, a), "cudaLaunchHostFunc");
}
#define LAUNCH(T, ...) do { T *a_ = malloc(sizeof *a_); if (a_) *a_ = (T){__VA_ARGS__}; post(run_##T, a_); } while (0)
#define RUN(T, call) static void run_##T(void *p) { T *a = p; call; free(a); }

typedef struct { float *out; const float *inp, *w; int M, K, N; } mm_f;
RUN(mm_f, k_matmul_fwd(a->out, a->inp, a->w, a->M, a->K, a->N))
void kc_matmul_fwd(float *out, const float *inp, const float *w, int M, int K, int N) {
    LAUNCH(mm_f, out, inp, w, M, K, N);
}
typedef struct { float *dinp, *dw; const float *dout, *inp, *w; int M, K, N; } mm_b;
RUN(mm_b, k_matmul_bwd(a->dinp, a->dw, a->dout, a->inp, a->w, a->M, a->K, a->N))
void kc_matmul_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w, int M, int K, int N) {
    LAUNCH(mm_b, dinp, dw, dout, inp, w, M, K, N);
}
typedef struct { float *out, *rstd; const float *x, *w; int M, C; float eps; } rn_f;
RUN(rn_f, k_rmsnorm_fwd(a->out, a->rstd, a->x, a->w, a->M, a->C, a->eps))
void kc_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *w, int M, int C, float eps) {
    LAUNCH(rn_f, out, rstd, x, w, M, C, eps);
}
typedef struct { float *dx, *dw; const float *dout, *x, *rstd, *w; int M, C; } rn_b;
RUN(rn_b, k_rmsnorm_bwd(a->dx, a->dw, a->dout, a->x, a->rstd, a->w, a->M, a->C))
void kc_rmsnorm_bwd(float *dx, float *dw, const float *dout, const float *x, const float *rstd, const float *w, int M,
                    int C) {
    LAUNCH(rn_b, dx, dw, dout, x, rstd, w, M, C);
}
typedef struct { float *out; const float *x, *c, *s; int B, T, H, hd; } rp;
RUN(rp, k_rope_fwd(a->out, a->x, a->c, a->s, a->B, a->T, a->H, a->hd))
void kc_rope_fwd(float *out, const float *x, const float *cos_t, const float *sin_t, int B, int T, int H, int hd) {
    LAUNCH(rp, out, x, cos_t, sin_t, B, T, H, hd);
}
typedef struct { float *out; const float *x, *c, *s; int B, T, H, hd; } rp_b;
RUN(rp_b, k_rope_bwd(a->out, a->x, a->c, a->s, a->B, a->T, a->H, a->hd))
void kc_rope_bwd(float *dx, const float *dout, const float *cos_t, const float *sin_t, int B, int T, int H, int hd) {
    LAUNCH(rp_b, dx, dout, cos_t, sin_t, B, T, H, hd);
}
typedef struct { float *out, *att; const float *q, *k, *v; int B, T, A, KV, hd; } at_f;
RUN(at_f, k_attn_fwd(a->out, a->att, a->q, a->k, a->v, a->B, a->T, a->A, a->KV, a->hd))
void kc_attn_fwd(float *out, float *att, const float *q, const float *k, const float *v, int B, int T, int A, int KV,
                 int hd) {
    LAUNCH(at_f, out, att, q, k, v, B, T, A, KV, hd);
}
typedef struct { float *dq, *dk, *dv; const float *dout, *q, *k, *v, *att; int B, T, A, KV, hd; } at_b;
RUN(at_b, k_attn_bwd(a->dq, a->dk, a->dv, a->dout, a->q, a->k, a->v, a->att, a->B, a->T, a->A, a->KV, a->hd))
void kc_attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k, const float *v,
                 const float *att, int B, int T, int A, int KV, int hd) {
    LAUNCH(at_b, dq, dk, dv, dout, q, k, v, att, B, T, A, KV, hd);
}
typedef struct { float *out, *lse; const float *q, *k, *v; int B, T, A, KV, hd; } fa_f;
RUN(fa_f, k_flash_attn_fwd(a->out, a->lse, a->q, a->k, a->v, a->B, a->T, a->A, a->KV, a->hd))
void kc_flash_attn_fwd(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T, int A,
                       int KV, int hd) {
    LAUNCH(fa_f, out, lse, q, k, v, B, T, A, KV, hd);
}
typedef struct { float *dq, *dk, *dv; const float *dout, *q, *k, *v, *lse; int B, T, A, KV, hd; } fa_b;
RUN(fa_b, k_flash_attn_bwd(a->dq, a->dk, a->dv, a->dout, a->q, a->k, a->v, a->lse, a->B, a->T, a->A, a->KV,
                           a->hd))
void kc_flash_attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                       const float *v, const float *lse, int B, int T, int A, int KV, int hd) {
    LAUNCH(fa_b, dq, dk, dv, dout, q, k, v, lse, B, T, A, KV, hd);
}
typedef struct { float *out; const float *g, *u; size_t n; } sw_f;
RUN(sw_f, k_swiglu_fwd(a->out, a->g, a->u, a->n))
void kc_swiglu_fwd(float *out, const float *g, const float *u, size_t n) { LAUNCH(sw_f, out, g, u, n); }
typedef struct { float *dg, *du; const float *dout, *g, *u; size_t n; } sw_b;
RUN(sw_b, k_swiglu_bwd(a->dg, a->du, a->dout, a->g, a->u, a->n))
void kc_swiglu_bwd(float *dg, float *du, const float *dout, const float *g, const float *u, size_t n) {
    LAUNCH(sw_b, dg, du, dout, g, u, n);
}
typedef struct { float *out; const float *x, *y; size_t n; } ad;
RUN(ad, k_add_fwd(a->out, a->x, a->y, a->n))
void kc_add_fwd(float *out, const float *x, const float *y, size_t n) { LAUNCH(ad, out, x, y, n); }
typedef struct { float *dst; const float *src; size_t n; } acc;
RUN(acc, k_accumulate(a->dst, a->src, a->n))
void kc_accumulate(float *dst, const float *src, size_t n) { LAUNCH(acc, dst, src, n); }
typedef struct { float *out; const int *tok; const float *wte; int M, C; } em_f;
RUN(em_f, k_embed_fwd(a->out, a->tok, a->wte, a->M, a->C))
void kc_embed_fwd(float *out, const int *tok, const float *wte, int M, int C) { LAUNCH(em_f, out, tok, wte, M, C); }
typedef struct { float *dwte; const float *dout; const int *tok; int M, C; } em_b;
RUN(em_b, k_embed_bwd(a->dwte, a->dout, a->tok, a->M, a->C))
void kc_embed_bwd(float *dwte, const float *dout, const int *tok, int M, int C, int V) {
    (void)V;
    LAUNCH(em_b, dwte, dout, tok, M, C);
}
typedef struct { float *probs, *losses; const float *logits; const int *tg; int M, V; float *mean; } xe_f;
RUN(xe_f, *a->mean = k_xent_fwd(a->probs, a->losses, a->logits, a->tg, a->M, a->V))
float kc_xent_fwd(float *probs, float *losses, const float *logits, const int *targets, int M, int V) {
    float mean = 0.0f;   /* written by the host function before the stream is synchronised */
    LAUNCH(xe_f, probs, losses, logits, targets, M, V, &mean);
    note(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
    return mean;
}
typedef struct { float *dl; const float *probs; const int *tg; int M, V; float dloss; } xe_b;
RUN(xe_b, k_xent_bwd(a->dl, a->probs, a->tg, a->M, a->V, a->dloss))
void kc_xent_bwd(float *dlogits, const float *probs, const int *targets, int M, int V, float dloss) {
    LAUNCH(xe_b, dlogits, probs, targets, M, V, dloss);
}
typedef struct { float *lse, *losses; const float *logits; const int *tg; int M, V; } xl_f;
RUN(xl_f, k_xent_lse_fwd(a->lse, a->losses, a->logits, a->tg, a->M, a->V))
void kc_xent_lse_fwd(float *lse, float *losses, const float *logits, const int *targets, int M, int V) {
    LAUNCH(xl_f, lse, losses, logits, targets, M, V);
}
typedef struct { float *logits; const float *lse; const int *tg; int M, V; float scale; } xl_b;
RUN(xl_b, k_xent_lse_bwd(a->logits, a->lse, a->tg, a->M, a->V, a->scale))
void kc_xent_lse_bwd(float *logits, const float *lse, const int *targets, int M, int V, float scale) {
    LAUNCH(xl_b, logits, lse, targets, M, V, scale);
}
typedef struct { float *p, *m, *v; const float *g; size_t n; float lr, b1, b2, eps, wd; int t; } aw;
RUN(aw, k_adamw(a->p, a->m, a->v, a->g, a->n, a->lr, a->b1, a->b2, a->eps, a->wd, a->t))
void kc_adamw(float *p, float *m, float *v, const float *g, size_t n, float lr, float b1, float b2, float eps, float wd,
              int t) {
    LAUNCH(aw, p, m, v, g, n, lr, b1, b2, eps, wd, t);
}

/* MoE: run in place after the stream drains (the ye / dye tables are the caller's host arrays,
 * read at once as the real launchers read them) */
static void drain(void) { note(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize"); }
void kc_moe_route_fwd(float *probs, float *wts, int *idx, const float *logits, int M, int E, int K) {
    drain();
    k_moe_route_fwd(probs, wts, idx, logits, M, E, K);
}
void kc_moe_route_bwd(float *dlogits, const float *dwts, const float *probs, const int *idx, int M, int E, int K) {
    drain();
    k_moe_route_bwd(dlogits, dwts, probs, idx, M, E, K);
}
void kc_moe_gather_fwd(float *xe, const float *x, const int *rows, int n, int C) {
    drain();
    k_moe_gather_fwd(xe, x, rows, n, C);
}
void kc_moe_gather_bwd(float *dx, const float *dxe, const int *rows, int n, int C) {
    drain();
    k_moe_gather_bwd(dx, dxe, rows, n, C);
}
void kc_moe_combine_fwd(float *out, const float *wts, const int *idx, const int *slot, const float *const *ye, int M,
                        int C, int K, int E) {
    (void)E;
    drain();
    k_moe_combine_fwd(out, wts, idx, slot, ye, M, C, K);
}
void kc_moe_combine_bwd(float *const *dye, float *dwts, const float *dout, const float *wts, const int *idx,
                        const int *slot, const float *const *ye, int M, int C, int K, int E) {
    (void)E;
    drain();
    k_moe_combine_bwd(dye, dwts, dout, wts, idx, slot, ye, M, C, K);
}

/* bf16 (the cuda table's bf16 entries, ops-cuda.c): the conversions of kernels-cuda.cu on the host (round
 * to nearest even, a NaN stays a quiet NaN, exact widening), and the products as the CPU fp32
 * products of the widened bf16 inputs (fp32 outputs, += in backward): the shape of the GPU's
 * cublasGemmEx with CUDA_R_16BF inputs and fp32 accumulation, not its order of summation. The
 * conversions are gpt/bf16.h's. */
typedef struct { uint16_t *dst; const float *src; size_t n; } tb;
static void run_tb(void *p) {
    tb *a = p;
    for (size_t i = 0; i < a->n; i++) a->dst[i] = bf16_bits(a->src[i]);
    free(a);
}
void kc_to_bf16(uint16_t *dst, const float *src, size_t n) { LAUNCH(tb, dst, src, n); }
typedef struct { float *dst; const uint16_t *src; size_t n; } fb16;
static void run_fb16(void *p) {
    fb16 *a = p;
    for (size_t i = 0; i < a->n; i++) a->dst[i] = bf16_float(a->src[i]);
    free(a);
}
void kc_from_bf16(float *dst, const uint16_t *src, size_t n) { LAUNCH(fb16, dst, src, n); }

/* a widened copy of n bf16 values (NULL in, NULL out); exits on out of memory (a test tool) */
static float *widen(const uint16_t *b, size_t n) {
    if (!b) return NULL;
    float *f = malloc((n ? n : 1) * sizeof(float));
    if (!f) { fprintf(stderr, "kernels-shim: out of memory\n"); exit(2); }
    for (size_t i = 0; i < n; i++) f[i] = bf16_float(b[i]);
    return f;
}
typedef struct { float *out; const uint16_t *inp, *w; int M, K, N; } mm16_f;
static void run_mm16_f(void *p) {
    mm16_f *a = p;
    float *i = widen(a->inp, (size_t)a->M * a->K), *w = widen(a->w, (size_t)a->N * a->K);
    k_matmul_fwd(a->out, i, w, a->M, a->K, a->N);
    free(i); free(w); free(a);
}
void kc_matmul_fwd_bf16(float *out, const uint16_t *inp, const uint16_t *w, int M, int K, int N) {
    LAUNCH(mm16_f, out, inp, w, M, K, N);
}
typedef struct { float *dinp, *dw; const uint16_t *dout, *inp, *w; int M, K, N; } mm16_b;
static void run_mm16_b(void *p) {
    mm16_b *a = p;
    float *d = widen(a->dout, (size_t)a->M * a->N);
    float *i = a->dw ? widen(a->inp, (size_t)a->M * a->K) : NULL, *w = a->dinp ? widen(a->w, (size_t)a->N * a->K) : NULL;
    k_matmul_bwd(a->dinp, a->dw, d, i, w, a->M, a->K, a->N);
    free(d); free(i); free(w); free(a);
}
void kc_matmul_bwd_bf16(float *dinp, float *dw, const uint16_t *dout, const uint16_t *inp, const uint16_t *w, int M,
                        int K, int N) {
    LAUNCH(mm16_b, dinp, dw, dout, inp, w, M, K, N);
}

/* device memory helpers of kernels-cuda.h, for tests/test-gpt-cuda.c linked to this shim
 * (scripts/cuda-emu-check.sh, part "train": its t_ops_bf16 on the stand-in runtime) */
void *gpt_cuda_malloc(size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    note(e, "cudaMalloc");
    return e == cudaSuccess ? p : NULL;
}
void gpt_cuda_free(void *p) {
    if (p) note(cudaFree(p), "cudaFree");
}
int gpt_cuda_upload(void *dst, const void *src, size_t bytes) {
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(g_stream);
    note(e, "gpt_cuda_upload");
    return e == cudaSuccess ? 0 : -1;
}
int gpt_cuda_download(void *dst, const void *src, size_t bytes) {
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(g_stream);
    note(e, "gpt_cuda_download");
    return e == cudaSuccess ? 0 : -1;
}
typedef struct { float *mean; const float *losses; int M; } lm;
static void run_lm(void *p) {   /* as kernels-cuda.cu: summed in double, in row order */
    lm *a = p;
    double s = 0;
    for (int i = 0; i < a->M; i++) s += a->losses[i];
    *a->mean = (float)(s / a->M);
    free(a);
}
void kc_loss_mean(float *mean, const float *losses, int M) {
    if (M > 0) LAUNCH(lm, mean, losses, M);
}
