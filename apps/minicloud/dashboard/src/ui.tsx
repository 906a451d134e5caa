/** The small building blocks every view uses: a card section, a status badge, a bar. */
import type { ComponentChildren } from 'preact';
import { percent } from './format.js';

export function Section(props: {
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

export function Badge({ value, testid }: { value: string; testid?: string }) {
  const tone = value.endsWith('-in-progress') ? 'running' : value;
  return (
    <span class={`badge tone-${tone}`} data-testid={testid} data-state={value}>
      {value}
    </span>
  );
}

/** A horizontal bar with ARIA meter/progressbar semantics. */
export function Bar(props: {
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

/** A table in a wrapper that scrolls sideways, with a column header per entry of `columns`. */
export function Table(props: {
  columns: readonly string[];
  class?: string;
  testid?: string;
  /** For screen readers only. */
  caption?: string;
  children: ComponentChildren;
}) {
  return (
    <div class="table-wrap">
      <table class={props.class} data-testid={props.testid}>
        {props.caption && <caption class="sr-only">{props.caption}</caption>}
        <thead>
          <tr>
            {props.columns.map((c) => (
              <th key={c} scope="col">
                {c}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>{props.children}</tbody>
      </table>
    </div>
  );
}
