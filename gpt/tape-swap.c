/* tape-swap.c: saved tensors owned by a smartswap context (tape-swap.h). */
#include "tape-swap.h"

#include "mem-ss.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(gpt_ssswap *s, const char *what, ss_status st) {
    snprintf(s->err, sizeof s->err, "%s: %s", what, ss_status_str(st));
    return 1;
}

static void sw_iter_begin(void *user, int step) {
    gpt_ssswap *s = user;
    (void)step;
    s->op_hash = 1469598103934665603ull;
    s->ops = s->saves = s->blocks = s->saved_bytes = s->block_bytes = s->dropped = s->dropped_bytes = 0;
    ss_status st = ss_ctx_iter_begin(s->ctx);
    if (st) fail(s, "ss_ctx_iter_begin", st);
}

static void sw_iter_end(void *user) {
    gpt_ssswap *s = user;
    ss_status st = ss_ctx_iter_end(s->ctx, &s->last);
    if (st) fail(s, "ss_ctx_iter_end", st);
}

static void sw_op(void *user, const char *name, uint64_t site) {
    gpt_ssswap *s = user;
    uint64_t h = s->op_hash;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 1099511628211ull;
    for (int i = 0; i < 8; i++) h = (h ^ ((site >> (8 * i)) & 0xff)) * 1099511628211ull;
    s->op_hash = h;
    s->ops++;
    int i = 0;
    while (i < s->nnames && s->names[i] != name) i++;
    if (i == s->nnames) {
        if (i == 32) { fail(s, "too many operator names", SS_ERR_INVALID); return; }
        ss_status st = ss_ctx_intern(s->ctx, name, &s->ids[i]);
        if (st) { fail(s, "ss_ctx_intern", st); return; }
        s->names[i] = name;
        s->nnames++;
    }
    ss_status st = ss_ctx_op(s->ctx, s->ids[i], site);
    if (st) fail(s, "ss_ctx_op", st);
}

static int sw_save(void *user, gpt_buf *buf, const gpt_save_info *info, uint64_t *handle) {
    gpt_ssswap *s = user;
    if (!buf->impl && !(buf->ext_refs > 0 && !buf->ext)) { snprintf(s->err, sizeof s->err, "%s is not a smartswap allocator block", buf->name); return 1; }
    if (s->nslots == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        gpt_buf **t = realloc(s->slots, cap * sizeof *t);
        if (!t) { snprintf(s->err, sizeof s->err, "out of host memory for the tape"); return 1; }
        s->slots = t;
        s->cap = cap;
    }
    if (buf->ext_refs == 0) {
        uint64_t h = 0;
        ss_status st = ss_ctx_save_block(s->ctx, (ss_block_t *)buf->impl,
                                         info->dtype == GPT_DTYPE_BF16 ? SS_DTYPE_BF16 : SS_DTYPE_F32, info->ndim, info->shape, 0, &h);
        if (st) return fail(s, "ss_ctx_save_block", st);
        buf->ext = h;
        s->blocks++;
        s->block_bytes += info->bytes;
        int rc = 0;
        if ((info->rebuildable || info->span_member) && (st = ss_ctx_recompute_planned(s->ctx, h, &rc)))
            return fail(s, "ss_ctx_recompute_planned", st);
        if (rc) {
            /* the plan recomputes it: the context frees the block now, backward rebuilds it */
            if ((st = ss_ctx_release(s->ctx, h))) return fail(s, "ss_ctx_release", st);
            buf->foreign = 1;
            buf->ptr = NULL;
            buf->impl = NULL;
            buf->ext = 0;
            s->dropped++;
            s->dropped_bytes += info->bytes;
        }
    }
    buf->ext_refs++;
    gpt_buf_ref(buf);
    s->slots[s->nslots++] = buf;
    *handle = s->nslots;
    s->saves++;
    s->saved_bytes += info->bytes;
    return 0;
}

static int sw_load(void *user, uint64_t handle, void **ptr) {
    gpt_ssswap *s = user;
    if (handle == 0 || handle > s->nslots || !s->slots[handle - 1]) {
        snprintf(s->err, sizeof s->err, "load of unknown or released handle %llu", (unsigned long long)handle);
        return 1;
    }
    if (!s->slots[handle - 1]->ext) {
        snprintf(s->err, sizeof s->err, "load of %s, which the plan recomputes (the model rebuilds it)",
                 s->slots[handle - 1]->name);
        return 1;
    }
    ss_status st = ss_ctx_load(s->ctx, s->slots[handle - 1]->ext, NULL, ptr);
    return st ? fail(s, "ss_ctx_load", st) : 0;
}

static void sw_release(void *user, uint64_t handle) {
    gpt_ssswap *s = user;
    if (handle == 0 || handle > s->nslots || !s->slots[handle - 1]) return;
    gpt_buf *b = s->slots[handle - 1];
    s->slots[handle - 1] = NULL;
    if (--b->ext_refs == 0 && b->ext) {
        /* the context frees the block (or the executor, wherever the bytes are now) */
        ss_status st = ss_ctx_release(s->ctx, b->ext);
        if (st) fail(s, "ss_ctx_release", st);
        b->foreign = 1;
        b->ptr = NULL;
        b->impl = NULL;
        b->ext = 0;
    }
    gpt_buf_unref(s->mem, b);
    while (s->nslots && !s->slots[s->nslots - 1]) s->nslots--;
}

static const char *sw_error(void *user) { return ((gpt_ssswap *)user)->err; }

static int sw_dropped(void *user, uint64_t handle) {
    gpt_ssswap *s = user;
    return handle && handle <= s->nslots && s->slots[handle - 1] && !s->slots[handle - 1]->ext;
}

/* The recipe goes to the context for its profile (a no-op unless the iteration is recorded);
 * a dropped save, or one rebuilt from a dropped one, is not reported. */
static void sw_recipe(void *user, uint64_t handle, const uint64_t *src, int nsrc, const uint32_t *ops, int nop) {
    gpt_ssswap *s = user;
    if (sw_dropped(s, handle) || handle == 0 || handle > s->nslots || !s->slots[handle - 1]) return;
    uint64_t cs[2] = {0, 0};
    for (int k = 0; k < nsrc && k < 2; k++) {
        if (sw_dropped(s, src[k]) || src[k] == 0 || src[k] > s->nslots || !s->slots[src[k] - 1]) return;
        cs[k] = s->slots[src[k] - 1]->ext;
    }
    ss_status st = ss_ctx_recomputable(s->ctx, s->slots[handle - 1]->ext, cs, (uint32_t)nsrc, ops, (uint32_t)nop);
    if (st) fail(s, "ss_ctx_recomputable", st);
}

/* A layer's input and its operators go to the context for its profile (a no-op unless the
 * iteration is recorded); not when the input itself was dropped. */
static void sw_recipe_span(void *user, uint64_t handle, uint32_t op_first, uint32_t op_last) {
    gpt_ssswap *s = user;
    if (sw_dropped(s, handle) || handle == 0 || handle > s->nslots || !s->slots[handle - 1]) return;
    ss_status st = ss_ctx_recomputable_span(s->ctx, s->slots[handle - 1]->ext, op_first, op_last);
    if (st) fail(s, "ss_ctx_recomputable_span", st);
}

int gpt_ssswap_init(gpt_ssswap *s, gpt_mem *mem, const ss_options *opts) {
    memset(s, 0, sizeof *s);
    s->mem = mem;
    ss_alloc_t *al = gpt_mem_ss_alloc(mem);
    if (!al) { snprintf(s->err, sizeof s->err, "the memory is not the smartswap allocator (gpt_mem_init_ss)"); return 1; }
    ss_ctx_config c = ss_ctx_config_default();
    if (opts) c.opts = *opts;
    c.mem_owner = SS_MEM_SMARTSWAP;
    c.device = gpt_mem_ss_device(mem);
    c.alloc = al;
    ss_status st = ss_ctx_new(&c, &s->ctx);
    return st ? fail(s, "ss_ctx_new", st) : 0;
}

gpt_hooks gpt_hooks_ssswap(gpt_ssswap *s) {
    gpt_hooks h = {s, sw_iter_begin, sw_iter_end, sw_op, sw_save, sw_load, sw_release, sw_error, sw_dropped,
                   sw_recipe, sw_recipe_span};
    return h;
}

void gpt_ssswap_free(gpt_ssswap *s) {
    for (size_t i = s->nslots; i > 0; i--) sw_release(s, i);
    free(s->slots);
    s->slots = NULL;
    s->nslots = s->cap = 0;
    ss_ctx_free(s->ctx);
    s->ctx = NULL;
}
