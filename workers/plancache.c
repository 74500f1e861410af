/* plancache.c - compiled plans shared by computations of one program
 * (plancache.h says what the key is and why a hit is exact).
 *
 * The key is built by one scan of the computation's text (key_build: no
 * tree, no tokens): the raw bytes are copied up to each elided string's
 * first byte, its replacement written, and the copy goes on after its
 * last byte. A replacement cannot be mistaken for text: a name is
 * replaced by nothing (an empty name is never valid, so never kept), a
 * "from" by "#R:D,D..." ('#' and ':' are not name characters, so never in
 * a kept "from"). */
#include "plancache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "compiler_util.h"
#include "jscan.h"
#include "util.h"

struct plan_ref {
    atomic_int refs;
    comp_t *plan;               /* owned */
    uint64_t hash;
    size_t keylen;
    char *key;                  /* owned; NULL for a plan never listed */
};

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static plan_ref_t *cache_slot[PLANCACHE_SLOTS];  /* one reference each; under cache_mu */
static plancache_stats_t cache_stats;            /* under cache_mu */

/* The key as it is built: the text copied up to `copied`. */
typedef struct keyb {
    char *buf;
    size_t len, cap;
    const char *copied;
    int keep;                   /* 0: bypass the cache (reason met, or too long) */
    compiler_input_fn input;
    void *ctx;
} keyb_t;

static void kb_put(keyb_t *k, const void *p, size_t n)
{
    if (!k->keep)
        return;
    if (k->len + n > PLANCACHE_KEY_MAX) {
        k->keep = 0;
        return;
    }
    if (k->len + n > k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 512;
        while (cap < k->len + n)
            cap *= 2;
        char *b = realloc(k->buf, cap);
        if (!b) {
            k->keep = 0;        /* compiled on its own instead */
            return;
        }
        k->buf = b;
        k->cap = cap;
    }
    memcpy(k->buf + k->len, p, n);
    k->len += n;
}

/* Copies the text up to p, writes rep instead of [p, q) and goes on at q. */
static void kb_elide(keyb_t *k, const char *p, const char *q, const char *rep, size_t n)
{
    kb_put(k, k->copied, (size_t)(p - k->copied));
    kb_put(k, rep, n);
    k->copied = q;
}

/* Writes LEAD, the rank, ':' and the dims joined by ',' (at most
 * 2 + 4 + 4 * 20 bytes for rank <= 4): snprintf cost ~700 instructions a
 * call here, more than the rest of a key. Returns the length. */
static size_t fmt_shape(char *buf, char lead, int rank, const int64_t *dim)
{
    size_t n = 0;
    buf[n++] = lead;
    buf[n++] = (char)('0' + rank % 10);
    buf[n++] = ':';
    for (int d = 0; d < rank; d++) {
        char tmp[20];
        int t = 0;
        uint64_t v = dim[d] < 0 ? 0 : (uint64_t)dim[d];
        if (d)
            buf[n++] = ',';
        do
            tmp[t++] = (char)('0' + v % 10);
        while ((v /= 10) != 0);
        while (t)
            buf[n++] = tmp[--t];
    }
    return n;
}

/* A "name" value [p, q): elided when a valid name, else the computation
 * bypasses the cache (its compile says what is wrong). */
static void key_name(keyb_t *k, const char *p, const char *q)
{
    char buf[NAME_MAX_LEN];
    if ((size_t)(q - p) >= sizeof buf) {
        k->keep = 0;
        return;
    }
    memcpy(buf, p, (size_t)(q - p));
    buf[q - p] = '\0';
    if (!name_valid(buf))
        k->keep = 0;
    kb_elide(k, p, q, "", 0);
}

/* An op's "from" value [p, q): elided for "#R:D,D,..." when a valid
 * "computation.value" whose input resolves to a valid shape. */
static void key_from(keyb_t *k, const char *p, const char *q)
{
    char from[2 * NAME_MAX_LEN + 2], prod[NAME_MAX_LEN], val[NAME_MAX_LEN];
    shape_t sh;
    if ((size_t)(q - p) >= sizeof from) {
        k->keep = 0;
        return;
    }
    memcpy(from, p, (size_t)(q - p));
    from[q - p] = '\0';
    if (name_from_split(from, prod, val) != 0 || k->input(k->ctx, from, &sh) != 0 ||
        !shape_valid(&sh)) {
        k->keep = 0;
        return;
    }
    char rep[8 + TENSOR_MAX_RANK * 21];
    kb_elide(k, p, q, rep, fmt_shape(rep, '#', sh.rank, sh.dim));
}

/* What the value after a key is to the key builder. */
enum { V_OTHER, V_NAME, V_OPS, V_FROM };

/* The string at p (its opening quote), ending at q (its closing one). */
static void key_string(keyb_t *k, const char *p, const char *q, int depth, const char *kind,
                       int *expect_key, int *what, int in_ops)
{
    size_t n = (size_t)(q - p - 1);
    if (depth >= 1 && depth <= 3 && kind[depth] == '{' && *expect_key) {
        *expect_key = 0;
        *what = V_OTHER;
        if (depth == 1 && n == 4 && memcmp(p + 1, "name", 4) == 0)
            *what = V_NAME;
        else if (depth == 1 && n == 3 && memcmp(p + 1, "ops", 3) == 0)
            *what = V_OPS;
        else if (depth == 1 && n == 3 && memcmp(p + 1, "run", 3) == 0)
            k->keep = 0;        /* its processes are told the computation's name */
        else if (depth == 3 && in_ops && n == 4 && memcmp(p + 1, "from", 4) == 0)
            *what = V_FROM;
        return;
    }
    if (*what == V_NAME)
        key_name(k, p + 1, q);
    else if (*what == V_FROM)
        key_from(k, p + 1, q);
    *what = V_OTHER;
}

/* Builds k's key from the computation object [p, end), JSON the caller's
 * scan validated already. A scan of bytes, not tokens: with no backslash
 * in the text (one sends the computation past the cache), a string is
 * everything between two quotes, and numbers and literals hold no quote
 * or bracket, so the scan sees the structure jansson reads. Depths: 1 the
 * computation's members, 2 the ops array, 3 an op's members. */
static void key_build(keyb_t *k, const char *p, const char *end, const shape_t *slice_shape)
{
    char kind[4] = {0};         /* '{' or '[' at depths 1..3 */
    int depth = 0, expect_key = 0, what = V_OTHER, in_ops = 0;
    if (memchr(p, '\\', (size_t)(end - p)))
        k->keep = 0;
    for (; p < end && k->keep; p++) {
        switch (*p) {
        case '"': {
            const char *q = memchr(p + 1, '"', (size_t)(end - p - 1));
            if (!q || depth < 1) {
                k->keep = 0;
                break;
            }
            key_string(k, p, q, depth, kind, &expect_key, &what, in_ops);
            p = q;
            break;
        }
        case '{': case '[':
            if (what == V_NAME || what == V_FROM || (depth == 0 && *p != '{'))
                k->keep = 0;
            if (++depth <= 3)
                kind[depth] = *p;
            in_ops |= what == V_OPS && depth == 2 && *p == '[';
            what = V_OTHER;
            expect_key = *p == '{';
            break;
        case '}': case ']':
            if (depth == 2)
                in_ops = 0;
            depth--;
            expect_key = 0;
            what = V_OTHER;
            break;
        case ',':
            expect_key = depth >= 1 && depth <= 3 && kind[depth] == '{';
            what = V_OTHER;
            break;
        case ':': case ' ': case '\t': case '\n': case '\r':
            break;
        default:                /* a number or literal */
            if (what == V_NAME || what == V_FROM || depth < 1)
                k->keep = 0;
            break;
        }
    }
    if (depth != 0)
        k->keep = 0;
    kb_put(k, k->copied, (size_t)(end - k->copied));
    char tail[8 + TENSOR_MAX_RANK * 21];
    if (slice_shape->rank < 0 || slice_shape->rank > TENSOR_MAX_RANK) {
        k->keep = 0;            /* the compiler refuses it */
        return;
    }
    kb_put(k, tail, fmt_shape(tail, '|', slice_shape->rank, slice_shape->dim));
}

/* FNV-1a over 8-byte words, then the tail's bytes: keys are a few hundred
 * bytes, and a slot only picks where to compare the whole key. */
static uint64_t key_hash(const char *p, size_t n)
{
    uint64_t h = 14695981039346656037ull, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 1099511628211ull;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

static plan_ref_t *ref_new(comp_t *plan)
{
    plan_ref_t *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    atomic_init(&r->refs, 1);
    r->plan = plan;
    return r;
}

void plancache_unref(plan_ref_t *ref)
{
    if (!ref || atomic_fetch_sub(&ref->refs, 1) != 1)
        return;
    comp_free(ref->plan);
    free(ref->key);
    free(ref);
}

/* The listed plan of key k, a new reference, or NULL. */
static plan_ref_t *cache_find(const keyb_t *k, uint64_t h)
{
    plan_ref_t *r;
    pthread_mutex_lock(&cache_mu);
    r = cache_slot[h % PLANCACHE_SLOTS];
    if (r && r->hash == h && r->keylen == k->len && memcmp(r->key, k->buf, k->len) == 0) {
        atomic_fetch_add(&r->refs, 1);
        cache_stats.hits++;
    } else {
        r = NULL;
        cache_stats.misses++;
    }
    pthread_mutex_unlock(&cache_mu);
    return r;
}

/* Lists r under key k (taking k's buffer), replacing its slot's plan. */
static void cache_list(plan_ref_t *r, keyb_t *k, uint64_t h)
{
    r->hash = h;
    r->keylen = k->len;
    r->key = k->buf;
    k->buf = NULL;
    atomic_fetch_add(&r->refs, 1);
    pthread_mutex_lock(&cache_mu);
    plan_ref_t *old = cache_slot[h % PLANCACHE_SLOTS];
    cache_slot[h % PLANCACHE_SLOTS] = r;
    pthread_mutex_unlock(&cache_mu);
    plancache_unref(old);
}

/* Compiles the text on its own: a tree of it, then the compiler. */
static int compile_text(const char *text, size_t len, const shape_t *slice_shape,
                        compiler_input_fn input, void *ctx, comp_t **out, err_t *e)
{
    jscan_t s;
    jscan_init(&s, text, len);
    json_t *tree = jscan_tree(&s, 0);
    if (!tree)
        return err_set(e, 500, "", "out of memory");
    int rc = compiler_comp(tree, slice_shape, input, ctx, out, e);
    json_decref(tree);
    return rc;
}

int plancache_compile(const char *text, size_t len, const shape_t *slice_shape,
                      compiler_input_fn input, void *ctx, plan_ref_t **ref,
                      const comp_t **plan, err_t *e)
{
    keyb_t k = {.copied = text, .keep = 1, .input = input, .ctx = ctx};
    uint64_t h = 0;
    comp_t *c = NULL;
    int rc;
    *ref = NULL;
    *plan = NULL;
    key_build(&k, text, text + len, slice_shape);
    if (k.keep) {
        h = key_hash(k.buf, k.len);
        if ((*ref = cache_find(&k, h)))
            goto done;
    } else {
        pthread_mutex_lock(&cache_mu);
        cache_stats.bypassed++;
        pthread_mutex_unlock(&cache_mu);
    }
    if ((rc = compile_text(text, len, slice_shape, input, ctx, &c, e)) != 0)
        goto fail;
    if (!(*ref = ref_new(c))) {
        comp_free(c);
        rc = err_set(e, 500, "", "out of memory");
        goto fail;
    }
    if (k.keep)
        cache_list(*ref, &k, h);
done:
    *plan = (*ref)->plan;
    free(k.buf);
    return 0;
fail:
    free(k.buf);
    return rc;
}

void plancache_get_stats(plancache_stats_t *out)
{
    pthread_mutex_lock(&cache_mu);
    *out = cache_stats;
    pthread_mutex_unlock(&cache_mu);
}

void plancache_clear(void)
{
    plan_ref_t *old[PLANCACHE_SLOTS];
    pthread_mutex_lock(&cache_mu);
    memcpy(old, cache_slot, sizeof old);
    memset(cache_slot, 0, sizeof cache_slot);
    pthread_mutex_unlock(&cache_mu);
    for (int i = 0; i < PLANCACHE_SLOTS; i++)
        plancache_unref(old[i]);
}
