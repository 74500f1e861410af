/* test_lease_book.c - a heartbeat reaches the store within a flush period
 * even when no worker calls again.
 *
 * atolld notes heartbeats in memory and writes them (the lease book) at
 * most LEASE_FLUSHES_PER_LEASE times a lease, on whichever call finds a
 * write due, and on the front door's tick (api_worker_tick). The
 * scheduler expires workers from the stored time. Without the tick, a
 * heartbeat noted just after another worker's call wrote the book stayed
 * in memory until some later worker call: under load long enough for a
 * live worker to be expired (test_worker_keepalive, ASan, a connection
 * flood). Parked polls used to make those calls on every tick; they are no
 * longer run again until their worker has work.
 *
 * The test plays two workers over HTTP (no process): both register, GAP_MS
 * pass, A's heartbeat writes the book, B's heartbeat right after is only
 * noted, and nobody calls again. READ_MS later B's stored heartbeat age
 * (GET /v1/workers) must be about READ_MS, not GAP_MS + READ_MS (its
 * registration). Lease 8 s: a write is due every 1.6 s. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "itest.h"

#define GAP_MS 2000         /* time spacing, not a synchronisation */
#define READ_MS 2500        /* > one flush period (1.6 s) plus a tick */

typedef struct played {
    int64_t id;
    char hdr[160];
} played_t;

static int group_setup(void **state)
{
    (void)state;
    static const char *const islands[] = {"solo=1x2"};
    static const char *const extra[] = {"--lease-ms", "8000", NULL};
    if (hx_init() != 0 || hx_cluster_start_args(&itest_cluster, islands, 1, extra) != 0)
        return -1;
    return hx_client_init(&itest_client, itest_cluster.url);
}

static void play(played_t *w, int port)
{
    char reg[128];
    snprintf(reg, sizeof reg, "{\"island\":\"solo\",\"devices\":1,\"data_addr\":\"127.0.0.1:%d\"}",
             port);
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "POST", "/v1/workers", reg, strlen(reg), &r) == 0 &&
                r.status == 201, "registration answered %ld", r.status);
    w->id = json_integer_value(json_object_get(r.json, "id"));
    snprintf(w->hdr, sizeof w->hdr, "X-Atoll-Worker-Secret: %s",
             json_string_value(json_object_get(r.json, "secret")));
    hx_resp_clear(&r);
}

static void heartbeat(const played_t *w)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/heartbeat", w->id);
    const char *hdrs[] = {w->hdr, NULL};
    hx_resp_t r;
    T_CHECK(hx_request_h(&itest_client, "POST", path, "{}", 2, hdrs, &r) == 0 && r.status == 200,
            "heartbeat of worker %" PRId64 " answered %ld", w->id, r.status);
    hx_resp_clear(&r);
}

/* heartbeat_age_s of worker id in GET /v1/workers, or -1. */
static double stored_age(int64_t id)
{
    hx_resp_t r;
    double age = -1;
    if (hx_request(&itest_client, "GET", "/v1/workers", NULL, 0, &r) != 0)
        return -1;
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(r.json, "workers"), i, w)
        if (json_integer_value(json_object_get(w, "id")) == id)
            age = json_number_value(json_object_get(w, "heartbeat_age_s"));
    hx_resp_clear(&r);
    return age;
}

static void test_heartbeat_stored_without_calls(void **state)
{
    (void)state;
    played_t a, b;
    play(&a, 1);
    play(&b, 2);
    hx_sleep_ms(GAP_MS);
    heartbeat(&a);                  /* finds a write due: the book is written */
    int64_t t = hx_now_ms();
    heartbeat(&b);                  /* noted; the next write is a period away */
    hx_sleep_ms(READ_MS);
    double age = stored_age(b.id), since = (double)(hx_now_ms() - t) / 1000.0;
    print_message("worker %" PRId64 ": stored heartbeat age %.2f s, %.2f s after its heartbeat\n",
                  b.id, age, since);
    T_CHECK(age >= 0, "worker %" PRId64 " not listed", b.id);
    /* Stored: at most `since` old (plus clock rounding). Not stored: the
     * registration's time, GAP_MS older still. */
    T_CHECK(age < since + 0.5, "worker %" PRId64 "'s heartbeat of %.2f s ago is not stored"
            " (stored age %.2f s): nothing wrote the lease book", b.id, since, age);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_heartbeat_stored_without_calls),
    };
    return cmocka_run_group_tests(tests, group_setup, itest_group_teardown);
}
