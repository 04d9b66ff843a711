#!/usr/bin/env python3
"""Breaks the two-node `latency` benchmark's send → handler time into segments.

Input: the CSV that `SHARDBOX_BENCH_TIMELINE=<file> cargo bench --bench delivery --
--backend postgres --workload latency` writes (`micros,point,node,shard,key`; the points
are described in shardbox-core's telemetry module). For every measured message it follows
its key (its `received_at`) and its shard through the points, and prints each segment's
mean, p50, p90 and p99, for the messages served by the sending node (`local`: woken in
process) and by the other one (`remote`: woken by a notification), and the segments' means
over the slowest 1 %.
Usage: python3 scripts/latency-breakdown.py <file> [sending node, default bench-0]
"""
import bisect
import collections
import sys

SENDER = sys.argv[2] if len(sys.argv) > 2 else "bench-0"
by_key = collections.defaultdict(dict)
points = collections.defaultdict(list)  # (point, node, shard) -> sorted times
for line in open(sys.argv[1]):
    t, point, node, shard, key = line.rstrip("\n").split(",")
    t, shard, key = int(t), int(shard), int(key)
    if point in ("write", "written", "read", "handler"):
        d = by_key[key]
        d.setdefault(point, t)
        if point == "read":
            d["node"], d["shard"] = node, shard
    else:
        points[(point, node, shard)].append(t)
for v in points.values():
    v.sort()


def first(point, node, shard, after, before=None):
    v = points.get((point, node, shard), [])
    i = bisect.bisect_left(v, after)
    if i < len(v) and (before is None or v[i] <= before):
        return v[i]
    return None


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


segments = collections.defaultdict(lambda: collections.defaultdict(list))
everyone = []
for key, d in by_key.items():
    if not all(p in d for p in ("write", "written", "read", "handler")):
        continue
    node, shard = d["node"], d["shard"]
    seg = {"send: queued": d["write"] - key, "send: write+commit": d["written"] - d["write"]}
    if node == SENDER:
        path = "local"
        woken = first("woken", node, shard, d["write"])
    else:
        path = "remote"
        # The notifier is handed the shard inside the write, after its commit.
        asked = first("notify", "", shard, d["write"], d["written"])
        sent = first("notified", "", shard, asked) if asked else None
        heard = first("heard", node, shard, asked) if asked else None
        if None in (asked, sent, heard):
            continue
        seg["commit -> NOTIFY sent"] = sent - asked
        seg["NOTIFY sent -> heard"] = heard - sent
        woken = first("woken", node, shard, heard)
    if woken is not None and woken <= d["read"]:
        turn = first("turn", node, shard, woken, d["read"])
        if turn is not None:
            seg["woken -> worker's turn"] = turn - woken
            picked = first("picked_up", node, shard, turn, d["read"])
            seg["turn -> page read"] = d["read"] - turn
            seg["(turns with a pick-up, share)"] = 1000 if picked else 0
        else:
            seg["woken -> page read (no turn seen)"] = d["read"] - woken
    seg["page read -> handler"] = d["handler"] - d["read"]
    seg["TOTAL"] = d["handler"] - key
    for name, us in seg.items():
        segments[path][name].append(us)
    everyone.append((seg["TOTAL"], seg))

for path, segs in segments.items():
    print(f"{path}: {len(segs['TOTAL'])} messages (ms)")
    for name, xs in segs.items():
        print(f"  {name:34s} n={len(xs):6d} mean={sum(xs) / len(xs) / 1000:7.2f} "
              f"p50={pct(xs, .5) / 1000:7.2f} p90={pct(xs, .9) / 1000:7.2f} p99={pct(xs, .99) / 1000:7.2f}")
everyone.sort(key=lambda e: -e[0])
slowest = everyone[: max(1, len(everyone) // 100)]
print(f"slowest 1 % ({len(slowest)} messages), mean per segment (ms)")
means = collections.defaultdict(list)
for _, seg in slowest:
    for name, us in seg.items():
        means[name].append(us)
for name, xs in means.items():
    print(f"  {name:34s} n={len(xs):5d} mean={sum(xs) / len(xs) / 1000:7.2f}")
