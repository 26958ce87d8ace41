/* options.c: the one table of smartswap's options. Each row: name, type, struct field, default,
 * bounds, help. Environment variables are SMARTSWAP_<NAME> (upper case, '-' -> '_'); command
 * lines use --<name>. docs/options.md is the same table in prose; `smartswap options` prints it.
 */
#include "internal.h"
#include "smartswap-alloc.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stddef.h>

typedef enum opt_type { OPT_BOOL, OPT_INT, OPT_SIZE, OPT_FLOAT, OPT_STRING, OPT_ENUM } opt_type;

typedef struct opt_row {
    const char *name, *env;
    opt_type type;
    size_t off, fsize;
    const char *def;
    double lo, hi;          /* bounds for int/size/float */
    const char *choices;    /* enum: "predicted,stock" (index = value) */
    const char *help;
} opt_row;

#define F(field) offsetof(ss_options, field), sizeof(((ss_options *)0)->field)
#define GiB 1073741824.0
static const opt_row rows[] = {
    {"disable", "SMARTSWAP_DISABLE", OPT_BOOL, F(disable), "0", 0, 1, NULL,
     "turn every framework call into a pass-through (no profiling, no swapping)"},
    {"log-level", "SMARTSWAP_LOG_LEVEL", OPT_INT, F(log_level), "1", 0, 3, NULL,
     "0 errors, 1 warnings, 2 info, 3 debug (what the command line passes to stderr)"},
    {"seed", "SMARTSWAP_SEED", OPT_INT, F(seed), "1", 0, 1.8e19, NULL,
     "seed of every random choice (copy jitter, synthetic workloads)"},
    {"device", "SMARTSWAP_DEVICE", OPT_STRING, F(device), "cpu-sim", 0, 0, NULL,
     "device to run on: cpu-sim, cuda, cuda:N"},
    {"budget", "SMARTSWAP_BUDGET", OPT_SIZE, F(budget_bytes), "0", 0, 1e18, NULL,
     "device memory budget of the allocator; 0 = the device's capacity"},
    {"host-mem", "SMARTSWAP_HOST_MEM", OPT_SIZE, F(host_mem_bytes), "0", 0, 1e18, NULL,
     "cap on pinned host memory for swapped tensors; 0 = no cap"},
    {"granule", "SMARTSWAP_GRANULE", OPT_SIZE, F(granule_bytes), "0", 0, 1e18, NULL,
     "allocator: virtual-memory segments with physical granules of this size (raised to budget/16384 and the device's unit); auto = 64KiB, halved down to 4KiB while the budget holds under 4096 granules; 0 = plain segments"},
    {"sim-capacity", "SMARTSWAP_SIM_CAPACITY", OPT_SIZE, F(sim_capacity_bytes), "4GiB", 4096, 1e18, NULL,
     "cpu-sim: device memory capacity"},
    {"sim-d2h-gbps", "SMARTSWAP_SIM_D2H_GBPS", OPT_FLOAT, F(sim_d2h_gbps), "8", 1e-6, 1e6, NULL,
     "cpu-sim: device-to-host copy bandwidth in GB/s (see docs/performance-model.md)"},
    {"sim-h2d-gbps", "SMARTSWAP_SIM_H2D_GBPS", OPT_FLOAT, F(sim_h2d_gbps), "8", 1e-6, 1e6, NULL,
     "cpu-sim: host-to-device copy bandwidth in GB/s"},
    {"sim-latency-us", "SMARTSWAP_SIM_LATENCY_US", OPT_FLOAT, F(sim_latency_us), "5", 0, 1e6, NULL,
     "cpu-sim: fixed cost of each copy in microseconds"},
    {"virtual-clock", "SMARTSWAP_VIRTUAL_CLOCK", OPT_BOOL, F(sim_virtual_clock), "0", 0, 1, NULL,
     "cpu-sim: compute times instead of sleeping (deterministic timings)"},
    {"sim-jitter-us", "SMARTSWAP_SIM_JITTER_US", OPT_FLOAT, F(sim_jitter_us), "0", 0, 1e7, NULL,
     "cpu-sim: largest random extra delay added to each copy (seeded), to shake out races"},
    {"sim-threads", "SMARTSWAP_SIM_THREADS", OPT_BOOL, F(sim_threads), "0", 0, 1, NULL,
     "cpu-sim, real clock: run copies on stream threads instead of landing them in the host thread (docs/performance-model.md)"},
    {"ratio-scale", "SMARTSWAP_RATIO_SCALE", OPT_FLOAT, F(sim_ratio_scale), "1", 1e-3, 1e3, NULL,
     "calibration: multiply the reference copy:compute ratio (>1: slower link)"},
    {"warmup", "SMARTSWAP_WARMUP", OPT_INT, F(warmup_iters), "2", 0, 1000, NULL,
     "WarmUp iterations before the first detailed profile"},
    {"plan-cache", "SMARTSWAP_PLAN_CACHE", OPT_INT, F(plan_cache_size), "32", 1, 4096, NULL,
     "plans kept in the cache (least recently used evicted)"},
    {"max-detailed", "SMARTSWAP_MAX_DETAILED", OPT_INT, F(max_detailed), "3", 1, 1000, NULL,
     "detailed iterations in a row for sequences never seen before, then light mode for a while"},
    {"len-buckets", "SMARTSWAP_LEN_BUCKETS", OPT_INT, F(len_buckets), "0", 0, 16, NULL,
     "envelopes per doubling of the declared length (ss_ctx_sizes); 0 = one envelope per structure"},
    {"retime", "SMARTSWAP_RETIME", OPT_FLOAT, F(retime), "1.25", 0, 100, NULL,
     "re-plan, without a detailed iteration, a plan whose last 3 Stable iterations' own time (median; wall less smartswap's) differs from its profile's operator seconds by more than this factor, with the profile's times scaled to it; 0 = never"},
    {"layers", "SMARTSWAP_LAYERS", OPT_INT, F(layers), "0", 0, 1000000, NULL,
     "logical layers of the policy; 0 = derived from the operator count"},
    {"min-swap", "SMARTSWAP_MIN_SWAP", OPT_SIZE, F(min_swap_bytes), "64KiB", 0, 1e18, NULL,
     "saved tensors smaller than this are never swapped"},
    {"release-mode", "SMARTSWAP_RELEASE_MODE", OPT_ENUM, F(release_mode), "predicted", 0, 1,
     "predicted,stock",
     "how swapped-out blocks are freed: predicted (at the planned operator) or stock (poll events as torch)"},
    {"match-threshold", "SMARTSWAP_MATCH_THRESHOLD", OPT_FLOAT, F(match_threshold), "0.6", 0, 1, NULL,
     "fuzzy-match score a saved tensor needs to take a plan entry"},
};
#define NROWS ((int)(sizeof rows / sizeof rows[0]))

static int name_eq(const char *a, const char *b) {
    for (; *a && *b; a++, b++) {
        char x = *a == '_' ? '-' : (char)tolower((unsigned char)*a);
        char y = *b == '_' ? '-' : (char)tolower((unsigned char)*b);
        if (x != y) return 0;
    }
    return *a == *b;
}

static ss_status parse_bool(const char *v, int *out) {
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (name_eq(v, yes[i])) { *out = 1; return SS_OK; }
        if (name_eq(v, no[i])) { *out = 0; return SS_OK; }
    }
    return SS_ERR_INVALID;
}

ss_status ss_parse_size(const char *text, uint64_t *out) {
    if (!text || !out) return SS_ERR_INVALID;
    while (isspace((unsigned char)*text)) text++;
    if (!isdigit((unsigned char)*text) && *text != '.') return SS_ERR_INVALID;
    errno = 0;
    char *end;
    double v = strtod(text, &end);
    if (errno || end == text || !(v >= 0) || !isfinite(v)) return SS_ERR_INVALID;
    double mul = 1;
    const char *u = end;
    if (*u) {
        char c = (char)toupper((unsigned char)*u);
        int pow_ = 0;
        switch (c) {
        case 'B': pow_ = 0; break;
        case 'K': pow_ = 1; break;
        case 'M': pow_ = 2; break;
        case 'G': pow_ = 3; break;
        case 'T': pow_ = 4; break;
        default: return SS_ERR_INVALID;
        }
        u++;
        if (c == 'B') {
            /* plain bytes */
        } else if ((u[0] == 'i' || u[0] == 'I') && (u[1] == 'B' || u[1] == 'b')) {
            mul = pow(1024, pow_); u += 2;
        } else if (u[0] == 'B' || u[0] == 'b') {
            mul = pow(1000, pow_); u++;
        } else {
            mul = pow(1024, pow_);
        }
        if (*u) return SS_ERR_INVALID;
    }
    double r = v * mul;
    if (r >= 1.8446744073709552e19) return SS_ERR_INVALID;
    uint64_t b = (uint64_t)r;
    if (mul == 1 && v != floor(v)) return SS_ERR_INVALID; /* fractional bytes */
    *out = b;
    return SS_OK;
}

char *ss_format_size(uint64_t bytes, char *buf, size_t len) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 5) { v /= 1024; u++; }
    if (u == 0) ssi_fmt(buf, len, "%llu B", (unsigned long long)bytes);
    else ssi_fmt(buf, len, "%.2f %s", v, units[u]);
    return buf;
}

static void range_text(const opt_row *r, char *buf, size_t len) {
    char a[32], b[32];
    switch (r->type) {
    case OPT_BOOL: ssi_fmt(buf, len, "0/1, true/false, yes/no, on/off"); break;
    case OPT_INT: ssi_fmt(buf, len, "%.0f..%.0f", r->lo, r->hi); break;
    case OPT_SIZE:
        ssi_fmt(buf, len, "%s..%s (bytes or 512MiB, 24GiB, 1.5GB)",
                ss_format_size((uint64_t)r->lo, a, sizeof a), ss_format_size((uint64_t)r->hi, b, sizeof b));
        break;
    case OPT_FLOAT: ssi_fmt(buf, len, "%g..%g", r->lo, r->hi); break;
    case OPT_STRING: ssi_fmt(buf, len, "text"); break;
    case OPT_ENUM: ssi_fmt(buf, len, "%s", r->choices); break;
    }
}

static ss_status set_row(ss_options *o, const opt_row *r, const char *v, const char *from,
                         char *err, size_t err_len) {
    char *field = (char *)o + r->off;
    char range[128];
    range_text(r, range, sizeof range);
    ss_status st = SS_OK;
    switch (r->type) {
    case OPT_BOOL: {
        int b;
        st = parse_bool(v, &b);
        if (!st) *(int *)field = b;
        break;
    }
    case OPT_INT: {
        char *end;
        errno = 0;
        double d = strtod(v, &end);
        if (errno || end == v || *end || d != floor(d) || d < r->lo || d > r->hi) st = SS_ERR_INVALID;
        else if (r->fsize == sizeof(int)) *(int *)field = (int)d;
        else *(uint64_t *)field = (uint64_t)strtoull(v, NULL, 10);
        break;
    }
    case OPT_SIZE: {
        uint64_t b;
        if (r->off == offsetof(ss_options, granule_bytes) && !strcmp(v, "auto")) {   /* the granule's rule */
            *(uint64_t *)field = SS_ALLOC_GRANULE_AUTO;
            break;
        }
        st = ss_parse_size(v, &b);
        if (!st && ((double)b < r->lo || (double)b > r->hi)) st = SS_ERR_INVALID;
        if (!st) *(uint64_t *)field = b;
        break;
    }
    case OPT_FLOAT: {
        char *end;
        errno = 0;
        double d = strtod(v, &end);
        if (errno || end == v || *end || !(d >= r->lo && d <= r->hi)) st = SS_ERR_INVALID;
        else *(double *)field = d;
        break;
    }
    case OPT_STRING:
        if (strlen(v) >= r->fsize || !*v) st = SS_ERR_INVALID;
        else memcpy(field, v, strlen(v) + 1);
        break;
    case OPT_ENUM: {
        int idx = 0;
        const char *c = r->choices;
        st = SS_ERR_INVALID;
        while (*c) {
            size_t n = strcspn(c, ",");
            if (strlen(v) == n && strncmp(c, v, n) == 0) { *(int *)field = idx; st = SS_OK; break; }
            c += n + (c[n] == ',');
            idx++;
        }
        break;
    }
    }
    if (st) ssi_fmt(err, err_len, "%s: bad value '%s' for %s; accepted: %s", from, v, r->name, range);
    return st;
}

ss_options ss_options_default(void) {
    ss_options o;
    memset(&o, 0, sizeof o);
    for (int i = 0; i < NROWS; i++) {
        ss_status st = set_row(&o, &rows[i], rows[i].def, "default", NULL, 0);
        SS_ASSERT(st == SS_OK);
        (void)st;
    }
    return o;
}

ss_status ss_options_env(ss_options *o, char *err, size_t err_len) {
    if (!o) return SS_ERR_INVALID;
    ss_options t = *o;
    for (int i = 0; i < NROWS; i++) {
        const char *v = getenv(rows[i].env);
        if (!v) continue;
        ss_status st = set_row(&t, &rows[i], v, rows[i].env, err, err_len);
        if (st) return st;
    }
    *o = t;
    return SS_OK;
}

ss_status ss_options_set(ss_options *o, const char *name, const char *value, char *err, size_t err_len) {
    if (!o || !name || !value) return SS_ERR_INVALID;
    for (int i = 0; i < NROWS; i++) {
        if (!name_eq(name, rows[i].name)) continue;
        char from[64];
        ssi_fmt(from, sizeof from, "--%s", rows[i].name);
        return set_row(o, &rows[i], value, from, err, err_len);
    }
    ssi_fmt(err, err_len, "unknown option '%s' (smartswap options lists them all)", name);
    return SS_ERR_NOT_FOUND;
}

ss_status ss_options_info(int i, ss_option_info *info) {
    static char ranges[NROWS][128];
    static const char *const types[] = {"bool", "int", "size", "float", "string", "enum"};
    if (i < 0 || i >= NROWS) return SS_ERR_NOT_FOUND;
    if (!info) return SS_ERR_INVALID;
    const opt_row *r = &rows[i];
    if (!ranges[i][0]) range_text(r, ranges[i], sizeof ranges[i]);
    info->name = r->name;
    info->env = r->env;
    info->type = types[r->type];
    info->def = r->def;
    info->range = ranges[i];
    info->help = r->help;
    return SS_OK;
}

ss_status ss_options_value(const ss_options *o, int i, char *buf, size_t len) {
    if (i < 0 || i >= NROWS) return SS_ERR_NOT_FOUND;
    if (!o || !buf || !len) return SS_ERR_INVALID;
    const opt_row *r = &rows[i];
    const char *field = (const char *)o + r->off;
    switch (r->type) {
    case OPT_BOOL: ssi_fmt(buf, len, "%d", *(const int *)field); break;
    case OPT_INT:
        if (r->fsize == sizeof(int)) ssi_fmt(buf, len, "%d", *(const int *)field);
        else ssi_fmt(buf, len, "%llu", (unsigned long long)*(const uint64_t *)field);
        break;
    case OPT_SIZE:
        if (r->off == offsetof(ss_options, granule_bytes) && *(const uint64_t *)field == SS_ALLOC_GRANULE_AUTO)
            ssi_fmt(buf, len, "auto");
        else
            ssi_fmt(buf, len, "%llu", (unsigned long long)*(const uint64_t *)field);
        break;
    case OPT_FLOAT: ssi_fmt(buf, len, "%g", *(const double *)field); break;
    case OPT_STRING: ssi_fmt(buf, len, "%s", field); break;
    case OPT_ENUM: {
        int idx = *(const int *)field;
        const char *c = r->choices;
        for (int k = 0; k < idx && *c; k++) c += strcspn(c, ",") + 1;
        ssi_fmt(buf, len, "%.*s", (int)strcspn(c, ","), c);
        break;
    }
    }
    return SS_OK;
}
