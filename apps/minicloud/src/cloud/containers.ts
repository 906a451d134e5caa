import { RiggingError, type Clock } from '@rigging/core';
import type { HandlerContext } from '@rigging/async-queue';
import {
  FlowFailed,
  linearFlow,
  resumableReason,
  task,
  type Engine,
  type Flow,
  type Task,
} from '@rigging/tasks';
import { sqlTransaction } from '@rigging/tasks/sql';
import { journal } from './journal.js';
import { isConnectionError, sendWithCommit, sql, type Database, type Kysely } from '@rigging/sql';
import type { MinicloudTables } from '../migrations.js';
import {
  refusalOf,
  Witness,
  type EffectClaim,
  type GatedWrite,
  type ScalarRead,
} from './witness.js';

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

/** The queue handler of one container op type. */
type ContainerOpHandler = (
  payload: ContainerOpPayload,
  ctx: HandlerContext,
) => Promise<ContainerOpResult>;

/** What the last step of an op's flow writes besides `apply`. */
interface StepWrites {
  /** Reverts the step's write. */
  undo?: (i: OpInputs, db: Db) => Promise<void>;
  /** PostgreSQL: the effect's write as one statement, run inside the witness's (see `apply`). */
  statement?: (i: OpInputs) => GatedWrite;
  /**
   * What must exist when the step runs (a scalar read that is not null), checked with the op's
   * start when the step starts it (on PostgreSQL in the statement sent with the step's commit,
   * see `fenceWithCommit`): a `minicloud.container_not_found` error otherwise. `apply` is told
   * whether it was checked.
   */
  required?: (i: OpInputs) => ScalarRead;
}

/** PostgreSQL: the `create` op's effect (see `GatedWrite`). */
const CREATE: GatedWrite<{ name: string; image: string; at: number }>['build'] = (
  from,
  p,
) => sql`insert into "minicloud_containers" ("name", "image", "state", "updated_at")
  select ${p.name}, ${p.image}, 'created', ${p.at}::bigint from ${sql.table(from)}
  on conflict ("name") do nothing`;

/** PostgreSQL: the `delete` op's effect (see `GatedWrite`). */
const REMOVE: GatedWrite<{ name: string }>['build'] = (from, p) =>
  sql`delete from "minicloud_containers"
    where "name" = ${p.name} and exists (select 1 from ${sql.table(from)})`;

/** The container's state as a scalar subquery (null when there is none). */
const STATE: ScalarRead<unknown, { name: string }>['build'] = (db, p) =>
  db.selectFrom('minicloud_containers').select('state').where('name', '=', p.name);

/** What the error of an op on a container that does not exist says. */
const notFoundMessage = (i: OpInputs) => `${i.op} ${i.container}: no such container`;

/** The error of an op on a container that does not exist. */
const notFound = (i: OpInputs) =>
  new ContainerError('minicloud.container_not_found', notFoundMessage(i));

/** What every container-op flow gets. */
interface OpInputs {
  container: string;
  op: ContainerOpType;
  payload: ContainerOpPayload;
}
type AnyInputs = any;

/** The container's state after each op type. */
/** Reruns of an op whose flow a stale owner reverted, past which the op fails as it stands. */
const MAX_RERUNS = 8;

/** The flow id of an op's `rerun`-th run: `op-<id>`, then `op-<id>-r1`, `op-<id>-r2`, … */
function rerunId(opId: string, rerun: number): string {
  return rerun === 0 ? `op-${opId}` : `op-${opId}-r${rerun}`;
}

/** Where a run of flow `flowId` under the claim with `token` is found in this process. */
function runKeyOf(flowId: string, token: bigint): string {
  return `${flowId}#${token}`;
}

const STATE_AFTER: Record<ContainerOpType, ContainerOpResult['state']> = {
  create: 'created',
  start: 'running',
  stop: 'stopped',
  delete: 'deleted',
};

/** What {@link containerHandlers} works with. */
export interface ContainerDeps {
  database: Database<MinicloudTables>;
  engine: Engine;
  /** The time of container and journal rows, and of the simulated op durations. */
  clock: Clock;
  /** Called before an op's flow runs, e.g. to name it (`container-start ctr-2`) on a dashboard. */
  onFlow?: (flowId: string, name: string, tasks: string[]) => void;
  /**
   * Self-test only: inject one fault the cluster verdict must catch, once per database
   * (`lost-op`, `double-apply`, `reorder`; see the cluster README). @default `MINICLOUD_SABOTAGE`
   */
  sabotage?: string | undefined;
}

/** The runtime's own faults for the cluster's self-test (the others are injected by the cluster). */
export const RUNTIME_SABOTAGE = ['lost-op', 'double-apply', 'reorder'] as const;

type Db = Kysely<MinicloudTables>;

/** One owner's run of an op (its flow and reruns), by flow id while its flow runs. */
interface OpRun {
  /** The queue's claim on the op, as the witness fences it. */
  claim: EffectClaim;
  /** Whether this owner's start (journal `op-start`, the key fenced) has committed with a step. */
  started: boolean;
  /** The self-test fault this op injects, if it took the ticket. */
  sabotage: string | undefined;
  /** The key's highest token when the witness refused this owner's effect. */
  refused?: number;
}

/** The simulated container runtime: one revertible task flow per op type. */
class ContainerRuntime {
  readonly #deps: ContainerDeps;
  readonly #db: Database<MinicloudTables>['db'];
  readonly #flows: Record<ContainerOpType, Flow<any, any>>;
  readonly #witness: Witness;
  /**
   * This process's runs by flow id and claim token (a step reads its claim there): a worker that
   * lost its claim and took the op again holds two runs of one flow for a moment, the stale one
   * winding down while the new one waits for the flow.
   */
  readonly #runs = new Map<string, OpRun>();
  readonly #sabotage: string | undefined;

  constructor(deps: ContainerDeps) {
    this.#deps = deps;
    this.#db = deps.database.db;
    this.#witness = new Witness(deps.database, deps.clock);
    const sabotage = deps.sabotage ?? process.env.MINICLOUD_SABOTAGE;
    this.#sabotage = (RUNTIME_SABOTAGE as readonly string[]).includes(sabotage ?? '')
      ? sabotage
      : undefined;
    this.#flows = {
      create: this.#createFlow(),
      start: this.#switchFlow('container-start', 'start-process', 'created', 'running'),
      stop: this.#switchFlow('container-stop', 'stop-process', 'running', 'stopped'),
      delete: this.#deleteFlow(),
    };
  }

  /** Runs op `op` of the container `ctx.key` as its flow (or resumes it after a takeover). */
  async run(
    op: ContainerOpType,
    payload: ContainerOpPayload | undefined,
    ctx: HandlerContext,
  ): Promise<ContainerOpResult> {
    // The claim's token is the queue's (strictly increasing per key across claims).
    const claim: EffectClaim = {
      op: ctx.id,
      key: ctx.key,
      attempt: ctx.attempt,
      token: Number(ctx.lease.token),
    };
    const sabotage =
      op === 'start' && this.#sabotage !== undefined
        ? await this.#transient(() => this.#witness.sabotageTicket(this.#sabotage!), ctx.signal)
        : false;
    const run: OpRun = { claim, started: false, sabotage: sabotage ? this.#sabotage : undefined };
    if (run.sabotage === 'reorder') {
      this.#applyLate(claim);
      return { name: ctx.key, state: STATE_AFTER[op] };
    }
    try {
      // A stale owner (paused past its claim while another worker took the op over) may still
      // hold the op's flow: its effect is refused by the witness and it reverts the flow. Nothing
      // of the op was applied, so the op runs again as the next flow of a fixed chain (`op-<id>`,
      // `op-<id>-r1`, …): whoever holds the op later resumes the same rerun, so a rerun suspended
      // by a lost claim is finished by the next owner, never left half-done.
      for (let rerun = 0; ; rerun++) {
        try {
          await this.#runFlow(rerunId(ctx.id, rerun), op, payload, ctx, run);
          break;
        } catch (error) {
          if (run.refused !== undefined) {
            const highest = run.refused;
            delete run.refused;
            await this.#transient(() => this.#witness.refused(claim, highest), ctx.signal);
          }
          const fenced =
            error instanceof FlowFailed && error.failures[0]?.code === 'minicloud.container_fenced';
          if (!fenced || rerun >= MAX_RERUNS || ctx.signal.aborted) throw error;
        }
      }
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
      // Suspended, lease lost, busy elsewhere, connection gone: not a failure of the op.
      const reason = resumableReason(error, this.#deps.engine.log, ctx.signal);
      if (reason) ctx.giveBack(`${op} ${ctx.key}: its flow can be resumed (${reason})`);
      throw error;
    }
    return { name: ctx.key, state: STATE_AFTER[op] };
  }

  /** Runs (or resumes) the op's flow `flowId` for `run`. */
  async #runFlow(
    flowId: string,
    op: ContainerOpType,
    payload: ContainerOpPayload | undefined,
    ctx: HandlerContext,
    run: OpRun,
  ): Promise<void> {
    const flow = this.#flows[op];
    const runKey = runKeyOf(flowId, ctx.lease.token);
    this.#runs.set(runKey, run);
    this.#deps.onFlow?.(
      flowId,
      `container-${op} ${ctx.key}`,
      flow.children.map((c) => c.name),
    );
    try {
      // The flow runs under the queue's claim on the op (its token fences the flow's writes):
      // whoever holds the op owns its flow. The queue's signal (shutdown, lost claim) suspends
      // the flow, never reverts it. A later delivery (a takeover) finds the flow its owner before
      // created: it is resumed first, so its completed first step does not run again.
      await this.#deps.engine.runOrResume(flow, {
        flowId,
        inputs: { container: ctx.key, op, payload: payload ?? {} },
        signal: ctx.signal,
        lease: ctx.lease,
        resumeFirst: ctx.attempt > 1,
      });
    } finally {
      this.#runs.delete(runKey);
    }
  }

  /**
   * Runs one database write outside the flow, again after a lost connection (up to 5 tries,
   * 200 ms apart, while `signal` holds): a pooled connection broken by a network cut fails once,
   * the next one is new. Every write here is idempotent (sabotage tickets, refusals, reverts).
   */
  async #transient<T>(write: () => Promise<T>, signal: AbortSignal): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await write();
      } catch (error) {
        if (attempt >= 5 || !isConnectionError(error) || signal.aborted) throw error;
        await this.#deps.clock.sleep(200, { signal });
      }
    }
  }

  /**
   * Sabotage `reorder`: the op was reported done before its effect; the effect is applied once
   * the key's next op has applied its own, under the key's token re-read at that moment (the
   * bug that lets a late write through fencing). The verdict must see the key out of order.
   */
  #applyLate(claim: EffectClaim): void {
    const late = async () => {
      const before = await this.#witness.lastSeq(claim.key);
      for (let i = 0; i < 200 && (await this.#witness.lastSeq(claim.key)) === before; i++) {
        await this.#deps.clock.sleep(100);
      }
      const reread = {
        ...claim,
        token: (await this.#witness.currentKeyToken(claim.key)) ?? claim.token,
      };
      const outcome = await this.#deps.database.transaction((trx) =>
        this.#witness.apply(trx, reread, (db) => this.#setState(claim.key, 'running', db)),
      );
      if (outcome.kind === 'refused') await this.#witness.refused(reread, outcome.highest);
    };
    late().catch(() => {});
  }

  #get(name: string, db: Db) {
    return db
      .selectFrom('minicloud_containers')
      .selectAll()
      .where('name', '=', name)
      .executeTakeFirst();
  }

  async #setState(name: string, state: string, db: Db): Promise<void> {
    await this.#stateSet(name, state, db).execute();
  }

  /** The update that moves container `name` (if it exists) to `state`. */
  #stateSet(name: string, state: string, db: Db) {
    return db
      .updateTable('minicloud_containers')
      .set({ state, updated_at: this.#deps.clock.now() })
      .where('name', '=', name);
  }

  async #remove(name: string, db: Db): Promise<void> {
    await db.deleteFrom('minicloud_containers').where('name', '=', name).execute();
  }

  /** The simulated work of a step: its share of `durationMs`, then the injected fault, if any. */
  async #work(i: OpInputs, signal: AbortSignal, last: boolean): Promise<void> {
    await this.#deps.clock.sleep(Math.round((i.payload.durationMs ?? 60) / 2), { signal });
    if (last && i.payload.fail) {
      throw new ContainerError(
        'minicloud.container_failed',
        `${i.op} ${i.container}: ${i.payload.fail}`,
      );
    }
  }

  /**
   * A step of an op's flow: the simulated work, then one transaction of the task log's database
   * that commits the step's writes with its SUCCESS in the log (`transaction: true`): the op's
   * start when this owner has not recorded it yet, then `apply` — through the witness for the
   * last step, whose write is the op's effect (on PostgreSQL its `statement`, inside the
   * witness's own). `undo` reverts it.
   */
  #step(
    name: string,
    last: boolean,
    apply: (i: OpInputs, db: Db, checked: boolean) => Promise<unknown>,
    { undo, statement, required }: StepWrites = {},
  ): Task<any, any> {
    return task({
      name,
      requires: ['container', 'op', 'payload'],
      provides: name,
      transaction: true,
      execute: async (ctx, inputs: AnyInputs) => {
        const i = inputs as OpInputs;
        const run = ctx.lease && this.#runs.get(runKeyOf(ctx.flowId, ctx.lease.token));
        if (!run) throw new Error(`${ctx.flowId}: no claim to run its steps under`);
        await this.#work(i, ctx.signal, last); // outside the transaction: it holds no lock
        // The start counts once its transaction has committed: one that rolled back (the flow
        // was created by an earlier owner meanwhile, a lost connection) wrote no fence and no
        // journal row, so the step that runs next starts the op again.
        let starting = false;
        const result = await sqlTransaction<MinicloudTables, unknown>(ctx, async (trx) => {
          starting = !run.started;
          const checked = starting && (await this.#start(trx, run, i, required?.(i)));
          if (!last) return (await apply(i, trx, checked)) ?? null;
          await this.#effect(trx, run, i, (db) => apply(i, db, checked), statement?.(i));
          return null;
        }).catch(async (error: unknown) => {
          const refusal = refusalOf(error);
          if (!refusal) throw error;
          // A statement sent with the commit refused the step: nothing of it was written.
          if (refusal.code === 'minicloud.container_fenced') {
            return this.#refuse(run, i, await this.#witness.highestToken(run.claim.key));
          }
          throw new ContainerError(refusal.code as ContainerError['code'], refusal.message);
        });
        if (starting) run.started = true;
        return result as never;
      },
      ...(undo
        ? {
            revert: async (ctx, { inputs }) => {
              await this.#transient(() => undo(inputs as OpInputs, this.#db), ctx.signal);
            },
          }
        : {}),
    });
  }

  /**
   * This owner's start of the op, with the step's transaction: journal `op-start`, and the key's
   * highest token becomes the claim's; `minicloud.container_stale_claim` when a later claim of
   * the key was already seen, else `minicloud.container_not_found` when `required` is null
   * (nothing is written then). On PostgreSQL it is sent with the step's commit (no round trip
   * of its own), and the refusals come from the commit. True once `required` is checked.
   */
  async #start(
    trx: Db,
    run: OpRun,
    i: OpInputs,
    required: ScalarRead | undefined,
  ): Promise<boolean> {
    const record = { kind: 'op-start', ref: run.claim.op } as const;
    const stale = `${i.op} ${i.container}: claim token ${run.claim.token} is stale`;
    if (run.sabotage === undefined && this.#deps.database.dialect === 'postgres') {
      await this.#witness.fenceWithCommit(trx, run.claim, record, {
        stale: `minicloud.container_stale_claim: ${stale}`,
        required: required && {
          read: required,
          missing: `minicloud.container_not_found: ${notFoundMessage(i)}`,
        },
      });
      return true;
    }
    const fenced = await this.#witness.fenceAndRead(trx, run.claim, record, required);
    if (!fenced) throw new ContainerError('minicloud.container_stale_claim', stale);
    if (required && fenced.value === null) throw notFound(i);
    return true;
  }

  /**
   * The op's effect (its last step's write), applied through the witness under the claim the op
   * runs with: refused with `minicloud.container_fenced` when a later claim of the key was seen;
   * skipped when this op's effect was already applied (a re-run after a takeover). The op's `op`
   * journal row commits with it (or with finding it already applied).
   */
  async #effect(
    trx: Db,
    run: OpRun,
    i: OpInputs,
    write: (db: Db) => Promise<unknown>,
    statement: GatedWrite | undefined,
  ): Promise<void> {
    const { claim } = run;
    const record = { kind: 'op', ref: claim.op } as const;
    // nothing applied, yet journalled as applied
    if (run.sabotage === 'lost-op') return journal(trx, this.#deps.clock, record.kind, record.ref);
    if (statement && run.sabotage === undefined && this.#deps.database.dialect === 'postgres') {
      // Sent with the step's commit: a refusal fails the transaction (see `#step`).
      return this.#witness.applyWithCommit(trx, claim, statement, record);
    }
    const outcome = await this.#witness.apply(trx, claim, async (db) => void (await write(db)), {
      record,
      ...(statement ? { statement } : {}),
    });
    if (outcome.kind === 'refused') this.#refuse(run, i, outcome.highest);
    if (run.sabotage === 'double-apply') {
      // the same effect applied again, bypassing the "already applied" check
      await this.#witness.apply(trx, claim, async (db) => void (await write(db)), {
        idempotent: false,
      });
    }
  }

  /** The op's effect was refused, the key having seen `highest`: `minicloud.container_fenced`. */
  #refuse(run: OpRun, i: OpInputs, highest: number): never {
    run.refused = highest;
    throw new ContainerError(
      'minicloud.container_fenced',
      `${i.op} ${i.container}: token ${run.claim.token} refused, the key has seen ${highest}`,
    );
  }

  /**
   * A `minicloud.container_not_found` error when the container does not exist, unless that was
   * `checked` with the op's start.
   */
  async #need(i: OpInputs, db: Db, checked: boolean): Promise<void> {
    if (!checked && !(await this.#get(i.container, db))) throw notFound(i);
  }

  #createFlow(): Flow<any, any> {
    return linearFlow(
      'container-create',
      this.#step('pull-image', false, async (i) => i.payload.image ?? 'busybox'),
      this.#step(
        'create-container',
        true,
        async (i, db) => {
          if (await this.#get(i.container, db)) return;
          await db
            .insertInto('minicloud_containers')
            .values({
              name: i.container,
              image: i.payload.image ?? 'busybox',
              state: 'created',
              updated_at: this.#deps.clock.now(),
            })
            .execute();
        },
        {
          undo: (i, db) => this.#remove(i.container, db),
          statement: (i) => ({
            build: CREATE,
            params: {
              name: i.container,
              image: i.payload.image ?? 'busybox',
              at: this.#deps.clock.now(),
            },
          }),
        },
      ),
    );
  }

  /** `start` and `stop`: check the container exists, then move it from `from` to `to`. */
  #switchFlow(flow: string, step: string, from: string, to: string): Flow<any, any> {
    const write: GatedWrite<{ name: string; at: number }>['build'] = (
      cte,
      p,
    ) => sql`update "minicloud_containers"
      set "state" = ${to}, "updated_at" = ${p.at}::bigint
      where "name" = ${p.name} and exists (select 1 from ${sql.table(cte)})`;
    return linearFlow(
      flow,
      this.#step('check-container', false, (i, db, checked) => this.#need(i, db, checked), {
        required: (i) => ({ build: STATE, params: { name: i.container } }),
      }),
      this.#step(step, true, (i, db) => this.#setState(i.container, to, db), {
        undo: (i, db) => this.#setState(i.container, from, db),
        statement: (i) => ({
          build: write,
          params: { name: i.container, at: this.#deps.clock.now() },
        }),
      }),
    );
  }

  #deleteFlow(): Flow<any, any> {
    return linearFlow(
      'container-delete',
      // Stops the container if it exists: one statement whose result is not read, sent with
      // the step's commit on PostgreSQL (with the op's start).
      this.#step('stop-process', false, async (i, db) => {
        await sendWithCommit(db, this.#stateSet(i.container, 'stopped', db));
      }),
      this.#step('remove-container', true, (i, db) => this.#remove(i.container, db), {
        statement: (i) => ({ build: REMOVE, params: { name: i.container } }),
      }),
    );
  }
}

/**
 * The queue handlers of the simulated container runtime. Each op runs as a small revertible
 * task flow in the engine, under the queue's claim on the op (flow id `op-<op id>`, so a worker
 * that takes the op over resumes the flow from the task log instead of starting again). Each
 * step runs in one transaction committed with its SUCCESS in the task log: it changes the
 * container's row in `minicloud_containers` and journals the op in `minicloud_journal` (kind
 * `op-start` in the first step an owner runs, with its claim's fence; `op` with the effect, or
 * with finding it already applied; ref = op id). The op's effect (its last step)
 * goes through the {@link Witness}: fenced by the claim's token, recorded with a per-key sequence
 * number in `minicloud_effects`. A failing step reverts the earlier ones and fails the op, which
 * blocks the container's key.
 */
export function containerHandlers(
  deps: ContainerDeps,
): Record<ContainerOpType, ContainerOpHandler> {
  const runtime = new ContainerRuntime(deps);
  const handler =
    (op: ContainerOpType): ContainerOpHandler =>
    (payload, ctx) =>
      runtime.run(op, payload, ctx);
  return {
    create: handler('create'),
    start: handler('start'),
    stop: handler('stop'),
    delete: handler('delete'),
  };
}
