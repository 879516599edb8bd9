"""FakeHarness passes the harness contract every harness passes (``hankweave.testing``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hankweave.harness import CodonRequest
from hankweave.testing import Arranged, HarnessContract
from hankweave.testing.fake_harness import FAKE_MODEL, FakeHarness, use_script
from hankweave.testing.harness import Scenario

SCRIPTS = {
    "complete": {"messages": 2, "writeFiles": {"notes.md": "hello"}},
    "resume": {"messages": 1},
    "hang": {"process": True, "hang": True},
    "error-after-success": {"messages": 1, "raiseAfterResult":
                            "only prompt commands are supported in streaming mode"},
}


class TestFakeHarness(HarnessContract):
    harness_class = FakeHarness
    model = FAKE_MODEL

    @pytest.fixture(autouse=True)
    def _forget_the_script(self) -> Iterator[None]:
        yield
        use_script(None)

    def arrange(self, scenario: Scenario, request: CodonRequest) -> Arranged:
        use_script({"codons": {request.codon_id: SCRIPTS[scenario]}})
        return Arranged(FakeHarness, request)
