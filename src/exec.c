/* exec.c: the executor (DESIGN.md part "exec"; docs/executor.md). It implements the
 * ssi_exec_ops seam of api.h:
 *
 *  - save: matches the saved tensor to an entry of the iteration's plan by features (exact
 *    first, then the best score >= options.match_threshold) and schedules its swap-out (after
 *    entry.out_op), its release (entry.free_op) and its swap-in (entry.in_op). Offload-all mode
 *    issues the swap-out at once instead.
 *  - op(idx), in this order, which is the simulator's (sim.c, steps 8 of idx-1, then 1 and 3):
 *    swap-outs due after operator idx-1 (an event on the compute stream, the D2H stream waits on
 *    it, copies into a host-pool buffer, records the copy's event; SS_MEM_SMARTSWAP hands the
 *    block to ss_alloc_free_at(free point, event)); the free points due at idx (SS_MEM_SMARTSWAP:
 *    ss_alloc_reach, then the NaN poison; SS_MEM_FRAMEWORK: one event query, a stream wait if
 *    late, then SS_ACTION_DROP); swap-ins due at idx (a new block, or SS_ACTION_ALLOC, and the
 *    H2D copy after the compute stream and the swap-out's event).
 *  - load: the consumer stream waits on the swap-in's event (a counted stall when it was still
 *    running); a tensor whose swap-in was never issued is brought in at once (a counted miss).
 *  - release: frees the device copy (ordered after any copy into it) and the host buffer.
 *  - the eviction callback of the allocator (SS_MEM_SMARTSWAP): swaps out the resident saved
 *    tensor whose next use is farthest away, waits for the copy, frees its block.
 *
 * Operator indices of the plan are relative to the iteration; the allocator's release counter
 * k is global: base_k (the sum of earlier iterations' lengths, plus one each) + index.
 *
 * Locking: every slot but op runs with ctx->lock held (api.c); op takes it itself. The
 * allocator may call the eviction callback from inside a swap-in (this thread holds ctx->lock)
 * or from the caller's own allocation (it does not): a thread-local marks which.
 * Ownership: per-tensor state (struct xt) hangs off ssi_handle.exec and on the executor's list;
 * host buffers belong to the executor from swap-out to release (or to the load that finds the
 * swap-in complete); events to the executor's pool.
 */
#include "exec.h"
#include "policy.h"
#include "recompute.h"

#include <math.h>
#include <stdio.h>

static _Thread_local ss_ctx_t *tl_held;   /* this thread holds ctx->lock inside the executor */

enum { X_RES = 0, X_OUT, X_HOST, X_ALLOCQ, X_IN, X_LOADED };

typedef struct xt {
    struct xt *prev, *next;
    uint64_t hv, iter, use_iter;
    uint32_t ord, save_op, last_op;
    int      state, planned, counted, fallback;
    uint32_t entry;
    ss_plan_entry sch;         /* a copy of the matched entry (plans may be freed later) */
    uint64_t bytes, free_k;
    void    *host;
    ss_event_t *ev_out, *ev_in;
    void    *ptr_out;          /* the device pointer that was swapped out (poison) */
    ss_block_t *blk_out;       /* X_OUT, SS_MEM_SMARTSWAP: the block pending in the allocator */
    uint64_t out_seq;          /* order of the swap-out on the D2H stream */
    void    *ptr_in;           /* SS_MEM_FRAMEWORK: the buffer of the swap-in */
    int      poisoned;
    int      asked;            /* SS_MEM_FRAMEWORK: an SS_ACTION_ALLOC is out, not answered */
    int      rc;               /* matched an SS_PLAN_RECOMPUTE entry: never copied; the caller
                                  releases it and rebuilds it (ss_ctx_recompute_planned) */
} xt;

typedef struct hitem { uint64_t k1, k2, hv; } hitem;
typedef struct heap { hitem *a; size_t n, cap; } heap;

typedef struct defev { uint64_t k; ss_event_t *ev; } defev;

typedef struct okey { uint64_t key; uint32_t cnt, gen; } okey;

typedef struct exec {
    ssi_exec_ops ops;
    ss_ctx_t    *ctx;
    int          mode, owner;
    ss_device_t *dev;
    ss_alloc_t  *alloc;
    ss_stream_t *compute, *d2h, *h2d;
    int          own_compute;
    ss_hostpool_t *pool;
    int          own_pool;
    ss_event_t  *marker;
    ss_event_t **evfree;
    size_t       nevfree, capevfree;
    ss_event_t **evall;
    size_t       nevall, capevall;
    defev       *evdef;
    size_t       nevdef, capevdef;
    int          poison, stock, virt;
    double       d2h_bps, h2d_bps, lat;
    /* the plan of this iteration and its match index */
    const ss_plan *fixed, *plan;
    const ss_profile *fixed_prof, *prof;   /* the plan's profile: every saved tensor, so that
                                             an unplanned tensor takes its own slot */
    uint32_t    *ent_of; size_t cap_ent_of;   /* per feature: plan entry, or SS_NONE */
    uint32_t    *tent; size_t cap_tent;       /* per profile tensor: plan entry (build) */
    uint32_t    *fop; size_t cap_fop;         /* per profile operator: its first save's feature */
    uint32_t     nfeat;
    uint32_t    *nmap;  size_t cap_nmap;
    ssi_match_feat *feat; size_t cap_feat;
    uint32_t    *sorted; size_t cap_sorted;   /* entry indices by (name, site, dtype, ordinal) */
    uint8_t     *taken; size_t cap_taken;
    okey        *otab; size_t ocap, on; uint32_t ogen;
    heap         outq, inq, freeq;
    hitem       *late; size_t cap_late;   /* free_due: releases whose copies were late */
    xt         **early; size_t cap_early; /* release_out_early: candidates */
    uint64_t     out_seq;
    uint64_t     base_k, next_base;
    uint32_t     cur, fwd_end;     /* operator indices in the plan's numbering (plan_index) */
    uint32_t     poff;             /* the plan's index of the live operator idx is idx + poff */
    int          bwd, in_iter;
    xt          *head;
    ss_status    err;              /* first error of an op hook, returned at iter_end */
    ss_exec_report rep, last, tot;
    uint64_t     q0, w0;           /* allocator event queries and waits at iter_begin */
    uint64_t     fq, fw;           /* framework-mode release-path queries and waits */
    /* timeline */
    int          tl_on, tl_rec, tl_have;
    ssi_timeline tl, tl_last;
    double       tl_t0, tl_last_t0, op_t0, lane_end[SSI_LANE_COUNT];
    uint32_t     op_idx;
    char         op_name[40];
    int          has_last;
    ssi_policy_config pcfg;
    uint64_t    *persist;          /* the allocator's persistent blocks at the last plan */
    int          hybrid;           /* plans by ssi_recompute_hook (swap or recompute) */
} exec;

/* ---- small helpers ------------------------------------------------------------------------ */

static int hless(const hitem *a, const hitem *b) {
    return a->k1 < b->k1 || (a->k1 == b->k1 && a->k2 < b->k2);
}

static ss_status heap_push(heap *h, uint64_t k1, uint64_t k2, uint64_t hv) {
    if (ssi_grow(&h->a, &h->cap, h->n + 1, sizeof *h->a)) return SS_ERR_HOST_OOM;
    size_t i = h->n++;
    hitem it = {k1, k2, hv};
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hless(&it, &h->a[p])) break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = it;
    return SS_OK;
}

static hitem heap_pop(heap *h) {
    hitem top = h->a[0], last = h->a[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && hless(&h->a[c + 1], &h->a[c])) c++;
        if (!hless(&h->a[c], &last)) break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (n) h->a[i] = last;
    return top;
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static double dnow(exec *x) { return ss_device_now(x->dev); }

static xt *xt_of(exec *x, uint64_t hv) {
    ssi_handle *h = ssi_ctx_handle(x->ctx, hv);
    return h ? (xt *)h->exec : NULL;
}

static void peak_sample(exec *x) {
    if (x->alloc) {
        uint64_t now = ssi_alloc_in_use(x->alloc);
        if (now > x->rep.peak_bytes) x->rep.peak_bytes = now;
    }
}

static ss_status ev_get(exec *x, ss_event_t **out) {
    if (x->nevfree) { *out = x->evfree[--x->nevfree]; return SS_OK; }
    if (ssi_grow(&x->evall, &x->capevall, x->nevall + 1, sizeof *x->evall) ||
        ssi_grow(&x->evfree, &x->capevfree, x->nevall + 1, sizeof *x->evfree))
        return SS_ERR_HOST_OOM;
    ss_status st = ss_event_new(x->dev, out);
    if (st == SS_OK) x->evall[x->nevall++] = *out;
    return st;
}

static void ev_put(exec *x, ss_event_t *e) {
    if (e) x->evfree[x->nevfree++] = e;   /* capacity: evfree grows with evall */
}

/* An event the allocator may still query (a pending block) is recycled once k is reached. */
static void ev_defer(exec *x, ss_event_t *e, uint64_t k) {
    if (!e) return;
    if (ssi_grow(&x->evdef, &x->capevdef, x->nevdef + 1, sizeof *x->evdef)) return; /* leaked to
        the pool's end of life: it stays in evall and is freed at destroy */
    x->evdef[x->nevdef].k = k;
    x->evdef[x->nevdef].ev = e;
    x->nevdef++;
}

static void ev_recycle(exec *x, uint64_t k) {
    size_t j = 0;
    for (size_t i = 0; i < x->nevdef; i++) {
        if (x->evdef[i].k <= k) ev_put(x, x->evdef[i].ev);
        else x->evdef[j++] = x->evdef[i];
    }
    x->nevdef = j;
}

static void tl_copy(exec *x, uint32_t lane, uint32_t id, uint64_t bytes, const char *what) {
    if (!x->tl_rec) return;
    double bps = lane == SSI_LANE_D2H ? x->d2h_bps : x->h2d_bps;
    double t0 = dnow(x);
    if (x->lane_end[lane] > t0) t0 = x->lane_end[lane];
    double t1 = t0 + x->lat + (bps > 0 ? (double)bytes / bps : 0);
    x->lane_end[lane] = t1;
    char nm[40];
    ssi_fmt(nm, sizeof nm, "%s t%u", what, id);
    ssi_timeline_add(&x->tl, lane, id, t0 - x->tl_t0, t1 - x->tl_t0, nm);
}

static void tl_close_op(exec *x) {
    if (!x->tl_rec || !x->tl_have) return;
    ssi_timeline_add(&x->tl, SSI_LANE_COMPUTE, x->op_idx, x->op_t0 - x->tl_t0, dnow(x) - x->tl_t0,
                     x->op_name);
    x->tl_have = 0;
}

/* ---- matching ------------------------------------------------------------------------------ */

int ssi_match_exact(const ssi_match_feat *t, const ssi_match_feat *e) {
    if (t->name != e->name || t->site != e->site || t->dtype != e->dtype || t->ndim != e->ndim ||
        t->ordinal != e->ordinal || ssi_round_block(t->bytes) != ssi_round_block(e->bytes))
        return 0;
    for (uint32_t d = 0; d < t->ndim; d++)
        if (t->shape[d] != e->shape[d]) return 0;
    return 1;
}

static double ratio(double a, double b) {
    if (a == b) return 1.0;
    double lo = a < b ? a : b, hi = a < b ? b : a;
    return hi > 0 ? lo / hi : 1.0;
}

double ssi_match_score(const ssi_match_feat *t, const ssi_match_feat *e) {
    if (t->dtype != e->dtype) return -1.0;
    double s = 0;
    if (t->name == e->name) s += 0.40;
    if (t->site == e->site) s += 0.15;
    if (t->ndim == e->ndim) {
        double m = 1.0;
        if (t->ndim) {
            m = 0;
            for (uint32_t d = 0; d < t->ndim; d++)
                m += ratio((double)t->shape[d], (double)e->shape[d]);
            m /= t->ndim;
        }
        s += 0.25 * m;
    }
    s += 0.10 * ratio((double)t->bytes, (double)e->bytes);
    uint32_t dd = t->ordinal > e->ordinal ? t->ordinal - e->ordinal : e->ordinal - t->ordinal;
    s += 0.10 / (1.0 + dd);
    return s > 1.0 ? 1.0 : s;
}

uint32_t ssi_match_best(const ssi_match_feat *t, const ssi_match_feat *cand, uint32_t n,
                        const uint8_t *taken, double threshold, double *score) {
    for (uint32_t i = 0; i < n; i++)
        if (!(taken && taken[i]) && ssi_match_exact(t, &cand[i])) {
            if (score) *score = 1.0;
            return i;
        }
    uint32_t best = SS_NONE, bd = UINT32_MAX;
    double bs = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (taken && taken[i]) continue;
        double s = ssi_match_score(t, &cand[i]);
        if (s < threshold || s < 0) continue;
        uint32_t dd = t->ordinal > cand[i].ordinal ? t->ordinal - cand[i].ordinal
                                                   : cand[i].ordinal - t->ordinal;
        if (s > bs || (s == bs && dd < bd)) { bs = s; bd = dd; best = i; }
    }
    if (best != SS_NONE && score) *score = bs;
    return best;
}

static exec *g_sort_x;   /* qsort context: only touched with ctx->lock held by one thread */

static int key_cmp3(const ssi_match_feat *a, const ssi_match_feat *b) {
    if (a->name != b->name) return a->name < b->name ? -1 : 1;
    if (a->site != b->site) return a->site < b->site ? -1 : 1;
    if (a->dtype != b->dtype) return a->dtype < b->dtype ? -1 : 1;
    return 0;
}

static int sort_cmp(const void *pa, const void *pb) {
    uint32_t ia = *(const uint32_t *)pa, ib = *(const uint32_t *)pb;
    const ssi_match_feat *a = &g_sort_x->feat[ia], *b = &g_sort_x->feat[ib];
    int c = key_cmp3(a, b);
    if (c) return c;
    if (a->ordinal != b->ordinal) return a->ordinal < b->ordinal ? -1 : 1;
    return ia < ib ? -1 : ia > ib;
}

static pthread_mutex_t g_sort_mu = PTHREAD_MUTEX_INITIALIZER;

/* Builds the match index of x->plan: with the plan's profile, one feature per saved tensor of
 * the profile (ordinals as the policy counts them) pointing at its entry or at none; without
 * it, one per entry. Names are mapped to the context's name ids; features are sorted by (name,
 * site, dtype, ordinal). Lock held. */
static ss_status index_build(exec *x) {
    const ss_plan *p = x->plan;
    const ss_profile *pr = x->prof;
    x->nfeat = 0;
    if (!p || !p->nentries) return SS_OK;
    uint32_t ne = p->nentries, nf = ne, nnames = p->nnames;
    if (pr) {
        nf = 0;
        for (uint32_t t = 0; t < pr->ntensors; t++) nf += (pr->tensors[t].flags & SS_TENSOR_SAVED) != 0;
        nnames = pr->nnames;
        if (ssi_grow(&x->tent, &x->cap_tent, pr->ntensors + 1, sizeof *x->tent) ||
            ssi_grow(&x->fop, &x->cap_fop, pr->nops + 1, sizeof *x->fop))
            return SS_ERR_HOST_OOM;
        for (uint32_t o = 0; o < pr->nops; o++) x->fop[o] = SS_NONE;
    }
    if (ssi_grow(&x->nmap, &x->cap_nmap, nnames + 1, sizeof *x->nmap) ||
        ssi_grow(&x->feat, &x->cap_feat, nf + 1, sizeof *x->feat) ||
        ssi_grow(&x->ent_of, &x->cap_ent_of, nf + 1, sizeof *x->ent_of) ||
        ssi_grow(&x->sorted, &x->cap_sorted, nf + 1, sizeof *x->sorted) ||
        ssi_grow(&x->taken, &x->cap_taken, nf + 1, sizeof *x->taken))
        return SS_ERR_HOST_OOM;
    ss_ctx_t *ctx = x->ctx;
    uint32_t nn = atomic_load(&ctx->nnames);
    for (uint32_t j = 0; j < nnames; j++) {
        const char *nm = pr ? pr->names[j] : p->names[j];
        x->nmap[j] = UINT32_MAX;
        for (uint32_t i = 0; i < nn; i++)
            if (strcmp(ctx->names[i], nm) == 0) { x->nmap[j] = i; break; }
    }
    if (pr) {
        for (uint32_t t = 0; t < pr->ntensors; t++) x->tent[t] = SS_NONE;
        for (uint32_t k = 0; k < ne; k++)
            if (p->entries[k].tensor < pr->ntensors) x->tent[p->entries[k].tensor] = k;
        uint32_t f = 0;
        for (uint32_t t = 0; t < pr->ntensors; t++) {
            const ss_prof_tensor *y = &pr->tensors[t];
            if (!(y->flags & SS_TENSOR_SAVED)) continue;
            const ss_prof_op *o = &pr->ops[y->producer];
            ssi_match_feat *ft = &x->feat[f];
            ft->name = o->name < pr->nnames ? x->nmap[o->name] : UINT32_MAX;
            ft->site = o->site;
            ft->dtype = y->dtype;
            ft->ndim = y->ndim;
            ft->shape = y->shape;
            ft->bytes = y->bytes;
            ft->ordinal = 0;
            x->ent_of[f] = x->tent[t];
            if (y->producer < pr->nops && x->fop[y->producer] == SS_NONE) x->fop[y->producer] = f;
            f++;
        }
    } else {
        for (uint32_t k = 0; k < ne; k++) {
            const ss_plan_entry *e = &p->entries[k];
            ssi_match_feat *f = &x->feat[k];
            f->name = e->name < p->nnames ? x->nmap[e->name] : UINT32_MAX;
            f->site = e->site;
            f->dtype = e->dtype;
            f->ndim = e->ndim;
            f->shape = e->shape;
            f->bytes = e->bytes;
            f->ordinal = e->ordinal;
            x->ent_of[k] = k;
        }
    }
    for (uint32_t k = 0; k < nf; k++) {
        x->sorted[k] = k;
        x->taken[k] = 0;
    }
    pthread_mutex_lock(&g_sort_mu);
    g_sort_x = x;
    qsort(x->sorted, nf, sizeof *x->sorted, sort_cmp);
    g_sort_x = NULL;
    pthread_mutex_unlock(&g_sort_mu);
    if (pr)   /* ordinals: rank within equal (name, site, dtype), in tensor order (stable sort) */
        for (uint32_t i = 0; i < nf; i++) {
            uint32_t k = x->sorted[i];
            int same = i > 0 && key_cmp3(&x->feat[x->sorted[i - 1]], &x->feat[k]) == 0;
            x->feat[k].ordinal = same ? x->feat[x->sorted[i - 1]].ordinal + 1 : 0;
        }
    x->nfeat = nf;
    return SS_OK;
}

/* [lo, hi) of sorted entries whose (name[, site, dtype]) equal t's: level 1 name only. */
static void index_range(exec *x, const ssi_match_feat *t, int level, uint32_t *lo_out,
                        uint32_t *hi_out) {
    uint32_t n = x->nfeat, lo = 0, hi = n;
    /* lower bound */
    while (lo < hi) {
        uint32_t m = lo + (hi - lo) / 2;
        const ssi_match_feat *f = &x->feat[x->sorted[m]];
        int c = level ? (f->name < t->name ? -1 : f->name > t->name) : key_cmp3(f, t);
        if (c < 0) lo = m + 1; else hi = m;
    }
    uint32_t a = lo;
    hi = n;
    while (lo < hi) {
        uint32_t m = lo + (hi - lo) / 2;
        const ssi_match_feat *f = &x->feat[x->sorted[m]];
        int c = level ? (f->name < t->name ? -1 : f->name > t->name) : key_cmp3(f, t);
        if (c <= 0) lo = m + 1; else hi = m;
    }
    *lo_out = a;
    *hi_out = lo;
}

/* The entry for a saved tensor, or SS_NONE; *exact says how. */
static uint32_t match(exec *x, const ssi_match_feat *t, int *exact) {
    uint32_t lo, hi;
    index_range(x, t, 0, &lo, &hi);
    for (uint32_t i = lo; i < hi; i++) {   /* exact: same key, ascending ordinal */
        uint32_t k = x->sorted[i];
        if (x->feat[k].ordinal > t->ordinal) break;
        if (!x->taken[k] && ssi_match_exact(t, &x->feat[k])) { *exact = 1; return k; }
    }
    *exact = 0;
    double thr = x->ctx->opts.match_threshold;
    for (int level = 0; level < 2; level++) {
        if (level) index_range(x, t, 1, &lo, &hi);
        uint32_t best = SS_NONE, bd = UINT32_MAX;
        double bs = -1;
        for (uint32_t i = lo; i < hi; i++) {
            uint32_t k = x->sorted[i];
            if (x->taken[k]) continue;
            double s = ssi_match_score(t, &x->feat[k]);
            if (s < 0 || s < thr) continue;
            uint32_t dd = t->ordinal > x->feat[k].ordinal ? t->ordinal - x->feat[k].ordinal
                                                         : x->feat[k].ordinal - t->ordinal;
            if (s > bs || (s == bs && dd < bd)) { bs = s; bd = dd; best = k; }
        }
        if (best != SS_NONE) return best;
    }
    return SS_NONE;
}

/* The ordinal of a save among this iteration's saves with the same (name, site, dtype). */
static ss_status ordinal_next(exec *x, uint32_t name, uint64_t site, uint32_t dtype, uint32_t *out) {
    if (x->on * 2 + 2 > x->ocap) {   /* grow and rehash the live generation */
        size_t ncap = x->ocap ? x->ocap * 2 : 256;
        okey *nt = calloc(ncap, sizeof *nt);
        if (!nt) return SS_ERR_HOST_OOM;
        for (size_t i = 0; i < x->ocap; i++) {
            okey *o = &x->otab[i];
            if (o->gen != x->ogen || !o->gen) continue;
            size_t j = mix64(o->key) & (ncap - 1);
            while (nt[j].gen) j = (j + 1) & (ncap - 1);
            nt[j] = *o;
        }
        free(x->otab);
        x->otab = nt;
        x->ocap = ncap;
    }
    uint64_t key = mix64(((uint64_t)name << 32) ^ dtype) ^ mix64(site + 0x9E3779B97F4A7C15ull);
    size_t j = mix64(key) & (x->ocap - 1);
    for (;;) {
        okey *o = &x->otab[j];
        if (o->gen != x->ogen) {
            o->gen = x->ogen;
            o->key = key;
            o->cnt = 1;
            x->on++;
            *out = 0;
            return SS_OK;
        }
        if (o->key == key) { *out = o->cnt++; return SS_OK; }
        j = (j + 1) & (x->ocap - 1);
    }
}

/* ---- copies ------------------------------------------------------------------------------- */

static void *dev_ptr(exec *x, xt *t, ssi_handle *h) {
    if (x->owner == SS_MEM_FRAMEWORK && t->state == X_LOADED) return t->ptr_in;
    return h->ptr;
}

static ss_status host_put(exec *x, xt *t);

/* Issues the swap-out of t (resident) with its release at global index free_k. A full host
 * pool leaves t resident (counted) and returns SS_OK; sync = 1 (eviction) waits for the copy
 * and frees the block at once. */
static ss_status issue_out(exec *x, xt *t, ssi_handle *h, uint64_t free_k, int sync) {
    /* a buffer kept by an earlier attempt whose copy could not be confirmed done goes back
     * first (host_put waits for it), never overwritten */
    ss_status st = host_put(x, t);
    if (st) return st;
    st = ss_hostpool_get(x->pool, (size_t)t->bytes, &t->host);
    if (st == SS_ERR_HOST_OOM) {
        x->rep.host_full++;
        t->host = NULL;
        return sync ? SS_ERR_HOST_OOM : SS_OK;
    }
    if (st) return st;
    void *src = dev_ptr(x, t, h);
    int copying = 0;
    if (!t->ev_out && (st = ev_get(x, &t->ev_out))) goto fail;
    if ((st = ss_event_record(x->dev, x->marker, x->compute)) ||
        (st = ss_event_wait(x->dev, x->d2h, x->marker)) ||
        (st = ss_copy_async(x->dev, x->d2h, t->host, src, (size_t)t->bytes, SS_COPY_D2H)))
        goto fail;
    copying = 1;
    if ((st = ss_event_record(x->dev, t->ev_out, x->d2h))) goto fail;
    tl_copy(x, SSI_LANE_D2H, t->ord, t->bytes, sync ? "evict" : "out");
    x->rep.swapped_out_bytes += t->bytes;
    x->rep.swap_outs++;
    t->ptr_out = src;
    t->out_seq = ++x->out_seq;
    t->poisoned = 0;
    if (t->ev_in) { ev_put(x, t->ev_in); t->ev_in = NULL; }
    if (sync) {
        if ((st = ss_event_sync(x->dev, t->ev_out))) {
            /* the tensor stays resident; its host buffer goes back once the copy is surely
             * done (else it is kept, and goes back at the next swap-out or the release) */
            if (ss_stream_sync(x->dev, x->d2h) == SS_OK) {
                ss_hostpool_put(x->pool, t->host);
                t->host = NULL;
            }
            return st;
        }
        if (x->owner == SS_MEM_FRAMEWORK) {
            /* the caller's memory: it drops its tensor (ssi_exec_evict_framework) */
            if ((st = ssi_ctx_push_action(x->ctx, SS_ACTION_DROP, t->hv, t->bytes))) return st;
        } else {
            if (x->poison && ss_mem_poison(x->dev, src, (size_t)t->bytes) == SS_OK) t->poisoned = 1;
            ss_block_t *b = h->block;
            h->block = NULL;
            if ((st = ss_alloc_free(x->alloc, b))) return st;
        }
        t->state = X_HOST;
        t->counted = 1;
        x->ctx->swapped += t->bytes;
        return SS_OK;
    }
    t->state = X_OUT;
    t->free_k = free_k;
    if (x->owner == SS_MEM_SMARTSWAP) {
        ss_block_t *b = h->block;
        if ((st = ss_alloc_free_at(x->alloc, b, free_k, t->ev_out, 0))) return st;
        h->block = NULL;
        t->blk_out = x->stock ? NULL : b;
        if (x->stock) {
            /* the allocator polls the event on later allocations: the block is no longer ours,
             * and its copy may still be reading it (on the virtual clock too: its bytes move at
             * the copy's end), so it is not poisoned here */
            t->state = X_HOST;
            t->counted = 1;
            x->ctx->swapped += t->bytes;
            /* the allocator keeps ev_out until it polls it; a later swap-in orders itself
             * after the copy through a fresh event recorded right after it */
            ev_defer(x, t->ev_out, UINT64_MAX);
            t->ev_out = NULL;
            if ((st = ev_get(x, &t->ev_out)) || (st = ss_event_record(x->dev, t->ev_out, x->d2h)))
                return st;
            return SS_OK;
        }
    }
    return heap_push(&x->freeq, free_k, t->ord, t->hv);
fail:
    /* the tensor stays resident; a copy already enqueued must finish before its host buffer
     * goes back (if even that fails, the buffer is kept: it goes back at release) */
    if (copying && ss_stream_sync(x->dev, x->d2h)) return st;
    ss_hostpool_put(x->pool, t->host);
    t->host = NULL;
    return st;
}

/* Issues the swap-in of t (its bytes on the host). SS_MEM_SMARTSWAP allocates a block (which
 * may evict others); a refusal leaves t on the host and returns SS_ERR_OOM. SS_MEM_FRAMEWORK
 * queues SS_ACTION_ALLOC, unless ptr is given (the answer, or a fallback buffer). */
static ss_status issue_in(exec *x, xt *t, ssi_handle *h, void *ptr) {
    ss_status st;
    if (x->owner == SS_MEM_FRAMEWORK && !ptr) {
        if ((st = ssi_ctx_push_action(x->ctx, SS_ACTION_ALLOC, t->hv, t->bytes))) return st;
        t->state = X_ALLOCQ;
        t->asked = 1;
        return SS_OK;
    }
    ss_block_t *b = NULL;
    if (x->owner == SS_MEM_SMARTSWAP) {
        if ((st = ss_alloc_malloc(x->alloc, (size_t)t->bytes, &b))) return st;
        /* the eviction callback may have run: t is still on the host (it only takes resident
         * tensors) */
        ptr = ss_block_ptr(b);
    }
    int copying = 0;
    if (!t->ev_in && (st = ev_get(x, &t->ev_in))) goto fail;
    if ((st = ss_event_record(x->dev, x->marker, x->compute)) ||
        (st = ss_event_wait(x->dev, x->h2d, x->marker)) ||
        (t->ev_out && (st = ss_event_wait(x->dev, x->h2d, t->ev_out))) ||
        (st = ss_copy_async(x->dev, x->h2d, ptr, t->host, (size_t)t->bytes, SS_COPY_H2D)))
        goto fail;
    copying = 1;
    if ((st = ss_event_record(x->dev, t->ev_in, x->h2d))) goto fail;
    tl_copy(x, SSI_LANE_H2D, t->ord, t->bytes, "in");
    x->rep.swapped_in_bytes += t->bytes;
    x->rep.swap_ins++;
    if (x->owner == SS_MEM_SMARTSWAP) {
        h->block = b;
        h->ptr = ptr;
    } else {
        t->ptr_in = ptr;
    }
    if (t->counted) { x->ctx->swapped -= t->bytes; t->counted = 0; }
    t->state = X_IN;
    peak_sample(x);
    return SS_OK;
fail:
    /* t stays on the host; the destination must not be handed back under a running copy */
    if (copying) ss_stream_sync(x->dev, x->h2d);
    if (b) ss_alloc_free(x->alloc, b);
    return st;
}

/* Free points due at global index k: SS_MEM_SMARTSWAP releases the blocks (ss_alloc_reach) and
 * poisons them; SS_MEM_FRAMEWORK queries each copy once, orders the compute stream after a late
 * one and queues SS_ACTION_DROP. */
static ss_status free_due(exec *x, uint64_t k) {
    ss_status st = SS_OK;
    size_t mark = 0;
    while (x->freeq.n && x->freeq.a[0].k1 <= k) {
        hitem it = heap_pop(&x->freeq);
        xt *t = xt_of(x, it.hv);
        if (!t || t->state != X_OUT) continue;
        if (x->owner == SS_MEM_FRAMEWORK) {
            int ok = 0;
            ss_status s2 = ss_event_query(x->dev, t->ev_out, &ok);
            x->fq++;
            if (s2 || !ok) {
                if ((s2 = ss_event_wait(x->dev, x->compute, t->ev_out))) { if (!st) st = s2; continue; }
                x->fw++;
            }
            if ((s2 = ssi_ctx_push_action(x->ctx, SS_ACTION_DROP, t->hv, t->bytes))) { if (!st) st = s2; }
        } else if (x->poison) {
            int ok = 0;
            if (ss_event_query(x->dev, t->ev_out, &ok) == SS_OK && ok &&
                ss_mem_poison(x->dev, t->ptr_out, (size_t)t->bytes) == SS_OK)
                t->poisoned = 1;
            else if (ssi_grow(&x->late, &x->cap_late, mark + 1, sizeof *x->late) == SS_OK)
                x->late[mark++] = it;
            else if (!st)
                st = SS_ERR_HOST_OOM;   /* cannot remember it: not poisoned, and said so */
        }
        t->blk_out = NULL;   /* released by the reach below */
        t->state = X_HOST;
        t->counted = 1;
        x->ctx->swapped += t->bytes;
    }
    if (x->owner == SS_MEM_SMARTSWAP) {
        ss_status s2 = ss_alloc_reach(x->alloc, k, x->compute, NULL);
        if (s2 && !st) st = s2;
        /* copies that were late: reach ordered the compute stream after them; poison those the
         * host can now see complete (before any later allocation on this thread reuses them) */
        for (size_t i = 0; i < mark; i++) {
            xt *t = xt_of(x, x->late[i].hv);
            int ok = 0;
            if (t && !t->poisoned && ss_event_query(x->dev, t->ev_out, &ok) == SS_OK && ok &&
                ss_mem_poison(x->dev, t->ptr_out, (size_t)t->bytes) == SS_OK)
                t->poisoned = 1;
        }
    }
    ev_recycle(x, k);
    return st;
}

/* ---- the op hook -------------------------------------------------------------------------- */

/* The plan's index of the live operator idx. An iteration that skips operators of its plan (a
 * mixture-of-experts expert that got no tokens: the stage runs it under the plan with every
 * expert by fuzzy matching) would otherwise reach each of the plan's swap-out, free and swap-in
 * points late by the operators skipped so far. When the live operator is not the plan's at idx +
 * poff but is within 64 operators ahead, the offset grows to it; it never shrinks, and a
 * repeated name (the next expert's operators, at the same call sites) keeps the mapping behind,
 * never ahead. */
static uint32_t plan_index(exec *x, uint32_t idx) {
    const ss_profile *p = x->prof;
    uint32_t j = idx + x->poff;
    if (!p || !x->plan || j >= p->nops) return j;
    const ssi_ring_op *r = &x->ctx->ring[idx & x->ctx->ring_mask];
    if (p->ops[j].name == r->id && p->ops[j].site == r->site) return j;
    /* an inserted repeat (an expert's extra run of the same call sites, which the plan does not
     * have: gpt_moe_tile): the live operator is the plan's up to 16 back; the mapping steps back
     * to it (poff wraps, unsigned), so the run lands on the points of the plan's last run there */
    for (uint32_t k = j; k-- > 0 && k + 16 >= j;)
        if (p->ops[k].name == r->id && p->ops[k].site == r->site) {
            x->poff -= j - k;
            return k;
        }
    for (uint32_t k = j + 1; k < p->nops && k <= j + 64; k++)
        if (p->ops[k].name == r->id && p->ops[k].site == r->site) {
            x->poff += k - j;
            return k;
        }
    return j;
}

static ss_status op_locked(exec *x, uint32_t live) {
    ss_status st = SS_OK, s2;
    uint32_t idx = plan_index(x, live);
    x->cur = idx;
    if (x->tl_rec) {
        tl_close_op(x);
        uint32_t id = x->ctx->ring[live & x->ctx->ring_mask].id;
        ssi_fmt(x->op_name, sizeof x->op_name, "%s", x->ctx->names[id]);
        x->op_idx = live;
        x->op_t0 = dnow(x);
        x->tl_have = 1;
    }
    /* 1. swap-outs due after operator idx - 1 (simulator step 8) */
    while (x->outq.n && x->outq.a[0].k1 < idx) {
        hitem it = heap_pop(&x->outq);
        xt *t = xt_of(x, it.hv);
        ssi_handle *h = ssi_ctx_handle(x->ctx, it.hv);
        if (!t || t->state != X_RES || !t->planned) continue;
        if ((s2 = issue_out(x, t, h, x->base_k + t->sch.free_op, 0)) && !st) st = s2;
    }
    /* 2. free points due at idx (step 1) */
    if ((s2 = free_due(x, x->base_k + idx)) && !st) st = s2;
    /* 3. swap-ins due at idx (step 3) */
    while (x->inq.n && x->inq.a[0].k1 <= idx) {
        hitem it = heap_pop(&x->inq);
        xt *t = xt_of(x, it.hv);
        ssi_handle *h = ssi_ctx_handle(x->ctx, it.hv);
        if (!t || (t->state != X_HOST && t->state != X_OUT)) continue;
        s2 = issue_in(x, t, h, NULL);
        if (s2 == SS_ERR_OOM) continue;   /* the load will bring it in (or say out of memory) */
        if (s2 && !st) st = s2;
    }
    peak_sample(x);
    return st;
}

static void x_op(void *self, ss_ctx_t *ctx, uint32_t idx) {
    exec *x = self;
    pthread_mutex_lock(&ctx->lock);
    tl_held = ctx;
    ssi_ovh o = ssi_ovh_begin(ctx);
    ss_status st = op_locked(x, idx);
    ssi_ovh_end(ctx, o);
    if (st && !x->err) {
        x->err = st;
        SS_ERROR("exec: operator %u: %s", idx, ss_status_str(st));
    }
    tl_held = NULL;
    pthread_mutex_unlock(&ctx->lock);
}

/* ---- eviction ----------------------------------------------------------------------------- */

/* Estimated next use of a resident tensor, for the farthest-next-use rule: its entry's use_op
 * when matched in this iteration; else, since backward uses saved tensors in reverse order of
 * their saves, the mirror of its save op around the end of forward (the earliest saved is the
 * farthest); tensors of an earlier iteration first of all. */
static double next_use(exec *x, const xt *t) {
    if (t->iter != x->ctx->iter) return INFINITY;
    if (t->planned && t->sch.use_op > x->cur) return (double)t->sch.use_op;
    double F = x->bwd ? x->fwd_end : x->cur;
    return 2.0 * F - (double)t->save_op + 0.5;
}

/* Out of memory, first resort: tensors already being swapped out (X_OUT) hold device blocks
 * that the allocator releases only at their planned operator. Those whose copies are done are
 * released now (one query each, no wait); if that is less than `need`, the copies still running
 * are waited for one at a time, oldest first (the D2H stream runs them in that order, so each
 * wait is the shortest possible), until `need` is met: a swap-out that is not needed keeps
 * running. Each block is poisoned before it goes back (still ours: its copy is done and nothing
 * can reuse it before the release). Cheaper than evicting a resident tensor, which needs a copy
 * of its own. Adds the bytes released to *freed. */
static int out_seq_less(const void *a, const void *b) {
    const xt *x = *(const xt *const *)a, *y = *(const xt *const *)b;
    return x->out_seq < y->out_seq ? -1 : x->out_seq > y->out_seq;
}

static void release_one_early(exec *x, xt *t, uint64_t *freed) {
    if (x->poison && !t->poisoned && ss_mem_poison(x->dev, t->ptr_out, (size_t)t->bytes) == SS_OK)
        t->poisoned = 1;
    uint64_t rel = 0;
    if (ss_alloc_release_block(x->alloc, t->blk_out, &rel) != SS_OK) return;   /* stays X_OUT */
    t->blk_out = NULL;
    t->state = X_HOST;
    t->counted = 1;
    x->ctx->swapped += t->bytes;
    x->rep.early_freed += rel;
    *freed += rel;
}

static void release_out_early(exec *x, uint64_t need, uint64_t *freed) {
    if (x->owner != SS_MEM_SMARTSWAP || x->stock || !x->alloc) return;
    size_t n = 0;
    for (xt *t = x->head; t; t = t->next) {
        if (t->state != X_OUT || !t->blk_out || !t->ev_out) continue;
        int ok = 0;
        if (ss_event_query(x->dev, t->ev_out, &ok) == SS_OK && ok) { release_one_early(x, t, freed); continue; }
        if (ssi_grow(&x->early, &x->cap_early, n + 1, sizeof *x->early) != SS_OK) break;
        x->early[n++] = t;
    }
    if (*freed >= need) return;
    if (n) qsort(x->early, n, sizeof *x->early, out_seq_less);
    for (size_t i = 0; i < n && *freed < need; i++) {
        xt *t = x->early[i];
        if (ss_event_sync(x->dev, t->ev_out) != SS_OK) return;   /* cannot tell: keep the rest */
        release_one_early(x, t, freed);
    }
    if (*freed >= need) return;
    /* still short: the deferred blocks no tensor of ours tracks any more (a tensor released, or
     * loaded back, while its swap-out was pending) go too, each after its copy; only when every
     * tracked one is released, so that none of ours is freed behind its back */
    for (xt *t = x->head; t; t = t->next)
        if (t->state == X_OUT && t->blk_out) return;
    uint64_t rel = 0;
    (void)ss_alloc_release_early(x->alloc, &rel);
    x->rep.early_freed += rel;
    *freed += rel;
}

static ss_status evict_locked(exec *x, uint64_t need, uint64_t *freed) {
    ss_ctx_t *ctx = x->ctx;
    *freed = 0;
    release_out_early(x, need, freed);
    while (*freed < need) {
        xt *best = NULL;
        double bu = -1;
        for (xt *t = x->head; t; t = t->next) {
            if (t->state != X_RES && t->state != X_LOADED) continue;
            ssi_handle *h = ssi_ctx_handle(ctx, t->hv);
            if (!h || !h->block || (h->flags & SS_SAVE_NOSWAP)) continue;
            if (t->use_iter == ctx->iter && t->last_op == x->cur && x->in_iter) continue;
            if (t->state == X_LOADED && t->ev_in) {
                int ok = 0;
                if (ss_event_query(x->dev, t->ev_in, &ok) || !ok) continue;
            }
            double u = next_use(x, t);
            if (!best || u > bu || (u == bu && t->bytes > best->bytes)) { best = t; bu = u; }
        }
        if (!best) {
            /* last resort: undo a swap-in still in flight (its host copy is still held), the
             * one used farthest away: wait for it, free its block; its load becomes a miss */
            xt *c = NULL;
            double cu = -1;
            for (xt *t = x->head; t; t = t->next) {
                if (t->state != X_IN || !t->ev_in || !t->host || x->owner != SS_MEM_SMARTSWAP) continue;
                if (t->use_iter == ctx->iter && t->last_op == x->cur && x->in_iter) continue;
                ssi_handle *h = ssi_ctx_handle(ctx, t->hv);
                if (!h || !h->block) continue;
                double u = next_use(x, t);
                if (!c || u > cu) { c = t; cu = u; }
            }
            if (!c || ss_event_sync(x->dev, c->ev_in) != SS_OK) break;
            ssi_handle *h = ssi_ctx_handle(ctx, c->hv);
            ss_block_t *b = h->block;
            uint64_t sz = ss_block_size(b);
            if (x->poison) (void)ss_mem_poison(x->dev, ss_block_ptr(b), (size_t)c->bytes);
            h->block = NULL;
            if (ss_alloc_free(x->alloc, b) != SS_OK) break;
            c->state = X_HOST;
            c->counted = 1;
            ctx->swapped += c->bytes;
            *freed += sz;
            x->rep.evictions++;
            x->rep.evicted_bytes += c->bytes;
            continue;
        }
        ssi_handle *h = ssi_ctx_handle(ctx, best->hv);
        uint64_t sz = ss_block_size(h->block);
        ss_status st = issue_out(x, best, h, 0, 1);
        if (st) {
            if (st == SS_ERR_HOST_OOM)
                SS_ERROR("exec: eviction needs host memory but the host pool is at its cap "
                         "(raise --host-mem / SMARTSWAP_HOST_MEM)");
            return *freed ? SS_OK : st;
        }
        *freed += sz;
        x->rep.evictions++;
        x->rep.evicted_bytes += best->bytes;
        if (x->in_iter && x->plan && !x->fixed && ctx->st.stage_now == SS_STAGE_STABLE &&
            !ctx->st.recording && !x->rep.stale) {
            ssi_stage_mark_stale(ctx);
            x->rep.stale = 1;
        }
    }
    return SS_OK;
}

static ss_status x_evict(void *user, uint64_t need, uint64_t *freed) {
    exec *x = user;
    ss_ctx_t *ctx = x->ctx;
    int held = tl_held == ctx;
    if (!held) { pthread_mutex_lock(&ctx->lock); tl_held = ctx; }
    ssi_ovh o = ssi_ovh_begin(ctx);
    ss_status st = evict_locked(x, need, freed);
    ssi_ovh_end(ctx, o);
    if (!held) { tl_held = NULL; pthread_mutex_unlock(&ctx->lock); }
    return st;
}

/* ---- the other slots ---------------------------------------------------------------------- */

/* The profile of plan when the stage's current cache entry holds it (else NULL). */
static const ss_profile *stage_prof(const ss_ctx_t *ctx, const ss_plan *plan) {
    int c = ctx->st.cur;
    return plan && c >= 0 && ctx->st.cache[c].plan == plan ? ctx->st.cache[c].prof : NULL;
}

/* Makes plan the iteration's, with its profile prof when that matches it (NULL: none): the
 * match index and the report's planned figures. On an error the iteration runs unplanned. */
static ss_status plan_take(exec *x, const ss_plan *plan, const ss_profile *prof) {
    x->plan = plan;
    x->prof = plan && prof && plan->nops == prof->nops ? prof : NULL;
    ss_status st = index_build(x);
    if (st) x->plan = NULL;
    x->rep.planned_tensors = x->plan ? x->plan->nentries : 0;
    x->rep.plan_peak_reserved_bytes = x->plan ? x->plan->peak_reserved : 0;
    x->rep.planned_bytes = 0;
    for (uint32_t k = 0; x->plan && k < x->plan->nentries; k++) x->rep.planned_bytes += x->plan->entries[k].bytes;
    return st;
}

static ss_status x_iter_begin(void *self, ss_ctx_t *ctx, const ss_plan *plan) {
    exec *x = self;
    tl_held = ctx;
    x->plan = x->mode == SS_SWAP_SMARTSWAP ? (x->fixed ? x->fixed : plan) : NULL;
    /* A planned iteration starts from the allocator state its plan was simulated from: only
     * what is live now (ssi_sim_run starts a fresh allocator). Segments cached from the
     * previous iteration carry its layout; a plan close to the budget (pruned) then found its
     * large requests split across them and took the out-of-memory path in every Stable
     * iteration after the first (bench-recordstream: 11 evictions, stall above the
     * prediction). Fully free segments are parked here: set aside with no device call and
     * taken back when a request would make a new segment of their size, so the layout is a
     * fresh allocator's. (They were trimmed here before: on CUDA each cudaFree synchronises
     * the device, and every planned iteration reserved them all again.) */
    if (x->alloc && x->owner == SS_MEM_SMARTSWAP && x->plan && x->plan->nentries)
        (void)ss_alloc_park(x->alloc);
    x->base_k = x->next_base;
    x->cur = 0;
    x->poff = 0;
    x->fwd_end = 0;
    x->bwd = 0;
    x->in_iter = 1;
    x->err = SS_OK;
    x->outq.n = x->inq.n = 0;
    x->ogen++;
    if (!x->ogen) x->ogen = 1;
    x->on = 0;
    memset(&x->rep, 0, sizeof x->rep);
    x->rep.iter = ctx->iter;
    x->rep.mode = x->mode;
    x->rep.stage = ctx->st.stage_now;
    ss_status st = plan_take(x, x->plan, x->fixed ? x->fixed_prof : stage_prof(ctx, x->plan));
    x->q0 = x->w0 = 0;
    if (x->alloc) {
        uint64_t r0;
        (void)ss_alloc_window_reserved(x->alloc, &r0);   /* the iteration's window starts */
        ss_alloc_stats as;
        if (ss_alloc_get_stats(x->alloc, &as) == SS_OK) { x->q0 = as.event_queries; x->w0 = as.waits; }
    }
    x->fq = x->fw = 0;
    x->tl_rec = x->tl_on;
    if (x->tl_rec) {
        ssi_timeline_clear(&x->tl);
        x->tl_t0 = dnow(x);
        x->tl_have = 0;
        for (int l = 0; l < SSI_LANE_COUNT; l++) x->lane_end[l] = 0;
    }
    peak_sample(x);
    tl_held = NULL;
    return st;
}

/* The stage switched plans in mid-iteration. Before the iteration's first save (a sequence
 * whose sizes differ from the plan's: the first saved tensor shows it) nothing is scheduled
 * yet, and the executor takes the new plan; later it keeps the one it started with (its
 * entries already scheduled the saves so far) and matches the rest against it. */
static void x_plan_switch(void *self, ss_ctx_t *ctx, const ss_plan *plan) {
    exec *x = self;
    if (x->mode != SS_SWAP_SMARTSWAP || x->fixed || !plan || ctx->nsaves || !x->in_iter) return;
    (void)plan_take(x, plan, stage_prof(ctx, plan));
    x->rep.switched = 1;
}

static ss_status x_save(void *self, ss_ctx_t *ctx, uint64_t hv, ssi_handle *h) {
    exec *x = self;
    xt *t = calloc(1, sizeof *t);
    if (!t) return SS_ERR_HOST_OOM;
    tl_held = ctx;
    uint32_t n = atomic_load_explicit(&ctx->n, memory_order_relaxed);
    uint32_t live = n ? n - 1 : 0, op = live + x->poff;   /* the plan's index (plan_index) */
    t->hv = hv;
    t->iter = t->use_iter = ctx->iter;
    t->ord = h->ord;
    t->save_op = t->last_op = op;
    t->bytes = h->bytes;
    t->entry = SS_NONE;
    t->state = X_RES;
    t->next = x->head;
    if (x->head) x->head->prev = t;
    x->head = t;
    h->exec = t;
    ss_status st = SS_OK;
    int noswap = (h->flags & SS_SAVE_NOSWAP) != 0;
    if (x->mode == SS_SWAP_OFFLOAD_ALL && !noswap) {
        st = issue_out(x, t, h, x->base_k + op + 1, 0);
    } else if (x->mode == SS_SWAP_SMARTSWAP && x->nfeat) {
        const ssi_ring_op *r = &ctx->ring[live & ctx->ring_mask];
        ssi_match_feat f = {r->id, r->site, h->dtype, h->ndim, h->shape, h->bytes, 0};
        st = ordinal_next(x, r->id, r->site, h->dtype, &f.ordinal);
        /* an iteration that skipped operators of its plan (plan_index): the ordinal of the plan's
         * save at this operator of the plan, where it is one of the same key, rather than the
         * count of this iteration's saves, which every skipped save before it shifted */
        if (!st && x->poff && x->prof && op < x->prof->nops && x->fop[op] != SS_NONE) {
            const ssi_match_feat *pf = &x->feat[x->fop[op]];
            if (pf->name == r->id && pf->site == r->site && pf->dtype == h->dtype) f.ordinal = pf->ordinal;
        }
        int exact = 0;
        uint32_t k = st ? SS_NONE : match(x, &f, &exact);
        if (k != SS_NONE) x->taken[k] = 1;
        else if (!st) x->rep.unmatched++;
        k = k != SS_NONE ? x->ent_of[k] : SS_NONE;
        if (k != SS_NONE && !noswap) {
            const ss_plan_entry *e = &x->plan->entries[k];
            x->rep.matched_bytes += e->bytes;
            if (exact) x->rep.matched_exact++; else x->rep.matched_fuzzy++;
            if (e->action == SS_PLAN_RECOMPUTE) {
                t->rc = 1;
                t->entry = k;
            } else if (e->use_op > op && e->free_op > op) {
                t->planned = 1;
                t->entry = k;
                t->sch = *e;
                st = heap_push(&x->outq, e->out_op, k, hv);
                if (!st) st = heap_push(&x->inq, e->in_op, k, hv);
            }
        }
    }
    peak_sample(x);
    tl_held = NULL;
    return st;
}

static void xt_unlink(exec *x, xt *t) {
    if (t->prev) t->prev->next = t->next; else x->head = t->next;
    if (t->next) t->next->prev = t->prev;
}

/* Gives the host buffer back once no copy uses it (syncs the copies' events). When the device
 * cannot say (an event call failed), both copy streams are synchronised instead, so the buffer
 * is neither returned under a running copy nor kept for good; the event's error is returned. */
static ss_status host_put(exec *x, xt *t) {
    if (!t->host) return SS_OK;
    ss_status st = SS_OK;
    if (t->ev_out) st = ss_event_sync(x->dev, t->ev_out);
    if (!st && t->ev_in) st = ss_event_sync(x->dev, t->ev_in);
    if (st && (ss_stream_sync(x->dev, x->d2h) || ss_stream_sync(x->dev, x->h2d))) return st;
    ss_status s2 = ss_hostpool_put(x->pool, t->host);
    t->host = NULL;
    return st ? st : s2;
}

static ss_status x_load(void *self, ss_ctx_t *ctx, uint64_t hv, ssi_handle *h, ss_stream_t *s,
                        void **ptr) {
    exec *x = self;
    xt *t = h->exec;
    (void)hv;
    if (!t) return SS_OK;
    tl_held = ctx;
    ss_status st = SS_OK;
    if (!s) s = x->compute;
    if (t->iter == ctx->iter && x->in_iter && !x->bwd) { x->bwd = 1; x->fwd_end = x->cur; }
    int miss = 0;
    switch (t->state) {
    case X_OUT:
        if (x->owner == SS_MEM_FRAMEWORK) {   /* the caller's buffer is still there: cancel */
            t->state = X_RES;
            host_put(x, t);
            break;
        }
        /* the block is the allocator's (pending): bring the bytes back */
        __attribute__((fallthrough));
    case X_HOST:
    case X_ALLOCQ:
        miss = 1;
        if (x->owner == SS_MEM_FRAMEWORK) {
            void *fb = NULL;
            if ((st = ss_mem_alloc(x->dev, (size_t)t->bytes, &fb))) break;
            t->fallback = 1;
            st = issue_in(x, t, h, fb);
            if (st) { ss_mem_free(x->dev, fb, (size_t)t->bytes); t->fallback = 0; }
        } else {
            int from_out = t->state == X_OUT;
            st = issue_in(x, t, h, NULL);
            if (!st && from_out) {
                /* the allocator's pending block still refers to ev_out until free_k: it goes
                 * back to the pool only then, and t records later copies in a fresh event */
                ev_defer(x, t->ev_out, t->free_k);
                t->ev_out = NULL;
                t->blk_out = NULL;
            }
            if (st == SS_ERR_OOM)
                SS_ERROR("exec: no device memory to bring a swapped tensor of %llu bytes back "
                         "(budget too small for what the operator needs at once)",
                         (unsigned long long)t->bytes);
        }
        break;
    default:
        break;
    }
    if (!st && t->ev_in && (t->state == X_IN || t->state == X_LOADED)) {
        if (miss) {
            x->rep.misses++;
        } else if (t->state == X_IN) {
            int ok = 1;
            if (ss_event_query(x->dev, t->ev_in, &ok) == SS_OK && !ok) {
                x->rep.stalls++;
                double t0 = dnow(x);
                st = ss_event_wait(x->dev, s, t->ev_in);
                x->rep.stall_s += dnow(x) - t0;
            }
        }
        if (!st) st = ss_event_wait(x->dev, s, t->ev_in);
        if (!st) {
            t->state = X_LOADED;
            int ok = 0;
            if (t->host && ss_event_query(x->dev, t->ev_in, &ok) == SS_OK && ok) st = host_put(x, t);
        }
    }
    if (!st) {
        *ptr = dev_ptr(x, t, h);
        t->last_op = x->cur;
        t->use_iter = ctx->iter;
    }
    peak_sample(x);
    tl_held = NULL;
    return st;
}

static ss_status x_release(void *self, ss_ctx_t *ctx, uint64_t hv, ssi_handle *h) {
    exec *x = self;
    (void)hv;
    xt *t = h->exec;
    ss_status st = SS_OK, s2;
    tl_held = ctx;
    if (x->owner == SS_MEM_SMARTSWAP) {
        if (h->block) {
            /* a swap-in nobody waited for may still write the block: order its reuse */
            if (t && t->state == X_IN && t->ev_in) st = ss_event_wait(x->dev, x->compute, t->ev_in);
            if ((s2 = ss_alloc_free(x->alloc, h->block)) && !st) st = s2;
            h->block = NULL;
        }
    }
    if (t) {
        if (x->owner == SS_MEM_FRAMEWORK && (t->state == X_IN || t->state == X_LOADED) && t->ev_in)
            if ((s2 = ss_event_sync(x->dev, t->ev_in)) && !st) st = s2;
        if (t->fallback) {   /* our own buffer: free it once the compute stream is done */
            if ((s2 = ss_event_record(x->dev, x->marker, x->compute)) == SS_OK)
                s2 = ss_event_sync(x->dev, x->marker);
            if (s2 && !st) st = s2;
            if (!s2 || ss_stream_sync(x->dev, x->compute) == SS_OK) {
                if ((s2 = ss_mem_free(x->dev, t->ptr_in, (size_t)t->bytes)) && !st) st = s2;
                t->fallback = 0;
            }
        }
        if ((s2 = host_put(x, t)) && !st) st = s2;
        if (t->counted) ctx->swapped -= t->bytes;
        if (t->ev_out) {
            if (t->state == X_OUT && x->owner == SS_MEM_SMARTSWAP) ev_defer(x, t->ev_out, t->free_k);
            else ev_put(x, t->ev_out);
        }
        ev_put(x, t->ev_in);
        xt_unlink(x, t);
        free(t);
        h->exec = NULL;
    }
    tl_held = NULL;
    return st;
}

static ss_status x_action_done(void *self, ss_ctx_t *ctx, uint64_t hv, ssi_handle *h, void *ptr) {
    exec *x = self;
    xt *t = h->exec;
    if (!t || !t->asked) return SS_ERR_STATE;
    t->asked = 0;
    /* a late answer (another thread's load already brought the tensor in on the slow path):
     * the buffer is not used; the caller keeps it until release as with any answer */
    if (t->state != X_ALLOCQ) return SS_OK;
    tl_held = ctx;
    ss_status st = SS_OK;
    if (!ptr) t->state = X_HOST;      /* the load will take the slow path */
    else st = issue_in(x, t, h, ptr);
    (void)hv;
    tl_held = NULL;
    return st;
}

static ss_status x_iter_end(void *self, ss_ctx_t *ctx, ss_iter_report *rep) {
    exec *x = self;
    tl_held = ctx;
    uint32_t n = atomic_load_explicit(&ctx->n, memory_order_relaxed);
    uint32_t len = n + x->poff;
    if (x->plan && x->plan->nops > len) len = x->plan->nops;
    uint64_t kend = x->base_k + len;
    ss_status st = free_due(x, kend);   /* free points past this iteration's end */
    x->next_base = kend + 1;
    if (x->tl_rec) {
        tl_close_op(x);
        ssi_timeline_clear(&x->tl_last);
        ssi_timeline tmp = x->tl_last;
        x->tl_last = x->tl;
        x->tl = tmp;
        x->tl_last_t0 = x->tl_t0;
        x->has_last = 1;
        x->tl_rec = 0;
    }
    if (x->alloc) {
        ss_alloc_stats as;
        if (ss_alloc_get_stats(x->alloc, &as) == SS_OK) {
            x->rep.event_queries = as.event_queries - x->q0;
            x->rep.waits = as.waits - x->w0;
            if (x->stock && as.pending_blocks == 0) ev_recycle(x, UINT64_MAX);
        }
        (void)ss_alloc_window_reserved(x->alloc, &x->rep.peak_reserved_bytes);
    } else {
        x->rep.event_queries = x->fq;
        x->rep.waits = x->fw;
    }
    ss_hostpool_stats hs;
    if (ss_hostpool_get_stats(x->pool, &hs) == SS_OK) x->rep.host_peak_bytes = hs.peak_in_use_bytes;
    peak_sample(x);
    rep->swapped_out_bytes = x->rep.swapped_out_bytes;
    rep->swapped_in_bytes = x->rep.swapped_in_bytes;
    rep->stalls = x->rep.stalls;
    rep->sync_loads = x->rep.misses;
    rep->evictions = x->rep.evictions;
    x->last = x->rep;
    ss_exec_report *T = &x->tot, *r = &x->rep;
    T->iter++;
    T->mode = r->mode;
    T->stage = r->stage;
    T->planned_tensors += r->planned_tensors;
    T->matched_exact += r->matched_exact;
    T->matched_fuzzy += r->matched_fuzzy;
    T->unmatched += r->unmatched;
    T->planned_bytes += r->planned_bytes;
    T->matched_bytes += r->matched_bytes;
    T->swapped_out_bytes += r->swapped_out_bytes;
    T->swapped_in_bytes += r->swapped_in_bytes;
    T->swap_outs += r->swap_outs;
    T->swap_ins += r->swap_ins;
    T->misses += r->misses;
    T->stalls += r->stalls;
    T->stall_s += r->stall_s;
    T->evictions += r->evictions;
    T->evicted_bytes += r->evicted_bytes;
    T->early_freed += r->early_freed;
    T->host_full += r->host_full;
    T->stale += r->stale;
    T->switched += r->switched;
    T->event_queries += r->event_queries;
    T->waits += r->waits;
    if (r->peak_bytes > T->peak_bytes) T->peak_bytes = r->peak_bytes;
    if (r->host_peak_bytes > T->host_peak_bytes) T->host_peak_bytes = r->host_peak_bytes;
    if (r->peak_reserved_bytes > T->peak_reserved_bytes) T->peak_reserved_bytes = r->peak_reserved_bytes;
    if (r->plan_peak_reserved_bytes > T->plan_peak_reserved_bytes) T->plan_peak_reserved_bytes = r->plan_peak_reserved_bytes;
    x->in_iter = 0;
    if (!st) st = x->err;
    tl_held = NULL;
    return st;
}

static void x_destroy(void *self) {
    exec *x = self;
    if (!x) return;
    ss_ctx_t *ctx = x->ctx;
    if (x->alloc) ss_alloc_set_evict(x->alloc, NULL, NULL);
    /* every copy done first (freeing a stream waits for its work even when syncs fail), so
     * that host buffers and fallback buffers go back without asking any event */
    if (x->d2h && ss_stream_sync(x->dev, x->d2h)) { ss_stream_free(x->dev, x->d2h); x->d2h = NULL; }
    if (x->h2d && ss_stream_sync(x->dev, x->h2d)) { ss_stream_free(x->dev, x->h2d); x->h2d = NULL; }
    if (x->compute) ss_stream_sync(x->dev, x->compute);
    for (xt *t = x->head, *nx; t; t = nx) {
        nx = t->next;
        if (t->host) ss_hostpool_put(x->pool, t->host);
        if (t->fallback) ss_mem_free(x->dev, t->ptr_in, (size_t)t->bytes);
        ssi_handle *h = ssi_ctx_handle(ctx, t->hv);
        if (h) h->exec = NULL;
        free(t);
    }
    x->head = NULL;
    if (x->alloc) {
        /* pending releases hold our events: release them all now */
        ss_alloc_reach(x->alloc, UINT64_MAX, NULL, NULL);
        if (x->stock) {   /* the stock FIFO is drained by an allocation's poll */
            ss_block_t *b = NULL;
            if (ss_alloc_malloc(x->alloc, SS_ALLOC_ALIGN, &b) == SS_OK) ss_alloc_free(x->alloc, b);
        }
    }
    for (size_t i = 0; i < x->nevall; i++) ss_event_free(x->dev, x->evall[i]);
    if (x->marker) ss_event_free(x->dev, x->marker);
    if (x->d2h) ss_stream_free(x->dev, x->d2h);
    if (x->h2d) ss_stream_free(x->dev, x->h2d);
    if (x->own_compute && x->compute) ss_stream_free(x->dev, x->compute);
    if (x->own_pool && x->pool) ss_hostpool_destroy(x->pool);
    free(x->evall); free(x->evfree); free(x->evdef);
    free(x->nmap); free(x->feat); free(x->ent_of); free(x->tent); free(x->fop); free(x->sorted); free(x->taken); free(x->otab);
    free(x->outq.a); free(x->inq.a); free(x->freeq.a); free(x->late); free(x->early);
    ssi_timeline_free(&x->tl);
    ssi_timeline_free(&x->tl_last);
    free(x->persist);
    free(x);
}

/* ---- public ------------------------------------------------------------------------------- */

static const char *const mode_names[] = {"off", "smartswap", "offload-all"};

const char *ss_swap_mode_name(int mode) {
    return mode >= 0 && mode <= SS_SWAP_OFFLOAD_ALL ? mode_names[mode] : "?";
}

int ss_swap_mode_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i <= SS_SWAP_OFFLOAD_ALL; i++)
        if (strcmp(name, mode_names[i]) == 0) return i;
    return -1;
}

ss_exec_config ss_exec_config_default(void) {
    ss_exec_config c;
    memset(&c, 0, sizeof c);
    c.mode = SS_SWAP_SMARTSWAP;
    c.poison = -1;
    c.use_policy = 1;
    return c;
}

static void plan_free_hook(void *user, ss_plan *p) { (void)user; ssi_plan_free(p); }

/* The policy, its simulations starting from the allocator's layout as it is now: the
 * persistent tensors one by one (docs/policy.md). */
static ss_status x_policy_hook(void *user, const ss_profile *p, ss_plan **out) {
    exec *x = user;
    size_t n = 0;
    x->pcfg.persist_bytes = NULL;
    x->pcfg.npersist = 0;
    if (x->alloc && ss_alloc_persistent_sizes(x->alloc, NULL, 0, &n) == SS_OK && n && n < UINT32_MAX) {
        uint64_t *v = realloc(x->persist, n * sizeof *v);
        size_t got = 0;
        if (v) {
            x->persist = v;
            if (ss_alloc_persistent_sizes(x->alloc, v, n, &got) == SS_OK && got == n) {
                x->pcfg.persist_bytes = v;
                x->pcfg.npersist = (uint32_t)n;
            }
        }
    }
    return x->hybrid ? ssi_recompute_hook(&x->pcfg, p, out) : ssi_policy_hook(&x->pcfg, p, out);
}

static int any_live(ss_ctx_t *ctx) {
    for (uint32_t i = 0; i < ctx->nhs; i++)
        if (ctx->hs[i].live) return 1;
    return 0;
}

ss_status ss_ctx_enable_swap_ex(ss_ctx_t *ctx, const ss_exec_config *cfg) {
    SS_CHECK_ARG(!ctx || !cfg, "ss_ctx_enable_swap: NULL argument");
    SS_CHECK_ARG(cfg->mode < SS_SWAP_OFF || cfg->mode > SS_SWAP_OFFLOAD_ALL,
                 "ss_ctx_enable_swap: mode %d is not an ss_swap_mode", cfg->mode);
    if (ctx->in_iter) {
        SS_ERROR("ss_ctx_enable_swap: an iteration is open (call it between iterations)");
        return SS_ERR_STATE;
    }
    if (any_live(ctx)) {
        SS_ERROR("ss_ctx_enable_swap: saved tensors are still live (release them first)");
        return SS_ERR_STATE;
    }
    if (ctx->opts.disable) return SS_OK;   /* pass-through stays pass-through */
    if (ctx->exec) {
        const ssi_exec_ops *old = ctx->exec;
        ssi_ctx_set_exec(ctx, NULL);
        if (old->destroy) old->destroy(old->self);
    }
    if (cfg->mode == SS_SWAP_OFF) return SS_OK;
    SS_CHECK_ARG(!ctx->device, "ss_ctx_enable_swap: the context has no device (cfg.device)");
    exec *x = calloc(1, sizeof *x);
    if (!x) return SS_ERR_HOST_OOM;
    x->ctx = ctx;
    x->mode = cfg->mode;
    x->owner = ctx->mem_owner;
    x->dev = ctx->device;
    x->alloc = ctx->mem_owner == SS_MEM_SMARTSWAP ? ctx->alloc : NULL;
    x->ogen = 1;
    const ss_device_caps *caps = ss_device_get_caps(x->dev);
    x->virt = caps && caps->virtual_clock;
    x->d2h_bps = caps ? caps->d2h_gbps * 1e9 : 0;
    x->h2d_bps = caps ? caps->h2d_gbps * 1e9 : 0;
    x->lat = ctx->opts.sim_latency_us * 1e-6;
    x->stock = ctx->opts.release_mode == SS_RELEASE_MODE_STOCK;
    ss_status st = SS_OK;
    x->compute = ctx->compute;
    if (!x->compute) {
        if ((st = ss_stream_wrap(x->dev, NULL, &x->compute))) goto fail;
        x->own_compute = 1;
    }
    if ((st = ss_stream_new(x->dev, &x->d2h)) || (st = ss_stream_new(x->dev, &x->h2d)) ||
        (st = ss_event_new(x->dev, &x->marker)))
        goto fail;
    x->pool = cfg->hostpool;
    if (!x->pool) {
        if ((st = ss_hostpool_new(x->dev, ctx->opts.host_mem_bytes, &x->pool))) goto fail;
        x->own_pool = 1;
    }
    if (cfg->poison) {
        /* probe: cpu-sim supports it, others say SS_ERR_UNSUPPORTED */
        size_t found = 0;
        ss_status ps = SS_ERR_UNSUPPORTED;
        void *probe = NULL;
        if (ss_mem_alloc(x->dev, SS_ALLOC_ALIGN, &probe) == SS_OK) {
            ps = ss_mem_check_poison(x->dev, probe, SS_ALLOC_ALIGN, &found);
            ss_mem_free(x->dev, probe, SS_ALLOC_ALIGN);
        }
        x->poison = ps == SS_OK;
        if (cfg->poison == 1 && !x->poison) { st = SS_ERR_UNSUPPORTED; goto fail; }
    }
    x->ops.self = x;
    x->ops.iter_begin = x_iter_begin;
    x->ops.op = x_op;
    x->ops.save = x_save;
    x->ops.load = x_load;
    x->ops.release = x_release;
    x->ops.action_done = x_action_done;
    x->ops.iter_end = x_iter_end;
    x->ops.plan_switch = x_plan_switch;
    x->ops.destroy = x_destroy;
    if (x->mode == SS_SWAP_SMARTSWAP && cfg->use_policy) {
        ssi_policy_config_from_options(&ctx->opts, &x->pcfg);
        if (x->alloc) {
            /* the policy simulates the allocator the run really uses: its segment size (the
             * trainer sizes segments from the budget), and its budget when none was given */
            ss_alloc_config ac;
            if (ss_alloc_get_config(x->alloc, &ac) == SS_OK) {
                x->pcfg.segment_bytes = ac.segment_bytes;
                x->pcfg.granule_bytes = ac.granule_bytes;   /* as raised by the allocator */
                if (!x->pcfg.budget_bytes) x->pcfg.budget_bytes = ac.budget_bytes;
            }
        }
        if (x->pcfg.budget_bytes) {
            x->hybrid = cfg->hybrid;
            ssi_planner pl = {x_policy_hook, plan_free_hook, x};
            if ((st = ssi_ctx_set_planner(ctx, &pl))) goto fail;
        }
    }
    if ((st = ssi_ctx_set_exec(ctx, &x->ops))) goto fail;
    if (x->alloc) ss_alloc_set_evict(x->alloc, x_evict, x);
    return SS_OK;
fail:
    x_destroy(x);
    return st;
}

ss_status ss_ctx_recompute_planned(ss_ctx_t *ctx, uint64_t handle, int *yes) {
    SS_CHECK_ARG(!ctx || !yes, "ss_ctx_recompute_planned: NULL argument");
    *yes = 0;
    pthread_mutex_lock(&ctx->lock);
    ssi_handle *h = ssi_ctx_handle(ctx, handle);
    ss_status st = SS_OK;
    if (!h) {
        SS_ERROR("ss_ctx_recompute_planned: handle %#llx is not live", (unsigned long long)handle);
        st = SS_ERR_STATE;
    } else if (h->exec && ctx->exec && ctx->exec->save == x_save) {
        *yes = ((const xt *)h->exec)->rc;
    }
    pthread_mutex_unlock(&ctx->lock);
    return st;
}

ss_status ss_ctx_enable_swap(ss_ctx_t *ctx, int mode) {
    ss_exec_config c = ss_exec_config_default();
    c.mode = mode;
    return ss_ctx_enable_swap_ex(ctx, &c);
}

static exec *exec_of(ss_ctx_t *ctx) {
    return ctx && ctx->exec && ctx->exec->destroy == x_destroy ? ctx->exec->self : NULL;
}

ss_status ss_ctx_exec_report(ss_ctx_t *ctx, ss_exec_report *out) {
    SS_CHECK_ARG(!ctx || !out, "ss_ctx_exec_report: NULL argument");
    exec *x = exec_of(ctx);
    if (!x) return SS_ERR_STATE;
    pthread_mutex_lock(&ctx->lock);
    *out = x->last;
    pthread_mutex_unlock(&ctx->lock);
    return SS_OK;
}

ss_status ss_ctx_exec_totals(ss_ctx_t *ctx, ss_exec_report *out) {
    SS_CHECK_ARG(!ctx || !out, "ss_ctx_exec_totals: NULL argument");
    exec *x = exec_of(ctx);
    if (!x) return SS_ERR_STATE;
    pthread_mutex_lock(&ctx->lock);
    *out = x->tot;
    pthread_mutex_unlock(&ctx->lock);
    return SS_OK;
}

ss_status ss_ctx_exec_timeline(ss_ctx_t *ctx, int on) {
    SS_CHECK_ARG(!ctx, "ss_ctx_exec_timeline: ctx is NULL");
    exec *x = exec_of(ctx);
    if (!x) return SS_ERR_STATE;
    pthread_mutex_lock(&ctx->lock);
    x->tl_on = on != 0;
    pthread_mutex_unlock(&ctx->lock);
    return SS_OK;
}

ss_status ssi_exec_timeline_get(ss_ctx_t *ctx, ssi_timeline *out, double *t0) {
    exec *x = exec_of(ctx);
    if (!x || !out) return SS_ERR_STATE;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&ctx->lock);
    ss_status st = x->has_last ? SS_OK : SS_ERR_STATE;
    for (size_t i = 0; !st && i < x->tl_last.n; i++) {
        const ssi_span *s = &x->tl_last.spans[i];
        st = ssi_timeline_add(out, s->lane, s->id, s->t0, s->t1, s->name);
    }
    if (t0) *t0 = x->tl_last_t0;
    pthread_mutex_unlock(&ctx->lock);
    if (st) ssi_timeline_free(out);
    return st;
}

uint32_t ssi_exec_fwd_end(ss_ctx_t *ctx) {
    exec *x = exec_of(ctx);
    if (!x) return 0;
    pthread_mutex_lock(&ctx->lock);
    uint32_t f = x->fwd_end;
    pthread_mutex_unlock(&ctx->lock);
    return f;
}

ss_status ss_ctx_exec_timeline_write(ss_ctx_t *ctx, const char *path) {
    SS_CHECK_ARG(!ctx || !path, "ss_ctx_exec_timeline_write: NULL argument");
    ssi_timeline tl;
    ss_status st = ssi_exec_timeline_get(ctx, &tl, NULL);
    if (st) {
        SS_ERROR("ss_ctx_exec_timeline_write: no iteration was recorded (ss_ctx_exec_timeline)");
        return st;
    }
    st = ssi_timeline_write(path, &tl, 0, NULL);
    ssi_timeline_free(&tl);
    return st;
}

ss_status ssi_exec_set_plan(ss_ctx_t *ctx, const ss_plan *plan, const ss_profile *prof) {
    exec *x = exec_of(ctx);
    if (!x) return SS_ERR_STATE;
    if (ctx->in_iter) return SS_ERR_STATE;
    pthread_mutex_lock(&ctx->lock);
    x->fixed = plan;
    x->fixed_prof = plan ? prof : NULL;
    pthread_mutex_unlock(&ctx->lock);
    return SS_OK;
}

const ss_plan *ssi_exec_plan(ss_ctx_t *ctx) {
    exec *x = exec_of(ctx);
    return x ? x->plan : NULL;
}

/* SS_MEM_FRAMEWORK: the caller's resident saved bytes exceed its budget by `need` (api-torch.c
 * tallies them) in an iteration whose plan did not foresee it (a Stable plan outgrown by the
 * sizes, say). Swap-outs already issued (X_OUT) go first: their copy is waited for and the DROP
 * is handed out now instead of at the planned free point (their planned swap-in still runs).
 * Then resident tensors of at least min_bytes whose next use is farthest (not NOSWAP, not used
 * at the current operator) are copied out, waited for, and handed out as SS_ACTION_DROP; their
 * loads are counted misses. Counted as evictions; a Stable plan that needed one is marked
 * stale, as the allocator's fallback does. *freed: the bytes handed out. Takes the lock. */
ss_status ssi_exec_evict_framework(ss_ctx_t *ctx, uint64_t need, uint64_t min_bytes,
                                   uint64_t *freed) {
    exec *x = exec_of(ctx);
    *freed = 0;
    if (!x || x->owner != SS_MEM_FRAMEWORK) return SS_ERR_STATE;
    pthread_mutex_lock(&ctx->lock);
    tl_held = ctx;
    ssi_ovh o = ssi_ovh_begin(ctx);
    ss_status st = SS_OK;
    for (xt *t = x->head; t && *freed < need && !st; t = t->next) {
        if (t->state != X_OUT || !t->ev_out) continue;
        if ((st = ss_event_sync(x->dev, t->ev_out)) ||
            (st = ssi_ctx_push_action(ctx, SS_ACTION_DROP, t->hv, t->bytes)))
            break;
        t->state = X_HOST;
        t->counted = 1;
        ctx->swapped += t->bytes;
        *freed += t->bytes;
    }
    while (!st && *freed < need) {
        xt *best = NULL;
        double bu = -1;
        for (xt *t = x->head; t; t = t->next) {
            if (t->state != X_RES || t->bytes < min_bytes) continue;
            ssi_handle *h = ssi_ctx_handle(ctx, t->hv);
            if (!h || (h->flags & SS_SAVE_NOSWAP)) continue;
            if (t->use_iter == ctx->iter && t->last_op == x->cur && x->in_iter) continue;
            double u = next_use(x, t);
            if (!best || u > bu || (u == bu && t->bytes > best->bytes)) { best = t; bu = u; }
        }
        if (!best) break;   /* nothing movable left: the budget stays exceeded */
        if ((st = issue_out(x, best, ssi_ctx_handle(ctx, best->hv), 0, 1))) {
            if (st == SS_ERR_HOST_OOM)
                SS_ERROR("exec: eviction needs host memory but the host pool is at its cap "
                         "(raise --host-mem / SMARTSWAP_HOST_MEM)");
            break;
        }
        *freed += best->bytes;
        x->rep.evictions++;
        x->rep.evicted_bytes += best->bytes;
    }
    if (*freed && x->in_iter && x->plan && !x->fixed && ctx->st.stage_now == SS_STAGE_STABLE &&
        !ctx->st.recording && !x->rep.stale) {
        ssi_stage_mark_stale(ctx);
        x->rep.stale = 1;
    }
    ssi_ovh_end(ctx, o);
    tl_held = NULL;
    pthread_mutex_unlock(&ctx->lock);
    return *freed ? SS_OK : st;
}
