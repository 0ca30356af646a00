#!/usr/bin/env python3
"""What structured output costs a server's decode steps: the same streamed completions sent to one
meshnn-llm --serve, as plain text and with a response_format, rounds taking turns, and the time
between each request's tokens compared.

    scripts/serve_structured_bench.py [--ranks 2] [--users 1,4] [--rounds 5] [--new-tokens 48]
                                      [--preset tinyllama] [--build build] [--json FILE]

The model is the generated --preset model with the 32000-token SentencePiece tokenizer of
scripts/bench_tokenizer.py (trained here, no download), greedy, eos ignored. The response_formats:
json_object (any object: the answer walks through every kind of state) and a json_schema of one
string property (the answer stays in the string's text, the mask's fast case). A request with a
response_format may end before --new-tokens when its value closes; only the time between tokens is
compared.
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_tokenizer import bench_tokenizer  # noqa: E402
from chat_bench import ROOT  # noqa: E402
from serve_chat_bench import start_server  # noqa: E402

FORMATS = {
    "plain": None,
    "json_object": {"type": "json_object"},
    "json_schema (one string)": {"type": "json_schema", "json_schema": {"name": "note", "schema": {
        "type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"],
        "additionalProperties": False}}},
}


def completion(port, prompt, new_tokens, response_format, out):
    """One streamed completion; appends the times its tokens arrived."""
    body = {"prompt": prompt, "max_tokens": new_tokens, "temperature": 0, "stream": True}
    if response_format:
        body["response_format"] = response_format
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    stamps = []
    while True:
        line = response.readline()
        if not line or line.startswith(b"data: [DONE]"):
            break
        if line.startswith(b"data: ") and json.loads(line[6:])["choices"][0]["text"]:
            stamps.append(time.perf_counter())
    conn.close()
    out.append(stamps)


def round_of(port, users, new_tokens, response_format):
    """`users` requests at once; the mean milliseconds between a request's consecutive tokens while
    all of them run (so that every pass timed holds `users` rows, whichever ended first), and the
    tokens made."""
    results, threads = [], []
    for u in range(users):
        prompt = f"Reply to user {u} in JSON:"
        threads.append(threading.Thread(target=completion, args=(port, prompt, new_tokens, response_format, results)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    start, end = max(s[0] for s in results if s), min(s[-1] for s in results if s)
    gaps, seconds = 0, 0.0
    for stamps in results:
        inside = [t for t in stamps if start <= t <= end]
        gaps += max(len(inside) - 1, 0)
        seconds += inside[-1] - inside[0] if len(inside) > 1 else 0.0
    return 1e3 * seconds / gaps if gaps else float("nan"), sum(len(s) for s in results)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--users", default="1,4")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--preset", default="tinyllama")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    users = [int(u) for u in args.users.split(",")]
    tokenizer = bench_tokenizer(os.path.join(args.build, "mask_bench"))
    figures = {"preset": args.preset, "ranks": args.ranks, "new_tokens": args.new_tokens, "rounds": []}
    with tempfile.TemporaryDirectory() as work:
        os.symlink(tokenizer, os.path.join(work, "tokenizer.model"))
        server, port = start_server(args, work, "server", max_batch=max(users))
        try:
            round_of(port, 1, 4, None)  # the first passes make the buffers
            for r in range(args.rounds):
                for u in users:
                    for name, response_format in FORMATS.items():
                        ms, tokens = round_of(port, u, args.new_tokens, response_format)
                        figures["rounds"].append({"round": r, "users": u, "format": name, "ms_between_tokens": ms,
                                                  "tokens": tokens})
                        print(f"round {r}, {u} user(s), {name}: {ms:.1f} ms between tokens ({tokens} tokens)",
                              flush=True)
        finally:
            server.terminate()
            server.wait()
    print("\nmedian ms between a request's tokens while all ran, and against plain text:")
    for u in users:
        def median_of(name):
            return statistics.median(x["ms_between_tokens"] for x in figures["rounds"] if x["users"] == u and
                                     x["format"] == name and x["ms_between_tokens"] == x["ms_between_tokens"])
        plain = median_of("plain")
        for name in FORMATS:
            ms = median_of(name)
            print(f"  {u} user(s), {name}: {ms:.1f} ms ({ms / plain:.3f}x plain)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
