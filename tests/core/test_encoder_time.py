"""The encoder's time on ``/healthz``: host time of every encode, and its device time read without waiting
(``DeviceSpan``: events on an accelerator, read once the device passed them; the host clock on the CPU)."""

import time

import pytest
import torch
from anna_core.device import Accelerator, DeviceSpan
from anna_core.engine.config import EngineConfig
from anna_core.engine.encoder_outputs import EncoderOutputs
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.sampling_params import SamplingParams
from anna_core.multimodal import MultiModalInputs
from anna_core.testing.multimodal_model import PLACEHOLDER, MultiModalLM, image


class FakeEvent:
    """A timing event of a fake device: done when the test says so; waiting on it fails the test."""

    clock_ms = 0.0

    def __init__(self, enable_timing: bool = False):
        assert enable_timing
        self.at = None
        self.done = False

    def record(self):
        self.at = FakeEvent.clock_ms

    def query(self):
        return self.done

    def elapsed_time(self, end):
        assert end.done, "elapsed_time before the device passed the event would wait"
        return end.at - self.at

    def synchronize(self):
        raise AssertionError("the encoder's device time must never wait for the device")


class FakeModule:
    Event = FakeEvent


class FakeAccel(Accelerator):
    def __init__(self):
        super().__init__(torch.device("cpu"))
        self.spans = []

    def span(self):
        span = DeviceSpan(FakeModule)
        self.spans.append(span)
        return span


def test_a_cpu_span_is_the_host_time_between_its_calls():
    span = Accelerator(torch.device("cpu")).span()
    span.start()
    time.sleep(0.02)
    span.stop()
    assert 20.0 <= span.elapsed_ms() < 1000.0


def test_device_time_is_read_once_the_device_passed_the_span_and_never_waits():
    model, accel = MultiModalLM(window=8), FakeAccel()
    enc = EncoderOutputs(model, torch.device("cpu"), accel)
    FakeEvent.clock_ms = 10.0
    orig = model.encode

    def slow_encode(items):  # the device clock advances by 7.5 ms while the encode is enqueued
        FakeEvent.clock_ms += 7.5
        return orig(items)

    model.encode = slow_encode
    enc.encode([image(1, 0, 4), image(2, 4, 4)])
    report = enc.report()  # the device has not finished: nothing read, nothing waited for
    assert report["encodes_pending"] == 1 and report["encode_device_s"] == 0.0 and report["encode_host_s"] > 0
    enc.encode([image(3, 8, 4)])
    [first, second] = accel.spans
    for event in first._events:
        event.done = True
    enc.settle()
    assert enc.device_s == pytest.approx(7.5e-3) and enc.report()["encodes_pending"] == 1
    for event in second._events:
        event.done = True
    assert enc.report() | {"encode_host_s": 0} == {"media_encoded": 3, "rows_encoded": 12, "encode_host_s": 0,
                                                    "encode_device_s": pytest.approx(15e-3), "encodes_pending": 0,
                                                    "outputs_held": 3}


def test_healthz_counters_of_an_engine_on_the_cpu():
    model = MultiModalLM(window=8)
    eng = LLMEngine(model, config=EngineConfig(block_size=4, num_blocks=64, max_num_seqs=2, max_prefill_tokens=64,
                                               prompt_cache_size=0))
    prompt = [5, 6, *[PLACEHOLDER] * 4, 7, *[PLACEHOLDER] * 4, 8]
    mm = MultiModalInputs(items=[image(1, 2, 4), image(2, 7, 4)])
    eng.add_request("r", prompt, SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True), multimodal=mm)
    while eng.has_unfinished():
        eng.step()
    enc = eng.stats()["encoder"]
    assert enc["media_encoded"] == 2 and enc["rows_encoded"] == 8 and enc["encodes_pending"] == 0
    # on the CPU the device figure is the host clock around the encode itself, inside the host figure
    assert 0 < enc["encode_device_s"] <= enc["encode_host_s"]
