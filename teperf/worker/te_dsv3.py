"""A DeepSeek-V3-like layer from released TE 2.x parts (issue 58), pure Python: its sizes, shape rules and
feature probes. The probes take the imported ``transformer_engine.pytorch`` (or a fake: tests/test_te_dsv3.py)
and answer with TE's own words (an ImportError's text, a signature) where a release lacks a part; the
torch modules are in teperf/worker/dsv3_model.py.

The proxy keeps DeepSeek-V3's structure (MLA with asymmetric head dims, 1 shared + many routed experts,
top-8 sigmoid routing over expert groups) and shrinks its dimensions to a host-bound size: host cost grows
with op and expert counts, not FLOPs (../shared/context/anchors-2026-12-06.md, section 2)."""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Optional

MODELS = ("DSv3Layer", "DSv3MoE", "DSv3Attention")
ATTENTION_MODELS = ("DSv3Layer", "DSv3Attention")
MOE_MODELS = ("DSv3Layer", "DSv3MoE")

# DeepSeek-V3: hidden 7168, 128 heads, q/kv lora 1536/512, qk nope/rope/v 128/64/128, 256 routed experts of
# ffn 2048 + 1 shared, top-8, 8 groups / top-4 groups, routed scaling 2.5. Scaled down; hidden is the shape's.
DEFAULTS = {
    "heads": 8,
    "q_lora": 384,
    "kv_lora": 128,
    "qk_nope": 64,
    "qk_rope": 32,
    "v_dim": 64,
    "experts": 64,
    "topk": 8,
    "groups": 8,
    "group_topk": 4,
    "moe_ffn": 256,
    "shared_ffn": 256,
    "scaling": 2.5,
    "score": "sigmoid",
    "splits": "list",  # list: m_splits as Python ints (a .tolist() host sync); gpu: an int64 CUDA tensor
    "router": "auto",  # auto: TE's fused top-k where it exists, else torch; fused / torch: only that one
    "layers": 1,  # a stack of N blocks (torch.nn.Sequential), like te-model's TransformerLayer layers
}
CHOICES = {"splits": ("list", "gpu"), "router": ("auto", "fused", "torch"), "score": ("sigmoid", "softmax")}
FLOATS = ("scaling",)

# Grouped GEMM split alignment per recipe (TE's get_align_size_for_quantization); bf16 needs none.
SPLIT_ALIGN = {"bf16": 1, "fp8_delayed": 16, "fp8_current": 16, "fp8_block": 16, "mxfp8": 32, "nvfp4": 128}
# Column (feature) alignment of a quantized GEMM's input, per recipe (te_compat._RULES).
COLUMN_ALIGN = {"bf16": 1, "fp8_delayed": 16, "fp8_current": 16, "fp8_block": 16, "mxfp8": 32, "nvfp4": 32}
# The recipe a compiled model switches to once (the recompile) and back: not fp8_delayed, which TE rejects
# under torch.compile (TE #2759), so the figure is a recompile rather than a rejection.
OTHER_RECIPE = {
    "bf16": "fp8_current",
    "fp8_delayed": "fp8_current",
    "fp8_current": "fp8_block",
    "fp8_block": "fp8_current",
    "mxfp8": "fp8_current",
    "nvfp4": "fp8_current",
}


def sizes(hidden: int, kwargs: Optional[dict] = None) -> dict:
    """The model's dimensions: DEFAULTS, the config's kwargs on top, hidden from the shape."""
    out = dict(DEFAULTS, **(kwargs or {}))
    out["hidden"] = int(hidden)
    out["qk_dim"] = out["qk_nope"] + out["qk_rope"]
    return out


def check_kwargs(kwargs: Optional[dict]) -> Optional[str]:
    """None if every kwarg is one of DEFAULTS' and of the right kind, else what is wrong."""
    for key, value in (kwargs or {}).items():
        if key not in DEFAULTS:
            return f"unknown kwarg {key!r} for a DSv3 model (use: {', '.join(DEFAULTS)})"
        if key in CHOICES:
            if value not in CHOICES[key]:
                return f"kwarg {key} must be one of {', '.join(CHOICES[key])}, got {value!r}"
        elif key in FLOATS:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                return f"kwarg {key} must be a positive number, got {value!r}"
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"kwarg {key} must be a whole number >= 1, got {value!r}"
    return None


def check_shape(module: str, recipe: str, shape, kwargs: Optional[dict] = None) -> Optional[str]:
    """None if ``shape`` [seq, batch, hidden] builds ``module`` under ``recipe``, else the rule it breaks."""
    if module not in MODELS:
        return f"unknown DSv3 model {module!r}"
    if recipe not in SPLIT_ALIGN:
        return f"unknown TE recipe {recipe!r}"
    try:
        dims = [int(d) for d in shape]
    except (TypeError, ValueError):
        return f"shape {shape!r} is not a list of integers"
    if len(dims) != 3 or any(d <= 0 for d in dims):
        return f"{module} takes [seq, batch, hidden] (sbhd) of positive sizes; got {list(shape)}"
    problem = check_kwargs(kwargs)
    if problem:
        return problem
    s = sizes(dims[-1], kwargs)
    if module in MOE_MODELS:
        if s["experts"] % s["groups"]:
            return f"router groups: experts {s['experts']} must be divisible by groups {s['groups']}"
        if s["group_topk"] > s["groups"]:
            return f"router groups: group_topk {s['group_topk']} exceeds groups {s['groups']}"
        if s["topk"] > s["group_topk"] * (s["experts"] // s["groups"]):
            return (
                f"router: topk {s['topk']} exceeds the experts of the chosen groups "
                f"({s['group_topk']} x {s['experts'] // s['groups']})"
            )
    cols = COLUMN_ALIGN[recipe]
    tokens = dims[0] * dims[1]
    if cols > 1:
        if tokens % cols:
            return f"{recipe} GEMM rule: tokens seq x batch = {tokens} must be divisible by {cols}"
        for name, dim in gemm_dims(module, s).items():
            if dim % cols:
                return f"{recipe} GEMM rule: {name} = {dim} must be divisible by {cols}"
    return None


def gemm_dims(module: str, s: dict) -> dict:
    """The feature sizes the model's GEMMs take or make (each must meet the recipe's column alignment)."""
    dims = {"hidden": s["hidden"]}
    if module in ATTENTION_MODELS:
        dims.update(
            {
                "q_lora": s["q_lora"],
                "kv_lora": s["kv_lora"],
                "q_lora + kv_lora + qk_rope": s["q_lora"] + s["kv_lora"] + s["qk_rope"],
                "heads x (qk_nope + qk_rope)": s["heads"] * s["qk_dim"],
                "heads x (qk_nope + v_dim)": s["heads"] * (s["qk_nope"] + s["v_dim"]),
                "heads x v_dim": s["heads"] * s["v_dim"],
            }
        )
    if module in MOE_MODELS:
        dims.update({"moe_ffn": s["moe_ffn"], "shared_ffn": s["shared_ffn"]})
    return dims


def param_count(module: str, hidden: int, kwargs: Optional[dict] = None) -> int:
    """Weights of one stack (teperf.memory's bound), from the sizes the builder uses."""
    s = sizes(hidden, kwargs)
    h = s["hidden"]
    n = 0
    if module in ATTENTION_MODELS:
        n += h + h * (s["q_lora"] + s["kv_lora"] + s["qk_rope"])  # RMSNorm + fused down projection
        n += s["q_lora"] + s["q_lora"] * s["heads"] * s["qk_dim"]
        n += s["kv_lora"] + s["kv_lora"] * s["heads"] * (s["qk_nope"] + s["v_dim"])
        n += s["heads"] * s["v_dim"] * h
    if module in MOE_MODELS:
        n += h + 3 * h * s["shared_ffn"]  # shared expert: RMSNorm, swiglu fc1 (2 x ffn), fc2
        n += h * s["experts"]  # router gate (its expert bias is a buffer)
        n += s["experts"] * 3 * h * s["moe_ffn"]
    return n * int(s["layers"])


def split_align(recipe: str, other: Optional[str]) -> int:
    """Rows each expert's split is padded to: the larger of the case's recipe's and its recompile recipe's
    (a bf16 cell that switches to FP8 once pads as FP8 needs, so every cell runs one code path)."""
    return max(SPLIT_ALIGN[recipe], SPLIT_ALIGN[other] if other else 1)


def _annotation(fn: Any, param: str) -> Optional[str]:
    try:
        p = inspect.signature(fn).parameters.get(param)
    except (TypeError, ValueError):
        return None
    if p is None or p.annotation is inspect.Parameter.empty:
        return None
    ann = p.annotation
    # a class by its name; typing's forms by their whole text: Union[int, Tuple[int, int]].__name__ is "Union"
    text = ann if isinstance(ann, str) else ann.__name__ if isinstance(ann, type) else str(ann)
    return text.strip("'\"")  # a string annotation of a string annotation (PEP 563) keeps its quotes


def _params(fn: Any) -> set:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def _attr(te: Any, name: str, importer: Callable, paths: tuple = ()) -> tuple:
    """(object, None) from ``te`` or the first of ``paths`` having it, else (None, the ImportError's text)."""
    value = getattr(te, name, None)
    if value is not None:
        return value, None
    reason = f"transformer_engine.pytorch has no {name}"
    for path in paths:
        try:
            value = getattr(importer(path), name)
        except (ImportError, AttributeError) as exc:
            reason = f"{type(exc).__name__}: {exc}" if isinstance(exc, ImportError) else reason
            continue
        return value, None
    return None, reason


ROPE_PATHS = ("transformer_engine.pytorch.attention.rope", "transformer_engine.pytorch.attention")
ROUTER_PATHS = ("transformer_engine.pytorch.router",)
PERMUTE_PATHS = ("transformer_engine.pytorch.permutation",)


def probe(
    te: Any,
    module: str,
    recipe: str,
    kwargs: Optional[dict] = None,
    te_version: str = "",
    other_recipe: Optional[str] = None,
    importer: Callable = importlib.import_module,
) -> tuple:
    """(features, None) where this TE has every part ``module`` needs, else (None, TE's reason). Features:
    the functions and classes the builder calls, and ``notes`` of what was chosen and why."""
    s = sizes(0, kwargs)
    ver = f"TE {te_version}" if te_version else "this TE"
    feats: dict = {"notes": {}}
    notes = feats["notes"]

    def need(name: str, paths: tuple = ()):
        value, why = _attr(te, name, importer, paths)
        if value is None:
            raise _Missing(f"{ver}: {module} needs {name}: {why}")
        feats[name] = value
        return value

    try:
        if module in ATTENTION_MODELS:
            need("Linear")
            lnl = need("LayerNormLinear")
            if "normalization" not in _params(lnl.__init__):
                raise _Missing(f"{ver}: LayerNormLinear.__init__ has no normalization (RMSNorm) argument")
            dpa = need("DotProductAttention")
            kv = _annotation(dpa.__init__, "kv_channels")
            if kv is not None and "tuple" not in kv.lower():
                raise _Missing(
                    f"{ver}: DotProductAttention(kv_channels: {kv}) takes one head dim; MLA's qk "
                    f"{s['qk_dim']} / v {s['v_dim']} needs a (qk, v) tuple (TE 1.10+)"
                )
            need("RotaryPositionEmbedding", ROPE_PATHS)
            apply = need("apply_rotary_pos_emb", ROPE_PATHS)
            feats["rope_fused"] = "fused" in _params(apply)
        if module in MOE_MODELS:
            need("LayerNormMLP")
            gl = need("GroupedLinear")
            need("moe_permute", PERMUTE_PATHS)
            need("moe_unpermute", PERMUTE_PATHS)
            align = split_align(recipe, other_recipe)
            feats["split_align"] = align
            if align > 1:
                pad, why = _attr(te, "moe_permute_and_pad_with_probs", importer, PERMUTE_PATHS)
                if pad is None and SPLIT_ALIGN[recipe] > 1:
                    raise _Missing(
                        f"{ver}: {recipe} grouped GEMMs need each expert's split padded to {align} rows, and "
                        f"moe_permute_and_pad_with_probs (TE 2.12+) is missing: {why}"
                    )
                if pad is None:  # bf16: no padding, so no switch to a quantized recipe
                    feats["split_align"] = 1
                    notes["recompile"] = f"no switch to {other_recipe}: its splits need padding ({why})"
                feats["moe_permute_and_pad_with_probs"] = pad
            feats["splits"] = _splits_feature(gl, s["splits"], ver, notes)
            feats["router"] = _router_feature(te, s["router"], importer, notes)
    except _Missing as exc:
        return None, str(exc)
    return feats, None


class _Missing(Exception):
    pass


def _splits_feature(grouped_linear: Any, splits: str, ver: str, notes: dict) -> dict:
    """How GroupedLinear takes the splits: a list (TE <= 2.16) or an int64 tensor (TE 2.17+, GPU allowed)."""
    ann = _annotation(grouped_linear.forward, "m_splits")
    takes_tensor = ann is not None and "tensor" in ann.lower()
    if splits == "list":
        notes["splits"] = "Python list of ints from the GPU counts (.tolist(): a host sync per step)"
        return {"kind": "list", "grouped_tensor": False}
    if not takes_tensor:
        raise _Missing(
            f"{ver}: GroupedLinear.forward(inp, m_splits: {ann or 'unannotated'}) takes the splits as a "
            "Python list; splits on the GPU need an int64 tensor m_splits (TE 2.17+)"
        )
    grouped_tensor = "use_grouped_tensor" in _params(grouped_linear.__init__)
    notes["splits"] = "int64 CUDA tensor" + (
        " with use_grouped_tensor=True (the native grouped GEMM, no host copy)"
        if grouped_tensor
        else " (TE's legacy path copies it to the host unless NVTE_GROUPED_LINEAR_USE_FUSED_GROUPED_GEMM=1)"
    )
    return {"kind": "gpu", "grouped_tensor": grouped_tensor}


def _router_feature(te: Any, router: str, importer: Callable, notes: dict) -> Optional[Any]:
    """TE's fused top-k with a score function, or None for plain torch (with TE's reason in the notes)."""
    if router == "torch":
        notes["router"] = "torch (asked for)"
        return None
    fn, why = _attr(te, "fused_topk_with_score_function", importer, ROUTER_PATHS)
    if fn is None and router == "fused":
        raise _Missing(f"router fused asked for: {why}")
    notes["router"] = (
        "transformer_engine.pytorch.router.fused_topk_with_score_function"
        if fn is not None
        else f"torch top-k (TE's fused router is missing: {why})"
    )
    return fn


def route_torch(torch: Any, logits, s: dict):
    """DeepSeek-V3's group-limited top-k in plain torch -> (probs [T, E], routing_map bool [T, E]): the
    fallback where TE has no fused router, and the reference its fused one computes."""
    experts, groups = s["experts"], s["groups"]
    if s["score"] == "sigmoid":
        scores = torch.sigmoid(logits.float())
    else:
        scores = torch.softmax(logits.float(), dim=-1)
    tokens = scores.shape[0]
    per_group = scores.view(tokens, groups, experts // groups)
    group_score = per_group.topk(min(2, experts // groups), dim=-1).values.sum(-1)
    top_groups = group_score.topk(s["group_topk"], dim=-1).indices
    group_mask = torch.zeros_like(group_score).scatter_(1, top_groups, 1.0)
    expert_mask = group_mask.unsqueeze(-1).expand_as(per_group).reshape(tokens, experts)
    masked = scores.masked_fill(expert_mask == 0, float("-inf"))
    top = masked.topk(s["topk"], dim=-1).indices
    weights = scores.gather(1, top)
    if s["score"] == "sigmoid":
        weights = weights / weights.sum(-1, keepdim=True)
    weights = weights * s["scaling"]
    probs = torch.zeros_like(scores).scatter_(1, top, weights).to(logits.dtype)
    routing_map = torch.zeros_like(scores, dtype=torch.bool).scatter_(1, top, True)
    return probs, routing_map


def splits_for(counts, kind: str):
    """What GroupedLinear gets: the per-expert counts (an int64 GPU tensor) as Python ints (a host sync) or
    as the tensor itself."""
    return counts.tolist() if kind == "list" else counts


def describe_sizes(module: str, hidden: int, kwargs: Optional[dict] = None) -> dict:
    """The dimensions a cell records in the bundle (only those its parts use)."""
    s = sizes(hidden, kwargs)
    keys = ["hidden", "layers"]
    if module in ATTENTION_MODELS:
        keys += ["heads", "q_lora", "kv_lora", "qk_nope", "qk_rope", "v_dim"]
    if module in MOE_MODELS:
        keys += ["experts", "topk", "groups", "group_topk", "moe_ffn", "shared_ffn", "scaling", "score"]
        keys += ["splits", "router"]
    return {k: s[k] for k in keys}
