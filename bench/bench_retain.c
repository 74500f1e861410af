/* bench_retain.c - what job retention (atolld --keep-jobs-s) costs a
 * loop of tiny jobs, and what it saves on disk.
 *
 * Runs the same load twice, each on a fresh cluster (island w=2x2, one
 * worker of 4 devices): CLIENTS clients each submit a tiny 1-device job
 * and wait for its success, again and again, for SECONDS. First with
 * every job kept (--keep-jobs-s 0, the default), then with jobs deleted
 * KEEP seconds after their end. Prints, per side (`keep0`, `keepN`):
 *   retain.SIDE.jobs               jobs run
 *   retain.SIDE.jobs_per_s
 *   retain.SIDE.cpu_us_per_job     atolld's CPU (user + system) per job
 *   retain.SIDE.sampler_cpu_us_per_job
 *                                  of which the sampler thread's, which
 *                                  runs the deletes
 *   retain.SIDE.ckpt_cpu_us_per_job
 *                                  of which the checkpointer's (the deleted
 *                                  rows' pages are written to the WAL too)
 *   retain.SIDE.pruned             jobs deleted (atoll_jobs_pruned_total)
 *   retain.SIDE.store_mb           atoll.db + its WAL at the end
 *   retain.SIDE.growth_mb_per_s    how fast they grew over the second half
 *                                  (the steady state: with retention the
 *                                  deleted jobs' pages are reused)
 * and the ratios keepN / keep0 of jobs_per_s, cpu_us_per_job and store_mb.
 *
 *   bench_retain [SECONDS [KEEP]]      (default 20 and 2) */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "bench_clients.h"
#include "support_harness.h"

#define RETAIN_CLIENTS 4

static const char one_doc_q[] =
    "{'name':'one','slices':{'s':{'shape':[1]}},'computations':[{'name':'c','slice':'s',"
    "'ops':[{'op':'fill','out':'x','shape':[1],'value':1.0},"
    "{'op':'all_reduce','out':'z','args':['x'],'reduce':'sum'}],'outputs':['z']}]}";

/* One step of a client: a tiny job run to success. */
static int run_job(hx_client_t *cl, const char *doc)
{
    return hx_job_run(cl, doc, 30000, 2);
}

static double file_mb(const char *dir, const char *name)
{
    char path[HX_PATH_MAX + 32];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &sb) == 0 ? (double)sb.st_size / (1024.0 * 1024.0) : 0.0;
}

static double store_mb(const char *dir)
{
    return file_mb(dir, "atoll.db") + file_mb(dir, "atoll.db-wal");
}

typedef struct side {
    double jobs, per_s, cpu_us, sampler_us, ckpt_us, pruned, store_mb, growth;
} side_t;

/* One side: a fresh cluster with --keep-jobs-s keep, the loop for secs.
 * 0 or -1. */
static int run_side(const char *doc, int keep, int secs, side_t *out)
{
    static const char *const islands[] = {"w=2x2"};
    char keep_s[16];
    snprintf(keep_s, sizeof keep_s, "%d", keep);
    const char *const extra[] = {"--keep-jobs-s", keep_s, NULL};
    hx_cluster_t c;
    if (hx_cluster_start_args(&c, islands, 1, extra) != 0)
        return -1;
    int rc = -1;
    if (hx_worker_start(&c, "w", 4) != 0)
        goto done;
    bench_client_t clients[RETAIN_CLIENTS];
    int64_t cpu0 = hx_sched_cpu_us(c.atolld.pid);
    int64_t smp0 = hx_thread_cpu_us(c.atolld.pid, "atoll-sampler");
    int64_t ck0 = hx_thread_cpu_us(c.atolld.pid, "atoll-ckpt");
    int64_t t0 = hx_now_ms();
    int started = bench_clients_start(clients, RETAIN_CLIENTS, c.url, doc, run_job,
                                      t0 + secs * 1000);
    /* The clients run on; this thread only looks at the files halfway. */
    while (hx_now_ms() < t0 + secs * 500)
        hx_sleep_ms(50);
    double half_mb = store_mb(c.dir);
    int64_t half_ms = hx_now_ms();
    long done, errors;
    bench_clients_join(clients, RETAIN_CLIENTS, started, &done, &errors);
    int64_t end_ms = hx_now_ms();
    double wall_s = (double)(end_ms - t0) / 1000.0;
    double end_mb = store_mb(c.dir);
    int64_t cpu = hx_sched_cpu_us(c.atolld.pid) - cpu0;
    int64_t smp = hx_thread_cpu_us(c.atolld.pid, "atoll-sampler") - smp0;
    int64_t ck = hx_thread_cpu_us(c.atolld.pid, "atoll-ckpt") - ck0;
    hx_client_t cl;
    if (errors || done == 0 || hx_client_init(&cl, c.url) != 0) {
        fprintf(stderr, "bench_retain: %ld jobs failed, %ld succeeded\n", errors, done);
        goto done;
    }
    *out = (side_t){.jobs = (double)done, .per_s = (double)done / wall_s,
                    .cpu_us = (double)cpu / (double)done, .sampler_us = (double)smp / (double)done,
                    .ckpt_us = (double)ck / (double)done,
                    .pruned = hx_metric(&cl, "atoll_jobs_pruned_total"),
                    .store_mb = end_mb,
                    .growth = (end_mb - half_mb) * 1000.0 / (double)(end_ms - half_ms)};
    hx_client_cleanup(&cl);
    rc = 0;
done:
    hx_cluster_stop(&c);
    return rc;
}

static void print_side(const char *name, const side_t *s)
{
    printf("retain.%s.jobs %.0f\n", name, s->jobs);
    printf("retain.%s.jobs_per_s %.1f\n", name, s->per_s);
    printf("retain.%s.cpu_us_per_job %.0f\n", name, s->cpu_us);
    printf("retain.%s.sampler_cpu_us_per_job %.1f\n", name, s->sampler_us);
    printf("retain.%s.ckpt_cpu_us_per_job %.1f\n", name, s->ckpt_us);
    printf("retain.%s.pruned %.0f\n", name, s->pruned);
    printf("retain.%s.store_mb %.2f\n", name, s->store_mb);
    printf("retain.%s.growth_mb_per_s %.3f\n", name, s->growth);
}

int main(int argc, char **argv)
{
    int secs = argc > 1 ? atoi(argv[1]) : 20, keep = argc > 2 ? atoi(argv[2]) : 2;
    if (secs < 1 || secs > 600 || keep < 1 || keep > 600) {
        fprintf(stderr, "usage: bench_retain [SECONDS (1..600) [KEEP (1..600)]]\n");
        return 2;
    }
    char *doc = hx_text_q(one_doc_q);
    side_t all, kept;
    if (!doc || hx_init() != 0 || run_side(doc, 0, secs, &all) != 0 ||
        run_side(doc, keep, secs, &kept) != 0) {
        free(doc);
        return 1;
    }
    free(doc);
    char name[32];
    snprintf(name, sizeof name, "keep%d", keep);
    print_side("keep0", &all);
    print_side(name, &kept);
    printf("retain.ratio.jobs_per_s %.3f\n", kept.per_s / all.per_s);
    printf("retain.ratio.cpu_us_per_job %.3f\n", kept.cpu_us / all.cpu_us);
    printf("retain.ratio.store_mb %.3f\n", kept.store_mb / all.store_mb);
    return 0;
}
