import type { IncomingMessage, ServerResponse } from 'node:http';
import { RiggingError } from '@rigging/core';
import type { Cloud } from '../cloud/index.js';
import type { Config } from '../config.js';
import { streamOutput } from '../output.js';
import { runDemoStory } from '../steps/story.js';
import { HttpError } from './errors.js';

/**
 * One message of the `POST /api/demo` stream (newline-delimited JSON, one object a line):
 * `line` for every line the story prints, then exactly one `end`.
 */
export type DemoMessage =
  | { type: 'line'; text: string }
  | { type: 'end'; ok: true; runId: number }
  | { type: 'end'; ok: false; error: { code: string; message: string } };

/** Runs the demo story inside the server, one at a time, streaming its output to the caller. */
export class DemoRunner {
  #running: Promise<void> | undefined;
  #response: ServerResponse | undefined;

  constructor(
    private readonly cloud: Cloud,
    private readonly config: Config,
  ) {}

  get running(): boolean {
    return this.#running !== undefined;
  }

  /** Throws 409 while a demo runs. */
  check(): void {
    if (this.#running) {
      throw new HttpError(
        409,
        'minicloud.demo_running',
        'a demo is already running on this server; wait for it to finish',
      );
    }
  }

  /**
   * Streams the story to `res`. The story goes on if the caller disconnects (its effects are
   * the cloud's); its lines are then dropped.
   */
  run(req: IncomingMessage, res: ServerResponse): Promise<void> {
    this.check();
    req.resume();
    res.writeHead(200, {
      'content-type': 'application/x-ndjson; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      'x-accel-buffering': 'no',
    });
    this.#response = res;
    const send = (m: DemoMessage) => {
      if (!res.writableEnded && !res.destroyed) res.write(`${JSON.stringify(m)}\n`);
    };
    const out = streamOutput((s) => {
      for (const text of s.replace(/\n$/, '').split('\n')) send({ type: 'line', text });
    });
    const { cloud, config } = this;
    const done = (async () => {
      try {
        out.line('minicloud demo');
        out.step('database', `${cloud.database.url} (in minicloud serve)`);
        const { runId } = await runDemoStory({ database: cloud.database, config, out, cloud });
        send({ type: 'end', ok: true, runId });
      } catch (error) {
        const code = RiggingError.isInstance(error) ? error.code : 'minicloud.demo_failed';
        const message = (error as Error)?.message ?? String(error);
        send({ type: 'end', ok: false, error: { code, message } });
      } finally {
        res.end();
        this.#response = undefined;
        this.#running = undefined;
      }
    })();
    this.#running = done;
    return done;
  }

  /** On shutdown: lets a running demo finish for up to `graceMs`, then ends its stream. */
  async drain(graceMs: number): Promise<void> {
    const running = this.#running;
    if (!running) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      running,
      new Promise<void>((r) => {
        timer = setTimeout(r, graceMs);
      }),
    ]);
    clearTimeout(timer);
    const res = this.#response;
    if (res && !res.writableEnded) {
      res.end(
        `${JSON.stringify({
          type: 'end',
          ok: false,
          error: { code: 'minicloud.shutting_down', message: 'the server is shutting down' },
        } satisfies DemoMessage)}\n`,
      );
    }
  }
}
