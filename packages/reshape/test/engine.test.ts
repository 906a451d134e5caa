// The plan every backend applies, on a snapshot built by hand: what it tells a backend about the
// consumers it writes, and which provider generations it bumps under each option.
import { describe, expect, it } from 'vitest';
import { plan, prepare, type Snapshot } from '../src/engine.js';
import type { ReshapeRequest } from '../src/model.js';

const cn = '00000000-0000-4000-8000-000000000001';
const other = '00000000-0000-4000-8000-000000000002';
const known = '00000000-0000-4000-8000-00000000000a';
const fresh = '00000000-0000-4000-8000-00000000000b';

/** Two providers at generation 4 with 8 VCPU each; `known` holds 2 VCPU on `cn`. */
function snapshot(): Snapshot {
  const provider = (uuid: string) => ({
    uuid,
    name: uuid,
    parentProviderUuid: null,
    rootProviderUuid: uuid,
    generation: 4,
  });
  const vcpu = { total: 8, reserved: 0, minUnit: 1, maxUnit: 8, stepSize: 1, allocationRatio: 1 };
  return {
    providers: new Map([cn, other].map((uuid) => [uuid, provider(uuid)])),
    inventories: new Map([cn, other].map((uuid) => [uuid, { VCPU: vcpu }])),
    usage: new Map([
      [cn, new Map([['VCPU', 2]])],
      [other, new Map()],
    ]),
    consumers: new Map([
      [known, { projectId: 'p', userId: 'u', generation: 1, consumerType: null }],
    ]),
    oldAllocations: new Map([[known, [{ consumer: known, rp: cn, rc: 'VCPU', used: 2 }]]]),
    resourceClassExists: (rc) => rc === 'VCPU',
  };
}

const move: ReshapeRequest = {
  allocations: { [known]: { projectId: 'p', userId: 'u', allocations: { [other]: { VCPU: 2 } } } },
};

describe('plan', () => {
  it('tells a backend which consumers exist (updated) and which are new (inserted)', () => {
    const request: ReshapeRequest = {
      allocations: {
        ...move.allocations,
        [fresh]: { projectId: 'p', userId: 'u', allocations: { [cn]: { VCPU: 1 } } },
      },
    };
    const { consumers } = plan(snapshot(), prepare(request).req);
    expect(consumers.get(known)).toMatchObject({ existed: true, generation: 2 });
    expect(consumers.get(fresh)).toMatchObject({ existed: false, generation: 1 });
  });

  it('bumps every provider a write touches, or with keepGenerationsOnRemoval only those that receive allocations', () => {
    const req = prepare(move).req;
    expect(plan(snapshot(), req).providerGenerations).toEqual(
      new Map([
        [cn, 5],
        [other, 5],
      ]),
    );
    expect(plan(snapshot(), req, { keepGenerationsOnRemoval: true }).providerGenerations).toEqual(
      new Map([[other, 5]]),
    );
  });
});
