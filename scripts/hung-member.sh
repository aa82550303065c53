#!/usr/bin/env bash
# Measures what one hung etcd member costs a drain in shared mode: three
# `leasehold etcd` members and two daemons (20 slots each, 10 s leases) on
# loopback, 6,000 jobs of 500 ms; 8 s in, a follower is stopped (SIGSTOP)
# for 25 s. It prints the longest time without a job completing (counted
# on the leader, once every 0.2 s) and the daemons' warnings by message.
#
#   scripts/hung-member.sh [BINARY]   # default: builds ./cmd/leasehold
#
# Ports 26001-26006 (etcd) and 26101-26102 (daemons) must be free.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-hung.XXXXXX")
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
		--listen-peer "http://127.0.0.1:$((26000 + 2 * i))" --initial-cluster "$cluster" >"$dir/etcd-$i.log" 2>&1 &
	pids+=($!)
done
endpoints=http://127.0.0.1:26001,http://127.0.0.1:26003,http://127.0.0.1:26005
"$bin" workers list --etcd "$endpoints" >/dev/null 2>&1 || sleep 3
for d in 1 2; do
	"$bin" daemon --etcd "$endpoints" --listen "127.0.0.1:2610$d" --lease-ttl 10s --concurrency 20 >"$dir/daemon-$d.log" 2>&1 &
	pids+=($!)
done
sleep 3
"$bin" enqueue sleep '{"ms":500}' --count 6000 --etcd "$endpoints" >/dev/null
python3 - "$dir" "${pids[0]}" "${pids[1]}" "${pids[2]}" <<'PY'
import base64, collections, glob, json, os, signal, sys, time, urllib.request
d, pids = sys.argv[1], [int(p) for p in sys.argv[2:5]]
def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode())
    return json.load(urllib.request.urlopen(req, timeout=0.4))
ports = [26001, 26003, 26005]
leader = next(i for i, p in enumerate(ports) if (lambda s: s["leader"] == s["header"]["member_id"])(post(p, "/v3/maintenance/status", {})))
follower = (leader + 1) % 3
b64 = lambda s: base64.b64encode(s).decode()
count = {"key": b64(b"/leasehold/default/f/"), "range_end": b64(b"/leasehold/default/f0"), "count_only": True}
t0, last, last_t, gap, gap_at, stopped, resumed = time.time(), -1, 0.0, 0.0, 0.0, False, False
while time.time() - t0 < 60:
    t = time.time() - t0
    if t > 8 and not stopped:
        os.kill(pids[follower], signal.SIGSTOP); stopped = True
    if t > 33 and not resumed:
        os.kill(pids[follower], signal.SIGCONT); resumed = True
    try:
        n = int(post(ports[leader], "/v3/kv/range", count).get("count", 0))
    except Exception:
        n = -1
    if n > last:
        if last >= 0 and t - last_t > gap:
            gap, gap_at = t - last_t, last_t
        last, last_t = n, t
    time.sleep(0.2)
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
