/*
 * Per-command help of the mkscope CLI (`mkscope CMD --help`, `mkscope help
 * CMD`).  Which options a command accepts, and what their values must be,
 * is args.c's table, which the collector checks requests against too.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

struct cmd_help {
    const char *name;
    const char *synopsis;
    const char *what;
    const char *options; /* option lines, or NULL */
    const char *examples;
};

static const struct cmd_help cmds[] = {
    {"status", "mkscope status",
     "Per rank of the job: host, agent up or down, epochs stored, last epoch, tasks,\n"
     "coverage, lost summaries, seconds since last heard.",
     NULL, "  mkscope status\n  mkscope status -f json --job llm\n"},
    {"ranks", "mkscope ranks",
     "Per rank details: pid, agent version, workers, seq and acked seq, duplicates,\n"
     "summaries not yet acknowledged.",
     NULL, "  mkscope ranks\n  mkscope ranks -f json\n"},
    {"jobs", "mkscope jobs",
     "The jobs the collector has heard from, the latest first: ranks, agents up\n"
     "(heard from within two heartbeats), summaries stored, when last heard from.\n"
     "Another command asks about the latest unless given --job NAME.",
     NULL, "  mkscope jobs\n  mkscope --job llama70b status\n"},
    {"programs", "mkscope programs",
     "Programs attached on each rank, from the agents' heartbeats: name, hook,\n"
     "program generation, worst-case cost.",
     NULL, "  mkscope programs\n  mkscope programs -f json\n"},
    {"query", "mkscope query QUERY",
     "Aggregates over the stored summaries, with the coverage of the epochs read\n"
     "(docs/query.md). A syntax error points at the offending token (exit 2).",
     NULL,
     "  mkscope query 'count(task) by class where rank = 1'\n"
     "  mkscope query 'p99(run), mean(queue) by class where step >= 30' -f json\n"
     "  mkscope query 'max(remote_wait) by rank, peer where time > -60s'\n"},
    {"sql", "mkscope sql 'SELECT ...'",
     "One read-only SQL statement on the store (schema in docs/collector.md).", NULL,
     "  mkscope sql 'SELECT rank, COUNT(*) FROM epochs GROUP BY rank'\n"},
    {"diagnose",
     "mkscope diagnose [--step N | --steps A-B | --last N] [--slow F] [--min-coverage R]"
     " [--min-steps N]",
     "Root cause of each group of slow steps, and of each straggler (a rank its\n"
     "peers wait on step after step): remote stall, local scheduler imbalance,\n"
     "slow task class, slow rank, late notification or slow transfer, with the\n"
     "root rank, task class, generation, the share of the delay the cause\n"
     "explains and the runner-up, the evidence, the chain of waits and the\n"
     "coverage; undecided, naming both, when two causes come close.\n"
     "-f json prints one JSON object per group, one per line.",
     "  --step N           only step N\n"
     "  --steps A-B        only steps A to B\n"
     "  --last N           only the last N steps\n"
     "  --slow F           a step is slow above (1 + F) x the median [0.2]\n"
     "  --min-coverage R   below this share of observed events: undecided [0.5]\n"
     "  --min-steps N      leave out groups of fewer slow steps (counted) [1]\n",
     "  mkscope diagnose\n  mkscope diagnose -f json\n  mkscope diagnose --step 37\n"
     "  mkscope diagnose --last 1000 --min-steps 3\n"},
    {"waitchain", "mkscope waitchain [--step N | --steps A-B | --last N] [-f text|dot|json]",
     "The chains of the diagnosis as a tree of waits across ranks; -f dot writes a\n"
     "Graphviz graph.",
     "  --step N           only step N\n"
     "  --steps A-B, --last N, --slow F, --min-coverage R, --min-steps N   as for\n"
     "                     diagnose\n",
     "  mkscope waitchain\n  mkscope waitchain --step 37 -f dot | dot -Tsvg > chain.svg\n"},
    {"attach",
     "mkscope attach OBJ.bpf.o | --builtin NAME [--name N] [--hook H] [--replace OLD]"
     " [--ranks all|0,2] [--wait MS]",
     "Attach a BPF object (verified here first, exactly as an agent will) or a\n"
     "built-in monitor on some or all ranks while the job runs. Waits until every\n"
     "rank replied and shows each agent's verdict, cost (worst-case instructions per\n"
     "run), new program generation and the time taken. Exit 1 when any rank\n"
     "rejected it or did not answer.",
     "  --builtin NAME     a monitor the agents ship (count, latency, depwait, queue, genprog)\n"
     "  --name N           program name [the object's file name]\n"
     "  --hook H           hook to attach at [from the object's sections]\n"
     "  --replace OLD      swap the attached program OLD for this one, at each hook in\n"
     "                     one step: every event runs the old or the new program\n"
     "  --ranks all|LIST   ranks to attach on [all]\n"
     "  --wait MS          how long to wait for the agents' replies [10000]\n",
     "  mkscope attach monitor.bpf.o --ranks all\n"
     "  mkscope attach --builtin latency --ranks 0,2\n"
     "  mkscope attach --builtin count --name count --replace latency\n"},
    {"detach", "mkscope detach NAME [--ranks all|0,2] [--wait MS]",
     "Detach a program by name on some or all ranks; waits for the agents' replies.",
     "  --ranks all|LIST   ranks [all]\n  --wait MS          [10000]\n",
     "  mkscope detach monitor\n  mkscope detach latency --ranks 1\n"},
    {"probe",
     "mkscope probe 'AGG(FIELD), ... [by FIELD, ...] [where PREDICATE]' [--for D] [--ranks R]\n"
     "              [--groups N] [--max-cost N] [--dry-run] [--interval S] | --id N",
     "Ask the running kernel a new question: aggregates (count, sum, mean, min, max, hist,\n"
     "p50, p90, p99) over hook context fields, grouped by context fields, under a\n"
     "predicate of the query language (docs/query.md, docs/probes.md). The collector\n"
     "compiles it to one verified program per hook it needs, refuses one above the\n"
     "instruction budget, attaches it on every named rank for the window and merges\n"
     "what each epoch brings back across ranks; the answer is printed live and when the\n"
     "window ends, with eligible, observed, throttled, lost, overflowed and unknown\n"
     "events and the time it ran on each rank. Derived fields: run and queue (task_end),\n"
     "wait (dep_wait_end: from this worker's dep_wait_begin), channel and comm_op (of a\n"
     "communication generation). Ctrl-C stops it at the ranks' next epoch. Exit 1 when\n"
     "a rank refused it or never sent its end.",
     "  --for D            how long it stays attached (10s, 5m; at most 1h) [10s]\n"
     "  --ranks R          all, or ranks such as 0,2 [all]\n"
     "  --groups N         groups one epoch of one rank keeps apart [256]; the rest\n"
     "                     are counted, and aggregated together as (other)\n"
     "  --max-cost N       instructions per event a program may cost [1000]\n"
     "  --dry-run          show the programs (disassembled), their cost and maps; send\n"
     "                     nothing\n"
     "  --interval S       seconds between live answers [1] (each rank's first result\n"
     "                     is shown as it comes)\n"
     "  --id N             follow (or show again) probe N\n",
     "  mkscope probe 'count() by dep_event where event = dep_wait_end and wait > 20us' --for 10s\n"
     "  mkscope probe 'hist(run) by class where req_gen = 1842'\n"
     "  mkscope probe 'sum(run) by tile_x where class = expert.3 and step >= 500'\n"
     "  mkscope probe 'p99(wait), count() by channel, peer' --dry-run\n"
     "  mkscope probe --id 4 -f json\n"},
    {"maps", "mkscope maps PROG/MAP [--ranks R] [--sum]",
     "A map of a monitor of your own (mkscope attach OBJ.bpf.o), as the agents sent it\n"
     "with their summaries, decoded with the object's own BTF types: structs by member,\n"
     "enums by name, char arrays as text, no hex. PROG is the program's name as mkscope\n"
     "programs lists it (its attach name, or name/function), MAP the map's name in the\n"
     "object. The maps are per epoch: each rank's newest epoch is shown, or with --sum\n"
     "every integer of a key added up over the rank's stored epochs (a counter's total).\n"
     "Without BTF (an object built without -g, a built-in monitor) the entries are\n"
     "shown in hex with a note saying why. Exit 4 when there is no such program or\n"
     "map, or no dump of it yet (the error lists what there is).",
     "  --ranks R          all, or ranks such as 0,2 [all]\n"
     "  --sum              add each key's integers up over every stored epoch\n",
     "  mkscope maps classrun/by_class\n"
     "  mkscope maps classrun/by_class --sum -f json\n"
     "  mkscope maps classrun/by_class --ranks 0\n"},
    {"top", "mkscope top [--interval S] [--iterations N] [--once]",
     "A live view refreshed every interval: per rank agent state, epochs, tasks,\n"
     "and p99 run time, mean queue time and task count of the last 5 s. q or\n"
     "Ctrl-C quits.",
     "  --interval S       seconds between refreshes [1]\n"
     "  --iterations N     stop after N refreshes\n"
     "  --once             one refresh, no screen clearing (scripts, tests)\n",
     "  mkscope top\n  mkscope top --interval 0.5\n  mkscope top --once\n"},
    {"trigger", "mkscope trigger add 'SLO' [--hold-off D] [--probe 'PROBE' [--probe-for D]] | list | rm ID",
     "SLO triggers, evaluated per rank over what arrived each second; one that fires\n"
     "escalates the ranks over the line to a narrow raw trace, then only counts its\n"
     "firings until its hold-off has passed (docs/collector.md). With --probe it\n"
     "starts that probe on those ranks instead (and the ranks their waits lead to),\n"
     "for --probe-for: a question asked only while the SLO is at risk; mkscope probe\n"
     "--id N (N from trigger list's last_probe) follows its answer (docs/probes.md).",
     "  --hold-off D       escalate again only D after an escalation (90s, 5m, 1h)\n"
     "                     [the collector's --trigger-hold-off, 5m]\n"
     "  --probe PROBE      start this probe when it fires, not a raw trace\n"
     "  --probe-for D      the probe's window (1s to 1h) [10s]\n",
     "  mkscope trigger add 'p99(step) > 2ms where step >= 10'\n"
     "  mkscope trigger add 'max(step) > 10ms' --probe 'hist(run) by class' --probe-for 5s\n"
     "  mkscope trigger add 'max(run) > 5ms where class = \"attention\"' --hold-off 1m\n"
     "  mkscope trigger add 'remote_wait(rank = 3) > 20us'\n"
     "  mkscope trigger list\n  mkscope trigger rm 2\n"},
    {"trace", "mkscope trace list | export [--escalation ID] [--as perfetto|json] [-o FILE]",
     "list: the job's escalations, each with the trigger that asked, the ranks asked\n"
     "and how many took it, the events, dropped events and batches that arrived, and\n"
     "whether every rank sent its last batch.\n"
     "export: the raw events of an escalation (the latest by default) as a trace: one track\n"
     "per rank and worker, slices per task, wait and transfer, flow arrows for remote\n"
     "dependencies. Chrome JSON, or Perfetto's protobuf format with --as perfetto or\n"
     "an -o FILE ending in .pftrace or .perfetto-trace.",
     "  --escalation ID    which escalation [the latest]\n"
     "  --as perfetto|json output format [json, or from the file name]\n",
     "  mkscope trace list\n"
     "  mkscope trace export -o trace.json\n"
     "  mkscope trace export -o trace.pftrace\n"
     "  mkscope trace export --escalation 4294967297 --as perfetto -o t.pb\n"},
    {"survey", "mkscope survey [status|coverage|programs|maps] [DEADLINE_MS]",
     "Ask every agent live, now, with a deadline [1000 ms]; lists the answers and\n"
     "the registered ranks that did not answer in time.",
     NULL, "  mkscope survey\n  mkscope survey coverage 500 -f json\n"},
    {"metrics", "mkscope metrics", "The collector's Prometheus metrics as text.", NULL,
     "  mkscope metrics | grep coverage\n"},
    {"verify", "mkscope verify [-v] OBJ.bpf.o...",
     "Verify BPF objects locally, exactly as an agent would: one verdict with the\n"
     "worst-case cost per program, or the rejection with the instruction at fault.\n"
     "Needs no collector.",
     "  -v                 the verifier's log\n", "  mkscope verify monitor.bpf.o\n"},
};

static const struct cmd_help *find(const char *name)
{
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        if (!strcmp(cmds[i].name, name))
            return &cmds[i];
    return NULL;
}

int mks_cli_help(FILE *f, const char *cmd)
{
    const struct cmd_help *h = find(cmd);
    if (!h)
        return -1;
    fprintf(f, "usage: %s\n\n%s\n", h->synopsis, h->what);
    if (h->options)
        fprintf(f, "\nOPTIONS\n%s", h->options);
    fprintf(f, "\nCOMMON OPTIONS\n"
               "  --collector URL, -f text|json, --job NAME, --timeout MS, --key FILE, -o FILE\n"
               "  (see mkscope --help)\n");
    fprintf(f, "\nEXAMPLES\n%s", h->examples);
    return 0;
}
