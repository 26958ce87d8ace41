/* test-profile.c: the profiler (src/profile.c): the size signature, the running hash of a
 * profile against the one ss_ctx_op folds, the detailed profile of an iteration (operators,
 * phases, memory as unconstrained demand with a caller-reported base, tensors with producer,
 * uses and release, wall time), copying a prefix, and growth without caps.
 */
#include "test.h"
#include "api.h"

static void t_size_sig(void) {
    CHECK_EQ_U64(ssi_size_sig(0), 0);
    CHECK_EQ_U64(ssi_size_sig(15), 15);
    CHECK_EQ_U64(ssi_size_sig(16), (4u << 4) | 0);
    CHECK_EQ_U64(ssi_size_sig(31), (4u << 4) | 15);
    CHECK_EQ_U64(ssi_size_sig(1u << 20), (20u << 4) | 0);
    CHECK_EQ_U64(ssi_size_sig(3u << 20), (21u << 4) | 8);
    /* buckets are 1/16 of a power of two wide; twice as large: another */
    CHECK(ssi_size_sig(1000000) == ssi_size_sig(1015000));
    CHECK(ssi_size_sig(1000000) != ssi_size_sig(2000000));
    /* monotonic */
    uint64_t prev = 0;
    for (uint64_t b = 1; b < (1ull << 40); b = b * 3 / 2 + 1) {
        CHECK(ssi_size_sig(b) >= prev);
        prev = ssi_size_sig(b);
    }
}

/* fwd: embed, (linear, save A 1000 B), (gelu, save B 500 B, NOSWAP); bwd: gelu_bwd (load B,
 * release B), linear_bwd (load A twice, release A); opt: step. Base reported 10000 B at
 * begin, 10100 B after the forward (the caller's own temporaries). */
static void t_detailed(void) {
    ss_ctx_config c = ss_ctx_config_default();
    c.opts.warmup_iters = 0;
    ss_ctx_t *ctx;
    CHECK_OK(ss_ctx_new(&c, &ctx));
    uint32_t emb, lin, gelu, gelub, linb, step;
    CHECK_OK(ss_ctx_intern(ctx, "embed", &emb));
    CHECK_OK(ss_ctx_intern(ctx, "linear", &lin));
    CHECK_OK(ss_ctx_intern(ctx, "gelu", &gelu));
    CHECK_OK(ss_ctx_intern(ctx, "gelu_bwd", &gelub));
    CHECK_OK(ss_ctx_intern(ctx, "linear_bwd", &linb));
    uint32_t again;
    CHECK_OK(ss_ctx_intern(ctx, "linear", &again));
    CHECK_EQ_U64(again, lin);
    char a[1000], b[500];
    int64_t sa[2] = {10, 25}, sb[1] = {250};
    uint64_t ha, hb;
    void *p;
    CHECK_OK(ss_ctx_set_mem(ctx, 10000));
    CHECK_OK(ss_ctx_iter_begin(ctx));
    CHECK_OK(ss_ctx_op(ctx, emb, 1));
    CHECK_OK(ss_ctx_op(ctx, lin, 2));
    CHECK_OK(ss_ctx_save(ctx, a, 1000, SS_DTYPE_F32, 2, sa, 0, &ha));
    CHECK_OK(ss_ctx_op(ctx, gelu, 3));
    CHECK_OK(ss_ctx_save(ctx, b, 500, SS_DTYPE_BF16, 1, sb, SS_SAVE_NOSWAP, &hb));
    CHECK_OK(ss_ctx_set_mem(ctx, 10100 + 1500));   /* the caller's view includes A and B */
    CHECK_OK(ss_ctx_op(ctx, gelub, 4));             /* phase switches to bwd at the first load */
    CHECK_OK(ss_ctx_load(ctx, hb, NULL, &p));
    CHECK(p == b);
    CHECK_OK(ss_ctx_release(ctx, hb));
    CHECK_OK(ss_ctx_op(ctx, linb, 5));
    CHECK_OK(ss_ctx_load(ctx, ha, NULL, &p));
    CHECK_OK(ss_ctx_load(ctx, ha, NULL, &p));
    CHECK(p == a);
    CHECK_OK(ss_ctx_release(ctx, ha));
    CHECK_STATUS(ss_ctx_release(ctx, ha), SS_ERR_STATE);
    CHECK_OK(ss_ctx_phase(ctx, SS_OP_OPT));
    CHECK_OK(ss_ctx_intern(ctx, "adam_step", &step));   /* a name interned mid-iteration */
    CHECK_OK(ss_ctx_op(ctx, step, 6));
    ss_iter_report r;
    CHECK_OK(ss_ctx_iter_end(ctx, &r));
    CHECK_EQ_INT(r.detailed, 1);
    CHECK_EQ_INT(r.plan_event, SS_PLAN_NEW);
    CHECK(r.seconds > 0);
    CHECK_EQ_U64(r.saved_bytes, 1500);
    CHECK_EQ_U64(r.size_sig, ssi_size_sig(1500));
    CHECK_EQ_U64(r.peak_bytes, 11600);

    const ss_profile *pr = ctx->st.cache[ctx->st.cur].prof;
    char err[200];
    CHECK_OK(ssi_profile_check(pr, err, sizeof err));
    CHECK_EQ_U64(pr->nops, 6);
    CHECK_EQ_U64(pr->nnames, 6);
    CHECK(strcmp(pr->names[step], "adam_step") == 0);
    CHECK_EQ_U64(pr->base_bytes, 10000);
    const uint32_t want_name[6] = {emb, lin, gelu, gelub, linb, step};
    const uint32_t want_phase[6] = {SS_PHASE_FWD, SS_PHASE_FWD, SS_PHASE_FWD, SS_PHASE_FWD,
                                    SS_PHASE_BWD, SS_PHASE_OPT};
    /* mem_after: 10000 + saved since the first report; then the second report + changes */
    const uint64_t want_mem[6] = {10000, 11000, 11600, 11100, 10100, 10100};
    for (int i = 0; i < 6; i++) {
        CHECK_EQ_U64(pr->ops[i].name, want_name[i]);
        CHECK_EQ_U64(pr->ops[i].site, (uint64_t)i + 1);
        CHECK_EQ_U64(pr->ops[i].phase, want_phase[i]);
        CHECK_EQ_U64(pr->ops[i].mem_after, want_mem[i]);
    }
    CHECK_EQ_U64(pr->ntensors, 2);
    const ss_prof_tensor *ta = &pr->tensors[0], *tb = &pr->tensors[1];
    CHECK_EQ_U64(ta->bytes, 1000);
    CHECK_EQ_U64(ta->dtype, SS_DTYPE_F32);
    CHECK_EQ_U64(ta->ndim, 2);
    CHECK_EQ_U64(ta->shape[0], 10);
    CHECK_EQ_U64(ta->shape[1], 25);
    CHECK_EQ_U64(ta->producer, 1);
    CHECK_EQ_U64(ta->nuses, 1);            /* two loads in one operator: one use */
    CHECK_EQ_U64(pr->uses[ta->use_off], 4);
    CHECK_EQ_U64(ta->release, 4);
    CHECK_EQ_U64(ta->flags, SS_TENSOR_SAVED);
    CHECK_EQ_U64(tb->bytes, 500);
    CHECK_EQ_U64(tb->dtype, SS_DTYPE_BF16);
    CHECK_EQ_U64(tb->producer, 2);
    CHECK_EQ_U64(tb->nuses, 1);
    CHECK_EQ_U64(pr->uses[tb->use_off], 3);
    CHECK_EQ_U64(tb->release, 3);
    CHECK_EQ_U64(tb->flags, SS_TENSOR_SAVED | SS_TENSOR_NOSWAP);
    CHECK(pr->iter_seconds > 0);
    /* the profile's running hash is the one ss_ctx_op folded */
    uint64_t run[6];
    CHECK_EQ_U64(ssi_profile_running_hashes(pr, run), r.seq_hash);
    CHECK_EQ_U64(pr->seq_hash, r.seq_hash);
    const ss_plan *pl = ssi_stage_plan(ctx);
    for (int i = 0; i < 6; i++) CHECK_EQ_U64(pl->ck[i], run[i]);

    /* the hash does not depend on interning order: another context, names interned the other
     * way round, the same sequence */
    ss_ctx_t *c2;
    CHECK_OK(ss_ctx_new(&c, &c2));
    const char *nm[6] = {"adam_step", "linear_bwd", "gelu_bwd", "gelu", "linear", "embed"};
    uint32_t id2[6];
    for (int i = 0; i < 6; i++) CHECK_OK(ss_ctx_intern(c2, nm[i], &id2[i]));
    CHECK_OK(ss_ctx_iter_begin(c2));
    for (int i = 0; i < 6; i++) CHECK_OK(ss_ctx_op(c2, id2[5 - i], (uint64_t)i + 1));
    ss_iter_report r2;
    CHECK_OK(ss_ctx_iter_end(c2, &r2));
    CHECK_EQ_U64(r2.seq_hash, r.seq_hash);
    ss_ctx_free(c2);

    /* copy a prefix: 3 ops, tensor A only, uses before op 4: none; B's bytes leave mem_after */
    ss_profile *q;
    CHECK_OK(ssi_profile_new(&q));
    CHECK_OK(ssi_ctx_sync_names(ctx, q, pr->nnames));
    CHECK_OK(ssi_profile_copy_prefix(q, pr, 3, 1, 3));
    CHECK_OK(ssi_profile_finalize(q));
    CHECK_EQ_U64(q->nops, 3);
    CHECK_EQ_U64(q->ntensors, 1);
    CHECK_EQ_U64(q->tensors[0].nuses, 0);
    CHECK_EQ_U64(q->tensors[0].release, SS_NONE);
    CHECK_EQ_U64(q->ops[2].mem_after, 11100);
    CHECK_EQ_U64(q->ops[1].mem_after, 11000);
    CHECK_STATUS(ssi_profile_copy_prefix(q, pr, 7, 0, 0), SS_ERR_INVALID);
    ssi_profile_free(q);
    ss_ctx_free(ctx);
}

/* A long detailed iteration: memory grows with the events, nothing is capped. */
static void t_growth(void) {
    ss_ctx_config c = ss_ctx_config_default();
    c.opts.warmup_iters = 0;
    ss_ctx_t *ctx;
    CHECK_OK(ss_ctx_new(&c, &ctx));
    uint32_t id;
    CHECK_OK(ss_ctx_intern(ctx, "op", &id));
    enum { N = 200000 };
    static uint64_t h[N / 2];
    static char mem[16];
    int bad = 0;
    CHECK_OK(ss_ctx_iter_begin(ctx));
    for (uint32_t i = 0; i < N; i++) {
        bad |= ss_ctx_op(ctx, id, i) != SS_OK;
        if (i < N / 2) bad |= ss_ctx_save(ctx, mem, 16, SS_DTYPE_U8, 0, NULL, 0, &h[i]) != SS_OK;
        else {
            void *p;
            bad |= ss_ctx_load(ctx, h[N - 1 - i], NULL, &p) != SS_OK;
            bad |= ss_ctx_release(ctx, h[N - 1 - i]) != SS_OK;
        }
    }
    CHECK(!bad);
    ss_iter_report r;
    CHECK_OK(ss_ctx_iter_end(ctx, &r));
    CHECK_EQ_INT(r.plan_event, SS_PLAN_NEW);
    const ss_profile *pr = ctx->st.cache[ctx->st.cur].prof;
    CHECK_EQ_U64(pr->nops, N);
    CHECK_EQ_U64(pr->ntensors, N / 2);
    CHECK_EQ_U64(pr->nuses, N / 2);
    CHECK_EQ_U64(r.peak_bytes, 16ull * (N / 2));
    CHECK_EQ_U64(pr->tensors[0].release, N - 1);
    ss_ctx_free(ctx);
}

int main(void) {
    RUN(t_size_sig);
    RUN(t_detailed);
    RUN(t_growth);
    return test_summary();
}
