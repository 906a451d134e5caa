/**
 * Prometheus metrics of a cloud (`GET /metrics`), fed by the libraries' events: HTTP latency
 * per route, queue depth and blocked keys, flow states and task durations, lock waits, package
 * cache traffic, reshapes.
 */
import type { FastifyInstance } from 'fastify';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Cloud } from '../cloud/index.js';

/** The metrics of one `minicloud serve`, built by {@link createMetrics}. */
export interface Metrics {
  readonly registry: Registry;
  /** Records a reshape (the startup reshape runs before the server exists). */
  observeReshape(durationMs: number, consumersMoved: number): void;
  /** Adds HTTP latency per route to `app` (call before its routes are registered). */
  instrument(app: FastifyInstance): void;
  /** Stops listening to the cloud's events. */
  close(): void;
}

/** Subscribes to `cloud`'s events and returns its metrics registry. */
export function createMetrics(cloud: Cloud): Metrics {
  const registry = new Registry();
  const http = new Histogram({
    name: 'minicloud_http_request_duration_seconds',
    help: 'HTTP request latency by route (the route pattern, not the URL)',
    labelNames: ['method', 'route', 'status'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });
  new Gauge({
    name: 'minicloud_queue_ops',
    help: 'Container operations known to this process, by status (running, pending)',
    labelNames: ['status'],
    registers: [registry],
    collect() {
      let running = 0;
      let pending = 0;
      for (const k of cloud.hub.state.queues) {
        if (k.running) running++;
        pending += k.pending.length;
      }
      this.set({ status: 'running' }, running);
      this.set({ status: 'pending' }, pending);
    },
  });
  new Gauge({
    name: 'minicloud_queue_keys',
    help: 'Queue keys that are not idle, by status (blocked keys wait for resume or discard)',
    labelNames: ['status'],
    registers: [registry],
    async collect() {
      const keys = await cloud.queue.activeKeys({ limit: 10_000 }).catch(() => []);
      this.reset();
      const counts = new Map<string, number>([['blocked', 0]]);
      for (const { status } of keys) counts.set(status, (counts.get(status) ?? 0) + 1);
      for (const [status, n] of counts) this.set({ status }, n);
    },
  });
  const flows = new Counter({
    name: 'minicloud_flow_transitions_total',
    help: 'Flow state transitions (durable in the task log), by flow name and state',
    labelNames: ['flow', 'state'],
    registers: [registry],
  });
  const tasks = new Histogram({
    name: 'minicloud_task_duration_seconds',
    help: 'Task run time from RUNNING to its outcome, by flow, task and outcome state',
    labelNames: ['flow', 'task', 'state'],
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry],
  });
  const lockWaits = new Histogram({
    name: 'minicloud_lock_wait_seconds',
    help: 'Time spent waiting for a lock before it was granted (0 when granted at once)',
    labelNames: ['mode'],
    buckets: [0, 0.001, 0.01, 0.1, 0.5, 1, 5, 30],
    registers: [registry],
  });
  const cacheRequests = new Counter({
    name: 'minicloud_package_cache_requests_total',
    help: 'Package cache acquisitions, by result (hit, miss)',
    labelNames: ['result'],
    registers: [registry],
  });
  const cacheBytes = new Counter({
    name: 'minicloud_package_cache_downloaded_bytes_total',
    help: 'Bytes the package cache downloaded and installed',
    registers: [registry],
  });
  const cacheRemovals = new Counter({
    name: 'minicloud_package_cache_removals_total',
    help: 'Packages removed from the cache, by reason (evicted, idle, outdated, …)',
    labelNames: ['reason'],
    registers: [registry],
  });
  new Gauge({
    name: 'minicloud_package_cache_bytes',
    help: 'Bytes the package cache holds on disk',
    registers: [registry],
    collect() {
      this.set(cloud.packages.stats().bytes);
    },
  });
  const reshapes = new Histogram({
    name: 'minicloud_reshape_duration_seconds',
    help: 'Duration of reshapes of the provider tree',
    buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 30],
    registers: [registry],
  });
  const moved = new Counter({
    name: 'minicloud_reshape_consumers_moved_total',
    help: 'Consumers whose allocations a reshape moved to new providers',
    registers: [registry],
  });

  const started = new Map<string, number>();
  const onTask = (e: { flowId: string; flow: string; task: string; state: string; at: number }) => {
    const key = `${e.flowId}/${e.task}`;
    if (e.state === 'RUNNING') {
      started.set(key, e.at);
      return;
    }
    const since = started.get(key);
    if (since === undefined) return;
    started.delete(key);
    tasks.observe({ flow: e.flow, task: e.task, state: e.state }, (e.at - since) / 1000);
  };
  const onFlow = (e: { flow: string; state: string }) =>
    flows.inc({ flow: e.flow, state: e.state });
  const onLock = (e: { mode: string; waitedMs: number }) =>
    lockWaits.observe({ mode: e.mode }, e.waitedMs / 1000);
  const onHit = () => cacheRequests.inc({ result: 'hit' });
  const onDownload = (e: { size: number }) => {
    cacheRequests.inc({ result: 'miss' });
    cacheBytes.inc(e.size);
  };
  const onRemove = (e: { reason: string }) => cacheRemovals.inc({ reason: e.reason });
  const offs = [
    cloud.engine.on('task:state', onTask),
    cloud.engine.on('flow:state', onFlow),
    cloud.locks.events.on('lock:acquired', onLock),
    cloud.packages.on('hit', onHit),
    cloud.packages.on('download', onDownload),
    cloud.packages.on('remove', onRemove),
  ];

  return {
    registry,
    observeReshape(durationMs, consumersMoved) {
      reshapes.observe(durationMs / 1000);
      moved.inc(consumersMoved);
    },
    instrument(app) {
      app.addHook('onResponse', async (req, reply) => {
        http.observe(
          {
            method: req.method,
            route: req.routeOptions.url ?? 'unmatched',
            status: String(reply.statusCode),
          },
          reply.elapsedTime / 1000,
        );
      });
    },
    close() {
      for (const off of offs) off();
    },
  };
}
