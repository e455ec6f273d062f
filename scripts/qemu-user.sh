#!/bin/sh
# qemu-user.sh — obtain QEMU user-mode emulators new enough for the tests of target/rsp.
#
# Debian 12 ships QEMU 7.2, whose GDB stub cannot write breakpoint trap words into program
# text. Debian 13's qemu-user package (QEMU 10.x) contains static binaries that run on
# Debian 12 without being installed. This script downloads that package with apt-get, using a
# private apt configuration derived from this machine's own apt sources (the Debian suites are
# renamed from bookworm to trixie; mirrors are read from /etc/apt at run time), unpacks it with
# dpkg-deb into a cache directory, and prints the directory holding the emulators.
#
# It touches neither the system's apt state nor dpkg's database, and does nothing when the
# cache is already filled.
#
# Usage: scripts/qemu-user.sh [VERSION]
#   VERSION  an exact Debian version of qemu-user (default: the newest trixie offers)
# Environment:
#   HPCDAP_QEMU_CACHE  cache directory (default: $XDG_CACHE_HOME/hpcdap/qemu, or
#                      ~/.cache/hpcdap/qemu)
# Output: one line, the directory holding qemu-ppc64, qemu-ppc64le, ... (CACHE/bin).
set -eu

from=bookworm
to=trixie
cache=${HPCDAP_QEMU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpcdap/qemu}
version=${1:-}

say() { echo "qemu-user.sh: $*" >&2; }
die() { say "$*"; exit 1; }

have_qemu() {
	[ -x "$cache/bin/qemu-ppc64" ] && [ -x "$cache/bin/qemu-ppc64le" ] &&
		"$cache/bin/qemu-ppc64" --version >/dev/null 2>&1 || return 1
	[ -z "$version" ] || [ "$(cat "$cache/bin.version" 2>/dev/null)" = "$version" ]
}

if have_qemu; then
	echo "$cache/bin"
	exit 0
fi

for tool in apt-get apt-config dpkg-deb dpkg flock awk; do
	command -v "$tool" >/dev/null 2>&1 || die "needs $tool"
done

mkdir -p "$cache"
# One download at a time; a second caller waits and then finds the cache filled.
exec 9>"$cache/.lock"
flock 9
if have_qemu; then
	echo "$cache/bin"
	exit 0
fi

work=$cache/apt
rm -rf "$work"
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/state" \
	"$work/etc/apt.conf.d" "$work/etc/preferences.d" "$work/download"

# list_sources: the Debian entries of the machine's apt sources.
. "$(dirname "$0")/apt-sources.sh"

# Rewrite every bookworm suite (bookworm, bookworm-updates, bookworm-security) to trixie.
list_sources | awk -v from="$from" -v to="$to" '
	$2 == from || index($2, from "-") == 1 {
		suite = to substr($2, length(from) + 1)
		opt = ($3 == "-") ? "" : " [signed-by=" $3 "]"
		line = "deb" opt " " $1 " " suite " main"
		if (!(line in seen)) { seen[line] = 1; print line }
	}' >"$work/etc/sources.list"
[ -s "$work/etc/sources.list" ] || die "no Debian $from entry with component main in /etc/apt/sources.list*"
say "using $(wc -l <"$work/etc/sources.list") derived $to source(s)"

# Keep only the system's network settings (proxies, date checks, retries); every other
# setting, and every hook in apt.conf.d, stays out of the private configuration.
apt-config dump 2>/dev/null |
	grep -E '^Acquire::((https?|ftp)::(Proxy|proxy)|Check-Valid-Until|Check-Date|Retries|ForceIPv4|ForceIPv6)' \
	>"$work/etc/apt.conf" || true
arch=$(dpkg --print-architecture)
cat >>"$work/etc/apt.conf" <<EOF
Dir::Etc::Parts "$work/etc/apt.conf.d";
Dir::Etc::Main "/dev/null";
Dir::Etc::SourceList "$work/etc/sources.list";
Dir::Etc::SourceParts "/dev/null";
Dir::Etc::Preferences "/dev/null";
Dir::Etc::PreferencesParts "$work/etc/preferences.d";
Dir::State "$work/state";
Dir::State::Lists "$work/lists";
Dir::State::status "/dev/null";
Dir::Cache "$work/cache";
APT::Architecture "$arch";
APT::Architectures { "$arch"; };
APT::Sandbox::User "root";
Acquire::Languages "none";
EOF
export APT_CONFIG="$work/etc/apt.conf"

say "apt-get update ($to)"
apt-get -q update >"$work/update.log" 2>&1 || { cat "$work/update.log" >&2; die "apt-get update failed"; }
pkg=qemu-user
[ -z "$version" ] || pkg="qemu-user=$version"
say "apt-get download $pkg"
(cd "$work/download" && apt-get -q download "$pkg") >"$work/download.log" 2>&1 ||
	{ cat "$work/download.log" >&2; die "apt-get download $pkg failed"; }
deb=$(ls "$work"/download/qemu-user_*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || die "apt-get download left no qemu-user_*.deb"
got=$(dpkg-deb -f "$deb" Version)

dest=$cache/qemu-user_$(echo "$got" | tr ':~' '__')
rm -rf "$dest.tmp"
dpkg-deb -x "$deb" "$dest.tmp"
[ -x "$dest.tmp/usr/bin/qemu-ppc64" ] || die "$deb holds no usr/bin/qemu-ppc64"
"$dest.tmp/usr/bin/qemu-ppc64" --version >/dev/null || die "the extracted qemu-ppc64 does not run here"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
ln -sfn "$(basename "$dest")/usr/bin" "$cache/bin.tmp"
mv -T "$cache/bin.tmp" "$cache/bin"
echo "$got" >"$cache/bin.version"
rm -rf "$work"
say "$("$cache/bin/qemu-ppc64" --version | head -n 1)"
echo "$cache/bin"
