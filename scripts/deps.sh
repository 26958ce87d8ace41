#!/bin/sh
# Checks the Debian packages that building and testing smartswap need. As root on Debian or
# Ubuntu, installs the missing ones with apt-get and says so; elsewhere prints them and fails.
# The one list of packages lives here; the README names the same ones.
set -u
# package:file that proves it is installed (checked by file, so non-Debian systems that have the
# library under the same path pass too)
NEEDED="libcjson-dev:/usr/include/cjson/cJSON.h
libopenblas-dev:/usr/lib/x86_64-linux-gnu/libopenblas.so
gnuplot-nox:/usr/bin/gnuplot
fortunes:/usr/share/games/fortunes/fortunes
jargon-text:/usr/share/doc/jargon-text"
# Optional: `sh scripts/deps.sh --fuzz` checks (and as root installs) what `make fuzz` needs
# instead (clang and its libFuzzer runtime; docs/testing.md). make and make test never need them.
if [ "${1:-}" = --fuzz ]; then
    NEEDED="clang:/usr/bin/clang
libclang-rt-14-dev:/usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a"
fi
missing=""
for line in $NEEDED; do
    pkg=${line%%:*}; file=${line#*:}
    if command -v dpkg-query >/dev/null 2>&1; then
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' && continue
    fi
    [ -e "$file" ] || missing="$missing $pkg"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "smartswap: installing missing Debian packages:$missing"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends $missing >/tmp/smartswap-apt.log 2>&1; then
        apt-get update -q >>/tmp/smartswap-apt.log 2>&1
        if ! apt-get install -y -q --no-install-recommends $missing >>/tmp/smartswap-apt.log 2>&1; then
            echo "smartswap: apt-get install$missing failed; see /tmp/smartswap-apt.log" >&2
            exit 1
        fi
    fi
    echo "smartswap: installed$missing"
    exit 0
fi
echo "smartswap: missing packages:$missing" >&2
echo "  install them with:  sudo apt-get install$missing" >&2
echo "  (or the equivalent for your system), then run make again." >&2
exit 1
