#!/usr/bin/env bash
# Build the root filesystem the end-to-end suite boots as a podman container with
# systemd as PID 1 (issue 34; ../shared/notes/systemd-podman-e2e.md), from
# Debian trixie's packages with mmdebstrap, into a cache outside the clone that
# later runs on the same machine reuse.
#
#   suite     trixie (systemd 257: 258+ drops cgroup v1, which CI's VMs run in
#             hybrid mode; podman 5.4 with quadlet)
#   python    layoutgen's dependencies as cp313 wheels fetched here by pip and
#             installed into the image (no network inside the container)
#   masked    units that fail or wait in a privileged container
#
# mmdebstrap's output is not byte-reproducible, so the cache is keyed on the
# package list, the wheel list and this script's hooks, not on the tarball.
# The first build takes about a minute (network bound); a cached one ~0.01 s.
#
# Needs: mmdebstrap, zstd, and a pip that can reach the configured index.
# Usage: tests/tools/build_rootfs.sh        (normally via `make e2e-tools`)
# Prints the tarball's path on stdout.
# Cache: ${LAYOUTGEN_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/layoutgen/tools}/rootfs-$KEY.tar.zst
set -euo pipefail

PACKAGES=(
	systemd systemd-sysv dbus libpam-systemd python3 python3-pip curl ca-certificates git
	podman crun netavark aardvark-dns conmon catatonit fuse-overlayfs
	iptables nftables zstd uidmap passt procps
)
# what layoutgen imports at run time (pyproject's dependencies)
WHEELS=("pydantic>=2.7,<3" "jinja2>=3.1" "typer>=0.12" "ruamel.yaml>=0.18"
	"ruamel.yaml.clib>=0.2.8" "gguf>=0.17" "nvidia-ml-py>=12")
MASKED=(systemd-modules-load.service getty@tty1.service console-getty.service
	systemd-networkd.service systemd-resolved.service systemd-timesyncd.service
	systemd-networkd-wait-online.service apt-daily.timer apt-daily-upgrade.timer
	dpkg-db-backup.timer e2scrub_all.timer fstrim.timer)

TOOLS="${LAYOUTGEN_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/layoutgen/tools}"
key="$(printf '%s\n' "${PACKAGES[@]}" -- "${WHEELS[@]}" -- "${MASKED[@]}" -- v1 | sha256sum | cut -c1-16)"
DEST="$TOOLS/rootfs-$key.tar.zst"

log() { printf 'build_rootfs: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

if [ -s "$DEST" ]; then
	echo "$DEST"
	exit 0
fi

command -v mmdebstrap >/dev/null || die "mmdebstrap missing (apt-get install mmdebstrap)"
command -v zstd >/dev/null || die "zstd missing (apt-get install zstd)"

mkdir -p "$TOOLS"
work="$(mktemp -d "$TOOLS/.rootfs.XXXXXX")"
trap 'rm -rf "$work"' EXIT

log "downloading layoutgen's dependencies as cp313 wheels"
read -r -a pip <<<"${PIP:-python3 -m pip}"
"${pip[@]}" download --quiet --only-binary=:all: --python-version 3.13 \
	--implementation cp --abi cp313 --platform manylinux_2_28_x86_64 \
	--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	--platform linux_x86_64 --platform any -d "$work/wheels" "${WHEELS[@]}"

masks=""
for unit in "${MASKED[@]}"; do
	masks+="ln -sf /dev/null \"\$1/etc/systemd/system/$unit\"; "
done

# Debian's archive as this machine's apt is configured to reach it (a CI mirror or
# proxy included), never an address of this script's: the repository apt lists for
# the host's own release, component main
# ($(REPO_URI) ... are apt's format fields, not this shell's; os-release is the host's)
# shellcheck disable=SC2016,SC1091
mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' 'Identifier: Packages' |
	awk -v rel="$(. /etc/os-release && echo "$VERSION_CODENAME")" '$2 == rel && $3 == "main" {print $1; exit}')
if [ -z "$mirror" ]; then
	echo "build_rootfs: apt lists no Debian repository for this release (component main):" \
		"configure one in /etc/apt/sources.list.d and run apt-get update" >&2
	exit 1
fi
aptopts=()
eval "$(apt-config shell proxy Acquire::http::Proxy)"
if [ -n "${proxy:-}" ]; then
	aptopts+=(--aptopt="Acquire::http::Proxy \"$proxy\"")
fi

log "mmdebstrap trixie (${#PACKAGES[@]} packages) from $mirror"
start=$(date +%s)
# the hooks' "$1" (the root being built) is mmdebstrap's to expand, not this shell's
# shellcheck disable=SC2016
mmdebstrap --quiet --variant=minbase --mode=root --format=tar "${aptopts[@]}" \
	--include="$(
		IFS=,
		echo "${PACKAGES[*]}"
	)" \
	--customize-hook="mkdir -p \"\$1/tmp/wheels\" && cp $work/wheels/* \"\$1/tmp/wheels/\"" \
	--customize-hook='chroot "$1" python3 -m pip install --quiet --no-index --break-system-packages --root-user-action=ignore --find-links /tmp/wheels pydantic jinja2 typer ruamel.yaml ruamel.yaml.clib gguf nvidia-ml-py' \
	--customize-hook='rm -rf "$1/tmp/wheels" "$1/root/.cache"' \
	--customize-hook="$masks" \
	--customize-hook='mkdir -p "$1/etc/containers" && printf "[network]\ndefault_subnet = \"10.123.0.0/24\"\n[engine]\nevents_logger = \"file\"\n" > "$1/etc/containers/containers.conf"' \
	--customize-hook='echo e2e > "$1/etc/hostname"; : > "$1/etc/machine-id"' \
	--customize-hook='chroot "$1" useradd -m -u 1000 -s /bin/bash lg && mkdir -p "$1/var/lib/systemd/linger" && touch "$1/var/lib/systemd/linger/lg"' \
	trixie "$work/rootfs.tar" "$mirror"
log "mmdebstrap took $(($(date +%s) - start)) s"
zstd -q -T0 -3 "$work/rootfs.tar" -o "$work/rootfs.tar.zst"
mv "$work/rootfs.tar.zst" "$DEST"
# older keys of this cache are stale: keep one tarball
find "$TOOLS" -maxdepth 1 -name 'rootfs-*.tar.zst' ! -name "rootfs-$key.tar.zst" -delete
log "built $DEST ($(du -h "$DEST" | cut -f1))"
echo "$DEST"
