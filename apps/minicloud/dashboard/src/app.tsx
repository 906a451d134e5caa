import { useEffect, useState } from 'preact/hooks';
import type { ComponentChildren } from 'preact';
import {
  actionPath,
  applyEvent,
  emptyState,
  EVENT_TYPES,
  type ApiError,
  type DashboardEvent,
  type DashboardState,
  type FlowView,
  type PackageCacheState,
  type PlanView,
  type ProviderNode,
  type QueueKeyState,
  type ReshapeRecord,
} from '../../src/wire.js';
import { describeEvent } from './announce.js';
import { capacity, formatBytes, formatClock, formatDuration, percent, shortId } from './format.js';
import { PlanGraph } from './plan-graph.js';

type Connection = 'connecting' | 'live' | 'reconnecting';

/** Subscribes to `/api/events` and folds events into state. */
function useDashboard(url: string) {
  const [state, setState] = useState<DashboardState>(emptyState);
  const [connection, setConnection] = useState<Connection>('connecting');
  const [log, setLog] = useState<{ at: number; text: string }[]>([]);
  useEffect(() => {
    let source: EventSource | null = null;
    let retry: ReturnType<typeof setTimeout> | undefined;
    let current = emptyState();
    let gotSnapshot = false;
    const onEvent = (e: MessageEvent<string>) => {
      let event: DashboardEvent;
      try {
        event = JSON.parse(e.data) as DashboardEvent;
      } catch {
        return;
      }
      // Increments only make sense on top of this connection's snapshot.
      if (event.type === 'snapshot') gotSnapshot = true;
      else if (!gotSnapshot) return;
      const text = describeEvent(current, event);
      current = applyEvent(current, event);
      setState(current);
      if (text) setLog((l) => [{ at: Date.now(), text }, ...l].slice(0, 8));
    };
    const connect = () => {
      const es = new EventSource(url);
      source = es;
      for (const type of EVENT_TYPES) es.addEventListener(type, onEvent as EventListener);
      es.onopen = () => setConnection('live');
      es.onerror = () => {
        gotSnapshot = false;
        setConnection('reconnecting');
        // The browser retries by itself unless the server answered with an error status.
        if (es.readyState === EventSource.CLOSED) {
          es.close();
          retry = setTimeout(connect, 3000);
        }
      };
    };
    connect();
    return () => {
      clearTimeout(retry);
      source?.close();
    };
  }, [url]);
  return { state, connection, log };
}

function useNow(intervalMs = 1000): number {
  const [now, setNow] = useState(Date.now);
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), intervalMs);
    return () => clearInterval(t);
  }, [intervalMs]);
  return now;
}

const SECTIONS = [
  ['providers', 'Provider tree'],
  ['queues', 'Queues'],
  ['flows', 'Flows'],
  ['plan', 'Destruction plan'],
  ['cache', 'Package cache'],
] as const;

export function App({ eventsUrl = '/api/events' }: { eventsUrl?: string }) {
  const { state, connection, log } = useDashboard(eventsUrl);
  const now = useNow();
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top" role="banner">
        <div class="brand">
          <h1>minicloud</h1>
          <span class={`conn conn-${connection}`} data-testid="connection" data-state={connection}>
            {connection === 'live' ? 'live' : connection}
          </span>
        </div>
        <nav aria-label="Sections">
          <ul>
            {SECTIONS.map(([id, label]) => (
              <li key={id}>
                <a href={`#${id}`}>{label}</a>
              </li>
            ))}
          </ul>
        </nav>
      </header>
      <div class="status-bar" role="status" aria-live="polite" data-testid="live-status">
        {log[0] ? log[0].text : connection === 'live' ? 'Connected.' : 'Connecting…'}
      </div>
      <main id="main" tabIndex={-1}>
        <Providers nodes={state.providers.nodes} reshape={state.providers.lastReshape} />
        <Queues queues={state.queues} />
        <Flows flows={state.flows} now={now} />
        <Plan plan={state.plan} />
        <Cache cache={state.cache} now={now} />
        <section class="card span-2" aria-labelledby="activity-h">
          <h2 id="activity-h">Activity</h2>
          {log.length === 0 ? (
            <p class="muted">No status changes yet.</p>
          ) : (
            <ol class="activity" data-testid="activity">
              {log.map((l, i) => (
                <li key={`${l.at}-${i}`}>
                  <time>{formatClock(l.at)}</time> {l.text}
                </li>
              ))}
            </ol>
          )}
        </section>
      </main>
      <footer class="foot">
        <p>
          minicloud dashboard · state streamed from <code>/api/events</code>
        </p>
      </footer>
    </>
  );
}

function Section(props: {
  id: string;
  title: string;
  span?: boolean;
  children: ComponentChildren;
  extra?: ComponentChildren;
}) {
  return (
    <section
      id={props.id}
      class={`card${props.span ? ' span-2' : ''}`}
      aria-labelledby={`${props.id}-h`}
      data-testid={`view-${props.id}`}
    >
      <div class="card-head">
        <h2 id={`${props.id}-h`}>{props.title}</h2>
        {props.extra}
      </div>
      {props.children}
    </section>
  );
}

function Badge({ value, testid }: { value: string; testid?: string }) {
  const tone = value.endsWith('-in-progress') ? 'running' : value;
  return (
    <span class={`badge tone-${tone}`} data-testid={testid} data-state={value}>
      {value}
    </span>
  );
}

/** A horizontal bar with ARIA meter/progressbar semantics. */
function Bar(props: {
  value: number;
  max: number;
  label: string;
  role?: 'meter' | 'progressbar';
  text?: string;
  testid?: string;
}) {
  const pct = percent(props.value, props.max);
  const tone = pct > 100 ? 'over' : pct >= 85 ? 'high' : 'ok';
  return (
    <div class="bar-row">
      <div
        class={`bar tone-${tone}`}
        role={props.role ?? 'meter'}
        aria-label={props.label}
        aria-valuemin={0}
        aria-valuemax={props.max}
        aria-valuenow={props.value}
        aria-valuetext={props.text ?? `${pct}%`}
        data-testid={props.testid}
      >
        <div class="bar-fill" style={{ width: `${Math.min(100, pct)}%` }} />
      </div>
      <span class="bar-text">{props.text ?? `${pct}%`}</span>
    </div>
  );
}

// ---------------------------------------------------------------------------------------------
// Provider tree

function ProviderTree({ nodes, testid }: { nodes: ProviderNode[]; testid: string }) {
  const byParent = new Map<string | null, ProviderNode[]>();
  const known = new Set(nodes.map((n) => n.uuid));
  for (const n of nodes) {
    const parent = n.parent !== null && known.has(n.parent) ? n.parent : null;
    const list = byParent.get(parent) ?? [];
    list.push(n);
    byParent.set(parent, list);
  }
  const render = (parent: string | null, depth: number): ComponentChildren => {
    const children = byParent.get(parent);
    if (!children?.length) return null;
    return (
      <ul
        class={depth === 0 ? 'tree' : 'tree-children'}
        data-testid={depth === 0 ? testid : undefined}
      >
        {children.map((n) => (
          <li key={n.uuid} data-testid="provider" data-name={n.name}>
            <div class="provider">
              <div class="provider-head">
                <strong>{n.name}</strong>
                <code title={n.uuid}>{shortId(n.uuid)}</code>
              </div>
              {Object.keys(n.inventories).length === 0 ? (
                <p class="muted small">no inventory</p>
              ) : (
                <dl class="inv">
                  {Object.entries(n.inventories).map(([rc, inv]) => {
                    const cap = capacity(inv);
                    return (
                      <div key={rc} class="inv-row" data-testid="inventory" data-rc={rc}>
                        <dt>{rc}</dt>
                        <dd>
                          <Bar
                            value={inv.used}
                            max={cap}
                            label={`${rc} used on ${n.name}`}
                            text={`${inv.used} / ${cap}`}
                          />
                          <span class="small muted">
                            total {inv.total}, reserved {inv.reserved}, ratio {inv.allocationRatio}
                          </span>
                        </dd>
                      </div>
                    );
                  })}
                </dl>
              )}
            </div>
            {render(n.uuid, depth + 1)}
          </li>
        ))}
      </ul>
    );
  };
  return <>{render(null, 0)}</>;
}

function Providers({ nodes, reshape }: { nodes: ProviderNode[]; reshape: ReshapeRecord | null }) {
  return (
    <Section id="providers" title="Provider tree" span>
      {nodes.length === 0 ? (
        <p class="muted">No providers reported yet.</p>
      ) : (
        <ProviderTree nodes={nodes} testid="provider-tree" />
      )}
      {reshape && (
        <details class="reshape" open data-testid="reshape">
          <summary>
            Last reshape of <strong>{reshape.node}</strong> at {formatClock(reshape.at)}
            {reshape.allocationsMoved !== undefined &&
              ` · ${reshape.allocationsMoved} allocations moved`}
          </summary>
          {reshape.reason && <p class="small">{reshape.reason}</p>}
          <div class="before-after">
            <div>
              <h3>Before ({reshape.before.length} providers)</h3>
              <ProviderTree nodes={reshape.before} testid="reshape-before" />
            </div>
            <div>
              <h3>After ({reshape.after.length} providers)</h3>
              <ProviderTree nodes={reshape.after} testid="reshape-after" />
            </div>
          </div>
        </details>
      )}
    </Section>
  );
}

// ---------------------------------------------------------------------------------------------
// Queues

function QueueActions({ queueKey }: { queueKey: string }) {
  const [busy, setBusy] = useState<null | 'resume' | 'discard'>(null);
  const [error, setError] = useState<string | null>(null);
  const act = async (action: 'resume' | 'discard') => {
    setBusy(action);
    setError(null);
    try {
      const res = await fetch(actionPath(queueKey, action), { method: 'POST' });
      if (!res.ok) {
        const body = (await res.json().catch(() => null)) as ApiError | null;
        setError(body?.error.message ?? `${action} failed (${res.status})`);
      }
    } catch (err) {
      setError(`${action} failed: ${String(err)}`);
    } finally {
      setBusy(null);
    }
  };
  return (
    <div class="actions">
      <button
        type="button"
        class="btn primary"
        disabled={busy !== null}
        aria-label={`Resume ${queueKey}`}
        data-testid={`resume-${queueKey}`}
        onClick={() => void act('resume')}
      >
        {busy === 'resume' ? 'Resuming…' : 'Resume'}
      </button>
      <button
        type="button"
        class="btn danger"
        disabled={busy !== null}
        aria-label={`Discard pending operations of ${queueKey}`}
        data-testid={`discard-${queueKey}`}
        onClick={() => void act('discard')}
      >
        {busy === 'discard' ? 'Discarding…' : 'Discard'}
      </button>
      {error && (
        <p class="error small" role="alert">
          {error}
        </p>
      )}
    </div>
  );
}

function Queues({ queues }: { queues: QueueKeyState[] }) {
  const blocked = queues.filter((q) => q.status === 'blocked').length;
  return (
    <Section
      id="queues"
      title="Queues"
      extra={
        <span class="muted small">
          {queues.length} keys{blocked > 0 && `, ${blocked} blocked`}
        </span>
      }
    >
      {queues.length === 0 ? (
        <p class="muted">No queue keys.</p>
      ) : (
        <ul class="rows" data-testid="queue-list">
          {queues.map((q) => (
            <li
              key={q.key}
              class={`row${q.status === 'blocked' ? ' row-blocked' : ''}`}
              data-testid="queue-row"
              data-key={q.key}
              data-status={q.status}
              data-state={q.status}
            >
              <div class="row-head">
                <h3>{q.key}</h3>
                <Badge value={q.status} testid="queue-status" />
              </div>
              {q.running && (
                <p class="small">
                  Running: <code>{q.running.type}</code> <span class="muted">{q.running.id}</span>
                </p>
              )}
              {q.pending.length > 0 ? (
                <div class="small">
                  <span>Pending ({q.pending.length}):</span>
                  <ol class="ops" data-testid="queue-pending">
                    {q.pending.map((op) => (
                      <li key={op.id}>
                        <code>{op.type}</code> <span class="muted">{op.id}</span>
                      </li>
                    ))}
                  </ol>
                </div>
              ) : (
                <p class="small muted">Nothing pending.</p>
              )}
              {q.lastFailure && (
                <p class="failure small" data-testid="queue-failure">
                  Last failure: <code>{q.lastFailure.type}</code> ({q.lastFailure.opId}) at{' '}
                  {formatClock(q.lastFailure.at)}: {q.lastFailure.message}
                </p>
              )}
              {q.status === 'blocked' && <QueueActions queueKey={q.key} />}
            </li>
          ))}
        </ul>
      )}
    </Section>
  );
}

// ---------------------------------------------------------------------------------------------
// Flows

function span(start: number | null, end: number | null, now: number): string {
  if (start === null) return '–';
  return formatDuration((end ?? now) - start);
}

/** Flows shown with their task table open: the newest few, and any not finished or rolled back. */
const OPEN_FLOWS = 3;

function expanded(flow: FlowView, index: number): boolean {
  return index < OPEN_FLOWS || flow.state !== 'succeeded' || flow.failure !== null;
}

function FlowCard({ flow, now, open }: { flow: FlowView; now: number; open: boolean }) {
  const done = flow.tasks.filter((t) => t.state === 'succeeded').length;
  return (
    <li class="row" data-testid="flow" data-flow={flow.id} data-state={flow.state}>
      <div class="row-head">
        <h3>
          {flow.name} <span class="muted small">{flow.id}</span>
        </h3>
        <Badge value={flow.state} testid="flow-state" />
      </div>
      <p class="small muted">
        started {formatClock(flow.startedAt)} · {flow.endedAt ? 'took' : 'running for'}{' '}
        {span(flow.startedAt, flow.endedAt, now)}
        {flow.owner && ` · on ${flow.owner}`}
      </p>
      {flow.failure && (
        <p class="failure small" data-testid="flow-failure">
          Rolled back because <code>{flow.failure.task}</code> failed: {flow.failure.message}
        </p>
      )}
      <details class="flow-tasks" open={open} data-testid="flow-tasks">
        <summary>
          Tasks ({done}/{flow.tasks.length} succeeded)
        </summary>
        <div class="table-wrap">
          <table class="tasks">
            <caption class="sr-only">Tasks of {flow.name}</caption>
            <thead>
              <tr>
                <th scope="col">Task</th>
                <th scope="col">State</th>
                <th scope="col">Started</th>
                <th scope="col">Time</th>
                <th scope="col">Tries</th>
              </tr>
            </thead>
            <tbody>
              {flow.tasks.map((t) => (
                <tr key={t.name} data-testid="task" data-task={t.name} data-state={t.state}>
                  <th scope="row">
                    {t.name}
                    {t.error && <span class="task-error small">{t.error}</span>}
                  </th>
                  <td>
                    <Badge value={t.state} />
                  </td>
                  <td>{formatClock(t.startedAt)}</td>
                  <td>{span(t.startedAt, t.endedAt, now)}</td>
                  <td>{t.attempts ?? (t.startedAt ? 1 : 0)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </details>
    </li>
  );
}

function Flows({ flows, now }: { flows: FlowView[]; now: number }) {
  return (
    <Section id="flows" title="Flows">
      {flows.length === 0 ? (
        <p class="muted">No flows yet.</p>
      ) : (
        // Scrolls on its own at laptop widths (many flows); focusable so keys scroll it.
        <ul
          class="rows flow-list"
          data-testid="flow-list"
          tabIndex={0}
          aria-label={`${flows.length} flows, newest first`}
        >
          {flows.map((f, i) => (
            <FlowCard key={f.id} flow={f} now={now} open={expanded(f, i)} />
          ))}
        </ul>
      )}
    </Section>
  );
}

// ---------------------------------------------------------------------------------------------
// Destruction plan

function Plan({ plan }: { plan: PlanView | null }) {
  if (!plan) {
    return (
      <Section id="plan" title="Destruction plan" span>
        <p class="muted">No teardown yet.</p>
      </Section>
    );
  }
  const objects = new Map(plan.objects.map((o) => [o.id, o]));
  const inCycle = new Set(plan.cycles.flat());
  const destroyed = plan.objects.filter((o) => o.state === 'destroyed').length;
  return (
    <Section
      id="plan"
      title="Destruction plan"
      span
      extra={
        <span class="muted small">
          {plan.root} · {destroyed}/{plan.objects.length} destroyed
        </span>
      }
    >
      <PlanGraph plan={plan} />
      <div class="plan-lists">
        <div>
          <h3>Order</h3>
          <ol class="groups" data-testid="plan-groups">
            {plan.groups.map((g, i) => (
              <li key={i} data-testid="plan-group" data-index={i}>
                <span class="group-label">Group {i + 1}</span>
                <ul class="group-objects">
                  {g.map((id) => {
                    const o = objects.get(id);
                    return (
                      <li
                        key={id}
                        data-testid="plan-object"
                        data-id={id}
                        data-state={o?.state ?? 'pending'}
                      >
                        <span>
                          <span class="muted small">{o?.type ?? '?'}</span> {o?.name ?? id}
                          {inCycle.has(id) && (
                            <span class="cycle-mark" title="part of a cycle">
                              {' '}
                              ⟳ cycle
                            </span>
                          )}
                        </span>
                        <Badge value={o?.state ?? 'pending'} />
                      </li>
                    );
                  })}
                </ul>
              </li>
            ))}
          </ol>
        </div>
        <div>
          <h3>Edges</h3>
          <div class="table-wrap">
            <table class="edges" data-testid="plan-edges">
              <thead>
                <tr>
                  <th scope="col">From</th>
                  <th scope="col">Kind</th>
                  <th scope="col">To</th>
                  <th scope="col">Reason</th>
                </tr>
              </thead>
              <tbody>
                {plan.edges.map((e, i) => (
                  <tr key={i} data-kind={e.kind}>
                    <td>{objects.get(e.from)?.name ?? e.from}</td>
                    <td>
                      <span class={`edge-kind edge-${e.kind}`}>
                        {e.kind === 'owns' ? 'owns' : 'depends on'}
                      </span>
                    </td>
                    <td>{objects.get(e.to)?.name ?? e.to}</td>
                    <td class="small">{e.reason}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          {plan.cycles.length > 0 && (
            <div class="cycles" data-testid="plan-cycles">
              <h3>Cycles ({plan.cycles.length})</h3>
              <ul>
                {plan.cycles.map((c, i) => (
                  <li key={i}>
                    ⟳ {c.map((id) => objects.get(id)?.name ?? id).join(' → ')} →{' '}
                    {objects.get(c[0] ?? '')?.name ?? c[0]}
                  </li>
                ))}
              </ul>
            </div>
          )}
        </div>
      </div>
    </Section>
  );
}

// ---------------------------------------------------------------------------------------------
// Package cache

function Cache({ cache, now }: { cache: PackageCacheState; now: number }) {
  const lookups = cache.hits + cache.misses;
  return (
    <Section id="cache" title="Package cache" span>
      <div class="cache-top">
        <div>
          <h3>Usage</h3>
          <Bar
            value={cache.bytesUsed}
            max={cache.capBytes}
            label="Cache bytes used of cap"
            text={`${formatBytes(cache.bytesUsed)} / ${formatBytes(cache.capBytes)}`}
            testid="cache-usage"
          />
        </div>
        <dl class="stats" data-testid="cache-stats">
          <div>
            <dt>Hits</dt>
            <dd data-testid="cache-hits">{cache.hits}</dd>
          </div>
          <div>
            <dt>Misses</dt>
            <dd data-testid="cache-misses">{cache.misses}</dd>
          </div>
          <div>
            <dt>Hit ratio</dt>
            <dd>{lookups ? `${percent(cache.hits, lookups)}%` : '–'}</dd>
          </div>
        </dl>
      </div>
      <h3>Downloads in progress</h3>
      {cache.downloads.length === 0 ? (
        <p class="muted small">None.</p>
      ) : (
        <ul class="downloads" data-testid="downloads">
          {cache.downloads.map((d) => (
            <li key={d.id} data-testid="download" data-id={d.id}>
              <span>
                {d.fqn} <span class="muted">{d.version}</span>
              </span>
              <Bar
                role="progressbar"
                value={d.bytesDone}
                max={d.bytesTotal ?? 0}
                label={`Download of ${d.fqn} ${d.version}`}
                text={`${formatBytes(d.bytesDone)} / ${d.bytesTotal === null ? '?' : formatBytes(d.bytesTotal)}`}
              />
            </li>
          ))}
        </ul>
      )}
      <div class="cache-tables">
        <div>
          <h3>Entries</h3>
          {cache.entries.length === 0 ? (
            <p class="muted small">Empty.</p>
          ) : (
            <div class="table-wrap">
              <table data-testid="cache-entries">
                <thead>
                  <tr>
                    <th scope="col">Package</th>
                    <th scope="col">Version</th>
                    <th scope="col">Id</th>
                    <th scope="col">Size</th>
                    <th scope="col">In use</th>
                  </tr>
                </thead>
                <tbody>
                  {cache.entries.map((e) => (
                    <tr key={e.id}>
                      <th scope="row">{e.fqn}</th>
                      <td>{e.version}</td>
                      <td>
                        <code title={e.id}>{shortId(e.id)}</code>
                      </td>
                      <td>{formatBytes(e.bytes)}</td>
                      <td>{e.inUse > 0 ? `yes (${e.inUse})` : 'no'}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </div>
        <div>
          <h3>Lock holders</h3>
          {cache.locks.length === 0 ? (
            <p class="muted small">No locks held.</p>
          ) : (
            <div class="table-wrap">
              <table data-testid="cache-locks">
                <thead>
                  <tr>
                    <th scope="col">Lock</th>
                    <th scope="col">Mode</th>
                    <th scope="col">Pid</th>
                    <th scope="col">Held</th>
                  </tr>
                </thead>
                <tbody>
                  {cache.locks.map((l) => (
                    <tr key={`${l.key}-${l.pid}-${l.since}`}>
                      <th scope="row">
                        <code>{l.key}</code>
                      </th>
                      <td>{l.mode}</td>
                      <td>{l.pid ?? '–'}</td>
                      <td>{formatDuration(now - l.since)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </div>
      </div>
    </Section>
  );
}
