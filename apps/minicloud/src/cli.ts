import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { RiggingError } from '@rigging/core';
import { commands, type Command } from './commands/index.js';
import { loadConfig } from './config.js';
import { UsageError } from './errors.js';
import { streamOutput, type Output } from './output.js';

const globalOptions = {
  database: { type: 'string' },
  'data-dir': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

function mainHelp(): string {
  const width = Math.max(...commands.map((c) => c.name.length));
  return [
    'minicloud: a miniature cloud control plane built on rigging',
    '',
    'Usage: minicloud <command> [options]',
    '',
    'Commands:',
    ...commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    '',
    'Options:',
    '  --database <url>  sqlite:<path>, sqlite::memory:, postgres://… or mysql://…',
    '                    (default: $MINICLOUD_DATABASE_URL, else sqlite:.minicloud/minicloud.db)',
    '  --data-dir <dir>  package cache and repository (default: $MINICLOUD_DATA_DIR, else the',
    "                    SQLite file's directory, else .minicloud)",
    '  -h, --help        show help (minicloud <command> --help for a command)',
  ].join('\n');
}

function commandHelp(command: Command): string {
  return [`minicloud ${command.name}: ${command.summary}`, '', ...command.usage].join('\n');
}

/** Runs the CLI with `argv` (without node and script) and resolves with the exit code. */
export async function main(
  argv: string[],
  out: Output = streamOutput(),
  err: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
): Promise<number> {
  try {
    const [name, ...rest] = argv;
    if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
      out.line(mainHelp());
      return 0;
    }
    const command = commands.find((c) => c.name === name);
    if (!command) {
      throw new UsageError(
        name.startsWith('-')
          ? `expected a command before ${name}`
          : `unknown command '${name}' (commands: ${commands.map((c) => c.name).join(', ')})`,
      );
    }
    let parsed: ReturnType<typeof parseArgs>;
    try {
      parsed = parseArgs({
        args: rest,
        options: { ...globalOptions, ...command.options },
        allowPositionals: command.positionals ?? false,
        strict: true,
      });
    } catch (error) {
      throw new UsageError((error as Error).message.split('\n')[0]!);
    }
    const values = parsed.values as Record<string, string | boolean | undefined>;
    if (values.help) {
      out.line(commandHelp(command));
      return 0;
    }
    const config = loadConfig({
      database: values.database as string | undefined,
      dataDir: values['data-dir'] as string | undefined,
    });
    await command.run({ config, out, values, positionals: parsed.positionals });
    return 0;
  } catch (error) {
    if (error instanceof UsageError) {
      err(`minicloud: ${error.message}; see minicloud --help`);
      return 2;
    }
    if (RiggingError.isInstance(error)) {
      err(`minicloud: ${oneLine(error.message)} [${error.code}]`);
      if (process.env.MINICLOUD_DEBUG) err(String(error.stack));
      return 1;
    }
    err(
      `minicloud: unexpected error: ${oneLine((error as Error)?.message ?? String(error))} (set MINICLOUD_DEBUG=1 for details)`,
    );
    if (process.env.MINICLOUD_DEBUG) err(String((error as Error)?.stack));
    return 1;
  }
}

function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').trim();
}

/**
 * True when this module is the program node runs (`node dist/cli.js`, or the `minicloud` bin
 * through its symlink), false when it is imported (tests, embedding).
 */
function isEntryPoint(): boolean {
  const script = process.argv[1];
  if (!script) return false;
  try {
    return realpathSync(script) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

if (isEntryPoint()) process.exitCode = await main(process.argv.slice(2));
