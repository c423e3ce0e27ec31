"""Prints a benchmark table from lines "group|label|wall user sys rss_kib": medians per label, and each label's
wall and CPU time against the group's first label (the peer). Usage: table.py RESULTS TITLE"""
import datetime
import platform
import statistics
import sys

groups = {}
for line in open(sys.argv[1]):
    group, label, times = line.rstrip("\n").split("|")
    wall, user, system, rss = times.split()
    groups.setdefault(group, {}).setdefault(label, []).append((float(wall), float(user) + float(system), int(rss)))
print(f"{sys.argv[2]} — {datetime.date.today()}, {platform.machine()}, {platform.node()}")
print(f"{'':34}{'wall s':>9}{'cpu s':>9}{'peak RSS MiB':>14}{'wall ×peer':>12}{'cpu ×peer':>11}")
for group, labels in groups.items():
    medians = {label: tuple(statistics.median(run[i] for run in runs) for i in range(3)) for label, runs in labels.items()}
    base_wall, base_cpu, _ = next(iter(medians.values()))
    for label, (wall, cpu, rss) in medians.items():
        print(f"{(group + ': ' + label)[:34]:34}{wall:9.2f}{cpu:9.2f}{rss / 1024:14.1f}"
              f"{wall / max(base_wall, 0.001):12.2f}{cpu / max(base_cpu, 0.001):11.2f}")
