#!/usr/bin/env bash
# Make sure the system libraries katra3d needs are present.
#   ci/system-deps.sh        Mesa's EGL + llvmpipe (needed to render)
#   ci/system-deps.sh test   the above, plus Xvfb (the GLFW backend tests), valgrind
#                            (the --measure instructions tests run it for real) and chromium
#                            (the HTML report is opened in it), apitrace (trace replays: docs/replay.md);
#                            and, where they can be installed,
#                            the bench extras below, so the test of the glmark2 row's glmark2 side
#                            runs glmark2 for real
#   ci/system-deps.sh bench  the first, plus glmark2-x11, glmark2-data and Xvfb for `make bench`'s
#                            glmark2 parity row (bench/glmark2.py), where they can be installed
# Installs them with apt-get when they are missing and we are root;
# otherwise prints the exact command to run and exits 1. The bench extras never fail the set-up:
# without them the glmark2 row is skipped with a notice.
set -euo pipefail

want_test=0
[ "${1:-}" = "test" ] && want_test=1
want_bench=0
[ "${1:-}" = "bench" ] && want_bench=1
# The glmark2 row's packages: the same list as bench/glmark2.py's APT_PACKAGES (a test checks it).
bench_packages="glmark2-x11 glmark2-data xvfb"

missing=()
have_lib() { ldconfig -p 2>/dev/null | grep -q "$1"; }
have_dri() {
    for d in /usr/lib/*/dri /usr/lib/dri /usr/lib64/dri; do
        [ -e "$d/swrast_dri.so" ] && return 0
    done
    return 1
}
have_lib 'libEGL.so.1' || missing+=(libegl1)
have_lib 'libEGL_mesa.so.0' || missing+=(libegl-mesa0)
have_dri || missing+=(libgl1-mesa-dri)
if [ "$want_test" = 1 ] && ! command -v Xvfb >/dev/null 2>&1; then
    missing+=(xvfb)
fi
if [ "$want_test" = 1 ] && ! command -v valgrind >/dev/null 2>&1; then
    missing+=(valgrind)
fi
if [ "$want_test" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
    missing+=(chromium)
fi
# apitrace: the trace replay tests (tests/test_replay.py, docs/replay.md) record and replay glmark2 traces
if [ "$want_test" = 1 ] && ! command -v glretrace >/dev/null 2>&1; then
    missing+=(apitrace)
fi

bench_extras() {
    local extra=() pkg
    for pkg in $bench_packages; do
        case "$pkg" in
            glmark2-x11) command -v glmark2 >/dev/null 2>&1 || extra+=("$pkg") ;;
            glmark2-data) [ -e /usr/share/glmark2/models/bunny.obj ] \
                              || [ -e /usr/local/share/glmark2/models/bunny.obj ] || extra+=("$pkg") ;;
            xvfb) command -v Xvfb >/dev/null 2>&1 || extra+=("$pkg") ;;
        esac
    done
    [ "${#extra[@]}" -eq 0 ] && return 0
    local line="apt-get install -y --no-install-recommends ${extra[*]}"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "katra3d: installing the glmark2 row's packages: ${extra[*]}"
        export DEBIAN_FRONTEND=noninteractive
        { apt-get update -qq && $line -qq; } \
            || echo "katra3d: could not install ${extra[*]}; the glmark2 row will be skipped" >&2
    else
        echo "katra3d: the glmark2 row will be skipped: missing ${extra[*]}" >&2
        echo "katra3d: run as root:  apt-get update && $line" >&2
    fi
}

if [ "${#missing[@]}" -ne 0 ]; then
    line="apt-get install -y --no-install-recommends ${missing[*]}"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "katra3d: installing system packages: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        $line -qq
    else
        echo "katra3d: missing system packages: ${missing[*]}" >&2
        echo "katra3d: run as root:  apt-get update && $line" >&2
        exit 1
    fi
fi
if [ "$want_bench" = 1 ] || [ "$want_test" = 1 ]; then
    bench_extras
fi
exit 0
