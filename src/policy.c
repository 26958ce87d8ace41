/* policy.c: the policy generator of policy.h (DESIGN.md "policy"; research/anchors-swap.md
 * §4.1 for MindSpeed's lists and scores). Steps, each explained in docs/policy.md:
 *
 *  1. time estimates (sim.c) and the byte model: device bytes in use during each operator with
 *     no swaps, in the allocator's rounded sizes;
 *  2. logical layers (equal operator counts) and the memory reduction list: per layer, the
 *     bytes above the budget;
 *  3. the candidate list: saved tensors, not opted out, at least min_swap_bytes, whose idle
 *     interval (last forward access a .. next use b, b > a + 1) covers an op above the budget;
 *     scored as MindSpeed does (normalised coverage of over-budget layers + 2 x normalised
 *     cube root of the size);
 *  4. phase 1, hidden swaps: by score, each candidate's swap-out is placed on the D2H stream
 *     model right after a, its free point is the op reached after the copy completes, its
 *     swap-in is placed on the H2D stream model as late as possible while finishing before b;
 *     it is taken when both copies fit and the interval it frees covers an op still above the
 *     budget. The check is incremental: O(log n) on a segment tree of memory levels plus the
 *     ops the copies span on the stream models, never a re-simulation;
 *  4b. the oldest-first schedule, a second selection tried beside phase 1 (select_oldest): the
 *     candidates oldest first while they cover an op above the budget, swap-outs queued on the
 *     D2H model in that order, swap-ins in use order each as early as memory allows; plan_at
 *     keeps whichever of the two the simulator finds better;
 *  5. phase 2, fit with stalls: for each op still above the budget, in order, the cheapest
 *     fix: an unselected candidate whose natural schedule covers it, else a selected entry
 *     whose free point moves earlier (the compute stream waits for its swap-out) or whose
 *     swap-in moves later (prefetches ordered so memory stays under the budget; the use waits),
 *     else an unselected candidate forced to cover it;
 *  6. simulate-and-adjust rounds: the whole plan runs in the simulator (allocator in measure
 *     mode); each free point moves to the op reached after the simulated copy completion and
 *     each late swap-in earlier, as far as the budget allows; the best round is kept;
 *  7. when no plan fits, the smallest budget that fits is found: first the lower bound (every
 *     candidate swapped over its whole idle interval), then a binary search over allocator
 *     granules between the last failing and the first fitting budget.
 */
#include "policy.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>

typedef struct cand {
    uint32_t t;         /* tensor */
    uint32_t a, b;      /* swap-out after op a; next use b */
    uint64_t x;         /* rounded bytes */
    double   c_out, c_in;/* copy seconds each way */
    double   score;
    uint32_t sel;       /* index into the selection, or SS_NONE */
    uint32_t f_nat, g_nat; /* phase 2: natural schedule (SS_NONE: not computed) */
} cand;

typedef struct sel {
    uint32_t c;         /* candidate */
    uint32_t f, g;      /* free point, swap-in point */
    int      hidden;    /* chosen in phase 1 */
} sel;

typedef struct ctx {
    const ss_profile *p;
    const ssi_policy_config *cfg;
    uint32_t n, L;
    double  *dur;
    uint64_t *lvl;
    cand    *c;         /* eligible tensors (size, flags, interval), any budget */
    uint32_t nc;
    uint32_t *by_a;     /* candidate indices sorted by a */
    uint32_t *ordinal;  /* per tensor */
    uint32_t *cand_of;  /* per tensor: candidate index or SS_NONE */
    uint64_t peak0;     /* byte-model peak, no swaps */
    uint64_t tight;     /* byte-model peak with every candidate swapped over (a, b) */
    uint32_t tight_op;  /* the operator at which it is reached */
    double   compute_s; /* sum of the op times: the iteration with no swaps */
    ssi_sim_result base;/* the unplanned simulation (ctx_base) */
    int      unattributed; /* some op's memory is not explained by the profile's tensors */
    int      have_base;
} ctx;

/* one planning attempt's state */
typedef struct run {
    ssi_simx *mem, *host;
    sel     *s;
    uint32_t ns, caps;
    uint32_t over_layers, ncand, hidden;
    int      host_limited;
    int      fits;      /* byte model within the target */
    uint32_t stuck_op;  /* first op that could not be brought under the target */
} run;

static double copy_s(const ssi_policy_config *c, uint64_t bytes, double bps) {
    return (c->copy_latency_s > 0 ? c->copy_latency_s : 0) + (double)bytes / bps;
}

/* ---- context: everything that does not depend on the budget ------------------------------- */

static int cmp_by_a(const void *x, const void *y, void *cc) {
    const cand *c = cc;
    uint32_t i = *(const uint32_t *)x, j = *(const uint32_t *)y;
    if (c[i].a != c[j].a) return c[i].a < c[j].a ? -1 : 1;
    return i < j ? -1 : (i > j);
}

typedef struct okey { uint32_t name; uint32_t dtype; uint64_t site; uint32_t t; } okey;
static int okey_cmp(const void *x, const void *y) {
    const okey *a = x, *b = y;
    if (a->name != b->name) return a->name < b->name ? -1 : 1;
    if (a->site != b->site) return a->site < b->site ? -1 : 1;
    if (a->dtype != b->dtype) return a->dtype < b->dtype ? -1 : 1;
    return a->t < b->t ? -1 : (a->t > b->t);
}

/* The idle interval of tensor t: (a, b) = last forward access and the next use; without phase
 * information, the longest gap between consecutive accesses. 0 when t has none. */
static int interval_of(const ss_profile *p, uint32_t t, uint32_t *a, uint32_t *b) {
    const ss_prof_tensor *x = &p->tensors[t];
    if (x->nuses == 0) return 0;
    const uint32_t *u = p->uses + x->use_off;
    /* accesses: producer, u[0..nuses) */
    int found = 0;
    uint32_t fa = 0, fb = 0;
    for (uint32_t k = 0; k < x->nuses; k++) {
        uint32_t acc = k == 0 ? x->producer : u[k - 1];
        if (p->ops[acc].phase == SS_PHASE_FWD) { fa = acc; fb = u[k]; found = 1; }
    }
    if (!found) {
        uint32_t best = 0;
        for (uint32_t k = 0; k < x->nuses; k++) {
            uint32_t acc = k == 0 ? x->producer : u[k - 1];
            if (u[k] - acc > best) { best = u[k] - acc; fa = acc; fb = u[k]; }
        }
    }
    *a = fa;
    *b = fb;
    return 1;
}

static void ctx_free(ctx *k) {
    free(k->dur);
    free(k->lvl);
    free(k->c);
    free(k->by_a);
    free(k->ordinal);
    free(k->cand_of);
    ssi_sim_result_free(&k->base);
}

ssi_sim_config ssi_policy_sim_config(const ssi_policy_config *c, uint64_t budget) {
    ssi_sim_config s;
    memset(&s, 0, sizeof s);
    s.budget_bytes = budget;
    s.host_mem_bytes = c->host_mem_bytes;
    s.d2h_bps = c->d2h_bps;
    s.h2d_bps = c->h2d_bps;
    s.copy_latency_s = c->copy_latency_s;
    s.segment_bytes = c->segment_bytes;
    s.granule_bytes = c->granule_bytes;
    s.persist_bytes = c->persist_bytes;
    s.npersist = c->npersist;
    s.time = c->time;
    s.record_ops = 1;
    return s;
}

static ss_status ctx_init(ctx *k, const ss_profile *p, const ssi_policy_config *cfg, char *err,
                          size_t err_len) {
    memset(k, 0, sizeof *k);
    k->p = p;
    k->cfg = cfg;
    k->n = p->nops;
    k->L = ssi_layers_for(p, cfg->time.layers);
    uint32_t n = k->n, nt = p->ntensors;
    k->dur = malloc(((size_t)n + 1) * sizeof *k->dur);
    k->lvl = malloc(((size_t)n + 1) * sizeof *k->lvl);
    k->c = calloc((size_t)nt + 1, sizeof *k->c);
    k->by_a = malloc(((size_t)nt + 1) * sizeof *k->by_a);
    k->ordinal = calloc((size_t)nt + 1, sizeof *k->ordinal);
    k->cand_of = malloc(((size_t)nt + 1) * sizeof *k->cand_of);
    okey *ok = malloc(((size_t)nt + 1) * sizeof *ok);
    if (!k->dur || !k->lvl || !k->c || !k->by_a || !k->ordinal || !k->cand_of || !ok) { free(ok); return SS_ERR_HOST_OOM; }
    ss_status st = ssi_sim_op_times(p, &cfg->time, k->dur, err, err_len);
    if (!st) st = ssi_sim_levels(p, k->lvl);
    if (st) { free(ok); return st; }
    for (uint32_t i = 0; i < n; i++)
        if (k->lvl[i] > k->peak0) k->peak0 = k->lvl[i];
    {
        uint64_t *oth = malloc(((size_t)n + 1) * sizeof *oth);
        if (!oth) { free(ok); return SS_ERR_HOST_OOM; }
        if ((st = ssi_sim_other(p, oth))) { free(oth); free(ok); return st; }
        for (uint32_t i = 0; i < n && !k->unattributed; i++) k->unattributed = oth[i] > 0;
        free(oth);
    }
    /* ordinals among saved tensors with the same (producer name, site, dtype) */
    uint32_t ns = 0;
    for (uint32_t t = 0; t < nt; t++) {
        const ss_prof_tensor *x = &p->tensors[t];
        if (!(x->flags & SS_TENSOR_SAVED)) continue;
        const ss_prof_op *o = &p->ops[x->producer];
        ok[ns++] = (okey){o->name, x->dtype, o->site, t};
    }
    qsort(ok, ns, sizeof *ok, okey_cmp);
    for (uint32_t i = 0; i < ns; i++) {
        int same = i > 0 && ok[i - 1].name == ok[i].name && ok[i - 1].site == ok[i].site &&
                   ok[i - 1].dtype == ok[i].dtype;
        k->ordinal[ok[i].t] = same ? k->ordinal[ok[i - 1].t] + 1 : 0;
    }
    free(ok);
    /* eligible tensors */
    for (uint32_t t = 0; t < nt; t++) k->cand_of[t] = SS_NONE;
    for (uint32_t t = 0; t < nt; t++) {
        const ss_prof_tensor *x = &p->tensors[t];
        if (!(x->flags & SS_TENSOR_SAVED) || (x->flags & SS_TENSOR_NOSWAP)) continue;
        if (x->bytes < cfg->min_swap_bytes) continue;
        uint32_t a, b;
        if (!interval_of(p, t, &a, &b) || b <= a + 1) continue;   /* used again at once */
        cand *c = &k->c[k->nc];
        c->t = t;
        c->a = a;
        c->b = b;
        c->x = ssi_round_block(x->bytes);
        c->c_out = copy_s(cfg, x->bytes, cfg->d2h_bps);
        c->c_in = copy_s(cfg, x->bytes, cfg->h2d_bps);
        c->sel = SS_NONE;
        k->by_a[k->nc] = k->nc;
        k->cand_of[t] = k->nc;
        k->nc++;
    }
    qsort_r(k->by_a, k->nc, sizeof *k->by_a, cmp_by_a, k->c);
    /* the tight lower bound: every candidate absent over (a, b) */
    {
        int64_t *d = calloc((size_t)n + 1, sizeof *d);
        if (!d) return SS_ERR_HOST_OOM;
        for (uint32_t i = 0; i < k->nc; i++) {
            d[k->c[i].a + 1] -= (int64_t)k->c[i].x;
            d[k->c[i].b] += (int64_t)k->c[i].x;
        }
        int64_t acc = 0;
        for (uint32_t i = 0; i < n; i++) {
            acc += d[i];
            uint64_t v = (uint64_t)((int64_t)k->lvl[i] + acc);
            if (v > k->tight) { k->tight = v; k->tight_op = i; }
        }
        free(d);
    }
    for (uint32_t i = 0; i < n; i++) k->compute_s += k->dur[i];
    return SS_OK;
}

ss_status ssi_policy_floor(const ss_profile *p, const ssi_policy_config *c, uint64_t *out, uint32_t *op,
                           char *err, size_t err_len) {
    SS_CHECK_ARG(!p || !c || !out, "ssi_policy_floor: NULL argument");
    ctx k;
    ss_status st = ctx_init(&k, p, c, err, err_len);
    if (!st) {
        *out = ssi_round_block(k.tight ? k.tight : SS_ALLOC_ALIGN);
        if (op) *op = k.tight_op;
    }
    ctx_free(&k);
    return st;
}

/* The unplanned run (no budget), for the allocator's reserved peak; run once, when needed. */
static ss_status ctx_base(ctx *k) {
    if (k->have_base) return SS_OK;
    ssi_sim_config sc = ssi_policy_sim_config(k->cfg, 0);
    sc.record_ops = 0;
    ss_status st = ssi_sim_run(k->p, NULL, &sc, &k->base, NULL, 0);
    if (!st) k->have_base = 1;
    return st;
}

/* ---- one selection at a target ----------------------------------------------------------- */

static void run_free(run *r) {
    ssi_simx_free(r->mem);
    ssi_simx_free(r->host);
    free(r->s);
    memset(r, 0, sizeof *r);
}

typedef struct scored { double score; uint32_t a; uint32_t i; } scored;
static int scored_cmp(const void *x, const void *y) {
    const scored *p = x, *q = y;
    if (p->score != q->score) return p->score > q->score ? -1 : 1;
    if (p->a != q->a) return p->a < q->a ? -1 : 1;
    return p->i < q->i ? -1 : (p->i > q->i);
}

static ss_status select_add(run *r, ctx *k, uint32_t ci, uint32_t f, uint32_t g, int hidden) {
    size_t cap = r->caps;
    if (ssi_grow(&r->s, &cap, (size_t)r->ns + 1, sizeof *r->s)) return SS_ERR_HOST_OOM;
    r->caps = (uint32_t)cap;
    cand *c = &k->c[ci];
    r->s[r->ns] = (sel){ci, f, g, hidden};
    c->sel = r->ns++;
    ssi_simx_add(r->mem, f, g, -(int64_t)c->x);
    if (r->host) ssi_simx_add(r->host, c->a, c->b, (int64_t)c->x);
    if (hidden) r->hidden++;
    return SS_OK;
}

static int host_fits(run *r, ctx *k, const cand *c) {
    if (!r->host) return 1;
    int64_t m = ssi_simx_max(r->host, c->a, c->b);
    return m + (int64_t)c->x <= (int64_t)k->cfg->host_mem_bytes;
}

/* Phase 1 of the oldest-first schedule (docs/policy.md "the schedule"): the candidates in
 * production order, oldest first, each taken while its idle interval covers an op still above
 * the target with every taken tensor absent from its free point to its use: the fewest bytes
 * that bring the peak down, and the ones whose swap-ins come last in backward. Swap-outs queue
 * on the D2H lane model in that order from the first swappable tensor on (a FIFO, so the lane
 * is busy as long as there is something to copy); each free point is the op reached after its
 * copy completes. Then the swap-ins, in use order: each as early as memory allows (restoring
 * its bytes from there to its use keeps every op within the target), never before the one
 * used before it, never at its own free point. */
static ss_status select_oldest(run *r, ctx *k, int64_t lim, ssi_fluid *d2h) {
    uint32_t n = k->n;
    ss_status st = SS_OK;
    for (uint32_t q = 0; q < k->nc; q++) {
        if (ssi_simx_max(r->mem, 0, n) <= lim) break;
        uint32_t ci = k->by_a[q];
        cand *c = &k->c[ci];
        if (ssi_simx_max(r->mem, c->a + 1, c->b) <= lim) continue;   /* frees nothing that matters */
        uint32_t ko = ssi_fluid_forward(d2h, c->a + 1, c->b, c->c_out, 0);
        if (ko == SS_NONE || ko + 1 >= c->b) continue;
        if (!host_fits(r, k, c)) { r->host_limited = 1; continue; }
        ssi_fluid_forward(d2h, c->a + 1, c->b, c->c_out, 1);
        /* absent from the free point to the use for now: the swap-ins are placed below */
        if ((st = select_add(r, k, ci, ko + 1, c->b, 1))) return st;
    }
    /* swap-ins in use order (ties: the later free point first, as the executor's queue) */
    uint32_t *ord = malloc(((size_t)r->ns + 1) * sizeof *ord);
    if (!ord) return SS_ERR_HOST_OOM;
    for (uint32_t i = 0; i < r->ns; i++) ord[i] = i;
    for (uint32_t i = 1; i < r->ns; i++) {   /* insertion sort by (b, f): selections are few */
        uint32_t v = ord[i], j = i;
        const cand *cv = &k->c[r->s[v].c];
        while (j > 0) {
            const cand *cu = &k->c[r->s[ord[j - 1]].c];
            if (cu->b < cv->b || (cu->b == cv->b && r->s[ord[j - 1]].f <= r->s[v].f)) break;
            ord[j] = ord[j - 1];
            j--;
        }
        ord[j] = v;
    }
    uint32_t gprev = 0;
    for (uint32_t i = 0; i < r->ns; i++) {
        sel *s = &r->s[ord[i]];
        const cand *c = &k->c[s->c];
        uint32_t lo = s->f + 1 > gprev ? s->f + 1 : gprev;
        if (lo >= c->b) { gprev = c->b; continue; }   /* comes back at its use */
        uint32_t k1 = ssi_simx_last_above(r->mem, lo, c->b, lim - (int64_t)c->x);
        uint32_t g = k1 == SS_NONE ? lo : k1 + 1;
        if (g < s->g) {
            ssi_simx_add(r->mem, g, s->g, (int64_t)c->x);
            s->g = g;
        }
        gprev = s->g;
    }
    free(ord);
    return SS_OK;
}

/* Selects swaps so that the byte model stays within B. r is filled; r->fits says whether it
 * worked. strategy 0: MindSpeed's scores (phase 1 below); 1: the oldest-first schedule
 * (select_oldest); phase 2 is the same for both. */
static ss_status select_at(ctx *k, uint64_t B, run *r, int strategy) {
    memset(r, 0, sizeof *r);
    uint32_t n = k->n;
    ss_status st = ssi_simx_new(n, k->lvl, &r->mem);
    if (st) return st;
    if (k->cfg->host_mem_bytes && (st = ssi_simx_new(n, NULL, &r->host))) return st;
    for (uint32_t i = 0; i < k->nc; i++) { k->c[i].sel = SS_NONE; k->c[i].f_nat = SS_NONE; }
    const int64_t lim = (int64_t)B;
    r->fits = 1;
    r->stuck_op = SS_NONE;
    if (n == 0 || ssi_simx_max(r->mem, 0, n) <= lim) return SS_OK;

    /* memory reduction list per layer, and per-op "above" prefix counts over layers */
    uint32_t L = k->L;
    uint32_t *over_pre = calloc((size_t)L + 1, sizeof *over_pre);
    scored *sc = malloc(((size_t)k->nc + 1) * sizeof *sc);
    ssi_fluid *d2h = NULL, *h2d = NULL;
    if (!over_pre || !sc) { st = SS_ERR_HOST_OOM; goto done; }
    for (uint32_t l = 0; l < L; l++) {
        uint32_t lo = ssi_layer_first(n, L, l), hi = ssi_layer_first(n, L, l + 1);
        int over = ssi_simx_max(r->mem, lo, hi) > lim;
        over_pre[l + 1] = over_pre[l] + (uint32_t)over;
        r->over_layers += (uint32_t)over;
    }
    /* candidate list: intervals that cover an op above the budget; scores */
    uint32_t ns = 0;
    double max_cov = 0, max_sz = 0;
    for (uint32_t i = 0; i < k->nc; i++) {
        cand *c = &k->c[i];
        if (ssi_simx_max(r->mem, c->a + 1, c->b) <= lim) continue;
        /* layers touched by ops a+1 .. b-1 */
        uint32_t la = (uint32_t)(((uint64_t)(c->a + 1) * L) / n), lb = (uint32_t)(((uint64_t)(c->b - 1) * L) / n);
        while (la > 0 && ssi_layer_first(n, L, la) > c->a + 1) la--;
        while (la + 1 < L && ssi_layer_first(n, L, la + 1) <= c->a + 1) la++;
        while (lb > 0 && ssi_layer_first(n, L, lb) > c->b - 1) lb--;
        while (lb + 1 < L && ssi_layer_first(n, L, lb + 1) <= c->b - 1) lb++;
        double cov = (double)(over_pre[lb + 1] - over_pre[la]);
        double sz = cbrt((double)c->x);
        c->score = cov;
        sc[ns++] = (scored){sz, c->a, i};   /* score filled below */
        if (cov > max_cov) max_cov = cov;
        if (sz > max_sz) max_sz = sz;
    }
    r->ncand = ns;
    for (uint32_t q = 0; q < ns; q++) {
        cand *c = &k->c[sc[q].i];
        sc[q].score = (max_cov > 0 ? c->score / max_cov : 0) + 2.0 * (max_sz > 0 ? sc[q].score / max_sz : 0);
        c->score = sc[q].score;
    }
    qsort(sc, ns, sizeof *sc, scored_cmp);

    /* phase 1: hidden swaps */
    if ((st = ssi_fluid_new(n, k->dur, &d2h)) || (st = ssi_fluid_new(n, k->dur, &h2d))) goto done;
    if (strategy == 1 && (st = select_oldest(r, k, lim, d2h))) goto done;
    for (uint32_t q = 0; strategy == 0 && q < ns; q++) {
        if (ssi_simx_max(r->mem, 0, n) <= lim) break;
        cand *c = &k->c[sc[q].i];
        uint32_t ko = ssi_fluid_forward(d2h, c->a + 1, c->b, c->c_out, 0);
        if (ko == SS_NONE || ko + 1 >= c->b) continue;
        uint32_t f = ko + 1;
        uint32_t g = ssi_fluid_backward(h2d, c->b, f, c->c_in, 0);
        if (g == SS_NONE || g <= f) continue;
        if (ssi_simx_max(r->mem, f, g) <= lim) continue;   /* frees nothing that matters */
        if (!host_fits(r, k, c)) { r->host_limited = 1; continue; }
        ssi_fluid_forward(d2h, c->a + 1, c->b, c->c_out, 1);
        ssi_fluid_backward(h2d, c->b, f, c->c_in, 1);
        if ((st = select_add(r, k, sc[q].i, f, g, 1))) goto done;
    }

    /* phase 2: every op still above the target, in order */
    uint32_t *act = malloc(((size_t)k->nc + 1) * sizeof *act);
    if (!act) { st = SS_ERR_HOST_OOM; goto done; }
    uint32_t nact = 0, ptr = 0, last_j = SS_NONE;
    uint32_t j = ssi_simx_first_above(r->mem, 0, n, lim);
    while (j != SS_NONE) {
        if (j != last_j) {
            while (ptr < k->nc && k->c[k->by_a[ptr]].a < j) act[nact++] = k->by_a[ptr++];
            uint32_t w = 0;
            for (uint32_t q = 0; q < nact; q++)
                if (k->c[act[q]].b > j) act[w++] = act[q];
            nact = w;
            last_j = j;
        }
        /* the cheapest option covering j */
        uint32_t best = SS_NONE, bf = 0, bg = 0;
        uint64_t best_cost = UINT64_MAX, best_x = 0;
        for (uint32_t q = 0; q < nact; q++) {
            cand *c = &k->c[act[q]];
            uint32_t f, g;
            uint64_t cost;
            if (c->sel != SS_NONE) {
                sel *s = &r->s[c->sel];
                if (s->f <= j && j < s->g) continue;
                f = j < s->f ? j : s->f;
                g = j >= s->g ? j + 1 : s->g;
                cost = (uint64_t)(s->f - f) + (g - s->g);
                cost = cost * 2 + 1;   /* an adjustment costs more than a natural new swap */
            } else {
                if (!host_fits(r, k, c)) { r->host_limited = 1; continue; }
                if (c->f_nat == SS_NONE) {
                    uint32_t ko = ssi_fluid_forward(d2h, c->a + 1, c->b, c->c_out, 0);
                    c->f_nat = ko == SS_NONE ? c->b : ko + 1;
                    uint32_t gg = ssi_fluid_backward(h2d, c->b, c->a + 1, c->c_in, 0);
                    c->g_nat = gg == SS_NONE ? c->a + 1 : gg;
                }
                f = c->f_nat < j ? c->f_nat : j;
                g = c->g_nat > j + 1 ? c->g_nat : j + 1;
                if (f <= c->a) f = c->a + 1;
                if (g > c->b) g = c->b;
                if (g < f) g = f;
                cost = (uint64_t)(c->f_nat > f ? c->f_nat - f : 0) + (g > c->g_nat ? g - c->g_nat : 0);
                cost *= 2;
            }
            if (cost < best_cost || (cost == best_cost && c->x > best_x)) {
                best = act[q]; bf = f; bg = g; best_cost = cost; best_x = c->x;
            }
        }
        if (best == SS_NONE) { r->fits = 0; r->stuck_op = j; break; }
        cand *c = &k->c[best];
        if (c->sel != SS_NONE) {
            sel *s = &r->s[c->sel];
            if (bf < s->f) ssi_simx_add(r->mem, bf, s->f, -(int64_t)c->x);
            if (bg > s->g) ssi_simx_add(r->mem, s->g, bg, -(int64_t)c->x);
            s->f = bf;
            s->g = bg;
            s->hidden = 0;
        } else {
            if ((st = select_add(r, k, best, bf, bg, 0))) { free(act); goto done; }
        }
        j = ssi_simx_first_above(r->mem, j, n, lim);
    }
    free(act);
done:
    ssi_fluid_free(d2h);
    ssi_fluid_free(h2d);
    free(over_pre);
    free(sc);
    return st;
}

/* ---- plans from selections ---------------------------------------------------------------- */

static ss_status build_plan(ctx *k, const run *r, uint64_t budget, ss_plan **out) {
    ss_plan *pl;
    ss_status st = ssi_plan_new(&pl);
    if (st) return st;
    for (uint32_t q = 0; q < r->ns && !st; q++) {
        const sel *s = &r->s[q];
        if (s->f >= s->g) continue;   /* freed and fetched back at the same operator: frees nothing */
        const cand *c = &k->c[s->c];
        const ss_prof_tensor *x = &k->p->tensors[c->t];
        const ss_prof_op *o = &k->p->ops[x->producer];
        ss_plan_entry e;
        memset(&e, 0, sizeof e);
        st = ssi_plan_intern(pl, k->p->names[o->name], &e.name);
        if (st) break;
        e.site = o->site;
        e.dtype = x->dtype;
        e.ndim = x->ndim;
        memcpy(e.shape, x->shape, sizeof e.shape);
        e.bytes = x->bytes;
        e.ordinal = k->ordinal[c->t];
        e.tensor = c->t;
        e.out_op = c->a;
        e.free_op = s->f;
        e.in_op = s->g;
        e.use_op = c->b;
        st = ssi_plan_add_entry(pl, &e);
    }
    if (!st) st = ssi_plan_set_checkpoints(pl, k->p, k->cfg->ck_every);
    if (st) { ssi_plan_free(pl); return st; }
    ssi_plan_sort(pl);
    pl->budget_bytes = budget;
    *out = pl;
    return SS_OK;
}

/* Copies the simulation's predictions into the plan. */
static void plan_predict(ctx *k, ss_plan *pl, const ssi_sim_result *sr, int fits) {
    pl->peak_before = k->peak0;   /* the byte model equals the unplanned run's peak */
    pl->peak_after = sr->peak_bytes;
    pl->peak_reserved = sr->peak_reserved_bytes;
    pl->swapped_bytes = 0;
    for (uint32_t i = 0; i < pl->nentries; i++) {
        pl->entries[i].t_out_done = sr->t_out_done[i];
        pl->entries[i].t_in_done = sr->t_in_done[i];
        pl->swapped_bytes += pl->entries[i].bytes;
    }
    pl->host_bytes = sr->host_bytes;
    pl->stall_s = sr->stall_s;
    pl->iter_s = sr->iter_s;
    pl->feasible = fits && !sr->oom && !sr->host_over && sr->peak_bytes <= pl->budget_bytes;
}

/* Reach time of op i in a simulated run: the end of op i-1 (0 for the first). */
static double reach_time(const ctx *k, const ssi_sim_result *sr, uint32_t i) {
    return i == 0 ? 0.0 : sr->op_start[i - 1] + k->dur[i - 1];
}

/* Smallest i in [lo, hi] with reach_time(i) >= t, or hi + 1. */
static uint32_t first_reach_at(const ctx *k, const ssi_sim_result *sr, uint32_t lo, uint32_t hi,
                               double t) {
    uint32_t a = lo, b = hi + 1;
    while (a < b) {
        uint32_t m = a + (b - a) / 2;
        if (reach_time(k, sr, m) >= t) b = m; else a = m + 1;
    }
    return a;
}

/* Largest i in [lo, hi] with reach_time(i) <= t, or lo when none. */
static uint32_t last_reach_by(const ctx *k, const ssi_sim_result *sr, uint32_t lo, uint32_t hi,
                              double t) {
    uint32_t a = lo, b = hi + 1;   /* first with reach > t */
    while (a < b) {
        uint32_t m = a + (b - a) / 2;
        if (reach_time(k, sr, m) > t) b = m; else a = m + 1;
    }
    return a > lo ? a - 1 : lo;
}

/* One simulate-and-adjust step: each free point moves to the op reached after the simulated
 * swap-out completion (earlier always; later as far as B allows), and each swap-in that made
 * its use wait moves earlier by the wait, as far as B allows. Updates r (selections and the
 * memory tree). */
static uint32_t adjust(ctx *k, run *r, const ss_plan *pl, const ssi_sim_result *sr, uint64_t B) {
    uint32_t changed = 0;
    for (uint32_t q = 0; q < pl->nentries; q++) {
        const ss_plan_entry *e = &pl->entries[q];
        uint32_t ci = k->cand_of[e->tensor];
        if (ci == SS_NONE || k->c[ci].sel == SS_NONE) continue;
        cand *c = &k->c[ci];
        sel *s = &r->s[c->sel];
        int64_t room = (int64_t)B - (int64_t)c->x;
        /* free point */
        uint32_t fs = first_reach_at(k, sr, c->a + 1, s->g, sr->t_out_done[q]);
        if (fs > s->g) fs = s->g;
        if (fs < s->f) {
            ssi_simx_add(r->mem, fs, s->f, -(int64_t)c->x);
            s->f = fs;
            changed++;
        } else if (fs > s->f) {
            uint32_t k0 = ssi_simx_first_above(r->mem, s->f, fs, room);
            uint32_t nf = k0 == SS_NONE ? fs : k0;
            if (nf > s->f) {
                ssi_simx_add(r->mem, s->f, nf, (int64_t)c->x);
                s->f = nf;
                changed++;
            }
        }
        /* swap-in */
        double late = sr->t_in_done[q] - reach_time(k, sr, c->b);
        if (late > 1e-12 && s->g > s->f) {
            uint32_t gs = last_reach_by(k, sr, s->f, s->g, reach_time(k, sr, s->g) - late);
            if (gs < s->g) {
                uint32_t k1 = ssi_simx_last_above(r->mem, gs, s->g, room);
                uint32_t ng = k1 == SS_NONE ? gs : k1 + 1;
                if (ng < s->g) {
                    ssi_simx_add(r->mem, ng, s->g, (int64_t)c->x);
                    s->g = ng;
                    changed++;
                }
            }
        }
    }
    return changed;
}

/* ---- the planner at one budget -------------------------------------------------------------- */

typedef struct attempt {
    ss_plan *plan;
    ssi_sim_result sr;
    run r;              /* the selection of the kept plan's first round (for the report) */
    int fits;           /* byte model within the budget */
} attempt;

static void attempt_free(attempt *a) {
    ssi_plan_free(a->plan);
    ssi_sim_result_free(&a->sr);
    run_free(&a->r);
    memset(a, 0, sizeof *a);
}

/* 1 if (plan x, result y) is better than the kept one: feasible first, then less stall. */
static int better(const ss_plan *x, const ss_plan *kept) {
    if (!kept) return 1;
    if (x->feasible != kept->feasible) return x->feasible > kept->feasible;
    if (x->feasible) return x->stall_s < kept->stall_s - 1e-12;
    return x->peak_after < kept->peak_after;
}

static ss_status prune(ctx *k, uint64_t B, int probes, ss_plan **kept, ssi_sim_result *ksr);

/* Plans at budget B (a multiple of SS_ALLOC_ALIGN): selection, then simulate-and-adjust
 * rounds; when the allocator cannot keep a selection that fits the byte model (fragmentation),
 * selects again under a lower target. */
static ss_status plan_with(ctx *k, uint64_t B, attempt *out, int strategy) {
    memset(out, 0, sizeof *out);
    /* rounds: at most cfg->rounds, else until two rounds in a row make no progress (stall
     * lower by more than 0.5 % of the step), at most 16 (docs/policy.md step 6) */
    int fixed = k->cfg->rounds > 0, rounds = fixed ? k->cfg->rounds : 16;
    uint64_t seg = k->cfg->granule_bytes ? k->cfg->granule_bytes
                   : k->cfg->segment_bytes ? k->cfg->segment_bytes : (2u << 20);
    uint64_t target = B, fit_oom = B, step = 0;
    ss_status st = SS_OK;
    ssi_sim_config sc = ssi_policy_sim_config(k->cfg, B ? B : 1);
    for (int tries = 0; tries < 8; tries++) {
        run r;
        if ((st = select_at(k, target, &r, strategy))) { run_free(&r); break; }
        int fits = r.fits, idle = 0;
        for (int round = 0; round < rounds; round++) {
            ss_plan *pl = NULL;
            ssi_sim_result sr;
            if ((st = build_plan(k, &r, B, &pl))) break;
            if ((st = ssi_sim_run(k->p, pl, &sc, &sr, NULL, 0))) { ssi_plan_free(pl); break; }
            plan_predict(k, pl, &sr, fits);
            int last = !fits || round + 1 == rounds || sr.stall_s == 0;
            if (!last && adjust(k, &r, pl, &sr, target) == 0) last = 1;   /* for the next round */
            int gain = better(pl, out->plan);
            /* progress: a better plan whose stall is lower by more than 0.5 % of the step (a
             * smaller gain does not pay for the simulations of further rounds) */
            int progress = gain && (!out->plan || pl->feasible != out->plan->feasible ||
                                    pl->stall_s < out->plan->stall_s - 0.005 * out->plan->iter_s);
            idle = progress ? 0 : idle + 1;
            if (!fixed && idle >= 2) last = 1;   /* converged: two rounds without progress */
            if (gain) {
                ssi_plan_free(out->plan);
                ssi_sim_result_free(&out->sr);
                out->plan = pl;
                out->sr = sr;
                out->fits = fits;
                out->r.over_layers = r.over_layers;
                out->r.ncand = r.ncand;
                out->r.hidden = r.hidden;
                out->r.host_limited = r.host_limited;
                out->r.stuck_op = r.stuck_op;
            } else {
                ssi_plan_free(pl);
                ssi_sim_result_free(&sr);
            }
            if (last) break;
        }
        run_free(&r);
        if (st || !out->plan || out->plan->feasible) break;
        /* The allocator could not keep a selection: select again under a lower target, leaving
         * it room for its segments. When the byte model fits but the allocator refused, the
         * room grows (first the bytes it refused, then doubling); when the lowered target no
         * longer fits the byte model, the room halves. */
        if (fits) {
            fit_oom = target;
            if (step == 0) step = out->sr.oom_bytes > seg ? out->sr.oom_bytes : seg;
            else step *= 2;
        } else {
            if (target == B) break;          /* the byte model itself does not fit */
            step /= 2;
            if (step < seg) break;
        }
        step = ssi_round_block(step);
        if (step >= fit_oom) break;
        target = fit_oom - step;
    }
    if (st) attempt_free(out);
    return st;
}

/* Plans at budget B with both selections (MindSpeed's scores and the oldest-first schedule),
 * keeps the better by the simulator (feasible first, then less stall: better()), and prunes
 * it. */
static ss_status plan_at(ctx *k, uint64_t B, attempt *out) {
    ss_status st = plan_with(k, B, out, 0);
    if (st) return st;
    attempt o;
    if ((st = plan_with(k, B, &o, 1))) { attempt_free(out); return st; }
    if (o.plan && better(o.plan, out->plan)) {
        attempt_free(out);
        *out = o;
    } else {
        attempt_free(&o);
    }
    if (out->plan && out->plan->feasible) st = prune(k, B, 4, &out->plan, &out->sr);
    if (st) attempt_free(out);
    return st;
}

/* ---- pruning --------------------------------------------------------------------------------- */

typedef struct pkey { uint32_t out_op; uint64_t x; uint32_t q; } pkey;
static int pkey_cmp(const void *x, const void *y) {
    const pkey *a = x, *b = y;
    if (a->out_op != b->out_op) return a->out_op > b->out_op ? -1 : 1;   /* latest first */
    if (a->x != b->x) return a->x > b->x ? -1 : 1;                       /* then the larger */
    return a->q < b->q ? -1 : (a->q > b->q);
}

/* Removes plan entries that the plan does not need: on the byte model with every entry's
 * reduction over [free_op, in_op), an entry goes when putting its bytes back keeps every op
 * within B. Tried latest-produced first (their idle intervals are the shortest, so their copies
 * hide worst), larger first at a tie. The pruned plan is simulated; it replaces *kept (with
 * *ksr) only when it is feasible and does not stall more. */
static ss_status prune(ctx *k, uint64_t B, int probes, ss_plan **kept, ssi_sim_result *ksr) {
    ss_plan *pl = *kept;
    if (!pl || !pl->feasible || pl->nentries == 0 || k->n == 0) return SS_OK;
    uint32_t ne = pl->nentries;
    ssi_simx *mem = NULL;
    sel *sv = NULL;
    pkey *o = malloc((size_t)ne * sizeof *o);
    uint32_t *dl = malloc((size_t)ne * sizeof *dl);   /* drops, in the order taken */
    uint32_t *rank = malloc((size_t)ne * sizeof *rank);
    ss_status st = SS_OK;
    if (!o || !dl || !rank || (st = ssi_simx_new(k->n, k->lvl, &mem))) {
        if (!st) st = SS_ERR_HOST_OOM;
        goto out;
    }
    for (uint32_t q = 0; q < ne; q++) {
        const ss_plan_entry *e = &pl->entries[q];
        if (k->cand_of[e->tensor] == SS_NONE) goto out;   /* not from this context */
        uint64_t x = ssi_round_block(e->bytes);
        ssi_simx_add(mem, e->free_op, e->in_op, -(int64_t)x);
        o[q] = (pkey){e->out_op, x, q};
        rank[q] = UINT32_MAX;
    }
    qsort(o, ne, sizeof *o, pkey_cmp);
    uint32_t nd = 0;
    for (uint32_t j = 0; j < ne; j++) {
        const ss_plan_entry *e = &pl->entries[o[j].q];
        if (e->free_op < e->in_op) {
            if (ssi_simx_max(mem, e->free_op, e->in_op) + (int64_t)o[j].x > (int64_t)B) continue;
            ssi_simx_add(mem, e->free_op, e->in_op, (int64_t)o[j].x);
        }   /* an entry that frees nothing goes at no cost */
        rank[o[j].q] = nd;
        dl[nd++] = o[j].q;
    }
    if (nd == 0) goto out;
    sv = malloc((size_t)ne * sizeof *sv);
    if (!sv) { st = SS_ERR_HOST_OOM; goto out; }
    /* Drop the first m of dl: all of them first; when the allocator refuses that (the byte
     * model has no room for its segments) and probes > 1, bisection steps over m, for every
     * profile. (Profiles with unattributed memory, the executor's recorder, pruned all or
     * nothing until their operators carried their peaks, temporaries included: before, partial
     * prunes filled the budget to the granule under temporaries the profile did not see, and
     * test-replay peak/4 and test-gpt-train 1/4 evicted.) */
    uint32_t lo = 0, hi = nd, m = nd;
    ss_plan *best = NULL;
    ssi_sim_result bsr;
    memset(&bsr, 0, sizeof bsr);
    for (int probe = 0; probe < probes && m > lo; probe++) {
        run r;
        memset(&r, 0, sizeof r);
        r.s = sv;
        for (uint32_t q = 0; q < ne; q++) {
            if (rank[q] < m) continue;
            const ss_plan_entry *e = &pl->entries[q];
            r.s[r.ns++] = (sel){k->cand_of[e->tensor], e->free_op, e->in_op, 0};
        }
        ss_plan *np = NULL;
        if ((st = build_plan(k, &r, B, &np))) break;
        ssi_sim_config sc = ssi_policy_sim_config(k->cfg, B);
        ssi_sim_result sr;
        if ((st = ssi_sim_run(k->p, np, &sc, &sr, NULL, 0))) { ssi_plan_free(np); break; }
        plan_predict(k, np, &sr, 1);
        if (np->feasible && np->stall_s <= pl->stall_s + 1e-12) {
            ssi_plan_free(best);
            ssi_sim_result_free(&bsr);
            best = np;
            bsr = sr;
            lo = m;
            if (m == hi) break;
        } else {
            ssi_plan_free(np);
            ssi_sim_result_free(&sr);
            hi = m;
        }
        m = lo + (hi - lo + 1) / 2;
        if (m >= hi) break;
    }
    if (st) { ssi_plan_free(best); ssi_sim_result_free(&bsr); goto out; }
    if (best) {
        best->budget_bytes = pl->budget_bytes;
        best->min_budget_bytes = pl->min_budget_bytes;
        ssi_plan_free(pl);
        ssi_sim_result_free(ksr);
        *kept = best;
        *ksr = bsr;
    }
out:
    ssi_simx_free(mem);
    free(sv);
    free(o);
    free(dl);
    free(rank);
    return st;
}

/* Smallest budget (a multiple of SS_ALLOC_ALIGN) at which plan_at is feasible; lo is known to
 * fail. */
static ss_status find_min_budget(ctx *k, uint64_t *out) {
    ss_status st0 = ctx_base(k);
    if (st0) return st0;
    uint64_t lo = k->tight >= SS_ALLOC_ALIGN ? k->tight - SS_ALLOC_ALIGN : 0;
    uint64_t hi = k->base.peak_reserved_bytes;
    if (hi < k->base.peak_bytes) hi = k->base.peak_bytes;
    hi = ssi_round_block(hi ? hi : SS_ALLOC_ALIGN);
    attempt a;
    ss_status st;
    /* the lower bound itself usually fits */
    uint64_t first = ssi_round_block(k->tight ? k->tight : SS_ALLOC_ALIGN);
    if (first < hi) {
        if ((st = plan_at(k, first, &a))) return st;
        int ok = a.plan->feasible;
        attempt_free(&a);
        if (ok) { *out = first; return SS_OK; }
        lo = first;
    }
    /* make sure hi fits (it does: no swap is needed there) */
    for (int i = 0; i < 8; i++) {
        if ((st = plan_at(k, hi, &a))) return st;
        int ok = a.plan->feasible;
        attempt_free(&a);
        if (ok) break;
        lo = hi;
        hi = ssi_round_block(hi * 2);
    }
    while (hi - lo > SS_ALLOC_ALIGN) {
        uint64_t mid = lo + (hi - lo) / 2;
        mid -= mid % SS_ALLOC_ALIGN;
        if (mid <= lo) mid = lo + SS_ALLOC_ALIGN;
        if ((st = plan_at(k, mid, &a))) return st;
        int ok = a.plan->feasible;
        attempt_free(&a);
        if (ok) hi = mid; else lo = mid;
    }
    *out = hi;
    return SS_OK;
}

static void fmt_desc(ctx *k, ss_plan *pl) {
    int tm = k->cfg->time.mode;
    if (tm == SSI_TIME_AUTO) tm = ssi_profile_has_op_times(k->p) ? SSI_TIME_MEASURED : SSI_TIME_LAYER;
    const char *mode = tm == SSI_TIME_FLOPS ? "per-operator FLOPs"
                     : tm == SSI_TIME_MEASURED ? "measured op times" : "logical layers";
    ssi_fmt(pl->desc, sizeof pl->desc, "d2h %.3g GB/s, h2d %.3g GB/s, times from %s, %u layers; %s",
            k->cfg->d2h_bps / 1e9, k->cfg->h2d_bps / 1e9, mode, k->L, k->p->desc);
}

ss_status ssi_policy_plan(const ss_profile *p, const ssi_policy_config *c, ss_plan **out,
                          ssi_policy_report *rep, char *err, size_t err_len) {
    if (err && err_len) err[0] = 0;
    if (!p || !c || !out) return SS_ERR_INVALID;
    if (c->budget_bytes == 0) {
        ssi_fmt(err, err_len, "the budget is 0: give the device bytes the plan must fit in");
        return SS_ERR_INVALID;
    }
    if (!(c->d2h_bps > 0) || !(c->h2d_bps > 0) || !isfinite(c->d2h_bps) || !isfinite(c->h2d_bps)) {
        ssi_fmt(err, err_len, "copy bandwidths must be positive (d2h %g, h2d %g B/s)", c->d2h_bps,
                c->h2d_bps);
        return SS_ERR_INVALID;
    }
    if (c->headroom > 0) {
        if (!(c->headroom < 0.9)) {
            ssi_fmt(err, err_len, "headroom %g is not in [0, 0.9)", c->headroom);
            return SS_ERR_INVALID;
        }
        ssi_policy_config c2 = *c;
        c2.headroom = 0;
        uint64_t low = c->budget_bytes - (uint64_t)((double)c->budget_bytes * c->headroom);
        if (low >= SS_ALLOC_ALIGN && low < c->budget_bytes) {
            c2.budget_bytes = low;
            ss_status s0 = ssi_policy_plan(p, &c2, out, rep, err, err_len);
            if (s0 || (*out)->feasible) return s0;
            ssi_plan_free(*out);
            *out = NULL;
            c2.budget_bytes = c->budget_bytes;
        }
        return ssi_policy_plan(p, &c2, out, rep, err, err_len);
    }
    ctx k;
    ss_status st = ctx_init(&k, p, c, err, err_len);
    if (st) { ctx_free(&k); return st; }
    uint64_t B = c->budget_bytes - c->budget_bytes % SS_ALLOC_ALIGN;
    attempt a;
    if (B == 0) {
        /* below one granule: nothing fits; plan with no swaps to report */
        st = plan_at(&k, SS_ALLOC_ALIGN, &a);
        if (!st) { a.plan->budget_bytes = c->budget_bytes; a.plan->feasible = 0; }
    } else {
        st = plan_at(&k, B, &a);
    }
    if (st) { ctx_free(&k); return st; }
    ss_plan *pl = a.plan;
    pl->budget_bytes = c->budget_bytes;
    if (!c->skip_min_budget && (!pl->feasible || c->min_budget)) {
        uint64_t mb = 0;
        if ((st = find_min_budget(&k, &mb))) { attempt_free(&a); ctx_free(&k); return st; }
        pl->min_budget_bytes = mb;
        if (!pl->feasible && mb <= B) {
            /* the greedy selection is not monotone in the budget: a smaller budget found a plan
             * that fits; keep it if it also runs under this budget */
            attempt b;
            if ((st = plan_at(&k, mb, &b))) { attempt_free(&a); ctx_free(&k); return st; }
            ssi_sim_config sc = ssi_policy_sim_config(c, B);
            ssi_sim_result sr;
            if ((st = ssi_sim_run(p, b.plan, &sc, &sr, NULL, 0))) {
                attempt_free(&b); attempt_free(&a); ctx_free(&k); return st;
            }
            b.plan->budget_bytes = B;
            plan_predict(&k, b.plan, &sr, b.fits);
            if (b.plan->feasible) {
                ssi_sim_result_free(&b.sr);
                b.sr = sr;
                b.plan->min_budget_bytes = c->min_budget ? mb : 0;
                attempt_free(&a);
                a = b;
                /* made for the smaller budget, it swaps more than this one needs */
                if ((st = prune(&k, B, 4, &a.plan, &a.sr))) { attempt_free(&a); ctx_free(&k); return st; }
                pl = a.plan;
                pl->budget_bytes = c->budget_bytes;
            } else {
                ssi_sim_result_free(&sr);
                attempt_free(&b);
            }
        }
    }
    fmt_desc(&k, pl);
    if (rep) {
        memset(rep, 0, sizeof *rep);
        rep->nlayers = k.L;
        rep->over_layers = a.r.over_layers;
        rep->candidates = a.r.ncand;
        rep->selected = pl->nentries;
        rep->hidden = a.r.hidden;
        rep->peak_before = pl->peak_before;
        rep->peak_after = pl->peak_after;
        rep->budget_bytes = c->budget_bytes;
        rep->swapped_bytes = pl->swapped_bytes;
        rep->host_bytes = pl->host_bytes;
        rep->iter_s_before = k.compute_s;
        rep->iter_s = pl->iter_s;
        rep->stall_s = pl->stall_s;
        rep->feasible = pl->feasible;
        rep->host_limited = a.r.host_limited;
        rep->min_budget_bytes = pl->min_budget_bytes;
        if (!pl->feasible && c->skip_min_budget) {
            char b1[32];
            ssi_fmt(rep->why, sizeof rep->why, "no plan fits %s (the smallest budget that fits "
                    "was not searched: skip_min_budget)", ss_format_size(c->budget_bytes, b1, sizeof b1));
        } else if (!pl->feasible) {
            char b0[32], b1[32], b2[32];
            ss_format_size(c->budget_bytes, b1, sizeof b1);
            ss_format_size(pl->min_budget_bytes, b2, sizeof b2);
            if (p->base_bytes > c->budget_bytes)
                ssi_fmt(rep->why, sizeof rep->why, "the profile's base memory (weights, gradients, "
                        "optimizer state: %s) alone exceeds the budget %s; the smallest budget that "
                        "fits is %s", ss_format_size(p->base_bytes, b0, sizeof b0), b1, b2);
            else if (a.r.host_limited)
                ssi_fmt(rep->why, sizeof rep->why, "no plan fits %s with the host-memory cap: "
                        "swapping is limited by host memory; the smallest budget that fits is %s",
                        b1, b2);
            else if (!a.fits)
                ssi_fmt(rep->why, sizeof rep->why, "even swapping every candidate cannot fit %s "
                        "(operator %u stays above it); the smallest budget that fits is %s", b1,
                        a.r.stuck_op, b2);
            else
                ssi_fmt(rep->why, sizeof rep->why, "the allocator cannot keep %s (fragmentation "
                        "of its segments); the smallest budget that fits is %s", b1, b2);
        }
    }
    a.plan = NULL;
    attempt_free(&a);
    ctx_free(&k);
    *out = pl;
    return SS_OK;
}

ss_status ssi_policy_hook(void *user, const ss_profile *p, ss_plan **out) {
    if (!user) return SS_ERR_INVALID;
    return ssi_policy_plan(p, (const ssi_policy_config *)user, out, NULL, NULL, 0);
}

void ssi_policy_config_from_options(const ss_options *o, ssi_policy_config *c) {
    memset(c, 0, sizeof *c);
    c->budget_bytes = o->budget_bytes;
    c->host_mem_bytes = o->host_mem_bytes;
    c->min_swap_bytes = o->min_swap_bytes;
    c->d2h_bps = o->sim_d2h_gbps * 1e9;
    c->h2d_bps = o->sim_h2d_gbps * 1e9;
    c->copy_latency_s = o->sim_latency_us * 1e-6;
    c->time.mode = SSI_TIME_AUTO;
    c->time.layers = o->layers > 0 ? (uint32_t)o->layers : 0;
}
