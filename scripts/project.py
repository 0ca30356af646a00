#!/usr/bin/env python3
"""Projects the Llama job (meshnn-llm) onto more devices and other interconnects.

From one measured run (its --json record, its --profile-csv and, for an exact split of the ops
between prefill and decode, its --trace) and the alpha-beta of a link, predicts decode ms/step,
tokens/s (per user and in total) and time to first token of Llama shapes on 1 to 32 devices in
the tp, 2d and hybrid modes, and prints every assumption the prediction rests on.

  scripts/project.py --record r.json --profile p.csv --trace t.json
  scripts/project.py --record r.json --profile p.csv --trace t.json --link calib.json --links calibrated,t3000 \\
      --models llama3-8b --devices 8,32 --prompt-len 128 --csv out.csv --plot out.png
  scripts/project.py --record r.json --profile p.csv --trace t.json --compare r2.json r4.json --cores 2

The model (docs/projection.md):
  decode matmuls   weight bytes per device / the measured weight-streaming rate (or, when a
                   batch makes them compute-bound, FLOPs / the measured prefill GFLOP/s)
  prefill matmuls  FLOPs per device / the measured prefill GFLOP/s (or bytes / streaming rate)
  other ops        the measured op time scaled by its work per device (rows x width, or for
                   attention rows x heads x context)
  step overhead    the measured decode step minus its ops (sampler, glue), scaled by local vocab
  collectives      the ones src/models/llama/model.cpp issues per layer, each priced with the
                   schedule src/ccl/schedule.cpp's auto choice picks, on the link's alpha-beta
A device is one core of the measuring machine (times divided by --device-rate-scale); with
--cores, ranks beyond the cores time-share them and compute times grow by ranks / cores; with
--node-bandwidth too, the ranks streaming at once (min(ranks, cores)) share that read bandwidth,
so each streams its weights at most at bandwidth / min(ranks, cores).
"""
import argparse
import csv
import json
import math
import os
import sys
from dataclasses import dataclass, replace
from statistics import median

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TILE = 32
MIB = 1 << 20
# Bytes per element of a TILE-layout weight: block floats are tiles of 1024 mantissas plus 64 shared
# exponent bytes (docs/spec/formats.md).
DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "bfloat8_b": 1088 / 1024, "bfloat4_b": 576 / 1024}
# The sampler's header words per device (src/serving/sampler.cpp, kHeaderWords): status, offset, valid.
SAMPLER_HEADER_WORDS = 5
PREFILL_CHUNK = 512  # serving::GenerationOptions::prefill_chunk's default: prompt tokens per pass


@dataclass(frozen=True)
class LlamaShape:
    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    head_dim: int = 0

    @property
    def d(self):
        return self.head_dim or self.hidden // self.heads


# meshnn's presets (src/models/llama/config.cpp) and the two target shapes of the issue.
SHAPES = {
    "tiny": LlamaShape("tiny", 112, 200, 2, 8, 2, 250),
    "tinyllama": LlamaShape("tinyllama", 2048, 5632, 22, 32, 4, 32000),
    "llama3-8b": LlamaShape("llama3-8b", 4096, 14336, 32, 32, 8, 128256),
    "llama3-70b": LlamaShape("llama3-70b", 8192, 28672, 80, 64, 8, 128256),
}


# ---------------------------------------------------------------------------------------------
# Links: piecewise alpha-beta, as meshnn-calibrate writes them (distributed/link_calibration.hpp).

@dataclass
class Link:
    name: str
    segments: list  # [(from_bytes, alpha_s, beta_s_per_byte)], by from_bytes, the first from 0
    source: str

    def segment(self, nbytes):
        seg = self.segments[0]
        for s in self.segments:
            if nbytes >= s[0]:
                seg = s
        return seg

    def seconds(self, nbytes):
        """One message of nbytes one way: alpha + bytes * beta of the segment holding nbytes."""
        _, alpha, beta = self.segment(nbytes)
        return alpha + nbytes * beta

    def beta(self, nbytes):
        return self.segment(nbytes)[2]


def ethernet_link(name, gbit_per_s, alpha_us, source):
    return Link(name, [(0.0, alpha_us * 1e-6, 8.0 / (gbit_per_s * 1e9))], source)


# Published figures. Wormhole: each ethernet tile drives 100 Gb/s each way, and the two chips of an
# n300 are joined by two of them (E8-E0 and E9-E1): "Tenstorrent Wormhole Series Part 1:
# Physicalities", https://tenstorrent.com/vision/community-highlight-tenstorrent-wormhole-series-part-1-physicalities
# (Tenstorrent's spec sheet, https://docs.tenstorrent.com/aibs/wormhole/specifications.html, gives
# the n300's internal chip-to-chip link as 400GbE and the cards' Warp 100 bridges as 100 Gb).
# No source found gives a latency: the alphas are assumptions, printed as such.
PRESET_LINKS = {
    "n300": lambda: ethernet_link("n300", 200, 1.0, "n300 on-board: 2 Wormhole ethernet ports x 100 Gb/s (corsix / "
                                  "Tenstorrent); alpha 1 us ASSUMED (no published latency found)"),
    "t3000": lambda: ethernet_link("t3000", 100, 1.0, "T3000 between cards: 1 Wormhole ethernet port / Warp 100 bridge, "
                                   "100 Gb/s; alpha 1 us ASSUMED (no published latency found)"),
    "25gbe": lambda: ethernet_link("25gbe", 25, 10.0, "25 GbE NIC, MPI over TCP: 25 Gb/s; alpha 10 us ASSUMED"),
    "100gbe": lambda: ethernet_link("100gbe", 100, 5.0, "100 GbE NIC, MPI over TCP: 100 Gb/s; alpha 5 us ASSUMED"),
}
LOCAL_CALIBRATION = os.path.join(ROOT, "docs", "measurements", "calibrate_p2p_zen5_shm.json")


def load_calibration(path, name, axis=None):
    """The point-to-point link of one mesh axis of a meshnn-calibrate JSON (the first measured axis
    when axis is None)."""
    data = read_json(path, "link calibration")
    links = [p for p in data.get("point_to_point", []) if p.get("members", 1) > 1 and p.get("segments")]
    if axis is not None:
        links = [p for p in links if p.get("axis") == axis] or links
    if not links:
        raise SystemExit(f"error: {path} has no measured point_to_point link (a meshnn-calibrate JSON on >= 2 ranks)")
    p = links[0]
    segs = sorted((float(s["from_bytes"]), float(s["alpha_s"]), float(s["beta_s_per_byte"])) for s in p["segments"])
    return Link(name, segs, f"calibrated: {path} (axis {p.get('axis')}, transport {p.get('transport', '?')}, "
                f"fit within {100 * p.get('max_relative_error', 0):.0f}%)")


def make_links(names, link_file):
    out = []
    for n in names:
        if n == "calibrated":
            if not link_file:
                raise SystemExit("error: --links calibrated needs --link FILE (a meshnn-calibrate JSON)")
            out.append(load_calibration(link_file, "calibrated"))
        elif n == "local":
            out.append(load_calibration(LOCAL_CALIBRATION, "local"))
        elif n in PRESET_LINKS:
            out.append(PRESET_LINKS[n]())
        else:
            raise SystemExit(f"error: unknown link '{n}' (choices: calibrated, local, {', '.join(PRESET_LINKS)})")
    return out


# ---------------------------------------------------------------------------------------------
# Collectives, priced as the schedules meshnn runs (src/ccl/schedule.cpp auto_algorithm,
# src/ccl/all_reduce.cpp, src/ccl/direct.cpp).

DIRECT_ALL_REDUCE_BYTES = 64 << 10
DIRECT_ALL_REDUCE_PAIR_BYTES = 8 << 20
DIRECT_GATHER_BYTES = 16 << 10


def all_reduce_algorithm(n, nbytes):
    if n <= 1:
        return "none"
    limit = DIRECT_ALL_REDUCE_PAIR_BYTES if n == 2 else DIRECT_ALL_REDUCE_BYTES
    if nbytes <= limit:
        return "direct"
    return "ring" if n == 2 else "bidirectional_ring"


def all_reduce_seconds(n, nbytes, link):
    """all_reduce of nbytes (float32) over n members.
    direct: every member sends its whole buffer to each of the n-1 others through its one port:
            alpha + (n-1) * S * beta.
    ring:   reduce_scatter then all_gather, 2(n-1) steps of S/n: 2(n-1) * (alpha + S/n * beta).
    bidirectional ring: both directions of the full-duplex links, each carrying half:
            2(n-1) * (alpha + S/(2n) * beta)."""
    algo = all_reduce_algorithm(n, nbytes)
    if algo == "none":
        return 0.0
    if algo == "direct":
        return link.seconds(nbytes) + (n - 2) * nbytes * link.beta(nbytes)
    part = nbytes / n if algo == "ring" else nbytes / (2 * n)
    return 2 * (n - 1) * link.seconds(part)


def all_gather_seconds(n, block_bytes, link):
    """all_gather of one block per member: direct on 2 members or blocks <= 16 KiB (alpha + (n-1)
    blocks through the port), else the bidirectional ring's n-1 steps of half a block each way."""
    if n <= 1:
        return 0.0
    if n == 2 or block_bytes <= DIRECT_GATHER_BYTES:
        return link.seconds(block_bytes) + (n - 2) * block_bytes * link.beta(block_bytes)
    return (n - 1) * link.seconds(block_bytes / 2)


# ---------------------------------------------------------------------------------------------
# Placement: what one device holds (src/models/llama/model.cpp LlamaModel::load).

def round_tile(x):
    return (x + TILE - 1) // TILE * TILE


def ceil_div(a, b):
    return (a + b - 1) // b


@dataclass(frozen=True)
class Placement:
    hidden_parts: int  # 2d: mesh rows; tp: 1
    head_parts: int  # 2d: mesh columns; tp: the group
    q_heads: int  # per device
    kv_heads: int  # per device
    hidden_chunk: int
    local_inter: int  # this device's intermediate columns before tile padding
    local_vocab: int


def split_heads(shape, n):
    """(q heads, KV heads) per device, as split_heads_over; None when they cannot be split."""
    hq, hkv = shape.heads, shape.kv_heads
    kv_ok = hkv % n == 0 if n <= hkv else n % hkv == 0
    if hq % n or not kv_ok:
        return None
    return hq // n, (hkv // n if n <= hkv else 1)


def placement(shape, rows, cols, two_d):
    """The placement of a tensor-parallel group of rows x cols devices; None if the heads don't split."""
    hidden_parts = rows if two_d else 1
    head_parts = cols if two_d else rows * cols
    heads = split_heads(shape, head_parts)
    if heads is None:
        return None
    return Placement(hidden_parts, head_parts, heads[0], heads[1], ceil_div(shape.hidden, hidden_parts),
                     ceil_div(shape.intermediate, head_parts), ceil_div(shape.vocab, head_parts))


def matmul_weights(shape, p):
    """Elements per device of each matmul weight, padded to whole tiles as they are stored:
    {name: (rows k, cols n, count per pass)}."""
    d = shape.d
    qkv_cols = round_tile(p.q_heads * d) + 2 * round_tile(p.kv_heads * d)
    h = round_tile(p.hidden_chunk)
    inter = round_tile(p.local_inter)
    return {
        "wqkv": (h, qkv_cols, shape.layers),
        "wo": (round_tile(p.q_heads * d), h, shape.layers),
        "w_gate_up": (h, 2 * inter, shape.layers),
        "w_down": (inter, h, shape.layers),
        "lm_head": (h, round_tile(p.local_vocab), 1),
    }


def matmul_weight_bytes(shape, p, dtype):
    return sum(k * n * count for k, n, count in matmul_weights(shape, p).values()) * DTYPE_BYTES[dtype]


def collectives(shape, p, rows):
    """The collectives of one forward pass over `rows` token rows, of which `logit_rows` reach the LM
    head: [(what, axis members, bytes, calls)] (model.cpp forward, reduce and norm; the sampler's
    all_gather is added by the caller). Partial sums travel as packed float32 rows."""
    d = shape.d
    layers = shape.layers
    out = []
    if p.head_parts > 1:  # Across::HEADS after o_proj and down_proj
        out.append(("all_reduce after o_proj/down_proj", p.head_parts, rows * p.hidden_chunk * 4, 2 * layers))
    if p.hidden_parts > 1:  # 2d: Across::HIDDEN after qkv and gate/up, RMSNorm's sums of squares
        qkv = round_tile(p.q_heads * d) + 2 * round_tile(p.kv_heads * d)
        out.append(("all_reduce after qkv", p.hidden_parts, rows * qkv * 4, layers))
        out.append(("all_reduce after gate/up", p.hidden_parts, rows * 2 * round_tile(p.local_inter) * 4, layers))
        out.append(("all_reduce of RMSNorm sums", p.hidden_parts, rows * 4, 2 * layers))
    return out


def head_collectives(p, logit_rows):
    """The LM head's and the sampler's collectives (greedy: one candidate per row and device)."""
    out = []
    if p.hidden_parts > 1:
        out.append(("all_reduce of final RMSNorm sums", p.hidden_parts, logit_rows * 4, 1))
        out.append(("all_reduce of logits", p.hidden_parts, logit_rows * round_tile(p.local_vocab) * 4, 1))
    if p.head_parts > 1:
        out.append(("all_gather of sampler candidates", p.head_parts, (SAMPLER_HEADER_WORDS + 2 * logit_rows) * 4, 1))
    return out


def collective_seconds(items, link):
    total = 0.0
    for what, n, nbytes, calls in items:
        f = all_gather_seconds if what.startswith("all_gather") else all_reduce_seconds
        total += calls * f(n, nbytes, link)
    return total


# ---------------------------------------------------------------------------------------------
# Work of the non-matmul ops per device, the units their measured times are scaled by.

def op_work(shape, p, rows, attended):
    """rows: token rows in the pass; attended: sum over those rows of the positions each attends to."""
    return {
        "attention_with_kv_cache": shape.layers * p.q_heads * shape.d * attended,
        "swiglu": shape.layers * rows * round_tile(p.local_inter),
        "rms_norm": (2 * shape.layers + 1) * rows * p.hidden_chunk,
        "add": 2 * shape.layers * rows * p.hidden_chunk,
        "embedding": rows * shape.hidden,
    }


def step_overhead_work(p, logit_rows):
    """The decode step outside its ops and collectives is mostly the sampler over the local logits."""
    return logit_rows * round_tile(p.local_vocab)


def decode_attended(prompt, new_tokens):
    """Mean positions a decode row attends to: step s (0..T-2) writes position P+s and reads P+s+1."""
    steps = max(1, new_tokens - 1)
    return prompt + 1 + (steps - 1) / 2


# ---------------------------------------------------------------------------------------------
# The measured run.

def read_json(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise SystemExit(f"error: cannot read the {what} '{path}': {e.strerror}")
    except json.JSONDecodeError as e:
        raise SystemExit(f"error: the {what} '{path}' is not JSON: {e}")


RECORD_KEYS = ("ranks", "mesh", "mode", "weight_dtype", "requests", "max_batch", "layers", "hidden", "prefill_s",
               "prefill_tokens_per_s", "prefill_matmul_s", "mean_ttft_s", "decode_ms_per_step",
               "decode_matmul_ms_per_step", "decode_comm_ms_per_step", "matmul_weight_bytes", "generated_tokens")


def load_record(path):
    r = read_json(path, "run record")
    missing = [k for k in RECORD_KEYS if k not in r]
    if missing:
        raise SystemExit(f"error: {path} lacks {', '.join(missing)}: not a meshnn-llm --json record")
    return r


def load_profile(path, rank=0):
    """{(kind, name): row} of one rank of a --profile-csv file."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise SystemExit(f"error: cannot read the profile '{path}': {e.strerror}")
    need = {"rank", "kind", "name", "calls", "total_ms"}
    if not rows or not need <= set(rows[0]):
        raise SystemExit(f"error: {path} is not a meshnn --profile-csv file (needs columns {', '.join(sorted(need))})")
    out = {(r["kind"], r["name"]): r for r in rows if int(r["rank"]) == rank}
    for phase in ("decode step", "prefill pass"):
        if ("phase", phase) not in out:
            raise SystemExit(f"error: the profile {path} has no '{phase}' phase: profile a meshnn-llm run that "
                             "prefills and decodes (--max-new-tokens >= 2)")
    if ("op", "matmul") not in out:
        raise SystemExit(f"error: the profile {path} has no matmul op")
    return out


def phase_ops_from_trace(path, pid=0):
    """Per phase ('decode step', 'prefill pass'): {op: total ms} of rank pid's main-track ops inside
    the phase's spans, the phase's total ms and passes, its collectives' ms, and the prefill
    projections' FLOPs and ms (matmuls of more than one row)."""
    events = read_json(path, "trace")
    events = events.get("traceEvents", []) if isinstance(events, dict) else events
    spans = [e for e in events if e.get("ph") == "X" and e.get("pid") == pid]
    phases = [e for e in spans if e.get("cat") == "phase" and e["name"] in ("decode step", "prefill pass")]
    if not phases:
        raise SystemExit(f"error: the trace {path} has no decode step or prefill pass on rank {pid}")
    out = {name: {"ops": {}, "ms": 0.0, "passes": 0, "ccl_ms": 0.0, "flops": 0.0, "flop_ms": 0.0}
           for name in ("decode step", "prefill pass")}
    for ph in phases:
        o = out[ph["name"]]
        o["ms"] += ph["dur"] / 1e3
        o["passes"] += 1
        begin, end = ph["ts"], ph["ts"] + ph["dur"]
        for e in spans:
            if e.get("tid") != ph.get("tid") or not begin <= e["ts"] <= end or e is ph:
                continue
            if e.get("cat") == "op":
                o["ops"][e["name"]] = o["ops"].get(e["name"], 0.0) + e["dur"] / 1e3
                args = e.get("args", {})
                if e["name"] == "matmul" and args.get("m", 1) > 1:
                    o["flops"] += float(args.get("flops", 0))
                    o["flop_ms"] += e["dur"] / 1e3
            elif e.get("cat") == "ccl":
                o["ccl_ms"] += e["dur"] / 1e3
    return out


@dataclass
class Measured:
    shape: LlamaShape
    dtype: str
    ranks: int
    mode: str
    mesh: tuple
    users: int
    prompt: int
    new_tokens: int
    stream_gb_s: float  # decode weight streaming, GB/s
    prefill_gflops: float  # prefill projections
    decode_ops_ms: dict  # non-matmul op -> ms per decode step
    prefill_ops_ms: dict  # non-matmul op -> ms over the whole prefill
    step_overhead_ms: float  # decode step outside ops and collectives
    notes: list


def parse_mesh(text):
    try:
        r, c = (int(x) for x in text.lower().split("x"))
        return r, c
    except ValueError:
        raise SystemExit(f"error: mesh '{text}' is not RxC")


def measured_shape(record, override):
    if override:
        if override not in SHAPES:
            raise SystemExit(f"error: unknown --measured-shape '{override}' (choices: {', '.join(SHAPES)})")
        base = SHAPES[override]
    else:
        matches = [s for s in SHAPES.values() if s.hidden == record["hidden"]]
        if not matches:
            raise SystemExit(f"error: no preset has hidden {record['hidden']}; give --measured-shape")
        base = matches[0]
    return replace(base, name=f"measured ({base.name}, {record['layers']} layers)", layers=int(record["layers"]))


def run_workload(rec):
    """(users decoding together, prompt tokens per user, new tokens per user) of a run record."""
    users = min(int(rec["requests"]), int(rec["max_batch"]))
    prompt = int(round(rec["prefill_tokens_per_s"] * rec["prefill_s"] / rec["requests"]))
    return users, prompt, int(round(rec["generated_tokens"] / rec["requests"]))


def load_measured(record_path, profile_path, trace_path, shape_override):
    rec = load_record(record_path)
    prof = load_profile(profile_path)
    shape = measured_shape(rec, shape_override)
    notes = []
    if rec["ranks"] != 1 or rec["mode"] != "tp":
        notes.append(f"the measured run is {rec['mode']} on {rec['ranks']} ranks; its per-device figures are used as "
                     "they are (a 1-rank tp run is the cleanest source)")
    users, prompt, new_tokens = run_workload(rec)
    prefill_tokens = prompt * rec["requests"]
    steps = int(prof[("phase", "decode step")]["calls"])
    mesh = parse_mesh(rec["mesh"])
    p = placement(shape, *mesh, rec["mode"] == "2d")
    dtype = rec["weight_dtype"]
    predicted_bytes = matmul_weight_bytes(shape, p, dtype)
    if abs(predicted_bytes - rec["matmul_weight_bytes"]) > 0.01 * rec["matmul_weight_bytes"] + MIB:
        raise SystemExit(f"error: the record's matmul weights are {rec['matmul_weight_bytes'] / MIB:.1f} MiB per device, "
                         f"the shape {shape.name} gives {predicted_bytes / MIB:.1f} MiB: give the right --measured-shape")
    stream = rec["matmul_weight_bytes"] / (rec["decode_matmul_ms_per_step"] * 1e-3) / 1e9
    lm_head_bytes = math.prod(matmul_weights(shape, p)["lm_head"][:2]) * DTYPE_BYTES[dtype]
    non_mm = [k[1] for k in prof if k[0] == "op" and k[1] != "matmul"]
    if trace_path:
        t = phase_ops_from_trace(trace_path)
        dec, pre = t["decode step"], t["prefill pass"]
        if dec["passes"] == 0 or pre["passes"] == 0 or pre["flop_ms"] == 0:
            raise SystemExit(f"error: the trace {trace_path} lacks a decode step or a prefill pass with matmuls")
        decode_ops = {k: v / dec["passes"] for k, v in dec["ops"].items() if k != "matmul"}
        prefill_ops = {k: v for k, v in pre["ops"].items() if k != "matmul"}
        overhead = (dec["ms"] - sum(dec["ops"].values()) - dec["ccl_ms"]) / dec["passes"]
        gflops = pre["flops"] / (pre["flop_ms"] * 1e-3) / 1e9
        notes.append(f"op times split between prefill and decode from the trace {trace_path}")
    else:
        # Without a trace the profile cannot tell a decode call from a prefill call: the record's
        # per-phase non-matmul time is shared among the ops by their whole-run profile shares.
        totals = {n: float(prof[("op", n)]["total_ms"]) for n in non_mm}
        s = sum(totals.values()) or 1.0
        dec_rest = rec["decode_ms_per_step"] - rec["decode_matmul_ms_per_step"] - rec["decode_comm_ms_per_step"]
        pre_rest = 1e3 * (rec["prefill_s"] - rec["prefill_matmul_s"])
        decode_ops = {n: dec_rest * v / s for n, v in totals.items()}
        prefill_ops = {n: pre_rest * v / s for n, v in totals.items()}
        overhead = 0.0
        flops = 2.0 * prefill_tokens * sum(k * n * c for name, (k, n, c) in matmul_weights(shape, p).items()
                                           if name != "lm_head")
        pre_mm_s = rec["prefill_matmul_s"] - lm_head_bytes / (stream * 1e9)
        gflops = flops / pre_mm_s / 1e9
        notes.append("no --trace: the non-matmul time of each phase (from the record) is split among the ops by "
                     "their whole-run profile shares; the step overhead is folded into them")
    if steps < 1:
        raise SystemExit(f"error: the profile {profile_path} has no decode steps")
    return Measured(shape, dtype, int(rec["ranks"]), rec["mode"], mesh, users, prompt, new_tokens, stream, gflops,
                    decode_ops, prefill_ops, max(0.0, overhead), notes), rec


# ---------------------------------------------------------------------------------------------
# The projection.

def scaled_ops(measured_ms, measured_work, target_work):
    total = 0.0
    for op, ms in measured_ms.items():
        if op not in measured_work:
            raise SystemExit(f"error: the profile has an op '{op}' the projection does not know how to scale")
        if measured_work[op] > 0:
            total += ms * target_work[op] / measured_work[op]
    return total


def matmul_seconds(shape, p, m, rows, logit_rows, rate_scale):
    """Every matmul of a pass: max(bytes / streaming rate, FLOPs / GFLOP/s) each; the LM head sees
    only the logit rows (one per user)."""
    total = 0.0
    for name, (k, n, count) in matmul_weights(shape, p).items():
        r = rows if name != "lm_head" else logit_rows
        t_bytes = k * n * DTYPE_BYTES[m.dtype] / (m.stream_gb_s * 1e9)
        t_flops = 2.0 * r * k * n / (m.prefill_gflops * 1e9)
        total += count * max(t_bytes, t_flops)
    return total / rate_scale


def project_group(m, shape, rows_mesh, cols_mesh, two_d, users, prompt, new_tokens, link, rate_scale, time_share):
    """One tensor-parallel group of rows_mesh x cols_mesh devices serving `users` users."""
    p = placement(shape, rows_mesh, cols_mesh, two_d)
    if p is None:
        return None
    mp = placement(m.shape, *m.mesh, m.mode == "2d")
    mu = m.users
    # Decode: one row per user.
    dec_work = op_work(shape, p, users, users * decode_attended(prompt, new_tokens))
    dec_mwork = op_work(m.shape, mp, mu, mu * decode_attended(m.prompt, m.new_tokens))
    dec_mm = matmul_seconds(shape, p, m, users, users, rate_scale)
    dec_ops = scaled_ops(m.decode_ops_ms, dec_mwork, dec_work) * 1e-3 / rate_scale
    dec_over = m.step_overhead_ms * 1e-3 * step_overhead_work(p, users) / step_overhead_work(mp, mu) / rate_scale
    dec_comm = collective_seconds(collectives(shape, p, users) + head_collectives(p, users), link)
    dec_compute = (dec_mm + dec_ops + dec_over) * time_share
    # Prefill: every user's prompt, in passes of PREFILL_CHUNK rows; TTFT = the whole prefill.
    rows = users * prompt
    passes = ceil_div(rows, PREFILL_CHUNK)
    pre_work = op_work(shape, p, rows, users * prompt * (prompt + 1) / 2)
    pre_mwork = op_work(m.shape, mp, mu * m.prompt, mu * m.prompt * (m.prompt + 1) / 2)
    pre_mm = matmul_seconds(shape, p, m, rows, users, rate_scale)
    pre_ops = scaled_ops(m.prefill_ops_ms, pre_mwork, pre_work) * 1e-3 / rate_scale
    pre_comm = sum(collective_seconds(collectives(shape, p, min(PREFILL_CHUNK, rows - i * PREFILL_CHUNK)), link)
                   for i in range(passes)) + collective_seconds(head_collectives(p, users), link)
    pre_compute = (pre_mm + pre_ops + dec_over) * time_share
    return {
        "placement": p,
        "weight_gib": matmul_weight_bytes(shape, p, m.dtype) / (1 << 30),
        "decode_ms": 1e3 * (dec_compute + dec_comm),
        "decode_compute_ms": 1e3 * dec_compute,
        "decode_comm_ms": 1e3 * dec_comm,
        "decode_matmul_ms": 1e3 * dec_mm * time_share,
        "ttft_ms": 1e3 * (pre_compute + pre_comm),
        "prefill_comm_ms": 1e3 * pre_comm,
    }


def mesh_for(mode, devices, replicas):
    """tp: 1 x N. 2d: rows = the largest power of two <= sqrt(N) (hidden over rows, heads over
    columns; 32 -> 4x8). hybrid: `replicas` mesh rows, each a tp group of N / replicas."""
    if mode == "tp":
        return 1, devices
    if mode == "2d":
        rows = 1
        while (rows * 2) ** 2 <= devices and devices % (rows * 2) == 0:
            rows *= 2
        return rows, devices // rows
    r = min(replicas, devices)
    if devices % r:
        return None
    return r, devices // r


def project_mesh(m, shape, mode, rows_mesh, cols_mesh, users, prompt, new_tokens, link, rate_scale, time_share):
    """tp and 2d: one group of the whole mesh. hybrid: each mesh row a tp replica serving its share
    of the users side by side (the step time is one replica's)."""
    if mode == "hybrid":
        g = project_group(m, shape, 1, cols_mesh, False, ceil_div(users, rows_mesh), prompt, new_tokens, link,
                          rate_scale, time_share)
    else:
        g = project_group(m, shape, rows_mesh, cols_mesh, mode == "2d", users, prompt, new_tokens, link, rate_scale,
                          time_share)
    return g


def on_one_node(m, ranks, cores, node_gb_s):
    """The measured model with its weight-streaming rate capped by the node's read bandwidth shared
    by the ranks that stream at once (ranks beyond the cores wait for a core)."""
    if not (cores and node_gb_s):
        return m
    return replace(m, stream_gb_s=min(m.stream_gb_s, node_gb_s / min(ranks, cores)))


def project(m, shape, mode, devices, users, prompt, new_tokens, link, rate_scale=1.0, cores=0, replicas=2,
            node_gb_s=0.0):
    mesh = mesh_for(mode, devices, replicas)
    if mesh is None:
        return None
    time_share = max(1.0, devices / cores) if cores else 1.0
    m = on_one_node(m, devices, cores, node_gb_s)
    g = project_mesh(m, shape, mode, *mesh, users, prompt, new_tokens, link, rate_scale, time_share)
    if g is None:
        return None
    g.update({
        "model": shape.name, "mode": mode, "devices": devices, "mesh": f"{mesh[0]}x{mesh[1]}", "link": link.name,
        "users": users, "time_share": time_share,
        "tokens_per_s_per_user": 1e3 / g["decode_ms"],
        "tokens_per_s_total": users * 1e3 / g["decode_ms"],
    })
    return g


# ---------------------------------------------------------------------------------------------
# Output.

def gb_per_s(beta):
    return f"{1e-9 / beta:.2f}" if beta > 0 else "inf"


def print_assumptions(m, links, args):
    mp = placement(m.shape, *m.mesh, m.mode == "2d")
    print("Assumptions")
    print(f"  measured run: {m.shape.name}: hidden {m.shape.hidden}, intermediate {m.shape.intermediate}, heads "
          f"{m.shape.heads}/{m.shape.kv_heads}, vocab {m.shape.vocab}; {m.mode} on {m.ranks} rank(s), mesh "
          f"{m.mesh[0]}x{m.mesh[1]}, {m.dtype} weights, {m.users} user(s), prompt {m.prompt}, {m.new_tokens} new tokens")
    for n in m.notes:
        print(f"  - {n}")
    print(f"  device = one core of the measuring machine (its worker threads as measured), rates x "
          f"{args.device_rate_scale} (--device-rate-scale)")
    print(f"  decode matmuls: weight bytes / {m.stream_gb_s:.2f} GB/s (the record's matmul weights per device over its "
          "decode matmul ms/step), or FLOPs / the prefill rate when rows make that larger")
    print(f"  prefill matmuls: FLOPs / {m.prefill_gflops:.1f} GFLOP/s (the measured prefill projections' FLOPs over "
          "their time; assumed the same at every prompt length and per-device width)")
    print("  other ops (ms in the measured run; scaled by their work per device):")
    for op in sorted(set(m.decode_ops_ms) | set(m.prefill_ops_ms)):
        print(f"    {op:<26} decode {m.decode_ops_ms.get(op, 0.0):8.3f} ms/step   prefill "
              f"{m.prefill_ops_ms.get(op, 0.0):8.3f} ms")
    print("    attention ~ layers x q heads per device x head_dim x positions attended; swiglu ~ rows x local "
          "intermediate; rms_norm, add ~ rows x local hidden; embedding ~ rows x hidden")
    print(f"  decode step overhead (step - ops - collectives: sampler, glue): {m.step_overhead_ms:.3f} ms, scaled by users "
          "x local vocab")
    print(f"  weights per device (matmul weights, tile-padded, {m.dtype} = {DTYPE_BYTES[m.dtype]:.4f} B/element): "
          f"{matmul_weight_bytes(m.shape, mp, m.dtype) / MIB:.1f} MiB in the measured run")
    print("  collectives: the ones model.cpp issues (tp: all_reduce of users x hidden float32 after o_proj and "
          "down_proj; 2d: also after qkv and gate/up along the mesh column, RMSNorm sums, logits; sampler's all_gather), "
          "each with src/ccl/schedule.cpp's auto schedule:")
    print("    direct  alpha + (n-1) S beta   (all_reduce <= 64 KiB, <= 8 MiB on 2; all_gather <= 16 KiB or on 2)")
    print("    ring    2(n-1)(alpha + S/n beta)   bidirectional ring 2(n-1)(alpha + S/(2n) beta)")
    print("    every device has one port on the link; the same link on both mesh axes")
    for link in links:
        segs = "; ".join(f">= {s[0]:.0f} B: alpha {s[1] * 1e6:.2f} us, {gb_per_s(s[2])} GB/s" for s in link.segments)
        print(f"  link {link.name}: {link.source}\n    {segs}")
    if args.cores:
        print(f"  --cores {args.cores}: N ranks on {args.cores} cores time-share them; compute x max(1, N/{args.cores})")
    if args.cores and args.node_bandwidth:
        print(f"  --node-bandwidth {args.node_bandwidth:.1f} GB/s: the min(N, {args.cores}) ranks streaming at once share it; "
              f"decode weights stream at min({m.stream_gb_s:.2f}, {args.node_bandwidth:.1f} / min(N, {args.cores})) GB/s")
    if args.cores and args.compare:
        print(f"  --compare: a record carrying node_read_GBps (the node's read bandwidth around that run) streams its "
              f"decode weights at min({m.stream_gb_s:.2f}, node_read_GBps / min(N, {args.cores})) GB/s")
    print(f"  hybrid: {args.replicas} replicas (mesh rows) of N/{args.replicas} devices each, users split over them; "
          "2d: mesh rows = largest power of two <= sqrt(N)")
    print("  NOT modelled: memory capacity (weights GiB/device is printed, not checked), compute/communication overlap "
          "(none: summed), load imbalance and waits, memory bandwidth shared by ranks on one node (unless "
          "--node-bandwidth), kernel efficiency "
          "changing with the per-device width, prefill chunking beyond one LM head per prompt, KV cache reads beyond "
          "attention's scaling")
    print()


COLUMNS = ["model", "mode", "devices", "mesh", "link", "users", "weight_gib", "decode_ms", "decode_compute_ms",
           "decode_comm_ms", "tokens_per_s_per_user", "tokens_per_s_total", "ttft_ms"]


def print_table(rows):
    head = f"{'model':<30} {'mode':<6} {'dev':>3} {'mesh':>5} {'link':<10} {'GiB/dev':>7} {'ms/step':>9} " \
           f"{'compute':>8} {'comm':>7} {'tok/s/u':>8} {'tok/s':>8} {'TTFT ms':>9}"
    print(head)
    for r in rows:
        print(f"{r['model'][:30]:<30} {r['mode']:<6} {r['devices']:>3} {r['mesh']:>5} {r['link']:<10} "
              f"{r['weight_gib']:7.2f} {r['decode_ms']:9.3f} {r['decode_compute_ms']:8.3f} {r['decode_comm_ms']:7.3f} "
              f"{r['tokens_per_s_per_user']:8.1f} {r['tokens_per_s_total']:8.1f} {r['ttft_ms']:9.1f}")


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{r[k]:.6g}" if isinstance(r[k], float) else r[k]) for k in COLUMNS})


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"no plot: matplotlib is not installed (apt-get install python3-matplotlib); {path} not written")
        return
    models = sorted({r["model"] for r in rows})
    fig, axes = plt.subplots(2, len(models), figsize=(5.5 * len(models), 8), squeeze=False)
    for i, model in enumerate(models):
        series = {}
        for r in rows:
            if r["model"] == model:
                series.setdefault((r["mode"], r["link"]), []).append(r)
        for (mode, link), pts in sorted(series.items()):
            pts.sort(key=lambda r: r["devices"])
            xs = [p["devices"] for p in pts]
            axes[0][i].plot(xs, [p["tokens_per_s_per_user"] for p in pts], marker="o", label=f"{mode} {link}")
            axes[1][i].plot(xs, [p["ttft_ms"] for p in pts], marker="o", label=f"{mode} {link}")
        axes[0][i].set_title(f"{model}: decode")
        axes[0][i].set_ylabel("tokens/s per user")
        axes[1][i].set_title(f"{model}: time to first token")
        axes[1][i].set_ylabel("TTFT (ms)")
        axes[1][i].set_yscale("log")
        for ax in (axes[0][i], axes[1][i]):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("devices")
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


UNSTEADY_BANDWIDTH = 0.15


def bandwidth_moved(rec):
    """Whether the node's read bandwidth moved by more than UNSTEADY_BANDWIDTH across the run."""
    before, after = rec.get("node_read_GBps_before"), rec.get("node_read_GBps_after")
    return bool(before and after) and abs(after / before - 1) > UNSTEADY_BANDWIDTH


def compare(m, record_paths, link, args):
    """Predicted vs measured for runs of the measured model's own shape. A record may carry the
    node's read bandwidth of its own minute (node_read_GBps, as scripts/project_validate.sh adds
    it); it then replaces --node-bandwidth for that run. When the bandwidth measured just before
    and just after a run differ by more than UNSTEADY_BANDWIDTH, the machine changed during the
    run and no one figure prices it: such runs are shown and marked but kept out of the verdict."""
    print(f"Validation against measured runs (link {link.name}):")
    print(f"{'run':<28} {'mode':<5} {'mesh':>5} {'node GB/s':>9} {'ms/step pred':>12} {'meas':>8} {'err':>7} "
          f"{'TTFT ms pred':>12} {'meas':>8} {'err':>7}")
    worst = worst_unsteady = 0.0
    unsteady = 0
    errors_by_point = {}
    for path in record_paths:
        rec = load_record(path)
        time_share = max(1.0, rec["ranks"] / args.cores) if args.cores else 1.0
        node_gb_s = rec.get("node_read_GBps", args.node_bandwidth)
        g = project_mesh(on_one_node(m, rec["ranks"], args.cores, node_gb_s), m.shape, rec["mode"],
                         *parse_mesh(rec["mesh"]), *run_workload(rec), link, args.device_rate_scale, time_share)
        if g is None:
            print(f"{os.path.basename(path):<28} cannot be placed")
            continue
        e_dec = g["decode_ms"] / rec["decode_ms_per_step"] - 1
        e_ttft = g["ttft_ms"] / (1e3 * rec["mean_ttft_s"]) - 1
        moved = bandwidth_moved(rec)
        if moved:
            unsteady += 1
            worst_unsteady = max(worst_unsteady, abs(e_dec), abs(e_ttft))
        else:
            worst = max(worst, abs(e_dec), abs(e_ttft))
            errors_by_point.setdefault((rec["mode"], rec["mesh"]), []).append((abs(e_dec), abs(e_ttft)))
        node = f"{node_gb_s:9.1f}" if node_gb_s else f"{'-':>9}"
        print(f"{os.path.basename(path):<28} {rec['mode']:<5} {rec['mesh']:>5} {node} {g['decode_ms']:12.3f} "
              f"{rec['decode_ms_per_step']:8.3f} {100 * e_dec:+6.1f}% {g['ttft_ms']:12.1f} {1e3 * rec['mean_ttft_s']:8.1f} "
              f"{100 * e_ttft:+6.1f}%" + (f"  unsteady: {rec['node_read_GBps_before']:.1f} -> "
                                          f"{rec['node_read_GBps_after']:.1f} GB/s" if moved else ""))
    if any(len(e) > 1 for e in errors_by_point.values()):
        print("median |error| over each point's runs: " + "; ".join(
            f"{mode} {mesh} decode {100 * median([d for d, _ in e]):.1f}%, TTFT {100 * median([t for _, t in e]):.1f}%"
            for (mode, mesh), e in errors_by_point.items()))
    print(f"worst error {100 * worst:.1f}%" + (
        f" ({unsteady} unsteady run(s), the node's bandwidth moving by more than {100 * UNSTEADY_BANDWIDTH:.0f}% "
        f"across the run, not counted: their worst {100 * worst_unsteady:.1f}%)" if unsteady else ""))
    return worst


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--record", required=True, help="the measured run's meshnn-llm --json record")
    p.add_argument("--profile", required=True, help="the measured run's --profile-csv")
    p.add_argument("--trace", help="the measured run's --trace (splits the ops between prefill and decode exactly)")
    p.add_argument("--measured-shape", help=f"the measured model's preset ({', '.join(SHAPES)}; default: by hidden)")
    p.add_argument("--link", help="a meshnn-calibrate JSON: the link 'calibrated'")
    p.add_argument("--links", help="links to project onto (calibrated, local, n300, t3000, 25gbe, 100gbe; default: "
                   "calibrated when --link is given, then local,n300,t3000,25gbe,100gbe)")
    p.add_argument("--models", default="measured,llama3-8b,llama3-70b", help="measured and/or presets")
    p.add_argument("--modes", default="tp,2d,hybrid")
    p.add_argument("--devices", default="1,2,4,8,16,32")
    p.add_argument("--users", type=int, help="users decoding together (default: the measured run's)")
    p.add_argument("--prompt-len", type=int, help="prompt tokens per user (default: the measured run's)")
    p.add_argument("--new-tokens", type=int, help="tokens generated per user (default: the measured run's)")
    p.add_argument("--replicas", type=int, default=2, help="hybrid: data-parallel replicas (mesh rows)")
    p.add_argument("--device-rate-scale", type=float, default=1.0, help="a device is this many measuring cores")
    p.add_argument("--cores", type=int, default=0,
                   help="cores the projected ranks share (validation on this machine): compute x max(1, ranks/cores)")
    p.add_argument("--node-bandwidth", type=float, default=0.0, metavar="GBPS",
                   help="with --cores: the read bandwidth of those cores streaming at once (meshnn-kernel-bench "
                   "--bandwidth), shared by the ranks that stream at once")
    p.add_argument("--compare", nargs="+", metavar="RECORD", help="predict these measured runs and print the errors")
    p.add_argument("--csv", help="write the table here")
    p.add_argument("--plot", help="write a PNG here (needs matplotlib)")
    args = p.parse_args()
    if args.device_rate_scale <= 0:
        raise SystemExit("error: --device-rate-scale must be > 0")
    if args.node_bandwidth < 0 or (args.node_bandwidth and not args.cores):
        raise SystemExit("error: --node-bandwidth must be > 0 and needs --cores (the ranks it is shared by)")

    m, _ = load_measured(args.record, args.profile, args.trace, args.measured_shape)
    names = args.links.split(",") if args.links else (["calibrated"] if args.link else []) + \
        ["local", "n300", "t3000", "25gbe", "100gbe"]
    links = make_links(names, args.link)
    print_assumptions(m, links, args)
    if args.compare:
        worst = compare(m, args.compare, links[0], args)
        return 0 if worst <= 0.2 else 1

    users = args.users or m.users
    prompt = args.prompt_len or m.prompt
    new_tokens = args.new_tokens or m.new_tokens
    print(f"Projection: {users} user(s), prompt {prompt} tokens, {new_tokens} new tokens, {m.dtype} weights")
    rows, skipped = [], []
    for model in args.models.split(","):
        shape = m.shape if model == "measured" else SHAPES.get(model)
        if shape is None:
            raise SystemExit(f"error: unknown model '{model}' (choices: measured, {', '.join(SHAPES)})")
        for mode in args.modes.split(","):
            if mode not in ("tp", "2d", "hybrid"):
                raise SystemExit(f"error: unknown mode '{mode}' (choices: tp, 2d, hybrid)")
            for n in (int(x) for x in args.devices.split(",")):
                for link in links:
                    r = project(m, shape, mode, n, users, prompt, new_tokens, link, args.device_rate_scale, args.cores,
                                args.replicas, args.node_bandwidth)
                    if r is None:
                        skipped.append(f"{shape.name} {mode} {n}")
                        break
                    rows.append(r)
    print_table(rows)
    if skipped:
        print(f"not placeable (heads do not split over the devices): {', '.join(sorted(set(skipped)))}")
    if args.csv:
        write_csv(rows, args.csv)
        print(f"wrote {args.csv}")
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
