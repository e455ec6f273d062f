#!/usr/bin/env bash
# debian13-root.sh: a Debian 13 (trixie) root file system with Open MPI 5 /
# PRRTE and libpmix 5, where the PMIx tests run against a real PMIx server.
#
#   debian13-root.sh ensure          build the root once (cached, locked)
#   debian13-root.sh run [--] CMD... run CMD inside the root
#
# The root lives at ${HPCDAP_DEBIAN13_ROOT:-/var/cache/hpcdap/debian13}. It is
# built with debootstrap from the host's own Debian mirror; the host's apt
# state is changed only by installing debootstrap itself when it is missing.
# debootstrap and "run" get a private mount namespace, so every mount they make
# vanishes with them, however they end. "run" holds a shared lock on the root
# while CMD runs, "ensure" an exclusive one while it rebuilds: a rebuild never
# removes a root in use.
set -euo pipefail

# RECIPE is the version of the build recipe below; a root whose stamp names
# another version is rebuilt.
RECIPE=1
ROOT=${HPCDAP_DEBIAN13_ROOT:-/var/cache/hpcdap/debian13}
STAMP=$ROOT/.hpcdap-root
LOCK=$ROOT.lock
PACKAGES=(openmpi-bin libopenmpi-dev libpmix-dev gcc g++ libc6-dev gdb pkg-config make ca-certificates)
# EXTRAS are installed into a root of this recipe in place when they are
# missing (a list that only grows needs no rebuild): the editors whose DAP
# clients the tests drive.
EXTRAS=(emacs-nox elpa-dape git procps)
EXTRAS_STAMP=$ROOT/.hpcdap-extras

die() { echo "debian13-root: $*" >&2; exit 1; }

usage() {
	echo "usage: $0 ensure | run [--] CMD..." >&2
	exit 2
}

stamp_ok() { [[ -f $STAMP && $(<"$STAMP") == "recipe $RECIPE" ]]; }
extras_ok() { [[ -f $EXTRAS_STAMP && $(<"$EXTRAS_STAMP") == "${EXTRAS[*]}" ]]; }

# list_sources: the Debian entries of the machine's apt sources.
. "$(dirname "${BASH_SOURCE[0]}")/apt-sources.sh"

# mirror prints the URI of the host's main Debian source (one-line or deb822
# format): the first entry with component main of a release suite (not
# -updates or -security), else the first entry.
mirror() {
	local uri
	uri=$(list_sources | awk '
		$2 !~ /-/ { print $1; found = 1; exit }
		first == "" { first = $1 }
		END { if (!found && first != "") print first }')
	[[ -n $uri ]] || die "no Debian entry with component main in /etc/apt/sources.list*"
	echo "$uri"
}

# unmount_under DIR lazily unmounts everything mounted at or under DIR (left by
# a build that was killed), deepest first.
unmount_under() {
	local dir=$1 m
	findmnt -rn -o TARGET | awk -v d="$dir" '$0 == d || index($0, d "/") == 1' | sort -r |
		while read -r m; do
			umount -l "$m" || die "umount -l $m failed"
		done
}

# inroot runs a command chrooted into DIR with the pseudo file systems the
# package scripts need, in a private mount namespace.
inroot() {
	local dir=$1
	shift
	unshare --mount --propagation private -- /bin/bash -euc '
		dir=$1; shift
		mount -t proc proc "$dir/proc"
		mount -t sysfs sys "$dir/sys"
		mount --rbind /dev "$dir/dev"
		mount -t tmpfs tmpfs "$dir/tmp"
		exec chroot "$dir" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
			HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
	' inroot "$dir" "$@"
}

build() {
	local tmp=$ROOT.tmp url
	url=$(mirror)
	if ! command -v debootstrap >/dev/null; then
		echo "debian13-root: installing debootstrap on the host" >&2
		apt-get install -y --no-install-recommends debootstrap >&2 ||
			{ apt-get update >&2 && apt-get install -y --no-install-recommends debootstrap >&2; } ||
			die "apt-get install debootstrap failed"
	fi
	# A half-built root from an interrupted run, or one of an older recipe.
	unmount_under "$tmp"
	rm -rf --one-file-system "$tmp"
	if [[ -e $ROOT ]]; then
		echo "debian13-root: removing $ROOT (recipe changed or incomplete)" >&2
		unmount_under "$ROOT"
		rm -rf --one-file-system "$ROOT"
	fi
	echo "debian13-root: debootstrap trixie from $url into $tmp" >&2
	# Its second stage mounts /proc and more inside $tmp: privately, so that
	# they vanish with it however it ends.
	unshare --mount --propagation private -- debootstrap --variant=minbase trixie "$tmp" "$url" >&2 ||
		die "debootstrap trixie $tmp $url failed"
	inroot "$tmp" apt-get update >&2 || die "apt-get update in the root failed"
	inroot "$tmp" apt-get install -y --no-install-recommends "${PACKAGES[@]}" >&2 ||
		die "apt-get install ${PACKAGES[*]} in the root failed"
	inroot "$tmp" apt-get clean >&2
	echo "recipe $RECIPE" >"$tmp/.hpcdap-root"
	mv -T "$tmp" "$ROOT"
}

# install_extras installs EXTRAS into the finished root.
install_extras() {
	echo "debian13-root: installing ${EXTRAS[*]} in $ROOT" >&2
	inroot "$ROOT" apt-get update >&2 || die "apt-get update in the root failed"
	inroot "$ROOT" apt-get install -y --no-install-recommends "${EXTRAS[@]}" >&2 ||
		die "apt-get install ${EXTRAS[*]} in the root failed"
	inroot "$ROOT" apt-get clean >&2
	echo "${EXTRAS[*]}" >"$EXTRAS_STAMP"
}

ensure() {
	stamp_ok && extras_ok && return 0
	mkdir -p "$(dirname "$ROOT")"
	exec 9>>"$LOCK"
	# Exclusive: no "run" uses the root while it is rebuilt or added to.
	flock 9
	# Another caller may have finished while this one waited.
	stamp_ok && extras_ok && return 0
	stamp_ok || build
	extras_ok || install_extras
	echo "debian13-root: ready at $ROOT" >&2
}

run() {
	[[ ${1:-} == -- ]] && shift
	[[ $# -gt 0 ]] || usage
	# Shared, held by CMD until it ends: a rebuild waits for every run.
	[[ -e $LOCK ]] || die "no root at $ROOT (run: $0 ensure)"
	exec 9>>"$LOCK"
	flock -s 9
	stamp_ok || die "no root at $ROOT (run: $0 ensure)"
	local gomodcache= gocache= gobin=/usr/local/go/bin/go
	if [[ -x $gobin ]]; then
		gomodcache=$("$gobin" env GOMODCACHE)
		gocache=$("$gobin" env GOCACHE)
	fi
	local cwd
	cwd=$(pwd -P)
	local top
	top=$(git -C "$cwd" rev-parse --show-toplevel 2>/dev/null || echo "$cwd")
	# A git worktree's .git file points into the main checkout's .git.
	local gitdir
	gitdir=$(git -C "$top" rev-parse --git-common-dir 2>/dev/null || true)
	[[ -n $gitdir ]] && gitdir=$(cd "$top" && realpath "$gitdir")
	unshare --mount --propagation private -- /bin/bash -euc '
		root=$1 top=$2 gitdir=$3 gomodcache=$4 gocache=$5 cwd=$6
		shift 6
		bind() { # bind SRC: the same path inside the root
			[[ -e $1 ]] || return 0
			mkdir -p "$root$1"
			mount --bind "$1" "$root$1"
		}
		mount -t proc proc "$root/proc"
		mount -t sysfs sys "$root/sys"
		mount --rbind /dev "$root/dev"
		mount -t tmpfs tmpfs "$root/tmp"
		bind "$top"
		[[ -n $gitdir && $gitdir != "$top"/* ]] && bind "$gitdir"
		bind /usr/local/go
		[[ -n $gomodcache ]] && bind "$gomodcache"
		[[ -n $gocache ]] && bind "$gocache"
		[[ $cwd == "$top" || $cwd == "$top"/* ]] || bind "$cwd"
		exec chroot "$root" /usr/bin/env -i \
			PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" \
			GOMODCACHE="$gomodcache" GOCACHE="$gocache" GOFLAGS="${GOFLAGS:--buildvcs=false}" GOTOOLCHAIN=local \
			GOPROXY=off \
			OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
			PRTE_ALLOW_RUN_AS_ROOT=1 PRTE_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
			/bin/bash -c "cd \"\$0\" && exec \"\$@\"" "$cwd" "$@"
	' run "$ROOT" "$top" "$gitdir" "$gomodcache" "$gocache" "$cwd" "$@"
}

[[ $(id -u) == 0 ]] || die "must run as root (debootstrap, chroot, mounts)"
case ${1:-} in
ensure) shift; [[ $# == 0 ]] || usage; ensure ;;
run) shift; run "$@" ;;
*) usage ;;
esac
