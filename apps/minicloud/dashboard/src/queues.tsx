/** The queues view: one row per key, with resume/discard on blocked keys. */
import { useState } from 'preact/hooks';
import { actionPath, type ApiError, type QueueKeyState } from '../../src/wire.js';
import { formatClock } from './format.js';
import { Badge, Section } from './ui.js';

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

export function Queues({ queues }: { queues: QueueKeyState[] }) {
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
