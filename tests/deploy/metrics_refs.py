#!/usr/bin/env python3
"""Check that every PromQL expression of the Grafana dashboard and the
Prometheus alert rules names metrics a live collector serves, with labels
those metrics carry.

usage: metrics_refs.py METRICS_TEXT DASHBOARD.json RULES.yaml

A metric name in an expression must be a series name present in the
exposition with at least one sample (histogram names with _bucket, _sum or
_count); every label an expression groups or filters by must be on some
series of the metrics it reads ('le' only where it reads a _bucket).  Prints
one line per problem and exits 1 if there is any."""
import json
import re
import sys

import yaml

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')


def exposition(path):
    series = {}  # name -> set of label names
    for line in open(path, encoding='utf-8'):
        if line.startswith('#') or not line.strip():
            continue
        m = LINE.match(line)
        if not m:
            sys.exit(f'metrics_refs: cannot read exposition line: {line.strip()}')
        names = set(LABEL.findall(m.group(2) or ''))
        series.setdefault(m.group(1), set()).update(names)
    return series


def exprs(dashboard, rules):
    out = []
    d = json.load(open(dashboard, encoding='utf-8'))
    for p in d.get('panels', []):
        for t in p.get('targets', []):
            out.append((f'dashboard panel "{p.get("title")}"', t['expr']))
    for v in d.get('templating', {}).get('list', []):
        q = v.get('definition')
        if q:
            m = re.match(r'label_values\((.*),\s*([a-z_]+)\)$', q)
            if not m:
                sys.exit(f'metrics_refs: variable {v["name"]}: cannot read {q}')
            out.append((f'dashboard variable {v["name"]}', f'{m.group(1)} by ({m.group(2)})'))
    r = yaml.safe_load(open(rules, encoding='utf-8'))
    for g in r['groups']:
        for rule in g['rules']:
            out.append((f'rule {rule.get("alert") or rule.get("record")}', rule['expr']))
    return out


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    series = exposition(sys.argv[1])
    problems = 0
    checked = 0
    for where, e in exprs(sys.argv[2], sys.argv[3]):
        names = set(re.findall(r'\bmkscope_[a-zA-Z0-9_]+', e))
        if not names:
            print(f'{where}: no mkscope metric in {e!r}')
            problems += 1
            continue
        labels = set()
        for n in names:
            if n not in series:
                print(f'{where}: {n} is not served (no sample on /metrics)')
                problems += 1
                continue
            labels |= series[n]
            checked += 1
        used = set()
        for grp in re.findall(r'\b(?:by|without)\s*\(([^)]*)\)', e):
            used |= {x.strip() for x in grp.split(',') if x.strip()}
        for sel in re.findall(r'\{([^}]*)\}', e):
            used |= set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)', sel))
        for lb in sorted(used - labels):
            print(f'{where}: label {lb!r} is on none of {sorted(names)}')
            problems += 1
    if problems:
        sys.exit(1)
    print(f'ok: {checked} metric references, every one served with its labels')


main()
