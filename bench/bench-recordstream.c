/* bench-recordstream.c: the custom record stream (release at the predicted operator,
 * ss_alloc_free_at) against the stock emulation (torch's record_stream + process_events,
 * ss_alloc_free_event) on the same replay: same profile, budget, plan source and clock. Prints,
 * side by side, event queries per iteration, queries per swapped tensor, waits, and the mean
 * block reuse interval (allocator definition: from the completion of a block's last pending use
 * to its next hand-out, docs/allocator.md). Checks the custom release's promise: at most one
 * event query per swapped tensor, none on the allocation path (exit status 1 otherwise).
 *
 *     build/bench/bench-recordstream [ITERS]
 */
#include "replay.h"
#include "workload.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    uint32_t iters = argc > 1 ? (uint32_t)atoi(argv[1]) : 8;
    if (iters < 4) iters = 4;
    ssi_workload_config wc;
    ssi_workload_default(&wc);
    ssi_workload_preset(&wc, "llama-3.2-1b");
    wc.layers = 12; wc.hidden = 64; wc.heads = 2; wc.kv_heads = 2; wc.ffn = 128; wc.vocab = 256;
    wc.seq = 1024; wc.batch = 1; wc.dtype_bytes = 4;
    ss_profile *p = NULL;
    char err[256];
    if (ssi_workload_generate(&wc, &p, NULL, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    uint64_t peak = 0;
    for (uint32_t i = 0; i < p->nops; i++) if (p->ops[i].mem_after > peak) peak = p->ops[i].mem_after;
    ssi_replay_result res[2];
    const char *names[2] = {"custom (predicted op)", "stock (record_stream)"};
    for (int m = 0; m < 2; m++) {
        ssi_replay_config rc;
        ssi_replay_config_default(&rc);
        rc.opts.budget_bytes = peak / 2;
        rc.opts.sim_virtual_clock = 1;
        rc.opts.sim_d2h_gbps = rc.opts.sim_h2d_gbps = 2;
        rc.opts.min_swap_bytes = 0;
        rc.opts.warmup_iters = 1;
        rc.opts.release_mode = m ? SS_RELEASE_MODE_STOCK : SS_RELEASE_MODE_PREDICTED;
        rc.iters = iters;
        rc.segment_bytes = 64 << 10;
        rc.keep_iters = 1;
        if (ssi_replay_run(p, &rc, &res[m], err, sizeof err)) {
            fprintf(stderr, "replay (%s): %s\n", names[m], err);
            return 1;
        }
    }
    printf("bench-recordstream: %s, budget %.2f MiB, %u iterations, cpu-sim virtual clock\n",
           p->desc, (double)(peak / 2) / 1048576.0, iters);
    printf("%-26s %14s %14s %12s %12s %16s %8s %8s\n", "release", "queries/iter", "queries/swap",
           "waits/iter", "swaps/iter", "mean reuse (us)", "corrupt", "oom");
    int bad = 0;
    for (int m = 0; m < 2; m++) {
        const ssi_replay_result *r = &res[m];
        /* steady state: the Stable iterations after the first */
        uint64_t q = 0, w = 0, s = 0, n = 0;
        for (uint32_t i = 0; i < r->iters; i++) {
            if (r->it[i].stage != SS_STAGE_STABLE) continue;
            q += r->it[i].x.event_queries;
            w += r->it[i].x.waits;
            s += r->it[i].x.swap_outs;
            n++;
        }
        if (!n) n = 1;
        printf("%-26s %14.1f %14.3f %12.1f %12.1f %16.3f %8llu %8llu\n", names[m], (double)q / n,
               s ? (double)q / s : 0.0, (double)w / n, (double)s / n, r->reuse_mean_s * 1e6,
               (unsigned long long)r->corrupt_reads, (unsigned long long)r->oom);
        if (m == 0 && q > s) { bad = 1; fprintf(stderr, "custom release: %llu queries for %llu swaps\n",
                                                (unsigned long long)q, (unsigned long long)s); }
        if (r->corrupt_reads || r->oom) bad = 1;
    }
    if (res[0].reuse_mean_s > 0)
        printf("reuse interval ratio stock/custom: %.1fx\n", res[1].reuse_mean_s / res[0].reuse_mean_s);
    printf("custom: at most one query per swapped tensor, none on the allocation path: %s\n",
           bad ? "NO" : "yes");
    ssi_replay_result_free(&res[0]);
    ssi_replay_result_free(&res[1]);
    ssi_profile_free(p);
    return bad;
}
