/* gspmd_propagate.h - stages 1 and 2 of the partitioner: each op's
 * "sharding" annotation parsed, then shardings propagated to every value;
 * and the einsum view of ops that lowering shares.
 *
 * Work on the lowering state (gspmd_state.h): read L->g, L->m and the
 * document's ops, write L->S (one sharding per value of the global
 * program). Nothing is allocated. */
#ifndef ATOLL_GSPMD_PROPAGATE_H
#define ATOLL_GSPMD_PROPAGATE_H

#include <jansson.h>
#include <stdint.h>

#include "compiler_types.h"
#include "gspmd_state.h"

#define LETTERS 26

/* Letter -> mesh axes for an einsum. `set` marks letters assigned. */
typedef struct lett {
    uint32_t set;
    unsigned taken;
    uint8_t n[LETTERS];
    uint8_t ax[LETTERS][MESH_MAX_RANK];
} lett_t;

/* Stage 1: op j's "sharding" (sj) into *s, checked against the mesh's
 * named axes and the op's global shape. 0 or 400 (lw_fail). */
int ann_parse(lw_t *L, int j, const json_t *sj, shd_t *s);
/* Stage 2: every value not `known` gets the sharding its operands or its
 * users imply, or replicated; sets L->S for all. */
void prop_run(lw_t *L, uint8_t *known);
/* The op (einsum or matmul) as an einsum: matmul is "ik,kj->ij". */
void ein_of_op(const op_t *op, einsum_t *e);
/* Assigns the letters of one term from a sharding: only split dims, only
 * letters not yet assigned, only axes no letter holds. */
void lett_from(lett_t *t, const uint8_t *letters, int rank, const shd_t *s);
/* The sharding of a term (letters, rank) under t. */
void lett_shd(const lett_t *t, const uint8_t *letters, int rank, shd_t *s);
/* Axes of the letters summed away (in an operand, not in the output). */
unsigned lett_partial(const lett_t *t, const einsum_t *e, int nargs);

#endif
