import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  backoffDelay,
  isProcessAlive,
  nonNegativeIntegerOption,
  nonNegativeOption,
  positiveIntegerOption,
  positiveOption,
  timeoutOption,
} from '../src/index.js';

describe('option validators', () => {
  it('return the fallback for undefined and the value when valid', () => {
    expect(positiveOption('X', 'a', undefined, 5)).toBe(5);
    expect(positiveOption('X', 'a', 0.5, 5)).toBe(0.5);
    expect(nonNegativeOption('X', 'a', 0, 5)).toBe(0);
    expect(positiveIntegerOption('X', 'a', 3, 1)).toBe(3);
    expect(nonNegativeIntegerOption('X', 'a', 0, 1)).toBe(0);
    expect(positiveOption('X', 'a', undefined)).toBeUndefined();
  });

  it.each([
    [positiveOption, 0],
    [positiveOption, -1],
    [positiveOption, Number.NaN],
    [positiveOption, Infinity],
    [positiveOption, '5'],
    [nonNegativeOption, -0.1],
    [positiveIntegerOption, 1.5],
    [positiveIntegerOption, 0],
    [nonNegativeIntegerOption, -1],
  ] as const)('%o refuses %o with a TypeError naming owner, option and value', (fn, value) => {
    expect(() => fn('Owner', 'size', value, 1)).toThrow(TypeError);
    expect(() => fn('Owner', 'size', value, 1)).toThrow(/^Owner: size must be .*, got /);
  });

  it('timeoutOption accepts undefined, 0, Infinity and refuses negatives', () => {
    expect(timeoutOption('M', undefined)).toBeUndefined();
    expect(timeoutOption('M', 0)).toBe(0);
    expect(timeoutOption('M', Infinity)).toBe(Infinity);
    expect(() => timeoutOption('M', -5)).toThrow(/M: timeoutMs must be/);
    expect(() => timeoutOption('M', Number.NaN)).toThrow(TypeError);
  });
});

describe('isProcessAlive', () => {
  it('is true for this process and false for bad pids', () => {
    expect(isProcessAlive(process.pid)).toBe(true);
    expect(isProcessAlive(0)).toBe(false);
    expect(isProcessAlive(-1)).toBe(false);
    expect(isProcessAlive(1.5)).toBe(false);
  });

  it('is false once a child has exited', async () => {
    const child = spawn(process.execPath, ['-e', '0']);
    const pid = child.pid!;
    await new Promise((resolve) => child.on('exit', resolve));
    expect(isProcessAlive(pid)).toBe(false);
  });
});

describe('backoffDelay', () => {
  it('is 0 without backoff, constant for a number, clamped for a function', () => {
    expect(backoffDelay('B', undefined)(3)).toBe(0);
    expect(backoffDelay('B', 25)(7)).toBe(25);
    expect(backoffDelay('B', () => -3)(1)).toBe(0);
    expect(backoffDelay('B', () => Number.NaN)(1)).toBe(0);
  });

  it('grows exponentially from initialMs and stops at maxMs', () => {
    const delay = backoffDelay('B', { initialMs: 10, factor: 3, maxMs: 200 });
    expect([1, 2, 3, 4, 5].map(delay)).toEqual([10, 30, 90, 200, 200]);
  });

  it('refuses bad settings with the owner in the message', () => {
    expect(() => backoffDelay('Queue', { factor: 0.5 })).toThrow(/Queue: backoff.factor/);
    expect(() => backoffDelay('Queue', { jitter: 2 })).toThrow(/Queue: backoff.jitter/);
    expect(() => backoffDelay('Queue', -1)).toThrow(/Queue: backoff must be/);
  });

  it('with jitter stays within [0, maxMs] and within the spread', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 1000 }),
        fc.double({ min: 1, max: 4, noNaN: true }),
        fc.integer({ min: 0, max: 60_000 }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        fc.double({ min: 0, max: 1, noNaN: true, maxExcluded: true }),
        fc.integer({ min: 1, max: 40 }),
        (initialMs, factor, maxMs, jitter, r, retry) => {
          const plain = backoffDelay('B', { initialMs, factor, maxMs })(retry);
          const ms = backoffDelay('B', { initialMs, factor, maxMs, jitter }, () => r)(retry);
          return ms >= 0 && ms <= maxMs && ms >= plain * (1 - jitter) - 1e-9;
        },
      ),
    );
  });
});
