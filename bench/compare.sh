#!/usr/bin/env bash
# compare.sh — etcd vs ledgerkv on this machine, same run, same load generator
# (issue 5). See bench/README.md "compare.sh".
#
# Single-machine part: starts on loopback, each with a fresh temporary data
# dir, Debian's etcd (single member, default fsync) and `ledgerkv standalone`,
# then runs ledgerkv-bench over the matrix workload x value size x clients,
# alternating the two systems row by row (and which one goes first), and
# prints one table preceded by the disk's fdatasync rate and sequential write
# bandwidth measured in the same run.
# Cluster part: a 3-member etcd cluster vs a ledgerkv cluster (its own
# single etcd for metadata, 3 bookies, 1 server, logs on E=3 Qw=3 Qa=2),
# with the standalone server measured again alongside for reference; the
# bench goes to the etcd leader and to the owner of table default's range
# (it follows no redirect). A second table.
# Exit status: 0 when every run succeeded, 1 when a run or a server failed, 2
# for bad arguments or missing binaries.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/compare.sh [--duration S=5] [--quick] [--only single|cluster]
                        [--bin-dir DIR] [--etcd PATH]
  --duration S  timed seconds per run (each run also preloads the key space)
  --quick       1 s per run, 16 clients, 256-byte values and 1000 keys only,
                both parts (smoke test, about a minute)
  --only PART   run only the single-machine part (etcd vs standalone) or only
                the cluster part (3-member etcd vs ledgerkv cluster)
  --bin-dir DIR directory holding kv_server/ledgerkv and bench/ledgerkv-bench
                (a CMake build dir). Default: ledgerkv from build-release/ if
                built there, else build/; ledgerkv-bench from the same dir if
                built there, else build/.
  --etcd PATH   etcd binary (default /usr/bin/etcd)
EOF
}

SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DURATION=5
QUICK=0
BIN_DIR=""
ETCD=/usr/bin/etcd
ONLY=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --duration) DURATION="${2:?--duration needs a value}"; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --only) ONLY="${2:?--only needs single or cluster}"; shift 2
            [[ $ONLY == single || $ONLY == cluster ]] || { echo "compare.sh: --only single|cluster" >&2; exit 2; } ;;
    --bin-dir) BIN_DIR="${2:?--bin-dir needs a value}"; shift 2 ;;
    --etcd) ETCD="${2:?--etcd needs a value}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "compare.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

if [[ -n "$BIN_DIR" ]]; then
  LEDGERKV="$BIN_DIR/kv_server/ledgerkv"
  BENCH="$BIN_DIR/bench/ledgerkv-bench"
else
  LEDGERKV="$SRC_DIR/build-release/kv_server/ledgerkv"
  [[ -x "$LEDGERKV" ]] || LEDGERKV="$SRC_DIR/build/kv_server/ledgerkv"
  BENCH="$(dirname "$(dirname "$LEDGERKV")")/bench/ledgerkv-bench"
  [[ -x "$BENCH" ]] || BENCH="$SRC_DIR/build/bench/ledgerkv-bench"
fi
for bin in "$ETCD" "$LEDGERKV" "$BENCH"; do
  [[ -x "$bin" ]] || { echo "compare.sh: $bin not found or not executable" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "compare.sh: python3 is required" >&2; exit 2; }

RUN_SINGLE=1; RUN_CLUSTER=1
[[ $ONLY == single ]] && RUN_CLUSTER=0
[[ $ONLY == cluster ]] && RUN_SINGLE=0
ETCDCTL="$(dirname "$ETCD")/etcdctl"
[[ -x "$ETCDCTL" ]] || ETCDCTL="$(command -v etcdctl || true)"

if [[ $QUICK == 1 ]]; then
  DURATION=1
  CLIENTS=(16); VALUES=(256)
  CL_CLIENTS=(16); CL_VALUES=(256)
  KEYS=1000  # the preloads dominate a smoke run
  PROBE_SECONDS=0.5
else
  CLIENTS=(1 16 256); VALUES=(256 4096)
  # The cluster part runs the same matrix (three systems per row).
  CL_CLIENTS=(1 16 256); CL_VALUES=(256 4096)
  KEYS=10000
  PROBE_SECONDS=2
fi
WORKLOADS=(put get get-serializable txn)
declare -A CONNS=([1]=1 [16]=4 [256]=16)

# Everything this script starts is recorded here and ended by pid on exit,
# newest first (cluster servers before their bookies and etcd, so their
# graceful shutdown finds them up), each given 5 s after SIGTERM.
PIDS=()
TMP="$(mktemp -d "${TMPDIR:-/tmp}/ledgerkv-compare.XXXXXX")"
cleanup() {
  local i pid
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    pid="${PIDS[$i]}"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# free_ports N: N distinct ports, all bound at once (then released).
free_ports() {
  python3 - "$1" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# wait_for_line PID LOG PATTERN: until LOG matches PATTERN (30 s max, fails if
# the process exits first).
wait_for_line() {
  local pid="$1" log="$2" pattern="$3"
  for _ in $(seq 300); do
    grep -q "$pattern" "$log" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { echo "compare.sh: process $pid exited; log:" >&2; tail -20 "$log" >&2; return 1; }
    sleep 0.1
  done
  echo "compare.sh: timed out waiting for '$pattern' in $log" >&2; tail -20 "$log" >&2
  return 1
}

# ---- The disk, in the same run and the same file system as the data dirs.
# Same figures as bench/disk_probe.h: 4 KiB overwrite + fdatasync one at a
# time; 1 MiB appends with fdatasync every 8 MiB.
DISK="$(python3 - "$TMP" "$PROBE_SECONDS" <<'EOF'
import os, sys, time
d, secs = sys.argv[1], float(sys.argv[2])
path = os.path.join(d, "disk-probe")
fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
block = os.urandom(4096)
os.pwrite(fd, block, 0); os.fdatasync(fd)
n, t0 = 0, time.monotonic()
while time.monotonic() - t0 < secs:
    os.pwrite(fd, block, 0); os.fdatasync(fd); n += 1
syncs = n / (time.monotonic() - t0)
os.ftruncate(fd, 0); os.fsync(fd)
mib = os.urandom(1 << 20)
n, t0 = 0, time.monotonic()
while time.monotonic() - t0 < secs or n % 8:
    os.write(fd, mib); n += 1
    if n % 8 == 0: os.fdatasync(fd)
mbps = n * (1 << 20) / 1e6 / (time.monotonic() - t0)
os.close(fd); os.unlink(path)
print(f"{syncs:.0f} {mbps:.0f}")
EOF
)"
read -r DISK_SYNCS DISK_MBPS <<<"$DISK"

# ---- Systems. Each is a name with an endpoint, a bench target, the pid
# whose CPU and RSS the bench samples, and a log.
declare -A SYS_EP SYS_TARGET SYS_PID SYS_LOG
# start_bg NAME LOG CMD...: runs CMD in the background (stdout and stderr to
# LOG) and records its pid for cleanup; the pid is left in BG_PID.
start_bg() {
  local name="$1" log="$2"; shift 2
  "$@" >"$log" 2>&1 &
  BG_PID=$!; PIDS+=("$BG_PID")
}
# start_etcd NAME LOG CLIENT_PORT PEER_PORT INITIAL_CLUSTER: one etcd member,
# data in $TMP/NAME.
start_etcd() {
  start_bg "$1" "$2" "$ETCD" --name "$1" --data-dir "$TMP/$1" \
    --listen-client-urls "http://127.0.0.1:$3" --advertise-client-urls "http://127.0.0.1:$3" \
    --listen-peer-urls "http://127.0.0.1:$4" --initial-advertise-peer-urls "http://127.0.0.1:$4" \
    --initial-cluster "$5" --initial-cluster-state new --initial-cluster-token "ledgerkv-compare-$$"
}

read -r EP EPEER LP <<<"$(free_ports 3)"
ETCD_EP="127.0.0.1:$EP"
if [[ $RUN_SINGLE == 1 ]]; then
  start_etcd compare "$TMP/etcd.log" "$EP" "$EPEER" "compare=http://127.0.0.1:$EPEER"
  ETCD_PID=$BG_PID
fi
start_bg ledgerkv "$TMP/ledgerkv.log" "$LEDGERKV" standalone --data-dir "$TMP/ledgerkv" --listen "127.0.0.1:$LP"
LKV_PID=$BG_PID
if [[ $RUN_SINGLE == 1 ]]; then
  wait_for_line "$ETCD_PID" "$TMP/etcd.log" "ready to serve client requests" || exit 1
fi
wait_for_line "$LKV_PID" "$TMP/ledgerkv.log" "ledgerkv standalone serving on" || exit 1
LKV_EP="$(grep -o 'ledgerkv standalone serving on [^ ]*' "$TMP/ledgerkv.log" | head -1 | awk '{print $5}')"
SYS_EP[etcd]="$ETCD_EP"; SYS_TARGET[etcd]=etcd; SYS_PID[etcd]="${ETCD_PID:-}"; SYS_LOG[etcd]="$TMP/etcd.log"
SYS_EP[ledgerkv]="$LKV_EP"; SYS_TARGET[ledgerkv]=ledgerkv; SYS_PID[ledgerkv]="$LKV_PID"; SYS_LOG[ledgerkv]="$TMP/ledgerkv.log"
# The cluster part measures the same standalone process again, as its own rows.
SYS_EP[standalone]="$LKV_EP"; SYS_TARGET[standalone]=ledgerkv; SYS_PID[standalone]="$LKV_PID"; SYS_LOG[standalone]="$TMP/ledgerkv.log"

echo "# etcd vs ledgerkv, single machine ($(date -u +%FT%TZ), $(nproc) cores)"
[[ $RUN_SINGLE == 1 ]] && echo "# etcd: $ETCD ($("$ETCD" --version | head -1)) on $ETCD_EP, default fsync"
echo "# ledgerkv: $LEDGERKV standalone on $LKV_EP (1 in-process bookie, fsync on)"
echo "# load: $BENCH, ${DURATION}s per run, 16-byte keys, $KEYS keys"
echo "# disk ($TMP): ${DISK_SYNCS} fdatasync/s (4 KiB), ${DISK_MBPS} MB/s sequential write"

# ---- The matrix. One JSON file per run: $TMP/res/<system>_<workload>_<clients>_<value>.json
mkdir -p "$TMP/res"
FAILED=0
PRELOAD_FLAGS=()  # --no-preload once the cluster part has preloaded every system
run_one() {  # system workload clients value
  local sys="$1" wl="$2" c="$3" v="$4"
  local ep="${SYS_EP[$sys]}" target="${SYS_TARGET[$sys]}" pid="${SYS_PID[$sys]}"
  local out="$TMP/res/${sys}_${wl}_${c}_${v}.json"
  if ! "$BENCH" --endpoint "$ep" --target "$target" "$wl" --clients "$c" --conns "${CONNS[$c]}" \
      --key-size 16 --value-size "$v" --keys "$KEYS" --duration "$DURATION" --server-pid "$pid" \
      ${PRELOAD_FLAGS[@]+"${PRELOAD_FLAGS[@]}"} -o json \
      >"$out" 2>"$out.err"; then
    echo "compare.sh: $sys $wl clients=$c value=$v failed: $(tail -1 "$out.err")" >&2
    FAILED=1
  fi
  echo "compare.sh: $sys $wl clients=$c value=$v: $(python3 -c 'import json,sys; print("%.0f ops/s" % json.load(open(sys.argv[1]))["ops_per_sec"])' "$out" 2>/dev/null || echo FAILED)" >&2
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "compare.sh: $sys (pid $pid) died; log tail:" >&2; tail -20 "${SYS_LOG[$sys]}" >&2
    exit 1
  fi
}
# run_matrix "SYSTEMS" "WORKLOADS" "VALUES" "CLIENTS": every cell once per
# system, rotating which system goes first row by row so slow drift (page
# cache, other tenants of the machine) does not always favour the same one.
run_matrix() {
  local -a systems=($1) wls=($2) vals=($3) cls=($4)
  local n=${#systems[@]} row=0 wl v c k
  for wl in "${wls[@]}"; do
    for v in "${vals[@]}"; do
      for c in "${cls[@]}"; do
        for ((k = 0; k < n; k++)); do run_one "${systems[(row + k) % n]}" "$wl" "$c" "$v"; done
        row=$((row + 1))
      done
    done
  done
}

# print_table "WORKLOADS" "VALUES" "CLIENTS" "SYSTEMS" "RATIOS": one row per
# cell. SYSTEMS: name:long label:short label; RATIOS: a/b:label (ops/s of a
# over b).
print_table() {
  python3 - "$TMP/res" "$@" <<'EOF'
import json, os, sys
res, wls, vals, clients = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
systems = [s.split(":") for s in sys.argv[5].split()]
ratios = [(r.split(":")[0].split("/"), r.split(":")[1]) for r in sys.argv[6].split()]
def load(sys_, wl, c, v):
    try:
        with open(os.path.join(res, f"{sys_}_{wl}_{c}_{v}.json")) as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None
def ops(r): return f"{r['ops_per_sec']:.0f}" if r else "FAIL"
def ms(r, p): return f"{r['latency_us'][p] / 1000:.2f}" if r else "-"
hdr = ["workload", "clients", "value"] + [f"{lng} ops/s" for _, lng, _ in systems] + \
      [label for _, label in ratios] + [f"p99 {sh} ms" for _, _, sh in systems] + \
      [f"p50 {sh} ms" for _, _, sh in systems] + \
      ["errs " + "/".join(sh[0] if len(systems) == 2 else sh for _, _, sh in systems)]
rows, peak = [], {name: 0 for name, _, _ in systems}
for wl in wls:
    for v in vals:
        for c in clients:
            r = {name: load(name, wl, c, v) for name, _, _ in systems}
            for name, x in r.items():
                if x: peak[name] = max(peak[name], x.get("server_max_rss_kb", 0), x.get("server_vm_hwm_kb", 0))
            def ratio(a, b):
                return f"{r[a]['ops_per_sec'] / r[b]['ops_per_sec']:.2f}" \
                    if r[a] and r[b] and r[b]["ops_per_sec"] > 0 else "-"
            rows.append([wl, c, v] + [ops(r[n]) for n, _, _ in systems] +
                        [ratio(a, b) for (a, b), _ in ratios] +
                        [ms(r[n], "p99") for n, _, _ in systems] + [ms(r[n], "p50") for n, _, _ in systems] +
                        ["/".join(str(r[n]["errors"]) if r[n] else "-" for n, _, _ in systems)])
w = [max(len(str(x)) for x in col) for col in zip(hdr, *rows)]
for r in [hdr] + rows:
    print("  ".join(str(x).ljust(n) if i == 0 else str(x).rjust(n) for i, (x, n) in enumerate(zip(r, w))))
print("# peak server RSS over all runs: " +
      ", ".join(f"{lng} {peak[name] / 1024:.0f} MiB" for name, lng, _ in systems))
EOF
}

if [[ $RUN_SINGLE == 1 ]]; then
  run_matrix "etcd ledgerkv" "${WORKLOADS[*]}" "${VALUES[*]}" "${CLIENTS[*]}"
  print_table "${WORKLOADS[*]}" "${VALUES[*]}" "${CLIENTS[*]}" \
    "etcd:etcd:etcd ledgerkv:ledgerkv:lkv" "ledgerkv/etcd:lkv/etcd"
  # Idle from here on; stopped so it takes nothing from the cluster part.
  kill -TERM "$ETCD_PID" 2>/dev/null || true
fi
[[ $RUN_CLUSTER == 1 ]] || exit "$FAILED"

# ---- Cluster part: 3-member etcd vs ledgerkv cluster (+ standalone again).
if [[ ! -x "$ETCDCTL" ]]; then ETCDCTL=""; fi
# 3-member etcd: 3 client + 3 peer ports; ledgerkv: a metadata etcd (client +
# peer), 3 bookies, 1 server (issue 5's cluster: the load goes to the owner,
# and a second server would only stand by).
read -r -a P <<<"$(free_ports 13)"
E3_CLUSTER="e3m0=http://127.0.0.1:${P[3]},e3m1=http://127.0.0.1:${P[4]},e3m2=http://127.0.0.1:${P[5]}"
declare -a E3_PIDS
for i in 0 1 2; do
  start_etcd "e3m$i" "$TMP/e3m$i.log" "${P[$i]}" "${P[$((i + 3))]}" "$E3_CLUSTER"
  E3_PIDS[$i]=$BG_PID
done
META_EP="127.0.0.1:${P[6]}"
META_URI="etcd://$META_EP"
start_etcd meta "$TMP/meta.log" "${P[6]}" "${P[7]}" "meta=http://127.0.0.1:${P[7]}"
META_PID=$BG_PID
for i in 0 1 2; do
  wait_for_line "${E3_PIDS[$i]}" "$TMP/e3m$i.log" "ready to serve client requests" || exit 1
done
wait_for_line "$META_PID" "$TMP/meta.log" "ready to serve client requests" || exit 1
for i in 0 1 2; do
  start_bg "bookie$i" "$TMP/bookie$i.log" "$LEDGERKV" bookie --data-dir "$TMP/bookie$i" \
    --listen "127.0.0.1:${P[$((8 + i))]}" --bookie-id "bookie$i" --metadata "$META_URI"
  BOOKIE_PIDS[$i]=$BG_PID
done
for i in 0 1 2; do wait_for_line "${BOOKIE_PIDS[$i]}" "$TMP/bookie$i.log" "listening on" || exit 1; done
declare -A SERVER_PID_BY_ADDR
for i in 0; do
  addr="127.0.0.1:${P[$((11 + i))]}"
  start_bg "server$i" "$TMP/server$i.log" "$LEDGERKV" server --data-dir "$TMP/server$i" \
    --listen "$addr" --metadata "$META_URI" --ensemble 3 --write-quorum 3 --ack-quorum 2
  SERVER_PIDS[$i]=$BG_PID; SERVER_PID_BY_ADDR[$addr]=$BG_PID
done
for i in 0; do wait_for_line "${SERVER_PIDS[$i]}" "$TMP/server$i.log" "serving on" || exit 1; done

# The etcd leader (what a leader-aware client would talk to; a follower would
# forward writes and ask the leader for linearizable reads). Without etcdctl:
# member 0, which may be a follower.
E3_EPS="127.0.0.1:${P[0]},127.0.0.1:${P[1]},127.0.0.1:${P[2]}"
E3_LEADER=""
if [[ -n "$ETCDCTL" ]]; then
  for _ in $(seq 100); do
    E3_LEADER="$(ETCDCTL_API=3 "$ETCDCTL" --endpoints="$E3_EPS" endpoint status -w json 2>/dev/null |
      python3 -c 'import json,sys
for e in json.load(sys.stdin):
    st = e["Status"]
    if st.get("leader") and st["header"]["member_id"] == st["leader"]: print(e["Endpoint"])' 2>/dev/null || true)"
    [[ -n "$E3_LEADER" ]] && break
    sleep 0.1
  done
fi
E3_NOTE="leader"
if [[ -z "$E3_LEADER" ]]; then E3_LEADER="127.0.0.1:${P[0]}"; E3_NOTE="member 0 (leader unknown: no etcdctl)"; fi
E3_PID=""
for i in 0 1 2; do [[ "127.0.0.1:${P[$i]}" == "$E3_LEADER" ]] && E3_PID="${E3_PIDS[$i]}"; done

# The owner of table default's range, from the cluster's own status command.
OWNER=""
for _ in $(seq 300); do
  OWNER="$("$LEDGERKV" cluster --metadata "$META_URI" status 2>/dev/null |
    awk '/^range .* table=default .*owner_live=yes/ { for (i = 1; i <= NF; i++) if ($i ~ /^address=/) { sub("address=", "", $i); print $i; exit } }' || true)"
  [[ -n "$OWNER" ]] && break
  sleep 0.1
done
if [[ -z "$OWNER" || -z "${SERVER_PID_BY_ADDR[$OWNER]:-}" ]]; then
  echo "compare.sh: no live owner for table default's range; status:" >&2
  "$LEDGERKV" cluster --metadata "$META_URI" status >&2 || true
  exit 1
fi
SYS_EP[etcd3]="$E3_LEADER"; SYS_TARGET[etcd3]=etcd; SYS_LOG[etcd3]="$TMP/e3m0.log"
SYS_PID[etcd3]="$E3_PID"
for i in 0 1 2; do [[ "${E3_PIDS[$i]}" == "$E3_PID" ]] && SYS_LOG[etcd3]="$TMP/e3m$i.log"; done
SYS_EP[cluster]="$OWNER"; SYS_TARGET[cluster]=ledgerkv; SYS_PID[cluster]="${SERVER_PID_BY_ADDR[$OWNER]}"
for i in 0; do [[ "${SERVER_PIDS[$i]}" == "${SYS_PID[cluster]}" ]] && SYS_LOG[cluster]="$TMP/server$i.log"; done

echo
echo "# 3-member etcd vs ledgerkv cluster, same machine ($(date -u +%FT%TZ), $(nproc) cores; every process on this host, loopback)"
echo "# etcd3: 3 members (default fsync) on $E3_EPS; bench -> $E3_NOTE $E3_LEADER (RSS: that member)"
echo "# cluster: 3 bookies + 1 server (E=3 Qw=3 Qa=2, fsync on), metadata in a separate etcd on $META_EP;" \
     "bench -> range owner $OWNER (RSS: the owner process only)"
echo "# standalone: the ledgerkv standalone above, again, alternating with the other two"
echo "# key space written once per system (256 clients, untimed), then every run with --no-preload"
# Unlike the single part (a preload before every read/txn run, which at 1
# client takes longer than the run), each system's key space is written
# once here with 256 clients; the later put and txn runs keep rewriting it.
for sys in etcd3 cluster standalone; do
  for v in "${CL_VALUES[@]}"; do
    if ! "$BENCH" --endpoint "${SYS_EP[$sys]}" --target "${SYS_TARGET[$sys]}" get --clients 256 \
        --conns 16 --key-size 16 --value-size "$v" --keys "$KEYS" --total 1 -o json \
        >"$TMP/preload_$sys.out" 2>&1; then
      echo "compare.sh: preload of $sys failed: $(tail -1 "$TMP/preload_$sys.out")" >&2
      exit 1
    fi
  done
done
PRELOAD_FLAGS=(--no-preload)
run_matrix "etcd3 cluster standalone" "${WORKLOADS[*]}" "${CL_VALUES[*]}" "${CL_CLIENTS[*]}"
print_table "${WORKLOADS[*]}" "${CL_VALUES[*]}" "${CL_CLIENTS[*]}" \
  "etcd3:etcd3:e3 cluster:lkv-cluster:cl standalone:standalone:sa" \
  "cluster/etcd3:cl/etcd3 cluster/standalone:cl/sa standalone/etcd3:sa/etcd3"
exit "$FAILED"
