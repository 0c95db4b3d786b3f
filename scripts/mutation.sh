#!/usr/bin/env bash
# Mutation score of the modules that decide what the suite reports (issue 35), with mutmut 3.
#   scripts/mutation.sh                          every module of pyproject's [tool.mutmut.modules]
#   scripts/mutation.sh loadgen/sweep/stats.py   the named modules only
# Each module runs alone, in a copy of the tree's tracked files (`git add` a new test first) under
# MUTATION_DIR (default a temporary folder, removed; mutmut writes mutants/ beside its config),
# against its own fast unit tests, at
# `nice -n 10` with MUTATION_JOBS children (default 2). Prints one line per module: killed,
# survived, no tests, timeout, score = killed / (mutants - written off); then the survivors not
# written off in tests/mutation/survivors.md, per function (each name with MUTATION_VERBOSE=1;
# `mutmut show NAME` in the copy shows a mutant). Exits 1 when such a survivor is left.
# Time on the 2-core machine: loadgen/sweep/stats.py 131 mutants in about 35 s; see
# tests/mutation/survivors.md for every module's time.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
JOBS=${MUTATION_JOBS:-2}
"$PY" -c "import mutmut" 2>/dev/null || { echo "mutation: mutmut is not installed (pip install -e '.[test]')"; exit 2; }
mapfile -t modules < <("$PY" - "$@" <<'PY'
import sys, tomllib
table = tomllib.load(open("pyproject.toml", "rb"))["tool"]["mutmut"]["modules"]
for name in sys.argv[1:] or table:
    if name not in table:
        sys.exit(f"mutation: {name} is not in [tool.mutmut.modules] of pyproject.toml ({', '.join(table)})")
    print(name)
PY
)
[ ${#modules[@]} -gt 0 ] || exit 2
work=${MUTATION_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/mutation.XXXXXX")}
group=
stop_group() { [ -z "$group" ] || kill -- "-$group" 2>/dev/null || true; }
trap 'stop_group; [ -n "${MUTATION_DIR:-}" ] || rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
status=0
for module in "${modules[@]}"; do
    copy="$work/${module//\//_}"
    rm -rf "$copy" && mkdir -p "$copy"
    git ls-files -z -- benchmarks harness loadgen reference_impl reportgen scripts tests pyproject.toml \
        | xargs -0 cp --parents -t "$copy"
    "$PY" - "$module" "$copy/pyproject.toml" <<'PY'
import json, re, sys, tomllib
module, path = sys.argv[1:]
text = open(path).read()
tool = tomllib.loads(text)["tool"]["mutmut"]
one = {"source_paths": [module], "also_copy": tool["also_copy"], "pytest_add_cli_args": tool["pytest_add_cli_args"],
       "pytest_add_cli_args_test_selection": tool["modules"][module]}
section = "[tool.mutmut]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in one.items())
text = re.sub(r"^\[tool\.mutmut(\.modules)?\]\n.*?(?=^\[(?!tool\.mutmut)|\Z)", "", text, flags=re.S | re.M)
open(path, "w").write(text + "\n" + section)
PY
    start=$(date +%s)
    # NOTE: in a session of its own, so the servers a killed mutant's test started go with it
    (cd "$copy" && PYTHONPATH= exec setsid --wait nice -n 10 "$PY" -m mutmut run --max-children "$JOBS" \
        >"$copy/run.log" 2>&1) &
    group=$!
    ok=0; wait "$group" || ok=$?
    kill -- "-$group" 2>/dev/null || true
    group=
    [ "$ok" -eq 0 ] || {
        echo "mutation: $module: mutmut failed, last lines of its log:"; tr '\r' '\n' <"$copy/run.log" | tail -5
        status=1; continue; }
    (cd "$copy" && "$PY" -m mutmut results --all true 2>/dev/null) >"$copy/results.txt"
    "$PY" - "$module" "$copy/results.txt" tests/mutation/survivors.md "$(( $(date +%s) - start ))" <<'PY' || status=1
import collections, fnmatch, os, re, sys
module, results, survivors, took = sys.argv[1:]
status = dict(re.findall(r"^\s*(\S+): (.+)$", open(results).read(), re.M))
# NOTE: a written-off name may end in * (every mutant of that function: e.g. argparse help text)
patterns = re.findall(r"`([\w.]+__mutmut_(?:\d+|\*))`", open(survivors).read())
counts = collections.Counter(status.values())
is_off = {name: any(fnmatch.fnmatchcase(name, p) for p in patterns) for name in status}
left = sorted(name for name, s in status.items() if s in ("survived", "no tests") and not is_off[name])
off = sum(1 for name in status if is_off[name] and status[name] != "killed")
scored = len(status) - off
killed = counts["killed"] + counts["timeout"]
score = f"{100 * killed / scored:.1f}%" if scored else "n/a"
print(f"mutation: {module}: {len(status)} mutants, {killed} killed ({counts['timeout']} by timeout), "
      f"{counts['survived']} survived, {counts['no tests']} no tests, {off} written off; score {score} "
      f"of the rest; {took} s")
by_function = collections.Counter(name.rsplit("__mutmut_", 1)[0] for name in left)
if left:
    print(f"  left {len(left)}: " + ", ".join(f"{f} {n}" for f, n in sorted(by_function.items())))
if os.environ.get("MUTATION_VERBOSE"):
    for name in left:
        print(f"  left: {name} ({status[name]})")
sys.exit(1 if left else 0)
PY
done
exit "$status"
