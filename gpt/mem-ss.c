/* mem-ss.c: the smartswap-allocator backend of the trainer's memory interface (mem-ss.h). */
#include "mem-ss.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ss_backend {
    ss_device_t *dev;
    ss_alloc_t  *alloc;
    ss_status    free_err;       /* the first failed ss_alloc_free (the free slot returns void) */
    uint64_t     free_errs;
} ss_backend;

/* Weights, gradients, optimizer state and constants live across steps; the rest is per step. */
static ss_lifetime lifetime_of(int kind) {
    return kind == GPT_MEM_ACT || kind == GPT_MEM_AGRAD || kind == GPT_MEM_TEMP
               ? SS_LIFETIME_ITERATION : SS_LIFETIME_PERSISTENT;
}

static int ssb_alloc_kind(void *user, size_t bytes, int kind, void **ptr, void **impl, char *err,
                          size_t errlen) {
    ss_backend *s = user;
    if (s->free_err != SS_OK) {
        /* a release failed (a block freed twice, or a guard overrun found by the device): the
         * memory's state is wrong, so nothing more is handed out */
        snprintf(err, errlen, "an earlier ss_alloc_free failed: %s (%llu failed frees)",
                 ss_status_str(s->free_err), (unsigned long long)s->free_errs);
        return 1;
    }
    ss_block_t *b = NULL;
    ss_status st = ss_alloc_malloc_tagged(s->alloc, bytes, lifetime_of(kind), &b);
    if (st != SS_OK) {
        char why[320] = "";
        if (st == SS_ERR_OOM) ss_alloc_last_oom(s->alloc, why, sizeof why);
        if (why[0]) {
            snprintf(err, errlen, "ss_alloc_malloc: %s", why);
        } else {
            ss_alloc_stats as;
            memset(&as, 0, sizeof as);
            ss_alloc_get_stats(s->alloc, &as);
            snprintf(err, errlen, "ss_alloc_malloc: %s (allocator: %llu bytes in use, %llu reserved, budget %llu)",
                     ss_status_str(st), (unsigned long long)as.in_use_bytes, (unsigned long long)as.reserved_bytes,
                     (unsigned long long)as.budget_bytes);
        }
        return 1;
    }
    *ptr = ss_block_ptr(b);
    *impl = b;
    return 0;
}

static int ssb_alloc(void *user, size_t bytes, void **ptr, void **impl, char *err, size_t errlen) {
    return ssb_alloc_kind(user, bytes, GPT_MEM_ACT, ptr, impl, err, errlen);
}

static void ssb_free(void *user, void *ptr, void *impl) {
    ss_backend *s = user;
    (void)ptr;
    ss_status st = ss_alloc_free(s->alloc, impl);
    if (st != SS_OK) {
        if (s->free_err == SS_OK) s->free_err = st;
        s->free_errs++;
    }
}

ss_status gpt_mem_ss_free_status(const gpt_mem *m) {
    return m->be.alloc == ssb_alloc ? ((ss_backend *)m->be.user)->free_err : SS_OK;
}

static void ssb_destroy(void *user) {
    ss_backend *s = user;
    if (s->alloc) ss_alloc_destroy_force(s->alloc);
    if (s->dev) ss_device_close(s->dev);
    free(s);
}

int gpt_mem_init_ss(gpt_mem *m, const char *name, const ss_options *opts, uint64_t budget, char *err,
                    size_t errlen) {
    return gpt_mem_init_ss_ex(m, name, opts, budget, 0, err, errlen);
}

uint64_t gpt_mem_segment_for(uint64_t budget, uint64_t state) {
    if (!budget) return 0;
    uint64_t room = budget > state ? budget - state : 0;
    uint64_t seg = 256;    /* the smallest: SS_ALLOC_ALIGN (mem-ss.h) */
    while (seg < (2u << 20) && seg * 2 <= room / 32) seg *= 2;
    return seg;
}

uint64_t gpt_mem_segment_for_run(uint64_t budget, uint64_t state, uint64_t min_budget) {
    if (budget && min_budget && budget < 2 * min_budget) return 256;
    return gpt_mem_segment_for(budget, state);
}

uint64_t gpt_mem_segment_for_mode(uint64_t budget, uint64_t state, uint64_t min_budget, int hybrid) {
    if (budget && hybrid) return 256;
    return gpt_mem_segment_for_run(budget, state, min_budget);
}

uint64_t gpt_plan_budget(uint64_t budget, uint64_t state, double headroom) {
    if (budget <= state || !(headroom > 0)) return budget;
    return budget - (uint64_t)((double)(budget - state) * headroom);
}

int gpt_mem_init_ss_ex(gpt_mem *m, const char *name, const ss_options *opts, uint64_t budget,
                       uint64_t segment_bytes, char *err, size_t errlen) {
    ss_options o = opts ? *opts : ss_options_default();
    if (budget && o.sim_capacity_bytes < budget) o.sim_capacity_bytes = budget;
    ss_backend *s = calloc(1, sizeof *s);
    if (!s) { snprintf(err, errlen, "out of host memory"); return 1; }
    ss_status st = ss_device_open(name, &o, &s->dev);
    if (st != SS_OK) {
        snprintf(err, errlen, "cannot open device '%s': %s", name, ss_status_str(st));
        free(s);
        return 1;
    }
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = budget;
    if (segment_bytes) c.segment_bytes = segment_bytes;
    c.granule_bytes = o.granule_bytes;   /* option granule (SMARTSWAP_GRANULE): 0 = segments */
    st = ss_alloc_new(s->dev, &c, &s->alloc);
    if (st != SS_OK) {
        snprintf(err, errlen, "cannot create the allocator on '%s': %s", name, ss_status_str(st));
        ss_device_close(s->dev);
        free(s);
        return 1;
    }
    gpt_mem_backend be = {"smartswap-alloc", s, ssb_alloc, ssb_free, ssb_destroy, ssb_alloc_kind};
    gpt_mem_init_backend(m, &be, budget);
    return 0;
}

ss_alloc_t *gpt_mem_ss_alloc(const gpt_mem *m) {
    return m->be.alloc == ssb_alloc ? ((ss_backend *)m->be.user)->alloc : NULL;
}

ss_device_t *gpt_mem_ss_device(const gpt_mem *m) {
    return m->be.alloc == ssb_alloc ? ((ss_backend *)m->be.user)->dev : NULL;
}
