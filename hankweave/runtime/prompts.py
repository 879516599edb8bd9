"""The runtime's seam for a codon's prompts and agent environment (tests and replay replace it)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hankweave.config.hank import Codon, HankFile


class PromptBuilder:
    """Builds a codon's prompts and agent environment from the hank and the workspace."""

    def __init__(self, hank: HankFile, hank_dir: Path, agent_root: Path,
                 env: Mapping[str, str], *, provider_env: Mapping[str, str] | None = None,
                 observer_env: Mapping[str, str] | None = None) -> None:
        self.hank, self.hank_dir, self.agent_root, self.base_env = hank, hank_dir, agent_root, env
        self.provider_env = dict(provider_env or {})
        """Set last, over the codon's own ``env``: where a mock provider run sends its agents,
        so a dry run never reaches a real provider with a real key, and the LLM proxy."""
        self.observer_env = dict(self.provider_env if observer_env is None else observer_env)
        """The same for sentinels, which call their models around the LLM proxy: what they
        spend is not the codon's, and no ceiling of the codon holds them."""

    def user(self, codon: Codon) -> str:
        from hankweave.config.prompts import build_user_prompt

        return build_user_prompt(codon, self.hank_dir, self.agent_root).text

    def system(self, codon: Codon) -> str | None:
        from hankweave.config.prompts import build_system_prompt

        return build_system_prompt(self.hank, codon, self.hank_dir, self.agent_root)

    def extension(self, text: str) -> str:
        from hankweave.config.prompts import build_extension_prompt

        return build_extension_prompt(text, self.agent_root)

    def env(self, codon: Codon) -> dict[str, str]:
        from hankweave.config.settings import agent_env

        return {**agent_env(self.base_env, codon.env or {}), **self.provider_env}

    def env_overlay(self, codon: Codon) -> dict[str, str]:
        """What :meth:`env` adds to the base environment: the ``HANKWEAVE_<X>`` passthrough,
        the codon's ``env`` and the provider variables, in that order."""
        from hankweave.config.settings import hankweave_passthrough

        return {**hankweave_passthrough(self.base_env).set, **(codon.env or {}),
                **self.provider_env}
