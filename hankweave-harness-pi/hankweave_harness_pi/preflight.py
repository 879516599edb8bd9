"""What the pi harness checks before a run creates anything (``Harness.preflight``).

A codon on pi needs litellm (found, not imported: ``hankweave validate`` stays light), the
key of its provider in the agent's environment, found as :func:`~.providers.route` will find
it when the codon runs (the provider's usual variable, or ``harnesses.pi.providers.<id>.
apiKeyEnv``; a keyless OpenAI-compatible server is fine), AWS credentials for Bedrock (only a
warning: an instance role cannot be seen beforehand), and a price for a model the catalogue
does not know (a warning: its spending would count as $0).
"""

from __future__ import annotations

import importlib.util

from hankweave.api import (
    AWS_CREDENTIALS_HINT,
    PreflightKind,
    PreflightProblem,
    PreflightRequest,
    aws_credentials_visible,
)
from hankweave_harness_pi.providers import CredentialsError, ProviderOptions, route

LITELLM = "litellm"
BEDROCK_PROVIDERS = ("amazon-bedrock", "bedrock")


def preflight(request: PreflightRequest, options: ProviderOptions, priced: bool
              ) -> list[PreflightProblem]:
    """The problems of one codon; ``options`` are the settings of its provider, ``priced``
    whether ``harnesses.pi.models`` gives its model a price."""
    problems = []
    if importlib.util.find_spec(LITELLM) is None:
        problems.append(PreflightProblem(
            PreflightKind.INSTALL, "the pi harness needs litellm, which is not installed:"
            " pip install litellm (or reinstall hankweave-harness-pi)"))
    model = request.model
    if model.provider_id.lower() in BEDROCK_PROVIDERS:
        if not aws_credentials_visible(request.env):
            problems.append(PreflightProblem(PreflightKind.CREDENTIALS, (
                f"Model {model.full_id} runs on Bedrock, but no AWS credentials are in sight:"
                f" {AWS_CREDENTIALS_HINT} (an instance role is only found when the codon"
                " runs)"), warning=True))
    else:
        try:
            route(model.provider_id, model.model_id, request.env, options)
        except CredentialsError as exc:
            problems.append(PreflightProblem(PreflightKind.CREDENTIALS, str(exc)))
    if not request.catalogued and not priced:
        problems.append(PreflightProblem(PreflightKind.MODEL, (
            f"Model {model.full_id} is not in the model catalogue and has no price: its"
            " spending counts as $0; give it one in harnesses.pi.models"
            f'."{model.full_id}" ({{"input": ..., "output": ...}} USD per million tokens)'),
            warning=True))
    return problems
