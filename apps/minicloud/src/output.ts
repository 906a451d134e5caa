/** Where commands write what they did: one concise, human-readable line per call. */
export interface Output {
  /** A `label  text` line (labels aligned). */
  step(label: string, text: string): void;
  /** A plain line. */
  line(text: string): void;
}

/** Output to a stream (stdout by default). */
export function streamOutput(write: (s: string) => void = (s) => process.stdout.write(s)): Output {
  return {
    step: (label, text) => write(`  ${label.padEnd(9)} ${text}\n`),
    line: (text) => write(`${text}\n`),
  };
}
