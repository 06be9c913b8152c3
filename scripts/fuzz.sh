#!/usr/bin/env bash
# Fuzzes swavg's parsers with libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer.
#
#   scripts/fuzz.sh SECONDS [TARGET...]     # targets: unpickle zip safetensors torch_file torchscript crc32 pickle_literals dcp_metadata metric_table export (default: all but dcp_metadata)
#
# Builds tests/fuzz/ with clang-14 into build-fuzz/ (Debian: apt-get install clang-14 libclang-rt-14-dev),
# seeds one corpus per target from the real fixtures (build/fixtures, made by scripts/make_fixtures.py
# when missing), the malformed-input suite and tests/fuzz/regressions/, then runs the targets one after
# the other for SECONDS each at low priority. Prints each target's executions, exec/s and coverage;
# exits 1 when a target crashed (the input is in build-fuzz/artifacts/<target>/: add it to
# tests/fuzz/regressions/<target>/ and tests/fuzz/regressions/cases.json once fixed).
# Environment: BUILD_DIR (build-fuzz), FIXTURES (build/fixtures), CXX (clang++-14), JOBS (nproc),
# FUZZ_ARGS (extra libFuzzer flags, e.g. -jobs=2).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if [ $# -lt 1 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
SECONDS_EACH=$1
shift
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(unpickle zip safetensors torch_file torchscript crc32 pickle_literals metric_table export)

BUILD_DIR=${BUILD_DIR:-build-fuzz}
FIXTURES=${FIXTURES:-build/fixtures}
CXX=${CXX:-clang++-14}
CC=${CC:-clang-14}
JOBS=${JOBS:-$(nproc)}
PYTHON=${PYTHON:-/usr/bin/python3}
[ -x "$PYTHON" ] || PYTHON=python3

command -v "$CXX" >/dev/null || { echo "fuzz.sh: $CXX not found (apt-get install clang-14 libclang-rt-14-dev)" >&2; exit 2; }

# --- Build -------------------------------------------------------------------------------------
mkdir -p "$BUILD_DIR"
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_BUILD_TYPE=Debug \
      -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DSWAVG_FUZZ=ON -DSWAVG_SANITIZE=ON -DSWAVG_BUILD_TESTS=OFF \
      ${CMAKE_ARGS:-} >"$BUILD_DIR/configure.log" 2>&1 || { cat "$BUILD_DIR/configure.log"; exit 1; }
cmake --build "$BUILD_DIR" -j"$JOBS" --target "${TARGETS[@]/#/fuzz_}"

# --- Seed corpora ------------------------------------------------------------------------------
if [ ! -f "$FIXTURES/hostile/manifest.json" ]; then
  FIXTURES=$BUILD_DIR/fixtures
  [ -f "$FIXTURES/hostile/manifest.json" ] || "$PYTHON" scripts/make_fixtures.py "$FIXTURES" >/dev/null
fi
CORPUS=$BUILD_DIR/corpus
ARTIFACTS=$BUILD_DIR/artifacts
LOGS=$BUILD_DIR/logs
mkdir -p "$CORPUS" "$ARTIFACTS" "$LOGS"
# Seeds: small regular files only (big checkpoints slow every execution down).
"$PYTHON" - "$FIXTURES" "$CORPUS" "$ROOT/tests/fuzz/regressions" "${TARGETS[@]}" <<'EOF'
import hashlib, os, sys, zipfile
fixtures, corpus, regressions, targets = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
MAX = 64 << 10
files = []
for d, _, names in os.walk(fixtures):
    for n in names:
        p = os.path.join(d, n)
        if os.path.isfile(p) and not os.path.islink(p) and os.path.getsize(p) <= MAX:
            files.append(p)
def add(target, data):
    if target not in targets or len(data) > MAX:
        return
    os.makedirs(os.path.join(corpus, target), exist_ok=True)
    with open(os.path.join(corpus, target, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)
def members(p, suffix):
    try:
        with zipfile.ZipFile(p) as z:
            return [z.read(n) for n in z.namelist() if n.endswith(suffix)]
    except Exception:
        return []
for p in sorted(files):
    data = open(p, "rb").read()
    if p.endswith(".pkl"):
        add("unpickle", data)
        add("pickle_literals", data)
        add("crc32", data)
    if p.endswith(".safetensors"):
        add("safetensors", data)
    if p.endswith((".csv", ".json")):
        add("metric_table", data)
    if p.endswith(".pt2"):
        add("export", data)
        for record in members(p, ".json"):
            add("export", record)
    if data[:4] == b"PK\x03\x04" or p.endswith((".zip", ".pt", ".ts")):
        add("zip", data)
        if p.endswith(".pt"):
            add("torch_file", data)
        try:
            with zipfile.ZipFile(p) as z:
                if any("/code/" in n or n.endswith("constants.pkl") for n in z.namelist()):
                    add("torchscript", data)
        except Exception:
            if "/hostile/ts_" in p:
                add("torchscript", data)
        for record in members(p, ".pkl"):
            add("unpickle", record)
for t in targets:
    d = os.path.join(regressions, t)
    if os.path.isdir(d):
        for n in os.listdir(d):
            add(t, open(os.path.join(d, n), "rb").read())
for t in targets:
    print("seed corpus %-12s %4d inputs" % (t, len(os.listdir(os.path.join(corpus, t)))))
EOF

# --- Fuzz --------------------------------------------------------------------------------------
declare -A DICT=([unpickle]=pickle.dict [zip]=zip.dict [safetensors]=safetensors.dict [torch_file]=zip.dict
             [torchscript]=torchscript.dict [pickle_literals]=pickle.dict [export]=zip.dict)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
summary=()
for t in "${TARGETS[@]}"; do
  mkdir -p "$ARTIFACTS/$t"
  log=$LOGS/$t.log
  echo "fuzzing $t for $SECONDS_EACH s (log: $log)"
  set +e
  nice -n 10 "$BUILD_DIR/tests/fuzz/fuzz_$t" "$CORPUS/$t" -max_total_time="$SECONDS_EACH" -print_final_stats=1 \
    -timeout=10 -rss_limit_mb=2048 -max_len=65536 ${DICT[$t]:+-dict="tests/fuzz/${DICT[$t]}"} \
    -artifact_prefix="$ARTIFACTS/$t/" ${FUZZ_ARGS:-} >"$log" 2>&1
  rc=$?
  set -e
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$last")
  crashes=$(find "$ARTIFACTS/$t" -type f | wc -l)
  if [ $rc -ne 0 ] || [ "$crashes" -gt 0 ]; then
    status=1
    grep -E 'ERROR: |SUMMARY: |runtime error|invariant broken|Test unit written' "$log" | head -20 || true
  fi
  summary+=("$(printf '%-12s %6ss  runs %-11s exec/s %-7s cov %-6s ft %-7s corpus %-11s crashes %s  (exit %s)' \
    "$t" "$SECONDS_EACH" "${runs:-?}" "${speed:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$crashes" "$rc")")
done
echo
printf '%s\n' "${summary[@]}"
exit $status
