#!/usr/bin/env bash
# Measures what one hung etcd member costs in shared mode: three
# `leasehold etcd` members on loopback (with --enable-grpc-gateway: the
# script reads them over HTTP), one of them stopped (SIGSTOP) from
# 8 s to 33 s of a 60 s run.
#
# drain (the default): two daemons (20 slots each, 10 s leases), 6,000 jobs
# of 500 ms; a follower is stopped. It prints the longest time without a
# job completing (counted on the leader, once every 0.2 s).
#
# --pickup: one daemon, idle, and a job enqueued every second through its
# HTTP API; the member stopped is the one that carries the daemon's
# watches (a follower, if the leader does not). It prints the pickup
# latency (enqueue to start) of the jobs enqueued while it hung.
#
# Both print the daemons' warnings by message.
#
#   scripts/hung-member.sh [--pickup] [BINARY]   # default: builds ./cmd/leasehold
#
# Ports 26001-26006 (etcd) and 26101-26102 (daemons) must be free.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-hung.XXXXXX")
mode=drain
if [ "${1:-}" = --pickup ]; then
	mode=pickup
	shift
fi
bin=${1:-}
if [ -z "$bin" ]; then
	bin=$dir/leasehold
	go build -o "$bin" ./cmd/leasehold
fi
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill -9 "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
cluster="m1=http://127.0.0.1:26002,m2=http://127.0.0.1:26004,m3=http://127.0.0.1:26006"
for i in 1 2 3; do
	"$bin" etcd --name "m$i" --data "$dir/etcd-$i" --listen-client "http://127.0.0.1:$((26000 + 2 * i - 1))" \
		--listen-peer "http://127.0.0.1:$((26000 + 2 * i))" --initial-cluster "$cluster" --enable-grpc-gateway >"$dir/etcd-$i.log" 2>&1 &
	pids+=($!)
done
endpoints=http://127.0.0.1:26001,http://127.0.0.1:26003,http://127.0.0.1:26005
"$bin" workers list --etcd "$endpoints" >/dev/null 2>&1 || sleep 3
daemons=2
if [ $mode = pickup ]; then
	daemons=1
fi
for d in $(seq $daemons); do
	"$bin" daemon --etcd "$endpoints" --listen "127.0.0.1:2610$d" --lease-ttl 10s --concurrency 20 >"$dir/daemon-$d.log" 2>&1 &
	pids+=($!)
done
sleep 3
if [ $mode = drain ]; then
	"$bin" enqueue sleep '{"ms":500}' --count 6000 --etcd "$endpoints" >/dev/null
fi
python3 - "$dir" $mode "${pids[0]}" "${pids[1]}" "${pids[2]}" <<'PY'
import base64, collections, glob, json, os, signal, sys, time, urllib.request
d, mode, pids = sys.argv[1], sys.argv[2], [int(p) for p in sys.argv[3:6]]
def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode())
    return json.load(urllib.request.urlopen(req, timeout=0.4))
ports = [26001, 26003, 26005]
leader = next(i for i, p in enumerate(ports) if (lambda s: s["leader"] == s["header"]["member_id"])(post(p, "/v3/maintenance/status", {})))
follower = (leader + 1) % 3
def watchers(port):
    for line in urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read().decode().splitlines():
        if line.startswith("etcd_debugging_mvcc_watcher_total "):
            return float(line.split()[1])
    return 0
if mode == "pickup":
    # The member with the daemon's watches; a follower if they are not
    # all on the leader.
    w = [watchers(p) for p in ports]
    follower = max((i for i in range(3) if i != leader), key=lambda i: w[i])
    if w[follower] == 0:
        follower = leader
    print(f"watchers per member {w}; leader m{leader + 1}")
enqueued = {}
b64 = lambda s: base64.b64encode(s).decode()
count = {"key": b64(b"/leasehold/default/f/"), "range_end": b64(b"/leasehold/default/f0"), "count_only": True}
t0, last, last_t, gap, gap_at, stopped, resumed = time.time(), -1, 0.0, 0.0, 0.0, False, False
while time.time() - t0 < 60:
    t = time.time() - t0
    if t > 8 and not stopped:
        os.kill(pids[follower], signal.SIGSTOP); stopped = True
    if t > 33 and not resumed:
        os.kill(pids[follower], signal.SIGCONT); resumed = True
    if mode == "pickup":
        if t < 45 and int(t * 5) % 5 == 0:
            try:
                enqueued[post(26101, "/v1/jobs", {"kind": "sleep", "payload": {"ms": 0}})["job"]["id"]] = t
            except Exception as e:
                print(f"enqueue at {t:.1f} s failed: {e}")
        time.sleep(0.2)
        continue
    try:
        n = int(post(ports[leader], "/v3/kv/range", count).get("count", 0))
    except Exception:
        n = -1
    if n > last:
        if last >= 0 and t - last_t > gap:
            gap, gap_at = t - last_t, last_t
        last, last_t = n, t
    time.sleep(0.2)
if mode == "pickup":
    import datetime
    def ts(s):
        return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    lat = {"before": [], "stopped": [], "after": []}
    for jid, at in enqueued.items():
        j = json.load(urllib.request.urlopen(f"http://127.0.0.1:26101/v1/jobs/{jid}", timeout=5))
        j = j.get("job", j)
        if not j.get("attempted_at"):
            print(f"job {jid} enqueued at {at:.1f} s never started")
            continue
        phase = "before" if at < 8 else "stopped" if at < 33 else "after"
        lat[phase].append(ts(j["attempted_at"]) - ts(j["created_at"]))
    print(f"m{follower + 1} stopped from 8 s to 33 s; pickup latency (enqueue to start), ms:")
    for phase, xs in lat.items():
        xs.sort()
        if xs:
            print(f"  {phase:8s} {len(xs):3d} jobs: p50 {1000 * xs[len(xs) // 2]:7.1f}  max {1000 * xs[-1]:7.1f}")
else:
    print(f"follower m{follower + 1} stopped from 8 s to 33 s; {last} jobs completed in 60 s;"
          f" longest time without a completion {gap:.1f} s (from {gap_at:.1f} s)")
warns = collections.Counter()
for f in glob.glob(f"{d}/daemon-*.log"):
    for line in open(f):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("level") in ("WARN", "ERROR"):
            warns[(r["level"], r["msg"])] += 1
for (level, msg), n in sorted(warns.items()):
    print(f"  {n:4d} {level} {msg}")
PY
