"""MoE load balancing couples a batch's tokens: per micro-batch it is not the window's loss."""

import pytest
import torch

from coursekit.moe import (
    domain_router_logits,
    load_balancing_loss,
    micro_batch_load_balancing_loss,
)


def test_the_loss_is_one_when_balanced_and_the_expert_count_when_collapsed():
    assert float(load_balancing_loss(torch.zeros(8, 4))) == pytest.approx(1.0)
    collapsed = torch.zeros(8, 4)
    collapsed[:, 2] = 50.0  # every token, all its probability, to expert 2
    assert float(load_balancing_loss(collapsed)) == pytest.approx(4.0)


def test_balanced_windows_look_unbalanced_micro_batch_by_micro_batch():
    logits = domain_router_logits(64, experts=4)
    window = float(load_balancing_loss(logits))
    per_micro_batch = float(micro_batch_load_balancing_loss(logits, 64))  # one domain each
    assert window == pytest.approx(1.0, abs=0.05)
    assert per_micro_batch > 2.5
    # one micro-batch holding the whole window is the window
    assert float(micro_batch_load_balancing_loss(logits, 256)) == pytest.approx(window)
    shuffled = logits[torch.randperm(256, generator=torch.Generator().manual_seed(0))]
    assert float(micro_batch_load_balancing_loss(shuffled, 64)) < 1.3  # mixed sources: close


def test_bad_router_logits_are_refused():
    with pytest.raises(ValueError, match="tokens, experts"):
        load_balancing_loss(torch.zeros(4))
    with pytest.raises(TypeError, match="micro_batch_size"):
        micro_batch_load_balancing_loss(torch.zeros(4, 2), 1.5)
