#!/usr/bin/python3
"""Writes the README's Placement parity section from two runs of test/gabbi/run.py: one against
our server, one against OpenStack Placement 8.0 (Debian's python3-placement), same harness and
same files.

Usage (from packages/reshape):
  /usr/bin/python3 test/gabbi/run.py <placement git dir> > test/gabbi/last-run.txt
  /usr/bin/python3 test/gabbi/run.py --target placement <placement git dir> \\
      > test/gabbi/last-run-placement.txt
  /usr/bin/python3 scripts/gabbi-parity.py test/gabbi/last-run.txt \\
      test/gabbi/last-run-placement.txt [README.md]

Prints every test we fail, with what differed: the status (ours and Placement's), a value or a
header, or only a message text (same status; the error code compared when the test checks one).
With README.md, replaces the text between `<!-- gabbi-parity:start -->` and
`<!-- gabbi-parity:end -->` with the counts per endpoint and per file and that list. Nothing in
the section is written by hand; a run that read no results, or runs of different file lists,
Placement commits or test counts, are refused.
"""
import re
import sys

START, END = '<!-- gabbi-parity:start -->', '<!-- gabbi-parity:end -->'


def parse(path):
    text = open(path).read()
    head = re.search(r'^target: (\w+); placement commit: (\w+)$', text, re.M)
    if not head:
        sys.exit(f'{path}: not the output of test/gabbi/run.py')
    files, current, test = [], None, None
    for line in text.splitlines():
        m = re.match(r'^([\w.-]+): (\d+) tests, (\d+) passed, (\d+) failed$', line)
        if m and m.group(1) != 'total':
            current = {'name': m.group(1), 'tests': []}
            files.append(current)
            continue
        m = re.match(r'^  (pass|FAIL): (\S+) (.*?) :: (.*)$', line)
        if m and current is not None:
            test = {'passed': m.group(1) == 'pass', 'method': m.group(2), 'url': m.group(3),
                    'name': m.group(4), 'why': '', 'code': None, 'expected_code': None}
            current['tests'].append(test)
            continue
        m = re.match(r'^    why: (.*)$', line)
        if m and test is not None:
            test['why'] = m.group(1)
            continue
        m = re.match(r'^    code: (\S+); expected: (\S+)$', line)
        if m and test is not None:
            test['code'] = None if m.group(1) == 'None' else m.group(1)
            test['expected_code'] = None if m.group(2) == 'None' else m.group(2)
    if not files or not any(f['tests'] for f in files):
        sys.exit(f'{path}: no results in the run output: nothing to write')
    return {'target': head.group(1), 'commit': head.group(2), 'files': files}


def endpoint(url):
    """The endpoint a test's URL names, as in the README's tables."""
    if url.startswith('$'):
        return '(a URL from an earlier answer)'
    segs = [s for s in url.split('?')[0].split('/') if s]
    named = {'resource_providers': '{uuid}', 'traits': '{name}', 'resource_classes': '{name}',
             'allocations': '{consumer}'}
    if not segs:
        return '/'
    if segs[0] in ('usages', 'allocation_candidates', 'reshaper') and len(segs) == 1:
        return f'/{segs[0]}'
    if segs[0] in named and len(segs) <= 2:
        return '/' + segs[0] + ('' if len(segs) == 1 else f'/{named[segs[0]]}')
    if segs[0] == 'resource_providers' and len(segs) == 3:
        return f'/resource_providers/{{uuid}}/{segs[2]}'
    if segs[0] == 'resource_providers' and len(segs) == 4 and segs[2] == 'inventories':
        return '/resource_providers/{uuid}/inventories/{rc}'
    return '(a path not served: 404 expected)'


def kind(t):
    """What differed, in words, and whether only a message text did."""
    why = t['why']
    m = re.match(r"^'(\d{3})' not found in \['(\d{3})'\]", why)
    if m:
        return f'status: ours {m.group(1)}, Placement {m.group(2)}', False
    m = re.search(r'Unable to match (\S+) as', why)
    if m:
        return f"value of {m.group(1).replace('`', '')}", False
    if why.startswith('unable to replace'):
        return 'needs a value from an earlier test that failed', False
    m = re.match(r'^(.+) != (.+)$', why)
    if m:
        return f'value: ours {m.group(2)}, Placement {m.group(1)}'.replace('|', '\\|'), False
    if 'header' in why.lower():
        return 'a header', False
    if re.search(r"not found in [\[{]", why) or 'not found in' in why:
        if t['expected_code'] and t['code'] != t['expected_code']:
            return f"message text, and code `{t['code']}` (Placement `{t['expected_code']}`)", False
        checked = 'same code' if t['expected_code'] else 'code not checked by the test'
        return f'message text only (same status; {checked})', True
    return 'other: ' + why.replace('|', '\\|')[:80], False


def check_same_runs(ours, placement):
    if ours['target'] != 'ours' or placement['target'] != 'placement':
        sys.exit('give the run against our server first, then the one against Placement')
    if ours['commit'] != placement['commit']:
        sys.exit('the two runs read different Placement commits')
    a = [(f['name'], len(f['tests'])) for f in ours['files']]
    b = [(f['name'], len(f['tests'])) for f in placement['files']]
    if a != b:
        sys.exit('the two runs ran different files or tests')


def section(ours, placement):
    pl_files = {f['name']: f for f in placement['files']}
    failures, by_endpoint, rows = [], {}, []
    total = ours_passed = pl_passed = text_only = 0
    for f in ours['files']:
        pf = pl_files[f['name']]
        op = sum(t['passed'] for t in f['tests'])
        pp = sum(t['passed'] for t in pf['tests'])
        rows.append(f"| {f['name']} | {len(f['tests'])} | {op} | {pp} |")
        total += len(f['tests'])
        ours_passed += op
        pl_passed += pp
        for t, pt in zip(f['tests'], pf['tests']):
            e = by_endpoint.setdefault(endpoint(t['url']), [0, 0, 0])
            e[0] += 1
            e[1] += t['passed']
            e[2] += pt['passed']
            if not t['passed']:
                what, only_text = kind(t)
                text_only += only_text
                placement_note = '' if pt['passed'] else ' (Placement fails it too)'
                failures.append(f"| {f['name']} | {t['name']} | {t['method']} "
                                f"`{endpoint(t['url'])}` | {what}{placement_note} |")
    out = [
        f"Placement commit `{ours['commit'][:12]}` (gabbi files), {len(ours['files'])} files, "
        f'{total} tests: **{ours_passed} pass against this server, {pl_passed} against Placement '
        f'8.0** on the same harness. Of our {total - ours_passed} failures, {text_only} differ '
        f'only in a message text.',
        '',
        '| endpoint (as the tests name it) | gabbi tests | pass here | pass on Placement 8.0 |',
        '| --- | ---: | ---: | ---: |',
    ]
    for name in sorted(by_endpoint):
        n, op, pp = by_endpoint[name]
        out.append(f'| `{name}` | {n} | {op} | {pp} |')
    out += ['', '| gabbi file | tests | pass here | pass on Placement 8.0 |',
            '| --- | ---: | ---: | ---: |', *rows,
            f'| **total** ({len(rows)} files) | **{total}** | **{ours_passed}** | **{pl_passed}** |',
            '', 'Every test failing here, and what differs:', '',
            '| gabbi file | test | request | difference |', '| --- | --- | --- | --- |',
            *failures]
    return '\n'.join(out)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    ours, placement = parse(sys.argv[1]), parse(sys.argv[2])
    check_same_runs(ours, placement)
    pl_files = {f['name']: f for f in placement['files']}
    for f in ours['files']:
        for t, pt in zip(f['tests'], pl_files[f['name']]['tests']):
            if not t['passed']:
                what, _ = kind(t)
                note = '' if pt['passed'] else ' (Placement fails it too)'
                print(f"{f['name']}: {t['name']}: {t['method']} {endpoint(t['url'])}: {what}{note}")
    if len(sys.argv) > 3:
        path = sys.argv[3]
        readme = open(path).read()
        if START not in readme or END not in readme:
            sys.exit(f'{path} has no {START} … {END} markers')
        before, rest = readme.split(START, 1)
        after = rest.split(END, 1)[1]
        open(path, 'w').write(f'{before}{START}\n\n{section(ours, placement)}\n\n{END}{after}')


if __name__ == '__main__':
    main()
