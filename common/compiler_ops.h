/* compiler_ops.h - the ops table (DESIGN.md's table of ops): for each
 * opcode its name, how many arguments it takes and which fields it
 * requires or allows. Adding an op is one row in compiler_ops.c (and its
 * shape rule in compiler_shapes.c).
 *
 * Takes nothing, gives constant tables: compiler_shapes.c checks an op's
 * keys against them; opcode_from_name() and the other opcode_* functions
 * (declared in compiler.h) read them. Nothing here is allocated. */
#ifndef ATOLL_COMPILER_OPS_H
#define ATOLL_COMPILER_OPS_H

#include "compiler_types.h"

/* The fields an op may carry besides "op" and "out", one bit each. */
enum {
    F_ARGS = 1u << 0, F_SHAPE = 1u << 1, F_VALUE = 1u << 2, F_FACTOR = 1u << 3,
    F_AXIS = 1u << 4, F_REDUCE = 1u << 5, F_MESH = 1u << 6, F_SHIFT = 1u << 7,
    F_SPLIT = 1u << 8, F_CONCAT = 1u << 9, F_US = 1u << 10, F_FROM = 1u << 11,
    F_SPEC = 1u << 12, F_RESHARD = 1u << 13, F_PAIRS = 1u << 14,
};
/* field_names[i] is the JSON key of bit i above. */
#define NFIELDS 15
extern const char *const field_names[NFIELDS];

typedef struct op_spec {
    const char *name;
    int nargs;              /* exact length of "args" (0: no "args" field; -2: 1 or 2) */
    unsigned required;      /* F_* bits, besides "op" and "out" */
    unsigned optional;
} op_spec_t;
/* One row per opcode, indexed by it. */
extern const op_spec_t op_specs[OP__COUNT];

#endif
