import { expectTypeOf, test } from 'vitest';
import {
  Engine,
  linearFlow,
  task,
  unorderedFlow,
  type InputsOf,
  type OutputsOf,
} from '../src/index.js';

test('types flow from provides to outputs and from requires to inputs', () => {
  const build = task({
    name: 'build',
    requires: ['source'],
    provides: 'image',
    execute: (_c, i: { source: string }) => ({ tag: i.source }),
  });
  const push = task({
    name: 'push',
    requires: ['image', 'registry'],
    provides: ['url', 'size'],
    execute: (_c, i: { image: { tag: string }; registry: string }) => ({
      url: `${i.registry}/${i.image.tag}`,
      size: 3,
    }),
  });
  const noop = task({ name: 'noop', execute: () => null });
  expectTypeOf<OutputsOf<typeof build>>().toEqualTypeOf<{ image: { tag: string } }>();
  expectTypeOf<InputsOf<typeof push>>().toEqualTypeOf<{
    image: { tag: string };
    registry: string;
  }>();
  const flow = linearFlow('deploy', build, unorderedFlow('u', push, noop));
  expectTypeOf<InputsOf<typeof flow>>().toEqualTypeOf<{ source: string; registry: string }>();
  expectTypeOf<OutputsOf<typeof flow>>().toEqualTypeOf<{
    image: { tag: string };
    url: string;
    size: number;
  }>();
  const out = new Engine().run(flow, { inputs: { source: 's', registry: 'r' } });
  expectTypeOf(out).resolves.toEqualTypeOf<{ image: { tag: string }; url: string; size: number }>();
  // @ts-expect-error missing input 'registry'
  void new Engine().run(flow, { inputs: { source: 's' } });
});
