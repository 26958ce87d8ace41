/* tape-ss.c: saved-tensor hooks that report to a smartswap framework context (tape-ss.h). */
#include "tape-ss.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void note(gpt_ssprof *p, const char *what, ss_status st) {
    if (st == SS_OK || p->failed) return;
    p->failed = 1;
    snprintf(p->err, sizeof p->err, "%s: %s (smartswap profiling stopped)", what, ss_status_str(st));
}

static void sp_iter_begin(void *user, int step) {
    gpt_ssprof *p = user;
    p->inner.iter_begin(p->inner.user, step);
    if (!p->failed) note(p, "ss_ctx_iter_begin", ss_ctx_iter_begin(p->ctx));
}

static void sp_iter_end(void *user) {
    gpt_ssprof *p = user;
    p->inner.iter_end(p->inner.user);
    if (!p->failed) note(p, "ss_ctx_iter_end", ss_ctx_iter_end(p->ctx, &p->last));
}

static void sp_op(void *user, const char *name, uint64_t site) {
    gpt_ssprof *p = user;
    p->inner.op(p->inner.user, name, site);
    if (p->failed) return;
    int i = 0;
    while (i < p->nnames && p->names[i] != name) i++;
    if (i == p->nnames) {
        if (i == 32) { note(p, "too many operator names", SS_ERR_INVALID); return; }
        ss_status st = ss_ctx_intern(p->ctx, name, &p->ids[i]);
        if (st != SS_OK) { note(p, "ss_ctx_intern", st); return; }
        p->names[i] = name;
        p->nnames++;
    }
    note(p, "ss_ctx_op", ss_ctx_op(p->ctx, p->ids[i], site));
}

static int sp_save(void *user, gpt_buf *buf, const gpt_save_info *info, uint64_t *handle) {
    gpt_ssprof *p = user;
    if (p->inner.save(p->inner.user, buf, info, handle)) return 1;
    if (*handle > p->nsh) {
        size_t n = p->nsh ? 2 * p->nsh : 256;
        while (n < *handle) n *= 2;
        uint64_t *t = realloc(p->sh, n * sizeof *t);
        if (!t) { snprintf(p->err, sizeof p->err, "out of host memory"); return 1; }
        memset(t + p->nsh, 0, (n - p->nsh) * sizeof *t);
        p->sh = t;
        p->nsh = n;
    }
    p->sh[*handle - 1] = 0;
    if (!p->failed) {
        uint64_t h = 0;
        int dt = info->dtype == GPT_DTYPE_BF16 ? SS_DTYPE_BF16 : SS_DTYPE_F32;
        ss_status st = ss_ctx_save(p->ctx, buf->ptr, info->bytes, dt, info->ndim, info->shape, 0, &h);
        note(p, "ss_ctx_save", st);
        if (st == SS_OK) p->sh[*handle - 1] = h;
    }
    return 0;
}

static int sp_load(void *user, uint64_t handle, void **ptr) {
    gpt_ssprof *p = user;
    if (p->inner.load(p->inner.user, handle, ptr)) return 1;
    uint64_t h = handle <= p->nsh ? p->sh[handle - 1] : 0;
    if (h && !p->failed) {
        void *q = NULL;
        ss_status st = ss_ctx_load(p->ctx, h, NULL, &q);
        note(p, "ss_ctx_load", st);
        /* resident: the context must hand back the pointer it was given */
        if (st == SS_OK && q != *ptr) note(p, "ss_ctx_load returned another pointer", SS_ERR_STATE);
    }
    return 0;
}

static void sp_release(void *user, uint64_t handle) {
    gpt_ssprof *p = user;
    uint64_t h = handle <= p->nsh ? p->sh[handle - 1] : 0;
    if (h) {
        if (!p->failed) note(p, "ss_ctx_release", ss_ctx_release(p->ctx, h));
        p->sh[handle - 1] = 0;
    }
    p->inner.release(p->inner.user, handle);
}

static const char *sp_error(void *user) {
    gpt_ssprof *p = user;
    return p->err[0] ? p->err : p->inner.error(p->inner.user);
}

int gpt_ssprof_init(gpt_ssprof *p, gpt_mem *mem, const ss_options *opts) {
    memset(p, 0, sizeof *p);
    gpt_keep_init(&p->keep, mem);
    p->inner = gpt_hooks_keep(&p->keep);
    ss_ctx_config c = ss_ctx_config_default();
    if (opts) c.opts = *opts;
    c.mem_owner = SS_MEM_FRAMEWORK;
    ss_status st = ss_ctx_new(&c, &p->ctx);
    if (st != SS_OK) {
        snprintf(p->err, sizeof p->err, "ss_ctx_new: %s", ss_status_str(st));
        return 1;
    }
    return 0;
}

gpt_hooks gpt_hooks_ssprof(gpt_ssprof *p) {
    gpt_hooks h = {p, sp_iter_begin, sp_iter_end, sp_op, sp_save, sp_load, sp_release, sp_error, NULL, NULL, NULL};
    return h;
}

void gpt_ssprof_free(gpt_ssprof *p) {
    ss_ctx_free(p->ctx);
    p->ctx = NULL;
    gpt_keep_free(&p->keep);
    free(p->sh);
    p->sh = NULL;
}
