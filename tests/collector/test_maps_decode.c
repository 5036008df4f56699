/*
 * The decoder behind `mkscope maps` (maps_decode.h) on types made with
 * libbpf's BTF writer: what a user's object declares, the value a user
 * should read back, and hex with a reason where the bytes do not fit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <bpf/btf.h>
#include <jansson.h>

#include "maps_decode.h"

/* The decoded JSON, compact, compared as text. */
static void expect_decode(const struct btf *b, uint32_t type, const void *data, size_t len,
                          const char *want, const char *want_why)
{
    char why[200] = "";
    json_t *j = mks_maps_decode(b, type, data, len, why, sizeof(why));
    assert_non_null(j);
    char *s = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
    assert_non_null(s);
    assert_string_equal(s, want);
    if (want_why)
        assert_non_null(strstr(why, want_why));
    else
        assert_string_equal(why, "");
    free(s);
    json_decref(j);
}

static void test_values(void **state)
{
    (void)state;
    struct btf *b = btf__new_empty();
    assert_non_null(b);
    int u32 = btf__add_int(b, "unsigned int", 4, 0);
    int s8 = btf__add_int(b, "signed char", 1, BTF_INT_SIGNED);
    int chr = btf__add_int(b, "char", 1, BTF_INT_CHAR);
    int u64 = btf__add_int(b, "unsigned long long", 8, 0);
    int name = btf__add_array(b, u32, chr, 8);
    int color = btf__add_enum(b, "color", 4);
    assert_int_equal(btf__add_enum_value(b, "RED", 1), 0);
    assert_int_equal(btf__add_enum_value(b, "BLUE", 2), 0);
    /* struct v { u32 n; signed char d; u32 lo:3, hi:5; char name[8]; enum color c; u64 big; } */
    int v = btf__add_struct(b, "v", 32);
    assert_int_equal(btf__add_field(b, "n", u32, 0, 0), 0);
    assert_int_equal(btf__add_field(b, "d", s8, 32, 0), 0);
    assert_int_equal(btf__add_field(b, "lo", u32, 40, 3), 0);
    assert_int_equal(btf__add_field(b, "hi", u32, 43, 5), 0);
    assert_int_equal(btf__add_field(b, "name", name, 64, 0), 0);
    assert_int_equal(btf__add_field(b, "c", color, 128, 0), 0);
    assert_int_equal(btf__add_field(b, "big", u64, 192, 0), 0);
    assert_true(u32 > 0 && s8 > 0 && v > 0);

    uint8_t val[32] = {0};
    uint32_t n = 7;
    memcpy(val, &n, 4);
    val[4] = 0xff;                 /* d = -1 */
    val[5] = 5 | (17 << 3);        /* lo = 5, hi = 17 */
    memcpy(val + 8, "attn", 5);    /* name = "attn" */
    val[16] = 2;                   /* c = BLUE */
    uint64_t big = (1ull << 60) + 1; /* beyond a double: a string */
    memcpy(val + 24, &big, 8);
    expect_decode(b, (uint32_t)v, val, sizeof(val),
                  "{\"n\":7,\"d\":-1,\"lo\":5,\"hi\":17,\"name\":\"attn\",\"c\":\"BLUE\","
                  "\"big\":\"1152921504606846977\"}",
                  NULL);
    /* an enum value with no name: the number */
    val[16] = 9;
    expect_decode(b, (uint32_t)color, val + 16, 4, "9", NULL);
    /* a signed char on its own */
    expect_decode(b, (uint32_t)s8, val + 4, 1, "-1", NULL);
    /* bytes shorter than the type: hex, and why */
    expect_decode(b, (uint32_t)v, val, 8, "\"0x07000000ff8d0000\"", "past the value's end");
    /* longer than the type: hex too (the dump is not of this type) */
    expect_decode(b, (uint32_t)u32, val, 8, "\"0x07000000ff8d0000\"", "not the type's size");
    /* no types at all: hex, no reason from the decoder */
    expect_decode(NULL, 0, val, 2, "\"0x0700\"", NULL);
    btf__free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
