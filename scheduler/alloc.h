/* alloc.h - topology-aware gang allocation of slices on island meshes.
 *
 * Pure data structure, no I/O and no locks: the scheduler thread owns the
 * alloc_island_t objects it builds from the store, so tests drive it
 * directly.
 *
 * Invariants:
 *  - a device is in exactly one state: ALLOC_FREE, ALLOC_BUSY, ALLOC_DOWN;
 *  - a slice is a contiguous, axis-aligned box of FREE devices of one
 *    island; a lower-rank slice is padded with size-1 axes (axis order kept,
 *    see compiler_slice_fits) so [4] may land as [1,4] or [4,1];
 *  - alloc_gang() is all-or-nothing: on failure no device changes state.
 * Device indexes are row-major over the island's mesh shape. */
#ifndef ATOLL_ALLOC_H
#define ATOLL_ALLOC_H

#include "../common/tensor.h"

typedef enum alloc_state { ALLOC_FREE = 0, ALLOC_BUSY = 1, ALLOC_DOWN = 2 } alloc_state_t;

typedef struct alloc_island alloc_island_t;   /* opaque */

/* New island, every device FREE. name is copied. NULL on OOM or a bad
 * shape (rank outside 1..3, a dim < 1, more than 4096 devices in all). */
alloc_island_t *alloc_island_new(const char *name, const shape_t *mesh);
void alloc_island_free(alloc_island_t *isl);
const char *alloc_island_name(const alloc_island_t *isl);
const shape_t *alloc_island_shape(const alloc_island_t *isl);
int64_t alloc_island_size(const alloc_island_t *isl);
void alloc_island_set(alloc_island_t *isl, int64_t device, alloc_state_t st);
alloc_state_t alloc_island_get(const alloc_island_t *isl, int64_t device);
/* Device count of the largest FREE box, and its shape (padded to the
 * island's rank; all dims 0 when nothing is free) when `shape` is not NULL.
 * Used for fragmentation scoring and for "why is this job waiting"
 * messages. -1 (shape untouched) when out of memory. */
int64_t alloc_largest_free(const alloc_island_t *isl, shape_t *shape);

typedef struct alloc_request {
    shape_t shape;              /* slice mesh shape, rank 1..3 */
    const char *island;         /* NULL or "" = any island */
} alloc_request_t;

typedef struct alloc_placement {
    int island;                 /* index into the islands array given */
    int64_t origin[TENSOR_MAX_RANK];  /* island coordinates of the box corner */
    shape_t box;                /* box shape in island rank (slice padded with 1s) */
    int64_t *devices;           /* nshards island device indexes, in slice
                                   row-major (shard) order; owned, free with
                                   alloc_placements_release() */
    int nshards;
} alloc_placement_t;

#define ALLOC_OK 0
#define ALLOC_ENOSPACE 1        /* does not fit now; may later */
#define ALLOC_ENOMEM (-1)

/* Gang-allocates every request at once. On ALLOC_OK fills out[0..nreq-1]
 * (out[i] is for reqs[i]) and marks their devices BUSY; the caller releases
 * out with alloc_placements_release(). Requests are placed largest first;
 * each takes the feasible box that shrinks its island's largest free box
 * the least (so, on one island, the one after which the largest free box is
 * biggest: least fragmentation), ties to the bigger free box left, then
 * the lowest island index, then the lowest origin (row-major). A bounded depth-first search over the best
 * few boxes per request finds gangs that this greedy choice alone would
 * miss. A request pinned to an unknown island, or of higher rank than every
 * island it may use, never fits. On failure (ALLOC_ENOSPACE, ALLOC_ENOMEM)
 * nothing changes and out holds no memory to release. nreq == 0 is
 * ALLOC_OK. */
int alloc_gang(alloc_island_t *const *islands, int nislands,
               const alloc_request_t *reqs, int nreq, alloc_placement_t *out);
void alloc_placements_release(alloc_placement_t *pl, int n);

/* Would the requests fit if every device of every island were FREE? (The
 * "can never fit" check behind 422.) Returns 1 or 0; works on temporary
 * copies and never modifies the islands. Out of memory answers 1, so a job
 * is never rejected for that reason. */
int alloc_ever_fits(alloc_island_t *const *islands, int nislands,
                    const alloc_request_t *reqs, int nreq);

#endif
