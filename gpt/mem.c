/* mem.c: the trainer's memory interface (mem.h): accounting, budget, reference counts, and the
 * plain-malloc backend. The smartswap-allocator backend is in mem-ss.c.
 */
#include "mem.h"

#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int malloc_alloc(void *user, size_t bytes, void **ptr, void **impl, char *err, size_t errlen) {
    (void)user;
    size_t n = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, n);
    if (!p) {
        snprintf(err, errlen, "host malloc of %zu bytes failed", bytes);
        return 1;
    }
    *ptr = p;
    *impl = NULL;
    return 0;
}

static void malloc_free(void *user, void *ptr, void *impl) {
    (void)user; (void)impl;
    free(ptr);
}

void gpt_mem_init_backend(gpt_mem *m, const gpt_mem_backend *be, uint64_t budget) {
    memset(m, 0, sizeof *m);
    m->be = *be;
    m->budget = budget;
}

void gpt_mem_init_malloc(gpt_mem *m, uint64_t budget) {
    gpt_mem_backend be = {"malloc", NULL, malloc_alloc, malloc_free, NULL, NULL};
    gpt_mem_init_backend(m, &be, budget);
}

uint64_t gpt_mem_destroy(gpt_mem *m) {
    if (m->be.destroy) m->be.destroy(m->be.user);
    m->be.destroy = NULL;
    return m->live;
}

static int is_act(int kind) {
    return kind == GPT_MEM_ACT || kind == GPT_MEM_AGRAD || kind == GPT_MEM_TEMP;
}

gpt_buf *gpt_mem_alloc(gpt_mem *m, const char *name, size_t bytes, gpt_mem_kind kind) {
    char a[32], b[32], c[32];
    if (bytes == 0) bytes = 1;
    uint64_t charged = ((uint64_t)bytes + GPT_MEM_ALIGN - 1) & ~(uint64_t)(GPT_MEM_ALIGN - 1);
    if (m->budget && m->in_use + charged > m->budget) {
        snprintf(m->err, sizeof m->err,
                 "out of device budget allocating '%s' (%s): %s of the %s budget in use",
                 name, gpt_fmt_bytes(bytes, a, sizeof a), gpt_fmt_bytes(m->in_use, b, sizeof b),
                 gpt_fmt_bytes(m->budget, c, sizeof c));
        return NULL;
    }
    gpt_buf *bf = calloc(1, sizeof *bf);
    if (!bf) { snprintf(m->err, sizeof m->err, "host malloc failed for '%s'", name); return NULL; }
    char berr[400] = "";
    if (m->be.alloc_kind ? m->be.alloc_kind(m->be.user, bytes, (int)kind, &bf->ptr, &bf->impl, berr, sizeof berr)
                         : m->be.alloc(m->be.user, bytes, &bf->ptr, &bf->impl, berr, sizeof berr)) {
        snprintf(m->err, sizeof m->err, "allocating '%s' (%s) from %s: %s", name,
                 gpt_fmt_bytes(bytes, a, sizeof a), m->be.name, berr);
        free(bf);
        return NULL;
    }
    snprintf(bf->name, sizeof bf->name, "%s", name);
    bf->bytes = bytes;
    bf->charged = charged;
    bf->refs = 1;
    bf->kind = kind;
    m->in_use += charged;
    if (m->in_use > m->peak) m->peak = m->in_use;
    m->kind_in_use[kind] += charged;
    if (m->kind_in_use[kind] > m->kind_peak[kind]) m->kind_peak[kind] = m->kind_in_use[kind];
    if (is_act(kind)) {
        m->act_in_use += charged;
        if (m->act_in_use > m->act_peak) m->act_peak = m->act_in_use;
    }
    m->allocs++;
    m->live++;
    return bf;
}

gpt_buf *gpt_mem_calloc(gpt_mem *m, const char *name, size_t bytes, gpt_mem_kind kind) {
    gpt_buf *b = gpt_mem_alloc(m, name, bytes, kind);
    if (b) (m->ops ? m->ops : &gpt_ops_cpu)->zero(b->ptr, bytes);
    return b;
}

void gpt_buf_ref(gpt_buf *b) { b->refs++; }

void gpt_buf_unref(gpt_mem *m, gpt_buf *b) {
    if (!b) return;
    if (--b->refs > 0) return;
    if (!b->foreign) m->be.free(m->be.user, b->ptr, b->impl);
    m->in_use -= b->charged;
    m->kind_in_use[b->kind] -= b->charged;
    if (is_act(b->kind)) m->act_in_use -= b->charged;
    m->frees++;
    m->live--;
    free(b);
}

void gpt_mem_reset_peak(gpt_mem *m) {
    m->peak = m->in_use;
    m->act_peak = m->act_in_use;
    for (int k = 0; k < GPT_MEM_KIND_COUNT; k++) m->kind_peak[k] = m->kind_in_use[k];
}

const char *gpt_mem_kind_name(gpt_mem_kind k) {
    static const char *names[GPT_MEM_KIND_COUNT] = {"weights", "grads", "adamw", "const",
                                                   "activations", "act-grads", "temp"};
    return (unsigned)k < GPT_MEM_KIND_COUNT ? names[k] : "?";
}

char *gpt_fmt_bytes(uint64_t bytes, char *buf, size_t len) {
    if (bytes < 1024) snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    else if (bytes < (1ull << 20)) snprintf(buf, len, "%.2f KiB", bytes / 1024.0);
    else if (bytes < (1ull << 30)) snprintf(buf, len, "%.2f MiB", bytes / 1048576.0);
    else snprintf(buf, len, "%.2f GiB", bytes / 1073741824.0);
    return buf;
}
