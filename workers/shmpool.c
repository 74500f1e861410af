/* shmpool.c - see shmpool.h.
 *
 * Blocks live in one array (few: a worker holds at most its object
 * store's cap in tensors); lookups scan it. Invariant: a block is either
 * allocated (in_use) or on the free list of its size, and free bytes stay
 * at most keep_bytes after every release (the excess is unmapped). */
#include "shmpool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/statvfs.h>

#include "tensor.h"
#include "util.h"

typedef struct block {
    void *base;
    size_t size;                /* a multiple of SHMPOOL_GRAIN */
    uint64_t id;
    ucp_mem_h memh;
    void *rkey;                 /* packed: ucp_rkey_buffer_release */
    size_t rkey_len;
    int in_use;
} block_t;

struct shmpool {
    pthread_mutex_t mu;
    ucp_context_h ctx;          /* owned */
    block_t *blocks;            /* owned */
    int n, cap;
    size_t free_bytes, keep_bytes;
    uint64_t next_id;
};

shmpool_t *shmpool_new(const ucp_params_t *params, const ucp_config_t *cfg, size_t keep_bytes)
{
    shmpool_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    ucs_status_t st = ucp_init(params, cfg, &p->ctx);
    if (st != UCS_OK) {
        log_error("shmpool: ucp_init: %s", ucs_status_string(st));
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    p->keep_bytes = keep_bytes;
    /* Ids start at a random point: a peer caching keys by (sender, id)
     * never confuses a restarted worker's blocks with the old ones. */
    if (getrandom(&p->next_id, sizeof p->next_id, 0) != sizeof p->next_id)
        p->next_id = (uint64_t)util_wall_us() << 20;
    return p;
}

static void block_unmap(shmpool_t *p, block_t *b)
{
    ucp_rkey_buffer_release(b->rkey);
    ucp_mem_unmap(p->ctx, b->memh);
}

void shmpool_free(shmpool_t *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n; i++) {
        if (p->blocks[i].in_use)
            log_warn("shmpool: a %zu-byte block still in use at exit", p->blocks[i].size);
        block_unmap(p, &p->blocks[i]);
    }
    free(p->blocks);
    ucp_cleanup(p->ctx);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

ucp_context_h shmpool_context(shmpool_t *p) { return p->ctx; }

/* Room in /dev/shm for a new block, with as much again to spare. UCX's
 * POSIX segments live there, and a page touched in a full tmpfs is a
 * SIGBUS, not an error: a container's small /dev/shm (64 MiB by default)
 * makes the pool decline (plain sends) instead. */
static int shm_has_room(size_t size)
{
    struct statvfs v;
    if (statvfs("/dev/shm", &v) != 0)
        return 1;                  /* no such mount: UCX uses what it finds */
    return (uint64_t)v.f_bavail * v.f_frsize >= 2 * (uint64_t)size;
}

/* Maps a new block of size bytes into b. 0 or -1. */
static int block_map(shmpool_t *p, block_t *b, size_t size)
{
    if (!shm_has_room(size))
        return -1;
    ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                                             UCP_MEM_MAP_PARAM_FIELD_FLAGS,
                               .length = size, .flags = UCP_MEM_MAP_ALLOCATE};
    ucp_mem_attr_t ma = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
    memset(b, 0, sizeof *b);
    if (ucp_mem_map(p->ctx, &mp, &b->memh) != UCS_OK)
        return -1;
    if (ucp_mem_query(b->memh, &ma) != UCS_OK ||
        ucp_rkey_pack(p->ctx, b->memh, &b->rkey, &b->rkey_len) != UCS_OK) {
        ucp_mem_unmap(p->ctx, b->memh);
        return -1;
    }
    b->base = ma.address;
    b->size = size;
    b->id = p->next_id++;
    return 0;
}

void *shmpool_alloc(shmpool_t *p, size_t bytes)
{
    if (bytes < SHMPOOL_MIN_BYTES)
        return NULL;
    size_t size = (bytes + SHMPOOL_GRAIN - 1) / SHMPOOL_GRAIN * SHMPOOL_GRAIN;
    void *out = NULL;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->n && !out; i++) {
        block_t *b = &p->blocks[i];
        if (!b->in_use && b->size == size) {
            b->in_use = 1;
            p->free_bytes -= size;
            out = b->base;
        }
    }
    if (!out && p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        block_t *nb = realloc(p->blocks, sizeof *nb * (size_t)cap);
        if (nb) {
            p->blocks = nb;
            p->cap = cap;
        }
    }
    if (!out && p->n < p->cap && block_map(p, &p->blocks[p->n], size) == 0) {
        p->blocks[p->n].in_use = 1;
        out = p->blocks[p->n++].base;
    }
    pthread_mutex_unlock(&p->mu);
    return out;
}

/* Unmaps free blocks, largest first, until free_bytes <= keep_bytes.
 * Holds mu. */
static void trim_locked(shmpool_t *p)
{
    while (p->free_bytes > p->keep_bytes) {
        int big = -1;
        for (int i = 0; i < p->n; i++)
            if (!p->blocks[i].in_use && (big < 0 || p->blocks[i].size > p->blocks[big].size))
                big = i;
        if (big < 0)
            return;
        p->free_bytes -= p->blocks[big].size;
        block_unmap(p, &p->blocks[big]);
        p->blocks[big] = p->blocks[--p->n];
    }
}

int shmpool_release(shmpool_t *p, void *ptr)
{
    int rc = -1;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->n; i++) {
        block_t *b = &p->blocks[i];
        if (b->base == ptr && b->in_use) {
            b->in_use = 0;
            p->free_bytes += b->size;
            trim_locked(p);
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int shmpool_find(shmpool_t *p, const void *ptr, size_t len, shmpool_ref_t *out)
{
    const char *c = ptr;
    int rc = -1;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->n; i++) {
        const block_t *b = &p->blocks[i];
        const char *base = b->base;
        if (b->in_use && c >= base && len <= b->size && (size_t)(c - base) <= b->size - len) {
            *out = (shmpool_ref_t){.id = b->id, .base = (uint64_t)(uintptr_t)b->base,
                                   .rkey = b->rkey, .rkey_len = b->rkey_len};
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void shmpool_stats(shmpool_t *p, int *blocks, size_t *free_bytes)
{
    pthread_mutex_lock(&p->mu);
    *blocks = p->n;
    *free_bytes = p->free_bytes;
    pthread_mutex_unlock(&p->mu);
}

static void *pool_alloc_cb(void *ctx, size_t bytes) { return shmpool_alloc(ctx, bytes); }
static int pool_release_cb(void *ctx, void *ptr) { return shmpool_release(ctx, ptr); }

void shmpool_install(shmpool_t *p)
{
    if (!p) {
        tensor_allocator_set(NULL);
        return;
    }
    tensor_allocator_t a = {.min_bytes = SHMPOOL_MIN_BYTES, .alloc = pool_alloc_cb,
                            .release = pool_release_cb, .ctx = p};
    tensor_allocator_set(&a);
}
