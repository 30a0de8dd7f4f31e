#!/usr/bin/env bash
# Compare two git revisions of your project on this machine, interleaved (A B A B ...).
#
#   ci/compare-versions.sh [-r ROUNDS] [-o DIR] [-c CMD] BASE_REF NEW_REF [-- COMPARE_OPTIONS...]
#
# Checks out BASE_REF and NEW_REF as git worktrees of the repository you are in, then runs
# `katra3d ab`: CMD is run alternately in each worktree (cwd = the worktree, which is also
# put first on PYTHONPATH, so scenes and code of that revision are used), ROUNDS times each,
# and the pooled traces are compared with the run as the unit of evidence.
#
#   -r ROUNDS  rounds (default: 7: enough for an exact rank test across the 12 scenes of the
#              `ci` suite at alpha 0.01 after Holm; one scene needs 5)
#   -o DIR     traces go to DIR/base and DIR/new (default: katra3d-versions-<time>)
#   -c CMD     capture command; {out} is replaced by the trace path
#              (default: katra3d run --suite ci --quiet -o {out})
#   after --   options for `katra3d compare` (--threshold, --alpha, --metric, --format ...)
#
# Environment: KATRA3D (the katra3d command, default: katra3d on PATH).
# Exit codes as `katra3d compare`: 0 no regression, 1 regression, 2 bad input / nothing comparable.
set -euo pipefail

rounds=7
out=""
katra="${KATRA3D:-katra3d}"
cmd="$katra run --suite ci --quiet -o {out}"
while [ $# -gt 0 ]; do
    case "$1" in
        -r) rounds="$2"; shift 2 ;;
        -o) out="$2"; shift 2 ;;
        -c) cmd="$2"; shift 2 ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        --) echo "ci/compare-versions.sh: give BASE_REF and NEW_REF before --" >&2; exit 2 ;;
        -*) echo "ci/compare-versions.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
        *) break ;;
    esac
done
if [ $# -lt 2 ]; then
    echo "usage: ci/compare-versions.sh [-r ROUNDS] [-o DIR] [-c CMD] BASE_REF NEW_REF [-- COMPARE_OPTIONS...]" >&2
    exit 2
fi
base_ref="$1"; new_ref="$2"; shift 2
if [ $# -gt 0 ]; then
    [ "$1" = "--" ] || { echo "ci/compare-versions.sh: unexpected argument '$1'" >&2; exit 2; }
    shift
fi
case "$cmd" in *"{out}"*) ;; *) echo "ci/compare-versions.sh: -c command must contain {out}" >&2; exit 2 ;; esac

top="$(git rev-parse --show-toplevel 2>/dev/null)" || {
    echo "ci/compare-versions.sh: not inside a git repository ($(pwd))" >&2; exit 2; }
for ref in "$base_ref" "$new_ref"; do
    git -C "$top" rev-parse --verify --quiet "$ref^{commit}" >/dev/null || {
        echo "ci/compare-versions.sh: unknown git revision '$ref' in $top" >&2; exit 2; }
done
out="${out:-katra3d-versions-$(date -u +%Y%m%dT%H%M%SZ)}"

work="$(mktemp -d "${TMPDIR:-/tmp}/katra3d-versions.XXXXXX")"
cleanup() {
    git -C "$top" worktree remove --force "$work/base" >/dev/null 2>&1 || true
    git -C "$top" worktree remove --force "$work/new" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
git -C "$top" worktree add --quiet --detach "$work/base" "$base_ref"
git -C "$top" worktree add --quiet --detach "$work/new" "$new_ref"

side_cmd() {  # the capture command run inside worktree $1
    printf 'cd %q && PYTHONPATH=%q${PYTHONPATH:+:$PYTHONPATH} %s' "$1" "$1" "$cmd"
}
echo "ci/compare-versions.sh: BASE $base_ref ($(git -C "$top" rev-parse --short "$base_ref^{commit}")) vs" \
     "NEW $new_ref ($(git -C "$top" rev-parse --short "$new_ref^{commit}")), $rounds rounds" >&2
set +e
# shellcheck disable=SC2086  # KATRA3D may hold a command with arguments
$katra ab --base "$(side_cmd "$work/base")" --new "$(side_cmd "$work/new")" --rounds "$rounds" -o "$out" "$@"
rc=$?
set -e
echo "ci/compare-versions.sh: traces in $out (exit $rc)" >&2
exit "$rc"
