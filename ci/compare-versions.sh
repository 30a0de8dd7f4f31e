#!/usr/bin/env bash
# Compare two git revisions of your project on this machine, interleaved (A B A B ...).
#
#   ci/compare-versions.sh [-m MEASURE] [-r ROUNDS] [-o DIR] [-c CMD] BASE_REF NEW_REF
#                          [-- COMPARE_OPTIONS...]
#
# Checks out BASE_REF and NEW_REF as git worktrees of the repository you are in, then runs
# `katra3d ab`: CMD is run alternately in each worktree (cwd = the worktree, which is also
# put first on PYTHONPATH, so scenes and code of that revision are used), ROUNDS times each,
# and the pooled traces are compared with the run as the unit of evidence.
#
#   -m WHAT    (or --measure WHAT) time (default), instructions, cycles, or auto (instructions
#              when valgrind is on PATH, else time). Counts are deterministic (docs/measure.md):
#              one round suffices, the default command captures with --measure WHAT
#              --frames 10, and the comparison uses --metric WHAT. A -c command must capture
#              with --measure WHAT itself.
#   -r ROUNDS  rounds (default: 1 for counts; 7 for time: enough for an exact rank test across
#              the 12 scenes of the `ci` suite at alpha 0.01 after Holm; one scene needs 5)
#   -o DIR     traces go to DIR/base and DIR/new (default: katra3d-versions-<time>)
#   -c CMD     capture command; {out} is replaced by the trace path
#              (default: katra3d run --suite ci --quiet -o {out}, plus --measure for counts)
#   after --   options for `katra3d compare` (--threshold, --alpha, --metric, --format ...)
#
# Environment: KATRA3D (the katra3d command, default: katra3d on PATH).
# Exit codes as `katra3d compare`: 0 no regression, 1 regression, 2 bad input / nothing
# comparable; 3 when -m instructions or cycles finds no valgrind.
set -euo pipefail

rounds=""
out=""
measure="time"
katra="${KATRA3D:-katra3d}"
cmd=""
while [ $# -gt 0 ]; do
    case "$1" in
        -m|--measure) measure="$2"; shift 2 ;;
        --measure=*) measure="${1#--measure=}"; shift ;;
        -r) rounds="$2"; shift 2 ;;
        -o) out="$2"; shift 2 ;;
        -c) cmd="$2"; shift 2 ;;
        -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
        --) echo "ci/compare-versions.sh: give BASE_REF and NEW_REF before --" >&2; exit 2 ;;
        -*) echo "ci/compare-versions.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
        *) break ;;
    esac
done
if [ $# -lt 2 ]; then
    echo "usage: ci/compare-versions.sh [-m MEASURE] [-r ROUNDS] [-o DIR] [-c CMD] BASE_REF NEW_REF [-- COMPARE_OPTIONS...]" >&2
    exit 2
fi
base_ref="$1"; new_ref="$2"; shift 2
if [ $# -gt 0 ]; then
    [ "$1" = "--" ] || { echo "ci/compare-versions.sh: unexpected argument '$1'" >&2; exit 2; }
    shift
fi
case "$measure" in
    auto) if command -v valgrind >/dev/null 2>&1; then measure=instructions; else measure=time; fi ;;
    instructions|cycles|time) ;;
    *) echo "ci/compare-versions.sh: -m takes time, instructions, cycles or auto, got '$measure'" >&2; exit 2 ;;
esac
compare_opts=("$@")
if [ "$measure" = time ]; then
    rounds="${rounds:-7}"
    [ -n "$cmd" ] || cmd="$katra run --suite ci --quiet -o {out}"
else
    if ! command -v valgrind >/dev/null 2>&1; then
        echo "ci/compare-versions.sh: -m $measure runs the captures under valgrind, which is not on PATH;" \
             "install it: sudo apt-get install -y valgrind" >&2
        exit 3
    fi
    rounds="${rounds:-1}"  # a count is deterministic: one round is evidence
    [ -n "$cmd" ] || cmd="$katra run --suite ci --quiet --measure $measure --frames 10 -o {out}"
    compare_opts=(--metric "$measure" "${compare_opts[@]}")  # a later --metric of the caller wins
fi
case "$rounds" in ''|*[!0-9]*|0) echo "ci/compare-versions.sh: -r needs a whole number >= 1, got '$rounds'" >&2; exit 2 ;; esac
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
     "NEW $new_ref ($(git -C "$top" rev-parse --short "$new_ref^{commit}")), $rounds rounds, $measure" >&2
set +e
# shellcheck disable=SC2086  # KATRA3D may hold a command with arguments
$katra ab --base "$(side_cmd "$work/base")" --new "$(side_cmd "$work/new")" --rounds "$rounds" -o "$out" "${compare_opts[@]}"
rc=$?
set -e
echo "ci/compare-versions.sh: traces in $out (exit $rc)" >&2
exit "$rc"
