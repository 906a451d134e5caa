import type { AddressInfo } from 'node:net';
import { IN_CI } from '@rigging/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../src/index.js';
import { createPlacementServer } from '../src/http/index.js';
import { placementAvailable, startPlacement, type PeerPlacement } from './peer.js';
import { CAPACITY_DIFFERENCES, CAPACITY_STEPS } from './peer/capacity.js';
import { runSession } from './peer/session.js';

const available = placementAvailable();
if (!available)
  console.warn(
    'skipping the Placement comparison: /usr/bin/python3 cannot import placement (install python3-placement)',
  );

describe.skipIf(!available && !IN_CI)('compared with OpenStack Placement 8.0', () => {
  let peer: PeerPlacement;
  const server = createPlacementServer(memoryStore());
  let ours = '';
  beforeAll(async () => {
    peer = await startPlacement();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    ours = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }, 90_000);
  afterAll(async () => {
    await peer?.stop();
    await new Promise((resolve) => server.close(resolve));
  });

  it(
    'gives the same status and error code for every case of the session',
    { timeout: 60_000 },
    async () => {
      const a = await runSession(ours);
      const b = await runSession(peer.url);
      const diff = a
        .map((r, i) => ({
          name: r.name,
          ours: [r.status, r.code],
          placement: [b[i]!.status, b[i]!.code],
        }))
        .filter((d) => d.ours[0] !== d.placement[0] || d.ours[1] !== d.placement[1]);
      expect(diff).toEqual([]);
      // Bodies of successful reads have the same shape (generations aside, see the README).
      for (const [i, r] of a.entries()) {
        if (r.status !== 200) continue;
        const keys = (x: unknown) =>
          typeof x === 'object' && x ? Object.keys(x).sort() : x === undefined ? [] : [typeof x];
        expect(keys(r.body), r.name).toEqual(keys(b[i]!.body));
      }
      // Where a step says so, values too (usages, aggregates, consumer types).
      const values = a
        .map((r, i) => ({ name: r.name, ours: r.same, placement: b[i]!.same }))
        .filter((d) => d.ours !== undefined || d.placement !== undefined);
      expect(values.length).toBeGreaterThan(10);
      for (const d of values) expect(d.ours, d.name).toEqual(d.placement);
    },
  );

  // After the main session: its candidates queries must not see these providers.
  it('refuses and warns on capacity where Placement does', { timeout: 60_000 }, async () => {
    const a = await runSession(ours, 'admin', CAPACITY_STEPS);
    const b = await runSession(peer.url, 'admin', CAPACITY_STEPS);
    const rows = a.map((r, i) => ({
      name: r.name,
      ours: [r.status, r.code, r.same],
      placement: [b[i]!.status, b[i]!.code, b[i]!.same],
    }));
    const diff = rows.filter(
      (d) =>
        !(d.name in CAPACITY_DIFFERENCES) && JSON.stringify(d.ours) !== JSON.stringify(d.placement),
    );
    expect(diff).toEqual([]);
    // Where we deliberately differ, we refuse and Placement accepts.
    for (const d of rows.filter((r) => r.name in CAPACITY_DIFFERENCES))
      expect([d.ours[0], d.placement[0]], d.name).toEqual([409, 204]);
  });
});
