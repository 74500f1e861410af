/* test_worker_opts.c - atoll-worker's flags and environment (workers/wopts.c
 * compiled in, with the dplane/mbox code it uses for address checks). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../workers/dplane.c"
#include "../../workers/mbox.c"
#include "../../workers/wopts.c"

/* A fake environment: NULL-terminated name/value pairs set per test. */
static const char *const *fake_env;

static const char *env_lookup(const char *name)
{
    for (const char *const *p = fake_env; p && *p; p += 2)
        if (strcmp(p[0], name) == 0)
            return p[1];
    return NULL;
}

static int parse(int argc, const char **argv, wopts_t *o, char *err)
{
    return wopts_parse(argc, (char **)argv, env_lookup, o, err, 256);
}

static void test_flags_and_defaults(void **state)
{
    (void)state;
    fake_env = NULL;
    const char *argv[] = {"atoll-worker", "--controller", "http://127.0.0.1:8080",
                          "--island", "west", "--devices=2"};
    wopts_t o;
    char err[256] = "";
    assert_int_equal(parse(6, argv, &o, err), 0);
    assert_string_equal(o.controller, "http://127.0.0.1:8080");
    assert_string_equal(o.island, "west");
    assert_int_equal(o.devices, 2);
    assert_string_equal(o.backend, "cpu");
    assert_string_equal(o.data_listen, "127.0.0.1:0");
    assert_int_equal(o.poll_ms, 1000);
    assert_int_equal(o.peer_timeout_ms, 60000);
    assert_int_equal(o.log_level, LOG_INFO);
    assert_int_equal(o.store_cap_mb, 1024);
    assert_int_equal(o.data_transport, DPLANE_AUTO);
    assert_int_equal(o.ring_min_kb, 64);
    assert_int_equal(o.report_hold_ms, 10);
    assert_int_equal(o.spin_us, -1);
}

static void expect_error(int argc, const char **argv, const char *needle);

/* Data-plane and report flags: store cap, transport, ring threshold, report
 * hold (flag or env). */
static void test_dataplane_flags(void **state)
{
    (void)state;
    static const char *const env[] = {"ATOLL_STORE_CAP_MB", "32", "ATOLL_DATA_TRANSPORT", "tcp",
                                      "ATOLL_REPORT_HOLD_MS", "0", "ATOLL_SPIN_US", "0", NULL};
    fake_env = env;
    const char *argv[] = {"atoll-worker", "--controller", "http://c:1", "--island", "w",
                          "--devices", "1", "--ring-min-kb", "0"};
    wopts_t o;
    char err[256] = "";
    assert_int_equal(parse(9, argv, &o, err), 0);
    assert_int_equal(o.store_cap_mb, 32);
    assert_int_equal(o.data_transport, DPLANE_TCP);
    assert_int_equal(o.ring_min_kb, 0);
    assert_int_equal(o.report_hold_ms, 0);
    assert_int_equal(o.spin_us, 0);
    assert_null(o.container_runtime);
    fake_env = NULL;
    const char *bad1[] = {"atoll-worker", "--data-transport", "udp"};
    expect_error(3, bad1, "--data-transport");
    const char *bad2[] = {"atoll-worker", "--store-cap-mb", "0"};
    expect_error(3, bad2, "--store-cap-mb");
    const char *bad3[] = {"atoll-worker", "--report-hold-ms", "-1"};
    expect_error(3, bad3, "--report-hold-ms");
    const char *bad4[] = {"atoll-worker", "--spin-us", "1000001"};
    expect_error(3, bad4, "--spin-us");
    const char *bad5[] = {"atoll-worker", "--spin-us", "-1"};
    expect_error(3, bad5, "--spin-us");
}

static void test_env_and_override(void **state)
{
    (void)state;
    static const char *const env[] = {"ATOLL_CONTROLLER", "http://ctl:9000",
                                      "ATOLL_ISLAND", "east", "ATOLL_DEVICES", "4",
                                      "ATOLL_BACKEND", "sim", "ATOLL_POLL_MS", "250",
                                      "ATOLL_LOG_LEVEL", "debug", NULL};
    fake_env = env;
    const char *argv[] = {"atoll-worker", "--devices", "8", "--backend", "cpu"};
    wopts_t o;
    char err[256] = "";
    assert_int_equal(parse(5, argv, &o, err), 0);
    assert_string_equal(o.controller, "http://ctl:9000");
    assert_string_equal(o.island, "east");
    assert_int_equal(o.devices, 8);             /* flag beats environment */
    assert_string_equal(o.backend, "cpu");
    assert_int_equal(o.poll_ms, 250);
    assert_int_equal(o.log_level, LOG_DEBUG);
    static const char *const env2[] = {"ATOLL_CONTAINER_RUNTIME", "crun", NULL};
    fake_env = env2;
    const char *argv2[] = {"atoll-worker", "--controller", "http://c:1", "--island", "w",
                           "--devices", "1", "--container-runtime", "/usr/sbin/runc"};
    assert_int_equal(parse(7, argv2, &o, err), 0);
    assert_string_equal(o.container_runtime, "crun");
    assert_int_equal(parse(9, argv2, &o, err), 0);
    assert_string_equal(o.container_runtime, "/usr/sbin/runc");   /* flag beats environment */
    fake_env = NULL;
}

/* Each bad input yields -1 and a message naming the culprit. */
static void expect_error(int argc, const char **argv, const char *needle)
{
    wopts_t o;
    char err[256] = "";
    assert_int_equal(parse(argc, argv, &o, err), -1);
    if (!strstr(err, needle))
        fail_msg("error '%s' does not mention '%s'", err, needle);
}

static void test_bad_flags(void **state)
{
    (void)state;
    fake_env = NULL;
    const char *c = "--controller", *u = "http://127.0.0.1:1";
    expect_error(7, (const char *[]){"w", c, u, "--island", "a", "--devices", "0"}, "--devices");
    expect_error(7, (const char *[]){"w", c, u, "--island", "a", "--devices", "x"}, "--devices");
    expect_error(6, (const char *[]){"w", c, u, "--island", "a", "--devices"}, "needs a value");
    expect_error(5, (const char *[]){"w", c, u, "--island", "a"}, "--devices");
    expect_error(5, (const char *[]){"w", "--island", "a", "--devices", "1"}, "--controller");
    expect_error(7, (const char *[]){"w", c, "ftp://x", "--island", "a", "--devices", "1"},
                 "--controller");
    expect_error(2, (const char *[]){"w", "--frobnicate"}, "unknown option");
    expect_error(2, (const char *[]){"w", "stray"}, "unexpected argument");
    expect_error(3, (const char *[]){"w", "--backend", "gpu"}, "--backend");
    expect_error(3, (const char *[]){"w", "--data-listen", "nowhere"}, "--data-listen");
    expect_error(3, (const char *[]){"w", "--poll-ms", "40000"}, "--poll-ms");
    expect_error(3, (const char *[]){"w", "--log-level", "loud"}, "--log-level");
    expect_error(3, (const char *[]){"w", "--container-runtime", ""}, "--container-runtime");
    expect_error(3, (const char *[]){"w", "--container-runtime", "runc --privileged"},
                 "--container-runtime");
    expect_error(3, (const char *[]){"w", "--container-runtime", "runc;id"},
                 "--container-runtime");

    static const char *const env[] = {"ATOLL_DEVICES", "-3", NULL};
    fake_env = env;
    expect_error(1, (const char *[]){"w"}, "ATOLL_DEVICES");
    fake_env = NULL;
}

static void test_help_and_version_skip_required(void **state)
{
    (void)state;
    fake_env = NULL;
    wopts_t o;
    char err[256] = "";
    assert_int_equal(parse(2, (const char *[]){"w", "--help"}, &o, err), 0);
    assert_true(o.help);
    assert_int_equal(parse(2, (const char *[]){"w", "--version"}, &o, err), 0);
    assert_true(o.version);
    assert_non_null(strstr(wopts_usage(), "ATOLL_CONTROLLER"));
    assert_non_null(strstr(wopts_usage(), "sim"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flags_and_defaults),
        cmocka_unit_test(test_env_and_override),
        cmocka_unit_test(test_dataplane_flags),
        cmocka_unit_test(test_bad_flags),
        cmocka_unit_test(test_help_and_version_skip_required),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
