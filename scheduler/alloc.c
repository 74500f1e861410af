/* alloc.c - topology-aware gang allocation (see alloc.h for the contract).
 *
 * Internal model: every island is handled as a 3-D mesh d[0] x d[1] x d[2],
 * its real shape padded on the LEFT with size-1 axes. Left padding keeps the
 * row-major device index unchanged, so index = (x * d[1] + y) * d[2] + z
 * is also the index in the island's own rank.
 *
 * Search: requests are ordered largest first; for each one the candidate
 * boxes (every padding of the slice, every origin whose box is all FREE and
 * which is pushed against a wall or a non-free device on every axis) are
 * scored by the island's largest free box after placing it; a depth-first
 * search tries the best ALLOC_TOP_K of them per request, with a global node
 * cap, so a feasible gang is found where plain greedy would fail while the
 * cost stays bounded. Boxes are tested in O(1) with 3-D prefix sums of FREE
 * devices, rebuilt at each search node for the islands a request may use.
 *
 * Ownership: islands own their name and state array; placements own their
 * devices array (alloc_placements_release). Everything else is scratch
 * memory allocated and freed inside one call. */
#include "alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ALLOC_MAX_DEVICES 4096      /* largest island accepted */
#ifndef ALLOC_TOP_K                 /* overridable to study plain greedy (1) */
#define ALLOC_TOP_K 4               /* candidates tried per request */
#endif
#define ALLOC_NODE_CAP 512          /* search nodes per alloc_gang() call */
#define ALLOC_MAX_SCORED 1024       /* candidates scored per request per node */
/* Work budget per alloc_gang() call, in device visits of the scoring pass
 * (1-2 ns each). Once spent, each search node scores only its first feasible
 * box (first fit), so a big fragmented 3-D island cannot stall the
 * scheduler thread: the scoring stays under ~10 ms. */
#define ALLOC_WORK_BUDGET ((int64_t)1 << 22)
#define ALLOC_MAX_PADS 3            /* paddings of a slice: at most C(3,1) */

struct alloc_island {
    char *name;                     /* owned */
    shape_t mesh;                   /* rank 1..3, as given */
    int d[3];                       /* mesh padded on the left to rank 3 */
    int64_t size;
    unsigned char *state;           /* owned; size entries of alloc_state_t */
};

/* A box in internal 3-D coordinates. */
typedef struct box3 {
    int o[3];
    int b[3];
} box3_t;

/* ---------------------------------------------------------------- islands */

alloc_island_t *alloc_island_new(const char *name, const shape_t *mesh)
{
    if (!name || !mesh || mesh->rank < 1 || mesh->rank > 3)
        return NULL;
    int64_t size = 1;
    for (int i = 0; i < mesh->rank; i++) {
        if (mesh->dim[i] < 1 || mesh->dim[i] > ALLOC_MAX_DEVICES)
            return NULL;
        size *= mesh->dim[i];
        if (size > ALLOC_MAX_DEVICES)
            return NULL;
    }
    alloc_island_t *isl = calloc(1, sizeof *isl);
    if (!isl)
        return NULL;
    isl->name = strdup(name);
    /* calloc: every device starts at 0 == ALLOC_FREE. */
    isl->state = calloc((size_t)size, 1);
    if (!isl->name || !isl->state) {
        alloc_island_free(isl);
        return NULL;
    }
    isl->mesh = *mesh;
    isl->size = size;
    int pad = 3 - mesh->rank;
    for (int i = 0; i < 3; i++)
        isl->d[i] = i < pad ? 1 : (int)mesh->dim[i - pad];
    return isl;
}

void alloc_island_free(alloc_island_t *isl)
{
    if (!isl)
        return;
    free(isl->name);
    free(isl->state);
    free(isl);
}

const char *alloc_island_name(const alloc_island_t *isl) { return isl->name; }
const shape_t *alloc_island_shape(const alloc_island_t *isl) { return &isl->mesh; }
int64_t alloc_island_size(const alloc_island_t *isl) { return isl->size; }

/* Out-of-range indexes are ignored: the caller's data comes from the store
 * and a stale row must not corrupt memory. */
void alloc_island_set(alloc_island_t *isl, int64_t device, alloc_state_t st)
{
    if (device >= 0 && device < isl->size)
        isl->state[device] = (unsigned char)st;
}

alloc_state_t alloc_island_get(const alloc_island_t *isl, int64_t device)
{
    if (device < 0 || device >= isl->size)
        return ALLOC_DOWN;
    return (alloc_state_t)isl->state[device];
}

static int64_t isl_index(const alloc_island_t *isl, int x, int y, int z)
{
    return ((int64_t)x * isl->d[1] + y) * isl->d[2] + z;
}

static void box_mark(alloc_island_t *isl, const box3_t *bx, alloc_state_t st)
{
    for (int x = bx->o[0]; x < bx->o[0] + bx->b[0]; x++)
        for (int y = bx->o[1]; y < bx->o[1] + bx->b[1]; y++)
            for (int z = bx->o[2]; z < bx->o[2] + bx->b[2]; z++)
                isl->state[isl_index(isl, x, y, z)] = (unsigned char)st;
}

static int box_volume(const box3_t *bx)
{
    return bx->b[0] * bx->b[1] * bx->b[2];
}

/* ------------------------------------------------------ prefix sums (O(1)) */

/* pre has (d0+1)(d1+1)(d2+1) entries; pre[x][y][z] = number of FREE devices
 * in [0,x) x [0,y) x [0,z). Counts fit int32: islands have <= 4096 devices. */
typedef struct prefix {
    int32_t *p;
    int s1, s2;                     /* strides: (d1+1)(d2+1) and (d2+1) */
} prefix_t;

static int32_t pre_at(const prefix_t *pf, int x, int y, int z)
{
    return pf->p[(int64_t)x * pf->s1 + (int64_t)y * pf->s2 + z];
}

static void prefix_build(prefix_t *pf, const alloc_island_t *isl)
{
    const int *d = isl->d;
    pf->s2 = d[2] + 1;
    pf->s1 = (d[1] + 1) * pf->s2;
    memset(pf->p, 0, sizeof(int32_t) * (size_t)(d[0] + 1) * (size_t)pf->s1);
    for (int x = 1; x <= d[0]; x++)
        for (int y = 1; y <= d[1]; y++)
            for (int z = 1; z <= d[2]; z++) {
                int32_t f = isl->state[isl_index(isl, x - 1, y - 1, z - 1)] == ALLOC_FREE;
                pf->p[(int64_t)x * pf->s1 + (int64_t)y * pf->s2 + z] = f
                    + pre_at(pf, x - 1, y, z) + pre_at(pf, x, y - 1, z) + pre_at(pf, x, y, z - 1)
                    - pre_at(pf, x - 1, y - 1, z) - pre_at(pf, x - 1, y, z - 1)
                    - pre_at(pf, x, y - 1, z - 1) + pre_at(pf, x - 1, y - 1, z - 1);
            }
}

/* FREE devices in the box (inclusion-exclusion over its 8 corners). */
static int32_t prefix_box(const prefix_t *pf, const int o[3], const int b[3])
{
    int x0 = o[0], y0 = o[1], z0 = o[2];
    int x1 = o[0] + b[0], y1 = o[1] + b[1], z1 = o[2] + b[2];
    return pre_at(pf, x1, y1, z1) - pre_at(pf, x0, y1, z1) - pre_at(pf, x1, y0, z1)
         - pre_at(pf, x1, y1, z0) + pre_at(pf, x0, y0, z1) + pre_at(pf, x0, y1, z0)
         + pre_at(pf, x1, y0, z0) - pre_at(pf, x0, y0, z0);
}

/* Is the box flush on axis a: touching the mesh edge or a non-free device
 * on its low side, or on its high side? Restricting candidates to boxes
 * flush on every axis never loses feasibility (slide any feasible box
 * towards the origin until every axis is blocked) and it drops the
 * "middle of nowhere" placements that fragment an island. */
static int box_flush(const prefix_t *pf, const int d[3], const box3_t *bx, int a)
{
    int o[3] = {bx->o[0], bx->o[1], bx->o[2]};
    int b[3] = {bx->b[0], bx->b[1], bx->b[2]};
    int slab = box_volume(bx) / b[a];
    if (o[a] == 0 || o[a] + b[a] == d[a])
        return 1;
    b[a] = 1;
    o[a] = bx->o[a] - 1;
    if (prefix_box(pf, o, b) < slab)
        return 1;
    o[a] = bx->o[a] + bx->b[a];
    return prefix_box(pf, o, b) < slab;
}

/* --------------------------------------------------- largest free box */

/* Scratch for largest-free-box: a 2-D column mask plus histogram arrays,
 * sized for the largest island in play. */
typedef struct scratch {
    unsigned char *col;             /* up to ALLOC_MAX_DEVICES entries */
    int *height;                    /* ALLOC_MAX_DEVICES + 1 */
    int *stack;                     /* ALLOC_MAX_DEVICES + 1 */
} scratch_t;

static int scratch_init(scratch_t *s)
{
    s->col = malloc(ALLOC_MAX_DEVICES);
    s->height = malloc(sizeof(int) * (ALLOC_MAX_DEVICES + 1));
    s->stack = malloc(sizeof(int) * (ALLOC_MAX_DEVICES + 1));
    return (s->col && s->height && s->stack) ? 0 : -1;
}

static void scratch_fini(scratch_t *s)
{
    free(s->col);
    free(s->height);
    free(s->stack);
}

typedef struct rect {
    int area, rows, cols;
} rect_t;

/* Largest rectangle under a histogram of n bars (classic stack method);
 * keeps the first best found so results are deterministic. */
static void histogram_best(const int *h, int n, int *stack, rect_t *best)
{
    int top = 0;
    for (int i = 0; i <= n; i++) {
        int cur = i < n ? h[i] : 0;
        while (top > 0 && h[stack[top - 1]] >= cur) {
            int hh = h[stack[--top]];
            int left = top > 0 ? stack[top - 1] + 1 : 0;
            int w = i - left;
            if (hh * w > best->area) {
                best->area = hh * w;
                best->rows = hh;
                best->cols = w;
            }
        }
        stack[top++] = i;
    }
}

/* Largest all-ones rectangle of an nu x nv mask (row-major). */
static rect_t mask_best_rect(const unsigned char *m, int nu, int nv, scratch_t *s)
{
    rect_t best = {0, 0, 0};
    memset(s->height, 0, sizeof(int) * (size_t)nv);
    for (int u = 0; u < nu; u++) {
        for (int v = 0; v < nv; v++)
            s->height[v] = m[u * nv + v] ? s->height[v] + 1 : 0;
        histogram_best(s->height, nv, s->stack, &best);
    }
    return best;
}

typedef struct axes {
    int a, u, v;                    /* outer axis (smallest dim) then the other two */
} axes_t;

static axes_t axes_pick(const int d[3])
{
    axes_t ax = {0, 1, 2};
    if (d[1] < d[ax.a])
        ax = (axes_t){1, 0, 2};
    if (d[2] < d[ax.a])
        ax = (axes_t){2, 0, 1};
    return ax;
}

static int isl_free_at(const alloc_island_t *isl, const axes_t *ax, int ia, int iu, int iv)
{
    int c[3];
    c[ax->a] = ia;
    c[ax->u] = iu;
    c[ax->v] = iv;
    return isl->state[isl_index(isl, c[0], c[1], c[2])] == ALLOC_FREE;
}

/* AND of layers z0..z1 along the outer axis; returns the free count. */
static int col_and_layer(const alloc_island_t *isl, const axes_t *ax, int layer,
                         unsigned char *col)
{
    int nu = isl->d[ax->u], nv = isl->d[ax->v], any = 0;
    for (int iu = 0; iu < nu; iu++)
        for (int iv = 0; iv < nv; iv++) {
            unsigned char *c = &col[iu * nv + iv];
            *c = *c && isl_free_at(isl, ax, layer, iu, iv);
            any += *c;
        }
    return any;
}

/* Largest all-FREE box: for every range of layers along the smallest axis,
 * the largest rectangle of devices free in all of them. O(dmin^2 * size),
 * i.e. at most ~0.5 M cell visits for a 16x16x16 island. Writes the box
 * dims (internal 3-D) to b when not NULL. */
static int largest_free_box(const alloc_island_t *isl, scratch_t *s, int b[3])
{
    axes_t ax = axes_pick(isl->d);
    int na = isl->d[ax.a], plane = isl->d[ax.u] * isl->d[ax.v], best = 0;
    int bb[3] = {0, 0, 0};
    for (int z0 = 0; z0 < na && (na - z0) * plane > best; z0++) {
        memset(s->col, 1, (size_t)plane);
        for (int z1 = z0; z1 < na; z1++) {
            if (col_and_layer(isl, &ax, z1, s->col) == 0)
                break;
            rect_t r = mask_best_rect(s->col, isl->d[ax.u], isl->d[ax.v], s);
            if (r.area * (z1 - z0 + 1) > best) {
                best = r.area * (z1 - z0 + 1);
                bb[ax.a] = z1 - z0 + 1;
                bb[ax.u] = r.rows;
                bb[ax.v] = r.cols;
            }
        }
    }
    if (b)
        memcpy(b, bb, sizeof bb);
    return best;
}

int64_t alloc_largest_free(const alloc_island_t *isl, shape_t *shape)
{
    scratch_t s;
    int64_t best = -1;
    int b[3];
    if (scratch_init(&s) != 0)
        goto cleanup;
    best = largest_free_box(isl, &s, b);
    if (shape) {
        /* Internal dims are the island's dims padded on the left. */
        int pad = 3 - isl->mesh.rank;
        memset(shape, 0, sizeof *shape);
        shape->rank = isl->mesh.rank;
        for (int i = 0; i < shape->rank; i++)
            shape->dim[i] = best > 0 ? b[i + pad] : 0;
    }
cleanup:
    scratch_fini(&s);
    return best;
}

/* ------------------------------------------------------------ requests */

/* Paddings of a request to internal 3-D box dims for one island: the
 * slice's axes placed, in order, at any of the island's axes, 1 elsewhere;
 * duplicates dropped. Returns how many (0 when rank does not fit). */
static int request_paddings(const shape_t *slice, const alloc_island_t *isl,
                            int out[ALLOC_MAX_PADS][3])
{
    int r = slice->rank, R = isl->mesh.rank, pad = 3 - R, n = 0;
    if (r < 1 || r > R)
        return 0;
    for (unsigned mask = 0; mask < (1u << R); mask++) {
        if (__builtin_popcount(mask) != r)
            continue;
        int b[3] = {1, 1, 1}, k = 0, ok = 1;
        for (int i = 0; i < R; i++)
            if (mask & (1u << i)) {
                int64_t want = slice->dim[k++];
                ok = ok && want >= 1 && want <= isl->d[i + pad];
                b[i + pad] = ok ? (int)want : 1;
            }
        for (int j = 0; ok && j < n; j++)
            ok = memcmp(out[j], b, sizeof b) != 0;
        if (ok)
            memcpy(out[n++], b, sizeof b);
    }
    return n;
}

static int request_volume(const alloc_request_t *rq)
{
    int64_t v = 1;
    for (int i = 0; i < rq->shape.rank && i < TENSOR_MAX_RANK; i++) {
        if (rq->shape.dim[i] < 1 || rq->shape.dim[i] > ALLOC_MAX_DEVICES)
            return 0;
        v *= rq->shape.dim[i];
        if (v > ALLOC_MAX_DEVICES)
            return ALLOC_MAX_DEVICES + 1;
    }
    return (int)v;
}

static int request_pinned(const alloc_request_t *rq)
{
    return rq->island && rq->island[0];
}

static int island_eligible(const alloc_request_t *rq, const alloc_island_t *isl)
{
    return !request_pinned(rq) || strcmp(rq->island, isl->name) == 0;
}

/* ------------------------------------------------------------ gang search */

/* A scored candidate. Ordering (best first): smallest loss of the island's
 * largest free box; then largest free box left; then lowest island index;
 * then lowest origin (row-major); then padding order. Within one island,
 * "smallest loss" is exactly "largest free box left"; across islands it is
 * best-fit (a 2x2 goes to an empty 2x2 island rather than splitting a 4x4). */
typedef struct cand {
    int island;
    box3_t box;
    int loss, after, pad;
    int64_t origin_index;
} cand_t;

static int cand_better(const cand_t *x, const cand_t *y)
{
    if (x->loss != y->loss)
        return x->loss < y->loss;
    if (x->after != y->after)
        return x->after > y->after;
    if (x->island != y->island)
        return x->island < y->island;
    if (x->origin_index != y->origin_index)
        return x->origin_index < y->origin_index;
    return x->pad < y->pad;
}

typedef struct gang {
    alloc_island_t *const *islands;
    int nislands;
    const alloc_request_t *reqs;
    int nreq;
    int *order;                     /* request indexes, largest first */
    cand_t *chosen;                 /* per request index */
    prefix_t *pre;                  /* per island */
    scratch_t s;
    int nodes;
    int64_t budget;                 /* work left, see ALLOC_WORK_BUDGET */
} gang_t;

/* Keeps top[0..*n-1] sorted best first, at most ALLOC_TOP_K long. */
static void top_insert(cand_t *top, int *n, const cand_t *c)
{
    int i = *n < ALLOC_TOP_K ? (*n)++ : ALLOC_TOP_K;
    if (i == ALLOC_TOP_K && !cand_better(c, &top[ALLOC_TOP_K - 1]))
        return;
    if (i == ALLOC_TOP_K)
        i = ALLOC_TOP_K - 1;
    while (i > 0 && cand_better(c, &top[i - 1])) {
        top[i] = top[i - 1];
        i--;
    }
    top[i] = *c;
}

/* Device visits of one largest_free_box() call (see there). */
static int64_t score_cost(const alloc_island_t *isl)
{
    int dmin = isl->d[0];
    for (int i = 1; i < 3; i++)
        dmin = isl->d[i] < dmin ? isl->d[i] : dmin;
    return isl->size * (1 + (int64_t)dmin * (dmin + 1) / 2);
}

/* Scores one feasible box: marks it BUSY, measures, restores FREE. */
static void cand_score(gang_t *g, cand_t *c, int before)
{
    alloc_island_t *isl = g->islands[c->island];
    g->budget -= score_cost(isl);
    box_mark(isl, &c->box, ALLOC_BUSY);
    c->after = largest_free_box(isl, &g->s, NULL);
    box_mark(isl, &c->box, ALLOC_FREE);
    c->loss = before - c->after;
}

static int box_is_candidate(const prefix_t *pf, const int d[3], const box3_t *bx)
{
    if (prefix_box(pf, bx->o, bx->b) != box_volume(bx))
        return 0;
    for (int a = 0; a < 3; a++)
        if (!box_flush(pf, d, bx, a))
            return 0;
    return 1;
}

/* Adds the best candidates of one padding on one island to top. */
static void cands_for_padding(gang_t *g, int ii, int pad, const int b[3], int before,
                              cand_t *top, int *ntop, int *scored)
{
    alloc_island_t *isl = g->islands[ii];
    const int *d = isl->d;
    int64_t cost = score_cost(isl);
    cand_t c = {.island = ii, .pad = pad};
    memcpy(c.box.b, b, sizeof c.box.b);
    for (int x = 0; x + b[0] <= d[0]; x++)
        for (int y = 0; y + b[1] <= d[1]; y++)
            for (int z = 0; z + b[2] <= d[2]; z++) {
                if (*ntop > 0 && (*scored >= ALLOC_MAX_SCORED || g->budget < cost))
                    return;
                c.box.o[0] = x;
                c.box.o[1] = y;
                c.box.o[2] = z;
                if (!box_is_candidate(&g->pre[ii], d, &c.box))
                    continue;
                c.origin_index = isl_index(isl, x, y, z);
                cand_score(g, &c, before);
                (*scored)++;
                top_insert(top, ntop, &c);
            }
}

/* Fills top with the best candidates for request r in the current state. */
static int cands_collect(gang_t *g, int r, cand_t *top)
{
    int ntop = 0, scored = 0;
    const alloc_request_t *rq = &g->reqs[r];
    for (int ii = 0; ii < g->nislands; ii++) {
        alloc_island_t *isl = g->islands[ii];
        int pads[ALLOC_MAX_PADS][3];
        if (!island_eligible(rq, isl))
            continue;
        int np = request_paddings(&rq->shape, isl, pads);
        if (np == 0)
            continue;
        prefix_build(&g->pre[ii], isl);
        if (prefix_box(&g->pre[ii], (int[3]){0, 0, 0}, isl->d) < request_volume(rq))
            continue;
        int before = largest_free_box(isl, &g->s, NULL);
        for (int p = 0; p < np; p++)
            cands_for_padding(g, ii, p, pads[p], before, top, &ntop, &scored);
    }
    return ntop;
}

/* Does request r fit anywhere now, on its own? A request that does not
 * dooms the whole gang, so alloc_gang() checks this for every request
 * before searching (else a doomed last request costs a full search). */
static int request_fits_alone(gang_t *g, int r)
{
    const alloc_request_t *rq = &g->reqs[r];
    for (int ii = 0; ii < g->nislands; ii++) {
        alloc_island_t *isl = g->islands[ii];
        int pads[ALLOC_MAX_PADS][3];
        int np = island_eligible(rq, isl) ? request_paddings(&rq->shape, isl, pads) : 0;
        if (np > 0)
            prefix_build(&g->pre[ii], isl);
        for (int p = 0; p < np; p++) {
            box3_t bx = {.o = {0, 0, 0}};
            memcpy(bx.b, pads[p], sizeof bx.b);
            for (bx.o[0] = 0; bx.o[0] + bx.b[0] <= isl->d[0]; bx.o[0]++)
                for (bx.o[1] = 0; bx.o[1] + bx.b[1] <= isl->d[1]; bx.o[1]++)
                    for (bx.o[2] = 0; bx.o[2] + bx.b[2] <= isl->d[2]; bx.o[2]++)
                        if (prefix_box(&g->pre[ii], bx.o, bx.b) == box_volume(&bx))
                            return 1;
        }
    }
    return 0;
}

/* Depth-first search over requests in g->order from position k. Every box
 * marked BUSY here is marked FREE again unless the whole gang succeeds. */
static int gang_dfs(gang_t *g, int k)
{
    if (k == g->nreq)
        return 1;
    if (++g->nodes > ALLOC_NODE_CAP)
        return 0;
    int r = g->order[k];
    cand_t top[ALLOC_TOP_K];
    int ntop = cands_collect(g, r, top);
    for (int i = 0; i < ntop; i++) {
        alloc_island_t *isl = g->islands[top[i].island];
        box_mark(isl, &top[i].box, ALLOC_BUSY);
        g->chosen[r] = top[i];
        if (gang_dfs(g, k + 1))
            return 1;
        box_mark(isl, &top[i].box, ALLOC_FREE);
    }
    return 0;
}

/* Order: larger volume first, then pinned before any-island (more
 * constrained), then the caller's order (stable, deterministic). */
static void gang_order(gang_t *g)
{
    for (int i = 0; i < g->nreq; i++)
        g->order[i] = i;
    for (int i = 1; i < g->nreq; i++) {
        int cur = g->order[i], j = i;
        const alloc_request_t *c = &g->reqs[cur];
        while (j > 0) {
            const alloc_request_t *p = &g->reqs[g->order[j - 1]];
            int vc = request_volume(c), vp = request_volume(p);
            int before = vc > vp || (vc == vp && request_pinned(c) && !request_pinned(p));
            if (!before)
                break;
            g->order[j] = g->order[j - 1];
            j--;
        }
        g->order[j] = cur;
    }
}

static int gang_init(gang_t *g)
{
    g->order = calloc((size_t)g->nreq, sizeof *g->order);
    g->chosen = calloc((size_t)g->nreq, sizeof *g->chosen);
    g->pre = calloc((size_t)g->nislands, sizeof *g->pre);
    if (!g->order || !g->chosen || !g->pre || scratch_init(&g->s) != 0)
        return -1;
    for (int i = 0; i < g->nislands; i++) {
        const int *d = g->islands[i]->d;
        size_t n = (size_t)(d[0] + 1) * (size_t)(d[1] + 1) * (size_t)(d[2] + 1);
        g->pre[i].p = malloc(sizeof(int32_t) * n);
        if (!g->pre[i].p)
            return -1;
    }
    return 0;
}

static void gang_fini(gang_t *g)
{
    for (int i = 0; g->pre && i < g->nislands; i++)
        free(g->pre[i].p);
    free(g->pre);
    free(g->order);
    free(g->chosen);
    scratch_fini(&g->s);
}

/* Fills one placement from a chosen box: origin and box in the island's
 * rank, devices in box row-major order (== slice row-major, since padding
 * only inserts size-1 axes). */
static int placement_fill(const alloc_island_t *isl, const cand_t *c, alloc_placement_t *pl)
{
    int pad = 3 - isl->mesh.rank, n = box_volume(&c->box), k = 0;
    const box3_t *bx = &c->box;
    memset(pl, 0, sizeof *pl);
    pl->devices = malloc(sizeof(int64_t) * (size_t)n);
    if (!pl->devices)
        return -1;
    pl->island = c->island;
    pl->nshards = n;
    pl->box.rank = isl->mesh.rank;
    for (int i = 0; i < isl->mesh.rank; i++) {
        pl->origin[i] = bx->o[i + pad];
        pl->box.dim[i] = bx->b[i + pad];
    }
    for (int x = bx->o[0]; x < bx->o[0] + bx->b[0]; x++)
        for (int y = bx->o[1]; y < bx->o[1] + bx->b[1]; y++)
            for (int z = bx->o[2]; z < bx->o[2] + bx->b[2]; z++)
                pl->devices[k++] = isl_index(isl, x, y, z);
    return 0;
}

/* Undo of a successful search (used when filling the output fails). */
static void gang_unmark(gang_t *g)
{
    for (int r = 0; r < g->nreq; r++)
        box_mark(g->islands[g->chosen[r].island], &g->chosen[r].box, ALLOC_FREE);
}

int alloc_gang(alloc_island_t *const *islands, int nislands,
               const alloc_request_t *reqs, int nreq, alloc_placement_t *out)
{
    gang_t g = {.islands = islands, .nislands = nislands, .reqs = reqs, .nreq = nreq,
                .budget = ALLOC_WORK_BUDGET};
    int rc = ALLOC_ENOMEM, filled = 0;
    if (nreq <= 0)
        return ALLOC_OK;
    if (nislands <= 0)
        return ALLOC_ENOSPACE;
    if (gang_init(&g) != 0)
        goto cleanup;
    gang_order(&g);
    rc = ALLOC_OK;
    for (int r = 0; r < nreq && rc == ALLOC_OK; r++)
        rc = request_fits_alone(&g, r) ? ALLOC_OK : ALLOC_ENOSPACE;
    if (rc == ALLOC_OK)
        rc = gang_dfs(&g, 0) ? ALLOC_OK : ALLOC_ENOSPACE;
    if (rc != ALLOC_OK)
        goto cleanup;
    for (; filled < nreq; filled++)
        if (placement_fill(islands[g.chosen[filled].island], &g.chosen[filled], &out[filled]) != 0)
            break;
    if (filled < nreq) {
        alloc_placements_release(out, filled);
        gang_unmark(&g);
        rc = ALLOC_ENOMEM;
    }
cleanup:
    gang_fini(&g);
    return rc;
}

void alloc_placements_release(alloc_placement_t *pl, int n)
{
    for (int i = 0; pl && i < n; i++) {
        free(pl[i].devices);
        pl[i].devices = NULL;
        pl[i].nshards = 0;
    }
}

/* Runs the real search on empty copies, so the answer matches what
 * alloc_gang() would do on an idle cluster. Out of memory answers 1
 * ("maybe"): a job must never be rejected as unfittable for that reason. */
int alloc_ever_fits(alloc_island_t *const *islands, int nislands,
                    const alloc_request_t *reqs, int nreq)
{
    int fits = 1, made = 0;
    alloc_island_t **copies = NULL;
    alloc_placement_t *pl = NULL;
    if (nreq <= 0)
        return 1;
    if (nislands <= 0)
        return 0;
    copies = calloc((size_t)nislands, sizeof *copies);
    pl = calloc((size_t)nreq, sizeof *pl);
    if (!copies || !pl)
        goto cleanup;
    for (; made < nislands; made++) {
        copies[made] = alloc_island_new(islands[made]->name, &islands[made]->mesh);
        if (!copies[made])
            goto cleanup;
    }
    int rc = alloc_gang(copies, nislands, reqs, nreq, pl);
    if (rc == ALLOC_OK)
        alloc_placements_release(pl, nreq);
    fits = rc != ALLOC_ENOSPACE;
cleanup:
    for (int i = 0; copies && i < made; i++)
        alloc_island_free(copies[i]);
    free(copies);
    free(pl);
    return fits;
}
