"""The DSv3 models' torch modules, built from TE parts that te_dsv3.probe found (a fake TE's in the tests).
Imported by the TE backend's build only, never by the coordinator (it imports torch)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from teperf.worker import te_dsv3


def _common(dtype, device) -> dict:
    return {"params_dtype": dtype, "device": device}


class MLAttention(torch.nn.Module):
    """Multi-head latent attention, pre-norm, with its residual: one RMSNorm + down projection to the q and
    kv latents and the shared rope key, RMSNorm fused into each up projection, rope on the rope part,
    DotProductAttention with qk and v head dims apart, the output projection."""

    def __init__(self, feats: dict, s: dict, dtype, device):
        super().__init__()
        self.s = s
        h, heads = s["hidden"], s["heads"]
        rms = {"normalization": "RMSNorm", "bias": False, **_common(dtype, device)}
        self.down = feats["LayerNormLinear"](h, s["q_lora"] + s["kv_lora"] + s["qk_rope"], **rms)
        self.q_up = feats["LayerNormLinear"](s["q_lora"], heads * s["qk_dim"], **rms)
        self.kv_up = feats["LayerNormLinear"](s["kv_lora"], heads * (s["qk_nope"] + s["v_dim"]), **rms)
        self.attention = feats["DotProductAttention"](
            heads,
            (s["qk_dim"], s["v_dim"]),
            attention_dropout=0.0,
            qkv_format="sbhd",
            attn_mask_type="causal",
        )
        self.out = feats["Linear"](heads * s["v_dim"], h, bias=False, **_common(dtype, device))
        self.rope = feats["RotaryPositionEmbedding"](s["qk_rope"])
        self.apply_rope = feats["apply_rotary_pos_emb"]
        self.rope_kw = {"tensor_format": "sbhd", **({"fused": True} if feats.get("rope_fused") else {})}

    def forward(self, x):
        s = self.s
        seq, batch, _ = x.shape
        heads, nope, rope = s["heads"], s["qk_nope"], s["qk_rope"]
        q_lat, kv_lat, k_rope = self.down(x).split([s["q_lora"], s["kv_lora"], rope], dim=-1)
        q = self.q_up(q_lat).view(seq, batch, heads, s["qk_dim"])
        q_nope, q_rope = q.split([nope, rope], dim=-1)
        kv = self.kv_up(kv_lat).view(seq, batch, heads, nope + s["v_dim"])
        k_nope, v = kv.split([nope, s["v_dim"]], dim=-1)
        freqs = self.rope(seq)  # per step, as a model computes it for its sequence
        q_rope = self.apply_rope(q_rope.contiguous(), freqs, **self.rope_kw)
        k_rope = self.apply_rope(k_rope.reshape(seq, batch, 1, rope).contiguous(), freqs, **self.rope_kw)
        q = torch.cat([q_nope, q_rope], dim=-1)
        k = torch.cat([k_nope, k_rope.expand(seq, batch, heads, rope)], dim=-1)
        return x + self.out(self.attention(q, k, v.contiguous()))


class MoE(torch.nn.Module):
    """Mixture of experts, pre-norm, with its residual: the shared expert (LayerNormMLP, whose RMSNorm
    output the routed path reuses), a router (TE's fused top-k or torch), moe_permute (padded per expert
    where a quantized recipe needs it), the experts as two GroupedLinear with SwiGLU between,
    moe_unpermute."""

    def __init__(self, feats: dict, s: dict, dtype, device):
        super().__init__()
        self.s = s
        h, experts = s["hidden"], s["experts"]
        self.shared = feats["LayerNormMLP"](
            h,
            s["shared_ffn"],
            normalization="RMSNorm",
            activation="swiglu",
            bias=False,
            return_layernorm_output=True,
            **_common(dtype, device),
        )
        self.gate = torch.nn.Linear(h, experts, bias=False, dtype=dtype, device=device)
        self.register_buffer("expert_bias", torch.zeros(experts, dtype=torch.float32, device=device))
        splits = feats["splits"]
        grouped = {"bias": False, **_common(dtype, device)}
        if splits["grouped_tensor"]:
            grouped["use_grouped_tensor"] = True
        self.fc1 = feats["GroupedLinear"](experts, h, 2 * s["moe_ffn"], **grouped)
        self.fc2 = feats["GroupedLinear"](experts, s["moe_ffn"], h, **grouped)
        self.splits_kind = splits["kind"]
        self.router = feats["router"]
        self.permute = feats["moe_permute"]
        self.unpermute = feats["moe_unpermute"]
        self.align = feats["split_align"]
        self.permute_pad = feats.get("moe_permute_and_pad_with_probs")

    def route(self, logits):
        s = self.s
        if self.router is None:
            return te_dsv3.route_torch(torch, logits, s)
        return self.router(
            logits,
            topk=s["topk"],
            use_pre_softmax=False,
            num_groups=s["groups"],
            group_topk=s["group_topk"],
            scaling_factor=s["scaling"],
            score_function=s["score"],
            expert_bias=self.expert_bias if s["score"] == "sigmoid" else None,
        )

    def forward(self, x):
        seq, batch, h = x.shape
        shared, normed = self.shared(x.reshape(-1, h))
        probs, routing_map = self.route(self.gate(normed))
        counts = routing_map.sum(dim=0)  # tokens per expert, on the GPU
        if self.align > 1:
            permuted, permuted_probs, row_id_map, pad_offsets, counts = self.permute_pad(
                normed, probs, routing_map, counts, self.align
            )
        else:
            permuted, row_id_map = self.permute(
                normed, routing_map, num_out_tokens=normed.shape[0] * self.s["topk"]
            )
        splits = te_dsv3.splits_for(counts, self.splits_kind)
        gate, up = self.fc1(permuted, splits).chunk(2, dim=-1)
        expert_out = self.fc2(F.silu(gate) * up, splits)
        if self.align > 1:
            expert_out = expert_out * permuted_probs.unsqueeze(-1).to(expert_out.dtype)
            routed = self.unpermute(
                expert_out, row_id_map, restore_shape=normed.shape, pad_offsets=pad_offsets
            )
        else:
            routed = self.unpermute(expert_out, row_id_map, merging_probs=probs, restore_shape=normed.shape)
        return x + (shared + routed).view(seq, batch, h)


class DSv3Block(torch.nn.Module):
    """One DeepSeek-V3 MoE layer: attention then MoE, each pre-norm with its residual."""

    def __init__(self, feats: dict, s: dict, dtype, device):
        super().__init__()
        self.attention = MLAttention(feats, s, dtype, device)
        self.moe = MoE(feats, s, dtype, device)

    def forward(self, x):
        return self.moe(self.attention(x))


BLOCKS = {"DSv3Layer": DSv3Block, "DSv3MoE": MoE, "DSv3Attention": MLAttention}


def build(module: str, feats: dict, s: dict, dtype, device) -> torch.nn.Module:
    """``s["layers"]`` blocks of ``module``, one after another (one block: the block itself)."""
    blocks = [BLOCKS[module](feats, s, dtype, device) for _ in range(int(s["layers"]))]
    return blocks[0] if len(blocks) == 1 else torch.nn.Sequential(*blocks)
