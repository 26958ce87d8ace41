/* train.c: the reference trainer's schedule (train.h). */
#include "train.h"

#include "smartswap-alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int gpt_sched_seq(const gpt_schedule *s, int step, int micro) {
    if (s->seq_max <= s->seq_min) return s->seq_max;
    uint64_t r = mix(mix(mix(s->seed ^ 0x5E9u) ^ (uint64_t)step) ^ ((uint64_t)micro << 32));
    return s->seq_min + (int)(r % (uint64_t)(s->seq_max - s->seq_min + 1));
}

int gpt_batch_buf_init(gpt_batch_buf *b, const gpt_schedule *s) {
    size_t n = (size_t)s->batch * (size_t)s->seq_max;
    b->tok = malloc(n * sizeof *b->tok);
    b->tgt = malloc(n * sizeof *b->tgt);
    if (!b->tok || !b->tgt) { gpt_batch_buf_free(b); return 1; }
    return 0;
}

void gpt_batch_buf_free(gpt_batch_buf *b) {
    free(b->tok);
    free(b->tgt);
    b->tok = b->tgt = NULL;
}

int gpt_train_step(gpt_model *m, const gpt_data *d, const gpt_schedule *s, int step, gpt_batch_buf *b,
                   float *loss) {
    int N = s->accum < 1 ? 1 : s->accum;
    if (gpt_step_begin(m, step)) return 1;
    float sum = 0.0f;
    int rc = 0;
    for (int j = 0; j < N && !rc; j++) {
        int T = gpt_sched_seq(s, step, j);
        float l = 0.0f;
        gpt_data_batch(d, s->seed, step * N + j, s->batch, T, b->tok, b->tgt);
        rc = gpt_step_micro(m, b->tok, b->tgt, s->batch, T, 1.0f / (float)N, &l);
        sum += l;
    }
    if (!rc) rc = gpt_step_update(m, s->lr);
    char msg[sizeof m->errmsg];
    memcpy(msg, m->errmsg, sizeof msg);
    int rc2 = gpt_step_end(m);
    if (rc) { m->err = 1; memcpy(m->errmsg, msg, sizeof msg); return 1; }
    if (rc2) return 1;
    *loss = sum / (float)N;
    return 0;
}

int gpt_eval_step(gpt_model *m, const gpt_data *d, const gpt_schedule *s, int k, int iter, gpt_batch_buf *b,
                  float *loss) {
    if (gpt_step_begin(m, iter)) return 1;
    gpt_data_batch(d, s->seed ^ GPT_EVAL_SALT, k, s->batch, s->seq_max, b->tok, b->tgt);
    int rc = gpt_step_eval(m, b->tok, b->tgt, s->batch, s->seq_max, loss);
    char msg[sizeof m->errmsg];
    memcpy(msg, m->errmsg, sizeof msg);
    int rc2 = gpt_step_end(m);
    if (rc) { m->err = 1; memcpy(m->errmsg, msg, sizeof msg); return 1; }
    return rc2;
}

/* ---- the smallest budget (train.h) ------------------------------------------------------- */

typedef struct mb_rec {
    void    *ptr;
    uint64_t charged;
    uint64_t gran;          /* granule mode, a large block: the granules the allocator's rule counts for it */
    uint32_t cls;           /* granule mode, a small block: its size class (slots per granule) */
    int      kind, saves, last_op;
} mb_rec;

/* Granule mode: the small blocks of one size class (docs/allocator.md "Small blocks share
 * granules"): live, saved and >= min_swap, pinned by the current operator; peak: the most live
 * since the class last had none. */
typedef struct mb_cls { uint64_t live, swap, pin, peak; } mb_cls;

typedef struct mb_probe {
    uint64_t live;          /* non-state bytes live */
    uint64_t swappable;     /* saved (held by the tape), >= min_swap */
    uint64_t pinned;        /* of those, saved or loaded by the current operator */
    uint64_t min_swap, peak;
    uint64_t host_live, host_peak;  /* the pinned-pool bound of the saved buffers live (mb_host) */
    int      moe_e, moe_k;          /* MoE E:K (0: dense) */
    int      op, peak_op, bwd, peak_bwd;
    const char *name, *peak_name;
    gpt_buf **slots;
    size_t   nslots, cap;
    gpt_mem *mem;
    int      drop;          /* the hybrid's probe: every rebuildable save dropped (and rebuilt) */
    /* Granule mode (G > 0): the same accounting in the allocator's out-of-memory rule's units
     * (docs/allocator.md): a block of G or more ceil(bytes / G) (it starts at a granule boundary
     * and no other block starts in its last granule: live_g ..); the small pool's granules
     * class by class (cls: a class's granules fill before it takes another, so they are at most
     * ceil(peak / slots), and at most one per block that must stay resident). */
    uint64_t G, route_unit;
    uint64_t live_g, swappable_g, pinned_g, peak_g;
    mb_cls  *cls;           /* [G / 256 + 1] */
    uint32_t *used;         /* the classes met, nused of them */
    size_t   nused;
    int      peak_g_op, peak_g_bwd;
    const char *peak_g_name;
    char     err[160];
} mb_probe;

/* The slot of a save the probe dropped (drop mode): no buffer is held; backward rebuilds it. */
static gpt_buf mb_dropped_slot;

static int mb_state_kind(int k) { return k == GPT_MEM_WEIGHT || k == GPT_MEM_GRAD || k == GPT_MEM_OPTIM || k == GPT_MEM_CONST; }

static void mb_note(mb_probe *p) {
    uint64_t away = p->swappable - p->pinned;
    uint64_t need = p->live - away;
    if (need > p->peak) { p->peak = need; p->peak_op = p->op; p->peak_name = p->name; p->peak_bwd = p->bwd; }
    uint64_t need_g = p->live_g - (p->swappable_g - p->pinned_g);
    for (size_t i = 0; i < p->nused; i++) {
        const mb_cls *k = &p->cls[p->used[i]];
        uint64_t must = k->live - (k->swap - k->pin), fill = (k->peak + p->used[i] - 1) / p->used[i];
        need_g += must < fill ? must : fill;
    }
    if (need_g > p->peak_g) { p->peak_g = need_g; p->peak_g_op = p->op; p->peak_g_name = p->name; p->peak_g_bwd = p->bwd; }
}

/* The granules the out-of-memory rule counts for a large block of `charged` bytes (granule
 * mode; 0 for a small one, counted by its class). */
static uint64_t mb_gran(const mb_probe *p, uint64_t charged) {
    if (!p->G || charged < p->G) return 0;
    return (charged + p->G - 1) / p->G;
}

/* A small block's class (granule mode; 0: none), the allocator's own rule, and its counts: field f
 * of r's class += d. */
static uint32_t mb_class(const mb_probe *p, uint64_t charged) { return ss_alloc_small_class(p->G, charged); }
#define MB_CLS(p, r, f, d) do { if ((r)->cls) (p)->cls[(r)->cls].f += (uint64_t)(d); } while (0)

static int mb_alloc(void *user, size_t bytes, int kind, void **ptr, void **impl, char *err, size_t errlen) {
    mb_probe *p = user;
    mb_rec *r = calloc(1, sizeof *r);
    uint64_t ch = (bytes + GPT_MEM_ALIGN - 1) / GPT_MEM_ALIGN * GPT_MEM_ALIGN;
    if (!r || posix_memalign(&r->ptr, 64, ch ? ch : 64)) {
        free(r);
        snprintf(err, errlen, "out of host memory (probe)");
        return 1;
    }
    r->charged = ch;
    r->gran = mb_gran(p, ch);
    r->kind = kind;
    r->last_op = -1;
    *ptr = r->ptr;
    *impl = r;
    if (!mb_state_kind(kind)) {
        r->cls = mb_class(p, ch);
        if (r->cls) {
            mb_cls *k = &p->cls[r->cls];
            if (!k->live && !k->peak) {
                size_t i = 0;
                while (i < p->nused && p->used[i] != r->cls) i++;
                if (i == p->nused) p->used[p->nused++] = r->cls;
            }
            if (++k->live > k->peak) k->peak = k->live;
        }
        p->live += ch;
        p->live_g += r->gran;
        mb_note(p);
    }
    return 0;
}
static int mb_alloc0(void *user, size_t bytes, void **ptr, void **impl, char *err, size_t errlen) {
    return mb_alloc(user, bytes, GPT_MEM_ACT, ptr, impl, err, errlen);
}
static void mb_free(void *user, void *ptr, void *impl) {
    mb_probe *p = user;
    mb_rec *r = impl;
    (void)ptr;
    if (!r) return;
    if (!mb_state_kind(r->kind)) {
        p->live -= r->charged;
        p->live_g -= r->gran;
        MB_CLS(p, r, live, -1);
        if (r->cls && !p->cls[r->cls].live) p->cls[r->cls].peak = 0;   /* its granules went back */
    }
    free(r->ptr);
    free(r);
}

static void mb_touch(mb_probe *p, mb_rec *r) {
    if (r->charged >= p->min_swap && r->last_op != p->op) {
        p->pinned += r->charged;
        p->pinned_g += r->gran;
        MB_CLS(p, r, pin, 1);
    }
    r->last_op = p->op;
}

static void mb_iter_begin(void *u, int step) { (void)u; (void)step; }
static void mb_iter_end(void *u) { (void)u; }
static void mb_op(void *u, const char *name, uint64_t site) {
    mb_probe *p = u;
    (void)site;
    p->op++;
    p->pinned = 0;
    p->pinned_g = 0;
    for (size_t i = 0; i < p->nused; i++) p->cls[p->used[i]].pin = 0;
    p->name = name;
    size_t n = strlen(name);
    p->bwd = n > 4 && !strcmp(name + n - 4, "_bwd");
}
/* What one saved buffer of `charged` bytes can hold in the pinned host pool at most: its size
 * class (ss_hostpool_class_bytes; the executor keeps one host copy per saved block). With MoE the
 * probe routes every token to experts 0..K-1, K per-expert tensors of B*T rows each, while a run
 * may spread the same B*T*K rows over up to E experts, each rounded to its own class (at least
 * 4 KiB, at most 25 % above its bytes): sum_e class(n_e w) <= 4 KiB * E + 1.25 * K * (B*T*w), so
 * each probed per-expert buffer (L<l>.moe.e<e>.*) is charged 1.25 x its class + 4 KiB * ceil(E / K). */
static uint64_t mb_host(const mb_probe *p, const gpt_buf *buf, uint64_t charged) {
    int moe = p->moe_e > 0 && p->moe_k > 0 && strstr(buf->name, ".moe.e");
    uint64_t per = moe ? (uint64_t)((p->moe_e + p->moe_k - 1) / p->moe_k) : 0;
    /* granule mode: the model's routing slack is in granules (gpt_model.moe_route_unit); the
     * host copy is the same whatever the device's unit, so count the 256-byte slack only */
    uint64_t u = p->route_unit;
    if (moe && u > GPT_MEM_ALIGN && charged > per * (u - GPT_MEM_ALIGN)) charged -= per * (u - GPT_MEM_ALIGN);
    uint64_t c = ss_hostpool_class_bytes(charged);
    if (moe) c += (c + 3) / 4 + 4096ull * per;
    return c;
}

static int mb_save(void *u, gpt_buf *buf, const gpt_save_info *info, uint64_t *h) {
    mb_probe *p = u;
    mb_rec *r = buf->impl;
    (void)info;
    if (p->nslots == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 256;
        gpt_buf **t = realloc(p->slots, cap * sizeof *t);
        if (!t) { snprintf(p->err, sizeof p->err, "out of host memory (probe)"); return 1; }
        p->slots = t;
        p->cap = cap;
    }
    if (p->drop && info && info->rebuildable) {
        /* as the hybrid's store drops a save it plans to recompute: nothing held, and backward
         * rebuilds it into a buffer of its own (held until its last save goes; not swappable)
         * from its sources, loaded for the operator that needs it */
        p->slots[p->nslots++] = &mb_dropped_slot;
        *h = p->nslots;
        return 0;
    }
    if (r->saves == 0) {
        p->host_live += mb_host(p, buf, r->charged);
        if (p->host_live > p->host_peak) p->host_peak = p->host_live;
    }
    if (r->saves++ == 0 && r->charged >= p->min_swap) {
        p->swappable += r->charged;
        p->swappable_g += r->gran;
        MB_CLS(p, r, swap, 1);
    }
    mb_touch(p, r);
    gpt_buf_ref(buf);
    p->slots[p->nslots++] = buf;
    *h = p->nslots;
    mb_note(p);
    return 0;
}
static int mb_load(void *u, uint64_t h, void **ptr) {
    mb_probe *p = u;
    if (!h || h > p->nslots || !p->slots[h - 1] || p->slots[h - 1] == &mb_dropped_slot) {
        snprintf(p->err, sizeof p->err, "probe: bad handle");
        return 1;
    }
    gpt_buf *b = p->slots[h - 1];
    mb_touch(p, b->impl);
    *ptr = b->ptr;
    mb_note(p);
    return 0;
}
static void mb_release(void *u, uint64_t h) {
    mb_probe *p = u;
    if (!h || h > p->nslots || !p->slots[h - 1]) return;
    gpt_buf *b = p->slots[h - 1];
    if (b == &mb_dropped_slot) {
        p->slots[h - 1] = NULL;
        while (p->nslots && !p->slots[p->nslots - 1]) p->nslots--;
        return;
    }
    mb_rec *r = b->impl;
    p->slots[h - 1] = NULL;
    if (r->saves == 1) p->host_live -= mb_host(p, b, r->charged);
    if (--r->saves == 0 && r->charged >= p->min_swap) {
        p->swappable -= r->charged;
        p->swappable_g -= r->gran;
        MB_CLS(p, r, swap, -1);
        if (r->last_op == p->op) { p->pinned -= r->charged; p->pinned_g -= r->gran; MB_CLS(p, r, pin, -1); }
    }
    gpt_buf_unref(p->mem, b);
    while (p->nslots && !p->slots[p->nslots - 1]) p->nslots--;
}
static const char *mb_error(void *u) { return ((mb_probe *)u)->err; }
static int mb_dropped(void *u, uint64_t h) {
    mb_probe *p = u;
    return h && h <= p->nslots && p->slots[h - 1] == &mb_dropped_slot;
}

int gpt_min_budget_probe(const gpt_config *c, const gpt_schedule *s, uint64_t min_swap, uint64_t unit,
                         gpt_min_budget *out, char *err, size_t errlen) {
    return gpt_min_budget_probe_mode(c, s, GPT_MODE_SMARTSWAP, min_swap, unit, out, err, errlen);
}

static int probe_run(const gpt_config *c, const gpt_schedule *s, int mode, int drop, uint64_t min_swap,
                     uint64_t unit, gpt_min_budget *out, char *err, size_t errlen);

int gpt_min_budget_probe_mode(const gpt_config *c, const gpt_schedule *s, int mode, uint64_t min_swap,
                              uint64_t unit, gpt_min_budget *out, char *err, size_t errlen) {
    return probe_run(c, s, mode, 0, min_swap, unit, out, err, errlen);
}

int gpt_min_budget_probe_hybrid(const gpt_config *c, const gpt_schedule *s, uint64_t min_swap, uint64_t unit,
                                gpt_min_budget *out, char *err, size_t errlen) {
    gpt_min_budget d;
    if (probe_run(c, s, GPT_MODE_SMARTSWAP, 0, min_swap, unit, out, err, errlen) ||
        probe_run(c, s, GPT_MODE_SMARTSWAP, 1, min_swap, unit, &d, err, errlen))
        return 1;
    if (d.min_budget_bytes > out->min_budget_bytes) {
        uint64_t host = out->host_bytes;   /* the host need: every save kept is the larger */
        int host_moe = out->host_moe;
        *out = d;
        out->host_bytes = host > d.host_bytes ? host : d.host_bytes;
        out->host_moe = host_moe;
    }
    return 0;
}

/* The unit of the probe's routing slack (gpt_model.moe_route_unit: each forced per-expert buffer
 * gets ceil(E/K) of them). Plain segments: 256 B. Granules of G: what real routing can add over
 * the forced one, in granules (docs/trainer.md "The smallest budget"): it makes at most
 * sum_e ceil(n_e / tile) run buffers of a kind (sum_e n_e = M*K, tile = gpt_moe_tile), fewer
 * than E + M*K/tile <= E + E/2 (E when 2K >= E: tile = M, one run an expert), each rounded up by
 * less than a granule, while the forced routing's nbuf = K * ceil(M/tile) buffers already hold
 * the rows (a shorter sequence's fewer): so S = E (+ E/2) granules spread over the nbuf
 * buffers, ceil(S / nbuf) granules each, cover it. */
static uint64_t probe_route_unit(const gpt_config *c, int M, uint64_t G) {
    int E = c->moe_experts, K = c->moe_topk;
    if (!G || E < 1 || K < 1) return GPT_MEM_ALIGN;
    int tile = gpt_moe_tile(M, E, K);
    uint64_t nbuf = (uint64_t)K * (uint64_t)((M + tile - 1) / tile);
    uint64_t S = (uint64_t)E + (2 * K >= E ? 0 : (uint64_t)E / 2);
    uint64_t k = (S + nbuf - 1) / nbuf, per = (uint64_t)((E + K - 1) / K);
    if (k < 1) k = 1;
    /* ceil(E/K) units of at least k granules in all */
    uint64_t u = (k * G + per - 1) / per;
    return (u + GPT_MEM_ALIGN - 1) / GPT_MEM_ALIGN * GPT_MEM_ALIGN;
}

static int probe_run(const gpt_config *c, const gpt_schedule *s, int mode, int drop, uint64_t min_swap,
                     uint64_t unit, gpt_min_budget *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    /* none and recompute keep every saved tensor resident: nothing can be swapped away, and
     * recompute's backward holds a re-run layer's tensors (its own working set) */
    int swaps = mode == GPT_MODE_SMARTSWAP || mode == GPT_MODE_OFFLOAD_ALL;
    if (!swaps) min_swap = UINT64_MAX;
    if (!unit) unit = GPT_MEM_ALIGN;
    gpt_config pc = *c;
    int T = s && s->seq_max > 0 ? s->seq_max : c->seq;
    int B = s && s->batch > 0 ? s->batch : c->batch;
    if (T > pc.seq) pc.seq = T;
    mb_probe p;
    memset(&p, 0, sizeof p);
    p.min_swap = min_swap;
    p.drop = drop;
    p.moe_e = pc.moe_experts;
    p.moe_k = pc.moe_topk;
    p.op = -1;
    p.name = "init";
    p.G = unit > GPT_MEM_ALIGN ? unit : 0;   /* a unit above 256 B is the allocator's granule */
    p.route_unit = probe_route_unit(&pc, B * T, p.G);
    if (p.G) {
        p.cls = calloc((size_t)(p.G / GPT_MEM_ALIGN + 1), sizeof *p.cls);
        p.used = calloc((size_t)(p.G / GPT_MEM_ALIGN + 1), sizeof *p.used);
        if (!p.cls || !p.used) {
            free(p.cls);
            free(p.used);
            snprintf(err, errlen, "out of host memory (probe)");
            return 1;
        }
    }
    gpt_mem mem;
    gpt_mem_backend be = {"probe", &p, mb_alloc0, mb_free, NULL, mb_alloc};
    gpt_mem_init_backend(&mem, &be, 0);
    p.mem = &mem;
    gpt_hooks h = {&p, mb_iter_begin, mb_iter_end, mb_op, mb_save, mb_load, mb_release, mb_error,
                   drop ? mb_dropped : NULL, NULL, NULL};
    gpt_model m;
    int rc = 1;
    size_t n = (size_t)B * (size_t)T;
    int *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    if (!tok || !tgt) { snprintf(err, errlen, "out of host memory (probe)"); goto out; }
    for (size_t i = 0; i < n; i++) { tok[i] = (int)(i * 7 % (size_t)pc.vocab); tgt[i] = (int)((i * 7 + 1) % (size_t)pc.vocab); }
    if (gpt_model_init(&m, &pc, &mem, &h, mode == GPT_MODE_RECOMPUTE ? GPT_MODE_RECOMPUTE : GPT_MODE_NONE, 1)) {
        snprintf(err, errlen, "probe: %s", m.errmsg);
        gpt_model_free(&m);
        goto out;
    }
    m.moe_route_force = 1;
    m.moe_route_unit = (size_t)p.route_unit;
    float loss;
    int e = gpt_step_begin(&m, 0);
    if (!e) e = gpt_step_micro(&m, tok, tgt, B, T, 1.0f, &loss);
    if (!e) e = gpt_step_update(&m, 1e-3f);
    int e2 = gpt_step_end(&m);
    if (!e && !e2 && s && s->eval_every) {
        e = gpt_step_begin(&m, 1);
        if (!e) e = gpt_step_eval(&m, tok, tgt, B, T, &loss);
        e2 = gpt_step_end(&m);
    }
    if (e || e2) snprintf(err, errlen, "probe: %s", m.errmsg);
    else rc = 0;
    gpt_model_free(&m);
    if (!rc) {
        out->state_bytes = gpt_state_bytes(&pc);
        out->work_bytes = p.peak;
        uint64_t tot = out->state_bytes + p.peak;
        out->min_budget_bytes = (tot + unit - 1) / unit * unit;
        out->unit = unit;
        out->mode = swaps ? GPT_MODE_SMARTSWAP : mode;
        out->seq = T;
        out->backward = p.peak_bwd;
        out->op_index = p.peak_op;
        out->host_bytes = p.host_peak;
        out->host_moe = p.moe_e > 0 && p.moe_k > 0;
        snprintf(out->op, sizeof out->op, "%s", p.peak_name ? p.peak_name : "?");
        if (p.G) {
            /* the out-of-memory rule in granules (docs/allocator.md): the persistent pool packs
             * the state from a granule boundary, ceil(state / G); then the peak over the
             * iteration of what must stay resident, counted as the rule counts it */
            uint64_t pg = (out->state_bytes + p.G - 1) / p.G;
            out->min_budget_bytes = (pg + p.peak_g) * p.G;
            out->work_bytes = out->min_budget_bytes - out->state_bytes;
            out->backward = p.peak_g_bwd;
            out->op_index = p.peak_g_op;
            snprintf(out->op, sizeof out->op, "%s", p.peak_g_name ? p.peak_g_name : "?");
        }
    }
out:
    for (size_t i = p.nslots; i > 0; i--) mb_release(&p, i);
    free(p.slots);
    free(p.cls);
    free(p.used);
    gpt_mem_destroy(&mem);
    free(tok);
    free(tgt);
    return rc;
}

int gpt_min_budget_refuse(const gpt_min_budget *mb, uint64_t budget, char *msg, size_t len) {
    if (budget >= mb->min_budget_bytes) return 0;
    char a[32], b[32], d[32], e[32];
    snprintf(msg, len,
             "--budget %s is below the smallest budget that can train this configuration: %s (%llu bytes) = "
             "state %s + the largest working set of one operator %s (%s%s, %d tokens a row, every token "
             "routed to one expert%s)", gpt_fmt_bytes(budget, a, sizeof a), gpt_fmt_bytes(mb->min_budget_bytes, b, sizeof b),
             (unsigned long long)mb->min_budget_bytes, gpt_fmt_bytes(mb->state_bytes, d, sizeof d),
             gpt_fmt_bytes(mb->work_bytes, e, sizeof e), mb->op, mb->backward ? ", backward" : "", mb->seq,
             mb->mode == GPT_MODE_RECOMPUTE ? "; mode recompute, which keeps its saved tensors resident"
             : mb->mode == GPT_MODE_NONE ? "; mode none, which keeps its saved tensors resident" : "");
    return 1;
}

int gpt_host_mem_refuse(const gpt_min_budget *mb, uint64_t host_mem, char *msg, size_t len) {
    if (!host_mem || host_mem >= mb->host_bytes) return 0;
    char a[32], b[32];
    snprintf(msg, len,
             "--host-mem %s is below the pinned host memory this configuration may hold while swapping: %s "
             "(%llu bytes: every saved tensor's host copy at once, in the host pool's size classes, at %d tokens "
             "a row%s)", gpt_fmt_bytes(host_mem, a, sizeof a), gpt_fmt_bytes(mb->host_bytes, b, sizeof b),
             (unsigned long long)mb->host_bytes, mb->seq, mb->host_moe ? ", the experts' rows spread over every expert" : "");
    return 1;
}
