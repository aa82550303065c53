#!/usr/bin/env bash
# Runs the whole benchmark set and prints one table:
#   - leasehold bench (insert, drain, latency, store ceiling) in both modes,
#     and shared mode's drain with 4 daemons
#   - go test -bench over the hot paths (enqueue batch, claim+complete,
#     fenced checkpoint, worker drain)
# Usage: scripts/bench.sh [JOBS]   (default 20000)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-20000}
bin=$(mktemp -d)/leasehold
go build -o "$bin" ./cmd/leasehold
echo "# leasehold bench, $(date -u +%Y-%m-%d), $(nproc) cores, $(go version | cut -d' ' -f3)"
"$bin" bench --ceiling --jobs "$jobs"
"$bin" bench --ceiling --jobs "$jobs" --mode shared | tail -n +2
"$bin" bench --jobs "$jobs" --mode shared --daemons 4 --latency-jobs 500 | tail -n +3
echo
echo "# go test -bench (hot paths)"
go test -run '^$' -bench . -benchtime 1s ./coordinator/ 2>/dev/null | grep -E '^Benchmark' || true
go test -run '^$' -bench Drain -benchtime 1x ./worker/ 2>/dev/null | grep -E '^Benchmark' || true
