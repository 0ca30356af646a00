#!/usr/bin/env python3
"""What keeping a conversation in the KV cache saves: meshnn-llm --interactive over several turns,
against each turn's conversation prefilled afresh (--prompts with "messages", as a stateless chat
API would), same model, same run of this script.

    scripts/chat_bench.py [--ranks 2] [--turns 6] [--words 60] [--new-tokens 64] [--preset tinyllama]
                          [--build build] [--json FILE]

The model is meshnn-llm's generated --preset model (no download). Text needs a tokenizer and a chat
template: a small SentencePiece model is trained here (Debian's python3-sentencepiece, as the tests
do), beside a Zephyr-style template. Every answer runs to --new-tokens (--ignore-eos). Prints per
turn: the prompt tokens, how many came from the cache, and the time to first token of both runs.
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile

import sentencepiece as spm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ("the mesh device tensor shard gather reduce token model layer attention cache prefill decode rank ring "
         "matrix tile weight users prompt stream every").split()
TEMPLATE = """{% for message in messages %}
{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token }}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %}"""


def tokenizer_dir(path):
    with open(os.path.join(path, "corpus.txt"), "w") as f:
        rng = random.Random(3)
        for i in range(2000):
            f.write(" ".join(rng.choice(WORDS) for _ in range(12)) + f" {i}.\n")
    spm.SentencePieceTrainer.train(input=os.path.join(path, "corpus.txt"), model_prefix=os.path.join(path, "tokenizer"),
                                   vocab_size=400, model_type="bpe", byte_fallback=True, minloglevel=2)
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": True, "bos_token": "<s>", "eos_token": "</s>"}, f)
    with open(os.path.join(path, "chat_template.jinja"), "w") as f:
        f.write(TEMPLATE)


def llm(args, extra, stdin=None):
    cmd = [os.path.join(ROOT, "scripts", "mpirun.sh"), "-np", str(args.ranks),
           os.path.join(args.build, "apps", "meshnn-llm"), "--preset", args.preset, "--ignore-eos",
           "--max-new-tokens", str(args.new_tokens), *extra]
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return r.stdout


def parse_arguments(description):
    """The options both chat benchmarks take: the conversation's shape, the model, the output."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--words", type=int, default=60, help="words per user message")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--preset", default="tinyllama")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--json", help="also write the figures here")
    return p.parse_args()


def main():
    args = parse_arguments(__doc__.splitlines()[0])
    with tempfile.TemporaryDirectory() as work:
        tokenizer_dir(work)
        rng = random.Random(1)
        turns = [" ".join(rng.choice(WORDS) for _ in range(args.words)) for _ in range(args.turns)]
        transcript = os.path.join(work, "transcript.jsonl")
        out = llm(args, ["--tokenizer", work, "--interactive", "--transcript", transcript], "\n".join(turns) + "\n")
        kept = [(int(a), int(b), float(c)) for a, b, c in
                re.findall(r"\[(\d+) prompt tokens, (\d+) of them from the cache; first token after ([\d.]+) s", out)]
        with open(transcript) as f:
            conversations = [json.loads(line)["messages"][:-1] for line in f]
        rows = []
        for k, (messages, (prompt, cached, ttft)) in enumerate(zip(conversations, kept)):
            jsonl = os.path.join(work, f"turn{k}.jsonl")
            with open(jsonl, "w") as f:
                f.write(json.dumps({"messages": messages}) + "\n")
            fresh = llm(args, ["--tokenizer", work, "--prompts", jsonl, "--no-stream"])
            fresh_ttft = float(re.search(r"mean time to first token ([\d.]+) s", fresh).group(1))
            rows.append({"turn": k + 1, "prompt_tokens": prompt, "from_cache": cached, "ttft_kept_s": ttft,
                         "ttft_fresh_s": fresh_ttft})
    report(args, rows, "from_cache", "ttft_kept_s", "kept")


def report(args, rows, cached_key, ttft_key, name):
    """Prints one row per turn (prompt tokens, those from the cache, both times to first token and
    their ratio) and writes --json. `name` is the cached side's name in the headings."""
    print(f"{args.preset}, {args.ranks} rank(s), {args.words} words a turn, {args.new_tokens} new tokens an answer")
    print(f"{'turn':>4} {'prompt':>7} {'cached':>7} {'TTFT ' + name + ' s':>13} {'TTFT fresh s':>13} "
          f"{'fresh/' + name:>12}")
    for r in rows:
        print(f"{r['turn']:>4} {r['prompt_tokens']:>7} {r[cached_key]:>7} {r[ttft_key]:>13.2f} "
              f"{r['ttft_fresh_s']:>13.2f} {r['ttft_fresh_s'] / r[ttft_key]:>12.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"preset": args.preset, "ranks": args.ranks, "words": args.words, "new_tokens": args.new_tokens,
                       "turns": rows}, f, indent=1)


if __name__ == "__main__":
    main()
