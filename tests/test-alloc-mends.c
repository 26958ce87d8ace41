/* test-alloc-mends.c: mends of issue 14 item 7 in the allocator and the trainer's allocator glue,
 * each failing on the code before it:
 *
 *  - t_oom_sync_error: a stock-mode allocator whose out-of-memory path cannot wait for a pending
 *    event (the device fails the sync) returns that device error, not SS_ERR_OOM (the result of
 *    the sync was ignored, and the caller was told the budget was exhausted);
 *  - t_park_reuses_segments: ss_alloc_park sets free segments aside without a device call and a
 *    request that would make a new segment of the same size takes one back, with no segment
 *    reserved or freed on the device (test-replay's t_stage_stall_exact shows the layout is a
 *    fresh allocator's: no eviction in any Stable iteration);
 *  - t_mem_ss_free_error: the trainer's smartswap memory backend remembers a failed
 *    ss_alloc_free (its free slot returns nothing) and refuses later allocations, saying why.
 */
#include "smartswap-alloc.h"
#include "mem-ss.h"
#include "test.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)

static void t_oom_sync_error(void) {
    ss_options o = ss_options_default();
    o.sim_capacity_bytes = 16 * MiB;
    o.sim_virtual_clock = 1;
    o.sim_d2h_gbps = 1;
    ss_device_t *sim = NULL, *d = NULL;
    CHECK_OK(ss_device_open("cpu-sim", &o, &sim));
    if (!sim) return;
    CHECK_OK(ss_device_fault(sim, "event", 0, 0, SS_ERR_DEVICE, &d));
    if (!d) { ss_device_close(sim); return; }
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = 2 * MiB;
    c.segment_bytes = 1 * MiB;
    c.release_mode = SS_RELEASE_MODE_STOCK;
    ss_alloc_t *a = NULL;
    CHECK_OK(ss_alloc_new(d, &c, &a));
    ss_stream_t *s = NULL;
    ss_event_t *e = NULL;
    CHECK_OK(ss_stream_new(d, &s));
    CHECK_OK(ss_event_new(d, &e));
    ss_block_t *b1 = NULL, *b2 = NULL, *b3 = NULL;
    CHECK_OK(ss_alloc_malloc(a, 1 * MiB, &b1));
    CHECK_OK(ss_alloc_malloc(a, 1 * MiB, &b2));
    void *host = malloc(1 * MiB);
    if (!a || !s || !e || !b1 || !b2 || !host) return;
    /* b1's memory is read by a copy still running: a stock release on its event */
    CHECK_OK(ss_copy_async(d, s, host, ss_block_ptr(b1), 1 * MiB, SS_COPY_D2H));
    CHECK_OK(ss_event_record(d, e, s));
    CHECK_OK(ss_alloc_free_event(a, b1, e));
    /* the allocation polls the event (call 1: not ready), then the OOM path syncs it (call 2:
     * fails) */
    CHECK_OK(ss_device_fault_arm(d, "event", 2, 0, SS_ERR_DEVICE));
    CHECK_STATUS(ss_alloc_malloc(a, 1 * MiB, &b3), SS_ERR_DEVICE);
    CHECK(b3 == NULL);
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_device_fault_arm(d, "event", 0, 0, SS_OK));
    CHECK_OK(ss_alloc_malloc(a, 1 * MiB, &b3));       /* the sync works again: served */
    CHECK_OK(ss_stream_sync(d, s));
    if (b3) CHECK_OK(ss_alloc_free(a, b3));
    CHECK_OK(ss_alloc_free(a, b2));
    CHECK_OK(ss_alloc_destroy(a));
    CHECK_OK(ss_event_free(d, e));
    CHECK_OK(ss_stream_free(d, s));
    free(host);
    CHECK_OK(ss_device_close(d));
}

static void t_park_reuses_segments(void) {
    ss_options o = ss_options_default();
    o.sim_capacity_bytes = 16 * MiB;
    o.sim_virtual_clock = 1;
    ss_device_t *d = NULL;
    CHECK_OK(ss_device_open("cpu-sim", &o, &d));
    if (!d) return;
    for (int measure = 0; measure < 2; measure++) {
        ss_alloc_config c = ss_alloc_config_default();
        c.budget_bytes = 8 * MiB;
        c.segment_bytes = 1 * MiB;
        ss_alloc_t *a = NULL;
        CHECK_OK(ss_alloc_new(measure ? NULL : d, &c, &a));
        if (!a) continue;
        ss_block_t *st = NULL, *b[6] = {0};
        CHECK_OK(ss_alloc_malloc(a, 3 * MiB / 2, &st));         /* "state": 2 MiB segment */
        uint64_t sizes[6] = {700 * KiB, 300 * KiB, 2 * MiB + 1, 100 * KiB, 1 * MiB, 5 * KiB};
        uint64_t act_segs = 0;
        for (int pass = 0; pass < 3; pass++) {
            for (int i = 0; i < 6; i++) CHECK_OK(ss_alloc_malloc(a, (size_t)sizes[i], &b[i]));
            ss_alloc_stats s;
            CHECK_OK(ss_alloc_get_stats(a, &s));
            if (pass == 0) act_segs = s.segment_allocs - 1;
            CHECK_EQ_U64(s.segment_allocs, act_segs + 1);   /* later passes: none new */
            for (int i = 0; i < 6; i++) CHECK_OK(ss_alloc_free(a, b[i]));
            CHECK_OK(ss_alloc_check(a));
            uint64_t allocs = s.segment_allocs;
            CHECK_OK(ss_alloc_park(a));
            CHECK_OK(ss_alloc_check(a));
            CHECK_OK(ss_alloc_get_stats(a, &s));
            CHECK_EQ_U64(s.segment_allocs, allocs);
            CHECK(s.parked_bytes > 0);
            CHECK_EQ_U64(s.segment_frees, 0);
            if (pass == 2) CHECK_EQ_U64(s.segment_reuses, 2 * act_segs);
        }
        /* a request larger than any parked segment: parked ones go back as the budget needs */
        ss_block_t *big = NULL;
        CHECK_OK(ss_alloc_malloc(a, 6 * MiB, &big));
        CHECK_OK(ss_alloc_check(a));
        ss_alloc_stats s;
        CHECK_OK(ss_alloc_get_stats(a, &s));
        CHECK(s.segment_frees > 0);
        CHECK(s.reserved_bytes <= 8 * MiB);
        CHECK_OK(ss_alloc_free(a, big));
        CHECK_OK(ss_alloc_park(a));
        CHECK_OK(ss_alloc_free(a, st));
        CHECK_OK(ss_alloc_destroy(a));                  /* parked segments go back too */
    }
    CHECK_OK(ss_device_close(d));                       /* nothing left on the device */
}

static void t_mem_ss_free_error(void) {
    gpt_mem m;
    char err[256];
    CHECK_EQ_INT(gpt_mem_init_ss(&m, "cpu-sim", NULL, 4 * MiB, err, sizeof err), 0);
    gpt_buf *x = gpt_mem_alloc(&m, "x", 4096, GPT_MEM_ACT);
    CHECK(x != NULL);
    if (!x) return;
    CHECK_EQ_INT(gpt_mem_ss_free_status(&m), SS_OK);
    void *impl = x->impl;
    m.be.free(m.be.user, x->ptr, impl);           /* freed behind the gpt_mem's back ... */
    CHECK_EQ_INT(gpt_mem_ss_free_status(&m), SS_OK);
    gpt_buf_unref(&m, x);                          /* ... so this free fails (freed twice) */
    CHECK_EQ_INT(gpt_mem_ss_free_status(&m), SS_ERR_STATE);
    gpt_buf *y = gpt_mem_alloc(&m, "y", 4096, GPT_MEM_ACT);
    CHECK(y == NULL);
    CHECK_MSG(strstr(m.err, "ss_alloc_free failed") != NULL, "err: %s", m.err);
    gpt_mem_destroy(&m);
}

int main(void) {
    RUN(t_oom_sync_error);
    RUN(t_park_reuses_segments);
    RUN(t_mem_ss_free_error);
    return test_summary();
}
