#!/bin/bash
# Where one group-commit cycle of the E1, 100-byte, 64-in-flight row of
# ledger-bench goes, from the scheduler's point of view (no code changes).
#
#   bench/tools/e1_cycle_trace.sh [BUILD_DIR]
#
# Runs that row for 6 s, records 0.5 s of scheduler events in its middle
# with `perf sched record` (Debian package linux-perf; run as root), finds
# the threads of the cycle (the bookie's journal thread J: the thread of the
# process that sleeps most in D state; the client's add channel C and the
# bookie's connection thread B: the wake-up cycle J -> C -> B -> J, or
# J -> C -> W -> B -> J with the writer's thread W when the callbacks run
# there, as with --callbacks-on-writer-thread in BENCH_ARGS), and prints
# the median and mean of each step:
# a wake-up (X>Y..Y in: from X waking Y to Y running) or a thread's work
# (Y in..Y>Z), the whole cycle, J's time asleep in D state (the journal
# write and fdatasync) and the rest (CPU work and hand-offs).
# docs/performance.md has figures from it. Environment variables pass
# through to ledger-bench; BENCH_ARGS adds arguments to its command line.
set -euo pipefail
build=${1:-build}
bench="$build/bench/ledger-bench"
[ -x "$bench" ] || { echo "no $bench: build first" >&2; exit 2; }
command -v perf > /dev/null || { echo "perf not found (apt-get install linux-perf)" >&2; exit 2; }
out=$(mktemp -d /tmp/e1_cycle.XXXXXX)
trap 'rm -rf "$out"' EXIT
"$bench" --repeat 1 --seconds 6 --filter E1,Qw1,Qa1/100/64 ${BENCH_ARGS:-} > "$out/bench.txt" 2>&1 &
pid=$!
# The disk probe runs first on one thread; the row has many.
for _ in $(seq 1 300); do
  sleep 0.2
  [ "$(ls "/proc/$pid/task" 2> /dev/null | wc -l)" -gt 10 ] && break
done
sleep 1.5
# The row's threads (they are gone once it ends).
ls "/proc/$pid/task" > "$out/tids" 2> /dev/null || true
perf sched record -o "$out/sched.data" -- sleep 0.5 > /dev/null 2>&1
if ! wait "$pid"; then
  cat "$out/bench.txt" >&2
  exit 1
fi
perf script -i "$out/sched.data" -F tid,time,event,trace 2> /dev/null > "$out/sched.txt"
grep '^E1' "$out/bench.txt" || cat "$out/bench.txt"
python3 - "$out/sched.txt" "$out/tids" <<'PY'
import collections, re, statistics as st, sys
path = sys.argv[1]
tids = {int(t) for t in open(sys.argv[2]).read().split()}
ev, wakes, dsleep = [], collections.Counter(), collections.Counter()
for line in open(path):
    m = re.match(r'\s*(\d+)\s+([\d.]+):\s+(\S+):\s+(.*)', line)
    if not m:
        continue
    tid, t, e, tr = int(m.group(1)), float(m.group(2)) * 1e6, m.group(3), m.group(4)
    if e == 'sched:sched_waking':
        p = int(re.search(r' pid=(\d+)', tr).group(1))
        ev.append((t, 'w', tid, p))
        if tid in tids and p in tids:
            wakes[(tid, p)] += 1
    elif e == 'sched:sched_switch':
        m2 = re.search(r'prev_comm=(.*) prev_pid=(\d+).*prev_state=(\S+) ==> '
                       r'next_comm=(.*) next_pid=(\d+)', tr)
        a, b = int(m2.group(2)), int(m2.group(5))
        ev.append((t, 'o', a, m2.group(3)))
        ev.append((t, 'i', b, None))
        if m2.group(3) == 'D' and a in tids:
            dsleep[a] += 1
if not dsleep:
    sys.exit('no thread of ledger-bench slept in D state: nothing traced')
J = dsleep.most_common(1)[0][0]
# The wake-up cycle from J back to J through 2 or 3 other threads: J -> C
# (the client's add channel) -> B (the bookie's connection) -> J when the
# channel thread runs the writer's callbacks itself (the default), or
# J -> C -> W -> B -> J with the writer's thread between (with
# --callbacks-on-writer-thread). The one seen most often wins.
best = None
for (a, b), n1 in wakes.items():
    if a != J:
        continue
    for (c, d), n2 in wakes.items():
        if c != b or d == J:
            continue
        if len({J, b, d}) == 3 and wakes.get((d, J)):
            score = min(n1, n2, wakes[(d, J)])
            if best is None or score > best[0]:
                best = (score, [b, d])
        for (e_, g), n3 in wakes.items():
            if e_ != d or len({J, b, d, g}) != 4 or not wakes.get((g, J)):
                continue
            score = min(n1, n2, n3, wakes[(g, J)])
            if best is None or score > best[0]:
                best = (score, [b, d, g])
if best is None:
    sys.exit('no J -> C -> (W ->) B -> J wake-up cycle found')
others = best[1]
order = ['J', 'C'] + (['W'] if len(others) == 3 else []) + ['B']
names = {J: 'J'}
for tid, name in zip(others, order[1:]):
    names[tid] = name
seq = []
for t, k, a, b in ev:
    if k == 'w' and a in names and b in names:
        seq.append((t, 'w', names[a] + '>' + names[b]))
    elif k == 'i' and a in names:
        seq.append((t, 'i', names[a]))
    elif k == 'o' and a in names:
        seq.append((t, 'o' + b, names[a]))
# From J waking C: C runs, C wakes the next, ..., J runs, J wakes C.
ring = order[1:] + ['J']
steps, keys = [], []
prev = 'J'
for x, nxt in zip(ring, ring[1:] + ['C']):
    steps += [('i', x), ('w', x + '>' + nxt)]
    keys += [f'{prev}>{x}..{x} in', f'{x} in..{x}>{nxt}']
    prev = x
segs = {k: [] for k in keys}
asleep = []
n = len(seq)
def find(i, kind, who):
    while i < n and not (seq[i][1] == kind and seq[i][2] == who):
        i += 1
    return i
i = 0
merged = 0
while True:
    idx = [find(i, 'w', 'J>C')]
    if idx[0] >= n:
        break
    for kind, who in steps:
        idx.append(find(idx[-1], kind, who))
    if idx[-1] >= n:
        break
    ts = [seq[x][0] for x in idx]
    # A step without its wake-up (its thread was runnable already) would
    # merge two cycles into one: skip from one J>C to the next.
    if idx[-1] != find(idx[0] + 1, 'w', 'J>C'):
        merged += 1
        i = find(idx[0] + 1, 'w', 'J>C')
        continue
    if ts[-1] - ts[0] < 3000:  # a stall is not a cycle
        for k, (x, y) in zip(keys, zip(ts, ts[1:])):
            segs[k].append(y - x)
        d, start = 0.0, None
        for x in range(idx[-2], idx[-1]):
            t, kind, who = seq[x]
            if who == 'J' and kind == 'oD':
                start = t
            elif who == 'J' and kind == 'i' and start is not None:
                d, start = d + t - start, None
        asleep.append(d)
    i = idx[-1]
if not asleep:
    sys.exit('no complete cycle found')
print(f'{len(asleep)} cycles ({merged} skipped: a step without its wake-up); threads ' +
      ' '.join(f'{names[t]}={t}' for t in [J] + others))
for k in keys:
    print(f'  {k:10s} median {st.median(segs[k]):6.1f} us  mean {st.mean(segs[k]):6.1f} us')
cycle = [sum(x) for x in zip(*(segs[k] for k in keys))]
rest = [c - d for c, d in zip(cycle, asleep)]
print(f'  cycle      median {st.median(cycle):6.1f} us  mean {st.mean(cycle):6.1f} us '
      '(not the sum of the medians above)')
print(f'  J in D     median {st.median(asleep):6.1f} us (journal write + fdatasync)')
print(f'  the rest   median {st.median(rest):6.1f} us  mean {st.mean(rest):6.1f} us')
PY
