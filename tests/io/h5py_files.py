#!/usr/bin/env python3
"""Writes HDF5 weight files the way people write them, with h5py (a real producer, not meshnn's
own writer), plus the values each dataset must load as, for tests/mpi/test_h5py_files.cpp.

    h5py_files.py OUT_DIR

For each kind of string attribute h5py can write (variable-length UTF-8, its default for a str;
variable-length ASCII; fixed-length ASCII, its default for bytes; fixed-length UTF-8) one file
`strings_<kind>.h5` holds:
  - root attributes model_type="llama" (that kind), hidden_size (int), rms_norm_eps (float),
    tie_word_embeddings (bool, which h5py stores as an enum);
  - datasets of float32, float16 and bfloat16 (uint16 + attribute dtype="bfloat16" of that kind),
    each contiguous, chunked and deflate-compressed.
`utf8_names.h5` has a model_type with non-ASCII characters, variable- and fixed-length.
Next to each dataset `<file>.<dataset>.bin` holds its values as little-endian float32, exactly
(float16 and bfloat16 widen to float32 without rounding), to compare the loaded values with.
"""
import os
import sys

import h5py
import numpy as np

KINDS = {
    "vlen_utf8": lambda s: s,  # h5py's default for a Python str
    "vlen_ascii": lambda s: np.array(s.encode(), dtype=h5py.string_dtype("ascii")),
    "fixed_ascii": lambda s: np.bytes_(s.encode()),  # h5py's default for bytes
    "fixed_utf8": lambda s: np.array(s.encode(), dtype=h5py.string_dtype("utf-8", len(s.encode()))),
}

# name: (shape, storage, layout). Sizes not multiples of 32 so loads pad; chunks that do not
# divide the shape.
DATASETS = {
    "w.f32.contiguous": ((40, 72), "float32", "contiguous"),
    "w.f32.chunked": ((40, 72), "float32", "chunked"),
    "w.f32.deflate": ((40, 72), "float32", "deflate"),
    "w.f16.contiguous": ((40, 72), "float16", "contiguous"),
    "w.f16.chunked": ((40, 72), "float16", "chunked"),
    "w.f16.deflate": ((40, 72), "float16", "deflate"),
    "w.bf16.contiguous": ((40, 72), "bfloat16", "contiguous"),
    "w.bf16.chunked": ((40, 72), "bfloat16", "chunked"),
    "w.bf16.deflate": ((40, 72), "bfloat16", "deflate"),
    "norm.bf16": ((72,), "bfloat16", "deflate"),
    "act.f32": ((2, 3, 72), "float32", "chunked"),
}


def to_bfloat16_bits(values):
    """float32 -> bfloat16 bits, round to nearest even (no NaN here)."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def values_for(seed, shape, storage):
    """(array as stored, the float32 values it holds)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    if storage == "float32":
        return x, x
    if storage == "float16":
        h = x.astype(np.float16)
        return h, h.astype(np.float32)
    bits = to_bfloat16_bits(x)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32)


def write_dataset(f, name, shape, storage, layout, seed, string_kind):
    stored, exact = values_for(seed, shape, storage)
    options = {}
    if layout == "chunked":
        options["chunks"] = tuple(max(1, (s + 2) // 3) for s in shape)
    elif layout == "deflate":
        options.update(chunks=tuple(max(1, (s + 1) // 2) for s in shape), compression="gzip", compression_opts=4)
    ds = f.create_dataset(name, data=stored, **options)
    if storage == "bfloat16":
        ds.attrs["dtype"] = KINDS[string_kind]("bfloat16")
    return exact


def write_file(out_dir, file_name, string_kind, seed):
    path = os.path.join(out_dir, file_name)
    with h5py.File(path, "w") as f:
        f.attrs["model_type"] = KINDS[string_kind]("llama")
        f.attrs["hidden_size"] = 72
        f.attrs["rms_norm_eps"] = 1e-5
        f.attrs["tie_word_embeddings"] = True
        for i, (name, (shape, storage, layout)) in enumerate(DATASETS.items()):
            exact = write_dataset(f, name, shape, storage, layout, seed * 100 + i, string_kind)
            exact.astype("<f4").tofile(f"{path}.{name}.bin")


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for seed, kind in enumerate(KINDS, start=1):
        write_file(out_dir, f"strings_{kind}.h5", kind, seed)
    with h5py.File(os.path.join(out_dir, "utf8_names.h5"), "w") as f:
        name = "llam\u00e4-\u2603"  # 2- and 3-byte UTF-8 sequences
        f.attrs["model_type"] = name
        f.attrs.create("rope_theta", 500000.0)
        f.attrs["model_type_fixed"] = KINDS["fixed_utf8"](name)
    with h5py.File(os.path.join(out_dir, "utf8_fixed.h5"), "w") as f:
        f.attrs["model_type"] = KINDS["fixed_utf8"]("llam\u00e4-\u2603")
    print(f"wrote {len(KINDS) + 2} h5py files to {out_dir}")


if __name__ == "__main__":
    main()
