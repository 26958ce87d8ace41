/* api-plans.c: saving a context's plan cache to a file and loading it into another context
 * (include/smartswap-plans.h). It reaches into the stage machine's cache (stage.h) the way
 * stage.c itself fills it: one entry = a plan + the finalized profile it was made from, keyed by
 * (sequence hash, size signature, operator count), with profile name ids equal to the
 * context's.
 */
#include "api.h"
#include "smartswap-plans.h"
#include "trace.h"

#include <stdio.h>

#define PLANS_MAGIC "smartswap-plans 1\n"

static void set_err(char *err, size_t len, const char *fmt, ...) SS_PRINTF(3, 4);
static void set_err(char *err, size_t len, const char *fmt, ...) {
    if (!err || !len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

/* ---- save ---------------------------------------------------------------------------------- */

ss_status ss_ctx_plans_save(ss_ctx_t *ctx, const char *path, uint32_t *count, char *err, size_t err_len) {
    SS_CHECK_ARG(!ctx || !path, "ss_ctx_plans_save: NULL argument");
    if (ctx->in_iter) {
        set_err(err, err_len, "plans can be saved only between iterations");
        return SS_ERR_STATE;
    }
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        set_err(err, err_len, "path too long");
        return SS_ERR_INVALID;
    }
    pthread_mutex_lock(&ctx->lock);
    ssi_stage *s = &ctx->st;
    /* entries in LRU order, oldest first, so that loading them in order keeps the recency */
    uint32_t n = 0, *order = calloc(s->cap ? s->cap : 1, sizeof *order);
    if (!order) { pthread_mutex_unlock(&ctx->lock); return SS_ERR_HOST_OOM; }
    for (uint32_t i = 0; i < s->cap; i++) if (s->cache[i].used) order[n++] = i;
    for (uint32_t i = 1; i < n; i++)
        for (uint32_t j = i; j > 0 && s->cache[order[j]].stamp < s->cache[order[j - 1]].stamp; j--) {
            uint32_t t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
        }
    ss_status st = SS_OK;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        set_err(err, err_len, "cannot write %s", tmp);
        st = SS_ERR_IO;
    } else {
        int ok = fputs(PLANS_MAGIC, f) >= 0 && fprintf(f, "count %u\n", n) > 0;
        for (uint32_t k = 0; ok && !st && k < n; k++) {
            const ssi_cache_entry *e = &s->cache[order[k]];
            char *pt = NULL, *lt = NULL;
            size_t plen = 0, llen = 0;
            char perr[256] = "";
            st = ssi_profile_to_buffer(e->prof, &pt, &plen, perr, sizeof perr);
            if (st) set_err(err, err_len, "plan %u: profile: %s", k, perr[0] ? perr : ss_status_str(st));
            if (!st && (st = ssi_plan_format(e->plan, &lt, &llen)))
                set_err(err, err_len, "plan %u: %s", k, ss_status_str(st));
            if (!st)
                ok = fprintf(f, "profile %zu\n", plen) > 0 && fwrite(pt, 1, plen, f) == plen &&
                     fprintf(f, "\nplan %zu\n", llen) > 0 && fwrite(lt, 1, llen, f) == llen && fputc('\n', f) != EOF;
            free(pt);
            free(lt);
        }
        if (ok && !st) ok = fputs("end\n", f) >= 0;
        if (fclose(f) != 0) ok = 0;
        if (!st && !ok) {
            set_err(err, err_len, "writing %s failed (disk full?)", tmp);
            st = SS_ERR_IO;
        }
        if (!st && rename(tmp, path) != 0) {
            set_err(err, err_len, "cannot rename %s to %s", tmp, path);
            st = SS_ERR_IO;
        }
        if (st) remove(tmp);
    }
    pthread_mutex_unlock(&ctx->lock);
    free(order);
    if (!st && count) *count = n;
    return st;
}

/* ---- load ---------------------------------------------------------------------------------- */

typedef struct loaded {
    ss_profile *prof;
    ss_plan    *plan;
} loaded;

/* The bytes of one "<tag> <len>\n<bytes>\n" block at *pos; NULL with a message on error. */
static const char *block(const char *buf, size_t len, size_t *pos, const char *tag, size_t *blen) {
    size_t p = *pos, tl = strlen(tag);
    if (len - p < tl + 2 || memcmp(buf + p, tag, tl) || buf[p + tl] != ' ') return NULL;
    p += tl + 1;
    size_t n = 0;
    int digits = 0;
    while (p < len && buf[p] >= '0' && buf[p] <= '9' && digits < 19) { n = n * 10 + (size_t)(buf[p] - '0'); p++; digits++; }
    if (!digits || p >= len || buf[p] != '\n') return NULL;
    p++;
    if (n > len - p || len - p - n < 1 || buf[p + n] != '\n') return NULL;
    *pos = p + n + 1;
    *blen = n;
    return buf + p;
}

/* The profile with its name ids replaced by the context's (interning its names there). */
static ss_status remap_names(ss_ctx_t *ctx, const ss_profile *src, ss_profile **out) {
    uint32_t *map = calloc(src->nnames ? src->nnames : 1, sizeof *map);
    if (!map) return SS_ERR_HOST_OOM;
    ss_status st = SS_OK;
    for (uint32_t i = 0; !st && i < src->nnames; i++) st = ss_ctx_intern(ctx, src->names[i], &map[i]);
    ss_profile *p = NULL;
    if (!st) st = ssi_profile_new(&p);
    if (!st) {
        pthread_mutex_lock(&ctx->lock);
        uint32_t nn = atomic_load(&ctx->nnames);
        st = ssi_ctx_sync_names(ctx, p, nn);
        pthread_mutex_unlock(&ctx->lock);
    }
    /* copy_prefix wants at least src's names in dst; it copies the ids, which are then mapped */
    while (!st && p->nnames < src->nnames) {
        char nm[32];
        uint32_t id;
        snprintf(nm, sizeof nm, "\x01pad%u", p->nnames);
        st = ssi_profile_intern(p, nm, &id);
    }
    if (!st) st = ssi_profile_copy_prefix(p, src, src->nops, src->ntensors, src->nops);
    if (!st) {
        for (uint32_t i = 0; i < p->nops; i++) p->ops[i].name = map[src->ops[i].name];
        /* drop padding names again: every op now refers to a context name */
        uint32_t nn = atomic_load(&ctx->nnames);
        while (p->nnames > nn) free(p->names[--p->nnames]);
        p->seq_hash = src->seq_hash;
        p->size_sig = src->size_sig;
        p->iter_seconds = src->iter_seconds;
        memcpy(p->desc, src->desc, sizeof p->desc);
        /* uses and releases: copy_prefix kept releases < nops (all of them) */
        for (uint32_t t = 0; t < p->ntensors; t++) p->tensors[t].release = src->tensors[t].release;
        st = ssi_profile_finalize(p);
    }
    free(map);
    if (st) { ssi_profile_free(p); return st; }
    *out = p;
    return SS_OK;
}

static void free_loaded(ss_ctx_t *ctx, loaded *L, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        ssi_profile_free(L[i].prof);
        if (L[i].plan) {
            if (ctx->st.planner.free_fn) ctx->st.planner.free_fn(ctx->st.planner.user, L[i].plan);
            else ssi_plan_free_default(NULL, L[i].plan);
        }
    }
    free(L);
}

ss_status ss_ctx_plans_load(ss_ctx_t *ctx, const char *path, uint32_t *count, char *err, size_t err_len) {
    SS_CHECK_ARG(!ctx || !path, "ss_ctx_plans_load: NULL argument");
    if (ctx->in_iter) {
        set_err(err, err_len, "plans can be loaded only between iterations");
        return SS_ERR_STATE;
    }
    if (ctx->opts.disable) { if (count) *count = 0; return SS_OK; }
    FILE *f = fopen(path, "rb");
    if (!f) { set_err(err, err_len, "cannot open %s", path); return SS_ERR_IO; }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap && ssi_grow(&buf, &cap, cap ? 2 * cap : 65536, 1)) { fclose(f); free(buf); return SS_ERR_HOST_OOM; }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0) break;
    }
    int rerr = ferror(f);
    fclose(f);
    if (rerr) { free(buf); set_err(err, err_len, "cannot read %s", path); return SS_ERR_IO; }
    buf[len] = 0;   /* sscanf below reads to a NUL: stop it at the file's end (len < cap here) */
    size_t pos = strlen(PLANS_MAGIC);
    unsigned n = 0;
    int used = 0;
    if (len < pos || memcmp(buf, PLANS_MAGIC, pos)) {
        free(buf);
        set_err(err, err_len, "%s: not a smartswap plans file (first line \"smartswap-plans 1\"); write it with "
                "smartswap train --save-plan", path);
        return SS_ERR_FORMAT;
    }
    if (sscanf(buf + pos, "count %u\n%n", &n, &used) != 1 || used == 0 || n > 1000000) {
        free(buf);
        set_err(err, err_len, "%s: line 2: expected \"count N\"", path);
        return SS_ERR_FORMAT;
    }
    pos += (size_t)used;
    loaded *L = calloc(n ? n : 1, sizeof *L);
    if (!L) { free(buf); return SS_ERR_HOST_OOM; }
    ss_status st = SS_OK;
    uint32_t got = 0;
    int replan = ctx->st.planner.fn != ssi_plan_default;
    for (uint32_t k = 0; !st && k < n; k++, got++) {
        size_t plen, llen;
        char e2[256] = "";
        const char *pt = block(buf, len, &pos, "profile", &plen);
        const char *lt = pt ? block(buf, len, &pos, "plan", &llen) : NULL;
        if (!pt || !lt) {
            set_err(err, err_len, "%s: plan %u: expected \"profile N\" and \"plan N\" blocks of N bytes", path, k);
            st = SS_ERR_FORMAT;
            break;
        }
        ss_profile *raw = NULL;
        char name[64];
        snprintf(name, sizeof name, "plan %u profile", k);
        st = ssi_profile_read_buffer(pt, plen, name, &raw, e2, sizeof e2);
        if (!st) { st = remap_names(ctx, raw, &L[k].prof); ssi_profile_free(raw); }
        if (st) { set_err(err, err_len, "%s: %s", path, e2[0] ? e2 : ss_status_str(st)); break; }
        if (replan) {
            pthread_mutex_lock(&ctx->lock);
            st = ctx->st.planner.fn(ctx->st.planner.user, L[k].prof, &L[k].plan);
            pthread_mutex_unlock(&ctx->lock);
            if (!st && !L[k].plan) st = SS_ERR_INVALID;
        } else {
            snprintf(name, sizeof name, "plan %u", k);
            st = ssi_plan_parse(lt, llen, name, &L[k].plan, e2, sizeof e2);
        }
        if (!st) st = ssi_stage_plan_prepare(L[k].plan, L[k].prof);
        if (st) {
            set_err(err, err_len, "%s: plan %u: %s", path, k,
                    e2[0] ? e2 : st == SS_ERR_FORMAT ? "its checkpoints disagree with its profile" : ss_status_str(st));
            got++;
            break;
        }
    }
    if (!st && (len - pos < 4 || memcmp(buf + pos, "end\n", 4))) {
        set_err(err, err_len, "%s: missing \"end\" after %u plans (truncated?)", path, n);
        st = SS_ERR_FORMAT;
    }
    free(buf);
    if (st) { free_loaded(ctx, L, got); return st; }
    /* into the cache: oldest first, each becoming the most recent */
    pthread_mutex_lock(&ctx->lock);
    ssi_stage *s = &ctx->st;
    uint32_t first = n > s->cap ? n - s->cap : 0;
    int last = -1;
    for (uint32_t k = 0; k < n; k++) {
        if (k < first) continue;
        /* the same key already cached: replace it; else a free or least recently used slot */
        int slot = -1;
        for (uint32_t i = 0; i < s->cap && slot < 0; i++) {
            ssi_cache_entry *e = &s->cache[i];
            if (e->used && e->hash == L[k].prof->seq_hash && e->sig == L[k].prof->size_sig && e->nops == L[k].prof->nops)
                slot = (int)i;
        }
        for (uint32_t i = 0; i < s->cap && slot < 0; i++) if (!s->cache[i].used) slot = (int)i;
        if (slot < 0) {
            slot = 0;
            for (uint32_t i = 1; i < s->cap; i++) if (s->cache[i].stamp < s->cache[slot].stamp) slot = (int)i;
            ctx->stats.cache_evictions++;
        }
        ssi_cache_entry *e = &s->cache[slot];
        if (e->used) {
            if (s->planner.free_fn) s->planner.free_fn(s->planner.user, e->plan);
            else ssi_plan_free_default(NULL, e->plan);
            ssi_profile_free(e->prof);
            ctx->stats.cache_entries--;
            if (s->from_plan == slot) s->from_plan = -1;
        }
        e->plan = L[k].plan;
        e->prof = L[k].prof;
        e->hash = L[k].prof->seq_hash;
        e->sig = L[k].prof->size_sig;
        e->nops = L[k].prof->nops;
        e->used = 1;
        /* an envelope is known by its key (stage.c, "envelope"); its profile was derived */
        e->envelope = (uint32_t)ssi_stage_envelope_key(e->hash, e->sig, e->nops);
        e->derived = e->envelope;
        e->stamp = ++s->clock;
        L[k].plan = NULL;
        L[k].prof = NULL;
        ctx->stats.cache_entries++;
        last = slot;
    }
    if (last >= 0) {
        s->cur = last;
        s->warm_done = (uint32_t)(ctx->opts.warmup_iters > 0 ? ctx->opts.warmup_iters : 0);
        s->probe_pending = 0;
        atomic_store(&s->stage, SS_STAGE_STABLE);
    }
    pthread_mutex_unlock(&ctx->lock);
    free_loaded(ctx, L, n);
    if (count) *count = n - first;
    return SS_OK;
}
