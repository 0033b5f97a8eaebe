"""Token dispatch of expert parallelism: each token goes, all-to-all, to the process that holds
the expert the router chose for it, and its output comes back the same way.

The experts of one layer are split in contiguous blocks over the ``ep`` group: process ``r``
holds experts ``r * local .. (r + 1) * local - 1``. For each of a token's ``k`` choices, its
hidden state travels to that expert's process (one ``all_to_all_single``, with the counts sent
first), the local experts compute it there, and the result travels back (a second
``all_to_all_single``); the router's weight is applied where the token lives, so the router's
gradient never leaves its process. Both exchanges are differentiable
(torch's functional ``all_to_all_single_autograd``): the backward pass sends the gradients
along the same routes in reverse. Any backend with ``all_to_all`` runs it (gloo on CPU, NCCL).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

#: ``compute(hidden_states, local_index, weights) -> output``: the local experts' forward on the
#: tokens this process received (``local_index`` ``[n, 1]`` in ``0 .. local - 1``).
LocalExperts = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _exchange_counts(counts: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """How many rows each process of ``group`` sends this one, given what it sends each."""
    received = torch.empty_like(counts)
    dist.all_to_all_single(received, counts, group=group)
    return received


def dispatch_to_experts(
    compute: LocalExperts,
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    num_local_experts: int,
    group: dist.ProcessGroup,
) -> torch.Tensor:
    """``sum_j top_k_weights[t, j] * expert[top_k_index[t, j]](hidden_states[t])`` for every
    token ``t``, with the experts split over ``group`` (see the module docstring).

    ``hidden_states`` is ``[tokens, hidden]``; ``top_k_index``/``top_k_weights`` ``[tokens,
    k]``, the indices global (``0 .. num_local_experts * group size - 1``). Every process of
    ``group`` must call it (a collective), each with its own tokens.
    """
    from torch.distributed._functional_collectives import (
        all_to_all_single_autograd,
        wait_tensor,
    )

    tokens, k = top_k_index.shape
    size = dist.get_world_size(group)
    choices = top_k_index.reshape(-1)  # [tokens * k], token t's j-th choice at t * k + j
    owner = torch.div(choices, num_local_experts, rounding_mode="floor")
    order = torch.argsort(owner, stable=True)  # grouped by destination process
    send_counts = torch.bincount(owner, minlength=size)
    receive_counts = _exchange_counts(send_counts, group)
    sent, received = send_counts.tolist(), receive_counts.tolist()
    token_of_choice = torch.arange(tokens, device=choices.device).repeat_interleave(k)
    outgoing = hidden_states[token_of_choice[order]]
    local_index = torch.remainder(choices[order], num_local_experts)
    incoming_index = local_index.new_empty(sum(received))
    dist.all_to_all_single(incoming_index, local_index, received, sent, group=group)
    incoming = wait_tensor(all_to_all_single_autograd(outgoing, received, sent, group))
    ones = torch.ones(len(incoming_index), 1, dtype=top_k_weights.dtype, device=incoming.device)
    computed = compute(incoming, incoming_index.unsqueeze(-1), ones)
    returned = wait_tensor(all_to_all_single_autograd(computed, sent, received, group))
    # back in (token, choice) order, weighted by the router where the token lives
    per_choice = returned[torch.argsort(order)]
    weighted = per_choice.view(tokens, k, -1) * top_k_weights.unsqueeze(-1).to(per_choice.dtype)
    return weighted.sum(dim=1).to(hidden_states.dtype)
