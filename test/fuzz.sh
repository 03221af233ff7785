#!/usr/bin/env bash
# Runs every fuzz target of the given packages for $FUZZTIME each (make fuzz; make test runs it
# for 3s). Go fuzzes one target per run, so each package's test binary is built once with
# coverage instrumentation and run once per Fuzz function it lists.
#
# FUZZJOBS targets run at once, each with FUZZWORKERS fuzzing processes (default: Go's, one per
# CPU). The short pass runs two at a time with one worker each: the same CPU as one target with
# two workers, half the wall time (a 3 s run spends much of itself starting up).
#
# A failing input is saved to <package>/testdata/fuzz/<Target>/ by Go and runs with the unit
# tests from then on: commit it with the fix. Inputs that found new coverage go to
# $FUZZCACHE/<import path>/<Target> (Go's own cache, $(go env GOCACHE)/fuzz, unless FUZZCACHE
# is set: the short pass uses a fresh one, so its time goes to fuzzing rather than to replaying
# what earlier long runs collected).
#
# Go 1.26 can end a run at its -fuzztime with "context deadline exceeded" and no failing input
# (go.dev/issue/75804, fixed in Go 1.27): such a run is reported and not counted as a failure.
set -euo pipefail

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-60s}
FUZZMINIMIZE=${FUZZMINIMIZE:-10s}
FUZZJOBS=${FUZZJOBS:-1}
FUZZWORKERS=${FUZZWORKERS:-}
BIN=${BIN:-bin}/fuzz
FUZZCACHE=${FUZZCACHE:-$("$GO" env GOCACHE)/fuzz}
mkdir -p "$BIN"
out_dir=$(mktemp -d)
trap 'rm -rf "$out_dir"' EXIT

# files counts the failing inputs Go saved for a target.
files() { if [ -d "$1" ]; then ls "$1" | wc -l; else echo 0; fi; }

# fuzz runs one target and prints its report in one piece (jobs run side by side); its status
# is the target's verdict.
fuzz() {
  local pkg=$1 dir=$2 bin=$3 target=$4 corpus before after out status log
  log="$out_dir/$(echo "$pkg" | tr / _)_$target.log"
  corpus="$dir/testdata/fuzz/$target"
  before=$(files "$corpus")
  set +e
  out=$(cd "$dir" && "$bin" -test.run='^$' -test.fuzz="^$target\$" -test.fuzztime="$FUZZTIME" \
    -test.fuzzminimizetime="$FUZZMINIMIZE" -test.fuzzcachedir="$FUZZCACHE/$pkg" \
    ${FUZZWORKERS:+-test.parallel="$FUZZWORKERS"} 2>&1)
  status=$?
  set -e
  {
    echo "fuzz: $pkg $target for $FUZZTIME"
    grep -v '^fuzz: elapsed' <<<"$out" || true
    if [ "$status" -ne 0 ]; then
      after=$(files "$corpus")
      if [ "$after" -eq "$before" ] && grep -qx '    context deadline exceeded' <<<"$out" && ! grep -q 'failure while testing seed corpus' <<<"$out"; then
        echo "fuzz: $target stopped by Go's -fuzztime race (go.dev/issue/75804), no failing input: not a failure"
        status=0
      else
        echo "fuzz: $target FAILED; the input is in $corpus/ (re-run: go test -run=$target/<file> $pkg)"
      fi
    fi
  } > "$log"
  cat "$log"
  return "$status"
}

# Build each package's binary, then run the targets.
jobs=()
while read -r pkg dir; do
  bin="$BIN/$(echo "$pkg" | tr / _).test"
  "$GO" test -c -fuzz=. -o "$bin" "$pkg"
  for target in $(cd "$dir" && "$bin" -test.list '^Fuzz'); do
    jobs+=("$pkg $dir $bin $target")
  done
done < <("$GO" list -f '{{.ImportPath}} {{.Dir}}' "$@")

failed=0
running=0
for job in "${jobs[@]}"; do
  if [ "$running" -ge "$FUZZJOBS" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  # shellcheck disable=SC2086 # job is four words
  fuzz $job &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
exit "$failed"
