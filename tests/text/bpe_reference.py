#!/usr/bin/env python3
"""An independent byte-level BPE for tokenizer.json files, and a small trainer that writes them.

meshnn's C++ tokenizer (src/text/) is checked against this script. It is written apart from the
C++ and as plainly as possible: strings and lists, quadratic loops, Python's `regex` module for the
pre-tokenizer patterns (Debian's python3-regex, so run it with /usr/bin/python3) and Python's own
unicodedata for the normalizers (the C++ uses utf8proc). It follows the semantics of Hugging Face's
tokenizers for what the C++ accepts: added tokens with normalized false split off the raw text
first, the normalizers NFC, NFD, NFKC, NFKD and Sequence on what is left, then the added tokens
with normalized true, the ByteLevel and Split pre-tokenizers, the BPE model (merge priority =
position in the merge list, ignore_merges, unk_token), and the ByteLevel decoder.

  bpe_reference.py train OUTDIR
      learns merges from a built-in text and writes OUTDIR/FORM/tokenizer.json for the forms:
      gpt2 (ByteLevel with its regex, merges as "a b" strings), llama3 (Split on Llama 3's regex
      then ByteLevel without one, ignore_merges, merges as pairs), qwen2 (Qwen2's: NFC, Split on
      its regex, ByteLevel without one) and nfkc_nfd (a Sequence of NFKC then NFD before GPT-2's
      ByteLevel).
  bpe_reference.py encode TOKENIZER_JSON STRINGS_JSON OUT_JSON
      reads a JSON list of strings and writes, for each, {"ids": [...], "decoded": hex of
      decode(ids)} to OUT_JSON.
"""
import collections
import json
import pathlib
import sys
import unicodedata

import regex

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                  r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
# Llama 3's but with one digit at a time.
QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                 r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")

# What Rust's regex calls \w (Unicode), which decides whether an added token stands alone.
WORD_CHAR = regex.compile(r"[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\u200c\u200d]")
WHITESPACE = regex.compile(r"\s")


def byte_to_char():
    """GPT-2's table: bytes that print stand for themselves, the others for 256, 257, ... in order."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table = {}
    shifted = 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


BYTE_TO_CHAR = byte_to_char()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def to_byte_chars(text):
    return "".join(BYTE_TO_CHAR[b] for b in text.encode("utf-8"))


# ---- normalization ---------------------------------------------------------------------------

def normalize(spec, text):
    """`text` through tokenizer.json's normalizer (None: unchanged)."""
    if spec is None:
        return text
    kind = spec["type"]
    if kind == "Sequence":
        for step in spec["normalizers"]:
            text = normalize(step, text)
        return text
    if kind in ("NFC", "NFD", "NFKC", "NFKD"):
        return unicodedata.normalize(kind, text)
    raise ValueError(f"normalizer {kind} is not supported here")


# ---- pre-tokenization ------------------------------------------------------------------------

def isolate(pattern, text):
    """The matches of `pattern` and the stretches between them, in order, without empty ones."""
    parts = []
    prev = 0
    for m in pattern.finditer(text):
        parts.append(text[prev:m.start()])
        parts.append(m.group())
        prev = m.end()
    parts.append(text[prev:])
    return [p for p in parts if p]


def pre_tokenize(spec, pieces):
    kind = spec["type"]
    if kind == "Sequence":
        for step in spec["pretokenizers"]:
            pieces = pre_tokenize(step, pieces)
        return pieces
    if kind == "Split":
        pattern = spec["pattern"]
        compiled = regex.compile(pattern["Regex"] if "Regex" in pattern else regex.escape(pattern["String"]))
        return [part for piece in pieces for part in isolate(compiled, piece)]
    if kind == "ByteLevel":
        gpt2 = regex.compile(GPT2_PATTERN)
        out = []
        for piece in pieces:
            if spec.get("add_prefix_space", True) and not piece.startswith(" "):
                piece = " " + piece
            parts = isolate(gpt2, piece) if spec.get("use_regex", True) else [piece]
            out.extend(to_byte_chars(p) for p in parts)
        return out
    raise ValueError(f"pre-tokenizer {kind} is not supported here")


# ---- added tokens ----------------------------------------------------------------------------

def split_on_added(text, tokens):
    """[(text, id or None)]: the leftmost, longest occurrences of `tokens` in `text`, as
    tokenizers' AddedVocabulary finds them, with lstrip/rstrip/single_word applied."""
    out = []
    done = 0  # text before this index is in `out`
    pos = 0
    while pos < len(text):
        best = None
        for t in tokens:
            if t["content"] and text.startswith(t["content"], pos):
                if best is None or len(t["content"]) > len(best["content"]):
                    best = t
        if best is None:
            pos += 1
            continue
        start, stop = pos, pos + len(best["content"])
        pos = stop
        if best.get("single_word", False):
            word_before = start > 0 and WORD_CHAR.match(text[start - 1])
            word_after = stop < len(text) and WORD_CHAR.match(text[stop])
            if word_before or word_after:
                continue
        if best.get("lstrip", False):
            while start > done and WHITESPACE.match(text[start - 1]):
                start -= 1
        if best.get("rstrip", False):
            while stop < len(text) and WHITESPACE.match(text[stop]):
                stop += 1
            pos = stop
        if done < start:
            out.append((text[done:start], None))
        out.append((text[start:stop], best["id"]))
        done = stop
    if done < len(text):
        out.append((text[done:], None))
    return out


# ---- the model -------------------------------------------------------------------------------

def read_merges(model):
    ranks = {}
    for rank, m in enumerate(model["merges"]):
        a, b = m.split(" ") if isinstance(m, str) else m
        ranks[(a, b)] = rank  # a pair listed twice keeps its last place, as in tokenizers
    return ranks


def bpe(word, model, ranks):
    vocab = model["vocab"]
    if model.get("ignore_merges", False) and word in vocab:
        return [vocab[word]]
    parts = list(word)
    while True:
        best = None
        for i in range(len(parts) - 1):
            rank = ranks.get((parts[i], parts[i + 1]))
            if rank is not None and (best is None or rank < best[0]):
                best = (rank, i)
        if best is None:
            break
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    ids = []
    unk = model.get("unk_token")
    previous_unknown = False
    for p in parts:
        if p in vocab:
            ids.append(vocab[p])
            previous_unknown = False
        elif unk is not None:
            if not (model.get("fuse_unk", False) and previous_unknown):
                ids.append(vocab[unk])
            previous_unknown = True
    return ids


def encode(tok, text):
    model = tok["model"]
    ranks = read_merges(model)
    added = tok.get("added_tokens") or []
    normalizer = tok.get("normalizer")
    raw_tokens = [t for t in added if not t.get("normalized", True)]
    # The others are looked for in normalized text, so as their contents normalize.
    normalized_tokens = [dict(t, content=normalize(normalizer, t["content"]))
                         for t in added if t.get("normalized", True)]
    segments = []
    for seg, tid in split_on_added(text, raw_tokens):
        if tid is not None:
            segments.append((seg, tid))
        else:  # each stretch between raw tokens is normalized on its own
            segments.extend(split_on_added(normalize(normalizer, seg), normalized_tokens))
    ids = []
    for seg, tid in segments:
        if tid is not None:
            ids.append(tid)
            continue
        for word in pre_tokenize(tok["pre_tokenizer"], [seg]):
            ids.extend(bpe(word, model, ranks))
    return ids


def decode(tok, ids):
    text_of = {i: t for t, i in tok["model"]["vocab"].items()}
    special = set()
    for t in tok.get("added_tokens") or []:
        text_of[t["id"]] = t["content"]
        if t["special"]:
            special.add(t["id"])
    out = bytearray()
    for i in ids:
        if i in special or i not in text_of:
            continue
        token = text_of[i]
        if all(c in CHAR_TO_BYTE for c in token):
            out.extend(CHAR_TO_BYTE[c] for c in token)
        else:  # as the ByteLevel decoder does: a token it cannot map stays as its UTF-8
            out.extend(token.encode("utf-8"))
    return bytes(out)


# ---- training --------------------------------------------------------------------------------

CORPUS = """\
The quick brown fox jumps over the lazy dog. The dog doesn't mind; it's a lazy dog, and they've
always been friends. I'll tell you what we'd do: we're going to read the story again and again.
She said "Hello, world!" and he answered 'hello there'. In 2024 there were 12345 readers, and in
2025 there will be 67890 more. Numbers like 3.14159, 2.71828 and 1,000,000 show up in text too.
Tokenizers split text into words, then words into pieces. The pieces that appear together often
are merged first, so common words become single tokens while rare words stay in small pieces.
Café, naïve, résumé and façade keep their accents; the tokenizer works on bytes, so nothing is lost.
中文文本也可以被分词。 日本語のテキストも同じです。 Emoji too: 👍 👍 🎉.
    Indented lines,\ttabs\tand\n\nblank lines appear in code:
def tokenize(text):
    return [piece for piece in text.split()]
THE END. THE END! the end? The end...
"""


def train(pre_tokenizer, num_merges, normalizer=None):
    """Vocabulary (the 256 byte characters, then one token per merge) and merges learned by
    repeatedly merging the most frequent adjacent pair (ties: the smallest pair), on the text as
    `normalizer` leaves it."""
    words = collections.Counter(pre_tokenize(pre_tokenizer, [normalize(normalizer, CORPUS)]))
    vocab = {BYTE_TO_CHAR[b]: b for b in range(256)}
    splits = {w: list(w) for w in words}
    merges = []
    for _ in range(num_merges):
        pairs = collections.Counter()
        for w, count in words.items():
            s = splits[w]
            for pair in zip(s, s[1:]):
                pairs[pair] += count
        if not pairs:
            break
        a, b = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append((a, b))
        vocab[a + b] = len(vocab)
        for w in words:
            s = splits[w]
            merged = []
            i = 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(s[i])
                    i += 1
            splits[w] = merged
    return vocab, merges


def added(content, tid, special=True, lstrip=False, rstrip=False, single_word=False, normalized=False):
    return {"id": tid, "content": content, "single_word": single_word, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": normalized, "special": special}


def bpe_model(vocab, merges, **options):
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False}
    model.update(options)
    model["vocab"] = vocab
    model["merges"] = merges
    return model


def byte_level(add_prefix_space, use_regex):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True,
            "use_regex": use_regex}


# A token that no merge builds: only ignore_merges turns " xyzzy" into it (Llama 3's vocabulary
# has many such tokens).
UNMERGED = to_byte_chars(" xyzzy")


def gpt2_form():
    pre = byte_level(False, True)
    vocab, merges = train(pre, 300)
    vocab[UNMERGED] = len(vocab)
    eot = len(vocab)
    vocab["<|endoftext|>"] = eot  # in the vocabulary and an added token, as in GPT-2's file
    tokens = [added("<|endoftext|>", eot, normalized=True),
              # Non-special ones: "<mask>" takes the spaces before it (RoBERTa's), "hello world"
              # only stands alone and decodes as its text (a space has no byte character).
              added("<mask>", eot + 1, special=False, lstrip=True),
              added("hello world", eot + 2, special=False, single_word=True, normalized=True),
              added("[SEP]", eot + 3, special=False, rstrip=True)]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": tokens,
            "normalizer": None, "pre_tokenizer": pre, "post_processor": byte_level(True, True),
            "decoder": byte_level(True, True),
            "model": bpe_model(vocab, [f"{a} {b}" for a, b in merges], continuing_subword_prefix="",
                               end_of_word_suffix="")}


def llama3_form():
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
        byte_level(False, False)]}
    vocab, merges = train(pre, 300)
    vocab[UNMERGED] = len(vocab)
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    tokens = [added(name, len(vocab) + i) for i, name in enumerate(names)]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": tokens,
            "normalizer": None, "pre_tokenizer": pre,
            "post_processor": {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                          {"Sequence": {"id": "A", "type_id": 0}}]},
            "decoder": byte_level(True, True),
            "model": bpe_model(vocab, [list(m) for m in merges], ignore_merges=True)}


def qwen2_form():
    normalizer = {"type": "NFC"}
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated", "invert": False},
        byte_level(False, False)]}
    vocab, merges = train(pre, 300, normalizer)
    first = len(vocab)
    tokens = [added(name, first + i) for i, name in enumerate(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])]
    # Not Qwen2's, for the two passes: ANGSTROM SIGN, which NFC turns into A with a ring, is found
    # only as written; "café" written with a combining accent is found wherever the text's NFC
    # has "café".
    tokens += [added("\u212b", first + 3, special=False),
               added("cafe\u0301", first + 4, special=False, normalized=True)]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": tokens,
            "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": byte_level(False, False),
            "decoder": byte_level(False, False),
            "model": bpe_model(vocab, [list(m) for m in merges], ignore_merges=False)}


def nfkc_nfd_form():
    normalizer = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "NFD"}]}
    pre = byte_level(False, True)
    vocab, merges = train(pre, 300, normalizer)
    eot = len(vocab)
    # The ligature normalizes to "fi", so that is what it is found as; FULLWIDTH X only as written.
    tokens = [added("<|endoftext|>", eot, normalized=True),
              added("\ufb01", eot + 1, special=False, normalized=True),
              added("\uff58", eot + 2, special=False)]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": tokens,
            "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": byte_level(True, True),
            "decoder": byte_level(True, True), "model": bpe_model(vocab, [f"{a} {b}" for a, b in merges])}


FORMS = {"gpt2": gpt2_form, "llama3": llama3_form, "qwen2": qwen2_form, "nfkc_nfd": nfkc_nfd_form}


def main(argv):
    if len(argv) == 3 and argv[1] == "train":
        for name, make in FORMS.items():
            tok = make()
            path = pathlib.Path(argv[2]) / name / "tokenizer.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(tok, ensure_ascii=False, indent=1), encoding="utf-8")
        return 0
    if len(argv) == 5 and argv[1] == "encode":
        tok = json.loads(pathlib.Path(argv[2]).read_text(encoding="utf-8"))
        strings = json.loads(pathlib.Path(argv[3]).read_text(encoding="utf-8"))
        results = []
        for s in strings:
            ids = encode(tok, s)
            results.append({"ids": ids, "decoded": decode(tok, ids).hex()})
        pathlib.Path(argv[4]).write_text(json.dumps(results), encoding="utf-8")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
