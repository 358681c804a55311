#!/usr/bin/env bash
# Installs the pinned real CLIs (package-lock.json) into a cache directory outside the
# repository, keyed by the lock file's hash, and prints that directory. Idempotent: when the
# directory for this lock file is complete it returns at once.
#
#   tests/realcli/install.sh            # install if needed, print the prefix
#   TURNLOG_CACHE=/somewhere tests/realcli/install.sh
#
# The prefix holds node_modules/.bin/{claude,codex,gemini}; tests/realcli/conftest.py finds it
# the same way (or through TURNLOG_REALCLI_PREFIX).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "realcli: node and npm are required to install the real CLIs" >&2
    exit 3
fi
major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 20 ]; then
    echo "realcli: node $(node --version) is too old: @google/gemini-cli needs node 20 or later" >&2
    exit 3
fi
hash="$(sha256sum "$here/package-lock.json" | cut -c1-16)"
prefix="${TURNLOG_REALCLI_PREFIX:-${TURNLOG_CACHE:-$HOME/.cache/turnlog}/realcli/$hash}"
if [ -f "$prefix/.complete" ]; then
    echo "$prefix"
    exit 0
fi
mkdir -p "$(dirname "$prefix")"
work="$(mktemp -d "$prefix.partial.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cp "$here/package.json" "$here/package-lock.json" "$work/"
(
    cd "$work"
    npm ci --no-audit --no-fund --loglevel=error >&2
)
for bin in claude codex gemini; do
    if [ ! -x "$work/node_modules/.bin/$bin" ]; then
        echo "realcli: npm ci did not install $bin" >&2
        exit 1
    fi
done
touch "$work/.complete"
rm -rf "$prefix"
mv "$work" "$prefix"
trap - EXIT
echo "$prefix"
