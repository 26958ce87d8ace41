/* test-alloc-fault.c: the allocator and the host pool on the "fault" device wrapper. A scripted
 * workload runs once to count the device calls of each kind it makes; then, for every such call
 * in turn, it runs again with that call failing once (and, for allocations, failing from then
 * on). Every step must return SS_OK or a clean error status, the invariant walker must pass
 * after every step, and after the cleanup the device must have nothing live (ss_device_close
 * succeeds and its counters show no memory in use): no leak.
 */
#include "smartswap-alloc.h"
#include "test.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#if defined(__SANITIZE_THREAD__)
#define SCALE 16              /* TSan instruments cpu-sim's fills: same calls, smaller bytes */
#else
#define SCALE 1
#endif

static ss_device_t *open_fault(void) {
    ss_options o = ss_options_default();
    o.sim_capacity_bytes = 64 * MiB / SCALE;
    o.sim_virtual_clock = 1;
    ss_device_t *sim = NULL, *f = NULL;
    if (ss_device_open("cpu-sim", &o, &sim) != SS_OK) return NULL;
    if (ss_device_fault(sim, "alloc", 0, 0, SS_ERR_DEVICE, &f) != SS_OK) {
        ss_device_close(sim);
        return NULL;
    }
    return f;
}

static int clean(ss_status st, ss_status injected) {
    return st == SS_OK || st == injected || st == SS_ERR_OOM;
}

typedef struct result { int unclean, check_fail, ok_steps; uint64_t events; } result;

/* The allocator workload: allocations that need new segments, frees, deferred releases with
 * events (queried and waited at reach), stock releases polled by allocations, trims. */
static result alloc_workload(ss_device_t *d, ss_status injected) {
    result r = {0, 0, 0, 0};
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = 8 * MiB / SCALE;
    c.segment_bytes = 1 * MiB / SCALE;
    ss_alloc_t *a = NULL;
    ss_status st = ss_alloc_new(d, &c, &a);
    if (st != SS_OK) { r.unclean++; return r; }
    ss_stream_t *s = NULL;
    ss_event_t *ev[8] = {0};
    int nev = 0;
    /* streams and events may fail too (kind "event"): then the workload runs without them */
    if (ss_stream_wrap(d, NULL, &s) != SS_OK) s = NULL;
    for (int i = 0; i < 8; i++)
        if (ss_event_new(d, &ev[nev]) == SS_OK) nev++;
    ss_block_t *b[16] = {0};
    for (int step = 0; step < 64; step++) {
        int i = step % 16;
        if (!b[i]) {
            size_t n = (size_t)((step * 7919) % 3 == 0 ? 1536 * KiB / SCALE : (step * 131) % (200 * KiB / SCALE) + 1);
            st = ss_alloc_malloc(a, n, &b[i]);
            if (st != SS_OK) b[i] = NULL;
        } else if (step % 5 == 0 && nev) {
            ss_event_t *e = ev[step % nev];
            if (ss_event_record(d, e, s) != SS_OK) e = NULL;   /* unrecorded: complete */
            st = ss_alloc_free_at(a, b[i], (uint64_t)step + 2, e, 0);
            b[i] = NULL;
        } else if (step % 7 == 0 && nev) {
            st = ss_alloc_free_event(a, b[i], ev[step % nev]);
            b[i] = NULL;
        } else {
            st = ss_alloc_free(a, b[i]);
            b[i] = NULL;
        }
        if (!clean(st, injected)) r.unclean++;
        if (st == SS_OK) r.ok_steps++;
        st = ss_alloc_reach(a, (uint64_t)step, s, NULL);
        if (!clean(st, injected)) r.unclean++;
        if (step % 13 == 0 && !clean(ss_alloc_trim(a), injected)) r.unclean++;
        if (ss_alloc_check(a) != SS_OK) r.check_fail++;
    }
    /* cleanup: everything back; a reach that failed is retried */
    for (int i = 0; i < 16; i++)
        if (b[i] && ss_alloc_free(a, b[i]) != SS_OK) r.unclean++;
    for (int tries = 0; tries < 3; tries++)
        if (ss_alloc_reach(a, UINT64_MAX, s, NULL) == SS_OK) break;
    for (int i = 0; i < nev; i++) ss_event_sync(d, ev[i]);
    ss_block_t *t = NULL;
    if (ss_alloc_malloc(a, 256, &t) == SS_OK) ss_alloc_free(a, t);   /* drains the stock queue */
    ss_alloc_stats as;
    ss_alloc_get_stats(a, &as);
    r.events = as.event_queries;
    if (ss_alloc_check(a) != SS_OK) r.check_fail++;
    st = ss_alloc_destroy(a);
    if (st == SS_ERR_STATE && as.pending_blocks && as.live_blocks == 0) {
        /* events failing for good: a pending block cannot be proven free, so destroy refuses
         * (defined) and destroy_force reclaims it (its event sync fails cleanly) */
        st = ss_alloc_destroy_force(a);
        if (!clean(st, injected)) r.unclean++;
    } else if (st != SS_OK) {
        r.unclean++;
        ss_alloc_destroy_force(a);
    }
    for (int i = 0; i < nev; i++) ss_event_free(d, ev[i]);
    if (s) ss_stream_free(d, s);
    return r;
}

static int no_leak(ss_device_t *d) {
    ss_device_stats ds;
    if (ss_device_get_stats(d, &ds) != SS_OK) return 0;
    return ds.mem_bytes_in_use == 0 && ds.host_bytes_in_use == 0;
}

/* Fails call nth of `kind` (once, or from then on) for nth = 1, 2, ... until a run sees no
 * failure injected; every run must be clean, pass the walker, and leak nothing. */
static void sweep(const char *kind, ss_status injected, int repeat,
                  result (*work)(ss_device_t *, ss_status), int *sites) {
    ss_device_t *d = open_fault();
    if (!d) { *sites = -1; return; }
    ss_device_stats base;
    ss_device_get_stats(d, &base);
    int n = 0;
    for (uint64_t nth = 1; nth < 400; nth++) {
        CHECK_OK(ss_device_fault_arm(d, kind, nth, repeat, injected));
        result r = work(d, injected);
        CHECK_MSG(r.unclean == 0, "%s call %" PRIu64 " failing (%s): %d unclean statuses", kind,
                  nth, ss_status_str(injected), r.unclean);
        CHECK_MSG(r.check_fail == 0, "%s call %" PRIu64 " failing: the walker failed", kind, nth);
        CHECK_MSG(no_leak(d), "%s call %" PRIu64 " failing: device memory left in use", kind, nth);
        CHECK_OK(ss_device_fault_arm(d, kind, 0, 0, injected));
        n++;
        /* stop once nth is past the calls the workload makes: a disarmed-equivalent run */
        ss_device_stats ds;
        ss_device_get_stats(d, &ds);
        uint64_t calls = strcmp(kind, "alloc") == 0
                             ? (ds.mem_allocs - base.mem_allocs + ds.host_allocs - base.host_allocs)
                             : (ds.event_queries - base.event_queries + ds.event_waits - base.event_waits +
                                ds.event_records - base.event_records + ds.event_syncs - base.event_syncs);
        base = ds;
        if (nth > calls + 8) break;
    }
    *sites = n;
    CHECK_OK(ss_device_close(d));
}

static void t_alloc_sites(void) {
    int sites = 0;
    sweep("alloc", SS_ERR_DEVICE, 0, alloc_workload, &sites);
    if (sites < 0) { CHECK_MSG(0, "cannot open the fault device over the embedded cpu-sim"); return; }
    printf("alloc sites failing once with SS_ERR_DEVICE: %d runs\n", sites);
    sweep("alloc", SS_ERR_DEVICE, 1, alloc_workload, &sites);
    printf("alloc sites failing from then on with SS_ERR_DEVICE: %d runs\n", sites);
    sweep("alloc", SS_ERR_OOM, 0, alloc_workload, &sites);
    printf("alloc sites failing once with SS_ERR_OOM (the OOM path retries): %d runs\n", sites);
}

static void t_event_sites(void) {
    int sites = 0;
    sweep("event", SS_ERR_DEVICE, 0, alloc_workload, &sites);
    if (sites < 0) { CHECK_MSG(0, "cannot open the fault device over the embedded cpu-sim"); return; }
    printf("event sites failing once: %d runs\n", sites);
    sweep("event", SS_ERR_DEVICE, 1, alloc_workload, &sites);
    printf("event sites failing from then on: %d runs\n", sites);
}

/* A device OOM failing once inside the OOM path itself: every allocation succeeds anyway. */
static void t_oom_once_recovers(void) {
    ss_device_t *d = open_fault();
    if (!d) { CHECK_MSG(0, "cannot open the fault device over the embedded cpu-sim"); return; }
    ss_alloc_t *a;
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = 8 * MiB / SCALE;
    c.segment_bytes = 2 * MiB / SCALE;
    CHECK_OK(ss_alloc_new(d, &c, &a));
    ss_block_t *x, *y;
    CHECK_OK(ss_alloc_malloc(a, 1 * MiB / SCALE, &x));   /* segment 1 */
    CHECK_OK(ss_device_fault_arm(d, "alloc", 1, 0, SS_ERR_OOM));
    CHECK_OK(ss_alloc_malloc(a, 3 * MiB / SCALE, &y));   /* first try fails: exact-size retry */
    CHECK_EQ_U64(ss_block_size(y), 3 * MiB / SCALE);
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_alloc_free(a, x));
    CHECK_OK(ss_alloc_free(a, y));
    CHECK_OK(ss_alloc_destroy(a));
    CHECK(no_leak(d));
    CHECK_OK(ss_device_close(d));
}

static result pool_workload(ss_device_t *d, ss_status injected) {
    result r = {0, 0, 0, 0};
    ss_hostpool_t *p = NULL;
    if (ss_hostpool_new(d, 2 * MiB, &p) != SS_OK) { r.unclean++; return r; }
    void *held[8] = {0};
    for (int step = 0; step < 48; step++) {
        int i = step % 8;
        ss_status st;
        if (held[i]) { st = ss_hostpool_put(p, held[i]); held[i] = NULL; }
        else {
            st = ss_hostpool_get(p, (size_t)((step * 7777) % (300 * KiB)) + 1, &held[i]);
            if (st != SS_OK) held[i] = NULL;
        }
        if (!(st == SS_OK || st == SS_ERR_HOST_OOM || st == injected)) r.unclean++;
        if (st == SS_OK) r.ok_steps++;
    }
    for (int i = 0; i < 8; i++)
        if (held[i] && ss_hostpool_put(p, held[i]) != SS_OK) r.unclean++;
    if (ss_hostpool_destroy(p) != SS_OK) r.unclean++;
    return r;
}

static void t_hostpool_sites(void) {
    int sites = 0;
    sweep("alloc", SS_ERR_HOST_OOM, 0, pool_workload, &sites);
    if (sites < 0) { CHECK_MSG(0, "cannot open the fault device over the embedded cpu-sim"); return; }
    printf("host pool sites failing once: %d runs\n", sites);
    sweep("alloc", SS_ERR_HOST_OOM, 1, pool_workload, &sites);
    printf("host pool sites failing from then on: %d runs\n", sites);
}

int main(void) {
    RUN(t_oom_once_recovers);
    RUN(t_alloc_sites);
    RUN(t_event_sites);
    RUN(t_hostpool_sites);
    return test_summary();
}
