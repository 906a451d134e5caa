// Our Placement-compatible server on a SQLite file, in its own process (like Placement's), for
// bench/index.ts and test/gabbi/run.py. Usage: serve.ts <sqlite path | memory> [traits file];
// the traits file holds the standard trait names, one a line (the store's `standardTraits`).
// Prints "listening <port>".
import { readFile } from 'node:fs/promises';
import { openDatabase } from '@rigging/sql';
import { memoryStore } from '../src/index.js';
import { createPlacementServer } from '../src/http/index.js';
import { sqlStore } from '../src/sql/index.js';

const [target, traitsFile] = process.argv.slice(2);
const standardTraits =
  traitsFile === undefined
    ? undefined
    : (await readFile(traitsFile, 'utf8')).split('\n').filter((line) => line !== '');
const database = target === 'memory' ? undefined : await openDatabase(`sqlite:${target!}`);
const server = createPlacementServer(
  database ? await sqlStore(database, { standardTraits }) : memoryStore({ standardTraits }),
);
server.listen(0, '127.0.0.1', () => {
  console.log(`listening ${(server.address() as { port: number }).port}`);
});
process.on('SIGTERM', () => {
  server.close();
  void (database?.close() ?? Promise.resolve()).then(() => process.exit(0));
});
