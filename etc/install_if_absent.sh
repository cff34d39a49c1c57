#!/bin/sh
# A meson install script (etc/meson.build): installs FILE as TARGET, an absolute path that
# $DESTDIR prefixes, unless TARGET exists. Configuration an operator may have edited is
# never replaced by a later `meson install`, as nginx's `make install` keeps nginx.conf.
#
#   install_if_absent.sh FILE TARGET
set -eu
src=$1
target=${DESTDIR:-}$2
say() { [ -n "${MESON_INSTALL_QUIET:-}" ] || echo "$*"; }
if [ -e "$target" ] || [ -L "$target" ]; then
    say "Keeping $target: it exists (the file it would be is $src)"
    exit 0
fi
install -D -m 0644 "$src" "$target"
say "Installing $src to $target"
