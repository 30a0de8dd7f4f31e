#!/usr/bin/env bash
# Run the katra3d `ci` suite on llvmpipe, keep the traces, compare against a baseline.
#
#   ci/bench.sh [-o TRACE_DIR] [-b BASELINE_DIR] [-n RUNS] [-s SUITE] [-a RUN_ARGS] [-- COMPARE_OPTIONS...]
#
#   -o DIR   where this run's traces go (default: bench-traces); must not already hold traces
#   -b DIR   baseline traces (e.g. restored from the main branch); skipped when absent or empty
#   -n RUNS  captures of the suite (default: 7). The run is the unit of evidence: with 12 scenes
#            Holm-corrected at alpha 0.01, an exact rank test needs >= 7 runs a side to be able
#            to call anything a regression (see docs/stats.md); fewer gives "inconclusive".
#   -s NAME  suite (default: ci)
#   -a ARGS  extra `katra3d run` options, one string (e.g. "--frames 120"); keep them the same
#            as the baseline's, or scenes become incomparable
#   after --  options passed to `katra3d compare` (e.g. --threshold 10 --allow-host-mismatch)
#
# Environment: KATRA3D (the katra3d command, default: katra3d on PATH); GITHUB_STEP_SUMMARY
# (when set, a Markdown summary is appended to it).
# Exit: 0 no regression (or no baseline), 1 regression, 2 bad input / nothing comparable,
#       3 environment (missing system libraries or no usable GL).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="bench-traces"
baseline=""
runs=7
suite="ci"
run_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        -o) out="$2"; shift 2 ;;
        -b) baseline="$2"; shift 2 ;;
        -n) runs="$2"; shift 2 ;;
        -s) suite="$2"; shift 2 ;;
        -a) read -r -a run_args <<< "$2"; shift 2 ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        --) shift; break ;;
        *) echo "ci/bench.sh: unknown option '$1' (see ci/bench.sh --help)" >&2; exit 2 ;;
    esac
done
compare_opts=("$@")
case "$runs" in ''|*[!0-9]*) echo "ci/bench.sh: -n needs a whole number, got '$runs'" >&2; exit 2 ;; esac
[ "$runs" -ge 1 ] || { echo "ci/bench.sh: -n must be >= 1" >&2; exit 2; }

# 1. install check: Mesa EGL + llvmpipe, and the katra3d command itself
if [ -f "$here/system-deps.sh" ]; then
    bash "$here/system-deps.sh" || { echo "ci/bench.sh: system libraries missing (see above)" >&2; exit 3; }
fi
read -r -a katra <<< "${KATRA3D:-katra3d}"
if ! "${katra[@]}" --version >/dev/null 2>&1; then
    echo "ci/bench.sh: '${katra[*]}' does not run; install katra3d (pip install katra3d) or set KATRA3D" >&2
    exit 3
fi

# 2. capture the suite RUNS times, one trace per run
mkdir -p "$out"
if compgen -G "$out/*.katra" >/dev/null; then
    echo "ci/bench.sh: '$out' already holds traces; give an empty directory with -o" >&2
    exit 2
fi
for i in $(seq -f '%02g' 1 "$runs"); do
    echo "ci/bench.sh: run $i/$runs of suite '$suite'" >&2
    "${katra[@]}" run --suite "$suite" --quiet "${run_args[@]}" -o "$out/run-$i.katra" >&2
done

# print the Markdown summary in $out/summary.md, and append it to the job summary on GitHub
publish() {
    cat "$out/summary.md"
    if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then cat "$out/summary.md" >> "$GITHUB_STEP_SUMMARY"; fi
}

# 3. compare against the baseline when there is one
if [ -z "$baseline" ] || ! compgen -G "$baseline/*.katra" >/dev/null; then
    echo "ci/bench.sh: no baseline traces${baseline:+ in '$baseline'}; recording only" >&2
    {
        echo "## katra3d: suite \`$suite\` ($runs runs, no baseline to compare with)"
        echo
        "${katra[@]}" stats "$out/run-01.katra" --format markdown
    } > "$out/summary.md"
    publish
    exit 0
fi
set +e
"${katra[@]}" compare "$baseline" "$out" --format markdown "${compare_opts[@]}" > "$out/compare.md"
rc=$?
set -e
{
    echo "## katra3d: suite \`$suite\` vs baseline"
    echo
    cat "$out/compare.md"
} > "$out/summary.md"
publish
case "$rc" in
    0) echo "ci/bench.sh: no regression" >&2 ;;
    1) echo "ci/bench.sh: REGRESSION (see the table above)" >&2 ;;
    *) echo "ci/bench.sh: comparison failed (exit $rc)" >&2 ;;
esac
exit "$rc"
