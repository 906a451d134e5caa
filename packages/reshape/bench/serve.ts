// Our Placement-compatible server (a SQLite file, a database URL or memory), in its own process
// (like Placement's), for bench/index.ts and test/gabbi/run.py. Usage: serve.ts <sqlite path |
// database URL | memory> [traits file] [--noauth2]; the traits file holds the standard trait
// names, one a line (the store's `standardTraits`); `--noauth2` checks tokens as Placement's
// noauth2 middleware does (the way test/gabbi/run.py runs Placement): a token `admin` or
// `admin:<project>` is admin, a request's `x-roles` header names the roles of any other token,
// no token is a 401.
// Prints "listening <port>".
import { readFile } from 'node:fs/promises';
import { openDatabase } from '@rigging/sql';
import { memoryStore } from '../src/index.js';
import { createPlacementServer } from '../src/http/index.js';
import { sqlStore } from '../src/sql/index.js';

const args = process.argv.slice(2);
const noauth2 = args.includes('--noauth2');
const [target, traitsFile] = args.filter((a) => a !== '--noauth2');
const standardTraits =
  traitsFile === undefined
    ? undefined
    : (await readFile(traitsFile, 'utf8')).split('\n').filter((line) => line !== '');
const database =
  target === 'memory'
    ? undefined
    : await openDatabase(/^[a-z]+:\/\//.test(target!) ? target! : `sqlite:${target!}`);
const server = createPlacementServer(
  database ? await sqlStore(database, { standardTraits }) : memoryStore({ standardTraits }),
  noauth2
    ? {
        auth: {
          validate: (token, req) => {
            const roles = req.headers['x-roles'];
            if (typeof roles === 'string') return { roles: roles.split(',') };
            return { roles: token.split(':')[0] === 'admin' ? ['admin'] : [] };
          },
        },
      }
    : {},
);
server.listen(0, '127.0.0.1', () => {
  console.log(`listening ${(server.address() as { port: number }).port}`);
});
process.on('SIGTERM', () => {
  server.close();
  void (database?.close() ?? Promise.resolve()).then(() => process.exit(0));
});
