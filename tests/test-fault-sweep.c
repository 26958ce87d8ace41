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
 * The trainer and replay, by call site: the CLI ($SS_CLI, `make test` sets it) runs `train`
 * (smartswap under a budget; FAULT_SWEEP_FULL=1 adds recompute and offload-all) and `replay` of
 * tests/data/fault-sweep-replay.jsonl on the device "fault:cpu-sim". A clean run lists every
 * site (file:line of the library's device call) with its calls (SMARTSWAP_FAULT_REPORT); then
 * SMARTSWAP_FAULT=FILE:LINE:N fails one call in its own fresh process. FAULT_SWEEP_FULL=1 (make
 * fault-sweep) fails each site's first, middle and last call; the short form in make test fails
 * one of them per site, in turn. Each run must exit 0 with the clean run's losses (loss_hex) and
 * final weights (GPTW file) byte for byte, or replay's reads all intact; or exit 1 with an error
 * message (no "memory corruption", no crash, no sanitizer report, LeakSanitizer included); and
 * the device must have closed with nothing live (the report is written only then).
 */
#include "smartswap.h"
#include "smartswap-alloc.h"
#include "smartswap-device.h"
#include "smartswap-exec.h"
#include "test.h"

#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

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
            /* a failed device call is reported as itself, not as the memory it left unfreed */
            CHECK_MSG(k == 0 || st != SS_ERR_OOM, "%s call %llu failed: the run reports out of memory instead of "
                      "the device error", kinds[k].kind, (unsigned long long)nth);
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

/* ---- the trainer and replay through the CLI, by call site ---------------------------------- */

static const char *cli;
static char tmpdir[] = "/tmp/ss-fault-sweep-XXXXXX";
static char data_dir[4096] = "tests/data";

typedef struct cli_run {
    int   rc;             /* exit status; 128 + signal for a crash */
    char *out;            /* stdout + stderr */
    int   closed;         /* the fault device wrote its report: it closed with nothing live */
    uint64_t injected;
    char  losses[8192];   /* the trainer's loss_hex values in order */
    char *weights;        /* the trainer's final weights file */
    size_t weights_n;
} cli_run;

typedef struct site_t { char name[200]; char kind[8]; uint64_t calls; } site_t;

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0, r;
    char *b = malloc(cap);
    while (b && (r = fread(b + len, 1, cap - len - 1, f)) > 0) {
        len += r;
        if (cap - len < 1024) { char *nb = realloc(b, cap *= 2); if (!nb) { free(b); b = NULL; } else b = nb; }
    }
    fclose(f);
    if (b) b[len] = 0;
    if (n) *n = len;
    return b;
}

static void cli_run_free(cli_run *r) { free(r->out); free(r->weights); memset(r, 0, sizeof *r); }

/* Runs `$SS_CLI args` with SMARTSWAP_FAULT = fault (NULL: none); the sites of its report go to
 * sites (when not NULL). */
static void run_cli(const char *args, const char *fault, int trainer, cli_run *r, site_t *sites, size_t *nsites,
                    size_t cap) {
    memset(r, 0, sizeof *r);
    char rep[4200], log[4200], w[4200], cmd[12000];
    snprintf(rep, sizeof rep, "%s/report.txt", tmpdir);
    snprintf(log, sizeof log, "%s/log.jsonl", tmpdir);
    snprintf(w, sizeof w, "%s/weights.gptw", tmpdir);
    remove(rep); remove(log); remove(w);
    setenv("SMARTSWAP_FAULT_REPORT", rep, 1);
    if (fault) setenv("SMARTSWAP_FAULT", fault, 1);
    else unsetenv("SMARTSWAP_FAULT");
    if (trainer) snprintf(cmd, sizeof cmd, "%s %s --log %s --save-weights %s 2>&1", cli, args, log, w);
    else snprintf(cmd, sizeof cmd, "%s %s 2>&1", cli, args);
    FILE *f = popen(cmd, "r");
    size_t capo = 1 << 14, n = 0, got;
    r->out = malloc(capo);
    while (f && r->out && (got = fread(r->out + n, 1, capo - n - 1, f)) > 0) {
        n += got;
        if (capo - n < 1024) r->out = realloc(r->out, capo *= 2);
    }
    if (r->out) r->out[n] = 0;
    int st = f ? pclose(f) : -1;
    r->rc = st == -1 ? 255 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    unsetenv("SMARTSWAP_FAULT");
    char *rt = slurp(rep, NULL);
    if (rt && !strncmp(rt, "smartswap-fault-sites v1\n", 25)) {
        r->closed = 1;
        char *p = strstr(rt, "injected ");
        if (p) r->injected = strtoull(p + 9, NULL, 10);
        if (nsites) *nsites = 0;
        for (char *line = strtok(rt, "\n"); line && sites; line = strtok(NULL, "\n")) {
            site_t t;
            unsigned long long c;
            if (sscanf(line, "site %199s %7s %llu", t.name, t.kind, &c) == 3 && *nsites < cap) {
                t.calls = c;
                sites[(*nsites)++] = t;
            }
        }
    }
    free(rt);
    if (trainer) {
        char *lt = slurp(log, NULL);
        for (char *p = lt; p && (p = strstr(p, "\"loss_hex\": \"")); p += 13) {
            size_t l = strcspn(p + 13, "\"");
            if (strlen(r->losses) + l + 2 < sizeof r->losses) {
                strncat(r->losses, p + 13, l);
                strcat(r->losses, " ");
            }
        }
        free(lt);
        r->weights = slurp(w, &r->weights_n);
    }
}

/* Any "corrupt_reads":N with N > 0 in replay's --json output. */
static int corrupt_reads(const char *out) {
    for (const char *p = out; p && (p = strstr(p, "\"corrupt_reads\":")); p += 16)
        if (strtoull(p + 16, NULL, 10) > 0) return 1;
    return 0;
}

static int full_sweep(void) { const char *e = getenv("FAULT_SWEEP_FULL"); return e && *e && strcmp(e, "0"); }

static void sweep_cli(const char *what, const char *args, int trainer, size_t min_sites) {
    enum { CAP = 512 };
    static site_t sites[CAP];
    size_t ns = 0;
    cli_run clean;
    run_cli(args, NULL, trainer, &clean, sites, &ns, CAP);
    CHECK_MSG(clean.rc == 0 && clean.closed, "%s: the clean run failed (exit %d, report %s):\n%s", what, clean.rc,
              clean.closed ? "written" : "missing", clean.out ? clean.out : "");
    if (trainer) CHECK_MSG(clean.losses[0] && clean.weights_n > 0, "%s: the clean run wrote no losses or weights", what);
    else CHECK_MSG(strstr(clean.out, "\"corrupt_reads\":0") && !corrupt_reads(clean.out), "%s: %s", what, clean.out);
    uint64_t calls = 0;
    for (size_t i = 0; i < ns; i++) calls += sites[i].calls;
    CHECK_MSG(ns >= min_sites, "%s: the clean run reached only %zu call sites", what, ns);
    if (clean.rc != 0 || !clean.closed) { cli_run_free(&clean); return; }
    int full = full_sweep();
    uint64_t runs = 0, recovered = 0, errored = 0, unreached = 0, bad = 0;
    char worst[512] = "";
    for (size_t i = 0; i < ns; i++) {
        if (!strcmp(sites[i].name, "?:0")) continue;   /* calls from outside the library: none here */
        uint64_t n = sites[i].calls, occ[3] = {1, (n + 1) / 2, n};
        for (int j = 0; j < 3; j++) {
            if (!full && j != (int)(i % 3)) continue;
            if (j && occ[j] == occ[j - 1] && full) continue;
            char spec[300];
            snprintf(spec, sizeof spec, "%.200s:%llu", sites[i].name, (unsigned long long)occ[j]);
            cli_run r;
            run_cli(args, spec, trainer, &r, NULL, NULL, 0);
            runs++;
            const char *o = r.out ? r.out : "";
            int crash = r.rc >= 128 || strstr(o, "Sanitizer") || strstr(o, "runtime error");
            int same = trainer ? !strcmp(r.losses, clean.losses) && r.weights_n == clean.weights_n &&
                                     r.weights && !memcmp(r.weights, clean.weights, r.weights_n)
                               : strstr(o, "\"corrupt_reads\":0") && !corrupt_reads(o);
            int ok;
            if (crash) ok = 0;
            else if (!r.closed) ok = 0;                       /* something left live: close refused */
            else if (r.rc == 0) ok = same;                    /* recovered: the clean run's result */
            else ok = r.rc == 1 && (strstr(o, "error") || strstr(o, "out of memory")) && !strstr(o, "memory corruption") &&
                      !corrupt_reads(o);
            if (r.closed && r.injected == 0) { unreached++; ok = ok && r.rc == 0; }
            else if (ok && r.rc == 0) recovered++;
            else if (ok) errored++;
            if (!ok) {
                bad++;
                if (!worst[0]) snprintf(worst, sizeof worst, "%s (exit %d, report %s)", spec, r.rc,
                                        r.closed ? "written" : "missing: not closed");
                if (getenv("SWEEP_VERBOSE") || bad <= 3)
                    fprintf(stderr, "  %s: %s failed: exit %d, %s, %s\n----\n%s----\n", what, spec, r.rc,
                            r.closed ? "closed" : "device not closed", r.rc == 0 ? (same ? "same result" : "WRONG result") : "",
                            o);
            }
            cli_run_free(&r);
        }
    }
    CHECK_MSG(bad == 0, "%s: %llu of %llu runs broke the contract, first %s", what, (unsigned long long)bad,
              (unsigned long long)runs, worst);
    fprintf(stderr, "  %-22s %zu sites (%llu calls in the clean run), %llu runs (%s): %llu recovered with the clean "
            "run's %s, %llu clean errors, %llu past a site's last call in that run, %llu broke the contract\n",
            what, ns, (unsigned long long)calls, (unsigned long long)runs, full ? "first, middle, last" : "one per site",
            (unsigned long long)recovered, trainer ? "losses and weights" : "intact reads", (unsigned long long)errored,
            (unsigned long long)unreached, (unsigned long long)bad);
    cli_run_free(&clean);
}

#define TRAIN_ARGS "train --device fault:cpu-sim --layers 2 --hidden 32 --heads 4 --kv-heads 2 --ffn 64 --seq 32 " \
                   "--batch 2 --steps 4 --threads 1 --quiet --d2h-gbps 2 --h2d-gbps 2 --budget 720KiB --mode "

static void t_trainer_smartswap(void) { sweep_cli("train smartswap", TRAIN_ARGS "smartswap", 1, 20); }
static void t_trainer_recompute(void) { sweep_cli("train recompute", TRAIN_ARGS "recompute", 1, 1);   /* no executor: the allocator's map only */ }
static void t_trainer_offload(void) { sweep_cli("train offload-all", TRAIN_ARGS "offload-all", 1, 20); }
static void t_replay(void) {
    char args[5000];
    snprintf(args, sizeof args, "replay %s/fault-sweep-replay.jsonl --device fault:cpu-sim --budget 5MiB --iters 4 "
             "--virtual-clock --d2h 2 --h2d 2 --json", data_dir);
    sweep_cli("replay", args, 0, 20);
}

static void t_sweep_segments(void) { granule = 0; sweep(); }
static void t_sweep_vm(void) { granule = 16 * KiB; sweep(); }

int main(int argc, char **argv) {
    (void)argc;
    RUN(t_sweep_segments);
    RUN(t_sweep_vm);
    cli = getenv("SS_CLI");
    if (!cli || access(cli, X_OK) != 0) {
        test_current = "test-fault-sweep (trainer, replay)";
        fprintf(stderr, "skip: the trainer and replay sweeps need SS_CLI, the smartswap binary (make test sets it)\n");
        test_skip_n++;
        return test_summary();
    }
    if (access("tests/data/fault-sweep-replay.jsonl", R_OK) != 0) {   /* from the build directory's tests/ */
        snprintf(data_dir, sizeof data_dir, "%s", argv[0]);
        char *sl = strrchr(data_dir, '/');
        if (sl) strcpy(sl, "/../../tests/data");
    }
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    RUN(t_trainer_smartswap);
    if (full_sweep()) {
        RUN(t_trainer_recompute);
        RUN(t_trainer_offload);
    }
    RUN(t_replay);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return test_summary();
}
