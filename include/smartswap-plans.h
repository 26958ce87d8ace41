/* smartswap-plans.h: keeping a context's plans across runs (src/api-plans.c).
 *
 * A context caches one plan per operator sequence it has seen (the plan cache of the stage
 * machine, include/smartswap.h). ss_ctx_plans_save writes every cached plan together with the
 * detailed profile it was made from to one file; ss_ctx_plans_load reads such a file into a new
 * run's context, so that sequences seen in an earlier run are recognised at once: the context
 * starts in Stable (no WarmUp, no detailed iteration) with the most recently used plan current,
 * and a known sequence is a plan-cache hit from its first iteration.
 *
 * File: "smartswap-plans 1", then per plan its profile (the trace-format profile text) and its
 * plan (the plan-file text), each preceded by its length in bytes (docs/trainer.md). Plans are
 * kept as written when the context uses the built-in plan hook; with another plan hook (the
 * policy) they are made again from the stored profiles by that hook, so that a different budget
 * or option set is honoured. Operator names are re-interned into the loading context.
 */
#ifndef SMARTSWAP_PLANS_H
#define SMARTSWAP_PLANS_H

#include "smartswap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the context's cached plans (least recently used first) to path, atomically (a
 * temporary file renamed over path; nothing half-written on failure). *count (may be NULL): how
 * many were written (0 is legal: an empty file). Between iterations only (SS_ERR_STATE inside
 * one). SS_ERR_IO when the file cannot be written; err (may be NULL) says why. */
ss_status ss_ctx_plans_save(ss_ctx_t *ctx, const char *path, uint32_t *count, char *err, size_t err_len);

/* Reads a file written by ss_ctx_plans_save into the context's plan cache (evicting the least
 * recently used entries when the file holds more than options.plan_cache_size plans: the most
 * recent ones are kept) and, if at least one plan was loaded, moves the context to Stable with
 * the most recently used one current. Between iterations only. SS_ERR_IO (cannot read),
 * SS_ERR_FORMAT (malformed: "FILE: plan N: what" in err), SS_ERR_HOST_OOM; on any error the
 * context is left as it was. A disabled context (options.disable) loads nothing and returns
 * SS_OK with *count = 0. */
ss_status ss_ctx_plans_load(ss_ctx_t *ctx, const char *path, uint32_t *count, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif /* SMARTSWAP_PLANS_H */
