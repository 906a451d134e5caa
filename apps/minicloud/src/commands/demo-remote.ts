import { ADMIN_TOKEN_ENV } from '../auth/tokens.js';
import { CommandError } from '../errors.js';
import type { DemoMessage } from '../http/demo.js';
import type { Output } from '../output.js';

function unreachable(base: string, error: unknown): CommandError {
  const cause = (error as { cause?: { code?: string; message?: string } })?.cause;
  const why = cause?.code ?? cause?.message ?? (error as Error)?.message ?? String(error);
  return new CommandError(
    'minicloud.server_unreachable',
    `cannot reach minicloud serve at ${base} (${why}); is it running?`,
  );
}

/**
 * `minicloud demo --server <url>`: asks a running `minicloud serve` to run the demo story in its
 * own process (so its dashboard shows it live) and prints the story's progress and summary here,
 * line by line as the server streams them (`POST /api/demo`, newline-delimited JSON).
 */
export async function runRemoteDemo(url: string, out: Output): Promise<void> {
  let base: URL;
  try {
    base = new URL(url);
  } catch {
    throw new CommandError(
      'minicloud.invalid_input',
      `--server must be a URL such as http://127.0.0.1:8787, got ${JSON.stringify(url)}`,
    );
  }
  if (base.protocol !== 'http:' && base.protocol !== 'https:') {
    throw new CommandError(
      'minicloud.invalid_input',
      `--server must be an http:// or https:// URL, got ${JSON.stringify(url)}`,
    );
  }
  const shown = base.origin;
  const token = process.env.MINICLOUD_TOKEN || process.env[ADMIN_TOKEN_ENV];
  let res: Response;
  try {
    res = await fetch(new URL('api/demo', base.href.endsWith('/') ? base : `${base.href}/`), {
      method: 'POST',
      headers: {
        accept: 'application/x-ndjson',
        // A server that requires tokens: MINICLOUD_TOKEN, else MINICLOUD_ADMIN_TOKEN.
        ...(token ? { authorization: `Bearer ${token}` } : {}),
      },
    });
  } catch (error) {
    throw unreachable(shown, error);
  }
  if (!res.ok) {
    let code = 'minicloud.server_error';
    let message = `${shown} answered HTTP ${res.status}`;
    try {
      const body = (await res.json()) as { error?: { code?: string; message?: string } };
      if (body.error?.message) message = `${shown}: ${body.error.message}`;
      if (body.error?.code) code = body.error.code;
    } catch {
      // not JSON: not a minicloud server, or a proxy's error page
    }
    if (res.status === 404) message += ' (is this a minicloud serve?)';
    throw new CommandError(
      code.startsWith('minicloud.') ? (code as `minicloud.${string}`) : 'minicloud.server_error',
      message,
    );
  }
  if (!res.body) throw new CommandError('minicloud.server_error', `${shown} sent no body`);

  let end: Extract<DemoMessage, { type: 'end' }> | undefined;
  let buffer = '';
  const decoder = new TextDecoder();
  const handle = (line: string) => {
    if (!line.trim()) return;
    let m: DemoMessage;
    try {
      m = JSON.parse(line) as DemoMessage;
    } catch {
      throw new CommandError(
        'minicloud.server_error',
        `${shown} sent something that is not the demo stream: ${line.slice(0, 80)}`,
      );
    }
    if (m.type === 'line') out.line(m.text);
    else if (m.type === 'end') end = m;
  };
  try {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buffer += decoder.decode(chunk, { stream: true });
      let i: number;
      while ((i = buffer.indexOf('\n')) >= 0) {
        handle(buffer.slice(0, i));
        buffer = buffer.slice(i + 1);
      }
    }
    handle(buffer + decoder.decode());
  } catch (error) {
    if (error instanceof CommandError) throw error;
    throw new CommandError(
      'minicloud.server_unreachable',
      `lost the connection to ${shown} during the demo (${(error as Error)?.message ?? String(error)})`,
    );
  }
  if (!end) {
    throw new CommandError(
      'minicloud.server_unreachable',
      `${shown} closed the stream before the demo ended`,
    );
  }
  if (!end.ok) {
    const code = end.error.code.startsWith('minicloud.')
      ? (end.error.code as `minicloud.${string}`)
      : 'minicloud.demo_failed';
    throw new CommandError(code, `the demo failed on ${shown}: ${end.error.message}`);
  }
}
