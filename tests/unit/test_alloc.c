/* test_alloc.c - the topology-aware gang allocator (scheduler/alloc.c).
 *
 * Every test builds real islands, sets device states the way the scheduler
 * does, and checks placements device by device. Coordinates in comments are
 * (row, col) or (x, y, z); device indexes are row-major. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "alloc.h"

/* ------------------------------------------------------------ helpers */

static shape_t shp(int rank, int64_t a, int64_t b, int64_t c)
{
    shape_t s = {.rank = rank, .dim = {a, b, c, 0}};
    for (int i = rank; i < TENSOR_MAX_RANK; i++)
        s.dim[i] = 0;
    return s;
}

static alloc_island_t *island(const char *name, int rank, int64_t a, int64_t b, int64_t c)
{
    shape_t m = shp(rank, a, b, c);
    alloc_island_t *isl = alloc_island_new(name, &m);
    assert_non_null(isl);
    return isl;
}

static alloc_request_t req(const char *isl, int rank, int64_t a, int64_t b, int64_t c)
{
    alloc_request_t r = {.shape = shp(rank, a, b, c), .island = isl};
    return r;
}

static void set_many(alloc_island_t *isl, const int64_t *devs, int n, alloc_state_t st)
{
    for (int i = 0; i < n; i++)
        alloc_island_set(isl, devs[i], st);
}

static int count_state(const alloc_island_t *isl, alloc_state_t st)
{
    int n = 0;
    for (int64_t i = 0; i < alloc_island_size(isl); i++)
        n += alloc_island_get(isl, i) == st;
    return n;
}

static void assert_devices(const alloc_placement_t *pl, const int64_t *want, int n)
{
    assert_int_equal(pl->nshards, n);
    for (int i = 0; i < n; i++)
        assert_int_equal(pl->devices[i], want[i]);
}

static void assert_box(const alloc_placement_t *pl, int rank, int64_t a, int64_t b, int64_t c)
{
    shape_t want = shp(rank, a, b, c);
    assert_int_equal(pl->box.rank, rank);
    for (int i = 0; i < rank; i++)
        assert_int_equal(pl->box.dim[i], want.dim[i]);
}

/* Allocates one request on one island, expecting success. */
static alloc_placement_t place_one(alloc_island_t *isl, alloc_request_t r)
{
    alloc_placement_t pl;
    assert_int_equal(alloc_gang(&isl, 1, &r, 1, &pl), ALLOC_OK);
    return pl;
}

/* ------------------------------------------------------------ islands */

static void test_island_new_rejects_bad_shapes(void **state)
{
    (void)state;
    shape_t bad[] = {shp(0, 0, 0, 0), shp(4, 2, 2, 2), shp(2, 4, 0, 0), shp(1, -3, 0, 0),
                     shp(2, 4097, 1, 0), shp(3, 32, 32, 8)};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_null(alloc_island_new("x", &bad[i]));
    /* Rank 4 with every dim positive: islands are 1-3-D (the model pads
     * to 3 axes on the left; a 4th has nowhere to go). */
    shape_t rank4 = {.rank = 4, .dim = {2, 2, 2, 2}};
    assert_null(alloc_island_new("x", &rank4));
    alloc_island_t *isl = island("big", 3, 16, 16, 16);
    assert_int_equal(alloc_island_size(isl), 4096);
    assert_string_equal(alloc_island_name(isl), "big");
    assert_int_equal(alloc_island_shape(isl)->rank, 3);
    assert_int_equal(count_state(isl, ALLOC_FREE), 4096);
    /* Out-of-range indexes are ignored / read as DOWN, never touch memory. */
    alloc_island_set(isl, 4096, ALLOC_BUSY);
    alloc_island_set(isl, -1, ALLOC_BUSY);
    assert_int_equal(alloc_island_get(isl, 4096), ALLOC_DOWN);
    assert_int_equal(count_state(isl, ALLOC_FREE), 4096);
    alloc_island_free(isl);
}

static void test_largest_free(void **state)
{
    (void)state;
    alloc_island_t *isl = island("w", 2, 4, 4, 0);
    shape_t s;
    assert_int_equal(alloc_largest_free(isl, &s), 16);
    assert_int_equal(s.rank, 2);
    assert_int_equal(s.dim[0], 4);
    assert_int_equal(s.dim[1], 4);
    /* Top-left 2x2 busy: the best box is 2x4 (rows 2-3) or 4x2 (cols 2-3). */
    int64_t busy[] = {0, 1, 4, 5};
    set_many(isl, busy, 4, ALLOC_BUSY);
    assert_int_equal(alloc_largest_free(isl, &s), 8);
    assert_int_equal(s.dim[0] * s.dim[1], 8);
    assert_true(s.dim[0] == 2 || s.dim[0] == 4);
    /* A DOWN device is not free either. */
    alloc_island_set(isl, 15, ALLOC_DOWN);
    assert_int_equal(alloc_largest_free(isl, NULL), 6);
    for (int64_t i = 0; i < 16; i++)
        alloc_island_set(isl, i, ALLOC_BUSY);
    assert_int_equal(alloc_largest_free(isl, &s), 0);
    assert_int_equal(s.dim[0], 0);
    alloc_island_free(isl);

    /* 3-D: a 2x2x2 with (0,0,0) busy keeps a 1x2x2 / 2x1x2 / 2x2x1 box. */
    isl = island("c", 3, 2, 2, 2);
    alloc_island_set(isl, 0, ALLOC_BUSY);
    assert_int_equal(alloc_largest_free(isl, &s), 4);
    assert_int_equal(s.rank, 3);
    assert_int_equal(s.dim[0] * s.dim[1] * s.dim[2], 4);
    alloc_island_free(isl);
}

/* ------------------------------------------------------------ placements */

static void test_contiguity_and_shard_order(void **state)
{
    (void)state;
    alloc_island_t *isl = island("w", 2, 4, 4, 0);
    /* Column 0 down: a [2,3] must sit in cols 1-3; shard k = row-major. */
    int64_t down[] = {0, 4, 8, 12};
    set_many(isl, down, 4, ALLOC_DOWN);
    alloc_placement_t pl = place_one(isl, req(NULL, 2, 2, 3, 0));
    assert_int_equal(pl.island, 0);
    assert_int_equal(pl.origin[0], 0);
    assert_int_equal(pl.origin[1], 1);
    assert_box(&pl, 2, 2, 3, 0);
    int64_t want[] = {1, 2, 3, 5, 6, 7};
    assert_devices(&pl, want, 6);
    for (int i = 0; i < 6; i++)
        assert_int_equal(alloc_island_get(isl, want[i]), ALLOC_BUSY);
    assert_int_equal(count_state(isl, ALLOC_BUSY), 6);
    alloc_placements_release(&pl, 1);
    assert_null(pl.devices);
    alloc_island_free(isl);
}

static void test_shard_order_3d(void **state)
{
    (void)state;
    /* 2x4x2 island, (x,y,z) index = x*8 + y*2 + z. A [2,2,2] on an empty
     * island goes to the lowest corner: shard k's (i,j,l) -> (i, j, l). */
    alloc_island_t *isl = island("c", 3, 2, 4, 2);
    alloc_placement_t pl = place_one(isl, req(NULL, 3, 2, 2, 2));
    int64_t want[] = {0, 1, 2, 3, 8, 9, 10, 11};
    assert_box(&pl, 3, 2, 2, 2);
    assert_devices(&pl, want, 8);
    alloc_placements_release(&pl, 1);
    alloc_island_free(isl);
}

static void test_padding_1d_on_2d(void **state)
{
    (void)state;
    /* Row 1 busy: a [4] only fits as a row, [1,4]; row 0 keeps rows 2-3
     * (8 devices) whole, so it goes there. */
    alloc_island_t *isl = island("w", 2, 4, 4, 0);
    int64_t row1[] = {4, 5, 6, 7};
    set_many(isl, row1, 4, ALLOC_BUSY);
    alloc_placement_t pl = place_one(isl, req(NULL, 1, 4, 0, 0));
    assert_box(&pl, 2, 1, 4, 0);
    int64_t want_row[] = {0, 1, 2, 3};
    assert_devices(&pl, want_row, 4);
    alloc_placements_release(&pl, 1);
    alloc_island_free(isl);

    /* Column 1 busy: the [4] becomes a column, [4,1], at col 0. */
    isl = island("w", 2, 4, 4, 0);
    int64_t col1[] = {1, 5, 9, 13};
    set_many(isl, col1, 4, ALLOC_BUSY);
    pl = place_one(isl, req(NULL, 1, 4, 0, 0));
    assert_box(&pl, 2, 4, 1, 0);
    int64_t want_col[] = {0, 4, 8, 12};
    assert_devices(&pl, want_col, 4);
    alloc_placements_release(&pl, 1);
    alloc_island_free(isl);
}

/* On a 2x2x2 island, two busy devices leave exactly one free 2x2 plane;
 * the [2,2] slice must be padded to whichever axis that plane needs. */
static void check_padding_3d(int64_t b0, int64_t b1, int64_t a, int64_t b, int64_t c,
                             const int64_t want[4])
{
    alloc_island_t *isl = island("c", 3, 2, 2, 2);
    alloc_island_set(isl, b0, ALLOC_BUSY);
    alloc_island_set(isl, b1, ALLOC_BUSY);
    alloc_placement_t pl = place_one(isl, req(NULL, 2, 2, 2, 0));
    assert_box(&pl, 3, a, b, c);
    assert_devices(&pl, want, 4);
    alloc_placements_release(&pl, 1);
    alloc_island_free(isl);
}

static void test_padding_2d_on_3d(void **state)
{
    (void)state;
    /* index = x*4 + y*2 + z */
    const int64_t x1[] = {4, 5, 6, 7}, y1[] = {2, 3, 6, 7}, z1[] = {1, 3, 5, 7};
    check_padding_3d(0, 3, 1, 2, 2, x1);   /* busy (0,0,0),(0,1,1): [1,2,2] at x=1 */
    check_padding_3d(0, 5, 2, 1, 2, y1);   /* busy (0,0,0),(1,0,1): [2,1,2] at y=1 */
    check_padding_3d(0, 6, 2, 2, 1, z1);   /* busy (0,0,0),(1,1,0): [2,2,1] at z=1 */
}

static void test_higher_rank_never_fits(void **state)
{
    (void)state;
    alloc_island_t *line = island("l", 1, 16, 0, 0);
    alloc_island_t *sq = island("s", 2, 4, 4, 0);
    alloc_island_t *both[] = {line, sq};
    alloc_request_t r2 = req(NULL, 2, 2, 2, 0), r3 = req(NULL, 3, 1, 1, 1);
    alloc_placement_t pl;
    assert_int_equal(alloc_gang(&line, 1, &r2, 1, &pl), ALLOC_ENOSPACE);
    assert_int_equal(alloc_ever_fits(&line, 1, &r2, 1), 0);
    /* Rank 3 fits neither island, even as 1x1x1. */
    assert_int_equal(alloc_gang(both, 2, &r3, 1, &pl), ALLOC_ENOSPACE);
    assert_int_equal(alloc_ever_fits(both, 2, &r3, 1), 0);
    /* With a 2-D island available the [2,2] goes there. */
    assert_int_equal(alloc_gang(both, 2, &r2, 1, &pl), ALLOC_OK);
    assert_int_equal(pl.island, 1);
    alloc_placements_release(&pl, 1);
    assert_int_equal(count_state(line, ALLOC_FREE), 16);
    alloc_island_free(line);
    alloc_island_free(sq);
}

/* ------------------------------------------------------------ gangs */

static void test_all_or_nothing(void **state)
{
    (void)state;
    alloc_island_t *isl = island("west", 2, 2, 4, 0);
    /* 2x2 fits, 2x4 fits alone, both together do not. */
    alloc_request_t rs[2] = {req(NULL, 2, 2, 2, 0), req(NULL, 2, 2, 4, 0)};
    alloc_placement_t pl[2] = {{0}, {0}};
    assert_int_equal(alloc_gang(&isl, 1, rs, 2, pl), ALLOC_ENOSPACE);
    assert_int_equal(count_state(isl, ALLOC_FREE), 8);
    assert_null(pl[0].devices);
    assert_null(pl[1].devices);
    /* Same with the second request failing on its own (bad island). */
    rs[1] = req("nowhere", 2, 1, 1, 0);
    assert_int_equal(alloc_gang(&isl, 1, rs, 2, pl), ALLOC_ENOSPACE);
    assert_int_equal(count_state(isl, ALLOC_FREE), 8);
    /* And a gang that fits takes exactly its devices, disjointly. */
    rs[1] = req(NULL, 2, 2, 2, 0);
    assert_int_equal(alloc_gang(&isl, 1, rs, 2, pl), ALLOC_OK);
    assert_int_equal(count_state(isl, ALLOC_BUSY), 8);
    int seen[8] = {0};
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < pl[p].nshards; i++)
            seen[pl[p].devices[i]]++;
    for (int i = 0; i < 8; i++)
        assert_int_equal(seen[i], 1);
    alloc_placements_release(pl, 2);
    alloc_island_free(isl);
}

static void test_island_constraints(void **state)
{
    (void)state;
    alloc_island_t *west = island("west", 2, 4, 4, 0);
    alloc_island_t *east = island("east", 2, 2, 4, 0);
    alloc_island_t *both[] = {west, east};
    alloc_request_t rs[2] = {req("east", 2, 2, 2, 0), req("west", 1, 4, 0, 0)};
    alloc_placement_t pl[2];
    assert_int_equal(alloc_gang(both, 2, rs, 2, pl), ALLOC_OK);
    assert_int_equal(pl[0].island, 1);
    assert_int_equal(pl[1].island, 0);
    assert_int_equal(count_state(east, ALLOC_BUSY), 4);
    assert_int_equal(count_state(west, ALLOC_BUSY), 4);
    alloc_placements_release(pl, 2);

    /* Unknown island: never fits, now or ever; nothing changes. */
    alloc_request_t bad = req("north", 2, 1, 1, 0);
    assert_int_equal(alloc_gang(both, 2, &bad, 1, pl), ALLOC_ENOSPACE);
    assert_int_equal(alloc_ever_fits(both, 2, &bad, 1), 0);
    /* A pinned island that is full is not replaced by another one. */
    alloc_request_t more = req("east", 2, 2, 2, 0);
    assert_int_equal(alloc_gang(both, 2, &more, 1, pl), ALLOC_OK);
    assert_int_equal(pl[0].island, 1);
    alloc_placements_release(pl, 1);
    assert_int_equal(alloc_gang(both, 2, &more, 1, pl), ALLOC_ENOSPACE);
    assert_int_equal(count_state(east, ALLOC_BUSY), 8);
    assert_int_equal(count_state(west, ALLOC_BUSY), 4);
    assert_int_equal(alloc_ever_fits(both, 2, &more, 1), 1);
    alloc_island_free(west);
    alloc_island_free(east);
}

static void test_down_devices_avoided(void **state)
{
    (void)state;
    alloc_island_t *isl = island("w", 2, 2, 2, 0);
    alloc_island_set(isl, 3, ALLOC_DOWN);
    alloc_request_t full = req(NULL, 2, 2, 2, 0);
    alloc_placement_t pl;
    assert_int_equal(alloc_gang(&isl, 1, &full, 1, &pl), ALLOC_ENOSPACE);
    assert_int_equal(alloc_ever_fits(&isl, 1, &full, 1), 1);
    /* A [1,2] avoids (1,1): only row 0 has two free devices side by side. */
    pl = place_one(isl, req(NULL, 2, 1, 2, 0));
    int64_t want[] = {0, 1};
    assert_devices(&pl, want, 2);
    alloc_placements_release(&pl, 1);
    assert_int_equal(alloc_island_get(isl, 3), ALLOC_DOWN);
    /* The only free device left is 2. */
    pl = place_one(isl, req(NULL, 1, 1, 0, 0));
    assert_int_equal(pl.devices[0], 2);
    alloc_placements_release(&pl, 1);
    alloc_island_free(isl);
}

static void test_fragmentation_choice(void **state)
{
    (void)state;
    /* Top-left 2x2 busy. Placing a 2x2 at (0,2) or (2,0) keeps a 4x2 /
     * 2x4 free; (2,2) or (1,1) would not. (0,2) is the lower origin. */
    alloc_island_t *isl = island("w", 2, 4, 4, 0);
    int64_t busy[] = {0, 1, 4, 5};
    set_many(isl, busy, 4, ALLOC_BUSY);
    alloc_placement_t pl = place_one(isl, req(NULL, 2, 2, 2, 0));
    assert_int_equal(pl.origin[0], 0);
    assert_int_equal(pl.origin[1], 2);
    int64_t want[] = {2, 3, 6, 7};
    assert_devices(&pl, want, 4);
    assert_int_equal(alloc_largest_free(isl, NULL), 8);
    alloc_placements_release(&pl, 1);
    alloc_island_free(isl);

    /* A 1x1 on an empty 4x4 goes to a corner, never the middle. */
    isl = island("w", 2, 4, 4, 0);
    pl = place_one(isl, req(NULL, 2, 1, 1, 0));
    assert_int_equal(pl.devices[0], 0);
    assert_int_equal(alloc_largest_free(isl, NULL), 12);
    alloc_placements_release(&pl, 1);
    alloc_island_free(isl);
}

static void test_freeing_makes_space(void **state)
{
    (void)state;
    alloc_island_t *isl = island("west", 2, 2, 4, 0);
    alloc_placement_t big = place_one(isl, req(NULL, 2, 2, 4, 0));
    alloc_request_t small = req(NULL, 2, 2, 2, 0);
    alloc_placement_t pl;
    assert_int_equal(alloc_gang(&isl, 1, &small, 1, &pl), ALLOC_ENOSPACE);
    for (int i = 0; i < big.nshards; i++)
        alloc_island_set(isl, big.devices[i], ALLOC_FREE);
    alloc_placements_release(&big, 1);
    assert_int_equal(alloc_gang(&isl, 1, &small, 1, &pl), ALLOC_OK);
    assert_int_equal(pl.nshards, 4);
    alloc_placements_release(&pl, 1);
    alloc_island_free(isl);
}

static void test_ever_fits_vs_now(void **state)
{
    (void)state;
    alloc_island_t *isl = island("w", 2, 4, 4, 0);
    alloc_island_set(isl, 5, ALLOC_BUSY);
    alloc_island_set(isl, 10, ALLOC_DOWN);
    alloc_request_t whole = req(NULL, 2, 4, 4, 0), line = req(NULL, 1, 5, 0, 0);
    alloc_placement_t pl;
    assert_int_equal(alloc_gang(&isl, 1, &whole, 1, &pl), ALLOC_ENOSPACE);
    assert_int_equal(alloc_ever_fits(&isl, 1, &whole, 1), 1);
    assert_int_equal(alloc_ever_fits(&isl, 1, &line, 1), 0);
    /* Two whole-island slices never fit one island, each alone does. */
    alloc_request_t two[2] = {whole, whole};
    assert_int_equal(alloc_ever_fits(&isl, 1, two, 2), 0);
    /* ever_fits used copies: the island's states are exactly as set. */
    assert_int_equal(alloc_island_get(isl, 5), ALLOC_BUSY);
    assert_int_equal(alloc_island_get(isl, 10), ALLOC_DOWN);
    assert_int_equal(count_state(isl, ALLOC_FREE), 14);
    alloc_island_free(isl);
}

static void test_backtracking_across_islands(void **state)
{
    (void)state;
    /* Greedy best-fit puts the any-island 2x2 on the empty 2x2 island east
     * (loses 4 free devices there instead of 8 on west); then the [2,1]
     * pinned to east no longer fits. The search must move the 2x2 west. */
    alloc_island_t *west = island("west", 2, 4, 4, 0);
    alloc_island_t *east = island("east", 2, 2, 2, 0);
    alloc_island_t *both[] = {west, east};
    alloc_request_t any = req(NULL, 2, 2, 2, 0), pinned = req("east", 2, 2, 1, 0);
    alloc_placement_t pl[2];
    /* The greedy choice for the 2x2 alone really is east. */
    assert_int_equal(alloc_gang(both, 2, &any, 1, pl), ALLOC_OK);
    assert_int_equal(pl[0].island, 1);
    assert_int_equal(alloc_gang(both, 2, &pinned, 1, &pl[1]), ALLOC_ENOSPACE);
    for (int i = 0; i < pl[0].nshards; i++)
        alloc_island_set(east, pl[0].devices[i], ALLOC_FREE);
    alloc_placements_release(pl, 1);

    alloc_request_t rs[2] = {any, pinned};
    assert_int_equal(alloc_gang(both, 2, rs, 2, pl), ALLOC_OK);
    assert_int_equal(pl[0].island, 0);
    assert_int_equal(pl[1].island, 1);
    assert_int_equal(count_state(west, ALLOC_BUSY), 4);
    assert_int_equal(count_state(east, ALLOC_BUSY), 2);
    alloc_placements_release(pl, 2);
    alloc_island_free(west);
    alloc_island_free(east);
}

static void test_backtracking_one_island(void **state)
{
    (void)state;
    /* 3x2 island, (0,0) busy. The [1,2] alone goes to row 1 (lowest of two
     * equally good rows), which leaves no vertical pair for the [2,1]; the
     * gang needs [1,2] on row 2 and [2,1] on column 1, rows 0-1. */
    alloc_island_t *isl = island("w", 2, 3, 2, 0);
    alloc_island_set(isl, 0, ALLOC_BUSY);
    alloc_placement_t pl[2];
    pl[0] = place_one(isl, req(NULL, 2, 1, 2, 0));
    assert_int_equal(pl[0].origin[0], 1);
    alloc_request_t col = req(NULL, 2, 2, 1, 0);
    assert_int_equal(alloc_gang(&isl, 1, &col, 1, &pl[1]), ALLOC_ENOSPACE);
    for (int i = 0; i < pl[0].nshards; i++)
        alloc_island_set(isl, pl[0].devices[i], ALLOC_FREE);
    alloc_placements_release(pl, 1);

    alloc_request_t rs[2] = {req(NULL, 2, 1, 2, 0), col};
    assert_int_equal(alloc_gang(&isl, 1, rs, 2, pl), ALLOC_OK);
    int64_t row2[] = {4, 5}, col1[] = {1, 3};
    assert_devices(&pl[0], row2, 2);
    assert_devices(&pl[1], col1, 2);
    assert_int_equal(count_state(isl, ALLOC_FREE), 1);
    alloc_placements_release(pl, 2);
    alloc_island_free(isl);
}

/* Larger requests are placed first, whatever the caller's order. On a 6x3
 * island with devices 0, 5 and 12 busy, a [2,3] fits on rows 2-3 only; a
 * [3] placed first goes where it costs the largest free box (rows 2-5 of
 * columns 1-2) least, and each of the places the search would try for it
 * takes a device of rows 2-3. Largest first, the gang fits. */
static void test_larger_requests_first(void **state)
{
    (void)state;
    alloc_island_t *isl = island("i0", 2, 6, 3, 0);
    int64_t busy[] = {0, 5, 12}, rows23[] = {6, 7, 8, 9, 10, 11};
    set_many(isl, busy, 3, ALLOC_BUSY);
    alloc_request_t r[2] = {req("i0", 1, 3, 0, 0), req(NULL, 2, 2, 3, 0)};
    alloc_placement_t pl[2];
    assert_int_equal(alloc_gang(&isl, 1, r, 2, pl), ALLOC_OK);
    assert_devices(&pl[1], rows23, 6);
    assert_int_equal(pl[0].nshards, 3);
    alloc_placements_release(pl, 2);
    alloc_island_free(isl);
}

static void test_empty_and_bad_requests(void **state)
{
    (void)state;
    alloc_island_t *isl = island("w", 2, 4, 4, 0);
    alloc_placement_t pl;
    assert_int_equal(alloc_gang(&isl, 1, NULL, 0, &pl), ALLOC_OK);
    alloc_request_t zero = req(NULL, 2, 0, 4, 0), huge = req(NULL, 2, INT64_MAX, 4, 0);
    alloc_request_t norank = req(NULL, 0, 0, 0, 0);
    assert_int_equal(alloc_gang(&isl, 1, &zero, 1, &pl), ALLOC_ENOSPACE);
    assert_int_equal(alloc_gang(&isl, 1, &huge, 1, &pl), ALLOC_ENOSPACE);
    assert_int_equal(alloc_gang(&isl, 1, &norank, 1, &pl), ALLOC_ENOSPACE);
    assert_int_equal(alloc_ever_fits(&isl, 1, &huge, 1), 0);
    /* A dim past the island's that an int would wrap to 1 never fits. */
    alloc_request_t wraps = req(NULL, 2, ((int64_t)1 << 32) + 1, 4, 0);
    assert_int_equal(alloc_gang(&isl, 1, &wraps, 1, &pl), ALLOC_ENOSPACE);
    assert_int_equal(alloc_ever_fits(&isl, 1, &wraps, 1), 0);
    assert_int_equal(alloc_gang(NULL, 0, &zero, 1, &pl), ALLOC_ENOSPACE);
    assert_int_equal(count_state(isl, ALLOC_FREE), 16);
    alloc_island_free(isl);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A 4-slice gang on a 16x16 island, repeatedly filled and emptied. The
 * bound is loose (sanitizers and a busy CI box) yet catches a blow-up: a
 * pathological search takes seconds, a sane one well under 1 ms. */
static void test_speed_16x16(void **state)
{
    (void)state;
    alloc_island_t *isl = island("w", 2, 16, 16, 0);
    alloc_request_t rs[4] = {req(NULL, 2, 8, 8, 0), req(NULL, 2, 4, 8, 0),
                             req(NULL, 1, 16, 0, 0), req(NULL, 2, 2, 2, 0)};
    alloc_placement_t pl[4];
    const int rounds = 50;
    double t0 = now_ms();
    for (int r = 0; r < rounds; r++) {
        assert_int_equal(alloc_gang(&isl, 1, rs, 4, pl), ALLOC_OK);
        for (int p = 0; p < 4; p++)
            for (int i = 0; i < pl[p].nshards; i++)
                alloc_island_set(isl, pl[p].devices[i], ALLOC_FREE);
        alloc_placements_release(pl, 4);
    }
    double per_call = (now_ms() - t0) / rounds;
    print_message("alloc_gang 4 slices on 16x16: %.3f ms per call\n", per_call);
    assert_true(per_call < 20.0);
    alloc_island_free(isl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_island_new_rejects_bad_shapes),
        cmocka_unit_test(test_largest_free),
        cmocka_unit_test(test_contiguity_and_shard_order),
        cmocka_unit_test(test_shard_order_3d),
        cmocka_unit_test(test_padding_1d_on_2d),
        cmocka_unit_test(test_padding_2d_on_3d),
        cmocka_unit_test(test_higher_rank_never_fits),
        cmocka_unit_test(test_all_or_nothing),
        cmocka_unit_test(test_island_constraints),
        cmocka_unit_test(test_down_devices_avoided),
        cmocka_unit_test(test_fragmentation_choice),
        cmocka_unit_test(test_freeing_makes_space),
        cmocka_unit_test(test_ever_fits_vs_now),
        cmocka_unit_test(test_backtracking_across_islands),
        cmocka_unit_test(test_backtracking_one_island),
        cmocka_unit_test(test_larger_requests_first),
        cmocka_unit_test(test_empty_and_bad_requests),
        cmocka_unit_test(test_speed_16x16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
