// Who holds a claim: the worker id, and evidence of its liveness that other workers can check.

/** What separates the worker id from its owner tag in the `worker` column. */
const SEP = ' @';

/** The `worker` column of a claim: the worker id, and the owner tag when there is one. @internal */
export const ownerColumn = (workerId: string, tag: string | undefined): string =>
  tag === undefined ? workerId : `${workerId}${SEP}${tag}`;

/** The owner tag recorded in a `worker` column, if any. @internal */
export function ownerTagOf(column: string | null): string | undefined {
  if (column === null) return undefined;
  const i = column.lastIndexOf(SEP);
  return i < 0 ? undefined : column.slice(i + SEP.length);
}
