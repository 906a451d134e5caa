// A worker process for the takeover figure: claims `hold` ops and never finishes them, until the
// bench SIGKILLs it.
import { openDatabase } from '@rigging/sql';
import { createQueue } from '../src/index.js';
import { sqlBackend } from '../src/sql.js';

const [url, name, leaseMs] = process.argv.slice(2) as [string, string, string];
const database = await openDatabase(url, { poolSize: 2 });
const queue = createQueue({
  backend: sqlBackend(database, { name, pollMs: 50 }),
  concurrency: 1,
  workerId: 'doomed',
  leaseMs: Number(leaseMs),
  handlers: {
    async hold(_p: null, ctx) {
      console.log(`claimed ${ctx.id}`);
      await new Promise(() => {});
    },
  },
});
void queue;
console.log('ready');
