/* tape.h: the seam between the trainer and whoever keeps its saved tensors.
 *
 * The trainer reports, in eager order:
 *   iter_begin(step) .. op(name, site) for every operator, forward and backward ..
 *   save(buf, info) -> handle for every tensor an operator keeps for backward ..
 *   load(handle) -> pointer when backward needs it .. release(handle) when it is done .. iter_end
 *
 * gpt_hooks is a table of those calls. gpt_hooks_keep() gives the reference implementation:
 * save keeps the buffer resident (takes a reference), load returns its pointer, release drops
 * the reference; it also folds every op into a 64-bit sequence hash and counts saved bytes. The
 * smartswap framework API (ss_ctx_* in include/smartswap.h) plugs in here: its save may copy the
 * bytes to host and free the block, its load may bring them back into a new block, so backward
 * must read saved data only through the pointer load returns, and forward must not touch a
 * saved buffer after it dropped its own reference.
 *
 * Ownership: save takes its own reference to buf (the caller keeps its own); release drops it.
 * Errors: save and load return 0 or non-zero with a message in the hooks' error buffer.
 */
#ifndef GPT_TAPE_H
#define GPT_TAPE_H

#include "mem.h"

/* How a tensor's elements are stored (gpt_config.dtype for activations; everything else fp32). */
typedef enum gpt_dtype { GPT_DTYPE_F32 = 0, GPT_DTYPE_BF16 } gpt_dtype;

/* What smartswap matches a saved tensor by: operator, call site, shape, bytes, ordinal. */
typedef struct gpt_save_info {
    const char *op;        /* operator that saves it: "matmul", "attention", ... */
    uint64_t    site;      /* call site (gpt/model.c line, tagged) */
    int         ndim;
    int64_t     shape[4];
    uint64_t    bytes;     /* as stored: 2 per element in bf16 */
    int         dtype;     /* gpt_dtype of the stored elements */
    int         ordinal;   /* index among the tensors this operator saves */
    int         layer;     /* -1 outside the layers */
    int         rebuildable;   /* 1: the model can rebuild it by re-running the kernel call that
                                  made it (from other saved tensors), so a store may drop it
                                  (dropped below) instead of keeping or swapping it */
    int         span_member;   /* 1: made inside a decoder layer whose input is registered as a
                                  span (recipe_span): the model can rebuild it by re-running the
                                  whole layer, so a store may drop it (with every other member
                                  of that layer: the model re-runs a layer when a member without
                                  a recipe of its own was dropped) */
} gpt_save_info;

typedef struct gpt_hooks {
    void *user;
    void (*iter_begin)(void *user, int step);
    void (*iter_end)(void *user);
    void (*op)(void *user, const char *name, uint64_t site);
    int  (*save)(void *user, gpt_buf *buf, const gpt_save_info *info, uint64_t *handle);
    int  (*load)(void *user, uint64_t handle, void **ptr);
    void (*release)(void *user, uint64_t handle);
    const char *(*error)(void *user);          /* last error message */
    /* Optional (NULL: never dropped). 1 when the store dropped the data of a rebuildable save
     * (gpt_save_info.rebuildable): backward then never loads it but rebuilds it with the
     * identical kernel call; release is still called. */
    int  (*dropped)(void *user, uint64_t handle);
    /* Optional. How a rebuildable save is rebuilt, told once per tensor at its first load in
     * backward (when its sources' handles exist): from the saves src[0 .. nsrc) (handles) by
     * re-running the kernel calls of the iteration's operators ops[0 .. nop) (0 = the first op
     * reported since iter_begin). For a store that plans (tape-swap.c). */
    void (*recipe)(void *user, uint64_t handle, const uint64_t *src, int nsrc, const uint32_t *ops,
                   int nop);
    /* Optional. The save `handle` is the input of a decoder layer whose operators are the
     * iteration's op_first .. op_last: re-running them from it rebuilds every other tensor saved
     * while they ran (gpt_save_info.span_member). Told once per layer, after the layer's forward
     * (ss_ctx_recomputable_span). */
    void (*recipe_span)(void *user, uint64_t handle, uint32_t op_first, uint32_t op_last);
} gpt_hooks;

/* The reference store: everything stays resident. */
typedef struct gpt_keep {
    gpt_mem  *mem;
    gpt_buf **slots;        /* handle - 1 -> buffer; NULL once released */
    size_t    nslots, cap;
    uint64_t  op_hash;      /* FNV-1a over (name, site) of this iteration's ops */
    uint64_t  ops, saves, loads, saved_bytes;   /* this iteration */
    int       drop_rebuildable;   /* tests: drop every rebuildable save (gpt_save_info.rebuildable)
                                     at once, so backward rebuilds each of them */
    int       drop_spans;         /* tests: drop every save of a layer but its input
                                     (gpt_save_info.span_member), so backward re-runs each layer */
    uint64_t  dropped_saves;      /* this iteration: saves dropped so */
    char      err[160];
} gpt_keep;

/* Hooks backed by k (which must outlive them). */
void gpt_keep_init(gpt_keep *k, gpt_mem *mem);
gpt_hooks gpt_hooks_keep(gpt_keep *k);
/* Releases what is still held (after an error mid-iteration) and frees the slot table. */
void gpt_keep_free(gpt_keep *k);

#endif /* GPT_TAPE_H */
