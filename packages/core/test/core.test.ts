import { getEventListeners } from 'node:events';
import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import {
  fencingTokenFromJson,
  fencingTokenToJson,
  showValue,
  ManualClock,
  RiggingError,
  TypedEmitter,
  explainNotJson,
  isJson,
  raceAbort,
  scopedSignal,
  serializeError,
  silentLogger,
  sleep,
  systemClock,
} from '../src/index.js';

describe('RiggingError', () => {
  it('keeps code, cause and details, and is recognised across copies by its brand', () => {
    const cause = new Error('socket closed');
    const e = new RiggingError('sql.unreachable', 'cannot reach the server', {
      cause,
      details: { host: 'db' },
    });
    expect(e.code).toBe('sql.unreachable');
    expect(e.cause).toBe(cause);
    expect(e.details).toEqual({ host: 'db' });
    expect(e).toBeInstanceOf(Error);
    expect(RiggingError.isInstance(e)).toBe(true);
    expect(RiggingError.hasCode(e, 'sql.unreachable')).toBe(true);
    expect(RiggingError.hasCode(e, 'sql.other')).toBe(false);
    expect(RiggingError.isInstance(new Error('x'))).toBe(false);
    expect(RiggingError.isInstance(null)).toBe(false);
    // A structurally branded object from another copy of the package is still recognised.
    const foreign = Object.defineProperty(new Error('x'), Symbol.for('rigging.error'), {
      value: true,
    });
    expect(RiggingError.isInstance(foreign)).toBe(true);
    expect(JSON.parse(JSON.stringify(e))).toEqual({
      name: 'RiggingError',
      code: 'sql.unreachable',
      message: 'cannot reach the server',
      details: { host: 'db' },
    });
  });

  it('subclasses keep a literal name and their code', () => {
    class TimeoutError extends RiggingError<'locks.timeout'> {
      override readonly name = 'TimeoutError';
      constructor() {
        super('locks.timeout', 'timed out');
      }
    }
    const e = new TimeoutError();
    expect(e.name).toBe('TimeoutError');
    expect(RiggingError.isInstance(e)).toBe(true);
  });

  it('serializes an error with its cause chain', () => {
    const s = serializeError(new RiggingError('a.b', 'outer', { cause: new Error('inner') }));
    expect(s).toMatchObject({ code: 'a.b', message: 'outer', cause: { message: 'inner' } });
    expect(serializeError('plain string').message).toBe('plain string');
  });
});

describe('Json', () => {
  it('accepts JSON and explains what is not', () => {
    expect(isJson({ a: [1, 'x', null, true, { b: 2 }] })).toBe(true);
    expect(explainNotJson({ a: undefined })).toBe('$.a is undefined');
    expect(explainNotJson({ a: [1, NaN] })).toBe('$.a[1] is NaN');
    expect(explainNotJson({ d: new Date() })).toBe('$.d is a Date, not a plain object');
    expect(explainNotJson(10n)).toBe('$ is bigint');
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(explainNotJson(cyclic)).toBe('$.self is a circular reference');
    const shared = { x: 1 };
    expect(isJson({ a: shared, b: shared })).toBe(true);
  });

  it('explains a scalar at the path it is given', () => {
    for (const ok of [null, true, 0, -1.5, '', 'x'])
      expect(explainNotJson(ok, '$.r')).toBe(undefined);
    expect(explainNotJson(undefined)).toBe('$ is undefined');
    expect(explainNotJson(Infinity, '$.result')).toBe('$.result is Infinity');
    expect(explainNotJson(() => 1, '$.result')).toBe('$.result is function');
    expect(explainNotJson(Symbol('s'))).toBe('$ is symbol');
  });

  it('accepts every JSON value, and names the path of one leaf that is not', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (v) => explainNotJson(v) === undefined),
      { numRuns: 300 },
    );
    fc.assert(
      fc.property(fc.array(fc.jsonValue(), { maxLength: 5 }), fc.nat(), (items, at) => {
        const i = at % (items.length + 1);
        const withBad = [...items.slice(0, i), { bad: undefined }, ...items.slice(i)];
        return explainNotJson({ items: withBad }) === `$.items[${i}].bad is undefined`;
      }),
      { numRuns: 300 },
    );
  });
});

describe('ManualClock', () => {
  it('wakes sleeps in deadline order when advanced', async () => {
    const clock = new ManualClock(1000);
    const order: string[] = [];
    void clock.sleep(30).then(() => order.push(`b@${clock.now()}`));
    void clock.sleep(10).then(() => order.push(`a@${clock.now()}`));
    expect(clock.pendingSleeps).toBe(2);
    await clock.advance(15);
    expect(order).toEqual(['a@1010']);
    expect(clock.now()).toBe(1015);
    await clock.advance(100);
    expect(order).toEqual(['a@1010', 'b@1030']);
    expect(clock.now()).toBe(1115);
  });

  it('wakes sleeps scheduled by woken code within the same advance', async () => {
    const clock = new ManualClock();
    const ticks: number[] = [];
    void (async () => {
      for (let i = 0; i < 3; i++) {
        await clock.sleep(10);
        ticks.push(clock.now());
      }
    })();
    await clock.advance(35);
    expect(ticks).toEqual([10, 20, 30]);
  });

  it('rejects an aborted sleep with the reason and forgets it', async () => {
    const clock = new ManualClock();
    const ac = new AbortController();
    const p = clock.sleep(10, { signal: ac.signal });
    ac.abort(new Error('stop'));
    await expect(p).rejects.toThrow('stop');
    expect(clock.pendingSleeps).toBe(0);
    expect(await clock.runNext()).toBe(false);
  });
});

describe('abort helpers', () => {
  it('sleep rejects with the signal reason and removes its listener', async () => {
    const ac = new AbortController();
    const p = sleep(10_000, { signal: ac.signal });
    expect(getEventListeners(ac.signal, 'abort')).toHaveLength(1);
    ac.abort(new Error('bye'));
    await expect(p).rejects.toThrow('bye');
    expect(getEventListeners(ac.signal, 'abort')).toHaveLength(0);
    await expect(sleep(1, { signal: ac.signal })).rejects.toThrow('bye');
    await sleep(1);
    await systemClock.sleep(1);
    // a sleep that ends on its own leaves nothing on a signal that lives on
    const long = new AbortController();
    for (let i = 0; i < 3; i++) {
      const s = sleep(1, { signal: long.signal });
      expect(getEventListeners(long.signal, 'abort')).toHaveLength(1);
      await s;
      expect(getEventListeners(long.signal, 'abort')).toHaveLength(0);
    }
  });

  it('scopedSignal times out with a custom reason and removes listeners on dispose', async () => {
    const parent = new AbortController();
    const add = vi.spyOn(parent.signal, 'addEventListener');
    const remove = vi.spyOn(parent.signal, 'removeEventListener');
    {
      using scope = scopedSignal({
        signal: parent.signal,
        timeoutMs: 5,
        onTimeout: () => new RiggingError('x.timeout', 'late'),
      });
      await expect(
        new Promise((_, reject) =>
          scope.signal.addEventListener('abort', () => reject(scope.signal.reason)),
        ),
      ).rejects.toMatchObject({ code: 'x.timeout' });
      expect(scope.timedOut).toBe(true);
    }
    expect(add).toHaveBeenCalledTimes(1);
    expect(remove).toHaveBeenCalledTimes(1);
  });

  it('scopedSignal follows the parent signal', () => {
    const parent = new AbortController();
    const scope = scopedSignal({ signal: parent.signal });
    parent.abort('why');
    expect(scope.signal.aborted).toBe(true);
    expect(scope.signal.reason).toBe('why');
    expect(scope.timedOut).toBe(false);
    scope.dispose();
    expect(() => scopedSignal({ timeoutMs: -1 })).toThrow(TypeError);
  });

  it('leaves no listeners behind over many waits', async () => {
    const parent = new AbortController();
    let live = 0;
    const origAdd = parent.signal.addEventListener.bind(parent.signal);
    const origRemove = parent.signal.removeEventListener.bind(parent.signal);
    parent.signal.addEventListener = ((...args: Parameters<AbortSignal['addEventListener']>) => {
      live++;
      origAdd(...args);
    }) as AbortSignal['addEventListener'];
    parent.signal.removeEventListener = ((
      ...args: Parameters<AbortSignal['removeEventListener']>
    ) => {
      live--;
      origRemove(...args);
    }) as AbortSignal['removeEventListener'];
    for (let i = 0; i < 10_000; i++) {
      await raceAbort(Promise.resolve(i), parent.signal);
      scopedSignal({ signal: parent.signal, timeoutMs: 1000 }).dispose();
    }
    expect(live).toBe(0);
  });
});

describe('TypedEmitter', () => {
  type Events = {
    'lock:acquired': { key: string };
    'lock:released': { key: string; heldMs: number };
  };

  it('delivers typed payloads in order and unsubscribes', () => {
    const e = new TypedEmitter<Events>();
    const seen: string[] = [];
    const off = e.on('lock:acquired', ({ key }) => seen.push(`a:${key}`));
    e.once('lock:released', ({ key, heldMs }) => seen.push(`r:${key}:${heldMs}`));
    const offAny = e.onAny((event) => seen.push(`any:${String(event)}`));
    e.emit('lock:acquired', { key: 'k' });
    e.emit('lock:released', { key: 'k', heldMs: 3 });
    e.emit('lock:released', { key: 'k', heldMs: 4 });
    off();
    off();
    offAny();
    e.emit('lock:acquired', { key: 'k2' });
    expect(seen).toEqual([
      'a:k',
      'any:lock:acquired',
      'r:k:3',
      'any:lock:released',
      'any:lock:released',
    ]);
    expect(e.listenerCount()).toBe(0);
  });

  it('isolates a throwing listener', () => {
    const errors: unknown[] = [];
    const e = new TypedEmitter<Events>({ onListenerError: (err) => errors.push(err) });
    const seen: string[] = [];
    e.on('lock:acquired', () => {
      throw new Error('bad listener');
    });
    e.on('lock:acquired', ({ key }) => seen.push(key));
    e.emit('lock:acquired', { key: 'k' });
    expect(seen).toEqual(['k']);
    expect(errors).toHaveLength(1);
  });
});

describe('silentLogger', () => {
  it('accepts both pino call shapes and children', () => {
    silentLogger.info({ a: 1 }, 'msg');
    silentLogger.child({ component: 'x' }).warn('text %s', 'arg');
    expect(silentLogger.child({})).toBe(silentLogger);
  });
});

describe('fencing tokens as JSON', () => {
  it('round-trips every token from 0 to 2^63 - 1 through JSON', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: (1n << 63n) - 1n }), (token) => {
        const json = fencingTokenToJson(token);
        expect(typeof json).toBe('string');
        expect(fencingTokenFromJson(JSON.parse(JSON.stringify(json)))).toBe(token);
      }),
    );
  });

  it('refuses anything else with a TypeError naming the value', () => {
    for (const bad of [-1n, 1n << 63n, 12, '12' as unknown]) {
      expect(() => fencingTokenToJson(bad as bigint)).toThrow(TypeError);
    }
    for (const bad of [
      12,
      12n,
      '',
      '-1',
      '+1',
      '012',
      '1e3',
      ' 7',
      '7 ',
      '0x10',
      '1.0',
      null,
      {},
    ]) {
      expect(() => fencingTokenFromJson(bad)).toThrow(TypeError);
    }
    expect(() => fencingTokenFromJson('9223372036854775808')).toThrow(/got "9223372036854775808"/);
    expect(() => fencingTokenFromJson(12)).toThrow(/fencingTokenFromJson: .* got 12$/);
    expect(fencingTokenFromJson('9223372036854775807')).toBe((1n << 63n) - 1n);
    expect(fencingTokenFromJson('0')).toBe(0n);
  });
});

describe('showValue', () => {
  it('shows a value as error messages name it', () => {
    expect(showValue('x')).toBe('"x"');
    expect(showValue('y'.repeat(300))).toBe(JSON.stringify('y'.repeat(200) + '…'));
    expect(showValue(3n)).toBe('3n');
    expect(showValue(Symbol('s'))).toBe('Symbol(s)');
    expect(showValue({ a: 1 })).toBe('{"a":1}');
    expect(showValue(undefined)).toBe('undefined');
    expect(showValue(NaN)).toBe('NaN');
    expect(showValue(-Infinity)).toBe('-Infinity');
    const cyclic: { self?: unknown } = {};
    cyclic.self = cyclic;
    expect(showValue(cyclic)).toBe('[object Object]');
  });
});
