/** The provider tree view, with the last reshape's before and after. */
import type { ComponentChildren } from 'preact';
import type { ProviderNode, ReshapeRecord } from '../../src/wire.js';
import { capacity, formatClock, shortId } from './format.js';
import { Bar, Section } from './ui.js';

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

export function Providers({
  nodes,
  reshape,
}: {
  nodes: ProviderNode[];
  reshape: ReshapeRecord | null;
}) {
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
