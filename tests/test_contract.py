"""Every engine passes the one engine contract (tests/helpers/contract.py)."""
from __future__ import annotations

import functools

import pytest

import iofeed
from helpers.contract import CHECKS, ContractData, check_fully_skipped_batches_are_refilled

# one line per engine: the workers engine, DALI in its CPU mode (device=None), and the nvjpeg engine in
# its CPU form (torchvision's CPU decode of the same batched call; its CUDA twin: tests/test_nvjpeg.py)
ENGINES = ["workers", pytest.param("dali", marks=pytest.mark.dali),
           pytest.param("nvjpeg", marks=pytest.mark.torchvision)]


@pytest.fixture
def make(request):
    """`iofeed.loader` bound to the engine under test."""
    if request.param == "dali":
        pytest.importorskip("nvidia.dali")
    return functools.partial(iofeed.loader, engine=request.param)


@pytest.fixture
def data(colour_dataset, colour_tree, tmp_path) -> ContractData:
    return ContractData(colour_dataset, colour_tree, tmp_path)


@pytest.mark.parametrize("make", ENGINES, indirect=True)
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_engine_contract(make, data, check):
    check(make, data)


@pytest.mark.torch
@pytest.mark.parametrize("make", ENGINES, indirect=True)
def test_fully_skipped_batches_are_refilled_for_torch(make, data):
    pytest.importorskip("torch")
    check_fully_skipped_batches_are_refilled(make, data, framework="torch")
