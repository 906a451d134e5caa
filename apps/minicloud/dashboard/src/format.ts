/** Display helpers (pure). */

import type { InventoryView } from '../../src/wire.js';

export function formatBytes(n: number): string {
  if (!Number.isFinite(n)) return '?';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(v >= 100 ? 0 : 1)} ${units[i]}`;
}

export function formatDuration(ms: number): string {
  if (ms < 0) ms = 0;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  const m = Math.floor(s / 60);
  return `${m} min ${Math.round(s - m * 60)} s`;
}

export function formatClock(at: number | null | undefined): string {
  if (at == null) return '–';
  const d = new Date(at);
  const p = (x: number) => String(x).padStart(2, '0');
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

export function percent(part: number, whole: number): number {
  if (!(whole > 0)) return part > 0 ? 100 : 0;
  return Math.round((part / whole) * 1000) / 10;
}

export function shortId(id: string): string {
  return id.length > 12 ? `${id.slice(0, 8)}…` : id;
}

/** Capacity of an inventory: (total - reserved) * allocationRatio. */
export function capacity(inv: InventoryView): number {
  return Math.max(0, (inv.total - inv.reserved) * inv.allocationRatio);
}
