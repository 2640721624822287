"""Code that runs in each process of a multi-process demonstration, one module per topic.

Why a package of its own: ``torch.multiprocessing`` spawns fresh interpreters, which can only
run a function they can import by name (a function defined in a notebook cannot be pickled
for them). Notebooks pass these by name to :func:`coursekit.distributed.run_workers`, e.g.
``run_workers("coursekit.workers.distributed.ddp_window_run", 2)``; ``torchrun_demo`` is the
same experiment as a script for ``torchrun``. Their earlier names
(``coursekit.distributed_workers`` ...) still import: see :mod:`coursekit.moved`.
"""
