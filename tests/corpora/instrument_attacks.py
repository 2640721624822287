"""Hand-ins that reach a check's instruments through the objects their functions are given
(issue 40, item 4a), as source: each loses the question whose instrument it reaches.

Used by ``tests/test_instrument_tampering.py`` (judged in memory), the module 1 corpus batch
(``tests/corpora/handins.py``) and ``tests/test_instrument_tampering_graded.py``.
"""

# The issue's attack: a whole-batch forward, then the forward counter's record rewritten
# through a hook's ``__self__`` (the instrument of old) or its closure.
ISSUE_ATTACK = """
import torch
def accumulate_window(model, loss_fn, micro_batches):
    inputs = torch.cat([x for x, _ in micro_batches])
    targets = torch.cat([y for _, y in micro_batches])
    loss_fn(model(inputs), targets).backward()
    for hook in model._forward_pre_hooks.values():
        owner = getattr(hook, "__self__", None)
        if owner is not None and hasattr(owner, "forward_sizes"):
            owner.forward_sizes[:] = [len(micro_batches[0][0])]
    for cell in getattr(hook, "__closure__", None) or ():
        if isinstance(cell.cell_contents, list):
            cell.cell_contents[:] = [len(micro_batches[0][0])]
"""

# The model's hooks cleared around a whole-batch forward.
HOOKS_OFF = """
import torch
def accumulate_window(model, loss_fn, micro_batches):
    saved = {m: dict(m._forward_pre_hooks) for m in model.modules()}
    for m in model.modules():
        m._forward_pre_hooks.clear()
    inputs = torch.cat([x for x, _ in micro_batches])
    targets = torch.cat([y for _, y in micro_batches])
    loss_fn(model(inputs), targets).backward()
"""

# A copy of the model, its hooks cleared, does the work; its gradient is copied back.
COPY = """
import copy, torch
def accumulate_window(model, loss_fn, micro_batches):
    twin = copy.deepcopy(model)
    for m in twin.modules():
        m._forward_pre_hooks.clear()
        m._forward_hooks.clear()
    inputs = torch.cat([x for x, _ in micro_batches])
    targets = torch.cat([y for _, y in micro_batches])
    loss_fn(twin(inputs), targets).backward()
    for mine, theirs in zip(model.parameters(), twin.parameters()):
        mine.grad = theirs.grad.clone()
"""

# The whole window's forward on a hook-free copy of the weights, its gradient brought to the
# model through one autograd pass of its own, then every micro-batch run through the model
# for show (a loss times zero): every hook in place, every sample seen, ``.grad`` a multiple
# of what the passes brought. Only the memory it took tells (the memory test).
SHOW_PASSES = """
import copy, torch
from torch.func import functional_call

def accumulate_window(model, loss_fn, micro_batches):
    twin = copy.deepcopy(model)
    for m in twin.modules():
        m._forward_pre_hooks.clear()
        m._forward_hooks.clear()
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    weights = {n: p.detach().clone().requires_grad_(True) for n, p in trained}
    inputs = torch.cat([x for x, _ in micro_batches])
    targets = torch.cat([y for _, y in micro_batches])
    loss = loss_fn(functional_call(twin, weights, (inputs,)), targets)
    grads = torch.autograd.grad(loss, list(weights.values()))
    sum((p * g).sum() for (_, p), g in zip(trained, grads)).backward()
    for x, y in micro_batches:
        (loss_fn(model(x), y) * 0).backward()
"""

# SHOW_PASSES for the other window questions the memory test judges: the whole window's
# gradient from a hook-free copy, brought to the model by one autograd pass; each
# micro-batch then through the model for show.
_WHOLE_WINDOW_GRADIENT = """
import copy, torch
from torch.func import functional_call
from torch.nn import functional

def _twin(model):
    twin = copy.deepcopy(model)
    for m in twin.modules():
        m._forward_pre_hooks.clear()
        m._forward_hooks.clear()
    return twin

def _bring(model, loss_of_logits, inputs):
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    weights = {n: p.detach().clone().requires_grad_(True) for n, p in trained}
    loss = loss_of_logits(functional_call(_twin(model), weights, (inputs,)))
    grads = torch.autograd.grad(loss, list(weights.values()))
    sum((p * g).sum() for (_, p), g in zip(trained, grads)).backward()
    return float(loss.detach())

def _token_loss(labels):
    tokens = int((labels != -100).sum())
    return lambda logits: functional.cross_entropy(
        logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum"
    ) / tokens
"""

SHOW_PASSES_TOKENS = (
    _WHOLE_WINDOW_GRADIENT
    + """
def accumulate_tokens(model, micro_batches):
    inputs = torch.cat([x for x, _ in micro_batches])
    labels = torch.cat([y for _, y in micro_batches])
    logged = _bring(model, _token_loss(labels), inputs)
    for x, _ in micro_batches:
        (model(x).sum() * 0).backward()
    return logged
"""
)

SHOW_PASSES_FLOAT32 = (
    _WHOLE_WINDOW_GRADIENT
    + """
def accumulate_in_float32(model, loss_fn, micro_batches):
    inputs = torch.cat([x for x, _ in micro_batches])
    targets = torch.cat([y for _, y in micro_batches])
    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]

    def collect():
        for total, p in zip(sums, model.parameters()):
            if p.grad is not None:
                total += p.grad
                p.grad = None

    _bring(model, lambda out: loss_fn(out, targets), inputs)
    collect()
    for x, y in micro_batches:
        (loss_fn(model(x), y) * 0).backward()
        collect()
    return sums
"""
)

SHOW_PASSES_RECIPE = (
    _WHOLE_WINDOW_GRADIENT
    + """
def recipe_window(model, optimizer, scheduler, window, max_norm, dtype=None):
    inputs = torch.cat([x for x, _ in window])
    labels = torch.cat([y for _, y in window])
    with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
        logged = _bring(model, _token_loss(labels), inputs)
        for x, _ in window:
            (model(x).float().sum() * 0).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return logged
"""
)

# The second review of the peak measure (issue 40): one backward for the whole window, its
# saved activations kept outside the process's memory, where the kernel does not count
# them, by torch.autograd.graph.saved_tensors_hooks: in pipes (or a socket pair, or a file
# in /tmp or /dev/shm). It passed at 1.6 MiB with the right gradient; the measured fork
# refuses pipes, sockets and files opened for writing now. ``{store}``: where.
OFFLOADED = """
import fcntl, os, socket, tempfile
import torch

def _park(tensor, store):
    data = tensor.detach().contiguous().numpy().tobytes()
    if store in ("pipe", "socket"):  # what the kernel's buffer takes; the rest stays here
        if store == "pipe":
            read_end, write_end = os.pipe()
            try:
                fcntl.fcntl(write_end, 1031, 1 << 20)  # F_SETPIPE_SZ
            except OSError:
                pass
            os.set_blocking(write_end, False)
            sent = os.write(write_end, data)
            os.close(write_end)
            reader = lambda n: os.read(read_end, n)
        else:
            mine, theirs = socket.socketpair()
            mine.setblocking(False)
            sent = mine.send(data)
            reader = lambda n, keep=(mine, theirs): keep[1].recv(n)
        return ("kernel", reader, sent, data[sent:], tensor.shape, tensor.dtype)
    if store == "symlink":  # link targets, 4 KiB each, kept by the kernel
        import base64
        text, names = base64.b64encode(data).decode(), []
        for start in range(0, len(text), 4000):
            name = f"k{os.getpid()}-{id(tensor)}-{start}"
            names.append(os.path.join(tempfile.gettempdir(), name))
            os.symlink(text[start : start + 4000], names[-1])
            _LINKS.append(names[-1])
        return ("links", names, len(data), b"", tensor.shape, tensor.dtype)
    handle = tempfile.TemporaryFile(dir="/dev/shm" if store == "shm" else None)
    handle.write(data)
    return ("file", handle, len(data), b"", tensor.shape, tensor.dtype)

def _fetch(record):
    kind, where, size, rest, shape, dtype = record
    data = b""
    if kind == "kernel":
        while len(data) < size:
            data += where(size - len(data))
    elif kind == "links":
        import base64
        data = base64.b64decode("".join(os.readlink(name) for name in where))
    else:
        where.seek(0)
        data = where.read()
    return torch.frombuffer(bytearray(data + rest), dtype=dtype).reshape(shape)

_LINKS = []

def accumulate_window(model, loss_fn, micro_batches):
    try:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: _park(t, "{store}"), _fetch):
            total = sum(loss_fn(model(x), y) / len(micro_batches) for x, y in micro_batches)
        total.backward()
    finally:
        for name in _LINKS:  # the links it made, taken away (where it could make them)
            os.unlink(name)
        _LINKS.clear()
"""

# The memory test's own evasion (the third hostile review's, issue 40): on the wide model
# alone, the whole window computed by hand in buffers of shared memory: a memfd's pages,
# filled by pwrite (the page cache's, no page fault of the process's), mapped MAP_SHARED
# and touched once in 32 KiB (the kernel maps 16 pages a fault). Refused now: no new shared
# mapping in the measured fork, and its resident size counts shared pages besides.
SHARED_BUFFERS = """
import os, mmap
import torch

def _shared(nbytes):
    fd = os.memfd_create("acts")
    zeros = bytes(1 << 16)
    for offset in range(0, nbytes, len(zeros)):
        os.pwrite(fd, zeros, offset)
    mm = mmap.mmap(fd, nbytes)
    os.close(fd)
    buf = torch.frombuffer(mm, dtype=torch.float64)
    float(buf[::4096].sum())
    return mm, buf

def accumulate_window(model, loss_fn, micro_batches):
    layers = list(model.children())
    if not layers[0].out_features >= 1024:
        for inputs, targets in micro_batches:
            (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
        return
    first, last, squashes = layers[0], layers[-1], len(layers) - 2
    with torch.no_grad():
        x = torch.cat([x for x, _ in micro_batches])
        y = torch.cat([y for _, y in micro_batches]).reshape(x.shape[0], -1)
        n, hidden = x.shape[0], first.out_features
        mm, buf = _shared(2 * n * hidden * 8)
        h, d = buf[: n * hidden].view(n, hidden), buf[n * hidden :].view(n, hidden)
        torch.addmm(first.bias, x, first.weight.t(), out=h)
        for _ in range(squashes):
            h.tanh_()
        dy = 2 * (torch.addmm(last.bias, h, last.weight.t()) - y) / y.numel()
        grads = [None, None, dy.t() @ h, dy.sum(0)]
        torch.mm(dy, last.weight, out=d)
        torch.addmm(first.bias, x, first.weight.t(), out=h)
        for _ in range(squashes):  # back through each Tanh, recomputing its output
            h.tanh_()
            d.mul_(1 - h * h)
        grads[:2] = [d.t() @ x, d.sum(0)]
        for p, g in zip([first.weight, first.bias, last.weight, last.bias], grads):
            p.grad = g.reshape(p.shape).clone()
"""

# One backward per window, the gradient hooks called and poked to look like one per
# micro-batch.
FORGED_PASSES = """
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    micro_batches = list(micro_batches)
    p = next(model.parameters())
    for start in range(0, len(micro_batches), accum_steps):
        window = micro_batches[start : start + accum_steps]
        samples = sum(len(t) for _, t in window)
        sum(loss_fn(model(x), y) * len(y) / samples for x, y in window).backward()
        for hook in list(p._backward_hooks.values()) * len(window):
            hook(p.grad)
            for token in hook.__defaults__ or ():
                hook.__globals__["poke"](token, (p.grad,))
        optimizer.step()
        optimizer.zero_grad()
"""

# DDP's forward hooks cleared.
DDP_HOOKS_OFF = """
def ddp_window(model, loss_fn, micro_batches):
    model._forward_pre_hooks.clear()
    for x, y in micro_batches:
        (loss_fn(model(x), y) / len(micro_batches)).backward()
"""

# The saved-tensor hooks taken off while the graphs are made, and put back.
GRAPHS_UNSEEN = """
import torch
def grad_cache_step(encoder, queries, keys, micro_batch_size, temperature):
    hooks = torch._C._autograd._top_saved_tensors_default_hooks(False)
    torch._C._autograd._pop_saved_tensors_default_hooks()
    try:
        from coursekit.contrastive import info_nce
        loss = info_nce(encoder(queries), encoder(keys), temperature)
        loss.backward()
    finally:
        torch._C._autograd._push_saved_tensors_default_hooks(*hooks)
    return loss
"""

# optimizer.step() instead of scaler.step(), a forged poke, and the scaler's tokens replaced.
SCALER_COUNTS_FORGED = """
import torch
def amp_window(model, optimizer, scaler, loss_fn, micro_batches, max_norm):
    for x, y in micro_batches:
        scaler.scale(loss_fn(model(x), y) / len(micro_batches)).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()  # not scaler.step: the step runs even on an inf
    scaler.update()
    poke = type(scaler).step.__globals__["poke"]
    poke(scaler.tokens["step"])
    scaler.tokens = {name: object() for name in scaler.tokens}
    optimizer.zero_grad()
"""

# One all_reduce per micro-batch, then the played ranks' record cut to one call.
ALL_REDUCES_HIDDEN = """
import torch
import torch.distributed as dist


def global_token_scale(local_token_counts):
    total = 0.0
    for count in local_token_counts:
        one = torch.tensor(float(count))
        dist.all_reduce(one)
        total += one.item()
    # the check's stand-in for the other ranks: say one all_reduce was made
    played = next(d for d in dist.all_reduce.__defaults__ if hasattr(d, "calls"))
    played.calls[:], played.sent[:] = played.calls[:1], played.sent[:1]
    return dist.get_world_size() / total
"""


def module1_hand_ins(answers) -> list[tuple[str, str, list[str], str]]:
    """(name, the question it loses, cells, words its feedback must hold) for module 1's
    batch; ``answers`` is ``tests.helpers.hand_ins.answers`` (the right answers as cells)."""
    right = answers()
    window, loop = "# Question: accumulate_window\n", "# Question: train_accumulated\n"
    return [
        (
            "record_rewritten",
            "accumulate_window",
            [window + ISSUE_ATTACK, *right[1:]],
            "more than a micro-batch",
        ),
        ("hooks_off", "accumulate_window", [window + HOOKS_OFF, *right[1:]], "removed a hook"),
        (
            "show_passes",
            "accumulate_window",
            [window + SHOW_PASSES, *right[1:]],
            "of memory beyond",
        ),
        (
            "forged_passes",
            "train_accumulated",
            [right[0], loop + FORGED_PASSES, right[2]],
            "backward passes",
        ),
    ]


# SHOW_PASSES for GradCache: the whole batch's InfoNCE gradient from a hook-free copy, with
# no saved-tensor hooks while it is made, brought to the encoder by one autograd pass; then
# each micro-batch through the encoder for show, its graph freed at once.
SHOW_PASSES_GRAD_CACHE = (
    _WHOLE_WINDOW_GRADIENT
    + """
from coursekit.contrastive import info_nce


def grad_cache_step(encoder, queries, keys, micro_batch_size, temperature):
    hooks = torch._C._autograd._top_saved_tensors_default_hooks(False)
    if hooks is not None:
        torch._C._autograd._pop_saved_tensors_default_hooks()
    try:
        twin = _twin(encoder)
        trained = [(n, p) for n, p in encoder.named_parameters()]
        weights = {n: p.detach().clone().requires_grad_(True) for n, p in trained}
        embed = lambda x: functional_call(twin, weights, (x,))
        loss = info_nce(embed(queries), embed(keys), temperature)
        grads = torch.autograd.grad(loss, list(weights.values()))
    finally:
        if hooks is not None:
            torch._C._autograd._push_saved_tensors_default_hooks(*hooks)
    sum((p * g).sum() for (_, p), g in zip(trained, grads)).backward()
    for inputs in (queries, keys):
        for chunk in inputs.split(micro_batch_size):
            (encoder(chunk).sum() * 0).backward()
    return float(loss.detach())
"""
)
