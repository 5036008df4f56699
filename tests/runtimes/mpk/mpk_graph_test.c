/*
 * MPK's task graph as task classes and schema: a saved graph written to
 * MPK's task_graph.json format (data/, see its README), and the one-line
 * errors for files that are not that format.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mkscope/mpk_graph.h"
#ifdef MKS_TEST_HAVE_PROTO
#include "mkscope.pb-c.h"
#endif

static struct mks_mpk_graph *load_saved(void)
{
    struct mks_mpk_graph *g = NULL;
    char err[256] = "";
    int rc = mks_mpk_graph_load(MKS_MPK_TEST_DATA "/task_graph_qwen3_2l.json", &g, err, sizeof(err));
    if (rc)
        fail_msg("load: %d %s", rc, err);
    return g;
}

static void test_classes(void **state)
{
    (void)state;
    struct mks_mpk_graph *g = load_saved();
    assert_int_equal(g->n_tasks, 52);
    assert_int_equal(g->n_events, 23);
    assert_int_equal(g->n_classes, 12);
    /* TERMINATE has no class; BEGIN_TASK_GRAPH is class 0 */
    assert_int_equal(g->task_info[0], MKS_MPK_NO_CLASS);
    assert_string_equal(g->classes[0].name, "begin_task_graph");
    /* a class per (task type, output tensor): both layers' QKV projections
     * are one class, the MLP's up projection another of the same type */
    int qkv = mks_mpk_graph_class(g, "linear_hopper.attn_in");
    int up = mks_mpk_graph_class(g, "linear_hopper.mlp_mid");
    int lm = mks_mpk_graph_class(g, "linear_hopper.argmax_in");
    assert_true(qkv >= 0 && up >= 0 && lm >= 0 && qkv != up && up != lm);
    assert_string_equal(g->classes[qkv].task_type, "TASK_LINEAR_HOPPER");
    assert_int_equal(g->classes[qkv].type, 152);
    assert_int_equal(g->classes[qkv].per_iter, 8);
    assert_int_equal(g->classes[qkv].n_ops, 2);
    assert_int_equal(g->classes[lm].n_ops, 1);
    assert_string_equal(g->classes[qkv].source_op, "rmsnorm_out,layer_*_qkv_proj");
    /* by task type name: the first class of that type */
    assert_int_equal(mks_mpk_graph_class(g, "TASK_LINEAR_HOPPER"), qkv);
    assert_int_equal(mks_mpk_graph_class(g, "no.such"), -ENOENT);
    /* the rmsnorm before each linear: 5 operators of 2 tasks */
    int norm = mks_mpk_graph_class(g, "rms_norm_hopper.rmsnorm_out");
    assert_int_equal(g->classes[norm].per_iter, 10);
    assert_int_equal(g->classes[norm].n_ops, 5);
    /* attention is request-bound, nothing communicates on one GPU */
    int attn = mks_mpk_graph_class(g, "paged_attention_hopper.attn_out");
    assert_int_equal(g->classes[attn].flags, 1u);
    for (uint32_t c = 0; c < g->n_classes; c++)
        assert_false(g->classes[c].flags & 2u);
    /* what waits on what: QKV on the rmsnorm, the rmsnorm on the embedding
     * and on both residual linears (the layers' ends) */
    assert_int_equal(g->classes[qkv].deps, 1ull << norm);
    int emb = mks_mpk_graph_class(g, "embedding_hopper.embed_out");
    int o = mks_mpk_graph_class(g, "linear_with_residual_hopper.attn_proj_out");
    int down = mks_mpk_graph_class(g, "linear_with_residual_hopper.mlp_out");
    assert_int_equal(g->classes[norm].deps, (1ull << emb) | (1ull << o) | (1ull << down));
    mks_mpk_graph_free(g);
}

static void test_tiles(void **state)
{
    (void)state;
    struct mks_mpk_graph *g = load_saved();
    int qkv = mks_mpk_graph_class(g, "linear_hopper.attn_in");
    uint32_t seen = 0, last_tile = 0;
    /* tiles count 0.. within each operator instance, restarting per layer */
    for (uint32_t t = 1; t < g->n_tasks; t++) {
        if ((g->task_info[t] >> 24) != (uint32_t)qkv)
            continue;
        uint32_t tile = g->task_info[t] & 0xffffffu;
        if (seen % 4 == 0)
            assert_int_equal(tile, 0);
        else
            assert_int_equal(tile, last_tile + 1);
        last_tile = tile;
        seen++;
    }
    assert_int_equal(seen, 8);
    /* every event triggered by some class has it recorded; the last
     * (END_OF_TASK_GRAPH) is argmax_reduce's */
    assert_int_equal(g->event_class[g->n_events - 1],
                     (uint32_t)mks_mpk_graph_class(g, "argmax_reduce.output_token"));
    mks_mpk_graph_free(g);
}

static void test_schema(void **state)
{
    (void)state;
    struct mks_mpk_graph *g = load_saved();
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(mks_mpk_graph_schema(g, &buf, &len), 0);
    assert_true(len > 100);
#ifdef MKS_TEST_HAVE_PROTO
    /* decoded as the collector does: MPK's operator names as class names */
    Mkscope__V1__TaskSchema *s = mkscope__v1__task_schema__unpack(NULL, len, buf);
    assert_non_null(s);
    assert_int_equal(s->n_classes, g->n_classes);
    for (size_t i = 0; i < s->n_classes; i++) {
        assert_int_equal(s->classes[i]->id, i);
        assert_string_equal(s->classes[i]->name, g->classes[i].name);
    }
    int qkv = mks_mpk_graph_class(g, "linear_hopper.attn_in");
    assert_string_equal(s->classes[qkv]->device_fn, "TASK_LINEAR_HOPPER/v0");
    assert_string_equal(s->classes[qkv]->region_class, "attn_in");
    assert_int_equal(s->classes[qkv]->n_dep_classes, 1);
    /* each DepClass is a class whose tasks release events others wait on */
    int found = 0;
    for (size_t i = 0; i < s->n_dep_classes; i++) {
        assert_false(s->dep_classes[i]->remote);
        if (s->dep_classes[i]->id == s->classes[qkv]->dep_classes[0])
            found = !strcmp(s->dep_classes[i]->name, "rms_norm_hopper.rmsnorm_out.done");
    }
    assert_true(found);
    mkscope__v1__task_schema__free_unpacked(s, NULL);
#endif
    free(buf);
    mks_mpk_graph_free(g);
}

static int parse(const char *json, char *err, size_t len)
{
    struct mks_mpk_graph *g = NULL;
    int rc = mks_mpk_graph_parse(json, strlen(json), "g.json", &g, err, len);
    mks_mpk_graph_free(g);
    return rc;
}

static void test_errors(void **state)
{
    (void)state;
    char err[256];
    struct mks_mpk_graph *g = NULL;
    assert_int_equal(mks_mpk_graph_load("/nonexistent/task_graph.json", &g, err, sizeof(err)),
                     -ENOENT);
    assert_non_null(strstr(err, "/nonexistent/task_graph.json"));
    assert_int_equal(parse("{", err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "expected MPK's task_graph.json"));
    assert_int_equal(parse("{\"tasks\": []}", err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "no \"all_tasks\" and \"all_events\""));
    const char *T0 = "{\"task_type\":0,\"variant_id\":0,\"trigger_event\":9223372036854775806,"
                     "\"dependent_event\":9223372036854775806,\"inputs\":null,\"outputs\":null}";
    char buf[1024];
    /* task 1 without task_type */
    snprintf(buf, sizeof(buf),
             "{\"all_tasks\":[%s,{\"variant_id\":0,\"trigger_event\":1}],\"all_events\":[{}]}", T0);
    assert_int_equal(parse(buf, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "all_tasks[1]: no integer \"task_type\""));
    /* task 0 not TERMINATE */
    snprintf(buf, sizeof(buf),
             "{\"all_tasks\":[{\"task_type\":10,\"variant_id\":0,\"trigger_event\":1},%s],"
             "\"all_events\":[{}]}", T0);
    assert_int_equal(parse(buf, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "not TERMINATE"));
    /* a trigger naming no event */
    snprintf(buf, sizeof(buf),
             "{\"all_tasks\":[%s,{\"task_type\":10,\"variant_id\":0,\"trigger_event\":7,"
             "\"dependent_event\":9223372036854775806}],\"all_events\":[{\"event_type\":911,"
             "\"num_triggers\":1,\"first_task_id\":0,\"last_task_id\":0}]}", T0);
    assert_int_equal(parse(buf, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "trigger_event 0x7 names no event"));
    /* an event launching tasks past the end */
    snprintf(buf, sizeof(buf),
             "{\"all_tasks\":[%s,{\"task_type\":10,\"variant_id\":0,\"trigger_event\":0,"
             "\"dependent_event\":9223372036854775806}],\"all_events\":[{\"event_type\":903,"
             "\"num_triggers\":1,\"first_task_id\":1,\"last_task_id\":9}]}", T0);
    assert_int_equal(parse(buf, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "all_events[0]: task range 1..9"));
    /* a tensor list that is not a list */
    snprintf(buf, sizeof(buf),
             "{\"all_tasks\":[%s,{\"task_type\":10,\"variant_id\":0,\"trigger_event\":0,"
             "\"outputs\":7}],\"all_events\":[{}]}", T0);
    assert_int_equal(parse(buf, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "\"outputs\" is not an array"));
}

static void test_fault_plans(void **state)
{
    (void)state;
    struct mks_mpk_graph *g = load_saved();
    struct mks_mpk_fault f[MKS_MPK_MAX_FAULTS];
    uint32_t n = 99;
    char err[256];
    int silu = mks_mpk_graph_class(g, "silu_mul_hopper.silu_mul_out");
    assert_int_equal(mks_mpk_faults_parse(g, "task-delay:class=silu_mul_hopper.silu_mul_out,"
                                          "steps=300-304,ns=20000;notify-delay:event=7,steps=9,"
                                          "ns=5",
                                          f, MKS_MPK_MAX_FAULTS, &n, err, sizeof(err)),
                     0);
    assert_int_equal(n, 2);
    assert_int_equal(f[0].kind, MKS_MPK_FAULT_TASK_DELAY);
    assert_int_equal(f[0].cls, silu);
    assert_int_equal(f[0].step_lo, 300);
    assert_int_equal(f[0].step_hi, 304);
    assert_int_equal(f[0].ns, 20000);
    assert_int_equal(f[1].kind, MKS_MPK_FAULT_NOTIFY_DELAY);
    assert_int_equal(f[1].event, 7);
    assert_int_equal(f[1].step_lo, 9);
    assert_int_equal(f[1].step_hi, 9);
    /* a task type name means its first class */
    assert_int_equal(mks_mpk_faults_parse(g, "task-delay:class=TASK_LINEAR_HOPPER,steps=1,ns=1",
                                          f, MKS_MPK_MAX_FAULTS, &n, err, sizeof(err)),
                     0);
    assert_int_equal(f[0].cls, mks_mpk_graph_class(g, "linear_hopper.attn_in"));
    assert_int_equal(mks_mpk_faults_parse(g, "", f, MKS_MPK_MAX_FAULTS, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 0);
    static const struct {
        const char *spec, *says;
        int rc;
    } bad[] = {
        {"task-delay:class=nope,steps=1,ns=1", "no class 'nope'", -EINVAL},
        {"notify-delay:event=23,steps=1,ns=1", "expected an index below 23", -EINVAL},
        {"task-delay:class=begin_task_graph,steps=5-4,ns=1", "A <= B", -EINVAL},
        {"task-delay:class=begin_task_graph,steps=-1,ns=1", "steps '-1'", -EINVAL},
        {"task-delay:class=begin_task_graph,steps=1,ns=0", "ns '0'", -EINVAL},
        {"task-delay:class=begin_task_graph,steps=1,ns=20000000000", "ns '2", -EINVAL},
        {"task-delay:class=begin_task_graph,steps=1", "needs class=C, steps=A-B and ns=N", -EINVAL},
        {"task-delay:event=3,steps=1,ns=1", "unknown key 'event'", -EINVAL},
        {"slow:class=x", "unknown fault 'slow'", -EINVAL},
        {"task-delay", "expected task-delay:class=C", -EINVAL},
        {"task-delay:class", "'class' is not key=value", -EINVAL},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = 0;
        assert_int_equal(mks_mpk_faults_parse(g, bad[i].spec, f, MKS_MPK_MAX_FAULTS, &n, err,
                                              sizeof(err)),
                         bad[i].rc);
        if (!strstr(err, bad[i].says))
            fail_msg("'%s': error '%s' lacks '%s'", bad[i].spec, err, bad[i].says);
    }
    /* more faults than the table holds */
    assert_int_equal(mks_mpk_faults_parse(g, "notify-delay:event=1,steps=1,ns=1;"
                                          "notify-delay:event=2,steps=1,ns=1",
                                          f, 1, &n, err, sizeof(err)),
                     -E2BIG);
    mks_mpk_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classes),
        cmocka_unit_test(test_tiles),
        cmocka_unit_test(test_schema),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_fault_plans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
