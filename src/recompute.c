/* recompute.c: swap or recompute, the hybrid policy (recompute.h, docs/policy.md). */
#include "recompute.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Whether span g can be rebuilt under the budget at all: its rebuild brings all its members
 * back at once, and where that working set (the smallest budget of the profile with the span
 * rebuilt, ssi_policy_floor) exceeds the budget no plan that takes the span is feasible. Such a
 * span is no candidate, for the plan nor for the bound (measured: 12 layers x width 48, 4 x 256
 * tokens at 4x, every layer's rebuild needed 10.3-10.6 MiB under a 9.66 MiB budget; the bound
 * counted them and no plan could reach it). */
static ss_status span_fits(const ss_profile *p, const ssi_rebuild_spans *S, const ssi_policy_config *c, uint32_t g,
                           uint8_t *rc, int *fits) {
    memset(rc, 0, p->ntensors);
    for (uint32_t j = 0; j < S->g[g].nmem; j++) rc[S->mem[S->g[g].mem_off + j]] = 2;
    ss_profile *q = NULL;
    ss_status st = ssi_rebuild_derive_spans(p, S, rc, &q);
    uint64_t fl = 0;
    if (!st) st = ssi_policy_floor(q, c, &fl, NULL, NULL, 0);
    ssi_profile_free(q);
    *fits = !st && fl <= c->budget_bytes;
    return st;
}

/* The candidates, sorted: every own recipe and every span that fits the budget (span_fits), of
 * at least c->min_swap_bytes. */
static ss_status items_make(const ss_profile *p, const ssi_rebuild_spans *S, const ssi_policy_config *c,
                            const double *dur, item **out, uint32_t *nout) {
    uint32_t nt = p->ntensors, n = 0;
    uint64_t min_swap = c->min_swap_bytes;
    item *it = malloc(((size_t)nt + S->ng + 1) * sizeof *it);
    uint8_t *rc = calloc((size_t)nt + 1, 1);
    if (!it || !rc) { free(it); free(rc); return SS_ERR_HOST_OOM; }
    for (uint32_t t = 0; t < nt; t++) {
        if (!ssi_rebuild_candidate(p, t) || p->tensors[t].bytes < min_swap) continue;
        double cost = 0;
        for (uint32_t k = 0; k < p->tensors[t].rc_nop; k++) cost += dur[p->tensors[t].rc_op[k]];
        it[n++] = (item){0, t, p->tensors[t].bytes, cost, 0, 0};
    }
    for (uint32_t g = 0; g < S->ng; g++) {
        if (S->g[g].bytes < min_swap) continue;
        int fits = 0;
        ss_status st = span_fits(p, S, c, g, rc, &fits);
        if (st) { free(it); free(rc); return st; }
        if (!fits) continue;
        double cost = 0;
        for (uint32_t i = S->g[g].first; i < S->g[g].first + S->g[g].nop; i++) cost += dur[i];
        it[n++] = (item){1, g, S->g[g].bytes, cost, 0, 0};
    }
    free(rc);
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
static ss_status select_items(const ss_profile *p, const ssi_rebuild_spans *S, item *it, uint32_t n, double X,
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
            const ssi_rebuild_span *g = &S->g[a->id];
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
static void rc_of(const ssi_rebuild_spans *S, const item *it, const uint32_t *ord, uint32_t want, uint8_t *rc,
                  uint32_t nt) {
    memset(rc, 0, nt);
    for (uint32_t i = 0; i < want; i++) {
        const item *a = &it[ord[i]];
        if (!a->span) { rc[a->id] = 1; continue; }
        const ssi_rebuild_span *g = &S->g[a->id];
        for (uint32_t j = 0; j < g->nmem; j++) rc[S->mem[g->mem_off + j]] = 2;
    }
}

/* Plans the swaps on the derived profile of rc and adds the recompute entries. */
static ss_status plan_with(const ss_profile *p, const ssi_rebuild_spans *S, const ssi_policy_config *c,
                           const uint8_t *rc, ss_plan **out, ssi_policy_report *rep, char *err, size_t err_len) {
    ss_profile *q = NULL;
    ss_status st = ssi_rebuild_derive_spans(p, S, rc, &q);
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
        e.use_op = e.in_op = ssi_rebuild_at(p, S, rc, t);
        e.out_op = ssi_rebuild_last_before(p, t, e.use_op);   /* the save for a trainer's profile */
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
    ssi_rebuild_spans S;
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
    if ((st = ssi_rebuild_spans_find(p, &S))) goto out;
    if ((st = items_make(p, &S, c, dur, &it, &nc))) goto out;
    hr.candidates = nc;
    /* the traffic the link hides: at most the forward's compute at the D2H rate and the
     * backward's at the H2D rate. A pure-swap plan within it is the answer unless it stalls all
     * the same (the lanes idle before the first swappable tensor and after the last: measured
     * on tests/data/bench-train-4x-hybrid-profile.jsonl at 0.201 GB/s, the pure-swap plan
     * within the bound stalled 16.1 ms of 333.6) */
    double xmax = fmin(hr.fwd_s * c->d2h_bps, hr.bwd_s * c->h2d_bps);
    double x = (double)plan0->swapped_bytes;
    if (nc == 0 || (plan0->feasible && x <= xmax && !(plan0->stall_s > 0))) goto out;
    if (!(ord = malloc(((size_t)nc + 1) * sizeof *ord))) { st = SS_ERR_HOST_OOM; goto out; }
    /* Verify on the simulator, keeping the fastest feasible plan: the chosen set (recompute
     * until the rest fits; with an infeasible pure-swap plan, as far as the list goes), its
     * first half and quarter (the link may hide more than the bound says), and the sets chosen
     * until the rest fits under 95, 90, ..., 50 % of what the link hides (copies and compute
     * never overlap perfectly: the D2H lane idles until the first swappable tensor exists and
     * after the last, so what is left must often stay below the bound to stall nothing). Steps
     * of 5 % where there were two stops (75 and 50 %): on four trainer profiles at 4x on the
     * PCIe-class link (16 x 32, 24 x 32, 12 x 48 layers x width) the plans' simulated steps came
     * to 1.033-1.045x the bound instead of 1.041-1.063x, for 1.1-1.6x the planning time. */
    enum { NSTOP = 12 };   /* 0: the bound itself; 1 .. 10: 95 .. 50 %; 11: own recipes only */
    double stops[NSTOP];
    stops[0] = stops[NSTOP - 1] = plan0->feasible ? xmax : -1.0;
    for (int i = 1; i < NSTOP - 1; i++) stops[i] = (1.0 - 0.05 * i) * xmax;
    uint32_t *ord2 = malloc(((size_t)nc + 1) * sizeof *ord2), kprev = 0;
    if (!ord2) { st = SS_ERR_HOST_OOM; goto out; }
    /* and, where spans were taken, the tensors' own recipes alone (a layer's rebuild holds all
     * its members at once: at a tight budget only the smaller rebuilds may fit) */
    for (int si = 0; si < NSTOP && !st; si++) {
        if (si > 0 && si < NSTOP - 1 && !plan0->feasible) continue;
        if (si == NSTOP - 1 && !S.ng) break;
        uint32_t k2 = 0;
        uint32_t *o = si == 0 ? ord : ord2;
        if ((st = select_items(p, &S, it, nc, x, stops[si], si == NSTOP - 1, o, &k2, NULL, NULL, NULL))) break;
        for (uint32_t i = 0; i < nc; i++) it[i].dead = 0;
        if (si == 0) k = kprev = k2;
        else if (si < NSTOP - 1 && k2 == kprev) continue;   /* the same set as the stop before (they nest) */
        else if (si < NSTOP - 1) kprev = k2;
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
            if ((si > 0 && si < NSTOP - 1) || want <= k2 / 4) break;
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
    ssi_rebuild_spans_free(&S);
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
    ssi_rebuild_spans S;
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
    if ((st = ssi_rebuild_spans_find(p, &S))) goto out;
    if ((st = items_make(p, &S, c, dur, &it, &nc))) goto out;
    ord = malloc(((size_t)nc + 1) * sizeof *ord);
    cv->R = malloc(((size_t)nc + 1) * sizeof *cv->R);
    cv->cost = malloc(((size_t)nc + 1) * sizeof *cv->cost);
    if (!ord || !cv->R || !cv->cost) { st = SS_ERR_HOST_OOM; goto out; }
    st = select_items(p, &S, it, nc, cv->X, 0.0, 0, ord, &k, cv->R, cv->cost, &cv->n);
out:
    ssi_rebuild_spans_free(&S);
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
