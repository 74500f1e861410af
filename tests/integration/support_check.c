/* support_check.c - failure reports for integration tests. */
#include "support_check.h"

#include <stdarg.h>
#include <stdio.h>

#define CHECK_LOG_TAIL 3000

void hx_report_failure(hx_cluster_t *c, const hx_client_t *cl, const char *file, int line,
                       const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "\nFAILED at %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (cl)
        hx_client_print_last(cl);
    if (c)
        hx_cluster_dump_logs(c, CHECK_LOG_TAIL);
}
