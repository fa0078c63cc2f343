#!/usr/bin/env python3
"""Adds up JUnit-style XML results (lit, gtest, pytest) and extra steps.

Usage: summarize_tests.py [--step NAME=RC ...] RESULT.xml ...
Prints the failing test names, then one closing line `N passed, M failed`
(`, K skipped` when some were skipped). Exits 1 if anything failed or a
step's exit code was non-zero or a result file is missing.
"""
import argparse
import os
import sys
import xml.etree.ElementTree as ET


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", action="append", default=[],
                        help="NAME=RC: a test step run outside the XML runners")
    parser.add_argument("results", nargs="*", help="JUnit XML files")
    args = parser.parse_args()

    passed = failed = skipped = 0
    failures = []
    for path in args.results:
        if not os.path.exists(path):
            failed += 1
            failures.append(f"{path}: missing (its runner did not finish)")
            continue
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError as e:
            failed += 1
            failures.append(f"{path}: unreadable ({e})")
            continue
        for case in root.iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
                failures.append(name)
            elif case.find("skipped") is not None:
                skipped += 1
            else:
                passed += 1
    for step in args.step:
        name, _, rc = step.partition("=")
        if rc.strip() == "0":
            passed += 1
        else:
            failed += 1
            failures.append(f"{name} (exit code {rc})")

    for f in failures:
        print(f"FAILED: {f}")
    line = f"{passed} passed, {failed} failed"
    if skipped:
        line += f", {skipped} skipped"
    print(line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
