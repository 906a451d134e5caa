// Links that work on the registry page. Inside the repository a package README links relatively
// (to its examples, benchmarks, the architecture map); in the tarball only `files` ship, so every
// relative link to a file that does not ship becomes an absolute link to that file in the
// repository, at pack time. The repository's own Markdown keeps its relative links.
//   withPublishedReadmes(packages, fn)  runs fn with each README rewritten, then puts them back
//   danglingLinks(readme, files)        the relative links of a packed README to files it lacks
// Used by scripts/pack-all.mjs (the pack check) and scripts/release.mjs (publishing).
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, posix, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

// [text](target) and [text](target "title"), outside fenced code blocks.
const LINK = /(\]\(\s*<?)([^)\s>]+)(>?[^)]*\))/g;
const ABSOLUTE = /^([a-z][a-z0-9+.-]*:|#|\/)/i;

/** Applies `replace(target)` to every Markdown link target outside fenced code blocks. */
function mapLinks(text, replace) {
  return text
    .split(/(^```[\s\S]*?^```$)/m)
    .map((part, index) =>
      index % 2 === 1
        ? part
        : part.replace(LINK, (link, open, target, close) => `${open}${replace(target)}${close}`),
    )
    .join('');
}

/** The relative link targets of a README (anchors and absolute URLs left out). */
export function relativeLinks(text) {
  const found = [];
  mapLinks(text, (target) => {
    if (!ABSOLUTE.test(target)) found.push(target);
    return target;
  });
  return found;
}

/** The relative links of a packed README whose file is not among `files` (tarball paths). */
export function danglingLinks(readme, files) {
  const have = new Set(files);
  return relativeLinks(readme).filter((target) => {
    const path = posix.normalize(decodeURI(target.split('#')[0]));
    return path !== '' && !have.has(path) && ![...have].some((f) => f.startsWith(`${path}/`));
  });
}

/** Whether a path (relative to the package) is inside one of the manifest's `files` entries. */
function ships(manifest, path) {
  if (['package.json', 'README.md', 'LICENSE', 'CHANGELOG.md'].includes(path)) return true;
  return (manifest.files ?? []).some((entry) => {
    const clean = entry.replace(/^\.\//, '').replace(/\/$/, '');
    return path === clean || path.startsWith(`${clean}/`);
  });
}

/** The repository's web address (`https://github.com/owner/name`) from a manifest. */
function repositoryUrl(manifest) {
  const url =
    typeof manifest.repository === 'string' ? manifest.repository : manifest.repository?.url;
  if (!url) throw new Error(`${manifest.name} has no repository url to link to`);
  return url.replace(/^git\+/, '').replace(/\.git$/, '');
}

/**
 * A package README as published: each relative link to a file that does not ship points at that
 * file in the repository (`<repository>/blob/main/<path>`, `tree` for a directory).
 */
export function publishedReadme(text, dir, manifest) {
  const base = repositoryUrl(manifest);
  return mapLinks(text, (target) => {
    if (ABSOLUTE.test(target)) return target;
    const [path, hash] = target.split('#');
    const normalized = posix.normalize(decodeURI(path));
    if (normalized !== '' && !normalized.startsWith('../') && ships(manifest, normalized)) {
      return target;
    }
    const absolute = join(dir, decodeURI(path));
    const inRepo = relative(root, absolute).split('\\').join('/');
    if (inRepo.startsWith('..'))
      throw new Error(`${manifest.name}: ${target} is outside the repository`);
    const kind = existsSync(absolute) && statSync(absolute).isDirectory() ? 'tree' : 'blob';
    return `${base}/${kind}/main/${encodeURI(inRepo)}${hash === undefined ? '' : `#${hash}`}`;
  });
}

/**
 * Runs `fn` while every package's README.md is its published form, and puts the originals back
 * afterwards, whatever `fn` does (`packages`: `{ dir, manifest }` as `publishedPackages()` gives).
 */
export async function withPublishedReadmes(packages, fn) {
  const originals = new Map();
  const restore = () => {
    for (const [file, text] of originals) writeFileSync(file, text);
  };
  const onSignal = (signal) => {
    restore();
    process.kill(process.pid, signal);
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    for (const { dir, manifest } of packages) {
      const file = join(dir, 'README.md');
      const text = readFileSync(file, 'utf8');
      originals.set(file, text);
      writeFileSync(file, publishedReadme(text, dir, manifest));
    }
    return await fn();
  } finally {
    restore();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
