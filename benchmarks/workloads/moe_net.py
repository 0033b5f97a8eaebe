"""The model of the expert-parallel benchmark: residual mixture-of-experts blocks and a linear
head. Each block's ``Experts`` follows transformers' experts contract (parameters stacked over
the experts on dimension 0, ``num_experts``, ``forward(hidden_states, top_k_index,
top_k_weights)``), which accel's ``ParallelismConfig(ep_size=N)`` finds and splits."""

from __future__ import annotations

import torch


class Experts(torch.nn.Module):
    """``num_experts`` feed-forward experts (Linear ``width -> hidden``, GELU, Linear back)."""

    def __init__(self, num_experts: int, width: int, hidden: int) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.w_in = torch.nn.Parameter(torch.randn(num_experts, width, hidden) / width**0.5)
        self.w_out = torch.nn.Parameter(torch.randn(num_experts, hidden, width) / hidden**0.5)

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        return expert_outputs(
            self.w_in, self.w_out, hidden_states, top_k_index, top_k_weights, self.num_experts
        )


def expert_outputs(
    w_in: torch.Tensor,
    w_out: torch.Tensor,
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    num_experts: int,
) -> torch.Tensor:
    """Each token's weighted sum of its chosen experts' outputs (experts ``0 .. num_experts-1``
    of ``w_in``/``w_out``)."""
    output = torch.zeros_like(hidden_states)
    for expert in range(num_experts):
        token, choice = torch.where(top_k_index == expert)
        if len(token):
            computed = torch.nn.functional.gelu(hidden_states[token] @ w_in[expert]) @ w_out[expert]
            output = output.index_add(0, token, computed * top_k_weights[token, choice, None])
    return output


class MoEBlock(torch.nn.Module):
    """``x + experts(norm(x))``, each token routed to its ``top_k`` best experts (softmax router,
    weights renormalised)."""

    def __init__(self, num_experts: int, width: int, hidden: int, top_k: int) -> None:
        super().__init__()
        self.top_k = top_k
        self.norm = torch.nn.LayerNorm(width)
        self.router = torch.nn.Linear(width, num_experts, bias=False)
        self.experts = Experts(num_experts, width, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = self.norm(x).reshape(-1, x.shape[-1])
        weights, index = torch.topk(torch.softmax(self.router(flat), dim=-1), self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return x + self.experts(flat, index, weights).view_as(x)


class MoENet(torch.nn.Module):
    """``depth`` mixture-of-experts blocks, then a ``width`` x ``width`` head."""

    def __init__(self, num_experts: int, width: int, hidden: int, depth: int, top_k: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            [MoEBlock(num_experts, width, hidden, top_k) for _ in range(depth)]
        )
        self.head = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def new_model(num_experts: int, width: int, hidden: int, depth: int, top_k: int) -> MoENet:
    """The model, its weights drawn from seed 0 (every process and library builds the same)."""
    torch.manual_seed(0)
    return MoENet(num_experts, width, hidden, depth, top_k)
