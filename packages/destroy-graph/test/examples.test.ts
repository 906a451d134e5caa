import { describe, expect, it } from 'vitest';
import { main } from '../examples/app-network-vms.js';

describe('examples', () => {
  it('app-network-vms: VMs first, then the network (notified first), then the application', async () => {
    const lines: string[] = [];
    const events = await main((line) => lines.push(line));
    expect(lines[0]).toMatch(/^destruction plan: 4 object\(s\) in 3 group\(s\), 0 cycle\(s\)\n/);
    expect(events).toEqual([
      'destroy:scheduled vm-1',
      'destroy:scheduled vm-2',
      'destroy:scheduled net',
      'destroy:scheduled app',
      'net notified: vm-1 doomed=true',
      'net notified: vm-2 doomed=true',
      'destroy vm-1',
      'destroy vm-2',
      'destroy:destroyed vm-1',
      'destroy:destroyed vm-2',
      'destroy net',
      'destroy:destroyed net',
      'destroy:destroyed app',
    ]);
  });
});
