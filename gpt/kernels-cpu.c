/* kernels-cpu.c: the CPU reference kernels of the trainer (kernels.h). float32, OpenMP over
 * independent outputs, one fixed summation order per output, so results are bit-identical
 * whatever OMP_NUM_THREADS is.
 *
 * Matrix products: with SS_USE_BLAS (the Makefile defines it when libopenblas is found) each
 * product is cut into fixed blocks of GPT_MM_BLOCK rows of the output and every block is one
 * single-threaded cblas_sgemm call; OpenMP spreads the blocks over threads. A block's result
 * depends only on its own inputs and sizes, never on which thread ran it or how many there
 * are, so OpenBLAS's own threading (whose partition varies with the thread count) is switched
 * off with openblas_set_num_threads(1). Without SS_USE_BLAS: plain loops, same contract.
 */
#include "kernels.h"

#include "bf16.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef SS_USE_BLAS
#include <cblas.h>
void openblas_set_num_threads(int n);
#endif

#define GPT_MM_BLOCK 64   /* output rows per sgemm call / loop block */
#define GPT_COL_CHUNK 64  /* columns per task in column reductions */
/* below this much work a loop runs on one thread (the results are the same either way) */
#define GPT_PAR_MIN 65536

void gpt_kernels_init(void) {
#ifdef SS_USE_BLAS
    openblas_set_num_threads(1);
#endif
}

const char *gpt_kernels_describe(void) {
#ifdef SS_USE_BLAS
#ifdef _OPENMP
    return "OpenBLAS sgemm in fixed 64-row blocks (1 BLAS thread each) + OpenMP";
#else
    return "OpenBLAS sgemm in fixed 64-row blocks (1 BLAS thread each), no OpenMP";
#endif
#else
#ifdef _OPENMP
    return "plain loops + OpenMP";
#else
    return "plain loops, no OpenMP";
#endif
#endif
}

/* ------------------------------------------------------------------------------------------ */
/* matmul                                                                                       */

void k_matmul_fwd(float *out, const float *inp, const float *w, int M, int K, int N) {
    int nb = (M + GPT_MM_BLOCK - 1) / GPT_MM_BLOCK;
#pragma omp parallel for schedule(static) if((size_t)M * K * N >= GPT_PAR_MIN)
    for (int blk = 0; blk < nb; blk++) {
        int i0 = blk * GPT_MM_BLOCK, mb = M - i0 < GPT_MM_BLOCK ? M - i0 : GPT_MM_BLOCK;
#ifdef SS_USE_BLAS
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mb, N, K, 1.0f, inp + (size_t)i0 * K, K,
                    w, K, 0.0f, out + (size_t)i0 * N, N);
#else
        for (int i = i0; i < i0 + mb; i++) {
            const float *x = inp + (size_t)i * K;
            float *o = out + (size_t)i * N;
            for (int n = 0; n < N; n++) {
                const float *wr = w + (size_t)n * K;
                float s = 0.0f;
                for (int k = 0; k < K; k++) s += x[k] * wr[k];
                o[n] = s;
            }
        }
#endif
    }
}

void k_matmul_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                  int M, int K, int N) {
    if (dinp) {
        int nb = (M + GPT_MM_BLOCK - 1) / GPT_MM_BLOCK;
#pragma omp parallel for schedule(static) if((size_t)M * K * N >= GPT_PAR_MIN)
        for (int blk = 0; blk < nb; blk++) {
            int i0 = blk * GPT_MM_BLOCK, mb = M - i0 < GPT_MM_BLOCK ? M - i0 : GPT_MM_BLOCK;
#ifdef SS_USE_BLAS
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mb, K, N, 1.0f,
                        dout + (size_t)i0 * N, N, w, K, 1.0f, dinp + (size_t)i0 * K, K);
#else
            for (int i = i0; i < i0 + mb; i++) {
                const float *g = dout + (size_t)i * N;
                float *dx = dinp + (size_t)i * K;
                for (int n = 0; n < N; n++) {
                    const float *wr = w + (size_t)n * K;
                    float gn = g[n];
                    for (int k = 0; k < K; k++) dx[k] += gn * wr[k];
                }
            }
#endif
        }
    }
    if (dw) {
        int nb = (N + GPT_MM_BLOCK - 1) / GPT_MM_BLOCK;
#pragma omp parallel for schedule(static) if((size_t)M * K * N >= GPT_PAR_MIN)
        for (int blk = 0; blk < nb; blk++) {
            int n0 = blk * GPT_MM_BLOCK, nn = N - n0 < GPT_MM_BLOCK ? N - n0 : GPT_MM_BLOCK;
#ifdef SS_USE_BLAS
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nn, K, M, 1.0f, dout + n0, N, inp, K,
                        1.0f, dw + (size_t)n0 * K, K);
#else
            for (int i = 0; i < M; i++) {
                const float *x = inp + (size_t)i * K;
                const float *g = dout + (size_t)i * N;
                for (int n = n0; n < n0 + nn; n++) {
                    float gn = g[n];
                    float *dwr = dw + (size_t)n * K;
                    for (int k = 0; k < K; k++) dwr[k] += gn * x[k];
                }
            }
#endif
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* RMSNorm                                                                                      */

void k_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *w, int M, int C, float eps) {
#pragma omp parallel for schedule(static) if((size_t)M * C >= GPT_PAR_MIN)
    for (int i = 0; i < M; i++) {
        const float *xr = x + (size_t)i * C;
        float *o = out + (size_t)i * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += xr[c] * xr[c];
        float r = 1.0f / sqrtf(ss / (float)C + eps);
        rstd[i] = r;
        for (int c = 0; c < C; c++) o[c] = xr[c] * r * w[c];
    }
}

void k_rmsnorm_bwd(float *dx, float *dw, const float *dout, const float *x, const float *rstd,
                   const float *w, int M, int C) {
    if (dx) {
#pragma omp parallel for schedule(static) if((size_t)M * C >= GPT_PAR_MIN)
        for (int i = 0; i < M; i++) {
            const float *xr = x + (size_t)i * C, *g = dout + (size_t)i * C;
            float *d = dx + (size_t)i * C;
            float r = rstd[i];
            float dot = 0.0f;  /* sum_c g_c w_c x_c */
            for (int c = 0; c < C; c++) dot += g[c] * w[c] * xr[c];
            float k = r * r * r * dot / (float)C;
            for (int c = 0; c < C; c++) d[c] += r * g[c] * w[c] - k * xr[c];
        }
    }
    if (dw) {
        int nch = (C + GPT_COL_CHUNK - 1) / GPT_COL_CHUNK;
#pragma omp parallel for schedule(static) if((size_t)M * C >= GPT_PAR_MIN)
        for (int ch = 0; ch < nch; ch++) {
            int c0 = ch * GPT_COL_CHUNK, c1 = c0 + GPT_COL_CHUNK < C ? c0 + GPT_COL_CHUNK : C;
            for (int i = 0; i < M; i++) {
                const float *xr = x + (size_t)i * C, *g = dout + (size_t)i * C;
                float r = rstd[i];
                for (int c = c0; c < c1; c++) dw[c] += g[c] * xr[c] * r;
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* rotary embedding                                                                             */

void k_rope_fwd(float *out, const float *x, const float *cos_t, const float *sin_t,
                int B, int T, int H, int hd) {
    int h2 = hd / 2;
#pragma omp parallel for collapse(2) schedule(static) if((size_t)B * T * H * hd >= GPT_PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *cs = cos_t + (size_t)t * h2, *sn = sin_t + (size_t)t * h2;
            for (int h = 0; h < H; h++) {
                size_t off = (((size_t)b * T + t) * H + h) * hd;
                const float *xr = x + off;
                float *o = out + off;
                for (int j = 0; j < h2; j++) {
                    float x0 = xr[j], x1 = xr[j + h2];
                    o[j] = x0 * cs[j] - x1 * sn[j];
                    o[j + h2] = x1 * cs[j] + x0 * sn[j];
                }
            }
        }
}

void k_rope_bwd(float *dx, const float *dout, const float *cos_t, const float *sin_t,
                int B, int T, int H, int hd) {
    int h2 = hd / 2;
#pragma omp parallel for collapse(2) schedule(static) if((size_t)B * T * H * hd >= GPT_PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *cs = cos_t + (size_t)t * h2, *sn = sin_t + (size_t)t * h2;
            for (int h = 0; h < H; h++) {
                size_t off = (((size_t)b * T + t) * H + h) * hd;
                const float *g = dout + off;
                float *d = dx + off;
                for (int j = 0; j < h2; j++) {
                    float g0 = g[j], g1 = g[j + h2];
                    d[j] += g0 * cs[j] + g1 * sn[j];
                    d[j + h2] += g1 * cs[j] - g0 * sn[j];
                }
            }
        }
}

/* ------------------------------------------------------------------------------------------ */
/* attention                                                                                    */

void k_attn_fwd(float *out, float *att, const float *q, const float *k, const float *v,
                int B, int T, int A, int KV, int hd) {
    const float scale = 1.0f / sqrtf((float)hd);
    const int G = A / KV;
#pragma omp parallel for collapse(3) schedule(static) if((size_t)B * A * T * T * hd >= GPT_PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < A; h++)
            for (int t = 0; t < T; t++) {
                int kh = h / G;
                const float *qr = q + (((size_t)b * T + t) * A + h) * hd;
                float *ar = att + (((size_t)b * A + h) * T + t) * T;
                float mx = -INFINITY;
                for (int s = 0; s <= t; s++) {
                    const float *kr = k + (((size_t)b * T + s) * KV + kh) * hd;
                    float d = 0.0f;
                    for (int j = 0; j < hd; j++) d += qr[j] * kr[j];
                    d *= scale;
                    ar[s] = d;
                    if (d > mx) mx = d;
                }
                float sum = 0.0f;
                for (int s = 0; s <= t; s++) { ar[s] = expf(ar[s] - mx); sum += ar[s]; }
                float inv = 1.0f / sum;
                for (int s = 0; s <= t; s++) ar[s] *= inv;
                for (int s = t + 1; s < T; s++) ar[s] = 0.0f;
                float *o = out + (((size_t)b * T + t) * A + h) * hd;
                for (int j = 0; j < hd; j++) o[j] = 0.0f;
                for (int s = 0; s <= t; s++) {
                    const float *vr = v + (((size_t)b * T + s) * KV + kh) * hd;
                    float a = ar[s];
                    for (int j = 0; j < hd; j++) o[j] += a * vr[j];
                }
            }
}

void k_attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                const float *v, const float *att, int B, int T, int A, int KV, int hd) {
    const float scale = 1.0f / sqrtf((float)hd);
    const int G = A / KV;
    /* one task per (b, KV head): it owns dk, dv of that head and dq of its G query heads */
#pragma omp parallel for collapse(2) schedule(static) if((size_t)B * A * T * T * hd >= GPT_PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int kh = 0; kh < KV; kh++) {
            float *dpre = malloc((size_t)T * sizeof *dpre);   /* (T) scratch of one row */
            if (!dpre) abort();
            for (int g = 0; g < G; g++) {
                int h = kh * G + g;
                for (int t = 0; t < T; t++) {
                    const float *ar = att + (((size_t)b * A + h) * T + t) * T;
                    const float *go = dout + (((size_t)b * T + t) * A + h) * hd;
                    const float *qr = q + (((size_t)b * T + t) * A + h) * hd;
                    float *dqr = dq + (((size_t)b * T + t) * A + h) * hd;
                    float sum = 0.0f;
                    for (int s = 0; s <= t; s++) {
                        const float *vr = v + (((size_t)b * T + s) * KV + kh) * hd;
                        float d = 0.0f;
                        for (int j = 0; j < hd; j++) d += go[j] * vr[j];
                        dpre[s] = d;            /* d att[t][s] */
                        sum += ar[s] * d;
                    }
                    for (int s = 0; s <= t; s++) {
                        float dp = ar[s] * (dpre[s] - sum) * scale;   /* d score * scale */
                        const float *kr = k + (((size_t)b * T + s) * KV + kh) * hd;
                        float *dkr = dk + (((size_t)b * T + s) * KV + kh) * hd;
                        float *dvr = dv + (((size_t)b * T + s) * KV + kh) * hd;
                        float a = ar[s];
                        for (int j = 0; j < hd; j++) {
                            dqr[j] += dp * kr[j];
                            dkr[j] += dp * qr[j];
                            dvr[j] += a * go[j];
                        }
                    }
                }
            }
            free(dpre);
        }
}

/* ------------------------------------------------------------------------------------------ */
/* elementwise                                                                                  */

void k_swiglu_fwd(float *out, const float *g, const float *u, size_t n) {
#pragma omp parallel for schedule(static) if(n >= GPT_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float x = g[i];
        float sig = 1.0f / (1.0f + expf(-x));
        out[i] = x * sig * u[i];
    }
}

void k_swiglu_bwd(float *dg, float *du, const float *dout, const float *g, const float *u, size_t n) {
#pragma omp parallel for schedule(static) if(n >= GPT_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float x = g[i];
        float sig = 1.0f / (1.0f + expf(-x));
        float silu = x * sig;
        float go = dout[i], d = go * u[i] * (sig * (1.0f + x * (1.0f - sig)));
        if (du) du[i] += go * silu;
        if (dg == dout) dg[i] = d;   /* dg written over dout (docs/trainer.md) */
        else if (dg) dg[i] += d;
    }
}

void k_add_fwd(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for schedule(static) if(n >= GPT_PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void k_accumulate(float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) if(n >= GPT_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* ------------------------------------------------------------------------------------------ */
/* embedding, cross-entropy                                                                     */

void k_embed_fwd(float *out, const int *tok, const float *wte, int M, int C) {
#pragma omp parallel for schedule(static) if((size_t)M * C >= GPT_PAR_MIN)
    for (int i = 0; i < M; i++) memcpy(out + (size_t)i * C, wte + (size_t)tok[i] * C, (size_t)C * sizeof(float));
}

void k_embed_bwd(float *dwte, const float *dout, const int *tok, int M, int C) {
    int nch = (C + GPT_COL_CHUNK - 1) / GPT_COL_CHUNK;
#pragma omp parallel for schedule(static) if((size_t)M * C >= GPT_PAR_MIN)
    for (int ch = 0; ch < nch; ch++) {
        int c0 = ch * GPT_COL_CHUNK, c1 = c0 + GPT_COL_CHUNK < C ? c0 + GPT_COL_CHUNK : C;
        for (int i = 0; i < M; i++) {
            float *d = dwte + (size_t)tok[i] * C;
            const float *g = dout + (size_t)i * C;
            for (int c = c0; c < c1; c++) d[c] += g[c];
        }
    }
}

/* Flash forward: one task per (b, head, query row); each row walks its keys 0..t in blocks of
 * GPT_ATTN_BLOCK, keeping the running maximum mx, the running sum l of exp(score - mx) and the
 * unnormalised output o, rescaled by exp(mx_old - mx_new) when a block raises the maximum. */
void k_flash_attn_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                      int B, int T, int A, int KV, int hd) {
    const float scale = 1.0f / sqrtf((float)hd);
    const int G = A / KV;
#pragma omp parallel for collapse(3) schedule(static) if((size_t)B * A * T * T * hd >= GPT_PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < A; h++)
            for (int t = 0; t < T; t++) {
                int kh = h / G;
                const float *qr = q + (((size_t)b * T + t) * A + h) * hd;
                float *o = out + (((size_t)b * T + t) * A + h) * hd;
                float sc[GPT_ATTN_BLOCK];
                float mx = -INFINITY, l = 0.0f;
                for (int j = 0; j < hd; j++) o[j] = 0.0f;
                for (int s0 = 0; s0 <= t; s0 += GPT_ATTN_BLOCK) {
                    int s1 = s0 + GPT_ATTN_BLOCK <= t + 1 ? s0 + GPT_ATTN_BLOCK : t + 1;
                    float bm = -INFINITY;
                    for (int s = s0; s < s1; s++) {
                        const float *kr = k + (((size_t)b * T + s) * KV + kh) * hd;
                        float d = 0.0f;
                        for (int j = 0; j < hd; j++) d += qr[j] * kr[j];
                        d *= scale;
                        sc[s - s0] = d;
                        if (d > bm) bm = d;
                    }
                    if (bm > mx) {   /* rescale what was accumulated under the old maximum */
                        float alpha = expf(mx - bm);   /* 0 for the first block */
                        l *= alpha;
                        for (int j = 0; j < hd; j++) o[j] *= alpha;
                        mx = bm;
                    }
                    for (int s = s0; s < s1; s++) {
                        const float *vr = v + (((size_t)b * T + s) * KV + kh) * hd;
                        float p = expf(sc[s - s0] - mx);
                        l += p;
                        for (int j = 0; j < hd; j++) o[j] += p * vr[j];
                    }
                }
                float inv = 1.0f / l;
                for (int j = 0; j < hd; j++) o[j] *= inv;
                lse[((size_t)b * A + h) * T + t] = mx + logf(l);
            }
}

/* Flash backward: one task per (b, KV head), which owns dk, dv of that head and dq of its G query
 * heads, as in k_attn_bwd. The forward's output is not needed: per query row t a first pass over
 * its keys recomputes p = exp(score - lse) and dp = dout . v, kept in the task's row buffers, and
 * D = sum_s p dp (= dout . out, since out = sum_s p v); the second pass takes them back,
 * ds = p (dp - D) scale; dk += ds q, dv += p dout, and the row's dq = sum_s ds k in a row buffer,
 * added to dq when the row is done (written over it when dq is dout itself: no other row reads
 * this row of dout). */
void k_flash_attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                      const float *v, const float *lse, int B, int T, int A, int KV, int hd) {
    const float scale = 1.0f / sqrtf((float)hd);
    const int G = A / KV;
#pragma omp parallel for collapse(2) schedule(static) if((size_t)B * A * T * T * hd >= GPT_PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int kh = 0; kh < KV; kh++) {
            float *pr = malloc((2 * (size_t)T + (size_t)hd) * sizeof *pr);   /* one row's p, dp, dq */
            if (!pr) abort();
            float *dpr = pr + T, *acc = pr + 2 * (size_t)T;
            for (int g = 0; g < G; g++) {
                int h = kh * G + g;
                for (int t = 0; t < T; t++) {
                    const float *go = dout + (((size_t)b * T + t) * A + h) * hd;
                    const float *qr = q + (((size_t)b * T + t) * A + h) * hd;
                    float *dqr = dq + (((size_t)b * T + t) * A + h) * hd;
                    float L = lse[((size_t)b * A + h) * T + t];
                    float D = 0.0f;
                    for (int s = 0; s <= t; s++) {   /* the row's probabilities, recomputed */
                        const float *kr = k + (((size_t)b * T + s) * KV + kh) * hd;
                        const float *vr = v + (((size_t)b * T + s) * KV + kh) * hd;
                        float d = 0.0f, dp = 0.0f;
                        for (int j = 0; j < hd; j++) { d += qr[j] * kr[j]; dp += go[j] * vr[j]; }
                        pr[s] = expf(d * scale - L);
                        dpr[s] = dp;
                        D += pr[s] * dp;
                    }
                    for (int j = 0; j < hd; j++) acc[j] = 0.0f;
                    for (int s = 0; s <= t; s++) {
                        const float *kr = k + (((size_t)b * T + s) * KV + kh) * hd;
                        float *dkr = dk + (((size_t)b * T + s) * KV + kh) * hd;
                        float *dvr = dv + (((size_t)b * T + s) * KV + kh) * hd;
                        float p = pr[s], ds = p * (dpr[s] - D) * scale;
                        for (int j = 0; j < hd; j++) {
                            acc[j] += ds * kr[j];
                            dkr[j] += ds * qr[j];
                            dvr[j] += p * go[j];
                        }
                    }
                    if (dq == dout) for (int j = 0; j < hd; j++) dqr[j] = acc[j];
                    else for (int j = 0; j < hd; j++) dqr[j] += acc[j];
                }
            }
            free(pr);
        }
}

float k_xent_fwd(float *probs, float *losses, const float *logits, const int *targets, int M, int V) {
#pragma omp parallel for schedule(static) if((size_t)M * V >= GPT_PAR_MIN)
    for (int i = 0; i < M; i++) {
        const float *l = logits + (size_t)i * V;
        float *p = probs + (size_t)i * V;
        float mx = -INFINITY;
        for (int j = 0; j < V; j++) if (l[j] > mx) mx = l[j];
        float sum = 0.0f;
        for (int j = 0; j < V; j++) { p[j] = expf(l[j] - mx); sum += p[j]; }
        float inv = 1.0f / sum;
        for (int j = 0; j < V; j++) p[j] *= inv;
        losses[i] = logf(sum) - (l[targets[i]] - mx);
    }
    double total = 0.0;
    for (int i = 0; i < M; i++) total += losses[i];
    return (float)(total / M);
}

void k_xent_bwd(float *dlogits, const float *probs, const int *targets, int M, int V, float dloss) {
    float s = dloss / (float)M;
#pragma omp parallel for schedule(static) if((size_t)M * V >= GPT_PAR_MIN)
    for (int i = 0; i < M; i++) {
        const float *p = probs + (size_t)i * V;
        float *d = dlogits + (size_t)i * V;
        for (int j = 0; j < V; j++) d[j] += (p[j] - (j == targets[i] ? 1.0f : 0.0f)) * s;
    }
}

void k_xent_lse_fwd(float *lse, float *losses, const float *logits, const int *targets, int M, int V) {
#pragma omp parallel for schedule(static) if((size_t)M * V >= GPT_PAR_MIN)
    for (int i = 0; i < M; i++) {
        const float *l = logits + (size_t)i * V;
        float mx = -INFINITY;
        for (int j = 0; j < V; j++) if (l[j] > mx) mx = l[j];
        float sum = 0.0f;
        for (int j = 0; j < V; j++) sum += expf(l[j] - mx);
        float ls = logf(sum);
        lse[i] = mx + ls;
        losses[i] = ls - (l[targets[i]] - mx);
    }
}

void k_xent_lse_bwd(float *logits, const float *lse, const int *targets, int M, int V, float scale) {
#pragma omp parallel for schedule(static) if((size_t)M * V >= GPT_PAR_MIN)
    for (int i = 0; i < M; i++) {
        float *d = logits + (size_t)i * V;
        float L = lse[i];
        for (int j = 0; j < V; j++) d[j] = (expf(d[j] - L) - (j == targets[i] ? 1.0f : 0.0f)) * scale;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* mixture of experts                                                                           */

void k_moe_route_fwd(float *probs, float *wts, int *idx, const float *logits, int M, int E, int K) {
#pragma omp parallel for schedule(static) if((size_t)M * E * K >= GPT_PAR_MIN)
    for (int i = 0; i < M; i++) {
        const float *l = logits + (size_t)i * E;
        float *p = probs + (size_t)i * E;
        float mx = l[0], sum = 0.0f;
        for (int j = 1; j < E; j++) if (l[j] > mx) mx = l[j];
        for (int j = 0; j < E; j++) { p[j] = expf(l[j] - mx); sum += p[j]; }
        for (int j = 0; j < E; j++) p[j] /= sum;
        int *ix = idx + (size_t)i * K;
        float s = 0.0f;
        for (int k = 0; k < K; k++) {
            int best = -1;
            for (int j = 0; j < E; j++) {
                int taken = 0;
                for (int q = 0; q < k; q++) taken |= ix[q] == j;
                if (!taken && (best < 0 || p[j] > p[best])) best = j;   /* ties: lower index */
            }
            ix[k] = best;
            s += p[best];
        }
        for (int k = 0; k < K; k++) wts[(size_t)i * K + k] = p[ix[k]] / s;
    }
}

void k_moe_route_bwd(float *dlogits, const float *dwts, const float *probs, const int *idx, int M, int E,
                     int K) {
#pragma omp parallel for schedule(static) if((size_t)M * E * K >= GPT_PAR_MIN)
    for (int i = 0; i < M; i++) {
        const float *p = probs + (size_t)i * E, *dw = dwts + (size_t)i * K;
        const int *ix = idx + (size_t)i * K;
        float s = 0.0f, wdw = 0.0f, pdp = 0.0f;
        for (int k = 0; k < K; k++) s += p[ix[k]];
        for (int k = 0; k < K; k++) wdw += dw[k] * (p[ix[k]] / s);
        /* w_k = p_k / s: dL/dp_k = (dw_k - sum_j dw_j w_j) / s for the chosen, 0 otherwise */
        float dp[64];
        for (int k = 0; k < K; k++) { dp[k] = (dw[k] - wdw) / s; pdp += p[ix[k]] * dp[k]; }
        /* softmax: dl_j = p_j (dp_j - sum_i p_i dp_i) */
        float *d = dlogits + (size_t)i * E;
        for (int j = 0; j < E; j++) {
            float dpj = 0.0f;
            for (int k = 0; k < K; k++) if (ix[k] == j) dpj = dp[k];
            d[j] += p[j] * (dpj - pdp);
        }
    }
}

void k_moe_gather_fwd(float *xe, const float *x, const int *rows, int n, int C) {
#pragma omp parallel for schedule(static) if((size_t)n * C >= GPT_PAR_MIN)
    for (int r = 0; r < n; r++) memcpy(xe + (size_t)r * C, x + (size_t)rows[r] * C, (size_t)C * sizeof(float));
}

void k_moe_gather_bwd(float *dx, const float *dxe, const int *rows, int n, int C) {
#pragma omp parallel for schedule(static) if((size_t)n * C >= GPT_PAR_MIN)
    for (int r = 0; r < n; r++) {
        float *d = dx + (size_t)rows[r] * C;
        const float *s = dxe + (size_t)r * C;
        for (int c = 0; c < C; c++) d[c] += s[c];
    }
}

void k_moe_combine_fwd(float *out, const float *wts, const int *idx, const int *slot, const float *const *ye,
                       int M, int C, int K) {
#pragma omp parallel for schedule(static) if((size_t)M * C * K >= GPT_PAR_MIN)
    for (int i = 0; i < M; i++) {
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = 0.0f;
        for (int k = 0; k < K; k++) {
            float w = wts[(size_t)i * K + k];
            const float *y = ye[idx[(size_t)i * K + k]] + (size_t)slot[(size_t)i * K + k] * C;
            for (int c = 0; c < C; c++) o[c] += w * y[c];
        }
    }
}

void k_moe_combine_bwd(float *const *dye, float *dwts, const float *dout, const float *wts, const int *idx,
                       const int *slot, const float *const *ye, int M, int C, int K) {
    /* every (expert, row) pair belongs to exactly one (token, k): no two tasks write one place */
#pragma omp parallel for schedule(static) if((size_t)M * C * K >= GPT_PAR_MIN)
    for (int i = 0; i < M; i++) {
        const float *g = dout + (size_t)i * C;
        for (int k = 0; k < K; k++) {
            size_t ik = (size_t)i * K + k;
            int e = idx[ik];
            const float *y = ye[e] + (size_t)slot[ik] * C;
            if (dwts) {
                float s = 0.0f;
                for (int c = 0; c < C; c++) s += g[c] * y[c];
                dwts[ik] += s;
            }
            if (dye && dye[e]) {
                float *d = dye[e] + (size_t)slot[ik] * C;
                float w = wts[ik];
                for (int c = 0; c < C; c++) d[c] += w * g[c];
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* optimizer                                                                                    */

void k_adamw(float *p, float *m, float *v, const float *g, size_t n, float lr, float b1, float b2,
             float eps, float wd, int t) {
    float decay = (float)(1.0 - (double)lr * wd);
    float bc1 = (float)(1.0 - pow(b1, t));
    float bc2s = (float)sqrt(1.0 - pow(b2, t));
    float step = lr / bc1;
#pragma omp parallel for schedule(static) if(n >= GPT_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float pi = wd != 0.0f ? p[i] * decay : p[i];
        float mi = m[i] * b1 + gi * (1.0f - b1);
        float vi = v[i] * b2 + gi * gi * (1.0f - b2);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - step * (mi / (sqrtf(vi) / bc2s + eps));
    }
}

/* ------------------------------------------------------------------------------------------ */
/* bf16 storage (--dtype bf16): the conversions of gpt/bf16.h over arrays                       */

void k_to_bf16(uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) if(n >= GPT_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = bf16_bits(src[i]);
}

void k_from_bf16(float *dst, const uint16_t *src, size_t n) {
#pragma omp parallel for schedule(static) if(n >= GPT_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = bf16_float(src[i]);
}
