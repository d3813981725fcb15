"""Real TransformerEngine on a GPU: every module x recipe x mode through the worker Session.

Skipped without CUDA or without transformer_engine; the DSv3 models at the end. On the GPU machine:
    source .gpu/setup.sh && PYTHONPATH=.:$PYTHONPATH python3 -m pytest -m gpu tests/test_gpu_te.py
"""

from __future__ import annotations

import importlib.util

import pytest

from teperf.worker import te_dsv3
from teperf.worker.backends import te as te_backend

pytestmark = [pytest.mark.gpu, pytest.mark.te]


def _cuda_and_te() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    import torch

    if not torch.cuda.is_available():
        return "CUDA is not available"
    if importlib.util.find_spec("transformer_engine") is None:
        return "transformer_engine is not installed"
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return f"transformer_engine.pytorch does not import: {exc}"
    return None


_WHY = _cuda_and_te()
if _WHY:
    pytestmark.append(pytest.mark.skip(reason=_WHY))

SHAPE = [128, 4, 256]  # passes every recipe's alignment rule (see teperf/configs/nightly.toml)
_ids = iter(range(1, 1_000_000))


@pytest.fixture(scope="module")
def session():
    from teperf.worker.session import Session

    s = Session(device="cuda", backends=["te"])
    yield s
    s.close()


def _case(module, recipe, mode, shape=SHAPE, kwargs=None):
    return {
        "id": next(_ids),
        "backend": "te",
        "module": module,
        "recipe": recipe,
        "shape": list(shape),
        "dtype": "bfloat16",
        "mode": mode,
        "device": "cuda",
        "warmup": 5,
        "factory": None,
        "kwargs": dict(kwargs or {}),
    }


def _te_reason(recipe):
    import transformer_engine.pytorch as te

    probe = {
        "fp8_delayed": te.is_fp8_available,
        "fp8_current": te.is_fp8_available,
        "fp8_block": te.is_fp8_block_scaling_available,
        "mxfp8": te.is_mxfp8_available,
        "nvfp4": te.is_nvfp4_available,
    }.get(recipe)
    if probe is None:
        return None
    ok, reason = probe(return_reason=True)
    return None if ok else reason


def test_hello_describes_te(session):
    facts = session.hello()["backend_te"]
    import transformer_engine

    assert facts["version"] == transformer_engine.__version__
    assert facts["location"] and "transformer_engine" in facts["location"]
    assert facts["autocast_api"].startswith("te.")
    assert set(facts["recipes"]) == set(te_backend.RECIPES)
    for recipe in te_backend.RECIPES:
        expected = _te_reason(recipe)
        assert facts["recipes"][recipe] == (expected or "ok")


@pytest.mark.parametrize("mode", ["eager", "cuda-graph", "compile"])
@pytest.mark.parametrize("recipe", te_backend.RECIPES)
@pytest.mark.parametrize("module", te_backend.MODULES)
def test_module_recipe_mode(session, module, recipe, mode):
    case = _case(module, recipe, mode)
    reply = session.setup(case)
    expected_reason = _te_reason(recipe)
    if expected_reason:
        # a recipe the GPU lacks is a skip with TE's own reason, not an error
        assert reply["type"] == "error" and reply.get("skipped") is True, reply
        assert reply["error"] == expected_reason
        return
    assert reply["type"] == "ready", reply
    info = reply["info"]
    assert info["te_version"]
    if recipe == "bf16":
        assert info["autocast_api"] == "none"
    else:
        assert info["autocast_api"].startswith("te.")
        assert info["recipe_repr"]
    if mode == "cuda-graph":
        assert info["graphed_with"].startswith("te.make_graphed_callables(")
    if mode == "compile":
        assert isinstance(info["graph_breaks"], int)
        assert info["first_call"]["cache"]["files_before"] == 0
    assert info["first_call"]["process_cpu_ns"] > 0 and info["first_call"]["wall_ns"] > 0
    trial = session.trial(case["id"], 20)
    assert trial["iters"] == 20
    for key in ("process_cpu_ns", "thread_cpu_ns", "wall_ns", "gpu_ns"):
        assert trial[key] > 0, (key, trial)
    # the step really ran on the GPU: its kernels took time
    assert trial["gpu_ns"] > 20 * 1000, trial
    session.cases.pop(case["id"], None)


def _fp8_step(recipe_cls, tokens, hidden):
    import torch
    import transformer_engine.pytorch as te

    lin = te.Linear(hidden, hidden, params_dtype=torch.bfloat16)
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    with te.autocast(enabled=True, recipe=recipe_cls()):
        y = lin(x)
    y.sum().backward()
    torch.cuda.synchronize()


@pytest.mark.parametrize("recipe", ["fp8_delayed", "fp8_current", "fp8_block"])
@pytest.mark.parametrize("tokens, hidden", [(8, 256), (24, 256), (16, 40), (16, 256), (64, 48)])
def test_fp8_shape_rule_matches_te(session, recipe, tokens, hidden):
    """check_shape rejects exactly the fp8 shapes that TE (forward + backward) rejects.

    8 and 24 tokens pass TE's own assert_dim_for_fp8_exec but fail in cuBLASLt."""
    from transformer_engine.common import recipe as R

    if _te_reason(recipe):
        pytest.skip(_te_reason(recipe))
    cls = getattr(R, te_backend.compat.RECIPE_CLASSES[recipe])
    problem = te_backend.check_shape("Linear", recipe, [tokens, hidden])
    if problem:
        with pytest.raises(Exception):
            _fp8_step(cls, tokens, hidden)
    else:
        _fp8_step(cls, tokens, hidden)


# The DSv3 models (teperf/worker/dsv3_model.py, issue 58) at the shipped config's shape
DSV3_SHAPE = [128, 2, 1024]


@pytest.mark.parametrize("recipe", ["bf16", "fp8_current", "fp8_block"])
@pytest.mark.parametrize("module", te_dsv3.MODELS)
def test_each_model_runs_eager_or_skips_with_tes_reason(session, module, recipe):
    reply = session.setup(_case(module, recipe, "eager", DSV3_SHAPE))
    if reply.get("skipped"):
        assert reply["error"] and "Traceback" not in reply["error"]
        return
    assert reply["type"] == "ready", reply
    assert reply["info"]["dsv3"]["sizes"]["hidden"] == 1024
    trial = session.trial(reply["case_id"], 5)
    assert trial["gpu_ns"] > 0


def test_list_splits_show_as_host_syncs(session):
    from teperf.worker.counters import count_step

    case = _case("DSv3MoE", "bf16", "eager", DSV3_SHAPE)
    reply = session.setup(case)
    assert reply["type"] == "ready", reply
    counters = count_step(session.ready(case["id"]), True)
    assert counters["syncs"] >= 1  # the .tolist() of the per-expert counts


def test_gpu_splits_run_or_skip_naming_the_list_signature(session):
    reply = session.setup(_case("DSv3MoE", "bf16", "eager", DSV3_SHAPE, {"splits": "gpu"}))
    if reply.get("skipped"):
        assert "m_splits" in reply["error"]
    else:
        assert reply["type"] == "ready", reply
        assert "tensor" in reply["info"]["dsv3"]["splits"]
