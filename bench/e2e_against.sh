#!/usr/bin/env bash
# Runs this checkout's bench_e2e against this checkout's `onecharge` and against an older
# commit's (`--service`), in turns (old, new, old, new, …), and prints each run's maximum
# rate and database work per charge. One sitting, one machine, one benchmark: the figures
# compare even when the machine is noisy (docs/performance.md).
#
#   bench/e2e_against.sh <old-commit> [rounds] -- <bench_e2e arguments>
#   e.g. bench/e2e_against.sh 11ab359 2 -- --own-postgres --max-commands 20000 \
#            --latency-commands 0 --latency-median 300ms --latency-p99 350ms
#   intake alone: bench/e2e_against.sh ca574e6 2 -- --own-postgres --intake-commands 100000
#   (the events/s column is then commands recorded per second; the others stay empty)
#
# The old commit's `onecharge` is built once into target/against/<commit> (a git worktree
# and a target folder of its own, seeded from target/release so that only onecharge itself
# compiles again); this checkout must be built first (cargo build --release --examples
# --bins).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: bench/e2e_against.sh <old-commit> [rounds] -- <bench_e2e arguments>" >&2; exit 2; }
[ $# -ge 2 ] || usage
old=$(git rev-parse --short "$1^{commit}") || usage
shift
rounds=2
if [ "$1" != "--" ]; then rounds=$1; shift; fi
[ "${1:-}" = "--" ] || usage
shift

new_bench=target/release/examples/bench_e2e
[ -x "$new_bench" ] && [ -x target/release/onecharge ] ||
  { echo "build this checkout first: cargo build --release --examples --bins" >&2; exit 2; }

against="target/against/$old"
old_service="$PWD/$against/target/release/onecharge"
if [ ! -x "$old_service" ]; then
  echo "building $old into $against (once)"
  [ -d "$against/src" ] || git worktree add --detach "$against" "$old" >/dev/null
  if [ ! -d "$against/target/release" ]; then
    mkdir -p "$against/target"
    cp -a --reflink=auto target/release "$against/target/"
  fi
  (cd "$against" && cargo build --release --quiet --bins)
fi

summary() { # the run's events/s and its per-charge lines
  awk -F'|' '
    /^\| [0-9,]+ \| [0-9.]+ s \|/ && !rate { gsub(/ /, "", $6); rate = $6 }
    /^last window \/ first window/ { windows = $0; sub(/.*: /, "", windows) }
    /statements sent \(top level/ { gsub(/ /, "", $4); stmts = $4 }
    /statements run inside triggers/ { gsub(/ /, "", $4); nested = $4 }
    /^\| CPU of the PostgreSQL cluster/ { gsub(/ /, "", $4); pg = $4 }
    /^\| CPU of onecharge serve/ { gsub(/ /, "", $4); serve = $4 }
    END { printf "%s\t%s\t%s\t%s\t%s\t%s\n", rate, windows, stmts, nested, pg, serve }' "$1"
}

out=$(mktemp -d)
printf 'run\tcommit\tevents/s\tlast/first 10 s window\tstatements/charge\ttrigger statements/charge\tPG CPU ms/charge\tserve CPU ms/charge\n'
for round in $(seq 1 "$rounds"); do
  for side in old new; do
    if [ "$side" = old ]; then service=$old_service; commit=$old; else service=$PWD/target/release/onecharge; commit=$(git rev-parse --short HEAD); fi
    "$new_bench" --service "$service" "$@" >"$out/$side-$round.txt" 2>"$out/$side-$round.err" ||
      { echo "$side run $round failed:"; tail -5 "$out/$side-$round.err"; exit 1; }
    printf '%s\t%s\t%s\n' "$round" "$commit" "$(summary "$out/$side-$round.txt")"
  done
done
echo
echo "full outputs: $out"
