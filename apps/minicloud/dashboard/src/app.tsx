/** The dashboard page: header and section links, the live status line, the five views, activity. */
import { useEffect, useState } from 'preact/hooks';
import { Cache } from './cache.js';
import { Flows } from './flows.js';
import { formatClock } from './format.js';
import { Plan } from './plan.js';
import { Providers } from './providers.js';
import { Queues } from './queues.js';
import { useDashboard } from './use-dashboard.js';

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
