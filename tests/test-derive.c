/* test-derive.c: profiles of a known structure at new sizes (src/derive.c): bytes and shapes
 * from the observed saves, memory levels and temporaries moved with the saved bytes live,
 * operator times scaled by each operator's own cost ratio, other structures refused. */
#include "test.h"
#include "../src/derive.h"

#include <string.h>

/* fwd0 saves A (T x 4 f32), fwd1 saves B (T x T f32: quadratic), bwd2 uses B, bwd3 uses A;
 * base 1000 bytes, 100 bytes of gradients from op 2 on, a temporary of 50 bytes in op 1. */
static ss_profile *mk(int64_t T) {
    ss_profile *p = NULL;
    if (ssi_profile_new(&p)) return NULL;
    uint32_t id;
    ssi_profile_intern(p, "op", &id);
    p->base_bytes = 1000;
    uint64_t a = (uint64_t)T * 4 * 4, b = (uint64_t)(T * T) * 4;
    uint64_t after[4] = {1000 + a, 1000 + a + b, 1000 + a + 100, 1000 + 100};
    double secs[4] = {1.0, 2.0, 3.0, 0.5};
    for (uint32_t i = 0; i < 4; i++) {
        ss_prof_op o = {0};
        o.name = id;
        o.site = i + 1;
        o.phase = i < 2 ? SS_PHASE_FWD : SS_PHASE_BWD;
        o.mem_after = after[i];
        o.mem_peak = i == 1 ? after[i] + 50 : 0;
        o.seconds = secs[i];
        ssi_profile_add_op(p, &o, NULL);
    }
    ss_prof_tensor ta = {0}, tb = {0};
    ta.bytes = a; ta.dtype = SS_DTYPE_F32; ta.ndim = 2; ta.shape[0] = T; ta.shape[1] = 4;
    ta.producer = 0; ta.release = 3; ta.flags = SS_TENSOR_SAVED;
    tb.bytes = b; tb.dtype = SS_DTYPE_F32; tb.ndim = 2; tb.shape[0] = T; tb.shape[1] = T;
    tb.producer = 1; tb.release = 2; tb.flags = SS_TENSOR_SAVED;
    ssi_profile_add_tensor(p, &ta, NULL);
    ssi_profile_add_tensor(p, &tb, NULL);
    ssi_profile_add_use(p, 1, 2);
    ssi_profile_add_use(p, 0, 3);
    p->iter_seconds = 6.5;
    if (ssi_profile_finalize(p)) { ssi_profile_free(p); return NULL; }
    return p;
}

static void t_derive(void) {
    ss_profile *src = mk(8), *want = mk(16);
    CHECK(src && want);
    if (!src || !want) return;
    ss_prof_tensor obs[2];
    memcpy(obs, want->tensors, sizeof obs);   /* what a light iteration at T = 16 saw */
    ss_profile *d = NULL;
    CHECK_OK(ssi_derive_profile(src, obs, 2, 0x1234, 0x99, &d));
    if (!d) goto out;
    CHECK_EQ_U64(d->seq_hash, 0x1234);
    CHECK_EQ_U64(d->size_sig, 0x99);
    CHECK_EQ_U64(d->nops, 4);
    for (uint32_t t = 0; t < 2; t++) {
        CHECK_EQ_U64(d->tensors[t].bytes, want->tensors[t].bytes);
        CHECK(memcmp(d->tensors[t].shape, want->tensors[t].shape, sizeof d->tensors[t].shape) == 0);
        CHECK_EQ_U64(d->tensors[t].producer, src->tensors[t].producer);
        CHECK_EQ_U64(d->tensors[t].release, src->tensors[t].release);
    }
    /* ops 0, 1: all of the level above base is saved bytes: exact */
    CHECK_EQ_U64(d->ops[0].mem_after, want->ops[0].mem_after);
    CHECK_EQ_U64(d->ops[1].mem_after, want->ops[1].mem_after);
    /* op 1's temporary (50 bytes) scales with the saved bytes live at it: (a + b) new / old */
    uint64_t lo = 8 * 16 + 8 * 8 * 4, ln = 16 * 16 + 16 * 16 * 4;
    CHECK_EQ_U64(d->ops[1].mem_peak, want->ops[1].mem_after + (50 * ln + lo / 2) / lo);
    CHECK(d->ops[1].mem_peak > want->ops[1].mem_after + 50);   /* a temporary that grew */
    /* op 2: A live (x2), the 100 bytes of gradients scaled by the same x2 */
    CHECK_EQ_U64(d->ops[2].mem_after, 1000 + 16 * 16 + 200);
    CHECK_EQ_U64(d->ops[0].mem_peak, 0);   /* not measured stays not measured */
    /* times: op 0 produces A (x2), op 1 produces B (x4), op 2 uses B (x4), op 3 uses A (x2) */
    CHECK_NEAR(d->ops[0].seconds, 2.0, 1e-12);
    CHECK_NEAR(d->ops[1].seconds, 8.0, 1e-12);
    CHECK_NEAR(d->ops[2].seconds, 12.0, 1e-12);
    CHECK_NEAR(d->ops[3].seconds, 1.0, 1e-12);
    CHECK_NEAR(d->iter_seconds, 6.5 * 23.0 / 6.5, 1e-9);
    CHECK_EQ_U64(ssi_profile_peak(d), ssi_profile_peak(want) + (50 * ln + lo / 2) / lo - 50);
    char err[128];
    CHECK_OK(ssi_profile_check(d, err, sizeof err));
    /* deriving back gives the source's bytes and levels */
    ss_profile *back = NULL;
    memcpy(obs, src->tensors, sizeof obs);
    CHECK_OK(ssi_derive_profile(d, obs, 2, src->seq_hash, src->size_sig, &back));
    if (back) {
        for (uint32_t i = 0; i < 4; i++) {
            CHECK_EQ_U64(back->ops[i].mem_after, src->ops[i].mem_after);
            CHECK_NEAR(back->ops[i].seconds, src->ops[i].seconds, 1e-12);
        }
        ssi_profile_free(back);
    }
    ssi_profile_free(d);
out:
    ssi_profile_free(src);
    ssi_profile_free(want);
}

static void t_other_structure(void) {
    ss_profile *src = mk(8);
    CHECK(src);
    if (!src) return;
    ss_prof_tensor obs[2];
    memcpy(obs, src->tensors, sizeof obs);
    ss_profile *d = NULL;
    obs[1].producer = 2;   /* saved by another operator */
    CHECK_STATUS(ssi_derive_profile(src, obs, 2, 1, 1, &d), SS_ERR_INVALID);
    CHECK(d == NULL);
    obs[1].producer = 1;
    CHECK_STATUS(ssi_derive_profile(src, obs, 1, 1, 1, &d), SS_ERR_INVALID);   /* a save missing */
    CHECK(ssi_derive_same_structure(src, obs, 2, 0));
    ssi_profile_free(src);
}

int main(void) {
    RUN(t_derive);
    RUN(t_other_structure);
    return test_summary();
}
