/* npy.h - NumPy .npy files for user programs' inputs and outputs (DESIGN.md
 * Part F): little-endian float32 or float64, C order, rank 0..4.
 *
 * npy_decode() reads untrusted bytes (a user program wrote them): every
 * size is checked against the buffer before it is used, the header is
 * capped, float64 is narrowed to float32 (Atoll's tensors are f4).
 * Ownership: *out (tensor) and *buf (malloc'd bytes) go to the caller. */
#ifndef ATOLL_NPY_H
#define ATOLL_NPY_H

#include <stddef.h>
#include "tensor.h"

#define NPY_MAX_RANK 4
#define NPY_MAX_HEADER 65536

/* Encodes t as a version 1.0 '<f4' file. 0, or -1 on OOM. */
int npy_encode(const tensor_t *t, void **buf, size_t *len);
/* Decodes a whole file. 0 and *out, or -1 with a reason in err. */
int npy_decode(const void *buf, size_t len, tensor_t **out, char *err, size_t errlen);

/* File forms. npy_write: 0 or -1 (errno). npy_read: reads at most
 * max_bytes; 0 and *out, or -1 with a reason in err. */
int npy_write(const char *path, const tensor_t *t);
int npy_read(const char *path, size_t max_bytes, tensor_t **out, char *err, size_t errlen);

#endif
