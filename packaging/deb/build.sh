#!/usr/bin/env bash
# Builds the Debian package from this tree: packaging/deb/build.sh [OUTDIR]
# Env: VERSION (default: Cargo.toml's version), NO_BUILD=1 to package the
# release binaries already in target/release, MAINTAINER ("Name <address>")
# for the Maintainer field and the changelog.
# Output: OUTDIR/ysched_VERSION_ARCH.deb (default OUTDIR: target/deb).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/target/deb}
VERSION=${VERSION:-$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -1)}
ARCH=$(dpkg --print-architecture)
# Sites that build their own packages put their own address here.
MAINTAINER=${MAINTAINER:-ysched developers <ysched@example.org>}
cd "$ROOT"
[ "${NO_BUILD:-}" = 1 ] || cargo build --release --locked --quiet
bin=$ROOT/target/release
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pkg=$stage/ysched

install -d "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/usr/sbin" "$pkg/usr/lib/ysched/slurm-compat" \
    "$pkg/etc/ysched" "$pkg/lib/systemd/system" "$pkg/usr/lib/tmpfiles.d" \
    "$pkg/usr/share/doc/ysched" "$pkg/usr/share/man/man1" "$pkg/usr/share/man/man5" "$pkg/usr/share/man/man8"
for b in ysbatch ysalloc ysqueue yscancel ysacct yscontrol ysshare ysreport ysinfo ystoken ysched-slurm; do
    install -m 755 "$bin/$b" "$pkg/usr/bin/"
done
install -m 755 "$bin/ysctld" "$bin/ysstepd" "$bin/ysnoded" "$bin/yswebd" "$pkg/usr/sbin/"
# The debug info goes into ysched-dbgsym, as Debian's own dbgsym packages
# hold it: each binary's, by its build id, under /usr/lib/debug/.build-id,
# where gdb and debuginfod look. The installed binaries are stripped
# (ysctld 25 MB with its line tables, 10.6 MB without).
dbg=$stage/ysched-dbgsym
for f in "$pkg"/usr/bin/* "$pkg"/usr/sbin/*; do
    id=$(readelf -n "$f" 2>/dev/null | sed -n 's/.*Build ID: \([0-9a-f]*\).*/\1/p')
    if [ -n "$id" ]; then
        install -d "$dbg/usr/lib/debug/.build-id/${id:0:2}"
        debug="$dbg/usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug"
        objcopy --only-keep-debug --compress-debug-sections "$f" "$debug"
        chmod 644 "$debug"
    fi
    strip --strip-unneeded "$f" 2>/dev/null || true
done
for name in sbatch squeue scancel sacct sshare sinfo scontrol srun salloc sacctmgr seff; do
    ln -s ../../../bin/ysched-slurm "$pkg/usr/lib/ysched/slurm-compat/$name"
done
install -m 755 contrib/notify/notify-mail contrib/notify/notify-webhook "$pkg/usr/lib/ysched/"
install -m 755 contrib/gpu-check/nvml-check.sh "$pkg/usr/lib/ysched/nvml-check"
# The example config, with its example GPUs commented out: without
# [[gpus]], ysctld asks the NVIDIA driver (a declared device that does not
# exist would stop it from starting).
{
    echo "# Installed by the ysched package; your changes are kept on upgrade."
    sed '/^\[\[gpus\]\]$/,/^$/ { /^$/! s/^/# / }' etc/ysched.toml
} > "$pkg/etc/ysched/ysched.toml"
chmod 644 "$pkg/etc/ysched/ysched.toml"
install -m 644 packaging/systemd/ysctld.service packaging/systemd/ysnoded.service \
    packaging/systemd/yswebd.service "$pkg/lib/systemd/system/"
# The drop-in for a controller of two (the admin guide's "Running two
# controllers"): not active until copied under ysctld.service.d.
install -m 644 packaging/systemd/ysctld-two-controllers.conf "$pkg/usr/share/doc/ysched/"
# A pool node's config, for a server that runs ysnoded instead of ysctld.
install -m 644 etc/ysnoded.toml "$pkg/usr/share/doc/ysched/ysnoded.toml.example"
install -m 644 packaging/tmpfiles/ysched.conf "$pkg/usr/lib/tmpfiles.d/"
install -m 644 README.md "$pkg/usr/share/doc/ysched/"
install -m 644 contrib/slurm-compat/README.md "$pkg/usr/share/doc/ysched/slurm-compat.md"
install -d "$pkg/usr/share/lintian/overrides"
install -m 644 packaging/deb/lintian-overrides "$pkg/usr/share/lintian/overrides/ysched"
cat > "$pkg/usr/share/doc/ysched/copyright" <<COPY
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: ysched
Files: *
Copyright: 2026 the ysched developers
License: MIT or Apache-2.0
COPY
# A native package's changelog, in Debian's format (dpkg-parsechangelog reads it).
{
    echo "ysched ($VERSION) unstable; urgency=medium"
    echo
    echo "  * Release $VERSION; what changed is in README.md and docs/."
    echo
    echo " -- $MAINTAINER  $(date -R -d "@${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || date +%s)}")"
} | gzip -9n > "$pkg/usr/share/doc/ysched/changelog.gz"
for page in man/*.[158]; do
    section=${page##*.}
    gzip -9n < "$page" > "$pkg/usr/share/man/man$section/$(basename "$page").gz"
done

echo "/etc/ysched/ysched.toml" > "$pkg/DEBIAN/conffiles"
size=$(du -sk "$pkg" | cut -f1)
cat > "$pkg/DEBIAN/control" <<CONTROL
Package: ysched
Version: $VERSION
Architecture: $ARCH
Maintainer: $MAINTAINER
Installed-Size: $size
Depends: libc6 (>= 2.31)
Recommends: systemd
Suggests: prometheus-node-exporter, chromium
Section: admin
Priority: optional
Homepage: https://github.com/ysched/ysched
Description: Slurm-style GPU batch scheduler for teams sharing GPU servers
 ysched gives each job its GPUs (CUDA_VISIBLE_DEVICES and cgroups), runs it
 as its user, charges GPU-hours to accounts with fair-share, enforces quotas
 and budgets, and preempts lower-priority jobs with a grace for checkpoints.
 Commands: ysbatch, ysalloc, ysqueue, yscancel, ysacct, yscontrol, ysshare,
 ysreport, ysinfo, ystoken, and Slurm's sbatch, salloc, squeue, ... in
 /usr/lib/ysched/slurm-compat.
 Several servers form one pool: ysctld on one, ysnoded on each of the others.
 yswebd serves slurmrestd's JSON API, with tokens from ystoken.
CONTROL
cat > "$pkg/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    if command -v systemd-tmpfiles >/dev/null; then
        systemd-tmpfiles --create /usr/lib/tmpfiles.d/ysched.conf || true
    else
        install -d -m 755 /var/spool/ysched
    fi
    # The account yswebd runs as ([web] user); the web server stays off
    # until [web] listen is set and yswebd.service is enabled.
    if ! getent passwd ysweb >/dev/null && command -v useradd >/dev/null; then
        useradd --system --user-group --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin ysweb || true
    fi
    if [ -d /run/systemd/system ]; then
        systemctl --system daemon-reload || true
    fi
    # Enabled on first install, not started: the GPUs and accounts in
    # /etc/ysched/ysched.toml are the admin's to check first. On upgrade
    # the admin's choice stands, and a running daemon is restarted; jobs
    # survive (KillMode=process) and the new daemon re-adopts them.
    if [ -z "$2" ]; then
        deb-systemd-helper enable ysctld.service >/dev/null || true
        echo "ysched: check /etc/ysched/ysched.toml (ysctld --check-config), then: systemctl start ysctld"
    else
        deb-systemd-helper update-state ysctld.service >/dev/null || true
        if [ -d /run/systemd/system ] && systemctl is-active --quiet ysctld.service; then
            deb-systemd-invoke restart ysctld.service || true
        fi
        # A pool's node: its agent too (its jobs run on and are re-adopted).
        if [ -d /run/systemd/system ] && systemctl is-active --quiet ysnoded.service; then
            deb-systemd-invoke restart ysnoded.service || true
        fi
        if [ -d /run/systemd/system ] && systemctl is-active --quiet yswebd.service; then
            deb-systemd-invoke restart yswebd.service || true
        fi
    fi
fi
exit 0
POSTINST
cat > "$pkg/DEBIAN/prerm" <<'PRERM'
#!/bin/sh
set -e
# On upgrade the daemon keeps running until postinst restarts it; running
# jobs are never stopped by the package.
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
    deb-systemd-invoke stop ysctld.service || true
    deb-systemd-invoke stop ysnoded.service || true
    deb-systemd-invoke stop yswebd.service || true
fi
exit 0
PRERM
cat > "$pkg/DEBIAN/postrm" <<'POSTRM'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload || true
fi
if [ "$1" = remove ]; then
    deb-systemd-helper mask ysctld.service >/dev/null || true
    deb-systemd-helper mask ysnoded.service >/dev/null || true
    deb-systemd-helper mask yswebd.service >/dev/null || true
fi
if [ "$1" = purge ]; then
    deb-systemd-helper purge ysctld.service >/dev/null || true
    deb-systemd-helper unmask ysctld.service >/dev/null || true
    deb-systemd-helper purge ysnoded.service >/dev/null || true
    deb-systemd-helper unmask ysnoded.service >/dev/null || true
    deb-systemd-helper purge yswebd.service >/dev/null || true
    deb-systemd-helper unmask yswebd.service >/dev/null || true
    echo "ysched: the spool and accounting database in /var/spool/ysched are kept; remove them by hand if you mean to"
fi
exit 0
POSTRM
chmod 755 "$pkg/DEBIAN/postinst" "$pkg/DEBIAN/prerm" "$pkg/DEBIAN/postrm"
mkdir -p "$OUT"
deb=$OUT/ysched_${VERSION}_${ARCH}.deb
dpkg-deb --root-owner-group -Zxz --build "$pkg" "$deb" >/dev/null
if [ -d "$dbg/usr" ]; then
    install -d "$dbg/DEBIAN" "$dbg/usr/share/doc"
    ln -s ysched "$dbg/usr/share/doc/ysched-dbgsym"
    cat > "$dbg/DEBIAN/control" <<DBGCONTROL
Package: ysched-dbgsym
Source: ysched
Version: $VERSION
Architecture: $ARCH
Maintainer: $MAINTAINER
Installed-Size: $(du -sk "$dbg" | cut -f1)
Depends: ysched (= $VERSION)
Section: debug
Priority: optional
Auto-Built-Package: debug-symbols
Build-Ids: $(find "$dbg/usr/lib/debug/.build-id" -name '*.debug' | sed 's,.*/\(..\)/\(.*\)\.debug,\1\2,' | sort | tr '\n' ' ')
Description: debug symbols for ysched
DBGCONTROL
    dpkg-deb --root-owner-group -Zxz --build "$dbg" "$OUT/ysched-dbgsym_${VERSION}_${ARCH}.deb" >/dev/null
    echo "debug symbols: $OUT/ysched-dbgsym_${VERSION}_${ARCH}.deb" >&2
fi
echo "$deb"
