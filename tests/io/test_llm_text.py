#!/usr/bin/env python3
"""Text in, text out: a Hugging Face Llama directory with a real tokenizer, converted, then
meshnn-llm with text prompts.

    test_llm_text.py BUILD_DIR WORK_DIR MPIEXEC [MPIEXEC_FLAGS...]

Three tokenizers, each with an encoder and decoder independent of meshnn's: a tokenizer.model
trained here with Debian's spm_train (Llama 2's settings) against python3-sentencepiece, and a
Llama 3-style and a Qwen2-style tokenizer.json (byte-level BPE, special tokens; Qwen2's with NFC
and no BOS template, on a Qwen2 model whose config names a bos_token_id all the same) trained by
tests/text/bpe_reference.py against that script's own encoder. Text sanitizing is Python's
bytes.decode(errors="replace").

1. Prompts given as text (--prompts JSONL with per-request max_tokens, and --prompt) generate
   exactly the tokens that the same prompts tokenized independently (BOS first, except for Qwen2)
   generate through --tokens, on 1 and 2 ranks.
2. The output file's `text` is each request's tokens decoded independently; `prompts` holds the
   prompt texts; stdout streams request 0 (its prompt, then its text) whole.
3. Bad input: a weights file without a tokenizer, a JSONL line with a misspelt key or bad JSON, and
   --prompt with --tokens fail with a message naming the problem, identically on every rank.
4. Chat: each model carries a chat template of its own writing, found where Hugging Face finds one
   (a Qwen2-style ChatML template as tokenizer_config.json's string, a Zephyr-style one as its list
   of named templates, a Llama 3-style one with the date as chat_template.jinja). --chat with
   --system and JSONL "messages" conversations generate exactly the tokens and logits of the same
   conversations rendered by Python's jinja2 as transformers' apply_chat_template configures it
   and tokenized independently without an added BOS; the output file's `prompts` are the rendered
   texts. --interactive answers turns typed on stdin as those whole conversations are answered. A
   model without a template, a template that raises, and malformed messages are refused alike on
   every rank.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "text"))
import bpe_reference  # noqa: E402
import hf_model_dir as hf  # noqa: E402
from llm_fixtures import (CHATML, CONFIG, LLAMA3, NO_SYSTEM, QWEN3_TEMPLATE_FILE, ZEPHYR, edit_tokenizer_config,  # noqa: E402
                          finish, hf_render, outputs, sentencepiece_tokenizer)

BUILD, WORK, MPIEXEC = sys.argv[1], sys.argv[2], sys.argv[3:]
LLM = os.path.join(BUILD, "apps", "meshnn-llm")
failures = []

PROMPTS = [
    ("the mesh device gathers every shard", 6),
    ("Café naïve — Ελληνικά, 中文 and 🙂", 9),  # unseen characters: byte-fallback pieces
    ("  spaces\tand\nnew lines  ", 4),
]


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(cmd, stdin=None):
    return subprocess.run(cmd, capture_output=True, timeout=600, input=stdin)


def byte_level_bpe_tokenizer(model_dir):
    """A Llama 3-style tokenizer.json (no tokenizer.model, no add_bos_token: BOS by default)."""
    os.remove(os.path.join(model_dir, "tokenizer.json"))
    os.remove(os.path.join(model_dir, "tokenizer.model"))
    os.remove(os.path.join(model_dir, "tokenizer_config.json"))
    tok = bpe_reference.llama3_form()
    with open(os.path.join(model_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    return (lambda text: bpe_reference.encode(tok, text),
            lambda ids: bpe_reference.decode(tok, ids).decode("utf-8", errors="replace"))


def qwen2_tokenizer(model_dir):
    """Qwen2's form: tokenizer.json with NFC, no BOS in its post_processor, and a
    tokenizer_config.json without add_bos_token, as Qwen2.5 ships it."""
    os.remove(os.path.join(model_dir, "tokenizer.model"))
    tok = bpe_reference.qwen2_form()
    with open(os.path.join(model_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"add_prefix_space": False, "bos_token": None, "eos_token": "<|im_end|>"}, f)
    return (lambda text: bpe_reference.encode(tok, text),
            lambda ids: bpe_reference.decode(tok, ids).decode("utf-8", errors="replace"))


def llm(ranks, weights, *args, stdin=None):
    return run([*MPIEXEC, "-n", str(ranks), LLM, "--weights", weights, "--weight-dtype", "bfloat16",
                "--ignore-eos", *args], stdin)


def run_attributes(path, ranks):
    """Whether the output file's root attributes name this run's settings and hold its timings."""
    with h5py.File(path, "r") as f:
        a = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
    settings = {"mesh": f"1x{ranks}", "mode": "tp", "weight_dtype": "bfloat16", "sampling": "greedy"}
    if any(str(a.get(k)) != v for k, v in settings.items()):
        print(f"{path}: root attributes {a}")
        return False
    return all(float(a.get(k, 0)) > 0 for k in ("prefill_seconds", "decode_ms_per_step", "decode_tokens_per_second"))


def converted_model(kind, make_tokenizer, config, add_chat_template):
    """A Hugging Face directory with the given tokenizer and chat template, converted; returns
    (weights, encode, decode)."""
    model_dir = os.path.join(WORK, kind)
    hf.write_model_dir(model_dir, config, hf.llama_shapes(config), lambda _: "BF16")
    encode, decode = make_tokenizer(model_dir)
    add_chat_template(model_dir)
    weights = os.path.join(WORK, f"{kind}.h5")
    r = run([os.path.join(BUILD, "apps", "meshnn-convert"), "--quiet", model_dir, weights])
    check(r.returncode == 0 and b"note:" not in r.stderr,
          f"{kind}: meshnn-convert of a directory with a trained tokenizer and a chat template, without a note")
    return weights, encode, decode


def check_convert_notes():
    """meshnn-convert says at conversion what meshnn-llm will not be able to use, and converts."""
    model_dir = os.path.join(WORK, "qwen2")
    edit_tokenizer_config(model_dir, chat_template="{% extends 'base.jinja' %}")
    r = run([os.path.join(BUILD, "apps", "meshnn-convert"), "--quiet", model_dir, os.path.join(WORK, "noted.h5")])
    check(r.returncode == 0 and b"cannot run this model's chat template" in r.stderr and b"line 1" in r.stderr,
          "meshnn-convert notes a chat template meshnn cannot run, naming its line")
    with open(os.path.join(model_dir, "tokenizer.json"), "w") as f:
        f.write("{}")
    r = run([os.path.join(BUILD, "apps", "meshnn-convert"), "--quiet", model_dir, os.path.join(WORK, "noted.h5")])
    check(r.returncode == 0 and b"cannot use this tokenizer" in r.stderr, "meshnn-convert notes an unusable tokenizer")


def check_text_job(kind, weights, encode, decode, bos):
    """Text prompts against the same prompts as independently encoded ids; returns the tokens file."""
    jsonl = os.path.join(WORK, f"{kind}_prompts.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for text, n in PROMPTS:
            f.write(json.dumps({"prompt": text, "max_tokens": n}, ensure_ascii=False) + "\n\n")

    # The same prompts as ids, tokenized independently, BOS first (bos None: none).
    ids = [([bos] if bos is not None else []) + encode(text) for text, _ in PROMPTS]
    tokens_file = os.path.join(WORK, f"{kind}_tokens.h5")
    width = max(len(x) for x in ids)
    with h5py.File(tokens_file, "w") as f:
        f["tokens"] = np.array([x + [0] * (width - len(x)) for x in ids], dtype=np.int32)
        f["prompt_lengths"] = np.array([len(x) for x in ids], dtype=np.int32)
        f["max_new_tokens"] = np.array([n for _, n in PROMPTS], dtype=np.int32)

    results = {}
    for ranks in (1, 2):
        text_out, ids_out = (os.path.join(WORK, f"{kind}_text_np{ranks}.h5"),
                             os.path.join(WORK, f"{kind}_ids_np{ranks}.h5"))
        rt = llm(ranks, weights, "--prompts", jsonl, "--output", text_out, "--save-logits")
        ri = llm(ranks, weights, "--tokens", tokens_file, "--output", ids_out, "--save-logits")
        if rt.returncode != 0 or ri.returncode != 0:
            print((rt.stdout + rt.stderr + ri.stdout + ri.stderr).decode(errors="replace")[-4000:])
            check(False, f"{kind}: meshnn-llm with text prompts and with ids on {ranks} rank(s)")
            continue
        (t_tokens, t_text, t_prompts, t_logits), (i_tokens, i_text, _, i_logits) = outputs(text_out), outputs(ids_out)
        results[ranks] = t_tokens
        # The logits too: a tied model's greedy tokens may not notice a BOS more or less.
        check(np.array_equal(t_tokens, i_tokens) and np.array_equal(t_logits, i_logits),
              f"{kind}, {ranks} rank(s): text prompts generate the tokens and logits the independent encoder's ids "
              "generate")
        expected = [decode([int(t) for t in row if t >= 0]) for row in t_tokens]
        check(t_text == expected and i_text == expected,
              f"{kind}, {ranks} rank(s): the output file's text is the tokens decoded independently")
        check(t_prompts == [p for p, _ in PROMPTS], f"{kind}, {ranks} rank(s): the output file holds the prompt texts")
        check([int((row >= 0).sum()) for row in t_tokens] == [n for _, n in PROMPTS],
              f"{kind}, {ranks} rank(s): each request made its max_tokens")
        check(run_attributes(ids_out, ranks),
              f"{kind}, {ranks} rank(s): the output file's root attributes hold the run's settings and timings")
        stdout = rt.stdout.decode("utf-8")  # strict: streamed text must be valid UTF-8
        streamed = "request 0:\n" + PROMPTS[0][0] + expected[0] + "\n"
        check(streamed in stdout and stdout.count("request 0:\n") == 1,
              f"{kind}, {ranks} rank(s): request 0 streamed to stdout once, prompt then text")
    if 1 in results and 2 in results:
        check(np.array_equal(results[1], results[2]), f"{kind}: text prompts on 2 ranks generate what 1 rank does")
    return tokens_file

CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "every shard of the mesh device"},
                  {"role": "assistant", "content": " gathers the tensor "},
                  {"role": "user", "content": "and {{ reduce }} {% it %} — Café"}], "max_tokens": 3},
    {"messages": [{"role": "system", "content": "You stream tokens.\\n"},
                  {"role": "user", "content": "prefill the cache"}]},
]


def check_chat_job(kind, weights, encode, template, special_tokens):
    """--chat with --system and "messages" conversations against jinja2's rendering, independently
    encoded without an added BOS and given as ids."""
    jsonl = os.path.join(WORK, f"{kind}_chat.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for c in CONVERSATIONS:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    cli_user, cli_system = "the ring reduces", "Answer in one word."
    conversations = [[{"role": "system", "content": cli_system}, {"role": "user", "content": cli_user}]]
    conversations += [c["messages"] for c in CONVERSATIONS]
    max_tokens = [4, 3, 4]
    text_out = os.path.join(WORK, f"{kind}_chat.h5")
    before = time.time()
    rt = llm(2, weights, "--chat", "--system", cli_system, "--prompt", cli_user, "--prompts", jsonl,
             "--max-new-tokens", "4", "--output", text_out, "--save-logits")
    after = time.time()
    if rt.returncode != 0:
        print((rt.stdout + rt.stderr).decode(errors="replace")[-4000:])
        check(False, f"{kind}: meshnn-llm --chat runs")
        return
    t_tokens, _, t_prompts, t_logits = outputs(text_out)
    # The date a template prints is rank 0's clock during the run: either end of it.
    candidates = [[hf_render(template, m, special_tokens, t) for m in conversations] for t in (before, after)]
    check(t_prompts in candidates, f"{kind}: the output file's prompts are the conversations as jinja2 renders them")
    rendered = t_prompts if t_prompts in candidates else candidates[0]
    ids = [encode(text) for text in rendered]
    tokens_file = os.path.join(WORK, f"{kind}_chat_tokens.h5")
    width = max(len(x) for x in ids)
    with h5py.File(tokens_file, "w") as f:
        f["tokens"] = np.array([x + [0] * (width - len(x)) for x in ids], dtype=np.int32)
        f["prompt_lengths"] = np.array([len(x) for x in ids], dtype=np.int32)
        f["max_new_tokens"] = np.array(max_tokens, dtype=np.int32)
    ids_out = os.path.join(WORK, f"{kind}_chat_ids.h5")
    ri = llm(2, weights, "--tokens", tokens_file, "--output", ids_out, "--save-logits")
    if ri.returncode != 0:
        print((ri.stdout + ri.stderr).decode(errors="replace")[-4000:])
        check(False, f"{kind}: the chat prompts as ids run")
        return
    i_tokens, _, _, i_logits = outputs(ids_out)
    check(np.array_equal(t_tokens, i_tokens) and np.array_equal(t_logits, i_logits),
          f"{kind}: chat prompts generate the tokens and logits of jinja2's rendering encoded independently")


def check_shared_system_prompt(kind, weights):
    """The batch job's requests behind one long system prompt prefill it once: the others copy it
    from the first one's slot, and generate the tokens (and, in float32, the logits to rounding) of
    a run that prefills every prompt whole."""
    system = "You answer about " + "the mesh device gathers every shard and every rank reduces the ring. " * 6
    runs = {}
    for name, extra in (("shared", []), ("whole", ["--no-prefix-reuse"])):
        out = os.path.join(WORK, f"{kind}_system_{name}.h5")
        r = llm(2, weights, "--act-dtype", "float32", "--chat", "--system", system, "--prompt", "What is a tile?",
                "--prompt", "Why a ring?", "--prompt", "Who decodes?", "--max-new-tokens", "5", "--output", out,
                "--save-logits", *extra)
        if r.returncode != 0:
            print((r.stdout + r.stderr).decode(errors="replace")[-4000:])
            check(False, f"{kind}: the batch job behind one system prompt runs ({name})")
            return
        found = re.search(r"prefix reuse: (\d+) prompt tokens", r.stdout.decode(errors="replace"))
        runs[name] = (outputs(out), int(found.group(1)) if found else 0)
    (shared, reused), (whole, none) = runs["shared"], runs["whole"]
    worst = max(float(np.max(np.abs(a - b))) for a, b in zip(shared[3], whole[3]))
    check(np.array_equal(shared[0], whole[0]) and worst < 1e-3 and reused >= 2 * 32 and none == 0,
          f"{kind}: three requests behind one system prompt take {reused} prompt tokens from the KV cache and "
          f"generate the tokens of whole prefills (logits within {worst:.1e})")


# A schema whose answers are short, checked by hand in follows_verdict_schema.
VERDICT_SCHEMA = {"type": "object", "properties": {"verdict": {"enum": ["yes", "no"]}, "ok": {"type": "boolean"}},
                  "required": ["verdict", "ok"], "additionalProperties": False}


def follows_verdict_schema(text):
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return isinstance(value, dict) and set(value) == {"verdict", "ok"} and value["verdict"] in ("yes", "no") and \
        isinstance(value["ok"], bool)


def check_structured_job(kind, weights):
    """Structured output in the batch job: a --prompts line's response_format, --json-schema for
    every prompt, and --json-object; the answers are JSON their schema accepts, or the start of a
    JSON object at max tokens; a line without a format beside them is answered as alone."""
    schema_file = os.path.join(WORK, "verdict_schema.json")
    with open(schema_file, "w") as f:
        json.dump(VERDICT_SCHEMA, f)
    lines = [{"prompt": "the ring", "max_tokens": 150,
              "response_format": {"type": "json_schema", "json_schema": {"name": "v", "schema": VERDICT_SCHEMA}}},
             {"prompt": "the mesh", "max_tokens": 6}]
    prompts = os.path.join(WORK, f"{kind}_structured.jsonl")
    with open(prompts, "w") as f:
        f.write("\n".join(json.dumps(line) for line in lines) + "\n")
    texts = {}
    for name, args in (("line", ["--prompts", prompts]), ("alone", ["--prompt", "the mesh", "--max-new-tokens", "6"]),
                       ("schema", ["--prompt", "the tile", "--prompt", "a rank", "--json-schema", schema_file,
                                   "--max-new-tokens", "150"]),
                       ("object", ["--prompt", "the tile", "--json-object", "--max-new-tokens", "24"])):
        out = os.path.join(WORK, f"{kind}_structured_{name}.h5")
        r = llm(2, weights, *args, "--output", out)
        if r.returncode != 0:
            print((r.stdout + r.stderr).decode(errors="replace")[-3000:])
            check(False, f"{kind}: the batch job with structured output runs ({name})")
            return
        texts[name] = outputs(out)[1]
    check(follows_verdict_schema(texts["line"][0]) and texts["line"][1] == texts["alone"][0],
          f"{kind}: a --prompts line's response_format makes JSON its schema accepts ({texts['line'][0]!r}); the "
          "line beside it answers as alone")
    check(all(follows_verdict_schema(t) for t in texts["schema"]),
          f"{kind}: --json-schema makes every prompt's answer JSON the schema accepts ({texts['schema']})")
    answer = texts["object"][0]
    try:
        whole = isinstance(json.loads(answer), dict)
    except ValueError:
        whole = answer.lstrip().startswith("{")
    check(whole, f"{kind}: --json-object makes a JSON object, or its start at max tokens ({answer!r})")
    for args, needle in ((["--prompt", "a", "--json-schema", os.path.join(WORK, "missing.json")], "cannot open"),
                         (["--json-object"], "apply to text prompts")):
        r = llm(1, weights, *args)
        out = (r.stdout + r.stderr).decode(errors="replace")
        check(r.returncode != 0 and needle in out, f"{kind}: {' '.join(args[-2:])} is refused with '{needle}'")


def check_chat_session(kind, weights):
    """--interactive: turns typed on stdin (a blank line between them) are answered as the same
    conversations given whole to --chat and as "messages" are, each earlier answer its assistant
    message, although the second turn takes the first one's tokens from the cache; the transcript
    holds each turn's conversation and answer ids, and stdout the answers."""
    system, q1, q2 = "Be brief.", "the mesh device", "and the ring?"
    transcript = os.path.join(WORK, f"{kind}_transcript.jsonl")
    r = llm(2, weights, "--interactive", "--system", system, "--max-new-tokens", "4", "--transcript", transcript,
            stdin=f"{q1}\n  \n{q2}\n".encode())
    first, second = os.path.join(WORK, f"{kind}_turn1.h5"), os.path.join(WORK, f"{kind}_turn2.h5")
    r1 = llm(2, weights, "--chat", "--system", system, "--prompt", q1, "--max-new-tokens", "4", "--output", first)
    if r.returncode != 0 or r1.returncode != 0:
        print((r.stdout + r.stderr + r1.stdout + r1.stderr).decode(errors="replace")[-4000:])
        check(False, f"{kind}: --interactive and --chat run")
        return
    tokens1, (answer1,), _, _ = outputs(first)
    conversation = [{"role": "system", "content": system}, {"role": "user", "content": q1},
                    {"role": "assistant", "content": answer1}, {"role": "user", "content": q2}]
    jsonl = os.path.join(WORK, f"{kind}_turn2.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        f.write(json.dumps({"messages": conversation, "max_tokens": 4}) + "\n")
    r2 = llm(2, weights, "--prompts", jsonl, "--output", second)
    if r2.returncode != 0:
        print((r2.stdout + r2.stderr).decode(errors="replace")[-4000:])
        check(False, f"{kind}: the second turn as messages runs")
        return
    tokens2, (answer2,), _, _ = outputs(second)
    with open(transcript, encoding="utf-8") as f:
        turns = [json.loads(line) for line in f]
    expected = [{"messages": conversation[:3], "answer_tokens": tokens1[0].tolist()},
                {"messages": conversation + [{"role": "assistant", "content": answer2}],
                 "answer_tokens": tokens2[0].tolist()}]
    check(turns == expected, f"{kind}: --interactive answers two turns as --chat and \"messages\" do (transcript)")
    out = r.stdout.decode("utf-8")
    first_at = out.find("> " + answer1 + "\n")
    second_at = out.find("> " + answer2 + "\n", first_at + 1)
    check(0 <= first_at < second_at, f"{kind}: --interactive streams each answer after its prompt mark")
    # The second turn begins with the first turn's conversation, which the cache still holds.
    reused = [int(m) for m in re.findall(r"prompt tokens, (\d+) of them from the cache", out)]
    check(len(reused) == 2 and reused[0] == 0 and reused[1] > 0,
          f"{kind}: the second turn prefills only what the cache does not hold ({reused} tokens reused)")


def check_template_kwargs(kind, weights, special_tokens):
    """--chat-template-kwargs reach the template: Qwen3's reasoning switch (the corpus's
    qwen3_thinking.jinja, given with --chat-template) renders as jinja2 renders it with the same
    keyword argument, an empty reasoning block opening the answer."""
    with open(QWEN3_TEMPLATE_FILE, encoding="utf-8") as f:
        template = f.read()
    out = os.path.join(WORK, f"{kind}_kwargs.h5")
    r = llm(2, weights, "--chat", "--chat-template", QWEN3_TEMPLATE_FILE, "--chat-template-kwargs",
            '{"enable_thinking": false}', "--system", "Be brief.", "--prompt", "the ring reduces",
            "--max-new-tokens", "2", "--output", out)
    if r.returncode != 0:
        print((r.stdout + r.stderr).decode(errors="replace")[-3000:])
        check(False, f"{kind}: --chat-template-kwargs runs")
        return
    _, _, prompts, _ = outputs(out)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "the ring reduces"}]
    expected = hf_render(template, messages, special_tokens, 0, {"enable_thinking": False})
    check(prompts == [expected] and expected.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
          f"{kind}: --chat-template-kwargs '{{\"enable_thinking\": false}}' renders as jinja2 does with the same "
          f"keyword argument")


def check_chat_refusals(weights, no_template_weights):
    """Chat input meshnn cannot render is refused with the same message on every rank."""
    no_system = os.path.join(WORK, "no_system.jinja")
    with open(no_system, "w") as f:
        f.write(NO_SYSTEM)
    bad_messages = os.path.join(WORK, "bad_messages.jsonl")
    with open(bad_messages, "w") as f:
        f.write('{"messages": [{"role": "user"}]}\n')
    for args, needle, status in (
            ((no_template_weights, "--chat", "--prompt", "hi"), "has no chat template", 1),
            ((weights, "--chat", "--system", "be brief", "--prompt", "hi", "--chat-template", no_system),
             "chat template: System role not supported", 1),
            ((weights, "--prompts", bad_messages), "bad_messages.jsonl:1: each message must be", 1),
            ((weights, "--chat", "--prompt", "hi", "--chat-template-kwargs", "[1]"),
             "--chat-template-kwargs must be a JSON object", 1),
            ((weights, "--prompt", "hi", "--chat-template-kwargs", '{"enable_thinking": false}'),
             "--chat-template-kwargs applies to --chat", 1),
            ((weights, "--chat"), "--chat applies to text prompts", 1),
            ((weights, "--system", "be brief", "--prompt", "hi"), "--system requires --chat or --interactive", 2),
            ((weights, "--interactive", "--mode", "dp"), "--interactive holds one conversation", 2),
            ((weights, "--interactive", "--prompt", "hi"), "--prompt excludes --interactive", 2)):
        r = llm(2, *args)
        out = (r.stdout + r.stderr).decode(errors="replace")
        check(r.returncode == status and needle in out, f"chat: refused with '{needle}' (exit status {status})")


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    special = {t["content"]: t["id"] for t in bpe_reference.llama3_form()["added_tokens"]}
    bos = special["<|begin_of_text|>"]
    bpe_config = dict(CONFIG, vocab_size=640, bos_token_id=bos, eos_token_id=special["<|eot_id|>"])
    def llama3_chat(model_dir):
        with open(os.path.join(model_dir, "chat_template.jinja"), "w") as f:
            f.write(LLAMA3)
        with open(os.path.join(model_dir, "special_tokens_map.json"), "w") as f:
            json.dump({"bos_token": {"content": "<|begin_of_text|>", "special": True}, "eos_token": "<|eot_id|>"}, f)

    bpe_weights, encode, decode = converted_model("byte_level_bpe", byte_level_bpe_tokenizer, bpe_config, llama3_chat)
    check_text_job("byte_level_bpe", bpe_weights, encode, decode, bos)
    check_chat_job("byte_level_bpe", bpe_weights, encode, LLAMA3,
                   {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"})
    check_structured_job("byte_level_bpe", bpe_weights)

    special = {t["content"]: t["id"] for t in bpe_reference.qwen2_form()["added_tokens"]}
    qwen2_config = dict(CONFIG, architectures=["Qwen2ForCausalLM"], model_type="qwen2", vocab_size=640,
                        tie_word_embeddings=True, bos_token_id=special["<|endoftext|>"],
                        eos_token_id=special["<|im_end|>"])
    qwen2_weights, encode, decode = converted_model("qwen2", qwen2_tokenizer, qwen2_config,
                                                    lambda d: edit_tokenizer_config(d, chat_template=CHATML))
    check_text_job("qwen2", qwen2_weights, encode, decode, None)
    check_chat_job("qwen2", qwen2_weights, encode, CHATML, {"eos_token": "<|im_end|>"})
    check_template_kwargs("qwen2", qwen2_weights, {"eos_token": "<|im_end|>"})

    named = [{"name": "tool_use", "template": "{{ raise_exception('not this one') }}"},
             {"name": "default", "template": ZEPHYR}]
    weights, encode, decode = converted_model("sentencepiece", lambda d: sentencepiece_tokenizer(d, WORK), CONFIG,
                                              lambda d: edit_tokenizer_config(d, chat_template=named))
    tokens_file = check_text_job("sentencepiece", weights, encode, decode, CONFIG["bos_token_id"])
    check_chat_job("sentencepiece", weights, encode, ZEPHYR, {"bos_token": "<s>", "eos_token": "</s>"})
    check_chat_session("sentencepiece", weights)
    check_shared_system_prompt("sentencepiece", weights)
    check_structured_job("sentencepiece", weights)
    check_chat_session("qwen2", qwen2_weights)

    no_template = os.path.join(WORK, "no_template.h5")
    shutil.copy(bpe_weights, no_template)
    with h5py.File(no_template, "a") as f:
        del f["tokenizer/chat_template.jinja"]
    check_chat_refusals(weights, no_template)
    check_convert_notes()

    # --prompt (repeatable) and the stream of a prompt with multi-byte characters.
    r = llm(2, weights, "--prompt", PROMPTS[1][0], "--max-new-tokens", "5", "--output", os.path.join(WORK, "one.h5"))
    if r.returncode == 0:
        tokens, text, _, _ = outputs(os.path.join(WORK, "one.h5"))
        check(tokens.shape == (1, 5) and ("request 0:\n" + PROMPTS[1][0] + text[0] + "\n") in r.stdout.decode("utf-8"),
              "--prompt with multi-byte characters streams prompt and text")
    else:
        print((r.stdout + r.stderr).decode(errors="replace")[-3000:])
        check(False, "--prompt runs")

    # Bad input: the same clear message from every rank's agreement, exit status 1 (2 for usage).
    bare = os.path.join(WORK, "bare.h5")
    shutil.copy(weights, bare)
    with h5py.File(bare, "a") as f:
        del f["tokenizer"]
    bad_key, bad_json = os.path.join(WORK, "bad_key.jsonl"), os.path.join(WORK, "bad_json.jsonl")
    with open(bad_key, "w") as f:
        f.write('{"prompt": "a"}\n{"prompt": "b", "max_new_tokens": 3}\n')
    with open(bad_json, "w") as f:
        f.write('{"prompt": "a"\n')
    for args, needle in (((bare, "--prompt", "hello"), "text prompts need a tokenizer"),
                         ((weights, "--prompts", bad_key), "bad_key.jsonl:2: unknown key 'max_new_tokens'"),
                         ((weights, "--prompts", bad_json), "bad_json.jsonl:1: not a JSON object"),
                         ((weights, "--prompt", "a", "--tokens", tokens_file), "--tokens cannot be combined")):
        r = llm(2, *args)
        out = (r.stdout + r.stderr).decode(errors="replace")
        check(r.returncode != 0 and needle in out, f"refused with '{needle}'")
    r = llm(2, bare, "--tokens", tokens_file)
    check(r.returncode == 0, "ids without a tokenizer still run")

    finish(failures, WORK)


if __name__ == "__main__":
    main()
