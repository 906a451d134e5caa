import { RiggingError, sleep } from '@rigging/core';
import type { HandlerContext } from '@rigging/async-queue';
import type { Database } from '@rigging/sql';
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
 * The queue handlers of the simulated container runtime: each op changes the container's row
 * in `minicloud_containers` and journals it in `minicloud_journal` (kind `op-start` when it
 * begins, `op` once applied; ref = op id).
 * Idempotent (a re-run after a crash finds the state already set).
 */
export function containerHandlers(
  database: Database<MinicloudTables>,
): Record<ContainerOpType, Handler> {
  const db = database.db;
  const get = (name: string) =>
    db.selectFrom('minicloud_containers').selectAll().where('name', '=', name).executeTakeFirst();
  const work = async (p: ContainerOpPayload, ctx: HandlerContext) => {
    await db
      .insertInto('minicloud_journal')
      .values({ kind: 'op-start', ref: ctx.id, pid: process.pid, at: Date.now() })
      .execute();
    await sleep(p.durationMs ?? 60, { signal: ctx.signal });
    if (p.fail) {
      throw new ContainerError('minicloud.container_failed', `${ctx.type} ${ctx.key}: ${p.fail}`);
    }
  };
  const applied = async (ctx: HandlerContext) => {
    await db
      .insertInto('minicloud_journal')
      .values({ kind: 'op', ref: ctx.id, pid: process.pid, at: Date.now() })
      .execute();
  };
  const setState = async (name: string, state: string) => {
    await db
      .updateTable('minicloud_containers')
      .set({ state, updated_at: Date.now() })
      .where('name', '=', name)
      .execute();
  };
  const need = async (name: string, type: string) => {
    const row = await get(name);
    if (!row) {
      throw new ContainerError(
        'minicloud.container_not_found',
        `${type} ${name}: no such container`,
      );
    }
    return row;
  };
  return {
    async create(p, ctx) {
      await work(p, ctx);
      if (!(await get(ctx.key))) {
        await db
          .insertInto('minicloud_containers')
          .values({
            name: ctx.key,
            image: p.image ?? 'busybox',
            state: 'created',
            updated_at: Date.now(),
          })
          .execute();
      }
      await applied(ctx);
      return { name: ctx.key, state: 'created' };
    },
    async start(p, ctx) {
      await need(ctx.key, 'start');
      await work(p, ctx);
      await setState(ctx.key, 'running');
      await applied(ctx);
      return { name: ctx.key, state: 'running' };
    },
    async stop(p, ctx) {
      await need(ctx.key, 'stop');
      await work(p, ctx);
      await setState(ctx.key, 'stopped');
      await applied(ctx);
      return { name: ctx.key, state: 'stopped' };
    },
    async delete(p, ctx) {
      await work(p, ctx);
      await db.deleteFrom('minicloud_containers').where('name', '=', ctx.key).execute();
      await applied(ctx);
      return { name: ctx.key, state: 'deleted' };
    },
  };
}
