"""Planted changes in a TE v2.16 source tree, for the H200 evidence scripts (gpu_tiers.sh, gpu_bisect.sh).

    python3 scripts/gpu/te_plants.py SRC NAME

NAME:
  pyonly        50 us busy-wait in TransformerEngineBaseModule.prepare_forward (every module, every forward)
  calls         prepare_forward calls a helper 20 times, 5 us each (20 more Python calls per forward)
  lnl-forward[:N]  N us (default 50) busy-wait in LayerNormLinear.forward only (the others untouched: A/A)
  csrc          100 us busy-wait in Float8Quantizer::create_tensor (C++, every fp8 quantization)
  core:N        N us busy-wait in nvte_quantize_v2 (the core library, common/cast/cast.cu: every FP8 cast)
  core-header   a comment in common/common.h (every core file that includes it recompiles)
  version       build_tools/VERSION.txt 2.16.0 -> 2.16.1
  comment:FILE  a comment line at the end of transformer_engine/pytorch/FILE (harmless)
"""

from __future__ import annotations

import sys
from pathlib import Path

BASE = "transformer_engine/pytorch/module/base.py"
FORWARD_DOC = '        """Checks and prepares for FWD execution."""\n'


def edit(src: Path, rel: str, old: str, new: str, after: str | None = None) -> None:
    """Replace the first ``old`` (after ``after``, if given) in ``src/rel`` with ``new``."""
    path = src / rel
    text = path.read_text()
    start = text.index(after) if after else 0
    at = text.index(old, start)
    path.write_text(text[:at] + new + text[at + len(old) :])


def plant(src: Path, name: str) -> str:
    if name == "pyonly":
        edit(
            src,
            BASE,
            FORWARD_DOC,
            FORWARD_DOC
            + (
                "        import time as _teperf_time  # planted by teperf: 50 us of host work per call\n"
                "        _teperf_end = _teperf_time.perf_counter_ns() + 50_000\n"
                "        while _teperf_time.perf_counter_ns() < _teperf_end:\n"
                "            pass\n"
            ),
            after="    def prepare_forward(\n",
        )
        return "prepare_forward spins 50 us (Python)"
    if name == "calls":
        edit(
            src,
            BASE,
            "class TransformerEngineBaseModule(",
            (
                "import time as _teperf_time\n\n\n"
                "def _teperf_check(inp):  # planted by teperf: 5 us of host work per call\n"
                "    end = _teperf_time.perf_counter_ns() + 5_000\n"
                "    while _teperf_time.perf_counter_ns() < end:\n"
                "        pass\n"
                "    return inp\n\n\n"
                "class TransformerEngineBaseModule("
            ),
        )
        edit(
            src,
            BASE,
            FORWARD_DOC,
            FORWARD_DOC
            + (
                "        for _ in range(20):  # planted: 20 Python calls per forward\n"
                "            inp = _teperf_check(inp)\n"
            ),
            after="    def prepare_forward(\n",
        )
        return "prepare_forward calls _teperf_check 20 times, 5 us each (Python)"
    if name == "lnl-forward" or name.startswith("lnl-forward:"):
        us = int(name.partition(":")[2] or 50)
        path = src / "transformer_engine/pytorch/module/layernorm_linear.py"
        path.write_text(
            path.read_text()
            + (
                f"\n\nimport time as _teperf_time  # planted by teperf: {us} us of host work per "
                "LayerNormLinear forward\n"
                "_teperf_lnl_forward = LayerNormLinear.forward\n\n\n"
                "def _teperf_slow_lnl_forward(self, *args, **kwargs):\n"
                f"    end = _teperf_time.perf_counter_ns() + {us * 1000}\n"
                "    while _teperf_time.perf_counter_ns() < end:\n"
                "        pass\n"
                "    return _teperf_lnl_forward(self, *args, **kwargs)\n\n\n"
                "LayerNormLinear.forward = _teperf_slow_lnl_forward\n"
            )
        )
        return f"LayerNormLinear.forward spins {us} us (Python)"
    if name == "csrc":
        rel = "transformer_engine/pytorch/csrc/quantizer.cpp"
        edit(src, rel, '#include "common.h"\n', '#include "common.h"\n\n#include <chrono>\n')
        head = (
            "std::pair<TensorWrapper, py::object> Float8Quantizer::create_tensor(\n"
            "    const std::vector<size_t>& shape, DType dtype, std::optional<at::Tensor> data,"
        )
        edit(
            src,
            rel,
            ") const {\n",
            ") const {\n"
            "  {  // planted by teperf: 100 us of host work per FP8 tensor created\n"
            "    const auto teperf_end = std::chrono::steady_clock::now() + std::chrono::microseconds(100);\n"
            "    while (std::chrono::steady_clock::now() < teperf_end) {\n"
            "    }\n"
            "  }\n",
            after=head,
        )
        return "Float8Quantizer::create_tensor spins 100 us (C++)"
    if name.startswith("core:"):
        us = int(name.split(":", 1)[1])
        rel = "transformer_engine/common/cast/cast.cu"
        edit(src, rel, "#include <cuda.h>\n", "#include <chrono>\n#include <cuda.h>\n")
        edit(
            src,
            rel,
            "  NVTE_API_CALL(nvte_quantize_v2);\n",
            "  NVTE_API_CALL(nvte_quantize_v2);\n"
            f"  {{  // planted by teperf: {us} us of host work per quantization\n"
            "    const auto teperf_end = std::chrono::steady_clock::now() + "
            f"std::chrono::microseconds({us});\n"
            "    while (std::chrono::steady_clock::now() < teperf_end) {\n"
            "    }\n"
            "  }\n",
        )
        return f"nvte_quantize_v2 spins {us} us (C++, the core library)"
    if name == "core-header":
        path = src / "transformer_engine" / "common" / "common.h"
        path.write_text(path.read_text() + "// teperf: a comment in a core header\n")
        return "a comment in common/common.h"
    if name == "version":
        (src / "build_tools" / "VERSION.txt").write_text("2.16.1\n")
        return "VERSION.txt 2.16.1"
    if name.startswith("comment:"):
        path = src / "transformer_engine" / "pytorch" / name.split(":", 1)[1]
        path.write_text(path.read_text() + "# teperf: a harmless commit\n")
        return f"a comment in {path.name}"
    raise SystemExit(f"unknown plant {name!r}; see {__file__}")


if __name__ == "__main__":
    print(plant(Path(sys.argv[1]), sys.argv[2]))
