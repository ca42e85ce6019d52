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
  validate SCHEMAS FILE...  every document of the files against the
                         upstream schema of its apiVersion and kind in the
                         folder SCHEMAS, strict, and dlserve's own rules
                         (tests/deploy/schemas/README.md); a kind without
                         a schema fails; kustomize's Kustomization is skipped
  kserve-runtime YAML    KServe reads prometheus.kserve.io/* from
                         spec.annotations, none under metadata; autoSelect
                         for the dlserve format only
  prometheusrule RULES   the rules file as a PrometheusRule, to stdout
  same-rules RULES PR    the PrometheusRule's groups are the rules file's
  runbooks RULES DOC BASE  every alert's runbook_url is BASE#anchor, a
                         heading of DOC; no relative `runbook`
  claims STREAM          the PersistentVolumeClaims (NAME MODES), the
                         claims of the Deployment (deployment CLAIM SUBPATH
                         MOUNT) and of the MPIJob (mpijob CLAIM MOUNT)
  train-args STREAM      the MPIJob's ranks (-n, then Worker replicas x
                         slotsPerWorker) on one line, then the arguments
                         of dlserve under mpirun, one a line
  kafka-trigger STREAM   bootstrapServers, consumerGroup and topic of the
                         ScaledObject's kafka trigger, one a line
  netpol STREAM          ingress PORT/PROTO (named ports resolved through
                         the Deployment's container) on one line, egress
                         PORT/PROTO on another, over every NetworkPolicy
                         selecting the Deployment's pods
  spread STREAM          the topologyKeys of the Deployment's
                         topologySpreadConstraints whose selector matches
                         its pod labels, sorted, on one line
  adapter VALUES         the metric names prometheus-adapter's rules expose
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
            if k in ('expr', 'query', 'definition', 'seriesQuery', 'metricsQuery') \
                    and isinstance(v, str):
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


# ---- validate: the upstream schemas of tests/deploy/schemas ----
# The extracts (tests/deploy/schemas/README.md) hold Kubernetes' OpenAPI v3
# components and the CRDs' openAPIV3Schema as published. OpenAPI's schema
# objects are not quite JSON Schema: as_json_schema applies, at load time,
# the conversions that kubeconform's openapi2jsonschema applies, so that
# python3-jsonschema (Debian 12: 4.10) reads them as the API server does.

OBJECT_META = 'io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta'
BRANCHES = ('allOf', 'anyOf', 'oneOf', 'not', 'if', 'then', 'else')


def as_json_schema(schema, closable=True, name=''):
    """A converted copy of an OpenAPI schema object:
    - int-or-string (format: int-or-string, x-kubernetes-int-or-string:
      true) admits an integer or a string; a Quantity a string or a
      number (the API server reads 1, "1" and "500m");
    - nullable: true admits null too;
    - strict mode (kubeconform's -strict): an object schema that lists
      properties admits no others (additionalProperties: false), unless
      it gives additionalProperties or x-kubernetes-preserve-unknown-fields,
      so that a misspelt or misplaced field fails. Branches (allOf, anyOf,
      oneOf, not) only add constraints to fields listed beside them: they
      stay open, as does a schema beside a $ref."""
    if isinstance(schema, list):
        return [as_json_schema(s, closable) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k in ('properties', 'patternProperties', 'definitions'):
            out[k] = {p: as_json_schema(s) for p, s in v.items()}
        elif k in ('items', 'additionalProperties'):
            out[k] = as_json_schema(v)
        elif k in BRANCHES:
            out[k] = as_json_schema(v, False)
        elif k in ('enum', 'default', 'example', 'required') or k.startswith('x-'):
            out[k] = v
        else:
            out[k] = as_json_schema(v, closable)
    # Where the two types are not already spelt out (oneOf, anyOf).
    alternatives = 'oneOf' in out or 'anyOf' in out
    if (out.get('format') == 'int-or-string' or out.get('x-kubernetes-int-or-string')) \
            and not alternatives:
        out['type'] = ['integer', 'string']
    if name.endswith('.pkg.api.resource.Quantity') and not alternatives:
        out['type'] = ['string', 'number']
    if out.get('nullable') is True:
        if 'type' in out:
            t = out['type']
            out['type'] = (t if isinstance(t, list) else [t]) + ['null']
            if 'enum' in out:
                out['enum'] = out['enum'] + [None]
        else:
            out = {'anyOf': [{'type': 'null'}, out]}
    if closable and 'properties' in out and 'additionalProperties' not in out \
            and '$ref' not in out and not out.get('x-kubernetes-preserve-unknown-fields'):
        out['additionalProperties'] = False
    return out


class Schemas:
    """The extracts of a folder: by (apiVersion, kind), the file, the
    converted schema and the document its $refs resolve in (None for a
    CRD's); by trigger type, the file and the KEDA scaler's metadata keys."""

    def __init__(self, folder):
        self.kinds, self.scalers = {}, {}
        self.meta = None
        for name in sorted(os.listdir(folder)):
            if not name.endswith('.json'):
                continue
            with open(os.path.join(folder, name)) as f:
                doc = json.load(f)
            if 'components' in doc:
                self.load_openapi(name, doc)
            elif 'versions' in doc:
                for version, schema in doc['versions'].items():
                    key = (f"{doc['group']}/{version}", doc['kind'])
                    self.kinds[key] = (name, as_json_schema(schema), None)
            elif 'triggers' in doc:
                for t in doc['triggers']:
                    self.scalers[t] = (name, doc['metadata'])

    def load_openapi(self, name, doc):
        schemas = {n: as_json_schema(s, name=n) for n, s in doc['components']['schemas'].items()}
        root = {'components': {'schemas': schemas}}
        own = re.match(r'kubernetes-(.*)-([^-]*)\.json$', name)
        group = '' if own.group(1) == 'core' else own.group(1)
        for n, s in schemas.items():
            for gvk in s.get('x-kubernetes-group-version-kind', []):
                if (gvk['group'], gvk['version']) == (group, own.group(2)):
                    av = f"{group}/{gvk['version']}" if group else gvk['version']
                    self.kinds[(av, gvk['kind'])] = (name, {'$ref': f'#/components/schemas/{n}'},
                                                     root)
        if OBJECT_META in schemas and self.meta is None:
            self.meta = (name, {'$ref': f'#/components/schemas/{OBJECT_META}'}, root)

    @staticmethod
    def errors(entry, doc, prefix=()):
        import warnings
        import jsonschema
        warnings.simplefilter('ignore', DeprecationWarning)
        _, schema, root = entry
        resolver = jsonschema.RefResolver('', root) if root else None
        # OpenAPI 3.0's schema objects are JSON Schema draft 5 (Wright 00),
        # which Draft4Validator reads: a $ref's siblings are ignored.
        v = jsonschema.Draft4Validator(schema, resolver=resolver)
        for e in sorted(v.iter_errors(doc), key=lambda e: [str(x) for x in e.absolute_path]):
            path = '.'.join(str(x) for x in list(prefix) + list(e.absolute_path)) or '(top)'
            yield path, e.message

    def check(self, doc):
        """(path, message) of every fault of DOC: its kind's schema, a
        custom resource's metadata against ObjectMeta (the API server
        checks it, the CRDs leave it open), and dlserve's own rules."""
        key = (doc.get('apiVersion'), doc.get('kind'))
        if key not in self.kinds:
            yield '(top)', f'no schema for {key[0]} {key[1]}'
            return
        entry = self.kinds[key]
        yield from self.errors(entry, doc)
        if entry[2] is None and self.meta and isinstance(doc.get('metadata'), dict):
            yield from self.errors(self.meta, doc['metadata'], ('metadata',))
        yield from own_rules(self, doc)


KSERVE_KEYS = re.compile(r'^(prometheus|serving)\.kserve\.io/')


def own_rules(schemas, doc):
    """Rules of dlserve's own, beyond the schemas (README.md)."""
    kind, spec = doc.get('kind'), doc.get('spec') or {}
    if kind == 'ServingRuntime':
        # KServe reads these from spec.annotations (and copies them onto
        # the pods): under the runtime's metadata they reach no pod.
        for k in (doc.get('metadata') or {}).get('annotations') or {}:
            if KSERVE_KEYS.match(k):
                yield 'metadata.annotations', f'{k}: KServe reads it from spec.annotations'
        for i, f in enumerate(spec.get('supportedModelFormats') or []):
            if 'priority' in f and f.get('autoSelect') is not True:
                yield f'spec.supportedModelFormats.{i}', \
                    f"{f.get('name')}: a priority needs autoSelect: true"
    elif kind == 'ScaledObject':
        # KEDA's trigger metadata is a map of strings in its CRD: the keys
        # are those the trigger's scaler reads (KEDA logs the others when
        # KEDA_CHECK_UNEXPECTED_SCALERS_PARAMS=enabled, and ignores them).
        for i, t in enumerate(spec.get('triggers') or []):
            where = f'spec.triggers.{i}.metadata'
            if t.get('type') not in schemas.scalers:
                yield where, f"no scaler keys for trigger type {t.get('type')} (update.py SCALERS)"
                continue
            keys = schemas.scalers[t['type']][1]
            meta = t.get('metadata') or {}
            for k, v in meta.items():
                base = k[:-len('FromEnv')] if k.endswith('FromEnv') else None
                if k in keys:
                    if 'enum' in keys[k] and v not in keys[k]['enum']:
                        yield where, f"{k}: {v!r} is not one of {keys[k]['enum']}"
                elif not (base in keys and keys[base].get('fromEnv')):
                    yield where, f"{k}: not a key of KEDA's {t['type']} scaler"
            for k, p in keys.items():
                if p.get('required') and k not in meta and k + 'FromEnv' not in meta:
                    yield where, f"{k}: required by KEDA's {t['type']} scaler"


def cmd_validate(folder, paths):
    schemas = Schemas(folder)
    errors = n = 0
    for p in paths:
        for d in load_all(p):
            if d.get('kind') == 'Kustomization':
                continue
            where = f"{p}: {d.get('kind')} {(d.get('metadata') or {}).get('name', '?')}"
            for path, message in schemas.check(d):
                print(f'{where}: {path}: {message}')
                errors += 1
            n += 1
    print(f'{n} documents, {errors} errors')
    sys.exit(1 if errors else 0)


def cmd_kserve_runtime(path):
    (rt,) = load_all(path)
    bad = []
    meta = rt['metadata'].get('annotations', {})
    spec = rt['spec'].get('annotations', {})
    if any(k.startswith('prometheus.kserve.io/') for k in meta):
        bad.append('prometheus.kserve.io/* under metadata.annotations (KServe ignores them)')
    for k in ('prometheus.kserve.io/port', 'prometheus.kserve.io/path'):
        if k not in spec:
            bad.append(f'no {k} in spec.annotations')
    port = rt['spec']['containers'][0]['ports'][0]['containerPort']
    if str(spec.get('prometheus.kserve.io/port')) != str(port):
        bad.append(f'prometheus.kserve.io/port is not the container port {port}')
    auto = {f['name']: f.get('autoSelect', False) for f in rt['spec']['supportedModelFormats']}
    if auto != {'dlserve': True, 'onnx': False}:
        bad.append(f'autoSelect {auto}: wanted dlserve true, onnx false')
    for b in bad:
        print(f'{path}: {b}')
    sys.exit(1 if bad else 0)


def read_rules(rules):
    with open(rules) as f:
        return yaml.safe_load(f)


PR_HEADER = """\
# prometheusrule.yaml: conf/prometheus/dlserve-alerts.yml as a PrometheusRule
# for the Prometheus operator (kube-prometheus-stack selects it by the
# label release). Generated, not edited: after a change to the rules,
#   tests/deploy/manifests.py prometheusrule conf/prometheus/dlserve-alerts.yml \\
#     > deploy/k8s/overlays/monitoring/prometheusrule.yaml
# (tests/deploy/test_alerts.sh checks that the two agree).
"""


def cmd_prometheusrule(rules):
    pr = {'apiVersion': 'monitoring.coreos.com/v1', 'kind': 'PrometheusRule',
          'metadata': {'name': 'dlserve', 'labels': {'release': 'kube-prometheus-stack'}},
          'spec': {'groups': read_rules(rules)['groups']}}
    print(PR_HEADER, end='')
    yaml.safe_dump(pr, sys.stdout, sort_keys=False, width=100)


def cmd_same_rules(rules, pr):
    (doc,) = load_all(pr)
    sys.exit(0 if doc['spec']['groups'] == read_rules(rules)['groups'] else 1)


def anchors(doc):
    """GitHub's heading anchors: lower case, punctuation but - and _
    dropped, spaces to -."""
    out = set()
    with open(doc) as f:
        for line in f:
            m = re.match(r'#+\s+(.*)', line)
            if m:
                a = re.sub(r'[^\w\- ]', '', m.group(1).strip().lower()).replace(' ', '-')
                out.add(a)
    return out


def cmd_runbooks(rules, doc, base):
    have = anchors(doc)
    bad = []
    for g in read_rules(rules)['groups']:
        for r in g['rules']:
            if 'alert' not in r:
                continue
            a = r.get('annotations', {})
            url = a.get('runbook_url', '')
            if 'runbook' in a:
                bad.append(f"{r['alert']}: a relative runbook: {a['runbook']}")
            if not url.startswith(base + '#'):
                bad.append(f"{r['alert']}: runbook_url {url!r} is not {base}#...")
            elif url.split('#', 1)[1] not in have:
                bad.append(f"{r['alert']}: no heading #{url.split('#', 1)[1]} in {doc}")
    for b in bad:
        print(b)
    sys.exit(1 if bad else 0)


def claim_of(volumes, name):
    v = next(v for v in volumes if v['name'] == name)
    return v['persistentVolumeClaim']['claimName']


def cmd_claims(stream):
    docs = load_all(stream)
    for d in docs:
        if d['kind'] == 'PersistentVolumeClaim':
            print(d['metadata']['name'], ','.join(d['spec']['accessModes']))
        elif d['kind'] == 'Deployment':
            pod = d['spec']['template']['spec']
            for m in pod['containers'][0].get('volumeMounts', []):
                v = next(v for v in pod['volumes'] if v['name'] == m['name'])
                if 'persistentVolumeClaim' in v:
                    print('deployment', v['persistentVolumeClaim']['claimName'],
                          m.get('subPath', '-'), m['mountPath'])
        elif d['kind'] == 'MPIJob':
            for role in d['spec']['mpiReplicaSpecs'].values():
                pod = role['template']['spec']
                for c in pod['containers']:
                    for m in c.get('volumeMounts', []):
                        v = next(v for v in pod['volumes'] if v['name'] == m['name'])
                        if 'persistentVolumeClaim' in v:
                            print('mpijob', v['persistentVolumeClaim']['claimName'],
                                  m['mountPath'])


def cmd_train_args(stream):
    job = next(d for d in load_all(stream) if d['kind'] == 'MPIJob')
    spec = job['spec']
    c = spec['mpiReplicaSpecs']['Launcher']['template']['spec']['containers'][0]
    args = c['args']
    n = args[args.index('-n') + 1]
    print(n, spec['mpiReplicaSpecs']['Worker']['replicas'] * spec.get('slotsPerWorker', 1))
    at = next(i for i, a in enumerate(args) if a.endswith('/dlserve'))
    print('\n'.join(args[at + 1:]))


def cmd_kafka_trigger(stream):
    so = next(d for d in load_all(stream) if d['kind'] == 'ScaledObject')
    t = next(t for t in so['spec']['triggers'] if t['type'] == 'kafka')['metadata']
    print(t['bootstrapServers'], t['consumerGroup'], t['topic'], sep='\n')


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.get('matchLabels', {}).items())


def cmd_netpol(stream):
    docs = load_all(stream)
    dep, c = container(stream)
    labels = dep['spec']['template']['metadata']['labels']
    ins, outs = set(), set()
    for d in docs:
        if d['kind'] != 'NetworkPolicy' or not selects(d['spec']['podSelector'], labels):
            continue
        for rule in d['spec'].get('ingress', []):
            for p in rule.get('ports', []):
                ins.add(f"{port_number(c, p['port'])}/{p.get('protocol', 'TCP')}")
        for rule in d['spec'].get('egress', []):
            for p in rule.get('ports', []):
                outs.add(f"{p['port']}/{p.get('protocol', 'TCP')}")
    print(' '.join(sorted(ins)))
    print(' '.join(sorted(outs)))


def cmd_spread(stream):
    dep, _ = container(stream)
    pod = dep['spec']['template']
    keys = [t['topologyKey'] for t in pod['spec'].get('topologySpreadConstraints', [])
            if selects(t.get('labelSelector', {}), pod['metadata']['labels'])]
    print(' '.join(sorted(keys)))


def cmd_adapter(values):
    (doc,) = load_all(values)
    for r in doc['rules']['custom']:
        print(r['name'].get('as') or r['name']['matches'].strip('^$'))


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
     'formats': lambda: cmd_formats(args[0], args[1:]),
     'validate': lambda: cmd_validate(args[0], args[1:]),
     'kserve-runtime': lambda: cmd_kserve_runtime(*args),
     'prometheusrule': lambda: cmd_prometheusrule(*args),
     'same-rules': lambda: cmd_same_rules(*args), 'runbooks': lambda: cmd_runbooks(*args),
     'claims': lambda: cmd_claims(*args), 'train-args': lambda: cmd_train_args(*args),
     'kafka-trigger': lambda: cmd_kafka_trigger(*args), 'netpol': lambda: cmd_netpol(*args),
     'spread': lambda: cmd_spread(*args), 'adapter': lambda: cmd_adapter(*args)}[cmd]()


if __name__ == '__main__':
    main()
