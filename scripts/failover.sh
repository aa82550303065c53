#!/usr/bin/env bash
# Measures failover after SIGKILL in shared mode: RUNS kill cycles with the
# real binary (built by the test) over a `leasehold etcd` member, each killing
# a daemon that holds jobs at a random phase of its lease renewals, and prints
# the median and worst time until all of its jobs run again on another daemon
# (the contract: within TTL + 1 s, plus about a millisecond a job held; the
# check allows 2 ms a job past 3), with where the time went.
#
#   scripts/failover.sh [RUNS] [TTL] [JOBS]      # defaults: 10 2s 3
#   scripts/failover.sh 5 2s 2002                # the README's table with thousands of jobs
#
# It runs TestFailoverMeasure in cmd/leasehold; the full log is kept in
# ${TMPDIR:-/tmp}/leasehold-failover-TTL.log.
set -euo pipefail
runs=${1:-10}
ttl=${2:-2s}
jobs=${3:-3}
cd "$(dirname "$0")/.."
log="${TMPDIR:-/tmp}/leasehold-failover-$ttl.log"
status=0
LEASEHOLD_FAILOVER_RUNS=$runs LEASEHOLD_FAILOVER_TTL=$ttl LEASEHOLD_FAILOVER_JOBS=$jobs \
	go test -count=1 -timeout 60m -run '^TestFailoverMeasure$' -v ./cmd/leasehold >"$log" 2>&1 || status=$?
grep -E 'cycle +[0-9]+:|failover (summary|breakdown):|exceeded|FAIL|^ok' "$log" | sed -E 's/^ +shared_process_test.go:[0-9]+: //' || true
if [ "$status" -ne 0 ]; then
	echo "failover measurement failed (exit $status); full log: $log" >&2
fi
exit "$status"
