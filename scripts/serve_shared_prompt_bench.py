#!/usr/bin/env python3
"""What sharing a system prompt's KV cache between slots saves: several users of meshnn-llm --serve
send, at the same moment, chat requests that begin with the same long system prompt and end with
questions of their own. One server copies the common start from the slot that prefilled it; the
other is started with --no-prefix-reuse and prefills every prompt whole. Both run side by side on
the same model and take the rounds in turn, so they share the machine's state.

    scripts/serve_shared_prompt_bench.py [--ranks 2] [--users 4] [--system-words 300] [--words 12]
                                         [--new-tokens 8] [--rounds 3] [--preset tinyllama]
                                         [--build build] [--json FILE] [--server-args "..."]

Every round has a system prompt of its own, so no slot holds it when the round starts: the reuse
of a slot's own last request (which the server did before sharing) finds nothing, as without
reuse. Answers are greedy (temperature 0); in bfloat16 activations the two servers' passes differ in
shape and so in rounding, and the generated model's nearly tied tokens can then differ (with
--server-args "--act-dtype float32 --kv-dtype float32" they agree). Prints per round and server the users' times to first
token (mean and last), the round's time to the last answer, and the round's prompt tokens and
those the server took from its cache (/metrics).
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import random
import statistics
import tempfile
import time

from chat_bench import ROOT, WORDS, tokenizer_dir
from serve_chat_bench import metric, start_server


def ask(port, messages, new_tokens):
    """One streamed greedy chat request: (seconds to its first token, seconds to its end, token ids)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    start = time.perf_counter()
    conn.request("POST", "/v1/chat/completions",
                 json.dumps({"messages": messages, "max_tokens": new_tokens, "temperature": 0, "stream": True,
                             "return_token_ids": True}),
                 {"Content-Type": "application/json"})
    first, ids = None, []
    for line in conn.getresponse():
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
            continue
        for choice in json.loads(line[6:])["choices"]:
            if choice.get("token_ids"):
                first = first if first is not None else time.perf_counter() - start
                ids += choice["token_ids"]
    conn.close()
    return first, time.perf_counter() - start, ids


def play_round(port, conversations, new_tokens):
    """Every user's request at once; returns the figures of the round and the answers."""
    before = metric(port, "prompt_tokens_reused_total"), metric(port, "prompt_tokens_total")
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(len(conversations)) as pool:
        results = list(pool.map(lambda m: ask(port, m, new_tokens), conversations))
    wall = time.perf_counter() - start
    ttfts = [r[0] for r in results]
    return {"mean_ttft_s": statistics.mean(ttfts), "last_ttft_s": max(ttfts), "round_s": wall,
            "reused_tokens": metric(port, "prompt_tokens_reused_total") - before[0],
            "prompt_tokens": metric(port, "prompt_tokens_total") - before[1]}, [r[2] for r in results]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--users", type=int, default=4)
    p.add_argument("--system-words", type=int, default=300)
    p.add_argument("--words", type=int, default=12, help="words per user question")
    p.add_argument("--new-tokens", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--preset", default="tinyllama")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--json", help="also write the figures here")
    p.add_argument("--server-args", default="", help="more meshnn-llm options for both servers")
    args = p.parse_args()
    rng = random.Random(7)
    sentence = lambda n: " ".join(rng.choice(WORDS) for _ in range(n))  # noqa: E731
    rows, same, answers = [], 0, 0
    with tempfile.TemporaryDirectory() as work:
        tokenizer_dir(work)
        servers = {}
        try:
            for name, extra in (("shared", []), ("whole", ["--no-prefix-reuse"])):
                servers[name] = start_server(args, work, name, *extra, *args.server_args.split(), max_batch=args.users)
            for r in range(args.rounds):
                system = sentence(args.system_words)
                conversations = [[{"role": "system", "content": system}, {"role": "user", "content": sentence(args.words)}]
                                 for _ in range(args.users)]
                row = {"round": r + 1}
                got = {}
                # Which server goes first alternates, so neither always meets the machine warmer.
                for name in (("shared", "whole") if r % 2 == 0 else ("whole", "shared")):
                    row[name], got[name] = play_round(servers[name][1], conversations, args.new_tokens)
                same += sum(a == b for a, b in zip(got["shared"], got["whole"]))
                answers += args.users
                rows.append(row)
        finally:
            for server, _ in servers.values():
                server.terminate()
                server.wait(120)
    print(f"{args.preset}, {args.ranks} rank(s), {args.users} users at once behind a system prompt of "
          f"{args.system_words} words, {args.words} words a question, {args.new_tokens} new tokens an answer")
    print(f"{'round':>5} {'server':>7} {'prompt':>7} {'cached':>7} {'mean TTFT s':>12} {'last TTFT s':>12} "
          f"{'round s':>8}")
    for row in rows:
        for name in ("shared", "whole"):
            f = row[name]
            print(f"{row['round']:>5} {name:>7} {f['prompt_tokens']:>7} {f['reused_tokens']:>7} "
                  f"{f['mean_ttft_s']:>12.2f} {f['last_ttft_s']:>12.2f} {f['round_s']:>8.2f}")
        print(f"{'':>5} {'whole/shared':>36} {row['whole']['mean_ttft_s'] / row['shared']['mean_ttft_s']:>5.2f} "
              f"{row['whole']['last_ttft_s'] / row['shared']['last_ttft_s']:>12.2f} "
              f"{row['whole']['round_s'] / row['shared']['round_s']:>8.2f}")
    print(f"greedy answers alike on both servers: {same} of {answers}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"preset": args.preset, "ranks": args.ranks, "users": args.users,
                       "system_words": args.system_words, "server_args": args.server_args, "words": args.words, "new_tokens": args.new_tokens,
                       "answers_alike": same, "answers": answers, "rounds": rows}, f, indent=1)


if __name__ == "__main__":
    main()
