import type { DestructionPlan } from './state.js';

const COL_W = 200;
const NODE_W = 160;
const NODE_H = 42;
const ROW_GAP = 14;
const TOP = 34;
const PAD = 12;

/** The plan as a layered SVG graph: one column per group, edges as arrows, cycles marked. */
export function PlanGraph({ plan }: { plan: DestructionPlan }) {
  const pos = new Map<string, { x: number; y: number; col: number }>();
  const columns = plan.groups.map((g) => g.slice());
  const placed = new Set(columns.flat());
  const stray = plan.objects.filter((o) => !placed.has(o.id)).map((o) => o.id);
  if (stray.length > 0) columns.push(stray);
  columns.forEach((ids, col) =>
    ids.forEach((id, row) =>
      pos.set(id, { x: PAD + col * COL_W, y: TOP + row * (NODE_H + ROW_GAP), col }),
    ),
  );
  const rows = Math.max(1, ...columns.map((c) => c.length));
  const width = PAD * 2 + Math.max(1, columns.length) * COL_W - (COL_W - NODE_W);
  const height = TOP + rows * (NODE_H + ROW_GAP) + PAD;
  const objects = new Map(plan.objects.map((o) => [o.id, o]));
  const inCycle = new Set(plan.cycles.flat());

  const edgePath = (from: string, to: string): string | null => {
    const a = pos.get(from);
    const b = pos.get(to);
    if (!a || !b) return null;
    const ay = a.y + NODE_H / 2;
    const by = b.y + NODE_H / 2;
    if (a.col === b.col) {
      const x = a.x + NODE_W;
      const bend = x + 22 + Math.abs(ay - by) / 6;
      return `M${x},${ay} C${bend},${ay} ${bend},${by} ${x},${by}`;
    }
    const forward = b.col > a.col;
    const x1 = forward ? a.x + NODE_W : a.x;
    const x2 = forward ? b.x : b.x + NODE_W;
    const mid = (x1 + x2) / 2;
    return `M${x1},${ay} C${mid},${ay} ${mid},${by} ${x2},${by}`;
  };

  const order = plan.groups.map((g, i) => `group ${i + 1}: ${g.join(', ')}`).join('; ');
  return (
    <div class="graph-wrap">
      <svg
        class="plan-graph"
        viewBox={`0 0 ${width} ${height}`}
        width={width}
        height={height}
        role="img"
        aria-label={`Destruction order, ${order}`}
        data-testid="plan-graph"
      >
        <defs>
          <marker
            id="arrow"
            viewBox="0 0 10 10"
            refX="9"
            refY="5"
            markerWidth="7"
            markerHeight="7"
            orient="auto-start-reverse"
          >
            <path d="M0,0 L10,5 L0,10 z" class="arrow-head" />
          </marker>
        </defs>
        {columns.map((_, col) => (
          <text
            key={`h${col}`}
            x={PAD + col * COL_W + NODE_W / 2}
            y={18}
            class="col-label"
            text-anchor="middle"
          >
            {col < plan.groups.length ? `Group ${col + 1}` : 'Unplaced'}
          </text>
        ))}
        {plan.edges.map((e, i) => {
          const d = edgePath(e.from, e.to);
          return d ? (
            <path key={`e${i}`} d={d} class={`edge edge-${e.kind}`} marker-end="url(#arrow)">
              <title>
                {e.from} {e.kind === 'owns' ? 'owns' : 'depends on'} {e.to}: {e.reason}
              </title>
            </path>
          ) : null;
        })}
        {[...pos.entries()].map(([id, p]) => {
          const o = objects.get(id);
          const state = o?.state ?? 'pending';
          const label = o?.name ?? id;
          return (
            <g
              key={id}
              class={`node state-${state}${inCycle.has(id) ? ' in-cycle' : ''}`}
              transform={`translate(${p.x},${p.y})`}
            >
              <rect width={NODE_W} height={NODE_H} rx={6} />
              <text x={10} y={17} class="node-name">
                {inCycle.has(id) ? '⟳ ' : ''}
                {label.length > 18 ? `${label.slice(0, 17)}…` : label}
              </text>
              <text x={10} y={33} class="node-meta">
                {o?.type ?? '?'} · {state}
              </text>
            </g>
          );
        })}
      </svg>
      <p class="legend small">
        <span class="legend-owns">── owns</span> <span class="legend-depends">‐‐ depends on</span>{' '}
        <span class="legend-cycle">⟳ in a cycle</span> · groups are destroyed left to right
      </p>
    </div>
  );
}
