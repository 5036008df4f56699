/*
 * Fuzz target: the BPF object loader and the verifier, as the agent (attach
 * of an object sent over the wire) and `mkscope verify` call them: open the
 * bytes as an object, read every map's initial image, and verify every
 * program for its section's hook and type against the object's maps.
 * Whatever the input, each step must answer (libFuzzer's -timeout makes a
 * hang a finding), and every refusal must be one line with a negative code.
 * Seeds (tests/fuzz/corpus/loader): the built-in monitors, the test
 * objects, and hostile BTF made from them (loader_test --write-corpus DIR).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkscope/loader.h"
#include "mkscope/verifier.h"

/* A refusal: a negative code and one non-empty line. */
static void one_line(int rc, const char *what, const char *msg)
{
    if (rc >= 0 || !msg[0] || strchr(msg, '\n')) {
        fprintf(stderr, "fuzz_loader: %s returned %d with message '%s'; expected a negative code and one line\n",
                what, rc, msg);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mks_obj *obj = NULL;
    char err[512];
    int rc = mks_obj_open_mem(data, size, "fuzz.bpf.o", &obj, err, sizeof(err));
    if (rc) {
        one_line(rc, "mks_obj_open_mem", err);
        if (obj)
            abort(); /* the output is written only on success */
        return 0;
    }
    uint32_t nm = mks_obj_map_count(obj);
    const struct mks_map_spec *maps = mks_obj_maps(obj);
    for (uint32_t m = 0; m < nm; m++) {
        const void *init;
        size_t len;
        if (mks_obj_map_init(obj, m, &init, &len) == 0 && len != maps[m].value_size)
            abort(); /* an image is exactly one value */
    }
    for (uint32_t i = 0; i < mks_obj_prog_count(obj); i++) {
        const struct mks_obj_prog *p = mks_obj_prog(obj, i);
        struct mks_verify_opts o = {.sz = sizeof(o), .prog_type = p->prog_type, .abi_version = p->abi_version,
                                    .hook = p->hook, .maps = maps, .n_maps = nm};
        struct mks_verify_result res = {0};
        char log[512];
        rc = mks_verify(p->insns, p->n_insns, &o, &res, log, sizeof(log));
        if (rc)
            one_line(rc, "mks_verify", log);
        else if (res.cost == 0)
            abort();
        if (rc == -MKS_VERR_INTERNAL)
            abort(); /* a verifier bug is a finding */
    }
    mks_obj_close(obj);
    return 0;
}
