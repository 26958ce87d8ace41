/* model.h: the reference workload: a Llama-style decoder trained in eager mode.
 *
 *   tokens (B,T) -> embedding wte (V,C) -> L x [ x += Wo attn(rope(Wq n1), rope(Wk n1), Wv n1);
 *                                              x += W2 (silu(W1 n2) * W3 n2) ]
 *   -> RMSNorm -> logits = Wout (V,C) -> cross-entropy (mean over B*T)
 *
 * with n1 = RMSNorm(x; rms1), n2 = RMSNorm(x; rms2), causal attention with A query heads and KV
 * key/value heads (grouped), RoPE "rotate half" with theta 10000, AdamW (torch semantics).
 *
 * Eager mode: each operator runs alone, in program order; every one is reported through
 * gpt_hooks.op, and each records on the TAPE a node holding handles of what its backward needs
 * (gpt_hooks.save). Backward walks the tape in reverse and reads saved data only through
 * gpt_hooks.load. All memory comes from the gpt_mem given at init (mem.h).
 *
 * Modes: GPT_MODE_NONE keeps every saved tensor; GPT_MODE_RECOMPUTE keeps only each layer's
 * input, and backward re-runs that layer's forward (recording) before walking it back: same
 * kernels, same order, so losses, gradients and weights are bit-identical to NONE.
 * GPT_MODE_SMARTSWAP and GPT_MODE_OFFLOAD_ALL run like NONE in the model; what differs is the
 * hooks given at init (the executor, not yet available).
 *
 * Errors: calls return 0 or non-zero with a message in m->errmsg (out of budget names the
 * buffer and the figures); the model stays usable (the failed step's memory is released).
 */
#ifndef GPT_MODEL_H
#define GPT_MODEL_H

#include "mem.h"
#include "tape.h"

typedef struct gpt_config {
    int   layers, hidden, heads, kv_heads, ffn;   /* L, C, A, KV, F */
    int   seq, batch, vocab;                      /* T (max), B, V */
    float rope_theta, norm_eps;
    float beta1, beta2, adam_eps, weight_decay;   /* AdamW; decay on matrices only */
} gpt_config;

typedef enum gpt_mode {
    GPT_MODE_NONE = 0, GPT_MODE_RECOMPUTE, GPT_MODE_SMARTSWAP, GPT_MODE_OFFLOAD_ALL, GPT_MODE_COUNT
} gpt_mode;

typedef struct gpt_tensor {
    char     name[48];
    int      ndim;
    int      shape[4];
    size_t   n;             /* elements */
    gpt_buf *buf;           /* data, or NULL when this holder dropped it */
    gpt_buf *grad;          /* gradient (same shape), created on first use in backward */
    int      decay;         /* parameters: AdamW weight decay applies */
    gpt_buf *adam_m, *adam_v;   /* parameters: moments, created at the first update */
    struct gpt_tensor *next;    /* the iteration's list of activation tensors */
} gpt_tensor;

typedef struct gpt_layer {
    gpt_tensor *rms1, *wq, *wk, *wv, *wo, *rms2, *w1, *w3, *w2;
} gpt_layer;

typedef struct gpt_node {
    int         kind;        /* operator (model.c) */
    int         layer;
    uint64_t    site;
    gpt_tensor *in[3];       /* activation inputs (their grads are accumulated) */
    gpt_tensor *w;           /* parameter, if any */
    gpt_tensor *out;         /* output (its grad is consumed, then freed) */
    uint64_t    saved[4];    /* tape handles */
    int         nsaved;
    int         B, T;
} gpt_node;

typedef struct gpt_stats {        /* of the last step */
    uint64_t ops, saves, saved_bytes, recomputed_ops;
    uint64_t peak_bytes, act_peak_bytes;
} gpt_stats;

typedef struct gpt_model {
    gpt_config  cfg;
    gpt_mem    *mem;
    gpt_hooks   hooks;
    gpt_mode    mode;
    gpt_tensor *wte, *normf, *wout;       /* (V,C), (C), (V,C) */
    gpt_layer  *layer;                    /* [L] */
    gpt_tensor **params;                  /* every parameter, in file order */
    int         nparams;
    gpt_buf    *rope_cos, *rope_sin;      /* (T, hd/2) each */
    int         adam_t;                   /* updates done */
    int         grads_ready;
    /* one iteration */
    gpt_node   *tape;
    size_t      ntape, captape;
    int         recording;
    gpt_tensor *acts;
    const int  *tokens, *targets;         /* (B,T) host ints */
    int         B, T;
    int         err;
    char        errmsg[320];
    gpt_stats   stats;
} gpt_model;

/* Defaults for the optional fields (theta, eps, AdamW) on top of the sizes given. */
gpt_config gpt_config_default(void);
/* 0 if c is consistent; else non-zero with the problem in err. */
int gpt_config_check(const gpt_config *c, char *err, size_t errlen);
uint64_t gpt_param_count(const gpt_config *c);
/* Device bytes of the model's own state: weights, grads, AdamW moments, RoPE tables
 * (as charged by gpt_mem: 256-byte granules). */
uint64_t gpt_state_bytes(const gpt_config *c);

const char *gpt_mode_name(gpt_mode m);
/* -1 if unknown. */
int gpt_mode_parse(const char *s);

/* Allocates the weights from mem and initialises them from seed (uniform, exact in float:
 * the same bits on every machine). hooks NULL is not allowed. */
int gpt_model_init(gpt_model *m, const gpt_config *c, gpt_mem *mem, const gpt_hooks *hooks,
                   gpt_mode mode, uint64_t seed);
void gpt_model_free(gpt_model *m);

/* One forward and backward on tokens/targets (B,T) (T <= cfg.seq): parameter gradients are
 * zeroed first, then hold d loss / d param. *loss = mean cross-entropy. step is passed to
 * hooks.iter_begin. */
int gpt_forward_backward(gpt_model *m, const int *tokens, const int *targets, int B, int T,
                         int step, float *loss);
/* Forward only (no tape, nothing saved). */
int gpt_forward(gpt_model *m, const int *tokens, const int *targets, int B, int T, float *loss);
/* AdamW over every parameter; the moments are created on the first call. */
int gpt_update(gpt_model *m, float lr);

/* Weights file: "GPTW" v1 header (magic, version, L, C, A, KV, F, V, T, nparams as int32
 * little-endian), then each parameter's float32 data in gpt_model.params order. Written to a
 * temporary name and renamed, so a failure leaves nothing half-written. */
int gpt_save_weights(gpt_model *m, const char *path);

#endif /* GPT_MODEL_H */
