import { fileURLToPath } from 'node:url';
import { spawnNode } from '@rigging/testkit';
import { expect, it } from 'vitest';

it('examples/vgpu.ts reshapes VGPUs into per-GPU providers', { timeout: 60_000 }, async () => {
  const child = spawnNode(fileURLToPath(new URL('../examples/vgpu.ts', import.meta.url)));
  expect(await child.exited, child.stderr()).toBe(0);
  expect(child.lines).toEqual([
    'periodic update refused: ReshapeNeeded',
    'reshaped: true, moved 5 consumers',
    'compute-1: {"VCPU":10,"MEMORY_MB":10240}',
    'compute-1_pgpu0: {"VGPU":4}',
    'compute-1_pgpu1: {"VGPU":1}',
    'a 1-VGPU server: VGPU from compute-1_pgpu1',
  ]);
});

it(
  'examples/candidates.ts places a VGPU server on two GPUs and the shared disk',
  { timeout: 60_000 },
  async () => {
    const child = spawnNode(fileURLToPath(new URL('../examples/candidates.ts', import.meta.url)));
    expect(await child.exited, child.stderr()).toBe(0);
    const placed =
      'compute-1 {"VCPU":2}, compute-1_pgpu0 {"VGPU":1}, compute-1_pgpu1 {"VGPU":1}, ssd-pool {"DISK_GB":20}';
    expect(child.lines).toEqual([
      `_GPU1 on compute-1_pgpu0, _GPU2 on compute-1_pgpu1: ${placed}`,
      `_GPU1 on compute-1_pgpu1, _GPU2 on compute-1_pgpu0: ${placed}`,
    ]);
  },
);
