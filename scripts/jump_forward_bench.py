#!/usr/bin/env python3
"""What jump-forward decoding saves structured output: the batch job's constrained requests run with
it (the default) and with --no-jump-forward, in turns, and their generation time compared.

    scripts/jump_forward_bench.py [--ranks 2] [--users 1,4] [--rounds 3] [--preset tinyllama]
                                  [--build build] [--json FILE]

The model is the generated --preset model with the 32000-token SentencePiece tokenizer of
scripts/bench_tokenizer.py (trained here, no download), greedy. Each user's request asks for one
of two answers (the users take them in turn): a tool call, {"name": "get_weather", "arguments":
{"city": ..., "unit": "celsius" or "fahrenheit"}}, and a form of five keys with enums, a boolean and
short strings. Much of such an answer is dictated by its schema (keys, the tool's name, brackets,
an enum's rest once its first letters tell it apart); the rest is drawn. The figures: the job's
whole generation time, the tokens it made, and how many of them the grammars wrote.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_tokenizer import bench_tokenizer  # noqa: E402
from chat_bench import ROOT  # noqa: E402

TOOL_CALL = {"type": "object", "properties": {
    "name": {"const": "get_weather"},
    "arguments": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}},
    "required": ["name", "arguments"], "additionalProperties": False}
FORM = {"type": "object", "properties": {
    "customer_name": {"type": "string", "maxLength": 10},
    "subscription_level": {"enum": ["basic", "premium", "enterprise"]},
    "newsletter_opt_in": {"type": "boolean"},
    "preferred_language": {"enum": ["english", "french", "german"]},
    "account_status": {"enum": ["active", "suspended"]}},
    "required": ["customer_name", "subscription_level", "newsletter_opt_in", "preferred_language", "account_status"],
    "additionalProperties": False}
SCHEMAS = [("tool call", TOOL_CALL), ("form", FORM)]


def run_job(args, tokenizer, users, jump_forward, work):
    prompts = os.path.join(work, f"prompts_{users}.jsonl")
    with open(prompts, "w") as f:
        for u in range(users):
            name, schema = SCHEMAS[u % len(SCHEMAS)]
            f.write(json.dumps({"prompt": f"Answer user {u} with the {name} in JSON:", "max_tokens": 160,
                                "response_format": {"type": "json_schema",
                                                    "json_schema": {"name": "answer", "schema": schema}}}) + "\n")
    record = os.path.join(work, "record.json")
    command = [os.path.join(ROOT, "scripts", "mpirun.sh"), "-np", str(args.ranks),
               os.path.join(args.build, "apps", "meshnn-llm"), "--preset", args.preset, "--tokenizer", tokenizer,
               "--prompts", prompts, "--max-batch", str(users), "--sampling", "greedy", "--no-stream",
               "--json", record]
    if not jump_forward:
        command.append("--no-jump-forward")
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    with open(record) as f:
        return json.load(f)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--users", default="1,4")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--preset", default="tinyllama")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    tokenizer = bench_tokenizer(os.path.join(args.build, "mask_bench"))
    runs = []
    with tempfile.TemporaryDirectory() as work:
        for r in range(args.rounds):
            for users in [int(u) for u in args.users.split(",")]:
                for jump_forward in (True, False):
                    rec = run_job(args, tokenizer, users, jump_forward, work)
                    runs.append({"round": r, "users": users, "jump_forward": jump_forward,
                                 "generation_s": rec["generation_s"], "tokens": rec["generated_tokens"],
                                 "forced_tokens": rec["forced_tokens"], "decode_ms_per_step": rec["decode_ms_per_step"]})
                    print(f"round {r}, {users} user(s), jump-forward {'on ' if jump_forward else 'off'}: "
                          f"{rec['generation_s']:.2f} s, {rec['generated_tokens']} tokens "
                          f"({rec['forced_tokens']:.0f} written by the grammars), "
                          f"{rec['decode_ms_per_step']:.1f} ms per decode step", flush=True)
    print("\nmedian generation time, off over on:")
    for users in [int(u) for u in args.users.split(",")]:
        def median(jump_forward, key):
            return statistics.median(x[key] for x in runs if x["users"] == users and x["jump_forward"] == jump_forward)
        on, off = median(True, "generation_s"), median(False, "generation_s")
        print(f"  {users} user(s): on {on:.2f} s ({median(True, 'tokens'):.0f} tokens, "
              f"{median(True, 'forced_tokens'):.0f} forced), off {off:.2f} s ({median(False, 'tokens'):.0f} tokens): "
              f"{off / on:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"preset": args.preset, "ranks": args.ranks, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
