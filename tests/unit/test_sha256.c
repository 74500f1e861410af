/* test_sha256.c - SHA-256 against the FIPS 180-4 / NIST example vectors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "sha256.h"

static void test_vectors(void **state)
{
    (void)state;
    char hex[65];
    sha256_hex("", hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha256_hex("abc", hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    /* 56 bytes: the padding needs a second block. */
    sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_million_a(void **state)
{
    (void)state;
    char *a = malloc(1000001);
    assert_non_null(a);
    memset(a, 'a', 1000000);
    a[1000000] = '\0';
    char hex[65];
    sha256_hex(a, hex);
    free(a);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_million_a),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
