/* fuzz_task.c - libFuzzer target for the worker's job-group decoder.
 *
 * Each input is read twice, as the worker reads the controller's poll
 * answer and as its parts are decoded alone:
 *  - wtask_walk() over the raw text (workers/wtask_read.c): a poll answer
 *    {"jobs": [GROUP, ...]} has its "jobs" walked, any other document is
 *    walked as one GROUP {"job", "attempt", "key", "placement", "tasks"};
 *  - from a jansson tree of it (json_loadb, no flags), each group's
 *    placement by wplace_parse() and each task, as the text json_dumps
 *    writes it, by wtask_parse() against that placement (a group without a
 *    good key or ids still has its tasks decoded this way).
 * Both for a worker of 4 devices whose data address is the first proc's
 * (of the first group); a decoded task's computation is compiled with
 * compiler_comp() against its slice and input shapes.
 * Everything is freed (LeakSanitizer is on: a leak on any path is a
 * finding).
 *
 * Invariants (a violation aborts, which libFuzzer reports):
 *  - a refused placement or task leaves *out NULL and a non-empty reason;
 *    a refused task's id is -1 or the document's "task";
 *  - a decoded placement maps every shard of every slice to a proc holding
 *    that shard's island device (an index inside the proc's block);
 *  - a decoded task has 1..4 shards, increasing, inside its slice, all on
 *    this worker's proc, on distinct devices 0..3; its slice_shape has as
 *    many devices as the slice; every send names a slice with its shards;
 *  - a decoded task has exactly one of a plan, of exactly the slice's
 *    shard count, and a "compile: " reason;
 *  - its plan, which may come from the plan cache (workers/plancache.c;
 *    it lives across inputs, so earlier inputs' plans are found), is one
 *    the computation compiles to on its own, from jansson's tree: both
 *    compile or neither, to plans alike in all a runner reads;
 *  - the walk hands over each item once: a task, or a non-empty reason. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "jscan.h"
#include "wtask.h"

#define NDEV 4

static void check_place(const wplace_t *p)
{
    if (p->nprocs < 1 || p->nslices < 1 || p->self < -1 || p->self >= p->nprocs)
        abort();
    for (int s = 0; s < p->nslices; s++) {
        const wplace_slice_t *sl = &p->slices[s];
        if (sl->nshards != shape_numel(&sl->box) || !sl->proc_of)
            abort();
        for (int k = 0; k < sl->nshards; k++) {
            int q = sl->proc_of[k];
            if (q < 0 || q >= p->nprocs || strcmp(p->procs[q].island, sl->island) != 0)
                abort();
        }
    }
}

static void check_task(const wtask_t *t, int64_t id)
{
    const wplace_slice_t *sl = &t->place->slices[t->slice];
    if (id != t->id || t->nlocal < 1 || t->nlocal > NDEV ||
        shape_numel(&t->slice_shape) != sl->nshards)
        abort();
    for (int l = 0; l < t->nlocal; l++) {
        if (t->shards[l] < 0 || t->shards[l] >= sl->nshards ||
            (l > 0 && t->shards[l] <= t->shards[l - 1]) ||
            sl->proc_of[t->shards[l]] != t->place->self || t->devices[l] < 0 ||
            t->devices[l] >= NDEV)
            abort();
        for (int m = 0; m < l; m++)
            if (t->devices[m] == t->devices[l])
                abort();
    }
    /* A plain edge carries shard k to shard k, so the consumer has every
     * shard this task runs; a cross-mesh edge (reshard) goes from this
     * task's mesh to one of exactly the consumer's shard count. */
    for (int i = 0; i < t->nsends; i++) {
        const wtask_send_t *d = &t->sends[i];
        if (d->slice < 0 || d->slice >= t->place->nslices ||
            !memchr(d->value, '\0', sizeof d->value))
            abort();
        int64_t consumer = t->place->slices[d->slice].nshards;
        if (d->edge ? !shape_equal(&d->edge->from_mesh, &t->slice_shape) ||
                          shape_numel(&d->edge->to_mesh) != consumer
                    : consumer <= t->shards[t->nlocal - 1])
            abort();
    }
    /* full_values: names terminated, axes inside the slice; shard 0 (all
     * coordinates 0) is always the reporting replica of a listed value. */
    for (int i = 0; i < t->nfull; i++)
        if (!memchr(t->full[i].value, '\0', sizeof t->full[i].value) ||
            (t->full[i].replica_axes >> t->slice_shape.rank) != 0 ||
            !wtask_full_values(t, t->full[i].value, 0))
            abort();
    for (int l = 0; l < t->nlocal; l++)
        (void)wtask_full_values(t, "y", t->shards[l]);
}

/* wtask_parse() compiled the computation: either a plan of the slice's
 * shard count, or the reason it did not compile. */
static void check_plan(const wtask_t *t)
{
    if (t->plan ? t->plan_err || t->plan->nshards != t->place->slices[t->slice].nshards
                : !t->plan_err || strncmp(t->plan_err, "compile: ", 9) != 0)
        abort();
}

/* compiler_input_fn over a task's "input_shapes" as jansson read it. */
static int tree_input(void *ctx, const char *from, shape_t *shape)
{
    const json_t *a = json_object_get(ctx, from);
    return a && wtask_shape_from_json(a, TENSOR_MAX_RANK, 1, shape) == 0 ? 0 : -1;
}

static int same_op(const op_t *a, const op_t *b)
{
    return a->code == b->code && a->out == b->out && a->nargs == b->nargs &&
           a->arg[0] == b->arg[0] && a->arg[1] == b->arg[1] && shape_equal(&a->shape, &b->shape) &&
           memcmp(&a->value, &b->value, sizeof a->value) == 0 &&
           memcmp(&a->factor, &b->factor, sizeof a->factor) == 0 && a->axis == b->axis &&
           a->reduce == b->reduce && a->mesh_axes == b->mesh_axes && a->shift == b->shift &&
           a->nperm == b->nperm && !a->perm == !b->perm &&
           (!a->perm || memcmp(a->perm, b->perm, 2 * (size_t)a->nperm * sizeof *a->perm) == 0) &&
           a->split_axis == b->split_axis && a->concat_axis == b->concat_axis && a->us == b->us &&
           a->input == b->input && memcmp(&a->ein, &b->ein, sizeof a->ein) == 0 &&
           a->nslice == b->nslice &&
           memcmp(a->slice_stride, b->slice_stride, sizeof a->slice_stride) == 0 &&
           memcmp(a->slice_dim, b->slice_dim, sizeof a->slice_dim) == 0;
}

/* Whether two plans run alike: what a runner reads (exec_run.c), not the
 * computation's name or its inputs' sources (plancache.h). */
static int same_plan(const comp_t *a, const comp_t *b)
{
    if (a->nshards != b->nshards || a->nops != b->nops || a->nvalues != b->nvalues ||
        a->noutputs != b->noutputs || a->ninputs != b->ninputs || !a->run != !b->run ||
        !shape_equal(&a->slice_shape, &b->slice_shape))
        return 0;
    for (int i = 0; i < a->nops; i++)
        if (!same_op(&a->ops[i], &b->ops[i]))
            return 0;
    for (int v = 0; v < a->nvalues; v++)
        if (strcmp(a->vnames[v], b->vnames[v]) != 0 || !shape_equal(&a->vshapes[v], &b->vshapes[v]))
            return 0;
    for (int k = 0; k < a->noutputs; k++)
        if (a->outputs[k] != b->outputs[k])
            return 0;
    for (int k = 0; k < a->ninputs; k++) {
        const comp_input_t *x = &a->inputs[k], *y = &b->inputs[k];
        if (x->op_index != y->op_index || !shape_equal(&x->shape, &y->shape) ||
            !x->edge != !y->edge || (x->edge && memcmp(x->edge, y->edge, sizeof *x->edge) != 0))
            return 0;
    }
    return 1;
}

/* The task's plan, maybe from the plan cache, against the computation
 * compiled on its own: both compile or neither, and alike. */
static void check_cached_plan(const wtask_t *t, const json_t *j)
{
    comp_t *own = NULL;
    err_t e = {0};
    int rc = compiler_comp(json_object_get(j, "computation"), &t->slice_shape, tree_input,
                           json_object_get(j, "input_shapes"), &own, &e);
    if (rc == 500)
        return;
    if ((rc == 0) != (t->plan != NULL) || (own && !same_plan(own, t->plan)))
        abort();
    comp_free(own);
}

static void decode_task(const json_t *j, wplace_t *place)
{
    wtask_t *t = NULL;
    int64_t id = -2;
    char err[256] = "";
    char *text = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text)
        return;
    int rc = wtask_parse(text, strlen(text), place, NDEV, &t, &id, err, sizeof err);
    free(text);
    if (rc != 0) {
        const json_t *tid = json_object_get(j, "task");
        if (t || !err[0] ||
            (id != -1 && !(json_is_integer(tid) && json_integer_value(tid) == id && id >= 0)))
            abort();
        return;
    }
    check_task(t, id);
    check_plan(t);
    check_cached_plan(t, j);
    wtask_free(t);
}

static void decode_group(const json_t *g)
{
    const json_t *place_j = json_object_get(g, "placement");
    const json_t *procs = json_object_get(place_j, "procs");
    const char *self = json_string_value(json_object_get(json_array_get(procs, 0), "addr"));
    wplace_t *p = NULL;
    char err[256] = "";
    if (wplace_parse(place_j, self, &p, err, sizeof err) != 0) {
        if (p || !err[0])
            abort();
        return;
    }
    check_place(p);
    size_t i;
    const json_t *t;
    json_array_foreach(json_object_get(g, "tasks"), i, t)
        decode_task(t, p);
    wplace_unref(p);
}

/* wtask_fn of the walk: checks the item and frees it. */
static void walked(void *ctx, wtask_item_t *it)
{
    (*(int *)ctx)++;
    if (!it->t) {
        if (!it->err || !it->err[0] || it->id < -1 || it->comp < -1)
            abort();
        return;
    }
    if (it->err)
        abort();
    check_place(it->t->place);
    check_task(it->t, it->id);
    check_plan(it->t);
    wtask_free(it->t);
}

/* The walk over the raw text: the "jobs" member's value of an answer,
 * else the whole text as one group. */
static void walk_text(const uint8_t *data, size_t size, int answer, const char *self)
{
    jscan_t s;
    jscan_str_t key;
    int n = 0, items = 0;
    jscan_init(&s, data, size);
    if (!answer) {
        (void)wtask_walk(&s, 1, self, NDEV, walked, &items);
        return;
    }
    if (jscan_object(&s) != 0)
        return;
    while (jscan_member(&s, &n, &key) == 1) {
        int rc = jscan_str_eq(&key, "jobs") ? wtask_walk(&s, 0, self, NDEV, walked, &items)
                                            : jscan_skip(&s);
        if (rc != 0)
            return;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *j = json_loadb((const char *)data, size, 0, NULL);
    const json_t *jobs = json_object_get(j, "jobs");
    const json_t *g0 = json_is_array(jobs) ? json_array_get(jobs, 0) : j;
    const json_t *procs = json_object_get(json_object_get(g0, "placement"), "procs");
    const char *self = json_string_value(json_object_get(json_array_get(procs, 0), "addr"));
    char self_copy[64] = "127.0.0.1:4000";
    if (self && strlen(self) < sizeof self_copy)
        memcpy(self_copy, self, strlen(self) + 1);
    walk_text(data, size, json_is_array(jobs), self_copy);
    if (!j)
        return 0;
    if (json_is_array(jobs)) {
        size_t i;
        const json_t *g;
        json_array_foreach(jobs, i, g)
            decode_group(g);
    } else {
        decode_group(j);
    }
    json_decref(j);
    return 0;
}
