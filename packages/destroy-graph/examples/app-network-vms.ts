// The spec's example: an Application owns a Network and two VMs. The Network cannot be removed
// while VMs are attached, so it takes a destruction dependency on each VM.
import { ObjectGraph, isDoomed } from '@rigging/destroy-graph';

export async function main(log: (line: string) => void = console.log): Promise<string[]> {
  const events: string[] = [];
  const graph = new ObjectGraph({
    types: {
      Application: { properties: { network: 'persistent', vms: 'persistent' } },
      Network: {
        destroy: (net) => void events.push(`destroy ${net.id}`),
        handlers: {
          // Called before a VM it depends on is destroyed.
          onVmDestroyed: (vm, { subscriber }) =>
            void events.push(`${subscriber.id} notified: ${vm.id} doomed=${String(isDoomed(vm))}`),
        },
      },
      VM: {
        properties: { network: 'persistent' },
        destroy: (vm) => void events.push(`destroy ${vm.id}`),
      },
    },
  });

  const app = graph.add({ id: 'app', type: 'Application', root: true });
  const net = graph.add({ id: 'net', type: 'Network', owner: app });
  const vms = ['vm-1', 'vm-2'].map((id) => graph.add({ id, type: 'VM', owner: app }));
  graph.set(app, 'network', net);
  graph.set(app, 'vms', vms);
  for (const vm of vms) {
    graph.set(vm, 'network', net);
    graph.subscribeDestruction(vm, net, 'onVmDestroyed'); // net depends on vm
  }

  // The user deletes the application: it is no longer a root.
  graph.removeRoot(app);
  const plan = graph.plan(graph.collect({ scope: 'persistent' }));
  log(plan.format());

  graph.events.onAny((event, payload) => {
    if (event === 'destroy:scheduled' || event === 'destroy:destroyed') {
      events.push(`${event} ${(payload as { id: string }).id}`);
    }
  });
  const report = await graph.destroy(plan, { concurrency: 4 });
  log(`status: ${report.status}; destroyed: ${report.destroyed.join(', ')}`);
  for (const e of events) log(e);
  return events;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  await main();
}
