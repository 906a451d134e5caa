// The standard names shipped in src/vocabulary.ts are those of the os-traits and
// os-resource-classes Python packages Placement serves (Debian's python3-os-traits,
// python3-os-resource-classes). Skipped with a message when /usr/bin/python3 lacks them, except
// under CI (testkit's IN_CI), where it fails.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { IN_CI } from '@rigging/testkit';
import { describe, expect, it } from 'vitest';
import {
  STANDARD_RESOURCE_CLASSES,
  STANDARD_RESOURCE_CLASSES_VERSION,
  STANDARD_TRAITS,
  STANDARD_TRAITS_VERSION,
} from '../src/index.js';

const script = fileURLToPath(new URL('../scripts/generate-vocabulary.py', import.meta.url));
const installed = await promisify(execFile)('/usr/bin/python3', [script, '--json']).then(
  (r) =>
    JSON.parse(r.stdout) as {
      traits_version: string;
      classes_version: string;
      traits: string[];
      classes: string[];
    },
  () => undefined,
);
if (!installed && IN_CI)
  throw new Error(
    '/usr/bin/python3 cannot import os_traits and os_resource_classes (install python3-os-traits python3-os-resource-classes)',
  );
if (!installed)
  console.warn(
    'skipping the vocabulary comparison: /usr/bin/python3 cannot import os_traits and os_resource_classes',
  );

describe.skipIf(!installed)('the shipped vocabulary', () => {
  it('is the installed os-traits and os-resource-classes (regenerate with the script)', () => {
    expect({
      traits_version: STANDARD_TRAITS_VERSION,
      classes_version: STANDARD_RESOURCE_CLASSES_VERSION,
      traits: STANDARD_TRAITS,
      classes: STANDARD_RESOURCE_CLASSES,
    }).toEqual(installed);
  });
});
