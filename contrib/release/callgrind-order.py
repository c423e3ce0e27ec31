"""The function order for the linker (contrib/release/uploadq.order) from callgrind profiles of the release binary.

    callgrind-order.py BINARY PROFILE...   > uploadq.order

Prints, one per line, every function of BINARY that ran in any PROFILE (valgrind --tool=callgrind --demangle=no
output: the names as the binary has them, C++'s mangled too). Names the binary does not define (libc, libcurl, SQLite) are left out.

A daemon sends to one kind of server, so a profile whose file name starts with "daemon-" is one protocol's daemon:
the functions every daemon ran come first, then those of fewer daemons, each set of daemons' functions together
(tus's alone, RUFH's and tus's...), then the commands' own; within each, the most instructions of their own first.
A daemon then keeps its code in the fewest pages: the kernel maps a program's code 64 KiB around each page touched.
"""
import collections
import os
import re
import subprocess
import sys

NAME = re.compile(r"\((\d+)\)(?: (.*))?")


def own_instructions(path):
    """Each function's own instructions in one profile (calls excluded)."""
    cost = collections.Counter()
    names = {}
    current = None
    call_line = False
    with open(path) as profile:
        for line in profile:
            if line.startswith(("fn=", "cfn=")):
                key, rest = line.rstrip("\n").split("=", 1)
                match = NAME.match(rest)
                if match:
                    if match.group(2):
                        names[match.group(1)] = match.group(2)
                    name = names.get(match.group(1))
                else:
                    name = rest
                if key == "fn":
                    current = name
                    cost[current] += 0
            elif line.startswith("calls="):
                call_line = True  # the next cost line is the callee's, not this function's
            elif line[:1].isdigit() or line[:1] in "+-*":
                if call_line:
                    call_line = False
                elif current is not None:
                    fields = line.split()
                    if len(fields) >= 2:
                        cost[current] += int(fields[1])
    return cost


def defined_functions(binary):
    listing = subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True, check=True).stdout
    return {fields[2] for fields in (line.split() for line in listing.splitlines())
            if len(fields) == 3 and fields[1] in "tTwW"}


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: callgrind-order.py BINARY PROFILE...")
    defined = defined_functions(sys.argv[1])
    cost = collections.Counter()
    daemons = collections.defaultdict(set)  # function -> the daemons' profiles it ran in
    for path in sys.argv[2:]:
        own = own_instructions(path)
        cost.update(own)
        profile = os.path.basename(path)
        if profile.startswith("daemon-"):
            for name in own:
                daemons[name].add(profile)
    ran = [name for name in cost if name in defined]
    if not ran:
        sys.exit("callgrind-order: no function of the binary ran in the profiles")
    ran.sort(key=lambda name: (-len(daemons[name]), sorted(daemons[name]), -cost[name], name))
    sys.stdout.write("".join(name + "\n" for name in ran))


if __name__ == "__main__":
    main()
