/* rebuild.c: the profile as the run has it when some saved tensors are recomputed (rebuild.h,
 * docs/policy.md "Swap or recompute"): usable recipes and spans, rebuild points, the rewritten
 * profile, and the swap part of a plan with recompute entries. */
#include "rebuild.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first use of tensor t in the backward (the use a recompute rebuilds it for), or SS_NONE.
 * A trainer's profile has no forward uses of a saved tensor (it is saved when the forward drops
 * it); a generated one does (xn is read by q_proj, k_proj, v_proj): those stay as they are. */
uint32_t ssi_rebuild_first_use(const ss_profile *p, uint32_t t) {
    const ss_prof_tensor *x = &p->tensors[t];
    for (uint32_t i = 0; i < x->nuses; i++) {
        uint32_t u = p->uses[x->use_off + i];
        if (u > x->producer && p->ops[u].phase == SS_PHASE_BWD) return u;
    }
    return SS_NONE;
}

uint32_t ssi_rebuild_last_before(const ss_profile *p, uint32_t t, uint32_t u) {
    const ss_prof_tensor *x = &p->tensors[t];
    uint32_t a = x->producer;
    for (uint32_t i = 0; i < x->nuses; i++) {
        uint32_t v = p->uses[x->use_off + i];
        if (v < u && v > a) a = v;
    }
    return a;
}

int ssi_rebuild_candidate(const ss_profile *p, uint32_t t) {
    if (!p || t >= p->ntensors) return 0;
    const ss_prof_tensor *x = &p->tensors[t];
    if (!x->rc_nop || x->rc_nop > 2 || x->rc_nsrc > 2) return 0;
    if (!(x->flags & SS_TENSOR_SAVED) || (x->flags & SS_TENSOR_NOSWAP)) return 0;
    uint32_t u = ssi_rebuild_first_use(p, t);
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

/* ---- spans: whole layers re-run from their input (rebuild.h) ------------------------------ */

void ssi_rebuild_spans_free(ssi_rebuild_spans *S) {
    free(S->g);
    free(S->mem);
    free(S->of);
    memset(S, 0, sizeof *S);
}

ss_status ssi_rebuild_spans_find(const ss_profile *p, ssi_rebuild_spans *S) {
    memset(S, 0, sizeof *S);
    uint32_t nt = p->ntensors, ns = 0;
    for (uint32_t t = 0; t < nt; t++) if (p->tensors[t].span_nop) ns++;
    S->of = malloc(((size_t)nt + 1) * sizeof *S->of);
    if (!S->of) return SS_ERR_HOST_OOM;
    for (uint32_t t = 0; t < nt; t++) S->of[t] = SS_NONE;
    if (!ns) return SS_OK;
    S->g = calloc(ns, sizeof *S->g);
    S->mem = malloc(((size_t)nt + 1) * sizeof *S->mem);
    if (!S->g || !S->mem) { ssi_rebuild_spans_free(S); return SS_ERR_HOST_OOM; }
    uint32_t nm = 0;
    for (uint32_t s = 0; s < nt; s++) {
        const ss_prof_tensor *x = &p->tensors[s];
        if (!x->span_nop || !(x->flags & SS_TENSOR_SAVED)) continue;
        ssi_rebuild_span g = {s, SS_NONE, x->span_first, x->span_nop, nm, 0, 0};
        uint32_t last = x->span_first + x->span_nop - 1;
        int ok = 1, own_only = 1;
        for (uint32_t t = 0; t < nt && ok; t++) {
            const ss_prof_tensor *y = &p->tensors[t];
            if (t == s || !(y->flags & SS_TENSOR_SAVED) || y->producer < g.first || y->producer > last) continue;
            uint32_t u = ssi_rebuild_first_use(p, t);
            if (u == SS_NONE) continue;           /* never read back: nothing to rebuild */
            if ((y->flags & SS_TENSOR_NOSWAP) || S->of[t] != SS_NONE || y->span_nop ||
                p->uses[y->use_off] < y->producer) ok = 0;
            if (!ssi_rebuild_candidate(p, t)) own_only = 0;
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

uint32_t ssi_rebuild_at(const ss_profile *p, const ssi_rebuild_spans *S, const uint8_t *rc, uint32_t t) {
    return rc[t] == 2 ? S->g[S->of[t]].at : ssi_rebuild_first_use(p, t);
}

ss_status ssi_rebuild_derive_spans(const ss_profile *p, const ssi_rebuild_spans *S, const uint8_t *rc,
                                   ss_profile **out) {
    *out = NULL;
    uint32_t n = p->nops, nt = p->ntensors;
    for (uint32_t t = 0; t < nt; t++) {
        if (rc[t] == 1 && !ssi_rebuild_candidate(p, t)) return SS_ERR_INVALID;
        if (rc[t] == 2) {   /* a span is taken whole */
            if (S->of[t] == SS_NONE) return SS_ERR_INVALID;
            const ssi_rebuild_span *g = &S->g[S->of[t]];
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
        fu[t] = ssi_rebuild_at(p, S, rc, t);
        lb[t] = ssi_rebuild_last_before(p, t, fu[t]);
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
        const ssi_rebuild_span *g = &S->g[gi];
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

ss_status ssi_rebuild_derive(const ss_profile *p, const uint8_t *rc, ss_profile **out) {
    if (!p || !rc || !out) return SS_ERR_INVALID;
    *out = NULL;
    ssi_rebuild_spans S;
    ss_status st = ssi_rebuild_spans_find(p, &S);
    if (st) return st;
    st = ssi_rebuild_derive_spans(p, &S, rc, out);
    ssi_rebuild_spans_free(&S);
    return st;
}

ss_status ssi_rebuild_of_plan(const ss_profile *p, const ss_plan *plan, ss_profile **q, ss_plan_entry *ent,
                              uint32_t *map, uint32_t *m_out, char *err, size_t err_len) {
    *q = NULL;
    *m_out = 0;
    uint32_t nt = p->ntensors, ne = plan->nentries;
    uint8_t *rc = calloc((size_t)nt + 1, 1);
    uint32_t *eu = malloc(((size_t)nt + 1) * sizeof *eu), *eo = malloc(((size_t)nt + 1) * sizeof *eo);
    ssi_rebuild_spans S;
    memset(&S, 0, sizeof S);
    ss_status st = SS_OK;
    if (!rc || !eu || !eo) { st = SS_ERR_HOST_OOM; goto out; }
    if (plan->nops != p->nops) {
        ssi_fmt(err, err_len, "the plan is for %u operators but the profile has %u", plan->nops, p->nops);
        st = SS_ERR_INVALID;
        goto out;
    }
    if ((st = ssi_rebuild_spans_find(p, &S))) goto out;
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
        const ssi_rebuild_span *g = &S.g[gi];
        uint32_t k = 0;
        while (k < g->nmem && eu[S.mem[g->mem_off + k]] == g->at) k++;
        if (k < g->nmem) continue;
        for (k = 0; k < g->nmem; k++) rc[S.mem[g->mem_off + k]] = 2;
    }
    for (uint32_t t = 0; t < nt; t++) {
        if (eu[t] == SS_NONE) continue;
        uint32_t at = ssi_rebuild_at(p, &S, rc, t);
        if (rc[t] != 2) {
            if (!ssi_rebuild_candidate(p, t) || eu[t] != at) {
                ssi_fmt(err, err_len, "recompute of tensor %u does not fit the profile (no recipe, no span taken "
                        "whole, or a rebuild point other than its first use)", t);
                st = SS_ERR_INVALID;
                goto out;
            }
            rc[t] = 1;
        }
        if (eo[t] != ssi_rebuild_last_before(p, t, at)) {
            ssi_fmt(err, err_len, "recompute of tensor %u: dropped after op %u, not at its save (op %u)", t, eo[t],
                    ssi_rebuild_last_before(p, t, at));
            st = SS_ERR_INVALID;
            goto out;
        }
    }
    if ((st = ssi_rebuild_derive_spans(p, &S, rc, q))) {
        if (st == SS_ERR_INVALID) ssi_fmt(err, err_len, "a recompute entry's tensor has no usable recipe");
        goto out;
    }
    *m_out = m;
out:
    ssi_rebuild_spans_free(&S);
    free(rc);
    free(eu);
    free(eo);
    return st;
}
