"""The same work as bench/index.ts, with OpenStack TaskFlow. Prints one JSON object per case."""
import contextlib, json, os, sys, tempfile, time, uuid, logging
logging.disable(logging.CRITICAL)
from taskflow import engines, task
from taskflow.patterns import linear_flow as lf, graph_flow as gf
from taskflow.persistence import backends, models


class Noop(task.Task):
    def execute(self):
        return None

    def revert(self, *args, **kwargs):
        return None


class Boom(task.Task):
    def execute(self):
        raise RuntimeError('boom')


class Provide(task.Task):
    def execute(self):
        return 1


class Mid(task.Task):
    def execute(self, x):
        return x


class Join(task.Task):
    def execute(self, *args, **kwargs):
        return None


def linear(n, fail=False):
    f = lf.Flow('f')
    f.add(*[Noop('t%d' % i) for i in range(n - 1 if fail else n)])
    if fail:
        f.add(Boom('boom'))
    return f


def fanout(n):
    f = gf.Flow('g')
    mids = ['m%d' % i for i in range(n - 2)]
    f.add(Provide('start', provides='x'))
    f.add(*[Mid(m, provides=m) for m in mids])
    f.add(Join('end', requires=mids))
    return f


def timed(name, n, build, **kw):
    flow = build()
    eng = engines.load(flow, **kw)
    t0 = time.perf_counter()
    try:
        eng.run()
    except Exception:
        pass
    dt = time.perf_counter() - t0
    print(json.dumps({'case': name, 'n': n, 'seconds': dt, 'per_s': n / dt}), flush=True)


sizes = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
d = tempfile.mkdtemp()
for n in sizes.get('linear', []):
    timed('linear-memory', n, lambda: linear(n), engine='serial')
for n in sizes.get('sqlite', []):
    path = os.path.join(d, '%s.db' % uuid.uuid4().hex)
    conf = {'connection': 'sqlite:///' + path}
    be = backends.fetch(conf)
    with contextlib.closing(be.get_connection()) as conn:
        conn.upgrade()
    timed('linear-sqlite', n, lambda: linear(n), engine='serial', backend=be)
for n in sizes.get('fanout', []):
    timed('graph-fanout-4', n, lambda: fanout(n), engine='parallel', max_workers=4)
for n in sizes.get('rollback', []):
    timed('rollback', n, lambda: linear(n, fail=True), engine='serial')
