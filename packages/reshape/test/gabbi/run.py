"""Runs Placement's own functional tests (gabbi YAML files) against @rigging/reshape/http.

Usage: /usr/bin/python3 test/gabbi/run.py [--target ours|placement] <placement git dir> [file ...]
       (from packages/reshape)

The YAML files are read from a clone of openstack/placement (placement/tests/functional/gabbits)
and copied to a temporary directory; they are not part of this repository. For each file a fresh
server (bench/serve.ts, memory store, tokens checked as Placement's noauth2 middleware checks
them) is started with os-traits' standard traits (Debian's
python3-os-traits, as Placement syncs them into its database), the state of the file's fixture is
created over HTTP, the fixture's $ENVIRON values are set, and gabbi-run (python3-gabbi) runs the
file.
With `--target placement` the same files run, on the same harness, against OpenStack Placement
itself (Debian's python3-placement, bench/placement_server.py: a fresh SQLite database per file,
noauth2), so that both counts are measured alike.
Prints one line per file (tests, passed, failed), then one a test (passed or FAIL, its method,
URL and name) and, under each failure, why (gabbi's first line) and the error code we answered;
scripts/gabbi-parity.py reads that output.
"""
import json
import os
import socket
import re
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request
import uuid

import os_traits
import yaml

# The files of the endpoints we implement (RBAC/policy, CORS and granular/nested-candidate files
# test features we do not have).
FILES = [
    'aggregate', 'allocation-bad-class', 'allocations', 'allocations-1-8', 'allocations-1-12',
    'allocations-1.28', 'allocations-bug-1714072', 'allocations-bug-1778591',
    'allocations-bug-1778743', 'allocations-bug-1779717', 'allocations-post', 'basic-http',
    'bug-1674694', 'confirm-auth', 'consumer-types-1.38', 'consumer-types-bug-story-2009167',
    'ensure-consumer', 'inventory', 'microversion', 'microversion-bug-1724065', 'non-cors',
    'reshaper', 'resource-class-in-use', 'resource-classes', 'resource-classes-1-6',
    'resource-classes-1-7', 'resource-classes-last-modified', 'resource-provider',
    'resource-provider-aggregates', 'resource-provider-bug-1779818',
    'resource-provider-duplication', 'resource-provider-links',
    'resource-provider-resources-query', 'shared-resources', 'traits', 'unicode', 'usage',
    'with-allocations',
]


def api_fixture_environ():
    """The values Placement's APIFixture puts in the environment."""
    env = {k: str(uuid.uuid4()) for k in [
        'RP_UUID', 'RP_NAME', 'RP_UUID1', 'RP_NAME1', 'RP_UUID2', 'RP_NAME2', 'PROJECT_ID',
        'ADMIN_PROJECT_ID', 'SERVICE_PROJECT_ID', 'USER_ID', 'PROJECT_ID_ALT', 'USER_ID_ALT',
        'INSTANCE_UUID', 'MIGRATION_UUID', 'CONSUMER_UUID', 'PARENT_PROVIDER_UUID',
        'ALT_PARENT_PROVIDER_UUID']}
    env.update(CUSTOM_RES_CLASS='CUSTOM_IRON_NFV', CUSTOM_RES_CLASS1='CUSTOM_IRON_NFV1',
               CUSTOM_RES_CLASS2='CUSTOM_IRON_NFV2')
    return env


def call(base, method, path, body=None):
    req = urllib.request.Request(
        base + path, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={'x-auth-token': 'admin', 'openstack-api-version': 'placement 1.28',
                 'content-type': 'application/json'})
    with urllib.request.urlopen(req) as res:
        text = res.read()
        return json.loads(text) if text else None


def allocation_fixture(base, env):
    """Placement's AllocationFixture: one provider, three consumers of two users."""
    env.update(ALT_USER_ID=str(uuid.uuid4()), CONSUMER_0=str(uuid.uuid4()),
               CONSUMER_ID=str(uuid.uuid4()), ALT_CONSUMER_ID=str(uuid.uuid4()),
               ALT_RP_UUID=str(uuid.uuid4()), ALT_RP_NAME=str(uuid.uuid4()))
    rp = env['RP_UUID']
    call(base, 'POST', '/resource_providers', {'name': env['RP_NAME'], 'uuid': rp})
    # Two inventory writes, as the fixture's two add_inventory calls: generation 2 after them.
    call(base, 'POST', f'/resource_providers/{rp}/inventories', {
        'resource_provider_generation': 0, 'resource_class': 'DISK_GB', 'total': 2048,
        'step_size': 10, 'min_unit': 10, 'max_unit': 1000})
    call(base, 'POST', f'/resource_providers/{rp}/inventories', {
        'resource_provider_generation': 1, 'resource_class': 'VCPU', 'total': 10,
        'max_unit': 10})
    for consumer, user, resources in [
            ('CONSUMER_0', 'USER_ID', {'DISK_GB': 1000}),
            ('CONSUMER_ID', 'USER_ID', {'VCPU': 6}),
            ('ALT_CONSUMER_ID', 'ALT_USER_ID', {'DISK_GB': 20, 'VCPU': 1})]:
        call(base, 'PUT', f'/allocations/{env[consumer]}', {
            'allocations': {rp: {'resources': resources}}, 'project_id': env['PROJECT_ID'],
            'user_id': env[user], 'consumer_generation': None})


def write_standard_traits(tmp):
    """os-traits' names, one a line, for bench/serve.ts."""
    path = os.path.join(tmp, 'standard-traits.txt')
    with open(path, 'w') as f:
        f.write(''.join(f'{name}\n' for name in os_traits.get_traits()))
    return path


def start_server(traits_file):
    proc = subprocess.Popen(['npx', 'tsx', 'bench/serve.ts', 'memory', traits_file, '--noauth2'],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    line = proc.stdout.readline()
    port = int(line.split()[1])
    return proc, f'http://127.0.0.1:{port}'


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def start_placement(tmp, name):
    """Placement 8.0 on a fresh SQLite database (its standard traits and classes synced at start)."""
    port = free_port()
    proc = subprocess.Popen(['/usr/bin/python3', 'bench/placement_server.py',
                             os.path.join(tmp, f'placement-{name}'), str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    for line in proc.stdout:  # its database migrations log first
        if line.startswith('listening'):
            break
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        sys.exit('Placement did not start (is python3-placement installed?)')
    # Keep reading its log, so that a full pipe never blocks it.
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc, f'http://127.0.0.1:{port}'


def run_file(git_dir, name, tmp, traits_file, target):
    text = subprocess.run(
        ['git', '--git-dir', git_dir, 'show',
         f'HEAD:placement/tests/functional/gabbits/{name}.yaml'],
        check=True, capture_output=True, text=True).stdout
    path = os.path.join(tmp, f'{name}.yaml')
    with open(path, 'w') as f:
        f.write(text)
    proc, base = start_placement(tmp, name) if target == 'placement' else start_server(traits_file)
    try:
        env = api_fixture_environ()
        if re.search(r'^\s*-\s*AllocationFixture', text, re.M):
            allocation_fixture(base, env)
        with open(path) as stdin:
            out = subprocess.run(['gabbi-run', base], stdin=stdin, capture_output=True,
                                 text=True, env={**os.environ, **env})
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the server (and the tsx parent of ours)
        proc.wait()
    report = out.stdout + out.stderr
    ran = re.search(r'Ran (\d+) test', report)
    total = int(ran.group(1)) if ran else 0
    return total, verdicts(text, report), report


METHODS = ('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS')


def verdicts(text, report):
    """Each test of the file, in the file's order: a dict of its name, method, url (as written
    in the YAML), whether it passed and, if not, gabbi's first line of why (a status, a string
    not found, a JSON path value, a header) and the error code of our answer, when it has one."""
    # gabbi-run prints a mark a test, in order (✓ passed, ✗ failed, E error), then a block per
    # failure: "FAIL: <name>[: <desc>]" and gabbi's message, tab-indented.
    marks = re.findall(r'^\.\.\. (\S+) gabbi-runner\.input_', report, re.M)
    blocks = {}
    for m in re.finditer(r'^(?:FAIL|ERROR): gabbi-runner\.input_(.+)\n((?:\t.*\n?)*)', report,
                         re.M):
        body = m.group(2)
        code = re.search(r'"code": "([^"]+)"', body)
        blocks[m.group(1).split(': ')[0].strip()] = (
            body.split('\n')[0].strip(), code.group(1) if code else None)
    tests = (yaml.safe_load(text) or {}).get('tests') or []
    out = []
    for test, mark in zip(tests, marks):
        method = next((m for m in METHODS if m in test), None)
        url = test[method] if method else test.get('url', '')
        key = str(test.get('name', '')).lower().replace(' ', '_')
        why, code = blocks.get(key, (None, None))
        paths = test.get('response_json_paths') or {}
        out.append({'name': test.get('name', ''), 'method': method or test.get('method', 'GET'),
                    'url': str(url), 'passed': mark == '✓', 'why': why, 'code': code,
                    'expected_code': paths.get('$.errors[0].code')})
    return out


def main():
    args = sys.argv[1:]
    target = 'ours'
    if args[:1] == ['--target']:
        target, args = args[1], args[2:]
    if target not in ('ours', 'placement') or not args:
        sys.exit(__doc__)
    git_dir = args[0]
    files = args[1:] or FILES
    head = subprocess.run(['git', '--git-dir', git_dir, 'rev-parse', 'HEAD'], check=True,
                          capture_output=True, text=True).stdout.strip()
    print(f'target: {target}; placement commit: {head}', flush=True)
    all_total = all_failed = 0
    with tempfile.TemporaryDirectory(prefix='rigging-gabbi-') as tmp:
        traits_file = write_standard_traits(tmp)
        for name in files:
            total, tests, report = run_file(git_dir, name, tmp, traits_file, target)
            failed = [t for t in tests if not t['passed']]
            if len(tests) != total:
                sys.exit(f'{name}: gabbi ran {total} tests, the file has {len(tests)} read')
            all_total += total
            all_failed += len(failed)
            print(f'{name}: {total} tests, {total - len(failed)} passed, {len(failed)} failed',
                  flush=True)
            for t in tests:
                print(f"  {'pass' if t['passed'] else 'FAIL'}: {t['method']} {t['url']} :: {t['name']}")
                if not t['passed']:
                    print(f"    why: {t['why']}")
                    print(f"    code: {t['code']}; expected: {t['expected_code']}")
            if os.environ.get('GABBI_VERBOSE'):
                print(report)
    print(f'total: {all_total} tests, {all_total - all_failed} passed, {all_failed} failed')


if __name__ == '__main__':
    main()
