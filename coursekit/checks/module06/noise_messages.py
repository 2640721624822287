"""What ``noise_scale``'s messages say of each mistake its judge recognises.

A mistake is named only when the hand-in's three numbers match what that mistake computes
from the same per-sample gradients (``noise_scale._candidates``); these sentences say what
each one did and what the estimator needs instead. Kept apart so the question reads whole.
"""

MESSAGES = {
    "mean_over_k_minus_1": (
        "Your numbers match a mean over the k micro-batches divided by k - 1 instead of k "
        "(|G_b|^2 as the sum of |g_i|^2 over k - 1, or G_B as the sum of the g_i over k - 1). "
        "Both are plain means, divided by k: the two-batch formulas are unbiased with plain "
        "means, and the k - 1 of an unbiased variance has no place here."
    ),
    "frozen_parameter_included": (
        "Your numbers match the gradients of every parameter, the frozen one (requires_grad "
        "False) too. The optimizer never steps a frozen parameter: the noise that matters is "
        "that of the gradient it does step, over the parameters that require grad."
    ),
    "batch_size_from_pair": (
        "Your numbers match a batch size of 2 where b or B = k * b belongs: len() of a micro-"
        "batch, an (inputs, targets) pair, is always 2. The micro-batch size is "
        "len(micro_batches[0][0]), the number of samples in its inputs."
    ),
    "big_norm_as_true_norm": (
        "Your numbers match the raw squared norms used as the estimates: |G_B|^2 as |G|^2 "
        "and/or b * mean |g_i|^2 as tr(Sigma). Each squared norm of a mean gradient is "
        "|G|^2 + tr(Sigma)/batch: signal plus noise. Combine the two batch sizes to separate "
        "them: |G|^2 = (B |G_B|^2 - b |G_b|^2) / (B - b), tr(Sigma) = (|G_b|^2 - |G_B|^2) / "
        "(1/b - 1/B)."
    ),
    "partial_sums_not_micro_batches": (
        "Your numbers match squared norms read from the accumulated .grad after each "
        "backward: that is a running sum of the micro-batches so far, not micro-batch i's own "
        "gradient. Take the increment: .grad after this backward minus .grad before it (times "
        "k, since the loss was divided by k)."
    ),
    "big_gradient_not_averaged": (
        "Your numbers match a big-batch gradient that is the sum of the k micro-batch "
        "gradients, k times their mean: the loss was not divided by k before backward (or the "
        "copies were summed, not averaged). G_B is the mean gradient of the B = k * b samples."
    ),
    "norm_not_squared": (
        "Your numbers match norms |g| where the formulas need squared norms |g|^2: use "
        "g.pow(2).sum() (or torch.linalg.vector_norm(g) ** 2), not the norm itself."
    ),
    "batch_sizes_swapped": (
        "Your numbers match the formulas with b and B exchanged: b is the small batch (one "
        "micro-batch's samples, whose gradients are g_i), B = k * b the big one (the whole "
        "window, whose gradient is G_B)."
    ),
    "counts_not_sizes": (
        "Your numbers match 1 and k (the number of micro-batches) where the batch sizes "
        "belong: the formulas count samples, b per micro-batch and B = k * b per window."
    ),
    "one_micro_batch_only": (
        "Your numbers match |G_b|^2 taken from one micro-batch only (the first or the last). "
        "Average |g_i|^2 over all k micro-batches: each is an estimate of the same quantity, "
        "and their mean is a less noisy one."
    ),
    "ratio_inverted": (
        "|G|^2 and tr(Sigma) are right, but your b_simple is |G|^2 / tr(Sigma): upside "
        "down. B_simple = tr(Sigma) / |G|^2, the noise over the signal."
    ),
    "variance_not_unbiased": (
        "Your numbers match a variance of the k micro-batch gradients divided by k: with k "
        "samples, the unbiased variance divides by k - 1 (torch.var's default; np.var needs "
        "ddof=1)."
    ),
    "big_gradient_from_last_micro_batch": (
        "Your numbers match a big-batch gradient that is only the last micro-batch's: "
        "zeroing .grad between micro-batches leaves only the last one in it. Sum (or average) "
        "the copies of every micro-batch's gradient to get G_B."
    ),
}
