"""Running a C kernel of our own (loaded with ctypes, which releases the GIL) on several threads: the work split
into contiguous ranges, one a thread, on a pool kept per thread count. Used by DupMAE's fused OT max-pool
(``--compile kernels``' BERT layers split their work on PyTorch's OpenMP threads instead, in C)."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait


def split(items: int, threads: int) -> list[tuple[int, int]]:
    """Contiguous ranges covering ``items``, one a thread, as even as whole items allow."""
    threads = max(1, min(threads, items))
    bounds = [items * part // threads for part in range(threads + 1)]
    return [(begin, end) for begin, end in zip(bounds, bounds[1:]) if end > begin]


def run_split(call, items: int, threads: int) -> list:
    """``call(begin, end)`` over :func:`split`'s ranges, on the pool when there is more than one; their results,
    in order."""
    ranges = split(items, threads)
    if len(ranges) == 1:
        return [call(*ranges[0])]
    return run_all(pool(len(ranges)), [lambda span=span: call(*span) for span in ranges])


def run_all(executor: ThreadPoolExecutor, calls: list) -> list:
    """Run ``calls`` on ``executor`` and return their results once every one has ended, even when the wait is
    interrupted (Ctrl-C): the kernels write through raw pointers into tensors the caller would free on the way
    out."""
    futures = [executor.submit(call) for call in calls]
    try:
        return [future.result() for future in futures]
    finally:
        wait(futures)


_POOL_LOCK = threading.Lock()
_POOLS: dict[int, ThreadPoolExecutor] = {}


def pool(threads: int) -> ThreadPoolExecutor:
    """A pool of ``threads`` workers, started on first use."""
    with _POOL_LOCK:
        if threads not in _POOLS:
            _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="c-kernel")
        return _POOLS[threads]


def _forget_pools_in_child() -> None:
    """After fork: the parent's workers are not in the child, yet an inherited executor counts them idle and would
    never run a call; the lock may have been held by a thread that is not there either."""
    global _POOL_LOCK
    _POOL_LOCK = threading.Lock()
    _POOLS.clear()


os.register_at_fork(after_in_child=_forget_pools_in_child)
