/* test_tenant_views.c - what a tenant sees of the cluster (DESIGN.md Part
 * E): its own job ids only. While alice's job holds west, bob's
 * GET /v1/islands and /v1/islands/west show those devices as
 * {"tenant": "other"} with no job id (nor slice name), alice sees her job
 * id, and the admin and the read token see the job id too. GET /v1/workers
 * shows tenants no data_addr, host or pid; the read token sees them.
 * Fails on the old code: every tenant saw every job id and data_addr.
 * Shared devices (Part D) list their holders: a tenant sees its own only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_tenant_common.h"

static hx_client_t alice_cl, bob_cl;
static char alice_tok[128], bob_tok[128];

static int group_setup(void **state)
{
    (void)state;
    if (tenant_cluster_start() != 0)
        return -1;
    if (hx_client_init(&alice_cl, itest_cluster.url) != 0 ||
        hx_client_init(&bob_cl, itest_cluster.url) != 0) {
        tenant_cluster_stop();
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    hx_client_cleanup(&alice_cl);
    hx_client_cleanup(&bob_cl);
    return tenant_cluster_stop();
}

/* How island `isl`'s devices look: how many show job `job`, how many show
 * "tenant": "other" without a job or slice, and how many are allocated. */
typedef struct view {
    int with_job, other, allocated;
} view_t;

static view_t island_view(const json_t *isl, int64_t job)
{
    view_t v = {0, 0, 0};
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(isl, "devices"), i, d) {
        const char *state = json_string_value(json_object_get(d, "state"));
        const char *tenant = json_string_value(json_object_get(d, "tenant"));
        v.allocated += state && strcmp(state, "allocated") == 0;
        v.with_job += json_integer_value(json_object_get(d, "job")) == job;
        v.other += tenant && strcmp(tenant, "other") == 0 && !json_object_get(d, "job") &&
                   !json_object_get(d, "slice");
    }
    return v;
}

/* West as cl sees it in GET /v1/islands and GET /v1/islands/west; both must
 * agree. */
static view_t west_as(hx_client_t *cl, int64_t job)
{
    json_t *all = call_q(cl, "GET", "/v1/islands", NULL, NULL, 200);
    json_t *one = call_q(cl, "GET", "/v1/islands/west", NULL, NULL, 200);
    view_t a = {0, 0, 0}, b = island_view(one, job);
    size_t i;
    json_t *isl;
    json_array_foreach(json_object_get(all, "islands"), i, isl) {
        const char *name = json_string_value(json_object_get(isl, "name"));
        if (name && strcmp(name, "west") == 0)
            a = island_view(isl, job);
    }
    json_decref(all);
    json_decref(one);
    C_CHECK(cl, a.with_job == b.with_job && a.other == b.other,
            "/v1/islands and /v1/islands/west disagree");
    return a;
}

static void test_island_views(void **state)
{
    (void)state;
    json_decref(tenant_new("{'name':'alice'}", &alice_cl, alice_tok, sizeof alice_tok));
    json_decref(tenant_new("{'name':'bob'}", &bob_cl, bob_tok, sizeof bob_tok));
    /* alice holds all of west for a while. */
    int64_t id = submit_q(&alice_cl, "hold", "[2,2]", "west", 3000000, 0, 201);
    json_t *job = NULL;
    int rc = hx_job_wait_leave(&alice_cl, id, "queued", 20000, ITEST_POLL_MS, &job);
    int live = rc == 0 && job && !hx_state_terminal(hx_job_state(job));
    json_decref(job);
    T_CHECK(live, "alice's job was not admitted");
    view_t bob = west_as(&bob_cl, id), alice = west_as(&alice_cl, id);
    view_t admin = west_as(&itest_client, id), reader = west_as(&read_cl, id);
    T_CHECK(bob.allocated == 4 && bob.with_job == 0 && bob.other == 4,
            "bob sees %d devices with alice's job id, %d as other (of %d allocated)",
            bob.with_job, bob.other, bob.allocated);
    T_CHECK(alice.with_job == 4 && alice.other == 0, "alice sees her job on %d devices",
            alice.with_job);
    T_CHECK(admin.with_job == 4 && reader.with_job == 4,
            "admin sees the job on %d devices, read on %d", admin.with_job, reader.with_job);
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64, id);
    json_decref(call_q(&alice_cl, "DELETE", path, NULL, NULL, 200));
}

/* Submits a shared job (DESIGN Part D) holding all of west for a while as
 * cl and waits until it is admitted. Returns its id. */
static int64_t shared_hold(hx_client_t *cl, const char *name)
{
    char doc[512];
    snprintf(doc, sizeof doc, "{'name':'%s','sharing':'shared','slices':{'s':{'shape':[2,2],"
             "'island':'west'}},'computations':[{'name':'c','slice':'s','ops':[{'op':"
             "'compute','out':'b','us':3000000},{'op':'shard_index','out':'i'}],"
             "'outputs':['i']}]}", name);
    json_t *j = call_q(cl, "POST", "/v1/jobs", doc, NULL, 201);
    int64_t id = json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    json_t *job = NULL;
    int rc = hx_job_wait_leave(cl, id, "queued", 20000, ITEST_POLL_MS, &job);
    int live = rc == 0 && job && !hx_state_terminal(hx_job_state(job));
    json_decref(job);
    T_CHECK(live, "shared job %s was not admitted", name);
    return id;
}

/* Whether job id appears anywhere in cl's view of west ("job" or a shared
 * device's "jobs"); *co counts devices marked as held by another tenant. */
static int west_mentions(hx_client_t *cl, int64_t id, int *co)
{
    json_t *one = call_q(cl, "GET", "/v1/islands/west", NULL, NULL, 200);
    int seen = 0;
    size_t i, k;
    json_t *d, *h;
    *co = 0;
    json_array_foreach(json_object_get(one, "devices"), i, d) {
        seen += json_integer_value(json_object_get(d, "job")) == id;
        json_array_foreach(json_object_get(d, "jobs"), k, h)
            seen += json_integer_value(h) == id;
        const char *t = json_string_value(json_object_get(d, "tenant"));
        *co += t && strcmp(t, "other") == 0;
    }
    json_decref(one);
    return seen;
}

/* How many devices of cl's view of west show job id with its slice "s". */
static int west_own_slices(hx_client_t *cl, int64_t id)
{
    json_t *one = call_q(cl, "GET", "/v1/islands/west", NULL, NULL, 200);
    int n = 0;
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(one, "devices"), i, d) {
        const char *slice = json_string_value(json_object_get(d, "slice"));
        n += json_integer_value(json_object_get(d, "job")) == id && slice &&
             strcmp(slice, "s") == 0;
    }
    json_decref(one);
    return n;
}

/* Shared devices list every holder ("jobs"): a tenant sees its own holders
 * there and never another tenant's job id (the list used to show them
 * all, whatever the caller), and its own job with its slice name. */
static void test_shared_views(void **state)
{
    (void)state;
    int64_t a = shared_hold(&alice_cl, "share-a"), b = shared_hold(&bob_cl, "share-b");
    int bob_co = 0, alice_co = 0, admin_co = 0;
    int bob_sees_a = west_mentions(&bob_cl, a, &bob_co);
    int bob_sees_b = west_mentions(&bob_cl, b, &bob_co);
    int alice_sees_b = west_mentions(&alice_cl, b, &alice_co);
    int admin_sees_both = west_mentions(&itest_client, a, &admin_co) > 0 &&
                          west_mentions(&itest_client, b, &admin_co) > 0;
    T_CHECK(bob_sees_a == 0 && alice_sees_b == 0,
            "a tenant sees the other's shared job id (bob: %d, alice: %d devices)", bob_sees_a,
            alice_sees_b);
    T_CHECK(bob_sees_b >= 4 && bob_co == 4 && alice_co == 4,
            "bob sees his job on %d entries; devices shared with another tenant: bob %d,"
            " alice %d (want 4)", bob_sees_b, bob_co, alice_co);
    T_CHECK(admin_sees_both && admin_co == 0, "the admin sees both jobs, no 'other'");
    /* Each tenant sees its own job there with its slice, whichever job the
     * device names first. */
    int bob_slices = west_own_slices(&bob_cl, b), alice_slices = west_own_slices(&alice_cl, a);
    T_CHECK(bob_slices == 4 && alice_slices == 4,
            "devices showing the tenant's own job and slice: bob %d, alice %d (want 4)",
            bob_slices, alice_slices);
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64, a);
    json_decref(call_q(&alice_cl, "DELETE", path, NULL, NULL, 200));
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64, b);
    json_decref(call_q(&bob_cl, "DELETE", path, NULL, NULL, 200));
}

/* Counts workers in GET /v1/workers that carry data_addr, host and pid. */
static int workers_with_addr(hx_client_t *cl, int *total)
{
    json_t *w = call_q(cl, "GET", "/v1/workers", NULL, NULL, 200);
    json_t *arr = json_object_get(w, "workers");
    int n = 0;
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *e = json_array_get(arr, i);
        n += json_object_get(e, "data_addr") || json_object_get(e, "host") ||
             json_object_get(e, "pid");
    }
    *total = (int)json_array_size(arr);
    json_decref(w);
    return n;
}

static void test_worker_views(void **state)
{
    (void)state;
    int total = 0, admin_total = 0, read_total = 0;
    int bob_n = workers_with_addr(&bob_cl, &total);
    int admin_n = workers_with_addr(&itest_client, &admin_total);
    int read_n = workers_with_addr(&read_cl, &read_total);
    T_CHECK(total >= 1 && bob_n == 0, "a tenant sees data_addr/host/pid of %d of %d workers",
            bob_n, total);
    T_CHECK(admin_n == admin_total && read_n == read_total && read_total >= 1,
            "admin sees addresses of %d of %d workers, read of %d of %d", admin_n, admin_total,
            read_n, read_total);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_island_views, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_shared_views, itest_cancel_leftovers),
        cmocka_unit_test(test_worker_views),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
