#!/bin/sh
# install.sh -- install scored, scrun, sc_console and sc_replay, their man pages and the
# sample configuration under a prefix.
#
#   config/install.sh                                  # into /usr/local
#   PREFIX=$HOME/.local config/install.sh              # into ~/.local
#   SCORED_PREBUILT=/some/dir config/install.sh        # copy binaries built elsewhere
#
# PREFIX           where to install (default /usr/local): PREFIX/bin,
#                  PREFIX/share/man/man{1,5,8}, PREFIX/share/doc/scored.
# SCORED_PREBUILT  a directory holding scored, scrun, sc_console and sc_replay already
#                  built; without it the programs are built once with
#                  "cargo build --release" (nothing to do after the README's own
#                  release build) and taken from target/release, or from
#                  $CARGO_TARGET_DIR/release.
# CARGO            the cargo to use (default cargo).
#
# The samples go to PREFIX/share/doc/scored, not to PREFIX/etc: scored reads
# PREFIX/etc/scored.rc at start-up when it exists (see scored.rc(5)), so
# putting a policy there is left to the operator.
set -eu

cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/usr/local}
CARGO=${CARGO:-cargo}

if [ -n "${SCORED_PREBUILT:-}" ]; then
    built=$SCORED_PREBUILT
else
    "$CARGO" build --release --locked -p scored -p scored-replay -p scrun -p sc_console
    built=${CARGO_TARGET_DIR:-target}/release
fi
for program in scored scrun sc_console sc_replay; do
    if [ ! -x "$built/$program" ]; then
        echo "install.sh: $built/$program is missing; build it first (cargo build --release)" >&2
        exit 1
    fi
done
for program in scored scrun sc_console sc_replay; do
    install -Dm755 "$built/$program" "$PREFIX/bin/$program"
done

install -d "$PREFIX/share/man/man1" "$PREFIX/share/man/man5" "$PREFIX/share/man/man8"
install -m644 man/*.1 "$PREFIX/share/man/man1/"
install -m644 man/*.5 "$PREFIX/share/man/man5/"
install -m644 man/*.8 "$PREFIX/share/man/man8/"

install -d "$PREFIX/share/doc/scored"
install -m644 config/scorehosts.db config/scored.rc config/scored.toml config/scored.service \
    "$PREFIX/share/doc/scored/"

echo "installed scored, scrun, sc_console and sc_replay in $PREFIX/bin, man pages in $PREFIX/share/man,"
echo "samples in $PREFIX/share/doc/scored"
