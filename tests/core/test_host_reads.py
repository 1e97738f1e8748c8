""":class:`~anna_core.testing.host_reads.NoHostReads` (the graph tests' capture check) fails on every way a tensor's
value reaches the host, inside ``torch.inference_mode()`` (where they dispatch as ``aten.item`` /
``aten.is_nonzero``) and outside it (``aten._local_scalar_dense``), and lets device-side ops through."""

import pytest
import torch
from anna_core.testing.host_reads import NoHostReads


def test_device_side_ops_pass():
    with torch.inference_mode(), NoHostReads():
        y = torch.where(torch.arange(4) > 1, torch.ones(4), torch.zeros(4)).cumsum(0)
    assert y.tolist() == [0.0, 0.0, 1.0, 2.0]


VALUE_READS = {
    "item": lambda y: y[0].item(),
    "bool": lambda y: bool(y[0]),
    "float": lambda y: float(y[0]),
    "equal": lambda y: torch.equal(y, y),
}
"""Reads of a tensor's value on the host."""

SHAPE_READS = {
    "mask": lambda y: y[y > 1],
    "nonzero": lambda y: y.nonzero(),
    "masked_select": lambda y: y.masked_select(y > 1),
    "unique": lambda y: y.unique(),
    "unique_consecutive": lambda y: y.unique_consecutive(),
    "repeat_interleave": lambda y: y.repeat_interleave(torch.tensor([1, 2, 3])),
}
"""Ops whose result's shape depends on tensor values (the host must read them)."""

FAILING = {
    **{name: (read, "host read of a tensor value") for name, read in VALUE_READS.items()},
    **{name: (read, "depends on tensor values") for name, read in SHAPE_READS.items()},
}


@pytest.mark.parametrize("inference", [False, True])
@pytest.mark.parametrize("name", sorted(FAILING))
def test_every_host_read_and_value_dependent_shape_fails(name, inference):
    read, message = FAILING[name]
    with torch.inference_mode(inference):
        y = torch.arange(3.0) * 2
        with pytest.raises(AssertionError, match=message), NoHostReads():
            read(y)


def test_integer_indexing_and_sized_repeats_pass():
    with torch.inference_mode(), NoHostReads():
        y = (torch.arange(5.0) * 2)[torch.tensor([4, 0])]
        r = torch.arange(3).repeat_interleave(torch.tensor([1, 2, 0]), output_size=3)
        w = torch.arange(2).repeat_interleave(2)
    assert y.tolist() == [8.0, 0.0] and r.tolist() == [0, 1, 1] and w.tolist() == [0, 0, 1, 1]


@pytest.mark.parametrize("inference", [False, True])
def test_op_counts_tell_launches_from_syncs(inference):
    """:class:`~anna_core.testing.host_reads.OpCounts`: kernels count as launches, views and reshapes do not; host
    reads and tensors made from host data count as syncs."""
    from anna_core.testing.host_reads import OpCounts

    with torch.inference_mode(inference):
        x = torch.arange(6.0)
        with OpCounts() as counts:
            y = (x.view(2, 3).transpose(0, 1) * 2).sum()  # mul, sum: 2 launches; view, transpose: none
            z = torch.tensor([1.0, 2.0])  # made from host data: a sync (an upload on a device)
            value = float(y)  # a host read
    assert value == 30.0 and z.shape == (2,)
    assert counts.launches == 2 and counts.syncs == 2, counts.ops
    assert counts.ops.get("mul") == 1 and counts.ops.get("sum") == 1
