/* shim_syncgate.c - fault injection for integration tests, loaded into
 * atolld with LD_PRELOAD; it replaces fdatasync:
 *   - while the file named by ATOLL_TEST_SYNC_GATE exists, it waits before
 *     syncing: a test holds group commit's rounds (store_sync.c) open, so
 *     requests stay parked for their round as long as it needs, and
 *     removes the file to let them finish;
 *   - while the file named by ATOLL_TEST_SYNC_FAIL exists, it fails with
 *     EIO without syncing: the disk refusing a round.
 * Without the variables, or with the files absent, fdatasync is libc's.
 * Test code only: nothing in atolld knows of it. */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int file_there(const char *env)
{
    const char *path = getenv(env);
    return path && access(path, F_OK) == 0;
}

int fdatasync(int fd)
{
    /* The next definition in link order: libc's. */
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    struct timespec nap = {0, 1000000};
    while (file_there("ATOLL_TEST_SYNC_GATE"))
        nanosleep(&nap, NULL);
    if (!real || file_there("ATOLL_TEST_SYNC_FAIL")) {
        errno = real ? EIO : ENOSYS;
        return -1;
    }
    return real(fd);
}
