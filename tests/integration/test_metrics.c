/* test_metrics.c - GET /metrics parsed by the Prometheus text format
 * (version 0.0.4) after a few jobs ran, and atolld's --log-json output.
 *
 * The parser checks the format itself: every line is a comment or
 * `name{labels} value [timestamp]`; names and label names have the allowed
 * characters; label values are quoted with the allowed escapes; values are
 * floats (or +Inf/-Inf/NaN); each family has a TYPE before its first
 * sample, at most one HELP and TYPE, and its samples in one group. Then the
 * families the issue lists must be there with sensible values: jobs by
 * state, queue depth, the admission latency histogram (cumulative buckets,
 * +Inf == _count), allocation attempts, utilization per island, heartbeat
 * age per worker, HTTP responses by code; and the scheduler-pass latency
 * histogram (atoll_scheduler_pass_seconds).
 *
 * Cluster: west=2x2 and east=2x4 (one worker each), atolld with
 * --log-json, workers with --log-json 1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <ctype.h>
#include <math.h>

#include "itest.h"

#define JOBS_RUN 4

/* ---- a Prometheus text-format parser ----
 * Result: {"families": {NAME: {"type": T, "help": H}},
 *          "samples": [{"name": N, "family": F, "labels": {..}, "value": V}]}
 * Values are kept as JSON reals, with +Inf/-Inf as +/-HUGE_VAL (jansson
 * cannot hold infinities as reals), NaN refused (none expected here). */

typedef struct prom {
    json_t *families;       /* owned */
    json_t *samples;        /* owned */
    char err[256];          /* set on the first format error */
    const char *closed[256];/* families whose sample group ended (borrowed keys) */
    int nclosed;
    const char *current;    /* family of the previous sample, or NULL */
} prom_t;

static int prom_fail(prom_t *p, int line, const char *fmt, const char *what)
{
    if (!p->err[0]) {
        /* `what` may be a whole line: cut first, so the message fits. */
        char w[120], msg[200];
        snprintf(w, sizeof w, "%.119s", what);
        snprintf(msg, sizeof msg, fmt, w);
        snprintf(p->err, sizeof p->err, "line %d: %s", line, msg);
    }
    return -1;
}

/* Length of a metric name at s ([a-zA-Z_:][a-zA-Z0-9_:]*), 0 if none. */
static size_t prom_name_len(const char *s, int colon)
{
    size_t n = 0;
    while (s[n] && (isalpha((unsigned char)s[n]) || s[n] == '_' || (colon && s[n] == ':') ||
                    (n > 0 && isdigit((unsigned char)s[n]))))
        n++;
    return n;
}

/* Parses a float per the format ("+Inf", "-Inf", Go-style floats). */
static int prom_value(const char *s, size_t len, double *out)
{
    char buf[64];
    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (strcmp(buf, "+Inf") == 0 || strcmp(buf, "Inf") == 0) {
        *out = HUGE_VAL;
        return 0;
    }
    if (strcmp(buf, "-Inf") == 0) {
        *out = -HUGE_VAL;
        return 0;
    }
    char *end = NULL;
    *out = strtod(buf, &end);
    /* strtod also takes "nan", "inf", hex: only decimal floats here. */
    if (*end || strpbrk(buf, "xXnNiI"))
        return -1;
    return 0;
}

static int prom_closed(const prom_t *p, const char *fam)
{
    for (int i = 0; i < p->nclosed; i++)
        if (strcmp(p->closed[i], fam) == 0)
            return 1;
    return 0;
}

/* "# HELP name text" / "# TYPE name type" / other comments. */
static int prom_comment(prom_t *p, const char *l, int ln)
{
    int help = strncmp(l, "# HELP ", 7) == 0, type = strncmp(l, "# TYPE ", 7) == 0;
    if (!help && !type)
        return 0;   /* a plain comment */
    const char *name = l + 7;
    size_t n = prom_name_len(name, 1);
    if (n == 0 || (name[n] != ' ' && name[n] != '\0'))
        return prom_fail(p, ln, "bad metric name in '%s'", l);
    char fam[128];
    snprintf(fam, sizeof fam, "%.*s", (int)n, name);
    const char *rest = name[n] ? name + n + 1 : "";
    json_t *f = json_object_get(p->families, fam);
    if (f && json_object_get(f, "samples_seen"))
        return prom_fail(p, ln, "HELP/TYPE after samples of %s", fam);
    if (!f) {
        f = json_object();
        if (!f || json_object_set_new(p->families, fam, f) != 0)
            return prom_fail(p, ln, "%s", "out of memory");
    }
    const char *key = help ? "help" : "type";
    if (json_object_get(f, key))
        return prom_fail(p, ln, "second HELP or TYPE for %s", fam);
    if (type) {
        static const char *const types[] = {"counter", "gauge", "histogram", "summary",
                                            "untyped"};
        int ok = 0;
        for (size_t i = 0; i < 5; i++)
            ok |= strcmp(rest, types[i]) == 0;
        if (!ok)
            return prom_fail(p, ln, "unknown TYPE '%s'", rest);
    }
    json_object_set_new(f, key, json_string(rest));
    return 0;
}

/* The family a sample name belongs to: itself when typed, else the
 * histogram/summary it is a _bucket/_sum/_count of. NULL when untyped. */
static const char *prom_family(prom_t *p, const char *name, char *buf, size_t cap)
{
    if (json_object_get(json_object_get(p->families, name), "type")) {
        snprintf(buf, cap, "%s", name);
        return buf;
    }
    static const char *const sfx[] = {"_bucket", "_sum", "_count"};
    for (size_t i = 0; i < 3; i++) {
        size_t nl = strlen(name), sl = strlen(sfx[i]);
        if (nl <= sl || strcmp(name + nl - sl, sfx[i]) != 0)
            continue;
        snprintf(buf, cap, "%.*s", (int)(nl - sl), name);
        const char *t = json_string_value(json_object_get(json_object_get(p->families, buf),
                                                          "type"));
        if (t && (strcmp(t, "histogram") == 0 || (i > 0 && strcmp(t, "summary") == 0)))
            return buf;
    }
    return NULL;
}

/* {a="x",b="y"} at *s: fills labels, advances *s past '}'. */
static int prom_labels(prom_t *p, const char **s, json_t *labels, int ln)
{
    const char *c = *s + 1;
    while (*c != '}') {
        size_t n = prom_name_len(c, 0);
        if (n == 0 || c[n] != '=' || c[n + 1] != '"')
            return prom_fail(p, ln, "bad label syntax at '%s'", c);
        char key[128], val[512];
        snprintf(key, sizeof key, "%.*s", (int)n, c);
        c += n + 2;
        size_t vl = 0;
        while (*c && *c != '"') {
            char ch = *c++;
            if (ch == '\\') {
                ch = *c++;
                if (ch == 'n')
                    ch = '\n';
                else if (ch != '\\' && ch != '"')
                    return prom_fail(p, ln, "bad escape in a label value of %s", key);
            } else if (ch == '\n') {
                return prom_fail(p, ln, "newline in label %s", key);
            }
            if (vl + 1 < sizeof val)
                val[vl++] = ch;
        }
        val[vl] = '\0';
        if (*c != '"')
            return prom_fail(p, ln, "unterminated label value of %s", key);
        c++;
        if (json_object_get(labels, key))
            return prom_fail(p, ln, "label %s twice", key);
        json_object_set_new(labels, key, json_string(val));
        if (*c == ',')
            c++;
        else if (*c != '}')
            return prom_fail(p, ln, "expected ',' or '}' at '%s'", c);
    }
    *s = c + 1;
    return 0;
}

static int prom_sample(prom_t *p, const char *l, int ln)
{
    size_t n = prom_name_len(l, 1);
    if (n == 0)
        return prom_fail(p, ln, "not a comment nor a sample: '%s'", l);
    char name[128], fbuf[128];
    snprintf(name, sizeof name, "%.*s", (int)n, l);
    const char *fam = prom_family(p, name, fbuf, sizeof fbuf);
    if (!fam)
        return prom_fail(p, ln, "sample %s has no TYPE before it", name);
    /* Samples of one family come in one group. */
    json_t *f = json_object_get(p->families, fam);
    if (!p->current || strcmp(p->current, fam) != 0) {
        if (prom_closed(p, fam))
            return prom_fail(p, ln, "samples of %s are not in one group", fam);
        if (p->current && p->nclosed < 256)
            p->closed[p->nclosed++] = p->current;
        /* The key string inside families lives as long as the object. */
        void *iter = json_object_iter_at(p->families, fam);
        p->current = json_object_iter_key(iter);
    }
    json_object_set_new(f, "samples_seen", json_true());
    json_t *labels = json_object();
    if (!labels)
        return prom_fail(p, ln, "%s", "out of memory");
    const char *c = l + n;
    if (*c == '{' && prom_labels(p, &c, labels, ln) != 0) {
        json_decref(labels);
        return -1;
    }
    if (*c != ' ') {
        json_decref(labels);
        return prom_fail(p, ln, "no space before the value in '%s'", l);
    }
    c++;
    size_t vl = strcspn(c, " ");
    double v = 0;
    if (prom_value(c, vl, &v) != 0) {
        json_decref(labels);
        return prom_fail(p, ln, "bad value in '%s'", l);
    }
    c += vl;
    if (*c == ' ') {    /* optional timestamp: an integer */
        c++;
        if (*c == '-')
            c++;
        if (!*c || strspn(c, "0123456789") != strlen(c)) {
            json_decref(labels);
            return prom_fail(p, ln, "bad timestamp in '%s'", l);
        }
    }
    json_t *smp = json_pack("{s:s, s:s, s:o, s:f}", "name", name, "family", fam, "labels",
                            labels, "value", v);
    if (!smp || json_array_append_new(p->samples, smp) != 0)
        return prom_fail(p, ln, "%s", "out of memory");
    return 0;
}

/* Parses text; 0, or -1 with p->err set. Free with prom_free. */
static int prom_parse(prom_t *p, const char *text)
{
    memset(p, 0, sizeof *p);
    p->families = json_object();
    p->samples = json_array();
    if (!p->families || !p->samples)
        return prom_fail(p, 0, "%s", "out of memory");
    int ln = 0;
    const char *s = text;
    while (*s) {
        size_t len = strcspn(s, "\n");
        char line[2048];
        ln++;
        if (s[len] != '\n')
            return prom_fail(p, ln, "%s", "the last line has no newline");
        if (len >= sizeof line)
            return prom_fail(p, ln, "%s", "line too long");
        memcpy(line, s, len);
        line[len] = '\0';
        s += len + 1;
        int rc = 0;
        if (len == 0)
            continue;   /* blank lines are allowed */
        if (line[0] == '#')
            rc = prom_comment(p, line, ln);
        else
            rc = prom_sample(p, line, ln);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static void prom_free(prom_t *p)
{
    json_decref(p->families);
    json_decref(p->samples);
    p->families = p->samples = NULL;
}

static const char *prom_type(const prom_t *p, const char *fam)
{
    return json_string_value(json_object_get(json_object_get(p->families, fam), "type"));
}

/* ---- the cluster ---- */

static int group_setup(void **state)
{
    (void)state;
    static const char *const islands[] = {"west=2x2", "east=2x4"};
    static const char *const extra[] = {"--log-json", NULL};
    static const char *const wextra[] = {"--log-json", "1", NULL};
    if (hx_init() != 0 || hx_cluster_start_args(&itest_cluster, islands, 2, extra) != 0)
        return -1;
    if (hx_worker_start_args(&itest_cluster, "west", 4, wextra, 15000, 0) != 0 ||
        hx_worker_start_args(&itest_cluster, "east", 8, wextra, 15000, 0) != 0 ||
        hx_client_init(&itest_client, itest_cluster.url) != 0) {
        hx_cluster_stop(&itest_cluster);
        return -1;
    }
    return 0;
}

/* GET /metrics, parsed; fails on a transport, status or format error. */
static void fetch_metrics(prom_t *p)
{
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "GET", "/metrics", NULL, 0, &r) == 0 && r.status == 200,
            "GET /metrics");
    int text = strncmp(r.ctype, "text/plain", 10) == 0;
    int rc = prom_parse(p, r.body);
    char err[256];
    snprintf(err, sizeof err, "%s", p->err);
    hx_resp_clear(&r);
    if (rc != 0 || !text)
        prom_free(p);
    T_CHECK(text, "Content-Type of /metrics is not text/plain");
    T_CHECK(rc == 0, "/metrics is not Prometheus text: %s", err);
}

/* Calls fn for each sample of family `fam`. */
#define FOR_SAMPLES(p, fam, smp)                                                          \
    for (size_t i_ = 0; i_ < json_array_size((p)->samples); i_++)                        \
        for (json_t *smp = json_array_get((p)->samples, i_); smp; smp = NULL)            \
            if (strcmp(json_string_value(json_object_get(smp, "family")), (fam)) == 0)

static const char *label(const json_t *smp, const char *key)
{
    return json_string_value(json_object_get(json_object_get(smp, "labels"), key));
}

static double value(const json_t *smp)
{
    return json_real_value(json_object_get(smp, "value"));
}

static void run_jobs(void)
{
    /* Two islands, a collective and an edge, so allocation, dispatch and
     * reports all happen; JOBS_RUN jobs in all. */
    for (int i = 0; i < JOBS_RUN; i++) {
        json_decref(itest_run_ok(
            "{'name':'m','slices':{'a':{'shape':[2,2],'island':'west'},"
            "'b':{'shape':[2,2],'island':'east'}},'computations':["
            "{'name':'p','slice':'a','ops':[{'op':'shard_index','out':'i'},"
            "{'op':'all_reduce','out':'z','args':['i'],'reduce':'sum'}],'outputs':['z']},"
            "{'name':'c','slice':'b','ops':[{'op':'input','out':'z','from':'p.z'}],"
            "'outputs':['z']}]}",
            NULL));
    }
    /* And one 404, so a 4xx code is counted. */
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "GET", "/v1/jobs/999999", NULL, 0, &r) == 0 &&
                r.status == 404, "GET of a missing job");
    hx_resp_clear(&r);
}

static void test_metrics_families(void **state)
{
    (void)state;
    run_jobs();
    prom_t p;
    fetch_metrics(&p);
    char missing[512] = "";
    static const char *const need[] = {
        "atoll_jobs", "atoll_queue_depth", "atoll_admission_latency_seconds",
        "atoll_allocation_attempts_total", "atoll_island_utilization",
        "atoll_worker_heartbeat_age_seconds", "atoll_store_write_transactions_total",
        "atoll_sched_rounds_total", "atoll_dplane_dropped_frames_total",
        "atoll_dplane_bad_frames_total", "atoll_http_header_timeouts_total",
        "atoll_worker_report_requests_total", "atoll_worker_report_items_total",
        "atoll_store_report_transactions_total", "atoll_store_checkpoint_requests_total",
        "atoll_scheduler_pass_cpu_seconds", "atoll_store_carried_computations",
        "atoll_store_wal_reads_total", "atoll_store_db_reads_total",
        "atoll_sched_freed_notices_total", "atoll_scheduler_rt_priority",
        "atoll_scheduler_rt_rests_total", "atoll_scheduler_rt_burst_seconds"};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (!prom_type(&p, need[i]))
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing), " %s",
                     need[i]);
    const char *http_fam = prom_type(&p, "atoll_http_requests_total")
                               ? "atoll_http_requests_total" : "atoll_http_responses";
    if (!prom_type(&p, http_fam))
        snprintf(missing + strlen(missing), sizeof missing - strlen(missing),
                 " atoll_http_requests_total|atoll_http_responses");
    if (missing[0])
        prom_free(&p);
    T_CHECK(!missing[0], "families missing from /metrics:%s", missing);

    /* Reports: each job's host tasks were reported, some requests carrying
     * several. */
    double rreq = -1, ritems = -1, rtxn = -1;
    FOR_SAMPLES(&p, "atoll_worker_report_requests_total", s)
        rreq = value(s);
    FOR_SAMPLES(&p, "atoll_worker_report_items_total", s)
        ritems = value(s);
    FOR_SAMPLES(&p, "atoll_store_report_transactions_total", s)
        rtxn = value(s);
    int ok = rreq >= 1 && ritems >= JOBS_RUN && ritems >= rreq && rtxn >= 1 && rtxn <= rreq;
    if (!ok)
        prom_free(&p);
    T_CHECK(ok, "report counters: %g requests, %g items, %g transactions after %d jobs", rreq,
            ritems, rtxn, JOBS_RUN);
    /* Every computation's last shards were reported: nothing is carried. */
    double carried = -1;
    FOR_SAMPLES(&p, "atoll_store_carried_computations", s)
        carried = value(s);
    if (carried != 0)
        prom_free(&p);
    T_CHECK(carried == 0, "%g computations carried after every job succeeded", carried);

    /* Jobs by state: every job ran to success. */
    int states = 0;
    double succeeded = -1;
    FOR_SAMPLES(&p, "atoll_jobs", s) {
        const char *st = label(s, "state");
        states += st != NULL;
        if (st && strcmp(st, "succeeded") == 0)
            succeeded = value(s);
    }
    /* Queue depth: one gauge, nothing waits now. */
    int depth_n = 0;
    double depth = -1;
    FOR_SAMPLES(&p, "atoll_queue_depth", s) {
        depth_n++;
        depth = value(s);
    }
    /* Admission latency histogram. */
    double prev_le = -HUGE_VAL, prev_count = 0, inf_count = -1, sum = -1, count = -1;
    int buckets = 0, ordered = 1;
    FOR_SAMPLES(&p, "atoll_admission_latency_seconds", s) {
        const char *name = json_string_value(json_object_get(s, "name"));
        if (strcmp(name, "atoll_admission_latency_seconds_bucket") == 0) {
            const char *le_s = label(s, "le");
            double le = 0;
            if (!le_s || prom_value(le_s, strlen(le_s), &le) != 0) {
                ordered = 0;
                continue;
            }
            buckets++;
            ordered &= le > prev_le && value(s) >= prev_count;
            prev_le = le;
            prev_count = value(s);
            if (isinf(le))
                inf_count = value(s);
        } else if (strcmp(name, "atoll_admission_latency_seconds_sum") == 0) {
            sum = value(s);
        } else if (strcmp(name, "atoll_admission_latency_seconds_count") == 0) {
            count = value(s);
        }
    }
    double attempts = -1;
    FOR_SAMPLES(&p, "atoll_allocation_attempts_total", s)
        attempts = value(s);
    int isl_west = 0, isl_east = 0, isl_range = 1;
    FOR_SAMPLES(&p, "atoll_island_utilization", s) {
        const char *isl = label(s, "island");
        isl_west += isl && strcmp(isl, "west") == 0;
        isl_east += isl && strcmp(isl, "east") == 0;
        isl_range &= value(s) >= 0 && value(s) <= 1;
    }
    int hb = 0, hb_ok = 1;
    FOR_SAMPLES(&p, "atoll_worker_heartbeat_age_seconds", s) {
        hb += label(s, "worker") != NULL;
        hb_ok &= label(s, "worker") != NULL && value(s) >= 0 && value(s) < 60;
    }
    double ok_2 = 0, err_4 = 0;
    int coded = 1;
    FOR_SAMPLES(&p, http_fam, s) {
        const char *code = label(s, "code");
        coded &= code != NULL;
        if (code && code[0] == '2')
            ok_2 += value(s);
        if (code && code[0] == '4')
            err_4 += value(s);
    }
    const char *t_jobs = prom_type(&p, "atoll_jobs"), *t_hist =
        prom_type(&p, "atoll_admission_latency_seconds"), *t_att =
        prom_type(&p, "atoll_allocation_attempts_total");
    const char *t_http = prom_type(&p, http_fam);
    int types_ok = strcmp(t_jobs, "gauge") == 0 && strcmp(t_hist, "histogram") == 0 &&
                   strcmp(t_att, "counter") == 0 && strcmp(t_http, "counter") == 0;
    char types[200];   /* t_* point into p: copied before it is freed */
    snprintf(types, sizeof types, "atoll_jobs %s, latency %s, attempts %s, %s %s", t_jobs,
             t_hist, t_att, http_fam, t_http);
    prom_free(&p);

    T_CHECK(types_ok, "unexpected TYPEs: %s", types);
    T_CHECK(states >= 6, "atoll_jobs has %d state-labelled samples, expected all 6 states",
            states);
    T_CHECK(succeeded >= JOBS_RUN, "atoll_jobs{state=\"succeeded\"} = %g, expected >= %d",
            succeeded, JOBS_RUN);
    T_CHECK(depth_n == 1 && depth == 0, "atoll_queue_depth: %d samples, value %g", depth_n,
            depth);
    T_CHECK(buckets >= 2 && ordered, "admission latency: %d buckets, ordered/cumulative %d",
            buckets, ordered);
    T_CHECK(inf_count >= 0 && inf_count == count,
            "admission latency: +Inf bucket %g != _count %g", inf_count, count);
    T_CHECK(count >= JOBS_RUN && sum >= 0, "admission latency: _count %g (expected >= %d),"
            " _sum %g", count, JOBS_RUN, sum);
    T_CHECK(attempts >= JOBS_RUN, "atoll_allocation_attempts_total = %g, expected >= %d",
            attempts, JOBS_RUN);
    T_CHECK(isl_west == 1 && isl_east == 1 && isl_range,
            "atoll_island_utilization: west %d, east %d samples, in [0,1] %d", isl_west,
            isl_east, isl_range);
    T_CHECK(hb == 2 && hb_ok, "atoll_worker_heartbeat_age_seconds: %d workers (expected 2),"
            " ages sane %d", hb, hb_ok);
    T_CHECK(coded && ok_2 >= JOBS_RUN && err_4 >= 1,
            "%s: code labels %d, 2xx %g, 4xx %g", http_fam, coded, ok_2, err_4);
}

/* The parser itself refuses what the format forbids (so a pass above
 * means something). */
/* A histogram family's samples as read: its finite bucket bounds in order,
 * whether buckets are cumulative and increasing in le, +Inf, sum, count. */
typedef struct hist {
    int buckets, ordered;
    double first_le, last_le;       /* finite bounds */
    double inf, sum, count;
} hist_t;

static void hist_read(const prom_t *p, const char *fam, hist_t *h)
{
    char bucket[96], sum_n[96], count_n[96];
    snprintf(bucket, sizeof bucket, "%s_bucket", fam);
    snprintf(sum_n, sizeof sum_n, "%s_sum", fam);
    snprintf(count_n, sizeof count_n, "%s_count", fam);
    *h = (hist_t){0, 1, NAN, NAN, -1, -1, -1};
    double prev_le = -HUGE_VAL, prev_count = 0;
    FOR_SAMPLES(p, fam, s) {
        const char *name = json_string_value(json_object_get(s, "name"));
        const char *le_s = label(s, "le");
        double le = 0;
        if (strcmp(name, bucket) == 0) {
            if (!le_s || prom_value(le_s, strlen(le_s), &le) != 0) {
                h->ordered = 0;
                continue;
            }
            h->buckets++;
            h->ordered &= le > prev_le && value(s) >= prev_count;
            prev_le = le;
            prev_count = value(s);
            if (isinf(le)) {
                h->inf = value(s);
                continue;
            }
            if (isnan(h->first_le))
                h->first_le = le;
            h->last_le = le;
        } else if (strcmp(name, sum_n) == 0) {
            h->sum = value(s);
        } else if (strcmp(name, count_n) == 0) {
            h->count = value(s);
        }
    }
}

/* Reads the two histogram families fam[] from one scrape into h[] and
 * checks each: a histogram of `buckets` finite buckets from first_le to
 * last_le (seconds) and +Inf, cumulative, +Inf == _count, at least one
 * entry per job run above (fails before the histogram), a positive sum. */
static void hist_pair(const char *const fam[2], int buckets, double first_le, double last_le,
                      hist_t h[2])
{
    prom_t p;
    int typed[2];
    fetch_metrics(&p);
    for (int i = 0; i < 2; i++) {
        const char *t = prom_type(&p, fam[i]);
        typed[i] = t && strcmp(t, "histogram") == 0;
        hist_read(&p, fam[i], &h[i]);
    }
    prom_free(&p);
    for (int i = 0; i < 2; i++) {
        T_CHECK(typed[i], "%s is not a histogram", fam[i]);
        T_CHECK(h[i].buckets == buckets + 1 && h[i].ordered && h[i].first_le == first_le &&
                    h[i].last_le == last_le,
                "%s: %d buckets (want %d, %g .. %g, +Inf), cumulative %d, %g .. %g", fam[i],
                h[i].buckets, buckets + 1, first_le, last_le, h[i].ordered, h[i].first_le,
                h[i].last_le);
        T_CHECK(h[i].inf == h[i].count && h[i].count >= JOBS_RUN && h[i].sum > 0,
                "%s: +Inf %g, _count %g (want equal, >= %d), _sum %g", fam[i], h[i].inf,
                h[i].count, JOBS_RUN, h[i].sum);
    }
}

/* The scheduler-pass histograms, wall and CPU time, 50 us to 1 s: the
 * same passes in both, and a pass's CPU time is within its wall time (the
 * thread's clock runs only while it does). */
static void test_scheduler_pass_histogram(void **state)
{
    (void)state;
    static const char *const fam[2] = {"atoll_scheduler_pass_seconds",
                                       "atoll_scheduler_pass_cpu_seconds"};
    hist_t h[2];
    hist_pair(fam, 14, 0.00005, 1.0, h);
    /* Read one family after the other (and a pass is added to one, then
     * the other): a pass may land in between, on either side. */
    T_CHECK(h[1].count >= h[0].count - 8 && h[1].count <= h[0].count + 8,
            "pass counts: wall %g, CPU %g", h[0].count, h[1].count);
    T_CHECK(h[1].sum <= h[0].sum * 1.05 + 0.05, "pass CPU time %g s over its wall time %g s",
            h[1].sum, h[0].sum);
}

/* The store's write-lock histograms, wait and hold, 10 us to 1 s (every
 * job above took the lock for its submission): a transaction is counted
 * as it waits before it is counted as it holds, so holds never lead waits
 * by more than the writes between the two families' readings. */
static void test_write_lock_histograms(void **state)
{
    (void)state;
    static const char *const fam[2] = {"atoll_store_write_lock_wait_seconds",
                                       "atoll_store_write_lock_hold_seconds"};
    hist_t h[2];
    hist_pair(fam, 12, 0.00001, 1.0, h);
    T_CHECK(h[0].count + 64 >= h[1].count, "lock holds %g lead waits %g", h[1].count,
            h[0].count);
}

static void test_parser_refuses(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "atoll_x 1\n",                                               /* no TYPE */
        "# TYPE atoll_x gauge\natoll_x{a=b} 1\n",                   /* unquoted */
        "# TYPE atoll_x gauge\natoll_x{a=\"b\" 1\n",                /* unclosed */
        "# TYPE atoll_x gauge\natoll_x one\n",                      /* value */
        "# TYPE atoll_x gauge\natoll_x 1\n# TYPE atoll_x gauge\n",  /* TYPE twice */
        "# TYPE atoll_x gauge\n# TYPE atoll_y gauge\natoll_x 1\natoll_y 1\natoll_x 2\n",
        "# TYPE atoll_x gauge\natoll_x 1",                          /* no final newline */
        "# TYPE atoll_x sometype\natoll_x 1\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        prom_t p;
        int rc = prom_parse(&p, bad[i]);
        prom_free(&p);
        T_CHECK(rc != 0, "the parser accepted bad text #%zu", i);
    }
    prom_t p;
    int rc = prom_parse(&p, "# HELP atoll_h Latency.\n# TYPE atoll_h histogram\n"
                            "atoll_h_bucket{le=\"0.1\"} 1\natoll_h_bucket{le=\"+Inf\"} 2\n"
                            "atoll_h_sum 0.3\natoll_h_count 2\n# a comment\n\n"
                            "# TYPE atoll_g gauge\natoll_g{a=\"q\\\"\\\\\\n\",b=\"\"} -1.5e3 123\n");
    char err[256];
    snprintf(err, sizeof err, "%s", p.err);
    size_t n = json_array_size(p.samples);
    prom_free(&p);
    T_CHECK(rc == 0 && n == 5, "the parser refused good text (%s) or got %zu samples", err, n);
}

/* --log-json: every line atolld and the workers wrote to stderr is a JSON
 * object with ts, level and msg. */
static void check_json_log(const char *name, const char *path, int min_lines)
{
    FILE *f = fopen(path, "r");
    T_CHECK(f != NULL, "cannot open %s's log %s", name, path);
    char line[8192];
    int n = 0, bad = 0;
    char first_bad[300] = "";
    while (fgets(line, sizeof line, f)) {
        n++;
        json_t *o = json_loads(line, 0, NULL);
        const char *lvl = json_string_value(json_object_get(o, "level"));
        int ok = json_is_object(o) && json_object_get(o, "ts") &&
                 json_is_string(json_object_get(o, "msg")) && lvl &&
                 (strcmp(lvl, "debug") == 0 || strcmp(lvl, "info") == 0 ||
                  strcmp(lvl, "warn") == 0 || strcmp(lvl, "error") == 0);
        json_decref(o);
        if (!ok && !bad++)
            snprintf(first_bad, sizeof first_bad, "%.280s", line);
    }
    fclose(f);
    T_CHECK(n >= min_lines, "%s wrote %d log lines, expected at least %d", name, n, min_lines);
    T_CHECK(bad == 0, "%s: %d of %d log lines are not JSON {ts, level, msg}; first: %s", name,
            bad, n, first_bad);
}

static void test_json_logs(void **state)
{
    (void)state;
    /* atolld logs its start, registrations and allocations; a healthy
     * worker may log nothing at info level, but what it logs is JSON. */
    check_json_log("atolld", itest_cluster.atolld.log_path, 3);
    for (int i = 0; i < itest_cluster.nworkers; i++)
        check_json_log(itest_cluster.workers[i].name, itest_cluster.workers[i].log_path, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parser_refuses),
        cmocka_unit_test_teardown(test_metrics_families, itest_cancel_leftovers),
        cmocka_unit_test(test_scheduler_pass_histogram),
        cmocka_unit_test(test_write_lock_histograms),
        cmocka_unit_test(test_json_logs),
    };
    return cmocka_run_group_tests(tests, group_setup, itest_group_teardown);
}
