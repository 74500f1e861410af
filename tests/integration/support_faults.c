/* support_faults.c - see support_faults.h.
 *
 * Processes are spawned and tracked by support_proc.c (hx_proc_spawn).
 * Invariant: hx_proc_stop() removes a pid from that table right after
 * waitpid(), so the exit handler never signals a pid the kernel may have
 * reused. */
#include "support_faults.h"

#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define FX_READY_MS 15000

static void fx_init(hx_proc_t *p, const char *dir, const char *name)
{
    memset(p, 0, sizeof *p);
    p->out_fd = -1;
    snprintf(p->name, sizeof p->name, "%s", name);
    char path[HX_DIR_MAX + 48];
    snprintf(path, sizeof path, "%.*s/%.31s.log", HX_DIR_MAX - 1, dir, name);
    snprintf(p->log_path, sizeof p->log_path, "%s", path);
}

int fx_atolld_start(hx_proc_t *p, const char *dir, const char *name, int port, int lease_ms,
                    const char *const *islands, int nislands, char *url, size_t url_cap,
                    int *port_out)
{
    char bin[HX_PATH_MAX], db[HX_DIR_MAX + 16], listen[64], lease[16], line[512];
    snprintf(bin, sizeof bin, "%s/atolld", hx_bin_dir());
    snprintf(db, sizeof db, "%.*s/atoll.db", HX_DIR_MAX - 1, dir);
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    snprintf(lease, sizeof lease, "%d", lease_ms);
    char *argv[8 + 2 * 8];
    int argc = 0;
    argv[argc++] = bin;
    argv[argc++] = "--listen";
    argv[argc++] = listen;
    argv[argc++] = "--db";
    argv[argc++] = db;
    argv[argc++] = "--lease-ms";
    argv[argc++] = lease;
    for (int i = 0; i < nislands && i < 8; i++) {
        argv[argc++] = "--island";
        argv[argc++] = (char *)islands[i];
    }
    argv[argc] = NULL;
    fx_init(p, dir, name);
    if (hx_proc_spawn(p, argv, 1) != 0)
        return -1;
    if (hx_proc_read_line(p, line, sizeof line, FX_READY_MS) != 0) {
        hx_proc_stop(p, SIGKILL, 1000);
        return -1;
    }
    /* "atolld ready: http://127.0.0.1:PORT (db ...)" */
    const char *s = strstr(line, "http://127.0.0.1:");
    int got = s ? atoi(s + strlen("http://127.0.0.1:")) : 0;
    if (got <= 0) {
        fprintf(stderr, "faults: no port in atolld's ready line '%s'\n", line);
        hx_proc_stop(p, SIGKILL, 1000);
        return -1;
    }
    snprintf(url, url_cap, "http://127.0.0.1:%d", got);
    *port_out = got;
    return 0;
}

int fx_worker_start(hx_proc_t *p, const char *dir, const char *name, const char *url,
                    const char *island, int devices, int timeout_ms)
{
    char bin[HX_PATH_MAX], ndev[16], line[512];
    snprintf(bin, sizeof bin, "%s/atoll-worker", hx_bin_dir());
    snprintf(ndev, sizeof ndev, "%d", devices);
    char *argv[] = {bin, "--controller", (char *)url, "--island", (char *)island,
                    "--devices", ndev, NULL};
    fx_init(p, dir, name);
    if (hx_proc_spawn(p, argv, 1) != 0)
        return -1;
    return hx_proc_read_line(p, line, sizeof line, timeout_ms);
}

void fx_kill(hx_proc_t *p)
{
    hx_proc_stop(p, SIGKILL, 5000);
}

int fx_term(hx_proc_t *p, int grace_ms)
{
    int st = hx_proc_stop(p, SIGTERM, grace_ms);
    return st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* Collects a response body up to 64 KiB (a job object is far smaller). */
typedef struct fx_buf {
    char data[65536];
    size_t len;
} fx_buf_t;

static size_t fx_on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
    fx_buf_t *b = ud;
    size_t n = size * nmemb;
    size_t room = sizeof b->data - 1 - b->len;
    size_t take = n < room ? n : room;
    memcpy(b->data + b->len, ptr, take);
    b->len += take;
    b->data[b->len] = '\0';
    return n;
}

int fx_submit(const char *url, const char *doc, const char *key, int64_t *id)
{
    char full[HX_URL_MAX + 16], hdr[192];
    int status = -1;
    fx_buf_t *b = calloc(1, sizeof *b);
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL, *h2 = NULL;
    if (!b || !c)
        goto cleanup;
    snprintf(full, sizeof full, "%s/v1/jobs", url);
    snprintf(hdr, sizeof hdr, "Idempotency-Key: %s", key);
    if (!(h = curl_slist_append(NULL, "Content-Type: application/json")))
        goto cleanup;
    if (!(h2 = curl_slist_append(h, hdr)))
        goto cleanup;
    h = h2;
    curl_easy_setopt(c, CURLOPT_URL, full);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, doc);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, fx_on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
    if (curl_easy_perform(c) != CURLE_OK)
        goto cleanup;
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    status = (int)code;
    if (status == 200 || status == 201) {
        json_t *j = json_loads(b->data, 0, NULL);
        json_t *v = json_object_get(j, "id");
        *id = json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
        json_decref(j);
    }
cleanup:
    curl_slist_free_all(h);
    if (c)
        curl_easy_cleanup(c);
    free(b);
    return status;
}

#ifndef ATOLL_SYNCGATE_SO
/* bench/ builds these files without tests/ and its shim. */
int fx_syncgate_env(int on, const char *gate, const char *fail)
{
    (void)gate;
    (void)fail;
    return on ? -1 : 0;
}
#else
/* What fx_syncgate_env(1, ...) replaced: ASAN_OPTIONS's value (NULL: unset). */
static char *syncgate_asan_was;
static int syncgate_asan_set;

int fx_syncgate_env(int on, const char *gate, const char *fail)
{
    if (!on) {
        unsetenv("LD_PRELOAD");
        unsetenv("ATOLL_TEST_SYNC_GATE");
        unsetenv("ATOLL_TEST_SYNC_FAIL");
        if (syncgate_asan_was)
            setenv("ASAN_OPTIONS", syncgate_asan_was, 1);
        else
            unsetenv("ASAN_OPTIONS");
        free(syncgate_asan_was);
        syncgate_asan_was = NULL;
        syncgate_asan_set = 0;
        return 0;
    }
    /* ASan wants its runtime first in the link order; a preloaded
     * library comes before it (the sanitizer build). Built from the value
     * before the first call, so that calling again adds nothing twice. */
    if (!syncgate_asan_set) {
        const char *asan = getenv("ASAN_OPTIONS");
        if (asan && !(syncgate_asan_was = strdup(asan)))
            return -1;
        syncgate_asan_set = 1;
    }
    const char *asan = syncgate_asan_was;
    char opts[512];
    snprintf(opts, sizeof opts, "%s%sverify_asan_link_order=0", asan ? asan : "",
             asan && *asan ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
    setenv("LD_PRELOAD", ATOLL_SYNCGATE_SO, 1);
    if (gate)
        setenv("ATOLL_TEST_SYNC_GATE", gate, 1);
    if (fail)
        setenv("ATOLL_TEST_SYNC_FAIL", fail, 1);
    return 0;
}
#endif
