/* compiler_shapes.h - one op of a computation: its fields checked against
 * the ops table, its arguments resolved, its output shape inferred.
 *
 * Takes a cc_t (the computation being compiled, with the ops before this
 * one already compiled, and the index of their values) and the op's JSON
 * (borrowed). Gives c->ops[j] with every field read, c->vnames[j] and
 * c->vshapes[j], and the value's name in x->values; or the status (400;
 * 500 only when out of memory) with x->e filled.
 * An `input` op is resolved through x->resolve (the caller's: job or
 * worker) and may allocate c->inputs[k].edge, owned by the comp_t and
 * freed with it (comp_free), even on failure. compiler_comp.c runs this
 * op by op (comp_body). */
#ifndef ATOLL_COMPILER_SHAPES_H
#define ATOLL_COMPILER_SHAPES_H

#include <jansson.h>

#include "compiler_types.h"
#include "compiler_util.h"
#include "err.h"

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

/* 400 at field PREFIX.ops[j].SUB, detail "computation 'c' op j (name): ...";
 * returns 400. */
int op_fail(cc_t *x, const char *sub, const char *f, ...) __attribute__((format(printf, 3, 4)));
/* Compiles op j (opj) into x->c and defines its value. 0 or the status. */
int cc_op(cc_t *x, int j, const json_t *opj);

#endif
