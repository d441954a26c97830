"""The compiled parts' private calls, given what would make them write or read outside their
buffers: sizes whose product wraps int64 (a record batch's count read from a file), a width
whose conversion runs Python code that changes the slots after they were checked (its
``__index__``), a destination over the slots. Each call is refused (IndexError, ValueError)
or left to another path (-2), never a write outside a buffer: each runs in a process of its
own, so that a crash fails the test and not the suite."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def run(code: str, helpers: str = "") -> str:
    """``code`` run by this Python in a process of its own → what it printed (a crash fails)."""
    prelude = "import numpy as np\nfrom snapshot_cli import _decode, _gather, _ragged\n"
    res = subprocess.run([sys.executable, "-c", prelude + helpers + textwrap.dedent(code)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, (res.returncode, res.stderr[-2000:])  # (-11: SIGSEGV)
    return res.stdout.strip()


CHANGES_SLOTS = """
class W:  # a width whose conversion moves a slot far outside dest, once the slots are taken
    def __init__(self, slots, width):
        self.slots, self.width = slots, width
    def __index__(self):
        self.slots[1] = 1 << 24
        return self.width
def attempt(call):
    try:
        print("returned", call())
    except (IndexError, ValueError) as err:
        print(type(err).__name__, err)
"""


@pytest.mark.parametrize("codec", [-1, 0, 1])
@pytest.mark.parametrize("start", [0, 2**52])
def test_a_record_count_whose_bytes_wrap_is_left_to_arrow(codec: int, start: int) -> None:
    """2**53 - 1 records of 2,048 bytes: 2**64 - 2,048 bytes, -2,048 in int64, which a
    buffer of 64 bytes passed for. Stored plain (codec -1, or a compressed buffer's -1
    prefix): not placed here (-2), nothing read or written."""
    out = run(f"""
        rows, start = 2**53 - 1, {start}
        values = (b"" if {codec} == -1 else (-1).to_bytes(8, "little", signed=True)) + bytes(64)
        dest = np.zeros(4096, np.uint8)
        slots = np.array([1], np.int64)
        job = (values, {codec}, [(0, len(values), dest, 2048)], slots, start, start + 1, rows, -1)
        print(_decode.decode(*job), _decode.decode_many([job]), int(dest.any()))
    """)
    assert out == "-2 [-2] 0"


def test_decode_checks_the_slots_after_converting_every_width() -> None:
    out = run(
        helpers=CHANGES_SLOTS,
        code="""
        message = bytes(range(64)) * 2
        slots = np.array([0, 1], np.int64)
        dest = np.zeros(16, np.uint8)
        attempt(lambda: _decode.decode(message, -1, [(0, 64, dest, W(slots, 8))], slots, 0, 2,
                                       2, -1))
        slots[1] = 1
        other = np.array([0, 1], np.int64)  # a later job's width moves an earlier job's slot
        jobs = [(message, -1, [(0, 64, dest, 8)], slots, 0, 2, 2, -1),
                (message, -1, [(0, 64, np.zeros(16, np.uint8), W(slots, 8))], other, 0, 2, 2, -1)]
        attempt(lambda: _decode.decode_many(jobs))
        print(int(dest.any()))
    """,
    )
    assert out.splitlines() == [
        "IndexError column 0: slot 16777216 of 2",
        "IndexError column 0: slot 16777216 of 2",
        "0",
    ]


def test_decode_refuses_a_dest_over_any_jobs_slots() -> None:
    """Record 0 written to row 1 would write over slots[1] (then read again for record 1):
    refused as the scatter refuses it, in decode_many across jobs too."""
    out = run(
        helpers=CHANGES_SLOTS,
        code="""
        buf = np.zeros(4, np.int64)
        slots = buf[:2]
        slots[:] = [1, 0]
        dest = buf.view(np.uint8)
        message = (1 << 44).to_bytes(8, "little") * 8
        attempt(lambda: _decode.decode(message, -1, [(0, 64, dest, 8)], slots, 0, 2, 2, -1))
        mine = np.zeros(64, np.uint8)
        jobs = [(message, -1, [(0, 64, mine, 8)], slots, 0, 2, 2, -1),  # job 1 writes over these
                (message, -1, [(0, 64, dest, 8)], np.array([0, 1], np.int64), 0, 2, 2, -1)]
        attempt(lambda: _decode.decode_many(jobs))
        attempt(lambda: _decode.decode_many(jobs[::-1]))
        print(buf.tolist(), int(mine.any()))
    """,
    )
    assert out.splitlines() == [
        "ValueError column 0: dest overlaps slots",
        "ValueError job 1, column 0: dest overlaps the slots of a job",
        "ValueError job 0, column 0: dest overlaps the slots of a job",
        "[1, 0, 0, 0] 0",
    ]


def test_decode_many_of_separate_buffers_is_done() -> None:
    """The overlap check keeps what is not over the slots: many jobs, one dest, slot views
    of one array (a window's), each record where it goes."""
    out = run("""
        rows, width = 8, 4
        values = bytes(range(rows * width))
        slot_of = np.arange(64, dtype=np.int64)[::-1].copy()
        dest = np.zeros((64, width), np.uint8)
        jobs = [(values, -1, [(0, len(values), dest, width)], slot_of[k * rows : (k + 1) * rows],
                 0, rows, rows, -1) for k in range(8)]
        print(_decode.decode_many(jobs), dest[::-1].reshape(8, -1).tolist() == [list(values)] * 8)
    """)
    assert out == "[-1, -1, -1, -1, -1, -1, -1, -1] True"


def test_scatter_checks_the_slots_after_converting_every_width() -> None:
    out = run(
        helpers=CHANGES_SLOTS,
        code="""
        slots = np.array([0, 1], np.int64)
        dest = np.zeros(16, np.uint8)
        src = np.arange(16, dtype=np.uint8)
        attempt(lambda: _gather.scatter(slots, [(dest, W(slots, 8), src)]))
        slots[1] = 1
        other = np.zeros(16, np.uint8)  # the second column's width moves the slot
        columns = [(dest, 8, np.ones(16, np.uint8)), (other, W(slots, 8), np.ones(16, np.uint8))]
        attempt(lambda: _gather.scatter(slots, columns))
        print(int(dest.any() or other.any()))
    """,
    )
    assert out.splitlines() == [
        "IndexError column 0: slot 16777216 of 2",
        "IndexError column 0: slot 16777216 of 2",
        "0",
    ]


def test_ragged_bounds_that_pass_int64_are_refused() -> None:
    """Offsets of a damaged int64 column (Arrow's validation keeps them from a loader): two
    records of 2**63 - 1 values each add up past int64."""
    out = run("""
        offsets = np.array([0, 2**63 - 1], np.int64)
        rows = np.array([0, 0], np.int64)
        try:
            print(_ragged.bounds(offsets, rows, np.zeros(3, np.int64)))
        except ValueError as err:
            print("ValueError", err)
        print(_ragged.bounds(offsets, rows[:1], np.zeros(2, np.int64)))
    """)
    assert out.splitlines() == [
        "ValueError the 2 records taken hold more than 2**63 - 1 values: damaged offsets "
        "(record 0 spans 9223372036854775807)",
        "9223372036854775807",
    ]


def test_ragged_calls_refuse_an_out_over_what_they_read() -> None:
    """take_values with ``out`` over its own rows: the first copy rewrote rows[1], then read
    unchecked (SIGSEGV); bounds with ``out_bounds`` over rows alike."""
    out = run("""
        def attempt(call):
            try:
                print("returned", call())
            except ValueError as err:
                print("ValueError", err)
        buf = np.zeros(3, np.int64)
        rows, out = buf[0:2], buf[1:3].view(np.uint8)
        offsets, values = np.array([0, 1], np.int64), np.array([1 << 40], np.int64)
        attempt(lambda: _ragged.take_values(offsets, values.view(np.uint8), 8, rows, out))
        both = np.zeros(4, np.int64)
        attempt(lambda: _ragged.bounds(np.array([0, 1, 2], np.int64), both[:2], both[1:4]))
    """)
    assert out.splitlines() == [
        "ValueError out must not overlap rows, offsets or values",
        "ValueError out_bounds must not overlap rows or offsets",
    ]
