#!/usr/bin/env bash
# Installs what hpcdap's build, demo and test suite need on Debian 12, as root
# (`install-deps.sh demo`: only what the demo needs). Idempotent:
# packages already present are not touched, and apt-get runs only when something is missing.
set -euo pipefail

packages=(
  # compilers and oracles for the tests
  build-essential gcc g++ gfortran gdb elfutils binutils libc6-dbg
  # Graphviz, to check that `hpcdap stacks --format dot` parses
  graphviz
  # Power: cross toolchains, sysroots, emulator and a multi-architecture gdb as the oracle
  gcc-powerpc64-linux-gnu gcc-powerpc64le-linux-gnu g++-powerpc64-linux-gnu
  binutils-powerpc64-linux-gnu binutils-powerpc64le-linux-gnu
  libc6-dev-ppc64-cross libc6-dev-ppc64el-cross qemu-user gdb-multiarch
  debian-archive-keyring
  # a peer DAP adapter to compare against
  lldb-15
  # MPI launchers and a workload manager for the launcher tests (a local 4-node Slurm cluster)
  openmpi-bin libopenmpi-dev mpich libmpich-dev slurm-wlm munge bc
  # the PMIx tool (libpmix 4.2 to build against) and the Debian 13 root with Open MPI 5 for its tests
  libpmix-dev pkg-config debootstrap
)

# "demo" installs only what `make demo` needs: a C compiler for the bundled program.
if [[ ${1:-} == demo ]]; then
  packages=(gcc libc6-dev)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: missing Debian packages (run as root to install): ${missing[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if ! command -v go >/dev/null 2>&1; then
  echo "install-deps: go is not on PATH (expected Go 1.26 at /usr/local/go/bin)" >&2
  exit 1
fi
