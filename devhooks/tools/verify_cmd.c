/*
 * `mkscope verify OBJ...`: what the agent would decide about a monitor,
 * before it gets anywhere near a running megakernel.  Each object is opened
 * and relocated by the loader exactly as the agent does; each program is
 * verified for the hook and type its section names; the verdict is printed
 * with the worst-case instruction count, or the rejection line.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "mkscope/loader.h"
#include "mkscope/verifier.h"

static void usage(FILE *f, const char *cmd)
{
    fprintf(f,
            "usage: %s [-v] OBJ...\n"
            "\n"
            "Verify the programs of BPF objects compiled with clang -target bpf -O2 -g\n"
            "against mkscope.bpf.h: for each program, its section, type and verdict\n"
            "with the worst-case number of instructions one run can execute, or the\n"
            "rejection line (instruction, disassembly, what was found, what was expected).\n"
            "\n"
            "OPTIONS\n"
            "  -v, --verbose   also list the object's maps and the explored state count\n"
            "  -h, --help      this text\n"
            "\n"
            "EXIT STATUS\n"
            "  0 every program accepted, 1 a program rejected, 2 usage or object error\n"
            "\n"
            "EXAMPLES\n"
            "  %s count.bpf.o\n"
            "  %s -v latency.bpf.o depwait.bpf.o\n",
            cmd, cmd, cmd);
}

static const char *type_str(uint32_t t)
{
    return t == MKS_PROG_CONTROL ? "CONTROL" : t == MKS_PROG_OBSERVE ? "OBSERVE" : "?";
}

static const char *map_type_str(uint32_t t)
{
    switch (t) {
    case MKS_MAP_ARRAY: return "array";
    case MKS_MAP_PERWORKER_ARRAY: return "perworker_array";
    case MKS_MAP_HASH: return "hash";
    case MKS_MAP_HIST: return "hist";
    case MKS_MAP_RINGBUF: return "ringbuf";
    default: return "?";
    }
}

/* Returns 0 accepted, 1 rejected, 2 object error. */
static int verify_obj(const char *path, int verbose, FILE *out, FILE *err)
{
    struct mks_obj *obj = NULL;
    char msg[512];
    int worst = 0;

    if (mks_obj_open_file(path, &obj, msg, sizeof(msg)) != 0) {
        fprintf(err, "mkscope verify: %s\n", msg);
        return 2;
    }
    uint32_t np = mks_obj_prog_count(obj), nm = mks_obj_map_count(obj);
    const struct mks_map_spec *maps = mks_obj_maps(obj);
    fprintf(out, "%s: %u program%s, %u map%s\n", path, np, np == 1 ? "" : "s", nm, nm == 1 ? "" : "s");
    if (verbose) {
        for (uint32_t m = 0; m < nm; m++)
            fprintf(out, "  map %u %-16s %-15s key %u value %u max_entries %u\n", m, maps[m].name,
                    map_type_str(maps[m].type), maps[m].key_size, maps[m].value_size, maps[m].max_entries);
    }
    for (uint32_t p = 0; p < np; p++) {
        const struct mks_obj_prog *pr = mks_obj_prog(obj, p);
        struct mks_verify_opts vo = {
            .sz = sizeof(vo),
            .prog_type = pr->prog_type,
            .abi_version = pr->abi_version,
            .hook = pr->hook,
            .maps = maps,
            .n_maps = nm,
        };
        struct mks_verify_result res = {0};
        int rc = mks_verify(pr->insns, pr->n_insns, &vo, &res, msg, sizeof(msg));
        if (rc == 0) {
            fprintf(out, "  %s %s (%s, ABI v%u): accepted, worst case %llu instructions per run (%u in the program)",
                    pr->section, pr->name, type_str(pr->prog_type), pr->abi_version, (unsigned long long)res.cost,
                    pr->n_insns);
            if (verbose)
                fprintf(out, ", %u states kept", res.states);
            fputc('\n', out);
        } else {
            fprintf(out, "  %s %s (%s, ABI v%u): rejected\n    %s\n", pr->section, pr->name, type_str(pr->prog_type),
                    pr->abi_version, msg);
            if (worst < 1)
                worst = 1;
            if (rc > -MKS_VERR_BASE)
                worst = 2; /* could not run: out of memory, bad arguments */
        }
    }
    mks_obj_close(obj);
    return worst;
}

int mks_cmd_verify(int argc, char **argv, FILE *out, FILE *err)
{
    const char *cmd = argc > 0 && argv[0] ? argv[0] : "mkscope verify";
    int verbose = 0, n_obj = 0, worst = 0;

    for (int a = 1; a < argc; a++) {
        const char *s = argv[a];
        if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
            usage(out, cmd);
            return 0;
        }
        if (strcmp(s, "-v") == 0 || strcmp(s, "--verbose") == 0) {
            verbose = 1;
        } else if (strcmp(s, "--") == 0) {
            break;
        } else if (s[0] == '-' && s[1] != '\0') {
            fprintf(err, "%s: unknown option '%s'; see --help\n", cmd, s);
            return 2;
        }
    }
    int dashdash = 0;
    for (int a = 1; a < argc; a++) {
        const char *s = argv[a];
        if (!dashdash && strcmp(s, "--") == 0) {
            dashdash = 1;
            continue;
        }
        if (!dashdash && s[0] == '-' && s[1] != '\0')
            continue;
        n_obj++;
        int r = verify_obj(s, verbose, out, err);
        if (r > worst)
            worst = r;
    }
    if (n_obj == 0) {
        fprintf(err, "%s: no object given; usage: %s [-v] OBJ... (see --help)\n", cmd, cmd);
        return 2;
    }
    return worst;
}
