/* cpupsi.c - see cpupsi.h. */
#include "cpupsi.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cpupsi_init(cpupsi_t *p, const char *path)
{
    *p = (cpupsi_t){.path = path ? path : "/proc/pressure/cpu", .last_total_us = -1};
}

int64_t cpupsi_parse_total(const char *text)
{
    /* "some avg10=0.00 avg60=0.00 avg300=0.00 total=123\n" first; a
     * "full" line may follow (kernels 5.13 and later). */
    if (strncmp(text, "some ", 5) != 0)
        return -1;
    const char *eol = strchr(text, '\n');
    const char *t = strstr(text, " total=");
    if (!t || (eol && t > eol))
        return -1;
    t += 7;
    if (*t < '0' || *t > '9')
        return -1;
    errno = 0;
    char *end;
    long long v = strtoll(t, &end, 10);
    if (errno != 0 || (*end != '\n' && *end != '\0' && *end != ' '))
        return -1;
    return (int64_t)v;
}

int cpupsi_next(int was_contended, double share)
{
    if (share >= CPUPSI_HIGH)
        return 1;
    if (share < CPUPSI_LOW)
        return 0;
    return was_contended;
}

/* The file's "some" total, or -1. */
static int64_t read_total(const char *path)
{
    char buf[256];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return cpupsi_parse_total(buf);
}

int cpupsi_sample(cpupsi_t *p, int64_t now_us)
{
    if (p->last_total_us >= 0 && now_us - p->last_at_us < 100000)
        return p->contended;
    int64_t total = read_total(p->path);
    if (total < 0)
        return p->contended;
    /* A total that went back (another file, a counter reset) restarts
     * the sampler rather than giving a negative share. */
    if (p->last_total_us >= 0 && total >= p->last_total_us && now_us > p->last_at_us)
        p->contended = cpupsi_next(p->contended, (double)(total - p->last_total_us) /
                                                     (double)(now_us - p->last_at_us));
    p->last_total_us = total;
    p->last_at_us = now_us;
    return p->contended;
}
