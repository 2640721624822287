"""A batch's places and spares (coursekit/grading/sandbox/lanes.py). What a hand-in whose
process ends after its last answer gets: tests/test_grading_harness.py."""

import threading
import time

from coursekit.grading.sandbox.lanes import Lanes


def test_no_more_hand_ins_than_workers_hold_a_place_at_once():
    lanes, inside, most = Lanes(2), [0], [0]
    lock = threading.Lock()

    def hand_in():
        place = lanes.enter(lambda: False)
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.02)
        with lock:
            inside[0] -= 1
        place.leave()

    threads = [threading.Thread(target=hand_in) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert most[0] == 2


def test_a_place_left_twice_is_given_back_once():
    lanes = Lanes(1)
    place = lanes.enter(lambda: False)
    place.leave()
    place.leave()  # (the driver leaves at the last answer, and again when the attempt ends)
    lanes.enter(lambda: False)
    assert not lanes._free.acquire(blocking=False)  # one place, taken: not two


def test_a_thread_waiting_for_a_place_stops_with_the_batch():
    lanes, stopped = Lanes(1), threading.Event()
    lanes.enter(lambda: False)
    outcome = []

    def waiting():
        try:
            lanes.enter(stopped.is_set)
        except SystemExit as error:
            outcome.append(str(error))

    thread = threading.Thread(target=waiting)
    thread.start()
    stopped.set()
    thread.join(timeout=30)
    assert outcome == ["grading was stopped"]


def test_the_pool_keeps_one_spare_per_worker_forks_under_way_counted_oldest_first():
    lanes = Lanes(2)
    assert lanes.reserve_spare() and lanes.reserve_spare()
    assert not lanes.reserve_spare()  # two forks under way fill it: no third is begun
    lanes.cancel_spare()  # (a fork that failed gives its place back)
    assert lanes.reserve_spare()
    lanes.put_spare("a")
    lanes.put_spare("b")
    assert not lanes.reserve_spare()
    assert lanes.take_spare() == "a"
    assert lanes.reserve_spare()  # room again
    lanes.cancel_spare()
    assert lanes.take_all_spares() == ["b"] and lanes.take_spare() is None


def test_the_spares_threads_fork_at_once_never_overfill_the_pool():
    lanes, granted = Lanes(1), []

    def fork():
        granted.append(lanes.reserve_spare())

    threads = [threading.Thread(target=fork) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert granted.count(True) == 1


class _Parent:
    """A warm parent's process, alive until ``dead`` is set."""

    pid, dead = 1, False

    def poll(self):
        return 0 if self.dead else None


def _accounting():
    """A WarmParent's bookkeeping of runners in use alone: its process a stand-in."""
    from coursekit.grading.sandbox.reaping import Child
    from coursekit.grading.sandbox.warm_parent import WarmParent

    warm = object.__new__(WarmParent)
    warm._lock, warm._live, warm._in_use = threading.Lock(), {}, set()
    warm._uses, warm._died_forking, warm.generation = 0, set(), 0
    warm.process = _Parent()

    def runner(pid):
        child = object.__new__(Child)
        child.pid, child._pidfd, child.generation = pid, None, 0
        child.use, child.alone, child.sharing = 0, False, set()
        warm._live[pid] = child
        warm._put_in_use(child)
        return child

    return warm, runner


def test_the_next_hand_in_is_charged_with_a_parents_death_only_once_the_last_one_is_closed():
    """With the last hand-in finishing as the next one starts (lanes.py), a death of the
    warm parent while both are alive is charged to neither (either could have caused it);
    once the last one is closed, the next one runs alone, and a death is its own."""
    warm, runner = _accounting()
    finishing = runner(101)
    starting = runner(102)
    assert finishing.alone and not starting.alone
    warm.forget(finishing)  # the last one closed, the parent alive
    assert starting.alone
    warm.process.dead = True
    assert warm.died_during(starting)


def test_a_death_while_both_are_alive_is_charged_to_neither():
    warm, runner = _accounting()
    finishing, starting = runner(101), runner(102)
    warm.process.dead = True  # died before the last one was closed
    warm.forget(finishing)
    assert not starting.alone and not warm.died_during(starting)


def test_a_runner_put_in_use_after_the_last_one_closed_shares_the_parent_again():
    warm, runner = _accounting()
    finishing, starting = runner(101), runner(102)
    warm.forget(finishing)
    runner(103)  # a third hand-in started: the death could be its doing too
    warm.process.dead = True
    assert not warm.died_during(starting)
