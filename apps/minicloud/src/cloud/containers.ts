import { RiggingError, sleep } from '@rigging/core';
import type { HandlerContext } from '@rigging/async-queue';
import { FlowFailed, linearFlow, task, type Engine, type Flow, type Task } from '@rigging/tasks';
import { runOrResume } from './flows.js';
import { isConnectionError, type Database } from '@rigging/sql';
import type { MinicloudTables } from '../migrations.js';

/** Payload of a container operation. */
export interface ContainerOpPayload {
  /** Image (for `create`). */
  image?: string;
  /** Simulated duration in ms. @default 60 */
  durationMs?: number;
  /** Fault injection: the op fails with this message. */
  fail?: string;
}

/** Result of every container operation: the container's state afterwards. */
export interface ContainerOpResult {
  name: string;
  state: 'created' | 'running' | 'stopped' | 'deleted';
}

export type ContainerOpType = 'create' | 'start' | 'stop' | 'delete';
export const CONTAINER_OPS: readonly ContainerOpType[] = ['create', 'start', 'stop', 'delete'];

/** A simulated container runtime failure (the op fails, the key is blocked). */
export class ContainerError extends RiggingError<`minicloud.container_${string}`> {
  override readonly name = 'ContainerError';
}

type Handler = (p: ContainerOpPayload, ctx: HandlerContext) => Promise<ContainerOpResult>;

/**
 * Runs one database write of a step, again after a lost connection (up to 5 tries, 200 ms apart,
 * while `signal` holds): a pooled connection broken by a network cut fails once, the next one is
 * new. Every write here is idempotent (an insert guarded by a read, updates, deletes, journal rows).
 */
async function transient<T>(write: () => Promise<T>, signal: AbortSignal): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await write();
    } catch (error) {
      if (attempt >= 5 || !isConnectionError(error) || signal.aborted) throw error;
      await sleep(200, { signal });
    }
  }
}

/** What every container-op flow gets. */
interface OpInputs {
  container: string;
  op: ContainerOpType;
  payload: ContainerOpPayload;
}
type AnyInputs = any;

/**
 * The queue handlers of the simulated container runtime. Each op runs as a small revertible
 * task flow in the engine (under its lock; flow id `op-<op id>`, so a worker that takes the op
 * over resumes the flow from the task log instead of starting again), changes the container's
 * row in `minicloud_containers`, and journals itself in `minicloud_journal` (kind `op-start`
 * when it begins, `op` once applied; ref = op id). A failing step reverts the earlier ones and
 * fails the op, which blocks the container's key.
 */
export function containerHandlers(
  database: Database<MinicloudTables>,
  engine: Engine,
  /** Called before an op's flow runs, e.g. to name it (`container-start ctr-2`) on a dashboard. */
  onFlow?: (flowId: string, name: string, tasks: string[]) => void,
): Record<ContainerOpType, Handler> {
  const db = database.db;
  const get = (name: string) =>
    db.selectFrom('minicloud_containers').selectAll().where('name', '=', name).executeTakeFirst();
  const journal = (kind: 'op-start' | 'op', ref: string) =>
    db
      .insertInto('minicloud_journal')
      .values({ kind, ref, pid: process.pid, at: Date.now() })
      .execute();
  const setState = async (name: string, state: string): Promise<void> => {
    await db
      .updateTable('minicloud_containers')
      .set({ state, updated_at: Date.now() })
      .where('name', '=', name)
      .execute();
  };
  /** The simulated work of a step: its share of `durationMs`, then the injected fault, if any. */
  const work = async (i: OpInputs, signal: AbortSignal, last: boolean) => {
    await sleep(Math.round((i.payload.durationMs ?? 60) / 2), { signal });
    if (last && i.payload.fail) {
      throw new ContainerError(
        'minicloud.container_failed',
        `${i.op} ${i.container}: ${i.payload.fail}`,
      );
    }
  };
  const step = (
    name: string,
    last: boolean,
    apply: (i: OpInputs) => Promise<unknown>,
    undo?: (i: OpInputs, before: unknown) => Promise<void>,
  ): Task<any, any> =>
    task({
      name,
      requires: ['container', 'op', 'payload'],
      provides: name,
      async execute(ctx, inputs: AnyInputs) {
        const i = inputs as OpInputs;
        await work(i, ctx.signal, last);
        return ((await transient(() => apply(i), ctx.signal)) ?? null) as never;
      },
      ...(undo
        ? {
            async revert(ctx, { result, inputs }) {
              await transient(() => undo(inputs as OpInputs, result), ctx.signal);
            },
          }
        : {}),
    });
  const need = async (i: OpInputs) => {
    const row = await get(i.container);
    if (!row) {
      throw new ContainerError(
        'minicloud.container_not_found',
        `${i.op} ${i.container}: no such container`,
      );
    }
    return row.state;
  };
  const flows: Record<ContainerOpType, Flow<any, any>> = {
    create: linearFlow(
      'container-create',
      step('pull-image', false, async (i) => i.payload.image ?? 'busybox'),
      step(
        'create-container',
        true,
        async (i) => {
          if (!(await get(i.container))) {
            await db
              .insertInto('minicloud_containers')
              .values({
                name: i.container,
                image: i.payload.image ?? 'busybox',
                state: 'created',
                updated_at: Date.now(),
              })
              .execute();
          }
        },
        async (i) => {
          await db.deleteFrom('minicloud_containers').where('name', '=', i.container).execute();
        },
      ),
    ),
    start: linearFlow(
      'container-start',
      step('check-container', false, need),
      step(
        'start-process',
        true,
        (i) => setState(i.container, 'running'),
        (i) => setState(i.container, 'created'),
      ),
    ),
    stop: linearFlow(
      'container-stop',
      step('check-container', false, need),
      step(
        'stop-process',
        true,
        (i) => setState(i.container, 'stopped'),
        (i) => setState(i.container, 'running'),
      ),
    ),
    delete: linearFlow(
      'container-delete',
      step('stop-process', false, async (i) => {
        if (await get(i.container)) await setState(i.container, 'stopped');
      }),
      step('remove-container', true, async (i) => {
        await db.deleteFrom('minicloud_containers').where('name', '=', i.container).execute();
      }),
    ),
  };
  const STATE: Record<ContainerOpType, ContainerOpResult['state']> = {
    create: 'created',
    start: 'running',
    stop: 'stopped',
    delete: 'deleted',
  };
  const handler =
    (op: ContainerOpType): Handler =>
    async (payload, ctx) => {
      await transient(() => journal('op-start', ctx.id), ctx.signal);
      const flowId = `op-${ctx.id}`;
      const flow = flows[op];
      onFlow?.(
        flowId,
        `container-${op} ${ctx.key}`,
        flow.children.map((c) => c.name),
      );
      try {
        await runOrResume(
          engine,
          flowId,
          flow,
          { container: ctx.key, op, payload: payload ?? {} },
          ctx.signal,
        );
      } catch (error) {
        if (error instanceof FlowFailed) {
          const cause = error.failures[0];
          throw new ContainerError(
            (cause?.code?.startsWith('minicloud.container_')
              ? cause.code
              : 'minicloud.container_failed') as `minicloud.container_${string}`,
            cause?.message ?? error.message,
          );
        }
        throw error;
      }
      await transient(() => journal('op', ctx.id), ctx.signal);
      return { name: ctx.key, state: STATE[op] };
    };
  return {
    create: handler('create'),
    start: handler('start'),
    stop: handler('stop'),
    delete: handler('delete'),
  };
}
