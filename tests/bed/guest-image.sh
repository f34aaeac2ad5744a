#!/usr/bin/env bash
# Builds the guest image of the kvm provider's end-to-end test from Debian's packages, into a
# cache keyed by a version (like the control plane's kbins), and reuses it when it is there:
#   rootfs.img   a raw ext4 root filesystem (no partition table): the base image volume
#   vmlinuz      the kernel of linux-image-cloud-amd64, booted directly by libvirt
#   initrd.img   its initramfs (virtio drivers), made by initramfs-tools inside the rootfs
# The root filesystem is `debootstrap --variant=minbase` with systemd, cloud-init (NoCloud
# only), ifupdown and squid. squid's own service is disabled: only the cloud-init the kvm
# provider writes into the seed ISO configures and starts it, so a serving squid proves the
# whole path (seed ISO -> cloud-init -> squid config -> squid).
#
# `guest-image.sh --check-only` exits 0 when the cached image is complete, 1 when a run would
# rebuild (nothing is built). `guest-image.sh --dir` prints the cache directory of this
# version. A run prints `export PROXY_OPERATOR_GUEST=<dir>` on success.
#
# Environment:
#   PROXY_OPERATOR_CACHE  cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/proxy-operator)
#   DEBIAN_MIRROR         mirror for debootstrap (default http://deb.debian.org/debian)
set -euo pipefail

# Bump when the recipe below changes: a new version is a new cache directory.
VERSION=3
CACHE=${PROXY_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/proxy-operator}
OUT=$CACHE/guest/v$VERSION
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
log() { printf 'guest-image: %s\n' "$*" >&2; }

image_ok() {
  [ -s "$OUT/rootfs.img" ] && [ -s "$OUT/vmlinuz" ] && [ -s "$OUT/initrd.img" ] \
    && [ "$(cat "$OUT/complete" 2>/dev/null)" = "v$VERSION" ]
}

build() {
  local w; w=$(mktemp -d "$CACHE/guest/build.XXXXXX")
  trap 'rm -rf "$w"' RETURN
  local root=$w/rootfs
  log "debootstrap bookworm into $root (cold: about 3 min)"
  # python3-cffi-backend: debootstrap does not resolve virtual packages, and
  # python3-cryptography (for cloud-init) depends on the ones it provides.
  debootstrap --variant=minbase \
    --include=systemd-sysv,udev,kmod,initramfs-tools,linux-image-cloud-amd64,cloud-init,python3-cffi-backend,ifupdown,isc-dhcp-client,iproute2,netbase,squid \
    bookworm "$root" "$MIRROR" >&2 \
    || { cp "$root/debootstrap/debootstrap.log" "$CACHE/guest/debootstrap.log" 2>/dev/null
         log "debootstrap failed: see $CACHE/guest/debootstrap.log"; return 1; }
  # NoCloud only (no probing of metadata services that do not exist here), and only the
  # cloud-init modules a proxy's cloud-config uses: under TCG every module costs seconds
  # (locale generation alone took 3 s, the whole default list about 80 s). manage_etc_hosts:
  # the guest's own name resolves from /etc/hosts, not by asking DNS.
  cat > "$root/etc/cloud/cloud.cfg.d/90_proxy_operator.cfg" <<'CFG'
datasource_list: [ NoCloud, None ]
manage_etc_hosts: true
cloud_init_modules: [seed_random, bootcmd, write_files, set_hostname, update_hostname, update_etc_hosts, users_groups]
cloud_config_modules: [runcmd]
cloud_final_modules: [package_update_upgrade_install, write_files_deferred, scripts_per_once, scripts_per_boot, scripts_per_instance, scripts_user, final_message]
CFG
  # squid starts only when the cloud-init of the seed ISO starts it.
  rm -f "$root/etc/systemd/system/multi-user.target.wants/squid.service"
  # Root is the whole virtio disk; the machine id is made at first boot.
  printf '/dev/vda / ext4 defaults 0 1\n' > "$root/etc/fstab"
  : > "$root/etc/machine-id"
  # Nothing in the guest may slow the boot down: no timers, no log rotation, no first-boot
  # setup the proxy does not need.
  rm -f "$root"/etc/systemd/system/timers.target.wants/*
  for unit in e2scrub_reap.service systemd-pstore.service cron.service \
      systemd-journal-flush.service apt-daily.service apt-daily-upgrade.service; do
    ln -sf /dev/null "$root/etc/systemd/system/$unit"
  done
  cp "$root"/boot/vmlinuz-* "$w/vmlinuz"
  cp "$root"/boot/initrd.img-* "$w/initrd.img"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  mkfs.ext4 -q -L root -d "$root" "$w/rootfs.img" 1200M >&2
  rm -rf "$OUT" && mkdir -p "$OUT"
  mv "$w/rootfs.img" "$w/vmlinuz" "$w/initrd.img" "$OUT/"
  chmod 0644 "$OUT"/*
  echo "v$VERSION" > "$OUT/complete"
}

if [ "${1:-}" = --dir ]; then
  echo "$OUT"
  exit 0
fi
if [ "${1:-}" = --check-only ]; then
  image_ok || { log "no complete guest image in $OUT: a run would build it"; exit 1; }
  exit 0
fi
if image_ok; then
  log "guest image cached in $OUT"
else
  mkdir -p "$CACHE/guest"
  started=$SECONDS
  build
  image_ok || { log "the built image in $OUT is incomplete"; exit 1; }
  log "built into $OUT in $((SECONDS - started)) s"
fi
echo "export PROXY_OPERATOR_GUEST=$OUT"
