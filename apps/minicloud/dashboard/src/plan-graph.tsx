import type { PlanView } from '../../src/wire.js';

const COL_W = 200;
const NODE_W = 160;
const NODE_H = 42;
const ROW_GAP = 14;
const TOP = 34;
const PAD = 12;

/** Reverse a path made of one `M` and then `C`, `H` or `V` commands (absolute). */
function reversePath(d: string): string {
  const points: [number, number][] = [];
  let x = 0;
  let y = 0;
  for (const [, cmd, args] of d.matchAll(/([MCHV])([^MCHV]*)/g)) {
    const nums = (args ?? '')
      .trim()
      .split(/[\s,]+/)
      .map(Number);
    if (cmd === 'M' || cmd === 'C') {
      for (let i = 0; i < nums.length; i += 2) points.push([(x = nums[i]!), (y = nums[i + 1]!)]);
    } else if (cmd === 'H') points.push([(x = nums[0]!), y]);
    else points.push([x, (y = nums[0]!)]);
  }
  const back = points.reverse();
  if (d.includes('C')) {
    const [p0, ...rest] = back;
    return `M${p0![0]},${p0![1]} C${rest.map((p) => `${p[0]},${p[1]}`).join(' ')}`;
  }
  return `M${back.map((p) => `${p[0]},${p[1]}`).join(' L')}`;
}

/** The plan as a layered SVG graph: one column per group, edges as arrows, cycles marked. */
export function PlanGraph({ plan }: { plan: PlanView }) {
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
  const nodesBottom = TOP + rows * (NODE_H + ROW_GAP);
  const objects = new Map(plan.objects.map((o) => [o.id, o]));
  const inCycle = new Set(plan.cycles.flat());

  // Edges between neighbouring columns are curves through the gutter between them; edges that
  // skip a column run around the bottom, one lane each, so they never cross a node; edges
  // within a column bend out to its right, further for each further edge.
  let lanes = 0;
  const sameColumn = new Map<number, number>();
  const paths = plan.edges.map((e): string | null => {
    const a = pos.get(e.from);
    const b = pos.get(e.to);
    if (!a || !b) return null;
    const ay = a.y + NODE_H / 2;
    const by = b.y + NODE_H / 2;
    if (a.col === b.col) {
      const n = sameColumn.get(a.col) ?? 0;
      sameColumn.set(a.col, n + 1);
      const x = a.x + NODE_W;
      const bend = x + 12 + (n % 3) * 9;
      return `M${x},${ay - 5 + (n % 3) * 5} C${bend},${ay} ${bend},${by} ${x},${by + 5 - (n % 3) * 5}`;
    }
    const [l, r, ly, ry] = a.col < b.col ? [a, b, ay, by] : [b, a, by, ay];
    let d: string;
    if (r.col - l.col === 1) {
      const x1 = l.x + NODE_W;
      const x2 = r.x;
      const mid = (x1 + x2) / 2;
      d = `M${x1},${ly} C${mid},${ly} ${mid},${ry} ${x2},${ry}`;
    } else {
      const lane = lanes++;
      const x1 = l.x + NODE_W;
      const x2 = r.x;
      const g1 = x1 + 8 + (lane % 4) * 5;
      const g2 = x2 - 8 - (lane % 4) * 5;
      const y = nodesBottom + 4 + lane * 8;
      // Ports below the centre line, apart from neighbour edges' ports.
      d = `M${x1},${ly + 10} H${g1} V${y} H${g2} V${ry + 10} H${x2}`;
    }
    // Paths run left to right; reverse so the arrow head sits on `to`.
    return a.col < b.col ? d : reversePath(d);
  });
  const width = PAD * 2 + Math.max(1, columns.length) * COL_W - (COL_W - NODE_W);
  const height = nodesBottom + (lanes > 0 ? lanes * 8 + 6 : 0) + PAD;

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
          const d = paths[i];
          return d ? (
            <path
              key={`e${i}`}
              d={d}
              class={`edge edge-${e.kind}${inCycle.has(e.from) && inCycle.has(e.to) ? ' edge-in-cycle' : ''}`}
              marker-end="url(#arrow)"
            >
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
