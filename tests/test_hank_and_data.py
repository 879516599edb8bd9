"""Which words of ``hankweave run``/``validate`` name the hank and which the data: Hankweave
0.10.0's rule (a single argument is the data unless it ends in .json), ``--config`` and
``--data``, and a clear error when one is given twice."""

from __future__ import annotations

import click
import pytest

from hankweave.cli.hank_and_data import HankAndData, hank_and_data


@pytest.mark.parametrize(("words", "options", "expected"), [
    (("h", "d"), {}, HankAndData("h", "d")),
    (("data/",), {}, HankAndData(None, "data/", lone_argument_is_data=True)),
    (("my.json",), {}, HankAndData("my.json", None)),
    (("https://github.com/acme/hanks",), {}, HankAndData("https://github.com/acme/hanks", None)),
    (("my-hank-1.0.0.hank",), {}, HankAndData("my-hank-1.0.0.hank", None)),
    (("file:///srv/hanks.git#v1",), {}, HankAndData("file:///srv/hanks.git#v1", None)),
    (("git://127.0.0.1/h.git",), {}, HankAndData("git://127.0.0.1/h.git", None)),
    (("-",), {}, HankAndData(None, "-", lone_argument_is_data=True)),
    ((), {"config": "x", "data": "y"}, HankAndData("x", "y")),
    (("d",), {"config": "h"}, HankAndData("h", "d", lone_argument_is_data=True)),
    (("my-hank",), {"data": "d"}, HankAndData("my-hank", "d")),
    (("my-hank",), {"data_given_otherwise": True}, HankAndData("my-hank", None)),
    ((None,), {}, HankAndData(None, None)),
])
def test_the_words_are_sorted_as_the_original_sorts_them(words, options, expected):
    first, second = (*words, None, None)[:2]

    assert hank_and_data(first, second, **options) == expected


@pytest.mark.parametrize(("words", "options", "twice"), [
    (("h", "d"), {"config": "h2"}, "hank"),
    (("my.json",), {"config": "other.json"}, "hank"),
    (("h", "d"), {"data": "d2"}, "data"),
    (("d",), {"config": "h", "data": "d2"}, "data"),
])
def test_a_hank_or_data_given_twice_is_a_usage_error(words, options, twice):
    first, second = (*words, None)[:2]

    with pytest.raises(click.UsageError, match=f"The {twice} is given twice"):
        hank_and_data(first, second, **options)
