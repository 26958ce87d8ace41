/* strategy.c: the four strategies of strategy.h on a generated iteration, and the sweep.
 * docs/simulate.md explains each cost model with the figures it uses.
 *
 * Every figure comes from one simulator run (sim.c, allocator in measure mode, compute stream
 * plus a D2H and an H2D copy stream) with per-operator times from the generator (MEASURED mode:
 * max(FLOPs / flops_per_s, bytes touched / mem_bps) + 2 us, workload.c):
 *   NONE       the profile, no plan;
 *   RECOMPUTE  the rewritten profile of ssi_strategy_recompute_profile, no plan;
 *   OFFLOAD    the profile with ssi_strategy_offload_plan;
 *   SMARTSWAP  the profile with ssi_policy_plan's plan (same budget, host cap and time model);
 *   HYBRID     the profile with ssi_recompute_plan's plan (swap or recompute; the simulator
 *              replays its recompute entries on the derived profile, rebuild.h).
 */
#include "strategy.h"
#include "recompute.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <strings.h>
#include <time.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static const char *const names[SSI_STRAT_COUNT] = {"none", "recompute", "offload", "smartswap", "hybrid"};
static const char *const titles[SSI_STRAT_COUNT] = {"no saving", "full recompute", "offload (save_on_cpu)",
                                                     "smartswap swap-only", "smartswap hybrid"};

const char *ssi_strategy_name(int kind) { return kind >= 0 && kind < SSI_STRAT_COUNT ? names[kind] : "?"; }
const char *ssi_strategy_title(int kind) { return kind >= 0 && kind < SSI_STRAT_COUNT ? titles[kind] : "?"; }

/* Datasheet HBM bandwidths (TB/s): H200 SXM 4.8 (NVIDIA H200 datasheet), H100 SXM5 3.35 (H100
 * datasheet), A100 80GB SXM 2.039 and 40GB 1.555 (A100 datasheet), GH200 96GB HBM3 4.0 (GH200
 * datasheet). Memory-bound kernels reach about 60-65 % of it; SSI_STRATEGY_MEM_EFF = 0.625 gives
 * the H200 the generator's default of 3 TB/s. */
double ssi_strategy_mem_bps(const char *preset_name) {
    static const struct { const char *name; double tbps; } hbm[] = {
        {"h200", 4.8}, {"h100", 3.35}, {"a100-80g", 2.039}, {"a100-40g", 1.555}, {"gh200", 4.0}};
    for (size_t i = 0; preset_name && i < sizeof hbm / sizeof hbm[0]; i++)
        if (!strcasecmp(hbm[i].name, preset_name)) return hbm[i].tbps * 1e12 * SSI_STRATEGY_MEM_EFF;
    return 3e12;
}

void ssi_strategy_env_from_preset(const ssi_device_preset *d, ssi_strategy_env *env) {
    memset(env, 0, sizeof *env);
    env->device_bytes = d->mem_bytes;
    env->budget_bytes = d->mem_bytes;
    env->host_cap_bytes = d->host_mem_bytes;
    env->d2h_bps = d->d2h_gbps * 1e9;
    env->h2d_bps = d->h2d_gbps * 1e9;
    env->flops_per_s = d->bf16_flops * SS_PRESET_MFU;
    env->mem_bps = ssi_strategy_mem_bps(d->name);
}

void ssi_strategy_result_free(ssi_strategy_result *r) {
    if (!r) return;
    free(r->t);
    free(r->mem);
    r->t = NULL;
    r->mem = NULL;
    r->npoints = 0;
}

/* ---- intervals ---------------------------------------------------------------------------- */

/* The idle interval of saved tensor t as the policy sees it: a = its last forward access
 * (producer or use), b = the use after it. 0 when there is none or b is not a backward use. */
static int backward_interval(const ss_profile *p, uint32_t t, uint32_t *a, uint32_t *b) {
    const ss_prof_tensor *x = &p->tensors[t];
    const uint32_t *u = p->uses + x->use_off;
    int found = 0;
    for (uint32_t k = 0; k < x->nuses; k++) {
        uint32_t acc = k == 0 ? x->producer : u[k - 1];
        if (p->ops[acc].phase == SS_PHASE_FWD) { *a = acc; *b = u[k]; found = 1; }
    }
    return found && p->ops[*b].phase == SS_PHASE_BWD;
}

/* ---- full recomputation ------------------------------------------------------------------- */

/* The transformer layer of each op, from the layers of the saved tensors it uses (the smallest
 * one >= 0; -1 when it uses only saved tensors outside the layers); an op that uses no saved
 * tensor belongs with the op before it. */
static ss_status op_layers(const ss_profile *p, const ssi_workload_info *info, int32_t *ol) {
    uint32_t n = p->nops;
    int32_t *mn = malloc(((size_t)n + 1) * sizeof *mn);
    uint8_t *has = calloc((size_t)n + 1, 1);
    if (!mn || !has) { free(mn); free(has); return SS_ERR_HOST_OOM; }
    for (uint32_t i = 0; i < n; i++) mn[i] = INT32_MAX;
    for (uint32_t t = 0; t < p->ntensors; t++) {
        const ss_prof_tensor *x = &p->tensors[t];
        if (!(x->flags & SS_TENSOR_SAVED)) continue;
        for (uint32_t k = 0; k < x->nuses; k++) {
            uint32_t u = p->uses[x->use_off + k];
            has[u] = 1;
            if (info->layer[t] >= 0 && info->layer[t] < mn[u]) mn[u] = info->layer[t];
        }
    }
    int32_t prev = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (has[i]) prev = mn[i] == INT32_MAX ? -1 : mn[i];
        ol[i] = prev;
    }
    free(mn);
    free(has);
    return SS_OK;
}

ss_status ssi_strategy_recompute_profile(const ss_profile *p, const ssi_workload_info *info,
                                         ss_profile **out, double *extra_s, double *extra_flops,
                                         char *err, size_t err_len) {
    if (!p || !info || !out || !info->layer || info->ntensors != p->ntensors) {
        ssi_fmt(err, err_len, "recompute: a generated profile and its workload info are needed");
        return SS_ERR_INVALID;
    }
    uint32_t n = p->nops, nt = p->ntensors;
    ss_status st = SS_OK;
    int32_t *ol = malloc(((size_t)n + 1) * sizeof *ol);
    uint32_t *newidx = malloc(((size_t)n + 1) * sizeof *newidx);
    uint32_t *cl = malloc(((size_t)n + 1) * sizeof *cl);
    uint64_t *other = calloc((size_t)n + 1, sizeof *other);
    ss_profile *q = NULL;
    /* per layer: forward range [f0, f1), backward range [b0, b1) */
    uint32_t L = 0;
    uint32_t *rng = NULL;
    if (!ol || !newidx || !cl || !other) { st = SS_ERR_HOST_OOM; goto out; }
    if ((st = op_layers(p, info, ol)) || (st = ssi_sim_other(p, other))) goto out;
    for (uint32_t i = 0; i < n; i++)
        if (ol[i] >= 0 && (uint32_t)ol[i] + 1 > L) L = (uint32_t)ol[i] + 1;
    if (L == 0) {
        ssi_fmt(err, err_len, "recompute: the profile has no transformer layers");
        st = SS_ERR_INVALID;
        goto out;
    }
    rng = malloc((size_t)L * 4 * sizeof *rng);
    if (!rng) { st = SS_ERR_HOST_OOM; goto out; }
    for (uint32_t l = 0; l < L * 4; l++) rng[l] = SS_NONE;
    for (uint32_t i = 0; i < n; i++) {
        if (ol[i] < 0) continue;
        uint32_t ph = p->ops[i].phase;
        if (ph != SS_PHASE_FWD && ph != SS_PHASE_BWD) continue;
        uint32_t *r = rng + (size_t)ol[i] * 4 + (ph == SS_PHASE_FWD ? 0 : 2);
        if (r[0] == SS_NONE) { r[0] = i; r[1] = i + 1; }
        else if (r[1] == i) r[1] = i + 1;
        else {
            ssi_fmt(err, err_len, "recompute: the %s operators of layer %d are not contiguous (op %u)",
                    ph == SS_PHASE_FWD ? "forward" : "backward", ol[i], i);
            st = SS_ERR_INVALID;
            goto out;
        }
    }
    for (uint32_t l = 0; l < L; l++)
        if (rng[l * 4] == SS_NONE || rng[l * 4 + 2] == SS_NONE || rng[l * 4 + 2] < rng[l * 4 + 1]) {
            ssi_fmt(err, err_len, "recompute: layer %u lacks a forward or a backward part", l);
            st = SS_ERR_INVALID;
            goto out;
        }
    /* the new sequence: layer l's forward operators again right before its backward */
    uint32_t *starts = malloc(((size_t)n + 1) * sizeof *starts);   /* op i: the layer whose backward starts at i */
    if (!starts) { st = SS_ERR_HOST_OOM; goto out; }
    for (uint32_t i = 0; i < n; i++) { starts[i] = SS_NONE; cl[i] = SS_NONE; }
    for (uint32_t l = 0; l < L; l++) starts[rng[l * 4 + 2]] = l;
    uint32_t m = 0;
    double xs = 0, xf = 0;
    if ((st = ssi_profile_new(&q))) { free(starts); goto out; }
    for (uint32_t k = 0; k < p->nnames && !st; k++) {
        uint32_t id;
        st = ssi_profile_intern(q, p->names[k], &id);
    }
    for (uint32_t i = 0; i < n && !st; i++) {
        if (starts[i] != SS_NONE) {
            uint32_t l = starts[i];
            for (uint32_t j = rng[l * 4]; j < rng[l * 4 + 1] && !st; j++) {
                ss_prof_op o = p->ops[j];
                o.phase = SS_PHASE_BWD;
                o.mem_after = 0;
                st = ssi_profile_add_op(q, &o, &cl[j]);
                xs += o.seconds;
                xf += o.flops;
                m++;
            }
        }
        if (st) break;
        ss_prof_op o = p->ops[i];
        o.mem_after = 0;
        st = ssi_profile_add_op(q, &o, &newidx[i]);
        m++;
    }
    free(starts);
    if (st) goto out;
    /* tensors */
    for (uint32_t t = 0; t < nt && !st; t++) {
        const ss_prof_tensor *x = &p->tensors[t];
        const uint32_t *u = p->uses + x->use_off;
        int32_t lp = ol[x->producer];
        int redo = p->ops[x->producer].phase == SS_PHASE_FWD && lp >= 0 && info->layer[t] == lp;
        ss_prof_tensor y = *x;
        uint32_t id;
        y.producer = newidx[x->producer];
        y.release = y.producer;
        if (redo) {
            /* first pass: forward uses only */
            for (uint32_t k = 0; k < x->nuses; k++)
                if (p->ops[u[k]].phase == SS_PHASE_FWD && newidx[u[k]] > y.release) y.release = newidx[u[k]];
            if ((st = ssi_profile_add_tensor(q, &y, &id))) break;
            for (uint32_t k = 0; k < x->nuses && !st; k++)
                if (p->ops[u[k]].phase == SS_PHASE_FWD) st = ssi_profile_add_use(q, id, newidx[u[k]]);
            /* the rerun: its forward uses in the rerun, its backward uses as before */
            ss_prof_tensor z = *x;
            z.producer = cl[x->producer];
            z.release = z.producer;
            for (uint32_t k = 0; k < x->nuses; k++) {
                uint32_t v = p->ops[u[k]].phase == SS_PHASE_FWD ? cl[u[k]] : newidx[u[k]];
                if (v == SS_NONE) {
                    ssi_fmt(err, err_len, "recompute: tensor %u of layer %d is used by op %u outside "
                            "its layer's forward", t, lp, u[k]);
                    st = SS_ERR_INVALID;
                    break;
                }
                if (v > z.release) z.release = v;
            }
            if (st || (st = ssi_profile_add_tensor(q, &z, &id))) break;
            for (uint32_t k = 0; k < x->nuses && !st; k++)
                st = ssi_profile_add_use(q, id, p->ops[u[k]].phase == SS_PHASE_FWD ? cl[u[k]] : newidx[u[k]]);
        } else {
            /* kept: every use as before, plus the reruns' reads of it (a layer input) */
            for (uint32_t k = 0; k < x->nuses; k++) {
                if (newidx[u[k]] > y.release) y.release = newidx[u[k]];
                if (cl[u[k]] != SS_NONE && cl[u[k]] > y.release) y.release = cl[u[k]];
            }
            if ((st = ssi_profile_add_tensor(q, &y, &id))) break;
            for (uint32_t k = 0; k < x->nuses && !st; k++) {
                st = ssi_profile_add_use(q, id, newidx[u[k]]);
                if (!st && cl[u[k]] != SS_NONE) st = ssi_profile_add_use(q, id, cl[u[k]]);
            }
            /* a layer output re-created by the rerun is dropped at once (nobody reads it) */
            if (!st && cl[x->producer] != SS_NONE) {
                ss_prof_tensor z = *x;
                z.producer = z.release = cl[x->producer];
                z.flags = 0;
                st = ssi_profile_add_tensor(q, &z, &id);
            }
        }
    }
    if (st) goto out;
    /* memory after each op: base + tensors alive after it (+ the source's unattributed bytes) */
    {
        int64_t *d = calloc((size_t)m + 1, sizeof *d);
        if (!d) { st = SS_ERR_HOST_OOM; goto out; }
        for (uint32_t t = 0; t < q->ntensors; t++) {
            d[q->tensors[t].producer] += (int64_t)q->tensors[t].bytes;
            d[q->tensors[t].release] -= (int64_t)q->tensors[t].bytes;
        }
        int64_t cur = 0;
        for (uint32_t j = 0; j < m; j++) {
            cur += d[j];
            q->ops[j].mem_after = p->base_bytes + (uint64_t)cur;
        }
        for (uint32_t i = 0; i < n; i++) q->ops[newidx[i]].mem_after += other[i];
        free(d);
    }
    q->base_bytes = p->base_bytes;
    q->iter_seconds = p->iter_seconds + xs;
    ssi_fmt(q->desc, sizeof q->desc, "recompute: %.140s", p->desc);
    if ((st = ssi_profile_finalize(q))) {
        ssi_fmt(err, err_len, "recompute: the rewritten profile is inconsistent (internal error)");
        goto out;
    }
    q->seq_hash = ssi_profile_running_hashes(q, NULL);
    if (extra_s) *extra_s = xs;
    if (extra_flops) *extra_flops = xf;
    *out = q;
    q = NULL;
out:
    if (st == SS_ERR_HOST_OOM) ssi_fmt(err, err_len, "recompute: out of host memory");
    ssi_profile_free(q);
    free(ol); free(newidx); free(cl); free(other); free(rng);
    return st;
}

/* ---- offload everything (save_on_cpu) ---------------------------------------------------- */

ss_status ssi_strategy_offload_plan(const ss_profile *p, ss_plan **out) {
    if (!p || !out) return SS_ERR_INVALID;
    ss_plan *pl;
    ss_status st = ssi_plan_new(&pl);
    if (st) return st;
    for (uint32_t t = 0; t < p->ntensors && !st; t++) {
        const ss_prof_tensor *x = &p->tensors[t];
        uint32_t a, b;
        if (!(x->flags & SS_TENSOR_SAVED) || !backward_interval(p, t, &a, &b)) continue;
        ss_plan_entry e;
        memset(&e, 0, sizeof e);
        if ((st = ssi_plan_entry_from_tensor(pl, p, t, &e))) break;
        e.tensor = t;
        e.out_op = a;        /* copied out once the forward is done with it */
        e.free_op = a + 1;   /* the next op waits for the copy: a synchronous copy */
        e.in_op = b;         /* no prefetch: copied in when the backward needs it ... */
        e.use_op = b;        /* ... and the op waits for it */
        st = ssi_plan_add_entry(pl, &e);
    }
    if (!st) st = ssi_plan_set_checkpoints(pl, p, 0);
    if (st) { ssi_plan_free(pl); return st; }
    ssi_plan_sort(pl);
    *out = pl;
    return SS_OK;
}

/* ---- evaluation --------------------------------------------------------------------------- */

static ssi_sim_config sim_config(const ssi_strategy_env *env) {
    ssi_sim_config s;
    memset(&s, 0, sizeof s);
    s.budget_bytes = env->budget_bytes ? env->budget_bytes : env->device_bytes;
    s.host_mem_bytes = env->host_cap_bytes;
    s.d2h_bps = env->d2h_bps;
    s.h2d_bps = env->h2d_bps;
    s.copy_latency_s = env->copy_latency_s;
    s.time.mode = SSI_TIME_MEASURED;
    s.record_ops = 1;
    return s;
}

/* Fills r from a simulation sr of a workload of `tokens` tokens; takes the timeline if record. */
static void from_sim(ssi_strategy_result *r, ssi_sim_result *sr, uint64_t budget, uint64_t host_cap,
                     uint64_t tokens, int record) {
    r->evaluated = 1;
    r->tokens = tokens;
    r->peak_bytes = sr->peak_bytes;
    r->host_bytes = sr->host_bytes;
    r->d2h_bytes = sr->d2h_bytes;
    r->h2d_bytes = sr->h2d_bytes;
    r->copies = sr->nentries;
    r->iter_s = sr->iter_s;
    r->compute_s = sr->compute_s;
    r->stall_s = sr->stall_s;
    r->tokens_per_s = sr->iter_s > 0 ? (double)tokens / sr->iter_s : 0;
    r->fits = 1;
    if (sr->peak_bytes > budget) {
        r->fits = 0;
        ssi_fmt(r->why, sizeof r->why, "peak %.2f GiB exceeds the budget %.2f GiB",
                (double)sr->peak_bytes / GIB, (double)budget / GIB);
    } else if (sr->oom) {
        r->fits = 0;
        ssi_fmt(r->why, sizeof r->why, "the allocator could not place a block at op %u within the budget "
                "%.2f GiB (peak %.2f GiB: its segments are fragmented)", sr->oom_op, (double)budget / GIB,
                (double)sr->peak_bytes / GIB);
    } else if (host_cap && sr->host_bytes > host_cap) {
        r->fits = 0;
        ssi_fmt(r->why, sizeof r->why, "host memory %.2f GiB exceeds the cap %.2f GiB",
                (double)sr->host_bytes / GIB, (double)host_cap / GIB);
    }
    if (record) {
        r->npoints = sr->nops;
        r->t = sr->op_start;
        r->mem = sr->op_mem;
        sr->op_start = NULL;
        sr->op_mem = NULL;
    }
}

/* The smartswap pre-check of strategy.h. Returns 1 (with why) when no plan can fit. */
static int smartswap_cannot_fit(const ss_profile *p, uint64_t budget, uint64_t host_cap, uint64_t min_swap,
                                int hybrid, char *why, size_t why_len, ss_status *st) {
    uint32_t n = p->nops;
    *st = SS_OK;
    if (n == 0) return 0;
    uint64_t *lvl = malloc((size_t)n * sizeof *lvl);
    int64_t *d = calloc((size_t)n + 1, sizeof *d);
    int res = 0;
    if (!lvl || !d) { *st = SS_ERR_HOST_OOM; goto out; }
    if ((*st = ssi_sim_levels(p, lvl))) goto out;
    uint64_t peak0 = 0;
    for (uint32_t i = 0; i < n; i++)
        if (lvl[i] > peak0) peak0 = lvl[i];
    if (peak0 <= budget) goto out;
    uint64_t nsw = 0;
    for (uint32_t t = 0; t < p->ntensors; t++) {
        const ss_prof_tensor *x = &p->tensors[t];
        uint32_t a, b;
        if (!(x->flags & SS_TENSOR_SAVED) || (x->flags & SS_TENSOR_NOSWAP) || (!hybrid && x->bytes < min_swap)) continue;
        if (!backward_interval(p, t, &a, &b) || b <= a + 1) continue;
        d[a + 1] -= (int64_t)ssi_round_block(x->bytes);
        d[b] += (int64_t)ssi_round_block(x->bytes);
        nsw++;
    }
    int64_t acc = 0;
    uint64_t tight = 0;
    for (uint32_t i = 0; i < n; i++) {
        acc += d[i];
        uint64_t v = (uint64_t)((int64_t)lvl[i] + acc);
        if (v > tight) tight = v;
    }
    if (tight > budget) {
        ssi_fmt(why, why_len, "even with every saved tensor on the host over its whole idle interval "
                "the peak is %.2f GiB, above the budget %.2f GiB", (double)tight / GIB, (double)budget / GIB);
        res = 1;
    } else if (!hybrid && host_cap && peak0 - budget > host_cap + nsw * SS_ALLOC_ALIGN) {
        ssi_fmt(why, why_len, "needs at least %.2f GiB on the host (peak %.2f GiB minus the budget), "
                "above the host cap %.2f GiB", (double)(peak0 - budget) / GIB, (double)peak0 / GIB,
                (double)host_cap / GIB);
        res = 1;
    }
out:
    free(lvl);
    free(d);
    return res;
}

static ss_status check_env(const ssi_strategy_env *env, char *err, size_t err_len) {
    if (!env || !(env->device_bytes > 0) || !(env->d2h_bps > 0) || !(env->h2d_bps > 0) ||
        !(env->flops_per_s > 0) || !(env->mem_bps > 0) || !isfinite(env->d2h_bps) ||
        !isfinite(env->h2d_bps) || !isfinite(env->flops_per_s) || !isfinite(env->mem_bps) ||
        !(env->copy_latency_s >= 0)) {
        ssi_fmt(err, err_len, "the device needs memory, copy bandwidths, FLOP/s and memory bandwidth > 0");
        return SS_ERR_INVALID;
    }
    return SS_OK;
}

ss_status ssi_strategy_eval(const ssi_workload_config *wc, const ssi_strategy_env *env, unsigned mask,
                            int record, ssi_strategy_result res[SSI_STRAT_COUNT], char *err, size_t err_len) {
    if (!wc || !res) return SS_ERR_INVALID;
    for (int k = 0; k < SSI_STRAT_COUNT; k++) {
        memset(&res[k], 0, sizeof res[k]);
        res[k].kind = k;
    }
    ss_status st = check_env(env, err, err_len);
    if (st) return st;
    ssi_workload_config c = *wc;
    c.device_flops = env->flops_per_s;
    c.device_bw = env->mem_bps;
    ss_profile *p = NULL, *rp = NULL;
    ss_plan *plan = NULL;
    ssi_workload_info info;
    memset(&info, 0, sizeof info);
    if ((st = ssi_workload_generate(&c, &p, &info, err, err_len))) return st;
    uint64_t tokens = (uint64_t)c.batch * c.seq;
    uint64_t budget = env->budget_bytes ? env->budget_bytes : env->device_bytes;
    ssi_sim_config sc = sim_config(env);
    ssi_sim_result sr;
    memset(&sr, 0, sizeof sr);

    if (mask & (1u << SSI_STRAT_NONE)) {
        if ((st = ssi_sim_run(p, NULL, &sc, &sr, err, err_len))) goto out;
        from_sim(&res[SSI_STRAT_NONE], &sr, budget, env->host_cap_bytes, tokens, record);
        ssi_sim_result_free(&sr);
    }
    if (mask & (1u << SSI_STRAT_RECOMPUTE)) {
        double xs = 0, xf = 0;
        if ((st = ssi_strategy_recompute_profile(p, &info, &rp, &xs, &xf, err, err_len))) goto out;
        if ((st = ssi_sim_run(rp, NULL, &sc, &sr, err, err_len))) goto out;
        from_sim(&res[SSI_STRAT_RECOMPUTE], &sr, budget, env->host_cap_bytes, tokens, record);
        res[SSI_STRAT_RECOMPUTE].extra_compute_s = xs;
        res[SSI_STRAT_RECOMPUTE].extra_flops = xf;
        ssi_sim_result_free(&sr);
    }
    if (mask & (1u << SSI_STRAT_OFFLOAD)) {
        if ((st = ssi_strategy_offload_plan(p, &plan))) goto out;
        if ((st = ssi_sim_run(p, plan, &sc, &sr, err, err_len))) goto out;
        from_sim(&res[SSI_STRAT_OFFLOAD], &sr, budget, env->host_cap_bytes, tokens, record);
        ssi_sim_result_free(&sr);
        ssi_plan_free(plan);
        plan = NULL;
    }
    for (int kind = SSI_STRAT_SMARTSWAP; kind <= SSI_STRAT_HYBRID; kind++) {
        if (!(mask & (1u << kind))) continue;
        int hybrid = kind == SSI_STRAT_HYBRID;
        ssi_strategy_result *r = &res[kind];
        ss_options o = ss_options_default();
        char why[200];
        int no = smartswap_cannot_fit(p, budget, env->host_cap_bytes, o.min_swap_bytes, hybrid, why, sizeof why, &st);
        if (st) goto out;
        if (no) {
            if ((st = ssi_sim_run(p, NULL, &sc, &sr, err, err_len))) goto out;
            from_sim(r, &sr, budget, env->host_cap_bytes, tokens, record);
            r->fits = 0;
            r->prechecked = 1;
            ssi_fmt(r->why, sizeof r->why, "%s", why);
        } else {
            ssi_policy_config pc;
            memset(&pc, 0, sizeof pc);
            pc.budget_bytes = budget;
            pc.host_mem_bytes = env->host_cap_bytes;
            pc.min_swap_bytes = o.min_swap_bytes;
            pc.d2h_bps = env->d2h_bps;
            pc.h2d_bps = env->h2d_bps;
            pc.copy_latency_s = env->copy_latency_s;
            pc.time = sc.time;
            pc.skip_min_budget = 1;   /* simulate never reports it; near a sweep's edge the
                                         search would cost more than the plan itself */
            ssi_policy_report rep;
            ssi_recompute_report hrep;
            memset(&rep, 0, sizeof rep);
            memset(&hrep, 0, sizeof hrep);
            st = hybrid ? ssi_recompute_plan(p, &pc, &plan, &rep, &hrep, err, err_len)
                        : ssi_policy_plan(p, &pc, &plan, &rep, err, err_len);
            if (st) goto out;
            /* a plan with recompute entries is replayed on the derived profile (sim.c) */
            if ((st = ssi_sim_run(p, plan, &sc, &sr, err, err_len))) goto out;
            from_sim(r, &sr, budget, env->host_cap_bytes, tokens, record);
            if (hybrid) {
                r->recomputed = hrep.chosen;
                r->recomputed_bytes = hrep.recompute_bytes;
                r->extra_compute_s = hrep.recompute_s;
                r->copies = sr.nentries >= hrep.chosen ? sr.nentries - hrep.chosen : 0;
            }
            if (!rep.feasible && r->fits) {
                r->fits = 0;
                ssi_fmt(r->why, sizeof r->why, "%s", rep.why[0] ? rep.why : "the planner found no plan that fits");
            } else if (!rep.feasible) {
                ssi_fmt(r->why, sizeof r->why, "%s", rep.why[0] ? rep.why : "the planner found no plan that fits");
            }
            ssi_plan_free(plan);
            plan = NULL;
        }
        ssi_sim_result_free(&sr);
    }
out:
    if (st) for (int k = 0; k < SSI_STRAT_COUNT; k++) ssi_strategy_result_free(&res[k]);
    ssi_sim_result_free(&sr);
    ssi_plan_free(plan);
    ssi_profile_free(rp);
    ssi_profile_free(p);
    ssi_workload_info_free(&info);
    return st;
}

/* ---- the sweep ---------------------------------------------------------------------------- */

static const char *const axis_names[] = {"batch", "seq", "hidden"};

const char *ssi_sweep_axis_name(int axis) { return axis >= 0 && axis <= SSI_SWEEP_HIDDEN ? axis_names[axis] : "?"; }

int ssi_sweep_axis_from_name(const char *name) {
    for (int i = 0; name && i <= SSI_SWEEP_HIDDEN; i++)
        if (!strcmp(name, axis_names[i])) return i;
    return -1;
}

void ssi_sweep_apply(const ssi_workload_config *base, int axis, uint32_t value, ssi_workload_config *out) {
    *out = *base;
    if (axis == SSI_SWEEP_BATCH) out->batch = value;
    else if (axis == SSI_SWEEP_SEQ) out->seq = value;
    else if (axis == SSI_SWEEP_HIDDEN && base->hidden) {
        out->hidden = value;
        double f = floor((double)base->ffn * value / base->hidden + 0.5);
        out->ffn = f < 1 ? 1 : (uint32_t)f;
    }
}

void ssi_sweep_result_free(ssi_sweep_result *r) {
    if (!r) return;
    free(r->values);
    for (int k = 0; k < SSI_STRAT_COUNT; k++) free(r->tps[k]);
    memset(r, 0, sizeof *r);
}

typedef struct sweeper {
    const ssi_workload_config *wc;
    const ssi_strategy_env *env;
    int axis;
    uint32_t step, kmax;      /* values are k * step, 1 <= k <= kmax */
    double min_tps;           /* required tokens/s (0 = none) */
    ssi_sweep_result *out;
    char *err;
    size_t err_len;
} sweeper;

/* Evaluates strategy kind at k * step into *r; *ok says whether it trains. */
static ss_status probe(sweeper *s, int kind, uint32_t k, ssi_strategy_result *r, int *ok) {
    ssi_workload_config c;
    ssi_strategy_result res[SSI_STRAT_COUNT];
    ssi_sweep_apply(s->wc, s->axis, k * s->step, &c);
    ss_status st = ssi_strategy_eval(&c, s->env, 1u << kind, 0, res, s->err, s->err_len);
    if (st) return st;
    s->out->evals++;
    *r = res[kind];
    *ok = r->fits && (kind == SSI_STRAT_NONE || !(s->min_tps > 0) || r->tokens_per_s >= s->min_tps);
    return SS_OK;
}

/* The largest k in [1, kmax] at which kind trains, searching from k0. */
static ss_status search(sweeper *s, int kind, uint32_t k0, ssi_sweep_best *best) {
    memset(best, 0, sizeof *best);
    ssi_strategy_result r;
    int ok;
    uint32_t lo = 0, hi = 0;   /* lo: trains (0 = none known); hi: does not (0 = none known) */
    if (k0 < 1) k0 = 1;
    if (k0 > s->kmax) k0 = s->kmax;
    ss_status st = probe(s, kind, k0, &r, &ok);
    if (st) return st;
    if (ok) {
        lo = k0;
        best->r = r;
        while (lo < s->kmax) {
            uint32_t k = lo > s->kmax / 2 ? s->kmax : lo * 2;
            if ((st = probe(s, kind, k, &r, &ok))) return st;
            if (!ok) { hi = k; break; }
            lo = k;
            best->r = r;
        }
    } else {
        hi = k0;
        while (hi > 1) {
            uint32_t k = hi / 2;
            if ((st = probe(s, kind, k, &r, &ok))) return st;
            if (ok) { lo = k; best->r = r; break; }
            hi = k;
        }
        if (!lo) return SS_OK;   /* not even the smallest value trains */
    }
    while (hi && hi - lo > 1) {
        uint32_t k = lo + (hi - lo) / 2;
        if ((st = probe(s, kind, k, &r, &ok))) return st;
        if (ok) { lo = k; best->r = r; }
        else hi = k;
    }
    best->found = 1;
    best->value = lo * s->step;
    return SS_OK;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

ss_status ssi_strategy_sweep(const ssi_workload_config *wc, const ssi_strategy_env *env, int axis,
                             unsigned mask, double min_speed, uint32_t curve_points, ssi_sweep_result *out,
                             char *err, size_t err_len) {
    if (!wc || !out) return SS_ERR_INVALID;
    memset(out, 0, sizeof *out);
    double t0 = now_s();
    if (axis < 0 || axis > SSI_SWEEP_HIDDEN) {
        ssi_fmt(err, err_len, "unknown sweep axis %d (batch, seq or hidden)", axis);
        return SS_ERR_INVALID;
    }
    if (!(min_speed >= 0) || !isfinite(min_speed)) {
        ssi_fmt(err, err_len, "min-speed must be a number >= 0");
        return SS_ERR_INVALID;
    }
    ss_status st = check_env(env, err, err_len);
    if (st) return st;
    if ((st = ssi_workload_validate(wc, err, err_len))) return st;
    out->axis = axis;
    out->min_speed = min_speed;
    sweeper s = {wc, env, axis, 1, 0, 0, out, err, err_len};
    uint32_t k0;
    if (axis == SSI_SWEEP_BATCH) { s.kmax = 1u << 16; k0 = wc->batch; }
    else if (axis == SSI_SWEEP_SEQ) { s.kmax = wc->max_pos ? wc->max_pos : 1u << 22; k0 = wc->seq; }
    else { s.step = wc->heads; s.kmax = (1u << 18) / wc->heads; k0 = wc->hidden / wc->heads; }

    if ((st = search(&s, SSI_STRAT_NONE, k0, &out->best[SSI_STRAT_NONE]))) goto fail;
    ssi_sweep_best *b0 = &out->best[SSI_STRAT_NONE];
    if (b0->found) {
        out->ref_tokens_per_s = b0->r.tokens_per_s;
        s.min_tps = min_speed * b0->r.tokens_per_s;
        k0 = b0->value / s.step;
        b0->multiple = 1.0;
    }
    for (int k = 1; k < SSI_STRAT_COUNT; k++) {
        if (!(mask & (1u << k))) continue;
        if ((st = search(&s, k, k0, &out->best[k]))) goto fail;
        if (out->best[k].found && b0->found) out->best[k].multiple = (double)out->best[k].value / b0->value;
    }
    if (curve_points) {
        uint32_t kmax = 0;
        for (int k = 0; k < SSI_STRAT_COUNT; k++)
            if (out->best[k].found && out->best[k].value / s.step > kmax) kmax = out->best[k].value / s.step;
        if (kmax == 0) kmax = k0;
        if (curve_points > kmax) curve_points = kmax;
        out->values = calloc(curve_points, sizeof *out->values);
        for (int k = 0; k < SSI_STRAT_COUNT; k++) out->tps[k] = calloc(curve_points, sizeof(double));
        for (int k = 0; k < SSI_STRAT_COUNT; k++)
            if (!out->tps[k]) { st = SS_ERR_HOST_OOM; goto fail; }
        if (!out->values) { st = SS_ERR_HOST_OOM; goto fail; }
        uint32_t np = 0, last = 0;
        for (uint32_t j = 1; j <= curve_points; j++) {
            uint32_t kv = (uint32_t)(((uint64_t)kmax * j + curve_points / 2) / curve_points);
            if (kv < 1) kv = 1;
            if (kv == last) continue;
            last = kv;
            ssi_workload_config c;
            ssi_strategy_result res[SSI_STRAT_COUNT];
            ssi_sweep_apply(wc, axis, kv * s.step, &c);
            unsigned m = mask | (1u << SSI_STRAT_NONE);
            if ((st = ssi_strategy_eval(&c, env, m, 0, res, err, err_len))) goto fail;
            for (int k = 0; k < SSI_STRAT_COUNT; k++) out->evals += (m >> k) & 1u;
            out->values[np] = kv * s.step;
            for (int k = 0; k < SSI_STRAT_COUNT; k++) {
                int ok = res[k].fits && (k == SSI_STRAT_NONE || !(s.min_tps > 0) || res[k].tokens_per_s >= s.min_tps);
                out->tps[k][np] = ok ? res[k].tokens_per_s : 0;
            }
            np++;
        }
        out->npoints = np;
    }
    out->seconds = now_s() - t0;
    return SS_OK;
fail:
    if (st == SS_ERR_HOST_OOM) ssi_fmt(err, err_len, "out of host memory in the sweep");
    ssi_sweep_result_free(out);
    return st;
}
