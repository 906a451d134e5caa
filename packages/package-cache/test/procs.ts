import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { spawnNode, type Child } from '@rigging/testkit';
import type { PackageRef } from '../src/index.js';

const script = fileURLToPath(new URL('./fixtures/worker.ts', import.meta.url));
let seq = 0;

export interface WorkerOptions {
  root: string;
  counter: string;
  chunks?: number;
  chunkDelayMs?: number;
  blobBytes?: number;
  maxBytes?: number;
  olderVersions?: 'keep' | 'remove';
}

/** A cache in another OS process, driven by JSON commands. */
export class Worker {
  readonly child: Child;
  constructor(options: WorkerOptions) {
    this.child = spawnNode(script, [JSON.stringify(options)]);
  }
  get pid(): number {
    return this.child.pid;
  }
  ready(): Promise<string> {
    return this.child.waitForLine('"event":"ready"', 60_000);
  }
  async send<T = Record<string, unknown>>(
    op: string,
    args: { ref?: PackageRef; maxBytes?: number } = {},
  ): Promise<T> {
    const tag = `t${++seq}`;
    this.child.proc.stdin.write(`${JSON.stringify({ op, tag, ...args })}\n`);
    const line = await this.child.waitForLine(`"tag":"${tag}"`, 60_000);
    const reply = JSON.parse(line) as { ok: boolean; result: T; code?: string; message?: string };
    if (!reply.ok) throw Object.assign(new Error(reply.message), { code: reply.code });
    return reply.result;
  }
  events(name: string): Record<string, unknown>[] {
    return this.child.lines
      .filter((l) => l.includes(`"event":"${name}"`))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  }
  kill(): void {
    this.child.kill('SIGKILL');
  }
  async exit(): Promise<void> {
    if (this.child.proc.exitCode !== null || this.child.proc.signalCode !== null) return;
    await this.send('exit').catch(() => undefined);
    await Promise.race([this.child.exited, new Promise((r) => setTimeout(r, 5000))]);
    this.child.kill('SIGKILL');
  }
}

/** Lines of the shared fetch counter file (one per fetch call, any process). */
export async function fetchCount(counter: string, refKey?: string): Promise<number> {
  const text = await readFile(counter, 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter((l) => l !== '' && (refKey === undefined || l.endsWith(` ${refKey}`))).length;
}
