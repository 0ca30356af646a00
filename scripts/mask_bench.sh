#!/usr/bin/env bash
# What structured output's token mask costs a decode step (build/apps/meshnn-mask-bench) over a
# vocabulary the size of Llama 2's and TinyLlama's (scripts/bench_tokenizer.py: a SentencePiece
# model trained on this machine, kept in $MESHNN_BUILD/mask_bench/). The answers are JSON objects
# such as models are asked for (records with names, numbers, lists, nested objects and sentences),
# compact and pretty-printed, made here from a fixed seed.
#
#   scripts/mask_bench.sh [--steps N] [--shards 1,2,4] [--json FILE]
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$MESHNN_ROOT/scripts/build.sh" >/dev/null
work="$MESHNN_BUILD/mask_bench"
mkdir -p "$work"
tokenizer="$(/usr/bin/python3 "$MESHNN_ROOT/scripts/bench_tokenizer.py" "$work")"
/usr/bin/python3 - "$work/answers.txt" <<'PY'
import json, random, sys
rng = random.Random(5)
words = ("the a mesh device shard tensor rank ring model user cache token weather city river north small large "
         "quick report status error value order item price total customer address street summary note result "
         "because when while after before during using with from into over under between").split()
names = ["Alice", "Bob", "Chen", "Dana", "Émile", "Farah", "Gustavo", "Hana", "Ivan", "Jun"]
def sentence(n):
    return " ".join(rng.choice(words) for _ in range(n)).capitalize() + "."
def record():
    r = {"name": rng.choice(names) + " " + rng.choice(names), "age": rng.randint(18, 90),
         "email": rng.choice(names).lower() + "@example.com", "active": rng.random() < 0.5,
         "score": round(rng.random(), 3), "tags": [rng.choice(words) for _ in range(rng.randint(0, 4))],
         "address": {"street": f"{rng.randint(1, 999)} {rng.choice(words).title()} Street",
                     "city": rng.choice(["Paris", "Lyon", "Zürich", "Tokyo", "Lima"]),
                     "zip": f"{rng.randint(10000, 99999)}"},
         "summary": sentence(rng.randint(8, 30))}
    if rng.random() < 0.3:
        r["orders"] = [{"item": rng.choice(words), "quantity": rng.randint(1, 9), "price": round(rng.random() * 100, 2)}
                       for _ in range(rng.randint(1, 3))]
    return r
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for i in range(200):
        f.write(json.dumps(record(), ensure_ascii=False, indent=2 if i % 2 else None) + "\x1e")
PY
exec "$MESHNN_BUILD/apps/meshnn-mask-bench" --tokenizer "$tokenizer" --answers "$work/answers.txt" "$@"
