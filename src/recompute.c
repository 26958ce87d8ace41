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

ss_status ssi_recompute_derive(const ss_profile *p, const uint8_t *rc, ss_profile **out) {
    if (!p || !rc || !out) return SS_ERR_INVALID;
    *out = NULL;
    uint32_t n = p->nops, nt = p->ntensors;
    for (uint32_t t = 0; t < nt; t++)
        if (rc[t] && !ssi_recompute_candidate(p, t)) return SS_ERR_INVALID;
    ss_profile *q = NULL;
    ss_status st = ssi_profile_new(&q);
    if (st) return st;
    int64_t *drop = calloc((size_t)n + 1, sizeof *drop), *droppk = calloc((size_t)n + 2, sizeof *droppk);
    uint32_t *fu = malloc(((size_t)nt + 1) * sizeof *fu), *lb = malloc(((size_t)nt + 1) * sizeof *lb);
    if (!drop || !droppk || !fu || !lb) { st = SS_ERR_HOST_OOM; goto out; }
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
        fu[t] = first_use(p, t);
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
    /* the recipe's price, at the use that rebuilds it */
    for (uint32_t t = 0; t < nt && !st; t++) {
        if (!rc[t]) continue;
        const ss_prof_tensor *x = &p->tensors[t];
        ss_prof_op *o = &q->ops[fu[t]];
        for (uint32_t k = 0; k < x->rc_nop; k++) {
            const ss_prof_op *r = &p->ops[x->rc_op[k]];
            o->seconds += r->seconds;
            o->flops += r->flops;
            extra_s += r->seconds;
        }
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
        for (uint32_t k = 0; k < x->rc_nsrc && !st; k++) st = ssi_profile_add_use(q, x->rc_src[k], fu[t]);
        /* the rebuilt copy: a temporary from its first use to the original release */
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
    if (st) { ssi_profile_free(q); return st; }
    *out = q;
    return SS_OK;
}

/* Simulates a plan with recompute entries: on the profile as the run has it (derive), with
 * the swap entries. Called by ssi_sim_run. */
ss_status ssi_recompute_sim(const ss_profile *p, const ss_plan *plan, const ssi_sim_config *c,
                            ssi_sim_result *r, char *err, size_t err_len) {
    uint32_t nt = p->ntensors, ne = plan->nentries;
    uint8_t *rc = calloc((size_t)nt + 1, 1);
    uint32_t *map = malloc(((size_t)ne + 1) * sizeof *map);
    ss_plan_entry *ent = malloc(((size_t)ne + 1) * sizeof *ent);
    ss_profile *q = NULL;
    ss_status st = SS_OK;
    if (!rc || !map || !ent) { st = SS_ERR_HOST_OOM; goto out; }
    if (plan->nops != p->nops) {
        ssi_fmt(err, err_len, "the plan is for %u operators but the profile has %u", plan->nops, p->nops);
        st = SS_ERR_INVALID;
        goto out;
    }
    uint32_t m = 0;
    for (uint32_t k = 0; k < ne; k++) {
        const ss_plan_entry *e = &plan->entries[k];
        if (e->action != SS_PLAN_RECOMPUTE) { map[m] = k; ent[m++] = *e; continue; }
        if (e->tensor >= nt || !ssi_recompute_candidate(p, e->tensor) || rc[e->tensor] ||
            p->tensors[e->tensor].bytes != e->bytes ||
            e->out_op != last_before(p, e->tensor, first_use(p, e->tensor)) ||
            e->use_op != first_use(p, e->tensor)) {
            ssi_fmt(err, err_len, "entry %u: recompute of tensor %u does not fit the profile (no recipe, "
                    "other bytes, recomputed twice, or points other than its save and first use)", k, e->tensor);
            st = SS_ERR_INVALID;
            goto out;
        }
        rc[e->tensor] = 1;
    }
    if ((st = ssi_recompute_derive(p, rc, &q))) {
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
    free(rc);
    free(map);
    free(ent);
    return st;
}

typedef struct cand { uint32_t t; double key; } cand;

static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    return x->t < y->t ? -1 : x->t > y->t;
}

/* Plans the swaps on the derived profile of rc and adds the recompute entries. */
static ss_status plan_with(const ss_profile *p, const ssi_policy_config *c, const uint8_t *rc,
                           ss_plan **out, ssi_policy_report *rep, char *err, size_t err_len) {
    ss_profile *q = NULL;
    ss_status st = ssi_recompute_derive(p, rc, &q);
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
        e.use_op = e.in_op = first_use(p, t);
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
    uint32_t nt = p->ntensors, n = p->nops;
    cand *cs = malloc(((size_t)nt + 1) * sizeof *cs);
    double *dur = malloc(((size_t)n + 1) * sizeof *dur);
    uint8_t *rc = calloc((size_t)nt + 1, 1), *used = calloc((size_t)nt + 1, 1);
    uint32_t *order = malloc(((size_t)nt + 1) * sizeof *order);
    ss_plan *best = NULL;
    ssi_policy_report rb;
    if (!cs || !dur || !rc || !used || !order) { st = SS_ERR_HOST_OOM; goto out; }
    if ((st = ssi_sim_op_times(p, &c->time, dur, err, err_len))) goto out;
    for (uint32_t i = 0; i < n; i++) {
        if (p->ops[i].phase == SS_PHASE_FWD) hr.fwd_s += dur[i];
        else if (p->ops[i].phase == SS_PHASE_BWD) hr.bwd_s += dur[i];
    }
    uint32_t nc = 0;
    for (uint32_t t = 0; t < nt; t++) {
        if (!ssi_recompute_candidate(p, t) || p->tensors[t].bytes < c->min_swap_bytes) continue;
        double cost = 0;
        for (uint32_t k = 0; k < p->tensors[t].rc_nop; k++) cost += dur[p->tensors[t].rc_op[k]];
        cs[nc].t = t;
        cs[nc].key = (double)p->tensors[t].bytes / (cost > 1e-12 ? cost : 1e-12);
        nc++;
    }
    hr.candidates = nc;
    /* the traffic the link hides: at most the forward's compute at the D2H rate and the
     * backward's at the H2D rate */
    double xmax = fmin(hr.fwd_s * c->d2h_bps, hr.bwd_s * c->h2d_bps);
    double x = (double)plan0->swapped_bytes;
    if (nc == 0 || (plan0->feasible && x <= xmax)) goto out;
    qsort(cs, nc, sizeof *cs, cand_cmp);
    uint32_t k = 0;
    for (uint32_t i = 0; i < nc && !(plan0->feasible && x <= xmax); i++) {
        const ss_prof_tensor *y = &p->tensors[cs[i].t];
        int clash = used[cs[i].t] != 0;   /* a source of a chosen tensor */
        for (uint32_t j = 0; j < y->rc_nsrc; j++) if (rc[y->rc_src[j]]) clash = 1;
        if (clash) continue;
        rc[cs[i].t] = 1;
        for (uint32_t j = 0; j < y->rc_nsrc; j++) used[y->rc_src[j]] = 1;
        order[k++] = cs[i].t;
        x = x > (double)y->bytes ? x - (double)y->bytes : 0;
    }
    /* verify on the simulator: the chosen set, then its halves; the fastest feasible plan */
    for (uint32_t want = k; want > 0; want /= 2) {
        memset(rc, 0, nt);
        for (uint32_t i = 0; i < want; i++) rc[order[i]] = 1;
        ss_plan *pl = NULL;
        ssi_policy_report rr;
        if ((st = plan_with(p, c, rc, &pl, &rr, err, err_len))) goto out;
        if (pl->feasible && (!best || pl->iter_s < best->iter_s)) {
            ssi_plan_free(best);
            best = pl;
            rb = rr;
        } else {
            ssi_plan_free(pl);
        }
        if (want <= k / 4) break;
    }
    SS_INFO("hybrid: %u candidates, %u taken; pure swap %s %.3f ms (%llu B, link hides %.0f B); best hybrid %s",
            nc, k, plan0->feasible ? "feasible" : "infeasible", plan0->iter_s * 1e3,
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
                const ss_prof_tensor *y = &p->tensors[plan0->entries[e].tensor];
                for (uint32_t j = 0; j < y->rc_nop; j++) hr.recompute_s += dur[y->rc_op[j]];
            }
    }
out:
    ssi_plan_free(best);
    free(cs);
    free(dur);
    free(rc);
    free(used);
    free(order);
    if (st) { ssi_plan_free(plan0); return st; }
    if (rep) *rep = r0;
    if (hrep) *hrep = hr;
    *out = plan0;
    return SS_OK;
}

ss_status ssi_recompute_bound(const ss_profile *p, const ssi_policy_config *c, double *t_bound,
                              double *t_ceiling, char *err, size_t err_len) {
    if (!p || !c || !t_bound) return SS_ERR_INVALID;
    ss_plan *plan0 = NULL;
    ss_status st = ssi_policy_plan(p, c, &plan0, NULL, err, err_len);
    if (st) return st;
    double X = (double)plan0->swapped_bytes;
    ssi_plan_free(plan0);
    uint32_t nt = p->ntensors, n = p->nops;
    cand *cs = malloc(((size_t)nt + 1) * sizeof *cs);
    double *dur = malloc(((size_t)n + 1) * sizeof *dur), *cost = malloc(((size_t)nt + 1) * sizeof *cost);
    uint8_t *rc = calloc((size_t)nt + 1, 1), *used = calloc((size_t)nt + 1, 1);
    if (!cs || !dur || !cost || !rc || !used) { st = SS_ERR_HOST_OOM; goto out; }
    if ((st = ssi_sim_op_times(p, &c->time, dur, err, err_len))) goto out;
    double F = 0, B = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (p->ops[i].phase == SS_PHASE_FWD) F += dur[i];
        else if (p->ops[i].phase == SS_PHASE_BWD) B += dur[i];
    }
    uint32_t nc = 0;
    for (uint32_t t = 0; t < nt; t++) {
        if (!ssi_recompute_candidate(p, t) || p->tensors[t].bytes < c->min_swap_bytes) continue;
        double co = 0;
        for (uint32_t k = 0; k < p->tensors[t].rc_nop; k++) co += dur[p->tensors[t].rc_op[k]];
        cost[t] = co;
        cs[nc].t = t;
        cs[nc].key = (double)p->tensors[t].bytes / (co > 1e-12 ? co : 1e-12);
        nc++;
    }
    qsort(cs, nc, sizeof *cs, cand_cmp);
    double R = 0, cr = 0;
    double best = fmax(F, X / c->d2h_bps) + fmax(B, X / c->h2d_bps);
    if (t_ceiling) *t_ceiling = best;
    for (uint32_t i = 0; i < nc && R < X; i++) {
        const ss_prof_tensor *y = &p->tensors[cs[i].t];
        int clash = used[cs[i].t] != 0;
        for (uint32_t j = 0; j < y->rc_nsrc; j++) if (rc[y->rc_src[j]]) clash = 1;
        if (clash) continue;
        rc[cs[i].t] = 1;
        for (uint32_t j = 0; j < y->rc_nsrc; j++) used[y->rc_src[j]] = 1;
        R = fmin(X, R + (double)y->bytes);
        cr += cost[cs[i].t];
        double T = fmax(F, (X - R) / c->d2h_bps) + fmax(B + cr, (X - R) / c->h2d_bps);
        if (T < best) best = T;
    }
    *t_bound = best;
out:
    free(cs);
    free(dur);
    free(cost);
    free(rc);
    free(used);
    return st;
}

ss_status ssi_recompute_hook(void *user, const ss_profile *p, ss_plan **out) {
    if (!user) return SS_ERR_INVALID;
    return ssi_recompute_plan(p, (const ssi_policy_config *)user, out, NULL, NULL, NULL, 0);
}
