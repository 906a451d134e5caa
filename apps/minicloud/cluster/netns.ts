import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** One simulated host: a network namespace joined to the machine by a veth pair. */
export interface Host {
  /** `api-1`, `worker-2`, … */
  readonly label: string;
  /** The namespace's name (`ip netns exec <ns> …`). */
  readonly ns: string;
  /** The veth end in the machine's namespace; `link down` on it cuts the host off. */
  readonly hostIf: string;
  /** The machine's address on this host's link (PostgreSQL is reachable there). */
  readonly gateway: string;
  /** The host's own address (its services listen there). */
  readonly address: string;
}

async function ip(...args: string[]): Promise<string> {
  const { stdout } = await run('ip', args);
  return stdout;
}

async function nft(...args: string[]): Promise<void> {
  await run('nft', args);
}

/**
 * Why network namespaces cannot be made here (not root, no `ip`/`nft`, no permission), or
 * `undefined` when they can. Makes and removes one namespace to find out.
 */
export async function namespacesUnavailable(): Promise<string | undefined> {
  if (process.platform !== 'linux')
    return `network namespaces need Linux (this is ${process.platform})`;
  if (process.getuid?.() !== 0) return 'network namespaces need root';
  const probe = `rgprobe${randomBytes(3).toString('hex')}`;
  try {
    await run('nft', ['--version']);
    await ip('netns', 'add', probe);
    await ip('netns', 'del', probe);
    return undefined;
  } catch (error) {
    await ip('netns', 'del', probe).catch(() => {});
    const e = error as NodeJS.ErrnoException & { stderr?: string };
    return e.code === 'ENOENT'
      ? `${e.path ?? 'a command'} is not installed (Debian: iproute2, nftables)`
      : `cannot make a network namespace: ${(e.stderr ?? e.message).trim()}`;
  }
}

/**
 * The simulated network of one cluster run: namespaces with a veth pair each, addresses in one
 * private /16 picked to be unused on the machine, and an nftables table that lets each host reach
 * the machine's PostgreSQL at its gateway address (DNAT to loopback, source rewritten to loopback
 * so PostgreSQL's loopback rules apply). Only names and addresses this run made are touched;
 * `teardown()` removes all of them and is safe to call twice or after a partial set-up.
 */
export class Network {
  readonly hosts: Host[] = [];
  readonly #id: string;
  readonly #table: string;
  #octet = 0;
  #pgPort = 5432;
  #tableMade = false;
  #torn = false;

  private constructor(id: string) {
    this.#id = id;
    this.#table = `rigging_cluster_${id}`;
  }

  /** Makes the network (no hosts yet). `pgPort` is where the machine's PostgreSQL listens. */
  static async create(options: { pgPort: number }): Promise<Network> {
    const net = new Network(randomBytes(2).toString('hex'));
    try {
      net.#octet = await freeOctet();
      await nft('add', 'table', 'ip', net.#table);
      net.#tableMade = true;
      await nft('add chain ip', net.#table, 'pre', '{ type nat hook prerouting priority -100; }');
      await nft('add chain ip', net.#table, 'in', '{ type nat hook input priority 100; }');
      net.#pgPort = options.pgPort;
    } catch (error) {
      await net.teardown();
      throw error;
    }
    return net;
  }

  /** Adds a host with its own namespace, link and addresses. */
  async addHost(label: string): Promise<Host> {
    const index = this.hosts.length + 1;
    if (index > 60) throw new RangeError('a cluster has at most 60 hosts');
    const base = `rg${this.#id}${String(index).padStart(2, '0')}`; // 10 chars: fits IFNAMSIZ
    const host: Host = {
      label,
      ns: `${base}ns`,
      hostIf: `${base}h`,
      gateway: `10.${this.#octet}.${index}.1`,
      address: `10.${this.#octet}.${index}.2`,
    };
    this.hosts.push(host);
    const nsIf = `${base}n`;
    await ip('netns', 'add', host.ns);
    await ip('link', 'add', host.hostIf, 'type', 'veth', 'peer', 'name', nsIf);
    await ip('link', 'set', nsIf, 'netns', host.ns);
    await ip('addr', 'add', `${host.gateway}/24`, 'dev', host.hostIf);
    await ip('link', 'set', host.hostIf, 'up');
    await ip('-n', host.ns, 'addr', 'add', `${host.address}/24`, 'dev', nsIf);
    await ip('-n', host.ns, 'link', 'set', nsIf, 'up');
    await ip('-n', host.ns, 'link', 'set', 'lo', 'up');
    // The host reaches PostgreSQL at its gateway: DNAT to loopback (allowed on this link only),
    // source rewritten to loopback so PostgreSQL's loopback authentication applies.
    await run('sysctl', ['-qw', `net.ipv4.conf.${host.hostIf}.route_localnet=1`]);
    await nft(
      'add rule ip',
      this.#table,
      'pre',
      `iifname ${host.hostIf} ip daddr ${host.gateway} tcp dport ${this.#pgPort} dnat to 127.0.0.1:${this.#pgPort}`,
    );
    await nft(
      'add rule ip',
      this.#table,
      'in',
      `ip saddr ${host.address} tcp dport ${this.#pgPort} snat to 127.0.0.1`,
    );
    return host;
  }

  /** Cuts the host off (link down): nothing reaches it, nothing leaves it. */
  async partition(host: Host): Promise<void> {
    await ip('link', 'set', host.hostIf, 'down');
  }

  /** Reconnects a partitioned host. */
  async heal(host: Host): Promise<void> {
    await ip('link', 'set', host.hostIf, 'up');
  }

  /** Removes every namespace, link and nftables rule this network made. */
  async teardown(): Promise<void> {
    if (this.#torn) return;
    this.#torn = true;
    for (const host of this.hosts) {
      await ip('link', 'del', host.hostIf).catch(() => {});
      await ip('netns', 'del', host.ns).catch(() => {});
    }
    if (this.#tableMade) await nft('delete', 'table', 'ip', this.#table).catch(() => {});
  }
}

/** A second octet for 10.x.0.0/16 that no address or route of this machine uses. */
async function freeOctet(): Promise<number> {
  const used = await ip('-4', 'addr');
  const routes = await ip('-4', 'route');
  for (let tries = 0; tries < 50; tries++) {
    const octet = 100 + Math.floor(Math.random() * 150);
    const prefix = `10.${octet}.`;
    if (!used.includes(prefix) && !routes.includes(prefix)) return octet;
  }
  throw new Error('no free 10.x.0.0/16 network for the cluster');
}
