/* test-cli.c: the smartswap command as a person uses it: exit codes, the outputs each command
 * promises, and clear errors for bad input. Runs the binary named by $SS_CLI (`make test` sets
 * it); skipped when that is not set.
 */
#include "test.h"
#include "smartswap.h"
#include "sim.h"
#include "trace.h"

#include <math.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *cli;
static char tmpdir[64];

/* Runs `cli ARGS` through the shell with stderr folded into stdout; returns the exit status and
 * the output (malloc'ed, NUL-terminated) in *out. */
static int run(const char *args, char **out) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", cli, args);
    FILE *f = popen(cmd, "r");
    if (!f) { *out = calloc(1, 1); return -1; }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n < 1024) { cap *= 2; buf = realloc(buf, cap); }
    }
    buf[n] = 0;
    int st = pclose(f);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int has(const char *out, const char *s) { return strstr(out, s) != NULL; }

static void t_info_and_options(void) {
    char *o;
    CHECK_EQ_INT(run("info", &o), 0);
    CHECK(has(o, "smartswap 0.") && has(o, "cpu-sim"));
    free(o);
    CHECK_EQ_INT(run("options", &o), 0);
    CHECK(has(o, "SMARTSWAP_BUDGET") && has(o, "SMARTSWAP_DISABLE") && has(o, "min-swap"));
    free(o);
    CHECK_EQ_INT(run("--help", &o), 0);
    CHECK(has(o, "usage: smartswap COMMAND"));
    free(o);
}

static void t_bad_input(void) {
    char *o;
    CHECK_EQ_INT(run("no-such-command", &o), 2);
    CHECK(has(o, "unknown command 'no-such-command'"));
    free(o);
    CHECK_EQ_INT(run("", &o), 2);
    free(o);
    /* a bad environment variable is named with its accepted range, and nothing runs */
    char cmd[256];
    snprintf(cmd, sizeof cmd, "info");
    setenv("SMARTSWAP_BUDGET", "lots", 1);
    CHECK_EQ_INT(run(cmd, &o), 1);
    CHECK(has(o, "SMARTSWAP_BUDGET") && has(o, "lots"));
    unsetenv("SMARTSWAP_BUDGET");
    free(o);
}

static void t_trace(void) {
    char *o, args[512];
    snprintf(args, sizeof args, "trace gen --model gpt2-124m --batch 2 --seq 128 -o %s/p.jsonl", tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    free(o);
    snprintf(args, sizeof args, "trace stats %s/p.jsonl --json", tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    CHECK(has(o, "\"ops\":") && has(o, "\"saved_tensors\":") && has(o, "\"peak_activation_bytes\":") &&
          has(o, "\"flops\":"));
    free(o);
    /* a garbage file: a clear error with the file and line, exit 1 */
    char path[128];
    snprintf(path, sizeof path, "%s/bad.jsonl", tmpdir);
    FILE *f = fopen(path, "w");
    fputs("{\"format\":\"smartswap-profile\",\"version\":99}\n", f);
    fclose(f);
    snprintf(args, sizeof args, "trace stats %s", path);
    CHECK_EQ_INT(run(args, &o), 1);
    CHECK_MSG(has(o, "bad.jsonl:1"), "%s", o);
    free(o);
    CHECK_EQ_INT(run("trace gen --model no-such-model -o /tmp/x.jsonl", &o), 2);
    CHECK(has(o, "no-such-model"));
    free(o);
    /* saved bytes by layer and per token */
    snprintf(args, sizeof args, "trace stats %s/p.jsonl", tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    CHECK_MSG(has(o, "layers:       12, a block of") && has(o, "per layer:") && has(o, "bytes per token") &&
              has(o, "of its layer's saved bytes") && has(o, "tokens:       256 (b x s in the desc)"), "%s", o);
    free(o);
    snprintf(args, sizeof args, "trace stats %s/p.jsonl --json --tokens 1000", tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    CHECK_MSG(has(o, "\"layers\":12,") && has(o, "\"layer_saved_bytes\":") && has(o, "\"loss_saved_bytes\":") &&
              has(o, "\"layer_largest_saved_share\":") && has(o, "\"tokens\":1000,") &&
              has(o, "\"tokens_from\":\"--tokens\""), "%s", o);
    free(o);
    /* the attention and loss flags: unknown values name the accepted ones */
    static const struct { const char *flags, *want1, *want2; } bad[] = {
        {"--attention sparse", "flash", "naive"}, {"--loss chunky", "chunked", "full"},
        {"--loss-chunk 16777217", "--loss-chunk", "[0, 16777216]"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "trace gen --model gpt2-124m %s -o %s/x.jsonl", bad[i].flags, tmpdir);
        CHECK_EQ_INT(run(args, &o), 2);
        CHECK_MSG(has(o, bad[i].want1) && has(o, bad[i].want2), "%s: %s", bad[i].flags, o);
        free(o);
        snprintf(args, sizeof args, "simulate --model gpt2-124m %s", bad[i].flags);
        CHECK_EQ_INT(run(args, &o), 2);
        CHECK_MSG(has(o, bad[i].want1) && has(o, bad[i].want2), "%s: %s", bad[i].flags, o);
        free(o);
    }
    /* the defaults are the trainer's, and the desc and simulate's header say which: the chunk
     * by the trainer's rule (the largest multiple of 64 tokens whose [chunk,V] logits are no
     * larger than the [b x s,h] hidden state, at least 64, at most b x s), an explicit one kept */
    static const struct { const char *flags, *want; } chunks[] = {
        {"--batch 4 --seq 1024", " flash loss=chunked:64"},          /* 4096 x 768 / 50257 = 62.6 */
        {"--seq 32", " flash loss=chunked:32"},                      /* fewer tokens than 64 */
        {"--seq 64 --loss-chunk 0", " flash loss=chunked:64"},
        {"--batch 4 --seq 1024 --loss-chunk 100", " flash loss=chunked:100"},
        {"--seq 100 --loss-chunk 4096", " flash loss=chunked:100"}};       /* clamped to b x s */
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        snprintf(args, sizeof args, "trace gen --model gpt2-124m %s -o %s/d.jsonl", chunks[i].flags, tmpdir);
        CHECK_EQ_INT(run(args, &o), 0);
        CHECK_MSG(has(o, chunks[i].want), "%s: %s", chunks[i].flags, o);
        free(o);
    }
    CHECK_EQ_INT(run("trace gen --help", &o), 0);
    CHECK_MSG(has(o, "0: the trainer's rule, the largest multiple of 64 tokens"), "%s", o);
    free(o);
    snprintf(args, sizeof args, "trace gen --model gpt2-124m --seq 64 --no-flash --loss full -o %s/d.jsonl", tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    CHECK_MSG(has(o, " naive loss=full"), "%s", o);
    free(o);
    CHECK_EQ_INT(run("simulate --model gpt2-124m --seq 128", &o), 0);
    CHECK_MSG(has(o, "bf16, flash attention, chunked loss (64 tokens)"), "%s", o);
    free(o);
    CHECK_EQ_INT(run("simulate --model llama-2-7b --seq 4096", &o), 0);   /* 4096 x 4096 / 32000 = 524.3 */
    CHECK_MSG(has(o, "bf16, flash attention, chunked loss (512 tokens)"), "%s", o);
    free(o);
    CHECK_EQ_INT(run("simulate --model gpt2-124m --seq 128 --loss-chunk 100 --json", &o), 0);
    CHECK_MSG(has(o, "\"loss_chunk\":\t100"), "%s", o);
    free(o);
    CHECK_EQ_INT(run("simulate --model gpt2-124m --seq 128 --loss-chunk 4096 --json", &o), 0);
    CHECK_MSG(has(o, "\"loss_chunk\":\t128"), "%s", o);   /* the chunk used: at most b x s */
    free(o);
    CHECK_EQ_INT(run("simulate --model gpt2-124m --seq 128 --loss full --json", &o), 0);
    CHECK_MSG(has(o, "\"loss_chunk\":\tnull"), "%s", o);
    free(o);
    CHECK_EQ_INT(run("simulate --help", &o), 0);
    CHECK_MSG(has(o, "0: the trainer's rule, the largest multiple of 64 tokens"), "%s", o);
    free(o);
    CHECK_EQ_INT(run("simulate --model gpt2-124m --seq 128 --attention naive --loss full", &o), 0);
    CHECK_MSG(has(o, "bf16, naive attention, full loss"), "%s", o);
    free(o);
}

/* The number after "key": in a JSON text, or -1. */
static double json_num(const char *o, const char *key) {
    char k[96];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *q = strstr(o, k);
    return q ? strtod(q + strlen(k), NULL) : -1;
}

/* Issue 12's acceptance: on llama-3.2-1b at batch 8 x 2048, `smartswap plan --json` reports a
 * smallest feasible budget below the state + 0.15 x the activations with the chunked loss (the
 * default), and not with --loss full (whose f32 probabilities and logits' gradient, one operator
 * apart, cannot be swapped): the test tells the two apart. About 2 s a plan. */
static void t_plan_min_budget_chunked_loss(void) {
    for (int full = 0; full < 2; full++) {
        char *o, args[512];
        snprintf(args, sizeof args, "trace gen --model llama-3.2-1b --batch 8 --seq 2048%s -o %s/l1b.jsonl",
                 full ? " --loss full" : "", tmpdir);
        CHECK_EQ_INT(run(args, &o), 0);
        /* the trainer's chunk: 16384 x 2048 / 128256 = 261.6 -> 256 tokens */
        CHECK_MSG(has(o, full ? " flash loss=full" : " flash loss=chunked:256"), "%s", o);
        free(o);
        snprintf(args, sizeof args, "plan %s/l1b.jsonl --budget 130GiB --json -o %s/l1b.plan", tmpdir, tmpdir);
        CHECK_EQ_INT(run(args, &o), 0);
        double state = json_num(o, "state_bytes"), act = json_num(o, "activation_bytes");
        double minb = json_num(o, "min_feasible_budget_bytes"), frac = json_num(o, "min_feasible_activation_fraction");
        CHECK_MSG(state > 0 && act > 0 && minb > state, "%s", o);
        CHECK_NEAR(frac, (minb - state) / act, 1e-5);
        printf("  llama-3.2-1b 8x2048, %s loss: smallest feasible budget = state + %.3f x activations\n",
               full ? "full" : "chunked", frac);
        if (full) CHECK_MSG(frac > 0.3, "full loss: %.3f", frac);
        else CHECK_MSG(frac < 0.15, "chunked loss: %.3f", frac);
        free(o);
    }
}

static void t_plan(void) {
    char *o, args[512];
    snprintf(args, sizeof args, "trace gen --model gpt2-124m --batch 8 --seq 512 -o %s/g.jsonl", tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    free(o);
    /* feasible: a plan file is written and the JSON has every promised key */
    snprintf(args, sizeof args, "plan %s/g.jsonl --budget 3.5GiB --json -o %s/g.plan", tmpdir, tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    const char *keys[] = {"\"peak_bytes_before\":", "\"peak_bytes_after\":", "\"budget_bytes\":",
                          "\"swapped_bytes\":", "\"host_bytes\":", "\"stall_seconds\":",
                          "\"iter_seconds\":", "\"feasible\":true", "\"min_feasible_budget_bytes\":"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) CHECK_MSG(has(o, keys[i]), "%s in %s", keys[i], o);
    free(o);
    char path[128];
    snprintf(path, sizeof path, "%s/g.plan", tmpdir);
    CHECK(access(path, R_OK) == 0);
    /* infeasible: exit 1, the smallest budget as a hint, and no plan file */
    snprintf(args, sizeof args, "plan %s/g.jsonl --budget 1GiB -o %s/none.plan", tmpdir, tmpdir);
    CHECK_EQ_INT(run(args, &o), 1);
    CHECK(has(o, "smallest budget") && has(o, "hint: --budget"));
    free(o);
    snprintf(path, sizeof path, "%s/none.plan", tmpdir);
    CHECK(access(path, F_OK) != 0);
    /* bad sizes and missing files name the problem */
    snprintf(args, sizeof args, "plan %s/g.jsonl --budget lots", tmpdir);
    CHECK(run(args, &o) != 0);
    CHECK(has(o, "lots"));
    free(o);
    CHECK(run("plan /nonexistent/p.jsonl --budget 1GiB", &o) != 0);
    CHECK(has(o, "/nonexistent/p.jsonl"));
    free(o);
}

static unsigned long long json_u64(const char *o, const char *key) {
    const char *p = o ? strstr(o, key) : NULL;
    return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

static double json_f64(const char *o, const char *key) {
    const char *p = o ? strstr(o, key) : NULL;
    return p ? strtod(p + strlen(key), NULL) : -1;
}

/* `smartswap plan` times a profile that carries measured operator seconds (a detailed
 * iteration's, tests/data/bench-train-4x-profile.jsonl) by those seconds, as the live executor
 * does: its step without swaps is their sum, not the profile's iteration time (the detailed
 * iteration's wall time, about 4x the sum here); --iter-time still gives logical layers. */
static void t_plan_measured_times(void) {
    const char *prof = "tests/data/bench-train-4x-profile.jsonl";
    char err[256];
    ss_profile *p = NULL;
    CHECK_MSG(ssi_profile_read(prof, &p, err, sizeof err) == SS_OK, "%s (run from the repository root)", err);
    if (!p) return;
    /* the simulator's measured times (gaps take the mean), summed */
    double *dur = malloc((p->nops ? p->nops : 1) * sizeof *dur), sum = 0, iter = p->iter_seconds;
    ssi_time_config tc = {.mode = SSI_TIME_MEASURED};
    CHECK(dur && p->nops == 633 && ssi_profile_has_op_times(p) && ssi_sim_op_times(p, &tc, dur, err, sizeof err) == SS_OK);
    for (uint32_t i = 0; dur && i < p->nops; i++) sum += dur[i];
    free(dur);
    ssi_profile_free(p);
    char *o, args[512];
    snprintf(args, sizeof args, "plan %s --budget 9MiB --d2h 0.16 --h2d 0.16 --json -o %s/mt.plan", prof, tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    double before = json_f64(o, "\"iter_seconds_before\":");
    printf("  measured: step without swaps %.6f s, operators' sum %.6f s, profile's iteration %.6f s\n", before, sum, iter);
    CHECK_MSG(has(o, "\"time_mode\":\"measured op times") && fabs(before - sum) <= 1e-6 * sum + 1e-9,
              "before %.9f, sum %.9f: %.300s", before, sum, o);
    CHECK_MSG(sum < 0.5 * iter, "the fixture no longer separates the modes: sum %g, iteration %g", sum, iter);
    free(o);
    snprintf(args, sizeof args, "plan %s --budget 9MiB --d2h 0.16 --h2d 0.16 --iter-time %.9f --json -o %s/mt2.plan",
             prof, iter, tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    before = json_f64(o, "\"iter_seconds_before\":");
    CHECK_MSG(has(o, "\"time_mode\":\"logical layers") && fabs(before - iter) <= 1e-6 * iter,
              "before %.9f, iteration %.9f: %.300s", before, iter, o);
    free(o);
    snprintf(args, sizeof args, "plan %s --budget 9MiB --d2h 0.16 --h2d 0.16 -o %s/mt.plan", prof, tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    CHECK_MSG(has(o, "times from measured op times (the profile's)"), "%s", o);
    free(o);
}

/* `smartswap plan --segment SIZE --latency-us US`: the simulations take the allocator's segment
 * size and the copies' fixed cost given (smartswap train prints its segments; with them a saved
 * profile is planned as the trainer planned it) and the JSON says which; on the fixture the
 * trainer's 256 B segments give another plan than the 2 MiB default; a size that is not a
 * multiple of 256 bytes is refused. */
static void t_plan_segment(void) {
    const char *prof = "tests/data/bench-train-4x-profile.jsonl";
    char *o, args[512];
    snprintf(args, sizeof args, "plan %s --budget 9216983 --d2h 0.15 --h2d 0.15 --json -o %s/sg.plan", prof, tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    double it_def = json_f64(o, "\"iter_seconds\":");
    CHECK_MSG(json_u64(o, "\"segment_bytes\":") == 2u << 20 && json_f64(o, "\"copy_latency_us\":") == 0, "%.300s", o);
    free(o);
    snprintf(args, sizeof args, "plan %s --budget 9216983 --d2h 0.15 --h2d 0.15 --segment 256 --latency-us 5 --json -o %s/sg.plan",
             prof, tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    double it_256 = json_f64(o, "\"iter_seconds\":");
    CHECK_MSG(json_u64(o, "\"segment_bytes\":") == 256 && json_f64(o, "\"copy_latency_us\":") == 5, "%.300s", o);
    free(o);
    printf("  planned step: %.6f s in 2 MiB segments, %.6f s in 256 B segments with 5 us copies\n", it_def, it_256);
    CHECK_MSG(it_def > 0 && it_256 > 0 && it_def != it_256, "2 MiB %.9f s, 256 B %.9f s", it_def, it_256);
    snprintf(args, sizeof args, "plan %s --budget 9216983 --segment 300 -o %s/sg.plan", prof, tmpdir);
    CHECK_EQ_INT(run(args, &o), 2);
    CHECK_MSG(has(o, "--segment: 300 is not a multiple of 256 bytes"), "%s", o);
    free(o);
}

/* Issue 14 item 5: replay and plan give the same smallest budget of a profile (state + the
 * largest working set of one operator, ssi_policy_floor), at least the state and at most the
 * smallest budget the planner fits; one allocator unit below it no plan fits. */
static void t_smallest_budget_plan_replay(void) {
    char *o, args[512];
    snprintf(args, sizeof args, "trace gen --model gpt2-124m --batch 2 --seq 128 -o %s/sb.jsonl", tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    free(o);
    snprintf(args, sizeof args, "plan %s/sb.jsonl --budget 2GiB --iter-time 0.1 --json -o %s/sb.plan", tmpdir, tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    unsigned long long pm = json_u64(o, "\"min_budget_bytes\":"), pf = json_u64(o, "\"min_feasible_budget_bytes\":"),
                       ps = json_u64(o, "\"state_bytes\":");
    free(o);
    snprintf(args, sizeof args, "replay %s/sb.jsonl --budget 2GiB --iters 3 --json", tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    unsigned long long rm = json_u64(o, "\"min_budget_bytes\":"), rs = json_u64(o, "\"state_bytes\":");
    free(o);
    printf("  gpt2-124m 2x128: smallest budget %llu (state %llu), plan's smallest feasible %llu\n", pm, ps, pf);
    CHECK_MSG(pm > 0 && pm == rm && ps == rs, "plan %llu (state %llu), replay %llu (state %llu)", pm, ps, rm, rs);
    CHECK_MSG(pm > ps && pm <= pf && pm % 256 == 0, "smallest budget %llu, state %llu, feasible %llu", pm, ps, pf);
    /* the text forms name it in bytes */
    char want[64];
    snprintf(want, sizeof want, "(%llu bytes) = state", pm);
    snprintf(args, sizeof args, "replay %s/sb.jsonl --budget 2GiB --iters 2", tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    CHECK_MSG(has(o, "smallest budget") && has(o, want), "%s", o);
    free(o);
    snprintf(args, sizeof args, "plan %s/sb.jsonl --budget 2GiB --iter-time 0.1 -o %s/sb.plan", tmpdir, tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    CHECK_MSG(has(o, want), "%s", o);
    free(o);
    /* below it the planner fits nothing */
    snprintf(args, sizeof args, "plan %s/sb.jsonl --budget %llu --iter-time 0.1 -o %s/sb2.plan", tmpdir, pm - 256, tmpdir);
    CHECK_EQ_INT(run(args, &o), 1);
    free(o);
}

static void t_train(void) {
    char *o, args[512];
    const char *m = "train --layers 2 --hidden 32 --heads 4 --kv-heads 1 --ffn 96 --seq 32 --batch 4 "
                    "--steps 6 --quiet";
    /* --swap-only: the timeline below must hold swap copies, and the hybrid may rebuild rather
     * than swap a step's tensors when the measured times favour it (then its last step has no
     * copy to show: this check failed about one run in two on a loaded machine) */
    snprintf(args, sizeof args, "%s --mode smartswap --swap-only --budget 1MiB --log %s/run.jsonl --timeline %s/tl.json",
             m, tmpdir, tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    CHECK_MSG(has(o, "totals: mode=smartswap") && !has(o, "swapped_out=0 "), "%s", o);
    char path[128];
    snprintf(path, sizeof path, "%s/run.jsonl", tmpdir);
    FILE *f = fopen(path, "r");
    int lines = 0, keys = 1;
    char line[4096];
    unsigned long long minb = 0, stb = 0, hneed = 0;
    while (f && fgets(line, sizeof line, f)) {
        lines++;
        if (lines == 1) {
            const char *p = strstr(line, "\"min_budget_bytes\": "), *q = strstr(line, "\"state_bytes\": ");
            const char *hn = strstr(line, "\"host_need_bytes\": ");
            if (p) minb = strtoull(p + 20, NULL, 10);
            if (q) stb = strtoull(q + 15, NULL, 10);
            if (hn) hneed = strtoull(hn + 19, NULL, 10);
        }
        keys &= strstr(line, "\"step\":") && strstr(line, "\"loss\":") && strstr(line, "\"ms\":") &&
                strstr(line, "\"peak_bytes\":") && strstr(line, "\"swapped_bytes\":") &&
                strstr(line, "\"stage\":");
    }
    if (f) fclose(f);
    CHECK_EQ_INT(lines, 6);
    CHECK(keys);
    /* --no-poison (benchmarks): said in the configuration block, the same losses (the log's hex) */
    snprintf(args, sizeof args, "%s --mode smartswap --swap-only --budget 1MiB --no-poison --log %s/np.jsonl", m, tmpdir);
    char *onp;
    CHECK_EQ_INT(run(args, &onp), 0);
    CHECK_MSG(has(onp, "poisoning of swapped-out blocks off") && !has(onp, "swapped_out=0 "), "%s", onp);
    free(onp);
    {
        char pa[128], pb[128], la[4096], lb[4096];
        snprintf(pa, sizeof pa, "%s/run.jsonl", tmpdir);
        snprintf(pb, sizeof pb, "%s/np.jsonl", tmpdir);
        FILE *fa = fopen(pa, "r"), *fb = fopen(pb, "r");
        int same = fa && fb, n = 0;
        while (same && fgets(la, sizeof la, fa)) {
            const char *x = strstr(la, "\"loss_hex\": \""), *y = fgets(lb, sizeof lb, fb) ? strstr(lb, "\"loss_hex\": \"") : NULL;
            same = x && y && !strncmp(x, y, 32);
            n++;
        }
        if (fa) fclose(fa);
        if (fb) fclose(fb);
        CHECK_MSG(same && n == 6, "--no-poison: losses differ from the poisoned run's (or a log is missing), %d lines", n);
    }
    /* the smallest budget: in the log's first line next to the state, in the summary; a budget one
     * allocator unit (256 B) below it is refused before step 1, naming it */
    CHECK_MSG(stb > 0 && minb > stb && minb < 1048576, "state %llu, smallest budget %llu", stb, minb);
    CHECK(has(o, "smallest budget"));
    char *o0 = o;
    snprintf(args, sizeof args, "%s --mode offload-all --budget %llu", m, minb - 256);
    CHECK_EQ_INT(run(args, &o), 1);
    char want[96];
    snprintf(want, sizeof want, "(%llu bytes)", minb);
    CHECK_MSG(has(o, "below the smallest budget") && has(o, want) && !has(o, "step ") && has(o, "raise --budget"),
              "%s", o);
    free(o);
    /* the host need (issue 14 item 8): a --host-mem cap one byte below it is refused before step
     * 1 naming it; at exactly it the run trains (and its pool never passes it) */
    const char *hp = strstr(o0, "host_peak=");
    unsigned long long hpeak = hp ? strtoull(hp + 10, NULL, 10) : 0;
    CHECK_MSG(hneed > 0 && hpeak > 0 && hpeak <= hneed, "host need %llu, host pool peak %llu", hneed, hpeak);
    free(o0);
    snprintf(args, sizeof args, "%s --mode smartswap --budget 1MiB --host-mem %llu", m, hneed - 1);
    CHECK_EQ_INT(run(args, &o), 1);
    snprintf(want, sizeof want, "(%llu bytes", hneed);
    CHECK_MSG(has(o, "--host-mem") && has(o, "below the pinned host memory") && has(o, want) && !has(o, "step ") &&
              has(o, "raise --host-mem"), "%s", o);
    free(o);
    snprintf(args, sizeof args, "%s --mode smartswap --budget 1MiB --host-mem %llu", m, hneed);
    CHECK_EQ_INT(run(args, &o), 0);
    CHECK_MSG(has(o, "totals: mode=smartswap") && !has(o, "swapped_out=0 "), "%s", o);
    free(o);
    /* --timeline: a Chrome trace of the last step with its three lanes and swap copies */
    snprintf(path, sizeof path, "%s/tl.json", tmpdir);
    f = fopen(path, "r");
    size_t tn = 0;
    char *tl = calloc(1, 1 << 20);
    if (f && tl) { tn = fread(tl, 1, (1 << 20) - 1, f); fclose(f); }
    CHECK(tn > 0 && has(tl, "smartswap-timeline") && has(tl, "\"name\":\"d2h\"") && has(tl, "\"cat\":\"compute\"") &&
          has(tl, "\"name\":\"out t"));
    free(tl);
    /* without a swapping mode there is no timeline: a clear error */
    snprintf(args, sizeof args, "%s --mode none --timeline %s/tl2.json", m, tmpdir);
    CHECK_EQ_INT(run(args, &o), 2);
    CHECK_MSG(has(o, "--timeline") && has(o, "--mode smartswap"), "%s", o);
    free(o);
    /* a budget below the model's own state names the minimum */
    snprintf(args, sizeof args, "%s --mode smartswap --budget 100KiB", m);
    CHECK_EQ_INT(run(args, &o), 1);
    CHECK(has(o, "below the model's own state") && has(o, "the minimum is"));
    free(o);
    /* --device cuda where no GPU can be used (CI, this machine): one line naming CUDA, exit 1, no
     * step run. On a machine with a GPU it trains: gpu-check.sh covers that path. */
    snprintf(args, sizeof args, "%s --device cuda", m);
    int cst = run(args, &o);
    const char *nl = strchr(o, '\n');
    if (cst == 0 && has(o, "device cuda")) {
        fprintf(stderr, "note: --device cuda trained here (a GPU is present); its no-GPU error is not checked\n");
    } else {
        CHECK_EQ_INT(cst, 1);
        CHECK_MSG(has(o, "--device cuda") && has(o, "CUDA") && !has(o, "step ") && nl && nl[1] == 0, "%s", o);
    }
    free(o);
    /* --dtype: fp32 is the default; bf16 trains on cpu-sim with bf16 activations (the
     * configuration block says so); unknown ones are refused naming the types */
    snprintf(args, sizeof args, "%s --dtype bf16", m);
    CHECK_EQ_INT(run(args, &o), 0);
    CHECK_MSG(has(o, "dtype    bf16 activations") && has(o, "totals: mode=none"), "%s", o);
    free(o);
    snprintf(args, sizeof args, "%s --dtype fp8", m);
    CHECK_EQ_INT(run(args, &o), 2);
    CHECK_MSG(has(o, "fp8") && has(o, "bf16"), "%s", o);
    free(o);
    snprintf(args, sizeof args, "%s --mode sideways", m);
    CHECK(run(args, &o) != 0);
    CHECK(has(o, "sideways"));
    free(o);
}

/* The step losses (loss_hex of every JSONL line, in order) of a run's --log: what must match. */
static char *log_losses(const char *path) {
    FILE *f = fopen(path, "r");
    char line[4096], *out = calloc(1, 1 << 16);
    size_t n = 0;
    while (f && out && fgets(line, sizeof line, f)) {
        const char *h = strstr(line, "\"loss_hex\": \"");
        if (h && n + 40 < (1 << 16)) n += (size_t)snprintf(out + n, (1 << 16) - n, "%.*s;", (int)strcspn(h + 13, "\""), h + 13);
    }
    if (f) fclose(f);
    return out;
}

/* The bytes of "<lead> ... (N bytes" in a run's output (0: absent). */
static unsigned long long bytes_after(const char *o, const char *lead) {
    const char *p = strstr(o, lead);
    p = p ? strchr(p, '(') : NULL;
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* Issue 14 acceptance 1: without --min-swap the trainer's default min-swap is a preference. A
 * 2-layer MoE model whose smallest budget is set by one operator (the held-out sweep's hardest
 * kind): the smallest budget printed and logged is the one with every saved tensor swappable,
 * below the default min-swap's own; a run at exactly it lowers min-swap to 1 B, says so, and
 * trains bit-identical to none; the same budget with --min-swap at the default is refused naming
 * the default's figure, and 256 B below the printed one is refused naming it. */
static void t_min_swap_lowered(void) {
    const char *m = "train --layers 2 --hidden 96 --heads 2 --kv-heads 1 --ffn 32 --moe 6:1 --seq 29:36 --batch 3 "
                    "--accum 2 --eval-every 2 --steps 4 --d2h-gbps 2 --h2d-gbps 2 --threads 1";
    char args[1024], path[128], want[96];
    char *o;
    snprintf(args, sizeof args, "%s --mode none --log %s/ms-none.jsonl", m, tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    free(o);
    snprintf(args, sizeof args, "%s --mode smartswap --budget 64MiB", m);
    CHECK_EQ_INT(run(args, &o), 0);
    const char *d = strstr(o, "by default; a budget below ");
    unsigned long long floor = bytes_after(o, "  smallest budget "), dflt = d ? bytes_after(d, "a budget below ") : 0;
    CHECK_MSG(floor > 0 && dflt > floor, "smallest budget %llu, at the default min-swap %llu: %s", floor, dflt, o);
    free(o);
    if (!floor || dflt <= floor) return;
    snprintf(args, sizeof args, "%s --mode smartswap --budget %llu --log %s/ms-ss.jsonl", m, floor, tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    CHECK_MSG(has(o, "min-swap lowered to 1 B") && has(o, "totals: mode=smartswap") && !has(o, "swapped_out=0 "), "%s", o);
    free(o);
    snprintf(path, sizeof path, "%s/ms-none.jsonl", tmpdir);
    char *l0 = log_losses(path);
    snprintf(path, sizeof path, "%s/ms-ss.jsonl", tmpdir);
    char *l1 = log_losses(path);
    CHECK_MSG(l0 && l1 && strlen(l0) > 40 && !strcmp(l0, l1), "losses: none %s, smartswap at the smallest budget %s",
              l0 ? l0 : "?", l1 ? l1 : "?");
    free(l0);
    free(l1);
    snprintf(args, sizeof args, "%s --mode smartswap --budget %llu --min-swap %d", m, floor, 3 * 29 * 96);
    CHECK_EQ_INT(run(args, &o), 1);
    snprintf(want, sizeof want, "(%llu bytes)", dflt);
    CHECK_MSG(has(o, "below the smallest budget") && has(o, want) && has(o, "--min-swap") && !has(o, "step "), "%s", o);
    free(o);
    snprintf(args, sizeof args, "%s --mode smartswap --budget %llu", m, floor - 256);
    CHECK_EQ_INT(run(args, &o), 1);
    snprintf(want, sizeof want, "(%llu bytes)", floor);
    CHECK_MSG(has(o, "below the smallest budget") && has(o, want) && !has(o, "step "), "%s", o);
    free(o);
}

/* The hybrid gets exact-size segments at any budget (gpt_mem_segment_for_mode): bench-train's shape
 * at half of none's peak, where the budget is above twice the smallest and swapping only gets
 * 256 KiB segments; with those the hybrid's rebuild scratch fragmented them and its Stable steps
 * evicted 36-80 times each at this link (2026-12-06). Its memory line says 256 B, its Stable
 * steps evict nothing, and --swap-only keeps the larger segments. */
static void t_train_hybrid_segments(void) {
    const char *m = "train --layers 16 --hidden 32 --heads 4 --kv-heads 1 --ffn 96 --batch 8 --seq 128 --steps 8 "
                    "--budget 18433024 --no-poison --threads 1 --d2h-gbps 0.158 --h2d-gbps 0.158 --quiet";
    char args[512], path[128], line[4096];
    char *o;
    snprintf(args, sizeof args, "%s --mode smartswap --log %s/hseg.jsonl", m, tmpdir);
    CHECK_EQ_INT(run(args, &o), 0);
    CHECK_MSG(has(o, "(segments 256 B)") && has(o, "totals: mode=smartswap"), "%s", o);
    free(o);
    snprintf(path, sizeof path, "%s/hseg.jsonl", tmpdir);
    FILE *f = fopen(path, "r");
    int stable = 0, evicted = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (!strstr(line, "\"stage\": \"stable\"")) continue;
        stable++;
        const char *e = strstr(line, "\"evictions\": ");
        if (!e || strtoull(e + 14, NULL, 10) != 0) evicted++;
    }
    if (f) fclose(f);
    CHECK_MSG(stable >= 3 && evicted == 0, "%d Stable steps, %d of them evicted", stable, evicted);
    snprintf(args, sizeof args, "%s --mode smartswap --swap-only --steps 2", m);
    CHECK_EQ_INT(run(args, &o), 0);
    CHECK_MSG(has(o, "(segments 256.00 KiB)"), "%s", o);
    free(o);
}

static void t_demo_device(void) {
    char *o;
    CHECK_EQ_INT(run("demo-device", &o), 0);
    CHECK(has(o, "device layer"));
    free(o);
}

int main(void) {
    cli = getenv("SS_CLI");
    if (!cli || access(cli, X_OK) != 0) {
        test_current = "test-cli";
        fprintf(stderr, "skip: set SS_CLI to the smartswap binary (make test does)\n");
        test_skip_n++;
        return test_summary();
    }
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ss-cli-XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    RUN(t_info_and_options);
    RUN(t_bad_input);
    RUN(t_trace);
    RUN(t_plan);
    RUN(t_plan_min_budget_chunked_loss);
    RUN(t_min_swap_lowered);
    RUN(t_smallest_budget_plan_replay);
    RUN(t_plan_measured_times);
    RUN(t_plan_segment);
    RUN(t_train);
    RUN(t_train_hybrid_segments);
    RUN(t_demo_device);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return test_summary();
}
