"""What the text tests share: a small Llama configuration, a SentencePiece tokenizer trained here
with its encoder and decoder written apart from meshnn's, chat templates of the tests' own writing
in three families' formats, Hugging Face's rendering of them through jinja2, and the output file's
datasets. Used by test_llm_text.py and test_server.py."""
import json
import os
import shutil
import sys
import time

import h5py
import jinja2.ext
import jinja2.sandbox
import numpy as np
import sentencepiece as spm

CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 416, "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "torch_dtype": "bfloat16",
}
def sentencepiece_tokenizer(model_dir, work, user_defined_symbols=()):
    """tokenizer.model by spm_train (each of user_defined_symbols one piece); returns the
    independent (encode, decode)."""
    words = ("the mesh device tensor shard gather reduce token model layer attention cache prefill "
             "decode rank ring matrix tile weight users prompt stream every").split()
    rng = np.random.default_rng(3)
    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        for i in range(500):
            f.write(" ".join(words[k] for k in rng.integers(0, len(words), 10)) + f" {i}. Café naïve.\n")
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=os.path.join(model_dir, "tokenizer"), vocab_size=400, model_type="bpe",
        byte_fallback=True, split_digits=True, character_coverage=1.0, normalization_rule_name="identity",
        remove_extra_whitespaces=False, allow_whitespace_only_pieces=True, hard_vocab_limit=False,
        user_defined_symbols=list(user_defined_symbols), minloglevel=2)
    os.remove(os.path.join(model_dir, "tokenizer.vocab"))
    os.remove(os.path.join(model_dir, "tokenizer.json"))  # the stand-in hf_model_dir wrote
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": True, "bos_token": "<s>", "eos_token": "</s>"}, f)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model"))
    return lambda text: sentencepiece_encode(sp, text), lambda ids: sentencepiece_text(sp, ids)


def sentencepiece_encode(sp, text):
    """As Hugging Face's LlamaTokenizer: control pieces written in the text ("</s>") stand for
    themselves, and each stretch between them is encoded alone (with its own dummy prefix)."""
    controls = sorted((sp.id_to_piece(i) for i in range(sp.get_piece_size()) if sp.is_control(i)), key=len,
                      reverse=True)
    for piece in controls:
        if piece in text:
            head, tail = text.split(piece, 1)
            return sentencepiece_encode(sp, head) + [sp.piece_to_id(piece)] + sentencepiece_encode(sp, tail)
    return sp.encode(text) if text else []


def sentencepiece_text(sp, ids):
    """Decoding written apart from meshnn's: pieces to bytes by hand, then Python's lossy UTF-8."""
    out, first = b"", True
    for i in ids:
        if i >= sp.get_piece_size() or sp.is_control(i):
            continue
        piece = sp.id_to_piece(i)
        if sp.is_byte(i):
            out += bytes([int(piece[3:5], 16)])
        else:
            if first and piece.startswith("\u2581"):
                piece = piece[1:]
            out += piece.replace("\u2581", " ").encode("utf-8")
        first = False
    return out.decode("utf-8", errors="replace")


def outputs(path):
    with h5py.File(path, "r") as f:
        tokens = f["tokens"][...]
        logits = f["logits"][...] if "logits" in f else None
        text = [t.decode("utf-8") for t in f["text"][...]] if "text" in f else None
        prompts = [t.decode("utf-8") for t in f["prompts"][...]] if "prompts" in f else None
    return tokens, text, prompts, logits


def edit_tokenizer_config(model_dir, **entries):
    path = os.path.join(model_dir, "tokenizer_config.json")
    with open(path) as f:
        config = json.load(f)
    config.update(entries)
    with open(path, "w") as f:
        json.dump(config, f)


# Chat templates of this test's own writing, in the shapes of three families' prompt formats.
CHATML = ("{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a mesh.<|im_end|>\n{% endif %}"
          "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
ZEPHYR = """{% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>\\n' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>\\n' + message['content'] + eos_token }}
{% else %}
{{ '<|assistant|>\\n' + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %}"""
LLAMA3 = """{{- bos_token }}
{%- set ns = namespace(system='') %}
{%- if messages[0].role == 'system' %}
    {%- set ns.system = messages[0].content | trim %}
    {%- set messages = messages[1:] %}
{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}
{{- 'Today Date: ' + strftime_now('%d %b %Y') + '\\n\\n' + ns.system + '<|eot_id|>' }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"""
NO_SYSTEM = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
             "{% for m in messages %}{{ m.content }}{% endfor %}")

# The corpus's Qwen3-style template: reasoning in <think> tags with the enable_thinking switch, tools
# and tool calls.
QWEN3_TEMPLATE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "text", "chat_templates",
                                   "qwen3_thinking.jinja")


def hf_render(template, messages, special_tokens, now, variables=None):
    """What transformers' apply_chat_template renders: a sandboxed, immutable jinja2 environment with
    trim_blocks, lstrip_blocks and loop controls, raise_exception and strftime_now as globals, the
    tools and documents variables None, the special tokens as variables, and `variables` (its
    keyword arguments, which may replace any of those); tojson is json.dumps, as transformers'."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: time.strftime(fmt, time.localtime(now))
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    names = dict(messages=messages, add_generation_prompt=True, tools=None, documents=None, **special_tokens)
    names.update(variables or {})
    return env.from_string(template).render(**names)


def finish(failures, work):
    """Ends a test script: lists the failed checks, keeps the work directory only for them."""
    print(f"{len(failures)} failure(s)")
    for f in failures:
        print("  " + f)
    if not failures:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failures else 0)
