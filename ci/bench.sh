#!/usr/bin/env bash
# Run the katra3d `ci` suite on llvmpipe, keep the traces, compare against a baseline.
#
#   ci/bench.sh [-o TRACE_DIR] [-b BASELINE_DIR] [-m MEASURE] [-n RUNS] [-j JOBS] [-s SUITE] [-a RUN_ARGS]
#               [-- COMPARE_OPTIONS...]
#
#   -o DIR   where this run's traces go (default: bench-traces); must not already hold traces
#   -b DIR   baseline traces (e.g. restored from the main branch); skipped when absent or empty
#   -m WHAT  auto (default: instructions when valgrind is on PATH, else time), instructions,
#            cycles or time. Counts (instructions, cycles) are deterministic: the capture runs
#            under callgrind (docs/measure.md), one run is evidence, and the comparison uses
#            --metric instructions (or cycles) with its 0.5 % threshold. Times need many runs.
#   -n RUNS  captures of the suite (default: 1 for counts, 7 for time). For time, the run is the
#            unit of evidence: >= 3 runs a side give a verdict (Welch's t on the runs' levels),
#            and with 12 scenes Holm-corrected at alpha 0.01 more runs resolve smaller changes
#            (docs/stats.md). On llvmpipe, time is compared on process CPU time at p10 by default
#            (the frames' work, whatever a busy neighbour does); a baseline captured apart gets the
#            measured drift allowance between batches (docs/stats.md).
#   -j JOBS  counts: scenes counted at once, each in its own valgrind child (`katra3d run --jobs`;
#            default: the runner's usable cores, fewer when memory is short). Time runs measure one
#            scene at a time (katra3d refuses -j above 1 for time: parallel timings disturb each other)
#   -s NAME  suite (default: ci); -s '' runs only the scenes named in -a
#   -a ARGS  extra `katra3d run` options, one string (e.g. "--frames 120"); keep them the same
#            as the baseline's, or scenes become incomparable. Counts default to --frames 10
#            (-a "--frames N" overrides)
#   after --  options passed to `katra3d compare` (e.g. --threshold 10 --allow-host-mismatch)
#
# Counts compare only on the same code generator (CPU model and flags, Mesa, LLVM, vector
# width: host_info.codegen). When the baseline's codegen facts differ from this runner's, the
# baseline is not used: a notice is printed, the summary gets a line `codegen-mismatch`, the
# file TRACE_DIR/codegen-mismatch is written and the exit code is 0, so that a workflow can
# measure base and head itself on this runner (ci/compare-versions.sh -m instructions).
# Likewise `measure-mismatch` when the baseline was measured another way (time vs counts).
#
# Environment: KATRA3D (the katra3d command, default: katra3d on PATH); PYTHON (a Python 3 to
# read trace headers, default: python3); GITHUB_STEP_SUMMARY (when set, a Markdown summary is
# appended to it).
# Exit: 0 no regression (or no usable baseline), 1 regression, 2 bad input / nothing comparable,
#       3 environment (missing system libraries, no usable GL, no valgrind for -m instructions).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="bench-traces"
baseline=""
measure="auto"
runs=""
jobs=""
suite="ci"
run_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        -o) out="$2"; shift 2 ;;
        -b) baseline="$2"; shift 2 ;;
        -m) measure="$2"; shift 2 ;;
        -n) runs="$2"; shift 2 ;;
        -j) jobs="$2"; shift 2 ;;
        -s) suite="$2"; shift 2 ;;
        -a) read -r -a run_args <<< "$2"; shift 2 ;;
        -h|--help) sed -n '2,39p' "$0"; exit 0 ;;
        --) shift; break ;;
        *) echo "ci/bench.sh: unknown option '$1' (see ci/bench.sh --help)" >&2; exit 2 ;;
    esac
done
compare_opts=("$@")
case "$measure" in
    auto) if command -v valgrind >/dev/null 2>&1; then measure=instructions; else measure=time; fi ;;
    instructions|cycles|time) ;;
    *) echo "ci/bench.sh: -m takes auto, instructions, cycles or time, got '$measure'" >&2; exit 2 ;;
esac
counts=false
[ "$measure" = time ] || counts=true
if [ -z "$runs" ]; then
    if $counts; then runs=1; else runs=7; fi
fi
case "$runs" in ''|*[!0-9]*) echo "ci/bench.sh: -n needs a whole number, got '$runs'" >&2; exit 2 ;; esac
[ "$runs" -ge 1 ] || { echo "ci/bench.sh: -n must be >= 1" >&2; exit 2; }
if [ -z "$suite" ] && [ "${#run_args[@]}" -eq 0 ]; then
    echo "ci/bench.sh: -s '' needs the scenes in -a (e.g. -a \"triangle --frames 20\")" >&2; exit 2
fi
capture=(--quiet)
[ -n "$jobs" ] && capture+=(--jobs "$jobs")
[ -n "$suite" ] && capture+=(--suite "$suite")
if $counts; then
    # counts are deterministic: a few frames a scene are enough (the run's -a may override)
    capture+=(--measure "$measure" --frames 10)
    compare_opts=(--metric "$measure" "${compare_opts[@]}")
fi
if [ -n "$suite" ]; then what="suite \`$suite\`, $measure"; else what="\`${run_args[*]}\`, $measure"; fi

# 1. install check: Mesa EGL + llvmpipe, valgrind for counts, and the katra3d command itself
if [ -f "$here/system-deps.sh" ]; then
    bash "$here/system-deps.sh" || { echo "ci/bench.sh: system libraries missing (see above)" >&2; exit 3; }
fi
if $counts && ! command -v valgrind >/dev/null 2>&1; then
    echo "ci/bench.sh: -m $measure runs the capture under valgrind, which is not on PATH;" \
         "install it: sudo apt-get install -y valgrind (or use -m time)" >&2
    exit 3
fi
read -r -a katra <<< "${KATRA3D:-katra3d}"
if ! "${katra[@]}" --version >/dev/null 2>&1; then
    echo "ci/bench.sh: '${katra[*]}' does not run; install katra3d (pip install katra3d) or set KATRA3D" >&2
    exit 3
fi
read -r -a python <<< "${PYTHON:-python3}"
if [ -n "$baseline" ] && ! "${python[@]}" -c 'import json' >/dev/null 2>&1; then
    echo "ci/bench.sh: '${python[*]}' does not run; it reads trace headers (set PYTHON to a Python 3)" >&2
    exit 3
fi

# 2. capture the suite RUNS times, one trace per run
mkdir -p "$out"
if compgen -G "$out/*.katra" >/dev/null; then
    echo "ci/bench.sh: '$out' already holds traces; give an empty directory with -o" >&2
    exit 2
fi
for i in $(seq -f '%02g' 1 "$runs"); do
    echo "ci/bench.sh: run $i/$runs ($what)" >&2
    "${katra[@]}" run "${capture[@]}" "${run_args[@]}" -o "$out/run-$i.katra" >&2
done

# print the Markdown summary in $out/summary.md, and append it to the job summary on GitHub
publish() {
    cat "$out/summary.md"
    if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then cat "$out/summary.md" >> "$GITHUB_STEP_SUMMARY"; fi
}

# record only: the summary is this run's statistics, under a title and notes ($1, $2...)
record_only() {
    {
        echo "## katra3d: $what ($runs runs, $1)"
        shift
        for line in "$@"; do echo; echo "$line"; done
        echo
        "${katra[@]}" stats "$out/run-01.katra" --format markdown
    } > "$out/summary.md"
    publish
    exit 0
}

# The facts a comparison rests on, from a trace's header: two lines, the measure mode and
# host_info.codegen as canonical JSON ("null" when absent).
facts() {
    "${katra[@]}" info --json "$1" | "${python[@]}" -c '
import json, sys
header = json.load(sys.stdin)["header"]
measure = (header.get("capture_options") or {}).get("measure")
mode = measure.get("mode") if isinstance(measure, dict) else None
print(mode if isinstance(mode, str) and mode else "time")
print(json.dumps((header.get("host_info") or {}).get("codegen"), sort_keys=True))'
}

# The codegen facts that differ between two JSON lines, one "key: BASE -> THIS" a line.
codegen_diff() {
    "${python[@]}" -c '
import json, sys
a, b = (json.loads(x) for x in sys.argv[1:3])
a = a if isinstance(a, dict) else {"codegen": a}
b = b if isinstance(b, dict) else {"codegen": b}
for k in dict.fromkeys([*a, *b]):
    if a.get(k) != b.get(k):
        print(f"{k}: baseline {a.get(k)!r} -> this runner {b.get(k)!r}")' "$1" "$2"
}

# 3. compare against the baseline when there is one, and when it was measured alike
if [ -z "$baseline" ] || ! compgen -G "$baseline/*.katra" >/dev/null; then
    echo "ci/bench.sh: no baseline traces${baseline:+ in '$baseline'}; recording only" >&2
    record_only "no baseline to compare with"
fi
first_base="$(compgen -G "$baseline/*.katra" | LC_ALL=C sort | head -n 1)"
base_facts="$(facts "$first_base")"
new_facts="$(facts "$out/run-01.katra")"
base_mode="${base_facts%%$'\n'*}"; base_codegen="${base_facts#*$'\n'}"
new_mode="${new_facts%%$'\n'*}"; new_codegen="${new_facts#*$'\n'}"
if [ "$base_mode" != "$new_mode" ]; then
    notice="the baseline was measured as '$base_mode', this run as '$new_mode': not comparable"
    echo "ci/bench.sh: NOTICE: $notice; not gating on it (measure base and head here:" \
         "ci/compare-versions.sh -m $measure BASE HEAD)" >&2
    echo "$notice" > "$out/measure-mismatch"
    record_only "baseline not used" "measure-mismatch" "NOTICE: $notice; measure base and head on this runner."
fi
if $counts && [ "$base_codegen" != "$new_codegen" ]; then
    diff_lines="$(codegen_diff "$base_codegen" "$new_codegen")"
    echo "ci/bench.sh: NOTICE: the baseline's code generator differs from this runner's;" \
         "its $measure counts do not compare with these. Not gating on it (measure base and head" \
         "here: ci/compare-versions.sh -m $measure BASE HEAD). Differences:" >&2
    echo "$diff_lines" | sed 's/^/    /' >&2
    {
        echo "baseline: $first_base"
        echo "$diff_lines"
    } > "$out/codegen-mismatch"
    record_only "baseline not used" "codegen-mismatch" \
        "NOTICE: the baseline's code generator (host_info.codegen) differs from this runner's, so its $measure counts do not compare with these; measure base and head on this runner. Differences:" \
        "$(echo "$diff_lines" | sed 's/^/- /')"
fi
set +e
"${katra[@]}" compare "$baseline" "$out" --format markdown "${compare_opts[@]}" > "$out/compare.md"
rc=$?
set -e
{
    echo "## katra3d: $what vs baseline"
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
