import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { ReshapeStore, StoreOptions } from '../../src/index.js';
import { STANDARD_TRAITS } from '../../src/index.js';
import { compute, expectCode } from './helpers.js';

/** @internal */
export function traitCases(suite: {
  store: ReshapeStore;
  make: (options?: StoreOptions) => Promise<ReshapeStore>;
}): void {
  describe('traits', () => {
    it('sets traits with generations; custom traits must exist', async () => {
      const { store } = suite;
      const cn = await compute(store);
      await expectCode(
        store.setTraits(cn.uuid, { generation: cn.generation, traits: ['CUSTOM_FAST'] }),
        'reshape.trait_not_found',
      );
      await store.createTrait('CUSTOM_FAST');
      const r = await store.setTraits(cn.uuid, {
        generation: cn.generation,
        traits: ['CUSTOM_FAST', 'HW_CPU_X86_AVX2'],
      });
      expect(r).toEqual({
        generation: cn.generation + 1,
        traits: ['CUSTOM_FAST', 'HW_CPU_X86_AVX2'],
      });
      await expectCode(
        store.setTraits(cn.uuid, { generation: cn.generation, traits: [] }),
        'reshape.concurrent_update',
      );
      expect(await store.listTraits()).toContain('CUSTOM_FAST');
    });

    it('without standardTraits, serves os-traits and refuses made-up standard names', async () => {
      const { store } = suite;
      const listed = await store.listTraits();
      expect(listed.filter((t) => !t.startsWith('CUSTOM_'))).toEqual([...STANDARD_TRAITS]);
      const cn = await compute(store);
      await store.setTraits(cn.uuid, {
        generation: cn.generation,
        traits: ['HW_CPU_X86_AVX', 'MISC_SHARES_VIA_AGGREGATE'],
      });
      const error = await expectCode(
        store.setTraits(cn.uuid, { generation: cn.generation + 1, traits: ['MADE_UP_TRAIT'] }),
        'reshape.trait_not_found',
      );
      expect(error.message).toBe('No such trait(s): MADE_UP_TRAIT');
      await expectCode(store.deleteTrait('MADE_UP_TRAIT'), 'reshape.trait_not_found');
    });

    it('with standardTraits, only those and created custom traits exist', async () => {
      const store = await suite.make({
        standardTraits: new Set(['HW_CPU_X86_SSE', 'HW_CPU_X86_AVX2']),
      });
      try {
        await store.createTrait('CUSTOM_LISTED');
        const listed = await store.listTraits();
        expect(listed.filter((t) => !t.startsWith('CUSTOM_'))).toEqual([
          'HW_CPU_X86_AVX2',
          'HW_CPU_X86_SSE',
        ]);
        expect(listed).toContain('CUSTOM_LISTED');

        const cn = await compute(store);
        await store.setTraits(cn.uuid, { generation: cn.generation, traits: ['HW_CPU_X86_SSE'] });
        const before = await store.getTraits(cn.uuid);
        const error = await expectCode(
          store.setTraits(cn.uuid, {
            generation: before.generation,
            traits: ['HW_CPU_X86_AVX2', 'NO_SUCH_TRAIT', 'CUSTOM_NOT_CREATED', 'NO_SUCH_TRAIT'],
          }),
          'reshape.trait_not_found',
        );
        expect(error.message).toBe('No such trait(s): NO_SUCH_TRAIT, CUSTOM_NOT_CREATED');
        expect(error.details).toEqual({ traits: ['NO_SUCH_TRAIT', 'CUSTOM_NOT_CREATED'] });
        expect(await store.getTraits(cn.uuid)).toEqual(before);
        await expectCode(
          store.setTraits(cn.uuid, { generation: before.generation, traits: ['bad name'] }),
          'reshape.invalid_input',
        );

        const r = await store.setTraits(cn.uuid, {
          generation: before.generation,
          traits: ['HW_CPU_X86_AVX2', 'CUSTOM_LISTED'],
        });
        expect(r).toEqual({
          generation: before.generation + 1,
          traits: ['CUSTOM_LISTED', 'HW_CPU_X86_AVX2'],
        });
      } finally {
        await store.close();
      }
    });

    it('deletes an unused custom trait; refuses unknown, standard and used ones', async () => {
      const { store } = suite;
      const cn = await compute(store);
      const unused = `CUSTOM_UNUSED_${tag()}`;
      const used = `CUSTOM_USED_${tag()}`;
      await store.createTrait(unused);
      await store.createTrait(used);
      await store.setTraits(cn.uuid, {
        generation: cn.generation,
        traits: [used, 'HW_GPU_API_VULKAN'],
      });

      let error = await expectCode(store.deleteTrait(used), 'reshape.trait_in_use');
      expect(error.message).toBe(`The trait ${used} is in use by a resource provider.`);
      error = await expectCode(store.deleteTrait('HW_GPU_API_VULKAN'), 'reshape.invalid_input');
      expect(error.message).toBe('Cannot delete standard trait HW_GPU_API_VULKAN.');
      await expectCode(store.deleteTrait(`CUSTOM_NEVER_${tag()}`), 'reshape.trait_not_found');
      await expectCode(store.deleteTrait('not a trait'), 'reshape.trait_not_found');
      expect(await store.listTraits()).toEqual(expect.arrayContaining([unused, used]));

      await store.deleteTrait(unused);
      expect(await store.listTraits()).not.toContain(unused);
      await expectCode(store.deleteTrait(unused), 'reshape.trait_not_found');
      const generation = (await store.getTraits(cn.uuid)).generation;
      await store.setTraits(cn.uuid, { generation, traits: [] });
      await store.deleteTrait(used);
      expect(await store.listTraits()).not.toContain(used);
    });

    it('lists traits some provider has, or none has, with associated', async () => {
      const store = await suite.make({ standardTraits: ['HW_NIC_SRIOV', 'HW_CPU_X86_SSE'] });
      try {
        const cn = await compute(store);
        const free = `CUSTOM_FREE_${tag()}`;
        const taken = `CUSTOM_TAKEN_${tag()}`;
        await store.createTrait(free);
        await store.createTrait(taken);
        await store.setTraits(cn.uuid, {
          generation: cn.generation,
          traits: [taken, 'HW_NIC_SRIOV'],
        });
        const associated = await store.listTraits({ associated: true });
        expect(associated).toEqual(expect.arrayContaining([taken, 'HW_NIC_SRIOV']));
        expect(associated).not.toContain(free);
        expect(associated).not.toContain('HW_CPU_X86_SSE');
        const unassociated = await store.listTraits({ associated: false });
        expect(unassociated).toEqual(expect.arrayContaining([free, 'HW_CPU_X86_SSE']));
        expect(unassociated).not.toContain(taken);
        expect(unassociated).not.toContain('HW_NIC_SRIOV');
        expect(new Set([...associated, ...unassociated])).toEqual(
          new Set(await store.listTraits()),
        );
        expect(await store.listTraits({})).toEqual(await store.listTraits());
      } finally {
        await store.close();
      }
    });

    it('refuses a bad standardTraits with a TypeError naming the value', async () => {
      await expect(suite.make({ standardTraits: ['HW_OK', 'lower_case'] })).rejects.toThrow(
        /standardTraits.*"lower_case"/,
      );
      await expect(suite.make({ standardTraits: ['CUSTOM_MINE'] })).rejects.toThrow(
        /standardTraits.*"CUSTOM_MINE"/,
      );
      await expect(
        suite.make({ standardTraits: 'HW_CPU' as unknown as Iterable<string> }),
      ).rejects.toThrow(TypeError);
    });
  });
}

/** A suffix for trait names unique to one run (stores may share storage). */
function tag(): string {
  return randomUUID().slice(0, 8).toUpperCase().replace(/-/g, '_');
}
