/* fuzz_task.c - libFuzzer target for the worker's task decoder.
 *
 * Each input is parsed as the worker parses the controller's poll answer
 * (json_loadb, no flags: workers/wclient.c). A poll answer
 * {"tasks": [TASK, ...], ...} has each of its tasks decoded; any other
 * document is decoded as one TASK. Decoding is wtask_parse()
 * (workers/wtask.c); a decoded task's computation is then compiled with
 * compiler_comp() against the task's slice and input shapes, exactly as
 * exec_run.c does before running it. Everything is freed (LeakSanitizer is
 * on, so a leak on any path is a finding).
 *
 * Invariants (a violation aborts, which libFuzzer reports):
 *  - a refused task leaves *out NULL and a non-empty reason, and its
 *    reported id is -1 or the document's "task" (a non-negative integer);
 *  - a decoded task has a slice of 1..MESH_MAX_RANK positive dims, one peer
 *    address per shard of its slice (npeers == numel(slice)), its shard
 *    inside the slice, every integer field equal to the document's, every
 *    peer and send copied whole and NUL-terminated;
 *  - a compiled computation has exactly npeers shards (the worker's
 *    "slice has N shards but M peers" check never fires), and a refused one
 *    has a 400/422/500 error with a detail. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "wtask.h"

static int64_t int_member(const json_t *j, const char *key)
{
    return json_integer_value(json_object_get(j, key));
}

static int str_eq(const char *copy, size_t cap, const json_t *s)
{
    const char *want = json_string_value(s);
    return want && memchr(copy, '\0', cap) && strcmp(copy, want) == 0;
}

static void check_refused(const json_t *j, const wtask_t *t, int64_t id, const char *err)
{
    if (t || !err[0] || !memchr(err, '\0', 256))
        abort();
    const json_t *tid = json_object_get(j, "task");
    if (id != -1 && !(json_is_integer(tid) && json_integer_value(tid) == id && id >= 0))
        abort();
}

static void check_decoded(const json_t *j, const wtask_t *t, int64_t id)
{
    if (!t || id != t->id || t->id != int_member(j, "task") || t->job != int_member(j, "job") ||
        t->attempt != int_member(j, "attempt") || t->comp != int_member(j, "comp") ||
        t->seq != int_member(j, "seq") || t->shard != int_member(j, "shard") ||
        t->device != int_member(j, "device"))
        abort();
    if (t->slice_shape.rank < 1 || t->slice_shape.rank > MESH_MAX_RANK)
        abort();
    int64_t numel = 1;
    for (int i = 0; i < TENSOR_MAX_RANK; i++) {
        int64_t d = t->slice_shape.dim[i];
        if (i < t->slice_shape.rank ? d < 1 : d != 0)
            abort();
        if (i < t->slice_shape.rank && (numel *= d) > TENSOR_MAX_ELEMS)
            abort();
    }
    if (t->npeers != numel || t->shard < 0 || t->shard >= t->npeers || !t->peers)
        abort();
    const json_t *peers = json_object_get(j, "peers");
    for (int i = 0; i < t->npeers; i++)
        if (!str_eq(t->peers[i], DPLANE_ADDR_MAX, json_array_get(peers, (size_t)i)))
            abort();
    const json_t *sends = json_object_get(j, "sends");
    if (t->nsends != (int)json_array_size(sends) || (t->nsends > 0) != (t->sends != NULL))
        abort();
    for (int i = 0; i < t->nsends; i++) {
        const json_t *s = json_array_get(sends, (size_t)i);
        const wtask_send_t *d = &t->sends[i];
        if (!str_eq(d->value, sizeof d->value, json_object_get(s, "value")) ||
            !str_eq(d->to, sizeof d->to, json_object_get(s, "to")) ||
            d->comp != int_member(s, "comp") || d->op != int_member(s, "op"))
            abort();
    }
    if (!json_is_object(t->computation) || !json_is_object(t->input_shapes))
        abort();
}

/* Compiles the task's computation as exec_run.c's run_body() does. */
static void check_compile(const wtask_t *t)
{
    comp_t *c = NULL;
    err_t e;
    memset(&e, 0, sizeof e);
    int rc = compiler_comp(t->computation, &t->slice_shape, wtask_input_shape, (void *)t, &c,
                           &e);
    if (rc == 0) {
        if (!c || c->nshards != t->npeers || c->nops < 0 || c->noutputs < 0)
            abort();
    } else if ((rc != 400 && rc != 422 && rc != 500) || c || !e.detail[0] ||
               !memchr(e.detail, '\0', sizeof e.detail)) {
        abort();
    }
    comp_free(c);
}

static void one_task(const json_t *j)
{
    wtask_t *t = (wtask_t *)1;     /* wtask_parse must overwrite it in every case */
    int64_t id = -2;
    char err[256];
    err[0] = '\0';
    if (wtask_parse(j, &t, &id, err, sizeof err) != 0) {
        check_refused(j, t, id, err);
        return;
    }
    check_decoded(j, t, id);
    check_compile(t);
    wtask_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *doc = json_loadb((const char *)data, size, 0, NULL);
    if (!doc)
        return 0;
    const json_t *tasks = json_object_get(doc, "tasks");
    if (json_is_array(tasks)) {
        size_t i;
        const json_t *t;
        json_array_foreach(tasks, i, t)
            one_task(t);
    } else {
        one_task(doc);
    }
    json_decref(doc);
    return 0;
}
