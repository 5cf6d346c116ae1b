# shellcheck shell=bash
# The environment knobs and arguments of scripts/setup.sh, test.sh, sanitize.sh and gpu-check.sh, checked before
# any work starts (docs/robustness.md#scripts-and-studies): a bad one ends the script with one line
# `WHO: message` naming it and what was expected, exit status 2. Numbers are ASCII decimals; switches are 0 or 1.
# Sourced; every function takes WHO (the script's name in messages) first. A check never prints on success.

knob_fail() {  # WHO MESSAGE
  printf '%s: %s\n' "$1" "$2" >&2
  exit 2
}

# knob_int WHO NAME LO HI: NAME, when set, is an ASCII integer in LO..HI (set but empty is refused too).
knob_int() {
  local who="$1" name="$2" lo="$3" hi="$4"
  [ -n "${!name+x}" ] || return 0
  local v="${!name}"
  if ! [[ "$v" =~ ^[0-9]{1,9}$ ]] || ((10#$v < lo || 10#$v > hi)); then
    knob_fail "$who" "$name must be an integer in $lo..$hi, got '$v'"
  fi
}

# knob_switch WHO NAME: NAME, when set, is 0 or 1 (empty: the default).
knob_switch() {
  local who="$1" name="$2"
  case "${!name-}" in
    "" | 0 | 1) ;;
    *) knob_fail "$who" "$name must be 0 or 1, got '${!name}'" ;;
  esac
}

# knob_on_off WHO NAME: NAME, when set, is a CMake boolean (ON/OFF, 1/0, TRUE/FALSE, YES/NO; any case).
knob_on_off() {
  local who="$1" name="$2"
  [ -n "${!name-}" ] || return 0
  case "${!name,,}" in
    on | off | 1 | 0 | true | false | yes | no) ;;
    *) knob_fail "$who" "$name must be ON or OFF, got '${!name}'" ;;
  esac
}

# knob_out_dir WHO NAME BASE: NAME, when set and not empty, names a directory the script creates or writes into
# (relative paths from BASE): not an existing file, not below one, not a dangling link.
knob_out_dir() {
  local who="$1" name="$2" base="$3"
  [ -n "${!name-}" ] || return 0
  local p="${!name}"
  [[ "$p" = /* ]] || p="$base/$p"
  if [ -L "$p" ] && [ ! -e "$p" ]; then knob_fail "$who" "$name=${!name}: a dangling symbolic link"; fi
  if [ -e "$p" ] && [ ! -d "$p" ]; then knob_fail "$who" "$name=${!name}: exists and is not a directory"; fi
  local up="$p"
  while [ "$up" != / ] && [ "$up" != . ]; do
    up="$(dirname "$up")"
    if [ -e "$up" ]; then
      [ -d "$up" ] || knob_fail "$who" "$name=${!name}: $up is not a directory"
      break
    fi
  done
}

# knob_cuda_archs WHO NAME VALUE: a ';'-separated list of CUDA architectures (80, 90, 90a, 100f, ...).
knob_cuda_archs() {
  local who="$1" name="$2" v="$3"
  [[ "$v" =~ ^[0-9]{2,3}[af]?(\;[0-9]{2,3}[af]?)*$ ]] ||
    knob_fail "$who" "$name must be a ';'-separated list of CUDA architectures such as 80;90, got '$v'"
}

# knob_no_args WHO ARGS...: the script takes no arguments.
knob_no_args() {
  local who="$1"
  shift
  [ $# -eq 0 ] || knob_fail "$who" "takes no arguments (its settings are environment variables), got '$1'"
}

# The knobs of scripts/setup.sh (scripts/test.sh checks them too, before its first step).
setup_knobs() {
  local who="$1" root="$2" w
  knob_int "$who" DROPE_JOBS 1 1024
  knob_out_dir "$who" DROPE_BUILD_DIR "$root"
  knob_on_off "$who" DROPE_WITH_CUDA
  if [ -n "${DROPE_PYTHON-}" ] && ! command -v "$DROPE_PYTHON" >/dev/null 2>&1; then
    knob_fail "$who" "DROPE_PYTHON=$DROPE_PYTHON: not an executable python (expected e.g. python3.11)"
  fi
  local -a words
  read -r -a words <<<"${DROPE_CMAKE_ARGS:-}"
  for w in "${words[@]}"; do
    [[ "$w" =~ ^-[DU][A-Za-z_][A-Za-z0-9_]*((:[A-Z]+)?=.*)?$ ]] ||
      knob_fail "$who" "DROPE_CMAKE_ARGS: '$w' is not a -DNAME=VALUE or -UNAME configure argument"
    if [[ "$w" == -DDROPE_CUDA_ARCHS=* ]]; then knob_cuda_archs "$who" "DROPE_CMAKE_ARGS: DROPE_CUDA_ARCHS" "${w#*=}"; fi
  done
  read -r -a words <<<"${DROPE_SETUP_TARGETS:-}"
  for w in "${words[@]}"; do
    [[ "$w" =~ ^[A-Za-z0-9_][A-Za-z0-9_.+-]*$ ]] || knob_fail "$who" "DROPE_SETUP_TARGETS: '$w' is not a target name"
  done
}

# The knobs of scripts/sanitize.sh.
sanitize_knobs() {
  local who="$1" root="$2"
  knob_int "$who" DROPE_JOBS 1 1024
  knob_out_dir "$who" DROPE_ASAN_BUILD_DIR "$root"
}

# sanitize_args WHO ARGS...: the arguments scripts/sanitize.sh passes to the test binaries: googletest's own flags.
sanitize_args() {
  local who="$1" a
  shift
  for a in "$@"; do
    case "$a" in
      --gtest_filter=* | --gtest_repeat=* | --gtest_shuffle | --gtest_random_seed=* | --gtest_break_on_failure | \
        --gtest_also_run_disabled_tests | --gtest_fail_fast | --gtest_brief=[01] | --gtest_color=* | \
        --gtest_print_time=[01] | --gtest_list_tests | --gtest_output=*) ;;
      *) knob_fail "$who" "unknown argument '$a' (expected googletest flags such as --gtest_filter=PATTERN)" ;;
    esac
  done
  for a in "$@"; do
    case "$a" in
      --gtest_repeat=* | --gtest_random_seed=*)
        [[ "${a#*=}" =~ ^-?[0-9]{1,9}$ ]] || knob_fail "$who" "${a%%=*} must be an integer, got '${a#*=}'" ;;
    esac
  done
}

# ctest_args WHO ARGS...: the arguments scripts/test.sh passes to ctest, which ignores ones it does not know.
ctest_args() {
  local who="$1"
  shift
  while [ $# -gt 0 ]; do
    case "$1" in
      --output-on-failure | -V | -VV | --verbose | --extra-verbose | -N | --show-only | --stop-on-failure | \
        --rerun-failed | --schedule-random | -Q | --quiet | --progress | -U | --union | --no-tests=error | \
        --no-tests=ignore | --print-labels) shift ;;
      -R | -E | -L | -LE | --tests-regex | --exclude-regex | --label-regex | --label-exclude | -FA | -FS | -FC | \
        --fixture-exclude-any | --fixture-exclude-setup | --fixture-exclude-cleanup | --output-log | -O | \
        --output-junit)
        [ $# -ge 2 ] || knob_fail "$who" "ctest option $1 needs a value"
        shift 2 ;;
      --stop-time | --test-load)
        [ $# -ge 2 ] || knob_fail "$who" "ctest option $1 needs a value"
        shift 2 ;;
      -j | --parallel | --timeout | --repeat-until-fail)
        [ $# -ge 2 ] || knob_fail "$who" "ctest option $1 needs a value"
        [[ "$2" =~ ^[1-9][0-9]{0,5}$ ]] || knob_fail "$who" "ctest option $1 must be a positive integer, got '$2'"
        shift 2 ;;
      -j*)
        [[ "${1#-j}" =~ ^[1-9][0-9]{0,5}$ ]] || knob_fail "$who" "ctest option -j must be a positive integer, got '${1#-j}'"
        shift ;;
      --repeat)
        [ $# -ge 2 ] && [[ "$2" =~ ^(until-fail|until-pass|after-timeout):[1-9][0-9]{0,5}$ ]] ||
          knob_fail "$who" "ctest option --repeat needs until-fail:N, until-pass:N or after-timeout:N"
        shift 2 ;;
      *) knob_fail "$who" "unknown ctest argument '$1' (ctest ignores arguments it does not know)" ;;
    esac
  done
}
