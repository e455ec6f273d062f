#!/usr/bin/env bash
# Installs what the end-to-end tests of the VS Code extension need, offline except for Debian's
# and the npm registry's packages: Debian's Chromium and build tools, code-server (VS Code for the
# browser) built for this machine's node, and the extension's own npm packages (playwright-core,
# @vscode/vsce). Idempotent: what is already installed is kept.
#
#   e2e/setup.sh            install everything (root needed for the Debian packages)
#   HPCDAP_E2E_CACHE=DIR    where code-server goes (default: ~/.cache/hpcdap-e2e)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
ext=$(dirname "$here")
CODE_SERVER_VERSION=4.100.3
# @vscode/ripgrep pinned by code-server 4.100.3 (lib/vscode/npm-shrinkwrap.json), and the asset
# its postinstall downloads (lib/postinstall.js): both change only with CODE_SERVER_VERSION.
RIPGREP_PKG_VERSION=1.15.11
RIPGREP_ASSET=ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz
cache=${HPCDAP_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpcdap-e2e}
cs_dir=$cache/code-server-$CODE_SERVER_VERSION

log() { echo "e2e/setup: $*"; }

# 1. Debian packages.
packages=(chromium fonts-dejavu-core libkrb5-dev ripgrep build-essential pkg-config python3 gcc)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "e2e/setup: missing Debian packages (run as root to install): ${missing[*]}" >&2
    exit 1
  fi
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

node_major=$(node -p 'process.versions.node.split(".")[0]')
if [[ $node_major != 20 ]]; then
  echo "e2e/setup: code-server $CODE_SERVER_VERSION needs node 20, found $(node --version)" >&2
  exit 1
fi

# 2. code-server, with its native modules built from source against the local node headers.
cs_bin=$cs_dir/node_modules/.bin/code-server
# cs_version prints what code-server says of its version, with a throw-away configuration and
# data directory (it writes a default config.yaml into the configuration directory).
cs_version() {
  local d rc=0
  d=$(mktemp -d)
  XDG_CONFIG_HOME=$d/config XDG_DATA_HOME=$d/data "$cs_bin" --version || rc=$?
  rm -rf "$d"
  return $rc
}
if [[ -x $cs_bin ]] && cs_version 2>/dev/null | grep -q "^$CODE_SERVER_VERSION "; then
  log "code-server $CODE_SERVER_VERSION already in $cs_dir"
else
  log "installing code-server $CODE_SERVER_VERSION into $cs_dir"
  rm -rf "$cs_dir"
  mkdir -p "$cs_dir/tmp"
  # @vscode/ripgrep's postinstall downloads rg from GitHub, which is unreachable; it first looks
  # in <os.tmpdir()>/vscode-ripgrep-cache-<version>/, so Debian's rg is placed there, and npm
  # runs with TMPDIR there (that directory goes after the install).
  rg_cache=$cs_dir/tmp/vscode-ripgrep-cache-$RIPGREP_PKG_VERSION
  stage=$(mktemp -d)
  cp "$(command -v rg)" "$stage/rg"
  mkdir -p "$rg_cache"
  tar -C "$stage" -czf "$rg_cache/$RIPGREP_ASSET" rg
  rm -rf "$stage"
  if [[ -z ${npm_config_nodedir:-} && -f /usr/include/node/node.h ]]; then
    export npm_config_nodedir=/usr # node-gyp would otherwise download the headers
  fi
  (
    cd "$cs_dir"
    printf '{"name":"hpcdap-e2e-code-server","private":true}\n' >package.json
    # --unsafe-perm: postinstall refuses root without it; --yes: node-pty's nested npx must not
    # ask (or be refused by a yes=false npmrc).
    TMPDIR=$cs_dir/tmp npm install "code-server@$CODE_SERVER_VERSION" --unsafe-perm --yes \
      --foreground-scripts --no-audit --no-fund
  )
  rm -rf "$cs_dir/tmp"
  cs_version
fi

# 3. The extension's npm packages (playwright-core and @vscode/vsce are pinned devDependencies).
if [[ ! -f $ext/node_modules/playwright-core/package.json || ! -f $ext/node_modules/.bin/vsce ]]; then
  log "npm ci in $ext"
  (cd "$ext" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefer-offline --no-audit --no-fund)
fi
log "ready: code-server $cs_bin, chromium $(command -v chromium)"
