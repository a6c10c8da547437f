#!/usr/bin/env bash
# Fetch the real tools the renderer's tests run (DESIGN.md §9), into a cache
# directory outside the clone, reusing whatever is already there:
#
#   quadlet          podman's quadlet generator from Debian trixie's podman
#                    5.4 package: `apt-get download` + `dpkg -x`, through a
#                    private apt configuration (the system's apt sources are
#                    neither read nor changed; podman is not installed).
#   ShellCheck       Debian bookworm's shellcheck package, same mechanism.
#   systemd-analyze  the system's (Debian `systemd` package); installed with
#                    apt-get when missing, which needs root.
#
# Usage: tests/tools/fetch_tools.sh        (normally via `make tools`)
# Cache: ${LAYOUTGEN_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/layoutgen/tools}
# Knobs: LAYOUTGEN_DEBIAN_MIRROR (default: the Debian archive the system's apt
#        sources name, so no address is written here),
#        LAYOUTGEN_PODMAN_DEB (exact trixie podman version; default: the
#        archive's candidate, which must be upstream 5.4.x).
set -euo pipefail

TOOLS="${LAYOUTGEN_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/layoutgen/tools}"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
PODMAN_UPSTREAM=5.4 # the quadlet version DESIGN.md targets
ARCH="$(dpkg --print-architecture)"

log() { printf 'fetch_tools: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

# The Debian archive this machine's apt already uses (deb822 .sources or the
# one-line format), not its security archive.
system_mirror() {
	local uri
	# shellcheck disable=SC2016 # $(REPO_URI) is apt's field syntax, not the shell's
	uri=$(apt-get indextargets --format '$(REPO_URI)' 2>/dev/null | grep -v -- -security | head -n1 || true)
	[ -n "$uri" ] || uri=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' \
		/etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v -- -security | head -n1 || true)
	[ -n "$uri" ] || uri=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; break } }' \
		/etc/apt/sources.list 2>/dev/null | grep -v -- -security | head -n1 || true)
	printf '%s' "${uri%/}"
}
MIRROR="${LAYOUTGEN_DEBIAN_MIRROR:-$(system_mirror)}"
[ -n "$MIRROR" ] || die "no Debian archive in the system's apt sources; set LAYOUTGEN_DEBIAN_MIRROR"

mkdir -p "$TOOLS/bin"

# apt-get/apt-cache with a private configuration for one Debian suite: its own
# sources.list, lists, cache and (empty) dpkg status, so nothing of the
# system's apt state is read or written.
apt_private() {
	local suite=$1
	shift
	local dir="$TOOLS/apt/$suite"
	local tool=$1
	shift
	"$tool" \
		-o "Dir::Etc::sourcelist=$dir/sources.list" \
		-o "Dir::Etc::sourceparts=$dir/sources.list.d" \
		-o "Dir::Etc::preferencesparts=$dir/preferences.d" \
		-o "Dir::State::Lists=$dir/lists" \
		-o "Dir::State::status=$dir/status" \
		-o "Dir::Cache=$dir/cache" \
		-o "APT::Architecture=$ARCH" \
		-o "APT::Architectures=$ARCH" \
		-o "APT::Sandbox::User=$(id -un)" \
		-o "Acquire::Languages=none" \
		"$@"
}

# Create the private apt tree for a suite and refresh its index when missing
# or older than a day.
apt_private_update() {
	local suite=$1
	local dir="$TOOLS/apt/$suite"
	[ -r "$KEYRING" ] || die "$KEYRING missing (install debian-archive-keyring)"
	mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" \
		"$dir/sources.list.d" "$dir/preferences.d"
	printf 'deb [signed-by=%s] %s %s main\n' "$KEYRING" "$MIRROR" "$suite" >"$dir/sources.list"
	touch "$dir/status"
	if [ -z "$(find "$dir/lists" -maxdepth 1 -name '*_Packages*' -mtime -1 -print -quit)" ]; then
		log "apt-get update ($suite, private lists in $dir)"
		apt_private "$suite" apt-get -qq update >&2
	fi
}

candidate() { # suite package -> version apt would pick
	apt_private "$1" apt-cache policy "$2" | awk '/Candidate:/ {print $2}'
}

# Download one package version from a suite and unpack it into $dest
# (atomically: unpacked next to it, then renamed).
fetch_deb() {
	local suite=$1 pkg=$2 version=$3 dest=$4
	local work
	work="$(mktemp -d "$TOOLS/.fetch.XXXXXX")"
	log "apt-get download $pkg=$version ($suite)"
	(cd "$work" && apt_private "$suite" apt-get -qq download "$pkg=$version" >&2)
	dpkg -x "$work"/"${pkg}"_*.deb "$work/root"
	printf '%s %s %s\n' "$pkg" "$version" "$suite" >"$work/root/VERSION"
	rm -f "$work"/*.deb
	rm -rf "$dest"
	chmod 755 "$work/root"
	mv "$work/root" "$dest"
	rmdir "$work"
}

# Make sure the dynamic loader can satisfy a binary on this machine.
check_libs() {
	local missing
	missing="$(ldd "$1" 2>&1 | grep 'not found' || true)"
	[ -z "$missing" ] || die "$1 needs libraries missing here: $missing"
}

# --- quadlet (podman 5.4 from trixie) ---------------------------------------
quadlet_ok() {
	[ -x "$TOOLS/bin/quadlet" ] &&
		"$TOOLS/bin/quadlet" -version 2>/dev/null | grep -q "^${PODMAN_UPSTREAM//./\\.}\."
}

if ! quadlet_ok; then
	apt_private_update trixie
	version="${LAYOUTGEN_PODMAN_DEB:-$(candidate trixie podman)}"
	if [ -z "$version" ] || [ "$version" = "(none)" ]; then die "no podman package in trixie"; fi
	case "$version" in
	"$PODMAN_UPSTREAM".*) ;;
	*) die "trixie's podman is $version, not $PODMAN_UPSTREAM.x: set LAYOUTGEN_PODMAN_DEB" ;;
	esac
	fetch_deb trixie podman "$version" "$TOOLS/podman-$version"
	# Keep the generator and its documentation; drop the rest (podman itself,
	# ~40 MB) since nothing runs it.
	keep="$(mktemp -d "$TOOLS/.keep.XXXXXX")"
	mkdir -p "$keep/usr/libexec/podman" "$keep/usr/share/man"
	mv "$TOOLS/podman-$version/usr/libexec/podman/quadlet" "$keep/usr/libexec/podman/"
	mv "$TOOLS/podman-$version/usr/share/man/man5" "$keep/usr/share/man/"
	mv "$TOOLS/podman-$version/VERSION" "$keep/"
	rm -rf "$TOOLS/podman-$version"
	chmod 755 "$keep"
	mv "$keep" "$TOOLS/podman-$version"
	check_libs "$TOOLS/podman-$version/usr/libexec/podman/quadlet"
	ln -sfn "../podman-$version/usr/libexec/podman/quadlet" "$TOOLS/bin/quadlet"
	quadlet_ok || die "$TOOLS/bin/quadlet does not report version $PODMAN_UPSTREAM.x"
fi

# --- shellcheck (bookworm) ---------------------------------------------------
shellcheck_ok() { [ -x "$TOOLS/bin/shellcheck" ] && "$TOOLS/bin/shellcheck" --version >/dev/null 2>&1; }

if ! shellcheck_ok; then
	apt_private_update bookworm
	version="$(candidate bookworm shellcheck)"
	if [ -z "$version" ] || [ "$version" = "(none)" ]; then die "no shellcheck package in bookworm"; fi
	fetch_deb bookworm shellcheck "$version" "$TOOLS/shellcheck-$version"
	check_libs "$TOOLS/shellcheck-$version/usr/bin/shellcheck"
	ln -sfn "../shellcheck-$version/usr/bin/shellcheck" "$TOOLS/bin/shellcheck"
	shellcheck_ok || die "$TOOLS/bin/shellcheck does not run"
fi

# --- systemd-analyze (the system's systemd package) --------------------------
if ! command -v systemd-analyze >/dev/null 2>&1; then
	[ "$(id -u)" -eq 0 ] || die "systemd-analyze missing: as root, apt-get install systemd"
	log "apt-get install systemd (for systemd-analyze)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get -qq update >&2
	apt-get -qq install -y --no-install-recommends systemd >&2
fi
[ -d /usr/lib/systemd/system ] || die "/usr/lib/systemd/system missing (systemd package)"

# The private apt indexes (~50 MB) are only needed to fetch; drop them.
rm -rf "$TOOLS/apt"

# --- report --------------------------------------------------------------------
quadlet_real="$(readlink -f "$TOOLS/bin/quadlet")"
shellcheck_real="$(readlink -f "$TOOLS/bin/shellcheck")"
analyze="$(command -v systemd-analyze)"
{
	printf 'quadlet          %s (podman %s; deb %s)\n' "$quadlet_real" \
		"$("$quadlet_real" -version)" "$(cut -d' ' -f2 "$(dirname "$quadlet_real")/../../../VERSION")"
	printf 'shellcheck       %s (%s)\n' "$shellcheck_real" \
		"$("$shellcheck_real" --version | awk '/^version:/ {print $2}')"
	printf 'systemd-analyze  %s (%s)\n' "$analyze" \
		"$("$analyze" --version | head -n1)"
} | tee "$TOOLS/versions.txt"
