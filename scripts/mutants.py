#!/usr/bin/env python3
"""scripts/mutants.py - does every rule have a test that fails without it?

    scripts/mutants.py [--build DIR] [--list] [ID ...]
    scripts/mutants.py --check

Each line of tests/mutants/rules.jsonl names one rule the code enforces (an
input bound, a type check, a fencing check) and a mutation that deletes it:
`old`, text that occurs exactly once in `file`, and `new`, what replaces it.
For each rule (all, or the IDs given) this applies the mutation, rebuilds
DIR (default build/, configured as scripts/test.sh does), runs the ctest
tests matching the rule's `tests` regex and puts the file back, whatever
happened. A rule is
  killed      a test failed: the rule is tested;
  SURVIVED    every test passed: nothing notices the rule is gone;
  STALE       `old` no longer occurs exactly once (the code moved on: update
              the line, or delete it with the rule);
  BUILDFAIL   the mutation does not compile (rewrite it).
A line with "equivalent" is a rule no client can observe (its reason says
why); it is reported, not counted. Exits 1 when any rule survived or is
stale or failed to build. A build and a test run per rule (the 134 rules of
stop 62: about 22 minutes on 2 cores; the 94 scheduler and GSPMD rules, S and
G, run against unit tests only: about 5 minutes more; 339 rules in all), so
not part of scripts/test.sh; run it after changing a rule or its tests.
--check builds and runs nothing: it reports repeated ids, missing fields or
files, mutations that change nothing and every STALE rule, so that an edit
that leaves a rule behind fails scripts/test.sh at once, not at the next
mutants run.
Needs a clean work tree for the files it mutates: it refuses to start
otherwise.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RULES = os.path.join(ROOT, "tests", "mutants", "rules.jsonl")


def load_rules():
    with open(RULES, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def check(rules):
    """What is wrong with the rules without building anything: repeated
    ids, missing fields or files, an `old` text that does not occur
    exactly once in its file (a rule left behind by an edit), or a
    mutation that changes nothing. One line per problem."""
    problems, seen = [], set()
    for r in rules:
        rid = r.get("id", "?")
        if rid in seen:
            problems.append(f"{rid}: id repeated")
        seen.add(rid)
        if not all(isinstance(r.get(k), str) for k in ("id", "file", "old", "new", "tests")):
            problems.append(f"{rid}: needs id, file, old, new and tests")
            continue
        if r["old"] == r["new"]:
            problems.append(f"{rid}: new is old")
        try:
            with open(os.path.join(ROOT, r["file"]), encoding="utf-8") as f:
                n = f.read().count(r["old"])
        except OSError as e:
            problems.append(f"{rid}: {r['file']}: {e.strerror}")
            continue
        if n != 1:
            problems.append(f"{rid}: its old text occurs {n} times in {r['file']}, not once")
    return problems


def dirty(files):
    r = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--"] + sorted(files),
                       capture_output=True, text=True, check=True)
    return r.stdout.strip()


def run_rule(rule, build):
    path = os.path.join(ROOT, rule["file"])
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.count(rule["old"]) != 1:
        return "STALE"
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(rule["old"], rule["new"]))
        if subprocess.run(["cmake", "--build", build, "-j2"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode != 0:
            return "BUILDFAIL"
        t = subprocess.run(["ctest", "--timeout", "300", "-j2", "-R", rule["tests"]],
                           cwd=build, capture_output=True, text=True)
        if "No tests were found" in t.stdout + t.stderr:
            return "STALE"
        return "killed" if t.returncode != 0 else "SURVIVED"
    finally:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--list", action="store_true", help="list the rules and exit")
    ap.add_argument("--check", action="store_true",
                    help="check that every rule still applies (no build) and exit")
    ap.add_argument("ids", nargs="*")
    a = ap.parse_args()
    rules = load_rules()
    if a.ids:
        known = {r["id"] for r in rules}
        unknown = [i for i in a.ids if i not in known]
        if unknown:
            sys.exit("mutants.py: no rule " + ", ".join(unknown))
        rules = [r for r in rules if r["id"] in a.ids]
    if a.check:
        problems = check(rules)
        for p in problems:
            print("mutants.py:", p)
        print(f"mutants: {len(rules)} rules checked, {len(problems)} problems")
        return 1 if problems else 0
    if a.list:
        for r in rules:
            print(f'{r["id"]:6} {r["file"]}: {r["old"].strip().splitlines()[0][:70]}')
        return 0
    if dirty({r["file"] for r in rules}):
        sys.exit("mutants.py: commit or stash the changes to the files it mutates first")
    bad = 0
    for r in rules:
        verdict = run_rule(r, a.build)
        note = f' (equivalent: {r["equivalent"]})' if "equivalent" in r else ""
        print(f'{r["id"]:6} {verdict:9} {r["file"]}{note}', flush=True)
        if verdict != "killed" and "equivalent" not in r:
            bad += 1
    # Leave the build as the sources are.
    subprocess.run(["cmake", "--build", a.build, "-j2"], stdout=subprocess.DEVNULL)
    print(f"mutants: {len(rules)} rules, {bad} not killed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
