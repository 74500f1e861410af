/* shmpool.h - the worker's pool of shared-memory blocks for large tensors.
 *
 * Why: between two worker processes on one host, UCX moves a large
 * message with one kernel copy (CMA, process_vm_readv), which runs at a
 * fifth of memcpy on paravirtualised hosts. Memory that UCX itself
 * allocated (ucp_mem_map with UCP_MEM_MAP_ALLOCATE: a POSIX shared-memory
 * segment) can instead be mapped by a peer, which then reads it with one
 * user-space memcpy (RMA get). So the worker allocates the data of tensors
 * of at least min_bytes here (tensor_allocator_t), and the data plane
 * sends such a tensor by handing the receiver the block's remote key
 * (dplane.c, "Sends from the pool").
 *
 * A peer's first read of a block maps it and pays its page faults (a
 * fresh 4 MiB block cost 13 ms on the development VM against 0.1 ms once
 * mapped), so blocks are kept and reused rather than unmapped: freed
 * blocks wait on a free list by size (rounded up to SHMPOOL_GRAIN) until
 * more than keep_bytes are free, and their ids never change.
 *
 * The pool owns the UCX context that the data plane's UCX worker lives
 * in (remote keys are packed against it), and must outlive every tensor
 * it served and that data plane.
 *
 * Threads: every function is thread-safe (one mutex); a block's base,
 * size, id and packed key never change while it is allocated. */
#ifndef ATOLL_SHMPOOL_H
#define ATOLL_SHMPOOL_H

#include <stddef.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

#define SHMPOOL_GRAIN ((size_t)1 << 20)
/* Blocks of this size and more come from the pool. */
#define SHMPOOL_MIN_BYTES ((size_t)1 << 20)

typedef struct shmpool shmpool_t;

/* A new pool over a new UCX context made with cfg (borrowed; the data
 * plane's settings) and params. NULL with a logged reason on failure. */
shmpool_t *shmpool_new(const ucp_params_t *params, const ucp_config_t *cfg,
                       size_t keep_bytes);
/* Unmaps every block and ends the context; every block must be free. */
void shmpool_free(shmpool_t *p);
ucp_context_h shmpool_context(shmpool_t *p);

/* Data of at least SHMPOOL_MIN_BYTES from a block; NULL when the pool
 * cannot map one (the caller then uses malloc). */
void *shmpool_alloc(shmpool_t *p, size_t bytes);
/* Takes back ptr, the base of one of its blocks: 0; -1 when ptr is not
 * one (nothing done). */
int shmpool_release(shmpool_t *p, void *ptr);

/* The block that holds [ptr, ptr + len), as a peer needs it to read there. */
typedef struct shmpool_ref {
    uint64_t id;                /* unique in this process, never reused */
    uint64_t base;              /* the block's address here */
    const void *rkey;           /* packed remote key: valid while the block is allocated */
    size_t rkey_len;
} shmpool_ref_t;
/* 0 with *out filled, or -1 when no allocated block holds the range. */
int shmpool_find(shmpool_t *p, const void *ptr, size_t len, shmpool_ref_t *out);

/* Blocks mapped now, and the bytes of those that are free. */
void shmpool_stats(shmpool_t *p, int *blocks, size_t *free_bytes);

/* Installs p as the tensor allocator of data >= SHMPOOL_MIN_BYTES (NULL:
 * uninstalls). */
void shmpool_install(shmpool_t *p);

#endif
