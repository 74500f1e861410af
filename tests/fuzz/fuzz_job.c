/* fuzz_job.c - libFuzzer target for the job parser and compiler.
 *
 * Each input is parsed exactly as atolld parses a POST /v1/jobs body
 * (json_loadb with JSON_REJECT_DUPLICATES) and compiled with compiler_job()
 * against a two-island cluster; when that succeeds, the first computation
 * is compiled again on its own with compiler_comp(), as a worker does from
 * its task (input shapes come from the job plan). Built with
 * -fsanitize=fuzzer,address,undefined: any crash, leak or UB is a finding.
 *
 * Invariants checked beyond "does not crash" (a violation aborts, which
 * libFuzzer reports as a crash):
 *  - an error status is 400, 422 or 500 (500 only with an empty field),
 *    and the detail is a NUL-terminated non-empty sentence;
 *  - a plan has a topological order that is a permutation in which every
 *    producer comes before its consumer;
 *  - compiler_comp() accepts what compiler_job() accepted (for a global
 *    computation: its partitioned program, which must always compile);
 *  - compiler_job() without islands accepts what it accepted with them. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "gspmd.h"

static island_desc_t fuzz_islands[2];

/* One-time setup: the islands of scripts/run.sh (west=4x4, east=2x4). */
static void fuzz_init(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    fuzz_islands[0].name = "west";
    if (mesh_shape_parse("4x4", &fuzz_islands[0].shape) != 0)
        abort();
    fuzz_islands[1].name = "east";
    if (mesh_shape_parse("2x4", &fuzz_islands[1].shape) != 0)
        abort();
}

static void check_err(int rc, const err_t *e)
{
    if (rc != 400 && rc != 422 && rc != 500)
        abort();
    if (e->status != rc || !memchr(e->detail, '\0', sizeof e->detail) || !e->detail[0])
        abort();
    if (rc == 500 && e->field[0])
        abort();
    /* The partitioner's output must always compile (gspmd_lower.c). */
    if (rc == 500 && strstr(e->detail, "partitioner produced"))
        abort();
}

/* The topological order is a permutation where producers come first. */
static void check_topo(const job_plan_t *plan)
{
    int *pos = malloc(sizeof *pos * (size_t)(plan->ncomps ? plan->ncomps : 1));
    if (!pos)
        return;     /* out of memory: nothing to check, not a finding */
    for (int i = 0; i < plan->ncomps; i++)
        pos[i] = -1;
    for (int t = 0; t < plan->ncomps; t++) {
        int c = plan->topo[t];
        if (c < 0 || c >= plan->ncomps || pos[c] != -1)
            abort();
        pos[c] = t;
    }
    for (int i = 0; i < plan->ncomps; i++) {
        const comp_t *c = &plan->comps[i];
        for (int k = 0; k < c->ninputs; k++) {
            int p = c->inputs[k].producer;
            if (p < 0 || p >= plan->ncomps || pos[p] >= pos[i])
                abort();
        }
    }
    free(pos);
}

/* compiler_comp() input shapes: looked up among the plan's computations'
 * outputs, as the controller fills a task's input_shapes. */
static int plan_input_shape(void *ctx, const char *from, shape_t *shape)
{
    const job_plan_t *plan = ctx;
    for (int i = 0; i < plan->ncomps; i++) {
        const comp_t *c = &plan->comps[i];
        for (int k = 0; k < c->noutputs; k++) {
            char name[2 * NAME_MAX_LEN + 2];
            snprintf(name, sizeof name, "%s.%s", c->name, c->vnames[c->outputs[k]]);
            if (strcmp(name, from) == 0) {
                *shape = c->vshapes[c->outputs[k]];
                return 0;
            }
        }
    }
    return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init();
    json_error_t jerr;
    json_t *doc = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc)
        return 0;
    job_plan_t *plan = NULL;
    err_t e;
    memset(&e, 0, sizeof e);
    int rc = compiler_job(doc, fuzz_islands, 2, &plan, &e);
    if (rc != 0) {
        check_err(rc, &e);
        goto cleanup;
    }
    check_topo(plan);
    /* Validation without islands (tools) is never stricter than with them. */
    job_plan_t *loose = NULL;
    int rc_loose = compiler_job(doc, NULL, 0, &loose, &e);
    if (rc_loose != 0 && rc_loose != 500)
        abort();
    job_plan_free(loose);
    const json_t *comps = json_object_get(doc, "computations");
    comp_t *c = NULL;
    err_t e2;
    memset(&e2, 0, sizeof e2);
    /* A worker compiles what its task carries: a global computation's
     * partitioned program. */
    const json_t *c0 = plan->comps[0].gspmd ? plan->comps[0].gspmd->lowered
                                            : json_array_get(comps, 0);
    int rc2 = compiler_comp(c0, &plan->comps[0].slice_shape,
                            plan_input_shape, plan, &c, &e2);
    if (rc2 != 0 && rc2 != 500)
        abort();    /* the job compiled, so its first computation must too */
    if (rc2 == 0 && (c->nops != plan->comps[0].nops || c->noutputs != plan->comps[0].noutputs))
        abort();
    comp_free(c);
cleanup:
    job_plan_free(plan);
    json_decref(doc);
    return 0;
}
