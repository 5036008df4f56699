/*
 * Fault plans for MPK's hooked loop (mkscope/mpk_graph.h): parsed and
 * checked against the kernel's task graph on the host, so that a plan that
 * names no class, no event or no step range is refused before any launch.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkscope/mpk_graph.h"

static int refuse(char *err, size_t len, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && len)
        vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return rc;
}

/* "A-B" or "A", decimal */
static int parse_steps(const char *v, uint32_t *lo, uint32_t *hi)
{
    char *end;
    unsigned long a, b;
    if (*v < '0' || *v > '9')
        return -EINVAL;
    a = strtoul(v, &end, 10);
    b = a;
    if (*end == '-') {
        const char *s = end + 1;
        if (*s < '0' || *s > '9')
            return -EINVAL;
        b = strtoul(s, &end, 10);
    }
    if (*end || b < a || b > 0xfffffffful)
        return -EINVAL;
    *lo = (uint32_t)a;
    *hi = (uint32_t)b;
    return 0;
}

static int parse_u64(const char *v, unsigned long long max, unsigned long long *x)
{
    char *end;
    if (*v < '0' || *v > '9')
        return -EINVAL;
    errno = 0;
    *x = strtoull(v, &end, 10);
    return (*end || errno || *x > max) ? -EINVAL : 0;
}

int mks_mpk_faults_parse(const struct mks_mpk_graph *g, const char *spec,
                         struct mks_mpk_fault *out, uint32_t max, uint32_t *n_p, char *err,
                         size_t len)
{
    char buf[1024], *save = NULL;
    uint32_t n = 0;
    if (!g || !out || !n_p)
        return -EINVAL;
    *n_p = 0;
    if (!spec || !*spec)
        return 0;
    if (strlen(spec) >= sizeof(buf))
        return refuse(err, len, -EINVAL, "longer than %zu bytes", sizeof(buf) - 1);
    snprintf(buf, sizeof(buf), "%s", spec);
    for (char *f = strtok_r(buf, ";", &save); f; f = strtok_r(NULL, ";", &save)) {
        struct mks_mpk_fault x;
        char *colon = strchr(f, ':'), *save2 = NULL;
        int have_key = 0, have_steps = 0, have_ns = 0;
        const char *kind;
        memset(&x, 0, sizeof(x));
        if (n == max)
            return refuse(err, len, -E2BIG, "more than %u faults", max);
        if (!colon)
            return refuse(err, len, -EINVAL, "'%s': expected task-delay:class=C,steps=A-B,ns=N "
                          "or notify-delay:event=E,steps=A-B,ns=N", f);
        *colon = 0;
        if (!strcmp(f, "task-delay"))
            x.kind = MKS_MPK_FAULT_TASK_DELAY;
        else if (!strcmp(f, "notify-delay"))
            x.kind = MKS_MPK_FAULT_NOTIFY_DELAY;
        else
            return refuse(err, len, -EINVAL, "unknown fault '%s'; expected task-delay or "
                          "notify-delay", f);
        kind = f;
        for (char *kv = strtok_r(colon + 1, ",", &save2); kv; kv = strtok_r(NULL, ",", &save2)) {
            char *eq = strchr(kv, '=');
            const char *v;
            unsigned long long u;
            if (!eq)
                return refuse(err, len, -EINVAL, "%s: '%s' is not key=value", kind, kv);
            *eq = 0;
            v = eq + 1;
            if (!strcmp(kv, "class") && x.kind == MKS_MPK_FAULT_TASK_DELAY) {
                int c = mks_mpk_graph_class(g, v);
                if (c < 0)
                    return refuse(err, len, -EINVAL, "%s: no class '%s' in the task graph "
                                  "(mkscope-mpk-schema lists them)", kind, v);
                x.cls = (uint32_t)c;
                have_key = 1;
            } else if (!strcmp(kv, "event") && x.kind == MKS_MPK_FAULT_NOTIFY_DELAY) {
                if (parse_u64(v, UINT32_MAX, &u) || u >= g->n_events)
                    return refuse(err, len, -EINVAL, "%s: event '%s': expected an index below "
                                  "%u", kind, v, g->n_events);
                x.event = (uint32_t)u;
                have_key = 1;
            } else if (!strcmp(kv, "steps")) {
                if (parse_steps(v, &x.step_lo, &x.step_hi))
                    return refuse(err, len, -EINVAL, "%s: steps '%s': expected A or A-B with "
                                  "A <= B", kind, v);
                have_steps = 1;
            } else if (!strcmp(kv, "ns")) {
                /* at most 10 s a task: a fault, not a hang */
                if (parse_u64(v, 10000000000ull, &u) || u == 0)
                    return refuse(err, len, -EINVAL, "%s: ns '%s': expected 1..10000000000",
                                  kind, v);
                x.ns = u;
                have_ns = 1;
            } else {
                return refuse(err, len, -EINVAL, "%s: unknown key '%s' (%s)", kind, kv,
                              x.kind == MKS_MPK_FAULT_TASK_DELAY ? "class, steps, ns"
                                                                 : "event, steps, ns");
            }
        }
        if (!have_key || !have_steps || !have_ns)
            return refuse(err, len, -EINVAL, "%s needs %s, steps=A-B and ns=N", kind,
                          x.kind == MKS_MPK_FAULT_TASK_DELAY ? "class=C" : "event=E");
        out[n++] = x;
    }
    *n_p = n;
    return 0;
}
