/* gspmd_layout.h - arithmetic on shardings (shd_t, compiler_types.h): how
 * a value is split over a mesh, what each shard holds, and how a sharding
 * maps through transpose, reshape and dropped or added dims.
 *
 * Pure functions of their arguments: they take shardings, shapes and meshes
 * by pointer (borrowed), write only *out, allocate nothing but the JSON
 * they return (a new reference the caller owns, NULL when out of memory).
 * The public ones (gspmd_local_shape, gspmd_shard_offsets, gspmd_shd_json,
 * ...) are declared in gspmd.h; these are for the partitioner's files. */
#ifndef ATOLL_GSPMD_LAYOUT_H
#define ATOLL_GSPMD_LAYOUT_H

#include <jansson.h>
#include <stdint.h>

#include "compiler_types.h"

/* Size of mesh axis a. */
int64_t mesh_axis_size(const gspmd_mesh_t *m, int a);
/* Product of the sizes of the mesh axes that split dim d. */
int64_t shd_factor(const shd_t *s, int d, const gspmd_mesh_t *m);
/* Number of distinct pieces: the product of every split's factor. */
int64_t shd_total(const shd_t *s, const gspmd_mesh_t *m);
/* Bit a set for each mesh axis a the sharding splits a dim over. */
unsigned shd_used(const shd_t *s);
/* *s = replicated (no dim split, not partial) at this rank. */
void shd_repl(shd_t *s, int rank);
int shd_eq(const shd_t *a, const shd_t *b);
/* Appends mesh axis a (minor) to the axes splitting dim d. */
void shd_push(shd_t *s, int d, int a);
/* Makes s valid for global shape gs: an axis used twice keeps its first
 * use, and a dim drops its minor axes until their product divides it. */
void shd_fix(shd_t *s, const shape_t *gs, const gspmd_mesh_t *m);
/* Maps `in` (on shape gi) through a reshape to go: a split survives on an
 * output dim where as many elements precede it and its factor divides. */
void shd_reshape_map(const shd_t *in, const shape_t *gi, const shape_t *go,
                     const gspmd_mesh_t *m, shd_t *out);
/* `in` with dims 0 and 1 swapped (transpose). */
void shd_swap2(const shd_t *in, shd_t *out);
/* `in` without dim d. */
void shd_drop_dim(const shd_t *in, int d, shd_t *out);
/* `in` with an unsplit dim inserted at d. */
void shd_insert_dim(const shd_t *in, int d, shd_t *out);
/* The mesh axes of `mask` (bit a = axis a, a < rank) as a JSON array of
 * integers. New reference, or NULL. */
json_t *mesh_mask_json(unsigned mask, int rank);

#endif
