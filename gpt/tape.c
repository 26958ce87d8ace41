/* tape.c: the reference saved-tensor store behind gpt_hooks (tape.h): keeps every saved
 * tensor resident, counts, and hashes the operator sequence.
 */
#include "tape.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A dropped save's slot (drop_rebuildable): live, but no data held. */
static gpt_buf k_dropped;

static void keep_iter_begin(void *user, int step) {
    gpt_keep *k = user;
    (void)step;
    k->op_hash = 1469598103934665603ull;
    k->ops = k->saves = k->loads = k->saved_bytes = k->dropped_saves = 0;
}

static void keep_iter_end(void *user) { (void)user; }

static void keep_op(void *user, const char *name, uint64_t site) {
    gpt_keep *k = user;
    uint64_t h = k->op_hash;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 1099511628211ull;
    for (int i = 0; i < 8; i++) h = (h ^ ((site >> (8 * i)) & 0xff)) * 1099511628211ull;
    k->op_hash = h;
    k->ops++;
}

static int keep_save(void *user, gpt_buf *buf, const gpt_save_info *info, uint64_t *handle) {
    gpt_keep *k = user;
    if (k->nslots == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 256;
        gpt_buf **s = realloc(k->slots, cap * sizeof *s);
        if (!s) { snprintf(k->err, sizeof k->err, "out of host memory for the tape"); return 1; }
        k->slots = s;
        k->cap = cap;
    }
    if ((k->drop_rebuildable && info->rebuildable) || (k->drop_spans && info->span_member)) {
        k->slots[k->nslots++] = &k_dropped;
        k->dropped_saves++;
    } else {
        gpt_buf_ref(buf);
        k->slots[k->nslots++] = buf;
    }
    *handle = k->nslots;
    k->saves++;
    k->saved_bytes += info->bytes;
    return 0;
}

static int keep_load(void *user, uint64_t handle, void **ptr) {
    gpt_keep *k = user;
    if (handle == 0 || handle > k->nslots || !k->slots[handle - 1]) {
        snprintf(k->err, sizeof k->err, "load of unknown or released handle %llu",
                 (unsigned long long)handle);
        return 1;
    }
    if (k->slots[handle - 1] == &k_dropped) {
        snprintf(k->err, sizeof k->err, "load of dropped handle %llu (it is to be rebuilt)",
                 (unsigned long long)handle);
        return 1;
    }
    *ptr = k->slots[handle - 1]->ptr;
    k->loads++;
    return 0;
}

static void keep_release(void *user, uint64_t handle) {
    gpt_keep *k = user;
    if (handle == 0 || handle > k->nslots || !k->slots[handle - 1]) return;
    if (k->slots[handle - 1] != &k_dropped) gpt_buf_unref(k->mem, k->slots[handle - 1]);
    k->slots[handle - 1] = NULL;
    /* every handle released: start the table again */
    while (k->nslots && !k->slots[k->nslots - 1]) k->nslots--;
}

static const char *keep_error(void *user) { return ((gpt_keep *)user)->err; }

static int keep_dropped(void *user, uint64_t handle) {
    gpt_keep *k = user;
    return handle && handle <= k->nslots && k->slots[handle - 1] == &k_dropped;
}

void gpt_keep_init(gpt_keep *k, gpt_mem *mem) {
    memset(k, 0, sizeof *k);
    k->mem = mem;
}

gpt_hooks gpt_hooks_keep(gpt_keep *k) {
    gpt_hooks h = {k, keep_iter_begin, keep_iter_end, keep_op, keep_save, keep_load, keep_release,
                   keep_error, keep_dropped, NULL, NULL};
    return h;
}

void gpt_keep_free(gpt_keep *k) {
    for (size_t i = 0; i < k->nslots; i++)
        if (k->slots[i] != &k_dropped) gpt_buf_unref(k->mem, k->slots[i]);
    free(k->slots);
    k->slots = NULL;
    k->nslots = k->cap = 0;
}
