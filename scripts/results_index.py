#!/usr/bin/env python3
"""Rewrites the index of bench/results/ (the table in bench/results/README.md) from the JSON files.

bench/results/ keeps the latest results file per (machine, mode), named <machine>-<mode>.json
(e.g. h200x2-ht.json: two H200s, `switchyard-bench ht`); a newer run replaces the file and history
stays in git. Run this after adding or replacing a file:

    python3 scripts/results_index.py            # rewrite the table
    python3 scripts/results_index.py --check    # exit 1 if the table is stale or a name is off
"""
import glob
import json
import os
import re
import sys

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "results")
README = os.path.join(RESULTS, "README.md")
BEGIN, END = "<!-- index:begin -->", "<!-- index:end -->"
MAX_FILES = 12
NAME = re.compile(r"^(?P<machine>[a-z0-9]+x[0-9]+)-(?P<mode>[a-z0-9_]+)\.json$")


def describe(path):
    with open(path) as f:
        document = json.load(f)
    records = document.get("records", [])
    meta = document.get("meta", {})
    first = records[0] if records else {}
    commit = str(meta.get("commit") or first.get("commit") or "unknown")[:7]
    date = str(meta.get("date") or first.get("date") or "unknown")
    gpu = meta.get("gpu") or first.get("gpu") or "?"
    shapes = sorted({(r.get("ranks"), r.get("gpus")) for r in records if r.get("mode") != "baseline"})
    layout = ", ".join(f"EP{ranks} on {gpus} GPU(s)" for ranks, gpus in shapes) or "-"
    argv = list(meta.get("argv") or [])
    for i, arg in enumerate(argv):  # where the file was written says nothing about the run
        if arg == "--out" and i + 1 < len(argv):
            del argv[i:i + 2]
            break
        if arg.startswith("--out="):
            del argv[i]
            break
    command = " ".join(["switchyard-bench"] + argv[1:]) if argv else "(not recorded)"
    return commit, date, gpu, layout, len(records), command


def table():
    rows = ["| file | machine | mode | commit | date | GPU | ranks | records | command |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    problems = []
    files = sorted(glob.glob(os.path.join(RESULTS, "*.json")))
    if len(files) > MAX_FILES:
        problems.append(f"{len(files)} results files (at most {MAX_FILES}: one per machine and mode)")
    for path in files:
        name = os.path.basename(path)
        match = NAME.match(name)
        if not match:
            problems.append(f"{name} is not named <machine>-<mode>.json")
            continue
        commit, date, gpu, layout, count, command = describe(path)
        rows.append(f"| [{name}]({name}) | {match['machine']} | {match['mode']} | {commit} | {date} | {gpu} | "
                    f"{layout} | {count} | `{command}` |")
    return "\n".join(rows), problems


def main():
    with open(README) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        sys.exit(f"{README} lacks the {BEGIN} ... {END} markers")
    body, problems = table()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    updated = f"{head}{BEGIN}\n{body}\n{END}{tail}"
    for problem in problems:
        print(f"results_index: {problem}", file=sys.stderr)
    if "--check" in sys.argv[1:]:
        if updated != text:
            print("results_index: bench/results/README.md is stale: run scripts/results_index.py", file=sys.stderr)
        sys.exit(1 if problems or updated != text else 0)
    with open(README, "w") as f:
        f.write(updated)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
