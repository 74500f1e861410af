/* runspec.c - see runspec.h. */
#include "runspec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const reserved_env[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID",
};

int runspec_reserved_env(const char *key)
{
    if (strncmp(key, "ATOLL_", 6) == 0)
        return 1;
    for (size_t i = 0; i < sizeof reserved_env / sizeof reserved_env[0]; i++)
        if (strcmp(key, reserved_env[i]) == 0)
            return 1;
    return 0;
}

/* A JSON string without NUL bytes of 1..max bytes, or NULL. */
static const char *plain_string(const json_t *v, size_t max)
{
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    return s && n >= 1 && n <= max && strlen(s) == n ? s : NULL;
}

static int env_key_valid(const char *k)
{
    size_t n = strlen(k);
    if (n < 1 || n > RUNSPEC_MAX_NAME || (k[0] >= '0' && k[0] <= '9'))
        return 0;
    for (const char *p = k; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
              (*p >= '0' && *p <= '9') || *p == '_'))
            return 0;
    return 1;
}

static int file_name_valid(const char *k)
{
    size_t n = strlen(k);
    if (n < 1 || n > RUNSPEC_MAX_NAME || strcmp(k, ".") == 0 || strcmp(k, "..") == 0)
        return 0;
    for (const char *p = k; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
              (*p >= '0' && *p <= '9') || *p == '_' || *p == '-' || *p == '.'))
            return 0;
    return 1;
}

static int image_valid(const char *s)
{
    for (const char *p = s; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
              (*p >= '0' && *p <= '9') || strchr("._-/:@", *p)))
            return 0;
    return s[0] != '-';
}

static int parse_command(const json_t *j, const char *pre, runspec_t *r, err_t *e)
{
    char f[ERR_FIELD_MAX];
    snprintf(f, sizeof f, "%s.command", pre);
    size_t n = json_array_size(j);
    if (!json_is_array(j) || n < 1 || n > RUNSPEC_MAX_ARGS)
        return err_set(e, 400, f, "command must be an array of 1 to %d strings (argv)",
                       RUNSPEC_MAX_ARGS);
    if (!(r->argv = calloc(n + 1, sizeof *r->argv)))
        return err_set(e, 500, "", "out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *s = plain_string(json_array_get(j, i), RUNSPEC_MAX_ARG_LEN);
        if (!s) {
            snprintf(f, sizeof f, "%s.command[%zu]", pre, i);
            return err_set(e, 400, f, "each command entry must be a string of 1 to %d bytes "
                           "without NUL", RUNSPEC_MAX_ARG_LEN);
        }
        if (!(r->argv[i] = strdup(s)))
            return err_set(e, 500, "", "out of memory");
        r->argc++;
    }
    return 0;
}

static int parse_env(const json_t *j, const char *pre, runspec_t *r, err_t *e)
{
    char f[ERR_FIELD_MAX];
    const char *key;
    json_t *v;
    snprintf(f, sizeof f, "%s.env", pre);
    if (!json_is_object(j) || json_object_size(j) > RUNSPEC_MAX_ENV)
        return err_set(e, 400, f, "env must be an object of at most %d string values",
                       RUNSPEC_MAX_ENV);
    if (!(r->env = calloc(json_object_size(j) + 1, sizeof *r->env)))
        return err_set(e, 500, "", "out of memory");
    json_object_foreach((json_t *)j, key, v) {
        const char *s = json_is_string(v) && json_string_length(v) == 0
                            ? "" : plain_string(v, RUNSPEC_MAX_ENV_VALUE);
        snprintf(f, sizeof f, "%s.env.%s", pre, key);
        if (!env_key_valid(key))
            return err_set(e, 400, f, "env names are 1 to %d characters [A-Za-z0-9_], not "
                           "starting with a digit", RUNSPEC_MAX_NAME);
        if (runspec_reserved_env(key))
            return err_set(e, 400, f, "%s is set by Atoll for every process", key);
        if (!s)
            return err_set(e, 400, f, "env values are strings of at most %d bytes without NUL",
                           RUNSPEC_MAX_ENV_VALUE);
        size_t n = strlen(key) + strlen(s) + 2;
        if (!(r->env[r->nenv] = malloc(n)))
            return err_set(e, 500, "", "out of memory");
        snprintf(r->env[r->nenv++], n, "%s=%s", key, s);
    }
    return 0;
}

static int parse_files(const json_t *j, const char *pre, runspec_t *r, err_t *e)
{
    char f[ERR_FIELD_MAX];
    const char *key;
    json_t *v;
    size_t total = 0, n = json_object_size(j);
    snprintf(f, sizeof f, "%s.files", pre);
    if (!json_is_object(j) || n > RUNSPEC_MAX_FILES)
        return err_set(e, 400, f, "files must be an object of at most %d name: text entries",
                       RUNSPEC_MAX_FILES);
    r->fname = calloc(n + 1, sizeof *r->fname);
    r->fdata = calloc(n + 1, sizeof *r->fdata);
    r->flen = calloc(n + 1, sizeof *r->flen);
    if (!r->fname || !r->fdata || !r->flen)
        return err_set(e, 500, "", "out of memory");
    json_object_foreach((json_t *)j, key, v) {
        snprintf(f, sizeof f, "%s.files.%s", pre, key);
        if (!file_name_valid(key))
            return err_set(e, 400, f, "file names are 1 to %d characters [A-Za-z0-9._-], "
                           "not . or ..", RUNSPEC_MAX_NAME);
        if (!json_is_string(v))
            return err_set(e, 400, f, "a file's content is a string");
        size_t len = json_string_length(v);
        total += len;
        if (total > RUNSPEC_MAX_FILES_BYTES)
            return err_set(e, 400, f, "files may hold at most %d bytes in all",
                           RUNSPEC_MAX_FILES_BYTES);
        r->fname[r->nfiles] = strdup(key);
        r->fdata[r->nfiles] = malloc(len + 1);
        if (!r->fname[r->nfiles] || !r->fdata[r->nfiles]) {
            r->nfiles++;
            return err_set(e, 500, "", "out of memory");
        }
        memcpy(r->fdata[r->nfiles], json_string_value(v), len + 1);
        r->flen[r->nfiles++] = len;
    }
    return 0;
}

static int parse_scalars(const json_t *j, const char *pre, runspec_t *r, err_t *e)
{
    char f[ERR_FIELD_MAX];
    const json_t *per = json_object_get(j, "per"), *img = json_object_get(j, "image");
    const json_t *to = json_object_get(j, "timeout_s");
    const char *ps = json_string_value(per);
    snprintf(f, sizeof f, "%s.per", pre);
    if (per && (!ps || (strcmp(ps, "device") != 0 && strcmp(ps, "host") != 0)))
        return err_set(e, 400, f, "per must be \"device\" or \"host\"");
    r->per_host = ps && strcmp(ps, "host") == 0;
    snprintf(f, sizeof f, "%s.timeout_s", pre);
    r->timeout_s = RUNSPEC_TIMEOUT_DEFAULT;
    if (to) {
        if (!json_is_integer(to) || json_integer_value(to) < 1 ||
            json_integer_value(to) > RUNSPEC_TIMEOUT_MAX)
            return err_set(e, 400, f, "timeout_s must be an integer in 1..%d",
                           RUNSPEC_TIMEOUT_MAX);
        r->timeout_s = json_integer_value(to);
    }
    snprintf(f, sizeof f, "%s.image", pre);
    if (img) {
        const char *s = plain_string(img, RUNSPEC_MAX_NAME - 1);
        if (!s || !image_valid(s))
            return err_set(e, 400, f, "image must be an image name of 1 to %d characters "
                           "[A-Za-z0-9._-/:@]", RUNSPEC_MAX_NAME - 1);
        snprintf(r->image, sizeof r->image, "%s", s);
    }
    return 0;
}

int runspec_parse(const json_t *j, const char *pre, runspec_t **out, err_t *e)
{
    static const char *const keys[] = {"command", "per", "files", "env", "image", "timeout_s",
                                       "shapes"};
    const char *key;
    json_t *v;
    char f[ERR_FIELD_MAX];
    if (!json_is_object(j))
        return err_set(e, 400, pre, "run must be an object {command, per?, files?, env?, "
                       "image?, timeout_s?, shapes?}");
    json_object_foreach((json_t *)j, key, v) {
        int known = 0;
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            known |= strcmp(key, keys[i]) == 0;
        snprintf(f, sizeof f, "%s.%s", pre, key);
        if (!known)
            return err_set(e, 400, f, "unknown field '%s' in run", key);
    }
    runspec_t *r = calloc(1, sizeof *r);
    if (!r)
        return err_set(e, 500, "", "out of memory");
    int rc = parse_command(json_object_get(j, "command"), pre, r, e);
    if (!rc && json_object_get(j, "env"))
        rc = parse_env(json_object_get(j, "env"), pre, r, e);
    if (!rc && json_object_get(j, "files"))
        rc = parse_files(json_object_get(j, "files"), pre, r, e);
    if (!rc)
        rc = parse_scalars(j, pre, r, e);
    if (rc) {
        runspec_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

void runspec_free(runspec_t *r)
{
    if (!r)
        return;
    for (int i = 0; r->argv && i < r->argc; i++)
        free(r->argv[i]);
    for (int i = 0; r->env && i < r->nenv; i++)
        free(r->env[i]);
    for (int i = 0; r->fname && i < r->nfiles; i++) {
        free(r->fname[i]);
        free(r->fdata[i]);
    }
    free(r->argv);
    free(r->env);
    free(r->fname);
    free(r->fdata);
    free(r->flen);
    free(r);
}
