/* test-fault-sweep.c: the fault sweep (issue 14 item 8, docs/testing.md), at the library level.
 * A small training-like run (ITERS iterations of NT saved tensors, forward then backward, with
 * a temporary per operator) goes through the framework API (ss_ctx_* in SS_MEM_SMARTSWAP mode,
 * the executor on, the stage machine and the policy making the plans) on the "fault" device
 * wrapped around cpu-sim's virtual clock, under a budget that forces swapping. A clean run
 * counts each kind's calls; then every call of every kind (alloc: device and host allocations
 * and maps; copy; event: new, record, wait, query, sync; stream) fails in turn, once, in its own
 * fresh run. Each run must end either with success and every tensor read back intact (the
 * library recovered) or with a clean error status from some call (never SS_ERR_CORRUPT, no
 * crash); and afterwards the context, the allocator and the device must close with nothing live
 * (ss_device_close refuses otherwise; ASan's leak checker covers the rest in CI). Prints, per
 * kind, the sites swept and how many runs recovered and how many stopped with an error.
 *
 * Not covered here: the trainer (gpt/mem-ss.c) and replay (src/replay.c) open their devices by
 * name and cannot be handed a fault device yet.
 */
#include "smartswap.h"
#include "smartswap-alloc.h"
#include "smartswap-device.h"
#include "smartswap-exec.h"
#include "test.h"

#include <stdatomic.h>

#define KiB (1ull << 10)

/* the fault wrapper logs each failure it injects at debug level ("fault: failing ...") */
static atomic_int injected;
static void on_log(void *user, ss_log_level level, const char *msg) {
    (void)user;
    if (level == SS_LOG_DEBUG && !strncmp(msg, "fault: failing", 14)) atomic_fetch_add(&injected, 1);
    else if (level <= SS_LOG_WARN && getenv("SWEEP_VERBOSE")) fprintf(stderr, "    log: %s\n", msg);
}
enum { NT = 8, ITERS = 5 };
static const uint64_t TB = 48 * KiB;   /* bytes of each saved tensor */

typedef struct run {
    ss_device_t *dev;
    ss_stream_t *compute;
    ss_alloc_t  *al;
    ss_ctx_t    *ctx;
    uint32_t     f, b;
} run;

static void fillp(void *p, uint64_t n, uint64_t pat) {
    uint64_t *w = p;
    for (uint64_t j = 0; j < n / 8; j++) w[j] = pat * 0x9E3779B97F4A7C15ull + j;
}
static int holdsp(const void *p, uint64_t n, uint64_t pat) {
    const uint64_t *w = p;
    for (uint64_t j = 0; p && j < n / 8; j++)
        if (w[j] != pat * 0x9E3779B97F4A7C15ull + j) return 0;
    return p != NULL;
}

#define TRY(expr) do { if ((st = (expr)) != SS_OK) goto out; } while (0)

/* The run; *wrong counts tensors read back with wrong bytes. Returns the first error. */
static uint64_t granule;   /* 0: plain segments; else virtual-memory segments of this granule */
static ss_status scenario(run *r, ss_device_t *dev, uint64_t *wrong) {
    ss_status st;
    memset(r, 0, sizeof *r);
    r->dev = dev;
    TRY(ss_stream_wrap(dev, NULL, &r->compute));
    ss_alloc_config ac = ss_alloc_config_default();
    ac.budget_bytes = 5 * TB;            /* 8 saved tensors + a temporary: must swap */
    ac.segment_bytes = 64 * KiB;
    ac.granule_bytes = granule;
    TRY(ss_alloc_new(dev, &ac, &r->al));
    ss_ctx_config c = ss_ctx_config_default();
    c.opts.min_swap_bytes = 0;
    c.opts.budget_bytes = 5 * TB;
    c.mem_owner = SS_MEM_SMARTSWAP;
    c.device = dev;
    c.compute = r->compute;
    c.alloc = r->al;
    TRY(ss_ctx_new(&c, &r->ctx));
    TRY(ss_ctx_enable_swap(r->ctx, SS_SWAP_SMARTSWAP));
    TRY(ss_ctx_intern(r->ctx, "f", &r->f));
    TRY(ss_ctx_intern(r->ctx, "b", &r->b));
    for (int it = 0; it < ITERS; it++) {
        uint64_t h[NT] = {0};
        TRY(ss_ctx_iter_begin(r->ctx));
        for (int i = 0; i < NT; i++) {
            TRY(ss_ctx_op(r->ctx, r->f, 100 + (uint64_t)i));
            ss_block_t *tmp = NULL, *b = NULL;
            TRY(ss_alloc_malloc(r->al, (size_t)(TB / 2), &tmp));
            if ((st = ss_alloc_malloc(r->al, (size_t)TB, &b)) != SS_OK) { ss_alloc_free(r->al, tmp); goto out; }
            fillp(ss_block_ptr(b), TB, (uint64_t)(it * NT + i));
            ss_alloc_free(r->al, tmp);
            /* on failure the block is still the caller's */
            if ((st = ss_ctx_save_block(r->ctx, b, SS_DTYPE_U8, 0, NULL, 0, &h[i])) != SS_OK) {
                ss_alloc_free(r->al, b);
                goto out;
            }
        }
        for (int i = NT - 1; i >= 0; i--) {
            TRY(ss_ctx_op(r->ctx, r->b, 200 + (uint64_t)i));
            void *p = NULL;
            TRY(ss_ctx_load(r->ctx, h[i], NULL, &p));
            if (!holdsp(p, TB, (uint64_t)(it * NT + i))) (*wrong)++;
            TRY(ss_ctx_release(r->ctx, h[i]));
        }
        TRY(ss_ctx_iter_end(r->ctx, NULL));
    }
out:
    return st;
}

/* Closes everything; returns 0 when the device had nothing left live. */
static int teardown(run *r) {
    int bad = 0;
    if (r->ctx) ss_ctx_free(r->ctx);
    if (r->al && ss_alloc_destroy(r->al) != SS_OK) bad = 1;
    if (r->compute && ss_stream_free(r->dev, r->compute) != SS_OK) bad = 1;
    if (ss_device_close(r->dev) != SS_OK) bad = 1;
    return bad;
}

static ss_device_t *open_fault(void) {
    ss_options o = ss_options_default();
    o.sim_capacity_bytes = 64u << 20;
    o.sim_virtual_clock = 1;
    o.sim_d2h_gbps = o.sim_h2d_gbps = 2;
    ss_device_t *inner = NULL, *f = NULL;
    if (ss_device_open("cpu-sim", &o, &inner) != SS_OK) return NULL;
    if (ss_device_fault(inner, "alloc", 0, 0, SS_ERR_OOM, &f) != SS_OK) { ss_device_close(inner); return NULL; }
    return f;
}

static void sweep(void) {
    static const struct { const char *kind; ss_status fail; } kinds[] = {
        {"alloc", SS_ERR_OOM}, {"copy", SS_ERR_DEVICE}, {"event", SS_ERR_DEVICE}, {"stream", SS_ERR_DEVICE},
    };
    /* the clean run: its figures and the number of calls of each kind */
    ss_device_t *d = open_fault();
    CHECK_MSG(d != NULL, "cannot open the fault device over the embedded cpu-sim");
    if (!d) return;
    run r;
    uint64_t wrong = 0;
    CHECK_OK(scenario(&r, d, &wrong));
    CHECK_EQ_U64(wrong, 0);
    ss_device_stats s;
    CHECK_OK(ss_device_get_stats(d, &s));
    uint64_t copies = 0;
    for (int k = 0; k < SS_COPY_KIND_COUNT; k++) copies += s.copies[k];
    CHECK_MSG(copies > 0, "the clean run swapped nothing: the sweep would not reach the copy sites");
    CHECK_EQ_INT(teardown(&r), 0);
    fprintf(stderr, "  clean run: %llu device + %llu host allocations, %llu VM maps, %llu copies, %llu event records, "
            "%llu waits, %llu queries, %llu syncs\n", (unsigned long long)s.mem_allocs, (unsigned long long)s.host_allocs,
            (unsigned long long)s.vm_maps, (unsigned long long)copies, (unsigned long long)s.event_records,
            (unsigned long long)s.event_waits, (unsigned long long)s.event_queries, (unsigned long long)s.event_syncs);
    ss_log_set(on_log, NULL, SS_LOG_DEBUG);
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        uint64_t recovered = 0, errored = 0, nth;
        int by_status[SS_STATUS_COUNT] = {0};
        for (nth = 1; nth < 100000; nth++) {
            ss_device_t *fd = open_fault();
            if (!fd) { CHECK(0); break; }
            CHECK_OK(ss_device_fault_arm(fd, kinds[k].kind, nth, 0, kinds[k].fail));
            atomic_store(&injected, 0);
            uint64_t bad = 0;
            ss_status st = scenario(&r, fd, &bad);
            int live = teardown(&r);
            int hit = atomic_load(&injected) > 0;
            if (!hit) {   /* past this kind's last call: the run must be the clean one */
                CHECK_MSG(st == SS_OK && bad == 0 && !live, "%s: the run past the last call failed (%s)", kinds[k].kind,
                          ss_status_str(st));
                break;
            }
            CHECK_MSG(bad == 0, "%s call %llu failed: %llu tensors read back wrong (status %s)", kinds[k].kind,
                      (unsigned long long)nth, (unsigned long long)bad, ss_status_str(st));
            CHECK_MSG(st != SS_ERR_CORRUPT, "%s call %llu failed: the run reports corruption", kinds[k].kind,
                      (unsigned long long)nth);
            CHECK_MSG(!live, "%s call %llu failed (%s): something was left live on the device", kinds[k].kind,
                      (unsigned long long)nth, ss_status_str(st));
            if (st == SS_OK) recovered++;
            else errored++;
            if ((int)st >= 0 && st < SS_STATUS_COUNT) by_status[st]++;
        }
        char how[256] = "";
        for (int i = 1; i < SS_STATUS_COUNT; i++)
            if (by_status[i])
                snprintf(how + strlen(how), sizeof how - strlen(how), "%s%d %s", how[0] ? ", " : "", by_status[i],
                         ss_status_str((ss_status)i));
        fprintf(stderr, "  %-6s: each of its %llu calls failed in turn: %llu runs recovered (every tensor intact), "
                "%llu stopped with an error (%s), nothing left live\n", kinds[k].kind, (unsigned long long)(nth - 1),
                (unsigned long long)recovered, (unsigned long long)errored, how[0] ? how : "-");
    }
    ss_log_set(NULL, NULL, SS_LOG_ERROR);
}

static void t_sweep_segments(void) { granule = 0; sweep(); }
static void t_sweep_vm(void) { granule = 16 * KiB; sweep(); }

int main(void) {
    RUN(t_sweep_segments);
    RUN(t_sweep_vm);
    return test_summary();
}
