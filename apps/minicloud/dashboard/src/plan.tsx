/** The destruction plan view: the graph, the order by group, the edges and the cycles. */
import type { PlanView } from '../../src/wire.js';
import { PlanGraph } from './plan-graph.js';
import { Badge, Section, Table } from './ui.js';

export function Plan({ plan }: { plan: PlanView | null }) {
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
          <Table class="edges" testid="plan-edges" columns={['From', 'Kind', 'To', 'Reason']}>
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
          </Table>
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
