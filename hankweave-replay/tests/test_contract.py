"""The replay harness passes the harness contract every harness passes (``hankweave.testing``).

Each scenario is a real recording: the fake agent runs a one-codon hank, the execution is
exported, and the replay harness bound to that recording plays it.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from replay_helpers import Project, codon

from hankweave.api import CodonRequest
from hankweave.testing import Arranged, HarnessContract
from hankweave.testing.fake_harness import FAKE_MODEL
from hankweave.testing.harness import Scenario
from hankweave_replay import ReplayHarness

HOUR_MS = 3_600_000


class TestReplayHarness(HarnessContract):
    harness_class = ReplayHarness
    model = FAKE_MODEL

    @pytest.fixture(autouse=True)
    def _recordings(self) -> Iterator[None]:
        self.opened: list[Any] = []
        self.scratch = Path(tempfile.mkdtemp(prefix="replay-contract-"))
        yield
        for recording in self.opened:
            recording.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def arrange(self, scenario: Scenario, request: CodonRequest) -> Arranged:
        if scenario == "error-after-success":
            pytest.skip("a recording holds records, not exceptions: replay never raises")
        if request.fork_session:
            pytest.skip("a recording plays the sessions it recorded: replay cannot fork one")
        project = Project(self.scratch / f"{scenario}-{len(self.opened)}")
        project.write_hank([codon(request.codon_id)])
        project.record({request.codon_id: {"messages": 2, "sessionId": "recorded-session"}})
        if scenario == "hang":
            # Recorded an hour apart, played at the recorded pace: the replay waits.
            recording = ReplayHarness.open_recording(project.export().path, speed="recorded",
                                                     max_delay_ms=HOUR_MS)
            records = recording.harness.player.playback_for(request.codon_id).records
            for number, record in enumerate(records):
                record["timestamp"] = f"2026-01-01T{number:02d}:00:00.000Z"
        else:
            recording = ReplayHarness.open_recording(project.export().path)
        self.opened.append(recording)
        return Arranged(recording.harness, request)
