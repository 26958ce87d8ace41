/* kernels.h: the trainer's operator kernels on flat float arrays (the CPU reference in
 * kernels-cpu.c; CUDA kernels will implement the same list).
 *
 * Conventions (llm.c's): activations are row-major (B,T,C) flattened to (M = B*T, C);
 * a linear layer's weight is (N, K) as nn.Linear, out = inp . W^T. Backward kernels ACCUMULATE
 * (+=) into the gradients they are given (NULL: not wanted), so a tensor used twice gets the
 * sum of both gradients. Every kernel is deterministic whatever the OpenMP thread count: threads
 * split independent outputs only, and each output is summed in one fixed order.
 */
#ifndef GPT_KERNELS_H
#define GPT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* Once per process: pins OpenBLAS to one thread per call (the kernels split work into fixed
 * blocks themselves, so results do not depend on the thread count). */
void gpt_kernels_init(void);
/* "openblas sgemm (fixed 64-row blocks, 1 BLAS thread per block) + openmp" or "plain loops". */
const char *gpt_kernels_describe(void);

/* out (M,N) = inp (M,K) . w (N,K)^T */
void k_matmul_fwd(float *out, const float *inp, const float *w, int M, int K, int N);
/* dinp (M,K) += dout (M,N) . w (N,K);  dw (N,K) += dout^T . inp (M,K) */
void k_matmul_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                  int M, int K, int N);

/* out (M,C) = x * rstd * w, rstd (M) = 1/sqrt(mean(x^2) + eps) */
void k_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *w, int M, int C, float eps);
/* dx (M,C) +=, dw (C) += */
void k_rmsnorm_bwd(float *dx, float *dw, const float *dout, const float *x, const float *rstd,
                   const float *w, int M, int C);

/* Rotary embedding over x (B,T,H,hd), pairs (j, j+hd/2) ("rotate half"), angle t*theta^(-2j/hd)
 * given as tables cos, sin (T, hd/2). out (B,T,H,hd). */
void k_rope_fwd(float *out, const float *x, const float *cos_t, const float *sin_t,
                int B, int T, int H, int hd);
/* dx (B,T,H,hd) += R^T dout */
void k_rope_bwd(float *dx, const float *dout, const float *cos_t, const float *sin_t,
                int B, int T, int H, int hd);

/* Causal attention with grouped KV heads: q (B,T,A,hd), k v (B,T,KV,hd), head h reads KV head
 * h / (A/KV). att (B,A,T,T) = softmax(q k^T / sqrt(hd)) (zero above the diagonal);
 * out (B,T,A,hd). */
void k_attn_fwd(float *out, float *att, const float *q, const float *k, const float *v,
                int B, int T, int A, int KV, int hd);
/* dq (B,T,A,hd) +=, dk dv (B,T,KV,hd) += */
void k_attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                const float *v, const float *att, int B, int T, int A, int KV, int hd);

/* Flash-style causal attention with grouped KV heads (docs/trainer.md, "Attention"): the same
 * q k v layouts as k_attn_fwd; an online softmax over key blocks of GPT_ATTN_BLOCK keys, so no
 * (T,T) matrix exists. out (B,T,A,hd); lse (B,A,T) = the log-sum-exp of each row's scaled scores,
 * which is all the backward needs besides q, k and v (not out: it keeps no output alive). */
#define GPT_ATTN_BLOCK 64
void k_flash_attn_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                      int B, int T, int A, int KV, int hd);
/* dq (B,T,A,hd) +=, dk dv (B,T,KV,hd) +=: recomputes each row's probabilities from q, k and lse
 * (exp(score - lse)), never storing a (T,T) matrix, and D = dout . out as sum_s p_s (dout . v_s).
 * dq may be dout itself: then dq = (not +=) q's gradient, written over dout. */
void k_flash_attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                      const float *v, const float *lse, int B, int T, int A, int KV, int hd);

/* out (n) = silu(g) * u */
void k_swiglu_fwd(float *out, const float *g, const float *u, size_t n);
/* dg (n) +=, du (n) +=; dg may be dout itself: then dg = (not +=) g's gradient, over dout */
void k_swiglu_bwd(float *dg, float *du, const float *dout, const float *g, const float *u, size_t n);

/* out (n) = a + b */
void k_add_fwd(float *out, const float *a, const float *b, size_t n);
/* dst (n) += src */
void k_accumulate(float *dst, const float *src, size_t n);

/* out (M,C) = wte[tok] (V,C) */
void k_embed_fwd(float *out, const int *tok, const float *wte, int M, int C);
/* dwte (V,C) += scatter of dout (M,C) by tok (rows in order) */
void k_embed_bwd(float *dwte, const float *dout, const int *tok, int M, int C);

/* probs (M,V) = softmax(logits), losses (M) = -log probs[target]; returns the mean loss
 * (summed in double, in row order). */
float k_xent_fwd(float *probs, float *losses, const float *logits, const int *targets, int M, int V);
/* dlogits (M,V) += (probs - onehot(target)) * dloss / M */
void k_xent_bwd(float *dlogits, const float *probs, const int *targets, int M, int V, float dloss);

/* The chunked cross-entropy's two halves (docs/trainer.md, "Loss"), on one chunk of M rows of
 * logits (M,V) that the caller computes with k_matmul_fwd from the final hidden state:
 * lse (M) = log sum exp(logits), losses (M) = lse - logits[target]. */
void k_xent_lse_fwd(float *lse, float *losses, const float *logits, const int *targets, int M, int V);
/* In place: logits (M,V) become dlogits = (exp(logits - lse) - onehot(target)) * scale. */
void k_xent_lse_bwd(float *logits, const float *lse, const int *targets, int M, int V, float scale);

/* Mixture of experts (docs/trainer.md, "MoE"). Routing: probs (M,E) = softmax(logits (M,E));
 * idx (M,K) = the K experts of largest probability, in decreasing order, ties broken towards
 * the lower expert index; wts (M,K) = probs[idx] renormalised to sum to 1 over the K chosen. */
void k_moe_route_fwd(float *probs, float *wts, int *idx, const float *logits, int M, int E, int K);
/* dlogits (M,E) += the gradient of the renormalised weights given dwts (M,K), through the
 * renormalisation and the softmax (the selection itself is piecewise constant). */
void k_moe_route_bwd(float *dlogits, const float *dwts, const float *probs, const int *idx, int M, int E,
                     int K);
/* xe (n,C) = x[rows[r]] for r < n */
void k_moe_gather_fwd(float *xe, const float *x, const int *rows, int n, int C);
/* dx[rows[r]] += dxe[r]; the rows must be distinct (they are: a token picks an expert once) */
void k_moe_gather_bwd(float *dx, const float *dxe, const int *rows, int n, int C);
/* out (M,C) = sum over k = 0..K-1, in that order, of wts[t,k] * ye[idx[t,k]][slot[t,k]] (C);
 * ye[e] is expert e's output (n_e, C), slot[t,k] the row of token t in it. */
void k_moe_combine_fwd(float *out, const float *wts, const int *idx, const int *slot, const float *const *ye,
                       int M, int C, int K);
/* dye[e] (n_e,C) += wts . dout at the token's row; dwts (M,K) += dout[t] . ye[..][slot] */
void k_moe_combine_bwd(float *const *dye, float *dwts, const float *dout, const float *wts, const int *idx,
                       const int *slot, const float *const *ye, int M, int C, int K);

/* AdamW as torch.optim.AdamW (decoupled decay p *= 1 - lr*wd, then bias-corrected Adam);
 * t = step number from 1. */
void k_adamw(float *p, float *m, float *v, const float *g, size_t n, float lr, float b1, float b2,
             float eps, float wd, int t);

/* bf16 storage of activations (--dtype bf16, gpt/bf16.h): dst = round-to-nearest-even bf16 bits
 * of src; dst = the exact fp32 of the bf16 bits src */
void k_to_bf16(uint16_t *dst, const float *src, size_t n);
void k_from_bf16(float *dst, const uint16_t *src, size_t n);

#endif /* GPT_KERNELS_H */
