import type { SerializedError } from '@rigging/core';
import { describe, expectTypeOf, it } from 'vitest';
import { ObjectGraph } from '../src/index.js';
import type { DestroyGraphEvents, DestroyReport, GraphObject, PlanJSON } from '../src/index.js';

describe('types', () => {
  it('types event payloads, values and reports', () => {
    const g = new ObjectGraph();
    g.events.on('destroy:failed', (e) => {
      expectTypeOf(e.step).toEqualTypeOf<'notify' | 'destroy'>();
      expectTypeOf(e.error).toEqualTypeOf<SerializedError>();
    });
    expectTypeOf<DestroyGraphEvents['destroy:destroyed']>().toEqualTypeOf<{
      runId: number;
      id: string;
      type: string;
      group: number;
      durationMs: number;
    }>();
    const vm = g.add({ type: 'VM', value: { ip: '10.0.0.1' } });
    expectTypeOf(vm).toEqualTypeOf<GraphObject<{ ip: string }>>();
    expectTypeOf(g.guard(vm).ip).toEqualTypeOf<string>();
    expectTypeOf(g.destroy).returns.toEqualTypeOf<Promise<DestroyReport>>();
    expectTypeOf(g.plan([vm]).toJSON()).toEqualTypeOf<PlanJSON>();
  });
});
