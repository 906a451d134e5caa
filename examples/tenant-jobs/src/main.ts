// Run: pnpm --filter example-tenant-jobs start [database URL] (default: a SQLite file here).
// Provisions three tenants through the queue, then tears one down along its destruction plan.
import { openApp } from './app.js';

const app = await openApp({ url: process.argv[2] ?? 'sqlite:./tenant-jobs.db' });
try {
  const tenants = ['acme', 'globex', 'initech'];
  await Promise.all(
    tenants.map((tenant) => app.queue.call(tenant, { type: 'provision', payload: { tenant } })),
  );
  for (const tenant of tenants) {
    const rows = await app.database.db
      .selectFrom('tenant_resources')
      .select('name')
      .where('tenant', '=', tenant)
      .orderBy('name')
      .execute();
    console.log(`${tenant}: ${rows.map((r) => r.name).join(', ')}`);
  }
  const plan = await app.planTeardown('acme');
  console.log(
    'teardown plan for acme:',
    plan.groups.map((g) => g.objects.map((o) => o.id).join(' + ')).join(' → '),
  );
  await app.queue.call('acme', { type: 'teardown', payload: { tenant: 'acme', plan } });
  const left = await app.database.db
    .selectFrom('tenant_resources')
    .select('name')
    .where('tenant', '=', 'acme')
    .execute();
  console.log(`acme after teardown: ${left.length} resources`);
} finally {
  await app.close();
}
