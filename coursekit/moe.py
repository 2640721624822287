"""Mixture-of-experts load balancing: an auxiliary loss that couples the tokens of a batch.

A router sends each token to one of ``E`` experts. Switch Transformer (Fedus et al. 2021,
arXiv:2101.03961, eq. 4) keeps the experts evenly used with the loss
``E * sum_e f_e * P_e``, where ``f_e`` is the fraction of the batch's tokens routed to expert
``e`` and ``P_e`` the router's mean probability for ``e`` over the batch. Both are batch
statistics, so the loss of a window computed per micro-batch and averaged is not the loss of
the window: a micro-batch drawn from one source (one language, one task) looks unbalanced
although the window is balanced. Qiu et al. 2025 (arXiv:2501.11873) compare balancing per
micro-batch with balancing per global batch in real training.
"""

from __future__ import annotations

import torch
from torch.nn import functional

from coursekit.arguments import whole


def load_balancing_loss(router_logits: torch.Tensor) -> torch.Tensor:
    """Switch Transformer's auxiliary loss for router logits of shape ``(tokens, experts)``:
    1 when tokens and probabilities spread evenly, up to ``E`` when all go to one expert.

    Example:
        >>> round(float(load_balancing_loss(torch.zeros(8, 4))), 3)  # a uniform router
        1.0
    """
    if router_logits.dim() != 2 or router_logits.shape[0] == 0:
        raise ValueError(
            f"router_logits must be (tokens, experts) with at least one token; got shape "
            f"{tuple(router_logits.shape)}."
        )
    experts = router_logits.shape[1]
    probabilities = router_logits.softmax(dim=-1)
    routed = functional.one_hot(probabilities.argmax(dim=-1), experts).to(probabilities.dtype)
    return experts * (routed.mean(dim=0) * probabilities.mean(dim=0)).sum()


def micro_batch_load_balancing_loss(
    router_logits: torch.Tensor, micro_batch_size: int
) -> torch.Tensor:
    """The same loss computed on each micro-batch of ``micro_batch_size`` tokens and
    averaged over them: what a loop gets that balances per micro-batch."""
    micro_batch_size = whole("micro_batch_size", micro_batch_size)
    pieces = router_logits.split(micro_batch_size)
    return torch.stack([load_balancing_loss(piece) for piece in pieces]).mean()


def domain_router_logits(
    tokens_per_domain: int, experts: int = 4, confidence: float = 3.0, seed: int = 0
) -> torch.Tensor:
    """Router logits for ``experts`` domains of ``tokens_per_domain`` tokens, one after the
    other (data read source by source): domain ``d``'s tokens favour expert ``d``."""
    tokens_per_domain, experts = (
        whole("tokens_per_domain", tokens_per_domain),
        whole("experts", experts),
    )
    generator = torch.Generator().manual_seed(whole("seed", seed, minimum=None))
    logits = torch.randn(experts * tokens_per_domain, experts, generator=generator)
    favourite = torch.arange(experts).repeat_interleave(tokens_per_domain)
    logits[torch.arange(len(favourite)), favourite] += confidence
    return logits
