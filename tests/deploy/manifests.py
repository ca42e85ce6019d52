#!/usr/bin/python3
"""tests/deploy/manifests.py: reads dlserve's deployment files for
tests/deploy/test_manifests.sh and test_alerts.sh. Commands:

  parse FILE...          every YAML document and JSON file loads
  resolve DIR            a kustomization by hand: every resource, base,
                         generator file and patch exists (recursively);
                         prints the resources' documents as one YAML stream
  probes STREAM          one line per Deployment probe: KIND http PATH PORT
                         or KIND grpc SERVICE PORT (SERVICE "" as -), the
                         port resolved to a number through the container's
                         named ports; and `grace GRACE PRESTOP_SLEEP`
  ports STREAM           containerPort, Service targetPort (resolved) and
                         prometheus.io/port, one a line
  grpc-ports STREAM      the gRPC containerPort (port named grpc), the
                         Service's port named grpc and its targetPort
                         (resolved), one a line
  ports-of YAML          NAME:PORT of the first container's ports (a
                         ServingRuntime) or the predictor model's (an
                         InferenceService), one a line
  protocols YAML         a ServingRuntime's protocolVersions, on one line
  grpc-health HOST:PORT [SERVICE]
                         grpc.health.v1 Health/Check: prints the status
                         (SERVING ...); exit 0 for SERVING
  configmap STREAM OUT   dlserve.conf of the ConfigMap to OUT
  env YAML               NAME=VALUE lines of the first container's env
  metrics FILE...        the metric names used in alert rules, Grafana
                         dashboards, ScaledObjects and HPAs
  known METRICS NAME...  names not in a Prometheus text exposition (exit 1)
  alerts RULES OUT       the rules with every `for:` set to 0s
  formats RUNTIME ISVC...  the runtime's model formats on one line, then
                         each InferenceService's format and runtime
"""
import json
import os
import re
import sys

import yaml

METRIC = re.compile(r'\b((?:dlserve|nv|process)_[a-z0-9_]+)\b')


def load_all(path):
    with open(path) as f:
        if path.endswith('.json'):
            return [json.load(f)]
        return [d for d in yaml.safe_load_all(f) if d is not None]


def cmd_parse(paths):
    n = 0
    for p in paths:
        try:
            n += len(load_all(p))
        except (yaml.YAMLError, json.JSONDecodeError) as e:
            sys.exit(f'{p}: {e}')
    print(n)


def resolve(d, out):
    with open(os.path.join(d, 'kustomization.yaml')) as f:
        k = yaml.safe_load(f)
    for r in k.get('resources', []) + k.get('bases', []):
        p = os.path.join(d, r)
        if os.path.isdir(p):
            resolve(p, out)
        elif os.path.isfile(p):
            out.extend(load_all(p))
        else:
            sys.exit(f'{d}/kustomization.yaml: no resource {r}')
    for g in k.get('configMapGenerator', []) + k.get('secretGenerator', []):
        for f in g.get('files', []):
            if not os.path.isfile(os.path.join(d, f.split('=')[-1])):
                sys.exit(f'{d}/kustomization.yaml: no file {f}')
    for p in k.get('patches', []) + k.get('patchesStrategicMerge', []):
        path = p.get('path') if isinstance(p, dict) else p
        if path and not os.path.isfile(os.path.join(d, path)):
            sys.exit(f'{d}/kustomization.yaml: no patch {path}')


def cmd_resolve(d):
    docs = []
    resolve(d, docs)
    yaml.safe_dump_all(docs, sys.stdout)


def docs_of(path, kind):
    return [d for d in load_all(path) if d.get('kind') == kind]


def container(stream):
    dep = docs_of(stream, 'Deployment')[0]
    return dep, dep['spec']['template']['spec']['containers'][0]


def port_number(c, port):
    if isinstance(port, int):
        return port
    return next(p['containerPort'] for p in c.get('ports', []) if p.get('name') == port)


def cmd_probes(stream):
    dep, c = container(stream)
    for kind in ('startupProbe', 'livenessProbe', 'readinessProbe'):
        p = c[kind]
        if 'grpc' in p:
            print(kind, 'grpc', p['grpc'].get('service') or '-', p['grpc']['port'])
        else:
            g = p['httpGet']
            print(kind, 'http', g['path'], port_number(c, g['port']))
    sleep = c['lifecycle']['preStop']['exec']['command']
    print('grace', dep['spec']['template']['spec']['terminationGracePeriodSeconds'],
          sleep[-1] if sleep[0].endswith('sleep') else 0)


def cmd_ports(stream):
    dep, c = container(stream)
    print(port_number(c, 'http'))
    svc = docs_of(stream, 'Service')[0]
    print(port_number(c, svc['spec']['ports'][0]['targetPort']))
    print(dep['spec']['template']['metadata']['annotations']['prometheus.io/port'])


def cmd_grpc_ports(stream):
    _, c = container(stream)
    print(port_number(c, 'grpc'))
    svc = docs_of(stream, 'Service')[0]
    p = next(p for p in svc['spec']['ports'] if p.get('name') == 'grpc')
    print(p['port'])
    print(port_number(c, p['targetPort']))


def cmd_ports_of(path):
    d = load_all(path)[0]
    if d['kind'] == 'InferenceService':
        ports = d['spec']['predictor']['model'].get('ports', [])
    else:
        ports = d['spec']['containers'][0].get('ports', [])
    for p in ports:
        print(f"{p.get('name', '')}:{p['containerPort']}")


def cmd_protocols(path):
    print(' '.join(load_all(path)[0]['spec'].get('protocolVersions', [])))


def cmd_grpc_health(target, service=''):
    """One Check call, the messages encoded by hand: HealthCheckRequest is
    field 1 (service, a string), HealthCheckResponse field 1 (status, an
    enum); no generated code needed."""
    import grpc
    names = {0: 'UNKNOWN', 1: 'SERVING', 2: 'NOT_SERVING', 3: 'SERVICE_UNKNOWN'}
    svc = service.encode()
    req = (b'\x0a' + bytes([len(svc)]) + svc) if svc else b''
    with grpc.insecure_channel(target) as ch:
        check = ch.unary_unary('/grpc.health.v1.Health/Check')
        try:
            res = check(req, timeout=5)
        except grpc.RpcError as e:
            sys.exit(f'{target}: {e.code()} {e.details()}')
    status = res[1] if len(res) >= 2 and res[0] == 0x08 else 0
    print(names.get(status, status))
    sys.exit(0 if status == 1 else 1)


def cmd_configmap(stream, out):
    cm = docs_of(stream, 'ConfigMap')[0]
    with open(out, 'w') as f:
        f.write(cm['data']['dlserve.conf'])


def cmd_env(path):
    c = load_all(path)[0]['spec']['containers'][0]
    for e in c.get('env', []):
        print(f"{e['name']}={e['value']}")


def exprs(doc):
    """Every PromQL string of an alert file, dashboard, ScaledObject or HPA."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in ('expr', 'query', 'definition') and isinstance(v, str):
                yield v
            elif k == 'metric' and isinstance(v, dict) and 'name' in v:
                yield v['name']
            else:
                yield from exprs(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from exprs(v)


def cmd_metrics(paths):
    names = set()
    for p in paths:
        for d in load_all(p):
            for e in exprs(d):
                names.update(METRIC.findall(e))
    print('\n'.join(sorted(names)))


def cmd_known(metrics, names):
    have = set()
    with open(metrics) as f:
        for line in f:
            m = re.match(r'# TYPE (\S+) (\S+)', line)
            if m:
                have.add(m.group(1))
                if m.group(2) == 'histogram':
                    have.update(m.group(1) + s for s in ('_bucket', '_sum', '_count'))
            elif line and not line.startswith('#'):
                have.add(re.split(r'[{ ]', line, 1)[0])
    missing = [n for n in names if n not in have]
    for n in missing:
        print(f'not in /metrics: {n}')
    sys.exit(1 if missing else 0)


def cmd_alerts(rules, out):
    with open(rules) as f:
        doc = yaml.safe_load(f)
    for g in doc['groups']:
        for r in g['rules']:
            r['for'] = '0s'
    with open(out, 'w') as f:
        yaml.safe_dump(doc, f)


def cmd_formats(runtime, services):
    (rt,) = load_all(runtime)
    print(' '.join(f['name'] for f in rt['spec']['supportedModelFormats']))
    for p in services:
        for d in load_all(p):
            m = d['spec']['predictor']['model']
            print(m['modelFormat']['name'], m.get('runtime', ''))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    {'parse': lambda: cmd_parse(args), 'resolve': lambda: cmd_resolve(*args),
     'probes': lambda: cmd_probes(*args), 'ports': lambda: cmd_ports(*args),
     'grpc-ports': lambda: cmd_grpc_ports(*args), 'ports-of': lambda: cmd_ports_of(*args),
     'protocols': lambda: cmd_protocols(*args),
     'grpc-health': lambda: cmd_grpc_health(*args),
     'configmap': lambda: cmd_configmap(*args), 'env': lambda: cmd_env(*args),
     'metrics': lambda: cmd_metrics(args), 'known': lambda: cmd_known(args[0], args[1:]),
     'alerts': lambda: cmd_alerts(*args),
     'formats': lambda: cmd_formats(args[0], args[1:])}[cmd]()


if __name__ == '__main__':
    main()
