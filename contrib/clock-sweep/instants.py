#!/usr/bin/env python3
"""The instants of the clock sweep: the next occurrence (after now) of each moment where a test that reads the wall
clock could tell the hour, the day, the week, the month or the time zone's offset apart.

Prints one line per instant: NAME TZ EPOCH-SECONDS LOCAL-TIME. The sweep (run.sh) runs the time suites with the
wall clock of every process (the tests, the daemons they start, the servers) at that instant, and TZ set.

The instants come after now, so that the kernel's file times (which the clock shim does not move) always lie in
the past of the shifted clock, as on a device; and so that the same list keeps meaning the same moments, whatever
the date of the run.
"""
import datetime as dt
import sys
from zoneinfo import ZoneInfo

UTC = dt.timezone.utc
# Ten seconds before the edge: the suite starts at the instant and runs through the edge.
LEAD = dt.timedelta(seconds=10)


def next_wall(now, zone, hour, minute, second, weekday=None, month_end=False):
    """The first local time after now in zone at hour:minute:second (on weekday, 0 = Monday; or on a month's last
    day)."""
    day = now.astimezone(zone).date()
    for _ in range(800):
        candidate = dt.datetime(day.year, day.month, day.day, hour, minute, second, tzinfo=zone)
        last_day = (day + dt.timedelta(days=1)).month != day.month
        if candidate > now and (weekday is None or day.weekday() == weekday) and (not month_end or last_day):
            return candidate
        day += dt.timedelta(days=1)
    raise SystemExit("instants: no such local time within 800 days")


def next_offset_change(now, zone, forward):
    """The first change of zone's UTC offset after now that moves the clocks forward (or back), minus LEAD; found by
    the hour, then to the second (a change need not fall on the hour: Lord Howe's falls on the half hour)."""
    hour = dt.timedelta(hours=1)
    moment = now.replace(minute=0, second=0, microsecond=0) + hour
    for _ in range(24 * 800):
        before = (moment - hour).astimezone(zone).utcoffset()
        after = moment.astimezone(zone).utcoffset()
        if before != after and (after > before) == forward:
            low, high = moment - hour, moment  # the offset at low is the old one, at high the new one
            while high - low > dt.timedelta(seconds=1):
                middle = low + (high - low) / 2
                if middle.astimezone(zone).utcoffset() == before:
                    low = middle
                else:
                    high = middle
            change = high.replace(microsecond=0)
            return (change - LEAD).astimezone(zone)
        moment += hour
    raise SystemExit("instants: no offset change within 800 days")


def instants(now):
    utc, berlin, york = ZoneInfo("UTC"), ZoneInfo("Europe/Berlin"), ZoneInfo("America/New_York")
    return [
        ("utc-day-ends", "UTC", next_wall(now, utc, 23, 59, 50)),
        ("utc-day-begins", "UTC", next_wall(now, utc, 0, 0, 10)),
        # The last minute in which a daily reset at 00:00 lies more than 20 hours ahead.
        ("utc-0359", "UTC", next_wall(now, utc, 3, 59, 0)),
        ("sunday-into-monday", "Europe/Berlin", next_wall(now, berlin, 23, 59, 50, weekday=6)),
        ("month-ends", "America/New_York", next_wall(now, york, 23, 59, 50, month_end=True)),
        ("clocks-go-forward", "Europe/Berlin", next_offset_change(now, berlin, forward=True)),
        ("clocks-go-back", "Europe/Berlin", next_offset_change(now, berlin, forward=False)),
    ]


def main():
    """`instants.py`: every instant, the next of each from a few minutes ahead; `instants.py NAME`: that one only,
    computed now (a whole sweep takes long enough for an instant computed at its start to have passed); with
    `--after EPOCH`, counted from then instead."""
    arguments = sys.argv[1:]
    now = dt.datetime.now(UTC) + dt.timedelta(minutes=3)
    if "--after" in arguments:
        at = arguments.index("--after")
        now = dt.datetime.fromtimestamp(float(arguments[at + 1]), UTC)
        del arguments[at:at + 2]
    chosen = [entry for entry in instants(now) if not arguments or entry[0] in arguments]
    if arguments and len(chosen) != len(set(arguments)):
        raise SystemExit(f"instants: no instant named {' '.join(arguments)}")
    for name, zone, moment in chosen:
        print(name, zone, int(moment.timestamp()), moment.strftime("%Y-%m-%dT%H:%M:%S%z(%a)"))


if __name__ == "__main__":
    main()
