/* shmring.c - see shmring.h.
 *
 * Layout of the memfd: one 256-byte control block (head and tail on their
 * own cache lines, so producer and consumer do not fight over one line),
 * then `size` data bytes. Invariant: 0 <= head - tail <= size; byte k of
 * the stream lives at data[k % size]. The producer publishes with a
 * release store of head after copying; the consumer reads head with an
 * acquire load before copying out (and symmetrically for tail), so the
 * bytes are visible before the counter that announces them.
 *
 * Futex protocol (no lost wakeups): a waiter reads the event word, then
 * re-checks the counter, then sleeps only if the word is unchanged; a mover
 * stores its counter, then bumps the word, then wakes. The words are
 * process-shared (plain FUTEX_WAIT/WAKE, not the _PRIVATE variants). */
#include "shmring.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define SHMRING_MAGIC 0x41545247u     /* "ATRG" */
#define SHMRING_CTRL 256
#define SHMRING_STEP ((size_t)256 << 10)  /* publish every 256 KiB */
#define SHMRING_POLL_NS (10 * 1000000L)

typedef struct shmring_ctrl {
    _Atomic uint64_t head;            /* bytes produced */
    char pad0[56];
    _Atomic uint64_t tail;            /* bytes consumed */
    char pad1[56];
    _Atomic uint32_t head_ev;         /* bumped after head moves */
    _Atomic uint32_t tail_ev;         /* bumped after tail moves */
    _Atomic uint32_t closed;          /* either side left */
    uint32_t magic;
    uint64_t size;
} shmring_ctrl_t;

_Static_assert(sizeof(shmring_ctrl_t) <= SHMRING_CTRL, "control block too big");

struct shmring {
    shmring_ctrl_t *c;                /* the mapping */
    uint8_t *data;
    size_t size;
    size_t map_len;
};

static shmring_t *shmring_map(int fd, size_t map_len)
{
    shmring_t *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    void *m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        free(r);
        return NULL;
    }
    r->c = m;
    r->data = (uint8_t *)m + SHMRING_CTRL;
    r->map_len = map_len;
    return r;
}

shmring_t *shmring_create(size_t size, int *fd)
{
    *fd = -1;
    if (size == 0 || size % 4096 != 0)
        return NULL;
    if (size > SHMRING_MAX_BYTES)
        return NULL;
    int f = memfd_create("atoll-dplane", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (f < 0)
        return NULL;
    shmring_t *r = NULL;
    /* Sealed before it is mapped or passed on: its size can never change,
     * so the receiver's mapping cannot SIGBUS (see shmring.h). */
    if (ftruncate(f, (off_t)(SHMRING_CTRL + size)) != 0 ||
        fcntl(f, F_ADD_SEALS, SHMRING_SEALS | F_SEAL_SEAL) != 0 ||
        !(r = shmring_map(f, SHMRING_CTRL + size))) {
        close(f);
        return NULL;
    }
    r->size = size;
    r->c->size = size;      /* fresh memfd pages are zero: counters start at 0 */
    r->c->magic = SHMRING_MAGIC;
    *fd = f;
    return r;
}

int shmring_check_fd(int fd, size_t size)
{
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    if (size == 0 || size > SHMRING_MAX_BYTES || seals < 0 ||
        (seals & SHMRING_SEALS) != SHMRING_SEALS || !(seals & F_SEAL_SEAL))
        return -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size != (uint64_t)SHMRING_CTRL + size)
        return -1;
    return 0;
}

shmring_t *shmring_attach(int fd, size_t size)
{
    if (shmring_check_fd(fd, size) != 0) {
        errno = EPERM;
        return NULL;
    }
    shmring_t *r = shmring_map(fd, SHMRING_CTRL + size);
    if (!r)
        return NULL;
    r->size = size;
    if (r->c->magic != SHMRING_MAGIC || r->c->size != r->size) {
        munmap(r->c, r->map_len);
        free(r);
        return NULL;
    }
    return r;
}

static void futex_wait(_Atomic uint32_t *w, uint32_t seen)
{
    struct timespec ts = {0, SHMRING_POLL_NS};
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, seen, &ts, NULL, 0);
}

static void futex_bump(_Atomic uint32_t *w)
{
    atomic_fetch_add_explicit(w, 1, memory_order_release);
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* Non-zero when the wait must end: stop requested, ring closed, peer hung
 * up, or no progress since `since` for timeout_ms. */
static int must_give_up(shmring_t *r, const atomic_int *stop, int alive_fd, int64_t since,
                        int timeout_ms)
{
    if ((stop && atomic_load(stop)) || atomic_load(&r->c->closed))
        return 1;
    if (alive_fd >= 0) {
        struct pollfd p = {.fd = alive_fd, .events = POLLRDHUP};
        if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
            return 1;
    }
    return util_mono_us() - since > (int64_t)timeout_ms * 1000;
}

int shmring_write(shmring_t *r, const void *buf, size_t n, const atomic_int *stop,
                  int alive_fd, int timeout_ms)
{
    const uint8_t *p = buf;
    int64_t progress = util_mono_us();
    uint64_t head = atomic_load_explicit(&r->c->head, memory_order_relaxed);
    while (n > 0) {
        uint32_t ev = atomic_load_explicit(&r->c->tail_ev, memory_order_acquire);
        uint64_t tail = atomic_load_explicit(&r->c->tail, memory_order_acquire);
        size_t room = r->size - (size_t)(head - tail);
        if (room == 0) {
            if (must_give_up(r, stop, alive_fd, progress, timeout_ms))
                return -1;
            futex_wait(&r->c->tail_ev, ev);
            continue;
        }
        size_t off = (size_t)(head % r->size);
        size_t chunk = n < room ? n : room;
        if (chunk > r->size - off)
            chunk = r->size - off;
        if (chunk > SHMRING_STEP)
            chunk = SHMRING_STEP;
        memcpy(r->data + off, p, chunk);
        head += chunk;
        atomic_store_explicit(&r->c->head, head, memory_order_release);
        futex_bump(&r->c->head_ev);
        p += chunk;
        n -= chunk;
        progress = util_mono_us();
    }
    return 0;
}

int shmring_read(shmring_t *r, void *buf, size_t n, const atomic_int *stop, int alive_fd,
                 int timeout_ms)
{
    uint8_t *p = buf;
    int64_t progress = util_mono_us();
    uint64_t tail = atomic_load_explicit(&r->c->tail, memory_order_relaxed);
    while (n > 0) {
        uint32_t ev = atomic_load_explicit(&r->c->head_ev, memory_order_acquire);
        uint64_t head = atomic_load_explicit(&r->c->head, memory_order_acquire);
        size_t avail = (size_t)(head - tail);
        if (avail == 0) {
            if (must_give_up(r, stop, alive_fd, progress, timeout_ms))
                return -1;
            futex_wait(&r->c->head_ev, ev);
            continue;
        }
        size_t off = (size_t)(tail % r->size);
        size_t chunk = n < avail ? n : avail;
        if (chunk > r->size - off)
            chunk = r->size - off;
        if (chunk > SHMRING_STEP)
            chunk = SHMRING_STEP;
        memcpy(p, r->data + off, chunk);
        tail += chunk;
        atomic_store_explicit(&r->c->tail, tail, memory_order_release);
        futex_bump(&r->c->tail_ev);
        p += chunk;
        n -= chunk;
        progress = util_mono_us();
    }
    return 0;
}

void shmring_close(shmring_t *r)
{
    if (!r)
        return;
    atomic_store(&r->c->closed, 1);
    futex_bump(&r->c->head_ev);
    futex_bump(&r->c->tail_ev);
    munmap(r->c, r->map_len);
    free(r);
}
