/* wtask.c - see wtask.h: a group's placement (read from its tree), and
 * the checks that turn a TASK as read (wtask_read.c) into a task.
 *
 * A decoder of untrusted JSON (the controller's poll answer): every
 * member it reads is type- and range-checked before it is used (except
 * `computation`, which compiler_comp() validates), every count is bounded
 * (WPLACE_MAX_*, MESH_MAX_RANK, NAME_MAX_LEN) before anything is allocated
 * from it, and a bad member fails the whole placement or task with a
 * reason naming it; nothing half-parsed escapes. No I/O, no clock, no
 * lock but the plan cache's (the fuzzer runs it alone: fuzz_task).
 *
 * Invariants of a parsed placement: every shard of every slice is held by
 * exactly one proc, procs of one island do not overlap, every slice's box
 * lies inside its mesh. Of a parsed task: its shards increase, lie in its
 * slice and are held by this worker's proc, each on a distinct local
 * device; exactly one of plan and plan_err is set.
 *
 * Ownership: see wtask.h. A task takes its placement reference first and
 * wtask_free() drops it with everything else, so a failed parse leaves
 * nothing behind. */
#include "wtask.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gspmd.h"
#include "jscan.h"
#include "plancache.h"
#include "util.h"
#include "wtask_raw.h"

int wtask_shape_from_json(const json_t *a, int max_rank, int64_t min_dim, shape_t *out)
{
    memset(out, 0, sizeof *out);
    if (!json_is_array(a) || (int)json_array_size(a) > max_rank)
        return -1;
    out->rank = (int)json_array_size(a);
    for (int i = 0; i < out->rank; i++) {
        const json_t *d = json_array_get(a, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < min_dim ||
            json_integer_value(d) > TENSOR_MAX_ELEMS)
            return -1;
        out->dim[i] = json_integer_value(d);
    }
    return 0;
}

/* Reads an integer member in [lo, hi]. Returns 0 or -1 (err filled). */
static int get_int(const json_t *j, const char *key, int64_t lo, int64_t hi, int64_t *v,
                   char *err, size_t errlen)
{
    const json_t *m = json_object_get(j, key);
    if (!json_is_integer(m) || json_integer_value(m) < lo || json_integer_value(m) > hi) {
        snprintf(err, errlen, "field '%s' missing or out of range", key);
        return -1;
    }
    *v = json_integer_value(m);
    return 0;
}

/* Copies a string member into dst (size n). Returns 0 or -1. */
static int get_str(const json_t *j, const char *key, char *dst, size_t n, char *err,
                   size_t errlen)
{
    const char *s = json_string_value(json_object_get(j, key));
    if (!s || strlen(s) >= n) {
        snprintf(err, errlen, "field '%s' missing or too long", key);
        return -1;
    }
    memcpy(dst, s, strlen(s) + 1);
    return 0;
}

/* ---- placement ---- */

static int parse_procs(const json_t *a, wplace_t *p, char *err, size_t errlen)
{
    if (!json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > WPLACE_MAX_PROCS) {
        snprintf(err, errlen, "placement 'procs' must list 1 to %d procs", WPLACE_MAX_PROCS);
        return -1;
    }
    p->nprocs = (int)json_array_size(a);
    if (!(p->procs = util_zalloc((size_t)p->nprocs, sizeof *p->procs))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < p->nprocs; i++) {
        const json_t *e = json_array_get(a, (size_t)i);
        wplace_proc_t *q = &p->procs[i];
        if (get_str(e, "addr", q->addr, sizeof q->addr, err, errlen) ||
            get_str(e, "island", q->island, sizeof q->island, err, errlen) ||
            get_int(e, "first", 0, WPLACE_MAX_DEVICES - 1, &q->first, err, errlen) ||
            get_int(e, "count", 1, WPLACE_MAX_DEVICES - q->first, &q->count, err, errlen))
            return -1;
    }
    return 0;
}

/* Reads a slice's island geometry: mesh, origin and box of equal rank, the
 * box inside the mesh. Returns 0 or -1. */
static int parse_geometry(const json_t *e, wplace_slice_t *s, char *err, size_t errlen)
{
    shape_t origin;
    if (wtask_shape_from_json(json_object_get(e, "mesh"), MESH_MAX_RANK, 1, &s->mesh) ||
        s->mesh.rank < 1 || shape_numel(&s->mesh) > WPLACE_MAX_DEVICES ||
        wtask_shape_from_json(json_object_get(e, "box"), MESH_MAX_RANK, 1, &s->box) ||
        wtask_shape_from_json(json_object_get(e, "origin"), MESH_MAX_RANK, 0, &origin) ||
        s->box.rank != s->mesh.rank || origin.rank != s->mesh.rank) {
        snprintf(err, errlen, "placement slice '%s': mesh, origin and box must be shapes of "
                 "one rank (1 to %d), at most %d devices", s->name, MESH_MAX_RANK,
                 WPLACE_MAX_DEVICES);
        return -1;
    }
    for (int d = 0; d < s->mesh.rank; d++) {
        s->origin[d] = origin.dim[d];
        if (origin.dim[d] + s->box.dim[d] > s->mesh.dim[d]) {
            snprintf(err, errlen, "placement slice '%s': box leaves the mesh on axis %d",
                     s->name, d);
            return -1;
        }
    }
    s->nshards = (int)shape_numel(&s->box);
    return 0;
}

/* Fills s->proc_of: shard k (row-major in the box) -> the proc holding its
 * island device. owner: scratch of WPLACE_MAX_DEVICES ints. Procs of one
 * island must not overlap, and every shard must be held. Returns 0 or -1. */
static int map_shards(const wplace_t *p, wplace_slice_t *s, int *owner, char *err, size_t errlen)
{
    int64_t ndev = shape_numel(&s->mesh);
    for (int64_t d = 0; d < ndev; d++)
        owner[d] = -1;
    for (int i = 0; i < p->nprocs; i++) {
        const wplace_proc_t *q = &p->procs[i];
        if (strcmp(q->island, s->island) != 0)
            continue;
        for (int64_t d = q->first; d < q->first + q->count && d < ndev; d++) {
            if (owner[d] >= 0) {
                snprintf(err, errlen, "placement: procs %d and %d both hold device %lld of '%s'",
                         owner[d], i, (long long)d, s->island);
                return -1;
            }
            owner[d] = i;
        }
    }
    if (!(s->proc_of = malloc(sizeof *s->proc_of * (size_t)s->nshards))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int k = 0; k < s->nshards; k++) {
        int64_t rest = k, idx = 0, stride = 1;
        for (int d = s->box.rank - 1; d >= 0; d--) {
            idx += (s->origin[d] + rest % s->box.dim[d]) * stride;
            rest /= s->box.dim[d];
            stride *= s->mesh.dim[d];
        }
        if ((s->proc_of[k] = owner[idx]) < 0) {
            snprintf(err, errlen, "placement slice '%s': no proc holds shard %d", s->name, k);
            return -1;
        }
    }
    return 0;
}

static int parse_slices(const json_t *o, wplace_t *p, char *err, size_t errlen)
{
    const char *name;
    const json_t *e;
    if (!json_is_object(o) || json_object_size(o) < 1 ||
        json_object_size(o) > WPLACE_MAX_SLICES) {
        snprintf(err, errlen, "placement 'slices' must hold 1 to %d slices", WPLACE_MAX_SLICES);
        return -1;
    }
    int *owner = malloc(sizeof *owner * WPLACE_MAX_DEVICES);
    p->slices = util_zalloc(json_object_size(o), sizeof *p->slices);
    if (!owner || !p->slices) {
        free(owner);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = 0;
    json_object_foreach((json_t *)o, name, e) {
        wplace_slice_t *s = &p->slices[p->nslices++];
        if (strlen(name) >= sizeof s->name) {
            snprintf(err, errlen, "placement: slice name too long");
            rc = -1;
            break;
        }
        memcpy(s->name, name, strlen(name) + 1);
        if ((rc = get_str(e, "island", s->island, sizeof s->island, err, errlen)) != 0 ||
            (rc = parse_geometry(e, s, err, errlen)) != 0 ||
            (rc = map_shards(p, s, owner, err, errlen)) != 0)
            break;
    }
    free(owner);
    return rc;
}

int wplace_parse(const json_t *j, const char *self_addr, wplace_t **out, char *err,
                 size_t errlen)
{
    *out = NULL;
    wplace_t *p = util_zalloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    atomic_init(&p->refs, 1);
    p->self = -1;
    if (!json_is_object(j)) {
        snprintf(err, errlen, "placement is not an object");
        goto fail;
    }
    if (parse_procs(json_object_get(j, "procs"), p, err, errlen) != 0 ||
        parse_slices(json_object_get(j, "slices"), p, err, errlen) != 0)
        goto fail;
    p->hold_reports = json_is_true(json_object_get(j, "hold_reports"));
    for (int i = 0; i < p->nprocs && p->self < 0; i++)
        if (self_addr && strcmp(p->procs[i].addr, self_addr) == 0)
            p->self = i;
    *out = p;
    return 0;
fail:
    wplace_unref(p);
    return -1;
}

int wplace_set_key(wplace_t *p, const char *s, char *err, size_t errlen)
{
    if (!s || strlen(s) != 2 * MBOX_KEY_SIZE) {
        snprintf(err, errlen, "group key is not %d hex digits", 2 * MBOX_KEY_SIZE);
        return -1;
    }
    for (int i = 0; i < MBOX_KEY_SIZE; i++) {
        int hi = util_hex_digit(s[2 * i]), lo = util_hex_digit(s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            snprintf(err, errlen, "group key is not %d hex digits", 2 * MBOX_KEY_SIZE);
            return -1;
        }
        p->key.b[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

wplace_t *wplace_ref(wplace_t *p)
{
    atomic_fetch_add(&p->refs, 1);
    return p;
}

void wplace_unref(wplace_t *p)
{
    if (!p || atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    for (int i = 0; i < p->nslices; i++)
        free(p->slices[i].proc_of);
    free(p->slices);
    free(p->procs);
    free(p);
}

int wplace_slice_index(const wplace_t *p, const char *name)
{
    for (int i = 0; name && i < p->nslices; i++)
        if (strcmp(p->slices[i].name, name) == 0)
            return i;
    return -1;
}

/* ---- checking a task as read (wtask_raw.h) ---- */

const char *const wtask_member_names[WT_COUNT] = {
    "task", "job", "attempt", "comp", "seq", "slice", "slice_shape", "computation",
    "input_shapes", "shards", "devices", "sends", "full_values"};


static int check_ids(const wtask_raw_t *r, wtask_t *t, char *err, size_t errlen)
{
    static const int64_t lo[] = {0, 1, 0, 0, 0};
    static const int64_t hi[] = {INT64_MAX, INT64_MAX, INT32_MAX, INT32_MAX, INT64_MAX};
    for (int m = WT_JOB; m <= WT_SEQ; m++) {
        if (!(r->int_ok >> m & 1) || r->ints[m] < lo[m] || r->ints[m] > hi[m]) {
            snprintf(err, errlen, "field '%s' missing or out of range", wtask_member_names[m]);
            return -1;
        }
    }
    t->job = r->ints[WT_JOB];
    t->attempt = (int32_t)r->ints[WT_ATTEMPT];
    t->comp = (int32_t)r->ints[WT_COMP];
    t->seq = r->ints[WT_SEQ];
    return 0;
}

/* The task's slice: named in the placement, of the slice_shape's size. */
static int check_slice(const wtask_raw_t *r, wtask_t *t, char *err, size_t errlen)
{
    t->slice = r->slice_ok > 0 ? wplace_slice_index(t->place, r->slice) : -1;
    if (t->slice < 0) {
        snprintf(err, errlen, "task 'slice' is not a slice of the placement");
        return -1;
    }
    if (r->shape_ok <= 0 || t->slice_shape.rank < 1 ||
        shape_numel(&t->slice_shape) != t->place->slices[t->slice].nshards) {
        snprintf(err, errlen, "task 'slice_shape' must have 1 to %d positive dims, as many "
                 "devices as its slice", MESH_MAX_RANK);
        return -1;
    }
    return 0;
}

/* shards (increasing, inside the slice, on this worker's proc) and devices
 * (distinct, < ndevices), one each. Returns 0 or -1. */
static int check_shards(const wtask_raw_t *r, wtask_t *t, int ndevices, char *err, size_t errlen)
{
    int n = r->nshards;
    if (n < 1 || n > ndevices || r->ndevs != n) {
        snprintf(err, errlen, "task 'shards' and 'devices' must list 1 to %d entries each, "
                 "as many devices as shards", ndevices);
        return -1;
    }
    unsigned char *used = util_zalloc((size_t)ndevices, 1);
    if (!used) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const wplace_slice_t *s = &t->place->slices[t->slice];
    int i = 0;
    for (; i < n; i++) {
        int32_t kv = t->shards[i], dv = t->devices[i];
        if (kv < 0 || kv >= s->nshards || (i > 0 && kv <= t->shards[i - 1]) ||
            s->proc_of[kv] != t->place->self || dv < 0 || dv >= ndevices || used[dv])
            break;
        used[dv] = 1;
    }
    free(used);
    if (i < n) {
        snprintf(err, errlen, "task 'shards[%d]'/'devices[%d]': a shard of the slice held by "
                 "this worker (increasing) on a distinct device of it", i, i);
        return -1;
    }
    t->nlocal = n;
    return 0;
}

/* A send's cross-mesh edge: from this computation's mesh to the
 * consumer slice's, whose shard count the placement must match. */
static int parse_reshard(const json_t *rj, wtask_t *t, wtask_send_t *d, int i, char *err,
                         size_t errlen)
{
    char why[200] = "meshes or shard counts differ";
    if (!(d->edge = malloc(sizeof *d->edge))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (gspmd_edge_parse(rj, d->edge, why, sizeof why) != 0 ||
        !shape_equal(&d->edge->from_mesh, &t->slice_shape) ||
        shape_numel(&d->edge->to_mesh) != t->place->slices[d->slice].nshards) {
        snprintf(err, errlen, "task 'sends[%d].reshard' does not fit the placement (%s)", i,
                 why);
        return -1;
    }
    return 0;
}

static int check_sends(const wtask_raw_t *r, wtask_t *t, char *err, size_t errlen)
{
    if (r->sends_bad) {
        snprintf(err, errlen, "task 'sends' must be an array of at most %d", JOB_MAX_OPS);
        return -1;
    }
    if (r->nsends == 0)
        return 0;
    if (!(t->sends = util_zalloc((size_t)r->nsends, sizeof *t->sends))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < r->nsends; i++) {
        const wtask_raw_send_t *rs = &r->sends[i];
        wtask_send_t *d = &t->sends[t->nsends++];
        const char *missing = rs->value_ok <= 0 ? "value" : rs->comp < 0 ? "comp"
                            : rs->op < 0 ? "op" : NULL;
        if (missing) {
            snprintf(err, errlen, "field '%s' missing or %s", missing,
                     rs->value_ok <= 0 ? "too long" : "out of range");
            return -1;
        }
        memcpy(d->value, rs->value, sizeof d->value);
        d->comp = (int32_t)rs->comp;
        d->op = (int32_t)rs->op;
        d->slice = rs->slice;
        if (rs->reshard && d->slice >= 0 && parse_reshard(rs->reshard, t, d, i, err, errlen))
            return -1;
        /* An edge carries shard k to shard k: the consumer has every shard
         * this task runs. */
        if (d->slice < 0 || (!d->edge &&
            t->place->slices[d->slice].nshards <= t->shards[t->nlocal - 1])) {
            snprintf(err, errlen, "task 'sends[%d].slice' is not a slice of the placement "
                     "with this computation's shards", i);
            return -1;
        }
    }
    return 0;
}

/* "full_values": {value: [distinct slice axes]}, optional. */
static int parse_full_values(const json_t *o, wtask_t *t, char *err, size_t errlen)
{
    if (!o)
        return 0;
    if (!json_is_object(o) || json_object_size(o) > JOB_MAX_OPS) {
        snprintf(err, errlen, "task 'full_values' must be an object of at most %d", JOB_MAX_OPS);
        return -1;
    }
    if (json_object_size(o) == 0)
        return 0;
    if (!(t->full = util_zalloc(json_object_size(o), sizeof *t->full))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const char *name;
    const json_t *axes;
    json_object_foreach((json_t *)o, name, axes) {
        wtask_full_t *f = &t->full[t->nfull++];
        size_t i;
        const json_t *a;
        if (strlen(name) >= sizeof f->value || !json_is_array(axes)) {
            snprintf(err, errlen, "task 'full_values' maps value names to arrays of axes");
            return -1;
        }
        memcpy(f->value, name, strlen(name) + 1);
        json_array_foreach(axes, i, a) {
            json_int_t ax = json_integer_value(a);
            if (!json_is_integer(a) || ax < 0 || ax >= t->slice_shape.rank ||
                (f->replica_axes & (1u << ax))) {
                snprintf(err, errlen, "task 'full_values.%s' must list distinct axes of the"
                         " slice", f->value);
                return -1;
            }
            f->replica_axes |= 1u << ax;
        }
    }
    return 0;
}

int wtask_full_values(const wtask_t *t, const char *value, int shard)
{
    for (int i = 0; i < t->nfull; i++) {
        if (strcmp(t->full[i].value, value) == 0) {
            gspmd_mesh_t mesh = {.shape = t->slice_shape};
            return gspmd_mesh_origin(&mesh, shard, t->full[i].replica_axes);
        }
    }
    return 0;
}


/* compiler_input_fn over the task's "input_shapes" as read (ctx: the
 * wtask_raw_t): a key given twice counts as its last, as in a JSON object. */
static int input_shape_of(void *ctx, const char *from, shape_t *shape)
{
    const wtask_raw_t *r = ctx;
    for (int i = r->ninputs - 1; i >= 0; i--) {
        if (jscan_str_eq(&r->inputs[i].from, from)) {
            *shape = r->inputs[i].shape;
            return r->inputs[i].ok > 0 ? 0 : -1;
        }
    }
    return -1;
}

/* Compiles the task's computation into t->plan, or says why not in
 * t->plan_err (a task that runs and fails, see wtask.h). -1 only when out
 * of memory. */
static int compile_plan(wtask_raw_t *r, wtask_t *t, char *err, size_t errlen)
{
    err_t e = {0};
    int rc = plancache_compile(r->comp_text, r->comp_len, &t->slice_shape, input_shape_of, r,
                               &t->plan_ref, &t->plan, &e);
    if (rc == 0)
        return 0;
    if (rc == 500) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    char why[sizeof e.field + sizeof e.detail + 16];
    snprintf(why, sizeof why, "compile: %s%s%s", e.field, e.field[0] ? ": " : "", e.detail);
    if (!(t->plan_err = strdup(why))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

/* Checks what read_task read, in the order its faults are named. */
int wtask_check(wtask_raw_t *r, wtask_t *t, int ndevices, char *err, size_t errlen)
{
    if (r->oom) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (r->repeated >= 0) {
        snprintf(err, errlen, "task field '%s' given twice", wtask_member_names[r->repeated]);
        return -1;
    }
    if (check_ids(r, t, err, errlen) || check_slice(r, t, err, errlen))
        return -1;
    if (!r->comp_text || r->inputs_bad) {
        snprintf(err, errlen, "task 'computation'/'input_shapes' must be objects"
                 " (at most %d input shapes)", JOB_MAX_OPS);
        return -1;
    }
    if (t->place->self < 0) {
        snprintf(err, errlen, "this worker's data address is not in the placement");
        return -1;
    }
    return check_shards(r, t, ndevices, err, errlen) || check_sends(r, t, err, errlen) ||
           parse_full_values(r->full, t, err, errlen) || compile_plan(r, t, err, errlen)
               ? -1 : 0;
}

void wtask_raw_free(wtask_raw_t *r)
{
    json_decref(r->full);
    for (int i = 0; i < r->nsends; i++)
        json_decref(r->sends[i].reshard);
    free(r->sends);
    free(r->inputs);
}

void wtask_free(wtask_t *t)
{
    if (!t)
        return;
    plancache_unref(t->plan_ref);
    free(t->plan_err);
    free(t->shards);
    free(t->devices);
    for (int i = 0; t->sends && i < t->nsends; i++)
        free(t->sends[i].edge);
    free(t->sends);
    free(t->full);
    wplace_unref(t->place);
    free(t);
}
