/* recompute.c: swap or recompute, the hybrid policy (recompute.h, docs/policy.md). */
#include "recompute.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first use of tensor t in the backward (the use a recompute rebuilds it for), or SS_NONE.
 * A trainer's profile has no forward uses of a saved tensor (it is saved when the forward drops
 * it); a generated one does (xn is read by q_proj, k_proj, v_proj): those stay as they are. */
static uint32_t first_use(const ss_profile *p, uint32_t t) {
    const ss_prof_tensor *x = &p->tensors[t];
    for (uint32_t i = 0; i < x->nuses; i++) {
        uint32_t u = p->uses[x->use_off + i];
        if (u > x->producer && p->ops[u].phase == SS_PHASE_BWD) return u;
    }
    return SS_NONE;
}

/* The last access of t before op u (its last use before u, else its producer): where a
 * recomputed t is dropped. */
static uint32_t last_before(const ss_profile *p, uint32_t t, uint32_t u) {
    const ss_prof_tensor *x = &p->tensors[t];
    uint32_t a = x->producer;
    for (uint32_t i = 0; i < x->nuses; i++) {
        uint32_t v = p->uses[x->use_off + i];
        if (v < u && v > a) a = v;
    }
    return a;
}

int ssi_recompute_candidate(const ss_profile *p, uint32_t t) {
    if (!p || t >= p->ntensors) return 0;
    const ss_prof_tensor *x = &p->tensors[t];
    if (!x->rc_nop || x->rc_nop > 2 || x->rc_nsrc > 2) return 0;
    if (!(x->flags & SS_TENSOR_SAVED) || (x->flags & SS_TENSOR_NOSWAP)) return 0;
    uint32_t u = first_use(p, t);
    if (u == SS_NONE) return 0;
    /* every use comes after the producer: nothing reads it between its save and u */
    if (p->uses[x->use_off] < x->producer) return 0;
    for (uint32_t k = 0; k < x->rc_nop; k++)
        if (x->rc_op[k] > x->producer) return 0;
    for (uint32_t k = 0; k < x->rc_nsrc; k++) {
        uint32_t s = x->rc_src[k];
        if (s >= p->ntensors || s == t) return 0;
        const ss_prof_tensor *y = &p->tensors[s];
        if (!(y->flags & SS_TENSOR_SAVED) || y->producer > u) return 0;
        if (y->release != SS_NONE && y->release < u) return 0;
    }
    return 1;
}

int ssi_plan_has_recompute(const ss_plan *plan) {
    if (!plan) return 0;
    for (uint32_t k = 0; k < plan->nentries; k++)
        if (plan->entries[k].action == SS_PLAN_RECOMPUTE) return 1;
    return 0;
}

/* ---- spans: whole layers re-run from their input ------------------------------------------
 * A span (ss_prof_tensor.span_*) of source s covers the saved tensors produced (saved) while its
 * operators ran, s excepted: its members. Taken whole, every member is dropped at its save and
 * all are rebuilt at once at `at`, the first backward use of any of them, by re-running the
 * span's operators from s (which is kept or swapped, and gets a use there). A span is usable
 * when every member is saved and swappable, s is alive at
 * `at` (uses before it, in the forward, stay: a member is dropped after its last access before
 * `at`), no member is in another span, and some member has no recipe of its own (so a plan
 * that drops all members at `at` can only mean the span: the trainer decides the same way). */
typedef struct span {
    uint32_t src, at, first, nop;
    uint32_t mem_off, nmem;     /* members: sp->mem[mem_off .. mem_off + nmem) */
    uint64_t bytes;             /* their bytes */
} span;

typedef struct spans {
    span     *g;
    uint32_t  ng;
    uint32_t *mem;              /* members of every span */
    uint32_t *of;               /* of[t]: the span t is a member of, or SS_NONE */
} spans;

static void spans_free(spans *S) {
    free(S->g);
    free(S->mem);
    free(S->of);
    memset(S, 0, sizeof *S);
}

/* The usable spans of p (none when p registers none). */
static ss_status spans_find(const ss_profile *p, spans *S) {
    memset(S, 0, sizeof *S);
    uint32_t nt = p->ntensors, ns = 0;
    for (uint32_t t = 0; t < nt; t++) if (p->tensors[t].span_nop) ns++;
    S->of = malloc(((size_t)nt + 1) * sizeof *S->of);
    if (!S->of) return SS_ERR_HOST_OOM;
    for (uint32_t t = 0; t < nt; t++) S->of[t] = SS_NONE;
    if (!ns) return SS_OK;
    S->g = calloc(ns, sizeof *S->g);
    S->mem = malloc(((size_t)nt + 1) * sizeof *S->mem);
    if (!S->g || !S->mem) { spans_free(S); return SS_ERR_HOST_OOM; }
    uint32_t nm = 0;
    for (uint32_t s = 0; s < nt; s++) {
        const ss_prof_tensor *x = &p->tensors[s];
        if (!x->span_nop || !(x->flags & SS_TENSOR_SAVED)) continue;
        span g = {s, SS_NONE, x->span_first, x->span_nop, nm, 0, 0};
        uint32_t last = x->span_first + x->span_nop - 1;
        int ok = 1, own_only = 1;
        for (uint32_t t = 0; t < nt && ok; t++) {
            const ss_prof_tensor *y = &p->tensors[t];
            if (t == s || !(y->flags & SS_TENSOR_SAVED) || y->producer < g.first || y->producer > last) continue;
            uint32_t u = first_use(p, t);
            if (u == SS_NONE) continue;           /* never read back: nothing to rebuild */
            if ((y->flags & SS_TENSOR_NOSWAP) || S->of[t] != SS_NONE || y->span_nop ||
                p->uses[y->use_off] < y->producer) ok = 0;
            if (!ssi_recompute_candidate(p, t)) own_only = 0;
            if (u < g.at) g.at = u;
            S->mem[nm + g.nmem++] = t;
            g.bytes += y->bytes;
        }
        /* (a member's forward uses stay: it is dropped after its last access before at) */
        if (!ok || !g.nmem || own_only || x->producer > g.at || (x->release != SS_NONE && x->release < g.at))
            continue;
        for (uint32_t k = 0; k < g.nmem; k++) S->of[S->mem[nm + k]] = S->ng;
        nm += g.nmem;
        S->g[S->ng++] = g;
    }
    return SS_OK;
}

/* Where tensor t is rebuilt under rc (1: its own recipe, at its first use; 2: its span's). */
static uint32_t rebuild_at(const ss_profile *p, const spans *S, const uint8_t *rc, uint32_t t) {
    return rc[t] == 2 ? S->g[S->of[t]].at : first_use(p, t);
}

static ss_status derive_spans(const ss_profile *p, const spans *S, const uint8_t *rc, ss_profile **out) {
    *out = NULL;
    uint32_t n = p->nops, nt = p->ntensors;
    for (uint32_t t = 0; t < nt; t++) {
        if (rc[t] == 1 && !ssi_recompute_candidate(p, t)) return SS_ERR_INVALID;
        if (rc[t] == 2) {   /* a span is taken whole */
            if (S->of[t] == SS_NONE) return SS_ERR_INVALID;
            const span *g = &S->g[S->of[t]];
            for (uint32_t k = 0; k < g->nmem; k++) if (rc[S->mem[g->mem_off + k]] != 2) return SS_ERR_INVALID;
            if (rc[g->src]) return SS_ERR_INVALID;
        }
        if (rc[t] > 2) return SS_ERR_INVALID;
    }
    ss_profile *q = NULL;
    ss_status st = ssi_profile_new(&q);
    if (st) return st;
    int64_t *drop = calloc((size_t)n + 1, sizeof *drop), *droppk = calloc((size_t)n + 2, sizeof *droppk);
    uint32_t *fu = malloc(((size_t)nt + 1) * sizeof *fu), *lb = malloc(((size_t)nt + 1) * sizeof *lb);
    uint8_t *gdone = calloc((size_t)S->ng + 1, 1);
    if (!drop || !droppk || !fu || !lb || !gdone) { st = SS_ERR_HOST_OOM; goto out; }
    memcpy(q->desc, p->desc, sizeof q->desc);
    q->seq_hash = p->seq_hash;
    q->size_sig = p->size_sig;
    q->base_bytes = p->base_bytes;
    q->iter_seconds = p->iter_seconds;
    for (uint32_t i = 0; i < p->nnames && !st; i++) {
        uint32_t id;
        st = ssi_profile_intern(q, p->names[i], &id);
    }
    double extra_s = 0;
    for (uint32_t t = 0; t < nt; t++) {
        fu[t] = SS_NONE;
        if (!rc[t]) continue;
        const ss_prof_tensor *x = &p->tensors[t];
        fu[t] = rebuild_at(p, S, rc, t);
        lb[t] = last_before(p, t, fu[t]);
        int64_t b = (int64_t)ssi_round_block(x->bytes);
        drop[lb[t]] += b;        /* gone after op lb[t] .. */
        drop[fu[t]] -= b;        /* .. until the rebuild at fu[t] */
        droppk[lb[t] + 1] += b;  /* and during the ops in between */
        droppk[fu[t]] -= b;
    }
    int64_t d = 0, dp = 0;
    for (uint32_t i = 0; i < n && !st; i++) {
        ss_prof_op o = p->ops[i];
        d += drop[i];
        dp += droppk[i];
        if (d > 0) o.mem_after = o.mem_after > (uint64_t)d ? o.mem_after - (uint64_t)d : 0;
        if (dp > 0 && o.mem_peak) o.mem_peak = o.mem_peak > (uint64_t)dp ? o.mem_peak - (uint64_t)dp : 0;
        st = ssi_profile_add_op(q, &o, NULL);
    }
    /* the recipes' price, at the use that rebuilds them */
    for (uint32_t t = 0; t < nt && !st; t++) {
        if (!rc[t]) continue;
        const ss_prof_tensor *x = &p->tensors[t];
        ss_prof_op *o = &q->ops[fu[t]];
        if (rc[t] == 1) {
            for (uint32_t k = 0; k < x->rc_nop; k++) {
                const ss_prof_op *r = &p->ops[x->rc_op[k]];
                o->seconds += r->seconds;
                o->flops += r->flops;
                extra_s += r->seconds;
            }
            continue;
        }
        uint32_t gi = S->of[t];
        if (gdone[gi]) continue;
        gdone[gi] = 1;
        /* the span's operators once; while they re-run, a copy of the source and what the
         * forward held in the span beside its members (outputs not saved, temporaries: the
         * level above the span's start less the members saved so far, at its most) are held
         * beside the members being rebuilt */
        const span *g = &S->g[gi];
        uint64_t tmp = 0, cum = 0;
        uint64_t base0 = g->first ? p->ops[g->first - 1].mem_after : p->base_bytes;
        for (uint32_t i = g->first; i < g->first + g->nop; i++) {
            const ss_prof_op *r = &p->ops[i];
            o->seconds += r->seconds;
            o->flops += r->flops;
            extra_s += r->seconds;
            uint64_t lvl = r->mem_peak > r->mem_after ? r->mem_peak : r->mem_after;
            uint64_t before = cum;   /* members saved before op i (all of them live during it) */
            for (uint32_t k = 0; k < g->nmem; k++)
                if (p->tensors[S->mem[g->mem_off + k]].producer == i) cum += ssi_round_block(p->tensors[S->mem[g->mem_off + k]].bytes);
            uint64_t held = lvl > base0 + before ? lvl - base0 - before : 0;
            if (held > tmp) tmp = held;
        }
        uint64_t lvl = o->mem_peak ? o->mem_peak : o->mem_after;
        o->mem_peak = lvl + ssi_round_block(p->tensors[g->src].bytes) + tmp;
    }
    if (q->iter_seconds > 0) q->iter_seconds += extra_s;
    for (uint32_t t = 0; t < nt && !st; t++) {
        ss_prof_tensor x = p->tensors[t];
        if (rc[t]) x.release = lb[t];
        st = ssi_profile_add_tensor(q, &x, NULL);
        const ss_prof_tensor *s = &p->tensors[t];
        for (uint32_t u = 0; u < s->nuses && !st; u++)   /* a recomputed one: its forward uses */
            if (!rc[t] || p->uses[s->use_off + u] < fu[t]) st = ssi_profile_add_use(q, t, p->uses[s->use_off + u]);
    }
    for (uint32_t t = 0; t < nt && !st; t++) {
        if (!rc[t]) continue;
        const ss_prof_tensor *x = &p->tensors[t];
        if (rc[t] == 1)
            for (uint32_t k = 0; k < x->rc_nsrc && !st; k++) st = ssi_profile_add_use(q, x->rc_src[k], fu[t]);
        else
            st = ssi_profile_add_use(q, S->g[S->of[t]].src, fu[t]);
        /* the rebuilt copy: a temporary from its rebuild to the original release */
        ss_prof_tensor y;
        memset(&y, 0, sizeof y);
        y.bytes = x->bytes;
        y.dtype = x->dtype;
        y.ndim = x->ndim;
        memcpy(y.shape, x->shape, sizeof y.shape);
        y.producer = fu[t];
        y.release = x->release;
        uint32_t yi = 0;
        if (!st) st = ssi_profile_add_tensor(q, &y, &yi);
        for (uint32_t u = 0; u < x->nuses && !st; u++) {
            uint32_t op = p->uses[x->use_off + u];
            if (op > fu[t]) st = ssi_profile_add_use(q, yi, op);
        }
    }
    if (!st) st = ssi_profile_finalize(q);
out:
    free(drop);
    free(droppk);
    free(fu);
    free(lb);
    free(gdone);
    if (st) { ssi_profile_free(q); return st; }
    *out = q;
    return SS_OK;
}

ss_status ssi_recompute_derive(const ss_profile *p, const uint8_t *rc, ss_profile **out) {
    if (!p || !rc || !out) return SS_ERR_INVALID;
    *out = NULL;
    spans S;
    ss_status st = spans_find(p, &S);
    if (st) return st;
    st = derive_spans(p, &S, rc, out);
    spans_free(&S);
    return st;
}

/* Simulates a plan with recompute entries: on the profile as the run has it (derive), with
 * the swap entries. Called by ssi_sim_run. A span counts as taken whole when every member has
 * a recompute entry at the span's rebuild point; every other recompute entry must be its
 * tensor's own recipe at its first use. */
ss_status ssi_recompute_sim(const ss_profile *p, const ss_plan *plan, const ssi_sim_config *c,
                            ssi_sim_result *r, char *err, size_t err_len) {
    uint32_t nt = p->ntensors, ne = plan->nentries;
    uint8_t *rc = calloc((size_t)nt + 1, 1);
    uint32_t *map = malloc(((size_t)ne + 1) * sizeof *map), *eu = malloc(((size_t)nt + 1) * sizeof *eu);
    uint32_t *eo = malloc(((size_t)nt + 1) * sizeof *eo);
    ss_plan_entry *ent = malloc(((size_t)ne + 1) * sizeof *ent);
    ss_profile *q = NULL;
    spans S;
    memset(&S, 0, sizeof S);
    ss_status st = SS_OK;
    if (!rc || !map || !ent || !eu || !eo) { st = SS_ERR_HOST_OOM; goto out; }
    if (plan->nops != p->nops) {
        ssi_fmt(err, err_len, "the plan is for %u operators but the profile has %u", plan->nops, p->nops);
        st = SS_ERR_INVALID;
        goto out;
    }
    if ((st = spans_find(p, &S))) goto out;
    for (uint32_t t = 0; t < nt; t++) eu[t] = eo[t] = SS_NONE;
    uint32_t m = 0;
    for (uint32_t k = 0; k < ne; k++) {
        const ss_plan_entry *e = &plan->entries[k];
        if (e->action != SS_PLAN_RECOMPUTE) { map[m] = k; ent[m++] = *e; continue; }
        if (e->tensor >= nt || eu[e->tensor] != SS_NONE || p->tensors[e->tensor].bytes != e->bytes) {
            ssi_fmt(err, err_len, "entry %u: recompute of tensor %u does not fit the profile (other bytes, "
                    "or recomputed twice)", k, e->tensor);
            st = SS_ERR_INVALID;
            goto out;
        }
        eu[e->tensor] = e->use_op;
        eo[e->tensor] = e->out_op;
    }
    for (uint32_t gi = 0; gi < S.ng; gi++) {
        const span *g = &S.g[gi];
        uint32_t k = 0;
        while (k < g->nmem && eu[S.mem[g->mem_off + k]] == g->at) k++;
        if (k < g->nmem) continue;
        for (k = 0; k < g->nmem; k++) rc[S.mem[g->mem_off + k]] = 2;
    }
    for (uint32_t t = 0; t < nt; t++) {
        if (eu[t] == SS_NONE) continue;
        uint32_t at = rc[t] == 2 ? S.g[S.of[t]].at : first_use(p, t);
        if (rc[t] != 2) {
            if (!ssi_recompute_candidate(p, t) || eu[t] != at) {
                ssi_fmt(err, err_len, "recompute of tensor %u does not fit the profile (no recipe, no span taken "
                        "whole, or a rebuild point other than its first use)", t);
                st = SS_ERR_INVALID;
                goto out;
            }
            rc[t] = 1;
        }
        if (eo[t] != last_before(p, t, at)) {
            ssi_fmt(err, err_len, "recompute of tensor %u: dropped after op %u, not at its save (op %u)", t, eo[t],
                    last_before(p, t, at));
            st = SS_ERR_INVALID;
            goto out;
        }
    }
    if ((st = derive_spans(p, &S, rc, &q))) {
        if (st == SS_ERR_INVALID) ssi_fmt(err, err_len, "a recompute entry's tensor has no usable recipe");
        goto out;
    }
    ss_plan sw = *plan;
    sw.entries = ent;
    sw.nentries = m;
    ssi_sim_result r2;
    if ((st = ssi_sim_run(q, &sw, c, &r2, err, err_len))) goto out;
    double *to = calloc((size_t)ne + 1, sizeof *to), *ti = calloc((size_t)ne + 1, sizeof *ti);
    double *tu = calloc((size_t)ne + 1, sizeof *tu);
    if (!to || !ti || !tu) {
        free(to); free(ti); free(tu);
        ssi_sim_result_free(&r2);
        st = SS_ERR_HOST_OOM;
        goto out;
    }
    for (uint32_t j = 0; j < m; j++) {
        to[map[j]] = r2.t_out_done[j];
        ti[map[j]] = r2.t_in_done[j];
        tu[map[j]] = r2.t_use[j];
    }
    free(r2.t_out_done); free(r2.t_in_done); free(r2.t_use);
    *r = r2;
    r->t_out_done = to;
    r->t_in_done = ti;
    r->t_use = tu;
    r->nentries = ne;
out:
    ssi_profile_free(q);
    spans_free(&S);
    free(rc);
    free(map);
    free(ent);
    free(eu);
    free(eo);
    return st;
}

/* ---- the choice: own recipes and spans, by bytes freed per second of recompute ------------ */

typedef struct item {
    uint32_t span;      /* 0: tensor id's own recipe; 1: span id taken whole */
    uint32_t id;
    uint64_t bytes;
    double   cost, key;
    int      dead;      /* taken, then absorbed by a span taken later */
} item;

static int item_cmp(const void *a, const void *b) {
    const item *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    if (x->span != y->span) return x->span < y->span ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The candidates, sorted: every own recipe and every usable span of at least min_swap bytes. */
static ss_status items_make(const ss_profile *p, const spans *S, const double *dur, uint64_t min_swap,
                            item **out, uint32_t *nout) {
    uint32_t nt = p->ntensors, n = 0;
    item *it = malloc(((size_t)nt + S->ng + 1) * sizeof *it);
    if (!it) return SS_ERR_HOST_OOM;
    for (uint32_t t = 0; t < nt; t++) {
        if (!ssi_recompute_candidate(p, t) || p->tensors[t].bytes < min_swap) continue;
        double cost = 0;
        for (uint32_t k = 0; k < p->tensors[t].rc_nop; k++) cost += dur[p->tensors[t].rc_op[k]];
        it[n++] = (item){0, t, p->tensors[t].bytes, cost, 0, 0};
    }
    for (uint32_t g = 0; g < S->ng; g++) {
        if (S->g[g].bytes < min_swap) continue;
        double cost = 0;
        for (uint32_t i = S->g[g].first; i < S->g[g].first + S->g[g].nop; i++) cost += dur[i];
        it[n++] = (item){1, g, S->g[g].bytes, cost, 0, 0};
    }
    for (uint32_t i = 0; i < n; i++) it[i].key = (double)it[i].bytes / (it[i].cost > 1e-12 ? it[i].cost : 1e-12);
    qsort(it, n, sizeof *it, item_cmp);
    *out = it;
    *nout = n;
    return SS_OK;
}

/* Takes items in order while the traffic left (X less the bytes taken) is above xstop; an own
 * recipe is skipped when it is a source of a taken one, its source is rebuilt, or it is in a
 * taken span; a span is skipped when its source is rebuilt or a member is the source of a
 * taken recipe outside it, and absorbs the own recipes of its members taken before it. ord gets
 * the taken items (indices into it) in order, *k their count; with R and cost non-NULL (n
 * entries each), after the j-th take R[j] = the bytes recomputed so far, cost[j] their seconds,
 * and *nsteps the number of takes. own_only: spans are skipped. */
static ss_status select_items(const ss_profile *p, const spans *S, item *it, uint32_t n, double X,
                              double xstop, int own_only, uint32_t *ord, uint32_t *k_out, double *R, double *cost,
                              uint32_t *nsteps) {
    uint32_t nt = p->ntensors, k = 0;
    uint8_t *rc = calloc((size_t)nt + 1, 1);
    uint32_t *used = calloc((size_t)nt + 1, sizeof *used);
    if (!rc || !used) { free(rc); free(used); return SS_ERR_HOST_OOM; }
    double x = X, cr = 0;
    uint32_t steps = 0;
    for (uint32_t i = 0; i < n && x > xstop; i++) {
        item *a = &it[i];
        if (!a->span) {
            const ss_prof_tensor *y = &p->tensors[a->id];
            int clash = rc[a->id] || used[a->id];
            for (uint32_t j = 0; j < y->rc_nsrc; j++) if (rc[y->rc_src[j]]) clash = 1;
            if (clash) continue;
            rc[a->id] = 1;
            for (uint32_t j = 0; j < y->rc_nsrc; j++) used[y->rc_src[j]]++;
        } else {
            const span *g = &S->g[a->id];
            if (own_only || rc[g->src]) continue;
            int clash = 0;   /* a member read by a taken recipe of a tensor outside the span */
            for (uint32_t j = 0; j < k && !clash; j++) {
                const item *b = &it[ord[j]];
                if (b->dead || b->span) continue;
                const ss_prof_tensor *y = &p->tensors[b->id];
                for (uint32_t q = 0; q < y->rc_nsrc; q++)
                    if (S->of[y->rc_src[q]] == a->id && S->of[b->id] != a->id) clash = 1;
            }
            if (clash) continue;
            for (uint32_t j = 0; j < k; j++) {   /* absorb the members' own recipes */
                item *b = &it[ord[j]];
                if (b->dead || b->span || S->of[b->id] != a->id) continue;
                b->dead = 1;
                const ss_prof_tensor *y = &p->tensors[b->id];
                for (uint32_t q = 0; q < y->rc_nsrc; q++) used[y->rc_src[q]]--;
                rc[b->id] = 0;
                x += (double)b->bytes;
                cr -= b->cost;
            }
            for (uint32_t j = 0; j < g->nmem; j++) rc[S->mem[g->mem_off + j]] = 2;
            used[g->src]++;
        }
        ord[k++] = i;
        x -= (double)a->bytes;
        cr += a->cost;
        if (R) {
            R[steps] = X - x;
            cost[steps] = cr;
        }
        steps++;
    }
    if (nsteps) *nsteps = steps;
    uint32_t m = 0;   /* drop the absorbed ones */
    for (uint32_t j = 0; j < k; j++) if (!it[ord[j]].dead) ord[m++] = ord[j];
    *k_out = m;
    free(rc);
    free(used);
    return SS_OK;
}

/* rc of the first `want` taken items. */
static void rc_of(const spans *S, const item *it, const uint32_t *ord, uint32_t want, uint8_t *rc, uint32_t nt) {
    memset(rc, 0, nt);
    for (uint32_t i = 0; i < want; i++) {
        const item *a = &it[ord[i]];
        if (!a->span) { rc[a->id] = 1; continue; }
        const span *g = &S->g[a->id];
        for (uint32_t j = 0; j < g->nmem; j++) rc[S->mem[g->mem_off + j]] = 2;
    }
}

/* Plans the swaps on the derived profile of rc and adds the recompute entries. */
static ss_status plan_with(const ss_profile *p, const spans *S, const ssi_policy_config *c, const uint8_t *rc,
                           ss_plan **out, ssi_policy_report *rep, char *err, size_t err_len) {
    ss_profile *q = NULL;
    ss_status st = derive_spans(p, S, rc, &q);
    if (st) return st;
    ss_plan *pl = NULL;
    st = ssi_policy_plan(q, c, &pl, rep, err, err_len);
    ssi_profile_free(q);
    if (st) return st;
    uint32_t cnt = 0;
    for (uint32_t t = 0; t < p->ntensors && !st; t++) {
        if (!rc[t]) continue;
        ss_plan_entry e;
        memset(&e, 0, sizeof e);
        if ((st = ssi_plan_entry_from_tensor(pl, p, t, &e))) break;
        e.tensor = t;
        e.use_op = e.in_op = rebuild_at(p, S, rc, t);
        e.out_op = last_before(p, t, e.use_op);   /* the save for a trainer's profile */
        e.free_op = e.out_op + 1;
        e.action = SS_PLAN_RECOMPUTE;
        st = ssi_plan_add_entry(pl, &e);
        cnt++;
    }
    if (st) { ssi_plan_free(pl); return st; }
    ssi_plan_sort(pl);
    size_t len = strlen(pl->desc);
    if (len + 1 < sizeof pl->desc)
        ssi_fmt(pl->desc + len, sizeof pl->desc - len, " hybrid:%u", cnt);
    *out = pl;
    return SS_OK;
}

ss_status ssi_recompute_plan(const ss_profile *p, const ssi_policy_config *c, ss_plan **out,
                             ssi_policy_report *rep, ssi_recompute_report *hrep, char *err,
                             size_t err_len) {
    if (!p || !c || !out) return SS_ERR_INVALID;
    ssi_recompute_report hr;
    memset(&hr, 0, sizeof hr);
    ssi_policy_report r0;
    ss_plan *plan0 = NULL;
    ss_status st = ssi_policy_plan(p, c, &plan0, &r0, err, err_len);
    if (st) return st;
    hr.swap_only_bytes = plan0->swapped_bytes;
    hr.swap_only_iter_s = plan0->iter_s;
    hr.swap_only_feasible = plan0->feasible;
    uint32_t nt = p->ntensors, n = p->nops, nc = 0, k = 0, kbest = 0;
    spans S;
    memset(&S, 0, sizeof S);
    item *it = NULL;
    double *dur = malloc(((size_t)n + 1) * sizeof *dur);
    uint8_t *rc = calloc((size_t)nt + 1, 1);
    uint32_t *ord = NULL;
    ss_plan *best = NULL;
    ssi_policy_report rb;
    if (!dur || !rc) { st = SS_ERR_HOST_OOM; goto out; }
    if ((st = ssi_sim_op_times(p, &c->time, dur, err, err_len))) goto out;
    for (uint32_t i = 0; i < n; i++) {
        if (p->ops[i].phase == SS_PHASE_FWD) hr.fwd_s += dur[i];
        else if (p->ops[i].phase == SS_PHASE_BWD) hr.bwd_s += dur[i];
    }
    if ((st = spans_find(p, &S))) goto out;
    if ((st = items_make(p, &S, dur, c->min_swap_bytes, &it, &nc))) goto out;
    hr.candidates = nc;
    /* the traffic the link hides: at most the forward's compute at the D2H rate and the
     * backward's at the H2D rate */
    double xmax = fmin(hr.fwd_s * c->d2h_bps, hr.bwd_s * c->h2d_bps);
    double x = (double)plan0->swapped_bytes;
    if (nc == 0 || (plan0->feasible && x <= xmax)) goto out;
    if (!(ord = malloc(((size_t)nc + 1) * sizeof *ord))) { st = SS_ERR_HOST_OOM; goto out; }
    /* Verify on the simulator, keeping the fastest feasible plan: the chosen set (recompute
     * until the rest fits; with an infeasible pure-swap plan, as far as the list goes), its
     * first half and quarter (the link may hide more than the bound says), and the sets chosen
     * until the rest fits under 3/4 and 1/2 of what the link hides (copies and compute never
     * overlap perfectly: what is left must often stay below the bound to stall nothing). */
    double stops[4] = {plan0->feasible ? xmax : -1.0, 0.75 * xmax, 0.5 * xmax, plan0->feasible ? xmax : -1.0};
    uint32_t *ord2 = malloc(((size_t)nc + 1) * sizeof *ord2);
    if (!ord2) { st = SS_ERR_HOST_OOM; goto out; }
    /* and, where spans were taken, the tensors' own recipes alone (a layer's rebuild holds all
     * its members at once: at a tight budget only the smaller rebuilds may fit) */
    for (int si = 0; si < 4 && !st; si++) {
        if (si > 0 && si < 3 && !plan0->feasible) continue;
        if (si == 3 && !S.ng) break;
        uint32_t k2 = 0;
        uint32_t *o = si == 0 ? ord : ord2;
        if ((st = select_items(p, &S, it, nc, x, stops[si], si == 3, o, &k2, NULL, NULL, NULL))) break;
        for (uint32_t i = 0; i < nc; i++) it[i].dead = 0;
        if (si == 0) k = k2;
        else if (si < 3 && k2 == k) continue;   /* the same set */
        for (uint32_t want = k2; want > 0 && !st; want /= 2) {
            rc_of(&S, it, o, want, rc, nt);
            ss_plan *pl = NULL;
            ssi_policy_report rr;
            if ((st = plan_with(p, &S, c, rc, &pl, &rr, err, err_len))) break;
            if (pl->feasible && (!best || pl->iter_s < best->iter_s)) {
                ssi_plan_free(best);
                best = pl;
                rb = rr;
                kbest = want;
                if (si) memcpy(ord, ord2, (size_t)k2 * sizeof *ord);
            } else {
                ssi_plan_free(pl);
            }
            if (si == 1 || si == 2 || want <= k2 / 4) break;
        }
    }
    free(ord2);
    if (st) goto out;
    uint32_t nspan = 0;
    for (uint32_t i = 0; i < k; i++) nspan += it[ord[i]].span;
    SS_INFO("hybrid: %u candidates (%u spans), %u taken (%u spans); pure swap %s %.3f ms (%llu B, link hides %.0f B); "
            "best hybrid %s", nc, S.ng, k, nspan, plan0->feasible ? "feasible" : "infeasible", plan0->iter_s * 1e3,
            (unsigned long long)plan0->swapped_bytes, xmax, best ? "feasible" : "none feasible");
    if (best && (!plan0->feasible || best->iter_s <= plan0->iter_s)) {
        ssi_plan_free(plan0);
        plan0 = best;
        r0 = rb;
        best = NULL;
        for (uint32_t e = 0; e < plan0->nentries; e++)
            if (plan0->entries[e].action == SS_PLAN_RECOMPUTE) {
                hr.chosen++;
                hr.recompute_bytes += plan0->entries[e].bytes;
            }
        for (uint32_t i = 0; i < kbest; i++) {
            hr.recompute_s += it[ord[i]].cost;
            hr.spans += it[ord[i]].span;
        }
    }
out:
    ssi_plan_free(best);
    spans_free(&S);
    free(it);
    free(ord);
    free(dur);
    free(rc);
    if (st) { ssi_plan_free(plan0); return st; }
    if (rep) *rep = r0;
    if (hrep) *hrep = hr;
    *out = plan0;
    return SS_OK;
}

void ssi_recompute_curve_free(ssi_recompute_curve *cv) {
    if (!cv) return;
    free(cv->R);
    free(cv->cost);
    memset(cv, 0, sizeof *cv);
}

ss_status ssi_recompute_curve_of(const ss_profile *p, const ssi_policy_config *c, ssi_recompute_curve *cv,
                                 char *err, size_t err_len) {
    if (!p || !c || !cv) return SS_ERR_INVALID;
    memset(cv, 0, sizeof *cv);
    ss_plan *plan0 = NULL;
    ss_status st = ssi_policy_plan(p, c, &plan0, NULL, err, err_len);
    if (st) return st;
    cv->X = (double)plan0->swapped_bytes;
    ssi_plan_free(plan0);
    uint32_t n = p->nops, nc = 0, k = 0;
    spans S;
    memset(&S, 0, sizeof S);
    item *it = NULL;
    uint32_t *ord = NULL;
    double *dur = malloc(((size_t)n + 1) * sizeof *dur);
    if (!dur) { st = SS_ERR_HOST_OOM; goto out; }
    if ((st = ssi_sim_op_times(p, &c->time, dur, err, err_len))) goto out;
    for (uint32_t i = 0; i < n; i++) {
        if (p->ops[i].phase == SS_PHASE_FWD) cv->F += dur[i];
        else if (p->ops[i].phase == SS_PHASE_BWD) cv->B += dur[i];
    }
    if ((st = spans_find(p, &S))) goto out;
    if ((st = items_make(p, &S, dur, c->min_swap_bytes, &it, &nc))) goto out;
    ord = malloc(((size_t)nc + 1) * sizeof *ord);
    cv->R = malloc(((size_t)nc + 1) * sizeof *cv->R);
    cv->cost = malloc(((size_t)nc + 1) * sizeof *cv->cost);
    if (!ord || !cv->R || !cv->cost) { st = SS_ERR_HOST_OOM; goto out; }
    st = select_items(p, &S, it, nc, cv->X, 0.0, 0, ord, &k, cv->R, cv->cost, &cv->n);
out:
    spans_free(&S);
    free(it);
    free(ord);
    free(dur);
    if (st) ssi_recompute_curve_free(cv);
    return st;
}

double ssi_recompute_curve_min(const ssi_recompute_curve *cv, double X, double F, double B, double cost_scale,
                               double d2h, double h2d) {
    double best = fmax(F, X / d2h) + fmax(B, X / h2d);
    for (uint32_t k = 0; k < cv->n; k++) {
        double left = X - cv->R[k] > 0 ? X - cv->R[k] : 0;
        double T = fmax(F, left / d2h) + fmax(B + cv->cost[k] * cost_scale, left / h2d);
        if (T < best) best = T;
    }
    return best;
}

ss_status ssi_recompute_bound(const ss_profile *p, const ssi_policy_config *c, double *t_bound,
                              double *t_ceiling, char *err, size_t err_len) {
    if (!p || !c || !t_bound) return SS_ERR_INVALID;
    ssi_recompute_curve cv;
    ss_status st = ssi_recompute_curve_of(p, c, &cv, err, err_len);
    if (st) return st;
    if (t_ceiling) *t_ceiling = fmax(cv.F, cv.X / c->d2h_bps) + fmax(cv.B, cv.X / c->h2d_bps);
    *t_bound = ssi_recompute_curve_min(&cv, cv.X, cv.F, cv.B, 1.0, c->d2h_bps, c->h2d_bps);
    ssi_recompute_curve_free(&cv);
    return SS_OK;
}

ss_status ssi_recompute_hook(void *user, const ss_profile *p, ss_plan **out) {
    if (!user) return SS_ERR_INVALID;
    return ssi_recompute_plan(p, (const ssi_policy_config *)user, out, NULL, NULL, NULL, 0);
}
