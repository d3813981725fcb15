"""The DSv3 models (issue 58) with TransformerEngine ABSENT: shape rules, the feature probes against fake
TE releases (a part present or missing), and a CPU smoke test of the whole layer built from torch stand-ins
of TE's parts (forward and backward, both split paths, both routers)."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import List, Tuple, Union

import pytest

from teperf.worker import te_dsv3 as dsv3

ROOT = Path(__file__).resolve().parent.parent
SHAPE = [128, 2, 1024]
SMALL = {"heads": 2, "q_lora": 32, "kv_lora": 16, "qk_nope": 16, "qk_rope": 8, "v_dim": 16}
SMALL_MOE = {"experts": 8, "topk": 2, "groups": 4, "group_topk": 2, "moe_ffn": 16, "shared_ffn": 16}

# ------------------------------------------------------------------ shapes and sizes


@pytest.mark.parametrize("recipe", list(dsv3.SPLIT_ALIGN))
@pytest.mark.parametrize("module", dsv3.MODELS)
def test_the_shipped_shape_fits_every_recipe(module, recipe):
    assert dsv3.check_shape(module, recipe, SHAPE) is None


@pytest.mark.parametrize(
    "module, recipe, shape, kwargs, words",
    [
        ("DSv3Layer", "bf16", [256, 1024], {}, ["[seq, batch, hidden]"]),
        ("DSv3MoE", "fp8_current", [3, 2, 1024], {}, ["tokens", "6", "16"]),
        ("DSv3MoE", "mxfp8", [128, 2, 1000], {}, ["hidden", "32"]),
        ("DSv3Attention", "fp8_block", SHAPE, {"q_lora": 100}, ["q_lora", "100", "16"]),
        ("DSv3MoE", "bf16", SHAPE, {"experts": 60}, ["experts 60", "groups 8"]),
        ("DSv3MoE", "bf16", SHAPE, {"topk": 40}, ["topk 40"]),
        ("DSv3MoE", "bf16", SHAPE, {"group_topk": 9}, ["group_topk 9"]),
        ("DSv3Layer", "bf16", SHAPE, {"splits": "cpu"}, ["splits", "list, gpu"]),
        ("DSv3Layer", "bf16", SHAPE, {"layers": 0}, ["layers", ">= 1"]),
        ("DSv3Layer", "bf16", SHAPE, {"layers": True}, ["layers"]),
        ("DSv3Layer", "bf16", SHAPE, {"num_gemms": 4}, ["unknown kwarg 'num_gemms'"]),
        ("DSv3Layer", "fp16", SHAPE, {}, ["unknown TE recipe"]),
    ],
)
def test_shape_rules_name_what_breaks(module, recipe, shape, kwargs, words):
    problem = dsv3.check_shape(module, recipe, shape, kwargs)
    assert problem is not None
    for word in words:
        assert word in problem, (word, problem)


def test_attention_dims_do_not_constrain_the_moe_alone():
    # q_lora is an attention size: the MoE block does not have it
    assert dsv3.check_shape("DSv3MoE", "fp8_block", SHAPE, {"q_lora": 100}) is None


def test_split_alignment_covers_the_recompile_recipe():
    assert dsv3.split_align("bf16", None) == 1
    assert dsv3.split_align("bf16", "fp8_current") == 16
    assert dsv3.split_align("mxfp8", "fp8_current") == 32
    assert dsv3.split_align("nvfp4", "fp8_current") == 128


def test_the_recompile_never_switches_to_delayed_scaling():
    # TE #2759 rejects delayed scaling under torch.compile: the figure would be a rejection
    assert "fp8_delayed" not in dsv3.OTHER_RECIPE.values()
    assert all(other != recipe for recipe, other in dsv3.OTHER_RECIPE.items())


def test_param_count_grows_with_layers_and_experts():
    one = dsv3.param_count("DSv3Layer", 1024)
    assert dsv3.param_count("DSv3Layer", 1024, {"layers": 4}) == 4 * one
    moe, att = dsv3.param_count("DSv3MoE", 1024), dsv3.param_count("DSv3Attention", 1024)
    assert moe + att == one
    # 64 experts x (fc1 1024 -> 2 x 256, fc2 256 -> 1024)
    assert dsv3.param_count("DSv3MoE", 1024, {"experts": 128}) - moe == 64 * 3 * 1024 * 256 + 1024 * 64


# ------------------------------------------------------------------ the feature probes, fake TE releases


def _fake_parts(*, m_splits="torch.Tensor", grouped_tensor=True, kv_channels="Union[int, Tuple[int, int]]"):
    """Signature-only stand-ins: the probes read names and annotations, never call them."""
    ns: dict = {}
    grouped_init = "use_grouped_tensor=None" if grouped_tensor else "bias=True"
    exec(
        f"""
class GroupedLinear:
    def __init__(self, num_gemms, in_features, out_features, {grouped_init}): pass
    def forward(self, inp, m_splits: "{m_splits}", is_first_microbatch=None): pass
class DotProductAttention:
    def __init__(self, num_attention_heads, kv_channels: "{kv_channels}", attention_dropout=0.0): pass
""",
        ns,
    )

    class LayerNormLinear:
        def __init__(self, in_features, out_features, normalization="LayerNorm"):
            pass

    return dict(
        Linear=type("Linear", (), {}),
        LayerNormLinear=LayerNormLinear,
        LayerNormMLP=type("LayerNormMLP", (), {}),
        GroupedLinear=ns["GroupedLinear"],
        DotProductAttention=ns["DotProductAttention"],
        RotaryPositionEmbedding=type("RotaryPositionEmbedding", (), {}),
        moe_permute=lambda *a, **k: None,
        moe_unpermute=lambda *a, **k: None,
        moe_permute_and_pad_with_probs=lambda *a, **k: None,
    )


def _importer(modules: dict):
    """importlib.import_module over ``modules`` (path -> namespace); others fail as Python says."""

    def load(path):
        if path not in modules:
            raise ModuleNotFoundError(f"No module named {path!r}")
        return modules[path]

    return load


def apply_rotary_pos_emb(t, freqs, tensor_format="sbhd", interleaved=False, fused=False):
    return t


def _fake_release(drop=(), router=True, **parts):
    """A fake transformer_engine.pytorch (a namespace) and its importer, like TE 2.20 unless told."""
    te = types.SimpleNamespace(**{k: v for k, v in _fake_parts(**parts).items() if k not in drop})
    modules = {
        "transformer_engine.pytorch.attention.rope": types.SimpleNamespace(
            apply_rotary_pos_emb=apply_rotary_pos_emb
        )
    }
    if router:
        modules["transformer_engine.pytorch.router"] = types.SimpleNamespace(
            fused_topk_with_score_function=lambda *a, **k: None
        )
    return te, _importer(modules)


def test_a_new_te_has_every_part():
    te, importer = _fake_release()
    feats, reason = dsv3.probe(
        te, "DSv3Layer", "fp8_current", {"splits": "gpu"}, "2.20.2", "fp8_block", importer
    )
    assert reason is None
    assert feats["router"] is not None and "fused_topk_with_score_function" in feats["notes"]["router"]
    assert feats["splits"] == {"kind": "gpu", "grouped_tensor": True}
    assert "use_grouped_tensor=True" in feats["notes"]["splits"]
    assert feats["split_align"] == 16
    assert feats["apply_rotary_pos_emb"] is apply_rotary_pos_emb and feats["rope_fused"] is True


def test_list_splits_are_the_default_and_say_they_sync():
    te, importer = _fake_release(m_splits="List[int]")
    feats, reason = dsv3.probe(te, "DSv3MoE", "bf16", {}, "2.16.0", None, importer)
    assert reason is None
    assert feats["splits"]["kind"] == "list" and ".tolist()" in feats["notes"]["splits"]


def test_gpu_splits_on_a_te_that_takes_a_list_skip_with_its_signature():
    te, importer = _fake_release(m_splits="List[int]", grouped_tensor=False)
    feats, reason = dsv3.probe(te, "DSv3MoE", "bf16", {"splits": "gpu"}, "2.16.0", None, importer)
    assert feats is None
    assert "TE 2.16.0" in reason and "m_splits: List[int]" in reason and "2.17" in reason


def test_gpu_splits_without_the_grouped_tensor_path_say_te_copies_them():
    te, importer = _fake_release(grouped_tensor=False)
    feats, _ = dsv3.probe(te, "DSv3MoE", "bf16", {"splits": "gpu"}, "2.17.0", None, importer)
    assert feats["splits"] == {"kind": "gpu", "grouped_tensor": False}
    assert "NVTE_GROUPED_LINEAR_USE_FUSED_GROUPED_GEMM" in feats["notes"]["splits"]


def test_no_fused_router_falls_back_to_torch_with_tes_import_error():
    te, importer = _fake_release(router=False)
    feats, reason = dsv3.probe(te, "DSv3MoE", "bf16", {}, "2.5.0", None, importer)
    assert reason is None and feats["router"] is None
    assert "torch top-k" in feats["notes"]["router"]
    assert "No module named 'transformer_engine.pytorch.router'" in feats["notes"]["router"]


def test_a_fused_router_asked_for_and_missing_skips():
    te, importer = _fake_release(router=False)
    feats, reason = dsv3.probe(te, "DSv3MoE", "bf16", {"router": "fused"}, "2.5.0", None, importer)
    assert feats is None and "No module named 'transformer_engine.pytorch.router'" in reason


def test_torch_router_asked_for_skips_the_probe():
    te, importer = _fake_release()
    feats, _ = dsv3.probe(te, "DSv3MoE", "bf16", {"router": "torch"}, "2.20.2", None, importer)
    assert feats["router"] is None and feats["notes"]["router"] == "torch (asked for)"


@pytest.mark.parametrize(
    "module, drop, words",
    [
        ("DSv3MoE", ["moe_permute"], ["DSv3MoE needs moe_permute", "No module named", "permutation"]),
        ("DSv3Layer", ["GroupedLinear"], ["needs GroupedLinear"]),
        ("DSv3Attention", ["DotProductAttention"], ["needs DotProductAttention"]),
        ("DSv3Attention", ["RotaryPositionEmbedding"], ["needs RotaryPositionEmbedding", "No module named"]),
    ],
)
def test_a_missing_part_is_a_reason_naming_it(module, drop, words):
    te, importer = _fake_release(drop=drop)
    feats, reason = dsv3.probe(te, module, "bf16", {}, "2.1.0", None, importer)
    assert feats is None
    assert reason.startswith("TE 2.1.0: ")
    for word in words:
        assert word in reason, (word, reason)


def test_parts_only_the_other_block_needs_are_not_asked_for():
    te, importer = _fake_release(drop=["GroupedLinear", "moe_permute"])
    assert dsv3.probe(te, "DSv3Attention", "bf16", {}, "2.1.0", None, importer)[1] is None
    te, importer = _fake_release(drop=["DotProductAttention"])
    assert dsv3.probe(te, "DSv3MoE", "bf16", {}, "2.1.0", None, importer)[1] is None


def test_one_head_dim_attention_is_a_reason_with_its_signature():
    te, importer = _fake_release(kv_channels="int")
    feats, reason = dsv3.probe(te, "DSv3Attention", "bf16", {}, "1.9.0", None, importer)
    assert feats is None and "kv_channels: int" in reason and "qk 96 / v 64" in reason


def test_evaluated_typing_annotations_are_read_whole():
    """TE 2.16 annotates without PEP 563: the probe meets typing objects, whose __name__ is only "Union"."""
    te, importer = _fake_release()
    te.DotProductAttention.__init__.__annotations__["kv_channels"] = Union[int, Tuple[int, int]]
    Tensor = type("Tensor", (), {})  # torch.Tensor's stand-in: this file runs without torch
    te.GroupedLinear.forward.__annotations__["m_splits"] = Union[List[int], Tensor]
    feats, reason = dsv3.probe(te, "DSv3Layer", "bf16", {"splits": "gpu"}, "2.16.0", None, importer)
    assert reason is None and feats["splits"]["kind"] == "gpu"
    te.DotProductAttention.__init__.__annotations__["kv_channels"] = int
    assert "kv_channels: int)" in dsv3.probe(te, "DSv3Attention", "bf16", {}, "1.9.0", None, importer)[1]


def test_fp8_without_padded_permute_skips_the_moe():
    te, importer = _fake_release(drop=["moe_permute_and_pad_with_probs"])
    feats, reason = dsv3.probe(te, "DSv3MoE", "fp8_current", {}, "2.11.0", "fp8_block", importer)
    assert feats is None
    assert "padded to 16 rows" in reason and "moe_permute_and_pad_with_probs" in reason


def test_bf16_without_padded_permute_runs_unpadded_and_drops_the_switch():
    te, importer = _fake_release(drop=["moe_permute_and_pad_with_probs"])
    feats, reason = dsv3.probe(te, "DSv3MoE", "bf16", {}, "2.11.0", "fp8_current", importer)
    assert reason is None and feats["split_align"] == 1
    assert "no switch to fp8_current" in feats["notes"]["recompile"]


# ------------------------------------------------------------------ torch stand-ins of TE's parts (CPU)


def _torch_te(*, tensor_splits: bool):
    """A fake transformer_engine.pytorch whose parts compute on the CPU with torch (reference versions of
    permute/unpermute, rope, attention), so the whole model runs forward and backward."""
    import torch
    import torch.nn.functional as F

    calls: dict = {"router": 0, "splits": []}

    def rms(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * weight

    class Linear(torch.nn.Module):
        def __init__(self, in_features, out_features, bias=True, params_dtype=None, device=None):
            super().__init__()
            self.lin = torch.nn.Linear(
                in_features, out_features, bias=bias, dtype=params_dtype, device=device
            )

        def forward(self, x):
            return self.lin(x)

    class LayerNormLinear(Linear):
        def __init__(self, in_features, out_features, normalization="LayerNorm", **kw):
            super().__init__(in_features, out_features, **kw)
            assert normalization == "RMSNorm"
            self.norm_weight = torch.nn.Parameter(torch.ones(in_features))

        def forward(self, x):
            return self.lin(rms(x, self.norm_weight))

    class LayerNormMLP(torch.nn.Module):
        def __init__(
            self,
            hidden_size,
            ffn_hidden_size,
            normalization="LayerNorm",
            activation="gelu",
            bias=True,
            return_layernorm_output=False,
            params_dtype=None,
            device=None,
        ):
            super().__init__()
            assert activation == "swiglu" and normalization == "RMSNorm"
            self.fc1 = torch.nn.Linear(hidden_size, 2 * ffn_hidden_size, bias=bias, dtype=params_dtype)
            self.fc2 = torch.nn.Linear(ffn_hidden_size, hidden_size, bias=bias, dtype=params_dtype)
            self.ret = return_layernorm_output
            self.norm_weight = torch.nn.Parameter(torch.ones(hidden_size))

        def forward(self, x):
            normed = rms(x, self.norm_weight)
            a, b = self.fc1(normed).chunk(2, -1)
            out = self.fc2(F.silu(a) * b)
            return (out, normed) if self.ret else out

    class GroupedLinear(torch.nn.Module):
        def __init__(
            self,
            num_gemms,
            in_features,
            out_features,
            bias=True,
            params_dtype=None,
            device=None,
            use_grouped_tensor=None,
        ):
            super().__init__()
            self.lins = torch.nn.ModuleList(
                torch.nn.Linear(in_features, out_features, bias=bias, dtype=params_dtype)
                for _ in range(num_gemms)
            )

        def forward(self, inp, m_splits):
            calls["splits"].append(m_splits)
            if isinstance(m_splits, torch.Tensor):
                assert tensor_splits, "a list-splits TE got a tensor"
                m_splits = m_splits.tolist()
            assert sum(m_splits) == inp.shape[0]
            return torch.cat([lin(p) for lin, p in zip(self.lins, torch.split(inp, m_splits))])

    GroupedLinear.forward.__annotations__["m_splits"] = "torch.Tensor" if tensor_splits else "List[int]"

    class DotProductAttention(torch.nn.Module):
        def __init__(
            self,
            num_attention_heads,
            kv_channels: Union[int, Tuple[int, int]],
            attention_dropout=0.0,
            qkv_format="sbhd",
            attn_mask_type="causal",
        ):
            super().__init__()

        def forward(self, q, k, v):
            seq, batch, heads, dv = v.shape
            out = F.scaled_dot_product_attention(*(t.permute(1, 2, 0, 3) for t in (q, k, v)), is_causal=True)
            return out.permute(2, 0, 1, 3).reshape(seq, batch, heads * dv)

    class RotaryPositionEmbedding(torch.nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.inv = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))

        def forward(self, max_seq_len):
            f = torch.outer(torch.arange(max_seq_len).float(), self.inv)
            return torch.cat([f, f], -1).view(max_seq_len, 1, 1, -1)

    def apply_rotary_pos_emb(t, freqs, tensor_format="sbhd", fused=False):
        a, b = t.chunk(2, -1)
        return (t * freqs.cos() + torch.cat([-b, a], -1) * freqs.sin()).to(t.dtype)

    def _rows(routing_map, counts_to):
        token, expert = [], []
        for e in range(routing_map.shape[1]):
            rows = routing_map[:, e].nonzero().flatten().tolist()
            token += rows + [-1] * (counts_to(len(rows)) - len(rows))
            expert += [e] * counts_to(len(rows))
        return torch.tensor([token, expert]).T

    def _gather(inp, row_id_map):
        pad = torch.zeros(1, inp.shape[1], dtype=inp.dtype)
        return torch.cat([inp, pad])[row_id_map[:, 0]]  # -1: the zero row

    def moe_permute(inp, routing_map, num_out_tokens, max_token_num=-1, map_type="mask"):
        row_id_map = _rows(routing_map, lambda n: n)
        assert row_id_map.shape[0] == num_out_tokens
        return _gather(inp, row_id_map), row_id_map

    def moe_permute_and_pad_with_probs(inp, probs, routing_map, tokens_per_expert, align_size):
        row_id_map = _rows(routing_map, lambda n: -(-n // align_size) * align_size)
        probs_pad = torch.cat([probs, torch.zeros(1, probs.shape[1], dtype=probs.dtype)])
        permuted_probs = probs_pad[row_id_map[:, 0], row_id_map[:, 1]]
        target = torch.bincount(row_id_map[:, 1], minlength=routing_map.shape[1])
        return _gather(inp, row_id_map), permuted_probs, row_id_map, torch.zeros(1), target

    def moe_unpermute(
        inp, row_id_map, merging_probs=None, restore_shape=None, map_type="mask", probs=None, pad_offsets=None
    ):
        keep = row_id_map[:, 0] >= 0
        rows, token, expert = inp[keep], row_id_map[keep, 0], row_id_map[keep, 1]
        if merging_probs is not None:
            rows = rows * merging_probs[token, expert].unsqueeze(-1).to(rows.dtype)
        return torch.zeros(restore_shape, dtype=inp.dtype).index_add(0, token, rows)

    def fused_topk_with_score_function(
        logits, topk, use_pre_softmax, num_groups, group_topk, scaling_factor, score_function, expert_bias
    ):
        calls["router"] += 1
        s = dict(
            experts=logits.shape[1],
            groups=num_groups,
            group_topk=group_topk,
            topk=topk,
            score=score_function,
            scaling=scaling_factor,
        )
        return dsv3.route_torch(torch, logits, s)

    te = types.SimpleNamespace(
        Linear=Linear,
        LayerNormLinear=LayerNormLinear,
        LayerNormMLP=LayerNormMLP,
        GroupedLinear=GroupedLinear,
        DotProductAttention=DotProductAttention,
        RotaryPositionEmbedding=RotaryPositionEmbedding,
        apply_rotary_pos_emb=apply_rotary_pos_emb,
        moe_permute=moe_permute,
        moe_unpermute=moe_unpermute,
        moe_permute_and_pad_with_probs=moe_permute_and_pad_with_probs,
        fused_topk_with_score_function=fused_topk_with_score_function,
    )
    return te, calls


def _build_and_step(module, recipe, kwargs, *, tensor_splits=False, other=None):
    import torch

    from teperf.worker import dsv3_model
    from teperf.worker.runner import Built, make_step

    te, calls = _torch_te(tensor_splits=tensor_splits)
    kwargs = {**SMALL, **SMALL_MOE, **kwargs}
    feats, reason = dsv3.probe(te, module, recipe, kwargs, "fake", other, _importer({}))
    assert reason is None, reason
    torch.manual_seed(0)
    s = dsv3.sizes(32, kwargs)
    model = dsv3_model.build(module, feats, s, torch.float32, "cpu")
    x = torch.randn(8, 2, 32, requires_grad=True)
    step, _ = make_step(Built(module=model, inputs=(x,)), "eager")
    step()
    return model, x, calls, feats


@pytest.mark.parametrize("module", dsv3.MODELS)
def test_each_model_runs_forward_and_backward_on_cpu(module):
    model, x, calls, _ = _build_and_step(module, "bf16", {})
    assert x.grad is not None and x.grad.shape == x.shape and x.grad.abs().sum() > 0
    params = [p for p in model.parameters() if p.requires_grad]
    assert params and all(p.grad is not None for p in params), [
        n for n, p in model.named_parameters() if p.grad is None
    ]
    assert sum(p.numel() for p in model.parameters()) == dsv3.param_count(module, 32, {**SMALL, **SMALL_MOE})


def test_list_splits_are_python_ints_summing_to_the_routed_rows():
    _, _, calls, feats = _build_and_step("DSv3MoE", "bf16", {})
    assert feats["split_align"] == 1
    fc1_splits = calls["splits"][0]
    assert isinstance(fc1_splits, list) and all(isinstance(n, int) for n in fc1_splits)
    assert sum(fc1_splits) == 16 * SMALL_MOE["topk"]  # every token to exactly topk experts, no padding


def test_gpu_splits_reach_grouped_linear_as_a_tensor():
    import torch

    _, _, calls, feats = _build_and_step("DSv3MoE", "bf16", {"splits": "gpu"}, tensor_splits=True)
    assert feats["splits"]["kind"] == "gpu"
    assert isinstance(calls["splits"][0], torch.Tensor) and calls["splits"][0].dtype == torch.int64


def test_padded_splits_are_multiples_of_the_alignment():
    _, _, calls, feats = _build_and_step("DSv3MoE", "fp8_current", {}, other="fp8_block")
    assert feats["split_align"] == 16
    splits = calls["splits"][0]
    assert all(n % 16 == 0 for n in splits) and sum(splits) >= 16 * SMALL_MOE["topk"]


def test_padded_and_unpadded_moe_compute_the_same():
    import torch

    a, x, _, _ = _build_and_step("DSv3MoE", "bf16", {})
    b, _, _, _ = _build_and_step("DSv3MoE", "fp8_current", {}, other="fp8_block")
    with torch.no_grad():
        torch.testing.assert_close(a(x), b(x))


def test_fused_router_is_called_where_present_and_torch_matches_it():
    import torch

    fused, x, calls, _ = _build_and_step("DSv3MoE", "bf16", {})
    assert calls["router"] >= 1
    plain, _, calls, feats = _build_and_step("DSv3MoE", "bf16", {"router": "torch"})
    assert calls["router"] == 0 and feats["router"] is None
    with torch.no_grad():
        torch.testing.assert_close(fused(x), plain(x))


def test_torch_router_picks_topk_experts_from_the_top_groups():
    import torch

    s = dsv3.sizes(8, {"experts": 16, "groups": 4, "group_topk": 2, "topk": 3})
    torch.manual_seed(1)
    logits = torch.randn(50, 16)
    probs, routing_map = dsv3.route_torch(torch, logits, s)
    assert routing_map.dtype == torch.bool
    assert (routing_map.sum(1) == 3).all()
    groups_used = routing_map.view(50, 4, 4).any(-1).sum(1)
    assert (groups_used <= 2).all()
    assert ((probs != 0) == routing_map).all()
    torch.testing.assert_close(probs.sum(1), torch.full((50,), 2.5))  # sigmoid: normalized, then scaled


def test_layers_stack_blocks():
    import torch

    model, _, _, _ = _build_and_step("DSv3Attention", "bf16", {"layers": 3})
    assert isinstance(model, torch.nn.Sequential) and len(model) == 3


# ------------------------------------------------------------------ the TE backend and the session


def _install(monkeypatch, te_pt, version="2.20.2"):
    """Put a fake TE into sys.modules (te.py imports transformer_engine.pytorch and its recipe module)."""
    pkg = types.ModuleType("transformer_engine")
    pkg.__version__ = version
    pkg.__file__ = "/fake/transformer_engine/__init__.py"
    pt = types.ModuleType("transformer_engine.pytorch")
    pt.__dict__.update(vars(te_pt))
    common = types.ModuleType("transformer_engine.common")
    recipe = types.ModuleType("transformer_engine.common.recipe")
    for name in ("DelayedScaling", "Float8CurrentScaling", "Float8BlockScaling"):
        setattr(recipe, name, type(name, (), {"__init__": lambda self, **kw: None}))
    pt.autocast = lambda enabled=True, recipe=None: __import__("contextlib").nullcontext()
    pt.make_graphed_callables = lambda module, args, enabled=None, recipe=None: module
    for name in [n for n in sys.modules if n == "transformer_engine" or n.startswith("transformer_engine.")]:
        monkeypatch.delitem(sys.modules, name)
    mods = {
        "transformer_engine": pkg,
        "transformer_engine.pytorch": pt,
        "transformer_engine.common": common,
        "transformer_engine.common.recipe": recipe,
    }
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    pkg.pytorch, pkg.common, common.recipe = pt, common, recipe
    return pt


def _case(module="DSv3MoE", recipe="bf16", kwargs=None, mode="eager"):
    return {
        "id": 7,
        "backend": "te",
        "module": module,
        "recipe": recipe,
        "shape": [8, 2, 32],
        "kwargs": {**SMALL, **SMALL_MOE, **(kwargs or {})},
        "mode": mode,
        "warmup": 1,
        "dtype": "float32",
    }


def test_backend_case_status_is_tes_reason_for_models_only(monkeypatch):
    from teperf.worker.backends import te as te_backend

    te, _ = _torch_te(tensor_splits=False)
    _install(monkeypatch, te, "2.16.0")
    assert te_backend.case_status(_case(), "cpu") is None
    reason = te_backend.case_status(_case(kwargs={"splits": "gpu"}), "cpu")
    assert "TE 2.16.0" in reason and "m_splits: List[int]" in reason
    assert te_backend.case_status(_case(module="Linear"), "cpu") is None


def test_session_skips_a_cell_whose_part_is_missing(monkeypatch):
    from teperf.worker.backends import te as te_backend
    from teperf.worker.session import Session

    te, _ = _torch_te(tensor_splits=False)
    _install(monkeypatch, te, "2.16.0")
    monkeypatch.setattr(te_backend, "recipe_status", lambda recipe, device: None)  # a GPU that has it
    reply = Session(device="cpu", backends=["te"]).setup(_case(kwargs={"splits": "gpu"}))
    assert reply["type"] == "error" and reply["skipped"] is True
    assert "m_splits: List[int]" in reply["error"]


@pytest.mark.slow  # a whole setup: build, first call, warm-up
def test_session_builds_and_times_a_model_on_fake_te(monkeypatch):
    from teperf.worker.backends import te as te_backend
    from teperf.worker.session import Session

    te, calls = _torch_te(tensor_splits=False)
    _install(monkeypatch, te)
    monkeypatch.setattr(te_backend, "recipe_status", lambda recipe, device: None)
    reply = Session(device="cpu", backends=["te"]).setup(_case("DSv3Layer"))
    assert reply["type"] == "ready", reply
    info = reply["info"]
    assert info["dsv3"]["sizes"]["experts"] == SMALL_MOE["experts"] and info["layers"] == 1
    assert ".tolist()" in info["dsv3"]["splits"] and "fused_topk" in info["dsv3"]["router"]
    assert info["first_call"]["what"] == "first fwd+bwd step"
    assert calls["router"] >= 2  # the first call and the warm-up


def test_the_recompile_recipe_follows_the_padding(monkeypatch):
    from teperf.worker.backends import te as te_backend

    te, _ = _torch_te(tensor_splits=False)
    pt = _install(monkeypatch, te)
    monkeypatch.setattr(te_backend, "recipe_status", lambda recipe, device: None)
    built = te_backend.build(_case(recipe="bf16"), "cpu")
    assert built.info["dsv3"]["split_align"] == 16  # padded for fp8_current, the recompile's recipe
    assert "Float8CurrentScaling (fp8_current)" in built.alt_autocast_what
    del pt.moe_permute_and_pad_with_probs
    built = te_backend.build(_case(recipe="bf16"), "cpu")
    assert built.info["dsv3"]["split_align"] == 1 and built.alt_autocast is None


# ------------------------------------------------------------------ the config


def test_shipped_config_loads_with_models_variants_and_the_dense_layer():
    from teperf.config import load_config
    from teperf.plan import expand

    config = load_config("dsv3")
    names = [m.name for m in config.modules]
    assert names == ["DSv3Layer", "DSv3Layer[splits=gpu]", "DSv3MoE", "DSv3Attention", "TransformerLayer"]
    assert dict(config.modules[1].kwargs) == {"splits": "gpu"}
    assert set(config.modes) == {"eager", "compile", "cuda-graph"}
    assert {"bf16", "fp8_current", "fp8_block"} <= set(config.recipes)
    assert [c for c in expand(config) if c.skip] == []  # the shape fits every recipe's rule


def test_config_refuses_an_unknown_model_name_and_lists_the_models():
    from teperf.config import build_config
    from teperf.errors import TeperfError

    with pytest.raises(TeperfError) as err:
        build_config({"backend": "te", "device": "cuda", "modules": ["DSv4Layer"]}, {}, None)
    assert "DSv3Layer" in err.value.fix


def test_memory_bound_of_a_model_counts_its_experts_and_layers():
    from teperf.memory import estimate_bytes
    from teperf.plan import Case

    def case(kwargs):
        return Case(
            id=0,
            backend="te",
            module="DSv3Layer",
            recipe="bf16",
            shape=(128, 2, 1024),
            dtype="bfloat16",
            mode="eager",
            kwargs=kwargs,
        )

    one, four = estimate_bytes(case({})), estimate_bytes(case({"layers": 4}))
    assert four == 4 * one
    assert one > dsv3.param_count("DSv3Layer", 1024) * 2  # more than the bf16 weights alone
