/* test-soak.c: the soak (issue 14 item 8, docs/testing.md). The dynamic trainer (MoE 4:2,
 * grouped KV heads, a sequence length drawn per micro-batch, gradient accumulation, an
 * evaluation iteration every few steps) runs SOAK_STEPS steps twice in lockstep in this
 * process: the reference (mode none, everything resident on malloc) and smartswap on cpu-sim
 * at a quarter of the way from the smallest workable budget (gpt_min_budget_probe) to the
 * reference's peak, set up as `smartswap train` sets it up, with a random extra delay of up to
 * SOAK_JITTER_US on every copy (cpu-sim's sim-jitter-us, seeded). Checks: every training and
 * evaluation loss bit-identical to the reference, the final weights too (gpt_save_weights
 * files), and the process's resident memory (/proc/self/statm) flat after warm-up: from the
 * end of warm-up (the first 10 % of the steps, at least 50: the plan cache fills meanwhile) to
 * the end it grows by at most 1 MiB + 2 %. Checked from 500 steps on, and not under
 * AddressSanitizer, whose quarantine grows by design (its leak checker covers that build).
 * Prints the RSS at warm-up, its maximum after it and at the end.
 *
 *   SOAK_STEPS=n       steps (default 60: the short form make test runs; make soak: 2000)
 *   SOAK_JITTER_US=x   the largest extra copy delay in microseconds (default 40)
 */
#include "test.h"

#include "calib.h"
#include "data.h"
#include "mem-ss.h"
#include "model.h"
#include "smartswap-exec.h"
#include "tape-swap.h"
#include "train.h"

#include <stdio.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define SOAK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SOAK_ASAN 1
#endif
#endif
#ifndef SOAK_ASAN
#define SOAK_ASAN 0
#endif

static uint64_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, res = 0;
    if (!f) return 0;
    if (fscanf(f, "%llu %llu", &size, &res) != 2) res = 0;
    fclose(f);
    return res * (uint64_t)sysconf(_SC_PAGESIZE);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Seeded pseudo-text (byte-level tokens): the data both runs read. */
static void make_text(unsigned char *t, size_t n) {
    static const char *words[] = {"the ", "swap ", "host ", "memory ", "of ", "a ", "tensor ", "is ", "saved ",
                                  "and ", "loaded ", "back. ", "Budget ", "plans ", "copy ", "event\n"};
    uint64_t x = 0x50A4;
    size_t i = 0;
    while (i < n) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const char *w = words[(x >> 33) % 16];
        for (; *w && i < n; w++) t[i++] = (unsigned char)*w;
    }
}

static void t_soak(void) {
    int steps = getenv("SOAK_STEPS") ? atoi(getenv("SOAK_STEPS")) : 60;
    double jitter = getenv("SOAK_JITTER_US") ? atof(getenv("SOAK_JITTER_US")) : 40;
    if (steps < 1) steps = 1;
    gpt_config c = gpt_config_default();
    c.layers = 2; c.hidden = 32; c.heads = 4; c.kv_heads = 2; c.ffn = 48;
    c.moe_experts = 4; c.moe_topk = 2;
    c.seq = 24; c.batch = 2; c.vocab = 256;
    gpt_schedule s = {2, 8, 24, 2, 5, 11, 3e-3f};
    char err[512];
    CHECK_MSG(gpt_config_check(&c, err, sizeof err) == 0, "%s", err);
    static unsigned char text[1 << 16];
    make_text(text, sizeof text);
    uint64_t state = gpt_state_bytes(&c), min_swap = gpt_min_swap_default(&c, s.seq_min);
    gpt_min_budget mb;
    if (gpt_min_budget_probe(&c, &s, min_swap, 256, &mb, err, sizeof err)) { CHECK_MSG(0, "probe: %s", err); return; }

    /* the reference: mode none, everything resident, on malloc */
    gpt_mem rm;
    gpt_mem_init_malloc(&rm, 0);
    gpt_keep keep;
    gpt_keep_init(&keep, &rm);
    gpt_hooks rh = gpt_hooks_keep(&keep);
    gpt_model ref;
    if (gpt_model_init(&ref, &c, &rm, &rh, GPT_MODE_NONE, 1)) { CHECK_MSG(0, "%s", ref.errmsg); return; }
    gpt_data data;
    gpt_data_from_memory(&data, text, sizeof text, "soak text", err, sizeof err);
    gpt_batch_buf rb, sb;
    if (gpt_batch_buf_init(&rb, &s) || gpt_batch_buf_init(&sb, &s)) { CHECK(0); return; }
    /* the reference's peak over a first few steps of a throwaway model sets the budget */
    uint64_t peak = 0;
    {
        gpt_mem pm;
        gpt_mem_init_malloc(&pm, 0);
        gpt_keep pk;
        gpt_keep_init(&pk, &pm);
        gpt_hooks ph = gpt_hooks_keep(&pk);
        gpt_model pre;
        float l;
        if (gpt_model_init(&pre, &c, &pm, &ph, GPT_MODE_NONE, 1)) { CHECK_MSG(0, "%s", pre.errmsg); return; }
        for (int st = 0; st < 10; st++) {
            CHECK(gpt_train_step(&pre, &data, &s, st, &rb, &l) == 0);
            if (pre.stats.peak_bytes > peak) peak = pre.stats.peak_bytes;
        }
        gpt_model_free(&pre);
        gpt_keep_free(&pk);
        gpt_mem_destroy(&pm);
    }
    if (peak < mb.min_budget_bytes) peak = mb.min_budget_bytes;
    uint64_t budget = mb.min_budget_bytes + (peak - mb.min_budget_bytes) / 4;

    /* smartswap on cpu-sim, as smartswap train sets it up (tools/cmd-train.c) */
    ss_options o = ss_options_default();
    o.sim_jitter_us = jitter;
    o.seed = 5;
    o.min_swap_bytes = min_swap;
    o.budget_bytes = gpt_plan_budget(budget, state, GPT_PLAN_HEADROOM);
    uint64_t segment = budget < 2 * mb.min_budget_bytes ? 256 : gpt_mem_segment_for(budget, state);
    gpt_mem sm;
    if (gpt_mem_init_ss_ex(&sm, "cpu-sim", &o, budget, segment, err, sizeof err)) { CHECK_MSG(0, "%s", err); return; }
    sm.budget = 0;   /* the allocator's budget rules (swapped-out bytes still count in gpt_mem) */
    gpt_ssswap sw;
    if (gpt_ssswap_init(&sw, &sm, &o)) { CHECK_MSG(0, "%s", sw.err); return; }
    CHECK_OK(ss_ctx_enable_swap(sw.ctx, SS_SWAP_SMARTSWAP));
    gpt_hooks shk = gpt_hooks_ssswap(&sw);
    gpt_model m;
    if (gpt_model_init(&m, &c, &sm, &shk, GPT_MODE_SMARTSWAP, 1)) { CHECK_MSG(0, "%s", m.errmsg); return; }

    int warm = steps / 10 > 50 ? steps / 10 : 50;
    if (warm > steps) warm = steps;
    uint64_t rss_warm = 0, rss_max = 0, rss0 = rss_bytes(), samp[10];
    int nsamp = 0;
    uint64_t swapped = 0, evictions = 0, stalls = 0, iters = 0;
    int diff = 0, errors = 0, evals = 0, iter = 0;
    double t0 = now_s();
    for (int st = 0; st < steps && !errors; st++) {
        for (int ev = 0; ev < 2 && !errors; ev++) {
            if (ev == 1 && !(s.eval_every && (st + 1) % s.eval_every == 0)) break;
            float la = 0, lb = 0;
            int ea = ev ? gpt_eval_step(&ref, &data, &s, evals, iter, &rb, &la) : gpt_train_step(&ref, &data, &s, st, &rb, &la);
            int eb = ev ? gpt_eval_step(&m, &data, &s, evals, iter, &sb, &lb) : gpt_train_step(&m, &data, &s, st, &sb, &lb);
            iter++;
            if (ev) evals++;
            if (ea || eb) {
                CHECK_MSG(0, "step %d%s: %s", st + 1, ev ? " (evaluation)" : "", ea ? ref.errmsg : m.errmsg);
                errors++;
                break;
            }
            if (memcmp(&la, &lb, sizeof la)) {
                if (diff < 5) fprintf(stderr, "  step %d%s: loss %a, none %a\n", st + 1, ev ? " eval" : "", lb, la);
                diff++;
            }
            ss_exec_report er;
            if (ss_ctx_exec_report(sw.ctx, &er) == SS_OK) {
                swapped += er.swapped_out_bytes;
                evictions += er.evictions;
                stalls += er.stalls;
                iters++;
            }
        }
        uint64_t r = rss_bytes();
        if ((st + 1) % (steps / 10 > 0 ? steps / 10 : 1) == 0 && nsamp < 10) samp[nsamp++] = r;
        if (st + 1 == warm) rss_warm = r;
        if (st + 1 >= warm && r > rss_max) rss_max = r;
    }
    double secs = now_s() - t0;
    uint64_t rss_end = rss_bytes();
    CHECK_MSG(diff == 0, "%d losses differ from none", diff);
    CHECK_EQ_INT(errors, 0);
    /* final weights */
    char pa[] = "/tmp/ss-soak-ref-XXXXXX", pb[] = "/tmp/ss-soak-ss-XXXXXX";
    int fa = mkstemp(pa), fb = mkstemp(pb);
    if (fa >= 0) close(fa);
    if (fb >= 0) close(fb);
    int same_w = 0;
    if (!errors && fa >= 0 && fb >= 0 && !gpt_save_weights(&ref, pa) && !gpt_save_weights(&m, pb)) {
        FILE *A = fopen(pa, "rb"), *B = fopen(pb, "rb");
        same_w = A && B;
        for (int x, y; same_w && ((x = getc(A)) != EOF || !feof(B));) {
            y = getc(B);
            if (x != y) same_w = 0;
            if (x == EOF) break;
        }
        if (A) fclose(A);
        if (B) fclose(B);
    }
    CHECK_MSG(same_w, "final weights differ from none (or could not be written)");
    remove(pa);
    remove(pb);
    double mib = 1.0 / (1 << 20);
    fprintf(stderr, "  soak: %d steps + %d evaluations in %.1f s, budget %llu (smallest %llu, none's peak %llu), jitter up to %g us:\n"
            "        swapped %.1f MiB in %llu iterations, %llu evictions, %llu stalls; losses %s, final weights %s\n"
            "        RSS %.2f MiB at start, %.2f MiB after warm-up (step %d), at most %.2f MiB after, %.2f MiB at the end "
            "(%+.3f MiB since warm-up)%s\n",
            steps, evals, secs, (unsigned long long)budget, (unsigned long long)mb.min_budget_bytes,
            (unsigned long long)peak, jitter, (double)swapped * mib, (unsigned long long)iters,
            (unsigned long long)evictions, (unsigned long long)stalls, diff ? "DIFFER" : "identical to none",
            same_w ? "identical" : "DIFFER", (double)rss0 * mib, (double)rss_warm * mib, warm, (double)rss_max * mib,
            (double)rss_end * mib, ((double)rss_end - (double)rss_warm) * mib,
            SOAK_ASAN ? " (AddressSanitizer: not checked)" : steps < 500 ? " (checked from 500 steps)" : "");
    fprintf(stderr, "        RSS at every tenth of the run (MiB):");
    for (int i = 0; i < nsamp; i++) fprintf(stderr, " %.2f", (double)samp[i] * mib);
    fprintf(stderr, "\n");
    CHECK(swapped > 0);
    if (!SOAK_ASAN && steps >= 500) {
        uint64_t allow = (1u << 20) + rss_warm / 50;
        CHECK_MSG(rss_max <= rss_warm + allow, "RSS grew from %llu after warm-up to %llu (allowed %llu)",
                  (unsigned long long)rss_warm, (unsigned long long)rss_max, (unsigned long long)allow);
    }
    gpt_model_free(&m);
    gpt_ssswap_free(&sw);
    CHECK_MSG(sm.live == 0, "%llu buffers leaked", (unsigned long long)sm.live);
    gpt_mem_destroy(&sm);
    gpt_model_free(&ref);
    gpt_keep_free(&keep);
    gpt_mem_destroy(&rm);
    gpt_data_free(&data);
    gpt_batch_buf_free(&rb);
    gpt_batch_buf_free(&sb);
}

int main(void) {
#ifdef _OPENMP
    if (!getenv("OMP_NUM_THREADS")) omp_set_num_threads(1);   /* the soak is about memory, not speed */
#endif
    RUN(t_soak);
    return test_summary();
}
