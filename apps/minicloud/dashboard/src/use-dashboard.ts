import { useEffect, useState } from 'preact/hooks';
import {
  applyEvent,
  emptyState,
  EVENT_TYPES,
  type DashboardEvent,
  type DashboardState,
} from '../../src/wire.js';
import { describeEvent } from './announce.js';

export type Connection = 'connecting' | 'live' | 'reconnecting';

/**
 * Subscribes to `/api/events` and folds its events into state; `log` holds the latest status
 * sentences (newest first) for the live region.
 */
export function useDashboard(url: string) {
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
