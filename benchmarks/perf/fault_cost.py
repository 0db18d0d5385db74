"""What one page fault costs here: the unit in which a process-per-test grader pays per test.

    .venv/bin/python benchmarks/perf/fault_cost.py [--pages N] [--rounds R]

A forked test process starts with every page of its zygote shared; each page it writes is then
copied on its first write, and each page the zygote writes afterwards faults again (after the
test process has gone, only to be made writable, without a copy). CPython 3.11 writes a reference
count into every object it touches, so a short test writes a few hundred such pages
(``grading_speed.py --breakdown`` counts them). This prints one JSON line with the microseconds
per fault of each kind, measured on a private anonymous mapping of N pages written one byte per
page from Python (the second pass over the same pages, which faults no more, is subtracted):

* ``copy_us``: a child writes pages it shares with its live parent (copy-on-write);
* ``reuse_us``: a parent writes its pages after its only child has exited (no copy);
* ``fresh_us``: first writes to never-touched memory (a zeroed page each);
* ``populate_copy_us``: the child's copies made by one ``madvise(MADV_POPULATE_WRITE)`` over the
  whole range instead (Linux 5.14+; null where refused): the kernel's share of ``copy_us``, the
  rest being the trap into the kernel and back, once per page;

and for each the faults counted per page (``*_faults_per_page``: about 1 shows that every page
faulted once and that the figure is per fault). Median of R rounds, each in fresh processes.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import resource
import statistics
import sys
import time

PAGE = mmap.PAGESIZE
_MADV_POPULATE_WRITE = 23


def _mapping(pages: int, touched: bool) -> mmap.mmap:
    area = mmap.mmap(-1, pages * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        area.madvise(mmap.MADV_NOHUGEPAGE)  # one huge page would fault once for 512 pages
    if touched:
        for i in range(pages):
            area[i * PAGE] = 1
    return area


def _measured(action) -> tuple[object, float, int]:
    """``action()``'s result, and the seconds and minor faults (of this process) it took."""
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    began = time.perf_counter()
    result = action()
    seconds = time.perf_counter() - began
    return result, seconds, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults


def _write_pass(area: mmap.mmap, pages: int, value: int) -> tuple[float, int]:
    """(seconds, minor faults) to write one byte to each page."""
    def write() -> None:
        for i in range(pages):
            area[i * PAGE] = value
    _, seconds, faults = _measured(write)
    return seconds, faults


def _per_fault(area: mmap.mmap, pages: int, extra_s: float = 0.0, extra_faults: int = 0) -> tuple[float, float]:
    """(microseconds per page, faults per page) of a first pass, less a second (fault-free) one."""
    first_s, first_faults = _write_pass(area, pages, 2)
    second_s, _ = _write_pass(area, pages, 3)
    return (1e6 * (extra_s + first_s - second_s) / pages, (extra_faults + first_faults) / pages)


def _populate(area: mmap.mmap, pages: int) -> tuple[float, int] | None:
    """(seconds, faults) of MADV_POPULATE_WRITE over the whole mapping; None where refused."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    address = ctypes.addressof(ctypes.c_char.from_buffer(area))
    status, seconds, faults = _measured(lambda: libc.madvise(address, pages * PAGE, _MADV_POPULATE_WRITE))
    return None if status != 0 else (seconds, faults)


def _in_child(measure) -> object:
    """``measure()`` in a forked child (a fresh copy-on-write state); its JSON result."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_end)
            os.write(write_end, json.dumps(measure()).encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("the measuring child failed")
    return json.loads(b"".join(chunks))


def _one_round(pages: int) -> dict[str, tuple[float, float] | None]:
    shared = _mapping(pages, touched=True)
    copy = _in_child(lambda: _per_fault(shared, pages))

    def populated():
        done = _populate(shared, pages)
        return None if done is None else _per_fault(shared, pages, *done)

    populate = _in_child(populated)

    def reused():
        own = _mapping(pages, touched=True)
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)  # the pages are ours alone again, but still write-protected
        return _per_fault(own, pages)

    reuse = _in_child(reused)
    fresh = _in_child(lambda: _per_fault(_mapping(pages, touched=False), pages))
    shared.close()
    return {"copy": copy, "reuse": reuse, "fresh": fresh, "populate_copy": populate}


def fault_costs(pages: int = 2000, rounds: int = 3) -> dict[str, float | None]:
    """Microseconds per fault of each kind and faults per page (median of ``rounds``)."""
    if pages < 1 or rounds < 1:
        raise ValueError("pages and rounds must be positive")
    measured = [_one_round(pages) for _ in range(rounds)]
    result: dict[str, float | None] = {"pages": pages, "rounds": rounds}
    for kind in ("copy", "reuse", "fresh", "populate_copy"):
        values = [m[kind] for m in measured if m[kind] is not None]
        result[f"{kind}_us"] = round(statistics.median(v[0] for v in values), 3) if values else None
        result[f"{kind}_faults_per_page"] = round(statistics.median(v[1] for v in values), 3) if values else None
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    try:
        print(json.dumps(fault_costs(args.pages, args.rounds)))
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
