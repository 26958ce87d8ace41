/* tape-swap.h: gpt_hooks (tape.h) that hand every saved tensor's block to a smartswap context
 * in SS_MEM_SMARTSWAP mode (ss_ctx_save_block): from the save until the last release, the block
 * belongs to the context, which may copy it to host memory and free it (once the executor is
 * switched on); backward reads it only through ss_ctx_load, which may return another pointer.
 *
 * The forward hands a buffer to the hooks only after its own last use (model.c), so nothing
 * reads the block behind the context's back. A buffer saved by several operators is given to
 * the context once; the hooks count its saves (gpt_buf.ext_refs) and release it at the last.
 * When the context releases a block, the buffer becomes `foreign`: gpt_mem stops counting it
 * and frees only its struct.
 *
 * The context is created here on the device and allocator of a gpt_mem made by
 * gpt_mem_init_ss. Without the executor it is a pass-through (nothing moves), which is what the
 * tests check now; gpt_ssswap.ctx is where the executor is switched on.
 */
#ifndef GPT_TAPE_SWAP_H
#define GPT_TAPE_SWAP_H

#include "smartswap.h"
#include "tape.h"

typedef struct gpt_ssswap {
    gpt_mem        *mem;
    ss_ctx_t       *ctx;
    gpt_buf       **slots;       /* hooks handle - 1 -> buffer; NULL once released */
    size_t          nslots, cap;
    const char     *names[32];
    uint32_t        ids[32];
    int             nnames;
    uint64_t        op_hash, ops, saves, blocks, saved_bytes;   /* this iteration */
    uint64_t        block_bytes; /* this iteration: bytes of the distinct blocks handed to the
                                    context (what the link would move to swap them all) */
    uint64_t        dropped, dropped_bytes;   /* this iteration: blocks the plan recomputes
                                    (freed at their save; backward rebuilds them, model.c) */
    ss_iter_report  last;
    char            err[256];
} gpt_ssswap;

/* Swap or recompute (docs/trainer.md): every rebuildable save's recipe goes to the context
 * (ss_ctx_recomputable) at its first load; when the executor matched a save to a recompute entry
 * (ss_ctx_recompute_planned), the block is released at once and backward rebuilds it. Whether
 * the plan may recompute is the executor's choice (ss_exec_config.hybrid). */

/* 0, or non-zero with the reason in s->err (mem not made by gpt_mem_init_ss, context errors). */
int gpt_ssswap_init(gpt_ssswap *s, gpt_mem *mem, const ss_options *opts);
gpt_hooks gpt_hooks_ssswap(gpt_ssswap *s);
/* Releases what is still held and frees the context. */
void gpt_ssswap_free(gpt_ssswap *s);

#endif /* GPT_TAPE_SWAP_H */
