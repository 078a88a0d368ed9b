#!/usr/bin/env bash
# compare.sh — etcd vs ledgerkv on this machine, same run, same load generator
# (issue 5, single-machine part). See bench/README.md "compare.sh".
#
# Starts on loopback, each with a fresh temporary data dir, Debian's etcd
# (single member, default fsync) and `ledgerkv standalone`, then runs
# ledgerkv-bench over the matrix workload x value size x clients, alternating
# the two systems row by row (and which one goes first), and prints one table
# preceded by the disk's fdatasync rate and sequential write bandwidth measured
# in the same run. Exit status: 0 when every run succeeded, 1 when a run or a
# server failed, 2 for bad arguments or missing binaries.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/compare.sh [--duration S=5] [--quick] [--bin-dir DIR] [--etcd PATH]
  --duration S  timed seconds per run (each run also preloads the key space)
  --quick       1 s per run, 16 clients and 256-byte values only (smoke test)
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
while [[ $# -gt 0 ]]; do
  case "$1" in
    --duration) DURATION="${2:?--duration needs a value}"; shift 2 ;;
    --quick) QUICK=1; shift ;;
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

if [[ $QUICK == 1 ]]; then
  DURATION=1
  CLIENTS=(16); VALUES=(256)
  PROBE_SECONDS=0.5
else
  CLIENTS=(1 16 256); VALUES=(256 4096)
  PROBE_SECONDS=2
fi
WORKLOADS=(put get get-serializable txn)
declare -A CONNS=([1]=1 [16]=4 [256]=16)

# Everything this script starts is recorded here and ended by pid on exit.
PIDS=()
TMP="$(mktemp -d "${TMPDIR:-/tmp}/ledgerkv-compare.XXXXXX")"
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
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

# ---- Servers.
EP="$(free_port)"; EPEER="$(free_port)"; LP="$(free_port)"
ETCD_EP="127.0.0.1:$EP"
"$ETCD" --name compare --data-dir "$TMP/etcd" \
  --listen-client-urls "http://$ETCD_EP" --advertise-client-urls "http://$ETCD_EP" \
  --listen-peer-urls "http://127.0.0.1:$EPEER" --initial-advertise-peer-urls "http://127.0.0.1:$EPEER" \
  --initial-cluster "compare=http://127.0.0.1:$EPEER" >"$TMP/etcd.log" 2>&1 &
ETCD_PID=$!; PIDS+=("$ETCD_PID")
"$LEDGERKV" standalone --data-dir "$TMP/ledgerkv" --listen "127.0.0.1:$LP" >"$TMP/ledgerkv.log" 2>&1 &
LKV_PID=$!; PIDS+=("$LKV_PID")
wait_for_line "$ETCD_PID" "$TMP/etcd.log" "ready to serve client requests" || exit 1
wait_for_line "$LKV_PID" "$TMP/ledgerkv.log" "ledgerkv standalone serving on" || exit 1
LKV_EP="$(grep -o 'ledgerkv standalone serving on [^ ]*' "$TMP/ledgerkv.log" | head -1 | awk '{print $5}')"

echo "# etcd vs ledgerkv, single machine ($(date -u +%FT%TZ), $(nproc) cores)"
echo "# etcd: $ETCD ($("$ETCD" --version | head -1)) on $ETCD_EP, default fsync"
echo "# ledgerkv: $LEDGERKV standalone on $LKV_EP (1 in-process bookie, fsync on)"
echo "# load: $BENCH, ${DURATION}s per run, 16-byte keys, 10000 keys"
echo "# disk ($TMP): ${DISK_SYNCS} fdatasync/s (4 KiB), ${DISK_MBPS} MB/s sequential write"

# ---- The matrix. One JSON file per run: $TMP/res/<system>_<workload>_<clients>_<value>.json
mkdir -p "$TMP/res"
FAILED=0
run_one() {  # system workload clients value
  local sys="$1" wl="$2" c="$3" v="$4" ep target pid
  if [[ $sys == etcd ]]; then ep="$ETCD_EP"; target=etcd; pid="$ETCD_PID"
  else ep="$LKV_EP"; target=ledgerkv; pid="$LKV_PID"; fi
  local out="$TMP/res/${sys}_${wl}_${c}_${v}.json"
  if ! "$BENCH" --endpoint "$ep" --target "$target" "$wl" --clients "$c" --conns "${CONNS[$c]}" \
      --key-size 16 --value-size "$v" --duration "$DURATION" --server-pid "$pid" -o json \
      >"$out" 2>"$out.err"; then
    echo "compare.sh: $sys $wl clients=$c value=$v failed: $(tail -1 "$out.err")" >&2
    FAILED=1
  fi
  echo "compare.sh: $sys $wl clients=$c value=$v: $(python3 -c 'import json,sys; print("%.0f ops/s" % json.load(open(sys.argv[1]))["ops_per_sec"])' "$out" 2>/dev/null || echo FAILED)" >&2
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "compare.sh: $sys (pid $pid) died; log tail:" >&2; tail -20 "$TMP/$sys.log" >&2
    exit 1
  fi
}
row=0
for wl in "${WORKLOADS[@]}"; do
  for v in "${VALUES[@]}"; do
    for c in "${CLIENTS[@]}"; do
      # Alternate which system goes first so slow drift (page cache, other
      # tenants of the machine) does not always favour the same one.
      if (( row % 2 == 0 )); then order=(etcd ledgerkv); else order=(ledgerkv etcd); fi
      for sys in "${order[@]}"; do run_one "$sys" "$wl" "$c" "$v"; done
      row=$((row + 1))
    done
  done
done

# ---- The table.
python3 - "$TMP/res" "${WORKLOADS[*]}" "${VALUES[*]}" "${CLIENTS[*]}" <<'EOF'
import json, os, sys
res, wls, vals, clients = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
def load(sys_, wl, c, v):
    try:
        with open(os.path.join(res, f"{sys_}_{wl}_{c}_{v}.json")) as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None
def ops(r): return f"{r['ops_per_sec']:.0f}" if r else "FAIL"
def ms(r, p): return f"{r['latency_us'][p] / 1000:.2f}" if r else "-"
hdr = ["workload", "clients", "value", "etcd ops/s", "ledgerkv ops/s", "lkv/etcd",
       "p99 etcd ms", "p99 lkv ms", "p50 etcd ms", "p50 lkv ms", "errs e/l"]
rows, peak = [], {"etcd": 0, "ledgerkv": 0}
for wl in wls:
    for v in vals:
        for c in clients:
            e, l = load("etcd", wl, c, v), load("ledgerkv", wl, c, v)
            for name, r in (("etcd", e), ("ledgerkv", l)):
                if r: peak[name] = max(peak[name], r.get("server_max_rss_kb", 0), r.get("server_vm_hwm_kb", 0))
            ratio = f"{l['ops_per_sec'] / e['ops_per_sec']:.2f}" if e and l and e["ops_per_sec"] > 0 else "-"
            errs = f"{e['errors'] if e else '-'}/{l['errors'] if l else '-'}"
            rows.append([wl, c, v, ops(e), ops(l), ratio, ms(e, "p99"), ms(l, "p99"), ms(e, "p50"), ms(l, "p50"), errs])
w = [max(len(str(x)) for x in col) for col in zip(hdr, *rows)]
for r in [hdr] + rows:
    print("  ".join(str(x).ljust(n) if i == 0 else str(x).rjust(n) for i, (x, n) in enumerate(zip(r, w))))
print(f"# peak server RSS over all runs: etcd {peak['etcd'] / 1024:.0f} MiB, ledgerkv {peak['ledgerkv'] / 1024:.0f} MiB")
EOF

echo "# 3-member etcd vs 3-node ledgerkv cluster: SKIPPED - ledgerkv has no cluster" \
     "mode yet (\`ledgerkv server\` is not implemented); only the single-machine part runs."
exit "$FAILED"
