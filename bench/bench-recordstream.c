/* bench-recordstream.c: the custom record stream (release at the predicted operator,
 * ss_alloc_free_at) against the stock emulation (torch's record_stream + process_events,
 * ss_alloc_free_event) on the same replay: same profile, budget, plan source, clock and copy
 * bandwidth. Prints, side by side, event queries per iteration, queries per swapped tensor,
 * waits (free points reached before their copy finished; stock: OOM-path syncs), the predicted
 * and measured stall, and the mean block reuse interval (allocator definition: from the
 * completion of a block's last pending use to its next hand-out, docs/allocator.md), with the
 * honest ratio. Checks the custom release's promise: at most one event query per swapped
 * tensor, none on the allocation path, and no stall the plan did not predict (exit status 1
 * otherwise). docs/executor.md "Release modes" says what the figures show and why.
 *
 * The copy bandwidth is calibrated (ss_calib_bandwidth, docs/performance-model.md) so that the
 * copy:compute ratio is the reference's (Llama-2-7B on an H200 over PCIe): with a fixed 2 GB/s
 * this small model's copies took ~45x its compute, nothing could hide, and every free point
 * waited for its copy (as the plan predicted).
 *
 *     build/bench/bench-recordstream [ITERS [BUDGET_FRACTION_OF_PEAK [COPY_SCALE]]]
 */
#include "replay.h"
#include "workload.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    uint32_t iters = argc > 1 ? (uint32_t)atoi(argv[1]) : 8;
    double frac = argc > 2 ? atof(argv[2]) : 0.5;
    double scale = argc > 3 ? atof(argv[3]) : 1.0;   /* > 1: copies relatively slower */
    if (!(frac > 0 && frac <= 1)) frac = 0.5;
    if (!(scale > 0)) scale = 1.0;
    if (iters < 4) iters = 4;
    ssi_workload_config wc;
    ssi_workload_default(&wc);
    ssi_workload_preset(&wc, "llama-3.2-1b");
    wc.layers = 12; wc.hidden = 64; wc.heads = 2; wc.kv_heads = 2; wc.ffn = 128; wc.vocab = 256;
    wc.seq = 1024; wc.batch = 1; wc.dtype_bytes = 4;
    ss_profile *p = NULL;
    char err[256];
    if (ssi_workload_generate(&wc, &p, NULL, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    uint64_t peak = 0, saved = 0;
    for (uint32_t i = 0; i < p->nops; i++) if (p->ops[i].mem_after > peak) peak = p->ops[i].mem_after;
    for (uint32_t t = 0; t < p->ntensors; t++)
        if (p->tensors[t].flags & SS_TENSOR_SAVED) saved += p->tensors[t].bytes;
    double gbps = 0;
    if (ss_calib_bandwidth(NULL, (double)saved, p->iter_seconds, scale, &gbps)) {
        fprintf(stderr, "bench-recordstream: cannot calibrate the copy bandwidth\n");
        return 1;
    }
    ssi_replay_result res[2];
    const char *names[2] = {"custom (predicted op)", "stock (record_stream)"};
    for (int m = 0; m < 2; m++) {
        ssi_replay_config rc;
        ssi_replay_config_default(&rc);
        rc.opts.budget_bytes = (uint64_t)((double)peak * frac);
        rc.opts.sim_virtual_clock = 1;
        rc.opts.sim_d2h_gbps = rc.opts.sim_h2d_gbps = gbps;
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
    printf("bench-recordstream: %s, budget %.2f MiB (%.2f of the peak), %u iterations, cpu-sim "
           "virtual clock, copies %.3g GB/s each way (calibrated, x%.3g), compute %.3f ms/iter\n",
           p->desc, (double)peak * frac / 1048576.0, frac, iters, gbps, scale, p->iter_seconds * 1e3);
    printf("%-24s %12s %12s %10s %10s %12s %12s %14s %7s %4s\n", "release", "queries/iter",
           "queries/swap", "waits/iter", "swaps/iter", "stall ms", "predicted", "mean reuse us",
           "corrupt", "oom");
    int bad = 0;
    for (int m = 0; m < 2; m++) {
        const ssi_replay_result *r = &res[m];
        /* steady state: the Stable iterations */
        uint64_t q = 0, w = 0, s = 0, n = 0;
        double stall = 0, pred = 0;
        for (uint32_t i = 0; i < r->iters; i++) {
            if (r->it[i].stage != SS_STAGE_STABLE) continue;
            q += r->it[i].x.event_queries;
            w += r->it[i].x.waits;
            s += r->it[i].x.swap_outs;
            n++;
            stall += r->it[i].stall_s;
            pred += r->it[i].predicted_stall_s > 0 ? r->it[i].predicted_stall_s : 0;
            /* a stall the plan did not predict (virtual clock: they agree to the last bit) */
            if (m == 0 && r->it[i].stall_s > r->it[i].predicted_stall_s * (1 + 1e-9) + 1e-12) {
                bad = 1;
                fprintf(stderr, "custom release: iteration %u stalled %.6f s, predicted %.6f s\n",
                        i, r->it[i].stall_s, r->it[i].predicted_stall_s);
            }
        }
        if (!n) n = 1;
        printf("%-24s %12.1f %12.3f %10.1f %10.1f %12.3f %12.3f %14.3f %7llu %4llu\n", names[m],
               (double)q / n, s ? (double)q / s : 0.0, (double)w / n, (double)s / n, stall / n * 1e3,
               pred / n * 1e3, r->reuse_mean_s * 1e6, (unsigned long long)r->corrupt_reads,
               (unsigned long long)r->oom);
        if (m == 0 && q > s) { bad = 1; fprintf(stderr, "custom release: %llu queries for %llu swaps\n",
                                                (unsigned long long)q, (unsigned long long)s); }
        if (r->corrupt_reads || r->oom) bad = 1;
    }
    if (res[0].reuse_mean_s > 0)
        printf("mean reuse interval stock/custom: %.2fx (the promise is 100-1000x; see docs/executor.md)\n",
               res[1].reuse_mean_s / res[0].reuse_mean_s);
    printf("custom: at most one query per swapped tensor, none on the allocation path, no "
           "unpredicted stall: %s\n",
           bad ? "NO" : "yes");
    ssi_replay_result_free(&res[0]);
    ssi_replay_result_free(&res[1]);
    ssi_profile_free(p);
    return bad;
}
