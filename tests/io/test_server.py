#!/usr/bin/env python3
"""meshnn-llm --serve, the OpenAI-compatible server, against the batch job on the same model.

    test_server.py BUILD_DIR WORK_DIR MPIEXEC [MPIEXEC_FLAGS...]

A converted Llama directory with a SentencePiece tokenizer trained here and a Zephyr-style chat
template (with Qwen3's enable_thinking switch), served on 2 ranks with 3 decode slots (float32 activations, see COMMON). The clients are
Python's own HTTP libraries, and every answer is compared with what meshnn-llm's batch job
(--prompts, --output) makes of the same request, which the MPI tests compare with float64
references.

1. Concurrent completions, more than the slots (some wait, some join the running batch), half of
   them streamed: each gives exactly the batch job's tokens and text; the stream's pieces add up to
   the text; the usage counts are right. A prompt given as token ids gives the same.
2. Chat completions (whole and streamed) give the batch job's answer to the same "messages". A
   conversation's second turn takes the first turn's tokens from the cache (prefix reuse) and
   still answers as the batch job does. A request's chat_template_kwargs replace the server's
   --chat-template-kwargs in the rendering: the batch job's answer with the same kwargs.
3. Log-probabilities (completions' logprobs, chat's logprobs and top_logprobs), whole and
   streamed, against numpy's log-softmax of the batch job's logits for the same request.
4. A seeded top-p request, sent twice beside greedy ones, draws the batch job's tokens for the same
   seed and parameters both times.
5. A stop string ends the text just before it (finish_reason "stop"), streamed or not.
6. A client that hangs up frees its slot: the generation counter stops short of the request's
   max_tokens.
7. Bad requests get 400 (404 for no such route) with a message naming the problem, and the server
   goes on serving; /metrics counts them.
8. A second server on the same port fails on every rank with a clear message; --serve with
   --interactive is a usage error.
9. SIGTERM to rank 0 ends the open streams with [DONE], the unfinished ones with finish_reason
   "abort", and every rank exits with status 0.
10. dp: two replicas of one slot each share concurrent requests (one streams back from the second
   replica through rank 0's relay thread) and answer as the batch job does.
11. A model whose chat template meshnn cannot run serves completions and refuses chat, saying why.
12. A server with --reasoning-parser qwen3 and --tool-call-parser hermes, on a tokenizer
   with <think>, </think> and a whole tool call block as pieces and a Qwen3-style template:
   - a seeded chat answer that opens with <think> and draws </think> between other text shows the
     text between them as reasoning_content and the rest as content, whole and streamed, as the
     same request's raw text (from /v1/completions) splits;
   - a request with tools renders its prompt as jinja2 does; an answer of two call blocks (drawn by
     a logit_bias) shows two tool_calls, whole and streamed, with finish_reason "tool_calls"; with
     tool_choice "none" the blocks stay content;
   - with --tool-call-parser llama3_json instead, an answer that is a call object is a tool_call,
     other text is content, and a named tool_choice forces a call object of that function.
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_model_dir as hf  # noqa: E402
from llm_fixtures import (CONFIG, QWEN3_TEMPLATE_FILE, ZEPHYR, edit_tokenizer_config, finish, hf_render,  # noqa: E402
                          outputs, sentencepiece_tokenizer)

BUILD, WORK, MPIEXEC = sys.argv[1], sys.argv[2], sys.argv[3:]
LLM = os.path.join(BUILD, "apps", "meshnn-llm")
# float32 activations: the server's passes have other shapes than the batch job's, and only with
# float32 activations do the kernels' different summation orders stay out of the chosen tokens.
COMMON = ["--weight-dtype", "bfloat16", "--act-dtype", "float32", "--ignore-eos"]
# Zephyr with Qwen3's switch: enable_thinking false adds an empty reasoning block to the generation
# prompt, so a request's chat_template_kwargs change its prompt.
ZEPHYR_THINKING = ZEPHYR.replace("{{ '<|assistant|>' }}", "{{ '<|assistant|>' }}{% if enable_thinking is defined and "
                                 "enable_thinking is false %}{{ '<think></think>' }}{% endif %}")
assert ZEPHYR_THINKING != ZEPHYR
SLOTS, CONTEXT = 3, 224
REASONING_SEED = 15  # a draw whose answer opens with <think> and holds </think> between other text
REASONING_BIAS = 3  # on </think>: drawn now and then, not at every position  # a multiple of 32: the cache holds whole tiles of positions
failures = []

PROMPTS = [("the mesh device gathers every shard", 6), ("prefill the cache and decode", 9),
           ("Café naïve — Ελληνικά", 4), ("every rank reduces the ring", 12), ("tile weight users", 7)]
CONVERSATIONS = [
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "what is a mesh device?"}],
    [{"role": "user", "content": "the ring"}, {"role": "assistant", "content": " reduces"},
     {"role": "user", "content": "and the line?"}],
]


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(cmd, timeout=600):
    return subprocess.run(cmd, capture_output=True, timeout=timeout)


def batch_job(weights, name, lines, *args, logits=False):
    """The batch job's tokens and texts for --prompts lines (and with logits, the logits of every
    generated token, [request, token, vocab])."""
    jsonl, out = os.path.join(WORK, f"{name}.jsonl"), os.path.join(WORK, f"{name}.h5")
    with open(jsonl, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    r = run([*MPIEXEC, "-n", "2", LLM, "--weights", weights, *COMMON, "--prompts", jsonl, "--output", out, *args,
             *(["--save-logits"] if logits else [])])
    if r.returncode != 0:
        print((r.stdout + r.stderr).decode(errors="replace")[-3000:])
        raise RuntimeError(f"the batch job {name} failed")
    tokens, text, _, saved = outputs(out)
    tokens = [[int(t) for t in row if t >= 0] for row in tokens]
    return (tokens, text, saved) if logits else (tokens, text)


def post(port, path, body, method="POST"):
    data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data if method == "POST" else None,
                                     headers={"Content-Type": "application/json"}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=300) as r:
            return r.status, r.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8")


def stream(port, path, body, close_after=None):
    """Reads a server-sent-event stream; returns (status, events), "[DONE]" as the last event. With
    close_after, hangs up after that many events."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", path, json.dumps(dict(body, stream=True)), {"Content-Type": "application/json"})
    response = conn.getresponse()
    events = []
    while True:
        line = response.readline()
        if not line:
            break
        line = line.decode("utf-8").rstrip("\n")  # strict: the stream must be valid UTF-8
        if not line.startswith("data: "):
            continue
        events.append("[DONE]" if line == "data: [DONE]" else json.loads(line[6:]))
        if events[-1] == "[DONE]" or (close_after is not None and len(events) >= close_after):
            break
    conn.close()
    return response.status, events


def gathered(events, chat, logprobs=None):
    """A stream's text, ids, finish reason and usage. With a list as logprobs, the chunks'
    log-probabilities are added to it (chat: the content entries; completions: (token, logprob,
    top_logprobs, text_offset) tuples)."""
    text, ids, finish, usage = "", [], None, None
    for e in events:
        if e == "[DONE]":
            continue
        usage = e.get("usage") or usage
        for c in e["choices"]:
            text += (c["delta"].get("content", "") if chat else c["text"])
            ids += c.get("token_ids", [])
            finish = c["finish_reason"] or finish
            if logprobs is not None and c.get("logprobs"):
                logprobs += completion_logprobs(c["logprobs"]) if not chat else c["logprobs"]["content"]
    return text, ids, finish, usage


def completion_logprobs(lp):
    """A completion's logprobs object as (token, logprob, top_logprobs, text_offset) per token."""
    return list(zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], lp["text_offset"]))


def metric(port, name):
    _, body = post(port, "/metrics", "", method="GET")
    return int(re.search(rf"^meshnn:{name} (\d+)$", body, re.M).group(1))


def start_server(weights, port_file, *args):
    if os.path.exists(port_file):
        os.remove(port_file)
    log = open(os.path.join(WORK, os.path.basename(port_file) + ".log"), "w+b")
    process = subprocess.Popen([*MPIEXEC, "-n", "2", LLM, "--weights", weights, *COMMON, "--serve",
                                "--port-file", port_file, *args], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        if os.path.exists(port_file) and open(port_file).read().strip():
            return process, int(open(port_file).read()), log
        time.sleep(0.2)
    log.seek(0)
    print(log.read().decode(errors="replace")[-3000:])
    raise RuntimeError("the server did not start")


def stop_server(process):
    """Ctrl-C, as a user stops it; killed if it has not ended within a minute."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def check_completions(port, weights, bos, encode):
    """Concurrent completions (more than the slots), half streamed, against the batch job."""
    expected_tokens, expected_text = batch_job(weights, "completions",
                                               [{"prompt": p, "max_tokens": n} for p, n in PROMPTS])
    results = [None] * len(PROMPTS)

    def client(i):
        body = {"model": "served", "prompt": PROMPTS[i][0], "max_tokens": PROMPTS[i][1], "return_token_ids": True}
        if i % 2:
            status, events = stream(port, "/v1/completions", dict(body, stream_options={"include_usage": True}))
            results[i] = (status, *gathered(events, False), events)
        else:
            status, text = post(port, "/v1/completions", body)
            j = json.loads(text)
            c = j["choices"][0]
            results[i] = (status, c["text"], c["token_ids"], c["finish_reason"], j["usage"], j)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, (status, text, ids, finish, usage, raw) in enumerate(results):
        how = "streamed" if i % 2 else "whole"
        prompt_tokens = len([bos] + encode(PROMPTS[i][0]))
        check(status == 200 and ids == expected_tokens[i] and text == expected_text[i] and finish == "length" and
              usage == {"prompt_tokens": prompt_tokens, "completion_tokens": PROMPTS[i][1],
                        "total_tokens": prompt_tokens + PROMPTS[i][1]},
              f"completion {i} ({how}, {len(PROMPTS)} at once on {SLOTS} slots): the batch job's tokens, text and "
              f"usage")
        if i % 2:
            check(raw[-1] == "[DONE]" and all(e["object"] == "text_completion" for e in raw[:-1]),
                  f"completion {i}: the stream is text_completion chunks ending with [DONE]")
        else:
            check(raw["prompt_token_ids"] == [bos] + encode(PROMPTS[i][0]) and raw["object"] == "text_completion",
                  f"completion {i}: prompt_token_ids are the prompt encoded independently, BOS first")
    ids = [bos] + encode(PROMPTS[0][0])
    status, text = post(port, "/v1/completions", {"prompt": ids, "max_tokens": PROMPTS[0][1], "return_token_ids": True})
    check(status == 200 and json.loads(text)["choices"][0]["token_ids"] == expected_tokens[0],
          "a prompt given as token ids answers as its text does")
    return expected_tokens, expected_text


def check_chat(port, weights):
    expected_tokens, expected_text = batch_job(weights, "chat", [{"messages": m, "max_tokens": 5}
                                                                for m in CONVERSATIONS])
    for i, messages in enumerate(CONVERSATIONS):
        status, text = post(port, "/v1/chat/completions", {"messages": messages, "max_tokens": 5,
                                                           "return_token_ids": True})
        j = json.loads(text)
        check(status == 200 and j["object"] == "chat.completion" and
              j["choices"][0]["message"] == {"role": "assistant", "content": expected_text[i]} and
              j["choices"][0]["token_ids"] == expected_tokens[i],
              f"chat {i}: the batch job's answer to the same messages")
        status, events = stream(port, "/v1/chat/completions", {"messages": messages, "max_completion_tokens": 5})
        text, _, finish, _ = gathered(events, True)
        check(status == 200 and text == expected_text[i] and finish == "length" and
              events[0]["choices"][0]["delta"].get("role") == "assistant" and
              events[0]["object"] == "chat.completion.chunk",
              f"chat {i} streamed: the role first, then deltas adding up to the answer")


def check_template_kwargs(port, weights):
    """The server runs with --chat-template-kwargs '{"enable_thinking": true}'; a request's own
    false replaces it: its answer is the batch job's with false, and its prompt is longer than the
    same request's without kwargs by the reasoning block."""
    messages, kwargs = CONVERSATIONS[0], {"enable_thinking": False}
    expected_tokens, expected_text = batch_job(weights, "kwargs", [{"messages": messages, "max_tokens": 5}],
                                               "--chat-template-kwargs", json.dumps(kwargs))
    body = {"messages": messages, "max_tokens": 5, "return_token_ids": True}
    status, text = post(port, "/v1/chat/completions", dict(body, chat_template_kwargs=kwargs))
    _, plain = post(port, "/v1/chat/completions", body)
    j, p = json.loads(text), json.loads(plain)
    check(status == 200 and j["choices"][0]["token_ids"] == expected_tokens[0] and
          j["choices"][0]["message"]["content"] == expected_text[0] and
          j["usage"]["prompt_tokens"] > p["usage"]["prompt_tokens"],
          f"chat_template_kwargs {kwargs} over the server's: the batch job's answer with the same kwargs "
          f"({j['usage']['prompt_tokens']} prompt tokens, {p['usage']['prompt_tokens']} without)")


def log_softmax(row):
    row = numpy.asarray(row, dtype=numpy.float64)
    shifted = row - row.max()
    return shifted - numpy.log(numpy.exp(shifted).sum())


def check_logprobs(port, weights):
    """logprobs against numpy's log-softmax of the batch job's logits for the same request; the
    alternatives are the likeliest; a stream carries the same values; chat's token bytes add up to
    the answer."""
    prompt, n = PROMPTS[1][0], 7
    expected, _, logits = batch_job(weights, "logprobs", [{"prompt": prompt, "max_tokens": n}], logits=True)
    def differences(per_token):
        """The largest difference from the reference, and whether the alternatives are the 3
        likeliest with the drawn token first (greedy) and the text offsets add up the token texts."""
        worst, alternatives, offsets = 0.0, len(per_token) == n, True
        for t, (token, logprob, top, offset) in enumerate(per_token):
            reference = log_softmax(logits[0][t])
            worst = max(worst, abs(logprob - reference[expected[0][t]]))
            likeliest = numpy.sort(reference)[::-1][:3]
            alternatives = alternatives and len(top) == 3 and numpy.allclose(sorted(top.values(), reverse=True),
                                                                            likeliest, atol=1e-4)
            alternatives = alternatives and abs(max(top.values()) - logprob) < 1e-6
            offsets = offsets and offset == sum(len(w[0]) for w in per_token[:t])
        return worst, alternatives, offsets

    _, text = post(port, "/v1/completions", {"prompt": prompt, "max_tokens": n, "logprobs": 3, "return_token_ids": True})
    choice = json.loads(text)["choices"][0]
    whole = completion_logprobs(choice["logprobs"])
    worst, alternatives, offsets = differences(whole)
    check(choice["token_ids"] == expected[0] and worst < 1e-4 and alternatives and offsets,
          f"completion logprobs: numpy's log-softmax of the batch job's logits (largest difference {worst:.2e}), "
          "the 3 likeliest alternatives, text offsets adding up the token texts")
    # Streamed: the same again (the prompt, now in a slot's cache, is not prefilled again: the values
    # agree to rounding, not bit for bit).
    _, events = stream(port, "/v1/completions", {"prompt": prompt, "max_tokens": n, "logprobs": 3})
    streamed = []
    gathered(events, False, streamed)
    worst, alternatives, offsets = differences(streamed)
    check(worst < 1e-4 and alternatives and offsets and [w[0] for w in streamed] == [w[0] for w in whole],
          f"streamed completion logprobs: the same tokens, the reference's values (largest difference {worst:.2e}), "
          "alternatives and offsets")

    messages = CONVERSATIONS[0]
    _, text = post(port, "/v1/chat/completions", {"messages": messages, "max_tokens": 6, "logprobs": True,
                                                  "top_logprobs": 2})
    choice = json.loads(text)["choices"][0]
    content = choice["logprobs"]["content"]
    answer = b"".join(bytes(c["bytes"]) for c in content)
    check(len(content) == 6 and all(len(c["top_logprobs"]) == 2 and c["logprob"] <= 0 and
                                    abs(c["top_logprobs"][0]["logprob"] - c["logprob"]) < 1e-6 for c in content) and
          answer.decode("utf-8", errors="replace") == choice["message"]["content"],
          f"chat logprobs: one entry per token with 2 alternatives, the likeliest drawn, bytes adding up to the answer "
          f"({answer!r})")
    _, events = stream(port, "/v1/chat/completions", {"messages": messages, "max_tokens": 6, "logprobs": True,
                                                      "top_logprobs": 2})
    streamed = []
    gathered(events, True, streamed)
    check(len(streamed) == len(content) and
          all(a["token"] == b["token"] and a["bytes"] == b["bytes"] and abs(a["logprob"] - b["logprob"]) < 1e-5 and
              [t["token"] for t in a["top_logprobs"]] == [t["token"] for t in b["top_logprobs"]]
              for a, b in zip(streamed, content)),
          "streamed chat logprobs: the same entries (values to rounding: the prompt now comes from the cache)")
    _, text = post(port, "/v1/chat/completions", {"messages": messages, "max_tokens": 2})
    check(json.loads(text)["choices"][0]["logprobs"] is None, "without logprobs asked for, none are sent")
    check_echo(port)


def check_echo(port):
    """echo with logprobs, as lm-evaluation-harness scores a continuation: a prompt of ids that ends
    with what the model itself generated after its start; the echoed prompt's scores for those
    tokens (computed in one prefill) equal the logprobs they had when decoded one at a time."""
    _, text = post(port, "/v1/completions", {"prompt": PROMPTS[2][0], "max_tokens": 5, "logprobs": 2,
                                             "return_token_ids": True})
    j = json.loads(text)
    start, generated = j["prompt_token_ids"], j["choices"][0]["token_ids"]
    decoded = j["choices"][0]["logprobs"]["token_logprobs"]
    sequence = start + generated
    _, text = post(port, "/v1/completions", {"prompt": [sequence], "max_tokens": 1, "logprobs": 1, "echo": True,
                                             "temperature": 0})
    j = json.loads(text)
    choice = j["choices"][0]
    lp = choice["logprobs"]
    scored = lp["token_logprobs"][len(start):len(sequence)]
    greedy = all(t == max(top.values()) for t, top in zip(scored, lp["top_logprobs"][len(start):len(sequence)]))
    worst = max(abs(a - b) for a, b in zip(scored, decoded))
    check(len(lp["tokens"]) == len(sequence) + 1 and lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
          and all(isinstance(x, float) and x <= 0 for x in lp["token_logprobs"][1:]) and worst < 1e-4 and greedy,
          f"echo: {len(sequence)} prompt tokens and 1 new one scored, the first prompt token null; the generated "
          f"continuation scores as when it was decoded (largest difference {worst:.2e}) and is greedy")
    _, events = stream(port, "/v1/completions", {"prompt": [sequence], "max_tokens": 1, "logprobs": 1, "echo": True})
    streamed = []
    text, _, _, _ = gathered(events, False, streamed)
    check(text == choice["text"] and [t for t, _, _, _ in streamed] == lp["tokens"] and streamed[0][1] is None,
          "echo streamed: the first chunk begins with the prompt's text and scores, the rest as whole")
    status, text = post(port, "/v1/completions", {"prompt": PROMPTS[2][0], "max_tokens": 2, "echo": True})
    check(status == 200 and json.loads(text)["choices"][0]["text"].startswith(PROMPTS[2][0]),
          "echo without logprobs: the text begins with the prompt as given")


def check_conversation(port, weights):
    """A chat client sends the whole conversation again each turn: the second turn takes the first
    turn's tokens from the slot that still holds them, and answers as the batch job does."""
    first = CONVERSATIONS[0]
    _, text = post(port, "/v1/chat/completions", {"messages": first, "max_tokens": 6, "return_token_ids": True})
    answer = json.loads(text)["choices"][0]["message"]["content"]
    second = first + [{"role": "assistant", "content": answer}, {"role": "user", "content": "and the ring?"}]
    expected, _ = batch_job(weights, "second_turn", [{"messages": second, "max_tokens": 6}])
    before = metric(port, "prompt_tokens_reused_total")
    _, text = post(port, "/v1/chat/completions", {"messages": second, "max_tokens": 6, "return_token_ids": True})
    j = json.loads(text)
    reused = metric(port, "prompt_tokens_reused_total") - before
    check(j["choices"][0]["token_ids"] == expected[0] and 10 <= reused < j["usage"]["prompt_tokens"],
          f"a conversation's second turn answers as the batch job does, {reused} of its "
          f"{j['usage']['prompt_tokens']} prompt tokens taken from the cache")


def check_shared_start(port, weights):
    """Users behind one long system text, at once: each request after the first copies the common
    start from another slot's cache (or waits for it to be prefilled, then copies it), and every
    answer is still the batch job's."""
    start = "You answer about " + "the mesh device gathers every shard and every rank reduces the ring. " * 6
    prompts = [start + q for q in ("What is a tile?", "Why a ring?", "Who decodes?")]
    expected, _ = batch_job(weights, "shared_start", [{"prompt": p, "max_tokens": 12} for p in prompts],
                            "--no-prefix-reuse")
    before = metric(port, "prompt_tokens_reused_total")
    results = [None] * len(prompts)

    def client(i):
        _, text = post(port, "/v1/completions", {"prompt": prompts[i], "max_tokens": 12, "return_token_ids": True})
        results[i] = json.loads(text)["choices"][0]["token_ids"]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reused = metric(port, "prompt_tokens_reused_total") - before
    check(results == expected and reused >= 2 * 32,
          f"three requests behind one system text, at once, answer as the batch job does; {reused} prompt tokens "
          f"taken from the cache")


def check_choices(port, weights):
    """n choices: a seeded request's choice i draws what the batch job's request i draws for the same
    prompt and seed; streamed, each choice's chunks carry its index and add up to its answer, with
    one role chunk and one finish per choice and one usage for all."""
    sampled = ["--sampling", "top-p", "--temperature", "0.8", "--top-p", "0.9", "--top-k", "0", "--seed", "7"]
    prompt = PROMPTS[1][0]
    expected, _ = batch_job(weights, "choices", [{"prompt": prompt, "max_tokens": 8}] * 3, *sampled,
                            "--no-prefix-reuse")
    status, text = post(port, "/v1/completions", {"prompt": prompt, "max_tokens": 8, "n": 3, "temperature": 0.8,
                                                  "top_p": 0.9, "seed": 7, "return_token_ids": True})
    j = json.loads(text)
    got = [c["token_ids"] for c in j["choices"]]
    check(status == 200 and [c["index"] for c in j["choices"]] == [0, 1, 2] and got == expected and
          len({tuple(t) for t in got}) > 1 and j["usage"]["completion_tokens"] == sum(len(t) for t in got),
          "n = 3 seeded: choice i draws the batch job's request i; the choices differ; usage counts all three")
    messages = CONVERSATIONS[0]
    _, text = post(port, "/v1/chat/completions", {"messages": messages, "max_tokens": 6, "temperature": 0})
    one = json.loads(text)
    status, events = stream(port, "/v1/chat/completions", {"messages": messages, "max_tokens": 6, "n": 2,
                                                           "temperature": 0, "stream_options": {"include_usage": True}})
    by_index = {0: [], 1: []}
    for e in events[:-1]:
        for c in e["choices"]:
            by_index[c["index"]].append(c)
    ok = status == 200 and events[-1] == "[DONE]"
    for chunks in by_index.values():
        ok = ok and chunks and chunks[0]["delta"].get("role") == "assistant" and \
            "".join(c["delta"].get("content", "") for c in chunks) == one["choices"][0]["message"]["content"] and \
            [c["finish_reason"] for c in chunks if c["finish_reason"]] == ["length"] and \
            sum(1 for c in chunks if "role" in c["delta"]) == 1
    usage = [e["usage"] for e in events[:-1] if e.get("usage")]
    check(ok and usage == [{"prompt_tokens": one["usage"]["prompt_tokens"], "completion_tokens": 12,
                            "total_tokens": one["usage"]["prompt_tokens"] + 12}],
          "n = 2 greedy, streamed: each index's chunks add up to the n = 1 answer, one role and one finish each, "
          "one usage for both")


# A response_format schema whose answers are short: {"verdict": "no", "ok": true}, spaced.
VERDICT_SCHEMA = {"type": "object", "properties": {"verdict": {"enum": ["yes", "no", "maybe"]}, "ok": {"type": "boolean"}},
                  "required": ["verdict", "ok"], "additionalProperties": False}
VERDICT_REQUEST = {"prompt": "verdict:", "max_tokens": 200, "return_token_ids": True,
                   "response_format": {"type": "json_schema", "json_schema": {"name": "v", "schema": VERDICT_SCHEMA}}}


def follows_verdict_schema(text):
    """VERDICT_SCHEMA checked by hand, apart from the server's grammar."""
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return isinstance(value, dict) and set(value) == {"verdict", "ok"} and value["verdict"] in ("yes", "no", "maybe") \
        and isinstance(value["ok"], bool)


def check_structured_output(port):
    """response_format: json_schema answers are JSON that follows the schema and end with the value
    ("stop"), greedy and sampled, whole and streamed; json_object answers are objects; a schema the
    server cannot follow is refused naming the keyword. Returns the greedy json_schema answer's ids."""
    status, text = post(port, "/v1/completions", VERDICT_REQUEST)
    greedy = json.loads(text)["choices"][0]
    _, plain = post(port, "/v1/completions", {k: v for k, v in VERDICT_REQUEST.items() if k != "response_format"})
    check(status == 200 and follows_verdict_schema(greedy["text"]) and greedy["finish_reason"] == "stop" and
          greedy["text"] != json.loads(plain)["choices"][0]["text"],
          f"json_schema, greedy: the answer follows the schema and ends with it ({greedy['text']!r}, "
          f"{greedy['finish_reason']}); without response_format the model writes otherwise")
    vllm_style = {k: v for k, v in VERDICT_REQUEST.items() if k != "response_format"}
    _, text = post(port, "/v1/completions", dict(vllm_style, structured_outputs={"json": VERDICT_SCHEMA}))
    check(json.loads(text)["choices"][0]["token_ids"] == greedy["token_ids"],
          "vLLM's structured_outputs json: the answer of the same schema as response_format")
    labels = ["positive", "negative", "neutral", "neutral enough"]
    status, text = post(port, "/v1/chat/completions", {"messages": CONVERSATIONS[0], "max_tokens": 30, "n": 4,
                                                       "temperature": 1.0, "seed": 5,
                                                       "structured_outputs": {"choice": labels}})
    answers = [(c["message"]["content"], c["finish_reason"]) for c in json.loads(text)["choices"]]
    check(status == 200 and all(a in labels and f == "stop" for a, f in answers),
          f"vLLM's structured_outputs choice: every answer is one of the choices, as written ({answers})")
    sampled = dict(VERDICT_REQUEST, n=4, temperature=1.0, seed=3)
    status, text = post(port, "/v1/completions", sampled)
    choices = json.loads(text)["choices"]
    _, events = stream(port, "/v1/completions", sampled)
    streamed = ["".join(c["text"] for e in events[:-1] for c in e["choices"] if c["index"] == i) for i in range(4)]
    check(status == 200 and all(follows_verdict_schema(c["text"]) and c["finish_reason"] == "stop" for c in choices)
          and streamed == [c["text"] for c in choices] and len({c["text"] for c in choices}) > 1,
          f"json_schema, n = 4 sampled: every choice follows the schema and ends with it, streamed alike "
          f"({[c['text'] for c in choices]})")
    status, text = post(port, "/v1/chat/completions", {"messages": CONVERSATIONS[0], "max_tokens": 48,
                                                       "response_format": {"type": "json_object"}})
    choice = json.loads(text)["choices"][0]
    content = choice["message"]["content"]
    if choice["finish_reason"] == "stop":
        whole = isinstance(json.loads(content), dict)
    else:  # the value was still open at max_tokens
        whole = choice["finish_reason"] == "length" and content.lstrip().startswith("{")
    check(status == 200 and whole, f"json_object, chat: a JSON object, or the start of one at max_tokens "
          f"({content!r}, {choice['finish_reason']})")
    for body, needle in [({"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {
                              "code": {"type": "string", "pattern": "^[a-z]+$"}}}}},
                          "'pattern' at #/properties/code is not supported"),
                         ({"type": "json_schema", "json_schema": {"schema": {"type": "integer"}}}, "the root may be a number"),
                         ({"type": "xml"}, "'response_format' must be")]:
        status, text = post(port, "/v1/completions", {"prompt": "a", "response_format": body})
        message = json.loads(text).get("error", {}).get("message", "")
        check(status == 400 and needle in message, f"response_format {str(body)[:50]}: 400 with '{needle}' ({message})")
    return greedy["token_ids"]


def check_seeded_sampling(port, weights):
    sampled = {"temperature": 0.8, "top_p": 0.9, "seed": 7}
    expected, _ = batch_job(weights, "sampled", [{"prompt": PROMPTS[1][0], "max_tokens": 8}], "--sampling", "top-p",
                            "--temperature", "0.8", "--top-p", "0.9", "--top-k", "0", "--seed", "7")
    greedy, _ = batch_job(weights, "greedy", [{"prompt": PROMPTS[1][0], "max_tokens": 8}])
    results = {}

    def client(key, extra):
        _, text = post(port, "/v1/completions", {"prompt": PROMPTS[1][0], "max_tokens": 8, "return_token_ids": True,
                                                 **extra})
        results[key] = json.loads(text)["choices"][0]["token_ids"]

    threads = [threading.Thread(target=client, args=(k, e)) for k, e in
               (("a", sampled), ("greedy", {}), ("b", sampled), ("zero", {"temperature": 0}))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(results["a"] == expected[0] and results["b"] == expected[0] and expected[0] != greedy[0],
          "a seeded top-p request draws the batch job's tokens for that seed, twice, beside greedy ones")
    check(results["greedy"] == greedy[0] and results["zero"] == greedy[0],
          "beside it, a request without sampling parameters and one with temperature 0 are greedy")


def check_penalties(port, weights):
    """The penalties and logit_bias: a request with penalties draws the batch job's tokens for the
    same penalties (given on its command line), beside requests without any; +100 forces a token
    and -100 bans one."""
    prompt, n = PROMPTS[3][0], PROMPTS[3][1]
    expected, _ = batch_job(weights, "penalised", [{"prompt": prompt, "max_tokens": n}], "--presence-penalty", "0.5",
                            "--frequency-penalty", "1.5", "--repetition-penalty", "1.3")
    greedy, _ = batch_job(weights, "unpenalised", [{"prompt": prompt, "max_tokens": n}])
    forced = next(t for t in greedy[0] if t != greedy[0][0])  # a token the model makes, not its first
    results = {}

    def client(key, extra):
        _, text = post(port, "/v1/completions", {"prompt": prompt, "max_tokens": n, "return_token_ids": True, **extra})
        results[key] = json.loads(text)["choices"][0]["token_ids"]

    cases = (("penalised", {"presence_penalty": 0.5, "frequency_penalty": 1.5, "repetition_penalty": 1.3}),
             ("plain", {}), ("neutral", {"presence_penalty": 0, "frequency_penalty": 0, "logit_bias": {}}),
             ("forced", {"logit_bias": {str(forced): 100}}), ("banned", {"logit_bias": {str(greedy[0][0]): -100}}))
    threads = [threading.Thread(target=client, args=case) for case in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(results["penalised"] == expected[0] and expected[0] != greedy[0],
          "a request with presence, frequency and repetition penalties draws the batch job's tokens for them "
          "(which differ from greedy's), beside requests without")
    check(results["plain"] == greedy[0] and results["neutral"] == greedy[0],
          "beside it, requests without penalties or with neutral ones are greedy")
    check(results["forced"] == [forced] * n and results["banned"][0] != greedy[0][0],
          f"logit_bias: +100 makes every token {forced}, -100 bans the greedy first token {greedy[0][0]}")

    # vLLM's stop_token_ids and min_tokens (this server runs with --ignore-eos, as every request's
    # ignore_eos would have it).
    stop = greedy[0][2]
    first = greedy[0].index(stop)
    def answer(**extra):
        body = {"prompt": prompt, "max_tokens": n, "return_token_ids": True, "stop_token_ids": [stop], **extra}
        return json.loads(post(port, "/v1/completions", body)[1])["choices"][0]

    choice = answer(ignore_eos=True)
    check(choice["token_ids"] == greedy[0][:first + 1] and choice["finish_reason"] == "stop",
          f"stop_token_ids [{stop}]: greedy's tokens up to its first {stop}, finish reason 'stop'")
    ids = answer(min_tokens=first + 3)["token_ids"]
    ends_once = stop not in ids or ids.index(stop) == len(ids) - 1
    check(len(ids) >= first + 3 and stop not in ids[:first + 3] and ends_once,
          f"min_tokens {first + 3}: {stop} is not drawn before, and ends the answer only after ({ids})")


def check_stop_strings(port, expected_text):
    text = expected_text[3]
    middle = len(text) // 2
    stop = text[middle:middle + 3]
    if len(text) < 6 or not stop.strip():
        check(False, f"stop strings: the reference text {text!r} is too short to cut")
        return
    cut = text[:text.find(stop)]
    body = {"prompt": PROMPTS[3][0], "max_tokens": PROMPTS[3][1], "stop": [stop, "\u0000never"]}
    status, answer = post(port, "/v1/completions", body)
    j = json.loads(answer)
    check(status == 200 and j["choices"][0]["text"] == cut and j["choices"][0]["finish_reason"] == "stop" and
          j["usage"]["completion_tokens"] <= PROMPTS[3][1],
          f"a stop string ({stop!r}) ends the text just before it")
    status, events = stream(port, "/v1/completions", body)
    streamed, _, finish, _ = gathered(events, False)
    check(status == 200 and streamed == cut and finish == "stop" and events[-1] == "[DONE]",
          "a stop string ends a stream just before it")


def wait_until_idle(port):
    """Until the server has ended every request (a stop string's cancel lands after its response)."""
    deadline = time.time() + 60
    while time.time() < deadline and metric(port, "num_requests_running") > 0:
        time.sleep(0.01)


def rank_pids(process, log):
    """World ranks 0 and 1 of a 2-rank server: rank 0 prints its pid; both are mpirun's children."""
    log.seek(0)
    rank0 = int(re.search(rb"rank 0 \(pid (\d+)\)", log.read()).group(1))
    ranks = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True, text=True).stdout.split()
    return rank0, next(int(p) for p in ranks if int(p) != rank0)


def check_hang_up(port, rank1):
    """A streaming client that hangs up once its response has begun. This model makes 200 tokens in
    a fraction of a second, sooner than this process (sharing the cores with the ranks) may get to
    run again: rank 1 is paused (SIGSTOP) from before the request until the client has hung up, so
    no pass runs meanwhile. The HTTP threads run on rank 0 and answer with the headers all the same."""
    wait_until_idle(port)
    before = metric(port, "generation_tokens_total")
    cancelled = metric(port, "requests_cancelled_total")
    body = json.dumps({"prompt": PROMPTS[0][0], "max_tokens": 200, "stream": True})
    os.kill(rank1, signal.SIGSTOP)
    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            send_completion(s, body)
            s.recv(1)  # the response has begun: the request is on its way to the mesh
    finally:
        os.kill(rank1, signal.SIGCONT)
    # The server learns of the hang-up when a write fails, a token or two later; it must not run the
    # request to its end.
    made, freed = cancelled_and_freed(port, before, cancelled)
    check(freed and made < 200, f"a client that hangs up frees its slot ({made} of 200 tokens made)")


def send_completion(s, body):
    s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(body)}\r\n\r\n{body}".encode())


def cancelled_and_freed(port, tokens_before, cancelled_before):
    """Once no request runs: the tokens made since, and whether one more request was cancelled."""
    deadline = time.time() + 60
    while time.time() < deadline and metric(port, "num_requests_running") > 0:
        time.sleep(0.05)
    made = metric(port, "generation_tokens_total") - tokens_before
    return made, (metric(port, "num_requests_running") == 0 and
                  metric(port, "requests_cancelled_total") == cancelled_before + 1)


def check_hang_up_whole(port, rank1):
    """A client that hangs up while waiting for a whole (non-streaming) answer, which writes nothing
    to it before the end: the server notices on the socket and cancels the request. Rank 1 is
    paused from before the request until the server has had time to notice, so no pass runs in
    between and the request cannot end on its own first."""
    wait_until_idle(port)
    before = metric(port, "generation_tokens_total")
    cancelled = metric(port, "requests_cancelled_total")
    body = json.dumps({"prompt": PROMPTS[1][0], "max_tokens": 200})
    os.kill(rank1, signal.SIGSTOP)
    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            send_completion(s, body)
            deadline = time.time() + 30
            while time.time() < deadline and metric(port, "num_requests_running") == 0:
                time.sleep(0.01)  # the request is queued for the mesh
        time.sleep(0.5)  # the wait asks every 100 ms
    finally:
        os.kill(rank1, signal.SIGCONT)
    made, freed = cancelled_and_freed(port, before, cancelled)
    check(freed and made < 200,
          f"a client that hangs up before its whole answer frees its slot ({made} of 200 tokens made)")


def check_bad_requests(port, vocab, expected_tokens):
    rejected = metric(port, "requests_rejected_total")
    cases = [("/v1/completions", "{", 400, "not valid JSON"),
             ("/v1/completions", {"prompt": "a", "n": 65}, 400, "'n' must be in [1, 64]"),
             ("/v1/completions", {"prompt": "a", "max_tokens": CONTEXT}, 400, f"exceeds the KV cache's {CONTEXT}"),
             ("/v1/completions", {"prompt": "a", "max_tokens": 300}, 400, "exceeds max_position_embeddings 256"),
             ("/v1/completions", {"prompt": [1, vocab]}, 400, "outside the vocabulary"),
             ("/v1/completions", {"prompt": "a", "top_p": 1.5}, 400, "'top_p' must be in"),
             ("/v1/chat/completions", {"messages": [{"role": "user"}], "tools": [{}]}, 400, "tools[0] must be"),
             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tools": WEATHER_TOOLS}, 400,
              "needs a server started with --tool-call-parser"),
             ("/v1/chat/completions", {"messages": [{"role": "user"}], "functions": [{}]}, 400,
              "'functions' is not supported"),
             ("/v1/completions", {"prompt": "a", "logit_bias": {str(vocab): 1}}, 400, "logit_bias names token"),
             ("/v1/completions", {"prompt": "a", "frequency_penalty": 3}, 400, "'frequency_penalty' must be in"),
             ("/v1/completions", {"prompt": "a", "model": "gpt-4"}, 404,
              "The model `gpt-4` does not exist: this server serves `served`"),
             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "model": 7}, 400,
              "'model' must be a string"),
             ("/v1/embeddings", {"input": "a"}, 404, "no such route")]
    for path, body, status, needle in cases:
        got, text = post(port, path, body)
        message = json.loads(text).get("error", {}).get("message", "")
        check(got == status and needle in message, f"{path} {str(body)[:40]}: {status} with '{needle}' ({message})")
    check(metric(port, "requests_rejected_total") == rejected + len(cases) - 1,
          "/metrics counts the refused requests (not the unknown route)")
    _, text = post(port, "/v1/completions", {"prompt": PROMPTS[2][0], "max_tokens": PROMPTS[2][1],
                                             "return_token_ids": True})
    check(json.loads(text)["choices"][0]["token_ids"] == expected_tokens[2],
          "after the bad requests the server answers as before")
    status, text = post(port, "/health", "", method="GET")
    check(status == 200 and json.loads(text) == {"status": "ok"}, "/health answers")
    status, text = post(port, "/v1/models", "", method="GET")
    check(status == 200 and json.loads(text)["data"][0]["id"] == "served", "/v1/models lists --served-model-name")


def check_refusals(weights, port):
    try:
        r = run([*MPIEXEC, "-n", "2", LLM, "--weights", weights, *COMMON, "--serve", "--port", str(port)], timeout=60)
    except subprocess.TimeoutExpired:
        check(False, "a second server on the same port fails (it ran instead)")
        return
    out = (r.stdout + r.stderr).decode(errors="replace")
    check(r.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in out,
          "a second server on the same port fails with a clear message")
    r = run([*MPIEXEC, "-n", "2", LLM, "--weights", weights, "--serve", "--interactive"], timeout=300)
    out = (r.stdout + r.stderr).decode(errors="replace")
    check(r.returncode == 2 and "--interactive excludes --serve" in out, "--serve with --interactive is a usage error")


def check_shutdown(process, port, log):
    """SIGTERM to rank 0 (the pid it prints) while more streams than slots are open."""
    results = [None] * (2 * SLOTS)

    def client(i):
        results[i] = stream(port, "/v1/completions", {"prompt": PROMPTS[i % 2][0], "max_tokens": 200})

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    # This model makes 6 x 200 tokens in a fraction of a second: rank 1 is paused (SIGSTOP) as soon
    # as tokens flow, so that the passes stand still while rank 0 gets SIGTERM; then it goes on.
    rank0, rank1 = rank_pids(process, log)
    before = metric(port, "generation_tokens_total")
    deadline = time.time() + 60
    while time.time() < deadline and metric(port, "generation_tokens_total") == before:
        time.sleep(0.001)
    os.kill(rank1, signal.SIGSTOP)
    os.kill(rank0, signal.SIGTERM)
    time.sleep(0.2)
    os.kill(rank1, signal.SIGCONT)
    for t in threads:
        t.join(120)
    try:
        status = process.wait(120)
    except subprocess.TimeoutExpired:
        process.kill()
        status = None
    log.seek(0)
    out = log.read().decode(errors="replace")
    check(status == 0 and "server stopped" in out, f"SIGTERM to rank 0 stops the server, every rank exiting 0 "
          f"(mpirun's status {status})")
    # A client that connects only after the stop began (this process may run late) is refused with 503.
    ends = [gathered(events, False)[2] if events and events[-1] == "[DONE]" else status for status, events in
            (r or (None, []) for r in results)]
    check(all(e in ("length", "abort", 503) for e in ends) and "abort" in ends,
          f"the streams open at SIGTERM end with [DONE], the unfinished ones with finish_reason 'abort', later "
          f"ones get 503 ({ends})")


def check_unusable_template(model_dir, expected_tokens):
    """A model whose chat template meshnn cannot run still serves completions; chat is refused with a
    message that says why, and the startup says so too."""
    edit_tokenizer_config(model_dir, chat_template="{% extends 'base.jinja' %}")
    weights = os.path.join(WORK, "unusable_template.h5")
    run([os.path.join(BUILD, "apps", "meshnn-convert"), "--quiet", model_dir, weights])
    process, port, log = start_server(weights, os.path.join(WORK, "template_port"), "--port", "0", "--max-context",
                                      str(CONTEXT))
    try:
        _, text = post(port, "/v1/completions", {"prompt": PROMPTS[2][0], "max_tokens": PROMPTS[2][1],
                                                 "return_token_ids": True})
        completion = json.loads(text)["choices"][0]["token_ids"]
        status, text = post(port, "/v1/chat/completions", {"messages": CONVERSATIONS[0]})
        log.seek(0)
        out = log.read().decode(errors="replace")
        check(completion == expected_tokens[2] and status == 400 and
              "no chat template it can run" in json.loads(text)["error"]["message"] and
              "/v1/chat/completions is off" in out and "'extends'" in out,
              "a model whose chat template meshnn cannot run serves completions and refuses chat, saying why")
    finally:
        stop_server(process)


# The call a tool-calling answer makes, and the whole block that makes it, one piece of the parsers'
# model's tokenizer so that a logit_bias can draw it.
WEATHER_CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}
CALL_BLOCK = "<tool_call>" + json.dumps(WEATHER_CALL, separators=(",", ":")) + "</tool_call>"  # no spaces: one piece
# The same call as Llama 3.1-3.3 write it (llama3_json), one piece too.
LLAMA3_CALL = json.dumps({"name": WEATHER_CALL["name"], "parameters": WEATHER_CALL["arguments"]}, separators=(",", ":"))
WEATHER_TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                                   "parameters": {"type": "object",
                                                                  "properties": {"city": {"type": "string"}}}}}]
# A tool whose calls are short: tool_choice naming it makes a whole call within a few dozen tokens.
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"enum": ["utc", "local"]}}, "required": ["zone"],
    "additionalProperties": False}}}


def check_parsers():
    """A server with --reasoning-parser qwen3 and --tool-call-parser hermes, on a model whose
    tokenizer has <think>, </think> and a whole tool call block as pieces and whose chat template is
    the Qwen3-style one of tests/text/chat_templates."""
    model_dir = os.path.join(WORK, "parsers_model")
    config = dict(CONFIG, max_position_embeddings=1024)
    hf.write_model_dir(model_dir, config, hf.llama_shapes(config), lambda _: "BF16")
    encode, _ = sentencepiece_tokenizer(model_dir, WORK,
                                        user_defined_symbols=("<think>", "</think>", CALL_BLOCK, LLAMA3_CALL))
    with open(QWEN3_TEMPLATE_FILE, encoding="utf-8") as f:
        template = f.read()
    edit_tokenizer_config(model_dir, chat_template=template)
    weights = os.path.join(WORK, "parsers_model.h5")
    run([os.path.join(BUILD, "apps", "meshnn-convert"), "--quiet", model_dir, weights])
    process, port, _ = start_server(weights, os.path.join(WORK, "parsers_port"), "--port", "0", "--max-context", "1024",
                                    "--reasoning-parser", "qwen3", "--tool-call-parser", "hermes")
    try:
        check_reasoning(port, encode("a<think>")[-1], encode("a</think>")[-1])
        check_tool_calls(port, encode("a" + CALL_BLOCK)[-1], encode, template)
    finally:
        stop_server(process)
    process, port, _ = start_server(weights, os.path.join(WORK, "parsers_port"), "--port", "0", "--max-context", "1024",
                                    "--tool-call-parser", "llama3_json")
    try:
        check_llama3_tool_calls(port, encode("a" + LLAMA3_CALL)[-1])
    finally:
        stop_server(process)


def check_llama3_tool_calls(port, call):
    """--tool-call-parser llama3_json: an answer that is the call object (drawn by a logit_bias on
    its piece) is a tool_call, whole and streamed; an answer of other text is content; tool_choice
    naming a function forces a call object of it, its arguments under "parameters"."""
    body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": WEATHER_TOOLS,
            "max_tokens": 1, "return_token_ids": True, "logit_bias": {str(call): 100}}
    status, text = post(port, "/v1/chat/completions", body)
    choice = json.loads(text)["choices"][0] if status == 200 else {}
    calls = choice.get("message", {}).get("tool_calls", [])
    check(choice.get("token_ids") == [call] and choice.get("finish_reason") == "tool_calls" and
          choice["message"].get("content") is None and
          [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] ==
          [(WEATHER_CALL["name"], WEATHER_CALL["arguments"])],
          f"llama3_json: an answer that is the call object is its tool_call ({choice.get('message')})")
    check_streamed_calls(port, body, calls, "llama3_json, streamed: the same call")
    status, text = post(port, "/v1/chat/completions", dict(body, logit_bias={}, max_tokens=6, temperature=0))
    choice = json.loads(text)["choices"][0] if status == 200 else {}
    content = choice.get("message", {}).get("content") or ""
    check(choice.get("finish_reason") in ("length", "stop") and "tool_calls" not in choice.get("message", {}) and
          not content.lstrip().startswith("{"),
          f"llama3_json: an answer of other text is content ({choice.get('message')})")
    named = {"messages": body["messages"], "tools": WEATHER_TOOLS + [TIME_TOOL], "max_tokens": 200,
             "tool_choice": {"type": "function", "function": {"name": "get_time"}}, "return_token_ids": True}
    status, text = post(port, "/v1/chat/completions", named)
    choice = json.loads(text)["choices"][0] if status == 200 else {}
    calls = choice.get("message", {}).get("tool_calls", [])
    arguments = json.loads(calls[0]["function"]["arguments"]) if len(calls) == 1 else None
    check(choice.get("finish_reason") == "tool_calls" and len(calls) == 1 and calls[0]["function"]["name"] == "get_time"
          and isinstance(arguments, dict) and set(arguments) == {"zone"} and arguments["zone"] in ("utc", "local"),
          f"llama3_json, tool_choice naming get_time: a call object of it, its parameters as they say ({calls})")


def check_reasoning(port, start_of_thinking, end_of_thinking):
    """A seeded chat answer that opens with <think> and draws </think> (both helped by a logit_bias)
    between other text shows the text between them as reasoning_content and the text after </think>
    as content, whole and streamed. The raw text is the same request's, sent as its prompt's ids to
    /v1/completions, which no parser touches."""
    drawn = {"max_tokens": 24, "return_token_ids": True, "temperature": 1.0, "seed": REASONING_SEED,
             "logit_bias": {str(start_of_thinking): 4, str(end_of_thinking): 3}}
    body = dict(drawn, messages=CONVERSATIONS[1])
    status, text = post(port, "/v1/chat/completions", body)
    chat = json.loads(text)
    _, text = post(port, "/v1/completions", dict(drawn, prompt=chat["prompt_token_ids"]))
    completion = json.loads(text)["choices"][0]
    raw = completion["text"]
    reasoning, tag, content = raw[len("<think>"):].partition("</think>")
    check(status == 200 and completion["token_ids"] == chat["choices"][0]["token_ids"] and raw.startswith("<think>")
          and tag and reasoning and content,
          f"reasoning: the seeded answer opens with <think> and holds </think> between other text (raw text {raw!r})")
    message = chat["choices"][0]["message"]
    check(message.get("reasoning_content") == reasoning and message.get("content") == content,
          "reasoning: reasoning_content is the text before the first </think>, content the text after it")
    _, events = stream(port, "/v1/chat/completions", body)
    streamed = {"reasoning_content": "", "content": ""}
    for e in events[:-1]:
        for key in streamed:
            streamed[key] += e["choices"][0]["delta"].get(key, "")
    check(streamed == {"reasoning_content": reasoning, "content": content},
          "reasoning, streamed: the deltas' reasoning_content and content add up to the same split")


def check_tool_calls(port, block, encode, template):
    """Tools: the prompt is the template's rendering with the tools and the earlier calls, as jinja2
    renders it (the calls' arguments given as JSON text, as OpenAI clients send them); an answer of
    two call blocks (drawn by a logit_bias on the block's piece) shows two tool_calls, whole and
    streamed, finishing with "tool_calls"; with tool_choice "none" the blocks stay content."""
    history = [{"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_0", "type": "function",
                    "function": {"name": "get_weather", "arguments": json.dumps(WEATHER_CALL["arguments"])}}]},
               {"role": "tool", "tool_call_id": "call_0", "content": "21 C"},
               {"role": "user", "content": "And again?"}]
    body = {"messages": history, "tools": WEATHER_TOOLS, "max_tokens": 2, "return_token_ids": True,
            "logit_bias": {str(block): 100}}
    status, text = post(port, "/v1/chat/completions", body)
    j = json.loads(text)
    as_rendered = [dict(m) for m in history]
    as_rendered[1]["tool_calls"] = [dict(history[1]["tool_calls"][0], function=WEATHER_CALL)]
    expected_prompt = encode(hf_render(template, as_rendered, {}, 0, {"tools": WEATHER_TOOLS}))
    check(status == 200 and j["prompt_token_ids"] == expected_prompt,
          "tools: the prompt is jinja2's rendering of the tools and the earlier call, encoded independently")
    calls = [{"id": f"call_{j['id'].split('-')[1]}_{i}", "type": "function",
              "function": {"name": "get_weather", "arguments": json.dumps(WEATHER_CALL["arguments"],
                                                                           separators=(",", ":"))}} for i in range(2)]
    choice = j["choices"][0] if status == 200 else {}
    # The server also parses reasoning: none here.
    check(choice.get("message") == {"role": "assistant", "content": None, "reasoning_content": None,
                                    "tool_calls": calls} and
          choice.get("finish_reason") == "tool_calls" and choice.get("token_ids") == [block, block],
          f"tools: two call blocks are two tool_calls, finish_reason tool_calls ({choice.get('message')})")
    _, events = stream(port, "/v1/chat/completions", body)
    deltas = [c for e in events[:-1] for c in e["choices"][0]["delta"].get("tool_calls", [])]
    check([(d["index"], d["function"]["name"], d["function"]["arguments"]) for d in deltas] ==
          [(i, "get_weather", calls[0]["function"]["arguments"]) for i in range(2)] and
          events[-2]["choices"][0]["finish_reason"] == "tool_calls",
          "tools, streamed: each call whole in a delta with its index, then finish_reason tool_calls")
    _, text = post(port, "/v1/chat/completions", dict(body, tool_choice="none"))
    message = json.loads(text)["choices"][0]["message"]
    check(message == {"role": "assistant", "content": CALL_BLOCK * 2, "reasoning_content": None},
          "tools with tool_choice none: the blocks stay content")
    check_forced_tool_calls(port, body, block)


def check_streamed_calls(port, body, calls, label):
    """The same request streamed: its deltas' tool_calls are `calls` (the whole answer's)."""
    _, events = stream(port, "/v1/chat/completions", body)
    deltas = [d for e in events[:-1] for c in e["choices"] for d in c["delta"].get("tool_calls", [])]
    check([(d["function"]["name"], d["function"]["arguments"]) for d in deltas] ==
          [(c["function"]["name"], c["function"]["arguments"]) for c in calls], label)


def check_forced_tool_calls(port, body, block):
    """tool_choice "required": the answer is one call block, so the bias's block ends it (without,
    the model drew two). A named function: greedy from the start, the answer is a call of that
    function whose arguments follow its parameters, whole and streamed alike."""
    status, text = post(port, "/v1/chat/completions", dict(body, tool_choice="required", max_tokens=8))
    choice = json.loads(text)["choices"][0] if status == 200 else {}
    made = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in choice.get("message", {}).get("tool_calls", [])]
    check(made == [(WEATHER_CALL["name"], WEATHER_CALL["arguments"])] and choice["token_ids"] == [block] and
          choice["finish_reason"] == "tool_calls",
          f"tool_choice required: one call, ended by the block that makes it ({choice.get('message')})")
    named = {"messages": body["messages"][:1], "tools": WEATHER_TOOLS + [TIME_TOOL], "max_tokens": 200,
             "tool_choice": {"type": "function", "function": {"name": "get_time"}}}
    status, text = post(port, "/v1/chat/completions", named)
    choice = json.loads(text)["choices"][0] if status == 200 else {}
    message = choice.get("message", {})
    calls = message.get("tool_calls", [])
    arguments = json.loads(calls[0]["function"]["arguments"]) if len(calls) == 1 else None
    check(choice.get("finish_reason") == "tool_calls" and message.get("content") is None and len(calls) == 1 and
          calls[0]["function"]["name"] == "get_time" and isinstance(arguments, dict) and set(arguments) == {"zone"} and
          arguments["zone"] in ("utc", "local"),
          f"tool_choice naming get_time: the answer is a call of it, its arguments as its parameters say ({calls})")
    check_streamed_calls(port, named, calls, "tool_choice naming get_time, streamed: the same call")
    for choice_field, needle in [("required", "there are no 'tools'"),
                                 ({"type": "function", "function": {"name": "nope"}}, "not among 'tools'")]:
        request = {"messages": body["messages"][:1], "tool_choice": choice_field}
        if needle != "there are no 'tools'":
            request["tools"] = WEATHER_TOOLS
        status, text = post(port, "/v1/chat/completions", request)
        message = json.loads(text).get("error", {}).get("message", "")
        check(status == 400 and needle in message, f"tool_choice {choice_field}: 400 with '{needle}' ({message})")


def check_replicas(weights, expected_tokens, structured):
    """dp: two replicas of one device and one slot each. While a long request holds replica 0's
    slot, the requests sent go to replica 1 (a replica with a free slot is preferred) and answer as
    the batch job does, a response_format one as on the tp server (ending with its value, "stop");
    a stream on replica 1 reaches its client through rank 0; SIGTERM stops both."""
    process, port, log = start_server(weights, os.path.join(WORK, "dp_port"), "--port", "0", "--mode", "dp",
                                      "--max-batch", "1", "--max-context", str(CONTEXT))
    try:
        results = [None] * len(PROMPTS)
        # The long request: once its first token is out it holds replica 0 for 200 more tokens.
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        conn.request("POST", "/v1/completions", json.dumps({"prompt": PROMPTS[4][0], "max_tokens": 200,
                                                            "stream": True}), {"Content-Type": "application/json"})
        long_response = conn.getresponse()
        while not long_response.readline().startswith(b"data: "):
            pass

        logprobs = [None] * len(PROMPTS)

        def client(i):
            body = {"prompt": PROMPTS[i][0], "max_tokens": PROMPTS[i][1], "return_token_ids": True, "logprobs": 1}
            if i % 2:
                _, events = stream(port, "/v1/completions", body)
                logprobs[i] = []
                results[i] = gathered(events, False, logprobs[i])[1]
            else:
                choice = json.loads(post(port, "/v1/completions", body)[1])["choices"][0]
                results[i], logprobs[i] = choice["token_ids"], completion_logprobs(choice["logprobs"])

        json_answer = []

        def json_client():
            json_answer.append(json.loads(post(port, "/v1/completions", VERDICT_REQUEST)[1])["choices"][0])

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(PROMPTS))]
        threads.append(threading.Thread(target=json_client))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        long_response.read()
        conn.close()
        check(results == expected_tokens, "dp serving, 2 replicas: every request answers as the batch job does")
        check(json_answer[0]["token_ids"] == structured and json_answer[0]["finish_reason"] == "stop",
              "dp serving: a response_format request answers as on the tp server and ends with its value (\"stop\")")
        check(all(len(lp) == len(ids) and all(len(top) == 1 and logprob <= 0 for _, logprob, top, _ in lp)
                  for lp, ids in zip(logprobs, results)),
              "dp serving: every answer carries its log-probabilities, those from replica 1 too")
        log.seek(0)
        os.kill(int(re.search(rb"rank 0 \(pid (\d+)\)", log.read()).group(1)), signal.SIGTERM)
        status = process.wait(120)
        log.seek(0)
        out = log.read().decode(errors="replace")
        served = re.search(r"replica 1 stopped: (\d+) request", out)
        check(status == 0 and served is not None and int(served.group(1)) >= 1 and "server stopped" in out,
              f"dp serving: replica 1 served {served.group(1) if served else 'no'} of the {len(PROMPTS)} requests sent "
              "while replica 0 was busy, and SIGTERM stops both replicas")
        check("not MPI_THREAD_MULTIPLE" not in out, "dp serving: rank 0 relays on a thread of its own (MPI gave "
              "MPI_THREAD_MULTIPLE), so the other replica's tokens do not wait for rank 0's passes")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    model_dir = os.path.join(WORK, "model")
    hf.write_model_dir(model_dir, CONFIG, hf.llama_shapes(CONFIG), lambda _: "BF16")
    encode, _ = sentencepiece_tokenizer(model_dir, WORK)
    edit_tokenizer_config(model_dir, chat_template=ZEPHYR_THINKING)
    weights = os.path.join(WORK, "model.h5")
    r = run([os.path.join(BUILD, "apps", "meshnn-convert"), "--quiet", model_dir, weights])
    if r.returncode != 0:
        print((r.stdout + r.stderr).decode(errors="replace"))
        sys.exit(1)
    process, port, log = start_server(weights, os.path.join(WORK, "port"), "--port", "0", "--max-batch", str(SLOTS),
                                      "--max-context", str(CONTEXT), "--served-model-name", "served",
                                      "--chat-template-kwargs", '{"enable_thinking": true}')
    try:
        expected_tokens, expected_text = check_completions(port, weights, CONFIG["bos_token_id"], encode)
        check_chat(port, weights)
        check_template_kwargs(port, weights)
        check_logprobs(port, weights)
        check_conversation(port, weights)
        check_shared_start(port, weights)
        check_choices(port, weights)
        structured = check_structured_output(port)
        check_seeded_sampling(port, weights)
        check_penalties(port, weights)
        check_stop_strings(port, expected_text)
        check_hang_up(port, rank_pids(process, log)[1])
        check_hang_up_whole(port, rank_pids(process, log)[1])
        check_bad_requests(port, CONFIG["vocab_size"], expected_tokens)
        check_refusals(weights, port)
        check_shutdown(process, port, log)
        check_replicas(weights, expected_tokens, structured)
        check_parsers()
        check_unusable_template(model_dir, expected_tokens)
    except Exception as e:  # report, and never leave the server running
        check(False, f"the server checks ran ({e!r})")
        log.seek(0)
        print(log.read().decode(errors="replace")[-3000:])
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    finish(failures, WORK)


if __name__ == "__main__":
    main()
