/* cmd-plan.c: `smartswap plan PROFILE --budget SIZE ...`: plans swaps for a detailed profile
 * under a device budget (policy.c), writes the plan file (plan.c, docs/trace-format.md, "Plan files") and
 * prints what the simulator predicts: peak before and after, bytes swapped, host memory,
 * stall and iteration time; --json prints one object; --plot draws device memory over the
 * iteration with and without the plan and the budget line (gnuplot).
 */
#include "cli.h"
#include "policy.h"
#include "presets.h"
#include "trace.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *CMD = "plan";

static void usage(FILE *f) {
    fprintf(f,
        "usage: smartswap plan PROFILE --budget SIZE [--device PRESET | --iter-time SECONDS]\n"
        "                      [--d2h GB/s] [--h2d GB/s] [--host-mem SIZE] [--layers N]\n"
        "                      [--min-swap SIZE] [--segment SIZE] [--latency-us US] [-o PLAN]\n"
        "                      [--json] [--plot FILE.png|svg]\n"
        "  Plans which saved tensors to swap to host memory, and when, so that one training\n"
        "  iteration of PROFILE fits in --budget bytes of device memory.\n"
        "  --device     h200 (default), h100, a100-80g, a100-40g, gh200: link bandwidths, host\n"
        "               memory cap and, when the profile has FLOPs, per-operator times\n"
        "  --iter-time  iteration time in seconds: times from logical layers (time / layers);\n"
        "               without it, the profile's measured operator seconds when it has them\n"
        "  --d2h/--h2d  copy bandwidths in GB/s (default: the device's)\n"
        "  --host-mem   cap on host memory for swapped tensors (default: the device's typical)\n"
        "  --segment    the allocator's segment size the simulations assume (default 2 MiB, the\n"
        "               allocator's; smartswap train prints its own on the 'memory' line: give that\n"
        "               to plan a saved profile as the trainer did), a multiple of 256 bytes\n"
        "  --latency-us fixed cost of each copy in microseconds (default 0; cpu-sim's is 5)\n"
        "  -o PLAN      where to write the plan (default: PROFILE with .plan)\n");
}

static char *default_out(const char *profile) {
    size_t n = strlen(profile);
    char *o = malloc(n + 8);
    if (!o) return NULL;
    memcpy(o, profile, n + 1);
    const char *exts[] = {".jsonl", ".profile", ".json"};
    for (size_t i = 0; i < 3; i++) {
        size_t e = strlen(exts[i]);
        if (n > e && strcmp(o + n - e, exts[i]) == 0) { o[n - e] = 0; break; }
    }
    strcat(o, ".plan");
    return o;
}

/* Draws device memory over the iteration, with and without the plan, and the budget line. */
static int plot(const char *path, const ss_profile *p, const ss_plan *pl, const ssi_policy_config *c) {
    size_t n = strlen(path);
    const char *term = NULL;
    if (n > 4 && strcmp(path + n - 4, ".png") == 0) term = "pngcairo size 1200,600";
    else if (n > 4 && strcmp(path + n - 4, ".svg") == 0) term = "svg size 1200,600";
    if (!term) {
        cli_error(CMD, "name the file FILE.png or FILE.svg", "--plot: '%s' is neither .png nor .svg", path);
        return 2;
    }
    ssi_sim_config sc;
    memset(&sc, 0, sizeof sc);
    sc.d2h_bps = c->d2h_bps;
    sc.h2d_bps = c->h2d_bps;
    sc.copy_latency_s = c->copy_latency_s;
    sc.time = c->time;
    sc.record_ops = 1;
    ssi_sim_result r0, r1;
    char err[256];
    if (ssi_sim_run(p, NULL, &sc, &r0, err, sizeof err) != SS_OK) {
        cli_error(CMD, NULL, "--plot: simulating without the plan failed: %s", err);
        return 1;
    }
    sc.budget_bytes = c->budget_bytes;
    if (ssi_sim_run(p, pl, &sc, &r1, err, sizeof err) != SS_OK) {
        ssi_sim_result_free(&r0);
        cli_error(CMD, NULL, "--plot: simulating the plan failed: %s", err);
        return 1;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    FILE *g = popen("gnuplot 2>&1", "w");
    if (!g) {
        ssi_sim_result_free(&r0);
        ssi_sim_result_free(&r1);
        cli_error(CMD, "install gnuplot (Debian: apt-get install gnuplot-nox)", "--plot: cannot run gnuplot");
        return 1;
    }
    const double G = 1024.0 * 1024.0 * 1024.0;
    fprintf(g, "set terminal %s\nset output '%s'\n", term, tmp);
    fprintf(g, "set title 'device memory over one iteration (%u operators)'\n", p->nops);
    fprintf(g, "set xlabel 'time (s)'\nset ylabel 'device memory (GiB)'\nset key outside bottom center horizontal\n");
    fprintf(g, "set grid\n");
    fprintf(g, "$before << EOD\n");
    for (uint32_t i = 0; i < p->nops; i++) fprintf(g, "%.9g %.9g\n", r0.op_start[i], (double)r0.op_mem[i] / G);
    fprintf(g, "%.9g %.9g\nEOD\n", r0.iter_s, p->nops ? (double)r0.op_mem[p->nops - 1] / G : 0);
    fprintf(g, "$after << EOD\n");
    for (uint32_t i = 0; i < p->nops; i++) fprintf(g, "%.9g %.9g\n", r1.op_start[i], (double)r1.op_mem[i] / G);
    fprintf(g, "%.9g %.9g\nEOD\n", r1.iter_s, p->nops ? (double)r1.op_mem[p->nops - 1] / G : 0);
    double xmax = r0.iter_s > r1.iter_s ? r0.iter_s : r1.iter_s;
    fprintf(g, "set xrange [0:%.9g]\n", xmax);
    fprintf(g, "plot $before using 1:2 with steps lw 2 lc rgb '#999999' title 'without the plan', "
               "$after using 1:2 with steps lw 2 lc rgb '#1f77b4' title 'with the plan', "
               "%.9g with lines dt 2 lw 2 lc rgb '#d62728' title 'budget'\n",
            (double)c->budget_bytes / G);
    fprintf(g, "set output\n");
    int rc = pclose(g);
    ssi_sim_result_free(&r0);
    ssi_sim_result_free(&r1);
    if (rc != 0 || access(tmp, F_OK) != 0) {
        unlink(tmp);
        cli_error(CMD, "install gnuplot with cairo or svg output (Debian: gnuplot-nox)",
                  "--plot: gnuplot failed (exit status %d)", rc);
        return 1;
    }
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        cli_error(CMD, "check that the folder exists and is writable", "--plot: cannot write '%s'", path);
        return 1;
    }
    return 0;
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

int cmd_plan(int argc, char **argv) {
    ss_options o;
    if (cli_options_init(CMD, &o)) return 2;
    const char *profile = NULL, *out = NULL, *plot_path = NULL, *v = NULL;
    const char *device = NULL;
    double iter_time = 0, d2h = 0, h2d = 0, latency_us = 0;
    uint64_t budget = 0, host_mem = 0, min_swap = o.min_swap_bytes, segment = 0;
    int have_budget = 0, have_host = 0, json = 0;
    long layers = o.layers;
    for (int i = 1; i < argc;) {
        int r;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) { usage(stdout); return 0; }
        if (strcmp(argv[i], "--json") == 0) { json = 1; i++; continue; }
        if (strcmp(argv[i], "-o") == 0) {
            if (i + 1 >= argc) { cli_error(CMD, NULL, "-o needs a file name"); return 2; }
            out = argv[i + 1];
            i += 2;
            continue;
        }
        if ((r = cli_flag(argc, argv, &i, "budget", &v))) {
            if (r < 0 || cli_size(CMD, "budget", v, &budget)) return 2;
            have_budget = 1;
        } else if ((r = cli_flag(argc, argv, &i, "device", &v))) {
            if (r < 0) return 2;
            device = v;
        } else if ((r = cli_flag(argc, argv, &i, "iter-time", &v))) {
            if (r < 0 || cli_double(CMD, "iter-time", v, 1e-9, 1e9, &iter_time)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "d2h", &v))) {
            if (r < 0 || cli_double(CMD, "d2h", v, 1e-6, 1e6, &d2h)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "h2d", &v))) {
            if (r < 0 || cli_double(CMD, "h2d", v, 1e-6, 1e6, &h2d)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "host-mem", &v))) {
            if (r < 0 || cli_size(CMD, "host-mem", v, &host_mem)) return 2;
            have_host = 1;
        } else if ((r = cli_flag(argc, argv, &i, "layers", &v))) {
            if (r < 0 || cli_int(CMD, "layers", v, 0, 1000000, &layers)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "min-swap", &v))) {
            if (r < 0 || cli_size(CMD, "min-swap", v, &min_swap)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "segment", &v))) {
            if (r < 0 || cli_segment(CMD, v, &segment)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "latency-us", &v))) {
            if (r < 0 || cli_double(CMD, "latency-us", v, 0, 1e6, &latency_us)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "output", &v))) {
            if (r < 0) return 2;
            out = v;
        } else if ((r = cli_flag(argc, argv, &i, "plot", &v))) {
            if (r < 0) return 2;
            plot_path = v;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            cli_error(CMD, "'smartswap plan --help' lists the flags", "unknown flag '%s'", argv[i]);
            return 2;
        } else {
            if (profile) {
                cli_error(CMD, "give one profile", "a second profile '%s' after '%s'", argv[i], profile);
                return 2;
            }
            profile = argv[i++];
        }
    }
    if (!profile) {
        cli_error(CMD, "smartswap plan PROFILE --budget SIZE (profiles come from 'smartswap trace gen' "
                       "or a detailed run)", "no profile given");
        return 2;
    }
    if (!have_budget || budget == 0) {
        cli_error(CMD, "add --budget SIZE, e.g. --budget 24GiB", "%s", have_budget ? "--budget 0 leaves no "
                  "device memory to plan for" : "no --budget given: the plan must fit a device budget");
        return 2;
    }
    const ssi_device_preset *dev = ssi_preset_find(device ? device : "h200");
    if (!dev) {
        char names[256] = "";
        for (int i = 0; i < ssi_preset_count(); i++) {
            if (i) strcat(names, ", ");
            strcat(names, ssi_preset_get(i)->name);
        }
        cli_error(CMD, NULL, "--device: unknown preset '%s' (presets: %s)", device, names);
        return 2;
    }
    char err[512];
    ss_profile *p = NULL;
    if (ssi_profile_read(profile, &p, err, sizeof err) != SS_OK) {
        cli_error(CMD, "profiles are written by 'smartswap trace gen' or a detailed run (docs/trace-format.md)",
                  "%s", err);
        return 1;
    }
    ssi_policy_config c;
    memset(&c, 0, sizeof c);
    c.budget_bytes = budget;
    c.host_mem_bytes = have_host ? host_mem : (o.host_mem_bytes ? o.host_mem_bytes : dev->host_mem_bytes);
    c.min_swap_bytes = min_swap;
    c.d2h_bps = (d2h > 0 ? d2h : dev->d2h_gbps) * 1e9;
    c.h2d_bps = (h2d > 0 ? h2d : dev->h2d_gbps) * 1e9;
    c.time.layers = (uint32_t)layers;
    c.segment_bytes = segment;
    c.copy_latency_s = latency_us * 1e-6;
    c.min_budget = 1;
    int has_flops = 0;
    for (uint32_t i = 0; i < p->nops && !has_flops; i++) has_flops = p->ops[i].flops > 0;
    const char *mode;
    if (iter_time > 0) {
        c.time.mode = SSI_TIME_LAYER;
        c.time.iter_seconds = iter_time;
        mode = "logical layers (--iter-time)";
    } else if (device && has_flops) {
        c.time.mode = SSI_TIME_FLOPS;
        c.time.flops_per_s = dev->bf16_flops * SS_PRESET_MFU;
        mode = "per-operator FLOPs";
    } else if (ssi_profile_has_op_times(p)) {
        c.time.mode = SSI_TIME_MEASURED;
        mode = "measured op times (the profile's)";
    } else if (p->iter_seconds > 0) {
        c.time.mode = SSI_TIME_LAYER;
        mode = "logical layers (the profile's iteration time)";
    } else if (has_flops) {
        c.time.mode = SSI_TIME_FLOPS;
        c.time.flops_per_s = dev->bf16_flops * SS_PRESET_MFU;
        mode = "per-operator FLOPs";
    } else {
        ssi_profile_free(p);
        cli_error(CMD, "give --iter-time SECONDS", "%s has no iteration time and no operator FLOPs", profile);
        return 2;
    }
    if (budget > dev->mem_bytes) {
        char b1[32], b2[32];
        fprintf(stderr, "smartswap plan: warning: the budget %s is above the %s's memory %s\n",
                ss_format_size(budget, b1, sizeof b1), dev->name, ss_format_size(dev->mem_bytes, b2, sizeof b2));
    }
    ss_plan *pl = NULL;
    ssi_policy_report rep;
    ss_status st = ssi_policy_plan(p, &c, &pl, &rep, err, sizeof err);
    if (st != SS_OK) {
        ssi_profile_free(p);
        cli_error(CMD, st == SS_ERR_INVALID ? "check the profile and the flags" : NULL, "%s",
                  err[0] ? err : ss_status_str(st));
        return st == SS_ERR_INVALID ? 2 : 1;
    }
    char *def_out = NULL;
    if (!out) out = def_out = default_out(profile);
    int rc = 0;
    if (pl->feasible) {
        st = out ? ssi_plan_write(pl, out) : SS_ERR_HOST_OOM;
        if (st != SS_OK) {
            cli_error(CMD, "check that the folder exists and is writable", "cannot write the plan to '%s': %s",
                      out ? out : "?", ss_status_str(st));
            rc = 1;
        }
    }
    if (rc == 0 && plot_path) rc = plot(plot_path, p, pl, &c);
    /* the smallest feasible budget as state + x times the activations (the profile's peak demand
     * above its base): how much of the activations must stay on the device at the least */
    ssi_profile_stats ps;
    ssi_profile_stats_get(p, &ps);
    /* the profile's smallest budget as smartswap train and smartswap replay print it: state +
     * the largest working set of one operator (ssi_policy_floor) */
    uint64_t floor_b = 0;
    uint32_t floor_op = 0;
    if (rc == 0 && ssi_policy_floor(p, &c, &floor_b, &floor_op, err, sizeof err) != SS_OK) floor_b = 0;
    double min_frac = ps.peak_activation_bytes && rep.min_budget_bytes
                          ? ((double)rep.min_budget_bytes - (double)ps.base_bytes) / (double)ps.peak_activation_bytes
                          : 0;
    char b[10][32];
    if (json) {
        printf("{\"profile\":");
        json_str(stdout, profile);
        printf(",\"ops\":%u,\"device\":\"%s\",\"time_mode\":", p->nops, dev->name);
        json_str(stdout, mode);
        printf(",\"segment_bytes\":%" PRIu64 ",\"copy_latency_us\":%.6g", segment ? segment : ss_alloc_config_default().segment_bytes,
               latency_us);
        printf(",\"d2h_gbps\":%.6g,\"h2d_gbps\":%.6g,\"host_mem_cap_bytes\":%" PRIu64
               ",\"layers\":%u,\"peak_bytes_before\":%" PRIu64 ",\"peak_bytes_after\":%" PRIu64
               ",\"budget_bytes\":%" PRIu64 ",\"swapped_bytes\":%" PRIu64 ",\"swapped_tensors\":%u"
               ",\"host_bytes\":%" PRIu64 ",\"stall_seconds\":%.9g,\"iter_seconds\":%.9g"
               ",\"iter_seconds_before\":%.9g,\"feasible\":%s,\"min_feasible_budget_bytes\":%" PRIu64
               ",\"state_bytes\":%" PRIu64 ",\"activation_bytes\":%" PRIu64
               ",\"min_feasible_activation_fraction\":%.6g,\"min_budget_bytes\":%" PRIu64 ",\"plan\":",
               c.d2h_bps / 1e9, c.h2d_bps / 1e9, c.host_mem_bytes, rep.nlayers, rep.peak_before,
               rep.peak_after, budget, rep.swapped_bytes, rep.selected, rep.host_bytes, rep.stall_s,
               rep.iter_s, rep.iter_s_before, rep.feasible ? "true" : "false", rep.min_budget_bytes,
               ps.base_bytes, ps.peak_activation_bytes, min_frac, floor_b);
        if (pl->feasible && rc == 0) json_str(stdout, out); else printf("null");
        printf("}\n");
    } else {
        printf("smartswap plan: %s (%u operators), budget %s, device %s\n", profile, p->nops,
               ss_format_size(budget, b[0], 32), dev->name);
        printf("  times from %s; copies %.3g GB/s out, %.3g GB/s in; %u logical layers, %u above the budget\n",
               mode, c.d2h_bps / 1e9, c.h2d_bps / 1e9, rep.nlayers, rep.over_layers);
        printf("  peak before      %s\n", ss_format_size(rep.peak_before, b[1], 32));
        printf("  peak after       %s\n", ss_format_size(rep.peak_after, b[2], 32));
        printf("  swapped          %s in %u tensors (%u candidates, %u hidden)\n",
               ss_format_size(rep.swapped_bytes, b[3], 32), rep.selected, rep.candidates, rep.hidden);
        printf("  host memory      %s (cap %s)\n", ss_format_size(rep.host_bytes, b[4], 32),
               c.host_mem_bytes ? ss_format_size(c.host_mem_bytes, b[5], 32) : "none");
        printf("  iteration        %.6g s predicted (%.6g s without swaps), stall %.6g s (%.2f %%)\n",
               rep.iter_s, rep.iter_s_before, rep.stall_s, rep.iter_s > 0 ? 100 * rep.stall_s / rep.iter_s : 0);
        printf("  smallest budget  %s", ss_format_size(rep.min_budget_bytes, b[6], 32));
        if (ps.peak_activation_bytes && rep.min_budget_bytes)
            printf(" = state %s + %.3f x the activations %s", ss_format_size(ps.base_bytes, b[8], 32), min_frac,
                   ss_format_size(ps.peak_activation_bytes, b[9], 32));
        printf("\n                   (this profile's iteration as planned; smartswap train's smallest budget\n"
               "                   covers every length and routing of its configuration: docs/policy.md)\n");
        if (floor_b)
            cli_print_floor("  working set      ", floor_b, ps.base_bytes, floor_op,
                            p->names[p->ops[floor_op].name], "replay");
        if (pl->feasible && rc == 0) printf("  plan written to  %s\n", out);
        if (plot_path && rc == 0) printf("  plot written to  %s\n", plot_path);
    }
    if (!pl->feasible) {
        char hint[96];
        snprintf(hint, sizeof hint, "--budget %" PRIu64 " (%s) or more",
                 rep.min_budget_bytes, ss_format_size(rep.min_budget_bytes, b[7], 32));
        cli_error(CMD, hint, "%s; no plan written", rep.why);
        rc = 1;
    }
    free(def_out);
    ssi_plan_free(pl);
    ssi_profile_free(p);
    return rc;
}
