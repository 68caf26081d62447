"""unwrap_single_exception_group: one real error out of a nursery comes out bare."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trizre._concurrency import unwrap_single_exception_group


def cancelled() -> trio.Cancelled:
    return trio.Cancelled._create()


def test_single_error_group_reraises_the_bare_error() -> None:
    error = ValueError("boom")
    with pytest.raises(ValueError, match="boom") as info, unwrap_single_exception_group():
        raise ExceptionGroup("g", [error])
    assert info.value is error
    assert type(info.value) is ValueError
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__


def test_nested_group_with_one_real_error_and_cancelled_raises_the_real_one() -> None:
    error = KeyError("k")
    group = BaseExceptionGroup(
        "outer",
        [
            cancelled(),
            BaseExceptionGroup("inner", [cancelled(), error]),
        ],
    )
    with pytest.raises(KeyError) as info, unwrap_single_exception_group():
        raise group
    assert info.value is error


def test_two_real_errors_stay_grouped() -> None:
    group = ExceptionGroup("g", [ValueError("a"), KeyError("b")])
    with pytest.raises(ExceptionGroup) as info, unwrap_single_exception_group():
        raise group
    assert info.value is group


def test_two_real_errors_nested_with_cancelled_stay_grouped() -> None:
    group = BaseExceptionGroup(
        "outer", [cancelled(), BaseExceptionGroup("inner", [ValueError("a")]), KeyError("b")]
    )
    with pytest.raises(BaseExceptionGroup) as info, unwrap_single_exception_group():
        raise group
    assert info.value is group


def test_only_cancelled_comes_out_bare() -> None:
    c = cancelled()
    with pytest.raises(trio.Cancelled) as info, unwrap_single_exception_group():
        raise BaseExceptionGroup("g", [BaseExceptionGroup("inner", [c])])
    assert info.value is c


def test_no_exception_passes_through() -> None:
    ran = []
    with unwrap_single_exception_group():
        ran.append(True)
    assert ran == [True]


def test_bare_exception_passes_through_untouched() -> None:
    error = KeyError("bare")
    with pytest.raises(KeyError) as info, unwrap_single_exception_group():
        raise error
    assert info.value is error


async def test_nursery_body_error_surfaces_bare() -> None:
    with trio.fail_after(5):
        with pytest.raises(KeyError, match="body") as info, unwrap_single_exception_group():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.sleep_forever)
                await trio.lowlevel.checkpoint()
                raise KeyError("body")
        assert type(info.value) is KeyError


async def test_nursery_child_error_surfaces_bare() -> None:
    async def child() -> None:
        await trio.lowlevel.checkpoint()
        raise ValueError("child")

    with trio.fail_after(5):
        with pytest.raises(ValueError, match="child"), unwrap_single_exception_group():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.sleep_forever)
                nursery.start_soon(child)


async def test_nursery_with_two_failing_children_stays_grouped() -> None:
    async def fail(exc: Exception) -> None:
        raise exc  # no checkpoint: both fail before either can be cancelled

    with trio.fail_after(5):
        with pytest.raises(ExceptionGroup) as info, unwrap_single_exception_group():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(fail, ValueError("a"))
                nursery.start_soon(fail, KeyError("b"))
        assert sorted(type(e).__name__ for e in info.value.exceptions) == ["KeyError", "ValueError"]
