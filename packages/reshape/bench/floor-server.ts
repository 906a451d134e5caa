// The floor of GET /allocation_candidates: a server in its own process that holds an answer's
// body as parsed JSON and, on each GET, only serialises it and sends it — the least any server
// must do per request for that answer. PUT / stores the body. Prints "listening <port>".
import { createServer } from 'node:http';

let body: unknown = null;
const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    if (req.method === 'PUT') {
      body = JSON.parse(Buffer.concat(chunks).toString());
      res.statusCode = 204;
      res.end();
      return;
    }
    const text = JSON.stringify(body);
    res.statusCode = 200;
    res.setHeader('content-type', 'application/json');
    res.setHeader('content-length', Buffer.byteLength(text));
    res.end(text);
  });
});
server.listen(0, '127.0.0.1', () => {
  console.log(`listening ${(server.address() as { port: number }).port}`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
