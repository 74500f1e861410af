/* support_check.h - glue between the harness and a test framework-free
 * failure report. Test programs wrap these in their own assert macros
 * (cmocka's fail() lives in the test, never here, because bench programs
 * link this code without cmocka). */
#ifndef ATOLL_SUPPORT_CHECK_H
#define ATOLL_SUPPORT_CHECK_H

#include "support_harness.h"

/* Prints "FAILED: <msg>" with file:line, the client's last request and
 * response, and the tails of the cluster's logs (which are then kept). */
void hx_report_failure(hx_cluster_t *c, const hx_client_t *cl, const char *file, int line,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#endif
