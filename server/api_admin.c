/* api_admin.c - operations only an admin may ask for: an online backup of
 * the database (GET /v1/admin/backup). atolld owns its database file
 * (store_vfs.c), so a consistent copy comes from atolld itself. */
#include "api.h"

#include <stdio.h>

#include "store.h"

/* The whole database as one SQLite file (application/vnd.sqlite3), a
 * snapshot as of the request; the writers go on meanwhile. 409 while
 * another backup is being made (each costs a full read and the database's
 * size on disk), 503 when the copy cannot be written (a full disk). */
void api_admin_backup(http_req_t *req, http_resp_t *resp)
{
    (void)req;
    store_t *st = api_store(resp);
    if (!st)
        return;
    int fd = -1;
    uint64_t size = 0;
    char why[256] = "";
    int rc = store_backup(st, &fd, &size, why, sizeof why);
    if (rc == STORE_CONFLICT) {
        http_problem(resp, 409, NULL, "another backup is being made; retry when it is done");
        return;
    }
    if (rc != STORE_OK) {
        http_problem(resp, 503, NULL, "the backup could not be made: %s", why);
        return;
    }
    http_file(resp, fd, size, "application/vnd.sqlite3", "atoll-backup.db");
}
