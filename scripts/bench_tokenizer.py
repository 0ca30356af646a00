#!/usr/bin/env python3
"""A 32000-token SentencePiece BPE model with byte fallback (the size and kind of Llama 2's and
TinyLlama's), trained once on text found on this machine (Python's standard library: code,
docstrings and comments), for benchmarks that need a real vocabulary and have no download.

    scripts/bench_tokenizer.py WORK_DIR    # prints WORK_DIR/tokenizer.model, training it if missing
"""
import os
import random
import sys
import sysconfig


def bench_tokenizer(work):
    model = os.path.join(work, "tokenizer.model")
    if os.path.exists(model):
        return model
    import sentencepiece as spm
    os.makedirs(work, exist_ok=True)
    lines = []
    for root, _, files in os.walk(sysconfig.get_paths()["stdlib"]):
        if "site-packages" in root or "dist-packages" in root:
            continue
        for name in sorted(files):
            if name.endswith(".py"):
                with open(os.path.join(root, name), encoding="utf-8", errors="ignore") as f:
                    lines += [line.rstrip("\n") for line in f if line.strip()]
    random.Random(0).shuffle(lines)
    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(lines[:1500000]))
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(work, "tokenizer"), vocab_size=32000,
                                   model_type="bpe", byte_fallback=True, split_digits=True,
                                   character_coverage=0.9999, allow_whitespace_only_pieces=True,
                                   remove_extra_whitespaces=False, normalization_rule_name="identity",
                                   num_threads=2, minloglevel=2)
    os.remove(corpus)
    return model


if __name__ == "__main__":
    print(bench_tokenizer(sys.argv[1]))
