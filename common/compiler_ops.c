/* compiler_ops.c - the ops table and the opcode names (compiler_ops.h,
 * compiler.h).
 *
 * Invariants: op_specs has a row for every opcode, indexed by it, with a
 * distinct name; field_names has one key per F_ bit, bit i at index i. */
#include "compiler.h"
#include "compiler_ops.h"

#include <string.h>

_Static_assert(F_PAIRS == 1u << (NFIELDS - 1), "field_names: one key per F_ bit");

const char *const field_names[NFIELDS] = {
    "args", "shape", "value", "factor", "axis", "reduce", "mesh_axes",
    "shift", "split_axis", "concat_axis", "us", "from", "spec", "reshard", "pairs",
};

const op_spec_t op_specs[OP__COUNT] = {
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
    /* The first byte first: a call to strcmp per op name was ~290
     * instructions an op of every compile. */
    for (int i = 0; i < OP__COUNT; i++) {
        if (op_specs[i].name[0] == name[0] && strcmp(op_specs[i].name, name) == 0)
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
