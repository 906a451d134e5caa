/** The flows view: task states and timings, and the failure behind a rollback. */
import type { FlowView } from '../../src/wire.js';
import { formatClock, formatDuration } from './format.js';
import { Badge, Section, Table } from './ui.js';

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
        <Table
          class="tasks"
          columns={['Task', 'State', 'Started', 'Time', 'Tries']}
          caption={`Tasks of ${flow.name}`}
        >
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
        </Table>
      </details>
    </li>
  );
}

export function Flows({ flows, now }: { flows: FlowView[]; now: number }) {
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
