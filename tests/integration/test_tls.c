/* test_tls.c - atolld serving HTTPS (--tls-cert/--tls-key) with a
 * self-signed certificate generated for 127.0.0.1 by the openssl binary,
 * workers joining over https:// with --ca-file, and the DESIGN example run
 * end to end through libcurl with that CA. Also: plain HTTP to the TLS port
 * gets no answer, a client or worker that does not trust the CA cannot
 * talk to it.
 *
 * Cluster: west=2x2 and east=2x2 (one worker of 4 each, both with the CA),
 * and spare=1x2 with no worker, so a worker refused there is refused for
 * TLS, not for want of free devices. Skipped (with a message) only when no
 * openssl binary is installed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"

static char cert_dir[HX_DIR_MAX];
static char cert_path[HX_DIR_MAX + 16], key_path[HX_DIR_MAX + 16];
static int have_openssl;

/* The openssl binary from PATH, or NULL. */
static const char *find_openssl(char *buf, size_t cap)
{
    const char *path = getenv("PATH");
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", path && *path ? path : "/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(buf, cap, "%s/openssl", d);
        if (access(buf, X_OK) == 0)
            return buf;
    }
    return NULL;
}

/* Runs openssl req to write cert_path and key_path; 0 or -1. Its chatter
 * goes to cert_dir/openssl.log. */
static int make_cert(const char *openssl)
{
    char log_path[HX_DIR_MAX + 16];
    snprintf(log_path, sizeof log_path, "%s/openssl.log", cert_dir);
    char *const argv[] = {(char *)openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                          "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                          "-days", "1", "-keyout", key_path, "-out", cert_path, NULL};
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        execv(openssl, argv);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || access(cert_path, R_OK) != 0) {
        fprintf(stderr, "test_tls: openssl req failed; see %s\n", log_path);
        return -1;
    }
    return 0;
}

static void remove_cert_dir(void)
{
    if (!cert_dir[0])
        return;
    char p[HX_DIR_MAX + 16];
    unlink(cert_path);
    unlink(key_path);
    snprintf(p, sizeof p, "%s/openssl.log", cert_dir);
    unlink(p);
    rmdir(cert_dir);
    cert_dir[0] = '\0';
}

static int group_setup(void **state)
{
    (void)state;
    char openssl[512];
    if (!find_openssl(openssl, sizeof openssl)) {
        /* scripts/deps.sh installs openssl: missing is a broken setup,
         * never a silent pass. */
        fprintf(stderr, "test_tls: no openssl binary on PATH to make a certificate\n");
        return -1;
    }
    have_openssl = 1;
    if (hx_init() != 0)
        return -1;
    const char *tmp = getenv("TMPDIR");
    snprintf(cert_dir, sizeof cert_dir, "%s/atoll-tls-XXXXXX",
             tmp && *tmp && strlen(tmp) < HX_DIR_MAX - 32 ? tmp : "/tmp");
    if (!mkdtemp(cert_dir)) {
        cert_dir[0] = '\0';
        return -1;
    }
    snprintf(cert_path, sizeof cert_path, "%s/cert.pem", cert_dir);
    snprintf(key_path, sizeof key_path, "%s/key.pem", cert_dir);
    if (make_cert(openssl) != 0)
        return -1;
    static const char *const islands[] = {"west=2x2", "east=2x2", "spare=1x2"};
    const char *const extra[] = {"--tls-cert", cert_path, "--tls-key", key_path, NULL};
    if (hx_cluster_start_args(&itest_cluster, islands, 3, extra) != 0)
        goto fail;
    if (strncmp(itest_cluster.url, "https://", 8) != 0) {
        fprintf(stderr, "test_tls: atolld's ready line says %s, expected https://\n",
                itest_cluster.url);
        goto fail;
    }
    const char *const ca[] = {"--ca-file", cert_path, NULL};
    if (hx_worker_start_args(&itest_cluster, "west", 4, ca, 15000, 0) != 0 ||
        hx_worker_start_args(&itest_cluster, "east", 4, ca, 15000, 0) != 0)
        goto fail;
    if (hx_client_init(&itest_client, itest_cluster.url) != 0 ||
        hx_client_set_auth(&itest_client, NULL, cert_path) != 0)
        goto fail;
    return 0;
fail:
    hx_client_cleanup(&itest_client);
    hx_cluster_stop(&itest_cluster);
    remove_cert_dir();
    return -1;
}

static int group_teardown(void **state)
{
    (void)state;
    if (!have_openssl)
        return -1;
    int rc = itest_stop();
    remove_cert_dir();
    return rc;
}


/* Every shard of outputs[key] is `len` copies of `want`. */
static void check_all(const json_t *res, const char *key, int shards, size_t len, double want)
{
    for (int k = 0; k < shards; k++) {
        json_t *v = json_object_get(hx_result_shard(res, key, k), "values");
        T_CHECK(json_array_size(v) == len, "%s shard %d: %zu values, expected %zu", key, k,
                json_array_size(v), len);
        for (size_t i = 0; i < len; i++) {
            double x = json_number_value(json_array_get(v, i));
            T_CHECK(fabs(x - want) < 1e-6, "%s shard %d value %zu = %g, expected %g", key, k, i,
                    x, want);
        }
    }
}

static void test_demo_over_https(void **state)
{
    (void)state;
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "GET", "/healthz", NULL, 0, &r) == 0 && r.status == 200,
            "GET /healthz over https");
    hx_resp_clear(&r);
    /* The DESIGN.md example: produce on a 2x2 slice, consume on east. */
    int64_t id = 0;
    json_t *job = itest_run_ok(
        "{'name':'demo','priority':0,'slices':{'a':{'shape':[2,2]},"
        "'b':{'shape':[2,2],'island':'east'}},'computations':["
        "{'name':'produce','slice':'a','ops':[{'op':'shard_index','out':'i'},"
        "{'op':'fill','out':'x','shape':[4],'value':1.0},"
        "{'op':'mul','out':'y','args':['x','i']},"
        "{'op':'all_reduce','out':'z','args':['y'],'reduce':'sum'}],'outputs':['z']},"
        "{'name':'consume','slice':'b','ops':[{'op':'input','out':'z','from':'produce.z'},"
        "{'op':'scale','out':'w','args':['z'],'factor':0.5}],'outputs':['w']}]}",
        &id);
    json_decref(job);
    json_t *res = hx_job_result(&itest_client, id);
    T_CHECK(res != NULL, "no result for job %" PRId64, id);
    check_all(res, "produce.z", 4, 4, 6.0);
    check_all(res, "consume.w", 4, 4, 3.0);
    json_decref(res);
}

/* Plain HTTP to the TLS port, and HTTPS without trusting the CA: no
 * answer either way (transport failure, never an HTTP status). */
static void test_untrusted_clients_fail(void **state)
{
    (void)state;
    char plain[HX_URL_MAX];
    snprintf(plain, sizeof plain, "http://%.100s", itest_cluster.url + strlen("https://"));
    hx_client_t cl;
    T_CHECK(hx_client_init(&cl, plain) == 0, "client");
    hx_resp_t r;
    int rc = hx_request(&cl, "GET", "/healthz", NULL, 0, &r);
    long st = rc == 0 ? r.status : 0;
    hx_resp_clear(&r);
    hx_client_cleanup(&cl);
    T_CHECK(rc != 0, "plain http to the TLS port answered HTTP %ld", st);

    T_CHECK(hx_client_init(&cl, itest_cluster.url) == 0, "client");
    rc = hx_request(&cl, "GET", "/healthz", NULL, 0, &r);
    st = rc == 0 ? r.status : 0;
    hx_resp_clear(&r);
    hx_client_cleanup(&cl);
    T_CHECK(rc != 0, "https without the CA answered HTTP %ld: the certificate was not checked",
            st);
}

static size_t workers_count(void)
{
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "GET", "/v1/workers", NULL, 0, &r) == 0 &&
                r.status == 200, "GET /v1/workers");
    size_t n = json_array_size(json_object_get(r.json, "workers"));
    hx_resp_clear(&r);
    return n;
}

static void test_worker_needs_ca(void **state)
{
    (void)state;
    T_CHECK(workers_count() == 2, "expected the 2 workers of the setup");
    /* spare has free devices, so only TLS can keep this worker out. */
    int rc = hx_worker_start_args(&itest_cluster, "spare", 2, NULL, 3000, 1);
    hx_worker_stop_last(&itest_cluster, 3000);
    T_CHECK(rc != 0, "a worker without --ca-file printed its ready line");
    T_CHECK(workers_count() == 2, "a worker without --ca-file joined");
    /* The same worker with the CA joins (so the refusal above was TLS). */
    const char *const ca[] = {"--ca-file", cert_path, NULL};
    T_CHECK(hx_worker_start_args(&itest_cluster, "spare", 2, ca, 15000, 0) == 0,
            "a worker with --ca-file did not join spare");
    T_CHECK(workers_count() == 3, "expected 3 workers");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_demo_over_https, itest_cancel_leftovers),
        cmocka_unit_test(test_untrusted_clients_fail),
        cmocka_unit_test(test_worker_needs_ca),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
