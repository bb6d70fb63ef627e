#!/bin/sh
# Fetches Slurm 22.05.8's python test suite the ordinary Debian way: the
# source package slurm-wlm from bookworm's deb-src, unpacked into DIR.
# Prints the path of its testsuite/python. Needs root (apt) the first time.
# usage: fetch.sh DIR
set -eu
dir=${1:?usage: fetch.sh DIR}
mkdir -p "$dir"
cd "$dir"
suite=$(ls -d slurm-*/testsuite/python 2>/dev/null | head -n1 || true)
if [ -n "$suite" ]; then
    echo "$dir/$suite"
    exit 0
fi
if ! ls slurm-wlm_22.05.8*.orig.tar.gz >/dev/null 2>&1; then
    sources=/etc/apt/sources.list.d/ysched-conformance-src.sources
    if ! apt-get source --download-only slurm-wlm=22.05.8* >/dev/null 2>&1; then
        # bookworm's deb-src entry, as any Debian machine adds it.
        cat >"$sources" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
        apt-get update >/dev/null
        apt-get source --download-only 'slurm-wlm=22.05.8*' >/dev/null 2>&1 \
            || apt-get source --download-only slurm-wlm >/dev/null
    fi
fi
tarball=$(ls slurm-wlm_22.05.8*.orig.tar.gz | head -n1)
[ -n "$tarball" ] || { echo "fetch.sh: no slurm-wlm 22.05.8 source in $dir" >&2; exit 1; }
tar xzf "$tarball" --wildcards '*/testsuite/python/*'
suite=$(ls -d slurm-*/testsuite/python | head -n1)
echo "$dir/$suite"
