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
    int      sim_threads;        /* cpu-sim, real clock: 1 = copies run on stream threads */
    double   sim_ratio_scale;    /* calibration: multiply the reference copy:compute ratio */
    /* profiler and stage machine */
    int      warmup_iters;       /* WarmUp iterations before the first detailed one */
    int      plan_cache_size;    /* plans kept, LRU */
    int      max_detailed;       /* detailed iterations allowed in a row for unseen sequences */
    int      len_buckets;        /* envelopes per doubling of the declared length; 0 = one per structure */
    double   retime;             /* re-time a plan whose Stable iterations' own time (median of 3)
                                    differs from its profile's operator seconds by more than this
                                    factor; 0 (or at most 1) = never */
    /* policy */
    int      layers;             /* logical layers; 0 = derived from the operator count */
    uint64_t min_swap_bytes;     /* saved tensors smaller than this are never swapped */
    /* executor */
    int      release_mode;       /* ss_release_mode */
    double   match_threshold;    /* fuzzy-match score needed, 0..1 */
    /* allocator */
    uint64_t granule_bytes;      /* virtual-memory segments' granule; 0 = plain segments;
                                    SS_ALLOC_GRANULE_AUTO ("auto"): chosen from the budget */
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

/* ======================================================================================== */
/* framework API (src/api.c, src/profile.c, src/stage.c; call by call: docs/api.md)         */
/* ======================================================================================== */
/*
 * One context per training process and device. The caller brackets each iteration (for a
 * trainer: one optimizer step, all micro-batches; an iteration without backward, such as an
 * evaluation step, is legal), reports each operator, each tensor saved for backward, each load
 * of a saved tensor in backward, and each release. smartswap profiles the operator sequence,
 * runs the stage machine (WarmUp -> GenPolicy -> Stable) and, once the executor lands, swaps.
 *
 * Memory ownership, chosen per context:
 *  - SS_MEM_SMARTSWAP (the C trainer): saved tensors are blocks of smartswap's allocator
 *    (ss_ctx_save_block). From save until release the block belongs to the context; release
 *    returns it to the allocator. ss_ctx_load may return another pointer (a swapped-in copy).
 *  - SS_MEM_FRAMEWORK (hooks-only PyTorch adapter): the framework owns every byte and its
 *    compute stream (wrapped with ss_stream_wrap). What smartswap needs the framework to do
 *    (allocate a buffer for a swap-in, drop its reference to a swapped-out tensor) comes back as
 *    actions the caller polls (ss_ctx_actions) and executes; smartswap never calls back.
 *
 * Threading contract:
 *  - "driving thread" calls: ss_ctx_iter_begin, ss_ctx_iter_end, ss_ctx_op, ss_ctx_save,
 *    ss_ctx_save_block, ss_ctx_set_mem. At any moment at most one thread makes them, and
 *    successive makers must be ordered by the caller (PyTorch: the forward thread, then
 *    autograd's backward thread while the forward thread waits inside backward(), then the
 *    forward thread again: torch's own synchronisation orders them). ss_ctx_op is lock-free.
 *  - "any thread" calls, concurrently with each other and with the driving thread:
 *    ss_ctx_intern, ss_ctx_phase, ss_ctx_load, ss_ctx_release, ss_ctx_actions,
 *    ss_ctx_action_done, ss_ctx_stage, ss_ctx_get_stats, ss_ctx_last_report. They take the
 *    context's lock (ss_ctx_stage reads one atomic).
 *  - ss_ctx_new / ss_ctx_free must not race with any other call on the context.
 *
 * SMARTSWAP_DISABLE=1 (options.disable): every call is a pass-through: handles still map to the
 * caller's pointers so that the caller's code path does not change, but nothing is profiled,
 * planned or swapped, and no action is ever queued.
 */

typedef struct ss_ctx ss_ctx_t;

typedef enum ss_mem_owner {
    SS_MEM_FRAMEWORK = 0,   /* the framework owns memory and streams (PyTorch hooks-only) */
    SS_MEM_SMARTSWAP = 1    /* smartswap's allocator, device and streams (the C trainer) */
} ss_mem_owner;

typedef struct ss_ctx_config {
    ss_options   opts;       /* disable, warmup_iters, plan_cache_size, max_detailed, ... */
    int          mem_owner;  /* ss_mem_owner */
    ss_device_t *device;     /* may be NULL (profiling only, nothing to swap with) */
    ss_stream_t *compute;    /* the stream loads order against when the caller passes none;
                                framework mode: ss_stream_wrap(device, torch stream handle) */
    ss_alloc_t  *alloc;      /* SS_MEM_SMARTSWAP: the allocator saved blocks come from; its
                                in-use bytes are the memory measure when no ss_ctx_set_mem */
} ss_ctx_config;

/* Built-in options (ss_options_default), SS_MEM_FRAMEWORK, no device. */
ss_ctx_config ss_ctx_config_default(void);

/* Creates a context. cfg NULL: ss_ctx_config_default() with every SMARTSWAP_* environment
 * variable applied (a bad value returns SS_ERR_INVALID and logs it) -- the one-call form for
 * ctypes. The context keeps cfg's pointers (device, stream, allocator: the caller keeps them
 * alive until ss_ctx_free) but not cfg itself. */
ss_status ss_ctx_new(const ss_ctx_config *cfg, ss_ctx_t **out);

/* Frees the context, its plans and profiles. Handles still live are dropped; in
 * SS_MEM_SMARTSWAP mode their blocks are returned to the allocator. NULL is fine. */
void ss_ctx_free(ss_ctx_t *ctx);

/* The id of an operator name, interning it on first sight (do it once per name and keep the
 * id). Ids are dense from 0. The sequence hash uses a hash of the name's text, not the id, so
 * that it does not depend on interning order. Any thread. */
ss_status ss_ctx_intern(ss_ctx_t *ctx, const char *name, uint32_t *id);

/* Iteration bracket. iter_begin: SS_ERR_STATE if an iteration is open. iter_end: closes it,
 * runs the stage machine (may call the policy to make a plan: the one slow call), and fills
 * *report (may be NULL). SS_ERR_STATE if none is open. Driving thread. */
typedef struct ss_iter_report ss_iter_report;
ss_status ss_ctx_iter_begin(ss_ctx_t *ctx);
ss_status ss_ctx_iter_end(ss_ctx_t *ctx, ss_iter_report *report);

/* The next iteration's size signature, declared before its ss_ctx_iter_begin: len[0 .. n) are its
 * lengths along its one varying dimension, one per segment in order (the sequence length of each
 * micro-batch). The stage then sizes the iteration's plan before its first save: when the largest
 * length exceeds what its structure's envelope was planned for, the envelope is derived for it
 * from two sizes seen before (docs/api.md, "Sizes up front"). Applies to the next iteration only;
 * n = 0 clears it. SS_ERR_INVALID for len NULL with n > 0 or a length < 1; SS_ERR_STATE while an iteration is open. Driving thread. */
ss_status ss_ctx_sizes(ss_ctx_t *ctx, const int64_t *len, uint32_t n);

/* One operator is about to run: name id from ss_ctx_intern, site = a hash of its call site
 * (0 if unknown). Folded into the running sequence hash; in a detailed iteration also
 * recorded. Saves, loads and releases that follow belong to this operator. Lock-free in light
 * mode (a few ns). SS_ERR_INVALID for an unknown id, SS_ERR_STATE outside an iteration.
 * Driving thread. */
ss_status ss_ctx_op(ss_ctx_t *ctx, uint32_t name_id, uint64_t site);

/* Phase of the operators that follow (SS_OP_FWD at iter_begin). Optional: the first load of an
 * iteration switches to SS_OP_BWD unless the caller set a phase itself. Any thread. */
typedef enum ss_op_phase { SS_OP_FWD = 0, SS_OP_BWD = 1, SS_OP_OPT = 2, SS_OP_OTHER = 3 } ss_op_phase;
ss_status ss_ctx_phase(ss_ctx_t *ctx, int phase);

/* Device bytes in use now as the caller sees them (e.g. torch.cuda.memory_allocated()),
 * including resident saved tensors. Detailed profiles record, per operator, the unconstrained
 * demand: the last reported value, plus the bytes smartswap had swapped out when it was
 * reported, plus the saved bytes saved minus released since. Without any report, SS_MEM_SMARTSWAP
 * contexts use the allocator's in-use bytes; others count saved tensors only (from 0).
 * Driving thread. */
ss_status ss_ctx_set_mem(ss_ctx_t *ctx, uint64_t bytes_in_use);

#define SS_SAVE_NOSWAP 1u   /* flag: the caller opts this tensor out of swapping */

/* A tensor saved for backward (framework mode): ptr stays the caller's; bytes > 0; dtype an
 * ss_dtype; ndim <= 8 dims in shape (may be NULL when ndim = 0); flags SS_SAVE_*. *handle is
 * non-zero and valid until ss_ctx_release. Must follow an ss_ctx_op in the iteration
 * (SS_ERR_STATE otherwise: the save needs a producer). Driving thread. */
ss_status ss_ctx_save(ss_ctx_t *ctx, void *ptr, uint64_t bytes, int dtype, int ndim,
                      const int64_t *shape, uint32_t flags, uint64_t *handle);

/* The same for a block of the context's allocator (SS_MEM_SMARTSWAP): the block belongs to the
 * context until ss_ctx_release, which frees it; ptr and bytes come from the block. */
ss_status ss_ctx_save_block(ss_ctx_t *ctx, ss_block_t *block, int dtype, int ndim,
                            const int64_t *shape, uint32_t flags, uint64_t *handle);

/* The saved tensor is needed now: *ptr is the pointer to use (the caller's own while it stays
 * resident; in SS_MEM_FRAMEWORK mode, once swapping exists, the buffer it handed back through
 * ss_ctx_action_done). Work enqueued on `stream` (NULL: the context's compute stream) after
 * this call is ordered after any copy into *ptr. May be called several times per handle
 * (retain_graph). SS_ERR_STATE for a released or unknown handle. Any thread. */
ss_status ss_ctx_load(ss_ctx_t *ctx, uint64_t handle, ss_stream_t *stream, void **ptr);

/* The caller will not load this handle again (PyTorch: the packed object died). The handle is
 * invalid afterwards. SS_ERR_STATE for a released or unknown handle. Any thread. */
ss_status ss_ctx_release(ss_ctx_t *ctx, uint64_t handle);

/* Registers how the saved tensor `handle` can be rebuilt instead of kept or swapped: by
 * re-running the kernel calls of the operators ops[0 .. nop) (iteration operator indices, 0 =
 * the first ss_ctx_op of the iteration; 1 or 2 of them) on the saved tensors src[0 .. nsrc)
 * (handles, at most 2) and parameters. The hybrid policy (docs/policy.md, "Swap or recompute")
 * may then plan it SS_PLAN_RECOMPUTE; ss_ctx_recompute_planned says so at save time. Any time
 * in the iteration the tensors were saved in, before their first load; only recorded in a
 * detailed iteration (otherwise a cheap no-op). SS_ERR_INVALID for a bad count or an operator
 * not yet run, SS_ERR_STATE for a handle that is not live or of another iteration. Driving
 * thread. */
ss_status ss_ctx_recomputable(ss_ctx_t *ctx, uint64_t handle, const uint64_t *src, uint32_t nsrc,
                              const uint32_t *ops, uint32_t nop);

/* Registers the saved tensor `handle` as the input of a span of operators op_first .. op_last
 * (iteration operator indices, as above): re-running their kernel calls, in order, from this
 * tensor alone (and parameters) rebuilds every other tensor saved while they ran (a whole
 * decoder layer from its input). The hybrid policy may then plan every such tensor
 * SS_PLAN_RECOMPUTE (each then answers yes to ss_ctx_recompute_planned) and the caller rebuilds
 * them all at once, by re-running the span, when backward first needs one of them. Call it
 * after the save of `handle`, once op_last has run. Errors as ss_ctx_recomputable. Driving
 * thread. */
ss_status ss_ctx_recomputable_span(ss_ctx_t *ctx, uint64_t handle, uint32_t op_first, uint32_t op_last);

/* *yes = 1 when the executor matched the saved tensor `handle` to a recompute entry of the
 * plan: the caller then releases it at once and rebuilds it, when backward needs it, by
 * re-running the registered kernel calls (never loading it). 0 otherwise (and without an
 * executor). Any thread. */
ss_status ss_ctx_recompute_planned(ss_ctx_t *ctx, uint64_t handle, int *yes);

/* Actions for framework-owned memory, polled by the caller (e.g. at every pack and unpack). */
typedef enum ss_action_kind {
    SS_ACTION_ALLOC = 1,  /* allocate `bytes` of device memory for the swap-in of `handle` on
                             the consumer stream; answer with ss_ctx_action_done(handle, ptr)
                             (ptr NULL: could not; the load will then wait on a slow path) */
    SS_ACTION_DROP  = 2   /* the bytes of `handle` are safe on the host: drop your reference
                             to its device tensor so your allocator can reuse it; no answer */
} ss_action_kind;

typedef struct ss_action {
    uint32_t kind;        /* ss_action_kind */
    uint32_t reserved;    /* 0 */
    uint64_t handle;
    uint64_t bytes;
} ss_action;

/* Moves up to max pending actions, oldest first, into buf; *n says how many (0: none). Each
 * action is handed out once. Any thread. */
ss_status ss_ctx_actions(ss_ctx_t *ctx, ss_action *buf, uint32_t max, uint32_t *n);
/* Answers an SS_ACTION_ALLOC: ptr is the caller's buffer for handle's swap-in; the caller
 * keeps it alive until it releases the handle. SS_ERR_STATE if no allocation is pending for
 * handle. Any thread. */
ss_status ss_ctx_action_done(ss_ctx_t *ctx, uint64_t handle, void *ptr);

/* ---- stage machine and counters ------------------------------------------------------- */

typedef enum ss_stage {
    SS_STAGE_WARMUP = 0,    /* light profiling only, no plan (options.warmup_iters) */
    SS_STAGE_GENPOLICY = 1, /* this iteration is recorded in detail, then planned */
    SS_STAGE_STABLE = 2,    /* light profiling against the current plan */
    SS_STAGE_DISABLED = 3,  /* options.disable: pass-through */
    SS_STAGE_COUNT
} ss_stage;

/* "warmup", "genpolicy", "stable", "disabled" ("?" out of range). Thread-safe. */
const char *ss_stage_name(int stage);
/* The stage the next (or current) iteration runs in. Any thread. */
ss_stage ss_ctx_stage(const ss_ctx_t *ctx);

typedef enum ss_plan_event {
    SS_PLAN_NONE = 0,       /* no plan involved (WarmUp, disabled, or no plan yet) */
    SS_PLAN_SAME = 1,       /* the sequence matched the current plan */
    SS_PLAN_HIT = 2,        /* another cached plan matched (switched without profiling) */
    SS_PLAN_NEW = 3,        /* a new plan was made from this iteration's profile */
    SS_PLAN_PENDING = 4     /* an unseen sequence not profiled (bound reached or not
                               profilable in flight; see docs/api.md) */
} ss_plan_event;

/* What happened in one iteration; iter_end fills it. */
struct ss_iter_report {
    uint64_t iter;          /* 0-based */
    int32_t  stage;         /* ss_stage the iteration ran in */
    int32_t  next_stage;    /* ss_stage of the next iteration */
    int32_t  detailed;      /* 0: light; 1: recorded in detail from op 0; 2: from diverged_at */
    int32_t  plan_event;    /* ss_plan_event */
    uint32_t diverged_at;   /* op index where the sequence left the plan; UINT32_MAX: none */
    uint32_t nops, nsaves, nloads, nreleases;
    uint32_t mid_switches;  /* plans switched in flight (a cached plan matched the prefix) */
    uint64_t seq_hash, size_sig;
    uint64_t saved_bytes;   /* bytes saved for backward in this iteration */
    uint64_t peak_bytes;    /* detailed iterations: peak unconstrained demand; else 0 */
    double   seconds;       /* wall time from iter_begin to iter_end */
    /* the executor's (zero until it exists) */
    uint64_t swapped_out_bytes, swapped_in_bytes;
    uint32_t stalls, sync_loads, evictions, reserved;
};

/* Cumulative counters; every stage transition has one. */
typedef struct ss_ctx_stats {
    uint64_t iters, ops, saves, loads, releases, actions;
    uint64_t iters_warmup, iters_genpolicy, iters_stable, iters_disabled;
    uint64_t warmup_to_genpolicy, genpolicy_to_stable;
    uint64_t detailed_iters;     /* iterations recorded in detail, whole or from a divergence */
    uint64_t detailed_partial;   /* of which from a divergence onwards */
    uint64_t detailed_wasted;    /* detailed, but the sequence turned out to be cached */
    uint64_t divergences;        /* Stable iterations that left their plan (op, save or end) */
    uint64_t div_at_op, div_at_save, div_at_end;
    uint64_t mid_switches;       /* divergences resolved in flight by a cached plan */
    uint64_t cache_hits, cache_misses, cache_evictions, cache_entries;
    uint64_t plans_made, plan_errors, plan_switches;
    uint64_t prefix_derived;     /* plans made from a prefix of a known profile (no detail) */
    uint64_t probes;             /* iterations recorded in detail from op 0 in Stable */
    uint64_t bound_hits;         /* times options.max_detailed stopped detailed recording */
    uint64_t iters_cooldown;     /* iterations in which detail was withheld by that bound */
    /* plans for new sizes of a known structure (docs/api.md, "Sizes"): */
    uint64_t derived;            /* plans derived from a known structure's profile at new sizes */
    uint64_t derive_misses;      /* iterations under a derived plan that had to evict (re-planned) */
    /* Stable light iterations by the plan they ran under: */
    uint64_t hits_exact;         /* the plan of their own key, made from a detailed profile */
    uint64_t hits_derived;       /* a derived plan that held them: their structure's envelope, or
                                    the plan of their own key (derived from sizes or a prefix) */
    uint64_t hits_matched;       /* their structure's envelope by fuzzy matching (experts skipped)
                                    or grown by them, or a plan of another size of their structure
                                    (then derived for it) */
    uint64_t fuzzy_runs;         /* iterations that skipped operators of their plan (an expert with no
                                    tokens) and ran under it by fuzzy matching, without detail */
    uint64_t sized_ahead;        /* envelopes derived at ss_ctx_iter_begin for a longest length
                                    declared by ss_ctx_sizes beyond the envelope's (no save seen) */
    uint64_t retimed;            /* plans made again, without detail, from their profile with every
                                    operator's seconds scaled to the median own time of their last
                                    3 Stable iterations (options.retime) */
} ss_ctx_stats;

/* Copies the counters. Any thread. */
ss_status ss_ctx_get_stats(ss_ctx_t *ctx, ss_ctx_stats *out);
/* The report of the last finished iteration (zeros before the first). Any thread. */
ss_status ss_ctx_last_report(ss_ctx_t *ctx, ss_iter_report *out);

/* ======================================================================================== */
/* end of the framework API                                                                  */
/* ======================================================================================== */

#ifdef __cplusplus
}
#endif
#endif /* SMARTSWAP_H */
