#!/usr/bin/env bash
# The main job on its embedded default, with the real CLIs: set up + build (idempotent), build the small
# corpus (Jane Austen from a pinned Debian package, SentencePiece vocab 2048), pretrain a tiny RoPE model
# at context C = 256 for 600 steps (drope-train), DroPE-recalibrate its step-450 checkpoint with QK-norm for
# the remaining 150 steps (drope-train, phase drope: the same budget as RoPE), then
# evaluate RoPE, RoPE+PI, RoPE+NTK, RoPE+YaRN (eval-time, factor 2) and DroPE on perplexity and NIAH at
# C and 2C (drope-eval ppl / niah) and print the side-by-side table (drope-eval compare).
#
# Outputs in runs/quickstart/ (DROPE_RUN_DIR): rope/ and drope/ (run dirs: log.jsonl, checkpoints that
# are model directories), eval/ (per-method ppl/niah .json/.csv/.md, ppl.png/svg: ppl vs length),
# results.md (both tables, printed at the end), results-{ppl,niah}.{md,json,csv}, timing.txt.
# Re-running reuses the corpus, finished training runs and finished evaluations; DROPE_FORCE=1 redoes
# training and evaluation. About 4 minutes on 2 idle cores after the install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${DROPE_SKIP_SETUP:-0}" != 1 ]; then bash "$ROOT/scripts/setup.sh"; fi
cd "$ROOT"
BIN="${DROPE_BUILD_DIR:-$ROOT/build}"
RUN="${DROPE_RUN_DIR:-runs/quickstart}"
C=256
LB=(); command -v stdbuf >/dev/null && LB=(stdbuf -oL)   # line-buffered progress when piped
T0=$(date +%s)
stage() { printf '\n\033[1m[quickstart %3ds] %s\033[0m\n' "$(( $(date +%s) - T0 ))" "$*"; }

if [ "${DROPE_FORCE:-0}" = 1 ]; then rm -rf "$RUN"; fi
mkdir -p "$RUN/eval"
: >"$RUN/timing.txt"
mark() { echo "$1 $(( $(date +%s) - T0 ))s" >>"$RUN/timing.txt"; }

stage "1/5 corpus: Jane Austen (r-cran-janeaustenr), SentencePiece BPE vocab 2048, token shards"
bash scripts/make_corpus.sh --small
DATA=runs/data/small
HAYSTACK=runs/corpus/small/heldout   # Persuasion: never trained on
mark corpus

# A finished run has its final checkpoint; a killed one resumes; a fresh one starts clean.
train() {  # train CONFIG RUN_DIR STEPS
  local cfg=$1 dir=$2 steps=$3
  local final; final="$dir/checkpoints/$(printf 'step-%08d' "$steps")"
  if [ -f "$final/model.safetensors" ]; then echo "already trained: $final"; return; fi
  if compgen -G "$dir/checkpoints/step-*" >/dev/null; then
    "${LB[@]}" "$BIN/drope-train" "$cfg" --set run.out_dir="$dir" --resume
  else
    rm -rf "$dir"
    "${LB[@]}" "$BIN/drope-train" "$cfg" --set run.out_dir="$dir"
  fi
}
PRE_STEPS=$(sed -n 's/^  steps: *//p' configs/train/quickstart-pretrain-rope.yaml)
DROPE_STEPS=$(sed -n 's/^  steps: *//p' configs/train/quickstart-drope.yaml)
ROPE_MODEL="$RUN/rope/checkpoints/$(printf 'step-%08d' "$PRE_STEPS")"
# Equal budget: DroPE starts from the RoPE run's checkpoint DROPE_STEPS before its end.
DROPE_INIT="$RUN/rope/checkpoints/$(printf 'step-%08d' $((PRE_STEPS - DROPE_STEPS)))"
DROPE_MODEL="$RUN/drope/checkpoints/$(printf 'step-%08d' "$DROPE_STEPS")"

stage "2/5 pretrain a tiny RoPE model at C = $C (configs/train/quickstart-pretrain-rope.yaml)"
train configs/train/quickstart-pretrain-rope.yaml "$RUN/rope" "$PRE_STEPS"
mark pretrain

stage "3/5 DroPE: from the RoPE run's step $((PRE_STEPS - DROPE_STEPS)), drop RoPE in every layer, add QK-norm, recalibrate $DROPE_STEPS steps at C = $C (equal budget; configs/train/quickstart-drope.yaml)"
[ -f "$DROPE_INIT/model.safetensors" ] || { echo "quickstart: $DROPE_INIT is missing (the pretraining config must keep it: checkpoint_every, keep_last)" >&2; exit 1; }
if [ -f "$DROPE_MODEL/model.safetensors" ]; then echo "already trained: $DROPE_MODEL"; else
  if compgen -G "$RUN/drope/checkpoints/step-*" >/dev/null; then
    "${LB[@]}" "$BIN/drope-train" configs/train/quickstart-drope.yaml --set run.out_dir="$RUN/drope" --resume
  else
    rm -rf "$RUN/drope"
    "${LB[@]}" "$BIN/drope-train" configs/train/quickstart-drope.yaml --set run.out_dir="$RUN/drope" --set run.init="$DROPE_INIT"
  fi
fi
mark drope

# name | model | extra options
METHODS=(
  "RoPE|$ROPE_MODEL|"
  "RoPE+PI|$ROPE_MODEL|--rope-scaling pi --factor 2"
  "RoPE+NTK|$ROPE_MODEL|--rope-scaling ntk --factor 2"
  "RoPE+YaRN|$ROPE_MODEL|--rope-scaling yarn --factor 2"
  "DroPE|$DROPE_MODEL|"
)
slug() { echo "$1" | tr 'A-Z+' 'a-z-'; }

stage "4/5 perplexity on the held-out split at C = $C and 2C = $((2 * C)) (drope-eval ppl, sliding windows)"
PPL_JSON=()
for m in "${METHODS[@]}"; do
  IFS='|' read -r name model opts <<<"$m"
  out="$RUN/eval/ppl-$(slug "$name")"
  if [ ! -f "$out.json" ]; then
    # shellcheck disable=SC2086
    "$BIN/drope-eval" ppl --model "$model" --tokenizer "$DATA" $opts --label "$name" --data "$DATA" \
      --lengths $C $((2 * C)) --max-tokens 16384 --out "$out" | { grep -E "ppl=" || true; }
  else echo "$name: reusing $out.json"; fi
  PPL_JSON+=("$out.json")
done
# One plot with every method: re-draw the last method's curve with the others beside it.
IFS='|' read -r name model opts <<<"${METHODS[-1]}"
# shellcheck disable=SC2086
"$BIN/drope-eval" ppl --model "$model" --tokenizer "$DATA" $opts --label "$name" --data "$DATA" \
  --lengths $C $((2 * C)) --max-tokens 16384 --with "${PPL_JSON[@]:0:${#PPL_JSON[@]}-1}" \
  --out "$RUN/eval/ppl" >/dev/null
echo "plot: $RUN/eval/ppl.png"
mark ppl

stage "5/5 needle in a haystack (drope-eval niah, 8 trials per task, greedy): single_1 at C; single_1, multikey_1, multivalue at 2C"
# At C = 256 only the one-needle prompt fits with this tokenizer (a multi-needle prompt needs ~250-290 tokens).
NIAH_JSON=()
for m in "${METHODS[@]}"; do
  IFS='|' read -r name model opts <<<"$m"
  for spec in "C|$C|single_1" "2C|$((2 * C))|single_1,multikey_1,multivalue"; do
    IFS='|' read -r tag len tasks <<<"$spec"
    out="$RUN/eval/niah-$(slug "$name")-$tag"
    if [ ! -f "$out.json" ]; then
      # shellcheck disable=SC2086
      "$BIN/drope-eval" niah --model "$model" --tokenizer "$DATA" $opts --label "$name @$tag" --lengths "$len" \
        --tasks "$tasks" --trials 8 --max-new-tokens 32 --haystack "$HAYSTACK" --seed 0 --batch-size 4 \
        --out "$out" >/dev/null
    fi
    echo "$name @ $len tokens: $(tail -n1 "$out.md" | awk -F'|' '{gsub(/ /, "", $(NF-1)); print $(NF-1)}') (mean score, $tasks)"
    NIAH_JSON+=("$out.json")
  done
done
mark niah

"$BIN/drope-eval" compare "${PPL_JSON[@]}" --out "$RUN/results-ppl" \
  --title "Perplexity (held-out split), tiny models trained at C = $C for $PRE_STEPS steps (DroPE: $((PRE_STEPS - DROPE_STEPS)) RoPE + $DROPE_STEPS recalibration); eval-time scaling factor 2" >/dev/null
"$BIN/drope-eval" compare "${NIAH_JSON[@]}" --out "$RUN/results-niah" \
  --title "NIAH score (string_match_all ×100, 8 trials per task)" >/dev/null
{ cat "$RUN/results-ppl.md"; echo; cat "$RUN/results-niah.md"; } >"$RUN/results.md"
mark total
stage "done in $(( $(date +%s) - T0 )) s — $RUN/results.md (results-{ppl,niah}.{json,csv}), plot $RUN/eval/ppl.png"
cat "$RUN/results.md"
