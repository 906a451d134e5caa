// Compares core's helpers with what Node offers out of the box. Run: pnpm bench
import { EventEmitter } from 'node:events';
import { Bench } from 'tinybench';
import { TypedEmitter, scopedSignal } from '../src/index.js';

const bench = new Bench({ time: 500 });
const typed = new TypedEmitter<{ 'x:y': { n: number } }>();
typed.on('x:y', () => {});
const node = new EventEmitter();
node.on('x:y', () => {});
const parent = new AbortController();

bench
  .add('TypedEmitter.emit', () => typed.emit('x:y', { n: 1 }))
  .add('EventEmitter.emit', () => node.emit('x:y', { n: 1 }))
  .add('scopedSignal(signal, timeout) + dispose', () => {
    scopedSignal({ signal: parent.signal, timeoutMs: 1000 }).dispose();
  })
  .add('AbortSignal.any([signal, AbortSignal.timeout])', () => {
    AbortSignal.any([parent.signal, AbortSignal.timeout(1000)]);
  });

await bench.run();
const hz = (name: string) =>
  bench.tasks.find((t) => t.name === name)?.result?.throughput.mean ?? NaN;
console.table(bench.table());
console.log(
  `emit: TypedEmitter / EventEmitter = ${(hz('TypedEmitter.emit') / hz('EventEmitter.emit')).toFixed(2)}×`,
);
console.log(
  `combined signal: scopedSignal / AbortSignal.any = ${(
    hz('scopedSignal(signal, timeout) + dispose') /
    hz('AbortSignal.any([signal, AbortSignal.timeout])')
  ).toFixed(2)}×`,
);
