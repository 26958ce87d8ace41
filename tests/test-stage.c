/* test-stage.c: the stage machine and the plan cache (src/stage.c), driven through the
 * framework API as a trainer would, with exact transition, divergence and detailed-iteration
 * counts: a steady sequence; lazy optimizer state at step 1; two sequences alternating; one
 * sequence at alternating sizes; a new sequence every iteration (the bound); a divergence in
 * the middle of an iteration noticed at that operator (with one checkpoint per operator and
 * with one every four); evaluation steps (a prefix without saves); a tail change only visible
 * at the end (a probe); LRU eviction; a planner that fails.
 *
 * The synthetic iteration: L = 4 layers, forward "linear" and "relu" (each saves one tensor),
 * backward "relu_bwd" and "linear_bwd" in reverse (each loads and releases its tensor), then
 * "adam_step". 17 operators, 8 saved tensors.
 */
#include "test.h"
#include "api.h"
#include "sim.h"

#include <math.h>

enum { L = 4, NOPS = 4 * L + 1 };

typedef struct spec {
    uint64_t bytes;      /* per saved tensor */
    int      rename_op;  /* operator index whose name becomes rename_id; -1 none */
    uint32_t rename_id;
    int      extra;      /* "zeros_like" operators before the step (lazy optimizer state) */
    int      eval;       /* forward only, nothing saved */
    int64_t  len;        /* > 0: "linear" saves len x 8 and "relu" len x len (bytes unused) */
    int      declare;    /* with len: declared before the iteration (ss_ctx_sizes) */
    double   spin_s;     /* > 0: the caller's own work after each operator, in seconds */
} spec;

static uint32_t ID_LIN, ID_ACT, ID_ACTB, ID_LINB, ID_STEP, ID_ZEROS;
static char buf[1 << 16];

static void intern_all(ss_ctx_t *ctx) {
    CHECK_OK(ss_ctx_intern(ctx, "linear", &ID_LIN));
    CHECK_OK(ss_ctx_intern(ctx, "relu", &ID_ACT));
    CHECK_OK(ss_ctx_intern(ctx, "relu_bwd", &ID_ACTB));
    CHECK_OK(ss_ctx_intern(ctx, "linear_bwd", &ID_LINB));
    CHECK_OK(ss_ctx_intern(ctx, "adam_step", &ID_STEP));
    CHECK_OK(ss_ctx_intern(ctx, "zeros_like", &ID_ZEROS));
}

static uint32_t named(ss_ctx_t *ctx, const char *name) {
    uint32_t id = 0;
    CHECK_OK(ss_ctx_intern(ctx, name, &id));
    return id;
}

static ss_ctx_t *mk(int warmup, int max_detailed, int cache) {
    ss_ctx_config c = ss_ctx_config_default();
    c.opts.warmup_iters = warmup;
    c.opts.max_detailed = max_detailed;
    c.opts.plan_cache_size = cache;
    ss_ctx_t *ctx = NULL;
    CHECK_OK(ss_ctx_new(&c, &ctx));
    intern_all(ctx);
    return ctx;
}

static spec plain(void) { spec s = {4096, -1, 0, 0, 0, 0, 0, 0}; return s; }

static void spin(double s);

static void op(ss_ctx_t *ctx, const spec *s, int *idx, uint32_t id, uint64_t site) {
    if (*idx == s->rename_op) id = s->rename_id;
    CHECK_OK(ss_ctx_op(ctx, id, site));
    if (s->spin_s > 0) spin(s->spin_s);
    (*idx)++;
}

/* The iteration's last operator and its end; the report into *rep (may be NULL). */
static void end_iter(ss_ctx_t *ctx, ss_iter_report *rep) {
    CHECK_OK(ss_ctx_op(ctx, ID_STEP, 600));
    ss_iter_report r;
    CHECK_OK(ss_ctx_iter_end(ctx, &r));
    if (rep) *rep = r;
}

static void run_iter(ss_ctx_t *ctx, const spec *s, ss_iter_report *rep) {
    uint64_t h[2 * L];
    int64_t n = s->len;
    int64_t shape[2][2] = {{n ? n : (int64_t)(s->bytes / 4), n ? 8 : 1}, {n ? n : (int64_t)(s->bytes / 4), n ? n : 1}};
    uint64_t bytes[2] = {n ? (uint64_t)(n * 8 * 4) : s->bytes, n ? (uint64_t)(n * n * 4) : s->bytes};
    int idx = 0;
    if (n && s->declare) CHECK_OK(ss_ctx_sizes(ctx, &n, 1));
    CHECK_OK(ss_ctx_iter_begin(ctx));
    for (int l = 0; l < L; l++) {
        op(ctx, s, &idx, ID_LIN, 100 + l);
        if (!s->eval) CHECK_OK(ss_ctx_save(ctx, buf + 64 * (2 * l), bytes[0], SS_DTYPE_F32, 2, shape[0], 0, &h[2 * l]));
        op(ctx, s, &idx, ID_ACT, 200 + l);
        if (!s->eval) CHECK_OK(ss_ctx_save(ctx, buf + 64 * (2 * l + 1), bytes[1], SS_DTYPE_F32, 2, shape[1], 0, &h[2 * l + 1]));
    }
    if (!s->eval) {
        for (int l = L - 1; l >= 0; l--) {
            void *p = NULL;
            op(ctx, s, &idx, ID_ACTB, 300 + l);
            CHECK_OK(ss_ctx_load(ctx, h[2 * l + 1], NULL, &p));
            CHECK(p == buf + 64 * (2 * l + 1));
            CHECK_OK(ss_ctx_release(ctx, h[2 * l + 1]));
            op(ctx, s, &idx, ID_LINB, 400 + l);
            CHECK_OK(ss_ctx_load(ctx, h[2 * l], NULL, &p));
            CHECK(p == buf + 64 * (2 * l));
            CHECK_OK(ss_ctx_release(ctx, h[2 * l]));
        }
        for (int e = 0; e < s->extra; e++) op(ctx, s, &idx, ID_ZEROS, 500 + e);
        op(ctx, s, &idx, ID_STEP, 600);
    }
    ss_iter_report r;
    CHECK_OK(ss_ctx_iter_end(ctx, &r));
    if (rep) *rep = r;
}

static ss_ctx_stats stats(ss_ctx_t *ctx) {
    ss_ctx_stats s;
    memset(&s, 0xAB, sizeof s);
    CHECK_OK(ss_ctx_get_stats(ctx, &s));
    return s;
}

/* A string with one character per iteration: D detailed from op 0, d from a divergence,
 * . light. */
static void pattern(char *out, int i, const ss_iter_report *r) {
    out[i] = r->detailed == 1 ? 'D' : r->detailed == 2 ? 'd' : '.';
    out[i + 1] = 0;
}

static void t_steady(void) {
    ss_ctx_t *ctx = mk(2, 3, 8);
    spec s = plain();
    ss_iter_report r;
    char pat[64];
    const int want_stage[10] = {0, 0, 1, 2, 2, 2, 2, 2, 2, 2};
    CHECK_EQ_INT(ss_ctx_stage(ctx), SS_STAGE_WARMUP);
    for (int i = 0; i < 10; i++) {
        run_iter(ctx, &s, &r);
        pattern(pat, i, &r);
        CHECK_EQ_INT(r.stage, want_stage[i]);
        CHECK_EQ_U64(r.iter, i);
        CHECK_EQ_U64(r.nops, NOPS);
        CHECK_EQ_U64(r.nsaves, 2 * L);
        CHECK_EQ_U64(r.nloads, 2 * L);
        CHECK_EQ_U64(r.nreleases, 2 * L);
        CHECK_EQ_U64(r.saved_bytes, 2 * L * 4096);
        CHECK_EQ_U64(r.diverged_at, UINT32_MAX);
        CHECK_EQ_INT(r.plan_event, i < 2 ? SS_PLAN_NONE : i == 2 ? SS_PLAN_NEW : SS_PLAN_SAME);
    }
    CHECK(strcmp(pat, "..D.......") == 0);
    CHECK_EQ_INT(ss_ctx_stage(ctx), SS_STAGE_STABLE);
    CHECK(strcmp(ss_stage_name(ss_ctx_stage(ctx)), "stable") == 0);
    ss_ctx_stats st = stats(ctx);
    CHECK_EQ_U64(st.iters, 10);
    CHECK_EQ_U64(st.ops, 10 * NOPS);
    CHECK_EQ_U64(st.iters_warmup, 2);
    CHECK_EQ_U64(st.warmup_to_genpolicy, 1);
    CHECK_EQ_U64(st.iters_genpolicy, 1);
    CHECK_EQ_U64(st.genpolicy_to_stable, 1);
    CHECK_EQ_U64(st.iters_stable, 7);
    CHECK_EQ_U64(st.detailed_iters, 1);
    CHECK_EQ_U64(st.detailed_partial, 0);
    CHECK_EQ_U64(st.plans_made, 1);
    CHECK_EQ_U64(st.cache_misses, 1);
    CHECK_EQ_U64(st.cache_hits, 0);
    CHECK_EQ_U64(st.cache_entries, 1);
    CHECK_EQ_U64(st.divergences, 0);
    CHECK_EQ_U64(st.mid_switches, 0);
    CHECK_EQ_U64(st.probes, 0);
    CHECK_EQ_U64(st.bound_hits, 0);
    /* the plan: one checkpoint per operator, the last one the sequence hash */
    const ss_plan *pl = ssi_stage_plan(ctx);
    CHECK(pl != NULL);
    if (pl) {
        CHECK_EQ_U64(pl->nops, NOPS);
        CHECK_EQ_U64(pl->nck, NOPS);
        CHECK_EQ_U64(pl->ck_every, 1);
        CHECK_EQ_U64(pl->ck[NOPS - 1], r.seq_hash);
        CHECK_EQ_U64(pl->seq_hash, r.seq_hash);
    }
    ss_ctx_free(ctx);
}

static void t_lazy_state(void) {
    /* default warmup: the first iteration's extra operators are never profiled */
    ss_ctx_t *ctx = mk(2, 3, 8);
    spec lazy = plain(), s = plain();
    lazy.extra = 2;
    ss_iter_report r;
    char pat[64];
    for (int i = 0; i < 8; i++) {
        run_iter(ctx, i == 0 ? &lazy : &s, &r);
        pattern(pat, i, &r);
    }
    CHECK(strcmp(pat, "..D.....") == 0);
    ss_ctx_stats st = stats(ctx);
    CHECK_EQ_U64(st.detailed_iters, 1);
    CHECK_EQ_U64(st.plans_made, 1);
    CHECK_EQ_U64(st.divergences, 0);
    ss_ctx_free(ctx);

    /* no warmup: step 1 is planned, step 2 skips its two extra operators (at op 16): it runs
     * under that plan by fuzzy matching, without detail; step 3 skips them again: a structure
     * that comes back is profiled, in step 4 from op 0; then stable */
    ctx = mk(0, 3, 8);
    for (int i = 0; i < 8; i++) {
        run_iter(ctx, i == 0 ? &lazy : &s, &r);
        pattern(pat, i, &r);
        if (i == 1) {
            CHECK_EQ_U64(r.diverged_at, 16);
            CHECK_EQ_INT(r.plan_event, SS_PLAN_PENDING);
            CHECK_EQ_INT(r.detailed, 0);
        }
        if (i == 3) CHECK_EQ_INT(r.plan_event, SS_PLAN_NEW);
    }
    CHECK_MSG(strcmp(pat, "D..D....") == 0, "%s", pat);
    st = stats(ctx);
    CHECK_EQ_U64(st.iters_warmup, 0);
    CHECK_EQ_U64(st.warmup_to_genpolicy, 0);
    CHECK_EQ_U64(st.genpolicy_to_stable, 1);
    CHECK_EQ_U64(st.detailed_iters, 2);
    CHECK_EQ_U64(st.detailed_partial, 0);
    CHECK_EQ_U64(st.fuzzy_runs, 1);
    CHECK_EQ_U64(st.plans_made, 2);
    CHECK_EQ_U64(st.divergences, 2);
    CHECK_EQ_U64(st.div_at_op, 2);
    CHECK_EQ_U64(st.cache_entries, 2);
    /* the plan made in step 2 is the steady sequence: 17 ops, last op adam_step */
    const ss_profile *p = ctx->st.cache[ctx->st.cur].prof;
    CHECK_EQ_U64(p->nops, NOPS);
    CHECK_EQ_U64(p->ops[16].name, ID_STEP);
    CHECK_EQ_U64(p->ntensors, 2 * L);
    CHECK_EQ_U64(p->nuses, 2 * L);
    ss_ctx_free(ctx);
}

static void t_alternating(void) {
    ss_ctx_t *ctx = mk(2, 3, 8);
    spec a = plain(), b = plain();
    b.rename_op = 5;
    b.rename_id = named(ctx, "gelu");
    ss_iter_report r;
    char pat[64];
    for (int i = 0; i < 12; i++) {
        run_iter(ctx, (i & 1) ? &b : &a, &r);
        pattern(pat, i, &r);
        if (i == 3) {
            CHECK_EQ_U64(r.diverged_at, 5);
            CHECK_EQ_INT(r.plan_event, SS_PLAN_NEW);
            CHECK_EQ_U64(r.mid_switches, 0);
        }
        if (i >= 4) {   /* each switches to the other cached plan at op 5, without profiling */
            CHECK_EQ_U64(r.diverged_at, 5);
            CHECK_EQ_U64(r.mid_switches, 1);
            CHECK_EQ_INT(r.plan_event, SS_PLAN_HIT);
        }
    }
    CHECK(strcmp(pat, "..Dd........") == 0);
    ss_ctx_stats st = stats(ctx);
    CHECK_EQ_U64(st.detailed_iters, 2);
    CHECK_EQ_U64(st.detailed_partial, 1);
    CHECK_EQ_U64(st.plans_made, 2);
    CHECK_EQ_U64(st.divergences, 9);
    CHECK_EQ_U64(st.div_at_op, 9);
    CHECK_EQ_U64(st.mid_switches, 8);
    CHECK_EQ_U64(st.plan_switches, 8);
    CHECK_EQ_U64(st.cache_misses, 2);
    CHECK_EQ_U64(st.cache_hits, 0);
    CHECK_EQ_U64(st.probes, 0);
    ss_ctx_free(ctx);
}

static void t_sizes(void) {
    ss_ctx_t *ctx = mk(2, 3, 8);
    spec s1 = plain(), s2 = plain();
    s2.bytes = 8192;
    ss_iter_report r, r2 = {0};
    char pat[64];
    for (int i = 0; i < 12; i++) {
        run_iter(ctx, (i & 1) ? &s2 : &s1, &r);
        pattern(pat, i, &r);
        if (i == 3) {   /* the second size: light, the structure's envelope derived from the first's profile */
            CHECK_EQ_U64(r.diverged_at, 0);   /* the first save, in operator 0 */
            CHECK_EQ_INT(r.plan_event, SS_PLAN_NEW);
            CHECK_EQ_INT(r.detailed, 0);
        }
        if (i == 2) r2 = r;
        if (i >= 4) {   /* both sizes run under the envelope (8192 bytes holds 4096): no switch */
            CHECK_EQ_INT(r.plan_event, SS_PLAN_SAME);
            CHECK_EQ_U64(r.mid_switches, 0);
        }
    }
    CHECK(strcmp(pat, "..D.........") == 0);
    CHECK(r.seq_hash == r2.seq_hash);   /* one sequence ... */
    CHECK(r.size_sig != r2.size_sig);   /* ... two sizes */
    ss_ctx_stats st = stats(ctx);
    CHECK_EQ_U64(st.detailed_iters, 1);
    CHECK_EQ_U64(st.derived, 1);
    CHECK_EQ_U64(st.hits_matched, 1);   /* iteration 3 */
    CHECK_EQ_U64(st.hits_derived, 8);   /* iterations 4..11 under the envelope */
    CHECK_EQ_U64(st.plans_made, 2);
    CHECK_EQ_U64(st.divergences, 1);
    CHECK_EQ_U64(st.div_at_save, 1);
    CHECK_EQ_U64(st.div_at_op, 0);
    CHECK_EQ_U64(st.mid_switches, 0);
    CHECK_EQ_U64(st.cache_entries, 2);
    ss_ctx_free(ctx);

    /* a third, larger size grows the envelope once (light, no detail), then runs under it */
    ctx = mk(2, 3, 8);
    spec s3 = plain();
    s3.bytes = 16384;
    const spec *seq[10] = {&s1, &s1, &s1, &s2, &s1, &s3, &s2, &s1, &s3, &s2};
    for (int i = 0; i < 10; i++) {
        run_iter(ctx, seq[i], &r);
        if (i == 5) { CHECK_EQ_INT(r.plan_event, SS_PLAN_NEW); CHECK_EQ_INT(r.detailed, 0); }
        if (i > 5) CHECK_EQ_INT(r.plan_event, SS_PLAN_SAME);
    }
    st = stats(ctx);
    CHECK_EQ_U64(st.detailed_iters, 1);
    CHECK_EQ_U64(st.derived, 2);
    CHECK_EQ_U64(st.cache_entries, 2);   /* the detailed plan and the envelope, replaced in place */
    ss_ctx_free(ctx);

    /* sizes within one bucket (4096 vs 4160 bytes: 1.6 %) are one plan */
    ctx = mk(2, 3, 8);
    s2.bytes = 4160;
    for (int i = 0; i < 8; i++) run_iter(ctx, (i & 1) ? &s2 : &s1, &r);
    st = stats(ctx);
    CHECK_EQ_U64(st.detailed_iters, 1);
    CHECK_EQ_U64(st.divergences, 0);
    ss_ctx_free(ctx);
}

/* SMARTSWAP_REPLAN, bench-varying's baselines: off keeps the first plan (no detail, no plan for
 * the second size); length re-plans the second size in detail (no derivation); a bad value is
 * refused. */
/* A loop at one call site (a mixture-of-experts layer's experts): K saves by operator "expert"
 * at site 700, each of its own size (the tokens routed to it), then "expert_bwd" loads them in
 * reverse. With skip = k, expert k got no tokens: its operator and save do not happen. */
enum { K = 4 };
static void run_experts(ss_ctx_t *ctx, const uint64_t bytes[K], int skip, ss_iter_report *rep) {
    uint32_t ex = named(ctx, "expert"), exb = named(ctx, "expert_bwd");
    uint64_t h[K];
    CHECK_OK(ss_ctx_iter_begin(ctx));
    CHECK_OK(ss_ctx_op(ctx, ID_LIN, 100));
    for (int k = 0; k < K; k++) {
        if (k == skip) continue;
        int64_t shape[2] = {(int64_t)(bytes[k] / 4), 1};
        CHECK_OK(ss_ctx_op(ctx, ex, 700));
        CHECK_OK(ss_ctx_save(ctx, buf + 64 * k, bytes[k], SS_DTYPE_F32, 2, shape, 0, &h[k]));
    }
    for (int k = K - 1; k >= 0; k--) {
        if (k == skip) continue;
        void *p = NULL;
        CHECK_OK(ss_ctx_op(ctx, exb, 800));
        CHECK_OK(ss_ctx_load(ctx, h[k], NULL, &p));
        CHECK(p == buf + 64 * k);
        CHECK_OK(ss_ctx_release(ctx, h[k]));
    }
    end_iter(ctx, rep);
}

/* The envelope holds each save of a call site at the largest size any save of that site had:
 * routing that moves tokens from one expert to another stays within it (no growth, no detail);
 * an expert with no tokens runs under it by fuzzy matching; an evaluation-like iteration that
 * saves nothing and changed structure probes nothing. */
static ss_status plan_every4(void *user, const ss_profile *prof, ss_plan **out);
static void t_site_envelope(void) {
    ss_ctx_t *ctx = mk(2, 3, 8);
    /* one checkpoint every 4 operators, so that a short iteration can end before its first */
    int calls = 0;
    ssi_planner pl = {plan_every4, NULL, &calls};
    CHECK_OK(ssi_ctx_set_planner(ctx, &pl));
    ss_iter_report r;
    const uint64_t a[K] = {4096, 4096, 4096, 4096}, b[K] = {8192, 2048, 4096, 4096},
                   c[K] = {2048, 4096, 8192, 2048}, d[K] = {4096, 8192, 8192, 8192},
                   e[K] = {4096, 16384, 4096, 4096};
    for (int i = 0; i < 3; i++) run_experts(ctx, a, -1, &r);   /* warm-up, then detailed */
    CHECK_EQ_INT(r.detailed, 1);
    run_experts(ctx, b, -1, &r);   /* a second size: the envelope, derived */
    CHECK_EQ_INT(r.plan_event, SS_PLAN_NEW);
    CHECK_EQ_INT(r.detailed, 0);
    ss_ctx_stats st = stats(ctx);
    CHECK_EQ_U64(st.derived, 1);
    /* 8192 moved to expert 2, then to three experts: within the site's largest (a per-ordinal
     * envelope would grow at both) */
    run_experts(ctx, c, -1, &r);
    CHECK_EQ_INT(r.plan_event, SS_PLAN_SAME);
    run_experts(ctx, d, -1, &r);
    CHECK_EQ_INT(r.plan_event, SS_PLAN_SAME);
    /* expert 1 gets no tokens: fuzzy under the envelope, no detail, then or after */
    run_experts(ctx, c, 1, &r);
    CHECK_EQ_INT(r.detailed, 0);
    CHECK_EQ_INT(r.plan_event, SS_PLAN_SAME);
    run_experts(ctx, c, 1, &r);
    CHECK_EQ_INT(r.detailed, 0);
    run_experts(ctx, a, -1, &r);
    CHECK_EQ_INT(r.detailed, 0);
    CHECK_EQ_INT(r.plan_event, SS_PLAN_SAME);
    st = stats(ctx);
    CHECK_EQ_U64(st.derived, 1);
    CHECK_EQ_U64(st.detailed_iters, 1);
    /* a larger save than the site has seen, in a run that skips an expert: the envelope grows
     * (light), and the full structure then runs under it */
    run_experts(ctx, e, 3, &r);
    CHECK_EQ_INT(r.plan_event, SS_PLAN_NEW);
    CHECK_EQ_INT(r.detailed, 0);
    run_experts(ctx, e, -1, &r);
    CHECK_EQ_INT(r.plan_event, SS_PLAN_SAME);
    run_experts(ctx, c, -1, &r);
    CHECK_EQ_INT(r.plan_event, SS_PLAN_SAME);
    /* an iteration that saves nothing, of a structure not seen, ending before the first
     * checkpoint (an evaluation step whose experts routed otherwise): no probe, and the next
     * iteration runs under the envelope */
    uint32_t ex = named(ctx, "expert");
    CHECK_OK(ss_ctx_iter_begin(ctx));
    CHECK_OK(ss_ctx_op(ctx, ID_LIN, 100));
    CHECK_OK(ss_ctx_op(ctx, ex, 700));
    CHECK_OK(ss_ctx_op(ctx, ID_ACT, 900));
    CHECK_OK(ss_ctx_iter_end(ctx, &r));
    CHECK_EQ_INT(r.detailed, 0);
    CHECK_EQ_INT(r.plan_event, SS_PLAN_PENDING);
    run_experts(ctx, d, -1, &r);
    CHECK_EQ_INT(r.detailed, 0);
    CHECK_EQ_INT(r.plan_event, SS_PLAN_SAME);
    st = stats(ctx);
    CHECK_EQ_U64(st.detailed_iters, 1);
    CHECK_EQ_U64(st.derived, 2);
    ss_ctx_free(ctx);
}

/* Sizes up front (ss_ctx_sizes): an iteration of length n (run_iter with spec.len) saves, per
 * layer, "linear" (n x 8) and "relu" (n x n: its bytes grow with the square of the length);
 * declare: the length is passed before the iteration begins. */
static void run_len(ss_ctx_t *ctx, int64_t n, int declare, ss_iter_report *rep) {
    spec s = plain();
    s.len = n;
    s.declare = declare;
    run_iter(ctx, &s, rep);
}

/* With the lengths declared, a longer length than any before is planned at iteration begin from
 * the two lengths seen (each dimension linear in the length, so n x n is predicted exactly): the
 * iteration runs under that envelope with no save beyond it (SS_PLAN_SAME, no divergence). Not
 * declared, the same sequence finds out at its saves and grows the envelope at its end (NEW). Only one
 * length seen: nothing to extrapolate from. Bad calls are refused. */
static void t_sizes_ahead(void) {
    static const int64_t lens[8] = {16, 16, 16, 32, 64, 48, 100, 64};
    for (int declare = 0; declare < 2; declare++) {
        ss_ctx_t *ctx = mk(2, 3, 8);
        ss_iter_report r;
        char pat[16];
        uint64_t div_before = 0;
        for (int i = 0; i < 8; i++) {
            if (i == 4 || i == 6) div_before = stats(ctx).divergences;
            run_len(ctx, lens[i], declare, &r);
            pattern(pat, i, &r);
            if (i == 3) CHECK_EQ_INT(r.plan_event, SS_PLAN_NEW);   /* the envelope, from 16 and 32 */
            if (i == 4 || i == 6) {   /* 64, then 100: longer than any before */
                CHECK_EQ_INT(r.plan_event, declare ? SS_PLAN_SAME : SS_PLAN_NEW);
                uint64_t dv = stats(ctx).divergences - div_before;
                if (declare) CHECK_MSG(dv == 0, "iteration %d: %llu divergences", i, (unsigned long long)dv);
            }
            if (i == 5 || i == 7) CHECK_EQ_INT(r.plan_event, SS_PLAN_SAME);   /* within the envelope */
        }
        CHECK_MSG(strcmp(pat, "..D.....") == 0, "%s", pat);
        ss_ctx_stats st = stats(ctx);
        CHECK_EQ_U64(st.detailed_iters, 1);
        CHECK_EQ_U64(st.sized_ahead, declare ? 2 : 0);
        CHECK_EQ_U64(st.derived, 3);   /* the envelope at 32, then at 64 and 100 (ahead or after) */
        ss_ctx_free(ctx);
    }
    /* one length seen before a longer one: no reference, the end grows the envelope */
    ss_ctx_t *ctx = mk(2, 3, 8);
    ss_iter_report r;
    for (int i = 0; i < 3; i++) run_len(ctx, 16, 1, &r);
    run_len(ctx, 64, 1, &r);
    CHECK_EQ_INT(r.plan_event, SS_PLAN_NEW);
    CHECK_EQ_U64(stats(ctx).sized_ahead, 0);
    int64_t bad[2] = {8, 0};
    CHECK_STATUS(ss_ctx_sizes(ctx, bad, 2), SS_ERR_INVALID);
    CHECK_STATUS(ss_ctx_sizes(ctx, NULL, 1), SS_ERR_INVALID);
    CHECK_OK(ss_ctx_iter_begin(ctx));
    CHECK_STATUS(ss_ctx_sizes(ctx, bad, 1), SS_ERR_STATE);
    CHECK_OK(ss_ctx_iter_end(ctx, NULL));
    ss_ctx_free(ctx);

    /* length buckets, one per doubling: 16 and 32 are two buckets. The second bucket's envelope
     * is made from 32's own sizes (not raised to the other bucket's); a later 16 gets its bucket's
     * envelope derived at iteration begin from the line through 16 and 32, a later 32 switches
     * back to its bucket's, and 64 gets a third, derived: no save beyond its plan in any */
    ss_ctx_config c = ss_ctx_config_default();
    c.opts.warmup_iters = 2;
    c.opts.len_buckets = 1;
    CHECK_OK(ss_ctx_new(&c, &ctx));
    intern_all(ctx);
    static const int64_t bl[8] = {16, 16, 16, 32, 16, 32, 64, 16};
    for (int i = 0; i < 8; i++) {
        run_len(ctx, bl[i], 1, &r);
        if (i == 3) CHECK_EQ_INT(r.plan_event, SS_PLAN_NEW);
        if (i >= 4) CHECK_MSG(r.plan_event == SS_PLAN_SAME || r.plan_event == SS_PLAN_HIT, "iteration %d: event %d", i,
                              r.plan_event);
        if (i >= 4) CHECK_EQ_INT(r.detailed, 0);
    }
    ss_ctx_stats st = stats(ctx);
    CHECK_EQ_U64(st.detailed_iters, 1);
    CHECK_EQ_U64(st.sized_ahead, 2);      /* the 16 bucket's and the 64 bucket's envelopes */
    CHECK_EQ_U64(st.cache_entries, 4);    /* the detailed plan and three envelopes */
    CHECK_EQ_U64(st.divergences, 1);      /* iteration 3 only */
    ss_ctx_free(ctx);
}

static void t_replan_variants(void) {
    spec s1 = plain(), s2 = plain();
    s2.bytes = 8192;
    ss_iter_report r;
    char pat[64];
    setenv("SMARTSWAP_REPLAN", "off", 1);
    ss_ctx_t *ctx = mk(2, 3, 8);
    for (int i = 0; i < 10; i++) { run_iter(ctx, (i & 1) ? &s2 : &s1, &r); pattern(pat, i, &r); }
    CHECK_MSG(strcmp(pat, "..D.......") == 0, "%s", pat);
    ss_ctx_stats st = stats(ctx);
    CHECK_EQ_U64(st.plans_made, 1);
    CHECK_EQ_U64(st.derived, 0);
    ss_ctx_free(ctx);
    setenv("SMARTSWAP_REPLAN", "length", 1);
    ctx = mk(2, 3, 8);
    for (int i = 0; i < 10; i++) { run_iter(ctx, (i & 1) ? &s2 : &s1, &r); pattern(pat, i, &r); }
    CHECK_MSG(strcmp(pat, "..Dd......") == 0, "%s", pat);
    st = stats(ctx);
    CHECK_EQ_U64(st.plans_made, 2);
    CHECK_EQ_U64(st.derived, 0);
    CHECK(st.mid_switches >= 6);
    ss_ctx_free(ctx);
    setenv("SMARTSWAP_REPLAN", "sometimes", 1);
    ss_ctx_config c = ss_ctx_config_default();
    ss_ctx_t *bad = NULL;
    CHECK_STATUS(ss_ctx_new(&c, &bad), SS_ERR_INVALID);
    CHECK(bad == NULL);
    unsetenv("SMARTSWAP_REPLAN");
}

static void t_never_repeats(void) {
    ss_ctx_t *ctx = mk(2, 3, 8);
    ss_iter_report r;
    char pat[64], nm[32];
    for (int i = 0; i < 40; i++) {
        spec s = plain();
        s.rename_op = 3;
        snprintf(nm, sizeof nm, "unique%d", i);
        s.rename_id = named(ctx, nm);
        run_iter(ctx, &s, &r);
        pattern(pat, i, &r);
        CHECK_EQ_INT(r.stage, i < 2 ? SS_STAGE_WARMUP : i == 2 ? SS_STAGE_GENPOLICY : SS_STAGE_STABLE);
        if (i > 2 && r.detailed) CHECK_EQ_U64(r.diverged_at, 3);
    }
    /* 3 detailed, then 3 light, 3 detailed, 6 light, 3 detailed, 12 light, 3 detailed, ... */
    CHECK_MSG(strcmp(pat, "..Ddd...ddd......ddd............ddd.....") == 0, "%s", pat);
    ss_ctx_stats st = stats(ctx);
    CHECK_EQ_U64(st.detailed_iters, 12);
    CHECK_EQ_U64(st.detailed_partial, 11);
    CHECK_EQ_U64(st.plans_made, 12);
    CHECK_EQ_U64(st.bound_hits, 4);
    CHECK_EQ_U64(st.iters_cooldown, 26);
    CHECK_EQ_U64(st.cache_evictions, 4);
    CHECK_EQ_U64(st.cache_entries, 8);
    CHECK_EQ_U64(st.divergences, 37);
    CHECK_EQ_U64(st.div_at_op, 37);
    CHECK_EQ_U64(st.cache_misses, 38);
    CHECK_EQ_U64(st.probes, 0);
    CHECK_EQ_U64(st.iters_stable, 37);

    /* a known sequence comes back during a cool-down: it is recognised and the bound resets */
    spec a = plain();
    run_iter(ctx, &a, &r);   /* unseen as such (op 3 was always renamed): cooling down, light */
    CHECK_EQ_INT(r.detailed, 0);
    ss_ctx_free(ctx);
}

/* A planner that keeps one checkpoint every 4 operators. */
static ss_status plan_every4(void *user, const ss_profile *prof, ss_plan **out) {
    int *calls = user;
    (*calls)++;
    ss_status st = ssi_plan_default(NULL, prof, out);
    if (st) return st;
    ss_plan *pl = *out;
    uint32_t n = pl->nops / 4;
    for (uint32_t j = 0; j < n; j++) pl->ck[j] = pl->ck[4 * j + 3];
    pl->ck_every = 4;
    pl->nck = n;
    return SS_OK;
}

static void t_divergence_at_op(void) {
    /* one checkpoint per operator: noticed at the operator itself */
    ss_ctx_t *ctx = mk(0, 3, 8);
    spec a = plain(), d = plain();
    d.rename_op = 11;
    d.rename_id = named(ctx, "dropout_bwd");
    ss_iter_report r;
    run_iter(ctx, &a, &r);
    CHECK_EQ_INT(r.plan_event, SS_PLAN_NEW);
    run_iter(ctx, &a, &r);
    CHECK_EQ_INT(r.plan_event, SS_PLAN_SAME);
    run_iter(ctx, &d, &r);
    CHECK_EQ_U64(r.diverged_at, 11);
    CHECK_EQ_INT(r.detailed, 2);
    CHECK_EQ_INT(r.plan_event, SS_PLAN_NEW);
    /* the new profile: ops 0..10 from the plan, op 11 renamed, the rest recorded */
    const ss_profile *p = ctx->st.cache[ctx->st.cur].prof;
    CHECK_EQ_U64(p->nops, NOPS);
    CHECK_EQ_U64(p->ops[11].name, d.rename_id);
    CHECK_EQ_U64(p->ops[10].name, ID_ACTB);
    CHECK_EQ_U64(p->ops[12].name, ID_ACTB);
    CHECK_EQ_U64(p->ops[12].site, 301);
    CHECK_EQ_U64(p->ops[16].name, ID_STEP);
    CHECK_EQ_U64(p->ntensors, 2 * L);
    CHECK_EQ_U64(p->nuses, 2 * L);   /* prefix uses (ops 8..10) and recorded ones (11..15) */
    for (uint32_t t = 0; t < p->ntensors; t++) {
        CHECK_EQ_U64(p->tensors[t].nuses, 1);
        CHECK_EQ_U64(p->tensors[t].release, p->uses[p->tensors[t].use_off]);
    }
    CHECK_EQ_U64(p->seq_hash, r.seq_hash);
    CHECK_EQ_U64(ssi_profile_running_hashes(p, NULL), r.seq_hash);
    run_iter(ctx, &d, &r);
    CHECK_EQ_INT(r.plan_event, SS_PLAN_SAME);
    ss_ctx_stats st = stats(ctx);
    CHECK_EQ_U64(st.detailed_iters, 2);
    CHECK_EQ_U64(st.div_at_op, 1);
    ss_ctx_free(ctx);

    /* one checkpoint every 4 operators: a change at op 9 is seen at the checkpoint after op 11,
     * and the ring of recent operators places it at op 9 exactly */
    ctx = mk(0, 3, 8);
    int calls = 0;
    ssi_planner pl = {plan_every4, NULL, &calls};
    CHECK_OK(ssi_ctx_set_planner(ctx, &pl));
    d.rename_op = 9;
    d.rename_id = named(ctx, "dropout_bwd");
    run_iter(ctx, &a, &r);
    CHECK_EQ_INT(calls, 1);
    CHECK_EQ_U64(ssi_stage_plan(ctx)->ck_every, 4);
    CHECK_EQ_U64(ssi_stage_plan(ctx)->nck, 4);
    run_iter(ctx, &d, &r);
    CHECK_EQ_U64(r.diverged_at, 9);
    CHECK_EQ_INT(r.plan_event, SS_PLAN_NEW);
    CHECK_EQ_INT(calls, 2);
    p = ctx->st.cache[ctx->st.cur].prof;
    CHECK_EQ_U64(p->ops[8].name, ID_ACTB);
    CHECK_EQ_U64(p->ops[9].name, d.rename_id);
    CHECK_EQ_U64(p->ops[10].name, ID_ACTB);
    CHECK_EQ_U64(p->ops[11].name, ID_LINB);
    CHECK_EQ_U64(ssi_profile_running_hashes(p, NULL), r.seq_hash);
    run_iter(ctx, &a, &r);   /* back to a: the cached plan matches the prefix in flight */
    CHECK_EQ_INT(r.plan_event, SS_PLAN_HIT);
    CHECK_EQ_U64(r.mid_switches, 1);
    CHECK_EQ_INT(r.detailed, 0);

    /* a change in the unchecked tail (op 16, after the last checkpoint at op 15) shows only at
     * the end: the next iteration is a probe, recorded from op 0 */
    spec t = plain();
    t.rename_op = 16;
    t.rename_id = named(ctx, "sgd_step");
    run_iter(ctx, &t, &r);
    CHECK_EQ_INT(r.plan_event, SS_PLAN_PENDING);
    CHECK_EQ_U64(r.diverged_at, NOPS);
    run_iter(ctx, &t, &r);
    CHECK_EQ_INT(r.detailed, 1);
    CHECK_EQ_INT(r.plan_event, SS_PLAN_NEW);
    run_iter(ctx, &t, &r);
    CHECK_EQ_INT(r.plan_event, SS_PLAN_SAME);
    ss_ctx_stats st2 = stats(ctx);
    CHECK_EQ_U64(st2.probes, 1);
    CHECK_EQ_U64(st2.div_at_end, 1);
    CHECK_EQ_U64(st2.detailed_iters, 3);
    CHECK_EQ_U64(st2.plans_made, 3);
    ss_ctx_free(ctx);
}

static void t_eval_steps(void) {
    ss_ctx_t *ctx = mk(2, 3, 8);
    spec tr = plain(), ev = plain();
    ev.eval = 1;
    ss_iter_report r;
    char pat[64], ev_pat[64] = "";
    for (int i = 0; i < 12; i++) {
        int is_eval = i % 3 == 0 && i > 0;
        run_iter(ctx, is_eval ? &ev : &tr, &r);
        pattern(pat, i, &r);
        size_t k = strlen(ev_pat);
        ev_pat[k] = "-=HNP"[r.plan_event];
        ev_pat[k + 1] = 0;
        if (is_eval) CHECK_EQ_U64(r.nops, 2 * L);
    }
    /* 3: the eval step is a prefix of the training step: planned from it without detail;
     * later eval steps hit; training steps switch back at their first save */
    CHECK(strcmp(pat, "..D.........") == 0);
    CHECK_MSG(strcmp(ev_pat, "--NNH=HH=HH=") == 0, "%s", ev_pat);
    ss_ctx_stats st = stats(ctx);
    CHECK_EQ_U64(st.detailed_iters, 1);
    CHECK_EQ_U64(st.prefix_derived, 1);
    CHECK_EQ_U64(st.plans_made, 2);
    CHECK_EQ_U64(st.div_at_end, 3);
    CHECK_EQ_U64(st.div_at_save, 3);
    CHECK_EQ_U64(st.mid_switches, 3);
    CHECK_EQ_U64(st.cache_hits, 2);
    ss_ctx_free(ctx);
}

static void t_lru(void) {
    /* three sequences in turn through a cache of two: each evicts the least recently used */
    ss_ctx_t *ctx = mk(0, 1000, 2);
    spec s[3] = {plain(), plain(), plain()};
    for (int k = 0; k < 3; k++) {
        char nm[16];
        snprintf(nm, sizeof nm, "variant%d", k);
        s[k].rename_op = 5;
        s[k].rename_id = named(ctx, nm);
    }
    ss_iter_report r;
    for (int i = 0; i < 9; i++) {
        run_iter(ctx, &s[i % 3], &r);
        CHECK_EQ_INT(r.plan_event, SS_PLAN_NEW);
    }
    ss_ctx_stats st = stats(ctx);
    CHECK_EQ_U64(st.plans_made, 9);
    CHECK_EQ_U64(st.cache_evictions, 7);
    CHECK_EQ_U64(st.cache_entries, 2);
    ss_ctx_free(ctx);

    /* a cache of three holds them all: after the first round, no more profiling */
    ctx = mk(0, 1000, 3);
    for (int k = 0; k < 3; k++) s[k].rename_id = named(ctx, k == 0 ? "v0" : k == 1 ? "v1" : "v2");
    for (int i = 0; i < 9; i++) run_iter(ctx, &s[i % 3], &r);
    st = stats(ctx);
    CHECK_EQ_U64(st.plans_made, 3);
    CHECK_EQ_U64(st.detailed_iters, 3);
    CHECK_EQ_U64(st.mid_switches, 6);
    CHECK_EQ_U64(st.cache_evictions, 0);
    ss_ctx_free(ctx);
}

static ss_status plan_fails(void *user, const ss_profile *prof, ss_plan **out) {
    (void)user; (void)prof; (void)out;
    return SS_ERR_INFEASIBLE;
}

static void t_planner_fails(void) {
    ss_ctx_t *ctx = mk(0, 2, 8);
    ssi_planner pl = {plan_fails, NULL, NULL};
    CHECK_OK(ssi_ctx_set_planner(ctx, &pl));
    spec a = plain();
    ss_iter_report r;
    char pat[64];
    for (int i = 0; i < 8; i++) {
        run_iter(ctx, &a, &r);
        pattern(pat, i, &r);
        CHECK_EQ_INT(r.plan_event, SS_PLAN_PENDING);
    }
    /* GenPolicy, then probes with no plan, bounded like any unseen sequence */
    CHECK_MSG(strcmp(pat, "DD..DD..") == 0, "%s", pat);
    ss_ctx_stats st = stats(ctx);
    CHECK_EQ_U64(st.plan_errors, 4);
    CHECK_EQ_U64(st.plans_made, 0);
    CHECK_EQ_U64(st.bound_hits, 2);
    CHECK_EQ_INT(ss_ctx_stage(ctx), SS_STAGE_STABLE);
    ss_ctx_free(ctx);
}

static void t_disabled(void) {
    ss_ctx_config c = ss_ctx_config_default();
    c.opts.disable = 1;
    ss_ctx_t *ctx = NULL;
    CHECK_OK(ss_ctx_new(&c, &ctx));
    intern_all(ctx);
    CHECK_EQ_INT(ss_ctx_stage(ctx), SS_STAGE_DISABLED);
    spec a = plain();
    ss_iter_report r;
    for (int i = 0; i < 5; i++) run_iter(ctx, &a, &r);
    CHECK_EQ_INT(r.stage, SS_STAGE_DISABLED);
    CHECK_EQ_INT(r.detailed, 0);
    ss_ctx_stats st = stats(ctx);
    CHECK_EQ_U64(st.iters_disabled, 5);
    CHECK_EQ_U64(st.detailed_iters, 0);
    CHECK_EQ_U64(st.plans_made, 0);
    CHECK_EQ_U64(st.saves, 5 * 2 * L);
    ss_ctx_free(ctx);

    /* the environment variable does the same for a context made with cfg NULL */
    setenv("SMARTSWAP_DISABLE", "1", 1);
    CHECK_OK(ss_ctx_new(NULL, &ctx));
    CHECK_EQ_INT(ss_ctx_stage(ctx), SS_STAGE_DISABLED);
    ss_ctx_free(ctx);
    setenv("SMARTSWAP_DISABLE", "nonsense", 1);
    ctx = NULL;
    CHECK_STATUS(ss_ctx_new(NULL, &ctx), SS_ERR_INVALID);
    CHECK(ctx == NULL);
    unsetenv("SMARTSWAP_DISABLE");
}

/* ---- measured operator seconds ------------------------------------------------------------ */

static void spin(double s) {
    double t0 = ssi_now();
    while (ssi_now() - t0 < s) {}
}

/* an executor whose load takes 30 ms (a stall): time inside smartswap, not the caller's */
static ss_status slow_load(void *self, ss_ctx_t *ctx, uint64_t handle, ssi_handle *h, ss_stream_t *s,
                           void **ptr) {
    (void)self; (void)ctx; (void)handle; (void)h; (void)s; (void)ptr;
    spin(0.030);
    return SS_OK;
}

static void t_op_seconds(void) {
    /* a detailed iteration records each operator's seconds from its ss_ctx_op to the next (the
     * last: to iter_end), less the time spent inside the executor */
    ss_ctx_t *ctx = mk(0, 3, 8);
    ssi_exec_ops ex;
    memset(&ex, 0, sizeof ex);
    ex.load = slow_load;
    CHECK_OK(ssi_ctx_set_exec(ctx, &ex));
    const double own[4] = {0.004, 0.024, 0.002, 0.012};
    int64_t shape[1] = {16};
    uint64_t h = 0;
    void *p = NULL;
    /* the caller's clock around every boundary: ta[i] just before operator i's ss_ctx_op, tb[i]
     * just after it returns (tb[4]: after iter_end), so operator i's recorded interval lies in
     * [ta[i], tb[i+1]] whatever the machine's load */
    double ta[4], tb[5];
    CHECK_OK(ss_ctx_iter_begin(ctx));
    ta[0] = ssi_now();
    CHECK_OK(ss_ctx_op(ctx, ID_LIN, 1));
    tb[0] = ssi_now();
    CHECK_OK(ss_ctx_save(ctx, buf, 64, SS_DTYPE_F32, 1, shape, 0, &h));
    spin(own[0]);
    ta[1] = ssi_now();
    CHECK_OK(ss_ctx_op(ctx, ID_ACT, 2));
    tb[1] = ssi_now();
    spin(own[1]);
    ta[2] = ssi_now();
    CHECK_OK(ss_ctx_op(ctx, ID_LINB, 3));
    tb[2] = ssi_now();
    spin(own[2]);
    CHECK_OK(ss_ctx_load(ctx, h, NULL, &p));   /* 30 ms inside the executor */
    CHECK_OK(ss_ctx_release(ctx, h));
    ta[3] = ssi_now();
    CHECK_OK(ss_ctx_op(ctx, ID_STEP, 4));
    tb[3] = ssi_now();
    spin(own[3]);
    ss_iter_report r;
    CHECK_OK(ss_ctx_iter_end(ctx, &r));
    tb[4] = ssi_now();
    CHECK_EQ_INT(r.detailed, 1);
    CHECK(r.seconds >= 0.072);
    const ss_profile *pr = ctx->st.cache[ctx->st.cur].prof;
    CHECK_EQ_U64(pr->nops, 4);
    for (int i = 0; i < 4; i++) {
        /* at least the caller's own time, at most the caller's wall time around it less the
         * executor's 30 ms (operator 2): bounds that hold however loaded the machine is */
        double wall = tb[i + 1] - ta[i] - (i == 2 ? 0.030 : 0.0);
        CHECK_MSG(pr->ops[i].seconds >= own[i] && pr->ops[i].seconds <= wall, "op %d: %.6f s, own %.3f s, wall bound %.6f s",
                  i, pr->ops[i].seconds, own[i], wall);
    }
    CHECK(ssi_profile_has_op_times(pr));
    ss_ctx_free(ctx);
}


/* Re-timing (stage.c, "re-timing"): a plan whose Stable iterations' own time departs from its
 * profile's operator seconds by more than options.retime is made again, with no detailed
 * iteration, from its profile scaled to them. The detailed iteration spins 4 ms after each of
 * its 17 operators (a profile of at least 68 ms); the Stable ones 1 ms (at least 17 ms of own
 * time, a quarter): after 3 of them the plan is re-timed once, its profile summing to their
 * median own time, and iterations at that speed then keep it. At the detailed iteration's own
 * speed, and with options.retime 0, nothing is re-timed. */
typedef struct rt_rec { int calls; double sum[8]; } rt_rec;
static ss_status plan_rec_sum(void *user, const ss_profile *p, ss_plan **out) {
    rt_rec *r = user;
    double s = 0;
    for (uint32_t i = 0; i < p->nops; i++) s += p->ops[i].seconds;
    if (r->calls < 8) r->sum[r->calls] = s;
    r->calls++;
    return ssi_plan_default(NULL, p, out);
}

/* An executor whose every load waits `stall_load_s` (a swap-in still in flight): time inside
 * smartswap, which re-timing takes out of an iteration's wall time. */
static double stall_load_s;
static ss_status stall_load(void *self, ss_ctx_t *ctx, uint64_t handle, ssi_handle *h, ss_stream_t *stream,
                            void **ptr) {
    (void)self; (void)ctx; (void)handle; (void)h; (void)stream; (void)ptr;
    spin(stall_load_s);
    return SS_OK;
}
static const ssi_exec_ops STALL_EXEC = {.load = stall_load};

static void t_retime(void) {
    /* 0: faster Stable iterations; 1: same speed; 2: retime 0; 3: same speed, but every load
     * stalls as long as an operator runs (the iteration's wall time 1.5x the profile's: its own
     * time is not, and the plan stays) */
    for (int mode = 0; mode < 4; mode++) {
        ss_ctx_config c = ss_ctx_config_default();
        c.opts.warmup_iters = 0;
        c.opts.max_detailed = 3;
        c.opts.plan_cache_size = 8;
        if (mode == 2) c.opts.retime = 0;
        ss_ctx_t *ctx = NULL;
        CHECK_OK(ss_ctx_new(&c, &ctx));
        intern_all(ctx);
        rt_rec rec;
        memset(&rec, 0, sizeof rec);
        ssi_planner pl = {plan_rec_sum, NULL, &rec};
        CHECK_OK(ssi_ctx_set_planner(ctx, &pl));
        stall_load_s = 0.004;
        if (mode == 3) CHECK_OK(ssi_ctx_set_exec(ctx, &STALL_EXEC));
        spec slow = plain(), fast = plain();
        slow.spin_s = 0.004;
        fast.spin_s = mode == 1 || mode == 3 ? 0.004 : 0.001;
        ss_iter_report r;
        run_iter(ctx, &slow, &r);
        CHECK_EQ_INT(r.detailed, 1);
        CHECK_EQ_INT(rec.calls, 1);
        CHECK_MSG(rec.sum[0] >= NOPS * 0.004, "profile %.4f s", rec.sum[0]);
        double wall[3] = {0};
        for (int i = 0; i < 3; i++) {
            run_iter(ctx, &fast, &r);
            CHECK_EQ_INT(r.detailed, 0);
            wall[i] = r.seconds;
        }
        ss_ctx_stats st = stats(ctx);
        if (mode == 0) {
            CHECK_EQ_INT(r.plan_event, SS_PLAN_NEW);
            CHECK_EQ_U64(st.retimed, 1);
            CHECK_EQ_INT(rec.calls, 2);
            /* the new profile sums to the median own time: at least the spins, at most the
             * largest wall time of the three */
            double wmax = wall[0] > wall[1] ? wall[0] : wall[1];
            if (wall[2] > wmax) wmax = wall[2];
            CHECK_MSG(rec.sum[1] >= NOPS * 0.001 * 0.999 && rec.sum[1] <= wmax * 1.001,
                      "re-timed profile %.4f s, walls %.4f %.4f %.4f s", rec.sum[1], wall[0], wall[1], wall[2]);
            CHECK(rec.sum[1] < rec.sum[0] / 1.25);
            /* the plan in use is the re-timed one; more iterations at that speed keep it */
            const ss_profile *pp = ctx->st.cache[ctx->st.cur].prof;
            double ps = 0;
            for (uint32_t i = 0; i < pp->nops; i++) ps += pp->ops[i].seconds;
            CHECK(fabs(ps - rec.sum[1]) <= 1e-9 * ps);
            for (int i = 0; i < 3; i++) run_iter(ctx, &fast, &r);
            st = stats(ctx);
            CHECK_EQ_U64(st.retimed, 1);
            CHECK_EQ_INT(rec.calls, 2);
        } else {
            CHECK_EQ_INT(r.plan_event, SS_PLAN_SAME);
            CHECK_EQ_U64(st.retimed, 0);
            CHECK_EQ_INT(rec.calls, 1);
        }
        if (mode == 3) {   /* the stalls were there: the wall time is well above the profile's */
            CHECK_MSG(wall[0] > rec.sum[0] * 1.25 && wall[1] > rec.sum[0] * 1.25 && wall[2] > rec.sum[0] * 1.25,
                      "walls %.4f %.4f %.4f s, profile %.4f s", wall[0], wall[1], wall[2], rec.sum[0]);
            CHECK_OK(ssi_ctx_set_exec(ctx, NULL));
        }
        CHECK_EQ_U64(st.detailed_iters, 1);
        ss_ctx_free(ctx);
    }
}

int main(void) {
    RUN(t_steady);
    RUN(t_lazy_state);
    RUN(t_alternating);
    RUN(t_sizes);
    RUN(t_site_envelope);
    RUN(t_sizes_ahead);
    RUN(t_replan_variants);
    RUN(t_never_repeats);
    RUN(t_divergence_at_op);
    RUN(t_eval_steps);
    RUN(t_lru);
    RUN(t_planner_fails);
    RUN(t_disabled);
    RUN(t_op_seconds);
    RUN(t_retime);
    return test_summary();
}
