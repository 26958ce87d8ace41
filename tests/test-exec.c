/* test-exec.c: the executor (src/exec.c) in SS_MEM_FRAMEWORK mode, driven the way the hooks-only
 * PyTorch adapter drives it (docs/api.md "The hooks-only PyTorch adapter, call by call"):
 *
 *  - the test owns every device buffer (ss_mem_alloc on cpu-sim), its compute stream is a
 *    wrapped external stream (cpu-sim's host stream), the forward pass runs on the main thread,
 *    backward (operators, loads, releases) on a second thread, as autograd's;
 *  - actions are polled and executed by the test: SS_ACTION_DROP frees the test's buffer
 *    (cpu-sim poisons freed memory, so a later read of it shows), SS_ACTION_ALLOC allocates a
 *    buffer and answers with ss_ctx_action_done; every Nth ALLOC is answered NULL, and that
 *    tensor's load must take the slow path (a counted miss) and still return the right bytes;
 *  - plans come from the stage machine and the policy generator (times fixed, so that a run is
 *    repeatable), swaps are real copies on cpu-sim, and every load checks every byte;
 *  - t_concurrent_poller: real clock with copy jitter, and a third thread polling actions all
 *    along, so answers race with loads (an ALLOC answered after its load took the slow path);
 *  - t_fault_*: the device wrapped by the fault device; every copy, event and allocation site
 *    the run reaches fails once in turn (and from then on): every call returns SS_OK or a clean
 *    error, every load that returns SS_OK has the right bytes, and afterwards nothing is live
 *    (the test's buffers, the executor's host pool, streams and events: ss_device_close succeeds);
 *  - t_host_cap_*: a bounded host pool that fills: framework mode keeps the tensors resident
 *    (counted in host_full, bytes still right); the trainer mode's eviction fallback fails with
 *    SS_ERR_OOM and a log line naming the cap, never a crash.
 *
 * Sanitizer builds (TSan, ASan) run the same code paths on fewer layers and iterations.
 */
#include "test.h"
#include "exec.h"
#include "policy.h"
#include "smartswap-device.h"

#include <pthread.h>

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define KiB (1ull << 10)
enum { MAXL = 16 };

/* ---- the adapter stand-in ------------------------------------------------------------------- */

typedef struct tens {
    uint64_t h;          /* handle (0: not saved / released) */
    void    *orig;       /* the test's buffer (NULL once dropped) */
    void    *in;         /* the buffer the test handed back for the swap-in */
    uint64_t bytes, pat;
    int64_t  shape[2];
} tens;

typedef struct fw {
    ss_device_t *dev;      /* the device the context uses (maybe the fault wrapper) */
    ss_device_t *mem;      /* where the test's own buffers come from (never failing) */
    ss_stream_t *compute;
    ss_ctx_t    *ctx;
    pthread_mutex_t mu;    /* t[] and the counters the poller touches */
    tens     t[MAXL];
    uint32_t nl;
    uint32_t id_fwd, id_loss, id_bwd;
    int      null_every;   /* answer every Nth ALLOC with NULL (0: never) */
    double   op_s;         /* compute seconds per operator */
    ss_status injected;    /* the fault being injected (SS_OK: none) */
    uint32_t iter;
    /* counters */
    uint64_t drops, allocs, null_answers, late_answers, corrupt, unclean, ok_loads, bad_loads;
    /* the poller thread */
    int          poller_on;
    volatile int poller_stop;
} fw;

static int clean(const fw *f, ss_status st) {
    return st == SS_OK || (f->injected != SS_OK &&
                           (st == f->injected || st == SS_ERR_OOM || st == SS_ERR_HOST_OOM));
}

static void note(fw *f, ss_status st, const char *what) {
    if (clean(f, st)) return;
    __atomic_add_fetch(&f->unclean, 1, __ATOMIC_RELAXED);
    fprintf(stderr, "  unclean status %s from %s (injected %s)\n", ss_status_str(st), what,
            ss_status_str(f->injected));
}

static uint64_t pattern(uint32_t i, uint32_t it) {
    uint64_t x = ((uint64_t)it << 32) ^ i ^ 0xC0FFEEull;
    x ^= x >> 31; x *= 0x9E3779B97F4A7C15ull; x ^= x >> 29;
    return x | 1;
}

static void fill(void *p, uint64_t n, uint64_t pat) {
    uint64_t *w = p;
    for (uint64_t j = 0; j < n / 8; j++) w[j] = pat + j;
}

static int holds(const void *p, uint64_t n, uint64_t pat) {
    const uint64_t *w = p;
    for (uint64_t j = 0; j < n / 8; j++)
        if (w[j] != pat + j) return 0;
    return 1;
}

static tens *find(fw *f, uint64_t h) {
    for (uint32_t i = 0; i < f->nl; i++)
        if (h && f->t[i].h == h) return &f->t[i];
    return NULL;
}

/* Polls and executes every pending action (the adapter's poll()). */
static void poll_actions(fw *f) {
    ss_action a[8];
    for (;;) {
        uint32_t n = 0;
        ss_status st = ss_ctx_actions(f->ctx, a, 8, &n);
        note(f, st, "ss_ctx_actions");
        if (st || n == 0) return;
        for (uint32_t k = 0; k < n; k++) {
            pthread_mutex_lock(&f->mu);
            tens *T = find(f, a[k].handle);
            if (!T) {                      /* released since: nothing to do */
                pthread_mutex_unlock(&f->mu);
                continue;
            }
            if (a[k].kind == SS_ACTION_DROP) {
                if (T->orig) {
                    ss_mem_free(f->mem, T->orig, (size_t)T->bytes);   /* poisons it */
                    T->orig = NULL;
                }
                f->drops++;
            } else if (a[k].kind == SS_ACTION_ALLOC) {
                f->allocs++;
                void *p = NULL;
                if (!(f->null_every && f->allocs % (uint64_t)f->null_every == 0) && !T->in &&
                    ss_mem_alloc(f->mem, (size_t)a[k].bytes, &p) != SS_OK)
                    p = NULL;
                if (!p) f->null_answers++;
                st = ss_ctx_action_done(f->ctx, a[k].handle, p);
                note(f, st, "ss_ctx_action_done");
                if (st == SS_OK && p) T->in = p;
                else if (p) ss_mem_free(f->mem, p, (size_t)a[k].bytes);
            }
            pthread_mutex_unlock(&f->mu);
        }
    }
}

static void *poller_main(void *arg) {
    fw *f = arg;
    while (!__atomic_load_n(&f->poller_stop, __ATOMIC_ACQUIRE)) poll_actions(f);
    return NULL;
}

/* Releases tensor i: the handle, then the test's buffers. */
static void release_tensor(fw *f, uint32_t i) {
    tens *T = &f->t[i];
    pthread_mutex_lock(&f->mu);   /* the poller no longer finds it: no answer after release */
    uint64_t h = T->h;
    T->h = 0;
    pthread_mutex_unlock(&f->mu);
    if (h) note(f, ss_ctx_release(f->ctx, h), "ss_ctx_release");
    pthread_mutex_lock(&f->mu);
    if (T->orig) ss_mem_free(f->mem, T->orig, (size_t)T->bytes);
    if (T->in) ss_mem_free(f->mem, T->in, (size_t)T->bytes);
    T->orig = T->in = NULL;
    pthread_mutex_unlock(&f->mu);
}

static void *backward_main(void *arg) {
    fw *f = arg;
    for (uint32_t k = 0; k < f->nl; k++) {
        uint32_t i = f->nl - 1 - k;
        note(f, ss_ctx_op(f->ctx, f->id_bwd, 0xB000 + i), "ss_ctx_op");
        if (!f->poller_on) poll_actions(f);   /* the adapter polls at every unpack */
        tens *T = &f->t[i];
        if (T->h) {
            void *p = NULL;
            ss_status st = ss_ctx_load(f->ctx, T->h, NULL, &p);
            note(f, st, "ss_ctx_load");
            if (st == SS_OK) {
                f->ok_loads++;
                if (!p || !holds(p, T->bytes, T->pat)) {
                    f->corrupt++;
                    fprintf(stderr, "  iteration %u: tensor %u read wrong bytes (%s)\n", f->iter, i,
                            p == T->orig ? "its own buffer" : p == T->in ? "the swap-in buffer"
                                                                         : "the executor's buffer");
                }
            } else {
                f->bad_loads++;
            }
        }
        if (f->op_s > 0) ss_compute_async(f->dev, f->compute, f->op_s);
        release_tensor(f, i);
    }
    return NULL;
}

/* One iteration: forward on this thread, backward on a second one. */
static void one_iter(fw *f) {
    ss_status st = ss_ctx_iter_begin(f->ctx);
    note(f, st, "ss_ctx_iter_begin");
    if (st) return;
    for (uint32_t i = 0; i < f->nl; i++) {
        note(f, ss_ctx_op(f->ctx, f->id_fwd, 0xF000 + i), "ss_ctx_op");
        if (!f->poller_on) poll_actions(f);   /* the adapter polls at every pack */
        tens *T = &f->t[i];
        T->bytes = (uint64_t)(1 + i % 3) * 16 * KiB;
        T->shape[0] = (int64_t)(T->bytes / 256);
        T->shape[1] = 64;
        T->pat = pattern(i, f->iter);
        void *p = NULL;
        if (ss_mem_alloc(f->mem, (size_t)T->bytes, &p) != SS_OK) { f->unclean++; continue; }
        if (f->op_s > 0) ss_compute_async(f->dev, f->compute, f->op_s);
        fill(p, T->bytes, T->pat);
        uint64_t h = 0;
        st = ss_ctx_save(f->ctx, p, T->bytes, SS_DTYPE_F32, 2, T->shape, 0, &h);
        note(f, st, "ss_ctx_save");
        pthread_mutex_lock(&f->mu);
        T->orig = p;
        T->h = st == SS_OK ? h : 0;
        pthread_mutex_unlock(&f->mu);
    }
    note(f, ss_ctx_op(f->ctx, f->id_loss, 0), "ss_ctx_op");
    if (f->op_s > 0) ss_compute_async(f->dev, f->compute, f->op_s);
    pthread_t bt;
    if (pthread_create(&bt, NULL, backward_main, f) == 0) pthread_join(bt, NULL);
    else backward_main(f);
    if (!f->poller_on) poll_actions(f);
    ss_iter_report rep;
    note(f, ss_ctx_iter_end(f->ctx, &rep), "ss_ctx_iter_end");
    f->iter++;
}

/* The policy with fixed times: the profile's iteration time is wall time, so a run would
 * otherwise plan differently each time. */
typedef struct planner { ssi_policy_config pc; double op_s; } planner;
static ss_status fixed_plan(void *user, const ss_profile *prof, ss_plan **out) {
    const planner *pl = user;
    ssi_policy_config c = pl->pc;
    c.time.mode = SSI_TIME_LAYER;
    c.time.layers = prof->nops;                          /* every operator op_s long */
    c.time.iter_seconds = pl->op_s > 0 ? pl->op_s * prof->nops : 1e-3;
    return ssi_policy_plan(prof, &c, out, NULL, NULL, 0);
}
static void plan_free(void *user, ss_plan *p) { (void)user; ssi_plan_free(p); }

typedef struct fw_cfg {
    uint32_t nl, iters;
    int      virt, null_every, poller;
    double   jitter_us, op_s;
    uint64_t host_cap;     /* options.host_mem_bytes (the policy plans within it) */
    uint64_t pool_cap;     /* > 0: the executor gets its own host pool with this cap, which the
                              policy does not know about */
    ss_status injected;
} fw_cfg;

static ss_options fw_opts(const fw_cfg *c) {
    ss_options o = ss_options_default();
    o.sim_virtual_clock = c->virt;
    o.sim_jitter_us = c->jitter_us;
    o.sim_d2h_gbps = o.sim_h2d_gbps = 2;
    o.sim_capacity_bytes = 64ull << 20;
    o.min_swap_bytes = 0;
    o.warmup_iters = 1;
    o.host_mem_bytes = c->host_cap;
    o.seed = 11;
    /* framework mode without ss_ctx_set_mem counts saved tensors only: half of them */
    uint64_t saved = 0;
    for (uint32_t i = 0; i < c->nl; i++) saved += (uint64_t)(1 + i % 3) * 16 * KiB;
    o.budget_bytes = saved / 2;
    return o;
}

/* Sets up a context on dev (buffers from mem), runs c->iters iterations, tears everything down.
 * Returns the executor's totals in *tot (zeros when it could not be enabled). */
static void fw_run(ss_device_t *dev, ss_device_t *mem, const fw_cfg *c, fw *f,
                   ss_exec_report *tot) {
    memset(f, 0, sizeof *f);
    memset(tot, 0, sizeof *tot);
    pthread_mutex_init(&f->mu, NULL);
    f->dev = dev;
    f->mem = mem;
    f->nl = c->nl;
    f->null_every = c->null_every;
    f->op_s = c->op_s;
    f->injected = c->injected;
    ss_options o = fw_opts(c);
    ss_status st = ss_stream_wrap(dev, NULL, &f->compute);
    note(f, st, "ss_stream_wrap");
    ss_ctx_config cc = ss_ctx_config_default();
    cc.opts = o;
    cc.mem_owner = SS_MEM_FRAMEWORK;
    cc.device = dev;
    cc.compute = f->compute;
    planner pc;
    ssi_policy_config_from_options(&o, &pc.pc);
    pc.op_s = c->op_s;
    ss_hostpool_t *pool = NULL;
    if (st == SS_OK && c->pool_cap) {
        st = ss_hostpool_new(dev, c->pool_cap, &pool);
        note(f, st, "ss_hostpool_new");
    }
    if (st == SS_OK) {
        st = ss_ctx_new(&cc, &f->ctx);
        note(f, st, "ss_ctx_new");
    }
    if (st == SS_OK) {
        ss_ctx_intern(f->ctx, "linear", &f->id_fwd);
        ss_ctx_intern(f->ctx, "loss", &f->id_loss);
        ss_ctx_intern(f->ctx, "linear_bwd", &f->id_bwd);
        ss_exec_config ec = ss_exec_config_default();
        ec.use_policy = 0;
        ec.hostpool = pool;
        st = ss_ctx_enable_swap_ex(f->ctx, &ec);
        note(f, st, "ss_ctx_enable_swap");
        ssi_planner pl = {fixed_plan, plan_free, &pc};
        if (st == SS_OK) note(f, ssi_ctx_set_planner(f->ctx, &pl), "ssi_ctx_set_planner");
    }
    pthread_t pt;
    if (st == SS_OK && c->poller) {
        f->poller_on = pthread_create(&pt, NULL, poller_main, f) == 0;
    }
    for (uint32_t it = 0; st == SS_OK && it < c->iters; it++) one_iter(f);
    if (f->poller_on) {
        __atomic_store_n(&f->poller_stop, 1, __ATOMIC_RELEASE);
        pthread_join(pt, NULL);
        f->poller_on = 0;
    }
    if (f->ctx) {
        if (ss_ctx_exec_totals(f->ctx, tot) != SS_OK) memset(tot, 0, sizeof *tot);
        poll_actions(f);
        /* whatever a failed call left saved: released as a framework drops its graph */
        for (uint32_t i = 0; i < f->nl; i++) release_tensor(f, i);
        ss_ctx_free(f->ctx);
        f->ctx = NULL;
    }
    for (uint32_t i = 0; i < f->nl; i++) release_tensor(f, i);
    if (pool) note(f, ss_hostpool_destroy(pool), "ss_hostpool_destroy");
    if (f->compute) ss_stream_free(dev, f->compute);
    pthread_mutex_destroy(&f->mu);
}

static ss_device_t *open_sim(const fw_cfg *c) {
    ss_options o = fw_opts(c);
    ss_device_t *d = NULL;
    if (ss_device_open("cpu-sim", &o, &d) != SS_OK) return NULL;
    return d;
}

static int nothing_live(ss_device_t *d) {
    ss_device_stats s;
    if (ss_device_get_stats(d, &s) != SS_OK) return 0;
    return s.mem_bytes_in_use == 0 && s.host_bytes_in_use == 0;
}

static fw_cfg base_cfg(void) {
    fw_cfg c;
    memset(&c, 0, sizeof c);
    c.nl = SANITIZED ? 6 : 12;
    c.iters = SANITIZED ? 4 : 8;
    c.virt = 1;
    c.op_s = 20e-6;
    return c;
}

/* ---- end to end ----------------------------------------------------------------------------- */

static void t_framework_end_to_end(void) {
    for (int nulls = 0; nulls < 2; nulls++) {
        fw_cfg c = base_cfg();
        c.null_every = nulls ? 3 : 0;
        ss_device_t *d = open_sim(&c);
        CHECK(d != NULL);
        if (!d) return;
        fw f;
        ss_exec_report tot;
        fw_run(d, d, &c, &f, &tot);
        CHECK_EQ_U64(f.unclean, 0);
        CHECK_EQ_U64(f.corrupt, 0);
        CHECK_EQ_U64(f.bad_loads, 0);
        CHECK_EQ_U64(f.ok_loads, (uint64_t)c.nl * c.iters);
        CHECK_EQ_U64(tot.iter, c.iters);
        CHECK(tot.planned_tensors > 0);
        CHECK(tot.swap_outs > 0 && tot.swapped_out_bytes > 0);
        CHECK(tot.swap_ins > 0);
        CHECK_MSG(f.drops > 0 && f.allocs > 0, "drops %llu allocs %llu", (unsigned long long)f.drops,
                  (unsigned long long)f.allocs);
        CHECK_EQ_U64(tot.evictions, 0);
        if (nulls) {
            CHECK(f.null_answers > 0);
            CHECK_MSG(tot.misses >= f.null_answers, "misses %u, NULL answers %llu", tot.misses,
                      (unsigned long long)f.null_answers);
        } else {
            CHECK_EQ_U64(f.null_answers, 0);
            CHECK_EQ_U64(tot.misses, 0);
        }
        /* release-path queries: one per swapped tensor at its free point, at most */
        CHECK_MSG(tot.event_queries <= tot.swap_outs, "queries %llu for %u swap-outs",
                  (unsigned long long)tot.event_queries, tot.swap_outs);
        CHECK(nothing_live(d));
        CHECK_OK(ss_device_close(d));
        fprintf(stderr, "  framework%s: %u swap-outs, %u swap-ins, %llu drops, %llu allocs (%llu "
                "NULL), %u misses, %u stalls\n", nulls ? " (NULL answers)" : "", tot.swap_outs,
                tot.swap_ins, (unsigned long long)f.drops, (unsigned long long)f.allocs,
                (unsigned long long)f.null_answers, tot.misses, tot.stalls);
    }
}

/* Real clock, copy jitter, a poller thread answering actions while loads run. */
static void t_concurrent_poller(void) {
    fw_cfg c = base_cfg();
    c.virt = 0;
    c.jitter_us = 30;
    c.poller = 1;
    c.null_every = 5;
    c.iters = SANITIZED ? 4 : 10;
    ss_device_t *d = open_sim(&c);
    CHECK(d != NULL);
    if (!d) return;
    fw f;
    ss_exec_report tot;
    fw_run(d, d, &c, &f, &tot);
    CHECK_EQ_U64(f.unclean, 0);
    CHECK_EQ_U64(f.corrupt, 0);
    CHECK_EQ_U64(f.bad_loads, 0);
    CHECK_EQ_U64(f.ok_loads, (uint64_t)c.nl * c.iters);
    CHECK(tot.swap_outs > 0);
    CHECK(nothing_live(d));
    CHECK_OK(ss_device_close(d));
    fprintf(stderr, "  poller: %u swap-outs, %u swap-ins, %u misses, %u stalls, %llu drops\n",
            tot.swap_outs, tot.swap_ins, tot.misses, tot.stalls, (unsigned long long)f.drops);
}

/* ---- fault injection ------------------------------------------------------------------------ */

/* Fails the nth call of `kind` (once, or from then on) for every n the run reaches. The test's
 * own buffers come from the inner device, so only the library's calls fail. */
static void fault_sweep(const char *kind, ss_status injected, int repeat) {
    fw_cfg c = base_cfg();
    c.nl = SANITIZED ? 5 : 8;
    c.iters = 4;
    c.null_every = 4;
    uint64_t max_n = 0;
    int runs = 0, injected_runs = 0;
    for (uint64_t nth = 1; nth < 2000; nth++) {
        ss_device_t *in = open_sim(&c), *d = NULL;
        CHECK(in != NULL);
        if (!in) return;
        CHECK_OK(ss_device_fault(in, kind, nth, repeat, injected, &d));
        if (!d) { ss_device_close(in); return; }
        c.injected = injected;
        fw f;
        ss_exec_report tot;
        fw_run(d, in, &c, &f, &tot);
        runs++;
        CHECK_MSG(f.unclean == 0, "%s call %llu failing: %llu unclean statuses", kind,
                  (unsigned long long)nth, (unsigned long long)f.unclean);
        CHECK_MSG(f.corrupt == 0, "%s call %llu failing: %llu loads returned SS_OK with wrong "
                  "bytes", kind, (unsigned long long)nth, (unsigned long long)f.corrupt);
        CHECK_MSG(nothing_live(in), "%s call %llu failing: memory left in use", kind,
                  (unsigned long long)nth);
        /* did the run reach call nth? the wrapper counts every call of the kind */
        ss_device_stats s;
        ss_device_get_stats(d, &s);
        int reached = f.bad_loads || f.unclean || tot.iter < c.iters;
        uint64_t calls = 0;
        if (strcmp(kind, "copy") == 0) {
            for (int k = 0; k < SS_COPY_KIND_COUNT; k++) calls += s.copies[k];
        } else if (strcmp(kind, "event") == 0) {
            calls = s.event_records + s.event_waits + s.event_queries + s.event_syncs;
        } else {
            calls = s.mem_allocs + s.host_allocs;
        }
        if (calls + 1 >= nth || reached) injected_runs++;
        if (calls > max_n) max_n = calls;
        ss_status cs = ss_device_close(d);
        CHECK_MSG(cs == SS_OK, "%s call %llu failing: streams, events or memory left live", kind,
                  (unsigned long long)nth);
        if (nth > max_n + 16) break;   /* past every call the run makes (event news included) */
    }
    fprintf(stderr, "  %s failing %s with %s: %d runs\n", kind, repeat ? "from then on" : "once",
            ss_status_str(injected), runs);
    CHECK(runs > 8);
    CHECK(injected_runs > 0);
}

static void t_fault_copy(void) {
    fault_sweep("copy", SS_ERR_DEVICE, 0);
    if (!SANITIZED) fault_sweep("copy", SS_ERR_DEVICE, 1);
}

static void t_fault_event(void) {
    fault_sweep("event", SS_ERR_DEVICE, 0);
    if (!SANITIZED) fault_sweep("event", SS_ERR_DEVICE, 1);
}

static void t_fault_alloc(void) {
    fault_sweep("alloc", SS_ERR_HOST_OOM, 0);
    if (!SANITIZED) fault_sweep("alloc", SS_ERR_OOM, 1);
}

/* ---- bounded host pool ---------------------------------------------------------------------- */

/* Framework mode: with the cap in the options, the policy plans within it and the pool never
 * refuses; with a pool smaller than the plan assumed, the pool fills and the rest stays
 * resident (host_full); bytes right either way, nothing crashes. */
static void t_host_cap_framework(void) {
    for (int own = 0; own < 2; own++) {
        fw_cfg c = base_cfg();
        if (own) c.pool_cap = 40 * KiB; else c.host_cap = 40 * KiB;   /* two or three tensors */
        ss_device_t *d = open_sim(&c);
        CHECK(d != NULL);
        if (!d) return;
        fw f;
        ss_exec_report tot;
        fw_run(d, d, &c, &f, &tot);
        CHECK_EQ_U64(f.unclean, 0);
        CHECK_EQ_U64(f.corrupt, 0);
        CHECK_EQ_U64(f.ok_loads, (uint64_t)c.nl * c.iters);
        CHECK(tot.swap_outs > 0);
        if (own) CHECK_MSG(tot.host_full > 0, "host_full %u", tot.host_full);
        else CHECK_EQ_U64(tot.host_full, 0);
        CHECK(tot.host_peak_bytes <= 40 * KiB);
        CHECK(nothing_live(d));
        CHECK_OK(ss_device_close(d));
    }
}

typedef struct logcap { pthread_mutex_t mu; int host_cap_lines; } logcap;
static void log_cap(void *user, ss_log_level level, const char *msg) {
    logcap *l = user;
    (void)level;
    pthread_mutex_lock(&l->mu);
    if (strstr(msg, "host") && (strstr(msg, "cap") || strstr(msg, "host-mem"))) l->host_cap_lines++;
    pthread_mutex_unlock(&l->mu);
}

/* Trainer mode (SS_MEM_SMARTSWAP): saved blocks fill the budget, the eviction fallback swaps
 * the oldest out until the host pool is at its cap; the next allocation is SS_ERR_OOM with a
 * log line naming the cap, and everything comes back clean. */
static void t_host_cap_evict(void) {
    ss_options o = ss_options_default();
    o.sim_virtual_clock = 1;
    o.sim_capacity_bytes = 16ull << 20;
    o.host_mem_bytes = 256 * KiB;
    o.warmup_iters = 100;            /* WarmUp throughout: only the eviction fallback swaps */
    ss_device_t *d = NULL;
    CHECK_OK(ss_device_open("cpu-sim", &o, &d));
    if (!d) return;
    ss_alloc_config ac = ss_alloc_config_default();
    ac.budget_bytes = 1024 * KiB;
    ac.segment_bytes = 64 * KiB;
    ss_alloc_t *a = NULL;
    CHECK_OK(ss_alloc_new(d, &ac, &a));
    ss_stream_t *s = NULL;
    CHECK_OK(ss_stream_wrap(d, NULL, &s));
    ss_ctx_config cc = ss_ctx_config_default();
    cc.opts = o;
    cc.mem_owner = SS_MEM_SMARTSWAP;
    cc.device = d;
    cc.compute = s;
    cc.alloc = a;
    ss_ctx_t *ctx = NULL;
    CHECK_OK(ss_ctx_new(&cc, &ctx));
    CHECK_OK(ss_ctx_enable_swap(ctx, SS_SWAP_SMARTSWAP));
    logcap lc;
    pthread_mutex_init(&lc.mu, NULL);
    lc.host_cap_lines = 0;
    ss_log_set(log_cap, &lc, SS_LOG_WARN);
    uint32_t id = 0;
    CHECK_OK(ss_ctx_intern(ctx, "op", &id));
    CHECK_OK(ss_ctx_iter_begin(ctx));
    uint64_t hs[64];
    uint64_t pats[64];
    int n = 0;
    ss_status st = SS_OK;
    while (n < 64) {
        CHECK_OK(ss_ctx_op(ctx, id, (uint64_t)n));
        ss_block_t *b = NULL;
        st = ss_alloc_malloc(a, 64 * KiB, &b);
        if (st) break;
        pats[n] = pattern((uint32_t)n, 0);
        fill(ss_block_ptr(b), 64 * KiB, pats[n]);
        int64_t shape[1] = {16 * 1024};
        CHECK_OK(ss_ctx_save_block(ctx, b, SS_DTYPE_F32, 1, shape, 0, &hs[n]));
        n++;
    }
    CHECK_STATUS(st, SS_ERR_OOM);
    CHECK_MSG(n >= 16 + 4 - 1 && n < 64, "%d blocks saved", n);   /* budget + what the host took */
    CHECK_MSG(lc.host_cap_lines > 0, "no log line names the host cap");
    ss_log_set(NULL, NULL, SS_LOG_WARN);
    ss_exec_report r;
    /* backward: every saved tensor comes back with its bytes (evicted ones are misses) */
    for (int i = n - 1; i >= 0; i--) {
        CHECK_OK(ss_ctx_op(ctx, id, 0x1000u + (uint64_t)i));
        void *p = NULL;
        CHECK_OK(ss_ctx_load(ctx, hs[i], NULL, &p));
        CHECK_MSG(p && holds(p, 64 * KiB, pats[i]), "tensor %d read wrong bytes", i);
        CHECK_OK(ss_ctx_release(ctx, hs[i]));
    }
    CHECK_OK(ss_ctx_iter_end(ctx, NULL));
    CHECK_OK(ss_ctx_exec_report(ctx, &r));
    CHECK(r.evictions >= 1);
    CHECK(r.host_full >= 1);
    CHECK(r.host_peak_bytes <= o.host_mem_bytes);
    ss_ctx_free(ctx);
    CHECK_OK(ss_alloc_destroy(a));
    CHECK_OK(ss_stream_free(d, s));
    CHECK(nothing_live(d));
    CHECK_OK(ss_device_close(d));
    pthread_mutex_destroy(&lc.mu);
}

int main(void) {
    ss_log_set(NULL, NULL, SS_LOG_WARN);
    RUN(t_framework_end_to_end);
    RUN(t_concurrent_poller);
    RUN(t_host_cap_framework);
    RUN(t_host_cap_evict);
    RUN(t_fault_copy);
    RUN(t_fault_event);
    RUN(t_fault_alloc);
    return test_summary();
}
