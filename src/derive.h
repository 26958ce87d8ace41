/* derive.h: profiles of a known operator structure at new sizes, without a detailed iteration.
 *
 * A structure is an operator sequence without sizes: the light profiler's hash (names and call
 * sites only), the operator count, and the producing operator of each saved tensor. A detailed
 * profile of one size of a structure carries everything the planner needs; a profile for another
 * size of the same structure is derived from it and from the saved tensors' shapes as the light
 * iteration saw them (ssi_stage records dtype, shape and bytes of every save: the shapes are the
 * framework's, never guessed from matching values):
 *  - bytes and shapes of the saved tensors: the observed ones;
 *  - memory after and peak of each operator: the saved bytes live at it as observed, plus the
 *    rest of its known level (activations not saved, gradients, temporaries inside the operator:
 *    mem_peak - mem_after) scaled by the ratio of the saved bytes live at it, new over old;
 *  - time of each operator: its measured time times cost(new) / cost(old), cost being the bytes
 *    of the tensors it produces or uses (its FLOPs, when recorded, scale by the same ratio):
 *    measured per operator, not a fitted law, so jumps between sizes stay where they were.
 */
#ifndef SS_DERIVE_H
#define SS_DERIVE_H

#include "profile.h"

/* Whether obs[0 .. m) has src's structure: m == src->ntensors (when whole) or m <= it, and each
 * observed tensor's producer equals src's tensor of the same ordinal. */
int ssi_derive_same_structure(const ss_profile *src, const ss_prof_tensor *obs, uint32_t m, int whole);

/* In place: tensors [0, m) of p take obs's bytes, dtype and shape; every operator's mem_after,
 * mem_peak, seconds and flops move as described above; iter_seconds scales by the summed
 * operator times. SS_ERR_INVALID when obs does not have p's structure; SS_ERR_HOST_OOM. */
ss_status ssi_derive_apply(ss_profile *p, const ss_prof_tensor *obs, uint32_t m);

/* A new profile (*out, the caller's) for src's structure at obs's sizes (m = src->ntensors),
 * with key (seq_hash, size_sig) and desc set. */
ss_status ssi_derive_profile(const ss_profile *src, const ss_prof_tensor *obs, uint32_t m, uint64_t seq_hash,
                             uint64_t size_sig, ss_profile **out);

/* The largest unconstrained device demand of p: base, every mem_after and mem_peak. */
uint64_t ssi_profile_peak(const ss_profile *p);

#endif /* SS_DERIVE_H */
