/* gspmd_state.h - the lowering state (lw_t) the partitioner's stages share
 * while one global computation is partitioned, and the emission of
 * lowered ops into it.
 *
 * gspmd_partition() (gspmd_lower.c) owns the lw_t on its stack: g, gops,
 * m, in_edge, prefix and e are borrowed from its caller; S, ops, lshd,
 * ins and cache are owned by the lw_t until gspmd_partition() hands S,
 * lshd and ins to its gspmd_t (freed with it, on failure too) and frees
 * ops and cache. An emit that fails returns NULL or -1 (lw_emit also sets
 * L->oom); lowering stops there and gspmd_partition() reports a 500. */
#ifndef ATOLL_GSPMD_STATE_H
#define ATOLL_GSPMD_STATE_H

#include <jansson.h>
#include <stdint.h>

#include "compiler_types.h"
#include "err.h"

typedef struct cache_ent {
    int v;
    shd_t s;
    char name[NAME_MAX_LEN];
} cache_ent_t;

typedef struct lw {
    const comp_t *g;
    const json_t *gops;         /* the document's ops (for "spec", "from") */
    const gspmd_mesh_t *m;
    const gspmd_edge_t *in_edge;/* per input of g */
    const char *prefix;
    err_t *e;
    shd_t *S;                   /* per global value */
    json_t *ops;                /* lowered ops */
    shd_t *lshd;
    uint8_t *ins;
    int n, cap;
    int ncoll;
    char tmp[NAME_MAX_LEN - 12];/* temp-name prefix no user name starts with; leaves
                                   room for any int after it */
    int ntmp;
    cache_ent_t *cache;
    int ncache, capcache;
    int oom;
} lw_t;

/* Does input k come from a mesh of another shape (a cross-mesh edge)? */
int lw_input_cross(const lw_t *L, int k);
/* 400 at PREFIX.ops[j].SUB naming computation and op j; returns 400. */
int lw_fail(lw_t *L, int j, const char *sub, const char *f, ...)
    __attribute__((format(printf, 4, 5)));
/* Copies a value name (always < NAME_MAX_LEN, NUL-terminated). */
void lw_name_copy(char *dst, const char *src);
/* A fresh temp name (L->tmp then a counter) into buf (NAME_MAX_LEN). */
void lw_temp_name(lw_t *L, char *buf);
/* Appends op (stolen) with its value's sharding; out name set from
 * `name`. Returns the op (borrowed) or NULL (L->oom set). */
json_t *lw_emit(lw_t *L, json_t *op, const char *name, const shd_t *s, int inserted);
/* One inserted op on `src` (name) into a fresh temp; returns 0 or -1 and
 * writes the temp's name to dst. */
int lw_emit_coll(lw_t *L, json_t *op, const char *src, const shd_t *s, char *dst);
/* Emits the local op `op` (stolen; gets "args" from names) as a temp
 * laid out as `natural`, its name into tmp. 0 or -1. */
int lw_emit_local(lw_t *L, json_t *op, const char *const *names, int nargs,
                  const shd_t *natural, char *tmp);
/* The name of value v already laid out as s, or NULL. */
const char *lw_cache_find(const lw_t *L, int v, const shd_t *s);
/* Records that `name` holds value v laid out as s. 0 or -1. */
int lw_cache_put(lw_t *L, int v, const shd_t *s, const char *name);

#endif
