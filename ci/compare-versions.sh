#!/usr/bin/env bash
# Compare two git revisions of your project on this machine, interleaved (A B A B ...).
#
#   ci/compare-versions.sh [-m MEASURE] [-r ROUNDS] [-o DIR] [-c CMD] BASE_REF NEW_REF
#                          [-- COMPARE_OPTIONS...]
#
# A thin call of `katra3d ab --refs BASE_REF NEW_REF`, which does the work: it checks out both
# revisions as temporary git worktrees of the repository you are in, runs CMD alternately in each
# (cwd = the worktree, so the scene files of that revision are used; each capture in its own
# process group), ROUNDS times each, removes the worktrees, and
# compares the pooled traces with the run as the unit of evidence.
#
#   -m WHAT    (or --measure WHAT) time (default), instructions, cycles, or auto (instructions
#              when valgrind is on PATH, else time). Counts are deterministic (docs/measure.md):
#              one round suffices, the default command captures with --measure WHAT
#              --frames 10, and the comparison uses --metric WHAT. A -c command must capture
#              with --measure WHAT itself.
#   -r ROUNDS  rounds (default: 1 for counts; 7 for time: enough for an exact rank test across
#              the 12 scenes of the `ci` suite at alpha 0.01 after Holm; one scene needs 5)
#   -o DIR     traces go to DIR/base and DIR/new (default: katra3d-versions-<time>)
#   -c CMD     capture command writing {out} (or $KATRA3D_OUT), see `katra3d ab --help`
#              (default: katra3d run --suite ci --quiet -o {out}, plus --measure for counts)
#   after --   options for `katra3d compare` (--threshold, --alpha, --metric, --format ...)
#
# Environment: KATRA3D (the katra3d command, default: katra3d on PATH).
# Exit codes as `katra3d compare`: 0 no regression, 1 regression, 2 bad input / nothing
# comparable; 3 when -m instructions or cycles finds no valgrind.
set -euo pipefail

args=()
out=""
katra="${KATRA3D:-katra3d}"
while [ $# -gt 0 ]; do
    case "$1" in
        -m|--measure) measure="$2"; args+=(--measure "$measure"); shift 2 ;;
        --measure=*) measure="${1#--measure=}"; args+=(--measure "$measure"); shift ;;
        -r) args+=(--rounds "$2"); shift 2 ;;
        -o) out="$2"; shift 2 ;;
        -c) args+=(--command "$2"); shift 2 ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
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
out="${out:-katra3d-versions-$(date -u +%Y%m%dT%H%M%SZ)}"
set +e
# shellcheck disable=SC2086  # KATRA3D may hold a command with arguments
$katra ab --refs "$base_ref" "$new_ref" "${args[@]}" -o "$out" "$@"
rc=$?
set -e
echo "ci/compare-versions.sh: traces in $out (exit $rc)" >&2
exit "$rc"
