#!/usr/bin/env python3
"""The `full` GPU gate: a random-weight checkpoint at a model's real depth and width, in the
published layout, driven through build/g4pipe's JSON protocol and compared with Hugging Face.

Two jobs, run as separate processes so that the GPU holds HF's copy and the engine's in turn:

  full_step.py make  --model 26b-a4b --dir DIR [--lengths ...]
      builds the model with transformers the way from_pretrained does (on the GPU, bf16), draws
      every weight (seeded; norms, scales and layer_scalar away from 1), saves it to DIR in the
      published layout (Gemma4ForConditionalGeneration config with a nested text_config,
      model.language_model. keys, ~4 GB shards and an index) and writes DIR/reference.json:
      per prompt, HF eager's greedy continuation through its cache (prefilled in 2,048-token
      chunks, as the long-context gates do) with each step's top-1/top-2 logits and top-k
      logprobs; HF sdpa, HF eager at batch 2 and HF eager with every linear layer summed in fp32
      in two and in four parts of k and (MoE models) HF eager with its eager experts backend,
      each teacher-forced on eager's tokens (the floors); and the same with the sliding K/V stored as e4m3 (the fp8 pool's reference,
      docs/testing.md).
  full_step.py check --model 26b-a4b --dir DIR --binary build/g4pipe --conf conf/X.ini --pool bf16
      runs the binary on the checkpoint with the shipped configuration (kv.local set to the
      pool), sends every prompt alone (one at a time, each answered before the next) and then
      all at once, and prints one PASS/FAIL line per (prompt, alone/mixed) and a table.

The rule (docs/testing.md "full"): the engine's greedy tokens equal the reference's up to the
first step whose reference top-1/top-2 margin is under MARGIN_CUT nats or where a floor's own
pick differs from eager's (random weights at full depth are chaotic); over those steps the
gap (max over the reference's top-k ids of |logprob engine - logprob reference|) is at most
max(0.1, 2 x the floor gap: the most HF sdpa, HF eager at batch 2, HF eager with split-K
linears in two or four parts or (MoE models) HF eager with its eager experts backend moves them
on the same steps).
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import time

SEED = 20261201
GREEDY = 16          # greedy steps per prompt
TOP_K = 5            # reference ids per step the gap is taken over
ENGINE_LOGPROBS = 20  # the protocol's most: the engine's top-20 per step
MARGIN_CUT = 0.5     # nats: past a step this close, a different pick is not a bug
HF_CHUNK = 2048
FLOORS = ("sdpa", "batch2", "splitk", "splitk4", "experts")  # a reference made before one
# lacks it; "experts" is made for MoE models only (the others have no experts to sum otherwise)
# --floors may also name splitk3, splitk5 ... splitk16 (k in that many parts): samples of
# GEMM-order noise for a diagnosis, printed by the make but outside the rule (judge reads
# FLOORS only), so that measuring the noise more widely never loosens the gate


def rule_floors(run):
    """The floor members the rule takes from one prompt's runs: those of FLOORS it holds (a
    reference made before one lacks it); diagnostic members (splitk3, splitk8, ...) are left out."""
    return [run[k] for k in FLOORS if k in run]


def splitk_parts(key):
    """The parts of k of a split-K floor key (splitk: 2, splitkN: N), else None."""
    if key == "splitk":
        return 2
    if key.startswith("splitk") and key[6:].isdigit() and 2 <= int(key[6:]) <= 16:
        return int(key[6:])
    return None
BRANCH_END_NORMS = ("post_attention_layernorm.weight", "post_feedforward_layernorm.weight",
                    "post_per_layer_input_norm.weight")
SHARD_BYTES = 4 << 30

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from make_fixtures import published_config  # noqa: E402  (the tiny published fixture's layout)


def full_config(model):
    """The published text_config of each checkpoint (docs/gemma4-numerics.md 1.2)."""
    rope = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                               "rope_theta": 1000000.0}}
    common = dict(vocab_size=262144, head_dim=256, global_head_dim=512,
                  final_logit_softcapping=30.0, rope_parameters=rope, rms_norm_eps=1e-6,
                  tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh",
                  vocab_size_per_layer_input=262144, pad_token_id=0, eos_token_id=1,
                  bos_token_id=2)

    def kinds(n, period):
        return ["full_attention" if (i + 1) % period == 0 else "sliding_attention" for i in range(n)]

    if model == "26b-a4b":
        return dict(common, hidden_size=2816, num_hidden_layers=30, layer_types=kinds(30, 6),
                    num_attention_heads=16, num_key_value_heads=8, num_global_key_value_heads=2,
                    attention_k_eq_v=True, sliding_window=1024, intermediate_size=2112,
                    enable_moe_block=True, num_experts=128, top_k_experts=8,
                    moe_intermediate_size=704, hidden_size_per_layer_input=0,
                    max_position_embeddings=262144)
    if model == "31b":
        return dict(common, hidden_size=5376, num_hidden_layers=60, layer_types=kinds(60, 6),
                    num_attention_heads=32, num_key_value_heads=16, num_global_key_value_heads=4,
                    attention_k_eq_v=True, sliding_window=1024, intermediate_size=21504,
                    hidden_size_per_layer_input=0, max_position_embeddings=262144)
    if model == "e2b":
        return dict(common, hidden_size=1536, num_hidden_layers=35, layer_types=kinds(35, 5),
                    num_attention_heads=8, num_key_value_heads=1, attention_k_eq_v=False,
                    sliding_window=512, intermediate_size=6144, num_kv_shared_layers=20,
                    use_double_wide_mlp=True, hidden_size_per_layer_input=256,
                    max_position_embeddings=131072)
    if model == "e4b":
        return dict(common, hidden_size=2560, num_hidden_layers=42, layer_types=kinds(42, 6),
                    num_attention_heads=8, num_key_value_heads=2, attention_k_eq_v=False,
                    sliding_window=512, intermediate_size=10240, num_kv_shared_layers=18,
                    hidden_size_per_layer_input=256, max_position_embeddings=131072)
    raise SystemExit(f"unknown model {model!r} (26b-a4b, 31b, e2b, e4b)")


def prompt_lengths(model, chunk, max_context):
    """1, W-1, W, W+1, chunk-1, chunk, chunk+1, 3 chunks + 7, 16K, and 32K for the 26B-A4B and
    the 31B (cut to what max_context leaves for the greedy steps)."""
    w = full_config(model)["sliding_window"]
    n = [1, w - 1, w, w + 1, chunk - 1, chunk, chunk + 1, 3 * chunk + 7, 16384]
    if model in ("26b-a4b", "31b"):
        n.append(32768)
    return sorted({min(x, max_context - GREEDY) for x in n})


# ---- make --------------------------------------------------------------------------------

def draw_prompts(standard, lengths):
    """Token ids for each of lengths: BOS, then ids drawn in one stream, the standard lengths'
    prompts first and in their order, so a --lengths run of a standard length gets the very
    prompt the standard set has (a diagnosis of one failing case runs that case), and other
    lengths follow."""
    rng = random.Random(SEED + 1)
    drawn = {}
    for n in list(standard) + [n for n in lengths if n not in standard]:
        if n not in drawn:
            drawn[n] = [2] + [rng.randrange(364, 262144) for _ in range(n - 1)]
    return {n: drawn[n] for n in lengths}


def fill_weights(model, seed):
    """Every parameter drawn on the GPU (a CPU generator takes minutes at 26-31B), with the
    rules of make_fixtures.py's geometry fixtures: norms and layer_scalar away from 1, q/k norm
    weights small (smooth attention), projections N(0, 1/fan_in), the embedding's eight hot
    rows that carry every top-1 with wide margins.

    One rule of its own: the norms that end a residual branch (post_attention_layernorm,
    post_feedforward_layernorm, post_per_layer_input_norm) are drawn in [0.04, 0.08]. With them
    near 1, every layer adds a unit-RMS random function of the normalised stream, and 30-60 such
    layers are chaotic: HF sdpa moved HF eager's top-5 logprobs by 1-6 nats (tree 2e91c34, the
    26B-A4B at every prompt length), so a gap limit of twice that could not tell a bug from
    rounding. Small branch outputs keep each layer near the identity, so rounding stays small
    while a wrong layer still moves the logits (and a w vs 1+w bug multiplies a branch by ~20)."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if "rotary" in name or "inv_freq" in name or name.endswith("embed_scale"):
                continue
            if p.dtype not in (torch.bfloat16, torch.float32):
                continue
            shape, dev = p.shape, p.device
            u = torch.rand(shape, generator=gen, device=dev, dtype=torch.float32)
            if name.endswith("q_norm.weight") or name.endswith("k_norm.weight"):
                p.copy_((0.15 + 0.2 * u).to(p.dtype))
            elif name.endswith(BRANCH_END_NORMS):
                p.copy_((0.04 + 0.04 * u).to(p.dtype))
            elif p.ndim <= 1 or name.endswith("layer_scalar") or "per_expert_scale" in name:
                sign = torch.where(torch.rand(shape, generator=gen, device=dev) < 0.5, -1.0, 1.0)
                p.copy_((1.0 + sign * (0.1 + 0.3 * u)).to(p.dtype))
            elif name.endswith("embed_tokens.weight"):
                s_row = torch.full((shape[0], 1), 0.3, device=dev)
                hot = torch.randperm(shape[0] - 364, generator=gen, device=dev)[:8] + 364
                s_row[hot] = 6.0
                z = torch.randn(shape, generator=gen, device=dev, dtype=torch.float32)
                p.copy_((z * s_row / math.sqrt(shape[1])).to(p.dtype))
            else:
                z = torch.randn(shape, generator=gen, device=dev, dtype=torch.float32)
                p.copy_((z / math.sqrt(shape[-1])).to(p.dtype))
            del u


def save_published(model, cfg_text, out):
    """The published layout, written shard by shard from the GPU (never a whole CPU copy)."""
    import torch
    from safetensors.torch import save_file
    os.makedirs(out, exist_ok=True)
    sd = model.state_dict()
    names = sorted(k for k in sd if not k.startswith("lm_head."))  # tied to embed_tokens
    shards, cur, size = [], [], 0
    for k in names:
        b = sd[k].numel() * sd[k].element_size()
        if cur and size + b > SHARD_BYTES:
            shards.append(cur)
            cur, size = [], 0
        cur.append(k)
        size += b
    if cur:
        shards.append(cur)
    index = {"metadata": {"total_size": 0}, "weight_map": {}}
    for i, part in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        tensors = {"model.language_model." + k[len("model."):]: sd[k].detach().contiguous().cpu()
                   for k in part}
        save_file(tensors, os.path.join(out, fname), metadata={"format": "pt"})
        for n, t in tensors.items():
            index["weight_map"][n] = fname
            index["metadata"]["total_size"] += t.numel() * t.element_size()
        del tensors
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(published_config(cfg_text), f, indent=2, sort_keys=True)
    return len(shards)


def hf_run(model, ids, forced=None, force_ids=None, batch=1):
    """HF through its cache: the prompt in HF_CHUNK chunks, then GREEDY steps, each fed its own
    argmax (forced None) or forced[step] (teacher forcing). Per step: the token, top-1 and
    top-2 logits, top-k (id, logprob), and the logprobs of force_ids[step] (the floor's ids).
    batch > 1 runs that many copies of the sequence side by side and reads the first: the same
    arithmetic per row, at other matrix sizes (cuBLAS picks its kernels by size)."""
    import torch
    from transformers import DynamicCache
    cache = DynamicCache(config=model.config)
    steps = []
    with torch.no_grad():
        out = None
        for b in range(0, len(ids), HF_CHUNK):
            part = torch.tensor([ids[b:b + HF_CHUNK]] * batch, device="cuda")
            out = model(part, past_key_values=cache, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
        logits = out.logits[0, -1]
        for s in range(GREEDY):
            lf = logits.float()
            lp = torch.log_softmax(lf, dim=-1)
            top2 = torch.topk(lf, 2)
            topk = torch.topk(lp, TOP_K)
            tok = int(top2.indices[0]) if forced is None else forced[s]
            rec = {"token": int(top2.indices[0]), "top1": float(top2.values[0]),
                   "top2": float(top2.values[1]),
                   "top": [[int(i), float(v)] for i, v in zip(topk.indices.tolist(), topk.values.tolist())]}
            if force_ids is not None:
                rec["at"] = [[i, float(lp[i])] for i in force_ids[s]]
            steps.append(rec)
            out = model(torch.tensor([[tok]] * batch, device="cuda"), past_key_values=cache,
                        use_cache=True)
            cache = out.past_key_values
            logits = out.logits[0, -1]
    return steps


def splitk_linears(on, parts=2):
    """HF with every nn.Linear (attention and dense MLP projections, router, LM head; the
    experts are grouped_mm and stay as they are) summed in fp32 as `parts` consecutive parts
    of k, the parts added in order, rounded once to bf16: a GEMM of the same precision in
    another summation order, the difference between any two GEMM kernels, which is the
    engine's kind of difference from HF. A one-token prompt's attention is the same under
    eager and sdpa and HF's cuBLAS kernels did not change at batch 2 (docs/testing.md "full"),
    so without this floor such a prompt's limit saw no GEMM order at all. Two orders are
    sampled (two parts and four): one sample underestimated the noise (docs/testing.md)."""
    import torch
    if not hasattr(splitk_linears, "orig"):
        splitk_linears.orig = torch.nn.Linear.forward
    if not on:
        torch.nn.Linear.forward = splitk_linears.orig
        return
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 products and sums, not TF32
    torch.set_float32_matmul_precision("highest")
    if os.environ.get("NVIDIA_TF32_OVERRIDE") not in (None, "0") or \
            os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE") not in (None, "0"):
        raise SystemExit("full_step: a TF32 override is set in the environment; the split-K "
                         "floor needs fp32 GEMMs")

    def forward(self, x):
        w = self.weight
        cut = [w.shape[1] * p // parts for p in range(parts + 1)]
        y = None
        for a, b in zip(cut, cut[1:]):
            part = torch.matmul(x[..., a:b].float(), w[:, a:b].float().t())
            y = part if y is None else y + part
        if self.bias is not None:
            y = y + self.bias.float()
        return y.to(x.dtype)
    torch.nn.Linear.forward = forward


def e4m3_storage(on):
    """HF with the sliding layers' K and V stored as e4m3 at scale 1.0 (clamp to +-448, round to
    nearest even, back to bf16), as the fp8 local pool stores them; global layers stay bf16."""
    import torch
    import transformers.models.gemma4.modeling_gemma4 as mg
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    if not hasattr(e4m3_storage, "orig"):
        e4m3_storage.orig = (mg.eager_attention_forward, ALL_ATTENTION_FUNCTIONS["sdpa"])
    eager, sdpa = e4m3_storage.orig
    if not on:
        mg.eager_attention_forward, ALL_ATTENTION_FUNCTIONS["sdpa"] = eager, sdpa
        return

    def e4m3(x):
        return torch.clamp(x.float(), -448.0, 448.0).to(torch.float8_e4m3fn).to(x.dtype)

    def wrap(fn):
        def attend(module, query, key, value, *args, **kwargs):
            if module.is_sliding:
                key, value = e4m3(key), e4m3(value)
            return fn(module, query, key, value, *args, **kwargs)
        return attend
    mg.eager_attention_forward = wrap(eager)
    ALL_ATTENTION_FUNCTIONS["sdpa"] = wrap(sdpa)


def job_make(a):
    import torch
    import transformers
    from transformers import Gemma4TextConfig, Gemma4ForCausalLM
    t0 = time.time()
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    cfg_kwargs = full_config(a.model)
    torch.manual_seed(SEED)
    cfg = Gemma4TextConfig(**cfg_kwargs)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = Gemma4ForCausalLM(cfg)
    torch.set_default_dtype(old)
    model.eval()
    fill_weights(model, SEED)
    if cfg_kwargs.get("enable_moe_block"):
        model.set_experts_implementation("grouped_mm")
    t_build = time.time() - t0
    cfg_text = json.loads(model.config.to_json_string(use_diff=False))
    cfg_text.pop("architectures", None)
    n_shards = save_published(model, cfg_text, a.dir)
    t_save = time.time() - t0 - t_build
    standard = prompt_lengths(a.model, a.chunk, a.max_context)
    lengths = [int(x) for x in a.lengths.split(",")] if a.lengths else standard
    prompts = {f"len{n}": p for n, p in draw_prompts(standard, lengths).items()}
    ref = {"model": a.model, "lengths": lengths, "prompts": prompts, "greedy": GREEDY,
           "top_k": TOP_K, "hf_chunk": HF_CHUNK, "torch": torch.__version__,
           "transformers": transformers.__version__, "device": torch.cuda.get_device_name(0),
           "seed": SEED, "shards": n_shards, "runs": {}}
    floors = a.floors.split()
    if not floors or any(f not in FLOORS and not splitk_parts(f) for f in floors):
        sys.exit(f"full_step make: --floors takes some of {' '.join(FLOORS)} and splitk3 .. "
                 f"splitk16")
    ref["floors"] = floors
    for kv in [{"bf16": "bf16", "fp8": "e4m3"}[x] for x in a.pools.split()]:
        e4m3_storage(kv == "e4m3")
        runs = {}
        model.set_attn_implementation("eager")
        for name, ids in prompts.items():
            runs[name] = {"eager": hf_run(model, ids)}

        def forced_runs(key, **kw):
            """Each prompt again as the floor member `key`, teacher-forced on eager's tokens and
            its top ids, so that the member's logits are compared step for step."""
            for name, ids in prompts.items():
                eg = runs[name]["eager"]
                runs[name][key] = hf_run(model, ids, forced=[s["token"] for s in eg],
                                         force_ids=[[i for i, _ in s["top"]] for s in eg], **kw)

        model.set_attn_implementation("sdpa")
        if "sdpa" in floors:
            forced_runs("sdpa")
        # the second floor: eager again on two copies of each sequence, i.e. HF itself at other
        # matrix sizes, so under the kernels (and summation orders) cuBLAS picks for those
        # (docs/testing.md "full": sdpa alone leaves GEMM order out, and a one-token prompt's
        # attention is the same in both)
        model.set_attn_implementation("eager")
        if "batch2" in floors:
            forced_runs("batch2", batch=2)
        # the third and fourth floors: eager with split-K linears, k in two parts and in four
        # (two more GEMM summation orders)
        for key, parts in [(k, splitk_parts(k)) for k in floors if splitk_parts(k)]:
            splitk_linears(True, parts)
            try:
                forced_runs(key)
            finally:
                splitk_linears(False)
        # the fifth floor (MoE models): eager with HF's eager experts backend, a loop of one
        # linear per expert (cuBLAS at each expert's row count) where every other member runs
        # grouped_mm: the experts' summation order, which the engine's own expert kernels
        # change and no other member samples (docs/testing.md "full")
        eager_experts = "experts" in floors and cfg_kwargs.get("enable_moe_block")
        if eager_experts:
            try:
                model.set_experts_implementation("eager")
            except (ValueError, KeyError, NotImplementedError) as e:  # an older transformers
                print(f"full_step make: no eager experts backend ({e}): the experts floor is "
                      f"not made, the rule takes the other members", file=sys.stderr)
                eager_experts = False
        if eager_experts:
            try:
                forced_runs("experts")
            finally:
                model.set_experts_implementation("grouped_mm")
        ref["runs"][kv] = runs
        def most(name, k):
            if k not in runs[name]:
                return "-"
            return "%.3f" % max(abs(dict(f["at"])[i] - v)
                                for e, f in zip(runs[name]["eager"], runs[name][k])
                                for i, v in e["top"])
        print(f"full_step make: {a.model} {kv} floors (max over steps, sdpa / eager at batch 2 / "
              f"split-K linears in 2 / in 4 parts / eager experts; - not made): " +
              ", ".join(f"{n[3:]} " + "/".join(most(n, k) for k in FLOORS) for n in prompts),
              file=sys.stderr)
        extra = [k for k in floors if k not in FLOORS]
        if extra:  # diagnosis only (outside the rule)
            print(f"full_step make: {a.model} {kv} other GEMM orders, outside the rule "
                  f"({' / '.join(extra)}): " +
                  ", ".join(f"{n[3:]} " + "/".join(most(n, k) for k in extra) for n in prompts),
                  file=sys.stderr)
        print(f"full_step make: {a.model} {kv} reference done at {time.time() - t0:.0f} s",
              file=sys.stderr)
    e4m3_storage(False)
    ref["seconds"] = {"build": round(t_build, 1), "save": round(t_save, 1),
                      "all": round(time.time() - t0, 1)}
    with open(os.path.join(a.dir, "reference.json"), "w") as f:
        json.dump(ref, f)
    print(f"full_step make: {a.model}: {n_shards} shards in {a.dir}, {len(prompts)} prompts, "
          f"build {t_build:.0f} s, save {t_save:.0f} s, all {time.time() - t0:.0f} s", file=sys.stderr)


# ---- check -------------------------------------------------------------------------------

class Engine:
    """build/g4pipe as a user runs it: request lines in, answer lines out."""

    def __init__(self, binary, conf, sets, log):
        cmd = [binary, "-c", conf] + [x for s in sets for x in ("--set", s)]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=log, text=True, bufsize=1)

    def send(self, req):
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()

    def collect(self, ids):
        """Answers until every id in ids has its done or error line."""
        got = {i: {"tokens": [], "lps": [], "end": None} for i in ids}
        left = set(ids)
        while left:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError(f"g4pipe closed its output with {sorted(left)} unanswered "
                                   f"(exit {self.p.poll()})")
            d = json.loads(line)
            i = d.get("id")
            if i not in got:
                continue
            if d["event"] == "token":
                got[i]["tokens"].append(d["token"])
                got[i]["lps"].append({t["id"]: t["logprob"] for t in d["logprobs"]["top"]})
            elif d["event"] in ("done", "error"):
                got[i]["end"] = d
                left.discard(i)
        return got

    def close(self):
        self.p.stdin.close()
        rc = self.p.wait(timeout=120)
        return rc


def judge(ref_steps, floors, ans, detail=None):
    """(ok, steps compared, steps equal, max gap, limit, why); detail, a list, gets one line a
    compared step: where its gap lies (the id, its rank in the reference's top-k, both logprobs)
    beside the step's floor gap and the reference's margin.

    floors: HF's own second opinions on the reference's steps, teacher-forced on its tokens:
    sdpa (another attention) and, where the reference has them, eager at batch 2 (other GEMM
    kernels) and eager with split-K linears in two and four parts (two more GEMM summation orders,
    the engine's kind of difference). A step's floor
    gap is the most any of them moves a reference top-k logprob.

    A step is compared while the engine's context is HF's (its tokens so far equal eager's):
    step 0 always. Over those steps the gap must stay within max(0.1, 2 x the floor). A
    different pick fails only where HF's own implementations could not have flipped it: the
    reference margin is at least MARGIN_CUT and at least twice that step's floor gap (a floor
    moves each logprob by up to the floor gap, so the top-2 difference by twice that), and
    every floor picks eager's token. Past a permitted flip the contexts differ and nothing
    more is compared."""
    if ans["end"] is None or ans["end"].get("event") != "done":
        return False, 0, 0, float("nan"), float("nan"), f"no done line: {ans['end']}"
    compared, equal, gap, floor, why = 0, 0, 0.0, 0.0, ""
    for s, r in enumerate(ref_steps):
        if s >= len(ans["tokens"]):
            return False, compared, equal, gap, 0, f"{len(ans['tokens'])} tokens of {GREEDY}"
        compared += 1
        lps = ans["lps"][s]
        low = min(lps.values())
        fls = [dict((x, v) for x, v in f[s]["at"]) for f in floors]
        floor_s, gap_s, at = 0.0, 0.0, None
        for rank, (i, lp_ref) in enumerate(r["top"]):
            # an id past the engine's top-20 has a logprob at most its 20th: the gap is at least
            # how far the reference's value lies above that
            g = abs(lps[i] - lp_ref) if i in lps else max(0.0, lp_ref - low)
            if g > gap_s:
                gap_s, at = g, (i, rank, lp_ref, lps.get(i))
            for fl in fls:
                floor_s = max(floor_s, abs(fl[i] - lp_ref))
        gap = max(gap, gap_s)
        floor = max(floor, floor_s)
        if detail is not None and at:
            eng = f"past top-{ENGINE_LOGPROBS}" if at[3] is None else f"{at[3]:.4f}"
            detail.append(f"step {s}: gap {gap_s:.4f} at id {at[0]} (HF rank {at[1]}, HF "
                          f"{at[2]:.4f}, engine {eng}), floor gap {floor_s:.4f}, HF margin "
                          f"{r['top1'] - r['top2']:.3f}")
        if ans["tokens"][s] == r["token"]:
            equal += 1
            continue
        margin = r["top1"] - r["top2"]
        sure = margin >= max(MARGIN_CUT, 2 * floor_s) and \
            all(f[s]["token"] == r["token"] for f in floors)
        if sure:
            why = (f"step {s}: engine {ans['tokens'][s]}, HF {r['token']} (margin "
                   f"{margin:.2f}, floor gap {floor_s:.2f})")
        else:
            why = (f"step {s}: a permitted flip (margin {margin:.2f} under 2 x floor gap "
                   f"{floor_s:.2f} or a floor's pick differs), contexts differ past it")
        lim = max(0.1, 2 * floor)
        if sure:
            return False, compared, equal, gap, lim, why
        break
    lim = max(0.1, 2 * floor)
    if gap > lim:
        return False, compared, equal, gap, lim, f"gap {gap:.4f} > {lim:.4f}" + (f"; {why}" if why else "")
    return True, compared, equal, gap, lim, why


def job_check(a):
    with open(os.path.join(a.dir, "reference.json")) as f:
        ref = json.load(f)
    runs = ref["runs"]["bf16" if a.pool == "bf16" else "e4m3"]
    prompts = ref["prompts"]
    if a.only:
        prompts = {f"len{n}": prompts[f"len{n}"] for n in a.only.split(",")}
    sets = [f"model.path={os.path.abspath(a.dir)}", f"kv.local={a.pool}"] + (a.set or [])
    log = open(a.log, "w") if a.log else subprocess.DEVNULL
    t0 = time.time()
    eng = Engine(a.binary, a.conf, sets, log)

    def req(name, tag):
        return {"id": f"{name}-{tag}", "tokens": prompts[name], "max_tokens": GREEDY,
                "temperature": 0, "ignore_eos": True, "logprobs": ENGINE_LOGPROBS}
    results, fails = [], 0

    def report(name, mode, ans):
        """Judges one case and prints its line at once: a run cut short by its deadline keeps
        every line it reached (and the table its rows)."""
        nonlocal fails
        floors = rule_floors(runs[name])
        detail = [] if a.detail else None
        ok, cut, equal, gap, lim, why = judge(runs[name]["eager"], floors, ans, detail)
        gate = f"gpu:full[{a.model}/{a.pool}{a.label}/{name}/{mode}]"
        for d in detail or []:
            print(f"INFO {gate}: {d}")
        n = len(prompts[name])
        line = (f"{n} tokens, greedy {equal} of {cut} steps compared equal, "
                f"max gap {gap:.4f} (limit {lim:.4f})")
        print(f"{'PASS' if ok else 'FAIL'} {gate}: {line}{'; ' + why if why else ''} "
              f"[{time.time() - t0:.0f} s]", flush=True)
        fails += not ok
        row = {"model": a.model, "pool": a.pool, "prompt": n, "mode": mode, "ok": ok,
               "cut": cut, "equal": equal, "gap": gap, "limit": lim, "why": why}
        results.append(row)
        if a.table:
            with open(a.table, "a") as f:
                f.write(json.dumps(row) + "\n")
    modes = a.modes.split(",")
    if not modes or set(modes) - {"alone", "mixed"}:
        raise SystemExit(f"full_step: --modes {a.modes!r}: alone, mixed or alone,mixed")
    try:
        for name in prompts if "alone" in modes else []:  # each answered before the next is sent
            eng.send(req(name, "alone"))
            report(name, "alone", eng.collect([f"{name}-alone"])[f"{name}-alone"])
        if "mixed" in modes:  # all at once
            for name in prompts:
                eng.send(req(name, "mixed"))
            got = eng.collect([f"{name}-mixed" for name in prompts])
            for name in prompts:
                report(name, "mixed", got[f"{name}-mixed"])
    except Exception as ex:  # a dead engine fails every case
        print(f"FAIL gpu:full[{a.model}/{a.pool}]: {ex}")
        eng.p.kill()
        return 1
    rc = eng.close()
    if rc != 0:
        print(f"FAIL gpu:full[{a.model}/{a.pool}]: g4pipe exited {rc}")
        fails += 1
    print(f"INFO full[{a.model}/{a.pool}]: {len(results)} cases in {time.time() - t0:.0f} s "
          f"(load, {' and '.join(modes)})")
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("job", choices=["make", "check"])
    ap.add_argument("--model", required=True, choices=["26b-a4b", "31b", "e2b", "e4b"])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--lengths", default="", help="make: prompt lengths instead of the standard set")
    ap.add_argument("--chunk", type=int, default=2048, help="make: the conf's serve.prefill_chunk")
    ap.add_argument("--max-context", type=int, default=32768, help="make: the conf's serve.max_context")
    ap.add_argument("--pools", default="bf16 fp8",
                    help="make: the pools to write references for (fp8: HF with e4m3-stored sliding K/V)")
    ap.add_argument("--floors", default=" ".join(FLOORS),
                    help="make: the floor members to run (each costs about one HF pass over every "
                         "prompt, batch2 two); fewer floors only make the rule stricter")
    ap.add_argument("--binary", default="build/g4pipe")
    ap.add_argument("--conf")
    ap.add_argument("--pool", choices=["bf16", "fp8"], default="bf16")
    ap.add_argument("--set", action="append", help="check: another --set for the binary")
    ap.add_argument("--log", help="check: the binary's stderr")
    ap.add_argument("--only", help="check: these prompt lengths only (comma-separated)")
    ap.add_argument("--label", default="", help="check: a suffix for the gate names, e.g. /plain")
    ap.add_argument("--table", help="check: append one JSON line per case")
    ap.add_argument("--detail", action="store_true",
                    help="check: print each compared step's gap, where it lies, and its floor gap")
    ap.add_argument("--modes", default="alone,mixed",
                    help="check: alone (each prompt answered before the next), mixed (all at once), "
                         "or both; a call too short for both runs one (the 31B)")
    a = ap.parse_args()
    if a.job == "make":
        job_make(a)
        return 0
    return job_check(a)


if __name__ == "__main__":
    sys.exit(main())
