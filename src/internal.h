/* internal.h: what the library's own files share and callers never see: logging macros, graded
 * assertions, the clock, a seeded PRNG, and small checked helpers. Cross-file internal functions
 * are named ssi_<part>_<verb>. Part-specific internals live in their own headers (device-impl.h,
 * profile.h, plan.h, sim.h, ...).
 */
#ifndef SS_INTERNAL_H
#define SS_INTERNAL_H

#include "smartswap.h"
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define SS_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define SS_UNUSED __attribute__((unused))
#define SS_LIKELY(x) __builtin_expect(!!(x), 1)
#define SS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define SS_PRINTF(a, b)
#define SS_UNUSED
#define SS_LIKELY(x) (x)
#define SS_UNLIKELY(x) (x)
#endif

#ifndef SS_DEBUG
#define SS_DEBUG 1
#endif

/* ---- logging: the level is tested before formatting ---------------------------------- */
extern ss_log_level ssi_log_max;   /* -1 when no callback is set */
extern ss_log_fn ssi_log_fn;
void ssi_log(ss_log_level lvl, const char *fmt, ...) SS_PRINTF(2, 3);
#define SS_LOG(lvl, ...) \
    do { if (ssi_log_fn && (int)(lvl) <= (int)ssi_log_max) ssi_log((lvl), __VA_ARGS__); } while (0)
#define SS_ERROR(...) SS_LOG(SS_LOG_ERROR, __VA_ARGS__)
#define SS_WARN(...)  SS_LOG(SS_LOG_WARN, __VA_ARGS__)
#define SS_INFO(...)  SS_LOG(SS_LOG_INFO, __VA_ARGS__)
#define SS_DEBUGF(...) SS_LOG(SS_LOG_DEBUG, __VA_ARGS__)

/* ---- assertions, graded by SS_DEBUG (0: none, 1: cheap, 2: internal, 3: expensive walks) --
 * A failed assertion is a bug in smartswap or a broken contract by the caller: it logs and
 * aborts (debug builds only). Release builds (SS_DEBUG=0) keep the status-returning checks. */
void ssi_assert_fail(const char *expr, const char *file, int line);
#if SS_DEBUG >= 1
#define SS_ASSERT(x) ((x) ? (void)0 : ssi_assert_fail(#x, __FILE__, __LINE__))
#else
#define SS_ASSERT(x) ((void)0)
#endif
#if SS_DEBUG >= 2
#define SS_ASSERT_INTERNAL(x) SS_ASSERT(x)
#else
#define SS_ASSERT_INTERNAL(x) ((void)0)
#endif
#if SS_DEBUG >= 3
#define SS_ASSERT_EXPENSIVE(x) SS_ASSERT(x)
#else
#define SS_ASSERT_EXPENSIVE(x) ((void)0)
#endif

/* Returns status `st` from the current function after logging, when `cond` holds. */
#define SS_CHECK_ARG(cond, ...) \
    do { if (SS_UNLIKELY(cond)) { SS_ERROR(__VA_ARGS__); return SS_ERR_INVALID; } } while (0)

/* ---- time ------------------------------------------------------------------------------ */
/* Monotonic wall clock, seconds. */
double ssi_now(void);
/* Sleeps (seconds); returns early never. */
void ssi_sleep(double seconds);

/* ---- seeded PRNG (splitmix64 seeding a xorshift64*) ------------------------------------ */
typedef struct ssi_rng { uint64_t s; } ssi_rng;
void     ssi_rng_seed(ssi_rng *r, uint64_t seed);
uint64_t ssi_rng_next(ssi_rng *r);
double   ssi_rng_unit(ssi_rng *r);           /* [0, 1) */
uint64_t ssi_rng_below(ssi_rng *r, uint64_t n); /* [0, n), n > 0 */

/* ---- hashing --------------------------------------------------------------------------- */
/* 64-bit hash of a string / bytes (FNV-1a folded through a final mix). */
uint64_t ssi_hash_str(const char *s);
uint64_t ssi_hash_bytes(const void *p, size_t n);
/* Folds v into h: the light profiler's per-operator step (a few ns). */
static inline uint64_t ssi_hash_fold(uint64_t h, uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 31);
}

/* ---- growable arrays: ssi_grow(&ptr, &cap, need, elem) ensures cap >= need ----------------
 * Returns SS_ERR_HOST_OOM (ptr unchanged) if memory runs out. */
ss_status ssi_grow(void *pptr, size_t *cap, size_t need, size_t elem);

/* strdup that returns NULL on failure. */
char *ssi_strdup(const char *s);
/* snprintf into buf[len] that never overflows and always terminates (len > 0). */
void ssi_fmt(char *buf, size_t len, const char *fmt, ...) SS_PRINTF(3, 4);

/* Reports an error for a caller that may or may not want it as text: formats into err when
 * err_len > 0, else logs it with SS_ERROR. */
void ssi_report(char *err, size_t err_len, const char *fmt, ...) SS_PRINTF(3, 4);
void ssi_vreport(char *err, size_t err_len, const char *fmt, va_list ap);

/* Writes `len` bytes to path atomically: a temporary file in the same folder, fsync, rename.
 * Never leaves a partial file. SS_ERR_IO with a log line naming the path on failure. */
ss_status ssi_write_file_atomic(const char *path, const void *data, size_t len);

/* ---- the allocator's bytes in use (alloc.c) -------------------------------------------------
 * live + pending bytes of a (0 for NULL), under its lock: the executor's per-operator peak
 * sample, without ss_alloc_get_stats' walk of the free trees and segments. */
#include "smartswap-alloc.h"
uint64_t ssi_alloc_in_use(const struct ss_alloc *a);
/* Rounds n up to the allocator's granule (SS_ALLOC_ALIGN of smartswap-alloc.h): the bytes a
 * block of n holds, as the simulator and the profile rewrites count them. */
static inline uint64_t ssi_round_block(uint64_t n) {
    return (n + SS_ALLOC_ALIGN - 1) / SS_ALLOC_ALIGN * SS_ALLOC_ALIGN;
}

/* ---- call sites of device calls (the fault sweep, docs/testing.md) -------------------------
 * The library's allocation, map, copy, event and stream calls go through the macros below,
 * which note the caller's __FILE__ and __LINE__ in a thread-local for the length of the call;
 * the fault device (device-fault.c) counts and fails calls by that site. The device layer
 * itself (device-impl.h) defines SSI_NO_SITE_MACROS: its calls forward, they are no site. */
#include "smartswap-device.h"
typedef struct ssi_site { const char *file; int line; } ssi_site;
extern _Thread_local ssi_site ssi_call_site;   /* file NULL: a caller outside the library */
static inline ss_device_t *ssi_site_begin(const char *file, int line, ss_device_t *dev) {
    ssi_call_site.file = file;
    ssi_call_site.line = line;
    return dev;
}
static inline ss_status ssi_site_end(ss_status st) {
    ssi_call_site.file = NULL;
    ssi_call_site.line = 0;
    return st;
}
#ifndef SSI_NO_SITE_MACROS
#define SSI_SITE_CALL(fn, dev, ...) ssi_site_end(fn(ssi_site_begin(__FILE__, __LINE__, (dev)), __VA_ARGS__))
#define ss_mem_alloc(dev, ...)    SSI_SITE_CALL(ss_mem_alloc, dev, __VA_ARGS__)
#define ss_host_alloc(dev, ...)   SSI_SITE_CALL(ss_host_alloc, dev, __VA_ARGS__)
#define ss_vm_map(dev, ...)       SSI_SITE_CALL(ss_vm_map, dev, __VA_ARGS__)
#define ss_copy_async(dev, ...)   SSI_SITE_CALL(ss_copy_async, dev, __VA_ARGS__)
#define ss_event_new(dev, ...)    SSI_SITE_CALL(ss_event_new, dev, __VA_ARGS__)
#define ss_event_record(dev, ...) SSI_SITE_CALL(ss_event_record, dev, __VA_ARGS__)
#define ss_event_wait(dev, ...)   SSI_SITE_CALL(ss_event_wait, dev, __VA_ARGS__)
#define ss_event_query(dev, ...)  SSI_SITE_CALL(ss_event_query, dev, __VA_ARGS__)
#define ss_event_sync(dev, ...)   SSI_SITE_CALL(ss_event_sync, dev, __VA_ARGS__)
#define ss_stream_new(dev, ...)   SSI_SITE_CALL(ss_stream_new, dev, __VA_ARGS__)
#define ss_stream_wrap(dev, ...)  SSI_SITE_CALL(ss_stream_wrap, dev, __VA_ARGS__)
#define ss_stream_sync(dev, ...)  SSI_SITE_CALL(ss_stream_sync, dev, __VA_ARGS__)
#endif

#endif /* SS_INTERNAL_H */
