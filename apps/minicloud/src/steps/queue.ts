import { sleep } from '@rigging/core';
import { CommandError } from '../errors.js';
import type { ContainerOpPayload, ContainerOpType } from '../cloud/index.js';
import type { DemoStep } from './types.js';

export const CONTAINERS = ['ctr-1', 'ctr-2', 'ctr-3'];
const OPS: ContainerOpType[] = ['create', 'start', 'stop', 'delete'];

/**
 * Story step 3: create/start/stop/delete for three containers cast to the queue keyed by
 * container; statuses stream; ctr-2's start fails, so its later ops are cancelled and it is
 * `blocked`, while the others carry on. Afterwards ctr-2's held ops are discarded and it is deleted.
 */
export const queueStep: DemoStep = {
  label: 'queue',
  async run({ cloud, summary, detail, workers }) {
    for (const key of CONTAINERS) {
      if ((await cloud.queue.keyStatus(key)) === 'blocked') {
        detail(`${key} was left blocked by an earlier run: discarding its held ops`);
        await cloud.queue.discard(key);
      }
    }
    // Other processes' work is not reported as events here: with workers, statuses are polled.
    const offs = workers
      ? []
      : [
          cloud.queue.on('key:status', ({ key, status }) => {
            if (CONTAINERS.includes(key)) detail(`${key.padEnd(6)} ${status}`);
          }),
          cloud.queue.on('op:failed', ({ key, type, error }) =>
            detail(`${key.padEnd(6)} ${type} failed: ${error.message}`),
          ),
          cloud.queue.on('op:cancelled', ({ key, type }) =>
            detail(`${key.padEnd(6)} ${type} cancelled (an earlier op of ${key} failed)`),
          ),
        ];
    try {
      const ids: string[] = [];
      for (const op of OPS) {
        for (const key of CONTAINERS) {
          const payload: ContainerOpPayload = { durationMs: 50 };
          if (op === 'create') payload.image = key === 'ctr-2' ? 'example/broken:1' : 'nginx:1.27';
          if (op === 'start' && key === 'ctr-2') payload.fail = 'entrypoint exited with code 1';
          ids.push(await cloud.castContainerOp(key, op, payload));
        }
      }
      detail(`cast ${ids.length} ops (${OPS.join(', ')} × ${CONTAINERS.join(', ')})`);
      // Wait until every op finished, or is held behind a blocked key (cast after the failure).
      const deadline = Date.now() + 60_000;
      const seen = new Map<string, string>();
      for (;;) {
        if (workers) {
          for (const key of CONTAINERS) {
            const status = await cloud.queue.keyStatus(key);
            if (seen.get(key) !== status) detail(`${key.padEnd(6)} ${status}`);
            seen.set(key, status);
          }
        }
        let settled = true;
        for (const id of ids) {
          const op = await cloud.queue.get(id);
          if (
            !op ||
            op.status === 'succeeded' ||
            op.status === 'failed' ||
            op.status === 'cancelled'
          )
            continue;
          if (op.status === 'queued' && (await cloud.queue.keyStatus(op.key)) === 'blocked')
            continue;
          settled = false;
          break;
        }
        if (settled) break;
        if (Date.now() > deadline)
          throw new CommandError(
            'minicloud.queue_stuck',
            'container ops did not finish within 60 s',
          );
        await sleep(25);
      }
      const blocked: string[] = [];
      for (const key of CONTAINERS)
        if ((await cloud.queue.keyStatus(key)) === 'blocked') blocked.push(key);
      for (const key of blocked) {
        const held = await cloud.queue.discard(key);
        detail(
          `${key} is blocked: ${held.length ? `discarding ${held.length} held op(s), ` : ''}then deleting it`,
        );
      }
      let ok = 0;
      let failed = 0;
      let cancelled = 0;
      for (const id of ids) {
        const status = (await cloud.queue.get(id))?.status;
        if (status === 'succeeded') ok++;
        else if (status === 'failed') failed++;
        else if (status === 'cancelled') cancelled++;
      }
      summary.containers = { succeeded: ok, failed, cancelled, blocked };
      for (const key of blocked) {
        await cloud.queue.wait(await cloud.castContainerOp(key, 'delete', { durationMs: 20 }), {
          timeoutMs: 60_000,
        });
      }
      return `${ok} ops succeeded, ${failed} failed, ${cancelled} cancelled; blocked: ${blocked.join(', ') || 'none'}; the others carried on`;
    } finally {
      for (const off of offs) off();
    }
  },
};
