#!/usr/bin/python3
"""tests/deploy/schemas/update.py: rewrites the schema extracts of this
folder from the upstream projects' published documents. Run by hand when
a manifest starts using a new kind or an upstream version is to change;
the tests only read what it wrote (README.md says which sources, how).

  update.py [--out DIR] (--git GITDIR --repo OWNER/NAME --rev REV
            [--note TEXT] PATH...)...

Each --git starts a group of PATHs, read from the git repository GITDIR
at REV (a tag, branch or commit). The "source" field of each file
written records OWNER/NAME, the commit that REV names, REV, PATH and
NOTE, so that an extract always says where its schemas come from.
A PATH is one of:

  an OpenAPI v3 document of Kubernetes (components.schemas, as
  api/openapi-spec/v3/*.json): written as kubernetes-GROUP-VERSION.json,
  the components whose x-kubernetes-group-version-kind is a kind of
  KINDS and every component they reach through $ref, unmodified;

  a CustomResourceDefinition (YAML): written as crd-PLURAL.GROUP.json,
  the openAPIV3Schema of each version of KINDS, unmodified;

  a KEDA scaler's Go source (pkg/scalers/*_scaler.go): written as
  keda-scaler-TYPE.json, the trigger metadata keys that its `keda:"..."`
  field tags declare (name, required, enum), for the triggers of SCALERS.
"""
import json
import os
import re
import subprocess
import sys

import yaml

# The kinds that dlserve's files use (deploy/, conf/cluster/, and the
# ConfigMap that kustomize generates), by apiVersion.
KINDS = {
    'v1': ['ConfigMap', 'PersistentVolumeClaim', 'Secret', 'Service'],
    'apps/v1': ['Deployment'],
    'autoscaling/v2': ['HorizontalPodAutoscaler'],
    'policy/v1': ['PodDisruptionBudget'],
    'networking.k8s.io/v1': ['NetworkPolicy'],
    'keda.sh/v1alpha1': ['ScaledObject', 'TriggerAuthentication'],
    'monitoring.coreos.com/v1': ['PrometheusRule', 'ServiceMonitor'],
    'kubeflow.org/v2beta1': ['MPIJob'],
    'serving.kserve.io/v1alpha1': ['ServingRuntime'],
    'serving.kserve.io/v1beta1': ['InferenceService'],
}

# The KEDA trigger types each scaler source file implements and that
# dlserve's ScaledObjects use.
SCALERS = {'kafka_scaler.go': ['kafka'], 'cpu_memory_scaler.go': ['cpu']}


def api_version(group, version):
    return f'{group}/{version}' if group else version


def refs(schema, out):
    if isinstance(schema, dict):
        for k, v in schema.items():
            if k == '$ref' and isinstance(v, str):
                out.add(v.rsplit('/', 1)[1])
            else:
                refs(v, out)
    elif isinstance(schema, list):
        for v in schema:
            refs(v, out)


def openapi_extract(doc, source):
    """The document of one group version (its paths say which, /api/v1/
    or /apis/GROUP/VERSION/) also holds the kinds of others that its own
    reach (apps/v1 a PersistentVolumeClaim): those are taken from their
    own group version's document."""
    first = min(doc['paths'])
    m = re.match(r'/apis/([^/]+)/([^/]+)/', first) or re.match(r'/api/()([^/]+)/', first)
    group, version = m.groups()
    schemas = doc['components']['schemas']
    roots = [name for name, s in schemas.items()
             for gvk in s.get('x-kubernetes-group-version-kind', [])
             if (gvk['group'], gvk['version']) == (group, version)
             and gvk['kind'] in KINDS.get(api_version(group, version), [])]
    if not roots:
        sys.exit(f"{source['path']}: no kind of KINDS in {api_version(group, version)}")
    seen, reached = set(), roots     # reached: names not yet followed
    while reached:
        name = reached.pop()
        if name not in seen:
            seen.add(name)
            more = set()
            refs(schemas[name], more)
            reached.extend(more)
    out = {'source': source, 'components': {'schemas': {n: schemas[n] for n in seen}}}
    return f"kubernetes-{group or 'core'}-{version}.json", out, ('components', 'schemas')


def crd_extract(doc, source):
    spec = doc['spec']
    kind = spec['names']['kind']
    versions = {v['name']: v['schema']['openAPIV3Schema'] for v in spec['versions']
                if kind in KINDS.get(api_version(spec['group'], v['name']), [])}
    if not versions:
        sys.exit(f"{source['path']}: no version of {spec['group']} {kind} in KINDS")
    out = {'source': source, 'group': spec['group'], 'kind': kind, 'versions': versions}
    return f"crd-{spec['names']['plural']}.{spec['group']}.json", out, ('versions',)


def scaler_extract(text, source):
    """KEDA's typed scaler configuration (pkg/scalers/scalersconfig/
    typed_config.go): a tag name=A;B,order=triggerMetadata;resolvedEnv;
    authParams,optional,default=X,enum=P;Q,deprecated=MSG. A key that
    the trigger's metadata may hold has triggerMetadata in its order
    (resolvedEnv: KEYFromEnv too); it is required there when it is not
    optional, has no default and cannot come from a TriggerAuthentication
    (authParams); a deprecated key is refused by KEDA."""
    keys = {}
    for tag in re.findall(r'`keda:"([^"]*)"`', text):
        p = {}
        for part in tag.split(','):
            k, _, v = part.strip().partition('=')
            p[k.strip()] = v.strip()
        order = [o.strip() for o in p.get('order', '').split(';')]
        if 'name' not in p or 'triggerMetadata' not in order or 'deprecated' in p:
            continue
        for name in p['name'].split(';'):
            key = {}
            if 'optional' not in p and 'default' not in p and 'authParams' not in order:
                key['required'] = True
            if 'resolvedEnv' in order:
                key['fromEnv'] = True
            if 'enum' in p:
                key['enum'] = p['enum'].split(';')
            keys[name] = key
    triggers = SCALERS[os.path.basename(source['path'])]
    out = {'source': source, 'triggers': triggers, 'metadata': keys}
    return f'keda-scaler-{triggers[0]}.json', out, ('metadata',)


def write(path, doc, where):
    """Compact JSON: "source" first, then the other keys sorted, and one
    schema a line under WHERE (a diff after an update shows which
    schemas changed)."""
    def dump(v):
        return json.dumps(v, sort_keys=True, separators=(',', ':'), ensure_ascii=False)
    inner = doc
    for k in where:
        inner = inner[k]
    body = '{\n' + ',\n'.join(f'{dump(k)}:{dump(inner[k])}' for k in sorted(inner)) + '\n}'
    outer = json.loads(json.dumps(doc))
    node = outer
    for k in where[:-1]:
        node = node[k]
    node[where[-1]] = '@@INNER@@'
    rest = dump({k: v for k, v in outer.items() if k != 'source'})
    text = '{"source":' + dump(doc['source']) + ',\n' + rest[1:].replace('"@@INNER@@"', body)
    with open(path, 'w') as f:
        f.write(text + '\n')
    return len(text.encode()) + 1


def git(gitdir, *args):
    return subprocess.run(['git', '--git-dir', gitdir, *args], check=True,
                          capture_output=True, text=True).stdout


def main():
    out = os.path.dirname(os.path.abspath(__file__))
    cur = {}
    args = sys.argv[1:]
    if not args or args[0] in ('-h', '--help'):
        sys.exit(__doc__)
    while args:
        arg = args.pop(0)
        if arg in ('--out', '--git', '--repo', '--rev', '--note'):
            if not args:
                sys.exit(f'{arg} needs a value')
            if arg == '--out':
                out = args.pop(0)
                continue
            if arg == '--git':
                cur = {}
            cur[arg[2:]] = args.pop(0)
            cur.pop('commit', None)
            continue
        if not all(k in cur for k in ('git', 'repo', 'rev')):
            sys.exit(f'{arg}: --git, --repo and --rev must come first')
        if 'commit' not in cur:
            cur['commit'] = git(cur['git'], 'rev-parse', cur['rev'] + '^{commit}').strip()
        text = git(cur['git'], 'show', f"{cur['commit']}:{arg}")
        source = {'repo': cur['repo'], 'commit': cur['commit'], 'path': arg}
        if cur['rev'] != cur['commit']:
            source['ref'] = cur['rev']
        if cur.get('note'):
            source['note'] = cur['note']
        if arg.endswith('.go'):
            name, doc, where = scaler_extract(text, source)
        elif arg.endswith('.json'):
            name, doc, where = openapi_extract(json.loads(text), source)
        else:
            name, doc, where = crd_extract(yaml.safe_load(text), source)
        size = write(os.path.join(out, name), doc, where)
        print(f"{name}: {size} bytes from {cur['repo']} {arg}")


if __name__ == '__main__':
    main()
