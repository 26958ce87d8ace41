/* model.c: the Llama-style decoder of model.h: parameters, eager operators that record a tape,
 * backward over the tape, recompute mode, AdamW, the weights file.
 *
 * Ownership in forward: an operator returns a new tensor holding one reference to its buffer;
 * the forward code drops it after its last use (drop). An operator that needs a tensor in
 * backward saves it through the hooks, which take their own reference, so a saved buffer lives
 * exactly until backward releases it. Activation gradients are created (zeroed) at their
 * first accumulation and freed as soon as the operator that produced the tensor has been
 * walked back.
 */
#include "model.h"

#include "kernels.h"
#include "ops.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* operator call sites: a tag plus the line in this file (the same for every layer, as a
 * Python call site would be) */
#define SITE (0x6770740000000000ull | (uint64_t)__LINE__)

enum {
    OP_EMBED, OP_RMSNORM, OP_MATMUL, OP_ROPE, OP_ATTN, OP_SWIGLU, OP_ADD, OP_XENT, OP_CKPT,
    OP_MOE_ROUTE, OP_MOE_GATHER, OP_MOE_COMBINE, OP_ADAMW, OP_ADAMW_INIT, OP_LXENT, OP_COUNT
};
static const char *op_names[OP_COUNT] = {"embedding", "rmsnorm", "matmul", "rope", "attention",
                                         "swiglu", "add", "cross_entropy", "checkpoint",
                                         "moe_route", "moe_gather", "moe_combine", "adamw",
                                         "adamw_init", "linear_cross_entropy"};
static const char *op_bwd_names[OP_COUNT] = {"embedding_bwd", "rmsnorm_bwd", "matmul_bwd",
                                             "rope_bwd", "attention_bwd", "swiglu_bwd", "add_bwd",
                                             "cross_entropy_bwd", "recompute", "moe_route_bwd",
                                             "moe_gather_bwd", "moe_combine_bwd", "adamw",
                                             "adamw_init", "linear_cross_entropy_bwd"};

#define GPT_MAX_EXPERTS 64

/* How a saved tensor is rebuilt (gpt_tensor.rc_kind): the kernel call that made it, again. */
enum { RC_NONE, RC_RMSNORM, RC_MATMUL, RC_MATMUL_ROPE, RC_SWIGLU };

/* ------------------------------------------------------------------------------------------ */
/* configuration                                                                                */

gpt_config gpt_config_default(void) {
    gpt_config c;
    memset(&c, 0, sizeof c);
    c.layers = 2; c.hidden = 64; c.heads = 4; c.kv_heads = 2; c.ffn = 172;
    c.seq = 64; c.batch = 4; c.vocab = 256;
    c.rope_theta = 10000.0f; c.norm_eps = 1e-5f;
    c.beta1 = 0.9f; c.beta2 = 0.95f; c.adam_eps = 1e-8f; c.weight_decay = 0.1f;
    return c;
}

int gpt_config_check(const gpt_config *c, char *err, size_t errlen) {
    if (c->layers < 1 || c->hidden < 2 || c->heads < 1 || c->kv_heads < 1 || c->ffn < 1 ||
        c->seq < 1 || c->batch < 1 || c->vocab < 2) {
        snprintf(err, errlen, "every size must be positive (layers, hidden, heads, kv-heads, ffn, seq, batch)");
        return 1;
    }
    if (c->hidden % c->heads) {
        snprintf(err, errlen, "hidden %d is not a multiple of heads %d", c->hidden, c->heads);
        return 1;
    }
    if ((c->hidden / c->heads) % 2) {
        snprintf(err, errlen, "head size hidden/heads = %d must be even (rotary pairs)", c->hidden / c->heads);
        return 1;
    }
    if (c->heads % c->kv_heads) {
        snprintf(err, errlen, "heads %d is not a multiple of kv-heads %d", c->heads, c->kv_heads);
        return 1;
    }
    if (c->moe_experts < 0 || c->moe_experts > GPT_MAX_EXPERTS ||
        (c->moe_experts && (c->moe_topk < 1 || c->moe_topk > c->moe_experts))) {
        snprintf(err, errlen, "MoE: experts must be 1..%d and top-k 1..experts (got %d:%d)", GPT_MAX_EXPERTS,
                 c->moe_experts, c->moe_topk);
        return 1;
    }
    if ((unsigned)c->attention > GPT_ATTN_NAIVE || (unsigned)c->loss > GPT_LOSS_FULL || c->loss_chunk < 0) {
        snprintf(err, errlen, "attention must be flash or naive, loss chunked or full, loss chunk >= 0 (got %d, %d, %d)",
                 c->attention, c->loss, c->loss_chunk);
        return 1;
    }
    if ((unsigned)c->dtype > GPT_DTYPE_BF16) {
        snprintf(err, errlen, "the activation type must be fp32 or bf16 (got %d)", c->dtype);
        return 1;
    }
    if ((uint64_t)c->batch * c->seq > (1u << 30) || (uint64_t)c->hidden * c->vocab > (1u << 30)) {
        snprintf(err, errlen, "sizes too large");
        return 1;
    }
    return 0;
}

static uint64_t charged(uint64_t n_floats) {
    uint64_t b = n_floats * 4;
    return (b + GPT_MEM_ALIGN - 1) & ~(uint64_t)(GPT_MEM_ALIGN - 1);
}

/* Parameters in the weights file: per layer 9 (dense) or 7 + 3 per expert (MoE), plus 3. */
static int param_total(const gpt_config *c) {
    int per = c->moe_experts ? 7 + 3 * c->moe_experts : 9;
    return per * c->layers + 3;
}

/* Each parameter's element count, in file order. */
static void param_sizes(const gpt_config *c, uint64_t *sizes, int *count) {
    int n = 0;
    uint64_t C = c->hidden, hd = c->hidden / c->heads, KVd = hd * c->kv_heads, F = c->ffn, V = c->vocab;
    sizes[n++] = V * C;
    for (int l = 0; l < c->layers; l++) {
        sizes[n++] = C; sizes[n++] = C * C; sizes[n++] = KVd * C; sizes[n++] = KVd * C;
        sizes[n++] = C * C; sizes[n++] = C;
        if (c->moe_experts) {
            sizes[n++] = (uint64_t)c->moe_experts * C;
            for (int e = 0; e < c->moe_experts; e++) { sizes[n++] = F * C; sizes[n++] = F * C; sizes[n++] = C * F; }
        } else {
            sizes[n++] = F * C; sizes[n++] = F * C; sizes[n++] = C * F;
        }
    }
    sizes[n++] = C;
    sizes[n++] = V * C;
    *count = n;
}

uint64_t gpt_param_count(const gpt_config *c) {
    uint64_t *s = malloc(sizeof(uint64_t) * (size_t)param_total(c));
    int n;
    uint64_t total = 0;
    if (!s) return 0;
    param_sizes(c, s, &n);
    for (int i = 0; i < n; i++) total += s[i];
    free(s);
    return total;
}

uint64_t gpt_state_bytes(const gpt_config *c) {
    uint64_t *s = malloc(sizeof(uint64_t) * (size_t)param_total(c));
    int n;
    uint64_t total = 0;
    if (!s) return 0;
    param_sizes(c, s, &n);
    for (int i = 0; i < n; i++) total += 4 * charged(s[i]);   /* weight, grad, m, v */
    free(s);
    total += 2 * charged((uint64_t)c->seq * (c->hidden / c->heads / 2));
    return total;
}

int gpt_loss_chunk(const gpt_config *c, int M) {
    int ch = c->loss_chunk;
    if (ch <= 0) {
        uint64_t fit = (uint64_t)M * (uint64_t)c->hidden / (uint64_t)c->vocab;   /* rows of V = M x C */
        ch = fit < 64 ? 64 : (int)(fit / 64 * 64);
    }
    return ch < M ? ch : M;
}

const char *gpt_attention_name(int a) { return a == GPT_ATTN_FLASH ? "flash" : a == GPT_ATTN_NAIVE ? "naive" : "?"; }
const char *gpt_loss_name(int l) { return l == GPT_LOSS_CHUNKED ? "chunked" : l == GPT_LOSS_FULL ? "full" : "?"; }
int gpt_attention_parse(const char *s) { return !strcmp(s, "flash") ? GPT_ATTN_FLASH : !strcmp(s, "naive") ? GPT_ATTN_NAIVE : -1; }
int gpt_loss_parse(const char *s) { return !strcmp(s, "chunked") ? GPT_LOSS_CHUNKED : !strcmp(s, "full") ? GPT_LOSS_FULL : -1; }

const char *gpt_mode_name(gpt_mode m) {
    static const char *n[GPT_MODE_COUNT] = {"none", "recompute", "smartswap", "offload-all"};
    return (unsigned)m < GPT_MODE_COUNT ? n[m] : "?";
}

int gpt_mode_parse(const char *s) {
    for (int i = 0; i < GPT_MODE_COUNT; i++) if (!strcmp(s, gpt_mode_name((gpt_mode)i))) return i;
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* errors, tensors                                                                              */

static void fail(gpt_model *m, const char *fmt, ...) {
    if (m->err) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->errmsg, sizeof m->errmsg, fmt, ap);
    va_end(ap);
    m->err = 1;
}

static float *F(const gpt_buf *b) { return (float *)b->ptr; }

/* ---- bf16 activations (cfg.dtype GPT_DTYPE_BF16) ------------------------------------------
 * An activation tensor (new_act) is stored as bf16, 2 bytes an element, in tensor memory: the
 * budget, the saves handed to the hooks and the smartswap context see those bytes. The kernels
 * keep their fp32 signatures: right before a kernel call each bf16 input is widened (exactly)
 * into an fp32 scratch block, each bf16 output gets an fp32 scratch block that the kernel writes,
 * and after the call (scr_done) the outputs are rounded to nearest even into their tensors and
 * every scratch block is freed. The scratch comes from the same gpt_mem (GPT_MEM_TEMP), so it
 * counts against the budget and the peaks while it lives. A value is rounded once, when it is
 * produced, and every reader (forward, backward, a rebuild) widens the same bits, so backward
 * sees exactly what forward used. Matrix products take bf16 operands: the activation as stored,
 * the weight and the output gradient rounded into scratch (the ops' bf16 products read them as
 * they are; without those the model widens them, which gives the same products). Per-row
 * statistics (rstd, log-sum-exp, per-token losses) and the chunked loss's logits stay fp32
 * (new_stat), as do weights, all gradients and the AdamW moments. */

typedef struct gpt_scratch {
    gpt_buf  *b;       /* fp32 scratch (or a bf16 operand) */
    uint16_t *dst;     /* an output's bf16 tensor to round b into at scr_done; NULL: an input */
    size_t    n;
} gpt_scratch;

static int is_b16(const gpt_model *m) { return m->cfg.dtype == GPT_DTYPE_BF16; }
static size_t esz(const gpt_tensor *t) { return t->b16 ? 2 : sizeof(float); }

static gpt_buf *scr_push(gpt_model *m, size_t bytes, uint16_t *dst, size_t n) {
    if (m->err) return NULL;
    if (m->nscr == m->capscr) {
        int cap = m->capscr ? 2 * m->capscr : 16;
        gpt_scratch *p = realloc(m->scr, (size_t)cap * sizeof *p);
        if (!p) { fail(m, "out of host memory"); return NULL; }
        m->scr = p;
        m->capscr = cap;
    }
    gpt_buf *b = gpt_mem_alloc(m->mem, dst ? "bf16.out32" : "bf16.in32", bytes ? bytes : 1, GPT_MEM_TEMP);
    if (!b) { fail(m, "%s", m->mem->err); return NULL; }
    m->scr[m->nscr++] = (gpt_scratch){b, dst, n};
    return b;
}

/* n elements at p (bf16 when b16) as fp32: p itself, or a widened scratch copy. */
static const float *in32p(gpt_model *m, const void *p, size_t n, int b16) {
    if (!b16 || !p) return p;
    gpt_buf *b = scr_push(m, n * sizeof(float), NULL, 0);
    if (!b) return NULL;
    m->ops->from_bf16(F(b), p, n);
    return F(b);
}
static const float *in32(gpt_model *m, const gpt_tensor *t) { return in32p(m, t->buf->ptr, t->n, t->b16); }

/* Where a kernel writes n elements at dst in fp32: dst, or a scratch rounded into it (bf16) at
 * scr_done. out32: all of t's data in buffer into (its buf or rbuf). */
static float *out32p(gpt_model *m, void *dst, size_t n, int b16) {
    if (!b16) return dst;
    gpt_buf *b = scr_push(m, n * sizeof(float), dst, n);
    return b ? F(b) : NULL;
}
static float *out32(gpt_model *m, gpt_tensor *t, gpt_buf *into) { return out32p(m, into->ptr, t->n, t->b16); }

/* Elementwise kernels on bf16 tensors run a piece at a time, so their widened scratch stays
 * small (the result is the same: each element is computed alone): GPT_B16_PIECE elements, or a
 * sixteenth of the tensor when that is more, so a large tensor costs at most 16 launches a kernel
 * on a device. */
#define GPT_B16_PIECE 16384
static size_t piece(const gpt_model *m, size_t n) {
    if (!is_b16(m)) return n;
    size_t p = (n + 15) / 16;
    if (p < GPT_B16_PIECE) p = GPT_B16_PIECE;
    return p < n ? p : n;
}
/* element off of t's data at p (stored as t is) */
static const void *at(const gpt_tensor *t, const void *p, size_t off) { return (const char *)p + off * esz(t); }

/* After a kernel call: the outputs rounded into their bf16 tensors, the scratch pushed since
 * mark freed (the scratch is a stack: a rebuild inside backward's loading of saved tensors, or a
 * piece of a kernel call, releases its own and leaves the caller's). On a device the frees are
 * ordered after the kernels by the allocator's stream events. scr_done: all of it. */
static void scr_done_to(gpt_model *m, int mark) {
    for (int i = mark; i < m->nscr; i++) {
        gpt_scratch *s = &m->scr[i];
        if (s->dst && !m->err) m->ops->to_bf16(s->dst, F(s->b), s->n);
        gpt_buf_unref(m->mem, s->b);
    }
    if (m->nscr > mark) m->nscr = mark;
}
static void scr_done(gpt_model *m) { scr_done_to(m, 0); }

/* A matrix product's fp32 operand p (n elements) rounded to bf16 bits in scratch. */
static const uint16_t *to16(gpt_model *m, const float *p, size_t n) {
    gpt_buf *b = scr_push(m, n * sizeof(uint16_t), NULL, 0);
    if (!b) return NULL;
    m->ops->to_bf16(b->ptr, p, n);
    return b->ptr;
}
/* The same, widened back to fp32 (what a bf16 product reads, for the fp32 kernels); the bf16
 * bits live only between the two conversions (freed at once: stream-ordered on a device). */
static const float *rnd32(gpt_model *m, const float *p, size_t n) {
    if (m->err) return NULL;
    gpt_buf *h = gpt_mem_alloc(m->mem, "bf16.round", n ? n * sizeof(uint16_t) : 1, GPT_MEM_TEMP);
    if (!h) { fail(m, "%s", m->mem->err); return NULL; }
    gpt_buf *f = scr_push(m, n * sizeof(float), NULL, 0);
    if (f) {
        m->ops->to_bf16(h->ptr, p, n);
        m->ops->from_bf16(F(f), h->ptr, n);
    }
    gpt_buf_unref(m->mem, h);
    return f ? F(f) : NULL;
}

/* out (M,N) = x (M,K) . w (N,K)^T with x as stored (bf16 when xb16): in bf16 mode on bf16
 * operands (fp32 accumulation). */
static void mm_fwd(gpt_model *m, float *out, const void *x, int xb16, const float *w, int M, int K, int N) {
    size_t nx = (size_t)M * K, nw = (size_t)N * K;
    if (!is_b16(m)) { m->ops->matmul_fwd(out, x, w, M, K, N); return; }
    if (m->ops->matmul_fwd_bf16) {
        const uint16_t *xb = xb16 ? x : to16(m, x, nx), *wb = to16(m, w, nw);
        if (xb && wb && out) m->ops->matmul_fwd_bf16(out, xb, wb, M, K, N);
        return;
    }
    const float *xf = xb16 ? in32p(m, x, nx, 1) : rnd32(m, x, nx), *wf = rnd32(m, w, nw);
    if (xf && wf && out) m->ops->matmul_fwd(out, xf, wf, M, K, N);
}

/* dinp (M,K) += dout . w, dw (N,K) += dout^T . x (either NULL: not wanted); bf16 mode: on bf16
 * operands (dout rounded), fp32 outputs */
static void mm_bwd(gpt_model *m, float *dinp, float *dw, const float *dout, const void *x, int xb16, const float *w,
                   int M, int K, int N) {
    size_t nx = (size_t)M * K, nw = (size_t)N * K, nd = (size_t)M * N;
    if (!is_b16(m)) { m->ops->matmul_bwd(dinp, dw, dout, x, w, M, K, N); return; }
    if (m->ops->matmul_bwd_bf16) {
        const uint16_t *db = to16(m, dout, nd);
        const uint16_t *xb = !dw ? NULL : xb16 ? x : to16(m, x, nx), *wb = dinp ? to16(m, w, nw) : NULL;
        if (db && (!dw || xb) && (!dinp || wb)) m->ops->matmul_bwd_bf16(dinp, dw, db, xb, wb, M, K, N);
        return;
    }
    const float *df = rnd32(m, dout, nd);
    const float *xf = !dw ? NULL : xb16 ? in32p(m, x, nx, 1) : rnd32(m, x, nx), *wf = dinp ? rnd32(m, w, nw) : NULL;
    if (df && (!dw || xf) && (!dinp || wf)) m->ops->matmul_bwd(dinp, dw, df, xf, wf, M, K, N);
}

/* The probe's slack on a per-expert buffer (gpt_model.moe_route_force): forced routing puts
 * K x M rows in K buffers; a real routing puts them in up to E, each rounded up to a unit
 * (GPT_MEM_ALIGN, or the allocator's granule: moe_route_unit), so K forced buffers each
 * ceil(E/K) units longer hold at least what any routing charges. With runs (gpt_moe_tile) a
 * routing makes at most K*M/tile + E run buffers of a kind, each rounded up once; the forced one
 * makes K*ceil(M/tile), each with its own rounding and the slack: still at least as much. */
static size_t probe_slack(const gpt_model *m, const char *name) {
    if (!m->moe_route_force || !strstr(name, "moe.e") || m->cfg.moe_topk < 1) return 0;
    size_t E = (size_t)m->cfg.moe_experts, K = (size_t)m->cfg.moe_topk;
    return (E + K - 1) / K * (m->moe_route_unit ? m->moe_route_unit : GPT_MEM_ALIGN);
}

static void replay_capture(gpt_model *m, gpt_tensor *t);

/* A tensor of the iteration with a fresh ACT buffer (one reference), stored as bf16 when b16;
 * NULL after an error. new_act: an activation (the model's dtype); new_stat: always fp32. */
#define new_act(m, ...) new_tensor(m, is_b16(m), __VA_ARGS__)
#define new_stat(m, ...) new_tensor(m, 0, __VA_ARGS__)
static gpt_tensor *new_tensor(gpt_model *m, int b16, const char *name, int layer, int ndim, int d0, int d1, int d2,
                              int d3) {
    if (m->err) return NULL;
    gpt_tensor *t = calloc(1, sizeof *t);
    if (!t) { fail(m, "out of host memory"); return NULL; }
    if (layer >= 0) snprintf(t->name, sizeof t->name, "L%d.%s", layer, name);
    else snprintf(t->name, sizeof t->name, "%s", name);
    int d[4] = {d0, d1, d2, d3};
    t->ndim = ndim;
    t->n = 1;
    for (int i = 0; i < ndim; i++) { t->shape[i] = d[i]; t->n *= (size_t)d[i]; }
    t->next = m->acts;
    m->acts = t;
    t->b16 = b16;
    t->layer = layer;
    t->lseq = -1;
    if (!m->replaying && layer >= 0 && m->lspan) t->lseq = m->lspan[layer].nact++;
    t->buf = gpt_mem_alloc(m->mem, t->name, t->n * esz(t) + probe_slack(m, t->name), GPT_MEM_ACT);
    if (!t->buf) { fail(m, "%s", m->mem->err); return NULL; }
    if (m->replaying) replay_capture(m, t);
    return t;
}

/* Hands t's pending saves to the hooks (the forward is done with t): each gets its handle. */
static void flush_saves(gpt_model *m, gpt_tensor *t) {
    for (int i = 0; i < t->npend; i++) {
        uint64_t h = 0;
        if (m->err) break;
        if (m->hooks.save(m->hooks.user, t->buf, &t->pend[i].info, &h)) {
            fail(m, "saving %s: %s", t->name, m->hooks.error(m->hooks.user));
            break;
        }
        m->hpool[t->pend[i].slot] = h;
        m->hten[t->pend[i].slot] = t;
        if (!t->h0) t->h0 = h;
        t->saves_live++;
        /* a layer member without a recipe of its own dropped: the plan re-runs its layer */
        if (t->pend[i].info.span_member && !t->rc_kind && m->hooks.dropped && m->hooks.dropped(m->hooks.user, h))
            m->lspan[t->layer].whole = 1;
    }
    t->npend = 0;
}

/* The forward code's reference to t's data is gone: its saves go to the hooks first. */
static void drop(gpt_model *m, gpt_tensor *t) {
    if (!t || !t->buf) return;
    if (t->npend) flush_saves(m, t);
    gpt_buf_unref(m->mem, t->buf);
    t->buf = NULL;
}

/* t's gradient buffer, zeroed at creation. */
static float *gradof(gpt_model *m, gpt_tensor *t) {
    if (m->err) return NULL;
    if (!t->grad) {
        char name[64];
        snprintf(name, sizeof name, "grad.%s", t->name);
        t->grad = gpt_mem_calloc(m->mem, name, t->n * sizeof(float) + probe_slack(m, name), GPT_MEM_AGRAD);
        if (!t->grad) { fail(m, "%s", m->mem->err); return NULL; }
    }
    return F(t->grad);
}

/* Backward in place: the gradient of `out` becomes `in`'s when `in` has none yet (out is the
 * operator's output, in its input of the same size whose one consumer this operator is), so the
 * two are never live side by side; 1 if moved. The kernel then writes in's gradient over out's. */
static int grad_move(gpt_model *m, gpt_tensor *out, gpt_tensor *in) {
    if (m->err || !out->grad || in->grad || in->n != out->n || probe_slack(m, in->name) != probe_slack(m, out->name))
        return 0;
    in->grad = out->grad;
    out->grad = NULL;
    return 1;
}

static void report_op(gpt_model *m, int kind, uint64_t site, int backward) {
    if (m->replaying) { m->stats.recomputed_ops++; return; }   /* a layer re-run is no operator */
    m->stats.ops++;
    m->hooks.op(m->hooks.user, backward ? op_bwd_names[kind] : op_names[kind], site);
}

/* A new tape node (only while recording); NULL after an error. */
static gpt_node *push_node(gpt_model *m, int kind, int layer, uint64_t site) {
    if (m->err || !m->recording) return NULL;
    if (m->ntape == m->captape) {
        size_t cap = m->captape ? 2 * m->captape : 64;
        gpt_node *t = realloc(m->tape, cap * sizeof *t);
        if (!t) { fail(m, "out of host memory for the tape"); return NULL; }
        m->tape = t;
        m->captape = cap;
    }
    gpt_node *n = &m->tape[m->ntape++];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->layer = layer;
    n->site = site;
    n->B = m->B;
    n->T = m->T;
    n->s0 = m->nhpool;
    return n;
}

/* Node n (the last pushed) keeps t for backward. The hooks see the save when the forward drops
 * its own reference to t (drop), not now: a saved block may then be handed over (swapped out,
 * released) without the forward still reading it. Until then the handle slot holds 0. */
static void save(gpt_model *m, gpt_node *n, gpt_tensor *t) {
    if (m->err || !n) return;
    if (m->nhpool == m->caphpool) {
        size_t cap = m->caphpool ? 2 * m->caphpool : 256;
        uint64_t *p = realloc(m->hpool, cap * sizeof *p);
        if (!p) { fail(m, "out of host memory for the tape"); return; }
        m->hpool = p;
        gpt_tensor **q = realloc(m->hten, cap * sizeof *q);
        if (!q) { fail(m, "out of host memory for the tape"); return; }
        m->hten = q;
        m->caphpool = cap;
    }
    if (t->npend == t->cappend) {
        int cap = t->cappend ? 2 * t->cappend : 4;
        gpt_pending *p = realloc(t->pend, (size_t)cap * sizeof *p);
        if (!p) { fail(m, "out of host memory for the tape"); return; }
        t->pend = p;
        t->cappend = cap;
    }
    gpt_pending *pd = &t->pend[t->npend++];
    memset(pd, 0, sizeof *pd);
    pd->slot = m->nhpool;
    pd->info.op = op_names[n->kind];
    pd->info.site = n->site;
    pd->info.ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++) pd->info.shape[i] = t->shape[i];
    pd->info.bytes = t->n * esz(t);
    pd->info.dtype = t->b16 ? GPT_DTYPE_BF16 : GPT_DTYPE_F32;
    pd->info.ordinal = n->nsaved;
    pd->info.layer = n->layer;
    pd->info.rebuildable = t->rc_kind != RC_NONE;
    pd->info.span_member = m->lspan && t->layer >= 0 && t->layer == n->layer && t->lseq >= 0;
    m->hten[m->nhpool] = NULL;
    m->hpool[m->nhpool++] = 0;
    n->nsaved++;
    m->stats.saves++;
    m->stats.saved_bytes += pd->info.bytes;
    if (!t->buf) flush_saves(m, t);   /* the forward holds no reference (cannot happen here) */
}

static float *load(gpt_model *m, uint64_t h) {
    void *p = NULL;
    if (m->err) return NULL;
    if (m->hooks.load(m->hooks.user, h, &p)) {
        fail(m, "loading a saved tensor: %s", m->hooks.error(m->hooks.user));
        return NULL;
    }
    return p;
}

/* ------------------------------------------------------------------------------------------ */
/* forward operators: each reports itself, computes, and records what its backward needs       */

/* x (B,T,C) = wte[tokens] */
static gpt_tensor *op_embed(gpt_model *m, uint64_t site) {
    int B = m->B, T = m->T, C = m->cfg.hidden;
    report_op(m, OP_EMBED, site, 0);
    gpt_tensor *x = new_act(m, "embed", -1, 3, B, T, C, 0);
    if (!x) return NULL;
    float *xo = out32(m, x, x->buf);
    if (xo) m->ops->embed_fwd(xo, m->tokens, F(m->wte->buf), B * T, C);
    scr_done(m);
    gpt_node *n = push_node(m, OP_EMBED, -1, site);
    if (n) { n->w = m->wte; n->out = x; }
    return x;
}

/* y (B,T,C) = rmsnorm(x (B,T,C)) * w (C); saves x and rstd (B,T) */
static gpt_tensor *op_rmsnorm(gpt_model *m, gpt_tensor *x, gpt_tensor *w, const char *name, int layer,
                              uint64_t site) {
    if (m->err || !x) return NULL;
    int B = m->B, T = m->T, C = m->cfg.hidden;
    report_op(m, OP_RMSNORM, site, 0);
    char rn[48];
    snprintf(rn, sizeof rn, "%s.rstd", name);
    gpt_tensor *y = new_act(m, name, layer, 3, B, T, C, 0);
    gpt_tensor *r = new_stat(m, rn, layer, 2, B, T, 0, 0);
    if (!y || !r) { drop(m, y); drop(m, r); return NULL; }
    const float *xi = in32(m, x);
    float *yo = out32(m, y, y->buf);
    if (xi && yo) m->ops->rmsnorm_fwd(yo, F(r->buf), xi, F(w->buf), B * T, C, m->cfg.norm_eps);
    scr_done(m);
    y->rc_kind = RC_RMSNORM; y->rc_in[0] = x; y->rc_w = w; y->rc_op[0] = (uint32_t)(m->stats.ops - 1); y->rc_nop = 1;
    gpt_node *n = push_node(m, OP_RMSNORM, layer, site);
    if (n) { n->in[0] = x; n->w = w; n->out = y; save(m, n, x); save(m, n, r); }
    drop(m, r);
    return y;
}

/* y (..,N) = x (..,K) . w (N,K)^T over the M = x->n / K rows of x, (B,T,K) or (n,K); saves x */
static gpt_tensor *op_matmul(gpt_model *m, gpt_tensor *x, gpt_tensor *w, const char *name, int layer,
                             uint64_t site) {
    if (m->err || !x) return NULL;
    int N = w->shape[0], K = w->shape[1], M = (int)(x->n / (size_t)K);
    report_op(m, OP_MATMUL, site, 0);
    gpt_tensor *y = x->ndim == 3 ? new_act(m, name, layer, 3, x->shape[0], x->shape[1], N, 0)
                                 : new_act(m, name, layer, 2, M, N, 0, 0);
    if (!y) return NULL;
    mm_fwd(m, out32(m, y, y->buf), x->buf->ptr, x->b16, F(w->buf), M, K, N);
    scr_done(m);
    y->rc_kind = RC_MATMUL; y->rc_in[0] = x; y->rc_w = w; y->rc_op[0] = (uint32_t)(m->stats.ops - 1); y->rc_nop = 1;
    gpt_node *n = push_node(m, OP_MATMUL, layer, site);
    if (n) { n->in[0] = x; n->w = w; n->out = y; save(m, n, x); }
    return y;
}

/* y (B,T,H,hd) = rope(x (B,T,H*hd)); saves nothing (linear in x) */
static gpt_tensor *op_rope(gpt_model *m, gpt_tensor *x, int H, const char *name, int layer, uint64_t site) {
    if (m->err || !x) return NULL;
    int B = m->B, T = m->T, hd = m->cfg.hidden / m->cfg.heads;
    report_op(m, OP_ROPE, site, 0);
    gpt_tensor *y = new_act(m, name, layer, 4, B, T, H, hd);
    if (!y) return NULL;
    const float *xi = in32(m, x);
    float *yo = out32(m, y, y->buf);
    if (xi && yo) m->ops->rope_fwd(yo, xi, F(m->rope_cos), F(m->rope_sin), B, T, H, hd);
    scr_done(m);
    if (x->rc_kind == RC_MATMUL) {   /* y = rope(x_in . w^T): both kernel calls again */
        y->rc_kind = RC_MATMUL_ROPE; y->rc_in[0] = x->rc_in[0]; y->rc_w = x->rc_w; y->rc_heads = H;
        y->rc_op[0] = x->rc_op[0]; y->rc_op[1] = (uint32_t)(m->stats.ops - 1); y->rc_nop = 2;
    }
    gpt_node *n = push_node(m, OP_ROPE, layer, site);
    if (n) { n->in[0] = x; n->out = y; }
    return y;
}

/* y (B,T,A*hd) = causal attention of q (B,T,A,hd), k v (B,T,KV,hd). Flash: saves q, k, v, y and
 * lse (B,A,T); naive: saves q, k, v, att (B,A,T,T). */
static gpt_tensor *op_attention(gpt_model *m, gpt_tensor *q, gpt_tensor *k, gpt_tensor *v, int layer,
                                uint64_t site) {
    if (m->err || !q || !k || !v) return NULL;
    int B = m->B, T = m->T, A = m->cfg.heads, KV = m->cfg.kv_heads, hd = m->cfg.hidden / A;
    report_op(m, OP_ATTN, site, 0);
    gpt_tensor *y = new_act(m, "attn.out", layer, 3, B, T, A * hd, 0);
    if (m->cfg.attention == GPT_ATTN_FLASH) {
        gpt_tensor *lse = new_stat(m, "attn.lse", layer, 3, B, A, T, 0);
        if (!y || !lse) { drop(m, y); drop(m, lse); return NULL; }
        const float *qi = in32(m, q), *ki = in32(m, k), *vi = in32(m, v);
        float *yo = out32(m, y, y->buf);
        if (qi && ki && vi && yo) m->ops->flash_attn_fwd(yo, F(lse->buf), qi, ki, vi, B, T, A, KV, hd);
        scr_done(m);
        gpt_node *n = push_node(m, OP_ATTN, layer, site);
        if (n) {
            n->in[0] = q; n->in[1] = k; n->in[2] = v; n->out = y;
            save(m, n, q); save(m, n, k); save(m, n, v); save(m, n, lse);   /* not y: the backward needs none */
        }
        drop(m, lse);
        return y;
    }
    gpt_tensor *att = new_act(m, "attn.probs", layer, 4, B, A, T, T);
    if (!y || !att) { drop(m, y); drop(m, att); return NULL; }
    const float *qi = in32(m, q), *ki = in32(m, k), *vi = in32(m, v);
    float *yo = out32(m, y, y->buf), *ao = out32(m, att, att->buf);
    if (qi && ki && vi && yo && ao) m->ops->attn_fwd(yo, ao, qi, ki, vi, B, T, A, KV, hd);
    scr_done(m);
    gpt_node *n = push_node(m, OP_ATTN, layer, site);
    if (n) {
        n->in[0] = q; n->in[1] = k; n->in[2] = v; n->out = y;
        save(m, n, q); save(m, n, k); save(m, n, v); save(m, n, att);
    }
    drop(m, att);
    return y;
}

/* y = k(a, b) elementwise (add, swiglu), a piece at a time (piece(): bf16 tensors widen each
 * piece into scratch and round the result back) */
static void binary_pieces(gpt_model *m, void (*k)(float *, const float *, const float *, size_t), gpt_tensor *y,
                          const gpt_tensor *a, const gpt_tensor *b) {
    for (size_t o = 0, ch = piece(m, y->n); o < y->n && !m->err; o += ch) {
        size_t len = y->n - o < ch ? y->n - o : ch;
        const float *ai = in32p(m, at(a, a->buf->ptr, o), len, a->b16), *bi = in32p(m, at(b, b->buf->ptr, o), len, b->b16);
        float *yo = out32p(m, (void *)at(y, y->buf->ptr, o), len, y->b16);
        if (ai && bi && yo) k(yo, ai, bi, len);
        scr_done(m);
    }
}

/* y = silu(g) * u, the shape of g: (B,T,F) or (n,F); saves g, u */
static gpt_tensor *op_swiglu(gpt_model *m, gpt_tensor *g, gpt_tensor *u, const char *name, int layer,
                             uint64_t site) {
    if (m->err || !g || !u) return NULL;
    report_op(m, OP_SWIGLU, site, 0);
    gpt_tensor *y = new_act(m, name, layer, g->ndim, g->shape[0], g->shape[1], g->shape[2], 0);
    if (!y) return NULL;
    binary_pieces(m, m->ops->swiglu_fwd, y, g, u);
    y->rc_kind = RC_SWIGLU; y->rc_in[0] = g; y->rc_in[1] = u; y->rc_op[0] = (uint32_t)(m->stats.ops - 1); y->rc_nop = 1;
    gpt_node *n = push_node(m, OP_SWIGLU, layer, site);
    if (n) { n->in[0] = g; n->in[1] = u; n->out = y; save(m, n, g); save(m, n, u); }
    return y;
}

/* y (B,T,C) = a + b; saves nothing */
static gpt_tensor *op_add(gpt_model *m, gpt_tensor *a, gpt_tensor *b, const char *name, int layer,
                          uint64_t site) {
    if (m->err || !a || !b) return NULL;
    report_op(m, OP_ADD, site, 0);
    gpt_tensor *y = new_act(m, name, layer, 3, m->B, m->T, m->cfg.hidden, 0);
    if (!y) return NULL;
    binary_pieces(m, m->ops->add_fwd, y, a, b);
    gpt_node *n = push_node(m, OP_ADD, layer, site);
    if (n) { n->in[0] = a; n->in[1] = b; n->out = y; }
    return y;
}

/* mean cross-entropy of logits (B,T,V) against targets; saves probs (B,T,V) */
static float op_xent(gpt_model *m, gpt_tensor *logits, uint64_t site) {
    if (m->err || !logits) return 0.0f;
    int B = m->B, T = m->T, V = m->cfg.vocab;
    report_op(m, OP_XENT, site, 0);
    gpt_tensor *p = new_act(m, "probs", -1, 3, B, T, V, 0);
    gpt_tensor *ls = new_stat(m, "losses", -1, 2, B, T, 0, 0);
    if (!p || !ls) { drop(m, p); drop(m, ls); return 0.0f; }
    const float *li = in32(m, logits);
    float *po = out32(m, p, p->buf);
    float loss = li && po ? m->ops->xent_fwd(po, F(ls->buf), li, m->targets, B * T, V) : 0.0f;
    scr_done(m);
    gpt_node *n = push_node(m, OP_XENT, -1, site);
    if (n) { n->in[0] = logits; save(m, n, p); }
    drop(m, p);
    drop(m, ls);
    return loss;
}

/* The chunked loss: mean cross-entropy of h (B,T,C) . w (V,C)^T against the targets, one chunk
 * of gpt_loss_chunk rows at a time, so only one chunk's logits (chunk,V) ever exist. One
 * operator of the sequence whatever B*T is. Saves h and lse (B,T); backward recomputes each
 * chunk's logits with the same k_matmul_fwd call. */
static float op_lxent(gpt_model *m, gpt_tensor *h, gpt_tensor *w, uint64_t site) {
    if (m->err || !h) return 0.0f;
    int B = m->B, T = m->T, M = B * T, C = m->cfg.hidden, V = m->cfg.vocab;
    int ch = gpt_loss_chunk(&m->cfg, M);
    report_op(m, OP_LXENT, site, 0);
    gpt_tensor *lse = new_stat(m, "loss.lse", -1, 2, B, T, 0, 0);
    gpt_tensor *ls = new_stat(m, "losses", -1, 2, B, T, 0, 0);
    gpt_tensor *lg = new_stat(m, "logits.chunk", -1, 2, ch, V, 0, 0);   /* (chunk,V) */
    if (!lse || !ls || !lg) { drop(m, lse); drop(m, ls); drop(m, lg); return 0.0f; }
    for (int i0 = 0; i0 < M && !m->err; i0 += ch) {
        int rows = M - i0 < ch ? M - i0 : ch;
        mm_fwd(m, F(lg->buf), (const char *)h->buf->ptr + (size_t)i0 * C * esz(h), h->b16, F(w->buf), rows, C, V);
        scr_done(m);
        m->ops->xent_lse_fwd(F(lse->buf) + i0, F(ls->buf) + i0, F(lg->buf), m->targets + i0, rows, V);
    }
    double total = 0.0;
    const float *lh = F(ls->buf);
    float *lhost = NULL;
    if (m->ops->device_memory) {   /* the losses come to the host, summed there as on the CPU */
        lhost = malloc((size_t)M * sizeof(float));
        if (!lhost) { fail(m, "out of host memory"); drop(m, lg); drop(m, ls); drop(m, lse); return 0.0f; }
        m->ops->download(lhost, lh, (size_t)M * sizeof(float));
        lh = lhost;
    }
    for (int i = 0; i < M; i++) total += lh[i];
    free(lhost);
    drop(m, lg);
    drop(m, ls);
    gpt_node *n = push_node(m, OP_LXENT, -1, site);
    if (n) { n->in[0] = h; n->w = w; save(m, n, h); save(m, n, lse); }
    drop(m, lse);
    return (float)(total / M);
}

/* Backward of op_lxent: per chunk, the same k_matmul_fwd call as forward, dlogits in place,
 * then dh (rows of the chunk) and dw (accumulated chunk after chunk, in order). */
static void lxent_backward(gpt_model *m, gpt_node *n, const void *h, int hb16, const float *lse) {
    int M = n->B * n->T, C = m->cfg.hidden, V = m->cfg.vocab;
    int ch = gpt_loss_chunk(&m->cfg, M);
    float *dh = gradof(m, n->in[0]);
    if (!dh) return;
    gpt_buf *lg = gpt_mem_alloc(m->mem, "logits.chunk.recompute", (size_t)ch * V * sizeof(float), GPT_MEM_ACT);
    if (!lg) { fail(m, "%s", m->mem->err); return; }
    float scale = m->dloss / (float)M;
    size_t hsz = hb16 ? 2 : sizeof(float);
    int mark = m->nscr;
    for (int i0 = 0; i0 < M && !m->err; i0 += ch) {
        int rows = M - i0 < ch ? M - i0 : ch;
        const void *hc = (const char *)h + (size_t)i0 * C * hsz;
        mm_fwd(m, F(lg), hc, hb16, F(n->w->buf), rows, C, V);
        scr_done_to(m, mark);
        m->ops->xent_lse_bwd(F(lg), lse + i0, m->targets + i0, rows, V, scale);
        mm_bwd(m, dh + (size_t)i0 * C, F(n->w->grad), F(lg), hc, hb16, F(n->w->buf), rows, C, V);
        scr_done_to(m, mark);
    }
    gpt_buf_unref(m->mem, lg);
}

/* ---- mixture of experts ------------------------------------------------------------------ */

static int ops_check(gpt_model *m);

/* wts (B,T,K) = renormalised top-k of softmax(logits (B,T,E)); fills *routep with the routing
 * (host data kept until the end of the iteration). Saves probs (B,T,E). */
static gpt_tensor *op_moe_route(gpt_model *m, gpt_tensor *logits, int layer, uint64_t site, gpt_route **routep) {
    *routep = NULL;
    if (m->err || !logits) return NULL;
    int B = m->B, T = m->T, M = B * T, E = m->cfg.moe_experts, K = m->cfg.moe_topk;
    report_op(m, OP_MOE_ROUTE, site, 0);
    int tile = gpt_moe_tile(M, E, K);
    size_t maxrun = (size_t)E + ((size_t)M * K + tile - 1) / tile;   /* sum of ceil(n_e / tile) */
    size_t ints = (size_t)M * K * 5 + (size_t)E + 1 + 3 * maxrun;
    gpt_route *r = calloc(1, sizeof *r + ints * sizeof(int) + maxrun * sizeof(gpt_tensor *));
    if (!r) { fail(m, "out of host memory"); return NULL; }
    r->ye = (gpt_tensor **)(r + 1);
    r->idx = (int *)(r->ye + maxrun);
    r->slot = r->idx + (size_t)M * K;
    r->rows = r->slot + (size_t)M * K;
    r->run = r->rows + (size_t)M * K;
    r->rslot = r->run + (size_t)M * K;
    r->off = r->rslot + (size_t)M * K;
    r->run_e = r->off + E + 1;
    r->run_off = r->run_e + maxrun;
    r->run_n = r->run_off + maxrun;
    r->M = M; r->E = E; r->K = K; r->tile = tile;
    r->next = m->routes;
    m->routes = r;
    gpt_tensor *w = new_act(m, "moe.weights", layer, 3, B, T, K, 0);
    gpt_tensor *p = new_act(m, "moe.probs", layer, 3, B, T, E, 0);
    if (!w || !p) { drop(m, w); drop(m, p); return NULL; }
    size_t mk = (size_t)M * K;
    if (m->ops->ints_alloc) {   /* device memory: the kernels read a device copy of the tables */
        r->dev = m->ops->ints_alloc(5 * mk);
        if (!r->dev) {
            ops_check(m);
            if (!m->err) fail(m, "cannot allocate the MoE routing tables on %s", m->ops->name);
            drop(m, w); drop(m, p);
            return NULL;
        }
    }
    const float *li = in32(m, logits);
    float *po = out32(m, p, p->buf), *wo = out32(m, w, w->buf);
    if (li && po && wo) m->ops->moe_route_fwd(po, wo, r->dev ? r->dev : r->idx, li, M, E, K);
    scr_done(m);
    /* the routing below is host code: bring the chosen experts over (download waits for the
     * router, one sync per MoE layer and micro-batch) */
    if (r->dev && !m->err) { m->ops->download(r->idx, r->dev, mk * sizeof(int)); ops_check(m); }
    if (m->err) { drop(m, w); drop(m, p); return NULL; }
    if (m->moe_route_force)   /* the probe's worst case: every expert 0..K-1 gets every token */
        for (size_t i = 0; i < (size_t)M * K; i++) r->idx[i] = (int)(i % (size_t)K);
    /* each expert's tokens, in token order */
    int *fill = calloc((size_t)E, sizeof *fill);
    if (!fill) { fail(m, "out of host memory"); drop(m, w); drop(m, p); return NULL; }
    for (size_t i = 0; i < (size_t)M * K; i++) r->off[r->idx[i] + 1]++;
    for (int e = 0; e < E; e++) r->off[e + 1] += r->off[e];
    for (int t = 0; t < M; t++)
        for (int k = 0; k < K; k++) {
            int e = r->idx[(size_t)t * K + k];
            r->slot[(size_t)t * K + k] = fill[e];
            r->rows[r->off[e] + fill[e]++] = t;
        }
    /* the runs: expert e's batch in nr[e] runs of near-equal rows (the first n_e % nr[e] one row
     * longer), at least ceil(n_e / tile) of them; then, so that the operator sequence does not
     * depend on the routing, runs are added (to the expert whose runs are longest, while one
     * of its runs has two rows or more) until the layer makes gpt_moe_runs: the most any
     * routing makes. The probe's forced routing keeps its whole tiles (the largest runs any
     * routing can make: its operators' working sets bound every routing's). */
    int *nr = calloc((size_t)E, sizeof *nr), *run_at = malloc(mk * sizeof *run_at);
    if (!nr || !run_at) {
        free(nr); free(run_at); free(fill);
        fail(m, "out of host memory"); drop(m, w); drop(m, p);
        return NULL;
    }
    int total = 0;
    for (int e = 0; e < E; e++) total += nr[e] = (r->off[e + 1] - r->off[e] + tile - 1) / tile;
    m->stats.expert_tiles += (uint64_t)total;
    for (int want = m->moe_route_force ? total : gpt_moe_runs(M, E, K); total < want; total++) {
        int best = -1, bl = 1;
        for (int e = 0; e < E; e++) {
            int n = r->off[e + 1] - r->off[e], l = nr[e] ? (n + nr[e] - 1) / nr[e] : 0;
            if (l > bl) { best = e; bl = l; }
        }
        if (best < 0) break;   /* every run has one row: M*K runs, never fewer than gpt_moe_runs */
        nr[best]++;
    }
    /* run_at[j]: the run that holds row j of the rows in expert order (r->rows) */
    for (int e = 0; e < E; e++) {
        int n = r->off[e + 1] - r->off[e], q = nr[e] ? n / nr[e] : 0, rem = nr[e] ? n % nr[e] : 0;
        for (int i = 0, j = r->off[e]; i < nr[e]; i++) {
            r->run_e[r->nrun] = e;
            r->run_off[r->nrun] = j;
            r->run_n[r->nrun] = q + (i < rem);
            for (int x = 0; x < r->run_n[r->nrun]; x++) run_at[j + x] = r->nrun;
            j += r->run_n[r->nrun++];
        }
    }
    /* each (token, choice) to its run and its row in the run */
    for (size_t i = 0; i < mk; i++) {
        int j = r->off[r->idx[i]] + r->slot[i], u = run_at[j];
        r->run[i] = u;
        r->rslot[i] = j - r->run_off[u];
    }
    free(run_at);
    free(nr);
    free(fill);
    /* the same tables, in the same layout, for the kernels (idx again: the probe forces it) */
    if (r->dev) m->ops->upload(r->dev, r->idx, 5 * mk * sizeof(int));
    gpt_node *n = push_node(m, OP_MOE_ROUTE, layer, site);
    if (n) { n->in[0] = logits; n->out = w; n->route = r; save(m, n, p); }
    drop(m, p);
    *routep = r;
    return w;
}

/* Where the kernels read a routing table: p points into r's host tables (idx .. rslot); with
 * device memory the same offset in r->dev. */
static const int *rdev(const gpt_route *r, const int *p) {
    return r->dev ? r->dev + (p - r->idx) : p;
}

int gpt_moe_tile(int M, int E, int K) {
    if (E < 1 || K < 1 || M < 1) return 1;
    /* twice the balanced share M*K/E: an expert needs a second run only when it gets more than
     * twice its share, so the operator sequence (and the plans cached for it) changes with the
     * routing about as rarely as without runs, while the worst routing's operator is E/(2K)
     * times smaller. With exactly the share, t_varying_exact's MoE 4:2 run met 18 structures in
     * 30 steps and its plan cache never hit. */
    long t = (2L * M * K + E - 1) / E;
    if (t > M) t = M;
    return t < 1 ? 1 : (int)t;
}

int gpt_moe_runs(int M, int E, int K) {
    if (E < 1 || K < 1 || M < 1) return 1;
    /* an expert with a runs holds at least (a-1)*tile + 1 rows and at most M: over the A <= E
     * experts that run, M*K >= A + (runs - A)*tile, each makes at most ceil(M/tile) runs, and
     * both bounds grow with A */
    long t = gpt_moe_tile(M, E, K), mk = (long)M * K, a = mk < E ? mk : E;
    long by_rows = (mk - a) / t, by_len = a * ((M + t - 1) / t - 1);
    return (int)(a + (by_rows < by_len ? by_rows : by_len));
}

/* xe (n, C) = x[run j's tokens] (a tile of expert run_e[j]'s batch); saves nothing (linear) */
static gpt_tensor *op_moe_gather(gpt_model *m, gpt_tensor *x, gpt_route *r, int j, int layer, uint64_t site) {
    if (m->err || !x) return NULL;
    int C = m->cfg.hidden, ne = r->run_n[j];
    report_op(m, OP_MOE_GATHER, site, 0);
    char name[48];
    snprintf(name, sizeof name, "moe.e%d.in", r->run_e[j]);
    gpt_tensor *y = new_act(m, name, layer, 2, ne, C, 0, 0);
    if (!y) return NULL;
    const float *xi = in32(m, x);
    float *yo = out32(m, y, y->buf);
    if (xi && yo) m->ops->moe_gather_fwd(yo, xi, rdev(r, r->rows + r->run_off[j]), ne, C);
    scr_done(m);
    gpt_node *n = push_node(m, OP_MOE_GATHER, layer, site);
    if (n) { n->in[0] = x; n->out = y; n->route = r; n->expert = j; }
    return y;
}

/* y (B,T,C) = sum over each token's experts, by rank, of weight * expert output (r->ye, run
 * by run); saves the weights and every run's output */
static gpt_tensor *op_moe_combine(gpt_model *m, gpt_tensor *w, gpt_route *r, int layer, uint64_t site) {
    if (m->err || !w) return NULL;
    int C = m->cfg.hidden;
    report_op(m, OP_MOE_COMBINE, site, 0);
    gpt_tensor *y = new_act(m, "moe.out", layer, 3, m->B, m->T, C, 0);
    if (!y) return NULL;
    const float *ye[2 * GPT_MAX_EXPERTS + 1];
    for (int j = 0; j < r->nrun; j++) ye[j] = r->ye[j] ? in32(m, r->ye[j]) : NULL;
    const float *wi = in32(m, w);
    float *yo = out32(m, y, y->buf);
    if (wi && yo) m->ops->moe_combine_fwd(yo, wi, rdev(r, r->run), rdev(r, r->rslot), ye, r->M, C, r->K, r->nrun);
    scr_done(m);
    gpt_node *n = push_node(m, OP_MOE_COMBINE, layer, site);
    if (n) {
        n->in[0] = w; n->out = y; n->route = r;
        save(m, n, w);
        for (int j = 0; j < r->nrun; j++) if (r->ye[j]) save(m, n, r->ye[j]);
    }
    return y;
}

/* The MoE MLP on h (B,T,C): router, routing, the experts that received tokens, each over its
 * batch's runs of at most twice the balanced share (the others run no operator at all; the
 * layer makes gpt_moe_runs runs at every routing), combine. */
static gpt_tensor *moe_forward(gpt_model *m, int l, gpt_tensor *h) {
    gpt_layer *p = &m->layer[l];
    gpt_route *r = NULL;
    gpt_tensor *logits = op_matmul(m, h, p->wg, "moe.logits", l, SITE);   /* (B,T,E) */
    gpt_tensor *w = op_moe_route(m, logits, l, SITE, &r);                 /* (B,T,K) */
    drop(m, logits);
    if (!w || !r) return NULL;
    for (int e = 0; e < r->E; e++) {
        if (r->off[e + 1] == r->off[e]) m->stats.experts_idle++;
        else m->stats.experts_run++;
    }
    m->stats.expert_runs += (uint64_t)r->nrun;
    for (int j = 0; j < r->nrun && !m->err; j++) {
        int e = r->run_e[j];
        char nm[48];
        gpt_tensor *xe = op_moe_gather(m, h, r, j, l, SITE);              /* (n_j,C) */
        snprintf(nm, sizeof nm, "moe.e%d.gate", e);
        gpt_tensor *g = op_matmul(m, xe, p->ew1[e], nm, l, SITE);          /* (n_e,F) */
        snprintf(nm, sizeof nm, "moe.e%d.up", e);
        gpt_tensor *u = op_matmul(m, xe, p->ew3[e], nm, l, SITE);          /* (n_e,F) */
        drop(m, xe);
        snprintf(nm, sizeof nm, "moe.e%d.act", e);
        gpt_tensor *s = op_swiglu(m, g, u, nm, l, SITE);                   /* (n_e,F) */
        drop(m, g); drop(m, u);
        snprintf(nm, sizeof nm, "moe.e%d.out", e);
        r->ye[j] = op_matmul(m, s, p->ew2[e], nm, l, SITE);                /* (n_j,C) */
        drop(m, s);
    }
    gpt_tensor *y = op_moe_combine(m, w, r, l, SITE);                     /* (B,T,C) */
    drop(m, w);
    for (int j = 0; j < r->nrun; j++) drop(m, r->ye[j]);
    return y;
}

/* One decoder layer: x (B,T,C) -> (B,T,C). The caller keeps (and later drops) its reference to x. */
static gpt_tensor *layer_forward(gpt_model *m, int l, gpt_tensor *x) {
    gpt_layer *p = &m->layer[l];
    int A = m->cfg.heads, KV = m->cfg.kv_heads;
    gpt_tensor *h1 = op_rmsnorm(m, x, p->rms1, "attn.norm", l, SITE);     /* (B,T,C) */
    gpt_tensor *q = op_matmul(m, h1, p->wq, "attn.q", l, SITE);           /* (B,T,A*hd) */
    gpt_tensor *k = op_matmul(m, h1, p->wk, "attn.k", l, SITE);           /* (B,T,KV*hd) */
    gpt_tensor *v = op_matmul(m, h1, p->wv, "attn.v", l, SITE);           /* (B,T,KV*hd) */
    drop(m, h1);
    gpt_tensor *qr = op_rope(m, q, A, "attn.q.rope", l, SITE);            /* (B,T,A,hd) */
    drop(m, q);
    gpt_tensor *kr = op_rope(m, k, KV, "attn.k.rope", l, SITE);           /* (B,T,KV,hd) */
    drop(m, k);
    gpt_tensor *a = op_attention(m, qr, kr, v, l, SITE);                  /* (B,T,C) */
    drop(m, qr); drop(m, kr); drop(m, v);
    gpt_tensor *o = op_matmul(m, a, p->wo, "attn.proj", l, SITE);         /* (B,T,C) */
    drop(m, a);
    gpt_tensor *x2 = op_add(m, x, o, "resid.attn", l, SITE);              /* (B,T,C) */
    drop(m, o);
    gpt_tensor *h2 = op_rmsnorm(m, x2, p->rms2, "mlp.norm", l, SITE);     /* (B,T,C) */
    gpt_tensor *d;
    if (m->cfg.moe_experts) {
        d = moe_forward(m, l, h2);                                        /* (B,T,C) */
        drop(m, h2);
    } else {
        gpt_tensor *g = op_matmul(m, h2, p->w1, "mlp.gate", l, SITE);     /* (B,T,F) */
        gpt_tensor *u = op_matmul(m, h2, p->w3, "mlp.up", l, SITE);       /* (B,T,F) */
        drop(m, h2);
        gpt_tensor *s = op_swiglu(m, g, u, "mlp.act", l, SITE);           /* (B,T,F) */
        drop(m, g); drop(m, u);
        d = op_matmul(m, s, p->w2, "mlp.down", l, SITE);                  /* (B,T,C) */
        drop(m, s);
    }
    gpt_tensor *x3 = op_add(m, x2, d, "resid.mlp", l, SITE);              /* (B,T,C) */
    drop(m, x2); drop(m, d);
    return m->err ? NULL : x3;
}

/* ------------------------------------------------------------------------------------------ */
/* backward                                                                                     */

static void backward_to(gpt_model *m, size_t stop);

/* ---- rebuilding dropped saves (the hybrid's recompute) ------------------------------------ */

static int rc_nsrc(const gpt_tensor *t) { return t->rc_kind == RC_SWIGLU ? 2 : t->rc_kind ? 1 : 0; }

/* 1 when every source of t is a save still held (so t can be rebuilt now). */
static int rc_ready(const gpt_tensor *t) {
    for (int k = 0; k < rc_nsrc(t); k++)
        if (!t->rc_in[k] || !t->rc_in[k]->h0 || t->rc_in[k]->saves_live < 1) return 0;
    return t->rc_kind != RC_NONE;
}

/* Tells the hooks how t is rebuilt, once (at its first load, when its sources' handles exist). */
static void rc_report(gpt_model *m, gpt_tensor *t) {
    if (t->rc_reported || !m->hooks.recipe || !rc_ready(t)) return;
    t->rc_reported = 1;
    uint64_t src[2] = {0, 0};
    for (int k = 0; k < rc_nsrc(t); k++) src[k] = t->rc_in[k]->h0;
    m->hooks.recipe(m->hooks.user, t->h0, src, rc_nsrc(t), t->rc_op, t->rc_nop);
}

static const void *load_tensor(gpt_model *m, gpt_tensor *t, uint64_t h);

/* t's data, rebuilt by the kernel call that made it from its sources (loaded, or rebuilt in
 * turn), into a buffer held until t's last save is released, stored as t is (bf16: rounded as
 * when it was made). Same kernel, same inputs, same bits. */
static const void *rebuild(gpt_model *m, gpt_tensor *t) {
    if (t->rbuf) return t->rbuf->ptr;
    if (m->err) return NULL;
    if (!rc_ready(t)) { fail(m, "internal: %s was dropped but its sources are gone", t->name); return NULL; }
    const void *in[2] = {NULL, NULL};
    for (int k = 0; k < rc_nsrc(t); k++) {
        in[k] = load_tensor(m, t->rc_in[k], t->rc_in[k]->h0);
        if (!in[k]) return NULL;
    }
    char name[64];
    snprintf(name, sizeof name, "%s.rebuild", t->name);
    gpt_buf *b = gpt_mem_alloc(m->mem, name, t->n * esz(t), GPT_MEM_ACT);
    if (!b) { fail(m, "%s", m->mem->err); return NULL; }
    int C = m->cfg.hidden, mark = m->nscr;   /* the caller's scratch (backward's widened saves) stays */
    switch (t->rc_kind) {
    case RC_RMSNORM: {          /* the rstd it writes again is a scratch (the saved one stays) */
        int M = (int)(t->n / (size_t)C);
        gpt_buf *r = gpt_mem_alloc(m->mem, "rstd.rebuild", (size_t)M * sizeof(float), GPT_MEM_ACT);
        if (!r) { fail(m, "%s", m->mem->err); break; }
        /* bf16: rows in pieces (each row is normalised alone), so the widened scratch is small */
        int rows = (int)(piece(m, t->n) / (size_t)C);
        if (rows < 1) rows = 1;
        const gpt_tensor *x = t->rc_in[0];
        for (int r0 = 0; r0 < M && !m->err; r0 += rows) {
            int nr = M - r0 < rows ? M - r0 : rows;
            size_t o = (size_t)r0 * C, len = (size_t)nr * C;
            const float *xi = in32p(m, at(x, in[0], o), len, x->b16);
            float *yo = out32p(m, (void *)at(t, b->ptr, o), len, t->b16);
            if (xi && yo) m->ops->rmsnorm_fwd(yo, F(r) + r0, xi, F(t->rc_w->buf), nr, C, m->cfg.norm_eps);
            scr_done_to(m, mark);
        }
        gpt_buf_unref(m->mem, r);
        break;
    }
    case RC_MATMUL: {
        int N = t->rc_w->shape[0], K = t->rc_w->shape[1];
        mm_fwd(m, out32(m, t, b), in[0], t->rc_in[0]->b16, F(t->rc_w->buf), (int)(t->n / (size_t)N), K, N);
        scr_done_to(m, mark);
        break;
    }
    case RC_MATMUL_ROPE: {      /* (B,T,H,hd) = rope(x . w^T), through a scratch for the product */
        int N = t->rc_w->shape[0], K = t->rc_w->shape[1], hd = C / m->cfg.heads;
        gpt_buf *q = gpt_mem_alloc(m->mem, "rope.in.rebuild", t->n * sizeof(float), GPT_MEM_ACT);
        if (!q) { fail(m, "%s", m->mem->err); break; }
        mm_fwd(m, F(q), in[0], t->rc_in[0]->b16, F(t->rc_w->buf), (int)(t->n / (size_t)N), K, N);
        scr_done_to(m, mark);
        if (t->b16 && !m->err) {   /* the product was an activation of its own, stored rounded: rope
                                      read the rounded values (rounded here in place) */
            gpt_buf *h = gpt_mem_alloc(m->mem, "rope.in.round", t->n * sizeof(uint16_t), GPT_MEM_TEMP);
            if (!h) { fail(m, "%s", m->mem->err); gpt_buf_unref(m->mem, q); break; }
            m->ops->to_bf16(h->ptr, F(q), t->n);
            m->ops->from_bf16(F(q), h->ptr, t->n);
            gpt_buf_unref(m->mem, h);
        }
        /* bf16: one batch row at a time (rope is per element), so the output's scratch is small */
        int nb = t->b16 ? 1 : t->shape[0];
        size_t row = t->n / (size_t)t->shape[0] * (size_t)nb;
        for (int b0 = 0; b0 < t->shape[0] && !m->err; b0 += nb) {
            float *yo = out32p(m, (void *)at(t, b->ptr, (size_t)b0 / (size_t)nb * row), row, t->b16);
            if (yo) m->ops->rope_fwd(yo, F(q) + (size_t)b0 / (size_t)nb * row, F(m->rope_cos), F(m->rope_sin), nb,
                                     t->shape[1], t->rc_heads, hd);
            scr_done_to(m, mark);
        }
        gpt_buf_unref(m->mem, q);
        break;
    }
    case RC_SWIGLU: {
        const gpt_tensor *g = t->rc_in[0], *u = t->rc_in[1];
        for (size_t o = 0, ch = piece(m, t->n); o < t->n && !m->err; o += ch) {
            size_t len = t->n - o < ch ? t->n - o : ch;
            const float *gi = in32p(m, at(g, in[0], o), len, g->b16), *ui = in32p(m, at(u, in[1], o), len, u->b16);
            float *yo = out32p(m, (void *)at(t, b->ptr, o), len, t->b16);
            if (gi && ui && yo) m->ops->swiglu_fwd(yo, gi, ui, len);
            scr_done_to(m, mark);
        }
        break;
    }
    default:
        fail(m, "internal: %s has no rebuild recipe", t->name);
    }
    if (m->err) { gpt_buf_unref(m->mem, b); return NULL; }
    t->rbuf = b;
    m->stats.rebuilt++;
    m->stats.rebuilt_bytes += t->n * esz(t);
    return b->ptr;
}

/* While a layer re-runs: the k-th tensor it makes stands for the layer's k-th tensor of the
 * forward; when that one's saves were dropped, the re-run's data becomes its rebuilt data (a
 * reference taken now, so the re-run's own drop does not free it). */
static void replay_capture(gpt_model *m, gpt_tensor *t) {
    int k = m->rnext++;
    gpt_tensor *o = k < m->nrorig ? m->rorig[k] : NULL;
    if (!o || strcmp(o->name, t->name)) {
        fail(m, "internal: re-running a layer made %s where its forward made %s", t->name, o ? o->name : "nothing");
        return;
    }
    if (o->h0 && !o->rbuf && o->saves_live > 0 && m->hooks.dropped(m->hooks.user, o->h0)) {
        gpt_buf_ref(t->buf);
        o->rbuf = t->buf;
        m->stats.rebuilt++;
        m->stats.rebuilt_bytes += o->n * esz(o);
    }
}

/* Layer l whole (the plan dropped its saves, its input's kept): re-runs its forward from the
 * input's saved data with the identical kernel calls, reporting no operator and recording
 * nothing; every dropped member gets its data (replay_capture). Same kernels, same inputs, same
 * bits. 0, or 1 with the model failed. */
static int rebuild_layer(gpt_model *m, int l) {
    gpt_lspan *s = &m->lspan[l];
    if (s->rebuilt) return m->err;
    s->rebuilt = 1;
    gpt_tensor *x = s->in;
    if (!x || !x->h0 || x->saves_live < 1 || x->buf) {
        fail(m, "internal: layer %d is to be re-run but its input is gone", l);
        return 1;
    }
    const void *xs = load_tensor(m, x, x->h0);
    if (!xs) return 1;
    m->rorig = calloc((size_t)s->nact + 1, sizeof *m->rorig);
    if (!m->rorig) { fail(m, "out of host memory"); return 1; }
    m->nrorig = s->nact;
    m->rnext = 0;
    for (gpt_tensor *t = m->acts; t; t = t->next)
        if (t->layer == l && t->lseq >= 0 && t->lseq < s->nact) m->rorig[t->lseq] = t;
    char name[64];
    snprintf(name, sizeof name, "%s.layer-input", x->name);
    x->buf = gpt_mem_alloc(m->mem, name, x->n * esz(x), GPT_MEM_ACT);
    if (!x->buf) fail(m, "%s", m->mem->err);
    else m->ops->copy(x->buf->ptr, xs, x->n * esz(x));
    int rec = m->recording;
    m->recording = 0;
    m->replaying = 1;
    gpt_tensor *y = m->err ? NULL : layer_forward(m, l, x);
    m->replaying = 0;
    m->recording = rec;
    drop(m, x);
    drop(m, y);
    if (!m->err && m->rnext != s->nact)
        fail(m, "internal: re-running layer %d made %d tensors, its forward %d", l, m->rnext, s->nact);
    free(m->rorig);
    m->rorig = NULL;
    m->nrorig = 0;
    if (!m->err) m->stats.layers_rebuilt++;
    return m->err;
}

/* The data of save h of tensor t, as stored: rebuilt when the hooks dropped it (its layer re-run
 * when the plan took the layer whole), else loaded. */
static const void *load_tensor(gpt_model *m, gpt_tensor *t, uint64_t h) {
    if (t && t->rc_kind) rc_report(m, t);
    if (t && m->hooks.dropped && (t->rc_kind || (m->lspan && t->layer >= 0)) && m->hooks.dropped(m->hooks.user, h)) {
        if (t->layer >= 0 && m->lspan && m->lspan[t->layer].whole) {
            if (!t->rbuf && rebuild_layer(m, t->layer)) return NULL;
            if (!t->rbuf) { fail(m, "internal: re-running layer %d did not rebuild %s", t->layer, t->name); return NULL; }
            return t->rbuf->ptr;
        }
        if (!t->rc_kind) { fail(m, "internal: %s was dropped but has no recipe", t->name); return NULL; }
        return rebuild(m, t);
    }
    return load(m, h);
}

/* Releases save slot i of the tape (and t's rebuilt data after its last save). */
static void release_slot(gpt_model *m, size_t i) {
    gpt_tensor *t = m->hten[i];
    if (m->hpool[i]) m->hooks.release(m->hooks.user, m->hpool[i]);
    m->hpool[i] = 0;
    m->hten[i] = NULL;
    if (t && --t->saves_live <= 0 && t->rbuf) {
        gpt_buf_unref(m->mem, t->rbuf);
        t->rbuf = NULL;
    }
}

/* Recompute mode: the node holds the layer input x (saved) and the layer output y. Re-runs the
 * layer's forward from a copy of x while recording, hands y's gradient to the recomputed
 * output, and walks the recorded nodes back; x's gradient accumulates as in mode none. */
static void ckpt_backward(gpt_model *m, gpt_node nd) {
    gpt_tensor *x = nd.in[0], *y = nd.out;
    uint64_t h = m->hpool[nd.s0];
    const void *xs = load_tensor(m, m->hten[nd.s0], h);
    if (m->err) return;
    char name[64];
    snprintf(name, sizeof name, "%s.recompute", x->name);
    x->buf = gpt_mem_alloc(m->mem, name, x->n * esz(x), GPT_MEM_ACT);
    if (!x->buf) { fail(m, "%s", m->mem->err); return; }
    m->ops->copy(x->buf->ptr, xs, x->n * esz(x));
    release_slot(m, nd.s0);
    size_t stop = m->ntape;
    m->recording = 1;
    uint64_t ops0 = m->stats.ops;
    gpt_tensor *y2 = layer_forward(m, nd.layer, x);
    m->stats.recomputed_ops += m->stats.ops - ops0;
    m->recording = 0;
    drop(m, x);
    if (m->err) return;
    drop(m, y2);
    y2->grad = y->grad;     /* the gradient of the layer output moves to its recomputation */
    y->grad = NULL;
    backward_to(m, stop);
}

static void node_backward(gpt_model *m, gpt_node *n) {
    int B = n->B, T = n->T, M = B * T, C = m->cfg.hidden;
    int A = m->cfg.heads, KV = m->cfg.kv_heads, hd = C / A;
    if (n->kind == OP_CKPT) {
        report_op(m, OP_CKPT, n->site, 1);
        ckpt_backward(m, *n);
        return;
    }
    report_op(m, n->kind, n->site, 1);
    float *dout = (n->out && n->out->grad) ? F(n->out->grad) : NULL;
    if (n->out && !dout) {
        /* nothing flowed into this output (cannot happen in this model) */
        fail(m, "internal: no gradient reaches %s", n->out->name);
        return;
    }
    /* the saved tensors as stored (raw), and as fp32 (s: widened into scratch when bf16; the
     * matmul, the chunked loss and swiglu read their bf16 operands as they are); moe_combine
     * saves the weights and every run's output */
    const void *raw[2 * GPT_MAX_EXPERTS + 4];
    const float *s[2 * GPT_MAX_EXPERTS + 4];
    int lazy = n->kind == OP_MATMUL || n->kind == OP_LXENT || n->kind == OP_SWIGLU;
    for (int i = 0; i < n->nsaved; i++) {
        const gpt_tensor *t = m->hten[n->s0 + i];
        raw[i] = load_tensor(m, m->hten[n->s0 + i], m->hpool[n->s0 + i]);
        s[i] = lazy || !t ? raw[i] : in32p(m, raw[i], t->n, t->b16);
    }
    if (m->err) { scr_done(m); return; }
    switch (n->kind) {
    case OP_EMBED:
        m->ops->embed_bwd(F(n->w->grad), dout, m->tokens, M, C, m->cfg.vocab);
        break;
    case OP_RMSNORM: {
        float *dx = gradof(m, n->in[0]);
        if (dx) m->ops->rmsnorm_bwd(dx, F(n->w->grad), dout, s[0], s[1], F(n->w->buf), M, C);
        break;
    }
    case OP_MATMUL: {
        float *dx = gradof(m, n->in[0]);
        int K = n->w->shape[1], N = n->w->shape[0];
        if (dx) mm_bwd(m, dx, F(n->w->grad), dout, raw[0], m->hten[n->s0]->b16, F(n->w->buf), (int)(n->in[0]->n / (size_t)K),
                       K, N);
        break;
    }
    case OP_ROPE: {
        float *dx = gradof(m, n->in[0]);
        if (dx) m->ops->rope_bwd(dx, dout, F(m->rope_cos), F(m->rope_sin), B, T, n->out->shape[2], hd);
        break;
    }
    case OP_ATTN: {
        /* flash: q's gradient takes the output gradient's buffer when q has none yet (this is
         * q's one consumer), written over it by the kernel, so the two never live side by side */
        if (m->cfg.attention == GPT_ATTN_FLASH) grad_move(m, n->out, n->in[0]);
        float *dq = gradof(m, n->in[0]), *dk = gradof(m, n->in[1]), *dv = gradof(m, n->in[2]);
        if (!dq || !dk || !dv) break;
        if (m->cfg.attention == GPT_ATTN_FLASH)   /* flash: q, k, v, lse */
            m->ops->flash_attn_bwd(dq, dk, dv, dout, s[0], s[1], s[2], s[3], B, T, A, KV, hd);
        else
            m->ops->attn_bwd(dq, dk, dv, dout, s[0], s[1], s[2], s[3], B, T, A, KV, hd);
        break;
    }
    case OP_LXENT:
        lxent_backward(m, n, raw[0], m->hten[n->s0]->b16, s[1]);
        break;
    case OP_SWIGLU: {
        /* the gate's gradient takes the output gradient's buffer when the gate has none yet
         * (this is its one consumer), written over it element by element */
        if (n->in[0] != n->in[1]) grad_move(m, n->out, n->in[0]);
        float *dg = gradof(m, n->in[0]), *du = gradof(m, n->in[1]);
        const gpt_tensor *g = m->hten[n->s0], *u = m->hten[n->s0 + 1];
        size_t nn = n->out->n;
        int mark = m->nscr;
        for (size_t o = 0, ch = piece(m, nn); dg && du && o < nn && !m->err; o += ch) {
            size_t len = nn - o < ch ? nn - o : ch;
            const float *gi = in32p(m, at(g, raw[0], o), len, g->b16), *ui = in32p(m, at(u, raw[1], o), len, u->b16);
            if (gi && ui) m->ops->swiglu_bwd(dg + o, du + o, dout + o, gi, ui, len);
            scr_done_to(m, mark);
        }
        break;
    }
    case OP_ADD: {
        /* the residual add: a's gradient is dout itself when a has none yet (then its buffer
         * moves to a), else dout is added to it; b's is added */
        int moved = n->in[0] != n->in[1] && grad_move(m, n->out, n->in[0]);
        float *da = moved ? NULL : gradof(m, n->in[0]);
        if (da) m->ops->accumulate(da, dout, n->out->n);
        float *db = gradof(m, n->in[1]);
        if (db) m->ops->accumulate(db, dout, n->out->n);
        break;
    }
    case OP_XENT: {
        float *dl = gradof(m, n->in[0]);
        if (dl) m->ops->xent_bwd(dl, s[0], m->targets, M, m->cfg.vocab, m->dloss);
        break;
    }
    case OP_MOE_ROUTE: {
        float *dl = gradof(m, n->in[0]);
        gpt_route *r = n->route;
        if (dl) m->ops->moe_route_bwd(dl, dout, s[0], rdev(r, r->idx), r->M, r->E, r->K);
        break;
    }
    case OP_MOE_GATHER: {
        float *dx = gradof(m, n->in[0]);
        gpt_route *r = n->route;
        int j = n->expert;   /* the run */
        if (dx) m->ops->moe_gather_bwd(dx, dout, rdev(r, r->rows + r->run_off[j]), r->run_n[j], C);
        break;
    }
    case OP_MOE_COMBINE: {
        gpt_route *r = n->route;
        float *dw = gradof(m, n->in[0]);
        float *dye[2 * GPT_MAX_EXPERTS + 1];
        const float *ye[2 * GPT_MAX_EXPERTS + 1];
        int i = 1;
        for (int j = 0; j < r->nrun; j++) {
            dye[j] = NULL;
            ye[j] = NULL;
            if (!r->ye[j]) continue;
            ye[j] = s[i++];
            dye[j] = gradof(m, r->ye[j]);
        }
        if (dw && !m->err) m->ops->moe_combine_bwd(dye, dw, dout, s[0], rdev(r, r->run), rdev(r, r->rslot), ye, r->M, C,
                                                r->K, r->nrun);
        break;
    }
    default:
        fail(m, "internal: unknown tape node %d", n->kind);
    }
    scr_done(m);
    for (int i = 0; i < n->nsaved; i++) release_slot(m, n->s0 + i);
    n->nsaved = 0;
    if (n->out) { gpt_buf_unref(m->mem, n->out->grad); n->out->grad = NULL; }
}

/* Walks the tape back down to index stop, popping nodes. */
static void backward_to(gpt_model *m, size_t stop) {
    while (m->ntape > stop && !m->err) {
        gpt_node nd = m->tape[--m->ntape];    /* a copy: recompute pushes new nodes */
        node_backward(m, &nd);
    }
}

/* Frees everything the micro-batch still holds (after success: only tensor structs). */
static void end_iteration(gpt_model *m) {
    scr_done(m);   /* nothing is left after a completed call; after an error, what was pushed */
    for (size_t i = 0; i < m->nhpool; i++)
        if (m->hpool[i]) release_slot(m, i);
    m->nhpool = 0;
    m->ntape = 0;
    gpt_tensor *t = m->acts;
    while (t) {
        gpt_tensor *next = t->next;
        gpt_buf_unref(m->mem, t->buf);
        gpt_buf_unref(m->mem, t->grad);
        gpt_buf_unref(m->mem, t->rbuf);
        free(t->pend);
        free(t);
        t = next;
    }
    m->acts = NULL;
    if (m->routes && m->routes->dev) { char e[300]; (void)m->ops->sync(e, sizeof e); }   /* no kernel reads them */
    while (m->routes) {
        gpt_route *r = m->routes->next;
        if (m->routes->dev) m->ops->ints_free(m->routes->dev);
        free(m->routes);
        m->routes = r;
    }
    m->recording = 0;
}

double gpt_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The forward of one micro-batch (embedding .. loss); inside a step its wall time is added to
 * stats.fwd_seconds. */
static float forward(gpt_model *m, int record) {
    double t0 = gpt_now_s();
    m->recording = record;
    gpt_tensor *x = op_embed(m, SITE);                                    /* (B,T,C) */
    for (int l = 0; l < m->cfg.layers && !m->err; l++) {
        gpt_tensor *y;
        if (record && m->mode == GPT_MODE_RECOMPUTE) {
            m->recording = 0;
            y = layer_forward(m, l, x);
            m->recording = 1;
            report_op(m, OP_CKPT, SITE, 0);
            gpt_node *n = push_node(m, OP_CKPT, l, SITE);
            if (n && y) { n->in[0] = x; n->out = y; save(m, n, x); }
        } else {
            uint32_t op0 = (uint32_t)m->stats.ops;
            if (m->lspan) m->lspan[l] = (gpt_lspan){x, 0, 0, 0};
            y = layer_forward(m, l, x);
            drop(m, x);   /* x's saves (by the layer's first norm) get their handles here */
            if (record && m->lspan && m->hooks.recipe_span && x->h0 && !m->err)
                m->hooks.recipe_span(m->hooks.user, x->h0, op0, (uint32_t)m->stats.ops - 1);
        }
        drop(m, x);
        x = y;
    }
    gpt_tensor *h = op_rmsnorm(m, x, m->normf, "final.norm", -1, SITE);   /* (B,T,C) */
    drop(m, x);
    float loss;
    if (m->cfg.loss == GPT_LOSS_CHUNKED) {
        loss = op_lxent(m, h, m->wout, SITE);                             /* (chunk,V) at a time */
        drop(m, h);
    } else {
        gpt_tensor *logits = op_matmul(m, h, m->wout, "logits", -1, SITE);    /* (B,T,V) */
        drop(m, h);
        loss = op_xent(m, logits, SITE);
        drop(m, logits);
    }
    if (m->in_step) m->stats.fwd_seconds += gpt_now_s() - t0;
    return loss;
}

/* Waits for the ops' queued work (ops.h); a failed kernel or transfer (sticky on the GPU) fails
 * the model: 1, else m->err. */
static int ops_check(gpt_model *m) {
    char e[300];
    if (m->ops->sync(e, sizeof e)) {
        if (!m->err) fail(m, "%s", e);
        return 1;
    }
    return m->err;
}

/* Checks one micro-batch's shape and tokens and makes it current. */
static int begin(gpt_model *m, const int *tokens, const int *targets, int B, int T) {
    m->err = 0;
    m->errmsg[0] = 0;
    if (B < 1 || T < 1 || T > m->cfg.seq) {
        fail(m, "batch %d x %d: the sequence must be 1..%d", B, T, m->cfg.seq);
        return 1;
    }
    for (int i = 0; i < B * T; i++)
        if ((unsigned)tokens[i] >= (unsigned)m->cfg.vocab || (unsigned)targets[i] >= (unsigned)m->cfg.vocab) {
            fail(m, "token %d at %d is outside the vocabulary 0..%d", tokens[i], i, m->cfg.vocab - 1);
            return 1;
        }
    m->tokens = tokens; m->targets = targets; m->B = B; m->T = T;
    if (m->ops->ints_alloc) {   /* device memory: the kernels read a device copy of the ints */
        size_t n = (size_t)B * T;
        if (n > m->captok) {
            m->ops->ints_free(m->dtok);
            m->dtok = m->ops->ints_alloc(2 * n);
            m->captok = m->dtok ? n : 0;
            if (!m->dtok) { ops_check(m); if (!m->err) fail(m, "cannot allocate the tokens on %s", m->ops->name); return 1; }
        }
        m->ops->upload(m->dtok, tokens, n * sizeof(int));
        m->ops->upload(m->dtok + n, targets, n * sizeof(int));
        m->tokens = m->dtok;
        m->targets = m->dtok + n;
    }
    return ops_check(m);
}

static void note_peaks(gpt_model *m) {
    if (m->mem->peak > m->stats.peak_bytes) m->stats.peak_bytes = m->mem->peak;
    if (m->mem->act_peak > m->stats.act_peak_bytes) m->stats.act_peak_bytes = m->mem->act_peak;
}

int gpt_step_begin(gpt_model *m, int step) {
    m->err = 0;
    m->errmsg[0] = 0;
    if (m->in_step) { fail(m, "gpt_step_begin: a step is open"); return 1; }
    memset(&m->stats, 0, sizeof m->stats);
    gpt_mem_reset_peak(m->mem);
    m->in_step = 1;
    m->step_micro = 0;
    m->hooks.iter_begin(m->hooks.user, step);
    return 0;
}

int gpt_step_end(gpt_model *m) {
    if (!m->in_step) { fail(m, "gpt_step_end: no step is open"); return 1; }
    note_peaks(m);
    m->hooks.iter_end(m->hooks.user);
    m->in_step = 0;
    return m->err;
}

int gpt_step_micro(gpt_model *m, const int *tokens, const int *targets, int B, int T, float dloss,
                   float *loss) {
    if (!m->in_step) { m->err = 0; fail(m, "gpt_step_micro outside a step (call gpt_step_begin)"); return 1; }
    if (begin(m, tokens, targets, B, T)) return 1;
    if (!m->grads_ready) {
        for (int i = 0; i < m->nparams && !m->err; i++) {
            gpt_tensor *p = m->params[i];
            char name[64];
            snprintf(name, sizeof name, "grad.%s", p->name);
            p->grad = gpt_mem_alloc(m->mem, name, p->n * sizeof(float), GPT_MEM_GRAD);
            if (!p->grad) fail(m, "%s", m->mem->err);
        }
        if (m->err) return 1;
        m->grads_ready = 1;
    }
    if (m->step_micro == 0)
        for (int i = 0; i < m->nparams; i++) m->ops->zero(m->params[i]->grad->ptr, m->params[i]->n * sizeof(float));
    m->step_micro++;
    m->dloss = dloss;
    float l = forward(m, 1);
    m->recording = 0;
    backward_to(m, 0);
    note_peaks(m);
    end_iteration(m);
    if (ops_check(m)) return 1;
    m->stats.micro++;
    m->stats.tokens += (uint64_t)B * T;
    *loss = l;
    return 0;
}

int gpt_step_eval(gpt_model *m, const int *tokens, const int *targets, int B, int T, float *loss) {
    if (!m->in_step) { m->err = 0; fail(m, "gpt_step_eval outside a step (call gpt_step_begin)"); return 1; }
    if (begin(m, tokens, targets, B, T)) return 1;
    float l = forward(m, 0);
    note_peaks(m);
    end_iteration(m);
    if (ops_check(m)) return 1;
    m->stats.tokens += (uint64_t)B * T;
    *loss = l;
    return 0;
}

int gpt_forward(gpt_model *m, const int *tokens, const int *targets, int B, int T, float *loss) {
    if (begin(m, tokens, targets, B, T)) return 1;
    float l = forward(m, 0);
    end_iteration(m);
    if (m->err) return 1;
    *loss = l;
    return 0;
}

int gpt_forward_backward(gpt_model *m, const int *tokens, const int *targets, int B, int T, int step,
                         float *loss) {
    if (gpt_step_begin(m, step)) return 1;
    int rc = gpt_step_micro(m, tokens, targets, B, T, 1.0f, loss);
    char msg[sizeof m->errmsg];
    memcpy(msg, m->errmsg, sizeof msg);
    gpt_step_end(m);
    if (rc) { m->err = 1; memcpy(m->errmsg, msg, sizeof msg); }
    return rc;
}

int gpt_step_update(gpt_model *m, float lr) {
    m->err = 0;
    if (!m->grads_ready) { fail(m, "gpt_update before any backward"); return 1; }
    for (int i = 0; i < m->nparams; i++) {
        gpt_tensor *p = m->params[i];
        if (!p->adam_m) {
            /* the optimizer state comes into being at the first update (lazily, as in torch) */
            if (m->in_step) report_op(m, OP_ADAMW_INIT, SITE, 0);
            char name[64];
            snprintf(name, sizeof name, "adam.m.%s", p->name);
            p->adam_m = gpt_mem_calloc(m->mem, name, p->n * sizeof(float), GPT_MEM_OPTIM);
            snprintf(name, sizeof name, "adam.v.%s", p->name);
            p->adam_v = p->adam_m ? gpt_mem_calloc(m->mem, name, p->n * sizeof(float), GPT_MEM_OPTIM) : NULL;
            if (!p->adam_v) { fail(m, "%s", m->mem->err); return 1; }
        }
    }
    m->adam_t++;
    for (int i = 0; i < m->nparams; i++) {
        gpt_tensor *p = m->params[i];
        if (m->in_step) report_op(m, OP_ADAMW, SITE, 0);
        m->ops->adamw(F(p->buf), F(p->adam_m), F(p->adam_v), F(p->grad), p->n, lr, m->cfg.beta1, m->cfg.beta2,
                m->cfg.adam_eps, p->decay ? m->cfg.weight_decay : 0.0f, m->adam_t);
    }
    if (m->in_step) note_peaks(m);
    return ops_check(m);
}

int gpt_update(gpt_model *m, float lr) { return gpt_step_update(m, lr); }
/* ------------------------------------------------------------------------------------------ */
/* init                                                                                         */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static gpt_tensor *new_param(gpt_model *m, const char *name, int layer, int rows, int cols, float bound,
                             uint64_t *rng) {
    if (m->err) return NULL;
    gpt_tensor *t = calloc(1, sizeof *t);
    if (!t) { fail(m, "out of host memory"); return NULL; }
    if (layer >= 0) snprintf(t->name, sizeof t->name, "L%d.%s", layer, name);
    else snprintf(t->name, sizeof t->name, "%s", name);
    t->layer = t->lseq = -1;   /* a parameter: never a layer's activation */
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->n = (size_t)rows * (cols ? cols : 1);
    t->decay = cols ? 1 : 0;
    m->params[m->nparams++] = t;
    t->buf = gpt_mem_alloc(m->mem, t->name, t->n * sizeof(float), GPT_MEM_WEIGHT);
    if (!t->buf) { fail(m, "%s", m->mem->err); return t; }
    /* made on the host, then uploaded (device memory) or used in place (host memory) */
    float *w = m->ops->device_memory ? malloc(t->n * sizeof(float)) : F(t->buf);
    if (!w) { fail(m, "out of host memory"); return t; }
    for (size_t i = 0; i < t->n; i++) {
        if (bound == 0.0f) { w[i] = 1.0f; continue; }
        /* 24 random bits -> an exact float in [-1, 1), times the bound: one rounding */
        float u = (float)((int32_t)(splitmix64(rng) >> 40) - (1 << 23)) * (1.0f / (1 << 23));
        w[i] = u * bound;
    }
    if (w != F(t->buf)) {
        m->ops->upload(t->buf->ptr, w, t->n * sizeof(float));
        free(w);
    }
    return t;
}

int gpt_model_init(gpt_model *m, const gpt_config *c, gpt_mem *mem, const gpt_hooks *hooks, gpt_mode mode,
                   uint64_t seed) {
    memset(m, 0, sizeof *m);
    m->cfg = *c;
    m->mem = mem;
    m->hooks = *hooks;
    m->mode = mode;
    m->ops = mem->ops ? mem->ops : &gpt_ops_cpu;
    if (gpt_config_check(c, m->errmsg, sizeof m->errmsg)) { m->err = 1; return 1; }
    if (c->moe_experts && !m->ops->has_moe) {
        fail(m, "the MoE layers (experts %d) run on the CPU kernels only, not on %s: use --device cpu-sim or no experts",
             c->moe_experts, m->ops->name);
        return 1;
    }
    /* a routing makes at most E + E/2 runs (gpt_moe_tile: each expert one run more than its
     * whole tiles, and the tiles of all experts hold M*K <= E/2 tiles' rows) */
    if (c->moe_experts && m->ops->moe_runs_max && c->moe_experts + c->moe_experts / 2 > m->ops->moe_runs_max) {
        fail(m, "MoE on %s: %d experts can make %d expert runs, its kernels take at most %d: use at most %d experts",
             m->ops->name, c->moe_experts, c->moe_experts + c->moe_experts / 2, m->ops->moe_runs_max,
             (2 * m->ops->moe_runs_max + 1) / 3);
        return 1;
    }
    gpt_kernels_init();
    int L = c->layers, C = c->hidden, hd = C / c->heads, KVd = hd * c->kv_heads, Fd = c->ffn, V = c->vocab;
    m->params = calloc((size_t)param_total(c), sizeof *m->params);
    m->layer = calloc((size_t)L, sizeof *m->layer);
    /* every mode but recompute (which checkpoints layers itself) can rebuild a layer whole */
    if (mode != GPT_MODE_RECOMPUTE && !(m->lspan = calloc((size_t)L, sizeof *m->lspan))) {
        fail(m, "out of host memory");
        return 1;
    }
    if (!m->params || !m->layer) { fail(m, "out of host memory"); return 1; }
    uint64_t rng = seed ^ 0x5eed5eed5eed5eedull;
    float resid = 1.0f / sqrtf(2.0f * L);
    m->wte = new_param(m, "wte", -1, V, C, 1.0f, &rng);
    for (int l = 0; l < L; l++) {
        gpt_layer *p = &m->layer[l];
        p->rms1 = new_param(m, "rms1", l, C, 0, 0.0f, &rng);
        p->wq = new_param(m, "wq", l, C, C, 1.0f / sqrtf((float)C), &rng);
        p->wk = new_param(m, "wk", l, KVd, C, 1.0f / sqrtf((float)C), &rng);
        p->wv = new_param(m, "wv", l, KVd, C, 1.0f / sqrtf((float)C), &rng);
        p->wo = new_param(m, "wo", l, C, C, resid / sqrtf((float)C), &rng);
        p->rms2 = new_param(m, "rms2", l, C, 0, 0.0f, &rng);
        if (c->moe_experts) {
            int E = c->moe_experts;
            p->wg = new_param(m, "wg", l, E, C, 1.0f / sqrtf((float)C), &rng);
            p->ew1 = calloc((size_t)E * 3, sizeof *p->ew1);
            if (!p->ew1) { fail(m, "out of host memory"); return 1; }
            p->ew3 = p->ew1 + E;
            p->ew2 = p->ew1 + 2 * E;
            for (int e = 0; e < E; e++) {
                char nm[32];
                snprintf(nm, sizeof nm, "e%d.w1", e);
                p->ew1[e] = new_param(m, nm, l, Fd, C, 1.0f / sqrtf((float)C), &rng);
                snprintf(nm, sizeof nm, "e%d.w3", e);
                p->ew3[e] = new_param(m, nm, l, Fd, C, 1.0f / sqrtf((float)C), &rng);
                snprintf(nm, sizeof nm, "e%d.w2", e);
                p->ew2[e] = new_param(m, nm, l, C, Fd, resid / sqrtf((float)Fd), &rng);
            }
        } else {
            p->w1 = new_param(m, "w1", l, Fd, C, 1.0f / sqrtf((float)C), &rng);
            p->w3 = new_param(m, "w3", l, Fd, C, 1.0f / sqrtf((float)C), &rng);
            p->w2 = new_param(m, "w2", l, C, Fd, resid / sqrtf((float)Fd), &rng);
        }
    }
    m->normf = new_param(m, "normf", -1, C, 0, 0.0f, &rng);
    m->wout = new_param(m, "wout", -1, V, C, 1.0f / sqrtf((float)C), &rng);
    if (m->err) return 1;
    /* RoPE tables (T, hd/2): angles in double, rounded once to float */
    int h2 = hd / 2, T = c->seq;
    m->rope_cos = gpt_mem_alloc(mem, "rope.cos", (size_t)T * h2 * sizeof(float), GPT_MEM_CONST);
    m->rope_sin = m->rope_cos ? gpt_mem_alloc(mem, "rope.sin", (size_t)T * h2 * sizeof(float), GPT_MEM_CONST) : NULL;
    if (!m->rope_sin) { fail(m, "%s", mem->err); return 1; }
    size_t nt = (size_t)T * h2;
    float *cs = malloc(2 * nt * sizeof(float));
    if (!cs) { fail(m, "out of host memory"); return 1; }
    for (int t = 0; t < T; t++)
        for (int j = 0; j < h2; j++) {
            double inv = pow((double)c->rope_theta, -2.0 * j / hd);
            double ang = t * inv;
            cs[(size_t)t * h2 + j] = (float)cos(ang);
            cs[nt + (size_t)t * h2 + j] = (float)sin(ang);
        }
    m->ops->upload(m->rope_cos->ptr, cs, nt * sizeof(float));
    m->ops->upload(m->rope_sin->ptr, cs + nt, nt * sizeof(float));
    free(cs);
    return ops_check(m);
}

void gpt_model_free(gpt_model *m) {
    if (m->ops) { char e[300]; (void)m->ops->sync(e, sizeof e); }   /* nothing freed under a kernel */
    end_iteration(m);
    for (int i = 0; i < m->nparams; i++) {
        gpt_tensor *p = m->params[i];
        gpt_buf_unref(m->mem, p->buf);
        gpt_buf_unref(m->mem, p->grad);
        gpt_buf_unref(m->mem, p->adam_m);
        gpt_buf_unref(m->mem, p->adam_v);
        free(p);
    }
    if (m->rope_cos) gpt_buf_unref(m->mem, m->rope_cos);
    if (m->rope_sin) gpt_buf_unref(m->mem, m->rope_sin);
    for (int l = 0; m->layer && l < m->cfg.layers; l++) free(m->layer[l].ew1);
    free(m->params);
    free(m->layer);
    free(m->tape);
    free(m->lspan);
    m->lspan = NULL;
    free(m->hpool);
    free(m->hten);
    free(m->scr);
    if (m->ops && m->ops->ints_free) m->ops->ints_free(m->dtok);
    memset(m, 0, sizeof *m);
}

int gpt_save_weights(gpt_model *m, const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) { snprintf(m->errmsg, sizeof m->errmsg, "cannot write %.200s", tmp); return 1; }
    int moe = m->cfg.moe_experts > 0;
    int32_t hdr[12] = {0x57545047 /* "GPTW" */, moe ? 2 : 1, m->cfg.layers, m->cfg.hidden, m->cfg.heads,
                       m->cfg.kv_heads, m->cfg.ffn, m->cfg.vocab, m->cfg.seq, m->nparams,
                       m->cfg.moe_experts, m->cfg.moe_topk};
    int ok = fwrite(hdr, sizeof(int32_t), moe ? 12 : 10, f) == (size_t)(moe ? 12 : 10);
    for (int i = 0; ok && i < m->nparams; i++) {
        const float *w = F(m->params[i]->buf);
        float *wh = NULL;
        if (m->ops->device_memory) {
            wh = malloc(m->params[i]->n * sizeof(float));
            if (!wh) { ok = 0; break; }
            m->ops->download(wh, w, m->params[i]->n * sizeof(float));
            w = wh;
        }
        ok = fwrite(w, sizeof(float), m->params[i]->n, f) == m->params[i]->n;
        free(wh);
    }
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        snprintf(m->errmsg, sizeof m->errmsg, "writing %s failed (disk full?)", path);
        return 1;
    }
    return 0;
}
