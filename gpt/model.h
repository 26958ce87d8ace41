/* model.h: the reference workload: a Llama-style decoder trained in eager mode.
 *
 *   tokens (B,T) -> embedding wte (V,C) -> L x [ x += Wo attn(rope(Wq n1), rope(Wk n1), Wv n1);
 *                                              x += W2 (silu(W1 n2) * W3 n2) ]
 *   -> RMSNorm -> logits = Wout (V,C) -> cross-entropy (mean over B*T)
 *
 * Attention is flash-style by default (an online softmax over key blocks: saves the output and
 * the log-sum-exp, never the (T,T) probabilities) and the loss chunked (logits and cross-entropy
 * a chunk of tokens at a time in one operator: saves the final hidden state and the log-sum-exp);
 * cfg.attention = GPT_ATTN_NAIVE and cfg.loss = GPT_LOSS_FULL select the plain forms
 * (docs/trainer.md, "Attention" and "Loss").
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

typedef enum gpt_attention {
    GPT_ATTN_FLASH = 0,     /* online softmax over key blocks; saves out and the log-sum-exp */
    GPT_ATTN_NAIVE          /* softmax(q k^T) v; saves the (T,T) probabilities */
} gpt_attention;

typedef enum gpt_loss {
    GPT_LOSS_CHUNKED = 0,   /* logits + cross-entropy a chunk of tokens at a time; saves the
                               final hidden state and the log-sum-exp */
    GPT_LOSS_FULL           /* the (B,T,V) logits at once; saves the (B,T,V) probabilities */
} gpt_loss;

typedef struct gpt_config {
    int   layers, hidden, heads, kv_heads, ffn;   /* L, C, A, KV, F */
    int   seq, batch, vocab;                      /* T (max), B, V */
    int   moe_experts, moe_topk;                  /* E, K: MoE MLP (E = 0: dense SwiGLU) */
    int   attention;                              /* gpt_attention (default flash) */
    int   loss;                                   /* gpt_loss (default chunked) */
    int   loss_chunk;                             /* tokens per loss chunk; 0: gpt_loss_chunk's rule */
    int   dtype;                                  /* gpt_dtype of the activations (default fp32); bf16:
                                                     stored as bf16, products on bf16 operands, weights,
                                                     gradients and AdamW state fp32 (model.c) */
    float rope_theta, norm_eps;
    float beta1, beta2, adam_eps, weight_decay;   /* AdamW; decay on matrices only */
} gpt_config;

typedef enum gpt_mode {
    GPT_MODE_NONE = 0, GPT_MODE_RECOMPUTE, GPT_MODE_SMARTSWAP, GPT_MODE_OFFLOAD_ALL, GPT_MODE_COUNT
} gpt_mode;

/* A save whose hooks call waits until the forward drops its own reference (see model.c). */
typedef struct gpt_pending {
    size_t        slot;     /* index in the iteration's handle pool */
    gpt_save_info info;
} gpt_pending;

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
    gpt_pending *pend;          /* saves not yet handed to the hooks */
    int          npend, cappend;
    /* how to rebuild it with the kernel call that made it (the hybrid's recompute, model.c):
     * rc_kind GPT_RC_* (0: not rebuildable), from the saved tensors rc_in and parameter rc_w;
     * rc_op: this iteration's indices of the operators whose kernel calls it re-runs */
    int          rc_kind, rc_nop, rc_heads;
    struct gpt_tensor *rc_in[2];
    struct gpt_tensor *rc_w;
    uint32_t     rc_op[2];
    int          rc_reported;   /* its recipe went to the hooks (once per tensor) */
    uint64_t     h0;            /* the tape handle of its first save (0: none yet) */
    int          saves_live;    /* its saves handed to the hooks and not yet released */
    gpt_buf     *rbuf;          /* rebuilt data, held until its last save is released */
    int          b16;           /* 1: its data (buf, rbuf) is stored as bf16, 2 bytes an element */
    int          layer;         /* the decoder layer whose forward made it (-1: outside) */
    int          lseq;          /* its creation index in that layer's forward (-1: a re-run's) */
} gpt_tensor;

/* One decoder layer of the micro-batch, for rebuilding it whole (model.c rebuild_layer). */
typedef struct gpt_lspan {
    struct gpt_tensor *in;      /* the layer input (its save by the layer's first norm) */
    int  nact;                  /* tensors the layer's forward made */
    int  whole;                 /* a member without a recipe of its own was dropped: re-run it */
    int  rebuilt;               /* re-run in this backward */
} gpt_lspan;

typedef struct gpt_layer {
    gpt_tensor *rms1, *wq, *wk, *wv, *wo, *rms2, *w1, *w3, *w2;   /* w1 w3 w2: dense MLP only */
    gpt_tensor *wg;                     /* MoE: router (E,C) */
    gpt_tensor **ew1, **ew3, **ew2;     /* MoE: expert e's (F,C), (F,C), (C,F) */
} gpt_layer;

/* One MoE layer call's routing (host data, like the tokens): which experts each token picked
 * and where its row sits in each expert's batch. Lives until the end of the iteration.
 * Each expert's batch runs in tiles ("runs") of at most `tile` rows, twice the balanced share
 * M*K/E (gpt_moe_tile): worst-case routing means more runs of the same size, not a larger
 * operator. Every routing makes the same number of runs, gpt_moe_runs (the longest runs split
 * when a routing needs fewer), so the routing never changes the operator sequence, only the
 * runs' sizes. Runs are numbered expert by expert, run by run. */
typedef struct gpt_route {
    int   M, E, K;
    int  *idx;              /* (M,K) chosen experts, by rank */
    int  *slot;             /* (M,K) row of token t in expert idx[t,k]'s batch */
    int  *off;              /* (E+1) expert e's rows are rows[off[e] .. off[e+1]) */
    int  *rows;             /* (M*K) token indices, ascending within each expert */
    int   tile, nrun;       /* rows per run at most; runs made */
    int  *run;              /* (M,K) the run holding token t's k-th choice */
    int  *rslot;            /* (M,K) its row in that run */
    int  *run_e, *run_off, *run_n;   /* (nrun) a run's expert, first row in rows[], rows */
    gpt_tensor **ye;        /* (nrun) run outputs (run_n, C) */
    int  *dev;              /* tables with device memory: idx, slot, rows, run, rslot (5*M*K ints,
                               the host layout) in tensor memory (ops.ints_alloc), else NULL */
    struct gpt_route *next;
} gpt_route;

/* The rows of one expert run: twice the balanced share, ceil(2*M*K/E), at most M, at least 1. */
int gpt_moe_tile(int M, int E, int K);
/* The runs every routing of M tokens makes (op_moe_route): the most whole tiles of at most
 * gpt_moe_tile rows any routing needs (at most E + E/2, at most M*K); a routing that needs
 * fewer splits its longest runs, so a layer's operator sequence depends on M, E and K only. */
int gpt_moe_runs(int M, int E, int K);

typedef struct gpt_node {
    int         kind;        /* operator (model.c) */
    int         layer;
    uint64_t    site;
    gpt_tensor *in[3];       /* activation inputs (their grads are accumulated) */
    gpt_tensor *w;           /* parameter, if any */
    gpt_tensor *out;         /* output (its grad is consumed, then freed) */
    size_t      s0;          /* its tape handles: hpool[s0 .. s0 + nsaved) */
    int         nsaved;
    int         B, T;
    gpt_route  *route;       /* MoE nodes */
    int         expert;      /* moe_gather: the run (route.run_e gives its expert) */
} gpt_node;

typedef struct gpt_stats {        /* of the last step (iteration), all its micro-batches */
    uint64_t ops, saves, saved_bytes, recomputed_ops;
    uint64_t rebuilt, rebuilt_bytes;  /* saved tensors the hooks dropped and backward rebuilt */
    uint64_t layers_rebuilt;          /* of them: layers re-run whole (their members' rebuilds
                                         are counted in rebuilt) */
    uint64_t peak_bytes, act_peak_bytes;
    uint64_t micro, tokens;          /* micro-batches and tokens trained (eval: evaluated) */
    uint64_t experts_run, experts_idle;  /* MoE: expert MLPs run / skipped (no token) */
    uint64_t expert_runs;                /* MoE: the runs (tiles) they ran in (gpt_route) */
    uint64_t expert_tiles;               /* MoE: the whole tiles the routings needed (the runs
                                            less those added to make gpt_moe_runs) */
    double   fwd_seconds;            /* wall seconds (monotonic host clock) spent in the forward
                                        passes, from the embedding up to and including the loss,
                                        summed over the step's micro-batches (gpt_step_micro and
                                        gpt_step_eval); the rest of the step is backward (with
                                        recompute's re-run layers), update and overhead. A
                                        timing: it differs from run to run */
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
    int         in_step;                  /* between gpt_step_begin and gpt_step_end */
    int         step_micro;               /* micro-batches run in this step */
    float       dloss;                    /* this micro-batch's loss weight (1/N with accumulation) */
    /* one iteration */
    gpt_node   *tape;
    size_t      ntape, captape;
    int         recording;
    gpt_tensor *acts;
    uint64_t   *hpool;                    /* tape handles of the iteration's nodes */
    gpt_tensor **hten;                    /* the tensor of each hpool slot */
    size_t      nhpool, caphpool;
    gpt_route  *routes;
    const int  *tokens, *targets;         /* (B,T) ints where the kernels read them: the caller's
                                             host ints, or their copy in device memory (dtok) */
    const struct gpt_ops *ops;            /* the kernels and transfers (ops.h): mem->ops or CPU */
    int        *dtok;                     /* device memory: tokens then targets (2 x captok ints) */
    size_t      captok;
    int         B, T;
    int         moe_route_force;          /* 1: every token goes to experts 0..K-1 (the smallest-
                                             budget probe, gpt/train.c; never in training), and
                                             each per-expert buffer is ceil(E/K) x 256 bytes
                                             longer: a real routing spreads the same rows over E
                                             buffers, each rounded up to 256 B */
    size_t      moe_route_unit;           /* the probe's rounding unit for that slack (0: 256 B;
                                             the granule when the allocator maps granules: each
                                             real buffer may then hold one granule more) */
    /* bf16: the fp32 scratch of the kernel call being made (widened inputs, outputs to round into
     * their bf16 tensors), freed after it (model.c "bf16 activations") */
    struct gpt_scratch *scr;
    int         nscr, capscr;
    gpt_lspan  *lspan;                    /* [L] this micro-batch's layers */
    int         replaying;                /* re-running a layer (rebuild_layer): no op reported */
    struct gpt_tensor **rorig;            /* while replaying: the layer's tensors by lseq */
    int         nrorig, rnext;
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
/* Seconds on the monotonic host clock (for timing steps and their parts). */
double gpt_now_s(void);

/* Tokens per chunk of the chunked loss for a micro-batch of M tokens: c->loss_chunk if set,
 * else the largest multiple of 64 whose (chunk,V) logits are no larger than the (M,C) final
 * hidden state, at least 64; never more than M. */
int gpt_loss_chunk(const gpt_config *c, int M);
const char *gpt_attention_name(int a);
const char *gpt_loss_name(int l);
/* -1 if unknown. */
int gpt_attention_parse(const char *s);
int gpt_loss_parse(const char *s);

const char *gpt_mode_name(gpt_mode m);
/* -1 if unknown. */
int gpt_mode_parse(const char *s);

/* Allocates the weights from mem and initialises them from seed (uniform, exact in float:
 * the same bits on every machine). hooks NULL is not allowed. */
int gpt_model_init(gpt_model *m, const gpt_config *c, gpt_mem *mem, const gpt_hooks *hooks,
                   gpt_mode mode, uint64_t seed);
void gpt_model_free(gpt_model *m);

/* One training iteration (the unit smartswap brackets: hooks.iter_begin .. iter_end):
 *
 *     gpt_step_begin(step); gpt_step_micro(..) x N; gpt_step_update(lr); gpt_step_end()
 *
 * gpt_step_micro runs one forward and backward on tokens/targets (B,T) (T <= cfg.seq, any T per
 * call) and ACCUMULATES d(dloss * loss)/d param into the gradients, which the first micro-batch of
 * a step zeroes (creating them at the very first one). With N micro-batches, dloss = 1/N makes the
 * gradients those of the mean loss. gpt_step_eval runs a forward only (nothing saved) and may be
 * the only call of a step (an evaluation iteration). gpt_step_update is AdamW over every parameter,
 * its moments created at the first call (lazily: the first step's operator sequence differs);
 * inside a step it reports its operators. On error the step's memory is released; call
 * gpt_step_end anyway (it closes the hooks' iteration). */
int gpt_step_begin(gpt_model *m, int step);
int gpt_step_micro(gpt_model *m, const int *tokens, const int *targets, int B, int T, float dloss, float *loss);
int gpt_step_eval(gpt_model *m, const int *tokens, const int *targets, int B, int T, float *loss);
int gpt_step_update(gpt_model *m, float lr);
int gpt_step_end(gpt_model *m);

/* Shorthands: one step of one micro-batch (begin, micro with dloss 1, end; the update is left
 * to gpt_update, outside the iteration), a forward outside any iteration, AdamW. */
int gpt_forward_backward(gpt_model *m, const int *tokens, const int *targets, int B, int T,
                         int step, float *loss);
int gpt_forward(gpt_model *m, const int *tokens, const int *targets, int B, int T, float *loss);
int gpt_update(gpt_model *m, float lr);

/* Weights file: "GPTW" v1 header (magic, version, L, C, A, KV, F, V, T, nparams as int32
 * little-endian), then each parameter's float32 data in gpt_model.params order. With MoE the
 * version is 2 and two more int32 follow the ten: E, K. Written to a
 * temporary name and renamed, so a failure leaves nothing half-written. */
int gpt_save_weights(gpt_model *m, const char *path);

#endif /* GPT_MODEL_H */
