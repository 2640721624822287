"""``amp_window`` hand-ins: the right GradScaler window and each known mistake, as source."""

from tests.corpora.student_code import side_effects

_AMP = """
import torch
def amp_window(model, optimizer, scaler, loss_fn, micro_batches, max_norm):
    for inputs, targets in micro_batches:
        loss = {loss}
        {backward}
        {per_micro_batch}
    {unscale}
    {clip}
    {step}
    {update}
    {zero_grad}
"""
_AMP_RIGHT = {
    "loss": "loss_fn(model(inputs), targets) / len(micro_batches)",
    "backward": "scaler.scale(loss).backward()",
    "per_micro_batch": "pass",
    "unscale": "scaler.unscale_(optimizer)",
    "clip": "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)",
    "step": "scaler.step(optimizer)",
    "update": "scaler.update()",
    "zero_grad": "optimizer.zero_grad()",
}


def _amp(**changes):
    return _AMP.format(**{**_AMP_RIGHT, **changes})


AMP_WINDOW = {
    "correct": _amp(),
    "unscale_every_micro_batch": _amp(per_micro_batch="scaler.unscale_(optimizer)", unscale="pass"),
    "unscale_and_update_every_micro_batch": _amp(
        per_micro_batch="scaler.unscale_(optimizer); scaler.update()", unscale="pass"
    ),
    "update_every_micro_batch": _amp(per_micro_batch="scaler.update()", update="pass"),
    "step_every_micro_batch": _amp(
        per_micro_batch=(
            "scaler.unscale_(optimizer); "
            "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm); "
            "scaler.step(optimizer); scaler.update(); optimizer.zero_grad()"
        ),
        unscale="pass",
        clip="pass",
        step="pass",
        update="pass",
    ),
    "loss_not_scaled": _amp(backward="loss.backward()"),
    "optimizer_step_not_scaler": _amp(step="optimizer.step()"),
    "update_missing": _amp(update="pass"),
    "zero_grad_missing": _amp(zero_grad="pass"),
    "inf_micro_batch_dropped": _amp(
        backward="scaler.scale(loss).backward() if torch.isfinite(loss) else None"
    ),
    "clipped_before_unscale": _amp(unscale="pass"),
    "clipping_missing": _amp(clip="pass"),
    "loss_not_divided": _amp(loss="loss_fn(model(inputs), targets)"),
    "correct_clipping_the_scaled_gradients_at_the_scaled_threshold": _amp(
        unscale="pass",
        clip="torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm * scaler.get_scale())",
    ),
    "zero_grad_before_step": _amp(unscale="optimizer.zero_grad(); scaler.unscale_(optimizer)"),
    "update_before_step": _amp(
        unscale="scaler.update(); scaler.unscale_(optimizer)", update="pass"
    ),
    "single_backward": """
import torch
def amp_window(model, optimizer, scaler, loss_fn, micro_batches, max_norm):
    total = sum(loss_fn(model(x), y) for x, y in micro_batches) / len(micro_batches)
    scaler.scale(total).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
""",
    "whole_batch_forward": """
import torch
def amp_window(model, optimizer, scaler, loss_fn, micro_batches, max_norm):
    inputs = torch.cat([x for x, _ in micro_batches])
    targets = torch.cat([y for _, y in micro_batches])
    scaler.scale(loss_fn(model(inputs), targets)).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
""",
}
AMP_WINDOW.update(
    {
        "correct_in_place_division": _amp(
            loss="loss_fn(model(inputs), targets); loss /= len(micro_batches)",
            zero_grad="model.zero_grad(set_to_none=False)",
        ),
        "correct_divided_after_scaling": _amp(
            loss="loss_fn(model(inputs), targets)",
            backward="scaler.scale(loss).div(len(micro_batches)).backward()",
        ),
        # A dtype slip: the loss computed in bfloat16, without .float().
        "loss_in_bfloat16": _amp(
            loss="loss_fn(model(inputs).bfloat16(), targets.bfloat16()) / len(micro_batches)"
        ),
        # State not kept between calls: a new GradScaler every window (its scale never adapts),
        # the one given never used.
        "new_scaler_every_window": _amp().replace(
            "    for inputs, targets in micro_batches:",
            '    scaler = torch.amp.GradScaler("cpu")\n    for inputs, targets in micro_batches:',
        ),
        # Gradients cleared when the window starts, not when it ends: left for the caller.
        "grads_cleared_at_start_not_end": _amp(zero_grad="pass").replace(
            "    for inputs, targets in micro_batches:",
            "    optimizer.zero_grad()\n    for inputs, targets in micro_batches:",
        ),
        "clipped_after_step": _amp(
            clip="pass",
            step=(
                "scaler.step(optimizer)\n"
                "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)"
            ),
        ),
        # An in-place change to the inputs: the inf target "cleaned", so the step is taken.
        "inf_targets_replaced_in_place": _amp(
            loss="loss_fn(model(inputs), targets.nan_to_num_(posinf=0.0)) / len(micro_batches)"
        ),
        "clipped_by_value": _amp(
            clip="torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)"
        ),
    }
)

# For tests/helpers/mutation.py (see tests/corpora/student_code/__init__.py).
NON_TEXTBOOK = {
    ("amp_window", "loss_in_bfloat16"),
    ("amp_window", "new_scaler_every_window"),
    ("amp_window", "grads_cleared_at_start_not_end"),
    ("amp_window", "inf_targets_replaced_in_place"),
    ("amp_window", "inf_micro_batch_dropped"),
}
ALSO_NAMED = {
    # With a window of one micro-batch, update() per micro-batch runs twice (named so).
    ("amp_window", "unscale_and_update_every_micro_batch"): {"update_every_micro_batch"},
    # With a window of one micro-batch, update() per micro-batch is update() before the step.
    ("amp_window", "update_every_micro_batch"): {"update_before_step"},
    # Where no entry exceeds max_norm, clipping by value did not clip at all.
    ("amp_window", "clipped_by_value"): {"clipping_missing"},
}
# Variants named after the mistake the checks name (one that shows first, or the same
# mistake seen from outside).
NAMED_AS = {
    "unscale_and_update_every_micro_batch": "unscale_every_micro_batch",
    "loss_in_bfloat16": "loss_in_low_precision",
    "new_scaler_every_window": "scaler_not_used",
    "grads_cleared_at_start_not_end": "zero_grad_missing",
    "clipped_after_step": "clipping_missing",
    "inf_targets_replaced_in_place": "inf_step_not_skipped",
}


# Side-effect mutants (tests/corpora/student_code/side_effects.py): the answer right, the
# caller's inputs or model, or torch's switches, left changed.
AMP_WINDOW.update(
    side_effects.variants(
        AMP_WINDOW["correct"],
        "amp_window",
        eval_mode_left=side_effects.EVAL_MODE_LEFT,
        grad_mode_left=side_effects.GRAD_MODE_LEFT,
    )
)
NON_TEXTBOOK = NON_TEXTBOOK | {("amp_window", "eval_mode_left"), ("amp_window", "grad_mode_left")}
NAMED_AS = {
    **NAMED_AS,
    "eval_mode_left": side_effects.NAMED["eval_mode_left"],
    "grad_mode_left": side_effects.NAMED["grad_mode_left"],
    "inf_targets_replaced_in_place": "inputs_changed",
}
