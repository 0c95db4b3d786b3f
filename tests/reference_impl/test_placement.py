"""CPU placement: parsing, and pinning real processes (every thread) to their CPUs."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from reference_impl.placement import Placement, describe, pin

CPUS = sorted(os.sched_getaffinity(0))
needs_two = pytest.mark.skipif(len(CPUS) < 2, reason="needs 2 usable CPUs")


@needs_two
def test_pinned_puts_http_on_the_last_cpu_and_the_rest_on_the_others():
    placement = Placement.parse("pinned")
    assert placement.http_cpus == (CPUS[-1],) and placement.other_cpus == tuple(CPUS[:-1])
    assert "HTTP process on CPU" in describe(placement)


@needs_two
def test_explicit_lists_parse():
    placement = Placement.parse(f"{CPUS[1]}:{CPUS[0]}")
    assert placement.http_cpus == (CPUS[1],) and placement.other_cpus == (CPUS[0],)


@pytest.mark.parametrize("spec", ["1", "x:0", "0:0", ":0", "0:", "99999:0"])
def test_bad_specs_are_refused(spec):
    with pytest.raises(ValueError):
        Placement.parse(spec)


def test_shared_means_no_pinning():
    assert Placement.parse("shared") is None
    assert "no pinning" in describe(None)


@needs_two
def test_pin_moves_every_thread_and_client_preexec_pins_a_child():
    code = "import threading, time; [threading.Thread(target=time.sleep, args=(30,)).start() for _ in range(3)]; time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        placement = Placement((CPUS[-1],), (CPUS[0],))
        for _ in range(600):  # until its 3 threads exist (at most ~60 s on a busy machine)
            if len(os.listdir(f"/proc/{proc.pid}/task")) >= 4:
                break
            time.sleep(0.1)
        pin(proc.pid, placement.http_cpus)
        for tid in os.listdir(f"/proc/{proc.pid}/task"):
            assert os.sched_getaffinity(int(tid)) == {CPUS[-1]}
        out = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                             capture_output=True, text=True, preexec_fn=placement.client_preexec())
        assert out.stdout.strip() == str([CPUS[0]])
    finally:
        proc.kill()
        proc.wait()
