/** The package cache view: usage against the cap, hits/misses, downloads, entries, lock holders. */
import type { PackageCacheState } from '../../src/wire.js';
import { formatBytes, formatDuration, percent, shortId } from './format.js';
import { Bar, Section, Table } from './ui.js';

export function Cache({ cache, now }: { cache: PackageCacheState; now: number }) {
  const lookups = cache.hits + cache.misses;
  return (
    <Section id="cache" title="Package cache" span>
      <div class="cache-top">
        <div>
          <h3>Usage</h3>
          <Bar
            value={cache.bytesUsed}
            max={cache.capBytes}
            label="Cache bytes used of cap"
            text={`${formatBytes(cache.bytesUsed)} / ${formatBytes(cache.capBytes)}`}
            testid="cache-usage"
          />
        </div>
        <dl class="stats" data-testid="cache-stats">
          <div>
            <dt>Hits</dt>
            <dd data-testid="cache-hits">{cache.hits}</dd>
          </div>
          <div>
            <dt>Misses</dt>
            <dd data-testid="cache-misses">{cache.misses}</dd>
          </div>
          <div>
            <dt>Hit ratio</dt>
            <dd>{lookups ? `${percent(cache.hits, lookups)}%` : '–'}</dd>
          </div>
        </dl>
      </div>
      <h3>Downloads in progress</h3>
      {cache.downloads.length === 0 ? (
        <p class="muted small">None.</p>
      ) : (
        <ul class="downloads" data-testid="downloads">
          {cache.downloads.map((d) => (
            <li key={d.id} data-testid="download" data-id={d.id}>
              <span>
                {d.fqn} <span class="muted">{d.version}</span>
              </span>
              <Bar
                role="progressbar"
                value={d.bytesDone}
                max={d.bytesTotal ?? 0}
                label={`Download of ${d.fqn} ${d.version}`}
                text={`${formatBytes(d.bytesDone)} / ${d.bytesTotal === null ? '?' : formatBytes(d.bytesTotal)}`}
              />
            </li>
          ))}
        </ul>
      )}
      <div class="cache-tables">
        <div>
          <h3>Entries</h3>
          {cache.entries.length === 0 ? (
            <p class="muted small">Empty.</p>
          ) : (
            <Table columns={['Package', 'Version', 'Id', 'Size', 'In use']} testid="cache-entries">
              {cache.entries.map((e) => (
                <tr key={e.id}>
                  <th scope="row">{e.fqn}</th>
                  <td>{e.version}</td>
                  <td>
                    <code title={e.id}>{shortId(e.id)}</code>
                  </td>
                  <td>{formatBytes(e.bytes)}</td>
                  <td>{e.inUse > 0 ? `yes (${e.inUse})` : 'no'}</td>
                </tr>
              ))}
            </Table>
          )}
        </div>
        <div>
          <h3>Lock holders</h3>
          {cache.locks.length === 0 ? (
            <p class="muted small">No locks held.</p>
          ) : (
            <Table columns={['Lock', 'Mode', 'Pid', 'Held']} testid="cache-locks">
              {cache.locks.map((l) => (
                <tr key={`${l.key}-${l.pid}-${l.since}`}>
                  <th scope="row">
                    <code>{l.key}</code>
                  </th>
                  <td>{l.mode}</td>
                  <td>{l.pid ?? '–'}</td>
                  <td>{formatDuration(now - l.since)}</td>
                </tr>
              ))}
            </Table>
          )}
        </div>
      </div>
    </Section>
  );
}
