/*
 * mkscope-mpk-schema: MPK's task_graph.json as mkscope sees it.
 *
 *   mkscope-mpk-schema [-f text|json] [-o SCHEMA.pb] TASK_GRAPH.json
 *
 * Prints the task classes (id, name, MPK task type, tasks per iteration,
 * operator instances, what each waits on) and with -o writes the serialized
 * mkscope.v1.TaskSchema the MPK runtime publishes, for tools that want it
 * without a GPU.  Exit: 0, 1 the file is not MPK's task graph, 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "mkscope/mpk_graph.h"

static const char usage[] =
    "usage: mkscope-mpk-schema [-f text|json] [-o SCHEMA.pb] TASK_GRAPH.json\n"
    "\n"
    "Reads the task graph MPK's front end writes beside the generated kernel\n"
    "(task_graph.json) and prints mkscope's task classes: one per MPK task type\n"
    "and output tensor, with its tasks per iteration and the classes it waits on.\n"
    "\n"
    "OPTIONS\n"
    "  -f text|json   output format (default text)\n"
    "  -o FILE        also write the serialized mkscope.v1.TaskSchema\n"
    "  -h, --help     this help\n"
    "  --version      the version\n"
    "\n"
    "EXAMPLES\n"
    "  mkscope-mpk-schema /tmp/mpk/task_graph.json\n"
    "  mkscope-mpk-schema -f json -o schema.pb task_graph_rank0.json\n";

static void print_deps(FILE *f, const struct mks_mpk_graph *g, const struct mks_mpk_class *c)
{
    int first = 1;
    for (uint32_t d = 0; d < g->n_classes; d++)
        if (c->deps >> d & 1u) {
            fprintf(f, "%s%s", first ? "" : ",", g->classes[d].name);
            first = 0;
        }
    if (c->remote_deps)
        fprintf(f, "%snvshmem.remote", first ? "" : ",");
    else if (first)
        fprintf(f, "-");
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"help", no_argument, NULL, 'h'},
                                         {"version", no_argument, NULL, 'V'},
                                         {NULL, 0, NULL, 0}};
    const char *fmt = "text", *out = NULL;
    struct mks_mpk_graph *g = NULL;
    char err[512];
    int opt, rc;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "f:o:h", lo, NULL)) != -1) {
        switch (opt) {
        case 'f':
            fmt = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        case 'V':
            printf("mkscope-mpk-schema %s\n", MKS_VERSION);
            return 0;
        default:
            fprintf(stderr, "mkscope-mpk-schema: bad option or missing value; see --help\n");
            return 2;
        }
    }
    if (strcmp(fmt, "text") && strcmp(fmt, "json")) {
        fprintf(stderr, "mkscope-mpk-schema: -f takes text or json, not '%s'\n", fmt);
        return 2;
    }
    if (optind != argc - 1) {
        fprintf(stderr, "mkscope-mpk-schema: one TASK_GRAPH.json expected; see --help\n");
        return 2;
    }
    rc = mks_mpk_graph_load(argv[optind], &g, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "mkscope-mpk-schema: %s\n", rc == -ENOMEM ? "out of memory" : err);
        return 1;
    }
    if (out) {
        uint8_t *buf;
        size_t len;
        FILE *f;
        if (mks_mpk_graph_schema(g, &buf, &len) || !(f = fopen(out, "wb"))) {
            fprintf(stderr, "mkscope-mpk-schema: %s: %s\n", out, strerror(errno));
            mks_mpk_graph_free(g);
            return 1;
        }
        if (fwrite(buf, 1, len, f) != len || fclose(f)) {
            fprintf(stderr, "mkscope-mpk-schema: %s: write failed\n", out);
            free(buf);
            mks_mpk_graph_free(g);
            return 1;
        }
        free(buf);
    }
    if (!strcmp(fmt, "text")) {
        printf("%s: %u tasks, %u events, %u classes\n", argv[optind], g->n_tasks, g->n_events,
               g->n_classes);
        printf("%-3s %-40s %-36s %8s %5s  %s\n", "id", "class", "task type", "per_iter", "ops",
               "waits on");
        for (uint32_t c = 0; c < g->n_classes; c++) {
            const struct mks_mpk_class *k = &g->classes[c];
            printf("%-3u %-40s %-36s %8u %5u  ", c, k->name, k->task_type, k->per_iter, k->n_ops);
            print_deps(stdout, g, k);
            printf("\n");
        }
    } else {
        json_t *root = json_object(), *arr = json_array();
        json_object_set_new(root, "tasks", json_integer(g->n_tasks));
        json_object_set_new(root, "events", json_integer(g->n_events));
        for (uint32_t c = 0; c < g->n_classes; c++) {
            const struct mks_mpk_class *k = &g->classes[c];
            json_t *o = json_object(), *deps = json_array();
            for (uint32_t d = 0; d < g->n_classes; d++)
                if (k->deps >> d & 1u)
                    json_array_append_new(deps, json_string(g->classes[d].name));
            json_object_set_new(o, "id", json_integer(c));
            json_object_set_new(o, "name", json_string(k->name));
            json_object_set_new(o, "task_type", json_string(k->task_type));
            json_object_set_new(o, "task_type_id", json_integer(k->type));
            json_object_set_new(o, "tensor", json_string(k->tensor));
            json_object_set_new(o, "source_op", json_string(k->source_op));
            json_object_set_new(o, "per_iter", json_integer(k->per_iter));
            json_object_set_new(o, "ops", json_integer(k->n_ops));
            json_object_set_new(o, "request", json_boolean(k->flags & 1u));
            json_object_set_new(o, "comm", json_boolean(k->flags & 2u));
            json_object_set_new(o, "waits_on", deps);
            json_object_set_new(o, "remote", json_boolean(k->remote_deps));
            json_array_append_new(arr, o);
        }
        json_object_set_new(root, "classes", arr);
        char *s = json_dumps(root, JSON_INDENT(2));
        if (s)
            puts(s);
        free(s);
        json_decref(root);
    }
    mks_mpk_graph_free(g);
    return 0;
}
