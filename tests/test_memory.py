"""The memory bound (teperf/memory.py): a shape no machine holds is refused before any worker."""

from __future__ import annotations

import dataclasses

import pytest

from teperf.config import build_config
from teperf.errors import TeperfError
from teperf.memory import check_memory, estimate_bytes
from teperf.plan import expand


def test_a_factory_module_whose_input_cannot_fit_is_refused():
    from teperf.memory import check_memory
    from teperf.plan import Case

    case = Case(0, "factory", "Block", "fp32", (100000, 100000, 1000), "float32", "eager", factory="m:make")
    with pytest.raises(TeperfError, match="needs at least .* GiB"):
        check_memory([case], "cpu", available=2**34)
    check_memory([dataclasses.replace(case, shape=(8, 2, 256))], "cpu", available=2**34)


def test_a_shape_of_too_many_elements_is_refused_even_when_the_factory_makes_its_inputs():
    from teperf.errors import TeperfError
    from teperf.memory import check_memory
    from teperf.plan import Case

    shape = (99999999999999999999, 2, 64)
    case = Case(0, "factory", "Block", "fp32", shape, "float32", "eager", factory="m:make", inputs="m:inp")
    with pytest.raises(TeperfError, match="needs at least"):
        check_memory([case], "cpu", available=2**34)


def test_memory_bound_refuses_shapes_that_cannot_fit():
    cfg = build_config({"shapes": [[8, 2, 64], [4, 65536]]}, {"modules": ["LayerNormMLP"]})
    small, big = expand(cfg)
    assert 0 < estimate_bytes(small) < 2**24 < estimate_bytes(big)
    check_memory([small], "cpu", available=2**30)
    with pytest.raises(
        TeperfError, match=r"LayerNormMLP at shape \[4, 65536\] needs about .* GiB.*smaller --shape"
    ):
        check_memory([small, big], "cpu", available=2**30)
    check_memory([big], "cuda", available=None)  # unknown free memory: nothing refused (no nvidia-smi here)
