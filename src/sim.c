/* sim.c: the simulator of sim.h: time estimates, the byte model, the full event simulation
 * with the allocator in measure mode, and the incremental pieces the policy uses (a segment
 * tree over memory levels and a fluid model of each copy stream).
 *
 * The full simulation's event model (docs/policy.md repeats it; the executor follows it):
 * the compute clock t starts at 0; for each operator i in order:
 *   1. reach i: ss_alloc_reach releases every swapped-out block whose free point is i; a block
 *      whose swap-out has not completed makes compute wait until it has (a late free);
 *   2. the block of unattributed memory is resized to other[i] (freed, then allocated);
 *   3. swap-ins issued at i: a block is allocated, and the H2D copy starts at
 *      max(t, H2D stream free, the swap-out's completion) and takes latency + bytes / h2d
 *      (computed as start + (latency + bytes / h2d), the device's own rounding, so that a
 *      replay on cpu-sim's virtual clock lands on the same doubles);
 *   4. swapped tensors used by i: compute waits until their swap-in completed (a late use);
 *   5. tensors produced by i are allocated;  -> the device bytes in use "during op i"
 *   6. op i runs from t to t + dur[i];
 *   7. tensors released by i are freed (a swapped tensor: its swapped-in block);
 *   8. swap-outs issued after i: the D2H copy starts at max(t, D2H stream free) and takes
 *      latency + bytes / d2h; the block is handed to ss_alloc_free_at(free point, completion).
 * Host memory: a swapped tensor holds bytes on the host from its swap-out (step 8) to its use
 * (step 4). The iteration ends when the last operator ends.
 */
#include "sim.h"

#include "rebuild.h"   /* the profile a plan's recompute entries make (below the simulator) */

#include <inttypes.h>
#include <math.h>
#include <stdio.h>

/* ---- time estimates ---------------------------------------------------------------------- */

uint32_t ssi_default_layers(uint32_t nops) {
    if (nops == 0) return 1;
    uint32_t L = (uint32_t)ceil(sqrt((double)nops));
    if (L < 1) L = 1;
    if (L > nops) L = nops;
    return L;
}

uint32_t ssi_layers_for(const ss_profile *p, uint32_t layers) {
    uint32_t n = p->nops ? p->nops : 1;
    if (layers == 0) return ssi_default_layers(n);
    return layers > n ? n : layers;
}

int ssi_profile_has_op_times(const ss_profile *p) {
    uint32_t timed = 0;
    for (uint32_t i = 0; p && i < p->nops; i++) timed += p->ops[i].seconds > 0;
    return p && p->nops && 2 * (uint64_t)timed >= p->nops;
}

ss_status ssi_sim_op_times(const ss_profile *p, const ssi_time_config *tc, double *dur,
                           char *err, size_t err_len) {
    if (!p || !tc || (!dur && p->nops)) return SS_ERR_INVALID;
    uint32_t n = p->nops;
    if (n == 0) return SS_OK;
    if (tc->mode == SSI_TIME_AUTO) {
        ssi_time_config t = *tc;
        if (!ssi_profile_has_op_times(p)) {
            t.mode = SSI_TIME_LAYER;
            return ssi_sim_op_times(p, &t, dur, err, err_len);
        }
        double sum = 0;
        uint32_t timed = 0;
        for (uint32_t i = 0; i < n; i++)
            if (p->ops[i].seconds > 0) { sum += p->ops[i].seconds; timed++; }
        for (uint32_t i = 0; i < n; i++) dur[i] = p->ops[i].seconds > 0 ? p->ops[i].seconds : sum / timed;
        return SS_OK;
    }
    switch (tc->mode) {
    case SSI_TIME_LAYER: {
        double T = tc->iter_seconds > 0 ? tc->iter_seconds : p->iter_seconds;
        if (!(T > 0) || !isfinite(T)) {
            ssi_fmt(err, err_len, "the profile has no iteration time: give one (--iter-time "
                    "SECONDS) or a device preset for per-operator times (--device)");
            return SS_ERR_INVALID;
        }
        uint32_t L = ssi_layers_for(p, tc->layers);
        for (uint32_t l = 0; l < L; l++) {
            uint32_t a = ssi_layer_first(n, L, l), b = ssi_layer_first(n, L, l + 1);
            double d = T / L / (double)(b - a);
            for (uint32_t i = a; i < b; i++) dur[i] = d;
        }
        return SS_OK;
    }
    case SSI_TIME_FLOPS: {
        if (!(tc->flops_per_s > 0) || !isfinite(tc->flops_per_s)) {
            ssi_fmt(err, err_len, "per-operator times need the device's FLOP/s (a --device preset)");
            return SS_ERR_INVALID;
        }
        int any = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (p->ops[i].flops > 0) any = 1;
            dur[i] = p->ops[i].flops / tc->flops_per_s + (tc->op_overhead_s > 0 ? tc->op_overhead_s : 0);
        }
        if (!any) {
            ssi_fmt(err, err_len, "the profile has no operator FLOPs: use the logical-layer "
                    "estimate (--iter-time SECONDS)");
            return SS_ERR_INVALID;
        }
        return SS_OK;
    }
    case SSI_TIME_MEASURED: {
        int any = 0;
        for (uint32_t i = 0; i < n; i++) {
            dur[i] = p->ops[i].seconds;
            if (dur[i] > 0) any = 1;
        }
        if (!any) {
            ssi_fmt(err, err_len, "the profile has no operator times: use --iter-time or --device");
            return SS_ERR_INVALID;
        }
        return SS_OK;
    }
    default:
        ssi_fmt(err, err_len, "unknown time mode %d", tc->mode);
        return SS_ERR_INVALID;
    }
}

/* ---- the byte model ---------------------------------------------------------------------- */

ss_status ssi_sim_other(const ss_profile *p, uint64_t *other) {
    if (!p || (!other && p->nops)) return SS_ERR_INVALID;
    uint32_t n = p->nops;
    if (n == 0) return SS_OK;
    /* known bytes alive after op i: + at producer, - at release (alive after i iff
     * producer <= i < release) */
    int64_t *d = calloc((size_t)n + 1, sizeof *d);
    if (!d) return SS_ERR_HOST_OOM;
    for (uint32_t t = 0; t < p->ntensors; t++) {
        const ss_prof_tensor *x = &p->tensors[t];
        int64_t b = (int64_t)ssi_round_block(x->bytes);
        d[x->producer] += b;
        if (x->release != SS_NONE) d[x->release] -= b;
    }
    int64_t live = 0;
    for (uint32_t i = 0; i < n; i++) {
        live += d[i];
        uint64_t m = p->ops[i].mem_after;
        uint64_t known = p->base_bytes + (uint64_t)live;
        other[i] = m > known ? m - known : 0;
    }
    free(d);
    return SS_OK;
}

static ss_status levels(const ss_profile *p, uint64_t *level, int with_temps);

ss_status ssi_sim_levels(const ss_profile *p, uint64_t *level) { return levels(p, level, 1); }

ss_status ssi_sim_temps(const ss_profile *p, uint64_t *temp) {
    ss_status st = levels(p, temp, 0);
    for (uint32_t i = 0; !st && i < p->nops; i++) {
        uint64_t pk = p->ops[i].mem_peak ? ssi_round_block(p->ops[i].mem_peak) : 0;
        temp[i] = pk > temp[i] ? pk - temp[i] : 0;
    }
    return st;
}

static ss_status levels(const ss_profile *p, uint64_t *level, int with_temps) {
    if (!p || (!level && p->nops)) return SS_ERR_INVALID;
    uint32_t n = p->nops;
    if (n == 0) return SS_OK;
    ss_status st = ssi_sim_other(p, level);
    if (st) return st;
    int64_t *d = calloc((size_t)n + 1, sizeof *d);
    if (!d) return SS_ERR_HOST_OOM;
    for (uint32_t t = 0; t < p->ntensors; t++) {
        const ss_prof_tensor *x = &p->tensors[t];
        int64_t b = (int64_t)ssi_round_block(x->bytes);
        d[x->producer] += b;
        if (x->release != SS_NONE) d[x->release + 1] -= b;
    }
    uint64_t base = p->base_bytes ? ssi_round_block(p->base_bytes) : 0;
    int64_t live = 0;
    uint64_t oprev = 0;
    for (uint32_t i = 0; i < n; i++) {
        live += d[i];
        uint64_t o = level[i] ? ssi_round_block(level[i]) : 0;
        /* unattributed memory during op i: what was alive after op i-1 is still held (its
         * release comes at the end of op i), what op i adds is held too */
        uint64_t held = o > oprev ? o : oprev;
        oprev = o;
        level[i] = base + held + (uint64_t)live;
        uint64_t pk = with_temps && p->ops[i].mem_peak ? ssi_round_block(p->ops[i].mem_peak) : 0;
        if (pk > level[i]) level[i] = pk;
    }
    free(d);
    return SS_OK;
}

/* ---- the full simulation ----------------------------------------------------------------- */

/* Counting-sort buckets: items with key k are idx[off[k] .. off[k+1]). */
typedef struct bucket { uint32_t *off, *idx; } bucket;

static ss_status bucket_build(bucket *b, uint32_t nkeys, uint32_t nitems, const uint32_t *keys) {
    b->off = calloc((size_t)nkeys + 2, sizeof *b->off);
    b->idx = malloc(((size_t)nitems + 1) * sizeof *b->idx);
    if (!b->off || !b->idx) return SS_ERR_HOST_OOM;
    for (uint32_t i = 0; i < nitems; i++)
        if (keys[i] < nkeys) b->off[keys[i] + 1]++;
    for (uint32_t k = 0; k < nkeys; k++) b->off[k + 1] += b->off[k];
    uint32_t *pos = malloc(((size_t)nkeys + 1) * sizeof *pos);
    if (!pos) return SS_ERR_HOST_OOM;
    memcpy(pos, b->off, ((size_t)nkeys + 1) * sizeof *pos);
    for (uint32_t i = 0; i < nitems; i++)
        if (keys[i] < nkeys) b->idx[pos[keys[i]]++] = i;
    free(pos);
    return SS_OK;
}

static void bucket_free(bucket *b) { free(b->off); free(b->idx); }

/* Checks that plan fits p; fills ent_of[t] (entry index or SS_NONE). */
static ss_status validate_plan(const ss_profile *p, const ss_plan *plan, uint32_t *ent_of,
                               char *err, size_t err_len) {
    for (uint32_t t = 0; t < p->ntensors; t++) ent_of[t] = SS_NONE;
    if (!plan) return SS_OK;
    if (plan->nops != p->nops) {
        ssi_fmt(err, err_len, "the plan is for %u operators but the profile has %u", plan->nops, p->nops);
        return SS_ERR_INVALID;
    }
    for (uint32_t k = 0; k < plan->nentries; k++) {
        const ss_plan_entry *e = &plan->entries[k];
        if (e->tensor >= p->ntensors) {
            ssi_fmt(err, err_len, "entry %u: tensor %u but the profile has %u", k, e->tensor, p->ntensors);
            return SS_ERR_INVALID;
        }
        const ss_prof_tensor *x = &p->tensors[e->tensor];
        if (x->bytes != e->bytes) {
            ssi_fmt(err, err_len, "entry %u: %" PRIu64 " bytes but tensor %u has %" PRIu64, k,
                    e->bytes, e->tensor, x->bytes);
            return SS_ERR_INVALID;
        }
        if (ent_of[e->tensor] != SS_NONE) {
            ssi_fmt(err, err_len, "entry %u: tensor %u is already swapped by entry %u", k,
                    e->tensor, ent_of[e->tensor]);
            return SS_ERR_INVALID;
        }
        if (!(e->out_op < e->free_op && e->free_op <= e->in_op && e->in_op <= e->use_op &&
              e->use_op < p->nops) || e->out_op < x->producer) {
            ssi_fmt(err, err_len, "entry %u: points out %u, free %u, in %u, use %u out of order "
                    "(producer %u)", k, e->out_op, e->free_op, e->in_op, e->use_op, x->producer);
            return SS_ERR_INVALID;
        }
        /* use_op must be the first use after out_op */
        const uint32_t *u = p->uses + x->use_off;
        uint32_t lo = 0, hi = x->nuses;
        while (lo < hi) { uint32_t m = (lo + hi) / 2; if (u[m] <= e->out_op) lo = m + 1; else hi = m; }
        if (lo >= x->nuses || u[lo] != e->use_op) {
            ssi_fmt(err, err_len, "entry %u: tensor %u is used at op %u, before its swap-in at "
                    "use op %u (or use op %u is not a use)", k, e->tensor,
                    lo < x->nuses ? u[lo] : e->use_op, e->use_op, e->use_op);
            return SS_ERR_INVALID;
        }
        ent_of[e->tensor] = k;
    }
    return SS_OK;
}

void ssi_sim_result_free(ssi_sim_result *r) {
    if (!r) return;
    free(r->layers);
    free(r->op_start);
    free(r->op_mem);
    free(r->t_out_done);
    free(r->t_in_done);
    free(r->t_use);
    memset(r, 0, sizeof *r);
}

typedef struct simst {
    ss_alloc_t *a;
    uint64_t budget;        /* the allocator's budget (0 = none) */
    uint64_t cur, overflow; /* bytes in use (incl. refused), refused part */
    uint64_t overflow_peak;
    int      oom;
    uint32_t oom_op;
    uint32_t op;
} simst;

/* Allocates n bytes; a refusal under the budget is counted (not an error). *b stays NULL then.
 * Returns non-OK only for failures other than the budget. */
static ss_status sim_alloc_tagged(simst *s, uint64_t n, ss_lifetime lt, ss_block_t **b,
                                  uint64_t *held) {
    uint64_t r = ssi_round_block(n);
    *b = NULL;
    *held = r;
    s->cur += r;
    if (s->budget && r > s->budget) {   /* above the whole budget: no need to ask */
        s->overflow += r;
    } else {
        ss_status st = ss_alloc_malloc_tagged(s->a, (size_t)n, lt, b);
        if (st == SS_ERR_OOM) { *b = NULL; s->overflow += r; }
        else if (st != SS_OK) { s->cur -= r; return st; }
    }
    if (!*b) {
        if (!s->oom) { s->oom = 1; s->oom_op = s->op; }
        if (s->overflow > s->overflow_peak) s->overflow_peak = s->overflow;
    }
    return SS_OK;
}

static ss_status sim_alloc(simst *s, uint64_t n, ss_block_t **b, uint64_t *held) {
    return sim_alloc_tagged(s, n, SS_LIFETIME_ITERATION, b, held);
}

static ss_status sim_free(simst *s, ss_block_t *b, uint64_t held) {
    s->cur -= held;
    if (!b) { s->overflow -= held; return SS_OK; }
    return ss_alloc_free(s->a, b);
}

/* ssi_sim_run of a plan with recompute entries: its swap entries simulated on the profile as the
 * run has it (ssi_rebuild_of_plan); per-entry results in the plan's numbering (recompute
 * entries: 0). */
static ss_status sim_rebuilt(const ss_profile *p, const ss_plan *plan, const ssi_sim_config *c,
                             ssi_sim_result *r, char *err, size_t err_len) {
    uint32_t ne = plan->nentries, m = 0;
    uint32_t *map = malloc(((size_t)ne + 1) * sizeof *map);
    ss_plan_entry *ent = malloc(((size_t)ne + 1) * sizeof *ent);
    ss_profile *q = NULL;
    ss_status st = SS_OK;
    if (!map || !ent) { st = SS_ERR_HOST_OOM; goto out; }
    if ((st = ssi_rebuild_of_plan(p, plan, &q, ent, map, &m, err, err_len))) goto out;
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
    free(map);
    free(ent);
    return st;
}

ss_status ssi_sim_run(const ss_profile *p, const ss_plan *plan, const ssi_sim_config *c,
                      ssi_sim_result *r, char *err, size_t err_len) {
    if (!p || !c || !r) return SS_ERR_INVALID;
    if (err && err_len) err[0] = 0;
    if (!(c->d2h_bps > 0) || !(c->h2d_bps > 0)) {
        ssi_fmt(err, err_len, "copy bandwidths must be > 0 (d2h %g, h2d %g B/s)", c->d2h_bps, c->h2d_bps);
        return SS_ERR_INVALID;
    }
    memset(r, 0, sizeof *r);
    if (ssi_plan_has_recompute(plan)) return sim_rebuilt(p, plan, c, r, err, err_len);
    uint32_t n = p->nops, nt = p->ntensors, ne = plan ? plan->nentries : 0;
    uint32_t L = ssi_layers_for(p, c->time.layers);
    ss_status st = SS_OK;
    double *dur = malloc(((size_t)n + 1) * sizeof *dur);
    uint64_t *other = malloc(((size_t)n + 1) * sizeof *other);
    uint64_t *temp = malloc(((size_t)n + 1) * sizeof *temp);
    uint32_t *ent_of = malloc(((size_t)nt + 1) * sizeof *ent_of);
    uint32_t *keys = calloc((size_t)(nt > ne ? nt : ne) + 1, sizeof *keys);
    ss_block_t **blk = calloc((size_t)nt + 1, sizeof *blk);
    uint64_t *held = calloc((size_t)nt + 1, sizeof *held);
    uint64_t *pend = calloc((size_t)ne + 1, sizeof *pend);       /* bytes pending per entry */
    uint8_t *pref = calloc((size_t)ne + 1, 1);                    /* ... of a refused block */
    ss_block_t **oblk = calloc((size_t)n + 1, sizeof *oblk);      /* unattributed: a stack */
    uint64_t *ohld = calloc((size_t)n + 1, sizeof *ohld);
    uint32_t onum = 0;
    ss_block_t **pblk = NULL;                                     /* persistent tensors */
    bucket prod = {0}, rel = {0}, bin = {0}, buse = {0}, bout = {0}, bfree = {0};
    r->layers = calloc(L, sizeof *r->layers);
    r->t_out_done = calloc((size_t)ne + 1, sizeof(double));
    r->t_in_done = calloc((size_t)ne + 1, sizeof(double));
    r->t_use = calloc((size_t)ne + 1, sizeof(double));
    if (c->record_ops) {
        r->op_start = calloc((size_t)n + 1, sizeof *r->op_start);
        r->op_mem = calloc((size_t)n + 1, sizeof *r->op_mem);
    }
    simst s = {0};
    if (!dur || !other || !temp || !ent_of || !keys || !blk || !held || !pend || !pref || !oblk || !ohld ||
        !r->layers ||
        !r->t_out_done || !r->t_in_done || !r->t_use ||
        (c->record_ops && (!r->op_start || !r->op_mem))) {
        st = SS_ERR_HOST_OOM;
        goto out;
    }
    r->nlayers = L;
    r->nops = n;
    r->nentries = ne;
    if ((st = validate_plan(p, plan, ent_of, err, err_len))) goto out;
    if ((st = ssi_sim_op_times(p, &c->time, dur, err, err_len))) goto out;
    if ((st = ssi_sim_other(p, other))) goto out;
    if ((st = ssi_sim_temps(p, temp))) goto out;
    /* buckets */
    for (uint32_t t = 0; t < nt; t++) keys[t] = p->tensors[t].producer;
    if ((st = bucket_build(&prod, n, nt, keys))) goto out;
    for (uint32_t t = 0; t < nt; t++) keys[t] = p->tensors[t].release;   /* SS_NONE: never */
    if ((st = bucket_build(&rel, n, nt, keys))) goto out;
    for (uint32_t k = 0; k < ne; k++) keys[k] = plan->entries[k].in_op;
    if ((st = bucket_build(&bin, n, ne, keys))) goto out;
    for (uint32_t k = 0; k < ne; k++) keys[k] = plan->entries[k].use_op;
    if ((st = bucket_build(&buse, n, ne, keys))) goto out;
    for (uint32_t k = 0; k < ne; k++) keys[k] = plan->entries[k].out_op;
    if ((st = bucket_build(&bout, n, ne, keys))) goto out;
    for (uint32_t k = 0; k < ne; k++) keys[k] = plan->entries[k].free_op;
    if ((st = bucket_build(&bfree, n, ne, keys))) goto out;

    ss_alloc_config ac = ss_alloc_config_default();
    ac.budget_bytes = c->budget_bytes && c->budget_bytes < SS_ALLOC_ALIGN ? SS_ALLOC_ALIGN
                                                                          : c->budget_bytes;
    if (c->segment_bytes) ac.segment_bytes = c->segment_bytes;
    ac.granule_bytes = c->granule_bytes;
    ac.release_mode = SS_RELEASE_MODE_PREDICTED;
    if ((st = ss_alloc_new(NULL, &ac, &s.a))) {
        ssi_fmt(err, err_len, "the allocator refused the configuration (budget %" PRIu64 ")",
                c->budget_bytes);
        goto out;
    }
    s.budget = c->budget_bytes ? c->budget_bytes - c->budget_bytes % SS_ALLOC_ALIGN : 0;
    if (c->budget_bytes && s.budget == 0) s.budget = 1;   /* below one granule: refuse all */

    double t = 0, d2h_free = 0, h2d_free = 0, lat = c->copy_latency_s > 0 ? c->copy_latency_s : 0;
    uint64_t host = 0, peak = 0;
    ss_block_t *base_blk = NULL;
    uint64_t base_held = 0, other_held = 0;
    s.op = 0;
    /* the model's own state: its tensors one by one when the caller knows them (the real
     * allocator's layout), what base_bytes holds beyond them as one block; all persistent */
    uint64_t psum = 0;
    for (uint32_t q = 0; q < c->npersist; q++) psum += ssi_round_block(c->persist_bytes[q]);
    uint32_t np = c->persist_bytes && psum <= p->base_bytes ? c->npersist : 0;
    if (np && !(pblk = calloc(np, sizeof *pblk))) { st = SS_ERR_HOST_OOM; goto out; }
    for (uint32_t q = 0; q < np; q++) {
        uint64_t h = 0;
        if (!c->persist_bytes[q]) continue;
        if ((st = sim_alloc_tagged(&s, c->persist_bytes[q], SS_LIFETIME_PERSISTENT, &pblk[q], &h)))
            goto out;
    }
    if (!np) psum = 0;
    if (p->base_bytes > psum &&
        (st = sim_alloc_tagged(&s, p->base_bytes - psum, SS_LIFETIME_PERSISTENT, &base_blk, &base_held)))
        goto out;
    peak = s.cur;
    uint32_t l = 0, next_first = ssi_layer_first(n, L, 1);
    if (L) { r->layers[0].first_op = 0; r->layers[0].t_start = 0; }
    for (uint32_t i = 0; i < n; i++) {
        s.op = i;
        while (i >= next_first && l + 1 < L) {
            l++;
            next_first = ssi_layer_first(n, L, l + 1);
            r->layers[l].first_op = ssi_layer_first(n, L, l);
            r->layers[l].t_start = t;
        }
        ssi_sim_layer *ly = &r->layers[l];
        /* 1. reach i: predicted frees due at i */
        ss_alloc_set_time(s.a, t);
        double wu = 0;
        if ((st = ss_alloc_reach(s.a, i, NULL, &wu))) goto out;
        for (uint32_t q = bfree.off[i]; q < bfree.off[i + 1]; q++) {
            uint32_t k = bfree.idx[q];
            const ss_plan_entry *e = &plan->entries[k];
            if (r->t_out_done[k] > wu) wu = r->t_out_done[k];   /* refused blocks too */
            (void)e;
            s.cur -= pend[k];
            if (pref[k]) s.overflow -= pend[k];
            pend[k] = 0;
        }
        if (wu > t) {
            ly->stall_s += wu - t;
            r->late_frees++;
            t = wu;
        }
        /* 2. unattributed memory: held as a stack of blocks, one per rise (see 5 and 7) */
        uint64_t want = other[i] ? ssi_round_block(other[i]) : 0;
        /* 3. swap-ins issued at i */
        for (uint32_t q = bin.off[i]; q < bin.off[i + 1]; q++) {
            uint32_t k = bin.idx[q];
            const ss_plan_entry *e = &plan->entries[k];
            if ((st = sim_alloc(&s, e->bytes, &blk[e->tensor], &held[e->tensor]))) goto out;
            double start = t;
            if (h2d_free > start) start = h2d_free;
            if (r->t_out_done[k] > start) start = r->t_out_done[k];
            double end = start + (lat + (double)e->bytes / c->h2d_bps);
            r->t_in_done[k] = end;
            h2d_free = end;
            r->h2d_bytes += e->bytes;
            ly->h2d_bytes += e->bytes;
        }
        /* 4. uses of swapped tensors wait for their swap-in */
        for (uint32_t q = buse.off[i]; q < buse.off[i + 1]; q++) {
            uint32_t k = buse.idx[q];
            if (r->t_in_done[k] > t) {
                ly->stall_s += r->t_in_done[k] - t;
                r->late_uses++;
                t = r->t_in_done[k];
            }
        }
        for (uint32_t q = buse.off[i]; q < buse.off[i + 1]; q++) {
            uint32_t k = buse.idx[q];
            r->t_use[k] = t;
            if (t < r->t_in_done[k]) r->early_uses++;
            host -= plan->entries[k].bytes;
        }
        /* 5. outputs */
        for (uint32_t q = prod.off[i]; q < prod.off[i + 1]; q++) {
            uint32_t x = prod.idx[q];
            if ((st = sim_alloc(&s, p->tensors[x].bytes, &blk[x], &held[x]))) goto out;
        }
        /* 5b. unattributed memory that op i adds: one more block, after its outputs (the
         * temporaries a real operator allocates beside them) */
        if (want > other_held) {
            if ((st = sim_alloc(&s, want - other_held, &oblk[onum], &ohld[onum]))) goto out;
            other_held += ohld[onum++];
        }
        /* 5c. the temporaries op i allocates and frees while it runs (a measured peak) */
        ss_block_t *tblk = NULL;
        uint64_t thld = 0;
        if (temp[i] && (st = sim_alloc(&s, temp[i], &tblk, &thld))) goto out;
        if (s.cur > peak) peak = s.cur;
        if (s.cur > ly->peak_bytes) ly->peak_bytes = s.cur;
        if (c->record_ops) { r->op_start[i] = t; r->op_mem[i] = s.cur; }
        if (thld && (st = sim_free(&s, tblk, thld))) goto out;
        /* 6. run */
        t += dur[i];
        r->compute_s += dur[i];
        ly->nops++;
        ly->t_end = t;
        /* 7. releases */
        for (uint32_t q = rel.off[i]; q < rel.off[i + 1]; q++) {
            uint32_t x = rel.idx[q];
            if (held[x]) {
                if ((st = sim_free(&s, blk[x], held[x]))) goto out;
                blk[x] = NULL;
                held[x] = 0;
            }
        }
        /* 7b. unattributed memory that op i drops: the newest blocks go first (what is left
         * above want is allocated again) */
        while (other_held > want) {
            onum--;
            other_held -= ohld[onum];
            if ((st = sim_free(&s, oblk[onum], ohld[onum]))) goto out;
            oblk[onum] = NULL;
            ohld[onum] = 0;
        }
        if (want > other_held) {
            if ((st = sim_alloc(&s, want - other_held, &oblk[onum], &ohld[onum]))) goto out;
            other_held += ohld[onum++];
        }
        /* 8. swap-outs issued after i */
        for (uint32_t q = bout.off[i]; q < bout.off[i + 1]; q++) {
            uint32_t k = bout.idx[q];
            const ss_plan_entry *e = &plan->entries[k];
            double start = t > d2h_free ? t : d2h_free;
            double end = start + (lat + (double)e->bytes / c->d2h_bps);
            r->t_out_done[k] = end;
            d2h_free = end;
            r->d2h_bytes += e->bytes;
            ly->d2h_bytes += e->bytes;
            host += e->bytes;
            if (host > r->host_bytes) r->host_bytes = host;
            uint32_t x = e->tensor;
            pend[k] = held[x];
            pref[k] = blk[x] == NULL;
            if (blk[x]) {
                if ((st = ss_alloc_free_at(s.a, blk[x], e->free_op, NULL, end))) goto out;
            }   /* a refused block: nothing to hand back; its bytes stay counted until free_op */
            blk[x] = NULL;
            held[x] = 0;
        }
    }
    r->iter_s = t;
    r->stall_s = t - r->compute_s;
    if (r->stall_s < 0) r->stall_s = 0;
    r->peak_bytes = peak;
    r->oom = s.oom;
    r->oom_op = s.oom_op;
    r->oom_bytes = s.overflow_peak;
    r->host_over = c->host_mem_bytes && r->host_bytes > c->host_mem_bytes;
    ss_alloc_get_stats(s.a, &r->alloc);
    r->peak_reserved_bytes = r->alloc.peak_reserved_bytes;
    /* hand everything back so that the allocator is destroyed clean */
    if (base_blk) ss_alloc_free(s.a, base_blk);
    for (uint32_t q = 0; pblk && q < np; q++)
        if (pblk[q]) ss_alloc_free(s.a, pblk[q]);
    for (uint32_t q = 0; q < onum; q++)
        if (oblk[q]) ss_alloc_free(s.a, oblk[q]);
    for (uint32_t x = 0; x < nt; x++)
        if (blk[x]) { ss_alloc_free(s.a, blk[x]); blk[x] = NULL; }
    ss_alloc_reach(s.a, UINT64_MAX, NULL, NULL);
    if (ss_alloc_destroy(s.a) == SS_OK) s.a = NULL;
out:
    if (s.a) ss_alloc_destroy_force(s.a);
    free(dur); free(other); free(temp); free(ent_of); free(keys); free(blk); free(held); free(pend); free(pref);
    free(oblk); free(ohld); free(pblk);
    bucket_free(&prod); bucket_free(&rel); bucket_free(&bin); bucket_free(&buse);
    bucket_free(&bout); bucket_free(&bfree);
    if (st) ssi_sim_result_free(r);
    return st;
}

/* ---- segment tree ------------------------------------------------------------------------ */

struct ssi_simx {
    uint32_t n;
    int64_t *mx, *lz;   /* mx[v] = max of v's range counting lz on v and below, not above */
};

static void simx_build(ssi_simx *x, uint32_t v, uint32_t l, uint32_t r, const uint64_t *init) {
    if (r - l == 1) { x->mx[v] = init ? (int64_t)init[l] : 0; return; }
    uint32_t m = l + (r - l) / 2;
    simx_build(x, 2 * v, l, m, init);
    simx_build(x, 2 * v + 1, m, r, init);
    x->mx[v] = x->mx[2 * v] > x->mx[2 * v + 1] ? x->mx[2 * v] : x->mx[2 * v + 1];
}

ss_status ssi_simx_new(uint32_t n, const uint64_t *init, ssi_simx **out) {
    if (!out) return SS_ERR_INVALID;
    ssi_simx *x = calloc(1, sizeof *x);
    if (!x) return SS_ERR_HOST_OOM;
    x->n = n;
    size_t sz = 4 * (size_t)(n ? n : 1);
    x->mx = calloc(sz, sizeof *x->mx);
    x->lz = calloc(sz, sizeof *x->lz);
    if (!x->mx || !x->lz) { ssi_simx_free(x); return SS_ERR_HOST_OOM; }
    if (n) simx_build(x, 1, 0, n, init);
    *out = x;
    return SS_OK;
}

void ssi_simx_free(ssi_simx *x) {
    if (!x) return;
    free(x->mx);
    free(x->lz);
    free(x);
}

static void simx_add(ssi_simx *x, uint32_t v, uint32_t l, uint32_t r, uint32_t lo, uint32_t hi,
                     int64_t d) {
    if (hi <= l || r <= lo) return;
    if (lo <= l && r <= hi) { x->mx[v] += d; x->lz[v] += d; return; }
    uint32_t m = l + (r - l) / 2;
    simx_add(x, 2 * v, l, m, lo, hi, d);
    simx_add(x, 2 * v + 1, m, r, lo, hi, d);
    int64_t a = x->mx[2 * v], b = x->mx[2 * v + 1];
    x->mx[v] = (a > b ? a : b) + x->lz[v];
}

void ssi_simx_add(ssi_simx *x, uint32_t lo, uint32_t hi, int64_t d) {
    if (!x || lo >= hi || d == 0) return;
    if (hi > x->n) hi = x->n;
    if (lo < hi) simx_add(x, 1, 0, x->n, lo, hi, d);
}

static int64_t simx_max(const ssi_simx *x, uint32_t v, uint32_t l, uint32_t r, uint32_t lo,
                        uint32_t hi) {
    if (hi <= l || r <= lo) return INT64_MIN;
    if (lo <= l && r <= hi) return x->mx[v];
    uint32_t m = l + (r - l) / 2;
    int64_t a = simx_max(x, 2 * v, l, m, lo, hi), b = simx_max(x, 2 * v + 1, m, r, lo, hi);
    int64_t mm = a > b ? a : b;
    return mm == INT64_MIN ? mm : mm + x->lz[v];
}

int64_t ssi_simx_max(ssi_simx *x, uint32_t lo, uint32_t hi) {
    if (!x) return INT64_MIN;
    if (hi > x->n) hi = x->n;
    if (lo >= hi) return INT64_MIN;
    return simx_max(x, 1, 0, x->n, lo, hi);
}

/* limit is relative to v's own values (ancestors' lz subtracted by the caller). */
static uint32_t simx_first(const ssi_simx *x, uint32_t v, uint32_t l, uint32_t r, uint32_t lo,
                           uint32_t hi, int64_t limit) {
    if (hi <= l || r <= lo || x->mx[v] <= limit) return SS_NONE;
    if (r - l == 1) return l;
    uint32_t m = l + (r - l) / 2;
    int64_t lim = limit - x->lz[v];
    uint32_t k = simx_first(x, 2 * v, l, m, lo, hi, lim);
    return k != SS_NONE ? k : simx_first(x, 2 * v + 1, m, r, lo, hi, lim);
}

static uint32_t simx_last(const ssi_simx *x, uint32_t v, uint32_t l, uint32_t r, uint32_t lo,
                          uint32_t hi, int64_t limit) {
    if (hi <= l || r <= lo || x->mx[v] <= limit) return SS_NONE;
    if (r - l == 1) return l;
    uint32_t m = l + (r - l) / 2;
    int64_t lim = limit - x->lz[v];
    uint32_t k = simx_last(x, 2 * v + 1, m, r, lo, hi, lim);
    return k != SS_NONE ? k : simx_last(x, 2 * v, l, m, lo, hi, lim);
}

uint32_t ssi_simx_first_above(ssi_simx *x, uint32_t lo, uint32_t hi, int64_t limit) {
    if (!x) return SS_NONE;
    if (hi > x->n) hi = x->n;
    if (lo >= hi) return SS_NONE;
    return simx_first(x, 1, 0, x->n, lo, hi, limit);
}

uint32_t ssi_simx_last_above(ssi_simx *x, uint32_t lo, uint32_t hi, int64_t limit) {
    if (!x) return SS_NONE;
    if (hi > x->n) hi = x->n;
    if (lo >= hi) return SS_NONE;
    return simx_last(x, 1, 0, x->n, lo, hi, limit);
}

/* ---- fluid copy stream ------------------------------------------------------------------- */

struct ssi_fluid {
    uint32_t n;
    double  *cap;     /* idle seconds left in slot i */
    uint32_t *nx;     /* union-find: next slot >= i with time left (n: none) */
    uint32_t *pv;     /* pv[i+1]: previous slot <= i with time left, +1 (0: none) */
};

ss_status ssi_fluid_new(uint32_t n, const double *dur, ssi_fluid **out) {
    if (!out || (!dur && n)) return SS_ERR_INVALID;
    ssi_fluid *f = calloc(1, sizeof *f);
    if (!f) return SS_ERR_HOST_OOM;
    f->n = n;
    f->cap = malloc(((size_t)n + 1) * sizeof *f->cap);
    f->nx = malloc(((size_t)n + 1) * sizeof *f->nx);
    f->pv = malloc(((size_t)n + 1) * sizeof *f->pv);
    if (!f->cap || !f->nx || !f->pv) { ssi_fluid_free(f); return SS_ERR_HOST_OOM; }
    for (uint32_t i = 0; i < n; i++) {
        f->cap[i] = dur[i] > 0 ? dur[i] : 0;
        f->nx[i] = f->cap[i] > 0 ? i : i + 1;
        f->pv[i + 1] = f->cap[i] > 0 ? i + 1 : i;
    }
    f->nx[n] = n;
    f->pv[0] = 0;
    *out = f;
    return SS_OK;
}

void ssi_fluid_free(ssi_fluid *f) {
    if (!f) return;
    free(f->cap);
    free(f->nx);
    free(f->pv);
    free(f);
}

static uint32_t fl_next(ssi_fluid *f, uint32_t i) {
    uint32_t r = i;
    while (f->nx[r] != r) r = f->nx[r];
    while (f->nx[i] != r) { uint32_t k = f->nx[i]; f->nx[i] = r; i = k; }
    return r;
}

/* k = slot + 1 (0: none); returns the previous-with-time index + 1 */
static uint32_t fl_prev(ssi_fluid *f, uint32_t k) {
    uint32_t r = k;
    while (f->pv[r] != r) r = f->pv[r];
    while (f->pv[k] != r) { uint32_t q = f->pv[k]; f->pv[k] = r; k = q; }
    return r;
}

static void fl_take(ssi_fluid *f, uint32_t i, double take) {
    f->cap[i] -= take;
    if (f->cap[i] <= 1e-15) {
        f->cap[i] = 0;
        f->nx[i] = i + 1;
        f->pv[i + 1] = i;
    }
}

uint32_t ssi_fluid_forward(ssi_fluid *f, uint32_t from, uint32_t limit, double need, int commit) {
    if (!f || from >= f->n) return SS_NONE;
    if (limit > f->n) limit = f->n;
    if (from >= limit) return SS_NONE;
    if (!(need > 0)) return from;
    double rem = need, eps = need * 1e-12;
    for (uint32_t i = fl_next(f, from); i < limit; i = fl_next(f, i + 1)) {
        double take = f->cap[i] < rem ? f->cap[i] : rem;
        rem -= take;
        if (commit) fl_take(f, i, take);
        if (rem <= eps) return i;
    }
    if (commit) SS_ASSERT(!"ssi_fluid_forward: commit of a copy that does not fit");
    return SS_NONE;
}

uint32_t ssi_fluid_backward(ssi_fluid *f, uint32_t end, uint32_t floor, double need, int commit) {
    if (!f || end == 0) return SS_NONE;
    if (end > f->n) end = f->n;
    if (floor >= end) return SS_NONE;
    if (!(need > 0)) return end - 1;
    double rem = need, eps = need * 1e-12;
    for (uint32_t k = fl_prev(f, end); k > floor; k = fl_prev(f, k - 1)) {
        uint32_t i = k - 1;
        double take = f->cap[i] < rem ? f->cap[i] : rem;
        rem -= take;
        if (commit) fl_take(f, i, take);
        if (rem <= eps) return i;
    }
    if (commit) SS_ASSERT(!"ssi_fluid_backward: commit of a copy that does not fit");
    return SS_NONE;
}
