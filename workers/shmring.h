/* shmring.h - a single-producer single-consumer byte ring in shared memory.
 *
 * The data plane's same-host transport: a sender creates a ring in a memfd
 * and passes the fd to the receiver over a Unix socket (SCM_RIGHTS); frame
 * headers keep travelling over that socket, payload bytes go through the
 * ring, so tensors never pass through a socket buffer. Head and tail are
 * byte counters in the shared page (head written only by the producer, tail
 * only by the consumer); each side sleeps on a futex word the other bumps
 * after moving its counter, so neither spins.
 *
 * Liveness: waits wake at least every 10 ms to check the stop flag, the
 * other side's `closed` mark, and (alive_fd >= 0) whether the socket that
 * pairs the two processes hung up, so a dead peer never leaves a thread
 * stuck. One producer thread and one consumer thread per ring. */
#ifndef ATOLL_SHMRING_H
#define ATOLL_SHMRING_H

#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Default data capacity of one ring (pages are touched only as used). */
#define SHMRING_DEFAULT_BYTES ((size_t)4 << 20)

typedef struct shmring shmring_t;

/* A new ring of `size` data bytes (a multiple of 4096, > 0) in a memfd.
 * *fd gets the memfd (the caller passes it on, then closes it). NULL on
 * failure (errno set). */
shmring_t *shmring_create(size_t size, int *fd);
/* Largest ring a receiver maps. */
#define SHMRING_MAX_BYTES ((size_t)64 << 20)
/* Seals every ring memfd carries (with F_SEAL_SEAL), added before it is
 * mapped or sent: its size can never change, so a sender cannot shrink it
 * under the receiver's mapping (SIGBUS). F_SEAL_WRITE cannot apply: both
 * sides keep writing the ring (the producer its data and head, the
 * consumer its tail), which is what the ring is for. */
#define SHMRING_SEALS (F_SEAL_SHRINK | F_SEAL_GROW)

/* 0 when fd is a sealed memfd (SHMRING_SEALS and F_SEAL_SEAL) of exactly
 * the control block plus `size` data bytes, the size the hello claimed;
 * -1 otherwise. Checked before anything is mapped. */
int shmring_check_fd(int fd, size_t size);
/* Maps the ring behind a received memfd (borrowed; the caller closes it)
 * whose sender claimed `size` data bytes. NULL when the fd fails
 * shmring_check_fd() or is not a ring. */
shmring_t *shmring_attach(int fd, size_t size);

/* Copies n bytes in (producer) / out (consumer), waiting for room / data.
 * Returns 0, or -1 when *stop becomes non-zero (stop may be NULL), the
 * other side closed the ring or hung up alive_fd, or no byte moved for
 * timeout_ms. */
int shmring_write(shmring_t *r, const void *buf, size_t n, const atomic_int *stop,
                  int alive_fd, int timeout_ms);
int shmring_read(shmring_t *r, void *buf, size_t n, const atomic_int *stop, int alive_fd,
                 int timeout_ms);

/* Marks the ring closed (the other side's waits end), unmaps, frees.
 * Accepts NULL. */
void shmring_close(shmring_t *r);

#endif
