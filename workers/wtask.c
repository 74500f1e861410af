/* wtask.c - see wtask.h. */
#include "wtask.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        snprintf(err, errlen, "task field '%s' missing or out of range", key);
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
        snprintf(err, errlen, "task field '%s' missing or too long", key);
        return -1;
    }
    memcpy(dst, s, strlen(s) + 1);
    return 0;
}

static int parse_ids(const json_t *j, wtask_t *t, char *err, size_t errlen)
{
    int64_t v[6];
    if (get_int(j, "job", 0, INT64_MAX, &v[0], err, errlen) ||
        get_int(j, "attempt", 0, INT32_MAX, &v[1], err, errlen) ||
        get_int(j, "comp", 0, INT32_MAX, &v[2], err, errlen) ||
        get_int(j, "seq", 0, INT64_MAX, &v[3], err, errlen) ||
        get_int(j, "shard", 0, INT32_MAX, &v[4], err, errlen) ||
        get_int(j, "device", 0, INT32_MAX, &v[5], err, errlen))
        return -1;
    t->job = v[0];
    t->attempt = (int32_t)v[1];
    t->comp = (int32_t)v[2];
    t->seq = v[3];
    t->shard = (int32_t)v[4];
    t->device = (int32_t)v[5];
    return 0;
}

static int parse_peers(const json_t *j, wtask_t *t, char *err, size_t errlen)
{
    const json_t *a = json_object_get(j, "peers");
    int64_t n = shape_numel(&t->slice_shape);
    if (!json_is_array(a) || (int64_t)json_array_size(a) != n) {
        snprintf(err, errlen, "task 'peers' must list one address per shard (%lld)",
                 (long long)n);
        return -1;
    }
    if (t->shard >= n) {
        snprintf(err, errlen, "task 'shard' %d outside the slice", (int)t->shard);
        return -1;
    }
    t->peers = calloc((size_t)n, sizeof *t->peers);
    if (!t->peers) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    t->npeers = (int)n;
    for (int i = 0; i < t->npeers; i++) {
        const char *s = json_string_value(json_array_get(a, (size_t)i));
        if (!s || strlen(s) >= DPLANE_ADDR_MAX) {
            snprintf(err, errlen, "task 'peers[%d]' is not an address", i);
            return -1;
        }
        memcpy(t->peers[i], s, strlen(s) + 1);
    }
    return 0;
}

static int parse_sends(const json_t *j, wtask_t *t, char *err, size_t errlen)
{
    const json_t *a = json_object_get(j, "sends");
    if (!a)
        return 0;
    if (!json_is_array(a)) {
        snprintf(err, errlen, "task 'sends' must be an array");
        return -1;
    }
    t->nsends = (int)json_array_size(a);
    if (t->nsends == 0)
        return 0;
    t->sends = calloc((size_t)t->nsends, sizeof *t->sends);
    if (!t->sends) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < t->nsends; i++) {
        const json_t *s = json_array_get(a, (size_t)i);
        wtask_send_t *d = &t->sends[i];
        int64_t comp, op;
        if (get_str(s, "value", d->value, sizeof d->value, err, errlen) ||
            get_str(s, "to", d->to, sizeof d->to, err, errlen) ||
            get_int(s, "comp", 0, INT32_MAX, &comp, err, errlen) ||
            get_int(s, "op", 0, INT32_MAX, &op, err, errlen))
            return -1;
        d->comp = (int32_t)comp;
        d->op = (int32_t)op;
    }
    return 0;
}

int wtask_parse(const json_t *j, wtask_t **out, int64_t *task_id, char *err, size_t errlen)
{
    *out = NULL;
    *task_id = -1;
    if (!json_is_object(j)) {
        snprintf(err, errlen, "task is not an object");
        return -1;
    }
    wtask_t *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (get_int(j, "task", 0, INT64_MAX, &t->id, err, errlen))
        goto fail;
    *task_id = t->id;
    if (parse_ids(j, t, err, errlen))
        goto fail;
    if (wtask_shape_from_json(json_object_get(j, "slice_shape"), MESH_MAX_RANK, 1,
                              &t->slice_shape) != 0 || t->slice_shape.rank < 1) {
        snprintf(err, errlen, "task 'slice_shape' must have 1 to %d positive dims", MESH_MAX_RANK);
        goto fail;
    }
    json_t *comp = json_object_get(j, "computation");
    json_t *shapes = json_object_get(j, "input_shapes");
    if (!json_is_object(comp) || (shapes && !json_is_object(shapes))) {
        snprintf(err, errlen, "task 'computation'/'input_shapes' must be objects");
        goto fail;
    }
    t->computation = json_incref(comp);
    t->input_shapes = shapes ? json_incref(shapes) : json_object();
    if (!t->input_shapes) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (parse_peers(j, t, err, errlen) || parse_sends(j, t, err, errlen))
        goto fail;
    *out = t;
    return 0;
fail:
    wtask_free(t);
    return -1;
}

void wtask_free(wtask_t *t)
{
    if (!t)
        return;
    json_decref(t->computation);
    json_decref(t->input_shapes);
    free(t->peers);
    free(t->sends);
    free(t);
}

int wtask_input_shape(void *ctx, const char *from, shape_t *shape)
{
    const wtask_t *t = ctx;
    return wtask_shape_from_json(json_object_get(t->input_shapes, from), TENSOR_MAX_RANK, 1,
                                 shape);
}
