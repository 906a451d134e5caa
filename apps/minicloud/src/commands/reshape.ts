import { sqlStore } from '@rigging/reshape/sql';
import { openDatabase } from '@rigging/sql';
import { formatTree, NODE_1, reshapeNode } from '../cloud/index.js';
import { CommandError, UsageError } from '../errors.js';
import { createLogger } from '../logger.js';
import { intOption } from './options.js';
import type { Command } from './types.js';

const NODE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$/;

/**
 * `minicloud reshape`: the offline upgrade path. Opens the reshape store directly on the
 * database (no server, no queue, no workers) and runs the resource-tracker flow with reshapes
 * allowed, moving VGPU inventory and allocations to per-GPU providers in one transaction.
 */
export const reshape: Command = {
  name: 'reshape',
  summary: 'offline upgrade: reshape the compute node provider tree directly in the database',
  usage: [
    'Usage: minicloud reshape [--database <url>] [--node <name>] [--gpus <n>] [--vgpus-per-gpu <n>] [--seed]',
    '',
    '  --database <url>       the database to upgrade (default: $MINICLOUD_DATABASE_URL,',
    '                         else sqlite:.minicloud/minicloud.db); stop the services first',
    '  --node <name>          compute node (root provider) to reshape (default: node-1)',
    '  --gpus <n>             physical GPUs the node has (default: 4)',
    '  --vgpus-per-gpu <n>    VGPUs per physical GPU (default: 4)',
    '  --seed                 create the node as the previous version left it when missing',
  ],
  options: {
    node: { type: 'string' },
    gpus: { type: 'string' },
    'vgpus-per-gpu': { type: 'string' },
    seed: { type: 'boolean' },
  },
  async run({ config, out, values }) {
    const started = Date.now();
    const name = (values.node as string | undefined) ?? NODE_1.name;
    if (!NODE_NAME.test(name))
      throw new UsageError(`--node must be a provider name, got '${name}'`);
    const spec = {
      name,
      gpus: intOption(values, 'gpus', 1, 64) ?? NODE_1.gpus,
      vgpusPerGpu: intOption(values, 'vgpus-per-gpu', 1, 64) ?? NODE_1.vgpusPerGpu,
    };
    await using database = await openDatabase(config.databaseUrl, config.databaseOptions);
    out.line('minicloud reshape (offline)');
    out.step('database', database.url);
    const store = await sqlStore(database);
    const logger = createLogger();
    const r = await reshapeNode(store, spec, { seed: values.seed === true, offline: true, logger });
    if (r.seeded)
      out.step('seeded', `${r.node} with its VGPUs on the root, ${r.consumersBefore} instances`);
    out.step('before', formatTree(r.before)[0] ?? '');
    for (const line of formatTree(r.before).slice(1)) out.line(`            ${line}`);
    if (r.needed) out.step('needed', r.needed);
    if (r.lost.length) {
      throw new CommandError(
        'minicloud.allocation_lost',
        `allocations of ${r.lost.join(', ')} changed; nothing else to do`,
      );
    }
    if (r.reshaped) {
      out.step('after', formatTree(r.after)[0] ?? '');
      for (const line of formatTree(r.after).slice(1)) out.line(`            ${line}`);
      out.step(
        'reshaped',
        `${r.movedConsumers.length} consumers moved to ${r.after.length - 1} GPU providers, none lost (${r.consumersAfter}/${r.consumersBefore} consumers)`,
      );
    } else {
      out.step(
        'reshaped',
        `nothing to do: ${r.node} already has ${r.after.length - 1} GPU providers`,
      );
    }
    out.line(`done in ${Date.now() - started} ms`);
  },
};
