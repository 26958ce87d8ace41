/* mem.h: the reference trainer's memory interface. Every byte of model memory (weights,
 * gradients, AdamW moments, activations, activation gradients, temporaries) is a named,
 * reference-counted gpt_buf from a gpt_mem, so that the backing store is pluggable:
 *
 *   - gpt_mem_init_malloc: plain malloc under a byte budget (the reference);
 *   - gpt_mem_init_ss:     the smartswap caching allocator (ss_alloc_malloc) on a device
 *                          such as cpu-sim (gpt/mem-ss.c).
 *
 * Both count bytes in use and the peak, per kind, rounded up to GPT_MEM_ALIGN (the
 * allocator's 256-byte alignment), so the figures of the two backends agree.
 *
 * Ownership: gpt_mem_alloc returns a buffer with one reference; gpt_buf_ref adds one;
 * gpt_buf_unref drops one and frees the memory at zero. A buffer never outlives its gpt_mem.
 * Errors: gpt_mem_alloc returns NULL and writes the reason (name, size, budget, in use) into
 * mem->err; nothing is printed.
 */
#ifndef GPT_MEM_H
#define GPT_MEM_H

#include <stddef.h>
#include <stdint.h>

#define GPT_MEM_ALIGN 256

typedef enum gpt_mem_kind {
    GPT_MEM_WEIGHT = 0,  /* parameters */
    GPT_MEM_GRAD,        /* parameter gradients (created at the first backward) */
    GPT_MEM_OPTIM,       /* AdamW moments (created at the first update) */
    GPT_MEM_CONST,       /* RoPE tables */
    GPT_MEM_ACT,         /* forward outputs, saved tensors */
    GPT_MEM_AGRAD,       /* activation gradients in backward */
    GPT_MEM_TEMP,        /* scratch of one operator */
    GPT_MEM_KIND_COUNT
} gpt_mem_kind;

typedef struct gpt_buf {
    char     name[48];   /* "L3.attn.q", "grad.wte", ... */
    size_t   bytes;      /* requested size */
    uint64_t charged;    /* bytes counted: size rounded up to GPT_MEM_ALIGN */
    void    *ptr;        /* host-addressable memory (cpu-sim device memory is host memory) */
    void    *impl;       /* backend handle (ss_block_t * for the smartswap backend) */
    int      refs;
    int      kind;       /* gpt_mem_kind */
    int      foreign;    /* 1: the memory was handed over (a smartswap context freed it): the
                            last unref frees only the struct (the bytes still leave the count) */
    int      ext_refs;   /* saves of this buffer held by a context (tape-swap.c) */
    uint64_t ext;        /* the context's handle while ext_refs > 0 */
} gpt_buf;

/* A backing store: alloc returns 0 and sets *ptr and *impl, or non-zero with a message in err. */
typedef struct gpt_mem_backend {
    const char *name;    /* "malloc", "smartswap-alloc" */
    void *user;
    int  (*alloc)(void *user, size_t bytes, void **ptr, void **impl, char *err, size_t errlen);
    void (*free)(void *user, void *ptr, void *impl);
    void (*destroy)(void *user);   /* may be NULL */
    /* (optional; NULL: alloc) alloc with the buffer's gpt_mem_kind, so that the backend can
     * place persistent memory (weights, gradients, optimizer state, constants) apart from
     * per-step memory (activations, their gradients, temporaries) */
    int  (*alloc_kind)(void *user, size_t bytes, int kind, void **ptr, void **impl, char *err,
                       size_t errlen);
} gpt_mem_backend;

struct gpt_ops;

typedef struct gpt_mem {
    gpt_mem_backend be;
    /* where the memory is and which kernels run on it (ops.h); NULL: gpt_ops_cpu (host memory).
     * gpt_mem_calloc zeroes through it; gpt_model_init takes its kernels from it. */
    const struct gpt_ops *ops;
    uint64_t budget;                         /* 0 = unlimited; checked before the backend */
    uint64_t in_use, peak;                   /* all kinds */
    uint64_t kind_in_use[GPT_MEM_KIND_COUNT];
    uint64_t kind_peak[GPT_MEM_KIND_COUNT];
    uint64_t act_in_use, act_peak;           /* ACT + AGRAD + TEMP */
    uint64_t allocs, frees, live;
    char     err[512];
} gpt_mem;

/* Plain malloc (64-byte aligned, uninitialised) under budget (0 = unlimited). */
void gpt_mem_init_malloc(gpt_mem *m, uint64_t budget);
/* Any backend. */
void gpt_mem_init_backend(gpt_mem *m, const gpt_mem_backend *be, uint64_t budget);
/* Calls the backend's destroy; live buffers are a caller bug (returns their count). */
uint64_t gpt_mem_destroy(gpt_mem *m);

/* A buffer of `bytes` (> 0) named name (truncated to 47 chars), one reference; NULL on error. */
gpt_buf *gpt_mem_alloc(gpt_mem *m, const char *name, size_t bytes, gpt_mem_kind kind);
/* The same, zero-filled (through m->ops: device memory is zeroed on the device). */
gpt_buf *gpt_mem_calloc(gpt_mem *m, const char *name, size_t bytes, gpt_mem_kind kind);
void gpt_buf_ref(gpt_buf *b);
/* NULL is a no-op. */
void gpt_buf_unref(gpt_mem *m, gpt_buf *b);

/* Resets the peaks to what is in use now (per step peaks). */
void gpt_mem_reset_peak(gpt_mem *m);

const char *gpt_mem_kind_name(gpt_mem_kind k);
/* "1.50 MiB" into buf; returns buf. */
char *gpt_fmt_bytes(uint64_t bytes, char *buf, size_t len);

#endif /* GPT_MEM_H */
