import { describe, expect, it } from 'vitest';
import {
  applyEvent,
  emptyState,
  EVENT_TYPES,
  formatSse,
  MAX_FLOWS,
  MAX_IDLE_KEYS,
  type DashboardEvent,
  type DashboardState,
} from '../../src/wire.js';
import { describeEvent } from '../src/announce.js';
import { capacity } from '../src/format.js';
import { initialState, resumeSteps, scenario, teardownPlan } from './fixture-scenario.js';

const fold = (state: DashboardState, events: DashboardEvent[]) => events.reduce(applyEvent, state);

describe('applyEvent', () => {
  it('replays the whole fixture story into the expected final state', () => {
    const now = 1_700_000_000_000;
    const before = initialState(now);
    const frozen = JSON.stringify(before);
    const end = fold(
      before,
      scenario(now).map((s) => s.event),
    );
    expect(JSON.stringify(before)).toBe(frozen); // pure: input untouched
    expect(end.providers.nodes).toHaveLength(5);
    expect(end.providers.lastReshape?.before).toHaveLength(1);
    expect(end.flows.map((f) => [f.id, f.state])).toEqual([
      ['flow-2', 'reverted'],
      ['flow-1', 'succeeded'],
    ]);
    expect(end.flows[0]!.failure?.task).toBe('app-config');
    expect(end.queues.map((q) => [q.key, q.status])).toEqual([
      ['ctr-1', 'idle'],
      ['ctr-2', 'blocked'],
      ['ctr-3', 'idle'],
    ]);
    expect(end.plan?.objects.every((o) => o.state === 'destroyed')).toBe(true);
    expect(end.cache).toMatchObject({ hits: 1, misses: 1, downloads: [], locks: [] });
  });

  it('upserts flows newest first and tasks in place', () => {
    let s = emptyState();
    const flow = (id: string) => ({
      id,
      name: id,
      state: 'running' as const,
      startedAt: 1,
      endedAt: null,
      tasks: [{ name: 'a', state: 'pending' as const, startedAt: null, endedAt: null }],
      failure: null,
    });
    s = fold(s, [
      { type: 'flow:update', flow: flow('f1') },
      { type: 'flow:update', flow: flow('f2') },
      {
        type: 'flow:task',
        flowId: 'f1',
        task: { name: 'a', state: 'failed', startedAt: 1, endedAt: 2 },
        flowState: 'reverting',
      },
      {
        type: 'flow:task',
        flowId: 'f1',
        task: { name: 'b', state: 'running', startedAt: 2, endedAt: null },
      },
      {
        type: 'flow:task',
        flowId: 'nope',
        task: { name: 'x', state: 'running', startedAt: 1, endedAt: null },
      },
    ]);
    expect(s.flows.map((f) => f.id)).toEqual(['f2', 'f1']);
    expect(s.flows[1]!.state).toBe('reverting');
    expect(s.flows[1]!.tasks.map((t) => `${t.name}:${t.state}`)).toEqual(['a:failed', 'b:running']);
  });

  it('updates plan objects only for the current plan, and drains keys', () => {
    const plan = teardownPlan(1);
    let s = fold(emptyState(), [
      { type: 'plan:set', plan },
      { type: 'plan:object', planId: 'other', id: 'vm-1', state: 'destroyed' },
      { type: 'plan:object', planId: plan.id, id: 'vm-2', state: 'destroying' },
    ]);
    expect(s.plan?.objects.find((o) => o.id === 'vm-1')?.state).toBe('pending');
    expect(s.plan?.objects.find((o) => o.id === 'vm-2')?.state).toBe('destroying');
    const blocked = {
      key: 'k',
      status: 'blocked',
      running: null,
      pending: [
        { id: '1', type: 'start' },
        { id: '2', type: 'stop' },
      ],
      lastFailure: null,
    };
    s = fold(s, [{ type: 'queue:key', key: blocked }, ...resumeSteps(blocked).map((x) => x.event)]);
    expect(s.queues).toEqual([{ ...blocked, status: 'idle', pending: [] }]);
    s = applyEvent(s, { type: 'queue:removed', key: 'k' });
    expect(s.queues).toEqual([]);
  });

  it('stays bounded on a long-running server: newest flows, busy keys kept', () => {
    let state = emptyState();
    for (let i = 0; i < MAX_FLOWS + 20; i++) {
      state = applyEvent(state, {
        type: 'flow:update',
        flow: {
          id: `f-${i}`,
          name: 'deploy',
          state: 'succeeded',
          startedAt: i,
          endedAt: i,
          tasks: [],
          failure: null,
        },
      });
    }
    expect(state.flows).toHaveLength(MAX_FLOWS);
    expect(state.flows[0]!.id).toBe(`f-${MAX_FLOWS + 19}`);
    const key = (k: string, status: string, updatedAt: number): DashboardEvent => ({
      type: 'queue:key',
      key: { key: k, status, running: null, pending: [], lastFailure: null, updatedAt },
    });
    state = applyEvent(state, key('blocked-0', 'blocked', 0));
    for (let i = 1; i <= MAX_IDLE_KEYS + 10; i++)
      state = applyEvent(state, key(`k-${i}`, 'idle', i));
    expect(state.queues).toHaveLength(MAX_IDLE_KEYS + 1);
    expect(state.queues.map((k) => k.key)).toContain('blocked-0');
    expect(state.queues.map((k) => k.key)).not.toContain('k-10');
    expect(state.queues.map((k) => k.key)).toContain('k-11');
  });

  it('ignores unknown events and a snapshot replaces everything', () => {
    const s = initialState(1);
    expect(applyEvent(s, { type: 'nope' } as unknown as DashboardEvent)).toBe(s);
    expect(applyEvent(s, { type: 'snapshot', state: emptyState() })).toEqual(emptyState());
  });
});

describe('helpers', () => {
  it('formats SSE messages whose event name is the type', () => {
    const msg = formatSse({ type: 'queue:removed', key: 'a\nb' });
    expect(msg).toBe('event: queue:removed\ndata: {"type":"queue:removed","key":"a\\nb"}\n\n');
    expect(new Set(EVENT_TYPES).size).toBe(EVENT_TYPES.length);
  });

  it('computes capacity like Placement', () => {
    expect(capacity({ total: 32, reserved: 2, allocationRatio: 4, used: 0 })).toBe(120);
  });

  it('describes status changes, once', () => {
    const s = initialState(1);
    const key = { key: 'c', status: 'blocked', running: null, pending: [], lastFailure: null };
    expect(describeEvent(s, { type: 'queue:key', key })).toBe('Queue c is blocked.');
    expect(
      describeEvent(applyEvent(s, { type: 'queue:key', key }), { type: 'queue:key', key }),
    ).toBeNull();
  });
});
