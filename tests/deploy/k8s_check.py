#!/usr/bin/env python3
"""Check the Kubernetes manifests of deploy/k8s against the Kubernetes API
schema and against the programs they run.

usage: k8s_check.py K8S_DIR COLLECTOR_BIN AGENT_BIN NODE_AGENT_SCRIPT BENCH_BIN

Schema: with the Kubernetes Python client installed (Debian's
python3-kubernetes), every object of a core kind is walked against the
client's generated models (the API's OpenAPI types): an unknown field or a
value of the wrong type is an error.  Without it, and for the
ServiceMonitor (a CRD), a structural check of the fields used.  Then the
cross-checks a cluster would only show at run time: Service selectors and
target ports, probe ports and paths, Secrets and claims that the
manifests name, the collector's security defaults (a key, the CLI on
loopback, retention, metrics scraped), and every option given to
mkscope-collector, mkscope-agent, mkscope-node-agent and mkscope-bench being
one the program's --help lists.  Prints each problem; exit 1 if any."""
import glob
import os
import re
import shlex
import subprocess
import sys

import yaml

problems = []


def bad(where, msg):
    problems.append(f'{where}: {msg}')


try:
    import kubernetes.client as kc
except ImportError:
    kc = None

KINDS = {('v1', 'Service'): 'V1Service', ('v1', 'PersistentVolumeClaim'): 'V1PersistentVolumeClaim',
         ('v1', 'Secret'): 'V1Secret', ('apps/v1', 'Deployment'): 'V1Deployment',
         ('apps/v1', 'DaemonSet'): 'V1DaemonSet', ('batch/v1', 'Job'): 'V1Job'}
PRIMS = {'str': str, 'int': int, 'bool': bool, 'float': (int, float)}


def walk(where, value, typ):
    """value against the client's type string typ."""
    if typ in ('object',):
        return
    if typ in PRIMS:
        ok = isinstance(value, PRIMS[typ]) and not (typ == 'int' and isinstance(value, bool))
        # int-or-string fields (ports, quantities) are typed 'object' or 'str'
        if not ok:
            bad(where, f'{value!r} is not {typ}')
        return
    m = re.match(r'list\[(.*)\]$', typ)
    if m:
        if not isinstance(value, list):
            bad(where, f'expected a list, got {type(value).__name__}')
            return
        for i, v in enumerate(value):
            walk(f'{where}[{i}]', v, m.group(1))
        return
    m = re.match(r'dict\((.*), (.*)\)$', typ)
    if m:
        if not isinstance(value, dict):
            bad(where, 'expected a map')
            return
        for k, v in value.items():
            walk(f'{where}.{k}', v, m.group(2))
        return
    cls = getattr(kc, typ, None)
    if cls is None:
        bad(where, f'unknown schema type {typ}')
        return
    if not isinstance(value, dict):
        bad(where, f'expected an object ({typ})')
        return
    by_json = {j: a for a, j in cls.attribute_map.items()}
    for k, v in value.items():
        if k not in by_json:
            bad(where, f'unknown field {k!r} in {typ}')
            continue
        walk(f'{where}.{k}', v, cls.openapi_types[by_json[k]])


def structural(where, doc):
    for k in ('apiVersion', 'kind', 'metadata'):
        if k not in doc:
            bad(where, f'no {k}')
    if not (doc.get('metadata') or {}).get('name'):
        bad(where, 'no metadata.name')


def help_options(binary, *args):
    out = subprocess.run([binary, *args, '--help'], capture_output=True, text=True, check=False)
    return set(re.findall(r'(?<![\w-])(--[a-z][a-z0-9-]*)', out.stdout + out.stderr))


def options_of(argv):
    return [a.split('=', 1)[0] for a in argv if a.startswith('--') and a != '--']


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    k8s, coll, agent, node_agent, bench = sys.argv[1:]
    known = {'mkscope-collector': help_options(coll), 'mkscope-agent': help_options(agent),
             'mkscope-node-agent': help_options(node_agent), 'mkscope-bench': help_options(bench, 'run')}
    docs = []
    for f in sorted(glob.glob(os.path.join(k8s, '*.yaml'))):
        for i, d in enumerate(yaml.safe_load_all(open(f, encoding='utf-8'))):
            if d:
                docs.append((f'{os.path.basename(f)}#{i} {d.get("kind")}/{(d.get("metadata") or {}).get("name")}', d))
    schema = 'the Kubernetes client\'s API models' if kc else 'a structural check (python3-kubernetes not installed)'
    pods = []  # (where, template metadata labels, pod spec)
    for where, d in docs:
        structural(where, d)
        key = (d.get('apiVersion'), d.get('kind'))
        if kc and key in KINDS:
            walk(where, d, KINDS[key])
        elif d.get('kind') == 'ServiceMonitor':
            sp = d.get('spec') or {}
            if not (sp.get('selector') or {}).get('matchLabels'):
                bad(where, 'no spec.selector.matchLabels')
            for e in sp.get('endpoints') or [bad(where, 'no endpoints')] or []:
                for k in e:
                    if k not in ('port', 'path', 'interval', 'honorLabels', 'scheme', 'scrapeTimeout'):
                        bad(where, f'endpoint field {k!r} unknown')
                if e.get('honorLabels') is not True:
                    bad(where, 'honorLabels must be true (the series carry their own job label)')
        elif key not in KINDS:
            bad(where, f'unexpected kind {key}')
        spec = d.get('spec') or {}
        tpl = spec.get('template')
        if tpl:
            pods.append((where, (tpl.get('metadata') or {}).get('labels') or {}, tpl.get('spec') or {},
                         (tpl.get('metadata') or {}).get('annotations') or {}))

    claims = {d['metadata']['name'] for _, d in docs if d.get('kind') == 'PersistentVolumeClaim'}
    for where, labels, ps, ann in pods:
        vols = {v['name']: v for v in ps.get('volumes') or []}
        for v in vols.values():
            if 'secret' in v and v['secret'].get('secretName') != 'mkscope-key':
                bad(where, f'volume {v["name"]}: secret {v["secret"].get("secretName")} is not mkscope-key')
            if 'persistentVolumeClaim' in v and v['persistentVolumeClaim']['claimName'] not in claims:
                bad(where, f'volume {v["name"]}: no claim {v["persistentVolumeClaim"]["claimName"]}')
        for c in ps.get('containers') or []:
            cw = f'{where} container {c.get("name")}'
            ports = {p.get('name'): p.get('containerPort') for p in c.get('ports') or []}
            for m in c.get('volumeMounts') or []:
                if m['name'] not in vols:
                    bad(cw, f'mounts volume {m["name"]} that the pod does not have')
            for pr in ('readinessProbe', 'livenessProbe'):
                g = (c.get(pr) or {}).get('httpGet')
                if g:
                    if g.get('port') not in ports and g.get('port') not in ports.values():
                        bad(cw, f'{pr} port {g.get("port")} is not a container port')
                    if g.get('path') not in ('/healthz', '/metrics'):
                        bad(cw, f'{pr} path {g.get("path")} is not served')
            argv = list(c.get('command') or []) + list(c.get('args') or [])
            if argv[:2] == ['sh', '-c']:
                argv = shlex.split(' '.join(argv[2:]).replace('exec ', '', 1))
            prog = os.path.basename(argv[0]) if argv else ''
            if prog == 'mkscope-bench':
                argv = argv[1:]  # the subcommand
            if prog == 'mkscope-node-agent' and '--' in argv:
                cut = argv.index('--')
                own, rest = argv[:cut], argv[cut + 1:]
                for o in options_of(rest):
                    if o not in known['mkscope-agent']:
                        bad(cw, f'mkscope-agent has no option {o}')
                argv = own
            if prog in known:
                for o in options_of(argv[1:]):
                    if o not in known[prog]:
                        bad(cw, f'{prog} has no option {o}')
            if prog in ('mkscope-agent', 'mkscope-node-agent', 'mkscope-collector'):
                if not any(a.startswith('--key') for a in (c.get('args') or []) + argv) and \
                        '--key' not in ' '.join(c.get('args') or []):
                    bad(cw, f'{prog} runs without --key')
            if prog == 'mkscope-collector':
                opts = dict(a.split('=', 1) for a in argv[1:] if a.startswith('--') and '=' in a)
                if not opts.get('--cli', '').startswith('tcp://127.0.0.1:'):
                    bad(cw, f'the CLI listens on {opts.get("--cli")}, not loopback')
                if '--max-age' not in opts and '--max-epochs' not in opts:
                    bad(cw, 'no retention (--max-age, --max-epochs)')
                mport = opts.get('--metrics', ':').rsplit(':', 1)[1]
                if ann.get('prometheus.io/scrape') != 'true' or ann.get('prometheus.io/port') != mport:
                    bad(cw, f'pod not annotated for scraping port {mport}')
                if ports.get('ucx') != int(opts.get('--ucx-port', '-1')):
                    bad(cw, 'no container port ucx for --ucx-port')
                svc = [d for _, d in docs if d.get('kind') == 'Service' and
                       (d.get('spec') or {}).get('selector', {}).items() <= labels.items()]
                if not svc:
                    bad(cw, 'no Service selects the collector')
                for s in svc:
                    names = {p['name']: p for p in s['spec']['ports']}
                    for need in ('ingest', 'survey', 'metrics', 'ucx'):
                        if need not in names:
                            bad(f'Service {s["metadata"]["name"]}', f'no {need} port')
                    for p in names.values():
                        tp = p.get('targetPort', p.get('port'))
                        if tp not in ports and tp not in ports.values():
                            bad(f'Service {s["metadata"]["name"]}', f'targetPort {tp} not on the pod')
                    if 'cli' in names:
                        bad(f'Service {s["metadata"]["name"]}', 'exposes the CLI socket')
                    for _, m in docs:
                        if m.get('kind') == 'ServiceMonitor':
                            if not m['spec']['selector']['matchLabels'].items() <= s['metadata'].get('labels', {}).items():
                                bad('ServiceMonitor', 'does not select the collector Service')
                            for e in m['spec']['endpoints']:
                                if e['port'] not in names:
                                    bad('ServiceMonitor', f'port {e["port"]} not on the Service')
    for p in problems:
        print(p)
    if problems:
        sys.exit(1)
    print(f'ok: {len(docs)} objects checked with {schema}, and against the programs\' options')


main()
