/*
 * Fuzz target: the decoder behind `mkscope maps` (maps_decode.h).  Its
 * types come from a user's object (BTF that libbpf accepted) and its bytes
 * from an agent's map dump, so both are the input here:
 *
 *   u32 LE n | n bytes of raw BTF | u32 LE type id | the dumped bytes
 *
 * Every type of the BTF (up to 64) is also tried on the same bytes.  Each
 * decode must answer (a hang is a finding under -timeout), with a reason of
 * one line when the bytes do not fit.  Seeds (tests/fuzz/corpus/maps): the
 * BTF of the monitors and test objects with values of their map types.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <jansson.h>

#include "maps_decode.h"

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void try_type(const struct btf *b, uint32_t type, const uint8_t *data, size_t len)
{
    char why[200] = "";
    json_t *j = mks_maps_decode(b, type, data, len, why, sizeof(why));
    if (!j)
        abort(); /* not out of memory here: every value decodes or is hex */
    if (strchr(why, '\n')) {
        fprintf(stderr, "fuzz_maps: a reason of more than one line: '%s'\n", why);
        abort();
    }
    char *s = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!s)
        abort(); /* the answer must encode (the CLI prints it) */
    free(s);
    json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    libbpf_set_print(NULL); /* its refusals are expected here, and slow to print */
    if (size < 8)
        return 0;
    uint32_t n = le32(data);
    if (n > size - 8)
        return 0;
    const uint8_t *raw = data + 4, *rest = data + 4 + n;
    uint32_t type = le32(rest);
    const uint8_t *val = rest + 4;
    size_t len = size - 8 - n;

    try_type(NULL, type, val, len); /* no types: hex */
    struct btf *b = btf__new(raw, n);
    if (!b)
        return 0; /* libbpf refused the types: the collector shows hex */
    uint32_t cnt = btf__type_cnt(b);
    try_type(b, type, val, len);
    for (uint32_t id = 1; id < cnt && id <= 64; id++)
        try_type(b, id, val, len);
    btf__free(b);
    return 0;
}
