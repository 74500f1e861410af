/* compiler_shapes.c - checking one op and inferring its shape
 * (compiler_shapes.h): keys against the ops table, arguments, then the
 * op's own rule (broadcasting, matmul, einsum letters, collectives over
 * mesh axes, shard slices, ppermute pairs, cross-mesh inputs).
 *
 * Invariants:
 *  - an op reads only values defined by earlier ops: its own value is put
 *    in the index only after its shape is known, so an op cannot read
 *    itself and the values form a DAG in program order;
 *  - every shape written to c->vshapes is valid (rank <= TENSOR_MAX_RANK,
 *    at most TENSOR_MAX_ELEMS elements), or rank -1 for a run_output the
 *    processes decide;
 *  - a collective's group size divides the dims it splits, so every
 *    shard's piece has the same local shape;
 *  - errors are 400 at PREFIX.ops[j].FIELD (op_fail), 500 only when out
 *    of memory. */
#include "compiler.h"
#include "compiler_ops.h"
#include "compiler_shapes.h"
#include "compiler_util.h"
#include "gspmd.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define COMPUTE_US_MAX 10000000

/* 400 at field PREFIX.ops[j].SUB, detail "computation 'c' op j (name): ...". */
int op_fail(cc_t *x, const char *sub, const char *f, ...)
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

static int field_bit(const char *key)
{
    for (int i = 0; i < NFIELDS; i++) {
        if (field_names[i][0] == key[0] && strcmp(field_names[i], key) == 0)
            return i;
    }
    return -1;
}

/* Exactly the fields of the ops table: no unknown one, no required missing. */
static int op_check_keys(cc_t *x, const json_t *opj, const op_spec_t *spec)
{
    const char *key;
    json_t *val;
    unsigned allowed = spec->required | spec->optional, seen = 0;
    json_object_foreach((json_t *)opj, key, val) {
        if (strcmp(key, "op") == 0 || strcmp(key, "out") == 0)
            continue;
        if (strcmp(key, "sharding") == 0 && !x->global)
            return op_fail(x, key, "sharding needs a global computation (\"global\": true)");
        if (strcmp(key, "sharding") == 0)
            continue;       /* read by the partitioner (gspmd_propagate.c) */
        if (strcmp(key, "reshard") == 0 && !x->internal)
            return op_fail(x, key, "unknown field 'reshard' (the partitioner writes it)");
        int b = field_bit(key);
        if (b < 0 || !(allowed & (1u << b)))
            return op_fail(x, key, "unknown field '%s'", key);
        seen |= 1u << b;
    }
    for (int b = 0; b < NFIELDS; b++) {
        if ((spec->required & (1u << b)) && !(seen & (1u << b)))
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
        const json_t *s = json_array_get(a, (size_t)k);
        int slot = json_is_string(s) ? nidx_find(&x->values, json_string_value(s)) : -1;
        if (slot >= 0) {
            op->arg[k] = slot;
            continue;
        }
        char sub[16];           /* the field is named only when there is an error */
        fmt(sub, sizeof sub, "args[%d]", k);
        if (!json_is_string(s))
            return op_fail(x, sub, "arguments must be value names");
        return op_fail(x, sub, "unknown value '%s' (arguments must be defined by earlier ops)",
                       json_string_value(s));
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
    comp_t *c = x->c;
    comp_input_t *in = &c->inputs[c->ninputs];
    memset(in, 0, sizeof *in);
    if (name_from_split(from, in->producer_name, in->value) != 0)
        return op_fail(x, "from", "from must be \"computation.value\"");
    copy_str(in->from, sizeof in->from, from);
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

int cc_op(cc_t *x, int j, const json_t *opj)
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
    copy_str(c->vnames[j], sizeof c->vnames[j], json_string_value(out));
    int prev = nidx_put(&x->values, c->vnames[j], j);
    if (prev >= 0)
        return op_fail(x, "out", "value '%s' is already defined by op %d", c->vnames[j], prev);
    c->vshapes[j] = op->shape;
    return 0;
}
