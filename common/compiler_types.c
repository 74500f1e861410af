/* compiler_types.c - freeing what the compiler and the partitioner build
 * (compiler_types.h), and looking a value up by name.
 *
 * Invariants: every free here accepts a partly built value (arrays still
 * NULL, counts covering only what was filled in), because each stage frees what it
 * built so far on any error; a pointer is released only by the owner the
 * header names, never behind its back. */
#include "compiler_types.h"
#include "runspec.h"

#include <stdlib.h>
#include <string.h>

/* Frees what a comp_t owns (not the struct itself). */
static void comp_release(comp_t *c)
{
    for (int i = 0; c->ops && i < c->nops; i++)
        free(c->ops[i].perm);
    free(c->ops);
    free(c->vnames);
    free(c->vshapes);
    free(c->outputs);
    for (int i = 0; c->inputs && i < c->ninputs; i++)
        free(c->inputs[i].edge);
    free(c->inputs);
    gspmd_free(c->gspmd);
    runspec_free(c->run);
    json_decref(c->run_json);
}

int comp_value_find(const comp_t *c, const char *name)
{
    for (int v = 0; v < c->nvalues; v++)
        if (strcmp(c->vnames[v], name) == 0)
            return v;
    return -1;
}

void comp_free(comp_t *c)
{
    if (!c)
        return;
    comp_release(c);
    free(c);
}

void gspmd_free(gspmd_t *g)
{
    if (!g)
        return;
    comp_free(g->global);
    free(g->vshd);
    json_decref(g->lowered);
    free(g->lshd);
    free(g->inserted);
    free(g);
}

void job_plan_free(job_plan_t *plan)
{
    if (!plan)
        return;
    for (int i = 0; plan->comps && i < plan->ncomps; i++)
        comp_release(&plan->comps[i]);
    free(plan->comps);
    free(plan->slices);
    free(plan->topo);
    free(plan);
}
