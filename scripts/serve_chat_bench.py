#!/usr/bin/env python3
"""What prefix reuse saves a chat client of meshnn-llm --serve: the same conversation sent turn by
turn, each request holding the whole conversation so far (as OpenAI-style chat clients send it),
to a server with prefix reuse and to one started with --no-prefix-reuse, same model, same run.

    scripts/serve_chat_bench.py [--ranks 2] [--turns 6] [--words 60] [--new-tokens 64]
                                [--preset tinyllama] [--build build] [--json FILE]

The model is the generated --preset model, with the small SentencePiece tokenizer and Zephyr-style
template scripts/chat_bench.py trains (no download). The first server's answers make the
conversation; the second is sent exactly the same requests. Prints per turn the prompt tokens, how
many the server took from its cache (/metrics), and the time to first token both clients saw.
"""
import http.client
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

from chat_bench import ROOT, WORDS, parse_arguments, report, tokenizer_dir


def start_server(args, work, name, *extra, max_batch=1):
    """meshnn-llm --serve on the generated --preset model and the tokenizer in `work`; returns the
    process and its port once it listens."""
    port_file = os.path.join(work, f"{name}.port")
    log = open(os.path.join(work, f"{name}.log"), "w+")
    cmd = [os.path.join(ROOT, "scripts", "mpirun.sh"), "-np", str(args.ranks),
           os.path.join(args.build, "apps", "meshnn-llm"), "--preset", args.preset, "--tokenizer", work,
           "--ignore-eos", "--max-batch", str(max_batch), "--serve", "--port", "0", "--port-file", port_file, *extra]
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    while not (os.path.exists(port_file) and open(port_file).read().strip()):
        if server.poll() is not None:
            log.seek(0)
            sys.exit(f"the server failed:\n{log.read()[-3000:]}")
        time.sleep(0.2)
    return server, int(open(port_file).read())


def metric(port, name):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/metrics")
    body = conn.getresponse().read().decode()
    conn.close()
    return int(re.search(rf"^meshnn:{name} (\d+)$", body, re.M).group(1))


def chat_turn(port, messages, new_tokens):
    """One streamed request: (seconds to the first token, the answer, prompt tokens, reused tokens)."""
    before = metric(port, "prompt_tokens_reused_total")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    start = time.perf_counter()
    conn.request("POST", "/v1/chat/completions",
                 json.dumps({"messages": messages, "max_tokens": new_tokens, "stream": True,
                             "stream_options": {"include_usage": True}, "return_token_ids": True}),
                 {"Content-Type": "application/json"})
    first, answer, prompt_tokens = None, "", 0
    for line in conn.getresponse():
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
            continue
        event = json.loads(line[6:])
        for choice in event["choices"]:
            if first is None and choice.get("token_ids"):
                first = time.perf_counter() - start
            answer += choice["delta"].get("content", "")
        if event.get("usage"):
            prompt_tokens = event["usage"]["prompt_tokens"]
    conn.close()
    return first, answer, prompt_tokens, metric(port, "prompt_tokens_reused_total") - before


def main():
    args = parse_arguments(__doc__.splitlines()[0])
    rng = random.Random(1)
    turns = [" ".join(rng.choice(WORDS) for _ in range(args.words)) for _ in range(args.turns)]
    rows = []
    with tempfile.TemporaryDirectory() as work:
        tokenizer_dir(work)
        requests = []
        server, port = start_server(args, work, "reuse")
        try:
            messages = []
            for text in turns:
                messages = messages + [{"role": "user", "content": text}]
                requests.append(messages)
                ttft, answer, prompt_tokens, reused = chat_turn(port, messages, args.new_tokens)
                rows.append({"turn": len(rows) + 1, "prompt_tokens": prompt_tokens, "reused": reused,
                             "ttft_reuse_s": ttft})
                messages = messages + [{"role": "assistant", "content": answer}]
        finally:
            server.terminate()
            server.wait(120)
        server, port = start_server(args, work, "fresh", "--no-prefix-reuse")
        try:
            for row, messages in zip(rows, requests):
                ttft, _, _, reused = chat_turn(port, messages, args.new_tokens)
                row["ttft_fresh_s"] = ttft
                assert reused == 0, "--no-prefix-reuse reused tokens"
        finally:
            server.terminate()
            server.wait(120)
    report(args, rows, "reused", "ttft_reuse_s", "reuse")


if __name__ == "__main__":
    main()
