/* api-torch.c: the thin C entry point of the PyTorch adapter (include/smartswap-torch.h,
 * docs/pytorch.md). It opens a device and an SS_MEM_FRAMEWORK context with the executor on, and
 * bundles operator + save + action poll (and answers + load + poll) into single calls so that
 * one saved_tensors_hooks callback costs one or two ctypes calls. No decision is made here.
 *
 * Ownership: ss_torch_t owns the device, the wrapped streams and the context. Streams wrapped
 * for loads on other streams are cached (a few; torch's stream pool is small) under `mu`.
 */
#include "smartswap-torch.h"
#include "api.h"
#include "internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SST_MAX_STREAMS 64

struct ss_torch {
    ss_device_t *dev;
    ss_stream_t *compute;
    ss_ctx_t    *ctx;
    pthread_mutex_t mu;
    uint64_t     sh[SST_MAX_STREAMS];
    ss_stream_t *ss[SST_MAX_STREAMS];
    int          ns;
};

/* ---- the last logged error, for the adapter's exceptions ------------------------------------ */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_last[512];
static int log_max = SS_LOG_WARN;
static int log_set;

static void log_keep(void *user, ss_log_level level, const char *msg) {
    (void)user;
    pthread_mutex_lock(&log_mu);
    if (level <= SS_LOG_WARN) snprintf(log_last, sizeof log_last, "%s", msg);
    pthread_mutex_unlock(&log_mu);
    if ((int)level <= log_max) ss_log_stderr(NULL, level, msg);
}

const char *ss_torch_last_error(void) {
    return log_last;
}

/* ---- options --------------------------------------------------------------------------------- */

/* Applies "name=value\n..." lines to *o. */
static ss_status apply_options(ss_options *o, const char *text, char *err, size_t err_len) {
    if (!text) return SS_OK;
    const char *p = text;
    char line[600];
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n >= sizeof line) {
            snprintf(err, err_len, "option line too long (%zu bytes)", n);
            return SS_ERR_INVALID;
        }
        memcpy(line, p, n);
        line[n] = 0;
        p += n + (e ? 1 : 0);
        if (!n) continue;
        char *eq = strchr(line, '=');
        if (!eq) {
            snprintf(err, err_len, "option '%s' has no '=value'", line);
            return SS_ERR_INVALID;
        }
        *eq = 0;
        ss_status st = ss_options_set(o, line, eq + 1, err, err_len);
        if (st) return st;
    }
    return SS_OK;
}

/* ---- open / close ---------------------------------------------------------------------------- */

ss_status ss_torch_open(const char *device, uint64_t compute, const char *options, char *err,
                        size_t err_len, ss_torch_t **out) {
    char dummy[8];
    if (!err || !err_len) { err = dummy; err_len = sizeof dummy; }
    err[0] = 0;
    if (!out) { snprintf(err, err_len, "ss_torch_open: out is NULL"); return SS_ERR_INVALID; }
    ss_options o = ss_options_default();
    ss_status st = ss_options_env(&o, err, err_len);
    if (!st) st = apply_options(&o, options, err, err_len);
    if (st) return st;
    if (device && *device) snprintf(o.device, sizeof o.device, "%s", device);
    if (!log_set) {
        /* once per process, before any other call of this adapter (ss_log_set's contract) */
        log_max = o.log_level;
        ss_log_set(log_keep, NULL, SS_LOG_INFO);
        log_set = 1;
    }
    ss_torch_t *t = calloc(1, sizeof *t);
    if (!t) { snprintf(err, err_len, "out of host memory"); return SS_ERR_HOST_OOM; }
    if (pthread_mutex_init(&t->mu, NULL)) { free(t); return SS_ERR_HOST_OOM; }
    ss_ctx_config c = ss_ctx_config_default();
    c.opts = o;
    c.mem_owner = SS_MEM_FRAMEWORK;
    if (!o.disable) {
        if ((st = ss_device_open(o.device, &o, &t->dev))) {
            snprintf(err, err_len, "cannot open device '%s': %s (%s)", o.device, ss_status_str(st),
                     log_last[0] ? log_last : "no detail");
            goto fail;
        }
        if ((st = ss_stream_wrap(t->dev, (void *)(uintptr_t)compute, &t->compute))) {
            snprintf(err, err_len, "cannot wrap the compute stream on '%s': %s", o.device, ss_status_str(st));
            goto fail;
        }
        c.device = t->dev;
        c.compute = t->compute;
    }
    if ((st = ss_ctx_new(&c, &t->ctx))) {
        snprintf(err, err_len, "cannot create the context: %s (%s)", ss_status_str(st), log_last);
        goto fail;
    }
    if (!o.disable && (st = ss_ctx_enable_swap(t->ctx, SS_SWAP_SMARTSWAP))) {
        snprintf(err, err_len, "cannot switch the executor on: %s (%s)", ss_status_str(st), log_last);
        goto fail;
    }
    *out = t;
    return SS_OK;
fail:
    ss_torch_close(t);
    return st;
}

void ss_torch_close(ss_torch_t *t) {
    if (!t) return;
    ss_ctx_free(t->ctx);
    for (int i = 0; i < t->ns; i++) ss_stream_free(t->dev, t->ss[i]);
    if (t->compute) ss_stream_free(t->dev, t->compute);
    if (t->dev) ss_device_close(t->dev);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

ss_ctx_t *ss_torch_ctx(ss_torch_t *t) {
    return t ? t->ctx : NULL;
}

/* ---- the hook calls -------------------------------------------------------------------------- */

ss_status ss_torch_poll(ss_torch_t *t, ss_action *acts, uint32_t max, uint32_t *n) {
    if (n) *n = 0;
    if (!t || !acts || !max || !n) return SS_OK;
    return ss_ctx_actions(t->ctx, acts, max, n);
}

ss_status ss_torch_op(ss_torch_t *t, uint32_t name_id, uint64_t site, ss_action *acts,
                      uint32_t max, uint32_t *n) {
    if (n) *n = 0;
    if (!t) return SS_ERR_INVALID;
    ss_status st = ss_ctx_op(t->ctx, name_id, site);
    ss_status s2 = ss_torch_poll(t, acts, max, n);
    return st ? st : s2;
}

ss_status ss_torch_pack(ss_torch_t *t, uint32_t name_id, uint64_t site, void *ptr, uint64_t bytes,
                        int dtype, int ndim, const int64_t *shape, uint32_t flags,
                        uint64_t *handle, ss_action *acts, uint32_t max, uint32_t *n) {
    if (n) *n = 0;
    if (!t || !handle) return SS_ERR_INVALID;
    ss_status st = ss_ctx_op(t->ctx, name_id, site);
    if (st) return st;
    if ((st = ss_ctx_save(t->ctx, ptr, bytes, dtype, ndim, shape, flags, handle))) return st;
    return ss_torch_poll(t, acts, max, n);
}

/* The wrapped stream of a torch stream handle (0: the compute stream). */
static ss_status stream_of(ss_torch_t *t, uint64_t h, ss_stream_t **out) {
    if (!h || !t->dev) { *out = NULL; return SS_OK; }
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->ns; i++)
        if (t->sh[i] == h) { *out = t->ss[i]; pthread_mutex_unlock(&t->mu); return SS_OK; }
    ss_status st = SS_OK;
    if (t->ns == SST_MAX_STREAMS) {
        *out = NULL;   /* more streams than torch's pool: order on the compute stream, synced */
    } else if ((st = ss_stream_wrap(t->dev, (void *)(uintptr_t)h, out)) == SS_OK) {
        t->sh[t->ns] = h;
        t->ss[t->ns++] = *out;
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

ss_status ss_torch_load(ss_torch_t *t, const uint64_t *ah, void *const *ap, uint32_t na,
                        uint64_t handle, uint64_t stream, void **ptr, ss_action *acts,
                        uint32_t max, uint32_t *n) {
    if (n) *n = 0;
    if (!t) return SS_ERR_INVALID;
    ss_status st = SS_OK, s2;
    for (uint32_t i = 0; i < na; i++)
        if ((s2 = ss_ctx_action_done(t->ctx, ah[i], ap[i])) && !st) st = s2;
    if (handle) {
        ss_stream_t *s = NULL;
        if ((s2 = stream_of(t, stream, &s))) return s2;
        if ((s2 = ss_ctx_load(t->ctx, handle, s, ptr))) return s2;
    }
    s2 = ss_torch_poll(t, acts, max, n);
    return st ? st : s2;
}

ss_status ss_torch_release(ss_torch_t *t, uint64_t handle) {
    if (!t) return SS_ERR_INVALID;
    return ss_ctx_release(t->ctx, handle);
}

ss_status ss_torch_get_stats(ss_torch_t *t, ss_torch_stats *out) {
    if (!t || !out) return SS_ERR_INVALID;
    ss_ctx_stats cs;
    ss_iter_report last;
    ss_status st = ss_ctx_get_stats(t->ctx, &cs);
    if (!st) st = ss_ctx_last_report(t->ctx, &last);
    if (st) return st;
    ss_torch_stats s;
    memset(&s, 0, sizeof s);
    s.stage = (int32_t)ss_ctx_stage(t->ctx);
    s.last_stage = cs.iters ? last.stage : s.stage;
    s.seq_hash = last.seq_hash;
    s.iterations = cs.iters;
    s.detailed_iterations = cs.detailed_iters;
    s.plans_made = cs.plans_made;
    s.plans_cached = cs.cache_entries;
    s.cache_hits = cs.cache_hits + cs.mid_switches;
    s.mid_switches = cs.mid_switches;
    s.plan_errors = cs.plan_errors;
    s.saves = cs.saves;
    s.loads = cs.loads;
    s.releases = cs.releases;
    s.actions = cs.actions;
    s.profile_overhead_seconds = (double)atomic_load(&t->ctx->ovh_ns) * 1e-9;
    if (t->dev) {
        ss_exec_report r;
        if (ss_ctx_exec_totals(t->ctx, &r) == SS_OK) {
            s.swapped_out_bytes = r.swapped_out_bytes;
            s.swapped_in_bytes = r.swapped_in_bytes;
            s.stalls = r.stalls;
            s.misses = r.misses;
            s.evictions = r.evictions;
            s.host_peak_bytes = r.host_peak_bytes;
            s.stall_seconds = r.stall_s;
        }
    }
    *out = s;
    return SS_OK;
}
