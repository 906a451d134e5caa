import { memoryStore } from '../src/index.js';
import { createPlacementServer } from '../src/http.js';
import { runSession } from '../test/peer-cases.js';
const server = createPlacementServer(memoryStore());
await new Promise<void>((r) => server.listen(18779, '127.0.0.1', r));
const ours = await runSession('http://127.0.0.1:18779');
const theirs = await runSession('http://127.0.0.1:18778');
for (let i = 0; i < ours.length; i++) {
  const a = ours[i]!,
    b = theirs[i]!;
  const same = a.status === b.status && a.code === b.code;
  console.log(
    `${same ? '  ' : '!!'} ${a.name.padEnd(45)} ours ${a.status} ${a.code ?? ''}  placement ${b.status} ${b.code ?? ''}`,
  );
  if (!same || process.env.SHOW)
    console.log(
      '   ours:',
      JSON.stringify(a.body)?.slice(0, 300),
      '\n   plac:',
      JSON.stringify(b.body)?.slice(0, 300),
    );
}
server.close();
