/*
 * `mkscope verify OBJ...`: what the agent would decide about a monitor,
 * before it gets anywhere near a running megakernel.  Each object is opened
 * and relocated by the loader exactly as the agent does; each program is
 * verified for the hook and type its section names; the verdict is printed
 * with the worst-case instruction count, or the rejection line.  Text for
 * people, JSON (-f json) for scripts.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "mkscope/loader.h"
#include "mkscope/verifier.h"

enum { FMT_TEXT, FMT_JSON };

static void usage(FILE *f, const char *cmd)
{
    fprintf(f,
            "usage: %s [-v] [-f text|json] OBJ...\n"
            "\n"
            "Verify the programs of BPF objects compiled with clang -target bpf -O2 -g\n"
            "against mkscope.bpf.h: for each program, its section, type and verdict\n"
            "with the worst-case number of instructions one run can execute, or the\n"
            "rejection line (instruction, disassembly, what was found, what was expected).\n"
            "\n"
            "OPTIONS\n"
            "  -v, --verbose        also list the object's maps and the explored state count\n"
            "  -f, --format FORMAT  text (default) or json: one JSON array of objects\n"
            "  -h, --help           this text\n"
            "\n"
            "EXIT STATUS\n"
            "  0 every program accepted, 1 a program rejected, 2 usage or object error\n"
            "\n"
            "EXAMPLES\n"
            "  %s count.bpf.o\n"
            "  %s -v latency.bpf.o depwait.bpf.o\n"
            "  %s -f json monitor.bpf.o\n",
            cmd, cmd, cmd, cmd);
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

/* A JSON string: quotes, backslashes and control characters escaped. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* Returns 0 accepted, 1 rejected, 2 object error.  In JSON an object that
 * cannot be opened is an entry with "error" (and its line also on err). */
static int verify_obj(const char *path, int verbose, int fmt, int first, FILE *out, FILE *err)
{
    struct mks_obj *obj = NULL;
    char msg[512];
    int worst = 0;

    if (fmt == FMT_JSON) {
        fputs(first ? "\n  {\"object\": " : ",\n  {\"object\": ", out);
        json_str(out, path);
    }
    if (mks_obj_open_file(path, &obj, msg, sizeof(msg)) != 0) {
        fprintf(err, "mkscope verify: %s\n", msg);
        if (fmt == FMT_JSON) {
            fputs(", \"error\": ", out);
            json_str(out, msg);
            fputs("}", out);
        }
        return 2;
    }
    uint32_t np = mks_obj_prog_count(obj), nm = mks_obj_map_count(obj);
    const struct mks_map_spec *maps = mks_obj_maps(obj);
    if (fmt == FMT_TEXT) {
        fprintf(out, "%s: %u program%s, %u map%s\n", path, np, np == 1 ? "" : "s", nm, nm == 1 ? "" : "s");
        for (uint32_t m = 0; verbose && m < nm; m++)
            fprintf(out, "  map %u %-16s %-15s key %u value %u max_entries %u\n", m, maps[m].name,
                    map_type_str(maps[m].type), maps[m].key_size, maps[m].value_size, maps[m].max_entries);
    } else {
        fputs(", \"maps\": [", out);
        for (uint32_t m = 0; m < nm; m++) {
            fputs(m ? ", {\"name\": " : "{\"name\": ", out);
            json_str(out, maps[m].name);
            fprintf(out, ", \"type\": \"%s\", \"key_size\": %u, \"value_size\": %u, \"max_entries\": %u}",
                    map_type_str(maps[m].type), maps[m].key_size, maps[m].value_size, maps[m].max_entries);
        }
        fputs("],\n   \"programs\": [", out);
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
        if (rc != 0)
            worst = rc > -MKS_VERR_BASE ? 2 : (worst > 1 ? worst : 1); /* 2: could not run (memory, arguments) */
        if (fmt == FMT_JSON) {
            fputs(p ? ",\n    {\"section\": " : "\n    {\"section\": ", out);
            json_str(out, pr->section);
            fputs(", \"name\": ", out);
            json_str(out, pr->name);
            fprintf(out, ", \"type\": \"%s\", \"abi\": %u, \"insns\": %u, ", type_str(pr->prog_type),
                    pr->abi_version, pr->n_insns);
            if (rc == 0) {
                fprintf(out, "\"verdict\": \"accepted\", \"cost\": %llu, \"states\": %u}",
                        (unsigned long long)res.cost, res.states);
            } else {
                fprintf(out, "\"verdict\": \"rejected\", \"code\": %d, \"error\": ", -rc);
                json_str(out, msg);
                fputs("}", out);
            }
        } else if (rc == 0) {
            fprintf(out, "  %s %s (%s, ABI v%u): accepted, worst case %llu instructions per run (%u in the program)",
                    pr->section, pr->name, type_str(pr->prog_type), pr->abi_version, (unsigned long long)res.cost,
                    pr->n_insns);
            if (verbose)
                fprintf(out, ", %u states kept", res.states);
            fputc('\n', out);
        } else {
            fprintf(out, "  %s %s (%s, ABI v%u): rejected\n    %s\n", pr->section, pr->name, type_str(pr->prog_type),
                    pr->abi_version, msg);
        }
    }
    if (fmt == FMT_JSON)
        fputs("]}", out);
    mks_obj_close(obj);
    return worst;
}

int mks_cmd_verify(int argc, char **argv, FILE *out, FILE *err)
{
    const char *cmd = argc > 0 && argv[0] ? argv[0] : "mkscope verify";
    int verbose = 0, fmt = FMT_TEXT, n_obj = 0, worst = 0;

    for (int a = 1; a < argc; a++) {
        const char *s = argv[a];
        if (strcmp(s, "--") == 0)
            break;
        if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
            usage(out, cmd);
            return 0;
        }
        if (strcmp(s, "-v") == 0 || strcmp(s, "--verbose") == 0) {
            verbose = 1;
        } else if (strcmp(s, "-f") == 0 || strcmp(s, "--format") == 0) {
            const char *f = a + 1 < argc ? argv[++a] : "";
            if (strcmp(f, "text") == 0) {
                fmt = FMT_TEXT;
            } else if (strcmp(f, "json") == 0) {
                fmt = FMT_JSON;
            } else {
                fprintf(err, "%s: format '%s' unknown; expected text or json\n", cmd, f);
                return 2;
            }
        } else if (s[0] == '-' && s[1] != '\0') {
            fprintf(err, "%s: unknown option '%s'; see --help\n", cmd, s);
            return 2;
        }
    }
    /* objects: non-option arguments, and everything after "--" */
    int dashdash = 0;
    if (fmt == FMT_JSON)
        fputc('[', out);
    for (int a = 1; a < argc; a++) {
        const char *s = argv[a];
        if (!dashdash && strcmp(s, "--") == 0) {
            dashdash = 1;
            continue;
        }
        if (!dashdash && (strcmp(s, "-f") == 0 || strcmp(s, "--format") == 0)) {
            a++;
            continue;
        }
        if (!dashdash && s[0] == '-' && s[1] != '\0')
            continue;
        int r = verify_obj(s, verbose, fmt, n_obj == 0, out, err);
        n_obj++;
        if (r > worst)
            worst = r;
    }
    if (fmt == FMT_JSON)
        fputs(n_obj ? "\n]\n" : "]\n", out);
    if (n_obj == 0) {
        fprintf(err, "%s: no object given; usage: %s [-v] [-f text|json] OBJ... (see --help)\n", cmd, cmd);
        return 2;
    }
    return worst;
}
