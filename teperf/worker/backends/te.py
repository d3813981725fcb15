"""TransformerEngine backend. The coordinator imports it for MODULES, RECIPES and check_shape without
torch, so torch and transformer_engine are imported inside functions (version shims: te_compat)."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Optional

from teperf.worker import te_compat as compat
from teperf.worker import te_dsv3 as dsv3
from teperf.worker.runner import Built, module_class

MODULES = compat.MODULES
# Models built from several TE parts (docs/dsv3.md): accepted by name, never in the default module list
MODELS = dsv3.MODELS
RECIPES = compat.RECIPES


def check_shape(module: str, recipe: str, shape, kwargs=None) -> Optional[str]:
    """Pure Python: None if the shape fits, else the rule it breaks."""
    if module in MODELS:
        return dsv3.check_shape(module, recipe, shape, kwargs)
    return compat.check_shape(module, recipe, shape, kwargs)


def _te_version() -> str:
    import transformer_engine

    return str(getattr(transformer_engine, "__version__", ""))


def _found(paths, attr: str, fits=lambda value: value is not None):
    """``attr`` of the first of the modules ``paths`` (where TE releases moved it) that has one that fits."""
    for path in paths:
        try:
            value = getattr(__import__(path, fromlist=[attr]), attr, None)
        except ImportError:
            continue
        if fits(value):
            return value
    return None


def recipe_status(recipe: str, device: str) -> Optional[str]:
    """None if the recipe runs here, else TE's reason (a skip); a TE that cannot be imported raises."""
    if recipe not in RECIPES:
        return f"recipe {recipe} is not known to the te backend (use one of: {', '.join(RECIPES)})"
    if not str(device).startswith("cuda"):
        return f"TransformerEngine modules need a CUDA device (device is {device})"
    import transformer_engine.pytorch as te

    paths = ("transformer_engine.pytorch.quantization", "transformer_engine.pytorch.fp8")
    reason = compat.probe_recipe(te, recipe, _found(paths, "FP8GlobalStateManager"), _te_version())
    if reason is None and compat.RECIPE_CLASSES[recipe] is not None:
        from transformer_engine.common import recipe as recipe_mod

        if getattr(recipe_mod, compat.RECIPE_CLASSES[recipe], None) is None:
            reason = f"TE {_te_version()} has no recipe class {compat.RECIPE_CLASSES[recipe]}"
    return reason


def _other_recipe_name(name: str, recipe: str) -> Optional[str]:
    return (dsv3.OTHER_RECIPE if name in MODELS else compat.OTHER_RECIPE).get(recipe)


def _dsv3_probe(case: dict, device: str) -> tuple:
    """(features, None) or (None, TE's reason) for a DSv3 case (te_dsv3.probe)."""
    import transformer_engine.pytorch as te

    name = module_class(case["module"])
    other = _other_recipe_name(name, case["recipe"])
    if other and (
        recipe_status(other, device) or check_shape(name, other, case["shape"], case.get("kwargs"))
    ):
        other = None  # the session will not switch to it: no need to pad for it
    feats, reason = dsv3.probe(te, name, case["recipe"], case.get("kwargs"), _te_version(), other)
    if feats is not None:
        feats["other_recipe"] = other
    return feats, reason


def case_status(case: dict, device: str) -> Optional[str]:
    """None if this TE has every part the case's module needs, else TE's reason (the cell is skipped)."""
    return _dsv3_probe(case, device)[1] if module_class(case["module"]) in MODELS else None


def _attention_state() -> Optional[dict]:
    """TE's module-level ``_attention_backends`` dict, the backend chosen for the last call. Each
    attention case keeps its own (Built.global_state): another case's entry sent dynamo into comparing
    foreign AttentionParams, and in eager mode made each trial's first step choose again."""
    paths = (
        "transformer_engine.pytorch.attention.dot_product_attention.dot_product_attention",
        "transformer_engine.pytorch.attention.dot_product_attention",
        "transformer_engine.pytorch.attention",
    )
    return _found(paths, "_attention_backends", fits=lambda value: isinstance(value, dict))


def _attention_backend() -> Optional[dict]:
    """Which attention backend TE chose (after a first call); None if unknown."""
    backends = _attention_state()
    keys = ("use_flash_attention", "use_fused_attention", "fused_attention_backend", "use_unfused_attention")
    return None if backends is None else {k: str(backends[k]) for k in keys if k in backends}


def _splits_wrapper(inner, m_splits):
    """GroupedLinear as a one-input module (make_graphed_callables graphs tensor inputs only)."""
    import torch

    class GroupedLinearWithSplits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x, m_splits)

    return GroupedLinearWithSplits()


def build(case: dict, device: str) -> Built:
    import torch
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe as recipe_mod

    name = module_class(case["module"])
    recipe = case["recipe"]
    shape = [int(d) for d in case["shape"]]
    kwargs = dict(case.get("kwargs") or {})
    problem = check_shape(name, recipe, shape, kwargs)
    if problem:
        raise ValueError(f"{name} {recipe} {shape}: {problem}")
    if name in MODELS:
        return _build_dsv3(case, device, name, recipe, shape, kwargs)
    layers = int(kwargs.pop(compat.STACK_KWARG, 1))
    dtype = getattr(torch, case.get("dtype") or "bfloat16")

    cls = getattr(te, name)
    defaults, user = compat.constructor_kwargs(name, shape, dtype, device, kwargs)
    params, var_kw = compat.signature_of(cls)
    ctor, notes = compat.adapt_kwargs(params, var_kw, defaults, user)
    module = cls(**ctor) if layers == 1 else torch.nn.Sequential(*(cls(**ctor) for _ in range(layers)))
    module.train()

    x = torch.randn(*compat.input_shape(name, shape), device=device, dtype=dtype, requires_grad=True)
    recipe_obj = compat.make_recipe(recipe_mod, recipe, case.get("recipe_kwargs"))  # one per case

    call = m_splits = None
    info = {
        "constructor": {
            k: (str(v) if not isinstance(v, (int, float, str, bool)) else v) for k, v in ctor.items()
        },
        "input_shape": list(x.shape),
        "params": sum(p.numel() for p in module.parameters()),
        "layers": layers,
    }
    if notes:
        info["constructor_shims"] = notes
    if name == "GroupedLinear":
        splits = compat.m_splits_for(x.shape[0], compat.num_gemms(ctor))
        if compat.m_splits_as_tensor(_te_version()):
            m_splits = torch.tensor(splits, dtype=torch.int64, device="cpu")  # built once, not per call
            info["m_splits"] = f"cpu int64 tensor {splits}"
        else:
            m_splits = splits
            info["m_splits"] = f"list {splits}"
        call = lambda mod, inp: mod(inp, m_splits)  # noqa: E731

    alt = _other_recipe(te, recipe_mod, name, recipe, shape, kwargs, device)
    return _built(te, module, x, recipe_obj, info, name in compat.ATTENTION, alt, call, m_splits)


def _built(te, module, x, recipe_obj, info: dict, attention: bool, alt, call=None, m_splits=None) -> Built:
    """A case's Built, its ``info`` after the facts every case records; ``alt``: _other_recipe's."""
    autocast, autocast_api = compat.autocast_factory(te, recipe_obj)
    facts = {
        "te_version": _te_version(),
        "te_location": os.path.dirname(sys.modules["transformer_engine"].__file__),
        "autocast_api": autocast_api,
        "recipe_repr": repr(recipe_obj) if recipe_obj is not None else None,
    }
    return Built(
        module=module,
        inputs=(x,),
        call=call,
        autocast=autocast,
        info={**facts, **info},
        make_graphed=_graphed_maker(te, recipe_obj, m_splits),
        global_state=_attention_state() if attention else None,
        alt_autocast=alt[0],
        alt_autocast_what=alt[1],
        after_first_call=_record_attention_backend if attention else None,
    )


def _record_attention_backend(built: Built) -> None:
    """The first call (timed) picks TE's attention backend; which one it picked is recorded after it."""
    built.info["attention_backend"] = _attention_backend()
    built.info["nvte_attention_env"] = {
        k: os.environ[k]
        for k in ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN")
        if k in os.environ
    }


def _graphed_maker(te, recipe_obj, m_splits=None):
    """Built.make_graphed: te.make_graphed_callables in this TE's spelling of the recipe kwargs."""

    def make_graphed(built: Built):
        target = built.module if m_splits is None else _splits_wrapper(built.module, m_splits)
        gkw = compat.graph_kwargs(te.make_graphed_callables, recipe_obj)
        built.info["graphed_with"] = "te.make_graphed_callables(" + ", ".join(sorted(gkw)) + ")"
        return te.make_graphed_callables(target, tuple(built.inputs), **gkw)

    return make_graphed


def _build_dsv3(case: dict, device: str, name: str, recipe: str, shape: list, kwargs: dict) -> Built:
    """A DSv3 model (te_dsv3, dsv3_model) from the parts this TE has; a missing one raises its reason
    (the session skipped such a case already, through case_status)."""
    import torch
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe as recipe_mod

    from teperf.worker import dsv3_model

    feats, reason = _dsv3_probe(case, device)
    if feats is None:
        raise RuntimeError(reason)
    dtype = getattr(torch, case.get("dtype") or "bfloat16")
    s = dsv3.sizes(shape[-1], kwargs)
    module = dsv3_model.build(name, feats, s, dtype, device)
    module.train()
    x = torch.randn(*shape, device=device, dtype=dtype, requires_grad=True)
    recipe_obj = compat.make_recipe(recipe_mod, recipe, case.get("recipe_kwargs"))
    info = {
        "input_shape": list(x.shape),
        "params": sum(p.numel() for p in module.parameters()),
        "layers": s["layers"],
        "dsv3": {"sizes": dsv3.describe_sizes(name, shape[-1], kwargs), **feats["notes"]},
    }
    if "split_align" in feats:
        info["dsv3"]["split_align"] = feats["split_align"]
    alt = None, None
    other = feats.get("other_recipe")
    # a MoE built without the other recipe's padding (a TE without moe_permute_and_pad_with_probs) stays
    if other and (name not in dsv3.MOE_MODELS or feats["split_align"] >= dsv3.SPLIT_ALIGN[other]):
        alt = _other_recipe(te, recipe_mod, name, recipe, shape, kwargs, device)
    return _built(te, module, x, recipe_obj, info, name in dsv3.ATTENTION_MODELS, alt)


def _other_recipe(te, recipe_mod, name: str, recipe: str, shape, kwargs, device):
    """(autocast factory, description) of another recipe to switch to at run time, or (None, None)."""
    other = _other_recipe_name(name, recipe)
    if other is None or (name not in compat.QUANTIZING and name not in MODELS):
        return None, None
    if recipe_status(other, device) or check_shape(name, other, shape, kwargs):
        return None, None
    recipe_obj = compat.make_recipe(recipe_mod, other)
    autocast, api = compat.autocast_factory(te, recipe_obj)
    return autocast, f"{api} with {type(recipe_obj).__name__} ({other})"


def _dsv3_parts(te, version: str) -> dict:
    """Which DSv3 parts this TE has (the bf16 layer, each split path), in TE's words where one is missing."""
    out = {}
    for splits in ("list", "gpu"):
        feats, reason = dsv3.probe(te, "DSv3Layer", "bf16", {"splits": splits}, version, "fp8_current")
        out[f"DSv3Layer splits={splits}"] = reason or "ok"
        if feats is not None:
            out.update({f"{k} ({splits})" if k == "splits" else k: v for k, v in feats["notes"].items()})
    return out


def describe() -> dict:
    """TE facts recorded in the bundle: version, install location, API variants, cuDNN, recipes."""
    try:
        import transformer_engine
        import transformer_engine.pytorch as te
    except Exception as exc:  # noqa: BLE001 - describe must not end the worker
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}
    import importlib.util

    import torch

    version = _te_version()
    facts: dict = {
        "version": version,
        "location": os.path.dirname(transformer_engine.__file__),
        "pytorch_location": os.path.dirname(te.__file__),
        "autocast_api": compat.autocast_factory(te, object())[1],
        "graph_kwargs": sorted(compat.graph_kwargs(te.make_graphed_callables, object())),
        "m_splits": "tensor" if compat.m_splits_as_tensor(version) else "list",
        "nvte_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NVTE_")},
        "flash_attn_installed": importlib.util.find_spec("flash_attn") is not None,
        "torch_extension": getattr(sys.modules.get("transformer_engine_torch"), "__file__", None),
    }
    try:
        from transformer_engine.common import _get_shared_object_file

        facts["core_library"] = str(_get_shared_object_file("core"))
    except Exception as exc:  # noqa: BLE001
        facts["core_library"] = f"unknown ({type(exc).__name__})"
    facts["dsv3"] = _dsv3_parts(te, version)
    facts["torch_cudnn"] = None
    with contextlib.suppress(Exception):
        facts["torch_cudnn"] = torch.backends.cudnn.version()
    if torch.cuda.is_available():
        try:
            facts["cudnn"] = ".".join(str(p) for p in te.get_cudnn_version())
        except Exception as exc:  # noqa: BLE001
            facts["cudnn"] = f"unknown ({type(exc).__name__})"
        facts["recipes"] = {r: (recipe_status(r, "cuda") or "ok") for r in RECIPES}
    return facts
