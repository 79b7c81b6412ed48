"""The store a user names (``--llm-baseline-dir``, ``llmreplay ... --store``): a folder, a
``file://`` URL, ``git:REMOTE#REF`` or any fsspec URL, made into a
:class:`~pytest_llmreplay.gate.store.Store` of the matching kind.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

from ..errors import LLMReplayError
from .git_store import git_store
from .store import FolderStore, FsspecStore, Store, one_line, redact, refuse_password

EXTRAS = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "az": "azure",
    "abfs": "azure",
    "abfss": "azure",
    "adl": "azure",
}


def open_store(text: str, rootdir: str | Path) -> Store:
    """The store ``text`` names: ``git:REMOTE#REF``, ``SCHEME://...`` (``file://`` a folder, any
    other an fsspec URL) or a folder (relative to ``rootdir``). Nothing is contacted yet
    (:meth:`Store.check` does that); an empty ``text``, a scheme fsspec does not know
    (:func:`known_schemes`), a store scheme without
    its ``//`` (``s3:/x``, ``hdfs:/x``: :func:`names_a_store_scheme`) or without a bucket (``s3://``), a query, a missing extra or a password in the
    URL is an :class:`LLMReplayError`."""
    if not text.strip():  # not rootdir itself: its results would be scattered among the project's files
        raise LLMReplayError("empty; expected a folder, git:REMOTE#REF, or a URL such as s3://BUCKET/PREFIX")
    rootdir = Path(rootdir)
    if text.startswith("git:"):
        return git_store(text, rootdir)
    match = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", text)
    if re.match(r"(?i)file:", text):
        return FolderStore(file_url_path(text))
    if match is None:
        typo = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):/*(?!/)", text)
        if typo is not None and names_a_store_scheme(typo.group(1).lower()):
            scheme = typo.group(1)  # s3:/x or s3:x: a URL with a slash missing, not a folder named "s3:"
            suggested = redact(f"{scheme}://{text[typo.end() :]}")
            raise LLMReplayError(
                f"{suggested.replace('://', ':', 1)}: {scheme}: without //; expected {suggested} "
                f"(a folder whose name starts {scheme}: is written ./ first)"
            )
        return FolderStore(Path(rootdir, text))
    scheme = match.group(1).lower()
    refuse_password(text, text, "in the environment (the back-end's own variables)")
    if scheme != "memory" and not text[match.end() :].strip("/"):  # s3:// would write at the top of no bucket
        raise LLMReplayError(
            f"{redact(text)}: no bucket or container; expected {scheme}://BUCKET/PREFIX (the prefix may be left out)"
        )
    if "?" in text:  # s3fs reads ?versionId=1 as an object's version: the results became one object, the prefix
        raise LLMReplayError(f"{redact(text)}: a query in the URL; expected {scheme}://BUCKET/PREFIX without one")
    try:
        import fsspec
    except ImportError:
        raise LLMReplayError(
            f"{redact(text)}: stores at URLs need fsspec: pip install 'pytest-llmreplay[{EXTRAS.get(scheme, 'store')}]'"
        ) from None
    if scheme not in known_schemes(fsspec):
        raise LLMReplayError(
            f"{redact(text)}: unknown scheme {scheme!r}; expected a folder, git:REMOTE#REF, or a URL such as s3://BUCKET/PREFIX, gs://, az://, file://, memory://"
        )
    options = {"config_kwargs": S3_CLIENT} if scheme in ("s3", "s3a") else {}
    try:
        fs, root = fsspec.core.url_to_fs(
            text, skip_instance_cache=True, **options
        )  # credentials and endpoint: read now, from the environment
    except ImportError:
        raise LLMReplayError(
            f"{redact(text)}: {scheme}:// needs its back-end: pip install 'pytest-llmreplay[{EXTRAS.get(scheme, 'store')}]'"
        ) from None
    except Exception as exc:  # noqa: BLE001 - any back-end's complaint about the URL is one line
        raise LLMReplayError(f"{redact(text)}: {one_line(exc)}") from None
    if options:
        fs.retries = S3_RETRIES
    return FsspecStore(text, fs, root)


# an S3 store's client: botocore's defaults (60 s to connect, 60 s per read, 5 tries) inside
# s3fs's own 5 tries kept a start-up against an endpoint that accepts and never answers waiting
# 7 minutes; with these, a call gives up after at most 2 x 2 x (5 + 20) s = 100 s
S3_CLIENT = {"connect_timeout": 5, "read_timeout": 20, "retries": {"max_attempts": 2, "mode": "standard"}}
S3_RETRIES = 2  # s3fs's tries of a call (each of them botocore's S3_CLIENT tries)


def names_a_store_scheme(prefix: str) -> bool:
    """Whether ``prefix`` of a ``PREFIX:/...`` or ``PREFIX:...`` text is a store's scheme (one we
    name an extra for, ``memory``, ``http(s)``, or any fsspec knows where fsspec is installed):
    such a text is a URL with a slash missing (``hdfs:/x``), not a folder named ``hdfs:``."""
    if prefix in (*EXTRAS, "memory", "http", "https"):
        return True
    try:
        import fsspec
    except ImportError:
        return False
    return prefix in known_schemes(fsspec)


def known_schemes(fsspec: ModuleType) -> set[str]:
    """Every scheme ``fsspec`` knows: by name (``known_implementations``, its own and its
    entry points', what ``available_protocols`` lists) or by a class registered at run time
    (``fsspec.registry``: ``register_implementation(name, cls)`` in a conftest or a plugin). Only
    a scheme outside both is refused; whether its back-end is installed is found when it is
    opened."""
    return {*fsspec.available_protocols(), *fsspec.registry}


def file_url_path(url: str) -> Path:
    """The folder a ``file:`` URL names (RFC 8089): ``file:///PATH``, ``file://localhost/PATH`` or
    ``file:/PATH``, percent-decoded (``file:///a%20b`` is ``/a b``). Another host (``file://tmp/x`` is host
    ``tmp``, not ``./tmp/x``), a relative ``file:x``, or a query or fragment (a ``?`` or ``#`` of
    the name must be written ``%3F``, ``%23``) is an :class:`LLMReplayError`."""
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(url)
    if parts.netloc.lower() not in ("", "localhost"):
        raise LLMReplayError(
            f"{redact(url)}: file:// URL with host {parts.netloc!r}; expected file:///ABSOLUTE/PATH (three slashes) or file://localhost/PATH"
        )
    if not parts.path.startswith("/"):
        raise LLMReplayError(
            f"{redact(url)}: a file: URL must name an absolute path, file:///ABSOLUTE/PATH; give a relative folder as a plain path"
        )
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise LLMReplayError(
            f"{redact(url)}: a file:// URL with a query or fragment; write '?' as %3F and '#' as %23 in a folder name"
        )
    return Path(unquote(parts.path))
