"""CPU tests of the Python package: import, version, errors, configuration and sizing, the CPU
reference through Python, communicators (threads and a Python object), the facade's signatures
and its NotImplementedError for unsupported arguments. No GPU needed; torch is optional."""

import inspect
import pathlib
import re
import threading

import numpy as np
import pytest

import switchyard
from switchyard import reference as ref

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_version_matches_header():
    header = (ROOT / "include/switchyard/version.hpp").read_text()
    expected = re.search(r'kVersionString = "([0-9.]+)"', header).group(1)
    assert switchyard.__version__ == expected
    assert ".".join(map(str, switchyard.version_info)) == expected


def test_error_hierarchy():
    assert issubclass(switchyard.InvalidArgument, ValueError)
    assert issubclass(switchyard.InvalidArgument, switchyard.Error)
    assert issubclass(switchyard.TimeoutError, TimeoutError)
    assert issubclass(switchyard.TimeoutError, switchyard.Error)
    assert issubclass(switchyard.Error, RuntimeError)
    for name in ("CudaError", "UnsupportedError", "CompileError", "PoisonedError", "PeerFailedError"):
        assert issubclass(getattr(switchyard, name), switchyard.Error)


def test_invalid_argument_message_from_cpp():
    problem = ref.Problem(num_ranks=2, num_experts=8, hidden=128, topk=2, max_tokens_per_rank=4)
    with pytest.raises(switchyard.InvalidArgument) as info:
        ref.validate_routing(problem, 1, 2, np.array([0, 1, 2, 8], dtype=np.int64))
    # The C++ message, unchanged: names the rank and the bad id.
    assert "8" in str(info.value) and "rank 1" in str(info.value)
    with pytest.raises(ValueError):
        ref.validate_problem(ref.Problem(num_ranks=3, num_experts=8, hidden=128, topk=2, max_tokens_per_rank=4))


def test_buffer_config_fields_and_errors():
    config = switchyard.BufferConfig(max_tokens_per_rank=128, enable_low_latency=True, timeout_seconds=5.0)
    assert config.max_tokens_per_rank == 128 and config.enable_low_latency and config.timeout_seconds == 5.0
    assert "max_tokens_per_rank=128" in repr(config)
    assert not config.ht_mask_unresponsive_ranks
    assert switchyard.BufferConfig(ht_mask_unresponsive_ranks=True).ht_mask_unresponsive_ranks
    with pytest.raises(switchyard.InvalidArgument, match="no field 'bogus'"):
        switchyard.BufferConfig(bogus=1)


def test_buffer_size_hint():
    # DESIGN.md §9: LL for 128 tokens, hidden 7168, 256 experts, EP8 <= 64 MiB.
    ll = dict(enable_high_throughput=False, enable_low_latency=True, ll_max_tokens_per_rank=128,
              max_hidden=7168, max_experts=256, max_topk=8)
    size = switchyard.buffer_size_hint(num_ranks=8, **ll)
    assert 0 < size <= 64 << 20
    parts = switchyard.buffer_size_breakdown(switchyard.BufferConfig(**ll), 8)
    assert parts["total"] == size and parts["ht_dispatch"] == 0 and parts["ll"] > 0
    ht_small = switchyard.buffer_size_hint(num_ranks=2, max_tokens_per_rank=1024)
    ht_large = switchyard.buffer_size_hint(num_ranks=2, max_tokens_per_rank=4096)
    assert ht_large > ht_small
    with pytest.raises(switchyard.InvalidArgument):
        switchyard.buffer_size_hint(num_ranks=0)


def _random_inputs(problem, seed=0, weights=False):
    rng = np.random.default_rng(seed)
    inputs = []
    for s in range(problem.num_ranks):
        tokens = problem.max_tokens_per_rank - s
        x = ref.float_to_bf16(rng.standard_normal(tokens * problem.hidden).astype(np.float32))
        idx = np.stack([rng.choice(problem.num_experts, problem.topk, replace=False) for _ in range(tokens)])
        idx[0, -1] = -1  # an empty slot
        fields = dict(num_tokens=tokens, x_bf16=x, topk_idx=idx.astype(np.int64))
        if weights:
            fields["topk_weights"] = rng.random((tokens, problem.topk), dtype=np.float32)
        inputs.append(ref.DispatchInput(**fields))
    return inputs


def test_reference_round_trip_through_python():
    problem = ref.Problem(num_ranks=3, num_experts=12, hidden=256, topk=3, max_tokens_per_rank=9)
    inputs = _random_inputs(problem)
    result = ref.dispatch(problem, inputs)
    L = problem.local_experts()
    for q, out in enumerate(result.outputs):
        rows = out.x_bf16.reshape(-1, problem.hidden)
        assert rows.shape[0] == out.num_rows
        for row, (s, t, _) in enumerate(out.sources):
            # Each row is a bit-exact copy of its source token, and the source reaches q.
            np.testing.assert_array_equal(rows[row], inputs[s].x_bf16.reshape(-1, problem.hidden)[t])
            assert any(0 <= e and e // L == q for e in inputs[s].topk_idx.reshape(-1, problem.topk)[t])
    combined = ref.combine(result.routing, [ref.CombineInput(y=o.x_bf16) for o in result.outputs])
    for s, out in enumerate(combined):
        x = ref.bf16_to_float(inputs[s].x_bf16).reshape(-1, problem.hidden)
        idx = inputs[s].topk_idx.reshape(-1, problem.topk)
        reached = np.array([len({e // L for e in row if e >= 0}) for row in idx], dtype=np.float32)
        np.testing.assert_array_equal(out.out, ref.float_to_bf16((x * reached[:, None]).reshape(-1)))


def test_reference_cached_dispatch_and_layouts():
    problem = ref.Problem(num_ranks=2, num_experts=8, hidden=128, topk=2, max_tokens_per_rank=6)
    inputs = _random_inputs(problem, seed=3, weights=True)
    options = ref.DispatchOptions(layout=ref.RecvLayout.EXPERT_CONTIGUOUS, expert_alignment=4, zero_padding=True)
    first = ref.dispatch(problem, inputs, options)
    again = ref.cached_dispatch(first.routing, inputs)
    for a, b in zip(first.outputs, again):
        np.testing.assert_array_equal(a.x_bf16, b.x_bf16)
        assert np.all(a.expert_offsets[:-1] % 4 == 0)
    masked = ref.dispatch(problem, inputs, ref.DispatchOptions(layout=ref.RecvLayout.EXPERT_MASKED))
    assert masked.outputs[0].num_rows == problem.local_experts() * 2 * 6


def test_reference_fp8_quantization_formula():
    rng = np.random.default_rng(1)
    x = ref.float_to_bf16(rng.standard_normal(256).astype(np.float32) * 3)
    q, scales = ref.quantize_token(x, ref.ScaleFormat.FLOAT32)
    xf = ref.bf16_to_float(x)
    for block in range(2):
        amax = max(np.abs(xf[block * 128:(block + 1) * 128]).max(), np.float32(1e-4))
        assert scales.view(np.float32)[block] == np.float32(amax) / np.float32(448)
    back = ref.e4m3_to_float(q) * np.repeat(scales.view(np.float32), 128)
    np.testing.assert_allclose(back, xf, rtol=0.07, atol=1e-3)


def test_numpy_and_torch_cpu_arrays_accepted():
    bits = ref.float_to_bf16(np.array([1.0, -2.5], dtype=np.float32))
    assert list(ref.bf16_to_float(bits)) == [1.0, -2.5]
    assert list(ref.bf16_to_float([0x3F80])) == [1.0]
    with pytest.raises(switchyard.InvalidArgument):
        ref.DispatchInput(topk_idx=np.zeros(3, dtype=np.float32))
    torch = pytest.importorskip("torch", reason="torch is not installed")
    t = torch.tensor([1.0, 3.0], dtype=torch.bfloat16)
    assert list(ref.bf16_to_float(t)) == [1.0, 3.0]
    assert switchyard.detect_framework(t) == switchyard.Framework.TORCH


def test_detect_framework():
    assert switchyard.detect_framework(np.zeros(2)) == switchyard.Framework.NUMPY
    assert switchyard.detect_framework(None) == switchyard.Framework.NONE


def test_in_process_communicators_release_the_gil():
    comms = switchyard.make_in_process_communicators(3)
    out = [None] * 3

    def run(rank):
        out[rank] = comms[rank].allgather(bytes([rank]) * 4)
        comms[rank].barrier()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert out == [[bytes([r]) * 4 for r in range(3)]] * 3


class ThreadGroup:
    """Ranks as threads: allgather through a shared list and a threading.Barrier."""

    def __init__(self, size):
        self.size, self.slots, self.wall = size, [None] * size, threading.Barrier(size)

    def member(self, rank):
        group = self

        class Member:
            def __init__(self):
                self.rank, self.size = rank, group.size

            def allgather(self, data):
                group.slots[rank] = data
                group.wall.wait()
                gathered = list(group.slots)
                group.wall.wait()
                return gathered

            def barrier(self):
                group.wall.wait()

        return Member()


def test_python_communicator_bridge_with_thread_ranks():
    group = ThreadGroup(4)
    out = [None] * 4

    def run(rank):
        comm = switchyard.python_communicator(group.member(rank), rank, 4, "threads")
        out[rank] = (comm.rank(), comm.size(), comm.allgather(bytes([rank, 7])))
        comm.barrier()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for rank in range(4):
        assert out[rank] == (rank, 4, [bytes([r, 7]) for r in range(4)])


def test_python_communicator_errors_become_switchyard_errors():
    class Failing:
        rank, size = 0, 1

        def allgather(self, data):
            raise TimeoutError("gloo: timed out waiting for peers")

        def barrier(self):
            raise RuntimeError("peer gone")

    comm = switchyard.python_communicator(Failing(), 0, 1)
    with pytest.raises(switchyard.TimeoutError) as info:
        comm.allgather(b"x")
    assert info.value.rank == 0 and info.value.peer == -1 and "all_gather" in info.value.phase
    assert "timed out waiting for peers" in str(info.value)
    with pytest.raises(switchyard.Error, match="peer gone"):
        comm.barrier()
    with pytest.raises(switchyard.InvalidArgument):
        switchyard.python_communicator(object(), 0, 1)


def test_buffer_group_validation():
    with pytest.raises(switchyard.InvalidArgument, match="allgather"):
        switchyard.Buffer(object())


def test_stubs_cover_the_native_module():
    stub = (ROOT / "python/switchyard/_switchyard.pyi").read_text()
    native = switchyard._switchyard
    for name in dir(native):
        if name.startswith("_"):
            continue
        assert re.search(rf"\b{name}\b", stub), f"{name} missing from _switchyard.pyi (python/generate_stubs.sh)"
    for method in ("dispatch", "cached_dispatch", "combine", "ll_dispatch", "ll_combine", "ll_load_kernels",
                   "get_dispatch_layout", "reset", "synchronize", "set_op_tracing", "op_timeline"):
        assert f"def {method}(" in stub


def test_op_timeline_kinds():
    # Every traced op of the C++ API (include/switchyard/op_timeline.hpp), and the Buffer's methods.
    kinds = [k for k in dir(switchyard.OpTimelineKind) if k.isupper()]
    assert sorted(kinds) == sorted(["HT_DISPATCH", "HT_COMBINE", "LL_DISPATCH_SEND", "LL_DISPATCH_RECEIVE",
                                    "LL_DISPATCH", "LL_COMBINE_SEND", "LL_COMBINE_RECEIVE", "LL_COMBINE"])
    assert callable(switchyard.Buffer.set_op_tracing) and callable(switchyard.Buffer.op_timeline)
    for field in ("op", "marks", "us"):
        assert hasattr(switchyard.OpTimeline, field)


# --- The DeepEP facade: names, argument order, NotImplementedError ------------------------------
# Argument lists of the calls in shared/reference/python-users.md (DeepEP V1), in order.
FACADE_SIGNATURES = {
    "__init__": ["self", "group", "num_nvl_bytes", "num_rdma_bytes", "low_latency_mode", "num_qps_per_rank",
                 "allow_nvlink_for_low_latency_mode", "allow_mnnvl", "use_fabric", "explicitly_destroy",
                 "enable_shrink"],
    "get_dispatch_layout": ["self", "topk_idx", "num_experts", "previous_event", "async_finish",
                            "allocate_on_comm_stream"],
    "dispatch": ["self", "x", "handle", "num_tokens_per_rank", "num_tokens_per_rdma_rank", "is_token_in_rank",
                 "num_tokens_per_expert", "topk_idx", "topk_weights", "expert_alignment", "num_worst_tokens",
                 "config", "previous_event", "async_finish", "allocate_on_comm_stream"],
    "combine": ["self", "x", "handle", "topk_weights", "bias", "config", "previous_event", "async_finish",
                "allocate_on_comm_stream"],
    "low_latency_dispatch": ["self", "x", "topk_idx", "num_max_dispatch_tokens_per_rank", "num_experts",
                             "cumulative_local_expert_recv_stats", "dispatch_wait_recv_cost_stats", "use_fp8",
                             "round_scale", "use_ue8m0", "async_finish", "return_recv_hook"],
    "low_latency_combine": ["self", "x", "topk_idx", "topk_weights", "handle", "use_logfmt", "zero_copy",
                            "async_finish", "return_recv_hook", "out", "combine_wait_recv_cost_stats"],
    "get_next_low_latency_combine_buffer": ["self", "handle"],
    "clean_low_latency_buffer": ["self", "num_max_dispatch_tokens_per_rank", "hidden", "num_experts"],
    "low_latency_update_mask_buffer": ["self", "rank_to_mask", "mask"],
    "low_latency_query_mask_buffer": ["self", "mask_status"],
    "low_latency_clean_mask_buffer": ["self"],
    "get_low_latency_rdma_size_hint": ["num_max_dispatch_tokens_per_rank", "hidden", "num_ranks", "num_experts"],
    "get_dispatch_config": ["num_ranks"],
    "get_combine_config": ["num_ranks"],
    "set_num_sms": ["new_num_sms"],
    "capture": [],
    "destroy": ["self"],
}


@pytest.mark.parametrize("method", sorted(FACADE_SIGNATURES))
def test_facade_signatures(method):
    from switchyard.compat import deep_ep

    params = list(inspect.signature(getattr(deep_ep.Buffer, method)).parameters.values())
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    expected = FACADE_SIGNATURES[method]
    assert positional[:len(expected)] == expected


def test_facade_config_and_event_overlap():
    from switchyard.compat import deep_ep

    config = deep_ep.Config(24, 6, 256, 6, 128)
    assert config.num_sms == 24 and config.get_rdma_buffer_size_hint(7168 * 2, 8) == 0
    assert config.get_nvl_buffer_size_hint(7168 * 2, 8) > 0
    assert deep_ep.Buffer.get_low_latency_rdma_size_hint(128, 7168, 8, 256) <= 64 << 20
    with deep_ep.EventOverlap(None, (1, 2)) as event:
        event.current_stream_wait()
    deep_ep.Buffer.set_num_sms(16)
    assert deep_ep.Buffer.get_dispatch_config(8).num_sms == 16


@pytest.mark.parametrize("kwargs, name", [
    (dict(allow_mnnvl=True), "allow_mnnvl"),
    (dict(use_fabric=True), "use_fabric"),
    (dict(allow_nvlink_for_low_latency_mode=False), "allow_nvlink_for_low_latency_mode"),
    (dict(comm=object()), "comm"),
])
def test_facade_unsupported_constructor_arguments(kwargs, name):
    from switchyard.compat import deep_ep

    with pytest.raises(NotImplementedError, match=name):
        deep_ep.Buffer(None, **kwargs)


def test_facade_unsupported_op_arguments():
    from switchyard.compat import deep_ep

    buffer = deep_ep.Buffer.__new__(deep_ep.Buffer)  # no group needed to reach the argument checks
    with pytest.raises(NotImplementedError, match="use_logfmt"):
        buffer.low_latency_combine(None, None, None, None, use_logfmt=True)
    with pytest.raises(NotImplementedError, match="use_nvfp4"):
        buffer.low_latency_dispatch(None, None, 128, 256, use_nvfp4=True)
    with pytest.raises(NotImplementedError, match="round_scale"):
        buffer.low_latency_dispatch(None, None, 128, 256, round_scale=True, use_ue8m0=False)
    with pytest.raises(NotImplementedError, match="'some_fork_only_flag'"):
        buffer.low_latency_combine(None, None, None, None, some_fork_only_flag=1)


def test_autograd_module_imports_with_torch():
    pytest.importorskip("torch", reason="torch is not installed (the autograd functions need it)")
    from switchyard import autograd

    assert hasattr(autograd.DispatchFunction, "backward") and hasattr(autograd.CombineFunction, "backward")


def test_buffer_without_gpu_raises_a_switchyard_error():
    import ctypes.util

    if ctypes.util.find_library("cuda"):
        pytest.skip("a CUDA driver is present: the GPU tests cover buffer creation")
    comm = switchyard.make_in_process_communicators(1)[0]
    with pytest.raises(switchyard.UnsupportedError, match="^switchyard: no GPU"):
        switchyard.Buffer(comm, max_tokens_per_rank=16, max_hidden=128, max_experts=8, max_topk=2)


def test_reference_uses_the_api_enums():
    assert ref.RecvLayout is switchyard.RecvLayout and ref.ScaleFormat is switchyard.ScaleFormat
    assert not hasattr(ref, "Layout") and not hasattr(ref, "DispatchResult")
    problem = ref.Problem(num_ranks=2, num_experts=4, hidden=128, topk=2, max_tokens_per_rank=4)
    with pytest.raises(switchyard.InvalidArgument, match="rank 2 is outside"):
        ref.validate_routing(problem, 2, 1, np.array([0, 1], dtype=np.int64))


def test_planning_without_a_gpu():
    config = switchyard.BufferConfig(max_tokens_per_rank=16, max_hidden=256, max_topk=4, max_experts=8,
                                     enable_low_latency=True, ll_max_tokens_per_rank=16)
    parts = switchyard.buffer_size_breakdown(config, 2)
    assert parts["device_total"] == parts["total"] + parts["output_pool_reserve"] + parts["routing_scratch"]
    ht = switchyard.ht_output_shapes(config, 2, num_tokens=16, hidden=256, topk=4, num_experts=8, has_weights=True,
                                     counts=switchyard.CountMode.DEVICE)
    assert ht["num_recv_rows"] == 32 and not ht["exact"]
    assert ht["recv_x"][0] == "bf16" and ht["recv_x"][1] == (32, 256)
    assert ht["combine_y"] == ("bf16", (32, 256), (256, 1))
    exact = switchyard.ht_output_shapes(config, 2, num_tokens=16, hidden=256, topk=4, num_experts=8,
                                        host_num_recv_rows=5)
    assert exact["exact"] and exact["recv_x"][1] == (5, 256)
    ll = switchyard.ll_output_shapes(config, 2, num_tokens=16, hidden=256, topk=4, num_experts=8)
    assert ll["recv_x"] == ("fp8_e4m3", (4, 32, 256), (8192, 256, 1))
    assert ll["recv_scales"] == ("fp32", (4, 32, 2), (64, 1, 32))
    with pytest.raises(switchyard.InvalidArgument, match="num_tokens 17"):
        switchyard.ll_output_shapes(config, 2, num_tokens=17, hidden=256, topk=4, num_experts=8)


def test_communicators_shrink_to_survivors():
    comms = switchyard.make_in_process_communicators(3)
    assert comms[0].peer_status(2) == switchyard.PeerStatus.ALIVE and comms[0].gone_ranks() == []
    assert switchyard.shrunk_rank(2, [1]) == 1 and switchyard.shrunk_rank(1, [1]) == -1
    results = {}

    def survivor(old_rank):
        shrunk = comms[old_rank].shrink([1], 10.0)
        results[old_rank] = (shrunk.rank(), shrunk.size(), shrunk.allgather(bytes([old_rank]), 10.0))

    threads = [threading.Thread(target=survivor, args=(r,)) for r in (0, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results[0] == (0, 2, [bytes([0]), bytes([2])]) and results[2] == (1, 2, [bytes([0]), bytes([2])])


def test_extension_keeps_the_cxx_runtime_private():
    """The extension exports no symbol of the C++ runtime's own classes (locale, streams). Where a
    toolchain links libstdc++ statically, exported copies would be interposed by the libstdc++ that
    torch loads first, and the first std::ostringstream would crash (python/CMakeLists.txt)."""
    import shutil
    import subprocess

    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed: the extension's exported symbols cannot be listed")
    extension = switchyard._switchyard.__file__
    listed = subprocess.run([nm, "-D", "--defined-only", extension], capture_output=True, text=True, check=True)
    runtime = [line.split()[-1] for line in listed.stdout.splitlines()
               if re.search(r" _ZNSt6locale| _ZNSo| _ZNSi| _ZNSt8ios_base| _ZNSt7codecvt| _ZSt4cout", line)]
    assert not runtime, f"{extension} exports C++ runtime symbols: {runtime[:5]}"
