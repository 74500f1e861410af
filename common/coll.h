/* coll.h - arithmetic and group structure of the collectives.
 *
 * The worker moves the bytes; these pure functions say who talks to whom
 * and how contributions combine, so the same code is unit-tested here and
 * run by every worker. A "group" is the set of a computation's shards that
 * take part together: those whose slice coordinates agree on every axis NOT
 * listed in mesh_axes (mesh_axes == 0 means all axes, i.e. the whole
 * slice). Members are listed in increasing shard index; `pos` is a shard's
 * position among them. */
#ifndef ATOLL_COLL_H
#define ATOLL_COLL_H

#include "compiler.h"
#include "tensor.h"

/* Fills members[] (capacity >= nshards of the slice) with the shard indexes
 * of `shard`'s group; sets *n and *pos. Returns 0, or -1 on bad arguments. */
int coll_group(const shape_t *slice_shape, unsigned mesh_axes, int shard,
               int *members, int *n, int *pos);

/* The same group in O(rank), for one shard: *n members, the shard's
 * position *pos among them and the group's lowest member *leader (which
 * names the group). Agrees with coll_group(). Returns 0 or -1. */
int coll_group_of(const shape_t *slice_shape, unsigned mesh_axes, int shard, int *leader,
                  int *n, int *pos);
/* The member at position pos (0..n-1) of the group whose lowest member is
 * leader: members[pos] of coll_group(). -1 on bad arguments. */
int coll_group_member(const shape_t *slice_shape, unsigned mesh_axes, int leader, int pos);

/* For an op, which group positions this shard sends to and what piece.
 * The exchange patterns (v0, direct):
 *   all_reduce, all_gather, reduce_scatter: every member sends its whole
 *     argument to every other member.
 *   ppermute: member p sends its argument to member (p + shift) mod n, or
 *     to the target its "pairs" give it (none: it sends nothing).
 *   all_to_all: member p sends chunk j (of split_axis) to member j.
 * coll_piece() returns a new tensor (caller frees) holding what position
 * `pos` sends to position `dst`, or NULL on OOM. */
tensor_t *coll_piece(const op_t *op, const tensor_t *arg, int n, int pos, int dst);
/* The shape of the piece a member receives from each other member in the
 * direct exchange, given the senders' argument shape (every member's
 * argument has the same compiled shape): the chunk along split_axis for
 * all_to_all, the whole argument otherwise. A receiver checks every
 * message against it before reading it. Returns 0, or -1 when the argument
 * cannot be split n ways. */
int coll_piece_shape(const op_t *op, const shape_t *arg_shape, int n, shape_t *out);
/* The position whose piece `pos` receives in a ppermute: (pos - shift)
 * mod n, with a true modulo for any shift (negative or beyond n), or the
 * source "pairs" give it; -1 on bad arguments (n not the group size the
 * pairs were compiled for) or when no pair targets pos (it gets zeros). */
int coll_ppermute_source(const op_t *op, int n, int pos);
/* The position `pos` sends its argument to in a ppermute: (pos + shift)
 * mod n, or its pair's target; -1 on bad arguments or when it sends none. */
int coll_ppermute_target(const op_t *op, int n, int pos);

/* Combines the pieces this shard holds, indexed by source group position
 * (pieces[pos] is the shard's own contribution or own chunk), into the op's
 * result. For ppermute pieces has one entry: the received tensor, or NULL
 * when no member sends to this one (the result is then zeros of op->shape).
 * Allocates *out. Returns 0 or -1 (a missing piece, or shapes that do not
 * agree: never for pieces made by coll_piece() from compiled shapes).
 * Results are deterministic: reductions run in position order 0..n-1 in
 * f32, concatenations place position p's block p-th. For all_to_all,
 * pieces[pos] may be either coll_piece(pos -> pos) or the shard's whole
 * argument (its own chunk is then cut from it). Pieces are borrowed. */
int coll_combine(const op_t *op, const tensor_t *const *pieces, int n, int pos,
                 tensor_t **out);

/* Ring schedules, for collectives on large tensors (n members; position p
 * sends only to p+1 and receives only from p-1, mod n, so every link carries
 * the same bytes whatever n is).
 *
 * coll_ring_chunk(): a flat buffer of numel elements cut into n nearly
 * equal chunks (the first numel % n get one extra element); chunk c covers
 * [*off, *off + *len). *len is 0 when numel < n.
 *
 * Reduce-scatter step s (0..n-2): p sends chunk coll_ring_send_chunk(n,p,s)
 * and receives chunk coll_ring_recv_chunk(n,p,s), which it reduces into its
 * own copy. After n-1 steps p holds chunk coll_ring_owned(n,p) fully
 * reduced. All-gather step s (0..n-2): p sends chunk
 * coll_ring_send_chunk(n, p + 1, s) (starting with the one it owns) and
 * stores chunk coll_ring_recv_chunk(n, p + 1, s). A ring all_gather of
 * whole blocks uses the reduce-scatter indexes on blocks instead of chunks.
 * Positions may be given unreduced (any int): results are taken mod n. */
void coll_ring_chunk(int64_t numel, int n, int c, int64_t *off, int64_t *len);
int coll_ring_send_chunk(int n, int pos, int step);   /* (pos - step) mod n */
int coll_ring_recv_chunk(int n, int pos, int step);   /* (pos - step - 1) mod n */
int coll_ring_owned(int n, int pos);                  /* (pos + 1) mod n */
/* all_reduce with the ring's summation order, whatever moved the bytes:
 * chunk c (coll_ring_chunk of the flattened tensor) of the result is the
 * left fold reduce(...reduce(pieces[c], pieces[c+1])..., pieces[c+n-1])
 * over positions mod n, which is exactly what the ring reduce-scatter
 * computes (each step folds the received partial into the next member's
 * own chunk; reduce is commutative). pieces[0..n-1] are the members'
 * contributions in position order, all of one shape; borrowed. Allocates
 * *out. Returns 0 or -1 (OOM, a missing piece or shapes that differ). */
int coll_fold_ring(reduce_kind_t k, const tensor_t *const *pieces, int n, tensor_t **out);
/* dst[i] = reduce(dst[i], src[i]) for i < count. */
void coll_reduce_into(reduce_kind_t k, float *dst, const float *src, int64_t count);

#endif
