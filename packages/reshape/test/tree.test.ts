import { describe, expect, it } from 'vitest';
import { ProviderTree } from '../src/index.js';

describe('ProviderTree', () => {
  it('copies deeply and diffs added, removed, moved, renamed, inventories and traits', () => {
    const a = new ProviderTree();
    const root = a.newRoot('cn1', undefined, 3);
    a.newChild('numa0', 'cn1');
    a.newChild('numa1', 'cn1');
    a.newChild('gpu0', 'numa0');
    a.updateInventory('cn1', { VCPU: { total: 8 } });
    const b = a.copy();
    b.updateInventory('cn1', { VCPU: { total: 16 } });
    b.remove('numa1');
    b.move('gpu0', 'cn1');
    b.rename('numa0', 'numa-zero');
    b.newChild('gpu1', 'cn1');
    b.updateTraits('gpu1', ['CUSTOM_B', 'CUSTOM_A', 'CUSTOM_A']);
    expect(a.data('cn1').inventories.VCPU!.total).toBe(8);
    expect(a.exists('numa1')).toBe(true);
    const d = a.diff(b);
    expect(d.added.map((p) => p.name)).toEqual(['gpu1']);
    expect(d.removed.map((p) => p.name)).toEqual(['numa1']);
    expect(d.moved).toEqual([
      { uuid: a.data('gpu0').uuid, from: a.data('numa0').uuid, to: root.uuid },
    ]);
    expect(d.renamed).toEqual([{ uuid: a.data('numa0').uuid, from: 'numa0', to: 'numa-zero' }]);
    expect(d.inventories.map((i) => i.uuid)).toEqual([root.uuid]);
    expect(d.traits).toEqual([
      { uuid: b.data('gpu1').uuid, before: [], after: ['CUSTOM_A', 'CUSTOM_B'] },
    ]);
    expect(b.diff(b.copy())).toEqual({
      added: [],
      removed: [],
      moved: [],
      renamed: [],
      inventories: [],
      traits: [],
    });
    expect(a.hasInventoryChanged('cn1', { VCPU: { total: 8, reserved: 0 } })).toBe(false);
    expect(b.providers().map((p) => p.name)).toEqual(['cn1', 'numa-zero', 'gpu0', 'gpu1']);
    expect(() => b.move('cn1', 'gpu0')).toThrow(/descendant/);
    expect(() => b.newChild('gpu0', 'cn1')).toThrow(/already/);
    b.remove('cn1');
    expect(b.size).toBe(0);
  });
});
