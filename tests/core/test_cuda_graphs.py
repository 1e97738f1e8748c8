"""Captured decode graphs, exercised on the CPU through a fake graph-capable accelerator.

The fake (:class:`~anna_core.testing.fake_graphs.FakeGraphAccelerator`) "captures" by running the step once under a
dispatch mode that fails on any host read of a device value (``.item()``, ``bool(tensor)``, ``torch.equal``) and
"replays" by running the same step again over the same static buffers, which is what a real graph does with its
kernels. The engine with graphs must then produce exactly the tokens of the eager engine, for batches that hit
padded buckets and shrink as requests finish, greedy and seeded sampling alike.
"""

from __future__ import annotations

import pytest
import torch
from anna_core.device import Accelerator
from anna_core.engine.cuda_graphs import DecodeGraphs, bucket_sizes
from anna_core.engine.sampler import Sampler, graph_safe, param_rows, sample_no_sync
from anna_core.engine.sampling_params import SamplingParams
from anna_core.errors import AnnaError
from anna_core.testing.engine_run import run_to_completion

from tests.core._graph_engine import fake_graph_engine, generate_tokens
from tests.core._tiny_family import write_tiny_config


def test_bucket_sizes():
    assert bucket_sizes(1) == [1]
    assert bucket_sizes(7) == [1, 2, 4, 7]
    assert bucket_sizes(64) == [1, 2, 4, 8, 16, 32, 64]
    with pytest.raises(AnnaError):
        bucket_sizes(0)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_config(tmp_path_factory.mktemp("tinyq"))


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_graph_engine_matches_eager_engine(tiny_dir, prefix_caching):
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in (5, 9, 3)]
    params = [SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True) for n in (7, 4, 10)]
    sampled = [SamplingParams(max_tokens=6, temperature=0.8, top_k=20, top_p=0.9, min_p=0.05, seed=s,
                              ignore_eos=True) for s in (1, 2, 3)]
    eager, _ = fake_graph_engine(tiny_dir, graphs=False, prefix_caching=prefix_caching)
    ref = generate_tokens(eager, prompts, params)
    ref_sampled = generate_tokens(eager, prompts, sampled)
    graph, accel = fake_graph_engine(tiny_dir, graphs=True, prefix_caching=prefix_caching)
    assert graph.runner.graphs is not None and graph.runner.graphs.buckets == [1, 2, 4, 5]
    assert accel.captures == 16  # 4 buckets x (greedy, sample, sample_plain, logits)
    assert generate_tokens(graph, prompts, params) == ref
    modes = []
    run = graph.runner.graphs.run
    graph.runner.graphs.run = lambda *a, **kw: modes.append(a[4]) or run(*a, **kw)
    assert generate_tokens(graph, prompts, sampled) == ref_sampled
    assert set(modes) == {"sample"}
    # OpenAI's defaults (temperature 1, no top-k / top-p / min-p): the captured sampler that sorts nothing
    plain = [SamplingParams(max_tokens=6, temperature=t, seed=s, ignore_eos=True) for s, t in ((1, 1.0), (2, 0.7), (3, 1.3))]
    modes.clear()
    assert generate_tokens(graph, prompts, plain) == generate_tokens(eager, prompts, plain)
    assert set(modes) == {"sample_plain"}
    assert graph.runner.num_graph_steps > 0 and accel.replays == graph.runner.num_graph_steps
    assert all(len(t) == p.max_tokens for t, p in zip(ref, params))


def test_a_step_that_cannot_be_compiled_is_captured_uncompiled(tiny_dir, monkeypatch, caplog):
    """torch.compile failing on the step (dynamo cannot trace a kernel launcher: seen on an H200 with
    torch 2.11) must not leave the runner eager: the uncompiled step is captured instead."""
    compiled = []

    def failing_compile(fn, **kwargs):
        compiled.append(kwargs["mode"])

        def step(*args, **kw):
            raise AssertionError("Can't construct an AttrSource without a valid base source")

        return step

    monkeypatch.setattr(torch, "compile", failing_compile)
    prompts, params = [[5, 9, 3]], [SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True)]
    with caplog.at_level("WARNING"):
        engine, accel = fake_graph_engine(tiny_dir, graphs=True, compile_mode="default")
    assert compiled and compiled[0] == "default"
    assert "capturing the uncompiled step" in caplog.text and "running eagerly" not in caplog.text
    assert engine.runner.graphs is not None and accel.captures == 16
    eager, _ = fake_graph_engine(tiny_dir, graphs=False)
    assert generate_tokens(engine, prompts, params) == generate_tokens(eager, prompts, params)
    assert accel.replays > 0


def test_compile_failing_after_some_captures_leaves_only_uncompiled_graphs(tiny_dir, monkeypatch):
    """The compiled step fails at bucket 2, after the larger buckets were captured compiled: the runner
    keeps none of that attempt's graphs and serves from a fresh, uncompiled capture."""

    def compile_failing_at_two_rows(fn, **kwargs):
        def step(batch):
            if batch.input_ids.shape[0] == 2:
                raise RuntimeError("dynamo failed on this bucket")
            return fn(batch)

        return step

    monkeypatch.setattr(torch, "compile", compile_failing_at_two_rows)
    engine, accel = fake_graph_engine(tiny_dir, graphs=True, compile_mode="default")
    graphs = engine.runner.graphs
    assert graphs is not None and graphs._forward == graphs._forward_logits  # the uncompiled step
    assert accel.captures == 8 + 16  # buckets 5 and 4 (x 4 modes) in the failed attempt, then all 16
    prompts = [[5, 9, 3], [1, 2]]
    params = [SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True)] * 2
    eager, _ = fake_graph_engine(tiny_dir, graphs=False)
    assert generate_tokens(engine, prompts, params) == generate_tokens(eager, prompts, params)


def _generate_with_logprobs(engine, prompts, params):
    """Tokens and every streamed logprob of each request (the final output carries only its last delta)."""
    logprobs: dict[str, list] = {}
    outs = run_to_completion(engine, prompts, params,
                             on_output=lambda o: logprobs.setdefault(o.request_id, []).extend(o.logprobs))
    return [o.token_ids for o in outs], [logprobs.get(o.request_id, []) for o in outs]


def test_requests_the_captured_sampler_cannot_serve_replay_the_logits_graph(tiny_dir):
    """Penalties, min_tokens over a stop id, logit bias and logprobs run the eager sampler, but on the
    logits of the captured "logits" graph: every decode step replays a graph, only the prefill is
    eager, and tokens and logprobs equal the eager engine's."""
    prompts = [[1, 2, 3], [7, 8, 9, 10, 11], [4, 5]]
    params = [SamplingParams(max_tokens=5, temperature=0.0, repetition_penalty=1.3, presence_penalty=0.5,
                             ignore_eos=True),
              SamplingParams(max_tokens=5, temperature=0.7, seed=3, min_tokens=4, stop_token_ids=[5],
                             logit_bias={17: 5.0}, ignore_eos=True),
              SamplingParams(max_tokens=5, temperature=0.0, logprobs=2, ignore_eos=True)]
    eager, _ = fake_graph_engine(tiny_dir, graphs=False)
    want_tokens, want_logprobs = _generate_with_logprobs(eager, prompts, params)
    engine, accel = fake_graph_engine(tiny_dir, graphs=True)
    got_tokens, got_logprobs = _generate_with_logprobs(engine, prompts, params)
    assert got_tokens == want_tokens and all(len(t) == 5 for t in got_tokens)
    assert [len(lp) for lp in got_logprobs] == [0, 0, 5]
    for got, want in zip(got_logprobs[2], want_logprobs[2]):
        assert got.token_id == want.token_id and [t for t, _ in got.top] == [t for t, _ in want.top]
        assert got.logprob == pytest.approx(want.logprob, abs=1e-5)
    runner = engine.runner
    assert runner.num_graph_steps == accel.replays > 0  # every decode step: a graph replay
    assert runner.num_eager_steps == eager.runner.num_eager_steps - accel.replays  # the prefills only


def test_padding_rows_touch_only_scratch_entries(tiny_dir):
    engine, _ = fake_graph_engine(tiny_dir, graphs=True, max_seqs=4)
    caches = engine.caches
    before = [t.clone() for t in caches.state_caches[0].recurrent] + [k.clone() for k, _ in caches.kv_pairs()]
    graphs: DecodeGraphs = engine.runner.graphs
    # one real sequence in bucket 1 would not pad; use 3 rows in bucket 4 at slots 0..2
    graphs.run([5, 6, 7], [0, 0, 0], [[[0], [1], [2]]] * len(graphs.groups), [0, 1, 2], "greedy")  # per group
    after = [t for t in caches.state_caches[0].recurrent] + [k for k, _ in caches.kv_pairs()]
    for b, a in zip(before, after):
        assert torch.equal(b[3:-1], a[3:-1])  # untouched: slots / blocks 3 .. scratch-1
    assert not torch.equal(before[0][0], after[0][0])  # a real slot was updated


def test_sample_no_sync_matches_sampler():
    from anna_core.engine.request import Request

    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 50, generator=gen) * 3
    ps = [SamplingParams(temperature=0.0), SamplingParams(temperature=0.7, top_k=5, seed=1),
          SamplingParams(temperature=1.2, top_p=0.8, seed=2), SamplingParams(temperature=1.0, min_p=0.1, seed=3)]
    reqs = [Request(f"r{i}", [1, 2], p, seed=p.seed or 0) for i, p in enumerate(ps)]
    assert graph_safe(reqs)
    floats, ints = param_rows(reqs, 50)
    f, k = torch.tensor(floats), torch.tensor(ints)
    got = sample_no_sync(logits, f[:, 0], k[:, 0], f[:, 1], f[:, 2], k[:, 1], k[:, 2])
    assert got.tolist() == Sampler()(logits, reqs).tolist()
    assert got[0].item() == logits[0].argmax().item()
    assert not graph_safe([Request("x", [1], SamplingParams(presence_penalty=0.5))])


def test_time_replay_touches_only_scratch_entries(tiny_dir):
    engine, accel = fake_graph_engine(tiny_dir, graphs=True, max_seqs=4)
    caches = engine.caches
    before = [t.clone() for t in caches.state_caches[0].recurrent] + [k.clone() for k, _ in caches.kv_pairs()]
    replays = accel.replays
    ms = engine.runner.graphs.time_replay(4, iters=3)
    assert ms > 0 and accel.replays == replays + 4  # one warm + three timed
    after = [t for t in caches.state_caches[0].recurrent] + [k for k, _ in caches.kv_pairs()]
    for b, a in zip(before, after):
        assert torch.equal(b[:-1], a[:-1])  # every real slot / block untouched
    with pytest.raises(AnnaError, match="no captured decode graph"):
        engine.runner.graphs.time_replay(3)


def test_staging_uploads_the_first_rows_of_row_fields_and_every_other_field():
    from anna_core.engine.graph_staging import Staging

    st = Staging(Accelerator(torch.device("cpu")), [("tables", torch.int32, (4, 3)), ("ids", torch.int64, (4,))],
                 row_fields=["tables"])
    st.h["tables"][:] = 7
    st.h["ids"][:] = [1, 2, 3, 4]
    st.upload(rows=2)
    assert st.d["ids"].tolist() == [1, 2, 3, 4]
    assert st.d["tables"].tolist() == [[7] * 3, [7] * 3, [0] * 3, [0] * 3]  # rows 2.. not copied
    st.upload()
    assert st.d["tables"].tolist() == [[7] * 3] * 4


def test_staging_merges_its_copies_where_few_rows_are_left_out_and_never_uploads_device_fields():
    from anna_core.engine.graph_staging import MERGE_BYTES, Staging

    fields = [("out", torch.int64, (4,)), ("ids", torch.int64, (4,)), ("a", torch.int32, (4, 3)),
              ("b", torch.int32, (4, 3))]
    st = Staging(Accelerator(torch.device("cpu")), fields, row_fields=["a", "b"], device_fields=["out"])
    # layout: out [0, 32) | ids [32, 64) | a [64, 112) | b [112, 160)
    assert st.upload_spans() == [(32, 160)]
    assert st.upload_spans(rows=1) == [(32, 124)]  # one copy: a's three unused rows (36 bytes) go along
    assert st.upload_spans(rows=4) == [(32, 160)]
    st.d["out"][:] = torch.tensor([9, 8, 7, 6])  # what a replay wrote
    st.h["ids"][:] = [1, 2, 3, 4]
    st.h["a"][:] = 5
    st.h["b"][:] = 6
    st.upload(rows=1)
    assert st.d["out"].tolist() == [9, 8, 7, 6]  # device fields are never overwritten by an upload
    assert st.d["ids"].tolist() == [1, 2, 3, 4]
    assert st.d["a"][0].tolist() == [5] * 3 and st.d["b"].tolist() == [[6] * 3] + [[0] * 3] * 3
    # where the rows left out are many, each row field's first rows are a copy of their own
    rows = MERGE_BYTES // 4 + 2
    wide = Staging(Accelerator(torch.device("cpu")), [("ids", torch.int64, (rows,)), ("a", torch.int32, (rows, 1)),
                                                      ("b", torch.int32, (rows, 1))], row_fields=["a", "b"])
    a, b = 8 * rows, 8 * rows + -(-4 * rows // 8) * 8
    assert wide.upload_spans(rows=1) == [(0, a), (a, a + 4), (b, b + 4)]
    wide.h["a"][:] = 1
    wide.h["b"][:] = 2
    wide.upload(rows=1)
    assert wide.d["a"][:2, 0].tolist() == [1, 0] and wide.d["b"][:2, 0].tolist() == [2, 0]
