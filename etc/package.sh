#!/usr/bin/env bash
# Builds tierproxy's Debian package from this tree, as Debian builds a meson project: prefix
# /usr, dpkg-buildflags' hardened flags, `meson install` into a staging root, programs
# stripped and man pages compressed as debhelper does, Depends from dpkg-shlibdeps (the
# packages of the libraries the programs link), then dpkg-deb. The package holds tierproxy
# and tierctl, tierproxy(8) and tierctl(1), /etc/tierproxy/tierproxy.ini and
# /etc/logrotate.d/tierproxy (conffiles: an edited one is kept over upgrades) and the systemd
# unit. Its postinst (etc/debian/postinst) makes the state and log directories and a first
# catalog, enables the unit, and starts it where systemd runs.
#
#   etc/package.sh [--builddir DIR] [--output DIR]
#
#   --builddir DIR   the meson build directory (default build-deb), reused when it exists
#   --output DIR     where the .deb goes (default: the build directory)
#   DEB_VERSION      the package's version (default: the project's, revision 1: 0.1.0-1)
#
# Installs what the build needs first (etc/setup.sh --build-only). Prints the .deb's path
# as its last line. Install it with `apt install ./tierproxy_*.deb`.
set -euo pipefail
umask 022
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)

builddir=build-deb output=
while [[ $# -gt 0 ]]; do
    case "$1" in
        --builddir) builddir=${2:?--builddir needs a directory}; shift ;;
        --output) output=${2:?--output needs a directory}; shift ;;
        -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "package.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done
say() { echo "package.sh: $*" >&2; }

etc/setup.sh --build-only || { say "etc/setup.sh --build-only failed"; exit 1; }
for tool in dpkg-buildflags dpkg-shlibdeps dpkg-deb meson ninja; do
    command -v "$tool" >/dev/null || { say "missing $tool (etc/setup.sh installs it)"; exit 1; }
done

mkdir -p "$builddir"
builddir=$(cd "$builddir" && pwd)
# One build at a time in a build directory (the test suite's plain and sanitizer runs both
# package, at the same time, in build-deb): the second waits, then finds it built.
exec 9>"$builddir/package.lock"
flock 9
output=${output:-$builddir}
mkdir -p "$output"
output=$(cd "$output" && pwd)

# Debian's flags for a network daemon: -O2 -g, stack protector, _FORTIFY_SOURCE, full RELRO
# and immediate binding. Given as options, not in the environment, so that a reused build
# directory takes them too.
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
cflags="$(dpkg-buildflags --get CPPFLAGS) $(dpkg-buildflags --get CFLAGS)"
ldflags=$(dpkg-buildflags --get LDFLAGS)
options=(--prefix=/usr --sysconfdir=/etc --localstatedir=/var --buildtype=plain
         --wrap-mode=nodownload -Dtests=false -Db_sanitize=none -Dfuzz=false -Dbench=false
         -Dman=enabled "-Dc_args=$cflags" "-Dc_link_args=$ldflags"
         -Dsystemdsystemunitdir=/lib/systemd/system)   # where Debian 12's packages put units
say "meson setup $builddir (prefix /usr, dpkg-buildflags)"
reconfigure=()
[[ -f $builddir/build.ninja ]] && reconfigure=(--reconfigure)
meson setup "${reconfigure[@]}" "$builddir" "${options[@]}" >"$builddir/package-setup.log" 2>&1 ||
    { tail -20 "$builddir/package-setup.log" >&2; say "meson setup failed"; exit 1; }
ninja -C "$builddir" >"$builddir/package-build.log" ||
    { tail -40 "$builddir/package-build.log" >&2; say "the build failed"; exit 1; }

stage=$builddir/deb-root
rm -rf "$stage"
meson install -C "$builddir" --destdir "$stage" --no-rebuild >"$builddir/package-install.log"
strip --strip-unneeded --remove-section=.comment --remove-section=.note \
    "$stage/usr/bin/tierproxy" "$stage/usr/bin/tierctl"
find "$stage/usr/share/man" -type f -name '*.[0-9]' -exec gzip -9n {} +

# Depends: dpkg-shlibdeps names the package (and least version) of each library linked.
# It wants a debian/control to read, which this tree does not otherwise need, and finds
# the package's root by its DEBIAN directory.
mkdir -p "$stage/DEBIAN"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debian"
printf 'Source: tierproxy\n\nPackage: tierproxy\nArchitecture: any\n' >"$work/debian/control"
depends=$(cd "$work" && dpkg-shlibdeps -O "$stage/usr/bin/tierproxy" "$stage/usr/bin/tierctl" |
          sed -n 's/^shlibs:Depends=//p')
[[ -n $depends ]] || { say "dpkg-shlibdeps found no dependencies"; exit 1; }

version=${DEB_VERSION:-$(meson introspect --projectinfo "$builddir" |
    /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')-1}
arch=$(dpkg --print-architecture)
maintainer="tierproxy maintainers <root@localhost>"
if [[ -n ${DEBFULLNAME:-} && -n ${DEBEMAIL:-} ]]; then
    maintainer="$DEBFULLNAME <$DEBEMAIL>"
elif author=$(git -C "$ROOT" log -1 --format='%an <%ae>' 2>/dev/null) && [[ -n $author ]]; then
    maintainer=$author
fi

(cd "$stage" && find etc -type f | sed 's|^|/|' | sort) >"$stage/DEBIAN/conffiles"
(cd "$stage" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -print |
    sed 's|^\./||' | sort | xargs md5sum) >"$stage/DEBIAN/md5sums"
for script in postinst prerm postrm; do
    install -m 0755 "etc/debian/$script" "$stage/DEBIAN/$script"
done
cat >"$stage/DEBIAN/control" <<EOF
Package: tierproxy
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: $depends
Recommends: logrotate
Suggests: redis-server
Section: net
Priority: optional
Description: rate-limiting reverse proxy with API keys and subscription plans
 tierproxy sits in front of an HTTP API. It authenticates each request by its
 API key, finds the caller's plan in a SQLite catalog managed with tierctl,
 checks the plan's limits against Redis (a fleet of proxies) or its own memory,
 answers callers over a limit with 429 and RateLimit headers, and forwards the
 rest. This package runs it as the systemd service tierproxy.service, with
 /etc/tierproxy/tierproxy.ini, answering /health on 127.0.0.1:9090.
EOF

deb=$output/tierproxy_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
say "built $deb"
echo "$deb"
