"""One thread for MASPOB's small numeric work: BLAS products and the prompt encoder.

MASPOB's matrices are small (a Fisher inner matrix of at most a few hundred pulls, a surrogate
of a few thousand weights, 20 prompts per role through MiniLM), so more threads do no useful
work: OpenBLAS and torch's OpenMP pool split an operation and then let the idle threads spin,
waiting for the next call, and the spinning counts as the job's CPU (in a budget-600 credit gym
job on two cores the idle BLAS thread burned ~5 s of 25 s, more under load; the encoder took
2.4 s of CPU per role with two threads, 0.9 s with one). The split also depends on how many
cores the machine has, and a few routines (``syrk`` behind ``A @ A.T``, the LU behind ``inv``)
round differently when split: one thread gives the same numbers on every machine (the gym's
parallel workers already ran with ``OMP_NUM_THREADS=1``, so this is what its full run computed).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_controller: list[Any] = []  # the process's threadpoolctl controller, made once (it scans the loaded libraries)


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the block with every BLAS library this process has loaded limited to one thread."""
    if not _controller:
        try:
            # threadpoolctl sees only the libraries loaded when the controller is made: scipy's
            # BLAS (the one numba's np.dot in the compiled trainer calls) is loaded first.
            import scipy.linalg.cython_blas  # noqa: F401
        except ImportError:  # pragma: no cover - scipy comes with the extra's dependencies
            pass
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # pragma: no cover - threadpoolctl comes with the extra's dependencies
            _controller.append(None)
        else:
            _controller.append(ThreadpoolController())
    if _controller[0] is None:
        yield
        return
    with _controller[0].limit(limits=1, user_api="blas"):
        yield


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run the block with torch's intra-op pool at one thread (restored afterwards). Call it in the
    thread that runs the torch work: OpenMP keeps the thread count per calling thread."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
