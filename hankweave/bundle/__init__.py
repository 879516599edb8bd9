"""Hank bundles (Hankweave 0.12): ``hankweave pack`` writes a ``.hank`` file, a deterministic
zstd'd tar of a hank's closure with its ``hank.lock``, and ``run``, ``validate`` and ``submit``
take one as the hank, verified file by file before anything runs (docs/bundles.md).

Imported only by the commands that pack or open a bundle (zstandard is loaded on use).
"""
