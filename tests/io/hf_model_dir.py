#!/usr/bin/env python3
"""Builds Hugging Face model directories for meshnn-convert's tests and measurements, with its
own safetensors writer (a few lines of struct + json, independent of the safetensors library and
of meshnn's reader).

As a program it writes one model directory:
    hf_model_dir.py --preset tinyllama --out /tmp/tinyllama-hf [--dtype BF16] [--shards 3]
"""
import argparse
import json
import os
import struct
import zlib

import numpy as np

NUMPY_OF = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}  # BF16 as its bits
SIZE_OF = {"F32": 4, "F16": 2, "BF16": 2}


def to_bfloat16_bits(values):
    """float32 -> bfloat16 bits as torch rounds: to nearest even, every NaN the quiet NaN 0x7FC0."""
    f32 = np.ascontiguousarray(values, dtype=np.float32)
    bits = f32.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f32), np.uint16(0x7FC0), rounded)


def bfloat16_to_float32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def stored(values, dtype):
    """float32 values -> the array a checkpoint of `dtype` holds."""
    if dtype == "F32":
        return values.astype(np.float32)
    if dtype == "F16":
        return values.astype(np.float16)
    return to_bfloat16_bits(values)


def write_safetensors(path, entries, metadata=None, align=8):
    """entries: list of (name, dtype, shape, make) with make() -> the stored array (called once,
    in order, so a big file is written one tensor at a time). The header is padded with spaces to
    a multiple of `align`, as the safetensors library does; align=1 leaves it unaligned."""
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, _ in entries:
        size = int(np.prod(shape, dtype=np.int64)) * SIZE_OF[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * ((-(8 + len(text))) % align)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, dtype, shape, make in entries:
            array = np.ascontiguousarray(make(), dtype=NUMPY_OF[dtype])
            assert array.shape == tuple(shape), (name, array.shape, shape)
            f.write(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())


def llama_shapes(c):
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    heads, kv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    d = c.get("head_dim", h // heads)
    shapes = {"model.embed_tokens.weight": (v, h)}
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        shapes.update({
            p + "input_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (heads * d, h),
            p + "self_attn.k_proj.weight": (kv * d, h),
            p + "self_attn.v_proj.weight": (kv * d, h),
        })
        if c.get("model_type") == "qwen2":  # Qwen2Attention: biases on q, k and v only
            shapes.update({p + "self_attn.q_proj.bias": (heads * d,), p + "self_attn.k_proj.bias": (kv * d,),
                           p + "self_attn.v_proj.bias": (kv * d,)})
        if c.get("model_type") == "qwen3":  # Qwen3Attention: one RMSNorm weight over each q and k head
            shapes.update({p + "self_attn.q_norm.weight": (d,), p + "self_attn.k_norm.weight": (d,)})
        shapes.update({
            p + "self_attn.o_proj.weight": (h, heads * d),
            p + "post_attention_layernorm.weight": (h,),
            p + "mlp.gate_proj.weight": (i, h),
            p + "mlp.up_proj.weight": (i, h),
            p + "mlp.down_proj.weight": (h, i),
        })
    shapes["model.norm.weight"] = (h,)
    if not c.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = (v, h)
    return shapes


def phi3_shapes(c):
    """Phi3ForCausalLM: Llama's tensors with q/k/v fused into self_attn.qkv_proj (q rows, then k, then
    v) and gate/up into mlp.gate_up_proj (gate rows, then up)."""
    h, i = c["hidden_size"], c["intermediate_size"]
    heads, kv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    d = c.get("head_dim", h // heads)
    shapes = {}
    for name, shape in llama_shapes(c).items():
        if name.endswith(("self_attn.k_proj.weight", "self_attn.v_proj.weight", "mlp.up_proj.weight")):
            continue
        if name.endswith("self_attn.q_proj.weight"):
            name, shape = name.replace("q_proj", "qkv_proj"), ((heads + 2 * kv) * d, h)
        elif name.endswith("mlp.gate_proj.weight"):
            name, shape = name.replace("gate_proj", "gate_up_proj"), (2 * i, h)
        shapes[name] = shape
    return shapes


def phi3_split(c, kept):
    """The tensors of a Phi-3 checkpoint as Llama names them: the fused ones cut into their row bands."""
    heads, kv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    d = c.get("head_dim", c["hidden_size"] // heads)
    bands = {"self_attn.qkv_proj.weight": [("self_attn.q_proj.weight", heads * d), ("self_attn.k_proj.weight", kv * d),
                                           ("self_attn.v_proj.weight", kv * d)],
             "mlp.gate_up_proj.weight": [("mlp.gate_proj.weight", c["intermediate_size"]),
                                         ("mlp.up_proj.weight", c["intermediate_size"])]}
    split = {}
    for name, (dtype, array) in kept.items():
        fused = next((k for k in bands if name.endswith(k)), None)
        if fused is None:
            split[name] = (dtype, array)
            continue
        row = 0
        for part, rows in bands[fused]:
            split[name[:-len(fused)] + part] = (dtype, array[row:row + rows])
            row += rows
    return split


def falcon_shapes(c):
    h, v = c["hidden_size"], c["vocab_size"]
    layers = c.get("num_hidden_layers", c.get("n_layer"))
    heads = c.get("num_attention_heads", c.get("n_head"))
    ffn = c.get("ffn_hidden_size", 4 * h)
    kv = 1 if c.get("multi_query", True) else heads
    shapes = {"transformer.word_embeddings.weight": (v, h)}
    for layer in range(layers):
        p = f"transformer.h.{layer}."
        shapes.update({
            p + "input_layernorm.weight": (h,),
            p + "input_layernorm.bias": (h,),
            p + "self_attention.query_key_value.weight": ((heads + 2 * kv) * (h // heads), h),
            p + "self_attention.dense.weight": (h, h),
            p + "mlp.dense_h_to_4h.weight": (ffn, h),
            p + "mlp.dense_4h_to_h.weight": (h, ffn),
        })
    shapes.update({"transformer.ln_f.weight": (h,), "transformer.ln_f.bias": (h,)})
    return shapes


def values(name, shape, seed):
    """Seeded float32 values of a tensor: norms near 1, weights small (a model that runs sanely)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    if len(shape) == 1:
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    return (rng.standard_normal(shape) * (0.5 / np.sqrt(shape[-1]))).astype(np.float32)


def write_model_dir(out, config, shapes, dtype_of, shards=1, seed=1, tokenizer=True, align=8, extra=None):
    """Writes config.json, the weights (one file, or `shards` files + index) and tokenizer files.
    dtype_of(name) -> "F32" | "F16" | "BF16"; `extra` {name: (dtype, stored array)} adds tensors
    with given values to the first file. Returns {name: (dtype, stored array)} when the model is
    small enough to keep (the tests compare with it), else None."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    names = list(shapes)
    keep = sum(int(np.prod(s)) for s in shapes.values()) < 50_000_000
    kept = {}

    def make(name):
        def fn():
            array = stored(values(name, shapes[name], seed), dtype_of(name))
            if keep:
                kept[name] = (dtype_of(name), array)
            return array
        return fn

    groups = [names[k::shards] for k in range(shards)] if shards > 1 else [names]
    files = ["model.safetensors"] if shards == 1 else [
        f"model-{k + 1:05d}-of-{shards:05d}.safetensors" for k in range(shards)]
    extra = extra or {}
    kept.update(extra)
    for k, (file, group) in enumerate(zip(files, groups)):
        entries = [(n, dtype_of(n), shapes[n], make(n)) for n in group]
        if k == 0:
            entries += [(n, t, a.shape, lambda a=a: a) for n, (t, a) in extra.items()]
        write_safetensors(os.path.join(out, file), entries, metadata={"format": "pt"}, align=align)
    if shards > 1:
        index = {"metadata": {"total_size": 0},
                 "weight_map": {n: files[k] for k, g in enumerate(groups) for n in g}}
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)
    if tokenizer:
        write_tokenizer_files(out, config, seed)
    return kept if keep else None


def write_tokenizer_files(out, config, seed):
    """Stand-ins with the right names and varied bytes (the converter copies them as they are)."""
    rng = np.random.default_rng(seed)
    with open(os.path.join(out, "tokenizer.model"), "wb") as f:
        f.write(rng.integers(0, 256, 3000, dtype=np.uint8).tobytes())  # binary, like a protobuf
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump({"version": "1.0", "model": {"type": "BPE", "vocab": {"\u0120h\u00e9": 5, "\u2581caf\u00e9": 6}}},
                  f, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": True, "bos_token": "<s>", "eos_token": "</s>"}, f)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": config.get("bos_token_id", 1), "eos_token_id": config.get("eos_token_id", 2)}, f)


TINYLLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
    "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
    "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "torch_dtype": "bfloat16",
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=["tinyllama"], default="tinyllama")
    parser.add_argument("--out", required=True)
    parser.add_argument("--dtype", choices=["F32", "F16", "BF16"], default="BF16")
    parser.add_argument("--shards", type=int, default=1)
    args = parser.parse_args()
    write_model_dir(args.out, TINYLLAMA, llama_shapes(TINYLLAMA), lambda _: args.dtype, shards=args.shards)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
