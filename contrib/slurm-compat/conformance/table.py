#!/usr/bin/env python3
"""Turns pytest's junit XML into the per-test table of a conformance run
and checks it against the tests expected to pass.

usage: table.py JUNIT.xml EXPECTED-PASS.txt RESULTS.tsv [--partial]

With --partial (a run of part of the suite), only the expected passes
that ran are checked.

RESULTS.tsv has one line per test: its id, its outcome (passed, failed,
error, skipped) and the first line of pytest's message. Prints the counts
and every expected pass that did not pass; exits 1 if there is one.
"""
import sys
import xml.etree.ElementTree as ET


def outcomes(junit):
    for case in ET.parse(junit).getroot().iter("testcase"):
        # classname is the module's dotted path, then the test's class.
        parts = case.get("classname", "").split(".")
        where = [] if parts[-1][:1].islower() else [parts.pop()]
        test = "::".join(["/".join(parts) + ".py", *where, case.get("name")])
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                outcome = {"failure": "failed", "error": "error"}.get(kind, kind)
                message = (found.get("message") or found.text or "").strip()
                break
        yield test, outcome, message.splitlines()[0][:200] if message else ""


def main(junit, expected_path, results_path, partial=False):
    rows = sorted(outcomes(junit))
    with open(results_path, "w") as out:
        for test, outcome, message in rows:
            out.write(f"{test}\t{outcome}\t{message}\n")
    counts = {}
    for _, outcome, _ in rows:
        counts[outcome] = counts.get(outcome, 0) + 1
    print("conformance: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    with open(expected_path) as f:
        expected = {line.strip() for line in f if line.strip() and not line.startswith("#")}
    passed = {test for test, outcome, _ in rows if outcome == "passed"}
    if partial:
        expected &= {test for test, _, _ in rows}
    regressed = sorted(expected - passed)
    for test in regressed:
        print(f"conformance: expected to pass, did not: {test}")
    newly = sorted(passed - expected)
    for test in newly:
        print(f"conformance: passes, not yet in expected-pass.txt: {test}")
    return 1 if regressed else 0


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5) or sys.argv[4:] not in ([], ["--partial"]):
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:4], partial=len(sys.argv) == 5))
