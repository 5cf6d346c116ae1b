#!/usr/bin/env bash
# Style checks: clang-format (.clang-format) over the tracked C++ files and ruff (ruff.toml) over the tracked
# Python files; exits non-zero naming every file that differs. The pinned tools come from the project venv
# (requirements.txt; scripts/setup.sh installs them), else from PATH.
#   bash scripts/lint.sh                  check format and ruff
#   bash scripts/lint.sh --fix            rewrite the files instead (clang-format -i, ruff check --fix)
#   bash scripts/lint.sh --python-only    ruff alone
#   bash scripts/lint.sh --tidy [FILE...] also clang-tidy (.clang-tidy) over FILEs (default: every tracked
#                                         .cpp under src/ and apps/); needs a configured build
#                                         (DROPE_BUILD_DIR, default build/) and takes about a minute a file
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

fix=0 tidy=0 python_only=0 tidy_files=()
while (($#)); do
  case "$1" in
    --fix) fix=1 ;;
    --tidy) tidy=1 ;;
    --python-only) python_only=1 ;;
    -h | --help) sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "lint.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) ((tidy)) || { echo "lint.sh: file arguments only follow --tidy" >&2; exit 2; }; tidy_files+=("$1") ;;
  esac
  shift
done

tool() {  # the venv's copy of a tool, else PATH's
  if [ -x "$ROOT/.venv/bin/$1" ]; then echo "$ROOT/.venv/bin/$1"; else command -v "$1" || true; fi
}
CLANG_FORMAT="${CLANG_FORMAT:-$(tool clang-format)}"
RUFF="${RUFF:-$(tool ruff)}"
[ -n "$CLANG_FORMAT" ] || { echo "lint.sh: clang-format not found: run bash scripts/setup.sh" >&2; exit 2; }
[ -n "$RUFF" ] || { echo "lint.sh: ruff not found: run bash scripts/setup.sh" >&2; exit 2; }
cf_major="$("$CLANG_FORMAT" --version | sed -n 's/.*version \([0-9]*\).*/\1/p')"
if [ "${cf_major:-0}" -lt 16 ]; then
  echo "lint.sh: $CLANG_FORMAT is version ${cf_major:-?}; .clang-format needs 16 or later (the pinned wheel)" >&2
  exit 2
fi

status=0
mapfile -t cxx < <(git ls-files -- '*.cpp' '*.h' '*.cu' '*.cuh' ':!:third_party/**')
mapfile -t py < <(git ls-files -- '*.py' ':!:third_party/**')
((python_only)) && cxx=()

if ((${#cxx[@]})); then
  if ((fix)); then
    "$CLANG_FORMAT" -i --style=file "${cxx[@]}"
  elif ! "$CLANG_FORMAT" --dry-run -Werror --style=file "${cxx[@]}" 2>/tmp/lint-format.$$; then
    grep -o '^[^:]*:[0-9]*:[0-9]*: error' /tmp/lint-format.$$ | cut -d: -f1 | sort -u |
      sed 's/^/lint: not clang-formatted: /' >&2
    echo "lint: fix with: bash scripts/lint.sh --fix" >&2
    status=1
  fi
  rm -f /tmp/lint-format.$$
fi

if ((${#py[@]})); then
  if ((fix)); then
    "$RUFF" check --fix --quiet "${py[@]}" || status=1
  else
    "$RUFF" check --quiet "${py[@]}" || status=1
  fi
fi

if ((tidy)); then
  CLANG_TIDY="${CLANG_TIDY:-$(tool clang-tidy)}"
  [ -n "$CLANG_TIDY" ] || { echo "lint.sh: clang-tidy not found" >&2; exit 2; }
  build="${DROPE_BUILD_DIR:-$ROOT/build}"
  [ -f "$build/compile_commands.json" ] || { echo "lint.sh: no $build/compile_commands.json: run bash scripts/setup.sh" >&2; exit 2; }
  ((${#tidy_files[@]})) || mapfile -t tidy_files < <(git ls-files -- 'src/*.cpp' 'apps/*.cpp')
  # The build's commands without its precompiled header, which clang cannot read; a unity source (DROPE_UNITY)
  # becomes one entry per file it includes, so that each file is checked with its own command.
  db="$(mktemp -d)"
  trap 'rm -rf "$db"' EXIT
  python3 - "$build/compile_commands.json" "$db/compile_commands.json" <<'EOF'
import json, re, shlex, sys
entries = []
for e in json.load(open(sys.argv[1])):
    if "/Unity/unity_" not in e["file"]:
        entries.append(e)
        continue
    unity = e["file"]
    for src in re.findall(r'^#include "([^"]+)"', open(unity).read(), re.M):
        one = dict(e, file=src)
        one["command"] = e["command"].replace(unity, src)
        entries.append(one)
for e in entries:
    args = e.pop("arguments", None) or shlex.split(e.pop("command"))
    keep, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
        elif a == "-include" and i + 1 < len(args) and "cmake_pch" in args[i + 1]:
            skip = True
        elif a != "-Winvalid-pch":
            keep.append(a)
    e["arguments"] = keep
json.dump(entries, open(sys.argv[2], "w"))
EOF
  "$CLANG_TIDY" --quiet -p "$db" --warnings-as-errors='*' "${tidy_files[@]}" || status=1
fi

exit $status
