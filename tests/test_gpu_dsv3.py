"""Real TransformerEngine on a GPU: the DSv3 models through the worker Session (issue 58). Skipped without
CUDA or transformer_engine. On the GPU machine:
    source .gpu/setup.sh && PYTHONPATH=.:$PYTHONPATH python3 -m pytest -m gpu tests/test_gpu_dsv3.py
"""

from __future__ import annotations

import importlib.util

import pytest

from teperf.worker import te_dsv3

pytestmark = [pytest.mark.gpu, pytest.mark.te]


def _cuda_and_te() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    import torch

    if not torch.cuda.is_available():
        return "CUDA is not available"
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return f"transformer_engine.pytorch does not import: {exc}"
    return None


_WHY = _cuda_and_te()
if _WHY:
    pytestmark.append(pytest.mark.skip(reason=_WHY))

_ids = iter(range(1, 1_000_000))


@pytest.fixture(scope="module")
def session():
    from teperf.worker.session import Session

    s = Session(device="cuda", backends=["te"])
    yield s
    s.close()


def _case(module, recipe="bf16", mode="eager", kwargs=None):
    return {
        "id": next(_ids),
        "backend": "te",
        "module": module,
        "recipe": recipe,
        "shape": [128, 2, 1024],
        "dtype": "bfloat16",
        "mode": mode,
        "device": "cuda",
        "warmup": 2,
        "factory": None,
        "kwargs": dict(kwargs or {}),
    }


@pytest.mark.parametrize("recipe", ["bf16", "fp8_current", "fp8_block"])
@pytest.mark.parametrize("module", te_dsv3.MODELS)
def test_each_model_runs_eager_or_skips_with_tes_reason(session, module, recipe):
    reply = session.setup(_case(module, recipe))
    if reply.get("skipped"):
        assert reply["error"] and "Traceback" not in reply["error"]
        return
    assert reply["type"] == "ready", reply
    assert reply["info"]["dsv3"]["sizes"]["hidden"] == 1024
    trial = session.trial(reply["case_id"], 5)
    assert trial["gpu_ns"] > 0


def test_list_splits_show_as_host_syncs(session):
    from teperf.worker.counters import count_step

    case = _case("DSv3MoE")
    reply = session.setup(case)
    assert reply["type"] == "ready", reply
    counters = count_step(session.ready(case["id"]), True)
    assert counters["syncs"] >= 1  # the .tolist() of the per-expert counts


def test_gpu_splits_run_or_skip_naming_the_list_signature(session):
    reply = session.setup(_case("DSv3MoE", kwargs={"splits": "gpu"}))
    if reply.get("skipped"):
        assert "m_splits" in reply["error"]
    else:
        assert reply["type"] == "ready", reply
        assert "tensor" in reply["info"]["dsv3"]["splits"]
