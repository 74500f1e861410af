/* gspmd_state.c - the lowering state's errors, names, emitted ops and
 * operand cache (gspmd_state.h).
 *
 * Invariants: L->ops, L->lshd and L->ins grow together, entry i of each
 * describing lowered op i (L->n of them); temp names start with L->tmp,
 * a prefix no user value name has, so they never collide; a cache entry
 * (value, sharding) names the one lowered value holding that layout. */
#include "gspmd.h"
#include "gspmd_layout.h"
#include "gspmd_state.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Does input k come from a mesh of another shape (a cross-mesh edge)? */
int lw_input_cross(const lw_t *L, int k)
{
    return !shape_equal(&L->in_edge[k].from_mesh, &L->m->shape);
}

int lw_fail(lw_t *L, int j, const char *sub, const char *f, ...)
{
    char field[ERR_FIELD_MAX], msg[ERR_DETAIL_MAX];
    snprintf(field, sizeof field, "%s%sops[%d]%s%s", L->prefix, L->prefix[0] ? "." : "", j,
             sub[0] ? "." : "", sub);
    va_list ap;
    va_start(ap, f);
    vsnprintf(msg, sizeof msg, f, ap);
    va_end(ap);
    return err_set(L->e, 400, field, "computation '%s' op %d (%s): %s", L->g->name, j,
                   opcode_name(L->g->ops[j].code), msg);
}

/* Copies a value name (always < NAME_MAX_LEN, NUL-terminated). */
void lw_name_copy(char *dst, const char *src)
{
    size_t n = strnlen(src, NAME_MAX_LEN - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

void lw_temp_name(lw_t *L, char *buf)
{
    snprintf(buf, NAME_MAX_LEN, "%s%d", L->tmp, L->ntmp++);
}

/* Appends op (stolen) with its value's sharding; out name set from
 * `name`. Returns the op (borrowed) or NULL (L->oom set). */
json_t *lw_emit(lw_t *L, json_t *op, const char *name, const shd_t *s, int inserted)
{
    if (!op || L->oom) {
        json_decref(op);
        L->oom = 1;
        return NULL;
    }
    if (L->n == L->cap) {
        int cap = L->cap ? 2 * L->cap : 64;
        shd_t *ls = realloc(L->lshd, sizeof *ls * (size_t)cap);
        if (ls)
            L->lshd = ls;
        uint8_t *in = realloc(L->ins, (size_t)cap);
        if (in)
            L->ins = in;
        if (!ls || !in) {
            json_decref(op);
            L->oom = 1;
            return NULL;
        }
        L->cap = cap;
    }
    if (json_object_set_new(op, "out", json_string(name)) != 0 ||
        json_array_append_new(L->ops, op) != 0) {
        L->oom = 1;
        return NULL;
    }
    L->lshd[L->n] = *s;
    L->ins[L->n] = (uint8_t)inserted;
    L->n++;
    if (inserted && opcode_is_collective(opcode_from_name(
                        json_string_value(json_object_get(op, "op")))))
        L->ncoll++;
    return op;
}

/* One inserted op on `src` (name) into a fresh temp; returns 0 or -1 and
 * writes the temp's name to dst. */
int lw_emit_coll(lw_t *L, json_t *op, const char *src, const shd_t *s, char *dst)
{
    lw_temp_name(L, dst);
    if (op && json_object_set_new(op, "args", json_pack("[s]", src)) != 0) {
        json_decref(op);
        op = NULL;
    }
    return lw_emit(L, op, dst, s, 1) ? 0 : -1;
}

/* Emits the local op `op` (stolen; gets "args" from names) as a temp. */
int lw_emit_local(lw_t *L, json_t *op, const char *const *names, int nargs,
                  const shd_t *natural, char *tmp)
{
    json_t *args = json_array();
    for (int k = 0; args && k < nargs; k++)
        json_array_append_new(args, json_string(names[k]));
    if (!op || !args || (nargs && json_object_set_new(op, "args", args) != 0)) {
        json_decref(op);
        if (!nargs)
            json_decref(args);
        return -1;
    }
    if (!nargs)
        json_decref(args);
    lw_temp_name(L, tmp);
    return lw_emit(L, op, tmp, natural, 0) ? 0 : -1;
}

const char *lw_cache_find(const lw_t *L, int v, const shd_t *s)
{
    for (int i = L->ncache - 1; i >= 0; i--)
        if (L->cache[i].v == v && shd_eq(&L->cache[i].s, s))
            return L->cache[i].name;
    return NULL;
}

int lw_cache_put(lw_t *L, int v, const shd_t *s, const char *name)
{
    if (L->ncache == L->capcache) {
        int cap = L->capcache ? 2 * L->capcache : 64;
        cache_ent_t *c = realloc(L->cache, sizeof *c * (size_t)cap);
        if (!c)
            return -1;
        L->cache = c;
        L->capcache = cap;
    }
    cache_ent_t *c = &L->cache[L->ncache++];
    c->v = v;
    c->s = *s;
    lw_name_copy(c->name, name);
    return 0;
}
