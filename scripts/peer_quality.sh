#!/usr/bin/env bash
# The quality comparison of docs/recipes.md ("Against the peers"): fairseq and OpenNMT-py trained
# on Multi30k German->English for the same 60-minute CPU budget and the same model size as
# configs/recipes/small_cpu.yaml, each with the settings its own documentation gives (below),
# decoded with beam 4 and length penalty 0.6 and scored like mt-eval (cased, detokenized sacreBLEU
# and chrF on all 1,000 lines of test2016).
#
# Uses the peers' virtual environments and prepared data: $PEERS_SCRIPTS names the directory of
# the peers' install and run scripts (run its install_*.sh and prepare_data.sh first), $CORPUS
# the line-aligned Multi30k files (valid.de, test.en, ...). Results:
# $RUNS/<peer>-quality-$TAG/result.json (result-$CHECKPOINT.json for a later DECODE_ONLY=1 decoding).
#
#   PEERS_SCRIPTS=DIR CORPUS=DIR bash scripts/peer_quality.sh fairseq     # or: onmt
#
# Tuning fairseq (docs/recipes.md, "Against a tuned fairseq"): FAIRSEQ_LR, FAIRSEQ_DROPOUT,
# FAIRSEQ_WARMUP, FAIRSEQ_WD and FAIRSEQ_SEED replace the documented values below, BATCH_TOKENS
# and THREADS the batch and thread count, BUDGET_S the seconds of training (MAX_UPDATES the
# updates, for a comparison at equal updates); CHECKPOINT=last decodes the last checkpoint and
# CHECKPOINT=avg3 the average of the last three (one every 200 updates) instead of the best,
# CHECKPOINT=E_N (fairseq) the one saved at update N in epoch E; KEEP_CHECKPOINTS (3) how many of
# those fairseq keeps, for scores at equal updates from a run's earlier checkpoints.
# Decoding: LENPEN (0.6) the length penalty (fairseq's --lenpen, OpenNMT-py's GNMT -alpha);
# SPLIT=valid decodes and scores the valid set instead of the test set, for choosing LENPEN on
# valid as `mt-eval --split valid --alpha A` does for mt_transformer.
# Another pair: SRC and TGT (de, en by default), CORPUS its files, and BENCH_DATA a directory
# that prepare_data.sh filled from them (CORPUS_DIR=... BENCH_DATA=... bash prepare_data.sh).
#
# Settings, and where they come from:
# - fairseq: the IWSLT'14 German-English Transformer example of fairseq's examples/translation
#   README, its small-data recipe: Adam (0.9, 0.98), lr 5e-4, inverse_sqrt with 4,000 warmup
#   updates, dropout 0.3, weight decay 1e-4, label smoothing 0.1, 4,096 tokens per batch, no
#   clipping; training stopped by --stop-time-hours; the checkpoint with the best valid loss
#   (checkpoint_best.pt) is decoded, as the README does. Length penalty: fairseq's --lenpen 0.6
#   (log-prob / length^0.6; not the GNMT formula, which fairseq does not have). fairseq's post-norm
#   encoder layers take torch's "BetterTransformer" fast path at inference, which fails on torch
#   2.13 ("Mask Type should be defined"); checkpoint_activations=True at generation turns that
#   path off and changes nothing else in eval mode.
# - OpenNMT-py: the Transformer settings of its FAQ ("How do I use the Transformer model?"):
#   Adam (0.9, 0.998), noam schedule, learning_rate 2, 8,000 warmup steps, dropout 0.1,
#   attention dropout 0.1, label smoothing 0.1, Glorot init, 4,096 tokens per batch (the FAQ's
#   gradient accumulation left out: with it the budget would hold a quarter of the updates).
#   OpenNMT-py has no time limit, so training runs under `timeout` with a checkpoint every 100
#   steps and the newest complete checkpoint is decoded. Length penalty: -length_penalty wu
#   -alpha 0.6, the GNMT formula mt_transformer uses.
# - Both: d_model 256, 3+3 layers, 4 heads, FFN 1024, all embeddings tied; fairseq post-norm
#   (its default), OpenNMT-py pre-norm (its only layout); the peers' joint 8,000-piece BPE, 2 threads, max output input+50 (fairseq)
#   or 200 pieces (OpenNMT-py has no length ratio).
set -euo pipefail
PEER="${1:?usage: peer_quality.sh fairseq|onmt}"
PEERS_SCRIPTS="${PEERS_SCRIPTS:?set PEERS_SCRIPTS to the directory of the peer scripts}"
source "$PEERS_SCRIPTS/common.sh"
BUDGET_S="${BUDGET_S:-3600}"
# The documented warmups (fairseq 4,000, OpenNMT-py 8,000) are longer than the ~1,700 updates the
# budget holds; WARMUP_FIT=N runs the same settings with the warmup fitted to the budget instead.
FAIRSEQ_WARMUP="${FAIRSEQ_WARMUP:-${WARMUP_FIT:-4000}}"
FAIRSEQ_LR="${FAIRSEQ_LR:-5e-4}"
FAIRSEQ_DROPOUT="${FAIRSEQ_DROPOUT:-0.3}"
FAIRSEQ_WD="${FAIRSEQ_WD:-0.0001}"
FAIRSEQ_SEED="${FAIRSEQ_SEED:-42}"
MAX_UPDATES="${MAX_UPDATES:-1000000}"   # a run of so many updates instead of BUDGET_S (set it long enough)
CHECKPOINT="${CHECKPOINT:-best}"
SRC="${SRC:-de}"
TGT="${TGT:-en}"
LENPEN="${LENPEN:-0.6}"
SPLIT="${SPLIT:-test}"
ONMT_WARMUP="${WARMUP_FIT:-8000}"
CORPUS="${CORPUS:?set CORPUS to the directory of the line-aligned Multi30k files}"
OUT="$RUNS/$PEER-quality-$TAG"
DATA="$BENCH_DATA/quality"   # the whole valid and test sets, in the peers' pieces
mkdir -p "$DATA" "$OUT"

if [ ! -s "$DATA/test.de" ]; then
  "$TOOLS_PY" - "$BENCH_DATA/spm.model" "$CORPUS" "$DATA" <<'PY'
import sys, sentencepiece as spm
model, corpus, out = sys.argv[1:]
sp = spm.SentencePieceProcessor(model_file=model)
for split in ("valid", "test"):
    for lang in ("de", "en"):
        with open(f"{corpus}/{split}.{lang}", encoding="utf-8") as f, \
                open(f"{out}/{split}.{lang}", "w", encoding="utf-8") as g:
            for line in f:
                g.write(" ".join(sp.encode(line.strip(), out_type=str)) + "\n")
PY
fi

# A run's own decoding writes hyp.test and result.json; a later one (DECODE_ONLY=1) names its
# files by the checkpoint, e.g. result-avg3.json, so that each decoding keeps its result.
NAMED=""
if [ "${DECODE_ONLY:-0}" = 1 ]; then NAMED="-$CHECKPOINT"; fi
if [ "$SPLIT" != test ] || [ "$LENPEN" != 0.6 ]; then NAMED="$NAMED-$SPLIT-lenpen$LENPEN"; fi

score() {  # score HYP_PIECES UPDATES -> result$NAMED.json (BLEU and chrF with signatures, like mt-eval)
  "$TOOLS_PY" - "$1" "$CORPUS/$SPLIT.$TGT" "$BENCH_DATA/spm.model" "$OUT/train_measure.json" "$PEER" "$2" \
      > "$OUT/result$NAMED.json" <<'PY'
import json, sys, sacrebleu, sentencepiece as spm
hyp_path, ref_path, model, measure, peer, updates = sys.argv[1:]
sp = spm.SentencePieceProcessor(model_file=model)
hyps = [sp.decode(line.split()) for line in open(hyp_path, encoding="utf-8")]
refs = [line.rstrip("\n") for line in open(ref_path, encoding="utf-8")]
assert len(hyps) == len(refs), (len(hyps), len(refs))
bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
b, c = bleu.corpus_score(hyps, [refs]), chrf.corpus_score(hyps, [refs])
print(json.dumps({"peer": peer, "updates": int(updates), "bleu": round(b.score, 2), "chrf": round(c.score, 2),
                  "bleu_signature": str(bleu.get_signature()), "chrf_signature": str(chrf.get_signature()),
                  "train_wall_s": json.load(open(measure))["wall_s"]}, indent=1))
PY
  cat "$OUT/result$NAMED.json"
}

case "$PEER" in
fairseq)
  B="$PEERS_DIR/fairseq/bin"
  export PYTHONPATH="$PEERS_SCRIPTS/shims/fairseq_py311${PYTHONPATH:+:$PYTHONPATH}"
  if [ "${DECODE_ONLY:-0}" != 1 ]; then
    rm -rf "$OUT"/*
    "$B/fairseq-preprocess" --source-lang "$SRC" --target-lang "$TGT" --trainpref "$BENCH_DATA/sp/train" \
        --validpref "$DATA/valid" --testpref "$DATA/test" --destdir "$OUT/bin" \
        --joined-dictionary --workers 2 > "$OUT/prepare.stdout" 2>&1
    STOP_H=$("$TOOLS_PY" -c "print($BUDGET_S / 3600)")
    $MEASURE "$OUT/train_measure.json" -- "$B/fairseq-train" "$OUT/bin" --cpu --seed "$FAIRSEQ_SEED" --num-workers 0 \
        --arch transformer --encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 256 --decoder-embed-dim 256 \
        --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 --encoder-attention-heads 4 \
        --decoder-attention-heads 4 --share-all-embeddings \
        --optimizer adam --adam-betas '(0.9, 0.98)' --clip-norm 0.0 \
        --lr "$FAIRSEQ_LR" --lr-scheduler inverse_sqrt --warmup-updates "$FAIRSEQ_WARMUP" \
        --dropout "$FAIRSEQ_DROPOUT" --weight-decay "$FAIRSEQ_WD" \
        --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
        --max-tokens "$BATCH_TOKENS" --max-update "$MAX_UPDATES" --stop-time-hours "$STOP_H" \
        --save-interval-updates 200 --keep-interval-updates "${KEEP_CHECKPOINTS:-3}" --no-epoch-checkpoints \
        --log-interval 100 --log-format simple --save-dir "$OUT/ckpt" > "$OUT/train.log" 2>&1
  fi
  MODEL="$OUT/ckpt/checkpoint_$CHECKPOINT.pt"   # best (valid loss) or last
  if [ "$CHECKPOINT" = avg3 ]; then  # the mean of the last three interval checkpoints' weights
    MODEL="$OUT/ckpt/average3.pt"
    "$B/python" - "$MODEL" $(ls "$OUT"/ckpt/checkpoint_*_*.pt | awk -F_ '{print $NF, $0}' | sort -n | tail -3 | cut -d' ' -f2) <<'PY'
import sys, torch
out, paths = sys.argv[1], sys.argv[2:]
saved = [torch.load(p, map_location="cpu", weights_only=False) for p in paths]
mean = {k: sum(s["model"][k].double() for s in saved).div(len(saved)).to(v.dtype) for k, v in saved[-1]["model"].items()}
saved[-1]["model"] = mean
torch.save(saved[-1], out)
print("averaged", *paths)
PY
  fi
  UPDATES=$(grep -o 'num_updates [0-9]*' "$OUT/train.log" | tail -1 | cut -d' ' -f2)
  case "$CHECKPOINT" in *_*) UPDATES="${CHECKPOINT##*_}" ;; esac   # an interval checkpoint: E_N
  "$B/fairseq-generate" "$OUT/bin" --cpu --path "$MODEL" --gen-subset "$SPLIT" \
      --beam 4 --lenpen "$LENPEN" --max-len-a 1 --max-len-b 50 --batch-size 32 --num-workers 0 \
      --model-overrides "{'checkpoint_activations': True}" \
      > "$OUT/generate$NAMED.out" 2> "$OUT/generate$NAMED.stderr"
  grep '^H-' "$OUT/generate$NAMED.out" | sed 's/^H-//' | sort -n -k1,1 | cut -f3 > "$OUT/hyp.$SPLIT$NAMED"
  score "$OUT/hyp.$SPLIT$NAMED" "${UPDATES:-0}"
  ;;
onmt)
  B="$PEERS_DIR/onmt/bin"
  if [ "${DECODE_ONLY:-0}" != 1 ]; then
    rm -rf "$OUT"/*
    sed -e "s#@DATA@#$BENCH_DATA#g" -e "s#@OUT@#$OUT#g" -e "s#@BATCH_TOKENS@#$BATCH_TOKENS#g" \
        -e "s#@LOG_EVERY@#100#g" -e "s#@STEPS@#1000000#g" \
        -e "s#^save_checkpoint_steps:.*#save_checkpoint_steps: ${SAVE_EVERY:-100}#" \
        -e "s#^keep_checkpoint:.*#keep_checkpoint: 2#" -e "s#^valid_steps:.*#valid_steps: 500#" \
        -e "s#path_src: \"$BENCH_DATA/sp/valid100.de\"#path_src: \"$DATA/valid.de\"#" \
        -e "s#path_tgt: \"$BENCH_DATA/sp/valid100.en\"#path_tgt: \"$DATA/valid.en\"#" \
        -e "s#^adam_beta2:.*#adam_beta2: 0.998#" -e "s#^decay_method:.*#decay_method: noam#" \
        -e "s#^learning_rate:.*#learning_rate: 2.0#" -e "s#^warmup_steps:.*#warmup_steps: $ONMT_WARMUP#" \
        "$PEERS_SCRIPTS/configs/onmt.yaml.tmpl" > "$OUT/config.yaml"
    "$B/onmt_build_vocab" -config "$OUT/config.yaml" -n_sample -1 > "$OUT/vocab.stdout" 2>&1
    $MEASURE "$OUT/train_measure.json" -- timeout "$BUDGET_S" "$B/onmt_train" -config "$OUT/config.yaml" \
        -log_file "$OUT/train.log" > "$OUT/train.stdout" 2>&1 || true   # stopped by the budget
  fi
  MODEL=""   # the newest checkpoint that loads (the budget may have cut the last save short)
  for m in $(ls -t "$OUT"/model_step_*.pt); do
    if "$PEERS_DIR/onmt/bin/python" -c "import torch, sys; torch.load(sys.argv[1], weights_only=False)" "$m" 2>/dev/null; then
      MODEL="$m"; break
    fi
  done
  echo "decoding $MODEL" | tee "$OUT/model_used$NAMED"
  "$B/onmt_translate" -model "$MODEL" -src "$DATA/$SPLIT.$SRC" -output "$OUT/hyp.$SPLIT$NAMED" -beam_size 4 \
      -batch_size 32 -batch_type sents -max_length 200 -length_penalty wu -alpha "$LENPEN" -gpu -1 \
      > "$OUT/decode$NAMED.stdout" 2>&1
  score "$OUT/hyp.$SPLIT$NAMED" "$(basename "$MODEL" .pt | grep -o '[0-9]*$' || echo 0)"
  ;;
*) echo "unknown peer: $PEER (fairseq or onmt)" >&2; exit 2 ;;
esac
