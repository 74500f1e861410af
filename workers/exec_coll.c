/* exec_coll.c - collectives of a host task: shards of one process combine
 * in memory, processes exchange one packed message per pair.
 *
 * Who needs what (for source shard s at group position ps, group of n):
 *   all_reduce, all_gather, reduce_scatter: every member needs s's whole
 *     argument, so a process that holds any member of s's group gets it
 *     once, whatever the number of its members there;
 *   all_to_all: member j at position pj needs chunk pj of s's argument;
 *   ppermute: member coll_ppermute_target(ps) needs s's argument.
 * The pack from process P to process Q is the concatenation, over P's
 * shards of the slice in increasing order, of the pieces Q needs from each
 * (all_to_all: in Q's members' position order). Both ends derive it from
 * the placement and the compiled plan (pack_walk), so the receiver knows
 * the exact element count before it reads a byte; a pack of any other size
 * fails the task (a hostile or broken peer cannot make us read past it).
 * A pack over TENSOR_MAX_ELEMS travels as several frames (steps).
 *
 * Tag of frame f of op i's pack from proc P to proc Q: (job, attempt,
 * comp, -(1 + i + f * JOB_MAX_OPS), P, Q).
 *
 * Relay (large slices): a whole-argument collective (all_reduce,
 * all_gather, reduce_scatter) over a slice spread on RELAY_MIN_PROCS
 * processes or more does not exchange packs between every pair (P^2
 * endpoints: 262,144 for 512 workers) but through
 * the root, the process of the slice's shard 0: every other process
 * uploads all its shards' arguments (one message, in shard order), the
 * root forwards to each process q the concatenation, over processes p != q
 * in order, of exactly the pack p would have sent q directly. Both ends
 * derive every size from the plan, as above. 2 (P - 1) messages per op
 * instead of P (P - 1); one step more.
 *
 * Results keep the per-shard runtime's bits: every member's contribution
 * is combined by coll_combine() in group position order, and an all_reduce
 * the old runtime ran as a ring sums in the ring's order (coll_fold_ring),
 * whichever way the pieces travelled.
 *
 * Ownership: a coll_t lives on the runner's stack for one op. It owns its
 * index arrays, the all_to_all chunks it cut (temps), the joined
 * multi-frame packs (bufs) and one store reference to each single-frame
 * pack (held); the pieces are views into the arguments (borrowed) or into
 * those packs, valid until coll_release(). Results go to the caller. */
#include "exec_coll.h"

#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "util.h"

typedef struct coll {
    run_t *r;
    const op_t *op;
    int i;
    const shape_t *ss;          /* slice shape */
    unsigned axes;              /* op->mesh_axes */
    const int *proc_of;         /* shard -> proc, from the placement */
    int nprocs, self, n, nl;
    int *lead, *pos;            /* per local shard: its group (lowest member), position */
    int nsh;                    /* shards of the slice */
    int *glead, *gpos;          /* nsh: every shard's group lead and position, found
                                   once per op (the walks below ask for them per
                                   piece: ~80 group lookups a computation at a
                                   4-process relay root) */
    int *gslot;                 /* nsh: row of group_on for a group's lead, else -1 */
    unsigned char *on;          /* ngroups * nprocs: does the group have a member on q?
                                   (whole-argument collectives only) */
    int *start, *list;          /* the slice's shards by proc: list[start[q]..start[q+1]) */
    int relay;                  /* exchange through the root (see above) */
    int root;                   /* proc of shard 0 */
    const float **all;          /* nsh (root in relay mode): every shard's argument */
    int64_t arg_numel, piece_numel;
    const tensor_t *const *args;
    int64_t ready;              /* when every contribution taken so far exists
                                   (tensor_t.ready_us): the local arguments, then
                                   each pack received; packs sent carry it */
    const tensor_t **pieces;    /* nl * n (ppermute: entry 0 only), borrowed or views */
    tensor_t *views;            /* nl * n view structs into received packs */
    tensor_t **temps;           /* nl * n local all_to_all chunks (owned) */
    ostore_obj_t **held;        /* nprocs received frames kept in the store */
    float **bufs;               /* nprocs joined multi-frame packs (owned) */
    void *block;                /* owned: every array above but `on` and `all`,
                                   carved from one allocation (coll_carve) */
} coll_t;

/* One piece of a pack: `numel` floats for member `dst` (a shard) at its
 * pieces position `at`; dst -1: for every member of the source's group on
 * the receiving proc. */
typedef void (*piece_fn)(coll_t *c, int src_shard, int dst, int at, int64_t numel,
                         void *ctx);

static int local_index(const coll_t *c, int shard)
{
    int lo = 0, hi = c->nl - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, k = c->r->t->shards[mid];
        if (k == shard)
            return mid;
        if (k < shard)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* Does the group led by `lead` have a member on proc q? */
static int group_on(const coll_t *c, int lead, int q)
{
    return c->gslot[lead] >= 0 && c->on[(size_t)c->gslot[lead] * c->nprocs + q];
}

/* Walks the pieces source shard s (group lead, position ps) sends to proc
 * q, in pack order. Returns their total element count. */
static int64_t pack_walk_shard(coll_t *c, int s, int lead, int ps, int q, piece_fn fn,
                               void *ctx)
{
    int64_t total = 0;
    switch (c->op->code) {
    case OP_ALL_TO_ALL:
        for (int p = 0; p < c->n; p++) {
            int j = coll_group_member(c->ss, c->axes, lead, p);
            if (j >= 0 && c->proc_of[j] == q) {
                if (fn)
                    fn(c, s, j, ps, c->piece_numel, ctx);
                total += c->piece_numel;
            }
        }
        return total;
    case OP_PPERMUTE: {
        int t = coll_ppermute_target(c->op, c->n, ps);
        int j = t < 0 ? -1 : coll_group_member(c->ss, c->axes, lead, t);
        if (j < 0 || j == s || c->proc_of[j] != q)
            return 0;
        if (fn)
            fn(c, s, j, 0, c->arg_numel, ctx);
        return c->arg_numel;
    }
    default:
        if (!group_on(c, lead, q))
            return 0;
        if (fn)
            fn(c, s, -1, ps, c->arg_numel, ctx);
        return c->arg_numel;
    }
}

/* The pack from proc `from` to proc `to`: over the slice's shards on
 * `from` in increasing order. shards_from: those shards. */
static int64_t pack_walk(coll_t *c, const int *shards_from, int count, int to, piece_fn fn,
                         void *ctx)
{
    int64_t total = 0;
    for (int x = 0; x < count; x++) {
        int s = shards_from[x];
        total += pack_walk_shard(c, s, c->glead[s], c->gpos[s], to, fn, ctx);
    }
    return total;
}

/* ---- sending ---- */

typedef struct fill_ctx {
    float *buf;
    int64_t off;
    int oom;
} fill_ctx_t;

static void fill_piece(coll_t *c, int src, int dst, int at, int64_t numel, void *vctx)
{
    fill_ctx_t *f = vctx;
    (void)at;
    if (c->all) {       /* the root's forward: whole arguments of any shard */
        memcpy(f->buf + f->off, c->all[src], (size_t)numel * sizeof *f->buf);
        f->off += numel;
        return;
    }
    const tensor_t *arg = c->args[local_index(c, src)];
    if (c->op->code == OP_ALL_TO_ALL) {
        /* chunk pos(dst) of our argument, cut along split_axis */
        tensor_t *chunk = coll_piece(c->op, arg, c->n, c->gpos[src], c->gpos[dst]);
        if (!chunk) {
            f->oom = 1;
            return;
        }
        memcpy(f->buf + f->off, chunk->data, (size_t)numel * sizeof *f->buf);
        tensor_free(chunk);
    } else {
        memcpy(f->buf + f->off, arg->data, (size_t)numel * sizeof *f->buf);
    }
    f->off += numel;
}

static mbox_tag_t pack_tag(const coll_t *c, int frame, int from, int to)
{
    mbox_tag_t t = {.job = c->r->t->job, .attempt = c->r->t->attempt, .comp = c->r->t->comp,
                    .op = (int32_t)(-(1 + c->i + (int64_t)frame * JOB_MAX_OPS)),
                    .src = from, .dst = to};
    return t;
}

/* Sends a pack of `total` floats as frames of at most TENSOR_MAX_ELEMS. */
static int send_frames(coll_t *c, int q, const float *buf, int64_t total)
{
    const char *to = c->r->t->place->procs[q].addr;
    for (int f = 0; (int64_t)f * TENSOR_MAX_ELEMS < total; f++) {
        int64_t off = (int64_t)f * TENSOR_MAX_ELEMS;
        int64_t len = total - off < TENSOR_MAX_ELEMS ? total - off : TENSOR_MAX_ELEMS;
        tensor_t view = {.shape = {.rank = 1, .dim = {len}}, .data = (float *)buf + off,
                         .ready_us = c->ready};
        mbox_tag_t tag = pack_tag(c, f, c->self, q);
        if (exec_io_send(c->r, to, &tag, &view) != 0)
            return -1;
        if (c->r->env->counters)
            atomic_fetch_add(&c->r->env->counters->packs, 1);
    }
    return 0;
}

static int send_buf(coll_t *c, int q, const float *buf, int64_t total, const char *what)
{
    if (!buf) {
        snprintf(c->r->err, sizeof c->r->err, "op %d: out of memory packing %s", c->i, what);
        return -1;
    }
    return send_frames(c, q, buf, total);
}

/* Relay: a non-root process uploads its shards' arguments, in shard order. */
static int send_upload(coll_t *c)
{
    int64_t total = (int64_t)c->nl * c->arg_numel;
    float *buf = malloc((size_t)total * sizeof(float));
    for (int l = 0; buf && l < c->nl; l++)
        memcpy(buf + (int64_t)l * c->arg_numel, c->args[l]->data,
               (size_t)c->arg_numel * sizeof(float));
    int rc = send_buf(c, c->root, buf, total, "an upload");
    free(buf);
    return rc;
}

/* The relayed pack for q: over procs p != q in order, what p would send q. */
static int64_t forward_walk(coll_t *c, int q, piece_fn fn, void *ctx)
{
    int64_t total = 0;
    for (int p = 0; p < c->nprocs; p++)
        if (p != q)
            total += pack_walk(c, c->list + c->start[p], c->start[p + 1] - c->start[p], q,
                               fn, ctx);
    return total;
}

/* Relay, root: every upload in, then one forward to each other process. */
static const float *take_pack(coll_t *c, int q, int64_t total);
static int relay_root(coll_t *c)
{
    for (int l = 0; l < c->nl; l++)
        c->all[c->r->t->shards[l]] = c->args[l]->data;
    for (int p = 0; p < c->nprocs; p++) {
        int count = c->start[p + 1] - c->start[p];
        if (p == c->self || count == 0)
            continue;
        const float *up = take_pack(c, p, (int64_t)count * c->arg_numel);
        if (!up)
            return -1;
        for (int x = 0; x < count; x++)
            c->all[c->list[c->start[p] + x]] = up + (int64_t)x * c->arg_numel;
    }
    for (int q = 0; q < c->nprocs; q++) {
        int64_t total = q == c->self ? 0 : forward_walk(c, q, NULL, NULL);
        if (total <= 0)
            continue;
        fill_ctx_t f = {.buf = malloc((size_t)total * sizeof(float))};
        if (f.buf)
            forward_walk(c, q, fill_piece, &f);
        int rc = send_buf(c, q, f.buf, total, "a forward");
        free(f.buf);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int whole_arg(const coll_t *c);

/* Whole-argument collectives: the pack to q is the arguments of the local
 * shards whose group has a member on q (sel[l]), in shard order. Returns
 * how many. */
static int pack_select(const coll_t *c, int q, unsigned char *sel)
{
    int k = 0;
    for (int l = 0; l < c->nl; l++)
        k += sel[l] = (unsigned char)group_on(c, c->lead[l], q);
    return k;
}

/* Whole-argument packs without a copy per peer: a pack of one argument is
 * sent from the argument itself, and a pack built for one peer goes to
 * every next peer that takes the same shards (on a whole-slice group,
 * all of them). Same bytes as pack_walk lays out. */
static int send_whole_packs(coll_t *c)
{
    size_t nl = (size_t)c->nl;
    unsigned char *sel = util_zalloc(nl, 1), *built = util_zalloc(nl, 1);
    float *buf = NULL;
    int have = 0, rc = -1;
    if (!sel || !built)
        goto oom;
    for (int q = 0; q < c->nprocs; q++) {
        int k = q == c->self ? 0 : pack_select(c, q, sel);
        if (k == 0)
            continue;
        const float *data = NULL;
        if (k == 1) {
            for (size_t l = 0; l < nl && !data; l++)
                data = sel[l] ? c->args[l]->data : NULL;
        } else {
            if (!have || memcmp(sel, built, nl) != 0) {
                free(buf);
                if (!(buf = malloc((size_t)k * (size_t)c->arg_numel * sizeof *buf)))
                    goto oom;
                int64_t off = 0;
                for (size_t l = 0; l < nl; l++)
                    if (sel[l]) {
                        memcpy(buf + off, c->args[l]->data, (size_t)c->arg_numel * sizeof *buf);
                        off += c->arg_numel;
                    }
                memcpy(built, sel, nl);
                have = 1;
            }
            data = buf;
        }
        if (send_frames(c, q, data, (int64_t)k * c->arg_numel) != 0)
            goto cleanup;
    }
    rc = 0;
    goto cleanup;
oom:
    snprintf(c->r->err, sizeof c->r->err, "op %d: out of memory packing", c->i);
cleanup:
    free(sel);
    free(built);
    free(buf);
    return rc;
}

static int send_packs(coll_t *c)
{
    if (c->relay)
        return c->self == c->root ? relay_root(c) : send_upload(c);
    if (whole_arg(c))
        return send_whole_packs(c);
    const int *mine = c->r->t->shards;
    for (int q = 0; q < c->nprocs; q++) {
        if (q == c->self)
            continue;
        int64_t total = pack_walk(c, mine, c->nl, q, NULL, NULL);
        if (total <= 0)
            continue;
        fill_ctx_t f = {.buf = malloc((size_t)total * sizeof(float))};
        if (f.buf)
            pack_walk(c, mine, c->nl, q, fill_piece, &f);
        int rc = f.buf && !f.oom ? send_frames(c, q, f.buf, total) : -1;
        if (!f.buf || f.oom)
            snprintf(c->r->err, sizeof c->r->err, "op %d: out of memory packing", c->i);
        free(f.buf);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* ---- receiving ---- */

typedef struct place_ctx {
    const float *data;
    int64_t off;
    const shape_t *arg_shape, *piece_shape;
} place_ctx_t;

/* Points the receiving shards' piece slots at a piece inside a pack (or,
 * at the relay's root, at the source's whole argument). */
static void place_piece(coll_t *c, int src, int dst, int at, int64_t numel, void *vctx)
{
    place_ctx_t *p = vctx;
    const shape_t *shape = c->op->code == OP_ALL_TO_ALL ? p->piece_shape : p->arg_shape;
    const float *data = p->data ? p->data + p->off : c->all[src];
    int src_lead = dst < 0 ? c->glead[src] : -1;
    for (int l = 0; l < c->nl; l++) {
        if (dst >= 0 ? c->r->t->shards[l] != dst : c->lead[l] != src_lead)
            continue;
        tensor_t *v = &c->views[(size_t)l * c->n + at];
        *v = (tensor_t){.shape = *shape, .data = (float *)data};
        c->pieces[(size_t)l * c->n + at] = v;
    }
    p->off += numel;
}

/* Takes the frames of proc q's pack (`total` floats) into one buffer.
 * Returns it (borrowed from c->held[q] or c->bufs[q]) or NULL. */
static const float *take_pack(coll_t *c, int q, int64_t total)
{
    run_t *r = c->r;
    int nframes = (int)((total + TENSOR_MAX_ELEMS - 1) / TENSOR_MAX_ELEMS);
    if (nframes > 1 && !(c->bufs[q] = malloc((size_t)total * sizeof(float)))) {
        snprintf(r->err, sizeof r->err, "op %d: out of memory", c->i);
        return NULL;
    }
    for (int f = 0; f < nframes; f++) {
        int64_t off = (int64_t)f * TENSOR_MAX_ELEMS;
        int64_t len = total - off < TENSOR_MAX_ELEMS ? total - off : TENSOR_MAX_ELEMS;
        mbox_tag_t tag = pack_tag(c, f, q, c->self);
        tensor_t *t = NULL;
        if (exec_io_take(r, &tag, &t) != 0)
            return NULL;
        if (t->ready_us > c->ready)
            c->ready = t->ready_us;
        if (t->shape.rank != 1 || t->shape.dim[0] != len) {
            snprintf(r->err, sizeof r->err, "op %d: pack from process %d has %lld elements, "
                     "expected %lld", c->i, q, (long long)shape_numel(&t->shape),
                     (long long)len);
            exec_io_count_bad(r);
            tensor_free(t);
            return NULL;
        }
        if (nframes > 1) {
            memcpy(c->bufs[q] + off, t->data, (size_t)len * sizeof(float));
            tensor_free(t);
            continue;
        }
        ostore_key_t k = exec_io_key(r, OSTORE_PIECE_BASE - c->i, r->t->shards[0]);
        if (!(c->held[q] = ostore_put(r->env->st, &k, t, 1, 0))) {
            snprintf(r->err, sizeof r->err, "out of memory");
            return NULL;
        }
    }
    return nframes > 1 ? c->bufs[q] : ostore_tensor(c->held[q])->data;
}

static int recv_packs(coll_t *c)
{
    shape_t piece_shape;
    const shape_t *arg_shape = &c->args[0]->shape;
    if (coll_piece_shape(c->op, arg_shape, c->n, &piece_shape) != 0) {
        snprintf(c->r->err, sizeof c->r->err, "%s op %d: argument cannot be split %d ways",
                 opcode_name(c->op->code), c->i, c->n);
        return -1;
    }
    place_ctx_t p = {.arg_shape = arg_shape, .piece_shape = &piece_shape};
    if (c->relay) {
        /* The root holds every argument (c->all); the others take one
         * forward, laid out by forward_walk. */
        int64_t total = c->self == c->root ? 0 : forward_walk(c, c->self, NULL, NULL);
        if (total > 0 && !(p.data = take_pack(c, c->root, total)))
            return -1;
        forward_walk(c, c->self, place_piece, &p);
        return 0;
    }
    for (int q = 0; q < c->nprocs; q++) {
        if (q == c->self)
            continue;
        const int *from = c->list + c->start[q];
        int count = c->start[q + 1] - c->start[q];
        int64_t total = pack_walk(c, from, count, c->self, NULL, NULL);
        if (total <= 0)
            continue;
        p.off = 0;
        if (!(p.data = take_pack(c, q, total)))
            return -1;
        pack_walk(c, from, count, c->self, place_piece, &p);
    }
    return 0;
}

/* ---- local contributions and the combine ---- */

/* Piece slots filled from shards of this process (no message). */
static int local_pieces(coll_t *c)
{
    for (int l = 0; l < c->nl; l++) {
        const tensor_t **pc = &c->pieces[(size_t)l * c->n];
        if (c->op->code == OP_PPERMUTE) {
            int ps = coll_ppermute_source(c->op, c->n, c->pos[l]);
            int j = ps < 0 ? -1 : coll_group_member(c->ss, c->axes, c->lead[l], ps);
            int m = j >= 0 && c->proc_of[j] == c->self ? local_index(c, j) : -1;
            if (m >= 0)
                pc[0] = c->args[m];
            continue;
        }
        for (int m = 0; m < c->nl; m++) {
            if (c->lead[m] != c->lead[l])
                continue;
            if (c->op->code != OP_ALL_TO_ALL || m == l) {
                pc[c->pos[m]] = c->args[m];   /* all_to_all: coll_combine cuts own chunk */
                continue;
            }
            tensor_t *chunk = coll_piece(c->op, c->args[m], c->n, c->pos[m], c->pos[l]);
            if (!chunk) {
                snprintf(c->r->err, sizeof c->r->err, "out of memory");
                return -1;
            }
            c->temps[(size_t)l * c->n + c->pos[m]] = chunk;
            pc[c->pos[m]] = chunk;
        }
    }
    return 0;
}

/* The old runtime's ring choice for all_reduce (exec_env.h). */
static int ring_order(const coll_t *c)
{
    return c->op->code == OP_ALL_REDUCE && c->n >= 3 && c->arg_numel >= c->n &&
           c->arg_numel * (int64_t)sizeof(float) >= c->r->env->ring_min_bytes;
}

/* all_reduce and all_gather give every member of a group the same bits
 * (the combine does not depend on the member's position): a local shard
 * whose group an earlier local shard shares copies that one's result
 * instead of combining the group's pieces again. Its index, or -1. */
static int same_result_as(const coll_t *c, int l)
{
    if (c->op->code != OP_ALL_REDUCE && c->op->code != OP_ALL_GATHER)
        return -1;
    for (int m = 0; m < l; m++)
        if (c->lead[m] == c->lead[l])
            return m;
    return -1;
}

static int combine(coll_t *c, tensor_t **outs)
{
    int ring = ring_order(c);
    int need = c->op->code == OP_PPERMUTE ? 1 : c->n;
    if (c->r->env->counters) {
        atomic_fetch_add(ring ? &c->r->env->counters->ring : &c->r->env->counters->direct, 1);
        if (c->relay)
            atomic_fetch_add(&c->r->env->counters->relayed, 1);
    }
    for (int l = 0; l < c->nl; l++) {
        const tensor_t *const *pc = &c->pieces[(size_t)l * c->n];
        /* A ppermute member no pair targets gets zeros: nothing to wait for. */
        if (c->op->code == OP_PPERMUTE)
            need = coll_ppermute_source(c->op, c->n, c->pos[l]) >= 0;
        for (int p = 0; p < need; p++)
            if (!pc[p]) {
                snprintf(c->r->err, sizeof c->r->err, "%s op %d: no piece from position %d",
                         opcode_name(c->op->code), c->i, p);
                return -1;
            }
        int same = same_result_as(c, l), rc;
        if (same >= 0)
            rc = (outs[l] = tensor_clone(outs[same])) ? 0 : -1;
        else
            rc = ring ? coll_fold_ring(c->op->reduce, pc, c->n, &outs[l])
                      : coll_combine(c->op, pc, c->n, c->pos[l], &outs[l]);
        if (rc != 0) {
            snprintf(c->r->err, sizeof c->r->err, "%s op %d: cannot combine",
                     opcode_name(c->op->code), c->i);
            return -1;
        }
    }
    return 0;
}

/* ---- setup ---- */

/* Shards of the slice per proc (counting sort): start[q]..start[q+1]
 * (start: nprocs + 2 zeroed ints, list: nsh). */
static void shards_by_proc(const coll_t *c, int *start, int *list)
{
    for (int k = 0; k < c->nsh; k++)
        start[c->proc_of[k] + 2]++;
    for (int q = 0; q < c->nprocs; q++)
        start[q + 2] += start[q + 1];
    for (int k = 0; k < c->nsh; k++)
        list[start[c->proc_of[k] + 1]++] = k;
}

static int whole_arg(const coll_t *c)
{
    return c->op->code != OP_ALL_TO_ALL && c->op->code != OP_PPERMUTE;
}

/* Which groups have members on which procs (whole-argument collectives):
 * one pass over the slice's shards. */
static int groups_on_procs(coll_t *c)
{
    int ngroups = 0;
    for (int k = 0; k < c->nsh; k++)
        c->gslot[k] = -1;
    for (int k = 0; k < c->nsh; k++)
        if (c->gslot[c->glead[k]] < 0)
            c->gslot[c->glead[k]] = ngroups++;
    if (!(c->on = util_zalloc((size_t)ngroups * (size_t)c->nprocs, 1)))
        return -1;
    for (int k = 0; k < c->nsh; k++)
        c->on[(size_t)c->gslot[c->glead[k]] * c->nprocs + c->proc_of[k]] = 1;
    return 0;
}

/* The next n items of `size` bytes from a block being carved (*at), kept
 * 16-byte aligned; with *at NULL it only counts (*len). */
static void *carve(char **at, size_t *len, size_t n, size_t size)
{
    size_t bytes = (n * size + 15) & ~(size_t)15;
    void *p = *at ? *at + *len : NULL;
    *len += bytes;
    return p;
}

/* Lays the op's arrays out in c->block (one allocation: an op's setup made
 * eleven, ~7 % of a chain's runner instructions); a first pass with no
 * block counts the bytes. Every array but `views` starts zeroed; `views`
 * comes last and is not (place_piece writes a view before pieces[] points
 * at it), so the zeroing skips its nl * n tensor headers (*zeroed: the
 * bytes before it). */
static void coll_carve(coll_t *c, char *block, size_t *len, size_t *zeroed)
{
    size_t nl = (size_t)c->nl, nn = nl * (size_t)c->n, nsh = (size_t)c->nsh;
    size_t np = (size_t)c->nprocs;
    *len = 0;
    c->pieces = carve(&block, len, nn, sizeof *c->pieces);
    c->temps = carve(&block, len, nn, sizeof *c->temps);
    c->held = carve(&block, len, np, sizeof *c->held);
    c->bufs = carve(&block, len, np, sizeof *c->bufs);
    c->lead = carve(&block, len, nl, sizeof *c->lead);
    c->pos = carve(&block, len, nl, sizeof *c->pos);
    c->glead = carve(&block, len, nsh, sizeof *c->glead);
    c->gpos = carve(&block, len, nsh, sizeof *c->gpos);
    c->gslot = carve(&block, len, nsh, sizeof *c->gslot);
    c->start = carve(&block, len, np + 2, sizeof *c->start);
    c->list = carve(&block, len, nsh, sizeof *c->list);
    *zeroed = *len;
    c->views = carve(&block, len, nn, sizeof *c->views);
}

/* Returns 0, or -1 with r->err set. */
static int coll_setup(coll_t *c)
{
    size_t len, zeroed;
    c->nsh = c->r->comp->nshards;
    coll_carve(c, NULL, &len, &zeroed);
    if (!(c->block = malloc(len)))
        goto oom;
    memset(c->block, 0, zeroed);
    coll_carve(c, c->block, &len, &zeroed);
    for (int k = 0; k < c->nsh; k++) {
        int n;
        if (coll_group_of(c->ss, c->axes, k, &c->glead[k], &n, &c->gpos[k]) != 0 || n != c->n) {
            snprintf(c->r->err, sizeof c->r->err, "op %d: no collective group for shard %d",
                     c->i, k);
            return -1;
        }
    }
    shards_by_proc(c, c->start, c->list);
    for (int l = 0; l < c->nl; l++) {
        c->lead[l] = c->glead[c->r->t->shards[l]];
        c->pos[l] = c->gpos[c->r->t->shards[l]];
    }
    if (!whole_arg(c))
        return 0;
    if (groups_on_procs(c) != 0)
        goto oom;
    int used = 0;
    for (int q = 0; q < c->nprocs; q++)
        used += c->start[q + 1] > c->start[q];
    c->relay = used >= c->r->env->relay_min_procs;
    c->root = c->proc_of[0];
    if (c->relay && c->self == c->root && !(c->all = util_zalloc((size_t)c->nsh, sizeof *c->all)))
        goto oom;
    return 0;
oom:
    snprintf(c->r->err, sizeof c->r->err, "out of memory");
    return -1;
}

static void coll_release(coll_t *c)
{
    if (!c->block)
        return;
    size_t nn = (size_t)c->nl * (size_t)c->n;
    for (size_t x = 0; x < nn; x++)
        tensor_free(c->temps[x]);
    for (int q = 0; q < c->nprocs; q++) {
        if (c->held[q])
            ostore_release(c->r->env->st, c->held[q], 1);
        free(c->bufs[q]);
    }
    free(c->on);
    free(c->all);
    free(c->block);
}

int exec_coll_run(run_t *r, int i, int64_t ready_us, const tensor_t *const *args,
                  tensor_t **outs)
{
    const wplace_t *pl = r->t->place;
    coll_t c = {.r = r, .op = &r->comp->ops[i], .i = i, .ss = &r->comp->slice_shape,
                .axes = r->comp->ops[i].mesh_axes,
                .proc_of = pl->slices[r->t->slice].proc_of, .nprocs = pl->nprocs,
                .self = pl->self, .nl = r->nl, .args = args, .ready = ready_us,
                .arg_numel = shape_numel(&args[0]->shape)};
    int lead, pos, rc = -1;
    if (coll_group_of(c.ss, c.axes, r->t->shards[0], &lead, &c.n, &pos) != 0 || c.n < 1) {
        snprintf(r->err, sizeof r->err, "op %d: no collective group", i);
        return -1;
    }
    shape_t ps;
    c.piece_numel = coll_piece_shape(c.op, &args[0]->shape, c.n, &ps) == 0 ? shape_numel(&ps)
                                                                        : c.arg_numel;
    if (coll_setup(&c) != 0)
        goto cleanup;
    /* Send everything first, then receive: no pair of processes can wait
     * on each other (the mailbox keeps early packs). */
    if (send_packs(&c) != 0 || recv_packs(&c) != 0 || local_pieces(&c) != 0 ||
        combine(&c, outs) != 0)
        goto cleanup;
    /* A modelled device combines when the last contribution exists (sim:
     * the host may have exchanged them earlier). */
    for (int l = 0; l < c.nl; l++)
        outs[l]->ready_us = c.ready;
    rc = 0;
cleanup:
    if (rc != 0)
        for (int l = 0; l < c.nl; l++) {
            tensor_free(outs[l]);
            outs[l] = NULL;
        }
    coll_release(&c);
    return rc;
}
