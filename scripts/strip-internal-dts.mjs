// Removes what is tagged `@internal` from a built package's public declarations, run after tsup
// in the package's directory (`tsup && node ../../scripts/strip-internal-dts.mjs`):
// - class and interface members tagged `@internal` are deleted from every `dist/*.d.ts`;
// - an entry's `export { … }` loses the names whose declaration is tagged `@internal`.
// The declarations themselves stay in the bundle, so public types that refer to them still
// resolve. (TypeScript's `stripInternal` deletes them everywhere instead, which breaks the
// bundle as soon as one module's declarations use another module's `@internal` export.)
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import ts from 'typescript';

const dist = resolve('dist');
const pkg = JSON.parse(readFileSync('package.json', 'utf8'));
const entries = new Set(
  Object.values(pkg.exports ?? {})
    .map((entry) => (typeof entry === 'object' && entry !== null ? entry.types : undefined))
    .filter((types) => typeof types === 'string' && types.endsWith('.d.ts'))
    .map((types) => resolve(types)),
);
const files = readdirSync(dist)
  .filter((name) => name.endsWith('.d.ts'))
  .map((name) => join(dist, name));

const program = ts.createProgram(files, { noEmit: true, skipLibCheck: true, types: [] });
const checker = program.getTypeChecker();

/** True when `node` carries a JSDoc `@internal` tag. */
function isInternal(node) {
  return ts.getJSDocTags(node).some((tag) => tag.tagName.text === 'internal');
}

/** The declarations an export specifier finally names, following every alias. */
function targetDeclarations(specifier) {
  let symbol = checker.getExportSpecifierLocalTargetSymbol(specifier);
  if (symbol && symbol.flags & ts.SymbolFlags.Alias) symbol = checker.getAliasedSymbol(symbol);
  return symbol?.declarations ?? [];
}

let removed = 0;
for (const file of files) {
  const source = program.getSourceFile(file);
  if (!source) continue;
  const cuts = [];
  const visit = (node) => {
    if (ts.isClassDeclaration(node) || ts.isInterfaceDeclaration(node)) {
      for (const member of node.members) {
        if (isInternal(member)) cuts.push([member.getFullStart(), member.getEnd()]);
      }
    }
    if (entries.has(file) && ts.isExportDeclaration(node) && node.exportClause) {
      const clause = node.exportClause;
      if (ts.isNamedExports(clause)) {
        const kept = clause.elements.filter(
          (specifier) => !targetDeclarations(specifier).some(isInternal),
        );
        if (kept.length < clause.elements.length) {
          const text = kept.map((specifier) => specifier.getText(source)).join(', ');
          cuts.push([clause.getStart(source), clause.getEnd(), `{ ${text} }`]);
        }
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  if (cuts.length === 0) continue;
  let text = source.text;
  for (const [start, end, replacement = ''] of cuts.sort((a, b) => b[0] - a[0])) {
    text = text.slice(0, start) + replacement + text.slice(end);
  }
  writeFileSync(file, text);
  removed += cuts.length;
}
console.log(`strip-internal-dts: ${removed} @internal declaration(s) removed from ${dist}`);
