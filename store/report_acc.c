/* report_acc.c - see report_acc.h. */
#include "report_acc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"
#include "util.h"

/* Adds, saturating: stamps are bounded (REPORT_TIME_MAX_US), but a device
 * may appear in many reports. */
static int64_t sat_add(int64_t a, int64_t b)
{
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* Whether the devices just appended, dev[n0..ndev), are those of the
 * previous report (the group that ends at n0): then they go into it. */
static int same_group(const report_acc_t *a, size_t n0)
{
    size_t n = a->ndev - n0;
    if (a->grp_n != n || a->grp_at + n != n0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (a->dev[a->grp_at + i].island != a->dev[n0 + i].island ||
            a->dev[a->grp_at + i].idx != a->dev[n0 + i].idx)
            return 0;
    return 1;
}

/* The job's time: into the last entry when it is the same job. */
static int add_job(report_acc_t *a, int64_t job, int64_t us)
{
    if (a->njob && a->job[a->njob - 1].job == job) {
        a->job[a->njob - 1].us = sat_add(a->job[a->njob - 1].us, us);
        return 0;
    }
    if (util_grow((void **)&a->job, &a->capjob, a->njob, sizeof *a->job, 16))
        return -1;
    a->job[a->njob++] = (report_acc_job_t){job, us};
    return 0;
}

int report_acc_add(report_acc_t *a, int64_t island, int64_t first, const char *devices_txt,
                   int64_t us, int64_t job, int64_t job_us)
{
    size_t n0 = a->ndev;
    const char *p = devices_txt;
    if (!p || *p++ != '[')
        return -1;
    while (*p && *p != ']') {
        char *end;
        long long d = strtoll(p, &end, 10);
        if (end == p || d < 0 ||
            util_grow((void **)&a->dev, &a->capdev, a->ndev, sizeof *a->dev, 16))
            goto fail;
        a->dev[a->ndev++] = (report_acc_dev_t){island, first + d, us};
        p = *end == ',' ? end + 1 : end;
    }
    if (*p != ']' || add_job(a, job, job_us) != 0)
        goto fail;
    if (same_group(a, n0)) {
        for (size_t i = 0; i < a->grp_n; i++)
            a->dev[a->grp_at + i].us = sat_add(a->dev[a->grp_at + i].us, us);
        a->ndev = n0;
    } else {
        a->grp_at = n0;
        a->grp_n = a->ndev - n0;
    }
    return 0;
fail:
    a->ndev = n0;
    return -1;
}

int report_acc_comp(report_acc_t *a, int64_t job, int64_t attempt, int64_t comp, int unblocks,
                    int64_t total, int64_t nshards, int64_t t0, int64_t t1, int64_t t2)
{
    /* Stamps are at most REPORT_TIME_MAX_US (2^52) and shards a worker's
     * 4,096 devices at most: the sums saturate rather than overflow. */
    int64_t span = t2 > t1 ? t2 - t1 : 0;
    int64_t busy = nshards > 0 && span > INT64_MAX / nshards ? INT64_MAX : span * nshards;
    /* From the newest: a computation's other reports are seldom far back
     * (one batch per worker, each in computation order). */
    for (size_t i = a->ncomp; i-- > 0;) {
        report_acc_comp_t *c = &a->comp[i];
        if (c->comp != comp || c->job != job || c->attempt != attempt)
            continue;
        c->unblocks &= unblocks;    /* one run's report proves the job blocks none */
        if (total > 0)
            c->total = total;
        c->shards += nshards;
        c->busy_us = c->busy_us > INT64_MAX - busy ? INT64_MAX : c->busy_us + busy;
        c->t0 = t0 < c->t0 ? t0 : c->t0;
        c->t1 = t1 > c->t1 ? t1 : c->t1;
        c->t2 = t2 > c->t2 ? t2 : c->t2;
        return 0;
    }
    if (util_grow((void **)&a->comp, &a->capcomp, a->ncomp, sizeof *a->comp, 16))
        return -1;
    a->comp[a->ncomp++] =
        (report_acc_comp_t){job, attempt, comp, unblocks, total, nshards, t0, t1, t2, busy};
    return 0;
}

int report_acc_job_done(report_acc_t *a, int64_t job)
{
    for (size_t i = a->ndone; i-- > 0;)
        if (a->done[i].job == job) {
            a->done[i].comps++;
            return 0;
        }
    if (util_grow((void **)&a->done, &a->capdone, a->ndone, sizeof *a->done, 16))
        return -1;
    a->done[a->ndone++] = (report_acc_done_t){job, 1};
    return 0;
}

int report_acc_output(report_acc_t *a, int64_t job, int64_t comp, const char *value,
                      int64_t shard0, char *meta, size_t meta_len, void *vals, size_t vals_len)
{
    if (util_grow((void **)&a->out, &a->capout, a->nout, sizeof *a->out, 16)) {
        free(meta);
        free(vals);
        return -1;
    }
    a->out[a->nout++] = (report_acc_out_t){job, comp, shard0, value, meta, meta_len, vals,
                                          vals_len};
    return 0;
}

static void out_clear(report_acc_t *a)
{
    for (size_t i = 0; i < a->nout; i++) {
        free(a->out[i].meta);
        free(a->out[i].vals);
    }
    a->nout = 0;
}

/* INSERT statements of 1 to OUT_ROWS outputs rows, built once
 * (store_multirow_sql). */
#define OUT_ROWS 8
#define OUT_COLS "(?,?,?,?,?,?)"
#define OUT_NCOLS 6
#define OUT_HEAD "INSERT OR REPLACE INTO outputs(job_id, comp_idx, value, shard0, meta, vals) VALUES "
static char out_sql[OUT_ROWS][sizeof OUT_HEAD + OUT_ROWS * sizeof OUT_COLS];
static pthread_once_t out_once = PTHREAD_ONCE_INIT;

static void out_sql_build(void)
{
    for (int k = 0; k < OUT_ROWS; k++)
        store_multirow_sql(out_sql[k], sizeof out_sql[k], OUT_HEAD, OUT_COLS, k + 1);
}

int report_acc_flush_outputs(store_t *st, report_acc_t *a)
{
    pthread_once(&out_once, out_sql_build);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < a->nout;) {
        size_t k = a->nout - i < OUT_ROWS ? a->nout - i : OUT_ROWS;
        sqlite3_stmt *s = store_stmt(st, out_sql[k - 1]);
        if (!s) {
            rc = -1;
            break;
        }
        for (size_t r = 0; r < k; r++) {
            const report_acc_out_t *o = &a->out[i + r];
            int b = (int)r * OUT_NCOLS;
            sqlite3_bind_int64(s, b + 1, o->job);
            sqlite3_bind_int64(s, b + 2, o->comp);
            sqlite3_bind_text(s, b + 3, o->value, -1, SQLITE_STATIC);
            sqlite3_bind_int64(s, b + 4, o->shard0);
            sqlite3_bind_text64(s, b + 5, o->meta, o->meta_len, SQLITE_STATIC, SQLITE_UTF8);
            if (o->vals)    /* else NULL: store_stmt cleared the bindings */
                sqlite3_bind_blob64(s, b + 6, o->vals, o->vals_len, SQLITE_STATIC);
        }
        rc = store_step_done(s);
        i += k;
    }
    out_clear(a);
    return rc;
}

static int dev_cmp(const void *x, const void *y)
{
    const report_acc_dev_t *a = x, *b = y;
    if (a->island != b->island)
        return a->island < b->island ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static int job_cmp(const void *x, const void *y)
{
    const report_acc_job_t *a = x, *b = y;
    return a->job < b->job ? -1 : a->job > b->job;
}

/* Sums each device's time in place (a->dev sorted), leaving one entry per
 * device in a->dev[0..return). */
static size_t sum_devices(report_acc_t *a)
{
    size_t n = 0;
    for (size_t i = 0; i < a->ndev;) {
        report_acc_dev_t sum = a->dev[i];
        for (i++; i < a->ndev && a->dev[i].island == sum.island && a->dev[i].idx == sum.idx; i++)
            sum.us = sat_add(sum.us, a->dev[i].us);
        a->dev[n++] = sum;
    }
    return n;
}

/* One UPDATE per run of consecutive devices that gained the same time: a
 * worker's devices run its shards of a computation together, so a gang's
 * report of 2,048 devices over 512 workers of 4 is 512 updates, not 2,048. */
static int flush_devices(store_t *st, report_acc_t *a)
{
    static const char sql[] =
        "UPDATE devices SET busy_us = busy_us + ?4 WHERE island_id = ?1 AND idx BETWEEN ?2 AND ?3";
    if (a->ndev > 1)                    /* none: dev may be NULL, which qsort may not take */
        qsort(a->dev, a->ndev, sizeof *a->dev, dev_cmp);
    size_t n = sum_devices(a);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && a->dev[j].island == a->dev[i].island &&
               a->dev[j].idx == a->dev[j - 1].idx + 1 && a->dev[j].us == a->dev[i].us)
            j++;
        sqlite3_stmt *s = store_stmt(st, sql);
        if (!s)
            return -1;
        sqlite3_bind_int64(s, 1, a->dev[i].island);
        sqlite3_bind_int64(s, 2, a->dev[i].idx);
        sqlite3_bind_int64(s, 3, a->dev[j - 1].idx);
        sqlite3_bind_int64(s, 4, a->dev[i].us);
        if (store_step_done(s) != 0)
            return -1;
        i = j;
    }
    return 0;
}

static int flush_jobs(store_t *st, report_acc_t *a)
{
    if (a->njob > 1)
        qsort(a->job, a->njob, sizeof *a->job, job_cmp);
    for (size_t i = 0; i < a->njob;) {
        report_acc_job_t sum = a->job[i];
        for (i++; i < a->njob && a->job[i].job == sum.job; i++)
            sum.us = sat_add(sum.us, a->job[i].us);
        if (store_usage_add(st, sum.job, sum.us) != 0)
            return -1;
    }
    return 0;
}

int report_acc_flush(store_t *st, report_acc_t *a)
{
    int rc = flush_devices(st, a) == 0 && flush_jobs(st, a) == 0 ? 0 : -1;
    a->ndev = a->njob = a->grp_n = 0;
    return rc;
}

void report_row_clear(report_row_t *r)
{
    free(r->shards);
    free(r->shards_txt);
    free(r->devices_txt);
    r->shards = NULL;
    r->shards_txt = r->devices_txt = NULL;
}

int report_row_copy(report_row_t *dst, const report_row_t *src)
{
    *dst = *src;
    size_t nb = sizeof *src->shards * (size_t)(src->nshards > 0 ? src->nshards : 0);
    dst->shards = nb ? malloc(nb) : NULL;
    dst->shards_txt = src->shards_txt ? strdup(src->shards_txt) : NULL;
    dst->devices_txt = src->devices_txt ? strdup(src->devices_txt) : NULL;
    if ((nb && !dst->shards) || (src->shards_txt && !dst->shards_txt) ||
        (src->devices_txt && !dst->devices_txt)) {
        report_row_clear(dst);
        return -1;
    }
    if (nb)
        memcpy(dst->shards, src->shards, nb);
    return 0;
}

report_acc_run_t *report_acc_run_find(report_acc_t *a, int64_t task, int64_t worker)
{
    /* From the newest: a worker's batch reports a run's computations one
     * after another, so the entry is nearly always the last one added. */
    for (size_t i = a->nrun; i-- > 0;)
        if (a->run[i].task == task && a->run[i].worker == worker)
            return &a->run[i];
    return NULL;
}

int report_acc_run_add(report_acc_t *a, int64_t task, int64_t worker, const report_row_t *row,
                       int64_t t0, int64_t t1)
{
    if (util_grow((void **)&a->run, &a->caprun, a->nrun, sizeof *a->run, 16))
        return -1;
    report_acc_run_t *r = &a->run[a->nrun];
    *r = (report_acc_run_t){task, worker, {0}, t0, t1};
    if (report_row_copy(&r->row, row) != 0)
        return -1;
    a->nrun++;
    return 0;
}

void report_acc_run_drop(report_acc_t *a, report_acc_run_t *r)
{
    report_row_clear(&r->row);
    *r = a->run[--a->nrun];
}

void report_acc_free(report_acc_t *a)
{
    while (a->nrun > 0)
        report_acc_run_drop(a, &a->run[a->nrun - 1]);
    free(a->run);
    out_clear(a);
    free(a->dev);
    free(a->job);
    free(a->comp);
    free(a->out);
    free(a->done);
    *a = (report_acc_t)REPORT_ACC_INIT;
}
