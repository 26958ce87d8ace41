/* cmd-replay.c: `smartswap replay PROFILE --budget SIZE ...`: runs a profile on a device with real
 * buffers through the framework API and the executor (src/replay.c), checks every byte read,
 * and prints, per iteration, what was planned and what happened (swapped, matched, misses,
 * stalls, evictions, event queries, peak), then the totals; --json prints one object;
 * --timeline writes the compute, D2H and H2D lanes of an iteration as a Chrome trace.
 */
#include "cli.h"
#include "policy.h"
#include "replay.h"
#include "trace.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char *CMD = "replay";

static void usage(FILE *f) {
    fprintf(f,
        "usage: smartswap replay PROFILE --budget SIZE [--plan PLAN] [--device cpu-sim|cuda]\n"
        "                        [--iters N] [--virtual-clock] [--json] [--timeline FILE.json]\n"
        "                        [--mode smartswap|offload-all|off] [--release-mode predicted|stock]\n"
        "                        [--iter-time SECONDS] [--d2h GB/s] [--h2d GB/s] [--jitter-us US]\n"
        "                        [--vary-seq F] [--vary-experts F] [--skip-ops P] [--eval-every N]\n"
        "                        [--extra-first N] [--seed N]\n"
        "  Runs PROFILE iteration after iteration on the device with real buffers, swapping with\n"
        "  the executor, and checks the bytes of every tensor each operator reads.\n"
        "  --plan        a fixed plan (from 'smartswap plan'); default: the stage machine plans\n"
        "  --timeline    Chrome trace event JSON of the last iteration (Perfetto opens it)\n"
        "  --vary-*      from iteration 1: sequence length / expert rows scaled by [1-F, 1];\n"
        "                --skip-ops: operators merged at random; --eval-every: forward-only steps\n"
        "  exit status: 0 clean, 1 corrupt reads, out of memory or an error, 2 bad usage\n");
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", (unsigned char)*s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

int cmd_replay(int argc, char **argv) {
    ss_options o;
    if (cli_options_init(CMD, &o)) return 2;
    ssi_replay_config rc;
    ssi_replay_config_default(&rc);
    const char *profile = NULL, *plan_path = NULL, *v;
    int json = 0;
    long iters = 3;
    double iter_time = 0;
    for (int i = 1; i < argc;) {
        int r;
        long lv;
        double dv;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) { usage(stdout); return 0; }
        if (strcmp(argv[i], "--json") == 0) { json = 1; i++; continue; }
        if (strcmp(argv[i], "--virtual-clock") == 0) { o.sim_virtual_clock = 1; i++; continue; }
        if ((r = cli_flag(argc, argv, &i, "budget", &v))) {
            if (r < 0 || cli_size(CMD, "--budget", v, &o.budget_bytes)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "plan", &v))) {
            if (r < 0) return 2;
            plan_path = v;
        } else if ((r = cli_flag(argc, argv, &i, "device", &v))) {
            if (r < 0) return 2;
            ssi_fmt(o.device, sizeof o.device, "%s", v);
        } else if ((r = cli_flag(argc, argv, &i, "iters", &v))) {
            if (r < 0 || cli_int(CMD, "--iters", v, 1, 1000000, &iters)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "timeline", &v))) {
            if (r < 0) return 2;
            rc.timeline_path = v;
        } else if ((r = cli_flag(argc, argv, &i, "mode", &v))) {
            if (r < 0) return 2;
            rc.mode = ss_swap_mode_from_name(v);
            if (rc.mode < 0) { cli_error(CMD, "use smartswap, offload-all or off", "unknown --mode '%s'", v); return 2; }
        } else if ((r = cli_flag(argc, argv, &i, "release-mode", &v))) {
            char e[200];
            if (r < 0) return 2;
            if (ss_options_set(&o, "release-mode", v, e, sizeof e)) { cli_error(CMD, NULL, "%s", e); return 2; }
        } else if ((r = cli_flag(argc, argv, &i, "iter-time", &v))) {
            if (r < 0 || cli_double(CMD, "--iter-time", v, 1e-9, 1e6, &iter_time)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "d2h", &v))) {
            if (r < 0 || cli_double(CMD, "--d2h", v, 1e-6, 1e6, &o.sim_d2h_gbps)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "h2d", &v))) {
            if (r < 0 || cli_double(CMD, "--h2d", v, 1e-6, 1e6, &o.sim_h2d_gbps)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "jitter-us", &v))) {
            if (r < 0 || cli_double(CMD, "--jitter-us", v, 0, 1e6, &o.sim_jitter_us)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "vary-seq", &v))) {
            if (r < 0 || cli_double(CMD, "--vary-seq", v, 0, 0.95, &rc.vary_seq)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "vary-experts", &v))) {
            if (r < 0 || cli_double(CMD, "--vary-experts", v, 0, 0.95, &rc.vary_experts)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "skip-ops", &v))) {
            if (r < 0 || cli_double(CMD, "--skip-ops", v, 0, 1, &rc.skip_ops)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "eval-every", &v))) {
            if (r < 0 || cli_int(CMD, "--eval-every", v, 0, 1000000, &lv)) return 2;
            rc.eval_every = (uint32_t)lv;
        } else if ((r = cli_flag(argc, argv, &i, "extra-first", &v))) {
            if (r < 0 || cli_int(CMD, "--extra-first", v, 0, 100000, &lv)) return 2;
            rc.extra_first = (uint32_t)lv;
        } else if ((r = cli_flag(argc, argv, &i, "seed", &v))) {
            if (r < 0 || cli_double(CMD, "--seed", v, 0, 9e15, &dv)) return 2;
            o.seed = (uint64_t)dv;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            cli_error(CMD, "'smartswap replay --help' lists the flags", "unknown flag '%s'", argv[i]);
            return 2;
        } else {
            if (profile) { cli_error(CMD, "give one profile", "a second profile '%s'", argv[i]); return 2; }
            profile = argv[i++];
        }
    }
    if (!profile) {
        cli_error(CMD, "smartswap replay PROFILE --budget SIZE (profiles: 'smartswap trace gen')",
                  "no profile given");
        return 2;
    }
    if (!o.budget_bytes) {
        cli_error(CMD, "add --budget SIZE, e.g. --budget 64MiB", "no --budget given");
        return 2;
    }
    char err[512];
    ss_profile *p = NULL;
    if (ssi_profile_read(profile, &p, err, sizeof err) != SS_OK) {
        cli_error(CMD, "make one with 'smartswap trace gen'", "%s", err);
        return 1;
    }
    ss_plan *plan = NULL;
    if (plan_path) {
        if (ssi_plan_read(plan_path, &plan, err, sizeof err) != SS_OK) {
            cli_error(CMD, "make one with 'smartswap plan PROFILE --budget SIZE'", "%s", err);
            ssi_profile_free(p);
            return 1;
        }
        if (plan->nops != p->nops) {
            cli_error(CMD, "plan the same profile", "the plan is for %u operators, the profile has %u",
                      plan->nops, p->nops);
            ssi_plan_free(plan);
            ssi_profile_free(p);
            return 1;
        }
        rc.plan = plan;
        rc.plan_from_profile = 1;
    }
    rc.opts = o;
    rc.iters = (uint32_t)iters;
    rc.vary_from = 1;
    rc.keep_iters = 1;
    rc.time.mode = SSI_TIME_LAYER;
    rc.time.iter_seconds = iter_time;
    rc.time.layers = o.layers > 0 ? (uint32_t)o.layers : 0;
    /* the profile's smallest budget (ssi_policy_floor), as smartswap plan prints it: state + the
     * largest working set of one operator */
    ssi_policy_config pc;
    ssi_policy_config_from_options(&o, &pc);
    uint64_t floor_b = 0;
    uint32_t floor_op = 0;
    if (ssi_policy_floor(p, &pc, &floor_b, &floor_op, err, sizeof err) != SS_OK) floor_b = 0;
    err[0] = 0;
    ssi_profile_stats ps;
    ssi_profile_stats_get(p, &ps);
    ssi_replay_result r;
    ss_status st = ssi_replay_run(p, &rc, &r, err, sizeof err);
    if (st) {
        cli_error(CMD, NULL, "%s%s%s", ss_status_str(st), err[0] ? ": " : "", err);
        ssi_replay_result_free(&r);   /* filled on errors too (replay.h) */
        ssi_plan_free(plan);
        ssi_profile_free(p);
        return 1;
    }
    if (json) {
        printf("{\"profile\":");
        json_str(stdout, profile);
        printf(",\"mode\":\"%s\",\"release_mode\":\"%s\",\"iters\":%u,\"corrupt_reads\":%" PRIu64
               ",\"oom\":%" PRIu64 ",\"peak_bytes\":%" PRIu64 ",\"budget_bytes\":%" PRIu64
               ",\"swapped_bytes\":%" PRIu64 ",\"swapped_in_bytes\":%" PRIu64
               ",\"matched_bytes\":%" PRIu64 ",\"planned_bytes\":%" PRIu64 ",\"misses\":%" PRIu64
               ",\"stalls\":%" PRIu64 ",\"stall_s\":%.9g,\"evictions\":%" PRIu64
               ",\"event_queries\":%" PRIu64 ",\"waits\":%" PRIu64 ",\"reuse_mean_s\":%.9g"
               ",\"plans_made\":%" PRIu64 ",\"state_bytes\":%" PRIu64 ",\"min_budget_bytes\":%" PRIu64
               ",\"per_iter\":[",
               ss_swap_mode_name(rc.mode), o.release_mode ? "stock" : "predicted", r.iters,
               r.corrupt_reads, r.oom, r.peak_bytes, r.budget_bytes, r.swapped_bytes,
               r.swapped_in_bytes, r.matched_bytes, r.planned_bytes, r.misses, r.stalls, r.stall_s,
               r.evictions, r.event_queries, r.waits, r.reuse_mean_s, r.plans_made, ps.base_bytes, floor_b);
        for (uint32_t i = 0; r.it && i < r.iters; i++) {
            const ssi_replay_iter *it = &r.it[i];
            printf("%s{\"iter\":%u,\"stage\":\"%s\",\"ops\":%u,\"peak_bytes\":%" PRIu64
                   ",\"iter_s\":%.9g,\"stall_s\":%.9g,\"predicted_stall_s\":%.9g"
                   ",\"planned_bytes\":%" PRIu64 ",\"matched_bytes\":%" PRIu64
                   ",\"swapped_bytes\":%" PRIu64 ",\"misses\":%u,\"stalls\":%u,\"evictions\":%u"
                   ",\"event_queries\":%" PRIu64 ",\"waits\":%" PRIu64 ",\"corrupt_reads\":%" PRIu64 "}",
                   i ? "," : "", i, ss_stage_name(it->stage), it->nops, it->peak_bytes, it->iter_s,
                   it->stall_s, it->predicted_stall_s, it->x.planned_bytes, it->x.matched_bytes,
                   it->x.swapped_out_bytes, it->x.misses, it->x.stalls, it->x.evictions,
                   it->x.event_queries, it->x.waits, it->corrupt_reads);
        }
        printf("]}\n");
    } else {
        char b[6][32];
        printf("replay %s: %s, budget %s, mode %s, release %s\n", profile,
               o.device[0] ? o.device : "cpu-sim", ss_format_size(r.budget_bytes, b[0], 32),
               ss_swap_mode_name(rc.mode), o.release_mode ? "stock" : "predicted");
        printf("%4s %-9s %10s %10s %10s %10s %6s %6s %6s %7s %10s %10s\n", "iter", "stage", "peak",
               "planned", "matched", "swapped", "miss", "stall", "evict", "queries", "stall_s",
               "predicted");
        for (uint32_t i = 0; r.it && i < r.iters; i++) {
            const ssi_replay_iter *it = &r.it[i];
            printf("%4u %-9s %10s %10s %10s %10s %6u %6u %6u %7" PRIu64 " %10.6f %10.6f\n", i,
                   ss_stage_name(it->stage), ss_format_size(it->peak_bytes, b[1], 32),
                   ss_format_size(it->x.planned_bytes, b[2], 32),
                   ss_format_size(it->x.matched_bytes, b[3], 32),
                   ss_format_size(it->x.swapped_out_bytes, b[4], 32), it->x.misses, it->x.stalls,
                   it->x.evictions, it->x.event_queries, it->stall_s,
                   it->predicted_stall_s < 0 ? 0 : it->predicted_stall_s);
        }
        printf("total: %u iterations, corrupt reads %" PRIu64 ", out of memory %" PRIu64
               ", peak %s of %s, swapped %s, evictions %" PRIu64 ", misses %" PRIu64
               ", stalls %" PRIu64 ", event queries %" PRIu64 ", mean reuse interval %.3g s\n",
               r.iters, r.corrupt_reads, r.oom, ss_format_size(r.peak_bytes, b[1], 32),
               ss_format_size(r.budget_bytes, b[2], 32), ss_format_size(r.swapped_bytes, b[3], 32),
               r.evictions, r.misses, r.stalls, r.event_queries, r.reuse_mean_s);
        if (floor_b)
            cli_print_floor("", floor_b, ps.base_bytes, floor_op, p->names[p->ops[floor_op].name], "plan");
        if (rc.timeline_path) printf("timeline: %s\n", rc.timeline_path);
    }
    int bad = r.corrupt_reads || r.oom;
    ssi_replay_result_free(&r);
    ssi_plan_free(plan);
    ssi_profile_free(p);
    return bad ? 1 : 0;
}
