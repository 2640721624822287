"""``to_group_norm`` hand-ins: the right answer and each known mistake, as source."""

from tests.corpora.student_code import side_effects

_CONVERT = """
import torch
from torch import nn
def to_group_norm(model, num_groups):
    for name, child in model.named_children():
        if isinstance(child, (nn.BatchNorm1d, nn.BatchNorm2d)):
            group_norm = nn.GroupNorm({groups}, child.num_features, eps={eps})
            group_norm = group_norm.to(child.running_mean.dtype)
            if child.affine:
                {copy}
            setattr(model, name, group_norm)
        else:
            {recurse}
    {ret}
"""
_COPY = (
    "group_norm.weight.data.copy_(child.weight.data); group_norm.bias.data.copy_(child.bias.data)"
)


def _convert(
    groups="num_groups", copy=_COPY, recurse="to_group_norm(child, num_groups)", eps="child.eps"
):
    ret = "return model"
    return _CONVERT.format(groups=groups, copy=copy, recurse=recurse, ret=ret, eps=eps)


TO_GROUP_NORM = {
    "correct": _convert(),
    "correct_via_named_modules": """
import torch
from torch import nn
def to_group_norm(model, num_groups):
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            parent = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
            group_norm = nn.GroupNorm(
                num_groups, module.num_features, eps=module.eps, dtype=module.running_var.dtype
            )
            if module.weight is not None:
                with torch.no_grad():
                    group_norm.weight.copy_(module.weight)
                    group_norm.bias.copy_(module.bias)
            setattr(parent, name.rpartition(".")[2], group_norm)
    return model
""",
    "batchnorm_left": _convert(recurse="pass"),
    "wrong_dtype": _convert().replace(".to(child.running_mean.dtype)", ""),
    "affine_not_copied": _convert(copy="pass"),
    # the GroupNorm's default eps (1e-5), whatever the BatchNorm's
    "eps_not_kept": _convert(eps="1e-5"),
    # written for affine BatchNorms only: crashes on one built with affine=False
    "affine_off_crashes": _convert().replace(
        "            if child.affine:\n", "            if True:\n"
    ),
    # an affine=False BatchNorm's GroupNorm left with weight 0, bias 0 (a zeroed copy)
    "affine_off_zeroed": _convert(
        copy="group_norm.weight.data.copy_(child.weight.data); "
        "group_norm.bias.data.copy_(child.bias.data)\n"
        "            else:\n"
        "                group_norm.weight.data.zero_()"
    ),
    "wrong_groups": _convert(groups="child.num_features"),
    "model_not_returned": _convert().replace("    return model\n", "    return None\n"),
    "correct_with_load_state_dict": """
import torch
from torch import nn
def to_group_norm(model, num_groups):
    for name, child in list(model.named_children()):
        if isinstance(child, nn.modules.batchnorm._BatchNorm):
            dtype = next(child.buffers()).dtype
            group_norm = nn.GroupNorm(num_groups, child.num_features, child.eps, dtype=dtype)
            if child.affine:
                group_norm.load_state_dict({"weight": child.weight, "bias": child.bias})
            setattr(model, name, group_norm)
        else:
            to_group_norm(child, num_groups)
    return model
""",
    "correct_with_new_parameters": """
import torch
from torch import nn
def to_group_norm(model, num_groups):
    for name, child in model._modules.items():
        if type(child) in (nn.BatchNorm1d, nn.BatchNorm2d):
            norm = nn.GroupNorm(num_groups, child.num_features, eps=child.eps)
            if child.affine:
                norm.weight = nn.Parameter(child.weight.detach().clone())
                norm.bias = nn.Parameter(child.bias.detach().clone())
            else:  # no affine values: weight 1 and bias 0 in the model's dtype
                norm = norm.to(child.running_mean.dtype)
            model._modules[name] = norm
        elif child is not None:
            to_group_norm(child, num_groups)
    return model
""",
    # affine=False BatchNorm -> affine=False GroupNorm: the same as weight 1, bias 0
    "correct_affine_follows_batchnorm": """
import torch
from torch import nn
def to_group_norm(model, num_groups):
    for name, child in model.named_children():
        if isinstance(child, nn.modules.batchnorm._BatchNorm):
            norm = nn.GroupNorm(
                num_groups, child.num_features, eps=child.eps, affine=child.affine,
                dtype=child.running_mean.dtype,
            )
            if child.affine:
                with torch.no_grad():
                    norm.weight.copy_(child.weight)
                    norm.bias.copy_(child.bias)
            setattr(model, name, norm)
        else:
            to_group_norm(child, num_groups)
    return model
""",
    "affine_rounded_to_float32": _convert(
        copy="group_norm.weight.data.copy_(child.weight.data.float()); "
        "group_norm.bias.data.copy_(child.bias.data.float())"
    ),
    "built_in_float32_then_converted": """
from torch import nn
def to_group_norm(model, num_groups):
    for name, child in model.named_children():
        if isinstance(child, (nn.BatchNorm1d, nn.BatchNorm2d)):
            group_norm = nn.GroupNorm(num_groups, child.num_features)
            group_norm.weight.data.copy_(child.weight.data)
            group_norm.bias.data.copy_(child.bias.data)
            setattr(model, name, group_norm.to(child.weight.dtype))
        else:
            to_group_norm(child, num_groups)
    return model
""",
    "bias_not_copied": _convert(copy="group_norm.weight.data.copy_(child.weight.data)"),
    "affine_disabled": _convert(groups="num_groups, affine=False", copy="pass").replace(
        ", affine=False, child.num_features, eps=child.eps)",
        ", child.num_features, eps=child.eps, affine=False)",
    ),
    "only_2d_converted": _convert().replace("(nn.BatchNorm1d, nn.BatchNorm2d)", "nn.BatchNorm2d"),
    "groups_and_group_size_swapped": _convert(groups="child.num_features // num_groups"),
    "dotted_name_set_on_the_root": """
import torch
from torch import nn
def to_group_norm(model, num_groups):
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            group_norm = nn.GroupNorm(num_groups, module.num_features, dtype=module.weight.dtype)
            with torch.no_grad():
                group_norm.weight.copy_(module.weight)
                group_norm.bias.copy_(module.bias)
            setattr(model, name, group_norm)
    return model
""",
    "copy_at_each_level": """
import copy
from torch import nn
def to_group_norm(model, num_groups):
    model = copy.deepcopy(model)
    for name, child in model.named_children():
        if isinstance(child, (nn.BatchNorm1d, nn.BatchNorm2d)):
            group_norm = nn.GroupNorm(num_groups, child.num_features).to(child.weight.dtype)
            group_norm.weight.data.copy_(child.weight.data)
            group_norm.bias.data.copy_(child.bias.data)
            setattr(model, name, group_norm)
        else:
            to_group_norm(child, num_groups)
    return model
""",
    "layer_norm_for_one_group": """
from torch import nn
def to_group_norm(model, num_groups):
    for name, child in model.named_children():
        if isinstance(child, (nn.BatchNorm1d, nn.BatchNorm2d)):
            if num_groups == 1:  # one group: normalise over all channels
                norm = nn.LayerNorm(child.num_features, dtype=child.weight.dtype)
            else:
                norm = nn.GroupNorm(num_groups, child.num_features, dtype=child.weight.dtype)
            norm.weight.data.copy_(child.weight.data)
            norm.bias.data.copy_(child.bias.data)
            setattr(model, name, norm)
        else:
            to_group_norm(child, num_groups)
    return model
""",
}

# Variants whose mistake is named after another one that shows first.
NAMED_AS = {
    "built_in_float32_then_converted": "affine_rounded_to_float32",
    "bias_not_copied": "affine_not_copied",
    "affine_off_zeroed": "affine_not_copied",
    "affine_disabled": "affine_not_copied",
    "only_2d_converted": "batchnorm_left",
    "groups_and_group_size_swapped": "wrong_groups",
    "dotted_name_set_on_the_root": "batchnorm_left",
    "copy_at_each_level": "batchnorm_left",
    "layer_norm_for_one_group": "wrong_layer",
}

# Mutation-testing sets (tests/helpers/mutation.py; tests/corpora/student_code/__init__.py
# says what each means).
NON_TEXTBOOK = {
    ("to_group_norm", "affine_rounded_to_float32"),  # precision slip
    ("to_group_norm", "built_in_float32_then_converted"),  # precision slip
    ("to_group_norm", "layer_norm_for_one_group"),  # boundary: num_groups = 1
    ("to_group_norm", "dotted_name_set_on_the_root"),  # setattr with "3.1"
    ("to_group_norm", "copy_at_each_level"),  # changes a copy, not the model in place
    ("to_group_norm", "eps_not_kept"),  # a setting other than the affine values
    ("to_group_norm", "affine_off_crashes"),  # a layer with no weight to copy
    ("to_group_norm", "affine_off_zeroed"),  # a layer with no weight to copy
}
# A crash on an affine=False BatchNorm has no mistake name; its feedback shows the error.
UNNAMED = {("to_group_norm", "affine_off_crashes")}
DESCRIBED = {("to_group_norm", "affine_off_crashes"): r"NoneType"}
# Written before eps was a rule: they also leave the GroupNorm's default eps.
ALSO_NAMED = {
    ("to_group_norm", "built_in_float32_then_converted"): {"eps_not_kept"},
    ("to_group_norm", "layer_norm_for_one_group"): {"eps_not_kept"},
}


# Side-effect mutants (tests/corpora/student_code/side_effects.py): the answer right, the
# caller's inputs or model, or torch's switches, left changed.
TO_GROUP_NORM.update(
    side_effects.variants(
        TO_GROUP_NORM["correct"],
        "to_group_norm",
        grad_mode_left=side_effects.GRAD_MODE_LEFT,
        default_dtype_left=side_effects.DEFAULT_DTYPE_LEFT,
    )
)
NON_TEXTBOOK = NON_TEXTBOOK | {
    ("to_group_norm", "grad_mode_left"),
    ("to_group_norm", "default_dtype_left"),
}
NAMED_AS = {
    **NAMED_AS,
    "grad_mode_left": side_effects.NAMED["grad_mode_left"],
    "default_dtype_left": side_effects.NAMED["default_dtype_left"],
}
