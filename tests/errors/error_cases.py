#!/usr/bin/env python3
"""The error tier: runs meshnn's apps on bad input across 2, 4 and 8 ranks and checks, per case,
the exit status, that the user sees one clear message (or, for faults that cannot be symmetric, an
abort naming the rank), that no output file is left behind, and that the job ended within the
time bound.

  error_cases.py BUILD_DIR WORK_DIR [--list]   (--list prints the cases as a Markdown table)
"""
import os
import re
import subprocess
import sys
import time

TIME_BOUND_S = 60
USAGE, ERROR, ABORT = 2, 1, "abort"


class Case:
    def __init__(self, name, ranks, app, args, status, text, absent=None, env=None):
        self.name, self.ranks, self.app, self.args = name, ranks, app, args
        self.status, self.text, self.absent, self.env = status, text, absent, env or {}


def cases(work):
    w = lambda f: os.path.join(work, f)
    small = ["--hidden", "64", "--intermediate", "256", "--seq", "8", "--iterations", "1", "--warmup", "0"]
    good = ["--weights", w("good.h5"), "--seq", "8", "--iterations", "1", "--warmup", "0"]
    mlp, demo, gen, llm = "meshnn-mlp", "meshnn-demo", "meshnn-make-weights", "meshnn-llm"
    tiny = ["--weights", w("llama_tiny.h5"), "--prompt-len", "8", "--max-new-tokens", "2"]
    out = ["--output", w("llm_out.h5")]  # must not exist after any failed run
    return [
        # mesh shape vs rank count
        Case("mesh larger than the job", 2, demo, ["--mesh", "1x3"], ERROR, "MeshShape(1, 3) needs 3 devices"),
        Case("mesh smaller than the job", 4, demo, ["--mesh", "1x2"], ERROR, "needs 2 devices (one MPI rank each) but the job has 4"),
        Case("2-D mesh of the wrong size", 8, mlp, ["--mesh", "3x3"] + small, ERROR, "MeshShape(3, 3) needs 9 devices"),
        Case("mesh of zero rows", 2, demo, ["--mesh", "0x2"], USAGE, "not of the form RxC"),
        Case("mesh not RxC", 2, mlp, ["--mesh", "two"] + small, USAGE, "not of the form RxC"),
        # bad dims, non-divisible shards and scatters
        Case("shard dim out of range", 2, demo, ["--dim", "7"], ERROR, "Shard(7) is out of range for a rank-4 tensor"),
        Case("negative shard dim out of range", 4, demo, ["--dim", "-5"], ERROR, "Shard(-5) is out of range for a rank-4 tensor"),
        Case("non-divisible shard", 2, demo, ["--shape", "1,1,64,255"], ERROR, "cannot shard dim 3 of size 255"),
        Case("non-divisible shard on 8", 8, demo, ["--shape", "3,5", "--dim", "0"], ERROR, "cannot shard dim 0 of size 3"),
        Case("non-divisible reduce_scatter", 8, mlp, ["--hidden", "100", "--intermediate", "256", "--seq", "8",
                                                      "--iterations", "1", "--warmup", "0", "--tp-variant",
                                                      "reduce_scatter"], ERROR, "reduce_scatter"),
        Case("no distributed matmul plan fits", 8, mlp, ["--hidden", "100", "--intermediate", "256", "--seq", "8",
                                                         "--iterations", "1", "--warmup", "0"], ERROR,
             "distributed matmul: no plan for A [1, 8, 256]"),
        Case("shapes differ across ranks (checked mode)", 4, "fault_drill", ["mismatch"], ERROR, "differ"),
        # unknown options and values
        Case("demo: unknown option", 2, demo, ["--frobnicate"], USAGE, "unknown option"),
        Case("demo: malformed shape", 4, demo, ["--shape", "1,,2"], USAGE, "--shape: '1,,2' is not a list of whole numbers"),
        Case("mlp: unknown option", 2, mlp, ["--frobnicate"], USAGE, "unknown option '--frobnicate'"),
        Case("mlp: unknown mode", 2, mlp, ["--mode", "pp"], USAGE, "--mode: pp not in {dp,tp,2d,hybrid}"),
        Case("mlp: unknown tp variant", 2, mlp, ["--tp-variant", "ring"], USAGE, "--tp-variant: ring not in"),
        Case("mlp: unsupported weight dtype", 2, mlp, ["--weight-dtype", "float16"], USAGE, "--weight-dtype: float16 not in"),
        Case("mlp: block-float activations", 4, mlp, ["--act-dtype", "bfloat8_b"], USAGE, "--act-dtype: bfloat8_b not in {bfloat16,float32}"),
        Case("mlp: batch of zero", 2, mlp, ["--batch", "0"], USAGE, "--batch: 0 is out of range"),
        Case("mlp: batch not a number", 2, mlp, ["--batch", "two"], USAGE, "'two' is not a whole number"),
        Case("mlp: negative seq", 2, mlp, ["--seq", "-5"], USAGE, "out of range"),
        Case("mlp: option without value", 2, mlp, ["--iterations"], USAGE, "--iterations: 1 required"),
        Case("mlp: unknown topology", 2, mlp, ["--topology", "torus"], USAGE, "--topology: unknown topology 'torus'"),
        Case("mlp: too many links", 2, mlp, ["--num-links", "99"], USAGE, "out of range"),
        Case("mlp: stray argument", 2, mlp, ["extra"], USAGE, "unexpected argument 'extra'"),
        Case("make-weights: no output", 1, gen, [], USAGE, "--output is required"),
        Case("make-weights: bad storage", 1, gen, ["--output", w("x.h5"), "--storage", "int8"], USAGE, "--storage: int8 not in {float32,bfloat16}",
             absent=w("x.h5")),
        Case("make-weights: zero hidden", 1, gen, ["--output", w("x.h5"), "--hidden", "0"], USAGE, "out of range",
             absent=w("x.h5")),
        Case("ccl-bench: unknown option", 2, "meshnn-ccl-bench", ["--frobnicate"], USAGE, "frobnicate"),
        Case("ccl-bench: bad size", 2, "meshnn-ccl-bench", ["-b", "1X"], USAGE, "--minbytes: '1X' is not a size"),
        Case("kernel-bench: unknown option", 1, "meshnn-kernel-bench", ["--frobnicate"], USAGE, "frobnicate"),
        # files
        Case("weights file missing", 2, mlp, ["--weights", w("nope.h5")] + good[2:], ERROR, "cannot open"),
        Case("weights file not HDF5", 4, mlp, ["--weights", w("text.h5")] + good[2:], ERROR, "not a readable HDF5 file"),
        Case("weights file truncated", 2, mlp, ["--weights", w("truncated.h5")] + good[2:], ERROR, "truncated"),
        Case("weights file corrupt", 8, mlp, ["--weights", w("corrupt.h5")] + good[2:], ERROR, "corrupt"),
        Case("weight dataset missing", 2, mlp, ["--weights", w("missing_dataset.h5")] + good[2:], ERROR,
             "dataset 'dense_4h_to_h.weight' not found"),
        Case("weight of the wrong shape", 4, mlp, ["--weights", w("wrong_shape.h5")] + good[2:], ERROR,
             "has shape [128, 64], expected [256, 64]"),
        Case("weight of an unsupported type", 2, mlp, ["--weights", w("wrong_type.h5")] + good[2:], ERROR,
             "unsupported element type"),
        Case("model attributes missing", 2, mlp, ["--weights", w("no_attributes.h5")] + good[2:], ERROR,
             "root attribute 'hidden_size' is missing"),
        Case("NaN in weights", 4, mlp, ["--weights", w("nan.h5")] + good[2:], ERROR, "contains NaN"),
        Case("inf in weights", 2, mlp, ["--weights", w("inf.h5")] + good[2:], ERROR, "contains inf"),
        Case("NaN in weights, 8 ranks, 2d", 8, mlp, ["--weights", w("nan.h5"), "--mesh", "2x4", "--mode", "2d"] + good[2:],
             ERROR, "contains NaN"),
        Case("layer absent from checkpoint", 2, mlp, good + ["--layer", "3"], ERROR,
             "transformer.h.3.mlp.dense_h_to_4h.weight' not found"),
        Case("input file missing", 2, mlp, good + ["--input", w("nope_input.h5")], ERROR, "cannot open"),
        Case("input dataset missing", 2, mlp, good + ["--input", w("input_wrong_name.h5")], ERROR,
             "dataset 'input' not found"),
        Case("NaN in input", 4, mlp, good + ["--input", w("input_nan.h5")], ERROR, "contains NaN"),
        Case("input of the wrong hidden size", 2, mlp, good + ["--input", w("input_wrong_hidden.h5")], ERROR,
             "does not match the model's 64"),
        Case("output path not writable", 2, mlp, good + ["--output", "/proc/meshnn_out.h5"], ERROR, "cannot create",
             absent="/proc/meshnn_out.h5"),
        Case("output directory missing", 4, mlp, good + ["--output", w("no/such/dir/out.h5")], ERROR, "cannot create",
             absent=w("no/such/dir/out.h5")),
        Case("json path not writable", 2, mlp, good + ["--json", "/proc/meshnn.json"], ERROR, "cannot write"),
        # the LLM job (tiny Llama model, made once in the work dir)
        Case("llm: token ids outside the vocabulary", 2, llm, tiny + ["--tokens", w("tokens_vocab1000.h5")] + out,
             ERROR, "outside the vocabulary [0, 250)", absent=w("llm_out.h5")),
        Case("llm: empty prompt", 2, llm, tiny + ["--tokens", w("tokens_empty-prompt.h5")] + out, ERROR,
             "prompt 1 has length 0", absent=w("llm_out.h5")),
        Case("llm: a request for 0 new tokens, dp (its replica alone would fail)", 4, llm,
             tiny + ["--tokens", w("tokens_zero-new-tokens.h5"), "--mesh", "1x4", "--mode", "dp"] + out, ERROR,
             "max_new_tokens of prompt 3 is 0", absent=w("llm_out.h5")),
        Case("llm: prompt + new tokens beyond max_position_embeddings", 2, llm,
             tiny + ["--prompt-len", "200", "--max-new-tokens", "100"] + out, ERROR,
             "beyond max_position_embeddings 256", absent=w("llm_out.h5")),
        Case("llm: heads not splittable over the mesh", 3, llm, tiny + out, ERROR,
             "cannot split 8 attention heads and 2 KV heads over 3 devices", absent=w("llm_out.h5")),
        Case("llm: not a Llama checkpoint", 2, llm, ["--weights", w("good.h5")] + out, ERROR, "holds a 'falcon' model",
             absent=w("llm_out.h5")),
        Case("llm: layer weight missing", 2, llm, ["--weights", w("llama_3_of_2_layers.h5")] + out, ERROR,
             "model.layers.2.input_layernorm.weight' not found", absent=w("llm_out.h5")),
        Case("llm: Qwen2 file without its q/k/v biases", 2, llm, ["--weights", w("qwen2_no_bias.h5")] + out, ERROR,
             "model.layers.0.self_attn.q_proj.bias' not found", absent=w("llm_out.h5")),
        Case("llm: NaN in a layer weight", 4, llm, ["--weights", w("llama_nan.h5")] + out, ERROR,
             "'model.layers.1.mlp.down_proj.weight' in", absent=w("llm_out.h5")),
        Case("llm: config attribute missing", 2, llm, ["--weights", w("llama_no_hidden_size.h5")] + out, ERROR,
             "hidden_size", absent=w("llm_out.h5")),
        Case("llm: config inconsistent with the weights' shapes", 2, llm, ["--weights", w("llama_inconsistent.h5")] + out,
             ERROR, "mlp.gate_proj.weight", absent=w("llm_out.h5")),
        Case("llm: --chat without text prompts", 2, llm, tiny + ["--chat"] + out, ERROR,
             "--chat applies to text prompts", absent=w("llm_out.h5")),
        Case("llm: --json-object without text prompts", 2, llm, tiny + ["--json-object"] + out, ERROR,
             "--json-schema and --json-object apply to text prompts", absent=w("llm_out.h5")),
        Case("llm: --rope-scaling of a type the job does not apply", 2, llm,
             tiny + ["--rope-scaling", '{"rope_type": "su", "factor": 4.0}'] + out, ERROR,
             "with --rope-scaling: rope_scaling type 'su' is not supported", absent=w("llm_out.h5")),
        Case("llm: --system without --chat", 2, llm, tiny + ["--system", "be brief", "--prompt", "hi"], USAGE,
             "--system requires --chat or --interactive"),
        Case("llm: --serve with --interactive", 2, llm, tiny + ["--serve", "--interactive"], USAGE,
             "--interactive excludes --serve"),
        Case("llm: --serve with --prompt", 2, llm, tiny + ["--serve", "--prompt", "hi"], USAGE,
             "--prompt excludes --serve"),
        Case("llm: --port beyond 65535", 2, llm, tiny + ["--serve", "--port", "70000"], USAGE,
             "--port: 70000 is out of range [0, 65535]"),
        Case("llm: --port without --serve", 2, llm, tiny + ["--port", "8001"], USAGE, "--port requires --serve"),
        Case("llm: --max-context without --interactive or --serve", 2, llm, tiny + ["--max-context", "64"], USAGE,
             "--max-context applies to --interactive and --serve"),
        Case("llm: --serve on an address not this machine's", 2, llm, tiny + ["--serve", "--host", "192.0.2.1"], ERROR,
             "the server cannot listen on 192.0.2.1:8000"),
        Case("llm: batch of zero", 2, llm, ["--batch", "0"], USAGE, "--batch: 0 is out of range [1, 1048576]"),
        Case("llm: max-batch 0", 2, llm, tiny + ["--max-batch", "0"] + out, USAGE,
             "--max-batch: 0 is out of range [1, 65536]", absent=w("llm_out.h5")),
        Case("llm: unknown sampling mode", 2, llm, tiny + ["--sampling", "beam"], USAGE, "unknown sampling mode 'beam'"),
        Case("llm: top-p outside (0, 1]", 4, llm, tiny + ["--sampling", "top-p", "--top-p", "1.5"] + out, USAGE,
             "top_p must be in (0, 1]", absent=w("llm_out.h5")),
        Case("llm: top-p outside (0, 1], greedy", 2, llm, tiny + ["--top-p", "0"], USAGE, "top_p must be in (0, 1]"),
        Case("llm: negative temperature", 2, llm, tiny + ["--sampling", "top-k", "--temperature", "-1"], USAGE,
             "temperature must be >= 0, got -1"),
        Case("llm: zero temperature, top-k", 2, llm, tiny + ["--sampling", "top-k", "--temperature", "0"], USAGE,
             "temperature must be > 0 for top-k sampling"),
        Case("llm: negative temperature, greedy", 2, llm, tiny + ["--temperature", "-1"] + out, USAGE,
             "temperature must be >= 0, got -1", absent=w("llm_out.h5")),
        Case("llm: 2d, heads not splittable over the mesh columns", 6, llm, tiny + ["--mesh", "2x3", "--mode", "2d"],
             ERROR, "cannot split 8 attention heads and 2 KV heads over 3 devices"),
        # faults that cannot be symmetric: the job aborts, naming the lost rank, leaving no output
        Case("rank killed mid-collective", 4, "fault_drill", ["kill", "2", w("killed.h5")], ABORT,
             r"process rank 2 .*exited on signal 9",
             absent=w("killed.h5")),
        Case("rank killed mid-collective, 8 ranks", 8, "fault_drill", ["kill", "5", w("killed8.h5")], ABORT,
             r"process rank 5 .*exited on signal 9", absent=w("killed8.h5")),
        Case("rank stopped mid-collective", 2, "fault_drill", ["stop", "1", w("stopped.h5")], ABORT,
             r"all_reduce stuck at step \d+ waiting for peer device 1",
             absent=w("stopped.h5"), env={"MESHNN_WATCHDOG_SECONDS": "10"}),
    ]


def make_llama_files(build, work):
    """A tiny Llama checkpoint, prompts with ids of a larger vocabulary, copies of the checkpoint
    with one defect each, and prompt files with one defect each."""
    gen = app_path(build, "meshnn-make-weights")
    w = lambda f: os.path.join(work, f)
    quiet = dict(check=True, stdout=subprocess.DEVNULL)
    subprocess.run([gen, "--model", "llama", "--preset", "tiny", "--output", w("llama_tiny.h5")], **quiet)
    subprocess.run([gen, "--model", "llama", "--preset", "tiny", "--vocab", "1000", "--output", w("llama_vocab1000.h5"),
                    "--tokens", w("tokens_vocab1000.h5"), "--batch", "2", "--prompt-len", "8"], **quiet)
    bad = os.path.join(build, "tests", "make_bad_files")
    for defect, name in [("missing-layer", "llama_3_of_2_layers.h5"), ("nan", "llama_nan.h5"),
                         ("no-attribute", "llama_no_hidden_size.h5"), ("inconsistent", "llama_inconsistent.h5"),
                         ("qwen2-no-bias", "qwen2_no_bias.h5")]:
        subprocess.run([bad, "--llama", defect, w("llama_tiny.h5"), w(name)], **quiet)
    for defect in ("empty-prompt", "zero-new-tokens"):
        subprocess.run([bad, "--llama-tokens", defect, w(f"tokens_{defect}.h5")], **quiet)


def app_path(build, app):
    for sub in ("apps", "tests"):
        p = os.path.join(build, sub, app)
        if os.path.exists(p):
            return p
    return None


def run_case(c, build, mpiexec_flags):
    exe = app_path(build, c.app)
    if exe is None:
        return False, f"binary {c.app} not built", 0.0
    if c.app == "meshnn-make-weights":
        cmd = [exe] + c.args
    else:
        cmd = ["mpirun", "-np", str(c.ranks)] + mpiexec_flags + [exe] + c.args
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", MESHNN_WATCHDOG_SECONDS="30")
    env.update(c.env)
    start = time.time()
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                           timeout=TIME_BOUND_S)
    except subprocess.TimeoutExpired:
        subprocess.run(["pkill", "-9", "-f", exe])
        return False, f"no end within {TIME_BOUND_S} s (hang)", time.time() - start
    took = time.time() - start
    out = r.stdout + r.stderr
    problems = []
    if c.absent and os.path.exists(c.absent):
        problems.append(f"{c.absent} was left behind")
    if c.status == ABORT:
        if r.returncode == 0:
            problems.append("exit status 0, expected an abort")
        if not re.search(c.text, out):
            problems.append(f"no message matching '{c.text}'")
    else:
        if r.returncode != c.status:
            problems.append(f"exit status {r.returncode}, expected {c.status}")
        lines = [l for l in out.splitlines() if "error:" in l]
        if len(lines) != 1:
            problems.append(f"{len(lines)} error lines, expected exactly one")
        elif c.text not in lines[0]:
            problems.append(f"message lacks '{c.text}'")
    message = next((l for l in out.splitlines() if "error:" in l), "") if c.status != ABORT else \
        next((l for l in out.splitlines() if re.search(c.text, l)), "")
    if problems:
        return False, "; ".join(problems) + "\n--- output ---\n" + out[-3000:], took
    return True, message.strip(), took


def main():
    build, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    subprocess.run([os.path.join(build, "tests", "make_bad_files"), work], check=True)
    make_llama_files(build, work)
    all_cases = cases(work)
    if "--list" in sys.argv:
        print("| case | ranks | what the user sees |\n|---|---|---|")
    failures = 0
    counts = {}
    for c in all_cases:
        ok, detail, took = run_case(c, build, ["--oversubscribe"])
        counts[c.ranks] = counts.get(c.ranks, 0) + 1
        status = "ok  " if ok else "FAIL"
        if "--list" in sys.argv:
            print(f"| {c.name} | {c.ranks} | `{detail}` |")
        else:
            print(f"[{status}] {took:5.1f}s np={c.ranks} {c.name}: {detail}", flush=True)
        failures += 0 if ok else 1
    print(f"{len(all_cases) - failures} of {len(all_cases)} cases passed "
          f"(by ranks: {', '.join(f'{n}: {k}' for n, k in sorted(counts.items()))})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
