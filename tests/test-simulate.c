/* test-simulate.c: the four strategies of strategy.h and `smartswap simulate` (issue 6):
 *  - no saving's largest sequence and batch match the closed-form activation formula
 *    (research/trainer-workload.md §5: s*b*(12h + 4h_kv + 8i) bytes per layer in bf16 with flash
 *    attention, + 4a of log-sum-exp, + the logits terms and static state as workload.c models them)
 *    within 2 %;
 *  - full recomputation adds exactly one forward pass of the layers (seconds and FLOPs, checked
 *    against the profile and against the closed-form FLOP count);
 *  - no strategy's step is shorter than its copies at the link bandwidth, and offload hides none;
 *  - the sweep's answers are consistent (multiples, limits, min-speed);
 *  - the CLI (SS_CLI, set by `make test`) prints all four strategies with multiples, step times and
 *    host memory for llama-2-7b on h200 (--sweep seq / batch --json), draws a PNG, and rejects bad
 *    flags with exit status 2.
 */
#include "recompute.h"
#include "strategy.h"
#include "trace.h"
#include "test.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <unistd.h>

static char self_dir[4096] = ".";   /* the test binary's folder (main) */

static void env_h200(ssi_strategy_env *env) { ssi_strategy_env_from_preset(ssi_preset_find("h200"), env); }

static void model(ssi_workload_config *c, const char *name, uint32_t batch, uint32_t seq) {
    ssi_workload_default(c);
    CHECK_OK(ssi_workload_preset(c, name));
    c->batch = batch;
    c->seq = seq;
}

/* Bytes per token of the no-saving peak for a dense llama in bf16 with flash attention: every
 * layer's saved activations s*b*(12h + 4h_kv + 8i) + the f32 log-sum-exp 4a, the last layer's
 * output and the final norm's output (2h each), tokens and targets (8 each), and the loss:
 *  - chunked (the default; peak during chunked_xent_bwd): the f32 log-sum-exp 4 and the hidden
 *    gradient 2h, plus 2 x chunk x V x 2 bytes of one chunk's logits and their gradient
 *    (chunk_formula);
 *  - full (peak at cross_entropy / cross_entropy_bwd): f32 probabilities 4V plus the bf16 logits
 *    or their gradient 2V. */
static double per_token_formula(const ssi_workload_config *c) {
    double h = c->hidden, hkv = (double)c->hidden / c->heads * c->kv_heads, i = c->ffn, a = c->heads;
    double layers = c->layers * (12 * h + 4 * hkv + 8 * i + 4 * a) + 4 * h + 16;
    return layers + (c->loss == SSI_WORKLOAD_LOSS_FULL ? 6.0 * c->vocab : 4 + 2 * h);
}

/* Bytes of the no-saving peak in the chunk's logits and their gradient at T tokens: the chunk is
 * the trainer's (gpt_loss_chunk): loss_chunk, or with 0 (the default) the largest multiple of 64
 * tokens with chunk x V <= T x h, at least 64; at most T either way. With the default the chunk
 * grows by steps of 64 tokens with T (about 4h bytes per token). */
static double chunk_formula(const ssi_workload_config *c, double T) {
    if (c->loss == SSI_WORKLOAD_LOSS_FULL) return 0;
    double ch = c->loss_chunk;
    if (!ch) ch = fmax(64, 64 * floor(floor(T * c->hidden / c->vocab) / 64));
    return 2.0 * fmin(ch, T) * c->vocab * 2;
}

static double static_formula(const ssi_workload_config *c) {
    ssi_workload_params P;
    ssi_workload_count_params(c, &P);
    return P.total * 16;   /* bf16 weights and gradients, fp32 master and two Adam moments */
}

/* The tokens T at which the no-saving peak reaches the budget: static + T x per token +
 * chunk_formula(T) = budget, by fixed-point iteration (the chunk's bytes change T by a fraction of
 * a percent, so it converges at once). */
static double tokens_formula(const ssi_workload_config *c, double budget) {
    double room = budget - static_formula(c), T = room / per_token_formula(c);
    for (int k = 0; k < 8; k++) T = (room - chunk_formula(c, T)) / per_token_formula(c);
    return T;
}

/* ---- one configuration ------------------------------------------------------------------- */

static void t_eval_llama7b(void) {
    ssi_workload_config c;
    model(&c, "llama-2-7b", 4, 4096);
    ssi_strategy_env env;
    env_h200(&env);
    ssi_strategy_result r[SSI_STRAT_COUNT];
    char err[256] = "";
    CHECK_OK(ssi_strategy_eval(&c, &env, SSI_STRAT_ALL, 1, r, err, sizeof err));
    for (int k = 0; k < SSI_STRAT_COUNT; k++) {
        CHECK(r[k].evaluated && r[k].kind == k);
        CHECK(r[k].iter_s > 0 && r[k].tokens_per_s > 0 && r[k].peak_bytes > 0);
        CHECK_EQ_U64(r[k].tokens, 4 * 4096);
        CHECK_NEAR(r[k].tokens_per_s, 4 * 4096 / r[k].iter_s, 1e-6 * r[k].tokens_per_s);
        CHECK(r[k].npoints > 0 && r[k].t && r[k].mem);
        CHECK(r[k].fits == (r[k].why[0] == 0));
    }
    /* 178 GiB of demand on a 140 GiB device: no saving does not fit and says so */
    CHECK(!r[SSI_STRAT_NONE].fits);
    CHECK(strstr(r[SSI_STRAT_NONE].why, "exceeds the budget") != NULL);
    CHECK(r[SSI_STRAT_RECOMPUTE].fits && r[SSI_STRAT_OFFLOAD].fits && r[SSI_STRAT_SMARTSWAP].fits &&
          r[SSI_STRAT_HYBRID].fits);
    CHECK(r[SSI_STRAT_NONE].host_bytes == 0 && r[SSI_STRAT_RECOMPUTE].host_bytes == 0);
    CHECK(r[SSI_STRAT_OFFLOAD].host_bytes > 0 && r[SSI_STRAT_SMARTSWAP].host_bytes > 0);
    for (int k = 1; k < SSI_STRAT_COUNT; k++) CHECK(r[k].peak_bytes <= env.budget_bytes);
    /* smartswap swaps less than offload and is faster; no saving is the fastest */
    CHECK(r[SSI_STRAT_SMARTSWAP].d2h_bytes < r[SSI_STRAT_OFFLOAD].d2h_bytes);
    CHECK(r[SSI_STRAT_SMARTSWAP].iter_s < r[SSI_STRAT_OFFLOAD].iter_s);
    for (int k = 1; k < SSI_STRAT_COUNT; k++) CHECK(r[k].iter_s >= r[SSI_STRAT_NONE].iter_s);
    /* the timeline ends at the peak's scale */
    uint64_t mx = 0;
    for (uint32_t i = 0; i < r[SSI_STRAT_OFFLOAD].npoints; i++)
        if (r[SSI_STRAT_OFFLOAD].mem[i] > mx) mx = r[SSI_STRAT_OFFLOAD].mem[i];
    CHECK_EQ_U64(mx, r[SSI_STRAT_OFFLOAD].peak_bytes);
    for (int k = 0; k < SSI_STRAT_COUNT; k++) ssi_strategy_result_free(&r[k]);
}

/* ---- the hybrid ---------------------------------------------------------------------------- */

/* Swap or recompute against swapping only, on the same generated iteration, budget and link:
 * where the swap-only plan stalls on the link the hybrid recomputes some saved tensors (their
 * recipe operators' times added), moves fewer bytes and is no slower; where the link hides every
 * copy it recomputes nothing and equals swap-only. */
static void t_hybrid(void) {
    static const struct { const char *model, *dev; uint32_t batch, seq; double budget_gib; int link_bound; } cases[] = {
        {"llama-2-7b", "h200", 4, 4096, 0, 1},      /* PCIe-class link, 176 GiB of demand on 140 */
        {"gpt2-124m", "h200", 64, 1024, 8, 1},       /* PCIe-class link, 20 GiB on 8 */
        {"llama-3.2-1b", "gh200", 16, 4096, 40, 0},  /* C2C-class link: every copy hidden */
    };
    for (size_t q = 0; q < sizeof cases / sizeof cases[0]; q++) {
        ssi_workload_config c;
        model(&c, cases[q].model, cases[q].batch, cases[q].seq);
        ssi_strategy_env env;
        ssi_strategy_env_from_preset(ssi_preset_find(cases[q].dev), &env);
        if (cases[q].budget_gib > 0) env.budget_bytes = (uint64_t)(cases[q].budget_gib * 1024 * 1024 * 1024);
        ssi_strategy_result r[SSI_STRAT_COUNT];
        char err[256] = "";
        unsigned mask = (1u << SSI_STRAT_RECOMPUTE) | (1u << SSI_STRAT_SMARTSWAP) | (1u << SSI_STRAT_HYBRID);
        CHECK_OK(ssi_strategy_eval(&c, &env, mask, 0, r, err, sizeof err));
        const ssi_strategy_result *sw = &r[SSI_STRAT_SMARTSWAP], *hy = &r[SSI_STRAT_HYBRID], *rc = &r[SSI_STRAT_RECOMPUTE];
        CHECK(hy->evaluated && hy->kind == SSI_STRAT_HYBRID && !strcmp(ssi_strategy_name(SSI_STRAT_HYBRID), "hybrid"));
        CHECK_MSG(sw->fits && hy->fits, "%s: swap-only fits %d, hybrid %d (%s)", cases[q].model, sw->fits, hy->fits, hy->why);
        CHECK(hy->peak_bytes <= (env.budget_bytes ? env.budget_bytes : env.device_bytes));
        CHECK_MSG(hy->iter_s <= sw->iter_s * (1 + 1e-9), "%s: hybrid %.4f s, swap-only %.4f s", cases[q].model, hy->iter_s,
                  sw->iter_s);
        if (cases[q].link_bound) {
            CHECK_MSG(sw->stall_s > 0, "%s: the control: swap-only should stall on this link", cases[q].model);
            CHECK_MSG(hy->recomputed > 0 && hy->recomputed_bytes > 0, "%s: the hybrid recomputed nothing", cases[q].model);
            CHECK(hy->d2h_bytes < sw->d2h_bytes && hy->host_bytes < sw->host_bytes);
            CHECK(hy->iter_s < sw->iter_s);
            /* its extra compute is the recipes' (norms, rotary, SwiGLU, projections), well below
             * rerunning every layer's forward */
            CHECK(hy->extra_compute_s > 0 && hy->extra_compute_s < rc->extra_compute_s);
        } else {
            CHECK_MSG(sw->stall_s == 0, "%s: the control: every copy should be hidden", cases[q].model);
            CHECK_EQ_U64(hy->recomputed, 0);
            CHECK_NEAR(hy->iter_s, sw->iter_s, 1e-12);
            CHECK_EQ_U64(hy->d2h_bytes, sw->d2h_bytes);
        }
        fprintf(stderr, "     %s on %s, %u x %u: swap-only %.0f tokens/s, hybrid %.0f (%u tensors, %.2f GiB recomputed), "
                "full recompute %.0f\n", cases[q].model, cases[q].dev, cases[q].batch, cases[q].seq, sw->tokens_per_s,
                hy->tokens_per_s, hy->recomputed, (double)hy->recomputed_bytes / (1024.0 * 1024 * 1024), rc->tokens_per_s);
        for (int k = 0; k < SSI_STRAT_COUNT; k++) ssi_strategy_result_free(&r[k]);
    }
}

/* The policy at budget on an H200 (its links; per-operator times from FLOPs at the preset's
 * MFU), the default min-swap, no smallest-budget search. */
static ssi_policy_config policy_h200(uint64_t budget) {
    const ssi_device_preset *dev = ssi_preset_find("h200");
    ssi_policy_config pc;
    memset(&pc, 0, sizeof pc);
    pc.budget_bytes = budget;
    pc.min_swap_bytes = ss_options_default().min_swap_bytes;
    pc.d2h_bps = dev->d2h_gbps * 1e9;
    pc.h2d_bps = dev->h2d_gbps * 1e9;
    pc.time.mode = SSI_TIME_FLOPS;
    pc.time.flops_per_s = dev->bf16_flops * SS_PRESET_MFU;
    pc.skip_min_budget = 1;
    return pc;
}

/* Whole layers (spans, ss_ctx_recomputable_span): the generated iteration registers each layer's
 * input as a span; on a PCIe-class link the hybrid takes some layers whole (every member a
 * recompute entry rebuilt at one operator), the plan's prediction is what the simulator gives
 * for its entries, a plan missing one member is refused, the spans survive a trace round trip,
 * and without spans the same planner is slower. */
static void t_hybrid_spans(void) {
    ssi_workload_config c;
    model(&c, "llama-2-7b", 4, 4096);
    ss_profile *p = NULL;
    char err[256] = "";
    CHECK_OK(ssi_workload_generate(&c, &p, NULL, err, sizeof err));
    if (!p) return;
    uint32_t nspan = 0;
    for (uint32_t t = 0; t < p->ntensors; t++) nspan += p->tensors[t].span_nop > 0;
    CHECK_EQ_U64(nspan, c.layers);
    ssi_policy_config pc = policy_h200(125ull << 30);
    pc.host_mem_bytes = ssi_preset_find("h200")->host_mem_bytes;
    ss_plan *pl = NULL;
    ssi_recompute_report hr;
    CHECK_OK(ssi_recompute_plan(p, &pc, &pl, NULL, &hr, err, sizeof err));
    if (!pl) { ssi_profile_free(p); return; }
    CHECK_MSG(pl->feasible && hr.spans > 0, "feasible %d, %u layers taken whole", pl->feasible, hr.spans);
    /* the members of a layer taken whole share one rebuild point, in that layer's backward */
    uint32_t *at = calloc(p->ntensors, sizeof *at), nrc = 0, shared = 0;
    for (uint32_t k = 0; k < pl->nentries; k++) {
        const ss_plan_entry *e = &pl->entries[k];
        if (e->action != SS_PLAN_RECOMPUTE) continue;
        nrc++;
        at[e->tensor] = e->use_op;
    }
    for (uint32_t k = 0; k < pl->nentries; k++) {
        const ss_plan_entry *e = &pl->entries[k];
        if (e->action != SS_PLAN_RECOMPUTE) continue;
        uint32_t first = SS_NONE;
        const ss_prof_tensor *x = &p->tensors[e->tensor];
        for (uint32_t i = 0; i < x->nuses; i++)
            if (p->ops[p->uses[x->use_off + i]].phase == SS_PHASE_BWD) { first = p->uses[x->use_off + i]; break; }
        shared += e->use_op < first;   /* rebuilt before its own first use: with its layer */
    }
    CHECK_MSG(shared > 0 && nrc == hr.chosen, "%u recompute entries (%u reported), %u rebuilt with their layer", nrc,
              hr.chosen, shared);
    free(at);
    /* the prediction is the simulator's for the plan's entries */
    ssi_sim_config sc = ssi_policy_sim_config(&pc, pc.budget_bytes);
    ssi_sim_result sr;
    CHECK_OK(ssi_sim_run(p, pl, &sc, &sr, err, sizeof err));
    CHECK_NEAR(sr.iter_s, pl->iter_s, 1e-9 * pl->iter_s);
    ssi_sim_result_free(&sr);
    /* one member left out: the layer is no longer whole, and that member's neighbours without a
     * recipe of their own cannot be rebuilt alone */
    ss_plan cut = *pl;
    ss_plan_entry *ent = malloc(pl->nentries * sizeof *ent);
    uint32_t m = 0, gone = 0;
    for (uint32_t k = 0; k < pl->nentries; k++) {
        const ss_plan_entry *e = &pl->entries[k];
        if (!gone && e->action == SS_PLAN_RECOMPUTE && !ssi_rebuild_candidate(p, e->tensor)) { gone = 1; continue; }
        ent[m++] = *e;
    }
    cut.entries = ent;
    cut.nentries = m;
    CHECK(gone);
    CHECK_STATUS(ssi_sim_run(p, &cut, &sc, &sr, err, sizeof err), SS_ERR_INVALID);
    free(ent);
    /* the spans go through the trace format */
    char *buf = NULL;
    size_t len = 0;
    ss_profile *back = NULL;
    CHECK_OK(ssi_profile_to_buffer(p, &buf, &len, err, sizeof err));
    CHECK_OK(ssi_profile_read_buffer(buf, len, "spans", &back, err, sizeof err));
    CHECK(back && ssi_profile_equal(p, back));
    free(buf);
    ssi_profile_free(back);
    /* without spans (each tensor's own recipe only) the hybrid is slower here */
    for (uint32_t t = 0; t < p->ntensors; t++) p->tensors[t].span_nop = p->tensors[t].span_first = 0;
    ss_plan *pl2 = NULL;
    ssi_recompute_report hr2;
    CHECK_OK(ssi_recompute_plan(p, &pc, &pl2, NULL, &hr2, err, sizeof err));
    if (pl2) {
        CHECK_EQ_U64(hr2.spans, 0);
        CHECK_MSG(pl->iter_s < pl2->iter_s, "with layers %.4f s, own recipes only %.4f s", pl->iter_s, pl2->iter_s);
        fprintf(stderr, "     llama-2-7b 4 x 4096 at 125 GiB on h200: hybrid %.3f s with %u layers whole (%u entries), "
                "%.3f s with own recipes only\n", pl->iter_s, hr.spans, hr.chosen, pl2->iter_s);
    }
    ssi_plan_free(pl2);
    ssi_plan_free(pl);
    ssi_profile_free(p);
}

/* A layer's rebuild brings all its members back at once: under a budget below that working set
 * (the floor of the profile with the layer rebuilt) no plan can take the layer whole, so neither
 * the hybrid nor its bound counts it: between the profile's own floor and a layer's, the hybrid
 * takes no layer and its bound is the one of the same profile without spans. */
static void t_hybrid_span_budget(void) {
    ssi_workload_config c;
    model(&c, "llama-2-7b", 4, 4096);
    ss_profile *p = NULL, *q = NULL;
    char err[256] = "";
    CHECK_OK(ssi_workload_generate(&c, &p, NULL, err, sizeof err));
    if (!p) return;
    ssi_policy_config pc = policy_h200(125ull << 30);
    ssi_rebuild_spans S;
    memset(&S, 0, sizeof S);
    CHECK_OK(ssi_rebuild_spans_find(p, &S));
    CHECK(S.ng == c.layers);
    uint8_t *rc = calloc(p->ntensors, 1);
    uint64_t fl = 0, fl_span = UINT64_MAX;
    CHECK_OK(ssi_policy_floor(p, &pc, &fl, NULL, err, sizeof err));
    for (uint32_t g = 0; g < S.ng; g++) {   /* the smallest of the layers' rebuild floors */
        memset(rc, 0, p->ntensors);
        for (uint32_t j = 0; j < S.g[g].nmem; j++) rc[S.mem[S.g[g].mem_off + j]] = 2;
        CHECK_OK(ssi_rebuild_derive_spans(p, &S, rc, &q));
        uint64_t f = 0;
        CHECK_OK(ssi_policy_floor(q, &pc, &f, NULL, err, sizeof err));
        if (f < fl_span) fl_span = f;
        ssi_profile_free(q);
        q = NULL;
    }
    CHECK_MSG(fl_span > fl + (64ull << 20), "floor %llu B, with a layer rebuilt %llu B", (unsigned long long)fl,
              (unsigned long long)fl_span);
    pc.budget_bytes = (fl + fl_span) / 2;
    ss_plan *pl = NULL;
    ssi_recompute_report hr;
    CHECK_OK(ssi_recompute_plan(p, &pc, &pl, NULL, &hr, err, sizeof err));
    CHECK_EQ_U64(hr.spans, 0);
    for (uint32_t k = 0; pl && k < pl->nentries; k++)   /* every rebuild is a tensor's own recipe */
        if (pl->entries[k].action == SS_PLAN_RECOMPUTE) CHECK(ssi_rebuild_candidate(p, pl->entries[k].tensor));
    double tb = 0, tb_own = 0;
    CHECK_OK(ssi_recompute_bound(p, &pc, &tb, NULL, err, sizeof err));
    CHECK_OK(ssi_profile_clone(p, &q));
    for (uint32_t t = 0; t < q->ntensors; t++) q->tensors[t].span_nop = q->tensors[t].span_first = 0;
    CHECK_OK(ssi_recompute_bound(q, &pc, &tb_own, NULL, err, sizeof err));
    CHECK_MSG(tb > 0 && fabs(tb - tb_own) <= 1e-9 * tb_own, "bound %.6f s, without spans %.6f s", tb, tb_own);
    /* above every layer's floor the layers are candidates again and the bound is lower */
    pc.budget_bytes = 125ull << 30;
    CHECK_OK(ssi_recompute_bound(p, &pc, &tb, NULL, err, sizeof err));
    CHECK_OK(ssi_recompute_bound(q, &pc, &tb_own, NULL, err, sizeof err));
    CHECK_MSG(tb < tb_own, "at 125 GiB: bound %.6f s, without spans %.6f s", tb, tb_own);
    ssi_plan_free(pl);
    ssi_profile_free(q);
    ssi_rebuild_spans_free(&S);
    free(rc);
    ssi_profile_free(p);
}

/* The hybrid on a trainer's profile (tests/data/bench-train-4x-hybrid-profile.jsonl: bench-train's
 * default shape, 16 layers x width 32, 8 x 128 tokens, measured operator seconds, recipes and
 * layer spans, at state + about a quarter of its activations with the run's 256 B segments), at
 * five link rates around bench-train's PCIe-class one: every plan feasible and no slower than
 * swapping only, and strictly faster wherever the pure-swap plan stalls, also where its traffic
 * is within what the link hides (the lanes idle before the first swappable tensor and after the
 * last: at 0.201 GB/s the pure-swap plan stalled 16.1 ms and was returned as it was). */
static void t_hybrid_stall(void) {
    char err[256] = "";
    const char *path = "tests/data/bench-train-4x-hybrid-profile.jsonl";
    char alt[4300];
    if (access(path, R_OK) != 0) {   /* run from elsewhere: the source tree beside the binary */
        snprintf(alt, sizeof alt, "%s/../../tests/data/bench-train-4x-hybrid-profile.jsonl", self_dir);
        path = alt;
    }
    ss_profile *p = NULL;
    CHECK_OK(ssi_profile_read(path, &p, err, sizeof err));
    if (!p) { fprintf(stderr, "     %s\n", err); return; }
    const double scale[5] = {0.8, 1.0, 1.5, 2.0, 3.0};
    int stalled = 0, within = 0;
    for (int k = 0; k < 5; k++) {
        ssi_policy_config c;
        memset(&c, 0, sizeof c);
        c.budget_bytes = 9216000;
        c.min_swap_bytes = 32768;
        c.d2h_bps = c.h2d_bps = 0.134e9 * scale[k];
        c.copy_latency_s = 5e-6;
        c.segment_bytes = 256;
        c.time.mode = SSI_TIME_AUTO;
        ss_plan *pl = NULL, *p0 = NULL;
        ssi_recompute_report hr;
        CHECK_OK(ssi_recompute_plan(p, &c, &pl, NULL, &hr, err, sizeof err));
        CHECK_OK(ssi_policy_plan(p, &c, &p0, NULL, err, sizeof err));
        if (!pl || !p0) { ssi_plan_free(pl); ssi_plan_free(p0); continue; }
        CHECK(pl->feasible && p0->feasible);
        CHECK_NEAR(hr.swap_only_iter_s, p0->iter_s, 1e-12);
        CHECK_MSG(pl->iter_s <= p0->iter_s * (1 + 1e-12), "x%.2f: hybrid %.1f ms, swap-only %.1f ms", scale[k],
                  pl->iter_s * 1e3, p0->iter_s * 1e3);
        if (p0->stall_s > 0) {
            stalled++;
            CHECK_MSG(pl->iter_s < p0->iter_s && hr.chosen > 0, "x%.2f: swap-only stalls %.1f ms, hybrid %.1f ms of %.1f",
                      scale[k], p0->stall_s * 1e3, pl->iter_s * 1e3, p0->iter_s * 1e3);
            /* the traffic within what the link hides, and stalls all the same */
            within += (double)p0->swapped_bytes <= fmin(hr.fwd_s * c.d2h_bps, hr.bwd_s * c.h2d_bps);
        }
        fprintf(stderr, "     x%.2f (%.3g GB/s): swap-only %.1f ms (%.1f ms stalls), hybrid %.1f ms, %u rebuilt\n",
                scale[k], c.d2h_bps / 1e9, p0->iter_s * 1e3, p0->stall_s * 1e3, pl->iter_s * 1e3, hr.chosen);
        ssi_plan_free(pl);
        ssi_plan_free(p0);
    }
    CHECK(stalled >= 3);   /* the control: the link is the bottleneck at most of the rates */
    CHECK(within >= 1);    /* and somewhere within the bound */
    ssi_profile_free(p);
}

/* ---- recomputation ------------------------------------------------------------------------ */

static void t_recompute_extra_forward(void) {
    static const char *const models[] = {"llama-3.2-1b", "llama-2-7b", "gpt2-124m"};
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        ssi_workload_config c;
        model(&c, models[m], 2, 1024);
        ssi_strategy_env env;
        env_h200(&env);
        c.device_flops = env.flops_per_s;
        c.device_bw = env.mem_bps;
        /* independent count: the forward operators from the first layer's attn_norm to final_norm */
        ss_profile *p;
        char err[256] = "";
        CHECK_OK(ssi_workload_generate(&c, &p, NULL, err, sizeof err));
        double fwd_s = 0, fwd_flops = 0;
        int in = 0;
        for (uint32_t i = 0; i < p->nops; i++) {
            const char *nm = p->names[p->ops[i].name];
            if (!strcmp(nm, "attn_norm") && p->ops[i].phase == SS_PHASE_FWD) in = 1;
            if (!strcmp(nm, "final_norm")) in = 0;
            if (in) { fwd_s += p->ops[i].seconds; fwd_flops += p->ops[i].flops; }
        }
        ssi_profile_free(p);
        ssi_strategy_result r[SSI_STRAT_COUNT];
        CHECK_OK(ssi_strategy_eval(&c, &env, (1u << SSI_STRAT_NONE) | (1u << SSI_STRAT_RECOMPUTE), 0, r, err, sizeof err));
        const ssi_strategy_result *n = &r[SSI_STRAT_NONE], *x = &r[SSI_STRAT_RECOMPUTE];
        CHECK_MSG(fabs(x->extra_compute_s - fwd_s) <= 1e-9 * fwd_s, "%s: extra %.9g s, forward %.9g s", models[m],
                  x->extra_compute_s, fwd_s);
        CHECK_NEAR(x->extra_flops, fwd_flops, 1e-9 * fwd_flops);
        CHECK_NEAR(x->compute_s - n->compute_s, fwd_s, 1e-9 * n->compute_s);
        CHECK_NEAR(x->iter_s, n->iter_s + fwd_s, 1e-9 * n->iter_s);   /* no copies, no stalls */
        CHECK(x->d2h_bytes == 0 && x->h2d_bytes == 0 && x->host_bytes == 0);
        CHECK(x->peak_bytes < n->peak_bytes);
        /* closed form (llama): per layer 2T(2h^2 + 2h*h_kv + 3hi) for the products + 2bs^2h for flash
         * attention, elementwise ops a few FLOPs per element: within 1 % */
        if (c.arch == SSI_WORKLOAD_LLAMA) {
            double T = (double)c.batch * c.seq, h = c.hidden, hkv = h / c.heads * c.kv_heads, i = c.ffn;
            double want = c.layers * (2 * T * (2 * h * h + 2 * h * hkv + 3 * h * i) + 2.0 * c.batch * c.seq * (double)c.seq * h);
            CHECK_MSG(fabs(x->extra_flops - want) <= 0.01 * want, "%s: %.6g vs %.6g FLOPs", models[m], x->extra_flops, want);
        }
    }
}

/* What recomputation keeps through the forward: each layer's input and the tensors outside the
 * layers; the rest is re-created by the rerun. Checked on the rewritten profile's levels. */
static void t_recompute_profile_memory(void) {
    ssi_workload_config c;
    model(&c, "llama-3.2-1b", 2, 1024);
    ss_profile *p, *q;
    ssi_workload_info info;
    char err[256] = "";
    CHECK_OK(ssi_workload_generate(&c, &p, &info, err, sizeof err));
    double xs = 0, xf = 0;
    CHECK_OK(ssi_strategy_recompute_profile(p, &info, &q, &xs, &xf, err, sizeof err));
    /* one rerun op per forward layer op */
    uint32_t fwd_layer_ops = 0;
    int in = 0;
    for (uint32_t i = 0; i < p->nops; i++) {
        const char *nm = p->names[p->ops[i].name];
        if (!strcmp(nm, "attn_norm") && p->ops[i].phase == SS_PHASE_FWD) in = 1;
        if (!strcmp(nm, "final_norm")) in = 0;
        fwd_layer_ops += (uint32_t)in;
    }
    CHECK_EQ_U64(q->nops, p->nops + fwd_layer_ops);
    CHECK_OK(ssi_profile_check(q, err, sizeof err));
    /* at the end of the forward (the loss, chunked_xent) the layers hold only their inputs: L * T * 2h */
    uint32_t ce = SS_NONE, ce0 = SS_NONE;
    for (uint32_t i = 0; i < q->nops; i++)
        if (!strcmp(q->names[q->ops[i].name], "chunked_xent")) ce = i;
    for (uint32_t i = 0; i < p->nops; i++)
        if (!strcmp(p->names[p->ops[i].name], "chunked_xent")) ce0 = i;
    CHECK(ce != SS_NONE && ce0 != SS_NONE);
    double T = (double)c.batch * c.seq, h = c.hidden;
    double act_q = (double)(q->ops[ce].mem_after - q->base_bytes);
    double act_p = (double)(p->ops[ce0].mem_after - p->base_bytes);
    double outside = act_p - c.layers * T * (12 * h + 4 * (h / c.heads * c.kv_heads) + 8.0 * c.ffn + 4.0 * c.heads);
    CHECK_NEAR(act_q, outside + c.layers * T * 2 * h, 1e-6 * act_p);
    ssi_profile_free(q);
    /* no layer structure: a clear error */
    info.layer[0] = 3;
    for (uint32_t t = 0; t < info.ntensors; t++) info.layer[t] = -1;
    CHECK_STATUS(ssi_strategy_recompute_profile(p, &info, &q, NULL, NULL, err, sizeof err), SS_ERR_INVALID);
    CHECK(strstr(err, "layers") != NULL);
    ssi_workload_info_free(&info);
    ssi_profile_free(p);
}

/* ---- copies and the link ----------------------------------------------------------------- */

static void t_copies_bound_step_time(void) {
    static const struct { const char *m; uint32_t b, s; const char *dev; } cases[] = {
        {"llama-2-7b", 1, 4096, "h200"}, {"llama-2-7b", 8, 4096, "h200"}, {"llama-3.2-1b", 24, 2048, "h200"},
        {"llama-3.2-1b", 8, 4096, "a100-80g"}, {"llama-2-7b", 1, 16384, "h100"}};
    for (size_t q = 0; q < sizeof cases / sizeof cases[0]; q++) {
        ssi_workload_config c;
        model(&c, cases[q].m, cases[q].b, cases[q].s);
        ssi_strategy_env env;
        ssi_strategy_env_from_preset(ssi_preset_find(cases[q].dev), &env);
        ssi_strategy_result r[SSI_STRAT_COUNT];
        char err[256] = "";
        CHECK_OK(ssi_strategy_eval(&c, &env, SSI_STRAT_ALL, 0, r, err, sizeof err));
        for (int k = 0; k < SSI_STRAT_COUNT; k++) {
            double t_out = (double)r[k].d2h_bytes / env.d2h_bps, t_in = (double)r[k].h2d_bytes / env.h2d_bps;
            CHECK_MSG(r[k].iter_s >= t_out * (1 - 1e-12) && r[k].iter_s >= t_in * (1 - 1e-12),
                      "%s b=%u s=%u %s: step %.6g s, copies out %.6g s, in %.6g s", cases[q].m, cases[q].b, cases[q].s,
                      ssi_strategy_name(k), r[k].iter_s, t_out, t_in);
            CHECK(r[k].iter_s >= r[k].compute_s);
            CHECK_NEAR(r[k].iter_s, r[k].compute_s + r[k].stall_s, 1e-9 * r[k].iter_s);
        }
        /* save_on_cpu hides nothing: every copy adds to the step */
        const ssi_strategy_result *o = &r[SSI_STRAT_OFFLOAD];
        double serial = o->compute_s + (double)o->d2h_bytes / env.d2h_bps + (double)o->h2d_bytes / env.h2d_bps;
        CHECK_MSG(o->iter_s >= serial * (1 - 1e-9), "%s: offload step %.6g < compute + copies %.6g", cases[q].m,
                  o->iter_s, serial);
        CHECK(o->d2h_bytes == o->h2d_bytes && o->d2h_bytes > 0);
        /* offload moves every saved tensor with a backward use: at least the layers' activations */
        double T = (double)c.batch * c.seq, h = c.hidden;
        CHECK(o->d2h_bytes >= c.layers * T * (12 * h + 8.0 * c.ffn));
    }
}

/* ---- sweeps --------------------------------------------------------------------------------- */

static void check_sweep_consistency(const ssi_sweep_result *s, const ssi_strategy_env *env) {
    CHECK(s->best[SSI_STRAT_NONE].found);
    CHECK_NEAR(s->best[SSI_STRAT_NONE].multiple, 1.0, 0);
    for (int k = 0; k < SSI_STRAT_COUNT; k++) {
        const ssi_sweep_best *b = &s->best[k];
        if (!b->found) continue;
        CHECK(b->r.fits);
        CHECK(b->r.peak_bytes <= env->budget_bytes);
        CHECK(!env->host_cap_bytes || b->r.host_bytes <= env->host_cap_bytes);
        CHECK(b->r.iter_s > 0 && b->r.tokens_per_s > 0);
        CHECK_NEAR(b->multiple, (double)b->value / s->best[SSI_STRAT_NONE].value, 1e-12);
        CHECK(b->value >= s->best[SSI_STRAT_NONE].value);   /* every strategy trains what no saving trains */
    }
}

static void t_sweep_seq_formula(void) {
    ssi_workload_config c;
    model(&c, "llama-2-7b", 1, 2048);
    ssi_strategy_env env;
    env_h200(&env);
    ssi_sweep_result s;
    char err[256] = "";
    /* smartswap's seq sweep of this model is the CLI test's (t_cli); here the others */
    unsigned mask = (1u << SSI_STRAT_NONE) | (1u << SSI_STRAT_RECOMPUTE) | (1u << SSI_STRAT_OFFLOAD);
    CHECK_OK(ssi_strategy_sweep(&c, &env, SSI_SWEEP_SEQ, mask, 0, 0, &s, err, sizeof err));
    CHECK(!s.best[SSI_STRAT_SMARTSWAP].found);
    check_sweep_consistency(&s, &env);
    double want = tokens_formula(&c, (double)env.budget_bytes);   /* batch 1 */
    double got = s.best[SSI_STRAT_NONE].value;
    CHECK_MSG(fabs(got - want) <= 0.02 * want, "no saving: seq %.0f, formula %.1f (%.2f %%)", got, want,
              100 * (got - want) / want);
    /* at the formula's size + 2 %, no saving does not fit */
    ssi_workload_config c2 = c;
    c2.seq = (uint32_t)(want * 1.02) + 1;
    ssi_strategy_result r[SSI_STRAT_COUNT];
    CHECK_OK(ssi_strategy_eval(&c2, &env, 1u << SSI_STRAT_NONE, 0, r, err, sizeof err));
    CHECK(!r[SSI_STRAT_NONE].fits);
    /* swapping and recomputing reach further than no saving */
    for (int k = 1; k < SSI_STRAT_SMARTSWAP; k++) CHECK(s.best[k].found && s.best[k].multiple > 2);
    CHECK(s.evals > 0 && s.evals < 400);
    ssi_sweep_result_free(&s);
}

static void t_sweep_batch_formula_and_min_speed(void) {
    ssi_workload_config c;
    model(&c, "llama-3.2-1b", 1, 1024);
    ssi_strategy_env env;
    env_h200(&env);
    ssi_sweep_result s;
    char err[256] = "";
    CHECK_OK(ssi_strategy_sweep(&c, &env, SSI_SWEEP_BATCH, SSI_STRAT_ALL, 0, 6, &s, err, sizeof err));
    check_sweep_consistency(&s, &env);
    double want = tokens_formula(&c, (double)env.budget_bytes) / c.seq;
    double got = s.best[SSI_STRAT_NONE].value;
    CHECK_MSG(fabs(got - floor(want)) <= 0.02 * want, "no saving: batch %.0f, formula %.2f", got, want);
    {
        /* --loss full: the formula's 6V per token; the [b,s,V] terms cost a third of the batch */
        ssi_workload_config cf = c;
        cf.loss = SSI_WORKLOAD_LOSS_FULL;
        ssi_sweep_result sf;
        CHECK_OK(ssi_strategy_sweep(&cf, &env, SSI_SWEEP_BATCH, 1u << SSI_STRAT_NONE, 0, 0, &sf, err, sizeof err));
        double wf = tokens_formula(&cf, (double)env.budget_bytes) / cf.seq;
        double gf = sf.best[SSI_STRAT_NONE].value;
        CHECK_MSG(fabs(gf - floor(wf)) <= 0.02 * wf, "no saving, full loss: batch %.0f, formula %.2f", gf, wf);
        CHECK_MSG(gf < 0.8 * got, "full loss: batch %.0f, chunked %.0f", gf, got);
        ssi_sweep_result_free(&sf);
    }
    /* the curve: values ascending, no saving's tokens/s only where it fits */
    CHECK(s.npoints >= 2 && s.npoints <= 6);
    for (uint32_t i = 0; i < s.npoints; i++) {
        if (i) CHECK(s.values[i] > s.values[i - 1]);
        CHECK((s.tps[SSI_STRAT_NONE][i] > 0) == (s.values[i] <= s.best[SSI_STRAT_NONE].value));
    }
    /* a larger budget than the device is refused nowhere; a smaller one shrinks every answer */
    ssi_strategy_env small = env;
    small.budget_bytes = env.budget_bytes - (10ull << 30);
    ssi_sweep_result s2;
    CHECK_OK(ssi_strategy_sweep(&c, &small, SSI_SWEEP_BATCH, SSI_STRAT_ALL, 0, 0, &s2, err, sizeof err));
    check_sweep_consistency(&s2, &small);
    for (int k = 0; k < SSI_STRAT_COUNT; k++) CHECK(s2.best[k].value <= s.best[k].value);
    ssi_sweep_result_free(&s2);
    /* --min-speed: every answer keeps that share of no saving's tokens/s; offload (a third) goes */
    ssi_sweep_result s3;
    CHECK_OK(ssi_strategy_sweep(&c, &env, SSI_SWEEP_BATCH, SSI_STRAT_ALL, 0.6, 0, &s3, err, sizeof err));
    CHECK_NEAR(s3.ref_tokens_per_s, s.ref_tokens_per_s, 1e-9 * s.ref_tokens_per_s);
    for (int k = 1; k < SSI_STRAT_COUNT; k++)
        if (s3.best[k].found) CHECK(s3.best[k].r.tokens_per_s >= 0.6 * s3.ref_tokens_per_s);
    CHECK(!s3.best[SSI_STRAT_OFFLOAD].found || s3.best[SSI_STRAT_OFFLOAD].value < s.best[SSI_STRAT_OFFLOAD].value);
    CHECK(s.best[SSI_STRAT_OFFLOAD].r.tokens_per_s < 0.6 * s.ref_tokens_per_s);   /* the control */
    ssi_sweep_result_free(&s3);
    ssi_sweep_result_free(&s);
}

static void t_sweep_hidden(void) {
    ssi_workload_config c;
    model(&c, "llama-3.2-1b", 4, 4096);
    ssi_strategy_env env;
    env_h200(&env);
    ssi_sweep_result s;
    char err[256] = "";
    CHECK_OK(ssi_strategy_sweep(&c, &env, SSI_SWEEP_HIDDEN, SSI_STRAT_ALL, 0, 0, &s, err, sizeof err));
    check_sweep_consistency(&s, &env);
    for (int k = 0; k < SSI_STRAT_COUNT; k++)
        if (s.best[k].found) CHECK(s.best[k].value % c.heads == 0);
    /* the next step up does not fit for no saving */
    ssi_workload_config c2;
    ssi_sweep_apply(&c, SSI_SWEEP_HIDDEN, s.best[SSI_STRAT_NONE].value + c.heads, &c2);
    CHECK(c2.ffn > c.ffn);
    ssi_strategy_result r[SSI_STRAT_COUNT];
    CHECK_OK(ssi_strategy_eval(&c2, &env, 1u << SSI_STRAT_NONE, 0, r, err, sizeof err));
    CHECK(!r[SSI_STRAT_NONE].fits);
    ssi_sweep_result_free(&s);
}

static void t_errors(void) {
    ssi_workload_config c;
    model(&c, "llama-2-7b", 1, 1024);
    ssi_strategy_env env;
    env_h200(&env);
    ssi_strategy_result r[SSI_STRAT_COUNT];
    char err[256] = "";
    ssi_strategy_env bad = env;
    bad.d2h_bps = 0;
    CHECK_STATUS(ssi_strategy_eval(&c, &bad, SSI_STRAT_ALL, 0, r, err, sizeof err), SS_ERR_INVALID);
    CHECK(err[0] != 0);
    c.hidden = 4095;
    CHECK_STATUS(ssi_strategy_eval(&c, &env, SSI_STRAT_ALL, 0, r, err, sizeof err), SS_ERR_INVALID);
    CHECK(strstr(err, "hidden") != NULL);
    model(&c, "llama-2-7b", 1, 1024);
    ssi_sweep_result s;
    CHECK_STATUS(ssi_strategy_sweep(&c, &env, 7, SSI_STRAT_ALL, 0, 0, &s, err, sizeof err), SS_ERR_INVALID);
    CHECK_STATUS(ssi_strategy_sweep(&c, &env, SSI_SWEEP_SEQ, SSI_STRAT_ALL, -1, 0, &s, err, sizeof err), SS_ERR_INVALID);
    CHECK(ssi_sweep_axis_from_name("seq") == SSI_SWEEP_SEQ && ssi_sweep_axis_from_name("width") == -1);
    /* a model whose static state alone exceeds the device: nothing trains, nothing crashes */
    model(&c, "llama-2-13b", 1, 1024);
    ssi_strategy_env h100;
    ssi_strategy_env_from_preset(ssi_preset_find("h100"), &h100);
    CHECK_OK(ssi_strategy_sweep(&c, &h100, SSI_SWEEP_BATCH, SSI_STRAT_ALL, 0, 0, &s, err, sizeof err));
    for (int k = 0; k < SSI_STRAT_COUNT; k++) CHECK(!s.best[k].found);
    ssi_sweep_result_free(&s);
    CHECK_OK(ssi_strategy_eval(&c, &h100, SSI_STRAT_ALL, 0, r, err, sizeof err));
    for (int k = 0; k < SSI_STRAT_COUNT; k++) CHECK(!r[k].fits && r[k].why[0]);
    CHECK(r[SSI_STRAT_SMARTSWAP].prechecked);
}

/* ---- the command line ------------------------------------------------------------------------ */

/* Runs `$SS_CLI args` and returns its stdout (malloc'ed) and exit status. */
static char *run_cli(const char *args, int *status) {
    const char *cli = getenv("SS_CLI");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s 2>/dev/null", cli, args);
    FILE *f = popen(cmd, "r");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
            cap *= 2;
        }
    }
    if (buf) buf[n] = 0;
    int ws = pclose(f);
    *status = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    return buf;
}

static void check_cli_sweep(const char *axis) {
    char args[256];
    snprintf(args, sizeof args, "simulate --model llama-2-7b --device h200 --sweep %s --json", axis);
    int status;
    char *out = run_cli(args, &status);
    CHECK(out != NULL);
    if (!out) return;
    CHECK_EQ_INT(status, 0);
    cJSON *o = cJSON_Parse(out);
    CHECK_MSG(o != NULL, "%s: not JSON: %.200s", axis, out);
    free(out);
    if (!o) return;
    CHECK(cJSON_IsString(cJSON_GetObjectItem(o, "sweep")) && !strcmp(cJSON_GetObjectItem(o, "sweep")->valuestring, axis));
    CHECK(cJSON_GetObjectItem(o, "host_cap_bytes")->valuedouble > 0);
    cJSON *arr = cJSON_GetObjectItem(o, "strategies");
    CHECK_EQ_INT(cJSON_GetArraySize(arr), SSI_STRAT_COUNT);
    double none_value = 0;
    for (int k = 0; k < cJSON_GetArraySize(arr); k++) {
        cJSON *x = cJSON_GetArrayItem(arr, k);
        cJSON *name = cJSON_GetObjectItem(x, "name");
        CHECK(cJSON_IsString(name) && !strcmp(name->valuestring, ssi_strategy_name(k)));
        CHECK(cJSON_IsTrue(cJSON_GetObjectItem(x, "found")));
        double mult = cJSON_GetNumberValue(cJSON_GetObjectItem(x, "multiple"));
        double value = cJSON_GetNumberValue(cJSON_GetObjectItem(x, "value"));
        double iter = cJSON_GetNumberValue(cJSON_GetObjectItem(x, "iter_s"));
        double tps = cJSON_GetNumberValue(cJSON_GetObjectItem(x, "tokens_per_s"));
        double host = cJSON_GetNumberValue(cJSON_GetObjectItem(x, "host_bytes"));
        CHECK(cJSON_IsNumber(cJSON_GetObjectItem(x, "host_bytes")) && cJSON_IsNumber(cJSON_GetObjectItem(x, "stall_s")));
        if (k == 0) { none_value = value; CHECK(mult == 1.0 && host == 0); }
        else CHECK(mult >= 1.0 && fabs(mult - value / none_value) < 1e-9);
        CHECK(iter > 0 && tps > 0 && value >= 1);
        if (k == SSI_STRAT_OFFLOAD || k == SSI_STRAT_SMARTSWAP) CHECK(host > 0);
    }
    cJSON_Delete(o);
}

static void t_cli(void) {
    const char *cli = getenv("SS_CLI");
    if (!cli || access(cli, X_OK)) TEST_SKIP("SS_CLI is not set to the built smartswap (make test sets it)");
    check_cli_sweep("seq");
    check_cli_sweep("batch");
    int status;
    /* the table: five strategies, no saving does not fit and says so */
    char *out = run_cli("simulate --model llama-2-7b --device h200 --batch 4 --seq 4096", &status);
    CHECK(out && status == 0);
    if (out) {
        CHECK(strstr(out, "no saving") && strstr(out, "full recompute") && strstr(out, "save_on_cpu") &&
              strstr(out, "smartswap swap-only") && strstr(out, "smartswap hybrid"));
        CHECK(strstr(out, "no saving does not fit") != NULL);
        free(out);
    }
    /* the plot (gnuplot may be missing: then the command fails with a clear error) */
    char png[] = "/tmp/test-simulate-XXXXXX.png";
    int fd = mkstemps(png, 4);
    CHECK(fd >= 0);
    if (fd >= 0) {
        close(fd);
        char args[300];
        snprintf(args, sizeof args, "simulate --model llama-3.2-1b --batch 8 --seq 2048 --plot %s", png);
        out = run_cli(args, &status);
        free(out);
        if (access("/usr/bin/gnuplot", X_OK) == 0) {
            CHECK_EQ_INT(status, 0);
            FILE *f = fopen(png, "rb");
            unsigned char sig[8] = {0};
            CHECK(f && fread(sig, 1, 8, f) == 8 && sig[0] == 0x89 && sig[1] == 'P' && sig[2] == 'N' && sig[3] == 'G');
            if (f) fclose(f);
        }
        unlink(png);
    }
    /* bad usage: exit status 2 */
    static const char *const bad[] = {"simulate --model no-such-model", "simulate --model llama-2-7b --device tpu",
                                      "simulate --model llama-2-7b --sweep width", "simulate --model llama-2-7b --plot x.jpg",
                                      "simulate --model llama-2-7b --budget 1TiB", "simulate --layers 2",
                                      "simulate --model llama-2-7b --min-speed fast"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        out = run_cli(bad[i], &status);
        CHECK_MSG(status == 2, "'%s': status %d", bad[i], status);
        free(out);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(self_dir, sizeof self_dir, "%s", argv[0]);
    char *sl = strrchr(self_dir, '/');
    if (sl) *sl = 0;
    else snprintf(self_dir, sizeof self_dir, ".");
    RUN(t_eval_llama7b);
    RUN(t_hybrid);
    RUN(t_hybrid_spans);
    RUN(t_hybrid_span_budget);
    RUN(t_hybrid_stall);
    RUN(t_recompute_extra_forward);
    RUN(t_recompute_profile_memory);
    RUN(t_copies_bound_step_time);
    RUN(t_sweep_seq_formula);
    RUN(t_sweep_batch_formula_and_min_speed);
    RUN(t_sweep_hidden);
    RUN(t_errors);
    RUN(t_cli);
    return test_summary();
}
