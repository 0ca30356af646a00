#!/usr/bin/env python3
"""meshnn-convert end to end, on Hugging Face model directories this test builds itself
(tests/io/hf_model_dir.py: its own safetensors writer, not the safetensors library).

    test_convert.py BUILD_DIR WORK_DIR MPIEXEC [MPIEXEC_FLAGS...]

1. Llama (unsharded BF16; sharded, mixed F32/F16/BF16 with tied embeddings, a list of eos ids and
   rope_scaling; Mistral; Qwen2, with q/k/v biases; Qwen3, with per-head q/k norms) and Falcon (RWForCausalLM in the RefinedWeb dialect, sharded;
   FalconForCausalLM) convert, and every dataset equals its source bit for bit (as stored, and
   converted to float32 and bfloat16), every attribute and every tokenizer file is there.
   Mistral's sliding_window defaults as Hugging Face's does; a yarn rope_scaling converts quietly, a
   type the job cannot apply with a note.
2. Hostile input: each case exits nonzero with the expected message and leaves no output file
   (nor a temporary one). A converted file of mixed dtypes loads bit-exactly into every placement
   (tests/mpi/test_h5py_files.cpp, ConvertedFile), on 1 and 2 ranks.
3. The jobs give the same results on a converted file as on the same weights written directly
   with h5py in meshnn's layout: meshnn-llm's tokens and logits, meshnn-mlp's output, on 1 and 2
   ranks; a file with one weight changed gives different logits (the comparison can fail). The
   job applies the llama3 and yarn rope_scalings (without them the logits differ; --rope-scaling gives
   what the file's yarn gives) and refuses one it cannot apply, and
   adds Qwen2's biases and applies Qwen3's head norms (the same file read as Llama, biases or norms
   ignored, gives other logits).
"""
import json
import os
import shutil
import struct
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_model_dir as hf  # noqa: E402
from llm_fixtures import finish  # noqa: E402

BUILD, WORK, MPIEXEC = sys.argv[1], sys.argv[2], sys.argv[3:]
CONVERT = os.path.join(BUILD, "apps", "meshnn-convert")
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def convert(model_dir, out, *extra):
    r = run([CONVERT, *extra, model_dir, out])
    if r.returncode != 0:
        print(r.stdout + r.stderr)
    return r


LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "torch_dtype": "bfloat16",
}
# Qwen's YaRN recipe on a small context: frequencies kept, ramped and divided over head_dim 16.
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
UNUSABLE_SCALING = {"rope_type": "llama3", "factor": 8.0}  # without its frequency bands
LLAMA_ATTRS = {
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 128,
    "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "tie_word_embeddings": 0, "bos_token_id": 1, "eos_token_id": 2,
}

QWEN2 = dict(LLAMA, architectures=["Qwen2ForCausalLM"], model_type="qwen2", tie_word_embeddings=True,
             rope_theta=1000000.0, rms_norm_eps=1e-6, use_sliding_window=False, sliding_window=4096,
             max_window_layers=2, bos_token_id=1, eos_token_id=3)
QWEN2_ATTRS = dict(LLAMA_ATTRS, model_type="qwen2", tie_word_embeddings=1, rope_theta=1000000.0, rms_norm_eps=1e-6,
                   eos_token_id=3, eos_token_ids=[3, 5])
# Qwen3 as Qwen3-0.6B's config.json has it: 4 heads of 32 beside a hidden of 64 (head_dim given),
# tied embeddings, no attention bias, the sliding window off and null.
QWEN3 = dict(LLAMA, architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=32, tie_word_embeddings=True,
             rope_theta=1000000.0, rms_norm_eps=1e-6, attention_bias=False, use_sliding_window=False,
             sliding_window=None, max_window_layers=2, rope_scaling=None, bos_token_id=1, eos_token_id=3)
QWEN3_ATTRS = dict(LLAMA_ATTRS, model_type="qwen3", head_dim=32, tie_word_embeddings=1, rope_theta=1000000.0,
                   rms_norm_eps=1e-6, eos_token_id=3)

# Phi-3 as Phi-3-mini-4k-instruct's config.json has it (fused qkv_proj and gate_up_proj, a sliding
# window, rope_scaling null, original_max_position_embeddings beside max_position_embeddings), with
# a window of 6 positions so that the job's 8-token prompts run past it.
PHI3 = dict(LLAMA, architectures=["Phi3ForCausalLM"], model_type="phi3", max_position_embeddings=256,
            original_max_position_embeddings=256, sliding_window=6, rope_scaling=None, attention_bias=False,
            resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0, pad_token_id=2)
PHI3_ATTRS = dict(LLAMA_ATTRS, model_type="phi3", sliding_window=6)


def expected_array(dtype, array, target):
    """What a tensor stored as `dtype` becomes when written as `target`."""
    if target is None or target == dtype:
        return array
    as_f32 = hf.bfloat16_to_float32(array) if dtype == "BF16" else array.astype(np.float32)
    return as_f32 if target == "F32" else hf.to_bfloat16_bits(as_f32)


def attr_value(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v.item() if hasattr(v, "item") else v


def check_converted(label, out, kept, attrs, target=None, model_dir=None):
    """Every dataset bit for bit, the attributes, the tokenizer files."""
    with h5py.File(out, "r") as f:
        datasets = {k for k in f.keys() if isinstance(f[k], h5py.Dataset)}
        check(datasets == set(kept), f"{label}: the datasets are exactly the checkpoint's tensors "
                                     f"(extra {sorted(datasets - set(kept))[:3]}, missing {sorted(set(kept) - datasets)[:3]})")
        bad = []
        for name, (dtype, array) in kept.items():
            if name not in f:
                continue
            ds, want = f[name], expected_array(dtype, array, target)
            kind = target or dtype
            type_ok = {"F32": ds.dtype == np.float32, "F16": ds.dtype == np.float16,
                       "BF16": ds.dtype == np.uint16 and attr_value(ds.attrs.get("dtype", b"")) == "bfloat16"}[kind]
            got = ds[...]
            if not (type_ok and got.shape == want.shape and np.array_equal(got.view(np.uint8), want.view(np.uint8))):
                bad.append(name)
        check(not bad, f"{label}: every dataset equals its source bit for bit as {target or 'stored'} ({bad[:3]})")
        wrong = {k: (attr_value(f.attrs[k]) if k in f.attrs else None, v) for k, v in attrs.items()
                 if k not in f.attrs or attr_value(f.attrs[k]) != v}
        check(not wrong, f"{label}: root attributes {sorted(attrs)} ({wrong})")
        if model_dir is not None:
            names = [n for n in ("tokenizer.model", "tokenizer.json", "tokenizer_config.json", "generation_config.json")
                     if os.path.exists(os.path.join(model_dir, n))]
            same = all(f"tokenizer/{n}" in f and f[f"tokenizer/{n}"].dtype == np.uint8 and
                       f[f"tokenizer/{n}"][...].tobytes() == open(os.path.join(model_dir, n), "rb").read()
                       for n in names)
            check(bool(names) and same, f"{label}: tokenizer/ holds {names} byte for byte")



def convert_qwen(models, name, config, attrs, seed, label, generation_config=None):
    """A Qwen family directory (BF16) converts: every dataset and attribute as the checkpoint's, and
    no sliding_window attribute, since the config turns the window off."""
    d = os.path.join(WORK, name)
    kept = hf.write_model_dir(d, config, hf.llama_shapes(config), lambda n: "BF16", seed=seed)
    if generation_config is not None:
        with open(os.path.join(d, "generation_config.json"), "w") as f:
            json.dump(generation_config, f)
    out = os.path.join(WORK, f"{name}.h5")
    r = convert(d, out)
    check(r.returncode == 0 and config["architectures"][0] in r.stdout, f"{name} ({label}) converts")
    check_converted(name, out, kept, attrs, model_dir=d)
    with h5py.File(out, "r") as f:
        check("sliding_window" not in f.attrs, f"{name} with its sliding window off: no sliding_window attribute")
    models[name] = (d, kept)

def write_direct(path, kept, attrs):
    """The same weights in meshnn's layout, written with h5py's defaults (vlen UTF-8 strings)."""
    with h5py.File(path, "w") as f:
        for name, (dtype, array) in kept.items():
            ds = f.create_dataset(name, data=array)
            if dtype == "BF16":
                ds.attrs["dtype"] = "bfloat16"
        for k, v in attrs.items():
            f.attrs[k] = v


# --- 1. conversions --------------------------------------------------------------------------------
def test_conversions():
    models = {}
    d = os.path.join(WORK, "llama")
    kept = hf.write_model_dir(d, LLAMA, hf.llama_shapes(LLAMA), lambda n: "BF16", seed=1)
    r = convert(d, os.path.join(WORK, "llama.h5"))
    check(r.returncode == 0 and "LlamaForCausalLM" in r.stdout, "llama (unsharded BF16) converts")
    check_converted("llama", os.path.join(WORK, "llama.h5"), kept, LLAMA_ATTRS, model_dir=d)
    models["llama"] = (d, kept)

    # Sharded, unaligned data, mixed dtypes, tied embeddings, Llama 3's list of eos ids (and bos
    # only in generation_config.json), rope_scaling.
    cfg = dict(LLAMA, tie_word_embeddings=True, eos_token_id=[2, 3], rope_theta=500000.0,
               rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    del cfg["bos_token_id"]
    dtype_of = lambda n: "F32" if n.endswith("norm.weight") else "F16" if "self_attn" in n else "BF16"
    d = os.path.join(WORK, "llama_sharded")
    kept = hf.write_model_dir(d, cfg, hf.llama_shapes(cfg), dtype_of, shards=3, seed=2, align=1)
    attrs = dict(LLAMA_ATTRS, tie_word_embeddings=1, rope_theta=500000.0, eos_token_ids=[2, 3])
    # 1000-byte blocks: 1 to 7 rows at a time, ragged at the end, so the blocked path is exercised.
    for target, flag in ((None, []), ("F32", ["--dtype", "float32"]), ("BF16", ["--dtype", "bfloat16"]),
                         (None, ["--block-size", "1000"]), ("F32", ["--dtype", "float32", "--block-size", "1000"]),
                         ("BF16", ["--block-size", "1000", "--dtype", "bfloat16"])):
        out = os.path.join(WORK, f"llama_sharded_{target or 'keep'}{'_blocks' if '--block-size' in flag else ''}.h5")
        r = convert(d, out, *flag)
        check(r.returncode == 0, f"llama sharded converts ({target or 'dtypes kept'}{', small blocks' if '--block-size' in flag else ''})")
        check("rope_scaling" not in r.stderr, "no note for a rope_scaling the job applies")
        check_converted(f"llama sharded {target or 'keep'} {flag}", out, kept, attrs, target, model_dir=d)
    with h5py.File(os.path.join(WORK, "llama_sharded_keep.h5"), "r") as f:
        check(json.loads(attr_value(f.attrs["rope_scaling"])) == cfg["rope_scaling"], "rope_scaling kept as its JSON")
    models["llama_sharded"] = (d, kept)

    # Mistral, with extra tensors of special values: every float16 and bfloat16 bit pattern
    # (subnormals, inf, NaN) and float32 values where rounding to bfloat16 ties, carries or
    # overflows, each converted both ways.
    d = os.path.join(WORK, "mistral")
    cfg = dict(LLAMA, architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=4096)
    every = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    edges = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x3F80FFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000,
                      0xFF800000, 0x7FC00001, 0xFFFFFFFF, 0x00000001, 0x807FFFFF, 0x00000000, 0x80000000],
                     dtype=np.uint32).view(np.float32)
    extra = {"extra.f16_every": ("F16", every.view(np.float16).reshape(256, 256)),
             "extra.bf16_every": ("BF16", every.reshape(256, 256)), "extra.f32_edges": ("F32", edges)}
    kept = hf.write_model_dir(d, cfg, hf.llama_shapes(cfg), lambda n: "F32", seed=3, tokenizer=False, extra=extra)
    for target, flag in ((None, []), ("F32", ["--dtype", "float32"]), ("BF16", ["--dtype", "bfloat16"])):
        out = os.path.join(WORK, f"mistral_{target or 'keep'}.h5")
        r = convert(d, out, *flag)
        check(r.returncode == 0, f"mistral converts ({target or 'dtypes kept'})")
        check_converted(f"mistral {target or 'keep'}", out, kept,
                        dict(LLAMA_ATTRS, model_type="mistral", sliding_window=4096), target)

    # Settings the job applies or refuses: Mistral's sliding_window is 4096 when absent (as
    # Hugging Face's MistralConfig defaults it) and none when null; Llama has no window whatever its
    # config says; a rope_scaling type the job does not apply converts with a note.
    for label, cfg, window in (("mistral, no sliding_window", dict(LLAMA, architectures=["MistralForCausalLM"], model_type="mistral"), 4096),
                               ("mistral, sliding_window null", dict(LLAMA, architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=None), None),
                               ("llama with a sliding_window", dict(LLAMA, sliding_window=16), None)):
        d = os.path.join(WORK, "window")
        hf.write_model_dir(d, cfg, hf.llama_shapes(cfg), lambda n: "BF16", seed=6, tokenizer=False)
        r = convert(d, os.path.join(WORK, "window.h5"))
        with h5py.File(os.path.join(WORK, "window.h5"), "r") as f:
            got = attr_value(f.attrs["sliding_window"]) if "sliding_window" in f.attrs else None
        check(r.returncode == 0 and got == window, f"{label}: sliding_window attribute {got}, expected {window}")
        shutil.rmtree(d)
    for name, scaling in (("yarn", YARN), ("unusable_scaling", UNUSABLE_SCALING)):
        d = os.path.join(WORK, f"llama_{name}")
        cfg = dict(LLAMA, rope_scaling=scaling)
        models[f"llama_{name}"] = (d, hf.write_model_dir(d, cfg, hf.llama_shapes(cfg), lambda n: "BF16", seed=6,
                                                         tokenizer=False))
        r = convert(d, os.path.join(WORK, f"llama_{name}.h5"))
        if name == "yarn":
            check(r.returncode == 0 and "rope_scaling" not in r.stderr, "a yarn rope_scaling converts without a note")
        else:
            check(r.returncode == 0 and "has no 'low_freq_factor'" in r.stderr and "will refuse" in r.stderr,
                  "a rope_scaling the job cannot apply converts with a note saying the job will refuse it")

    # Qwen2 as Qwen2.5-0.5B's config.json has it: tied embeddings, rope_theta 1e6, a sliding window
    # that is off (use_sliding_window false), so the file has none.
    # Its generation_config.json names one eos id more than config.json, as Qwen2.5-Instruct's does.
    convert_qwen(models, "qwen2", QWEN2, QWEN2_ATTRS, 7, "q/k/v biases, tied",
                 generation_config={"bos_token_id": 1, "eos_token_id": [5, 3]})
    # Qwen3: per-head q/k norms, projections wider than the hidden, its sliding window null.
    convert_qwen(models, "qwen3", QWEN3, QWEN3_ATTRS, 8, "per-head q/k norms, head_dim 32, tied")

    # Phi-3: the fused projections become Llama's q/k/v and gate/up datasets, row bands of the
    # checkpoint's tensors bit for bit, also converted to float32; the sliding window is kept.
    d = os.path.join(WORK, "phi3")
    kept = hf.write_model_dir(d, PHI3, hf.phi3_shapes(PHI3), lambda n: "BF16", seed=9)
    split = hf.phi3_split(PHI3, kept)
    for target, flags in ((None, []), ("F32", ["--dtype", "float32"])):
        out = os.path.join(WORK, f"phi3_{target or 'keep'}.h5")
        r = convert(d, out, *flags)
        check(r.returncode == 0 and "Phi3ForCausalLM" in r.stdout, f"phi3 {target or 'keep'} converts")
        check_converted(f"phi3 {target or 'keep'}", out, split, PHI3_ATTRS, target, model_dir=d if target is None else None)
    models["phi3"] = (d, split)
    # Phi3Config reads a "su" or "yarn" rope_scaling as longrope (the 128k models' early configs), and
    # keeps its original context beside max_position_embeddings: the file's rope_scaling says
    # longrope, with that original context in it.
    d = os.path.join(WORK, "phi3_su")
    cfg = dict(PHI3, original_max_position_embeddings=64,
               rope_scaling={"type": "yarn", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8})
    hf.write_model_dir(d, cfg, hf.phi3_shapes(cfg), lambda n: "BF16", seed=9, tokenizer=False)
    r = convert(d, os.path.join(WORK, "phi3_su.h5"))
    with h5py.File(os.path.join(WORK, "phi3_su.h5"), "r") as f:
        scaling = json.loads(attr_value(f.attrs["rope_scaling"]))
    check(r.returncode == 0 and scaling.get("type") == "longrope" and
          scaling.get("original_max_position_embeddings") == 64 and "rope_scaling" not in r.stderr,
          f"phi3: a 'yarn' rope_scaling is written as Phi3Config reads it, longrope over 64 positions ({scaling})")

    # Falcon in the original RefinedWeb dialect (n_layer, n_head), sharded, float32.
    d = os.path.join(WORK, "falcon_rw")
    cfg = {"architectures": ["RWForCausalLM"], "model_type": "RefinedWebModel", "hidden_size": 64, "n_head": 4,
           "n_layer": 2, "vocab_size": 128, "multi_query": True, "parallel_attn": True, "bias": False,
           "layer_norm_epsilon": 1e-5, "bos_token_id": 11, "eos_token_id": 11}
    kept = hf.write_model_dir(d, cfg, hf.falcon_shapes(cfg), lambda n: "F32", shards=2, seed=4)
    r = convert(d, os.path.join(WORK, "falcon_rw.h5"))
    check(r.returncode == 0, "falcon (RWForCausalLM, sharded) converts")
    falcon_attrs = {"model_type": "falcon", "hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2,
                    "num_attention_heads": 4, "num_key_value_heads": 1, "vocab_size": 128, "eos_token_id": 11}
    check_converted("falcon rw", os.path.join(WORK, "falcon_rw.h5"), kept, falcon_attrs, model_dir=d)

    d = os.path.join(WORK, "falcon")
    cfg = {"architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 64,
           "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 128, "ffn_hidden_size": 96,
           "multi_query": True, "new_decoder_architecture": False, "bos_token_id": 11, "eos_token_id": 11}
    kept = hf.write_model_dir(d, cfg, hf.falcon_shapes(cfg), lambda n: "BF16", seed=5)
    r = convert(d, os.path.join(WORK, "falcon.h5"))
    check(r.returncode == 0, "falcon (FalconForCausalLM, BF16) converts")
    check_converted("falcon", os.path.join(WORK, "falcon.h5"), kept, dict(falcon_attrs, intermediate_size=96),
                    model_dir=d)
    models["falcon"] = (d, kept)
    return models


# --- 2. hostile input ------------------------------------------------------------------------------
def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_st(path, header, data):
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def edit_header(file, fn):
    def mutate(d):
        header, data = read_st(os.path.join(d, file))
        fn(header)
        write_st(os.path.join(d, file), header, data)
    return mutate


def edit_json(file, fn):
    def mutate(d):
        with open(os.path.join(d, file)) as f:
            j = json.load(f)
        fn(j)
        with open(os.path.join(d, file), "w") as f:
            json.dump(j, f)
    return mutate


def edit_bytes(file, fn):
    def mutate(d):
        with open(os.path.join(d, file), "rb") as f:
            raw = f.read()
        with open(os.path.join(d, file), "wb") as f:
            f.write(fn(raw))
    return mutate


def overlap(h):
    a, b = h["model.layers.0.input_layernorm.weight"], h["model.layers.1.input_layernorm.weight"]
    size = b["data_offsets"][1] - b["data_offsets"][0]
    b["data_offsets"] = [a["data_offsets"][0] + 2, a["data_offsets"][0] + 2 + size]


def shift_last(h):
    last = max((v for k, v in h.items() if k != "__metadata__"), key=lambda v: v["data_offsets"][1])
    last["data_offsets"] = [o + 2 for o in last["data_offsets"]]


def set_entry(name, **fields):
    return lambda h: h[name].update(fields)


def invalid_json(raw):
    n = struct.unpack("<Q", raw[:8])[0]
    return raw[:8] + b'{"a": [1, 2' + b" " * (n - 11) + raw[8 + n:]


def test_hostile(models):
    st = "model.safetensors"
    norm = "model.layers.0.input_layernorm.weight"  # BF16 [64]: 128 bytes
    cases = [
        ("header_beyond_file", "llama", edit_bytes(st, lambda r: struct.pack("<Q", len(r)) + r[8:]),
         "is beyond the file"),
        ("too_short", "llama", edit_bytes(st, lambda r: r[:5]), "too short"),
        ("invalid_json", "llama", edit_bytes(st, invalid_json), "not valid JSON"),
        ("offsets_outside", "llama", edit_header(st, shift_last), "outside the data section"),
        ("truncated", "llama", edit_bytes(st, lambda r: r[:-100]), "outside the data section"),
        ("offsets_overlap", "llama", edit_header(st, overlap), "overlap"),
        ("shape_vs_bytes", "llama", edit_header(st, set_entry(norm, shape=[65])), "data_offsets span"),
        ("dtype_vs_bytes", "llama", edit_header(st, set_entry(norm, dtype="F32")), "data_offsets span"),
        ("unknown_dtype", "llama", edit_header(st, set_entry(norm, dtype="Q4")), "unknown dtype 'Q4'"),
        ("integer_tensor", "llama", edit_header(st, set_entry(norm, dtype="I64", shape=[16])),
         "converts F32, F16 and BF16"),
        ("config_vs_shapes", "llama", edit_json("config.json", lambda c: c.update(intermediate_size=100)),
         "implies [64, 100]"),
        ("config_more_layers", "llama", edit_json("config.json", lambda c: c.update(num_hidden_layers=3)),
         "'model.layers.2.input_layernorm.weight' is missing from the checkpoint"),
        ("architecture", "llama", edit_json("config.json", lambda c: c.update(architectures=["GPT2LMHeadModel"])),
         "architecture 'GPT2LMHeadModel' is not supported"),
        ("qwen2_sliding_window", "qwen2", edit_json("config.json", lambda c: c.update(use_sliding_window=True)),
         "use_sliding_window = true is not supported"),
        ("qwen2_without_biases", "llama", edit_json("config.json", lambda c: c.update(architectures=["Qwen2ForCausalLM"])),
         "'model.layers.0.self_attn.k_proj.bias' is missing from the checkpoint"),
        ("qwen3_without_norms", "llama", edit_json("config.json", lambda c: c.update(architectures=["Qwen3ForCausalLM"])),
         "'model.layers.0.self_attn.k_norm.weight' is missing from the checkpoint"),
        ("qwen3_attention_bias", "qwen3", edit_json("config.json", lambda c: c.update(attention_bias=True)),
         "attention_bias = true is not supported"),
        ("qwen3_sliding_window", "qwen3", edit_json("config.json", lambda c: c.update(use_sliding_window=True)),
         "use_sliding_window = true is not supported"),
        ("llama_attention_bias", "llama", edit_json("config.json", lambda c: c.update(attention_bias=True)),
         "attention_bias = true is not supported"),
        ("phi3_partial_rotary", "phi3", edit_json("config.json", lambda c: c.update(partial_rotary_factor=0.75)),
         "partial_rotary_factor 0.75 is not supported"),
        ("phi3_unfused", "llama", edit_json("config.json", lambda c: c.update(architectures=["Phi3ForCausalLM"])),
         "'model.layers.0.mlp.gate_up_proj.weight' is missing from the checkpoint"),
        ("eos_outside_vocab", "llama", edit_json("config.json", lambda c: c.update(eos_token_id=500)),
         "outside the vocabulary"),
        ("config_not_json", "llama", edit_bytes("config.json", lambda r: b"{"), "not valid JSON"),
        ("no_config", "llama", lambda d: os.remove(os.path.join(d, "config.json")), "has no config.json"),
        ("no_weights", "llama", lambda d: os.remove(os.path.join(d, st)), "neither model.safetensors"),
        ("index_lists_missing_tensor", "llama_sharded",
         edit_json("model.safetensors.index.json",
                   lambda j: j["weight_map"].update({"model.layers.9.mlp.up_proj.weight": "model-00001-of-00003.safetensors"})),
         "'model.layers.9.mlp.up_proj.weight' is listed in model.safetensors.index.json"),
        ("index_missing_shard", "llama_sharded", lambda d: os.remove(os.path.join(d, "model-00002-of-00003.safetensors")),
         "model-00002-of-00003.safetensors"),
        ("index_path_escape", "llama_sharded",
         edit_json("model.safetensors.index.json",
                   lambda j: j["weight_map"].update({"model.norm.weight": "../llama/model.safetensors"})),
         "not a file name in the model directory"),
    ]
    hostile = os.path.join(WORK, "hostile")
    os.makedirs(hostile, exist_ok=True)
    for name, base, mutate, fragment in cases:
        d = os.path.join(hostile, name)
        shutil.copytree(models[base][0], d)
        mutate(d)
        out = os.path.join(hostile, name + ".h5")
        r = run([CONVERT, d, out])
        leftovers = [f for f in os.listdir(hostile) if f.startswith(name + ".h5")]
        check(r.returncode == 1 and fragment in r.stderr and not leftovers,
              f"hostile {name}: exit {r.returncode}, message has '{fragment}', no output file "
              f"({r.stderr.strip()[:200]}; left: {leftovers})")
    r = run([CONVERT, models["llama"][0]])
    check(r.returncode == 2 and "OUTPUT.h5 is required" in r.stderr, "one positional argument: usage error")
    r = run([CONVERT, "--dtype", "float8", models["llama"][0], os.path.join(hostile, "x.h5")])
    check(r.returncode == 2 and "dtype" in r.stderr and not os.path.exists(os.path.join(hostile, "x.h5")),
          "--dtype float8: usage error")


# --- 3. the jobs on a converted file and on the same weights written directly ----------------------
def mpirun(ranks, args):
    return run([*MPIEXEC, "-n", str(ranks), *args])


def llm_outputs(weights, ranks, tag, expect_failure=None, extra=()):
    out = os.path.join(WORK, f"llm_{tag}_np{ranks}.h5")
    r = mpirun(ranks, [os.path.join(BUILD, "apps", "meshnn-llm"), "--weights", weights, "--prompt-len", "8",
                       "--batch", "2", "--max-new-tokens", "4", "--ignore-eos", "--save-logits",
                       "--weight-dtype", "bfloat16", "--output", out, *extra])
    if expect_failure is not None:
        return r.returncode != 0 and expect_failure in r.stderr
    if r.returncode != 0:
        print(r.stdout[-2000:] + r.stderr[-2000:])
        return None
    with h5py.File(out, "r") as f:
        return f["tokens"][...], f["logits"][...]


def same_outputs(a, b):
    return a is not None and b is not None and all(np.array_equal(x.view(np.uint8), y.view(np.uint8))
                                                   for x, y in zip(a, b))


def test_placements():
    """The converted mixed-dtype file loads into every placement on 1 and 2 ranks."""
    names = ["model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.k_proj.weight",
             "model.layers.0.mlp.down_proj.weight", "model.embed_tokens.weight", "model.norm.weight"]
    env = dict(os.environ, MESHNN_CONVERTED_FILE=os.path.join(WORK, "llama_sharded_keep.h5"),
               MESHNN_CONVERTED_DATASETS=",".join(names))
    for ranks in (1, 2):
        r = subprocess.run([*MPIEXEC, "-n", str(ranks), os.path.join(BUILD, "tests", "meshnn_mpi_h5py_tests"),
                            "--gtest_filter=ConvertedFile.*", "--gtest_color=no"],
                           capture_output=True, text=True, timeout=600, env=env)
        ok = r.returncode == 0 and "[  PASSED  ] 1 test" in r.stdout
        if not ok:
            print(r.stdout[-3000:] + r.stderr[-2000:])
        check(ok, f"converted F16/BF16/F32 datasets load bit-exactly into every placement on {ranks} rank(s)")


def test_jobs(models):
    d, kept = models["llama"]
    direct = os.path.join(WORK, "llama_direct.h5")
    write_direct(direct, kept, LLAMA_ATTRS)
    for ranks in (1, 2):
        converted = llm_outputs(os.path.join(WORK, "llama.h5"), ranks, "converted")
        reference = llm_outputs(direct, ranks, "direct")
        check(same_outputs(converted, reference) and np.isfinite(reference[1]).all(),
              f"meshnn-llm on {ranks} rank(s): converted file gives the same tokens and logits as the direct one")
    # The comparison can fail: one weight changed changes the logits.
    changed = dict(kept)
    dtype, array = changed["model.layers.1.mlp.down_proj.weight"]
    changed["model.layers.1.mlp.down_proj.weight"] = (dtype, hf.to_bfloat16_bits(hf.bfloat16_to_float32(array) * 1.5))
    write_direct(os.path.join(WORK, "llama_changed.h5"), changed, LLAMA_ATTRS)
    changed_out, direct_out = llm_outputs(os.path.join(WORK, "llama_changed.h5"), 1, "changed"), llm_outputs(direct, 1, "direct")
    check(changed_out is not None and direct_out is not None and not same_outputs(changed_out, direct_out),
          "a changed weight gives different logits")

    # The sharded model converted to bfloat16 against the same rounded weights written directly.
    d, kept = models["llama_sharded"]
    rounded = {n: ("BF16", expected_array(t, a, "BF16")) for n, (t, a) in kept.items()}
    direct = os.path.join(WORK, "llama_sharded_direct.h5")
    sharded_attrs = dict(LLAMA_ATTRS, tie_word_embeddings=1, rope_theta=500000.0)
    with h5py.File(os.path.join(WORK, "llama_sharded_keep.h5"), "r") as f:
        scaling = attr_value(f.attrs["rope_scaling"])
    write_direct(direct, rounded, dict(sharded_attrs, rope_scaling=scaling))
    for ranks in (1, 2):
        check(same_outputs(llm_outputs(os.path.join(WORK, "llama_sharded_BF16.h5"), ranks, "sharded"),
                           llm_outputs(direct, ranks, "sharded_direct")),
              f"meshnn-llm on {ranks} rank(s): sharded checkpoint converted to bfloat16 = direct file")
    # The job applies the file's llama3 rope_scaling: without it the logits differ.
    unscaled = os.path.join(WORK, "llama_sharded_unscaled.h5")
    write_direct(unscaled, rounded, sharded_attrs)
    check(not same_outputs(llm_outputs(unscaled, 1, "unscaled"), llm_outputs(direct, 1, "sharded_direct")),
          "the converted rope_scaling changes the logits (the job applies it)")
    # YaRN: the job applies the converted file's (without it the logits differ), and --rope-scaling
    # gives the same tokens and logits on a file of the same weights without one.
    d, kept = models["llama_yarn"]
    yarn_unscaled = os.path.join(WORK, "llama_yarn_unscaled.h5")
    write_direct(yarn_unscaled, kept, LLAMA_ATTRS)
    for ranks in (1, 2):
        converted = llm_outputs(os.path.join(WORK, "llama_yarn.h5"), ranks, "yarn")
        check(converted is not None and not same_outputs(converted, llm_outputs(yarn_unscaled, ranks, "yarn_unscaled")),
              f"meshnn-llm on {ranks} rank(s): the converted yarn rope_scaling changes the logits (the job applies it)")
        check(same_outputs(converted, llm_outputs(yarn_unscaled, ranks, "yarn_flag", extra=["--rope-scaling", json.dumps(YARN)])),
              f"meshnn-llm on {ranks} rank(s): --rope-scaling gives what the file's yarn rope_scaling gives")
        check(llm_outputs(os.path.join(WORK, "llama_unusable_scaling.h5"), ranks, "unusable_scaling",
                          expect_failure="has no 'low_freq_factor'"),
              f"meshnn-llm on {ranks} rank(s) refuses a rope_scaling it cannot apply, naming what is missing")

    # Qwen2 and Qwen3: converted = direct on 1 and 2 ranks; read as Llama (model_type "llama": the
    # bias or norm datasets are there but unused) the logits differ, so the job adds the biases and
    # applies the norms.
    for name, attrs, what in (("qwen2", QWEN2_ATTRS, "Qwen2's biases change the logits (the job adds them)"),
                              ("qwen3", QWEN3_ATTRS, "Qwen3's head norms change the logits (the job applies them)")):
        d, kept = models[name]
        direct = os.path.join(WORK, f"{name}_direct.h5")
        write_direct(direct, kept, attrs)
        for ranks in (1, 2):
            converted = llm_outputs(os.path.join(WORK, f"{name}.h5"), ranks, name)
            check(same_outputs(converted, llm_outputs(direct, ranks, f"{name}_direct")) and
                  np.isfinite(converted[1]).all(),
                  f"meshnn-llm on {ranks} rank(s): converted {name} gives the same tokens and logits as the direct one")
        as_llama = os.path.join(WORK, f"{name}_as_llama.h5")
        write_direct(as_llama, kept, dict(attrs, model_type="llama"))
        check(not same_outputs(llm_outputs(as_llama, 1, f"{name}_as_llama"), llm_outputs(direct, 1, f"{name}_direct")),
              what)

    # Phi-3: the converted file runs as the same split weights written directly as Llama with the
    # window; without the window the logits differ (the job applies Phi-3's).
    d, split = models["phi3"]
    direct = os.path.join(WORK, "phi3_direct.h5")
    write_direct(direct, split, dict(PHI3_ATTRS, model_type="llama"))
    for ranks in (1, 2):
        converted = llm_outputs(os.path.join(WORK, "phi3_keep.h5"), ranks, "phi3")
        check(same_outputs(converted, llm_outputs(direct, ranks, "phi3_direct")) and np.isfinite(converted[1]).all(),
              f"meshnn-llm on {ranks} rank(s): converted phi3 gives the same tokens and logits as its split weights")
    unwindowed = os.path.join(WORK, "phi3_unwindowed.h5")
    write_direct(unwindowed, split, {k: v for k, v in PHI3_ATTRS.items() if k != "sliding_window"})
    check(not same_outputs(llm_outputs(unwindowed, 1, "phi3_unwindowed"), llm_outputs(direct, 1, "phi3_direct")),
          "Phi-3's sliding window changes the logits (the job applies it)")
    # Its longrope: 12 positions stay within the original 64, so the short factors (all 1) leave the
    # frequencies alone, and only the attention factor, sqrt(1 + ln 4 / ln 64), changes the logits.
    longrope = llm_outputs(os.path.join(WORK, "phi3_su.h5"), 1, "phi3_su")
    check(longrope is not None and np.isfinite(longrope[1]).all() and
          not same_outputs(longrope, llm_outputs(direct, 1, "phi3_direct")),
          "a Phi-3 file with longrope runs, and its attention factor changes the logits")

    # Falcon: the MLP job reads transformer.h.1.mlp.* of the converted checkpoint.
    d, kept = models["falcon"]
    direct = os.path.join(WORK, "falcon_direct.h5")
    write_direct(direct, kept, {"model_type": "falcon", "hidden_size": 64, "intermediate_size": 96})
    with h5py.File(os.path.join(WORK, "falcon_input.h5"), "w") as f:
        f["input"] = np.random.default_rng(7).standard_normal((1, 16, 64)).astype(np.float32)
    for ranks in (1, 2):
        outs = []
        for tag, weights in (("converted", os.path.join(WORK, "falcon.h5")), ("direct", direct)):
            out = os.path.join(WORK, f"mlp_{tag}_np{ranks}.h5")
            r = mpirun(ranks, [os.path.join(BUILD, "apps", "meshnn-mlp"), "--weights", weights, "--layer", "1",
                               "--input", os.path.join(WORK, "falcon_input.h5"), "--output", out,
                               "--warmup", "0", "--iterations", "1"])
            if r.returncode != 0:
                print(r.stdout[-2000:] + r.stderr[-2000:])
                outs.append(None)
                continue
            with h5py.File(out, "r") as f:
                outs.append((f["output"][...],))
        check(same_outputs(outs[0], outs[1]), f"meshnn-mlp on {ranks} rank(s): converted Falcon = direct file")


def test_generation_config():
    """The model's generation_config.json sets the sampling the command line leaves alone, as
    transformers' generate() reads it (Qwen2.5-Instruct's settings here)."""
    sampling = {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}
    weights = os.path.join(WORK, "qwen2_sampling.h5")
    shutil.copy(os.path.join(WORK, "qwen2.h5"), weights)
    with h5py.File(weights, "a") as f:
        del f["tokenizer/generation_config.json"]
        text = json.dumps({"bos_token_id": 1, "eos_token_id": [5, 3], **sampling}).encode()
        f["tokenizer/generation_config.json"] = np.frombuffer(text, dtype=np.uint8)

    def job(tag, *extra):
        out = os.path.join(WORK, f"gen_config_{tag}.h5")
        r = mpirun(2, [os.path.join(BUILD, "apps", "meshnn-llm"), "--weights", weights, "--prompt-len", "8",
                       "--batch", "2", "--max-new-tokens", "6", "--ignore-eos", "--weight-dtype", "bfloat16",
                       "--output", out, *extra])
        if r.returncode != 0:
            print(r.stdout[-2000:] + r.stderr[-2000:])
            return None, {}, ""
        with h5py.File(out, "r") as f:
            return f["tokens"][...], {k: attr_value(v) for k, v in f.attrs.items()}, r.stdout

    tokens, attrs, out = job("auto")
    expected = {"sampling": "top-p", "temperature": 0.7, "top_k": 20, "top_p": 0.8, "repetition_penalty": 1.05}
    check(all(attrs.get(k) == v for k, v in expected.items()) and "from the model's generation_config.json" in out,
          f"the job samples as the model's generation_config.json says ({ {k: attrs.get(k) for k in expected} })")
    same, _, _ = job("explicit", "--generation-config", "none", "--sampling", "top-p", "--temperature", "0.7",
                     "--top-p", "0.8", "--top-k", "20", "--repetition-penalty", "1.05")
    greedy, _, _ = job("none", "--generation-config", "none")
    check(tokens is not None and np.array_equal(tokens, same) and not np.array_equal(tokens, greedy),
          "its tokens are those of the same settings given on the command line, not greedy's")
    given, attrs, _ = job("given", "--sampling", "greedy", "--repetition-penalty", "1")
    check(attrs.get("sampling") == "greedy" and attrs.get("repetition_penalty") == 1.0 and
          np.array_equal(given, greedy), "options given on the command line win over the file's")


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    models = test_conversions()
    test_hostile(models)
    test_placements()
    test_jobs(models)
    test_generation_config()
    finish(failures, WORK)


if __name__ == "__main__":
    main()
