"""GPU tests of the Python package: 2 and 4 rank processes on one GPU (torch.multiprocessing,
bootstrap through a gloo process group). Each op against the CPU reference, CUDA-graph capture
and replay of LL dispatch + combine, autograd backward against the dual op, the DeepEP facade
driven by a script written against DeepEP's API. Skipped with a printed reason without a GPU.
"""

import os
import tempfile

import pytest

pytestmark = pytest.mark.gpu


def _skip_reason():
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine"
    return None


REASON = _skip_reason()
if REASON:
    print(f"tests/python/test_gpu.py: skipped: {REASON}")


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
@pytest.mark.parametrize("num_ranks", [2, 4])
@pytest.mark.parametrize("scenario", ["size_hint", "ht", "ll", "graph", "autograd", "facade"])
def test_gpu(scenario, num_ranks):
    import torch.multiprocessing as mp

    from gpu_workers import worker

    # Every rank process shares the GPU: each needs its own hardware queues (DESIGN.md §4 rule 1),
    # set before CUDA starts in the children (they inherit the environment).
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")
    with tempfile.TemporaryDirectory() as tmp:
        context = mp.start_processes(worker, args=(num_ranks, scenario, os.path.join(tmp, "rendezvous")),
                                     nprocs=num_ranks, join=False, start_method="spawn")
        deadline = 300
        waited = 0
        while not context.join(timeout=5):
            waited += 5
            if waited > deadline:
                for process in context.processes:
                    process.kill()
                pytest.fail(f"{scenario} with {num_ranks} ranks did not finish in {deadline} s")
