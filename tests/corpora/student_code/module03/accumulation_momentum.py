"""``accumulation_momentum`` hand-ins: the right answer and each known mistake, as source."""

from tests.corpora.student_code import side_effects

_MOMENTUM = """
import torch
def accumulation_momentum(model, accum_steps):
    for module in model.{walk}():
        if isinstance(module, {kinds}) and module.momentum is not None:
            module.momentum = {formula}
"""


def _momentum(walk="modules", kinds="torch.nn.modules.batchnorm._BatchNorm", formula=None):
    formula = formula or "1 - (1 - module.momentum) ** (1 / accum_steps)"
    return _MOMENTUM.format(walk=walk, kinds=kinds, formula=formula)


ACCUMULATION_MOMENTUM = {
    "correct": _momentum(),
    "correct_with_explicit_classes": _momentum(
        kinds="(torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)"
    ),
    "divided_by_n": _momentum(formula="module.momentum / accum_steps"),
    "power_not_root": _momentum(formula="1 - (1 - module.momentum) ** accum_steps"),
    "layer_missed": _momentum(kinds="torch.nn.BatchNorm1d"),
    "none_momentum_not_skipped": """
import torch
def accumulation_momentum(model, accum_steps):
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.momentum = 1 - (1 - module.momentum) ** (1 / accum_steps)
""",
    "nothing_changed": """
import copy
import torch
def accumulation_momentum(model, accum_steps):
    model = copy.deepcopy(model)
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and module.momentum:
            module.momentum = 1 - (1 - module.momentum) ** (1 / accum_steps)
    return model
""",
    "correct_with_log1p": """
import math
from torch import nn
def accumulation_momentum(model, accum_steps):
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.momentum is not None:
            module.momentum = -math.expm1(math.log1p(-module.momentum) / accum_steps)
    return model
""",
    "children_only": _momentum(walk="children"),
    "stops_after_first_layer": _momentum(
        formula="1 - (1 - module.momentum) ** (1 / accum_steps)\n            return"
    ),
    "default_momentum_assumed": _momentum(formula="1 - (1 - 0.1) ** (1 / accum_steps)"),
    "root_of_momentum": _momentum(formula="module.momentum ** (1 / accum_steps)"),
    "float32_momentum": _momentum(
        formula="1 - (1 - torch.tensor(module.momentum)) ** (1 / accum_steps)"
    ),
    "integer_exponent": _momentum(formula="1 - (1 - module.momentum) ** (1 // accum_steps)"),
    "off_by_one_steps": _momentum(formula="1 - (1 - module.momentum) ** (1 / (accum_steps - 1))"),
    "none_momentum_changed": """
import torch
def accumulation_momentum(model, accum_steps):
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            m = 0.1 if module.momentum is None else module.momentum
            module.momentum = 1 - (1 - m) ** (1 / accum_steps)
""",
}

# Variants whose mistake is named after another one that shows first.
NAMED_AS = {
    "children_only": "layer_missed",
    "stops_after_first_layer": "layer_missed",
}

# Mutation-testing sets (tests/helpers/mutation.py; tests/corpora/student_code/__init__.py
# says what each means).
NON_TEXTBOOK = {
    ("accumulation_momentum", "float32_momentum"),  # dtype slip
    ("accumulation_momentum", "off_by_one_steps"),  # boundary: 1 / (n - 1)
    ("accumulation_momentum", "integer_exponent"),  # 1 // n: a dtype (int) slip
    ("accumulation_momentum", "stops_after_first_layer"),  # a return inside the loop
}


# Side-effect mutants (tests/corpora/student_code/side_effects.py): the answer right, the
# caller's inputs or model, or torch's switches, left changed.
ACCUMULATION_MOMENTUM.update(
    side_effects.variants(
        ACCUMULATION_MOMENTUM["correct"],
        "accumulation_momentum",
        eval_mode_left=side_effects.EVAL_MODE_LEFT,
        hook_left=side_effects.HOOK_LEFT,
    )
)
NON_TEXTBOOK = NON_TEXTBOOK | {
    ("accumulation_momentum", "eval_mode_left"),
    ("accumulation_momentum", "hook_left"),
}
NAMED_AS = {
    **NAMED_AS,
    "eval_mode_left": side_effects.NAMED["eval_mode_left"],
    "hook_left": side_effects.NAMED["hook_left"],
}
