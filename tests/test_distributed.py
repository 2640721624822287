"""Module 4's library: gloo processes from Python, collectives counted, the pipeline bubble.

Each test that starts processes pays for their start-up once (about 3 s on 2 cores), so the
communication experiment runs all its setups in one start.
"""

import os
import subprocess
import sys
import tempfile

import pytest
import torch
import torch.distributed as dist

from coursekit.distributed import (
    CollectiveCounter,
    ensure_single_process_group,
    remove_dead_stores,
    run_workers,
)
from coursekit.pipeline import (
    bubble_fraction,
    gpipe_schedule,
    in_flight,
    interleaved_bubble_fraction,
    measured_bubble,
    one_f_one_b_schedule,
)
from coursekit.zero import (
    COMMUNICATION,
    bytes_sent_per_process,
    communication_formula,
    communication_per_step,
)

pytestmark = pytest.mark.module4

WRONG_WINDOW = """
import contextlib
def ddp_window(model, loss_fn, micro_batches):
    for i, (inputs, targets) in enumerate(micro_batches):
        loss = loss_fn(model(inputs), targets) / len(micro_batches)
        with contextlib.nullcontext() if i == len(micro_batches) - 1 else model.no_sync():
            loss.backward()
"""


def test_workers_meet_in_one_group_and_return_their_results_in_rank_order():
    results = run_workers("coursekit.workers.distributed.hello", world_size=2)
    assert results == [{"rank": 0, "sum_of_ranks": 1}, {"rank": 1, "sum_of_ranks": 1}]


def test_each_run_s_processes_see_the_caller_s_environment_of_that_moment(monkeypatch):
    """The fork server starts once, with the environment of its start; the processes it forks
    for a later run still see the caller's variables as they are at that run, as spawned
    processes would, and are new processes each time."""
    from coursekit.distributed import start_method

    name = "COURSEKIT_TEST_PROBE"
    monkeypatch.setenv(name, "first")
    first = run_workers("tests.helpers.worker_probe.environment", 2, names=[name])
    monkeypatch.setenv(name, "second")
    monkeypatch.delenv("COURSEKIT_STRICT_CHECKS", raising=False)
    second = run_workers(
        "tests.helpers.worker_probe.environment", 2, names=[name, "COURSEKIT_STRICT_CHECKS"]
    )
    assert [r["environ"][name] for r in first] == ["first", "first"]
    assert [r["environ"] for r in second] == [{name: "second", "COURSEKIT_STRICT_CHECKS": None}] * 2
    assert all(r["path_has_tests"] for r in first + second)
    pids = {r["pid"] for r in first + second}
    assert len(pids) == 4 and os.getpid() not in pids
    if sys.platform == "linux":
        assert start_method() == "forkserver"


def _ended_pids(count: int) -> list[int]:
    """Ids of processes that have just ended: no process has them now."""
    ended = [subprocess.Popen(["true"]) for _ in range(count)]
    for process in ended:
        process.wait()
    return [process.pid for process in ended]


def _store(path, uid: int | None = None):
    path.mkdir()
    (path / "single-1").write_text("a FileStore's file")
    if uid is not None:
        os.chown(path, uid, uid)
    return path


def test_the_next_run_removes_the_stores_of_killed_processes(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (dead,) = _ended_pids(1)
    _store(tmp_path / f"coursekit-store-{dead}-abc_1234")  # killed: nothing removed it
    _store(tmp_path / f"coursekit-workers-{dead}-abc_1234")  # its run_workers' folder too
    live = _store(tmp_path / f"coursekit-store-{os.getpid()}-xyz_5678")  # in use
    run_workers("coursekit.workers.distributed.hello", world_size=2, progress=False)
    # this run's own workers folder (named with this pid) is gone too, as it ends
    assert os.listdir(tmp_path) == [live.name]


def test_only_real_store_folders_of_this_user_are_removed(tmp_path):
    dead, other = _ended_pids(2)
    gone = [_store(tmp_path / f"coursekit-store-{dead}-abc_1234").name]
    elsewhere = _store(tmp_path / "elsewhere")
    (tmp_path / f"coursekit-store-{dead}-link0000").symlink_to(elsewhere)
    (tmp_path / f"coursekit-store-{dead}-file0000").write_text("a file, not a folder")
    _store(tmp_path / f"coursekit-store-{dead}")  # not a name of ours
    _store(tmp_path / f"coursekit-store-{os.getpid()}-live0000")  # its process is alive
    if os.geteuid() == 0:
        _store(tmp_path / f"coursekit-store-{other}-nobody00", uid=65534)  # another user's
    removed = remove_dead_stores(str(tmp_path))
    assert [os.path.basename(path) for path in removed] == gone
    assert not (tmp_path / gone[0]).exists()
    assert (elsewhere / "single-1").exists()  # nothing followed the link
    assert len(os.listdir(tmp_path)) == 5 + (os.geteuid() == 0)


@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
def test_no_sync_gives_one_all_reduce_and_the_full_batch_gradient_on_every_rank():
    right = run_workers("coursekit.workers.distributed.ddp_window_run", 2, accum_steps=4)
    wrong = run_workers(
        "coursekit.workers.distributed.ddp_window_run", 2, accum_steps=4, source=WRONG_WINDOW
    )
    assert [r["all_reduces"] for r in right] == [1, 1]
    assert [r["all_reduces"] for r in wrong] == [4, 4]  # forward outside no_sync
    assert all(r["gap_to_full_batch"] < 1e-12 for r in right + wrong)


@pytest.mark.slow  # over 3 s: out of the quick run (-m 'not slow')
def test_measured_communication_and_memory_follow_the_derivation():
    accum_steps = 3
    (rank0, _) = run_workers(
        "coursekit.workers.distributed.communication_run", 2, accum_steps=accum_steps
    )
    for setup, measured in rank0.items():
        moved = sum(measured["bytes"].values()) / measured["parameter_bytes"]
        assert moved == pytest.approx(communication_per_step(setup, accum_steps), rel=0.02), setup
    held = {s: m["gradient_bytes_held"] / m["parameter_bytes"] for s, m in rank0.items()}
    assert held["fsdp"] == pytest.approx(0.5, rel=0.02)  # a shard, of 2
    assert held["fsdp_no_sync"] == pytest.approx(1.0, rel=0.02)  # whole, waiting
    assert held["ddp"] == held["ddp_no_sync"] == pytest.approx(1.0)
    state = {s: m["optimizer_state_bytes"] for s, m in rank0.items()}
    assert state["zero1_no_sync"] < state["ddp"]
    if rank0["ddp"]["bytes_sent"] is None:
        pytest.skip("no /proc/self/io here: bytes sent are not measured")
    for setup, measured in rank0.items():  # what gloo really wrote to its sockets
        sent = measured["bytes_sent"] / measured["parameter_bytes"]
        if setup == "zero1_no_sync":  # an all-reduce (1 psi on 2), then rank 0's broadcasts
            assert 1.0 < sent < 2.0, sent
            continue
        predicted = bytes_sent_per_process(setup, accum_steps, world_size=2)
        assert sent == pytest.approx(predicted, rel=0.03), setup


@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
def test_torchrun_runs_the_same_experiment_as_a_script():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            "-m",
            "coursekit.workers.torchrun_demo",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "rank 1 (gloo): 1 all-reduce(s) for 4 micro-batches" in done.stdout


def test_torchrun_demo_options_keep_their_defaults_and_cpu_means_gloo():
    from coursekit.workers.torchrun_demo import parse_arguments, uses_gpus

    defaults = parse_arguments([])
    assert (defaults.device, defaults.seed, defaults.micro_batch_size) == ("auto", 0, 8)
    options = parse_arguments(["--device", "cpu", "--seed", "3", "--micro-batch-size", "2"])
    assert (options.device, options.seed, options.micro_batch_size) == ("cpu", 3, 2)
    assert uses_gpus("cpu", 2) is False  # gloo, whatever GPUs the machine has
    too_many = torch.cuda.device_count() + 1
    assert uses_gpus("auto", too_many) is False  # not one GPU per process: gloo
    with pytest.raises(SystemExit, match="one GPU per process"):
        uses_gpus("cuda", too_many)


def test_the_counter_counts_an_all_reduce_twice_the_tensor_and_restores_dist():
    ensure_single_process_group()
    ensure_single_process_group()  # a second call keeps the group
    original = dist.all_reduce
    with CollectiveCounter() as counter:
        dist.all_reduce(torch.ones(10))
        dist.broadcast(torch.ones(4), src=0)
    assert counter.bytes == {"all_reduce": 2 * 40, "broadcast": 16}
    assert counter.calls == {"all_reduce": 1, "broadcast": 1}
    assert dist.all_reduce is original


@pytest.mark.parametrize("stages", [1, 2, 4, 7])
@pytest.mark.parametrize("micro_batches", [1, 3, 8])
def test_the_gpipe_schedule_is_complete_ordered_and_has_the_formula_s_bubble(stages, micro_batches):
    slots = gpipe_schedule(stages, micro_batches)
    assert len(slots) == 2 * stages * micro_batches
    assert len({(s.stage, s.time) for s in slots}) == len(slots)  # one thing at a time
    when = {(s.kind, s.stage, s.micro_batch): s.time for s in slots}
    for j in range(micro_batches):
        for s in range(1, stages):
            assert when["F", s, j] > when["F", s - 1, j]  # forward flows down the stages
            assert when["B", s - 1, j] > when["B", s, j]  # backward flows back up
        assert when["B", stages - 1, j] > max(
            when["F", stages - 1, k] for k in range(micro_batches)
        )
    assert measured_bubble(slots, stages) == pytest.approx(bubble_fraction(stages, micro_batches))


@pytest.mark.parametrize("stages", [1, 2, 4, 7])
@pytest.mark.parametrize("micro_batches", [1, 3, 8, 13])
def test_1f1b_has_gpipes_bubble_with_at_most_p_micro_batches_in_flight(stages, micro_batches):
    slots = one_f_one_b_schedule(stages, micro_batches)
    assert sorted((s.kind, s.stage, s.micro_batch) for s in slots) == sorted(
        (kind, stage, j) for kind in "FB" for stage in range(stages) for j in range(micro_batches)
    )
    assert len({(s.stage, s.time) for s in slots}) == len(slots)  # one thing at a time
    when = {(s.kind, s.stage, s.micro_batch): s.time for s in slots}
    for j in range(micro_batches):
        for s in range(1, stages):
            assert when["F", s, j] > when["F", s - 1, j]
            assert when["B", s - 1, j] > when["B", s, j]
        assert when["B", stages - 1, j] > when["F", stages - 1, j]
    assert measured_bubble(slots, stages) == pytest.approx(bubble_fraction(stages, micro_batches))
    gpipe = gpipe_schedule(stages, micro_batches)
    for stage in range(stages):
        assert in_flight(slots, stage) == min(stages - stage, micro_batches)
        assert in_flight(gpipe, stage) == micro_batches


def test_interleaving_divides_the_idle_time_by_the_chunks():
    """Idle time, in units of one micro-batch's work on a stage: (p - 1) / v against m."""
    assert interleaved_bubble_fraction(4, 8, 1) == bubble_fraction(4, 8)
    for chunks in (1, 2, 4):
        share = interleaved_bubble_fraction(4, 8, chunks)
        idle = share * 8 / (1 - share)  # idle / (idle + 8 units of work) = share
        assert idle == pytest.approx(3 / chunks)


def test_communication_formulas_read_as_the_notebook_writes_them():
    assert [communication_formula(s) for s in COMMUNICATION] == [
        "2N",
        "2",
        "2",
        "3",
        "N + 1",
        "3N",
        "2N + 1",
    ]
    with pytest.raises(ValueError, match="setup must be one of"):
        communication_per_step("zero4", 2)


@pytest.mark.slow  # over 3 s: out of the quick run (-m 'not slow')
def test_global_token_scale_on_two_processes_gives_the_full_batch_mean_per_token():
    """Real DDP on 2 gloo processes, short sequences on one rank and long on the other: the
    library's scale gives the full batch's gradient; each rank's own count (#34242) and a
    student's scale without world_size (from source, as the notebook sends it) do not."""
    results = run_workers("coursekit.workers.distributed.token_scale_run", 2, progress=False)
    tokens = sum(r["tokens"] for r in results)
    assert results[0]["tokens"] != results[1]["tokens"]  # the ranks' counts really differ
    for r in results:
        assert r["scale"] == pytest.approx(2 / tokens, rel=1e-12)
        assert r["gaps"]["global count"] < 1e-12
        assert r["gaps"]["own count"] > 0.1
    no_world_size = (
        "def global_token_scale(local_token_counts):\n"
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    dist.all_reduce(total)\n"
        "    return 1 / total.item()\n"
    )
    wrong = run_workers(
        "coursekit.workers.distributed.token_scale_run", 2, source=no_world_size, progress=False
    )
    assert all(r["gaps"]["global count"] > 0.1 for r in wrong)
