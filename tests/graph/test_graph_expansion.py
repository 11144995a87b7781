"""Which layers Model Explorer opens unfolded: every level that still fits the limit, the inputs always
folded, and only layers Model Explorer really draws (it dissolves a layer that holds a single op)."""

from __future__ import annotations

from workbench.graph_server.expansion import GROUP_SUFFIX, initial_expansion


def _graph(*namespaces: str) -> dict:
    return {"id": "graph", "nodes": [{"id": f"n{i}", "namespace": ns} for i, ns in enumerate(namespaces)]}


# A small CNN as torch.export names it: 2 blocks of 3 layers (each conv two ops, bn and relu one op each), a
# one-op head, 6 parameters, an op in the model's own forward and the output at the root.
CNN = _graph(
    *["inputs"] * 6,
    "Net/block_0/conv_0",
    "Net/block_0/conv_0",
    "Net/block_0/bn_1",
    "Net/block_0/relu_2",
    "Net/block_1/conv_0",
    "Net/block_1/conv_0",
    "Net/block_1/bn_1",
    "Net/block_1/relu_2",
    "Net/head",
    "Net",
    "",
)


def _ids(*paths: str) -> list[str]:
    return sorted(p + GROUP_SUFFIX for p in paths)


def test_a_graph_that_fits_opens_to_its_ops_naming_only_the_deepest_layers_model_explorer_draws():
    # bn_1, relu_2 and head hold one op each: Model Explorer draws those ops in the parent layer instead.
    assert initial_expansion(CNN) == _ids("Net/block_0/conv_0", "Net/block_1/conv_0")


def test_the_limit_stops_at_the_last_level_that_fits():
    # Shown with Net open: block_0, block_1, head's op, Net's op, inputs, output = 6; with the blocks open
    # too:
    # 2 conv layers, 4 ops (bn, relu) and the same 4 = 10; everything open: 4 conv ops + 4 + 4 = 12.
    assert initial_expansion(CNN, limit=5) == []
    assert initial_expansion(CNN, limit=6) == initial_expansion(CNN, limit=9) == _ids("Net")
    assert (
        initial_expansion(CNN, limit=10)
        == initial_expansion(CNN, limit=11)
        == _ids("Net/block_0", "Net/block_1")
    )
    assert initial_expansion(CNN, limit=12) == initial_expansion(CNN)


def test_single_op_layers_dissolve_upwards_as_in_model_explorer():
    assert initial_expansion(_graph("A/B/C", "")) == []  # C, then B, then A hold one op: no layer is drawn
    assert initial_expansion(_graph("A/B/C", "A/B/C", "")) == _ids("A/B/C")  # C holds two: A and B hold C


def test_inputs_stay_folded_however_many_parameters_there_are():
    many = _graph(*["inputs"] * 500, "Net/fc", "Net/fc", "")
    assert initial_expansion(many) == _ids("Net/fc")
    assert not any(i.startswith("inputs") for i in initial_expansion(_graph("inputs/x", "inputs/y", "Net")))


def test_a_flat_graph_or_a_malformed_one_opens_nothing():
    assert initial_expansion(_graph("", "", "")) == []
    assert initial_expansion({"nodes": [None, 3, {"namespace": None}]}) == []
    assert initial_expansion({}) == []
