#!/usr/bin/python3
"""Writes the README's gabbi parity table from the output of test/gabbi/run.py.

Usage: /usr/bin/python3 test/gabbi/run.py <placement git dir> > gabbi.txt
       /usr/bin/python3 scripts/gabbi-parity.py gabbi.txt [README.md]
Prints the remaining failures (file and test name), then replaces the text between
`<!-- gabbi-parity:start -->` and `<!-- gabbi-parity:end -->` in the README with a table of the
run's counts per file. Nothing in the table is written by hand.
"""
import re
import sys

START, END = '<!-- gabbi-parity:start -->', '<!-- gabbi-parity:end -->'


def parse(text):
    files, current = [], None
    for line in text.splitlines():
        m = re.match(r'^([\w.-]+): (\d+) tests, (\d+) passed, (\d+) failed$', line)
        if m and m.group(1) != 'total':
            current = {'name': m.group(1), 'tests': int(m.group(2)), 'passed': int(m.group(3)),
                       'failed': []}
            files.append(current)
            continue
        m = re.match(r'^  failed: gabbi-runner\.input_(\S+)$', line)
        if m and current is not None:
            current['failed'].append(m.group(1))
    if not files:
        sys.exit('no results in the run output: nothing to write')
    return files


def table(files):
    tests = sum(f['tests'] for f in files)
    passed = sum(f['passed'] for f in files)
    rows = ['| gabbi file | tests | passed |', '| --- | ---: | ---: |']
    rows += [f"| {f['name']} | {f['tests']} | {f['passed']} |" for f in files]
    rows.append(f'| **total** ({len(files)} files) | **{tests}** | **{passed}** |')
    return '\n'.join(rows)


def main():
    files = parse(open(sys.argv[1]).read())
    for f in files:
        for name in f['failed']:
            print(f"{f['name']}: {name}")
    if len(sys.argv) > 2:
        path = sys.argv[2]
        readme = open(path).read()
        if START not in readme or END not in readme:
            sys.exit(f'{path} has no {START} … {END} markers')
        before, rest = readme.split(START, 1)
        after = rest.split(END, 1)[1]
        open(path, 'w').write(f'{before}{START}\n{table(files)}\n{END}{after}')


if __name__ == '__main__':
    main()
