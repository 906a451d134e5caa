// Our Placement-compatible server on a SQLite file, in its own process (like Placement's), for
// bench/index.ts. Usage: serve.ts <sqlite path | memory>; prints "listening <port>".
import { openDatabase } from '@rigging/sql';
import { memoryStore } from '../src/index.js';
import { createPlacementServer } from '../src/http/index.js';
import { sqlStore } from '../src/sql/index.js';

const memory = process.argv[2] === 'memory';
const database = memory ? undefined : await openDatabase(`sqlite:${process.argv[2]!}`);
const server = createPlacementServer(database ? await sqlStore(database) : memoryStore());
server.listen(0, '127.0.0.1', () => {
  console.log(`listening ${(server.address() as { port: number }).port}`);
});
process.on('SIGTERM', () => {
  server.close();
  void (database?.close() ?? Promise.resolve()).then(() => process.exit(0));
});
