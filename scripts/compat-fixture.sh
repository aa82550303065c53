#!/usr/bin/env bash
# compat-fixture.sh [--shared] REV OUT: writes a stored-format fixture of the
# build of commit REV into the directory OUT (created; it must not exist
# yet), for TestCompatFixtures in cmd/leasehold (README, Upgrades).
#
# It builds REV in a temporary git worktree of this clone, runs that build's
# daemon (on 127.0.0.1, a port the system picks) on a new embedded data
# directory, or with --shared on a new etcd member that build runs
# ('leasehold etcd', on 127.0.0.1 at the ports COMPAT_ETCD_CLIENT_PORT and
# COMPAT_ETCD_PEER_PORT, default 42379 and 42380; the daemon with
# --lease-ttl 2s), and leaves jobs there in every state a user can leave
# them in:
#
#   scheduled     --delay 876000h, --at 2200-01-01T00:00:00Z (with metadata)
#   available     in queue "later", which the daemon does not serve (one
#                 with a unique key, one with --timeout, priorities 1 to 3),
#                 and the tick of a schedule
#   running       three 'sleep' jobs of 10 minutes, and one of an --exec
#                 kind 'hold' that ignores SIGTERM with a cancel requested
#                 (the daemon is killed with SIGKILL while they run)
#   retryable     'fail' {"times":2} after its second failed attempt (the
#                 next one 16 s ahead, so still retryable at the kill)
#   completed     'echo' (its payload is its result; one with metadata, one
#                 unique by args and kept unique while completed)
#   discarded     'fail' with --max-attempts 1
#   cancelled     a scheduled job cancelled
#   paused queue  "paused", with a limit of 2 and two available jobs
#   schedule      "compat-once" (once a year, at a second just after the
#                 daemon starts; its tick goes to queue "later")
#
# Then, embedded, it takes a backup with that build ('leasehold backup', the
# daemon running), enqueues one more job (role "after-backup": in the data
# directory, not in the backup), records that build's view (jobs get
# --json of every job, queues list --json, periodic list --json into
# golden.json; jobs list and queues list as text into *.txt, for reading
# only) and kills the daemon with SIGKILL (then, --shared, stops the etcd
# member with SIGTERM).
#
# OUT gets fixture.tar.gz (embedded: data/ and backup/, every file Pebble
# and the daemon left, the lock files included; only the "source" of
# backup/leasehold-backup.json is changed, to "data", so that it names no
# directory of the machine that made it; --shared: etcd/, the member's
# directory), golden.json and the text files.
# Payloads are fixed; ids, times, owners and tokens are those of the run.
# golden.json's "expected_to_differ" names the fields that a newer build
# changes on purpose when it opens the store: the jobs left running are
# re-queued, or cancelled for their pending request, and the retryable job,
# whose next attempt is due by then, is made available (as the old build
# does too).
#
# Needs git, go, GNU tar, gzip and GNU date. Run it from a clone:
#   scripts/compat-fixture.sh fa695f6 cmd/leasehold/testdata/compat/fa695f6
#   scripts/compat-fixture.sh --shared fa695f6 cmd/leasehold/testdata/compat/fa695f6-shared
set -euo pipefail

mode=embedded
if [ "${1:-}" = --shared ]; then
	mode=shared
	shift
fi
if [ $# -ne 2 ]; then
	echo "usage: $0 [--shared] REV OUT (e.g. $0 fa695f6 cmd/leasehold/testdata/compat/fa695f6)" >&2
	exit 2
fi
rev=$1
out=$2
if [ -e "$out" ]; then
	echo "$0: $out exists: remove it first or name another directory" >&2
	exit 2
fi
commit=$(git rev-parse --verify "$rev^{commit}")
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")

work=$(mktemp -d)
daemon_pid=
etcd_pid=
cleanup() {
	if [ -n "$daemon_pid" ]; then kill -9 "$daemon_pid" 2>/dev/null || true; fi
	if [ -n "$etcd_pid" ]; then kill -9 "$etcd_pid" 2>/dev/null || true; fi
	git worktree remove --force "$work/src" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

echo "building $commit" >&2
git worktree add --detach "$work/src" "$commit" >/dev/null 2>&1
(cd "$work/src" && go build -o "$work/leasehold" ./cmd/leasehold)
lh=$work/leasehold
git worktree remove --force "$work/src"

# The schedule ticks once, at the second 4 s from now (next year again).
tick=$(date -u -d '+4 seconds' '+%S %M %H %d %m')
read -r s m h d mo <<<"$tick"
spec="$((10#$s)) $((10#$m)) $((10#$h)) $((10#$d)) $((10#$mo)) *"

cd "$work"
if [ $mode = shared ]; then
	etcd_url=http://127.0.0.1:${COMPAT_ETCD_CLIENT_PORT:-42379}
	"$lh" etcd --data "$work/etcd" --listen-client "$etcd_url" \
		--listen-peer "http://127.0.0.1:${COMPAT_ETCD_PEER_PORT:-42380}" >etcd.log 2>&1 &
	etcd_pid=$!
	for _ in $(seq 200); do
		"$lh" jobs list --etcd "$etcd_url" >/dev/null 2>&1 && break
		kill -0 "$etcd_pid" 2>/dev/null || { cat etcd.log >&2; exit 1; }
		sleep 0.05
	done
	store=(--etcd "$etcd_url" --lease-ttl 2s)
else
	store=(--data "$work/data")
fi
"$lh" daemon "${store[@]}" --listen 127.0.0.1:0 --log-format json \
	--queues default,paused,flaky --concurrency 20 \
	--exec 'hold=trap "" TERM; sleep 600' \
	--periodic '{"name":"compat-once","spec":"'"$spec"'","kind":"echo","payload":{"tick":true},"queue":"later"}' \
	>daemon.log 2>&1 &
daemon_pid=$!
server=
for _ in $(seq 200); do
	server=$(sed -n 's/.*"msg":"listening".*"url":"\([^"]*\)".*/\1/p' daemon.log | head -n 1)
	[ -n "$server" ] && break
	kill -0 "$daemon_pid" 2>/dev/null || { cat daemon.log >&2; exit 1; }
	sleep 0.05
done
[ -n "$server" ] || { echo "$0: the daemon did not listen" >&2; cat daemon.log >&2; exit 1; }
export LEASEHOLD_SERVER=$server

# roles: "role id" lines, in the order the jobs were made.
roles=$work/roles
: >"$roles"
enq() { # enq ROLE KIND PAYLOAD [FLAGS...]
	local role=$1
	shift
	local id
	id=$("$lh" enqueue "$@" 2>/dev/null)
	echo "$role $id" >>"$roles"
	echo "$id"
}
state_of() { "$lh" jobs get "$1" --json | sed -n 's/^  "state": "\([a-z]*\)",$/\1/p'; }
attempt_of() { "$lh" jobs get "$1" --json | sed -n 's/^  "attempt": \([0-9]*\),$/\1/p'; }
wait_for() { # wait_for ID STATE [ATTEMPT]
	for _ in $(seq 600); do
		if [ "$(state_of "$1")" = "$2" ] && { [ -z "${3:-}" ] || [ "$(attempt_of "$1")" = "$3" ]; }; then
			return 0
		fi
		sleep 0.05
	done
	echo "$0: job $1 never $2 ${3:-}" >&2
	exit 1
}

enq scheduled echo '{"scheduled":"delay"}' --delay 876000h >/dev/null
enq scheduled echo '{"scheduled":"at"}' --at 2200-01-01T00:00:00Z --metadata '{"tenant":"compat"}' >/dev/null
enq available echo '{"available":1}' --queue later >/dev/null
enq available echo '{"available":2}' --queue later --priority 3 --timeout 30s --metadata '{"trace":"a2"}' >/dev/null
enq available echo '{"available":3}' --queue later --priority 2 --max-attempts 3 >/dev/null
enq unique-key echo '{"unique":"key"}' --queue later --unique-key compat-key >/dev/null
"$lh" queues limit paused 2 >/dev/null
"$lh" queues pause paused >/dev/null
enq paused echo '{"paused":1}' --queue paused >/dev/null
enq paused echo '{"paused":2}' --queue paused >/dev/null
done1=$(enq completed echo '{"hello":"compat"}' --metadata '{"trace":"c1"}')
done2=$(enq unique-args echo '{"unique":"args"}' --unique-by-args --unique-states completed)
discarded=$(enq discarded fail '{"times":5}' --max-attempts 1)
cancelled=$(enq cancelled echo '{"cancelled":true}' --delay 876000h)
"$lh" jobs cancel "$cancelled" >/dev/null
run1=$(enq running sleep '{"ms":600000}')
run2=$(enq running sleep '{"ms":600000}' --priority 2)
run3=$(enq running sleep '{"ms":600000}' --metadata '{"trace":"r3"}')
hold=$(enq cancel-requested hold '{"hold":true}')
retry=$(enq retryable fail '{"times":2}' --queue flaky --max-attempts 5)
for id in "$done1" "$done2"; do wait_for "$id" completed; done
wait_for "$discarded" discarded
for id in "$run1" "$run2" "$run3" "$hold"; do wait_for "$id" running; done
# The second failure: the third attempt comes 16 s (and up to 10 %) later.
wait_for "$retry" retryable 2

# The tick (the schedule's state is in the store from the daemon's start).
for _ in $(seq 300); do
	"$lh" periodic list --json | grep -q '"enqueued": 1' && break
	sleep 0.05
done
"$lh" periodic list --json | grep -q '"enqueued": 1' || { echo "$0: the schedule did not tick" >&2; exit 1; }
"$lh" jobs list --queue later --limit 1000 --json | sed -n 's/^    "id": "\([0-9A-Z]*\)",$/\1/p' | while read -r id; do
	grep -q " $id\$" "$roles" || echo "tick $id" >>"$roles"
done

# The hold job ignores SIGTERM: its cancel stays requested until the kill
# (the SIGKILL that would follow is 5 s away).
"$lh" jobs cancel "$hold" >/dev/null

backup_rev=0 # none in shared mode: a backup is of an embedded store
if [ $mode = embedded ]; then
	"$lh" backup "$work/backup" --json >backup.json
	backup_rev=$(sed -n 's/^  "revision": \([0-9]*\),$/\1/p' backup.json)
fi
enq after-backup echo '{"after_backup":true}' --queue later >/dev/null

# The old build's view, then the kill.
{
	printf '{\n"rev": "%s",\n"commit": "%s",\n"mode": "%s",\n' "$rev" "$commit" "$mode"
	printf '"backup_revision": %s,\n' "$backup_rev"
	printf '"periodic_spec": "%s",\n' "$spec"
	cat <<'EOF'
"expected_to_differ": {
  "running": ["state", "attempt", "errors", "rescues", "owner", "token", "scheduled_at"],
  "retryable": ["state"],
  "cancel-requested": ["state", "errors", "rescues", "finalized_at", "cancel_requested"]
},
EOF
	printf '"jobs": [\n'
	first=1
	while read -r role id; do
		[ $first = 1 ] || printf ',\n'
		first=0
		printf '{"role": "%s", "job": ' "$role"
		"$lh" jobs get "$id" --json
		printf '}'
	done <"$roles"
	printf '\n],\n"queues": '
	"$lh" queues list --json
	printf ',\n"periodic": '
	"$lh" periodic list --json
	printf '}\n'
} >golden.json
"$lh" jobs list --limit 1000 >jobs-list.txt
"$lh" queues list >queues-list.txt
kill -9 "$daemon_pid"
wait "$daemon_pid" 2>/dev/null || true
daemon_pid=

if [ $mode = shared ]; then
	kill -TERM "$etcd_pid"
	wait "$etcd_pid" 2>/dev/null || true
	etcd_pid=
	dirs=(etcd)
else
	# The backup's description names the directory it was taken from: make
	# it relative to the fixture, so that no path of this machine is
	# committed.
	sed -i "s|\"source\": \"$work/|\"source\": \"|" backup/leasehold-backup.json
	dirs=(data backup)
fi
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - "${dirs[@]}" | gzip -n -9 >fixture.tar.gz
mkdir -p "$out"
cp fixture.tar.gz golden.json jobs-list.txt queues-list.txt "$out/"
echo "wrote $out: $(du -sh "$out" | cut -f1)" >&2
