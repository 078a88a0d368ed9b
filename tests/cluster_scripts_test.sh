#!/usr/bin/env bash
# The newcomer's cluster, as the README shows it: scripts/cluster-up starts
# etcd, 3 bookies and 2 servers on their fixed loopback ports; a write
# through one server is readable through the other; `ledgerkv cluster status`
# shows every process and a live owner; a second cluster-up is a no-op;
# scripts/cluster-down stops everything (no process left) and --wipe deletes
# the directory. Runs the binaries of the build under test
# (LEDGERKV_BUILD_DIR), not a release build.
# usage: cluster_scripts_test.sh REPO_ROOT BUILD_DIR
set -euo pipefail
root="$1"
build="$2"
dir="$(mktemp -d /tmp/ledgerkv-cluster-scripts.XXXXXX)"
export LEDGERKV_BUILD_DIR="$build"
ctl="$build/client/ledgerkvctl"
ledgerkv="$build/kv_server/ledgerkv"
fail() { echo "FAIL: $*" >&2; for f in "$dir"/*.log; do echo "== $f" >&2; grep -vE '^\{"level' "$f" | tail -15 >&2 || true; done; exit 1; }
cleanup() { "$root/scripts/cluster-down" --dir "$dir" --wipe >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT

for port in 2379 2380 3181 3182 3183 7071 7072; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    fail "port $port is in use: this test needs the ports scripts/cluster-up uses"
  fi
done

"$root/scripts/cluster-up" --dir "$dir" > "$dir/up.out" || fail "cluster-up failed: $(cat "$dir/up.out")"
for name in etcd bookie1 bookie2 bookie3 server1 server2; do
  grep -q "^$name: started" "$dir/up.out" || fail "cluster-up did not start $name"
done

# The range may take a moment to get its first owner (controller election,
# assignment): the client retries what is retry-safe, so allow a few tries.
ok=0
for _ in $(seq 1 30); do
  if "$ctl" --endpoint 127.0.0.1:7071,127.0.0.1:7072 put hello world >/dev/null 2>&1; then ok=1; break; fi
  sleep 1
done
[ "$ok" = 1 ] || fail "put through the cluster never succeeded"
for ep in 127.0.0.1:7071 127.0.0.1:7072; do
  got="$("$ctl" --endpoint "$ep" get hello)" || fail "get through $ep failed"
  [[ "$got" == *world* ]] || fail "get through $ep returned '$got', want world"
done

status="$("$ledgerkv" cluster --metadata etcd://127.0.0.1:2379 status)" || fail "cluster status failed"
echo "$status"
grep -q "^bookies: 3 up, 0 down" <<<"$status" || fail "status does not show 3 bookies up"
grep -q "^servers: 2" <<<"$status" || fail "status does not show 2 servers"
grep -q "^range .* table=default .* owner_live=yes" <<<"$status" || fail "status shows no live owner of the default range"

"$root/scripts/cluster-up" --dir "$dir" > "$dir/up2.out" || fail "second cluster-up failed"
[ "$(grep -c 'already running' "$dir/up2.out")" = 6 ] || fail "second cluster-up restarted something: $(cat "$dir/up2.out")"

pids="$(cat "$dir"/*.pid)"
"$root/scripts/cluster-down" --dir "$dir" --wipe || fail "cluster-down failed"
for pid in $pids; do
  if kill -0 "$pid" 2>/dev/null; then fail "process $pid still runs after cluster-down"; fi
done
[ ! -e "$dir" ] || fail "cluster-down --wipe left $dir"
echo "PASS"
