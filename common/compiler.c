/* compiler.c - validation and shape inference of job documents.
 *
 * Layout: small JSON readers, a name index (hash), per-op compilation,
 * per-computation compilation (shared by compiler_job and compiler_comp),
 * then the job level: slices, the input-edge graph (Kahn topological order)
 * and the island fit check. Every error is reported through err_set() with a
 * JSON-path-like field; 400 for a bad document, 422 for a slice that can
 * never fit the cluster. Input JSON is always borrowed. */
#include "compiler.h"
#include "gspmd.h"
#include "runspec.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLICES_MAX 64
#define SLICE_DIM_MAX 4096
#define PRIORITY_LIMIT 1000
#define RETRIES_MAX 10
#define RETRIES_DEFAULT 2
#define COMPUTE_US_MAX 10000000

/* ------------------------------------------------------------------ */
/* Opcodes and the fields each op takes (the ops table of DESIGN.md). */

enum {
    F_ARGS = 1u << 0, F_SHAPE = 1u << 1, F_VALUE = 1u << 2, F_FACTOR = 1u << 3,
    F_AXIS = 1u << 4, F_REDUCE = 1u << 5, F_MESH = 1u << 6, F_SHIFT = 1u << 7,
    F_SPLIT = 1u << 8, F_CONCAT = 1u << 9, F_US = 1u << 10, F_FROM = 1u << 11,
    F_SPEC = 1u << 12, F_RESHARD = 1u << 13, F_PAIRS = 1u << 14,
};
/* field_names[i] is the JSON key of bit i above. */
static const char *const field_names[] = {
    "args", "shape", "value", "factor", "axis", "reduce", "mesh_axes",
    "shift", "split_axis", "concat_axis", "us", "from", "spec", "reshard", "pairs",
};
#define NFIELDS ((int)(sizeof field_names / sizeof field_names[0]))

typedef struct op_spec {
    const char *name;
    int nargs;              /* exact length of "args" (0: no "args" field; -2: 1 or 2) */
    unsigned required;      /* F_* bits, besides "op" and "out" */
    unsigned optional;
} op_spec_t;

static const op_spec_t op_specs[OP__COUNT] = {
    [OP_FILL] = {"fill", 0, F_SHAPE | F_VALUE, 0},
    [OP_IOTA] = {"iota", 0, F_SHAPE, 0},
    [OP_SHARD_INDEX] = {"shard_index", 0, 0, 0},
    [OP_INPUT] = {"input", 0, F_FROM, F_RESHARD},
    [OP_ADD] = {"add", 2, F_ARGS, 0},
    [OP_SUB] = {"sub", 2, F_ARGS, 0},
    [OP_MUL] = {"mul", 2, F_ARGS, 0},
    [OP_DIV] = {"div", 2, F_ARGS, 0},
    [OP_MAX] = {"max", 2, F_ARGS, 0},
    [OP_MIN] = {"min", 2, F_ARGS, 0},
    [OP_NEG] = {"neg", 1, F_ARGS, 0},
    [OP_RELU] = {"relu", 1, F_ARGS, 0},
    [OP_EXP] = {"exp", 1, F_ARGS, 0},
    [OP_TANH] = {"tanh", 1, F_ARGS, 0},
    [OP_SCALE] = {"scale", 1, F_ARGS | F_FACTOR, 0},
    [OP_MATMUL] = {"matmul", 2, F_ARGS, 0},
    [OP_TRANSPOSE] = {"transpose", 1, F_ARGS, 0},
    [OP_RESHAPE] = {"reshape", 1, F_ARGS | F_SHAPE, 0},
    [OP_REDUCE_SUM] = {"reduce_sum", 1, F_ARGS, F_AXIS},
    [OP_REDUCE_MAX] = {"reduce_max", 1, F_ARGS, F_AXIS},
    [OP_SOFTMAX] = {"softmax", 1, F_ARGS | F_AXIS, 0},
    [OP_RSQRT] = {"rsqrt", 1, F_ARGS, 0},
    [OP_LOG] = {"log", 1, F_ARGS, 0},
    [OP_EINSUM] = {"einsum", -2, F_ARGS | F_SPEC, 0},
    [OP_ALL_REDUCE] = {"all_reduce", 1, F_ARGS | F_REDUCE, F_MESH},
    [OP_ALL_GATHER] = {"all_gather", 1, F_ARGS | F_AXIS, F_MESH},
    [OP_REDUCE_SCATTER] = {"reduce_scatter", 1, F_ARGS | F_AXIS | F_REDUCE, F_MESH},
    /* exactly one of shift and pairs (op_ppermute) */
    [OP_PPERMUTE] = {"ppermute", 1, F_ARGS, F_SHIFT | F_PAIRS | F_MESH},
    [OP_ALL_TO_ALL] = {"all_to_all", 1, F_ARGS | F_SPLIT | F_CONCAT, F_MESH},
    [OP_COMPUTE] = {"compute", 0, F_US, 0},
    [OP_SHARD_SLICE] = {"shard_slice", 1, F_ARGS | F_AXIS | F_MESH, 0},
    [OP_RUN_OUTPUT] = {"run_output", 0, 0, F_SHAPE},
};

int opcode_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < OP__COUNT; i++) {
        if (strcmp(op_specs[i].name, name) == 0)
            return i;
    }
    return -1;
}

const char *opcode_name(opcode_t code)
{
    if ((int)code < 0 || code >= OP__COUNT)
        return "?";
    return op_specs[code].name;
}

int opcode_is_collective(opcode_t code)
{
    return code == OP_ALL_REDUCE || code == OP_ALL_GATHER || code == OP_REDUCE_SCATTER ||
           code == OP_PPERMUTE || code == OP_ALL_TO_ALL;
}

/* ------------------------------------------------------------------ */
/* Small helpers: formatting paths, JSON readers. */

/* snprintf through a va_list: truncation of field paths is acceptable
 * (they are diagnostics), and this keeps -Wformat-truncation quiet. */
static void fmt(char *dst, size_t n, const char *f, ...) __attribute__((format(printf, 3, 4)));
static void fmt(char *dst, size_t n, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    vsnprintf(dst, n, f, ap);
    va_end(ap);
}

/* Names: 1..NAME_MAX_LEN-1 chars of [A-Za-z0-9_-]. */
static int name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n >= NAME_MAX_LEN)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                 (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
        if (!ok)
            return 0;
    }
    return 1;
}

static int json_name(const json_t *v)
{
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v) &&
           name_valid(json_string_value(v));
}

/* Integer in [lo, hi]; reals (even 1.0) and booleans are not integers. */
static int read_int(const json_t *v, int64_t lo, int64_t hi, int64_t *out)
{
    if (!json_is_integer(v))
        return -1;
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi)
        return -1;
    *out = (int64_t)i;
    return 0;
}

/* A finite number that also stays finite as an f32. */
static int read_float(const json_t *v, float *out)
{
    if (!json_is_number(v))
        return -1;
    double d = json_number_value(v);
    if (!isfinite(d) || fabs(d) > FLT_MAX)
        return -1;
    *out = (float)d;
    return 0;
}

/* Array of min_rank..max_rank integers, each 1..max_dim, at most
 * TENSOR_MAX_ELEMS in product. */
static int read_shape(const json_t *v, int min_rank, int max_rank, int64_t max_dim,
                      shape_t *out)
{
    if (!json_is_array(v))
        return -1;
    size_t n = json_array_size(v);
    if (n < (size_t)min_rank || n > (size_t)max_rank)
        return -1;
    shape_t s;
    memset(&s, 0, sizeof s);
    s.rank = (int)n;
    int64_t numel = 1;
    for (size_t i = 0; i < n; i++) {
        if (read_int(json_array_get(v, i), 1, max_dim, &s.dim[i]))
            return -1;
        numel *= s.dim[i];
        if (numel > TENSOR_MAX_ELEMS)
            return -1;
    }
    *out = s;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Name index: open addressing, keys borrowed (they must outlive it). */

typedef struct nidx {
    size_t mask;
    const char **keys;
    int *vals;
} nidx_t;

static size_t nidx_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)h;
}

/* Capacity for n keys at load <= 1/2, so probing always finds a hole. */
static int nidx_init(nidx_t *x, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    x->mask = cap - 1;
    x->keys = calloc(cap, sizeof *x->keys);
    x->vals = calloc(cap, sizeof *x->vals);
    if (!x->keys || !x->vals) {
        free(x->keys);
        free(x->vals);
        x->keys = NULL;
        x->vals = NULL;
        return -1;
    }
    return 0;
}

static void nidx_free(nidx_t *x)
{
    free(x->keys);
    free(x->vals);
    x->keys = NULL;
    x->vals = NULL;
}

static int nidx_find(const nidx_t *x, const char *k)
{
    for (size_t i = nidx_hash(k) & x->mask; x->keys[i]; i = (i + 1) & x->mask) {
        if (strcmp(x->keys[i], k) == 0)
            return x->vals[i];
    }
    return -1;
}

/* Inserts k -> v and returns -1, or returns the existing value (kept). The
 * caller never inserts more keys than the capacity given to nidx_init. */
static int nidx_put(nidx_t *x, const char *k, int v)
{
    size_t i = nidx_hash(k) & x->mask;
    for (; x->keys[i]; i = (i + 1) & x->mask) {
        if (strcmp(x->keys[i], k) == 0)
            return x->vals[i];
    }
    x->keys[i] = k;
    x->vals[i] = v;
    return -1;
}

/* ------------------------------------------------------------------ */
/* Compiling one computation. */

typedef struct cc cc_t;
/* Fills in->shape and in->producer for an `input` op, or fails through
 * op_fail() and returns the status. */
typedef int (*resolve_fn)(void *rctx, cc_t *x, comp_input_t *in);

struct cc {
    const char *prefix;     /* "computations[3]" (job) or "" (compiler_comp) */
    comp_t *c;
    nidx_t values;          /* value name -> slot; keys point into c->vnames */
    resolve_fn resolve;
    void *rctx;
    err_t *e;
    int global;             /* parsing a global computation (Part C) */
    int internal;           /* a program Atoll wrote (partitioned, or a worker's task):
                               "reshard" allowed */
    int j;                  /* op being compiled */
    const char *opname;     /* its op name once known, else "?" */
};

static void field_join(char *dst, size_t n, const char *prefix, const char *sub)
{
    if (!prefix[0])
        fmt(dst, n, "%s", sub);
    else if (!sub[0])
        fmt(dst, n, "%s", prefix);
    else
        fmt(dst, n, "%s.%s", prefix, sub);
}

/* 400 at field PREFIX.ops[j].SUB, detail "computation 'c' op j (name): ...". */
static int op_fail(cc_t *x, const char *sub, const char *f, ...) __attribute__((format(printf, 3, 4)));
static int op_fail(cc_t *x, const char *sub, const char *f, ...)
{
    char opfield[32], field[ERR_FIELD_MAX], where[ERR_FIELD_MAX], msg[ERR_DETAIL_MAX];
    fmt(opfield, sizeof opfield, "ops[%d]", x->j);
    field_join(where, sizeof where, x->prefix, opfield);
    field_join(field, sizeof field, where, sub);
    va_list ap;
    va_start(ap, f);
    vsnprintf(msg, sizeof msg, f, ap);
    va_end(ap);
    return err_set(x->e, 400, field, "computation '%s' op %d (%s): %s", x->c->name, x->j,
                   x->opname, msg);
}

/* 400 at field PREFIX.SUB for faults of the computation object itself. */
static int comp_fail(const char *prefix, err_t *e, const char *sub, const char *f, ...)
    __attribute__((format(printf, 4, 5)));
static int comp_fail(const char *prefix, err_t *e, const char *sub, const char *f, ...)
{
    char field[ERR_FIELD_MAX], msg[ERR_DETAIL_MAX];
    field_join(field, sizeof field, prefix, sub);
    va_list ap;
    va_start(ap, f);
    vsnprintf(msg, sizeof msg, f, ap);
    va_end(ap);
    return err_set(e, 400, field, "%s", msg);
}

static int field_bit(const char *key)
{
    for (int i = 0; i < NFIELDS; i++) {
        if (strcmp(field_names[i], key) == 0)
            return i;
    }
    return -1;
}

/* Exactly the fields of the ops table: no unknown one, no required missing. */
static int op_check_keys(cc_t *x, const json_t *opj, const op_spec_t *spec)
{
    const char *key;
    json_t *val;
    unsigned allowed = spec->required | spec->optional;
    json_object_foreach((json_t *)opj, key, val) {
        if (strcmp(key, "op") == 0 || strcmp(key, "out") == 0)
            continue;
        if (strcmp(key, "sharding") == 0 && !x->global)
            return op_fail(x, key, "sharding needs a global computation (\"global\": true)");
        if (strcmp(key, "sharding") == 0)
            continue;       /* read by the partitioner (gspmd.c) */
        if (strcmp(key, "reshard") == 0 && !x->internal)
            return op_fail(x, key, "unknown field 'reshard' (the partitioner writes it)");
        int b = field_bit(key);
        if (b < 0 || !(allowed & (1u << b)))
            return op_fail(x, key, "unknown field '%s'", key);
    }
    for (int b = 0; b < NFIELDS; b++) {
        if ((spec->required & (1u << b)) && !json_object_get(opj, field_names[b]))
            return op_fail(x, field_names[b], "missing field '%s'", field_names[b]);
    }
    return 0;
}

static int op_args(cc_t *x, const json_t *opj, op_t *op, int nargs)
{
    const json_t *a = json_object_get(opj, "args");
    if (nargs == -2) {          /* einsum: one or two operands */
        if (!json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > 2)
            return op_fail(x, "args", "args must be an array of 1 or 2 value names");
        nargs = (int)json_array_size(a);
    }
    op->nargs = nargs;
    if (nargs == 0)
        return 0;
    if (!json_is_array(a) || json_array_size(a) != (size_t)nargs)
        return op_fail(x, "args", "args must be an array of %d value name%s", nargs,
                       nargs == 1 ? "" : "s");
    for (int k = 0; k < nargs; k++) {
        char sub[16];
        fmt(sub, sizeof sub, "args[%d]", k);
        const json_t *s = json_array_get(a, (size_t)k);
        if (!json_is_string(s))
            return op_fail(x, sub, "arguments must be value names");
        int slot = nidx_find(&x->values, json_string_value(s));
        if (slot < 0)
            return op_fail(x, sub, "unknown value '%s' (arguments must be defined by earlier ops)",
                           json_string_value(s));
        op->arg[k] = slot;
    }
    return 0;
}

static int op_tensor_shape(cc_t *x, const json_t *opj, shape_t *out)
{
    if (read_shape(json_object_get(opj, "shape"), 0, TENSOR_MAX_RANK, TENSOR_MAX_ELEMS, out))
        return op_fail(x, "shape",
                       "shape must be an array of 0 to %d integers >= 1 with at most %lld elements",
                       TENSOR_MAX_RANK, (long long)TENSOR_MAX_ELEMS);
    return 0;
}

static int op_float(cc_t *x, const json_t *opj, const char *key, float *out)
{
    if (read_float(json_object_get(opj, key), out))
        return op_fail(x, key, "%s must be a finite number", key);
    return 0;
}

/* An axis field in 0..rank-1 of the argument. */
static int op_axis(cc_t *x, const json_t *opj, const char *key, int rank, int *out)
{
    int64_t v;
    if (rank < 1)
        return op_fail(x, key, "%s needs an argument of rank >= 1", key);
    if (read_int(json_object_get(opj, key), 0, rank - 1, &v))
        return op_fail(x, key, "%s must be an integer in 0..%d", key, rank - 1);
    *out = (int)v;
    return 0;
}

static int op_reduce(cc_t *x, const json_t *opj, op_t *op)
{
    static const char *const names[] = {"sum", "max", "min"};
    const char *s = json_string_value(json_object_get(opj, "reduce"));
    for (int i = 0; s && i < 3; i++) {
        if (strcmp(s, names[i]) == 0) {
            op->reduce = (reduce_kind_t)i;
            return 0;
        }
    }
    return op_fail(x, "reduce", "reduce must be one of sum, max, min");
}

/* mesh_axes: 1..rank distinct slice axes -> bit mask; *g = group size. */
static int op_mesh(cc_t *x, const json_t *opj, op_t *op, int64_t *g)
{
    const shape_t *ss = &x->c->slice_shape;
    const json_t *m = json_object_get(opj, "mesh_axes");
    op->mesh_axes = 0;
    *g = x->c->nshards;
    if (!m)
        return 0;
    size_t n = json_array_size(m);
    if (!json_is_array(m) || n < 1 || n > (size_t)ss->rank)
        return op_fail(x, "mesh_axes", "mesh_axes must list 1 to %d distinct slice axes",
                       ss->rank);
    *g = 1;
    for (size_t i = 0; i < n; i++) {
        int64_t a;
        if (read_int(json_array_get(m, i), 0, ss->rank - 1, &a) || (op->mesh_axes & (1u << a)))
            return op_fail(x, "mesh_axes", "mesh_axes must list distinct integers in 0..%d",
                           ss->rank - 1);
        op->mesh_axes |= 1u << a;
        *g *= ss->dim[a];
    }
    return 0;
}

static int op_numel_ok(cc_t *x, const shape_t *s)
{
    if (!shape_valid(s)) {
        char buf[64];
        shape_format(s, buf, sizeof buf);
        return op_fail(x, "", "result %s exceeds %lld elements", buf, (long long)TENSOR_MAX_ELEMS);
    }
    return 0;
}

/* A cross-mesh edge (gspmd.h): the producer's pieces must be what its
 * shards hold, the consumer's mesh this slice; the result is this shard's
 * piece under the edge's `to`. */
static int op_input_reshard(cc_t *x, const json_t *rj, op_t *op, comp_input_t *in)
{
    char why[200];
    gspmd_edge_t *e = malloc(sizeof *e);
    if (!e)
        return err_set(x->e, 500, "", "out of memory");
    in->edge = e;
    if (gspmd_edge_parse(rj, e, why, sizeof why) != 0)
        return op_fail(x, "reshard", "%s", why);
    gspmd_mesh_t pm = {.shape = e->from_mesh}, cm = {.shape = e->to_mesh};
    shape_t pl;
    gspmd_local_shape(&e->global, &e->from, &pm, &pl);
    if (!shape_equal(&pl, &in->shape) || !shape_equal(&e->to_mesh, &x->c->slice_shape))
        return op_fail(x, "reshard", "reshard does not match the producer's pieces or this "
                       "computation's mesh");
    gspmd_local_shape(&e->global, &e->to, &cm, &op->shape);
    return 0;
}

static int op_input(cc_t *x, const json_t *opj, op_t *op)
{
    const char *from = json_string_value(json_object_get(opj, "from"));
    const char *dot = from ? strchr(from, '.') : NULL;
    comp_t *c = x->c;
    comp_input_t *in = &c->inputs[c->ninputs];
    if (!dot || (size_t)(dot - from) >= NAME_MAX_LEN || strlen(dot + 1) >= NAME_MAX_LEN)
        return op_fail(x, "from", "from must be \"computation.value\"");
    memset(in, 0, sizeof *in);
    memcpy(in->producer_name, from, (size_t)(dot - from));
    fmt(in->value, sizeof in->value, "%s", dot + 1);
    fmt(in->from, sizeof in->from, "%s", from);
    if (!name_valid(in->producer_name) || !name_valid(in->value))
        return op_fail(x, "from", "from must be \"computation.value\"");
    in->producer = -1;
    in->op_index = x->j;
    int rc = x->resolve(x->rctx, x, in);
    if (rc)
        return rc;
    op->input = c->ninputs++;
    op->shape = in->shape;
    const json_t *rj = json_object_get(opj, "reshard");
    return rj ? op_input_reshard(x, rj, op, in) : 0;
}

static int op_binary(cc_t *x, op_t *op, const shape_t *a, const shape_t *b)
{
    if (shape_equal(a, b) || b->rank == 0) {
        op->shape = *a;
    } else if (a->rank == 0) {
        op->shape = *b;
    } else {
        char sa[64], sb[64];
        shape_format(a, sa, sizeof sa);
        shape_format(b, sb, sizeof sb);
        return op_fail(x, "args", "shapes %s and %s differ (only a scalar broadcasts)", sa, sb);
    }
    return 0;
}

static int op_matmul(cc_t *x, op_t *op, const shape_t *a, const shape_t *b)
{
    if (a->rank != 2 || b->rank != 2 || a->dim[1] != b->dim[0]) {
        char sa[64], sb[64];
        shape_format(a, sa, sizeof sa);
        shape_format(b, sb, sizeof sb);
        return op_fail(x, "args", "matmul needs [m,k] x [k,n], got %s x %s", sa, sb);
    }
    memset(&op->shape, 0, sizeof op->shape);
    op->shape.rank = 2;
    op->shape.dim[0] = a->dim[0];
    op->shape.dim[1] = b->dim[1];
    return op_numel_ok(x, &op->shape);
}

static int op_reshape(cc_t *x, const json_t *opj, op_t *op, const shape_t *a)
{
    int rc = op_tensor_shape(x, opj, &op->shape);
    if (rc)
        return rc;
    if (shape_numel(&op->shape) != shape_numel(a)) {
        char sa[64], sb[64];
        shape_format(a, sa, sizeof sa);
        shape_format(&op->shape, sb, sizeof sb);
        return op_fail(x, "shape", "cannot reshape %s to %s (element counts differ)", sa, sb);
    }
    return 0;
}

/* Drops axis `axis` from a (axis -1: every axis, giving a scalar). */
static void shape_drop_axis(const shape_t *a, int axis, shape_t *out)
{
    shape_t s;
    memset(&s, 0, sizeof s);
    if (axis >= 0) {
        for (int i = 0; i < a->rank; i++) {
            if (i != axis)
                s.dim[s.rank++] = a->dim[i];
        }
    }
    *out = s;
}

static int op_reduce_sum(cc_t *x, const json_t *opj, op_t *op, const shape_t *a)
{
    op->axis = -1;
    if (json_object_get(opj, "axis")) {
        int rc = op_axis(x, opj, "axis", a->rank, &op->axis);
        if (rc)
            return rc;
    }
    shape_drop_axis(a, op->axis, &op->shape);
    return 0;
}

/* Reads one einsum term ("bsd") into letters; -1 on anything but
 * distinct lower-case letters, at most TENSOR_MAX_RANK of them. */
static int einsum_term(const char *s, size_t len, uint8_t *letters, uint8_t *n)
{
    unsigned seen = 0;
    if (len > TENSOR_MAX_RANK)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < 'a' || s[i] > 'z' || (seen & (1u << (s[i] - 'a'))))
            return -1;
        seen |= 1u << (s[i] - 'a');
        letters[i] = (uint8_t)(s[i] - 'a');
    }
    *n = (uint8_t)len;
    return 0;
}

/* einsum: "spec" = operands (comma-separated, one per argument) "->"
 * output. Every letter of the output appears in an operand; a letter in
 * both operands has one size; letters absent from the output are summed. */
static int op_einsum(cc_t *x, const json_t *opj, op_t *op)
{
    const char *spec = json_string_value(json_object_get(opj, "spec"));
    const char *arrow = spec ? strstr(spec, "->") : NULL;
    const char *comma = spec ? strchr(spec, ',') : NULL;
    if (!arrow || (op->nargs == 2) != (comma != NULL && comma < arrow))
        return op_fail(x, "spec", "spec must be like \"%s\" (one term per argument, then ->"
                       " and the output term)", op->nargs == 2 ? "ij,jk->ik" : "ij->ji");
    const char *t0end = op->nargs == 2 ? comma : arrow;
    if (einsum_term(spec, (size_t)(t0end - spec), op->ein.l[0], &op->ein.n[0]) ||
        (op->nargs == 2 &&
         einsum_term(comma + 1, (size_t)(arrow - comma - 1), op->ein.l[1], &op->ein.n[1])) ||
        einsum_term(arrow + 2, strlen(arrow + 2), op->ein.l[2], &op->ein.n[2]))
        return op_fail(x, "spec", "spec terms must be distinct lower-case letters, at most %d"
                       " per term", TENSOR_MAX_RANK);
    int64_t size[26] = {0};
    for (int k = 0; k < op->nargs; k++) {
        const shape_t *s = &x->c->vshapes[op->arg[k]];
        if (s->rank != op->ein.n[k])
            return op_fail(x, "spec", "term %d has %d letters but argument %d has rank %d", k,
                           op->ein.n[k], k, s->rank);
        for (int i = 0; i < s->rank; i++) {
            int64_t *z = &size[op->ein.l[k][i]];
            if (*z && *z != s->dim[i])
                return op_fail(x, "spec", "letter '%c' has size %lld and %lld",
                               'a' + op->ein.l[k][i], (long long)*z, (long long)s->dim[i]);
            *z = s->dim[i];
        }
    }
    op->shape.rank = op->ein.n[2];
    for (int i = 0; i < op->ein.n[2]; i++) {
        if (!size[op->ein.l[2][i]])
            return op_fail(x, "spec", "output letter '%c' is in no operand", 'a' + op->ein.l[2][i]);
        op->shape.dim[i] = size[op->ein.l[2][i]];
    }
    return op_numel_ok(x, &op->shape);
}

static int op_divisible(cc_t *x, const char *key, const shape_t *a, int axis, int64_t g)
{
    if (a->dim[axis] % g != 0)
        return op_fail(x, key, "dimension %d (%lld) is not divisible by the group size %lld",
                       axis, (long long)a->dim[axis], (long long)g);
    return 0;
}

/* ppermute: "shift" (member p's value goes to member (p + shift) mod g), or
 * "pairs" [[source, target], ...] of member positions in [0, g), each
 * source and each target at most once (a member no pair targets gets
 * zeros). The pairs are kept as op->perm: 2g entries, the source of each
 * target then the target of each source, -1 for none. */
static int op_ppermute(cc_t *x, const json_t *opj, op_t *op, int64_t g)
{
    const json_t *shift = json_object_get(opj, "shift"), *pairs = json_object_get(opj, "pairs");
    int64_t v;
    if (!shift == !pairs)
        return op_fail(x, pairs ? "pairs" : "shift", "ppermute takes shift or pairs, not %s",
                       pairs ? "both" : "neither");
    if (shift) {
        if (read_int(shift, INT64_MIN, INT64_MAX, &v))
            return op_fail(x, "shift", "shift must be an integer");
        op->shift = v;
        return 0;
    }
    if (!json_is_array(pairs) || json_array_size(pairs) < 1 || (int64_t)json_array_size(pairs) > g)
        return op_fail(x, "pairs", "pairs must list 1 to %lld [source, target] pairs",
                       (long long)g);
    if (!(op->perm = malloc(sizeof *op->perm * 2 * (size_t)g)))
        return op_fail(x, "pairs", "out of memory");
    op->nperm = (int)g;
    for (int64_t i = 0; i < 2 * g; i++)
        op->perm[i] = -1;
    size_t i;
    const json_t *pr;
    json_array_foreach(pairs, i, pr) {
        int64_t src, dst;
        if (!json_is_array(pr) || json_array_size(pr) != 2 ||
            read_int(json_array_get(pr, 0), 0, g - 1, &src) ||
            read_int(json_array_get(pr, 1), 0, g - 1, &dst))
            return op_fail(x, "pairs", "pairs[%zu] must be [source, target], positions 0..%lld",
                           i, (long long)(g - 1));
        if (op->perm[dst] >= 0 || op->perm[g + src] >= 0)
            return op_fail(x, "pairs", "pairs[%zu]: each source and each target at most once",
                           i);
        op->perm[dst] = (int32_t)src;
        op->perm[g + src] = (int32_t)dst;
    }
    return 0;
}

static int op_collective(cc_t *x, const json_t *opj, op_t *op, const shape_t *a)
{
    int64_t g;
    int rc = op_mesh(x, opj, op, &g);
    if (rc)
        return rc;
    op->shape = *a;
    switch (op->code) {
    case OP_ALL_REDUCE:
        return op_reduce(x, opj, op);
    case OP_ALL_GATHER:
        if ((rc = op_axis(x, opj, "axis", a->rank, &op->axis)))
            return rc;
        op->shape.dim[op->axis] *= g;
        return op_numel_ok(x, &op->shape);
    case OP_REDUCE_SCATTER:
        if ((rc = op_axis(x, opj, "axis", a->rank, &op->axis)) || (rc = op_reduce(x, opj, op)) ||
            (rc = op_divisible(x, "axis", a, op->axis, g)))
            return rc;
        op->shape.dim[op->axis] /= g;
        return 0;
    case OP_PPERMUTE:
        return op_ppermute(x, opj, op, g);
    case OP_ALL_TO_ALL:
        if ((rc = op_axis(x, opj, "split_axis", a->rank, &op->split_axis)) ||
            (rc = op_axis(x, opj, "concat_axis", a->rank, &op->concat_axis)) ||
            (rc = op_divisible(x, "split_axis", a, op->split_axis, g)))
            return rc;
        op->shape.dim[op->split_axis] /= g;
        op->shape.dim[op->concat_axis] *= g;
        return 0;
    default:
        return op_fail(x, "op", "internal: not a collective");
    }
}

/* shard_slice: axis, and mesh_axes as an ordered list (major to minor) of
 * distinct slice axes whose sizes' product divides the axis. */
static int op_shard_slice(cc_t *x, const json_t *opj, op_t *op, const shape_t *a)
{
    const shape_t *ss = &x->c->slice_shape;
    const json_t *m = json_object_get(opj, "mesh_axes");
    size_t n = json_array_size(m);
    int64_t g = 1;
    int rc = op_axis(x, opj, "axis", a->rank, &op->axis);
    if (rc)
        return rc;
    if (!json_is_array(m) || n < 1 || n > (size_t)ss->rank)
        return op_fail(x, "mesh_axes", "mesh_axes must list 1 to %d distinct slice axes",
                       ss->rank);
    op->mesh_axes = 0;
    op->nslice = (int)n;
    for (size_t i = 0; i < n; i++) {
        int64_t ax, stride = 1;
        if (read_int(json_array_get(m, i), 0, ss->rank - 1, &ax) || (op->mesh_axes & (1u << ax)))
            return op_fail(x, "mesh_axes", "mesh_axes must list distinct integers in 0..%d",
                           ss->rank - 1);
        for (int k = ss->rank - 1; k > ax; k--)
            stride *= ss->dim[k];
        op->mesh_axes |= 1u << ax;
        op->slice_stride[i] = stride;
        op->slice_dim[i] = ss->dim[ax];
        g *= ss->dim[ax];
    }
    if ((rc = op_divisible(x, "axis", a, op->axis, g)))
        return rc;
    op->shape = *a;
    op->shape.dim[op->axis] /= g;
    return 0;
}

static int op_unary_shape(cc_t *x, const json_t *opj, op_t *op, const shape_t *a)
{
    switch (op->code) {
    case OP_SCALE:
        op->shape = *a;
        return op_float(x, opj, "factor", &op->factor);
    case OP_TRANSPOSE:
        if (a->rank != 2)
            return op_fail(x, "args", "transpose needs a rank-2 argument, got rank %d", a->rank);
        op->shape = *a;
        op->shape.dim[0] = a->dim[1];
        op->shape.dim[1] = a->dim[0];
        return 0;
    case OP_RESHAPE:
        return op_reshape(x, opj, op, a);
    case OP_REDUCE_SUM:
    case OP_REDUCE_MAX:
        return op_reduce_sum(x, opj, op, a);
    case OP_SOFTMAX:
        op->shape = *a;
        return op_axis(x, opj, "axis", a->rank, &op->axis);
    case OP_EINSUM:
        return op_einsum(x, opj, op);
    case OP_SHARD_SLICE:
        return op_shard_slice(x, opj, op, a);
    default:
        if (opcode_is_collective(op->code))
            return op_collective(x, opj, op, a);
        op->shape = *a;     /* neg, relu, exp, tanh, rsqrt, log */
        return 0;
    }
}

/* Shape inference and the op-specific fields, after keys and args passed. */
static int op_semantics(cc_t *x, const json_t *opj, op_t *op)
{
    const shape_t *a = op->nargs > 0 ? &x->c->vshapes[op->arg[0]] : NULL;
    const shape_t *b = op->nargs > 1 ? &x->c->vshapes[op->arg[1]] : NULL;
    int64_t us;
    memset(&op->shape, 0, sizeof op->shape);    /* rank 0 unless set below */
    switch (op->code) {
    case OP_FILL: {
        int rc = op_tensor_shape(x, opj, &op->shape);
        return rc ? rc : op_float(x, opj, "value", &op->value);
    }
    case OP_IOTA:
        return op_tensor_shape(x, opj, &op->shape);
    case OP_SHARD_INDEX:
        return 0;
    case OP_RUN_OUTPUT:         /* rank -1: the processes decide */
        if (!json_object_get(opj, "shape")) {
            op->shape.rank = -1;
            return 0;
        }
        return op_tensor_shape(x, opj, &op->shape);
    case OP_INPUT:
        return op_input(x, opj, op);
    case OP_COMPUTE:
        if (read_int(json_object_get(opj, "us"), 0, COMPUTE_US_MAX, &us))
            return op_fail(x, "us", "us must be an integer in 0..%d", COMPUTE_US_MAX);
        op->us = us;
        return 0;
    case OP_MATMUL:
        return op_matmul(x, op, a, b);
    default:
        if (op->nargs == 2 && op->code != OP_EINSUM)
            return op_binary(x, op, a, b);
        return op_unary_shape(x, opj, op, a);
    }
}

static void op_init(op_t *op, int j)
{
    memset(op, 0, sizeof *op);
    op->out = j;
    op->arg[0] = op->arg[1] = -1;
    op->axis = -1;
    op->input = -1;
}

static int cc_op(cc_t *x, int j, const json_t *opj)
{
    comp_t *c = x->c;
    op_t *op = &c->ops[j];
    x->j = j;
    x->opname = "?";
    op_init(op, j);
    if (!json_is_object(opj))
        return op_fail(x, "", "each op must be an object");
    const json_t *name = json_object_get(opj, "op");
    if (!json_is_string(name))
        return op_fail(x, "op", name ? "op must be a string" : "missing field 'op'");
    int code = opcode_from_name(json_string_value(name));
    if (code < 0)
        return op_fail(x, "op", "unknown op '%s'", json_string_value(name));
    if ((code == OP_RUN_OUTPUT) != 0 && !x->c->run)
        return op_fail(x, "op", "unknown op 'run_output'");
    if (x->c->run && code != OP_INPUT && code != OP_RUN_OUTPUT)
        return op_fail(x, "op", "a run computation holds only its inputs and outputs");
    op->code = (opcode_t)code;
    x->opname = op_specs[code].name;
    if (x->global && (code == OP_SHARD_INDEX || code == OP_SHARD_SLICE ||
                      opcode_is_collective(op->code)))
        return op_fail(x, "op", "%s is not allowed in a global computation: the partitioner "
                       "places the shards and their collectives", op_specs[code].name);
    int rc = op_check_keys(x, opj, &op_specs[code]);
    if (rc)
        return rc;
    const json_t *out = json_object_get(opj, "out");
    if (!out)
        return op_fail(x, "out", "missing field 'out'");
    if (!json_name(out))
        return op_fail(x, "out", "out must be a name of 1 to %d characters [A-Za-z0-9_-]",
                       NAME_MAX_LEN - 1);
    if ((rc = op_args(x, opj, op, op_specs[code].nargs)) || (rc = op_semantics(x, opj, op)))
        return rc;
    /* Define the value only now, so an op cannot read its own result. */
    fmt(c->vnames[j], sizeof c->vnames[j], "%s", json_string_value(out));
    int prev = nidx_put(&x->values, c->vnames[j], j);
    if (prev >= 0)
        return op_fail(x, "out", "value '%s' is already defined by op %d", c->vnames[j], prev);
    c->vshapes[j] = op->shape;
    return 0;
}

static int cc_outputs(cc_t *x, const json_t *outs)
{
    comp_t *c = x->c;
    size_t n = json_array_size(outs);
    c->outputs = calloc(n ? n : 1, sizeof *c->outputs);
    if (!c->outputs)
        return err_set(x->e, 500, "", "out of memory");
    for (size_t k = 0; k < n; k++) {
        char sub[32];
        fmt(sub, sizeof sub, "outputs[%zu]", k);
        const json_t *s = json_array_get(outs, k);
        int slot = json_is_string(s) ? nidx_find(&x->values, json_string_value(s)) : -1;
        if (slot < 0)
            return comp_fail(x->prefix, x->e, sub, "computation '%s': output %zu must name a "
                             "value the computation defines", c->name, k);
        for (int i = 0; i < c->noutputs; i++) {
            if (c->outputs[i] == slot)
                return comp_fail(x->prefix, x->e, sub, "computation '%s': output '%s' is "
                                 "listed twice", c->name, c->vnames[slot]);
        }
        c->outputs[c->noutputs++] = slot;
    }
    return 0;
}

/* Counts `input` ops so c->inputs can be sized exactly. */
static size_t count_inputs(const json_t *ops)
{
    size_t n = 0;
    for (size_t j = 0; j < json_array_size(ops); j++) {
        const char *s = json_string_value(json_object_get(json_array_get(ops, j), "op"));
        if (s && strcmp(s, "input") == 0)
            n++;
    }
    return n;
}

static int cc_alloc(comp_t *c, size_t nops, size_t ninputs)
{
    c->ops = calloc(nops, sizeof *c->ops);
    c->vnames = calloc(nops, sizeof *c->vnames);
    c->vshapes = calloc(nops, sizeof *c->vshapes);
    c->inputs = calloc(ninputs ? ninputs : 1, sizeof *c->inputs);
    return c->ops && c->vnames && c->vshapes && c->inputs ? 0 : -1;
}

/* Header checks shared by both entry points: an object with only the known
 * keys, a valid name and a string `slice`; `ops` or `run` (a program Atoll
 * wrote, `internal`, has both: a run computation's lowered form). Fills
 * c->name and c->global. */
static int comp_head(const json_t *cj, const char *prefix, int internal, comp_t *c, err_t *e)
{
    static const char *const keys[] = {"name", "slice", "ops", "outputs", "global", "run",
                                       "inputs"};
    const char *key;
    json_t *val;
    if (!json_is_object(cj))
        return comp_fail(prefix, e, "", "each computation must be an object");
    json_object_foreach((json_t *)cj, key, val) {
        int known = 0;
        for (int i = 0; i < 7; i++)
            known |= strcmp(key, keys[i]) == 0;
        if (!known)
            return comp_fail(prefix, e, key, "unknown field '%s' in a computation", key);
    }
    const json_t *name = json_object_get(cj, "name");
    if (!json_name(name))
        return comp_fail(prefix, e, "name", "computation name must be 1 to %d characters "
                         "[A-Za-z0-9_-]", NAME_MAX_LEN - 1);
    fmt(c->name, sizeof c->name, "%s", json_string_value(name));
    const json_t *global = json_object_get(cj, "global");
    if (global && !json_is_boolean(global))
        return comp_fail(prefix, e, "global", "computation '%s': global must be true or false",
                         c->name);
    c->global = json_is_true(global);
    int run = json_object_get(cj, "run") != NULL;
    if (run && !internal && json_object_get(cj, "ops"))
        return comp_fail(prefix, e, "run", "computation '%s': give ops or run, not both",
                         c->name);
    if (run && c->global)
        return comp_fail(prefix, e, "global", "computation '%s': a run computation cannot be "
                         "global", c->name);
    if (json_object_get(cj, "inputs") && (!run || internal))
        return comp_fail(prefix, e, "inputs", "computation '%s': inputs belong to run "
                         "computations (ops computations use input ops)", c->name);
    if (!json_is_string(json_object_get(cj, "slice")))
        return comp_fail(prefix, e, "slice", "computation '%s': slice must be a slice name",
                         c->name);
    return 0;
}

/* A run computation ("run", DESIGN Part F) in its lowered form: {name,
 * slice, run, ops: [input op per "inputs" entry, run_output op per
 * output], outputs}, the form workers compile. New reference in *out, or a
 * 400 at the culprit's field. */
static int run_lower(const json_t *cj, const char *prefix, const char *cname, json_t **out,
                     err_t *e)
{
    const json_t *ins = json_object_get(cj, "inputs"), *outs = json_object_get(cj, "outputs");
    const json_t *run = json_object_get(cj, "run");
    const json_t *shapes = json_object_get(run, "shapes");
    const char *key;
    json_t *v;
    if (ins && (!json_is_object(ins) || json_object_size(ins) > RUNSPEC_MAX_VALUES))
        return comp_fail(prefix, e, "inputs", "computation '%s': inputs must be an object of "
                         "at most %d name: \"computation.value\" entries", cname,
                         RUNSPEC_MAX_VALUES);
    if (outs && (!json_is_array(outs) || json_array_size(outs) > RUNSPEC_MAX_VALUES))
        return comp_fail(prefix, e, "outputs", "computation '%s': outputs must be an array of "
                         "at most %d names", cname, RUNSPEC_MAX_VALUES);
    if (shapes && !json_is_object(shapes))
        return comp_fail(prefix, e, "run.shapes", "computation '%s': run.shapes must be an "
                         "object of output name: shape", cname);
    json_t *ops = json_array(), *low = NULL;
    if (!ops)
        return err_set(e, 500, "", "out of memory");
    json_object_foreach((json_t *)ins, key, v) {
        char sub[ERR_FIELD_MAX];
        fmt(sub, sizeof sub, "inputs.%s", key);
        if (!name_valid(key) || !json_is_string(v)) {
            json_decref(ops);
            return comp_fail(prefix, e, sub, "computation '%s': each input is name: "
                             "\"computation.value\" (names [A-Za-z0-9_-])", cname);
        }
        json_array_append_new(ops, json_pack("{s:s, s:s, s:O}", "op", "input", "out", key,
                                             "from", v));
    }
    for (size_t k = 0; k < json_array_size(outs); k++) {
        const json_t *o = json_array_get(outs, k);
        json_t *op = json_pack("{s:s, s:O}", "op", "run_output", "out", o);
        const json_t *shape = json_string_value(o) ? json_object_get(shapes,
                                                                     json_string_value(o)) : NULL;
        if (op && shape)
            json_object_set(op, "shape", (json_t *)shape);
        json_array_append_new(ops, op);
    }
    json_object_foreach((json_t *)shapes, key, v) {
        int listed = 0;
        for (size_t k = 0; k < json_array_size(outs); k++)
            listed |= json_is_string(json_array_get(outs, k)) &&
                      strcmp(json_string_value(json_array_get(outs, k)), key) == 0;
        if (!listed) {
            char sub[ERR_FIELD_MAX];
            fmt(sub, sizeof sub, "run.shapes.%s", key);
            json_decref(ops);
            return comp_fail(prefix, e, sub, "computation '%s': '%s' is not one of its "
                             "outputs", cname, key);
        }
    }
    if (json_array_size(ops) == 0)
        json_array_append_new(ops, json_pack("{s:s, s:s}", "op", "run_output", "out", "_"));
    /* "o" steals: ops and a new reference to the outputs (a fresh [] when
     * absent), also when json_pack fails. */
    low = json_pack("{s:O, s:O, s:O, s:o, s:o}", "name", json_object_get(cj, "name"), "slice",
                    json_object_get(cj, "slice"), "run", run, "ops", ops, "outputs",
                    outs ? json_incref((json_t *)outs) : json_array());
    if (!low)
        return err_set(e, 500, "", "out of memory");
    *out = low;
    return 0;
}

/* An error found compiling a run computation's lowered form names an op of
 * it ("PREFIX.ops[k]..."): name what the user wrote instead. */
static void run_fix_field(const json_t *low, const char *prefix, err_t *e)
{
    char head[ERR_FIELD_MAX];
    int k = -1;
    fmt(head, sizeof head, "%s.ops[", prefix);
    if (strncmp(e->field, head, strlen(head)) != 0 ||
        sscanf(e->field + strlen(head), "%d", &k) != 1)
        return;
    const json_t *op = json_array_get(json_object_get(low, "ops"), (size_t)k);
    const char *out = json_string_value(json_object_get(op, "out"));
    const char *code = json_string_value(json_object_get(op, "op"));
    if (!out || !code)
        return;
    if (strcmp(code, "input") == 0) {
        fmt(e->field, sizeof e->field, "%s.inputs.%s", prefix, out);
        return;
    }
    const json_t *outs = json_object_get(low, "outputs");
    for (size_t i = 0; i < json_array_size(outs); i++)
        if (json_is_string(json_array_get(outs, i)) &&
            strcmp(json_string_value(json_array_get(outs, i)), out) == 0) {
            fmt(e->field, sizeof e->field, "%s.outputs[%zu]", prefix, i);
            return;
        }
}

/* Compiles ops and outputs into c (name, slice, slice_shape, nshards set by
 * the caller). On failure c may hold partial arrays: caller releases it. */
static int comp_body(const json_t *cj, const char *prefix, comp_t *c, int global,
                     int internal, resolve_fn resolve, void *rctx, err_t *e)
{
    cc_t x = {.prefix = prefix, .c = c, .global = global, .internal = internal,
              .resolve = resolve, .rctx = rctx, .e = e};
    const json_t *ops = json_object_get(cj, "ops");
    const json_t *outs = json_object_get(cj, "outputs");
    size_t nops = json_array_size(ops);
    int rc = 0;
    if (!json_is_array(ops) || nops < 1 || nops > JOB_MAX_OPS)
        return comp_fail(prefix, e, "ops", "computation '%s': ops must be an array of 1 to %d ops",
                         c->name, JOB_MAX_OPS);
    if (outs && !json_is_array(outs))
        return comp_fail(prefix, e, "outputs", "computation '%s': outputs must be an array of "
                         "value names", c->name);
    const json_t *run = json_object_get(cj, "run");
    char rprefix[ERR_FIELD_MAX];
    field_join(rprefix, sizeof rprefix, prefix, "run");
    if (run && (rc = runspec_parse(run, rprefix, &c->run, e)))
        return rc;
    if (cc_alloc(c, nops, count_inputs(ops)) || nidx_init(&x.values, nops))
        return err_set(e, 500, "", "out of memory");
    c->nops = c->nvalues = (int)nops;
    for (size_t j = 0; j < nops && !rc; j++)
        rc = cc_op(&x, (int)j, json_array_get(ops, j));
    if (!rc)
        rc = cc_outputs(&x, outs);
    nidx_free(&x.values);
    return rc;
}

/* Frees what a comp_t owns (not the struct itself). */
static void comp_release(comp_t *c)
{
    for (int i = 0; c->ops && i < c->nops; i++)
        free(c->ops[i].perm);
    free(c->ops);
    free(c->vnames);
    free(c->vshapes);
    free(c->outputs);
    for (int i = 0; c->inputs && i < c->ninputs; i++)
        free(c->inputs[i].edge);
    free(c->inputs);
    gspmd_free(c->gspmd);
    runspec_free(c->run);
    json_decref(c->run_json);
}

int comp_value_find(const comp_t *c, const char *name)
{
    for (int v = 0; v < c->nvalues; v++)
        if (strcmp(c->vnames[v], name) == 0)
            return v;
    return -1;
}

void comp_free(comp_t *c)
{
    if (!c)
        return;
    comp_release(c);
    free(c);
}

static void comp_set_slice(comp_t *c, int slice, const shape_t *slice_shape)
{
    c->slice = slice;
    c->slice_shape = *slice_shape;
    c->nshards = (int)shape_numel(slice_shape);
}

/* compiler_comp(): resolution through the caller's shape callback. */
typedef struct comp_rctx {
    compiler_input_fn fn;
    void *ctx;
} comp_rctx_t;

static int comp_resolve(void *rctx, cc_t *x, comp_input_t *in)
{
    comp_rctx_t *r = rctx;
    if (x->c->run && r->fn && r->fn(r->ctx, in->from, &in->shape) != 0) {
        in->shape.rank = -1;    /* a run computation takes what the producer wrote */
        return 0;
    }
    if (!r->fn || r->fn(r->ctx, in->from, &in->shape) != 0)
        return op_fail(x, "from", "unknown input '%s'", in->from);
    if (!shape_valid(&in->shape))
        return op_fail(x, "from", "input '%s' has an invalid shape", in->from);
    return 0;
}

static int slice_shape_valid(const shape_t *s)
{
    if (s->rank < 1 || s->rank > MESH_MAX_RANK)
        return 0;
    for (int i = 0; i < s->rank; i++) {
        if (s->dim[i] < 1 || s->dim[i] > SLICE_DIM_MAX)
            return 0;
    }
    return 1;
}

int compiler_comp(const json_t *comp_json, const shape_t *slice_shape,
                  compiler_input_fn input_shape, void *ctx, comp_t **out, err_t *e)
{
    comp_rctx_t r = {input_shape, ctx};
    if (!slice_shape || !slice_shape_valid(slice_shape))
        return err_set(e, 400, "slice_shape", "slice shape must have 1 to %d dims of 1..%d",
                       MESH_MAX_RANK, SLICE_DIM_MAX);
    comp_t *c = calloc(1, sizeof *c);
    if (!c)
        return err_set(e, 500, "", "out of memory");
    comp_set_slice(c, -1, slice_shape);
    int rc = comp_head(comp_json, "", 1, c, e);
    if (!rc)
        rc = c->global ? comp_fail("", e, "global", "compiler_comp() takes per-shard "
                                   "computations (a global one is partitioned by compiler_job)")
                       : comp_body(comp_json, "", c, 0, 1, comp_resolve, &r, e);
    if (rc) {
        comp_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Slices, islands, mesh shapes. */

static int fits_from(const shape_t *s, int i, const shape_t *isl, int k)
{
    if (i >= s->rank)
        return 1;
    if (i >= TENSOR_MAX_RANK)
        return 0;
    /* Slice axis i goes to island axis k' >= k, leaving room for the rest. */
    for (int kk = k; kk < TENSOR_MAX_RANK && isl->rank - kk >= s->rank - i; kk++) {
        if (s->dim[i] <= isl->dim[kk] && fits_from(s, i + 1, isl, kk + 1))
            return 1;
    }
    return 0;
}

int compiler_slice_fits(const shape_t *slice, const shape_t *island)
{
    if (!slice || !island || slice->rank < 1 || slice->rank > island->rank)
        return 0;
    return fits_from(slice, 0, island, 0);
}

void mesh_shape_format(const shape_t *s, char *buf, size_t len)
{
    size_t off = 0;
    if (len == 0)
        return;
    buf[0] = '\0';
    for (int i = 0; i < s->rank && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%ld", i ? "x" : "", (long)s->dim[i]);
}

int mesh_shape_parse(const char *text, shape_t *out)
{
    shape_t s;
    memset(&s, 0, sizeof s);
    const char *p = text;
    if (!p)
        return -1;
    for (;;) {
        int64_t d = 0;
        const char *start = p;
        while (*p >= '0' && *p <= '9') {
            d = d * 10 + (*p - '0');
            if (d > SLICE_DIM_MAX)
                return -1;
            p++;
        }
        if (p == start || d < 1 || s.rank == MESH_MAX_RANK)
            return -1;
        s.dim[s.rank++] = d;
        if (*p == '\0')
            break;
        if (*p != 'x')
            return -1;
        p++;
    }
    *out = s;
    return 0;
}

static int island_find(const island_desc_t *islands, int n, const char *name)
{
    for (int i = 0; i < n; i++) {
        if (islands[i].name && strcmp(islands[i].name, name) == 0)
            return i;
    }
    return -1;
}

/* "axes": one distinct name per dim of the shape; default x, y, z. */
static int slice_axes(const char *name, const json_t *axes, job_slice_t *out, err_t *e)
{
    static const char *const dflt[MESH_MAX_RANK] = {"x", "y", "z"};
    char field[ERR_FIELD_MAX];
    fmt(field, sizeof field, "slices.%s.axes", name);
    if (axes && (!json_is_array(axes) || json_array_size(axes) != (size_t)out->shape.rank))
        return err_set(e, 400, field, "slice '%s': axes must name each of its %d dims", name,
                       out->shape.rank);
    for (int i = 0; i < out->shape.rank; i++) {
        const json_t *a = axes ? json_array_get(axes, (size_t)i) : NULL;
        if (a && !json_name(a))
            return err_set(e, 400, field, "slice '%s': axis names must be 1 to %d characters "
                           "[A-Za-z0-9_-]", name, NAME_MAX_LEN - 1);
        fmt(out->axes[i], sizeof out->axes[i], "%s", a ? json_string_value(a) : dflt[i]);
        for (int k = 0; k < i; k++)
            if (strcmp(out->axes[k], out->axes[i]) == 0)
                return err_set(e, 400, field, "slice '%s': axis name '%s' is used twice", name,
                               out->axes[i]);
    }
    return 0;
}

static int slice_parse(const char *name, const json_t *sj, const island_desc_t *islands,
                       int nislands, job_slice_t *out, err_t *e)
{
    char field[ERR_FIELD_MAX];
    const char *key;
    json_t *val;
    fmt(field, sizeof field, "slices.%s", name);
    if (!name_valid(name))
        return err_set(e, 400, field, "slice names must be 1 to %d characters [A-Za-z0-9_-]",
                       NAME_MAX_LEN - 1);
    if (!json_is_object(sj))
        return err_set(e, 400, field, "slice '%s' must be an object", name);
    json_object_foreach((json_t *)sj, key, val) {
        if (strcmp(key, "shape") != 0 && strcmp(key, "island") != 0 &&
            strcmp(key, "axes") != 0) {
            fmt(field, sizeof field, "slices.%s.%s", name, key);
            return err_set(e, 400, field, "unknown field '%s' in slice '%s'", key, name);
        }
    }
    fmt(out->name, sizeof out->name, "%s", name);
    fmt(field, sizeof field, "slices.%s.shape", name);
    if (read_shape(json_object_get(sj, "shape"), 1, MESH_MAX_RANK, SLICE_DIM_MAX, &out->shape))
        return err_set(e, 400, field, "slice '%s': shape must be 1 to %d integers in 1..%d",
                       name, MESH_MAX_RANK, SLICE_DIM_MAX);
    int rc = slice_axes(name, json_object_get(sj, "axes"), out, e);
    if (rc)
        return rc;
    const json_t *isl = json_object_get(sj, "island");
    if (!isl)
        return 0;
    fmt(field, sizeof field, "slices.%s.island", name);
    if (!json_name(isl))
        return err_set(e, 400, field, "slice '%s': island must be an island name", name);
    fmt(out->island, sizeof out->island, "%s", json_string_value(isl));
    if (islands && island_find(islands, nislands, out->island) < 0)
        return err_set(e, 400, field, "slice '%s': unknown island '%s'", name, out->island);
    return 0;
}

static int job_slices(const json_t *sj, const island_desc_t *islands, int nislands,
                      job_plan_t *plan, err_t *e)
{
    const char *key;
    json_t *val;
    size_t n = json_object_size(sj);
    if (!json_is_object(sj) || n < 1 || n > SLICES_MAX)
        return err_set(e, 400, "slices", "slices must be an object of 1 to %d slices", SLICES_MAX);
    plan->slices = calloc(n, sizeof *plan->slices);
    if (!plan->slices)
        return err_set(e, 500, "", "out of memory");
    json_object_foreach((json_t *)sj, key, val) {
        int rc = slice_parse(key, val, islands, nislands, &plan->slices[plan->nslices], e);
        if (rc)
            return rc;
        plan->nslices++;
    }
    return 0;
}

/* 422 when a slice fits no island it may use. Skipped when islands is NULL. */
static int job_fit(const job_plan_t *plan, const island_desc_t *islands, int nislands, err_t *e)
{
    for (int s = 0; islands && s < plan->nslices; s++) {
        const job_slice_t *sl = &plan->slices[s];
        int ok = 0;
        for (int i = 0; i < nislands && !ok; i++) {
            if (!sl->island[0] || (islands[i].name && strcmp(islands[i].name, sl->island) == 0))
                ok = compiler_slice_fits(&sl->shape, &islands[i].shape);
        }
        if (!ok) {
            char field[ERR_FIELD_MAX], buf[64];
            fmt(field, sizeof field, "slices.%s.shape", sl->name);
            shape_format(&sl->shape, buf, sizeof buf);
            return err_set(e, 422, field, "slice '%s' of shape %s fits %s", sl->name, buf,
                           sl->island[0] ? "not its island" : "no island of the cluster");
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* The job: computations, the input graph, topological order. */

typedef struct edge {
    int consumer, producer, op;  /* op: index of the input op in the consumer */
} edge_t;

typedef struct job_ctx {
    job_plan_t *plan;
    const json_t *comps_json;
    nidx_t comp_names;           /* comp name -> index; keys in plan->comps[].name */
    nidx_t *outputs;             /* per comp: output value name -> slot, once compiled */
    edge_t *edges;               /* grouped by consumer, in document order */
    size_t nedges, cap_edges;
    err_t *e;
} job_ctx_t;

static int slice_find(const job_plan_t *plan, const char *name)
{
    for (int s = 0; s < plan->nslices; s++) {
        if (strcmp(plan->slices[s].name, name) == 0)
            return s;
    }
    return -1;
}

static int edge_add(job_ctx_t *j, int consumer, int producer, int op)
{
    if (j->nedges == j->cap_edges) {
        size_t cap = j->cap_edges ? 2 * j->cap_edges : 16;
        edge_t *ne = realloc(j->edges, cap * sizeof *ne);
        if (!ne)
            return err_set(j->e, 500, "", "out of memory");
        j->edges = ne;
        j->cap_edges = cap;
    }
    j->edges[j->nedges++] = (edge_t){consumer, producer, op};
    return 0;
}

/* Records computation i's input edges. Malformed input ops are skipped here
 * (the full compile reports them); unknown producers, self-inputs and
 * shard-count mismatches are reported now because ordering needs them. */
static int job_scan_edges(job_ctx_t *j, int i, const json_t *ops)
{
    const comp_t *c = &j->plan->comps[i];
    for (size_t k = 0; k < json_array_size(ops); k++) {
        const json_t *opj = json_array_get(ops, k);
        const char *code = json_string_value(json_object_get(opj, "op"));
        const char *from = json_string_value(json_object_get(opj, "from"));
        const char *dot = from ? strchr(from, '.') : NULL;
        char pname[NAME_MAX_LEN], field[ERR_FIELD_MAX];
        if (!code || strcmp(code, "input") != 0 || !dot || dot - from >= NAME_MAX_LEN)
            continue;
        memcpy(pname, from, (size_t)(dot - from));
        pname[dot - from] = '\0';
        int p = nidx_find(&j->comp_names, pname);
        fmt(field, sizeof field, "computations[%d].ops[%zu].from", i, k);
        if (p < 0)
            return err_set(j->e, 400, field, "computation '%s' op %zu (input): no computation "
                           "named '%s'", c->name, k, pname);
        if (p == i)
            return err_set(j->e, 400, field, "computation '%s' op %zu (input): a computation "
                           "cannot take input from itself", c->name, k);
        const comp_t *pc = &j->plan->comps[p];
        if (pc->global != c->global)
            return err_set(j->e, 400, field, "computation '%s' op %zu (input): producer '%s' is "
                           "%s, this computation %s: a per-shard producer and a global consumer "
                           "(or the reverse) cannot be joined", c->name, k, pname,
                           pc->global ? "global" : "per-shard", c->global ? "global" : "per-shard");
        if (!c->global && j->plan->comps[p].nshards != c->nshards)
            return err_set(j->e, 400, field, "computation '%s' op %zu (input): producer '%s' "
                           "has %d shards, this computation %d (they must match)", c->name, k,
                           pname, j->plan->comps[p].nshards, c->nshards);
        int rc = edge_add(j, i, p, (int)k);
        if (rc)
            return rc;
    }
    return 0;
}

/* First pass over computations: headers, names, slices, edges. */
static int job_scan(job_ctx_t *j)
{
    job_plan_t *plan = j->plan;
    for (int i = 0; i < plan->ncomps; i++) {
        char prefix[32];
        comp_t *c = &plan->comps[i];
        const json_t *cj = json_array_get(j->comps_json, (size_t)i);
        fmt(prefix, sizeof prefix, "computations[%d]", i);
        int rc = comp_head(cj, prefix, 0, c, j->e);
        if (!rc && json_object_get(cj, "run"))
            rc = run_lower(cj, prefix, c->name, &c->run_json, j->e);
        if (rc)
            return rc;
        int prev = nidx_put(&j->comp_names, c->name, i);
        if (prev >= 0)
            return comp_fail(prefix, j->e, "name", "duplicate computation name '%s' (also "
                             "computations[%d])", c->name, prev);
        const char *sname = json_string_value(json_object_get(cj, "slice"));
        int s = slice_find(plan, sname);
        if (s < 0)
            return comp_fail(prefix, j->e, "slice", "computation '%s': no slice named '%s'",
                             c->name, sname);
        comp_set_slice(c, s, &plan->slices[s].shape);
    }
    for (int i = 0; i < plan->ncomps; i++) {
        const comp_t *c = &plan->comps[i];
        const json_t *cj = c->run_json ? c->run_json : json_array_get(j->comps_json, (size_t)i);
        int rc = job_scan_edges(j, i, json_object_get(cj, "ops"));
        if (rc && c->run_json) {
            char prefix[32];
            fmt(prefix, sizeof prefix, "computations[%d]", i);
            run_fix_field(c->run_json, prefix, j->e);
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* Reports a cycle among the computations Kahn could not order (done[] == 0):
 * walking producers from any of them for ncomps steps lands on the cycle. */
static int job_cycle(job_ctx_t *j, const size_t *in_off, const char *done)
{
    int n = j->plan->ncomps, v = 0, via = -1;
    while (done[v])
        v++;
    for (int step = 0; step <= n; step++) {
        via = -1;
        for (size_t k = in_off[v]; k < in_off[v + 1]; k++) {
            if (!done[j->edges[k].producer]) {
                via = (int)k;
                break;
            }
        }
        if (via < 0)
            return err_set(j->e, 500, "", "internal: cycle walk lost its way");
        v = j->edges[via].producer;
    }
    /* v is on the cycle; name it and the edge that leaves it backwards. */
    const edge_t *ed = &j->edges[via];
    char field[ERR_FIELD_MAX];
    fmt(field, sizeof field, "computations[%d].ops[%d].from", ed->consumer, ed->op);
    return err_set(j->e, 400, field, "computations '%s' and '%s' are on a cycle of inputs",
                   j->plan->comps[ed->consumer].name, j->plan->comps[ed->producer].name);
}

/* Offsets of the edges into (in_off) and out of (out_off, out_adj) each
 * computation, and in-degrees. Edges are already grouped by consumer. */
static int edges_index(job_ctx_t *j, size_t *in_off, size_t *out_off, int *out_adj,
                       int *indeg)
{
    int n = j->plan->ncomps;
    size_t *fill = calloc((size_t)n, sizeof *fill);
    if (!fill)
        return err_set(j->e, 500, "", "out of memory");
    for (size_t k = 0; k < j->nedges; k++) {
        in_off[j->edges[k].consumer + 1]++;
        out_off[j->edges[k].producer + 1]++;
        indeg[j->edges[k].consumer]++;
    }
    for (int i = 0; i < n; i++) {
        in_off[i + 1] += in_off[i];
        out_off[i + 1] += out_off[i];
    }
    for (size_t k = 0; k < j->nedges; k++) {
        int p = j->edges[k].producer;
        out_adj[out_off[p] + fill[p]++] = j->edges[k].consumer;
    }
    free(fill);
    return 0;
}

/* Kahn's algorithm; among ready computations the lowest index goes first
 * (O(n^2) scan, n <= JOB_MAX_COMPS). */
static int job_topo(job_ctx_t *j)
{
    int n = j->plan->ncomps, rc = 0;
    size_t *in_off = calloc((size_t)n + 1, sizeof *in_off);
    size_t *out_off = calloc((size_t)n + 1, sizeof *out_off);
    int *out_adj = calloc(j->nedges ? j->nedges : 1, sizeof *out_adj);
    int *indeg = calloc((size_t)n, sizeof *indeg);
    char *done = calloc((size_t)n, 1);
    j->plan->topo = calloc((size_t)n, sizeof *j->plan->topo);
    if (!in_off || !out_off || !out_adj || !indeg || !done || !j->plan->topo) {
        rc = err_set(j->e, 500, "", "out of memory");
        goto cleanup;
    }
    if ((rc = edges_index(j, in_off, out_off, out_adj, indeg)))
        goto cleanup;
    for (int t = 0; t < n; t++) {
        int v = 0;
        while (v < n && (done[v] || indeg[v] > 0))
            v++;
        if (v == n) {
            rc = job_cycle(j, in_off, done);
            goto cleanup;
        }
        done[v] = 1;
        j->plan->topo[t] = v;
        for (size_t k = out_off[v]; k < out_off[v + 1]; k++)
            indeg[out_adj[k]]--;
    }
cleanup:
    free(in_off);
    free(out_off);
    free(out_adj);
    free(indeg);
    free(done);
    return rc;
}

/* compiler_job(): the producer is compiled already (topological order). */
static int job_resolve(void *rctx, cc_t *x, comp_input_t *in)
{
    job_ctx_t *j = rctx;
    int p = nidx_find(&j->comp_names, in->producer_name);
    if (p < 0 || !j->outputs[p].keys)
        return op_fail(x, "from", "no computation named '%s'", in->producer_name);
    int slot = nidx_find(&j->outputs[p], in->value);
    if (slot < 0)
        return op_fail(x, "from", "computation '%s' has no output '%s'", in->producer_name,
                       in->value);
    in->producer = p;
    in->shape = j->plan->comps[p].vshapes[slot];
    if (in->shape.rank < 0 && !x->c->run)
        return op_fail(x, "from", "output '%s' of run computation '%s' has no declared shape: "
                       "give it in that computation's run.shapes", in->value,
                       in->producer_name);
    if (x->global) {            /* the producer's global shape, same value name */
        const comp_t *g = j->plan->comps[p].gspmd->global;
        int v = comp_value_find(g, in->value);
        if (v >= 0)
            in->shape = g->vshapes[v];
    }
    return 0;
}

/* The sharding of a global computation's value named `value`. */
static const shd_t *global_shd(const comp_t *c, const char *value)
{
    int v = comp_value_find(c->gspmd->global, value);
    return v >= 0 ? &c->gspmd->vshd[v] : NULL;
}

/* Compiles global computation i: the program at global shapes, then the
 * partitioner, then its per-shard program into plan->comps[i], which
 * then owns the partitioning (c->gspmd). A lowered program that does not
 * compile is the partitioner's bug: 500. */
static int job_compile_global(job_ctx_t *j, int i, const char *prefix)
{
    comp_t *c = &j->plan->comps[i];
    const job_slice_t *sl = &j->plan->slices[c->slice];
    const json_t *cj = json_array_get(j->comps_json, (size_t)i);
    comp_t *g = calloc(1, sizeof *g);
    gspmd_edge_t *in_edge = NULL;
    gspmd_t *gs = NULL;
    gspmd_mesh_t mesh = {.shape = sl->shape};
    if (!g)
        return err_set(j->e, 500, "", "out of memory");
    memcpy(mesh.axes, sl->axes, sizeof mesh.axes);
    *g = (comp_t){.slice = c->slice, .global = 1};
    memcpy(g->name, c->name, sizeof g->name);
    comp_set_slice(g, c->slice, &c->slice_shape);
    int rc = comp_body(cj, prefix, g, 1, 0, job_resolve, j, j->e);
    if (!rc && !(in_edge = calloc((size_t)g->ninputs + 1, sizeof *in_edge)))
        rc = err_set(j->e, 500, "", "out of memory");
    for (int k = 0; !rc && k < g->ninputs; k++) {
        const comp_t *pc = &j->plan->comps[g->inputs[k].producer];
        in_edge[k].global = g->inputs[k].shape;
        in_edge[k].from_mesh = pc->slice_shape;
        in_edge[k].from = *global_shd(pc, g->inputs[k].value);
    }
    if (rc) {
        comp_free(g);
        free(in_edge);
        return rc;
    }
    rc = gspmd_partition(g, cj, &mesh, in_edge, prefix, &gs, j->e);
    free(in_edge);
    if (rc)
        return rc;
    c->gspmd = gs;
    rc = comp_body(gs->lowered, prefix, c, 0, 1, job_resolve, j, j->e);
    if (rc && rc != 500) {
        char why[ERR_DETAIL_MAX];
        fmt(why, sizeof why, "%s", j->e->detail);
        rc = err_set(j->e, 500, "", "partitioner produced an invalid program: %s", why);
    }
    return rc;
}

static int job_compile_comps(job_ctx_t *j)
{
    job_plan_t *plan = j->plan;
    for (int t = 0; t < plan->ncomps; t++) {
        int i = plan->topo[t];
        comp_t *c = &plan->comps[i];
        char prefix[32];
        fmt(prefix, sizeof prefix, "computations[%d]", i);
        int rc = 0;
        if (c->global)
            rc = job_compile_global(j, i, prefix);
        else if (c->run_json && (rc = comp_body(c->run_json, prefix, c, 0, 1, job_resolve, j,
                                                j->e)))
            run_fix_field(c->run_json, prefix, j->e);
        else if (!c->run_json)
            rc = comp_body(json_array_get(j->comps_json, (size_t)i), prefix, c, 0, 0,
                           job_resolve, j, j->e);
        if (rc)
            return rc;
        if (nidx_init(&j->outputs[i], (size_t)c->noutputs))
            return err_set(j->e, 500, "", "out of memory");
        for (int k = 0; k < c->noutputs; k++)
            nidx_put(&j->outputs[i], c->vnames[c->outputs[k]], c->outputs[k]);
    }
    return 0;
}

static int job_comps(const json_t *cj, job_plan_t *plan, err_t *e)
{
    size_t n = json_array_size(cj);
    job_ctx_t j = {.plan = plan, .comps_json = cj, .e = e};
    int rc = 0;
    if (!json_is_array(cj) || n < 1 || n > JOB_MAX_COMPS)
        return err_set(e, 400, "computations", "computations must be an array of 1 to %d "
                       "computations", JOB_MAX_COMPS);
    plan->comps = calloc(n, sizeof *plan->comps);
    j.outputs = calloc(n, sizeof *j.outputs);
    if (!plan->comps || !j.outputs || nidx_init(&j.comp_names, n)) {
        rc = err_set(e, 500, "", "out of memory");
        goto cleanup;
    }
    plan->ncomps = (int)n;
    if (!(rc = job_scan(&j)) && !(rc = job_topo(&j)))
        rc = job_compile_comps(&j);
cleanup:
    for (size_t i = 0; j.outputs && i < n; i++)
        nidx_free(&j.outputs[i]);
    free(j.outputs);
    nidx_free(&j.comp_names);
    free(j.edges);
    return rc;
}

static int job_top(const json_t *doc, job_plan_t *plan, err_t *e)
{
    static const char *const keys[] = {"name", "priority", "max_retries", "slices",
                                       "computations", "preemptible", "sharing"};
    const char *key;
    json_t *val;
    if (!json_is_object(doc))
        return err_set(e, 400, "", "the job document must be a JSON object");
    json_object_foreach((json_t *)doc, key, val) {
        int known = 0;
        for (int i = 0; i < 7; i++)
            known |= strcmp(key, keys[i]) == 0;
        if (!known)
            return err_set(e, 400, key, "unknown field '%s'", key);
    }
    const json_t *name = json_object_get(doc, "name");
    if (name) {
        const char *s = json_string_value(name);
        int ok = s && json_string_length(name) < NAME_MAX_LEN && strlen(s) == json_string_length(name);
        for (const char *p = s; ok && *p; p++)
            ok = (unsigned char)*p >= 0x20 && *p != 0x7f;
        if (!ok)
            return err_set(e, 400, "name", "name must be a string of at most %d printable "
                           "characters", NAME_MAX_LEN - 1);
        fmt(plan->name, sizeof plan->name, "%s", s);
    }
    int64_t v = 0;
    if (json_object_get(doc, "priority") &&
        read_int(json_object_get(doc, "priority"), -PRIORITY_LIMIT, PRIORITY_LIMIT, &v))
        return err_set(e, 400, "priority", "priority must be an integer in %d..%d",
                       -PRIORITY_LIMIT, PRIORITY_LIMIT);
    plan->priority = json_object_get(doc, "priority") ? v : 0;
    plan->max_retries = RETRIES_DEFAULT;
    if (json_object_get(doc, "max_retries")) {
        if (read_int(json_object_get(doc, "max_retries"), 0, RETRIES_MAX, &v))
            return err_set(e, 400, "max_retries", "max_retries must be an integer in 0..%d",
                           RETRIES_MAX);
        plan->max_retries = (int)v;
    }
    const json_t *pre = json_object_get(doc, "preemptible");
    if (pre && !json_is_boolean(pre))
        return err_set(e, 400, "preemptible", "preemptible must be true or false");
    plan->preemptible = json_is_true(pre);
    const json_t *sh = json_object_get(doc, "sharing");
    const char *shs = json_string_value(sh);
    if (sh && (!shs || (strcmp(shs, "shared") != 0 && strcmp(shs, "exclusive") != 0)))
        return err_set(e, 400, "sharing", "sharing must be \"exclusive\" or \"shared\"");
    plan->shared = shs && strcmp(shs, "shared") == 0;
    if (!json_object_get(doc, "slices"))
        return err_set(e, 400, "slices", "missing field 'slices'");
    if (!json_object_get(doc, "computations"))
        return err_set(e, 400, "computations", "missing field 'computations'");
    return 0;
}

int compiler_job(const json_t *doc, const island_desc_t *islands, int nislands,
                 job_plan_t **out, err_t *e)
{
    job_plan_t *plan = calloc(1, sizeof *plan);
    int rc;
    if (!plan)
        return err_set(e, 500, "", "out of memory");
    if ((rc = job_top(doc, plan, e)) ||
        (rc = job_slices(json_object_get(doc, "slices"), islands, nislands, plan, e)) ||
        (rc = job_comps(json_object_get(doc, "computations"), plan, e)) ||
        (rc = job_fit(plan, islands, nislands, e))) {
        job_plan_free(plan);
        return rc;
    }
    *out = plan;
    return 0;
}

void job_plan_free(job_plan_t *plan)
{
    if (!plan)
        return;
    for (int i = 0; plan->comps && i < plan->ncomps; i++)
        comp_release(&plan->comps[i]);
    free(plan->comps);
    free(plan->slices);
    free(plan->topo);
    free(plan);
}
