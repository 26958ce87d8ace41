/* smartswap.h: the public C API of libsmartswap.
 *
 * smartswap moves tensors saved for backward ("activations") to host memory during the forward
 * pass and brings them back just before backward needs them, hidden behind compute, in eager
 * mode where the operator sequence changes from one iteration to the next.
 *
 * This header holds what every caller needs: version, status codes, logging, options, and the
 * framework-facing calls (iteration, operator, save, load, release). The device layer is in
 * smartswap-device.h and the allocator and host pool in smartswap-alloc.h.
 *
 * Conventions: every call that can fail returns ss_status (0 = SS_OK) and passes results through
 * out-parameters, which are left untouched on failure. The library never exits and never prints:
 * it reports through the log callback (ss_log_set), which is silent until a caller sets one.
 *
 * Threading contract (each call below repeats what applies to it):
 *  - Process-wide calls (ss_status_str, ss_version_str, ss_log_set, ss_options_*, ss_parse_size)
 *    are thread-safe, except ss_log_set, which must not race with other library calls.
 *  - One object (device, allocator, pool, context) may be used from several threads only where
 *    its calls say so; otherwise the caller serialises.
 */
#ifndef SMARTSWAP_H
#define SMARTSWAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SS_VERSION_MAJOR 0
#define SS_VERSION_MINOR 1
#define SS_VERSION_PATCH 0
#define SS_VERSION ((SS_VERSION_MAJOR * 10000) + (SS_VERSION_MINOR * 100) + SS_VERSION_PATCH)
#define SS_VERSION_STRING "0.1.0"

/* Opaque handles, declared here so that every header can name them. Device, stream and event
 * calls are in smartswap-device.h; allocator and host pool calls in smartswap-alloc.h. */
typedef struct ss_device   ss_device_t;    /* one device backend instance (cpu-sim, cuda, fault) */
typedef struct ss_stream   ss_stream_t;    /* an ordered queue of device work */
typedef struct ss_event    ss_event_t;     /* a marker recorded on a stream */
typedef struct ss_alloc    ss_alloc_t;     /* caching device allocator under a budget */
typedef struct ss_block    ss_block_t;     /* one allocation of ss_alloc_t */
typedef struct ss_hostpool ss_hostpool_t;  /* pinned host buffers by size class, capped */

/* ---------------------------------------------------------------------------------------- */
/* status codes                                                                              */

typedef enum ss_status {
    SS_OK = 0,
    SS_ERR_INVALID,      /* bad argument: NULL, zero size, out of range, unknown name */
    SS_ERR_OOM,          /* device memory (or the budget) exhausted after every fallback */
    SS_ERR_HOST_OOM,     /* host memory or the pinned host pool's cap exhausted */
    SS_ERR_DEVICE,       /* the device backend failed (driver error, lost device) */
    SS_ERR_IO,           /* a file could not be opened, read or written */
    SS_ERR_FORMAT,       /* a file is malformed or of another version */
    SS_ERR_UNSUPPORTED,  /* not available in this build or on this device */
    SS_ERR_STATE,        /* call not legal now: double free, foreign pointer, live blocks, ... */
    SS_ERR_NOT_FOUND,    /* no such device, entry, or plan */
    SS_ERR_INFEASIBLE,   /* no plan fits the budget (the minimum is reported alongside) */
    SS_ERR_CORRUPT,      /* a poisoned or guard byte was found: a read-after-free or overrun */
    SS_STATUS_COUNT
} ss_status;

/* A short constant English description of a status; never NULL ("unknown status" if out of
 * range). Thread-safe. */
const char *ss_status_str(ss_status s);

/* "0.1.0". Thread-safe. */
const char *ss_version_str(void);

/* Space-separated build features, e.g. "cjson cuda openmp openblas". Thread-safe. */
const char *ss_build_features(void);

/* Element types of tensors reported to smartswap (matching features; bytes are given apart). */
typedef enum ss_dtype {
    SS_DTYPE_F32 = 0, SS_DTYPE_F16, SS_DTYPE_BF16, SS_DTYPE_F64,
    SS_DTYPE_I64, SS_DTYPE_I32, SS_DTYPE_I16, SS_DTYPE_I8, SS_DTYPE_U8, SS_DTYPE_BOOL,
    SS_DTYPE_OTHER, SS_DTYPE_COUNT
} ss_dtype;

/* ---------------------------------------------------------------------------------------- */
/* logging                                                                                   */

typedef enum ss_log_level {
    SS_LOG_ERROR = 0,
    SS_LOG_WARN  = 1,
    SS_LOG_INFO  = 2,
    SS_LOG_DEBUG = 3
} ss_log_level;

/* msg is one line without a trailing newline, valid only during the call. */
typedef void (*ss_log_fn)(void *user, ss_log_level level, const char *msg);

/* Sets the process-wide log callback and the most verbose level passed to it. fn NULL silences
 * the library (the default). Not thread-safe against other library calls: set it first. */
void ss_log_set(ss_log_fn fn, void *user, ss_log_level max_level);

/* A ready-made callback that writes "smartswap: <level>: <msg>\n" to stderr; user is unused. */
void ss_log_stderr(void *user, ss_log_level level, const char *msg);

/* ---------------------------------------------------------------------------------------- */
/* options: one table, documented in docs/options.md                                         */
/*
 * Precedence: built-in defaults < SMARTSWAP_* environment variables (ss_options_env) <
 * fields set in code or by command-line flags (ss_options_set). Sizes accept units.
 */

typedef enum ss_release_mode {
    SS_RELEASE_MODE_PREDICTED = 0,  /* custom record stream: release at the planned operator */
    SS_RELEASE_MODE_STOCK     = 1   /* emulate torch's record_stream + process_events polling */
} ss_release_mode;

typedef struct ss_options {
    /* general */
    int      disable;            /* 1: every framework call is a pass-through */
    int      log_level;          /* ss_log_level used by the command line */
    uint64_t seed;               /* seeds every random choice (jitter, synthetic workloads) */
    /* device */
    char     device[32];         /* "cpu-sim", "cuda", "cuda:N" */
    uint64_t budget_bytes;       /* allocator budget; 0 = the device's capacity */
    uint64_t host_mem_bytes;     /* cap on pinned host memory; 0 = no cap */
    uint64_t sim_capacity_bytes; /* cpu-sim: device capacity */
    double   sim_d2h_gbps;       /* cpu-sim: device-to-host bandwidth, GB/s (1e9 B/s) */
    double   sim_h2d_gbps;       /* cpu-sim: host-to-device bandwidth, GB/s */
    double   sim_latency_us;     /* cpu-sim: fixed cost of each copy, microseconds */
    int      sim_virtual_clock;  /* cpu-sim: 1 = nothing sleeps, times are computed */
    double   sim_jitter_us;      /* cpu-sim: max random extra delay per copy (seeded) */
    double   sim_ratio_scale;    /* calibration: multiply the reference copy:compute ratio */
    /* profiler and stage machine */
    int      warmup_iters;       /* WarmUp iterations before the first detailed one */
    int      plan_cache_size;    /* plans kept, LRU */
    int      max_detailed;       /* detailed iterations allowed in a row for unseen sequences */
    /* policy */
    int      layers;             /* logical layers; 0 = derived from the operator count */
    uint64_t min_swap_bytes;     /* saved tensors smaller than this are never swapped */
    /* executor */
    int      release_mode;       /* ss_release_mode */
    double   match_threshold;    /* fuzzy-match score needed, 0..1 */
} ss_options;

/* The built-in defaults. Thread-safe. */
ss_options ss_options_default(void);

/* Applies every SMARTSWAP_<NAME> environment variable that is set (NAME is the option name in
 * upper case, e.g. SMARTSWAP_BUDGET=8GiB). On a bad value returns SS_ERR_INVALID, writes a
 * message naming the variable, the value and the accepted range into err (if err_len > 0),
 * and leaves *o as it was. Thread-safe with respect to other threads not calling setenv. */
ss_status ss_options_env(ss_options *o, char *err, size_t err_len);

/* Sets one option by its name ("budget", "sim-d2h-gbps", ...; '-' and '_' are the same) from a
 * string. Errors as ss_options_env. */
ss_status ss_options_set(ss_options *o, const char *name, const char *value,
                         char *err, size_t err_len);

/* Describes option i (0-based) for help and documentation; returns SS_ERR_NOT_FOUND past the
 * last. name/env/help/default point to static strings; value is written into buf. */
typedef struct ss_option_info {
    const char *name;      /* "budget" */
    const char *env;       /* "SMARTSWAP_BUDGET" */
    const char *type;      /* "bool", "int", "size", "float", "string", "enum" */
    const char *def;       /* default, as text */
    const char *range;     /* accepted values, as text */
    const char *help;      /* one line */
} ss_option_info;
ss_status ss_options_info(int i, ss_option_info *info);

/* The current value of option i of *o as text into buf. */
ss_status ss_options_value(const ss_options *o, int i, char *buf, size_t len);

/* Parses a byte size: "1048576", "512MiB", "24GiB", "1.5GB", "64k" (k/M/G/T = powers of 1000
 * when followed by B, powers of 1024 with iB or alone). Rejects negatives, garbage and
 * overflow with SS_ERR_INVALID. Thread-safe. */
ss_status ss_parse_size(const char *text, uint64_t *out);

/* Formats a byte count for people: "1.50 GiB". Returns buf. */
char *ss_format_size(uint64_t bytes, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* SMARTSWAP_H */
