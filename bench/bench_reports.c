/* bench_reports.c - the controller's cost per host-task report, alone.
 *
 *   bench_reports [COMPUTATIONS [BATCH [DEVICES]]]   (defaults 1000, 1, 1)
 *
 * Runs the atolld of $ATOLL_BIN_DIR (default build/bin) with island
 * d=4xDEVICES and no worker process: this bench plays 4 workers of DEVICES
 * devices (one island row each; each report then brings one scalar output
 * tensor per device) over HTTP
 * (registration, polls, reports), so nothing else competes for the CPU and
 * what is measured is atolld's own work. One job of COMPUTATIONS chained
 * computations (4 host tasks each, one per played worker) is submitted;
 * each played worker leases all its tasks, then 4 threads (one per worker,
 * each with its own keep-alive connection, as real workers report) send
 * every task's succeeded report, BATCH items per request, in task order.
 * Prints, as `name value` lines:
 *   reports.items                 reports applied (COMPUTATIONS x 4)
 *   reports.atolld_cpu_us_per_item atolld's user+system CPU per report item
 *                                  over the report phase (/proc/PID/stat)
 *   reports.applier_cpu_us_per_item the same of its report applier thread
 *                                  alone (atoll-reports): the serial part,
 *                                  which bounds how fast reports can go in
 *                                  however many cores decode them
 *   reports.http_cpu_us_per_item  the same of its HTTP threads (MHD-worker):
 *                                  receiving each request, reading its
 *                                  reports from the text, answering
 *   reports.items_per_s           items over the phase's wall time
 *   reports.job_state             the job's state after the phase
 * To compare two builds, run this bench against each (ATOLL_BIN_DIR). */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support_harness.h"

#define WORKERS 4
#define DEADLINE_MS 120000

typedef struct played {
    int64_t id;
    char hdr[160];              /* X-Atoll-Worker-Secret: ... */
    int64_t *tasks;             /* owned: its task ids, in lease order */
    int64_t *comps;             /* owned: each task's computation (a run's share an id) */
    size_t ntasks, cap;
    int batch;
    int devices;
    int failed;
    const char *url;
} played_t;

static int played_register(hx_client_t *cl, played_t *w, int i)
{
    char body[160];
    snprintf(body, sizeof body, "{\"island\":\"d\",\"devices\":%d,\"data_addr\":"
             "\"127.0.0.1:%d\"}", w->devices, i + 1);
    hx_resp_t r;
    if (hx_request(cl, "POST", "/v1/workers", body, strlen(body), &r) != 0 || r.status != 201) {
        hx_resp_clear(&r);
        return -1;
    }
    w->id = json_integer_value(json_object_get(r.json, "id"));
    const char *secret = json_string_value(json_object_get(r.json, "secret"));
    snprintf(w->hdr, sizeof w->hdr, "X-Atoll-Worker-Secret: %s", secret ? secret : "");
    hx_resp_clear(&r);
    return w->id > 0 && secret ? 0 : -1;
}

static int played_add(played_t *w, int64_t task, int64_t comp)
{
    if (w->ntasks == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 1024;
        int64_t *t = realloc(w->tasks, cap * sizeof *t);
        if (t)
            w->tasks = t;
        int64_t *c = realloc(w->comps, cap * sizeof *c);
        if (c)
            w->comps = c;
        if (!t || !c)
            return -1;
        w->cap = cap;
    }
    w->comps[w->ntasks] = comp;
    w->tasks[w->ntasks++] = task;
    return 0;
}

/* Polls (acknowledging each answer) until the worker holds `want` tasks. */
static int played_lease(hx_client_t *cl, played_t *w, size_t want)
{
    int64_t ack = 0, deadline = hx_now_ms() + DEADLINE_MS;
    const char *hdrs[] = {w->hdr, NULL};
    while (w->ntasks < want && hx_now_ms() < deadline) {
        char path[128];
        snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/tasks?wait_ms=1000&ack=%" PRId64,
                 w->id, ack);
        hx_resp_t r;
        if (hx_request_h(cl, "GET", path, NULL, 0, hdrs, &r) != 0 || r.status != 200) {
            hx_resp_clear(&r);
            return -1;
        }
        ack = json_integer_value(json_object_get(r.json, "lease"));
        size_t i, k;
        json_t *job, *task;
        json_array_foreach(json_object_get(r.json, "jobs"), i, job)
            json_array_foreach(json_object_get(job, "tasks"), k, task)
                if (played_add(w, json_integer_value(json_object_get(task, "task")),
                               json_integer_value(json_object_get(task, "comp"))) != 0) {
                    hx_resp_clear(&r);
                    return -1;
                }
        hx_resp_clear(&r);
    }
    return w->ntasks == want ? 0 : -1;
}

/* One report item: succeeded, output b (hx_compute_chain_doc's) with one
 * scalar of value 0 per shard (ndev). Returns its length. */
static size_t report_item(char *buf, size_t n, int64_t task, int64_t comp, int ndev)
{
    size_t len = (size_t)snprintf(buf, n,
                                  "{\"task\":%" PRId64 ",\"comp\":%" PRId64 ",\"state\":"
                                  "\"succeeded\",\"started_us\":1,\"inputs_ready_us\":2,"
                                  "\"finished_us\":3,\"outputs\":{\"b\":[", task, comp);
    for (int d = 0; d < ndev && len < n; d++)
        len += (size_t)snprintf(buf + len, n - len, "%s{\"shape\":[],\"sum\":0,"
                                "\"values_f32\":\"AAAAAA==\"}", d ? "," : "");
    if (len < n)
        len += (size_t)snprintf(buf + len, n - len, "]}}");
    return len;
}

static void *played_report(void *arg)
{
    played_t *w = arg;
    hx_client_t cl;
    if (hx_client_init(&cl, w->url) != 0) {
        w->failed = 1;
        return NULL;
    }
    const char *hdrs[] = {w->hdr, NULL};
    size_t icap = 256 + (size_t)w->devices * 64, cap = (size_t)w->batch * icap + 64;
    char *body = malloc(cap), *item = malloc(icap), path[96];
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/reports", w->id);
    for (size_t i = 0; body && item && i < w->ntasks && !w->failed; i += (size_t)w->batch) {
        size_t len = (size_t)snprintf(body, cap, "{\"reports\":[");
        for (size_t k = i; k < w->ntasks && k < i + (size_t)w->batch; k++) {
            report_item(item, icap, w->tasks[k], w->comps[k], w->devices);
            len += (size_t)snprintf(body + len, cap - len, "%s%s", k > i ? "," : "", item);
        }
        len += (size_t)snprintf(body + len, cap - len, "]}");
        hx_resp_t r;
        if (hx_request_h(&cl, "POST", path, body, len, hdrs, &r) != 0 || r.status != 200)
            w->failed = 1;
        hx_resp_clear(&r);
    }
    if (!body || !item)
        w->failed = 1;
    free(body);
    free(item);
    hx_client_cleanup(&cl);
    return NULL;
}

int main(int argc, char **argv)
{
    int ncomps = argc > 1 ? atoi(argv[1]) : 1000, batch = argc > 2 ? atoi(argv[2]) : 1;
    int ndev = argc > 3 ? atoi(argv[3]) : 1;
    if (ncomps < 1 || ncomps > 1024 || batch < 1 || batch > 256 || ndev < 1 || ndev > 16) {
        fprintf(stderr, "usage: bench_reports [COMPUTATIONS (1..1024) [BATCH (1..256)"
                " [DEVICES (1..16)]]]\n");
        return 2;
    }
    char island[32];
    snprintf(island, sizeof island, "d=%dx%d", WORKERS, ndev);
    const char *const islands[] = {island};
    hx_cluster_t c;
    hx_client_t cl;
    played_t w[WORKERS];
    pthread_t th[WORKERS];
    char *doc = hx_compute_chain_doc("reports", ncomps, 0, 0, "d", WORKERS, ndev > 1 ? ndev : 0);
    int rc = 1;
    memset(w, 0, sizeof w);
    for (int i = 0; i < WORKERS; i++)
        w[i].devices = ndev;
    if (!doc || hx_init() != 0 || hx_cluster_start(&c, islands, 1) != 0)
        return 1;
    if (hx_client_init(&cl, c.url) != 0)
        goto out;
    for (int i = 0; i < WORKERS; i++)
        if (played_register(&cl, &w[i], i) != 0) {
            fprintf(stderr, "bench: registration failed\n");
            goto out_cl;
        }
    int64_t job = 0;
    if (hx_job_submit(&cl, doc, &job, NULL) != 201) {
        fprintf(stderr, "bench: submission failed\n");
        goto out_cl;
    }
    for (int i = 0; i < WORKERS; i++)
        if (played_lease(&cl, &w[i], (size_t)ncomps) != 0) {
            fprintf(stderr, "bench: worker %d leased %zu of %d tasks\n", i, w[i].ntasks, ncomps);
            goto out_cl;
        }
    /* The applier thread starts with the first batch: none yet is 0. */
    int64_t app0 = hx_thread_cpu_us(c.atolld.pid, "atoll-reports");
    int64_t http0 = hx_thread_cpu_us(c.atolld.pid, "MHD-worker");
    int64_t cpu0 = hx_cpu_us(c.atolld.pid), t0 = hx_now_ms();
    for (int i = 0; i < WORKERS; i++) {
        w[i].batch = batch;
        w[i].url = c.url;
        if (pthread_create(&th[i], NULL, played_report, &w[i]) != 0)
            w[i].failed = 1, th[i] = 0;
    }
    int failed = 0;
    for (int i = 0; i < WORKERS; i++) {
        if (th[i])
            pthread_join(th[i], NULL);
        failed |= w[i].failed;
    }
    int64_t ms = hx_now_ms() - t0, cpu = hx_cpu_us(c.atolld.pid) - cpu0;
    int64_t app = hx_thread_cpu_us(c.atolld.pid, "atoll-reports") - (app0 > 0 ? app0 : 0);
    int64_t http = hx_thread_cpu_us(c.atolld.pid, "MHD-worker") - (http0 > 0 ? http0 : 0);
    json_t *j = NULL;
    hx_job_wait(&cl, job, DEADLINE_MS, 10, &j);
    long items = (long)ncomps * WORKERS;
    printf("reports.computations %d\nreports.batch %d\nreports.devices_per_worker %d\n"
           "reports.items %ld\n", ncomps, batch, ndev, items);
    printf("reports.atolld_cpu_us_per_item %.1f\n", (double)cpu / (double)items);
    printf("reports.applier_cpu_us_per_item %.1f\n", (double)app / (double)items);
    printf("reports.http_cpu_us_per_item %.1f\n", (double)http / (double)items);
    printf("reports.items_per_s %.0f\n", ms > 0 ? (double)items * 1000.0 / (double)ms : 0.0);
    printf("reports.job_state %s\n", j ? hx_job_state(j) : "?");
    rc = failed || !j || strcmp(hx_job_state(j), "succeeded") != 0;
    if (failed)
        fprintf(stderr, "bench: a report request failed\n");
    json_decref(j);
out_cl:
    hx_client_cleanup(&cl);
out:
    for (int i = 0; i < WORKERS; i++) {
        free(w[i].tasks);
        free(w[i].comps);
    }
    free(doc);
    hx_cluster_stop(&c);
    return rc;
}
