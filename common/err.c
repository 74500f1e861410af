#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int err_set(err_t *e, int status, const char *field, const char *fmt, ...)
{
    if (!e)
        return status;
    e->status = status;
    snprintf(e->field, sizeof e->field, "%s", field ? field : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->detail, sizeof e->detail, fmt, ap);
    va_end(ap);
    return status;
}
