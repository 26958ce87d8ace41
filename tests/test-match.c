/* test-match.c: the executor's feature scorer (exec.h): exact matches win, a tensor whose shape
 * differs only in a varying dimension (sequence length, tokens routed to an expert) still
 * matches and ranks above worse near misses, a dtype mismatch never matches, taken entries are
 * skipped, and the threshold is honoured.
 */
#include "test.h"
#include "exec.h"
#include "sim.h"

static ssi_match_feat F(uint32_t name, uint64_t site, uint32_t dtype, const int64_t *shape,
                        uint32_t ndim, uint64_t bytes, uint32_t ord) {
    ssi_match_feat f = {name, site, dtype, ndim, shape, bytes, ord};
    return f;
}

static const int64_t s_full[3] = {2, 1024, 64}, s_seq[3] = {2, 896, 64}, s_two[3] = {2, 896, 48},
                     s_half[3] = {2, 512, 64}, s_rank2[2] = {2048, 64}, s_exp[2] = {300, 64},
                     s_exp2[2] = {256, 64};

static void t_exact(void) {
    ssi_match_feat t = F(3, 77, SS_DTYPE_F32, s_full, 3, 2 * 1024 * 64 * 4, 1);
    ssi_match_feat e = t;
    CHECK(ssi_match_exact(&t, &e));
    CHECK(ssi_match_score(&t, &e) == 1.0);
    e.bytes = t.bytes + 100;            /* rounded to the allocator's granule: still exact */
    CHECK(ssi_match_exact(&t, &e) == (ssi_round_block(e.bytes) == ssi_round_block(t.bytes)));
    e = t; e.ordinal = 2;
    CHECK(!ssi_match_exact(&t, &e));
    e = t; e.site = 78;
    CHECK(!ssi_match_exact(&t, &e));
}

static void t_dtype_never(void) {
    ssi_match_feat t = F(3, 77, SS_DTYPE_F32, s_full, 3, 524288, 0);
    ssi_match_feat e = t;
    e.dtype = SS_DTYPE_BF16;
    CHECK(ssi_match_score(&t, &e) < 0);
    CHECK_EQ_U64(ssi_match_best(&t, &e, 1, NULL, 0.0, NULL), SS_NONE);
    e.bytes = t.bytes / 2;
    CHECK_EQ_U64(ssi_match_best(&t, &e, 1, NULL, 0.0, NULL), SS_NONE);
}

static void t_rank_near_misses(void) {
    /* the tensor: sequence 896 of a plan made at 1024 */
    ssi_match_feat t = F(5, 9, SS_DTYPE_BF16, s_seq, 3, 2 * 896 * 64 * 2, 0);
    ssi_match_feat c[6] = {
        F(5, 9, SS_DTYPE_BF16, s_full, 3, 2 * 1024 * 64 * 2, 0),   /* 0: only the seq dim differs */
        F(5, 9, SS_DTYPE_BF16, s_two, 3, 2 * 896 * 48 * 2, 0),     /* 1: another dim differs */
        F(5, 9, SS_DTYPE_BF16, s_half, 3, 2 * 512 * 64 * 2, 0),    /* 2: seq differs more */
        F(5, 9, SS_DTYPE_BF16, s_full, 3, 2 * 1024 * 64 * 2, 3),   /* 3: as 0, other ordinal */
        F(5, 10, SS_DTYPE_BF16, s_full, 3, 2 * 1024 * 64 * 2, 0),  /* 4: other call site */
        F(5, 9, SS_DTYPE_F32, s_seq, 3, 2 * 896 * 64 * 4, 0),      /* 5: dtype differs */
    };
    double sc[6];
    for (int i = 0; i < 6; i++) sc[i] = ssi_match_score(&t, &c[i]);
    CHECK(sc[0] > sc[2]);
    CHECK(sc[0] > sc[3]);
    CHECK(sc[0] > sc[4]);
    CHECK(sc[2] > sc[4] - 0.2);
    CHECK(sc[5] < 0);
    CHECK(sc[0] >= 0.9);
    double s = 0;
    CHECK_EQ_U64(ssi_match_best(&t, c, 6, NULL, 0.6, &s), 0);
    CHECK(s == sc[0]);
    uint8_t taken[6] = {1, 0, 0, 0, 0, 0};
    uint32_t b = ssi_match_best(&t, c, 6, taken, 0.6, NULL);
    CHECK(b != 0 && b != 5 && b != SS_NONE);
    CHECK(sc[b] >= sc[1] && sc[b] >= sc[2] && sc[b] >= sc[3] && sc[b] >= sc[4]);
    /* an exact entry wins over everything */
    ssi_match_feat c2[2] = {c[0], t};
    CHECK_EQ_U64(ssi_match_best(&t, c2, 2, NULL, 0.6, &s), 1);
    CHECK(s == 1.0);
    /* the threshold: a rank change scores below 0.6 + its own threshold */
    ssi_match_feat r2 = F(5, 9, SS_DTYPE_BF16, s_rank2, 2, 2 * 1024 * 64 * 2, 0);
    double sr = ssi_match_score(&t, &r2);
    CHECK(sr < sc[0]);
    CHECK_EQ_U64(ssi_match_best(&t, &r2, 1, NULL, sr + 0.01, NULL), SS_NONE);
    CHECK_EQ_U64(ssi_match_best(&t, &r2, 1, NULL, sr, NULL), 0);
}

static void t_expert_tokens(void) {
    /* tokens routed to an expert change: rows 300 now, 256 in the plan */
    ssi_match_feat t = F(8, 1, SS_DTYPE_BF16, s_exp, 2, 300 * 64 * 2, 2);
    ssi_match_feat c[3] = {
        F(8, 1, SS_DTYPE_BF16, s_exp2, 2, 256 * 64 * 2, 2),
        F(8, 1, SS_DTYPE_BF16, s_exp2, 2, 256 * 64 * 2, 1),
        F(9, 1, SS_DTYPE_BF16, s_exp, 2, 300 * 64 * 2, 2),
    };
    CHECK_EQ_U64(ssi_match_best(&t, c, 3, NULL, 0.6, NULL), 0);
    CHECK(ssi_match_score(&t, &c[0]) > ssi_match_score(&t, &c[1]));
    CHECK(ssi_match_score(&t, &c[0]) > ssi_match_score(&t, &c[2]));
}

int main(void) {
    RUN(t_exact);
    RUN(t_dtype_never);
    RUN(t_rank_near_misses);
    RUN(t_expert_tokens);
    return test_summary();
}
