#!/usr/bin/env bash
# Make sure the system libraries katra3d needs are present.
#   ci/system-deps.sh        Mesa's EGL + llvmpipe (needed to render)
#   ci/system-deps.sh test   the above, plus Xvfb (the GLFW backend tests), valgrind
#                            (the --measure instructions tests run it for real) and chromium
#                            (the HTML report is opened in it)
# Installs them with apt-get when they are missing and we are root;
# otherwise prints the exact command to run and exits 1.
set -euo pipefail

want_test=0
[ "${1:-}" = "test" ] && want_test=1

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

[ "${#missing[@]}" -eq 0 ] && exit 0

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
