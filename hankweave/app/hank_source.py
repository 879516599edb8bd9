"""Where a hank comes from: a local path, a ``.hank`` bundle or a remote repository.

``run``, ``validate`` and ``submit`` turn their HANK argument into a local hank file through
:func:`resolve_hank_source` before anything else reads it: a remote address is checked out in the
cache (:mod:`hankweave.remote`), a bundle is verified and extracted (:mod:`hankweave.bundle`),
and a remote bundle is both. What the execution records of its source (``bundleHash``,
``bundlePath``, ``remote``) comes from here too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hankweave.bundle.reader import OpenedBundle
    from hankweave.remote import RemoteHank

__all__ = ["HankSource", "cache_root", "resolve_hank_source"]

CACHE_DIR_NAME = ".hankweave-cache"


def cache_root(cwd: Path, env: Mapping[str, str]) -> Path:
    """Where remote hanks and extracted bundles are kept: the ``cacheDir`` setting
    (``hankweave.json`` or ``HANKWEAVE_RUNTIME_CACHE_DIR``), else ``$HANKWEAVE_HOME/.cache``,
    else ``~/.hankweave-cache``."""
    from hankweave.config.errors import ConfigError
    from hankweave.config.settings import resolve_settings

    try:
        configured = resolve_settings(cwd=cwd, hank=None, env=env, cli={}).settings.cache_dir
    except ConfigError:  # the launch reports a bad settings file with everything else
        configured = None
    if configured:
        return Path(configured)
    home = env.get("HANKWEAVE_HOME", "").strip()
    if home:
        return Path(os.path.abspath(os.path.expanduser(home))) / ".cache"
    return Path.home() / CACHE_DIR_NAME


@dataclass(frozen=True)
class HankSource:
    """The local hank a HANK argument comes down to, and where it came from."""

    argument: str | None
    """The local hank path to use (None: HANK was not given)."""
    bundle: OpenedBundle | None = None
    remote: RemoteHank | None = None
    notices: list[str] = field(default_factory=list)

    def meta_fields(self) -> dict[str, Any]:
        """What ``execution-meta.json`` records of the source, by field name of
        :class:`~hankweave.execution.meta.ExecutionMeta` (``bundleHash``, ``bundlePath``,
        ``remote`` in the file, Hankweave 0.12's keys)."""
        fields: dict[str, Any] = {}
        if self.bundle is not None:
            fields["bundle_hash"] = self.bundle.bundle_hash
            fields["bundle_path"] = (str(self.bundle.bundle_path) if self.remote is None
                                     else self.remote.path)
        if self.remote is not None:
            fields["remote"] = self.remote.record()
        return fields


def resolve_hank_source(argument: str | None, *, cwd: Path, env: Mapping[str, str],
                        notify: Callable[[str], None] | None = None,
                        execution: str | None = None) -> HankSource:
    """The local hank ``argument`` names (see the module docstring). With no ``argument``, a
    resume of ``execution`` whose bundle extraction or remote checkout is gone from the cache
    gets it back from where it came (the cache may be deleted at any time).

    Raises:
        hankweave.config.errors.ConfigError: the remote cannot be fetched or the bundle does
            not verify; the message says which file and why.
    """
    from hankweave.bundle.reader import is_bundle_path
    from hankweave.remote import is_remote_address

    if argument is None:
        return _recovered(cwd, env, notify, execution)
    remote = None
    local = Path(cwd, argument)
    notices: list[str] = []
    if is_remote_address(argument):
        from hankweave.remote import fetch_remote_hank

        remote = fetch_remote_hank(argument, cache_root(cwd, env), env=dict(env))
        local = remote.local
        notices.append(remote.notice)
    if not is_bundle_path(local):
        return _told(HankSource(str(local) if remote else argument, None, remote, notices),
                     notify)
    from hankweave.bundle.reader import open_bundle

    opened = open_bundle(local, cache_root(cwd, env))
    how = {"fresh": "extracted to", "reused": "already extracted at",
           "repaired": "re-extracted (the earlier extraction had changed) to"}[opened.extraction]
    notices.append(f"bundle {local.name}: {len(opened.lock.files)} files verified against its"
                   f" hank.lock (bundleHash {opened.bundle_hash[:12]}); {how} {opened.hank_dir}")
    return _told(HankSource(str(opened.hank_path), opened, remote, notices), notify)


def _recovered(cwd: Path, env: Mapping[str, str], notify: Callable[[str], None] | None,
               execution: str | None) -> HankSource:
    """The hank a resumed execution ran, fetched or extracted again when the cache lost it."""
    from hankweave.config.errors import ConfigError
    from hankweave.execution.layout import ExecutionLayout
    from hankweave.execution.meta import ExecutionMetaError, load_execution_meta

    if execution is None or (cwd / "hank.json").is_file():
        return HankSource(None)
    try:
        meta = load_execution_meta(ExecutionLayout(Path(cwd, execution)).meta_file)
    except ExecutionMetaError:
        return HankSource(None)
    if not meta.hank_path or Path(meta.hank_path).is_file():
        return HankSource(None)
    if meta.remote:
        remote, path = meta.remote, meta.remote.get("path")
        address = f"{remote['url']}#{remote['commit']}" + (f"/{path}" if path else "")
        return resolve_hank_source(address, cwd=cwd, env=env, notify=notify)
    if not (meta.bundle_hash and meta.bundle_path):
        return HankSource(None)
    source = resolve_hank_source(meta.bundle_path, cwd=cwd, env=env, notify=notify)
    if source.bundle is None or source.bundle.bundle_hash != meta.bundle_hash:
        found = source.bundle.bundle_hash[:12] if source.bundle else "not a bundle"
        raise ConfigError(f"{meta.bundle_path}: this execution ran bundle"
                          f" {meta.bundle_hash[:12]}, but the file is now {found}; give the"
                          " hank it should continue with as HANK")
    return source


def _told(source: HankSource, notify: Callable[[str], None] | None) -> HankSource:
    if notify is not None:
        for notice in source.notices:
            notify(notice)
    return source
