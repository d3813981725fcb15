"""TransformerEngine version shims and shape rules, pure Python: what needs TE takes the imported
``transformer_engine.pytorch`` (or a fake: tests/test_te_backend.py)."""

from __future__ import annotations

import contextlib
import inspect
import math
import re
import warnings
from typing import Any, Callable, Iterable, Optional

MODULES = tuple(
    """Linear LayerNormLinear LayerNormMLP LayerNorm RMSNorm GroupedLinear MultiheadAttention
    TransformerLayer""".split()
)
# recipe -> (its class in transformer_engine.common.recipe, TE's availability probe (the same name on
# te.pytorch and FP8GlobalStateManager), the recipe a compiled case switches to once); None: bf16
_RECIPES = {
    "bf16": (None, None, "fp8_delayed"),
    "fp8_delayed": ("DelayedScaling", "is_fp8_available", "fp8_current"),
    "fp8_current": ("Float8CurrentScaling", "is_fp8_available", "fp8_delayed"),
    "fp8_block": ("Float8BlockScaling", "is_fp8_block_scaling_available", "fp8_delayed"),
    "mxfp8": ("MXFP8BlockScaling", "is_mxfp8_available", "fp8_delayed"),
    "nvfp4": ("NVFP4BlockScaling", "is_nvfp4_available", "fp8_delayed"),
}
RECIPES = tuple(_RECIPES)
RECIPE_CLASSES, RECIPE_PROBES, OTHER_RECIPE = ({r: row[i] for r, row in _RECIPES.items()} for i in range(3))

# Defaults for the small host-bound benchmark modules.
HEAD_DIM = 64  # num_attention_heads = hidden // 64 unless the config says otherwise
NUM_GEMMS = 4  # GroupedLinear
QUANTIZING = tuple(m for m in MODULES if m not in ("LayerNorm", "RMSNorm"))
ATTENTION = ("MultiheadAttention", "TransformerLayer")
# teperf's own kwarg, not TE's: TransformerLayer with layers = N is a Sequential of N layers, model-sized
STACK_KWARG = "layers"


def parse_version(text: Optional[str]) -> tuple:
    """'2.20.2' -> (2, 20, 2); '2.17.0.dev0+abc' -> (2, 17, 0); junk -> ()."""
    m = re.match(r"\s*(\d+(?:\.\d+)*)", str(text or ""))
    return tuple(int(p) for p in m.group(1).split(".")) if m else ()


def recipe_class_name(recipe: str) -> Optional[str]:
    if recipe not in RECIPE_CLASSES:
        raise ValueError(f"unknown TE recipe {recipe!r}; use one of: {', '.join(RECIPES)}")
    return RECIPE_CLASSES[recipe]


def make_recipe(recipe_module: Any, recipe: str, overrides: Optional[dict] = None):
    """The one recipe object of a case (None for bf16), from ``transformer_engine.common.recipe``."""
    name = recipe_class_name(recipe)
    if name is None:
        return None
    cls = getattr(recipe_module, name, None)
    if cls is None:
        raise RuntimeError(f"this TransformerEngine has no recipe class {name} (recipe {recipe})")
    return cls(**(overrides or {}))


def probe_recipe(te: Any, recipe: str, fp8_state_manager: Any = None, te_version: str = "") -> Optional[str]:
    """None if ``recipe`` is usable here, else TE's own reason; ``fp8_state_manager`` is
    ``FP8GlobalStateManager``, the fallback for a TE without ``return_reason``."""
    recipe_class_name(recipe)  # validates the name
    probe = RECIPE_PROBES[recipe]
    if probe is None:  # bf16
        fn = getattr(te, "is_bf16_available", None)
        try:
            if fn is None or fn():
                return None
        except Exception as exc:  # noqa: BLE001 - report, never crash the probe
            return f"te.is_bf16_available() failed: {type(exc).__name__}: {exc}"
        return "te.is_bf16_available() is False: bf16 needs compute capability 8.0 or higher"
    ver = f"TE {te_version} " if te_version else "this TE "
    fn = getattr(te, probe, None)
    result = None
    if fn is not None:
        with contextlib.suppress(TypeError):  # an older TE without return_reason
            result = fn(return_reason=True)
    if result is None and fp8_state_manager is not None and hasattr(fp8_state_manager, probe):
        result = getattr(fp8_state_manager, probe)()
    if result is None and fn is not None:
        result = fn()  # bool only
    if result is None:
        return (
            f"{ver}has no {probe}(): recipe {recipe} ({RECIPE_CLASSES[recipe]}) is not supported by this "
            "TransformerEngine"
        )
    ok, reason = (*result, None)[:2] if isinstance(result, tuple) else (result, None)  # (ok, reason) or ok
    return None if ok else str(reason or "") or f"{probe}() is False ({ver}gave no reason)"


def _parameters(fn: Callable) -> dict:
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return {}


def autocast_factory(te: Any, recipe_obj: Any) -> tuple:
    """(zero-arg callable returning a fresh autocast context, api name); bf16: (None, "none"), no autocast."""
    if recipe_obj is None:
        return None, "none"
    autocast = getattr(te, "autocast", None)
    params = _parameters(autocast) if autocast is not None else {}
    if "recipe" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return (lambda: autocast(enabled=True, recipe=recipe_obj)), "te.autocast(recipe=...)"
    fp8_autocast = getattr(te, "fp8_autocast", None)
    if fp8_autocast is None:
        raise RuntimeError("this TransformerEngine has neither te.autocast nor te.fp8_autocast")
    for category in (DeprecationWarning, FutureWarning):  # at build time, never per step
        warnings.filterwarnings("ignore", message=r".*fp8_autocast.*", category=category)
    return (lambda: fp8_autocast(enabled=True, fp8_recipe=recipe_obj)), "te.fp8_autocast(fp8_recipe=...)"


def graph_kwargs(make_graphed_callables: Callable, recipe_obj: Any) -> dict:
    """Quantization kwargs for te.make_graphed_callables in this TE's spelling."""
    names = _parameters(make_graphed_callables)
    prefix = "" if "enabled" in names and "recipe" in names else "fp8_"
    kw = {prefix + "enabled": recipe_obj is not None}
    if recipe_obj is not None:
        kw[prefix + "recipe"] = recipe_obj
    return kw


def attention_heads(hidden: int, kwargs: Optional[dict] = None) -> int:
    if "num_attention_heads" in (kwargs or {}):
        return int(kwargs["num_attention_heads"])
    return max(1, hidden // HEAD_DIM)


def num_gemms(kwargs: Optional[dict] = None) -> int:
    return int((kwargs or {}).get("num_gemms", NUM_GEMMS))


def constructor_kwargs(
    module: str, shape: list, dtype: Any, device: Any, user: Optional[dict] = None
) -> tuple:
    """(defaults, user) keyword arguments for ``te.<module>``: ours may be dropped or renamed to fit an
    older constructor (adapt_kwargs); the config's are applied on top as given."""
    if module not in MODULES:
        raise ValueError(f"unknown TE module {module!r}; use one of: {', '.join(MODULES)}")
    user = dict(user or {})
    h = int(shape[-1])
    heads = {"num_attention_heads": attention_heads(h, user)} if module in ATTENTION else {}
    d = {
        "Linear": {"in_features": h, "out_features": h},
        "LayerNormLinear": {"in_features": h, "out_features": 3 * h},
        "LayerNormMLP": {"hidden_size": h, "ffn_hidden_size": 4 * h},
        "LayerNorm": {"normalized_shape": h},
        "RMSNorm": {"normalized_shape": h},
        "GroupedLinear": {"num_gemms": NUM_GEMMS, "in_features": h, "out_features": h},
        "MultiheadAttention": {"hidden_size": h, **heads, "attention_dropout": 0.0, "qkv_format": "sbhd"},
        "TransformerLayer": {
            "hidden_size": h,
            "ffn_hidden_size": 4 * h,
            **heads,
            "hidden_dropout": 0.0,
            "attention_dropout": 0.0,
            "attn_input_format": "sbhd",
        },
    }[module]
    d.update(params_dtype=dtype, device=device)
    return {k: v for k, v in d.items() if k not in user}, user  # a key the config gives is the config's


# Renames applied to our defaults when a constructor lacks the new name.
_RENAMES = {
    "normalized_shape": ("hidden_size",),  # te.LayerNorm/RMSNorm before normalized_shape
    "params_dtype": ("dtype",),  # ops-style modules without params_dtype
}


def adapt_kwargs(params: Iterable[str], has_var_kw: bool, defaults: dict, user: dict) -> tuple:
    """Fit our default kwargs to a constructor's ``params`` -> (kwargs, notes of what was renamed or
    dropped). User kwargs pass unchanged (a typo fails loudly in TE)."""
    params = set(params)
    out: dict = {}
    notes: list = []
    for key, value in defaults.items():
        if key in params:
            out[key] = value
            continue
        alt = next((a for a in _RENAMES.get(key, ()) if a in params), None)
        if alt is not None:
            out[alt] = value
            notes.append(f"{key}->{alt}")
        elif has_var_kw:
            out[key] = value
        else:
            notes.append(f"dropped {key}")
    out.update(user)
    return out, notes


def signature_of(cls: Any) -> tuple:
    """(parameter names, has **kwargs) of cls.__init__."""
    params = inspect.signature(cls.__init__).parameters
    return [n for n in params if n != "self"], any(p.kind is p.VAR_KEYWORD for p in params.values())


def input_shape(module: str, shape: list) -> list:
    """Shape of the input tensor: as given, except GroupedLinear takes [tokens, hidden]."""
    shape = [int(d) for d in shape]
    return [math.prod(shape[:-1]), shape[-1]] if module == "GroupedLinear" else shape


def m_splits_for(tokens: int, gemms: int) -> list:
    """Equal splits (check_shape insists tokens % num_gemms == 0)."""
    splits = [tokens // gemms] * gemms
    splits[-1] += tokens - splits[0] * gemms
    return splits


def m_splits_as_tensor(te_version: str) -> bool:
    """TE 2.17+ types m_splits as a CPU int64 tensor (a list is converted every call)."""
    return parse_version(te_version) >= (2, 17)


# Per recipe: (row rule, column rule, grouped split alignment, name of the rule, source). FP8: TE's
# assert_dim_for_fp8_exec asks tokens % 8, but cuBLASLt's FP8 GEMMs need % 16 (on the H200, 8 and 24
# tokens failed in CanonicalizeGemmInput for all three FP8 recipes; TE's autocast docs say 16).
_FP8_GEMM = (16, 16, 16, "FP8 GEMM", "cuBLASLt FP8 GEMM; TE autocast docs")
_RULES = {
    **dict.fromkeys(("fp8_delayed", "fp8_current", "fp8_block"), _FP8_GEMM),
    "mxfp8": (32, 32, 32, "MXFP8 32-element blocks", "MXFP8Quantizer.is_quantizable"),
    "nvfp4": (32, 32, 128, "NVFP4 quantize-transpose (rows, cols % 32)", "quantize_transpose_nvfp4.cuh"),
}


def check_shape(module: str, recipe: str, shape, kwargs: Optional[dict] = None) -> Optional[str]:
    """None if ``shape`` [tokens..., hidden] can run ``module`` under ``recipe``, else the rule it breaks."""
    if module not in MODULES:
        return f"unknown TE module {module!r}"
    if recipe not in RECIPE_CLASSES:
        return f"unknown TE recipe {recipe!r}"
    try:
        dims = [int(d) for d in shape]
    except (TypeError, ValueError):
        return f"shape {shape!r} is not a list of integers"
    if not dims or any(d <= 0 for d in dims):
        return "shape dimensions must be positive integers"
    if len(dims) < 2:
        return "TE modules take at least 2-D input [tokens..., hidden]"
    kwargs = kwargs or {}
    if STACK_KWARG in kwargs:
        layers = kwargs[STACK_KWARG]
        if module != "TransformerLayer":
            return f"kwarg {STACK_KWARG} (a stack of N layers) is for TransformerLayer only, not {module}"
        if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
            return f"kwarg {STACK_KWARG} must be a whole number >= 1, got {layers!r}"
    hidden = dims[-1]
    tokens = math.prod(dims[:-1])
    if module in ATTENTION:
        if len(dims) != 3:
            return f"{module} takes [seq, batch, hidden] (sbhd); got {len(dims)}-D {dims}"
        heads = attention_heads(hidden, kwargs)
        if hidden % heads:
            return f"attention heads: hidden {hidden} must be divisible by num_attention_heads {heads}"
    gemms = num_gemms(kwargs) if module == "GroupedLinear" else 1
    if module == "GroupedLinear" and tokens % gemms:
        return (
            f"GroupedLinear splits: tokens {tokens} (product of leading dims) must be divisible by "
            f"num_gemms {gemms}"
        )
    if recipe == "bf16" or module not in QUANTIZING:
        return None
    rows, cols, group_align, rule, source = _RULES[recipe]
    if module == "GroupedLinear":
        split = tokens // gemms
        if split % group_align:
            return (
                f"{recipe} GroupedLinear alignment (TE get_align_size_for_quantization = {group_align}): "
                f"each m_split (tokens {tokens} / num_gemms {gemms} = {split}) must be a multiple of "
                f"{group_align}"
            )
    elif tokens % rows:
        return (
            f"{rule} rule ({source}): tokens = product of leading dims = {tokens} must be divisible by {rows}"
        )
    if hidden % cols:
        return f"{rule} rule ({source}): hidden (last dim) = {hidden} must be divisible by {cols}"
    return None
