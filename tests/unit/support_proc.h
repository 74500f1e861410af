/* support_proc.h - one figure of this process from /proc, for unit tests
 * that count what a change must not add (threads, write calls). */
#ifndef SUPPORT_PROC_H
#define SUPPORT_PROC_H

#include <stdio.h>

/* The value of the first line of `path` (e.g. "/proc/self/status") that
 * `line_fmt` (e.g. "Threads: %lld") reads, or -1 when none or unreadable. */
static inline long long support_proc_value(const char *path, const char *line_fmt)
{
    FILE *f = fopen(path, "r");
    char line[256];
    long long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, line_fmt, &v) == 1)
            break;
    if (f)
        fclose(f);
    return v;
}

#endif
