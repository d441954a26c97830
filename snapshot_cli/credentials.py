"""A storage client that cannot load its credentials, said with where they came from.

gcsfs loads a token given as a file when the client is made, and says nothing of the file
when it cannot: a damaged key file was ``KeyError: 'refresh_token'`` (called a bug in snap),
a file that is not JSON ``Expecting value: line 1 column 1 (char 0)``, and a token that
names no file was sent to Google as an access token, its path in the request's URL. Here
such a failure names the token's source (``storage_options=``, or fsspec's configuration
from ``FSSPEC_GCS_TOKEN``), what the client said, and what to do. Pure but for reading the
filesystem's status of a token path and fsspec's configuration.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import fsspec.config

from . import retry
from .errors import OptionError
from .statuses import http_status

__all__ = [
    "check_token", "forgotten_if_refused", "named_as_credentials", "refused",
    "refused_credentials", "said",
]  # fmt: skip

# Where a client loads credentials: an error raised from here is one of its credentials.
_CREDENTIAL_CODE = tuple(
    os.path.join(*parts)
    for parts in (("gcsfs", "credentials.py"), ("google", "auth", ""), ("google", "oauth2", ""),
                  ("botocore", "credentials.py"), ("aiobotocore", "credentials.py"))
)  # fmt: skip
GCS = ("gs", "gcs")
_WHAT = (
    "give a service-account or authorized-user key file (JSON) as the token, or no token for "
    "the machine's own credentials (gcloud auth application-default login, "
    "GOOGLE_APPLICATION_CREDENTIALS)"
)


def token_source(scheme: str, options: dict[str, Any]) -> tuple[Any, str] | None:
    """The token a ``scheme`` client is given and where it comes from, or None."""
    if scheme not in GCS:
        return None
    if options.get("token") is not None:
        return options["token"], "storage_options"
    for protocol in GCS:  # (fsspec's configuration, from FSSPEC_GS_TOKEN or FSSPEC_GCS_TOKEN)
        token = fsspec.config.conf.get(protocol, {}).get("token")
        if token is not None:
            return token, f"FSSPEC_{protocol.upper()}_TOKEN"
    return None


def _looks_like_a_path(token: str) -> bool:
    return os.sep in token or token.startswith("~") or token.lower().endswith(".json")


def check_token(url: str, scheme: str, options: dict[str, Any]) -> None:
    """Refuse a token that names a key file that is not there, before a client is made:
    gcsfs took it for an access token and sent it to Google in a URL."""
    found = token_source(scheme, options)
    if found is None or not isinstance(found[0], str) or not _looks_like_a_path(found[0]):
        return
    token, where = found
    if token in ("google_default", "cache", "anon", "browser", "cloud"):  # gcsfs's methods
        return
    path = os.path.expanduser(token)
    if not os.path.exists(path):
        raise OptionError(f"cannot open {url}: the token ({where}) names no file: {token}; {_WHAT}")


def _frames(tb: TracebackType | None) -> list[str]:
    names = []
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    return names


def _chain(err: BaseException) -> list[BaseException]:
    """``err`` and the errors it was raised in the handling of, innermost last."""
    seen: list[BaseException] = []
    while err is not None and err not in seen and len(seen) < 8:
        seen.append(err)
        err = err.__cause__ or err.__context__  # type: ignore[assignment]
    return seen


def _said(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0].rstrip('.')}" if text else type(err).__name__


@contextlib.contextmanager
def said(url: str, scheme: str, options: dict[str, Any]) -> Iterator[None]:
    """Within (the making of ``url``'s client): a token naming no file is refused first
    (:func:`check_token`), and an error raised loading the client's credentials is an
    :class:`.OptionError` saying so (:func:`refused`)."""
    check_token(url, scheme, options)
    try:
        yield
    except Exception as err:
        if (why := refused(url, scheme, err, options)) is None:
            raise
        raise OptionError(why) from err


def refused(url: str, scheme: str, err: BaseException, options: dict[str, Any]) -> str | None:
    """What to say of ``err``, raised making the client of ``url``, if it was raised loading
    the client's credentials; else None."""
    chain = [e for e in _chain(err) if not isinstance(e, StopIteration)]
    if not any(c in f for e in chain for f in _frames(e.__traceback__) for c in _CREDENTIAL_CODE):
        return None
    found = token_source(scheme, options)
    given = "its credentials"
    if found is not None:
        token, where = found
        shown = token if isinstance(token, str) and _looks_like_a_path(token) else "given"
        given = f"the token {shown} ({where})" if shown != "given" else f"the token ({where})"
    what = retry.redacted("; ".join(dict.fromkeys(_said(e) for e in reversed(chain))))
    advice = _WHAT if scheme in GCS else "check the credentials the client is given"
    return f"cannot open {url}: the storage client could not load {given}: {what}; {advice}"


# Class names that say credentials failed, whichever library raised it: botocore's
# NoCredentialsError, google-auth's DefaultCredentialsError and RefreshError, azure's
# ClientAuthenticationError.
AUTH_WORDS = re.compile(r"Credential|Authenticat|Unauthori[sz]ed|RefreshError|TokenRetrieval")


def named_as_credentials(err: BaseException) -> bool:
    """Whether a class among ``err``'s causes says credentials failed (:data:`AUTH_WORDS`)."""
    kinds = (c.__name__ for e in retry.causes(err) for c in type(e).__mro__)
    return any(AUTH_WORDS.search(k) for k in kinds)


def refused_credentials(err: BaseException) -> bool:
    """Whether ``err`` says the client has no credentials or the storage refused them: a
    class so named among its causes, or an answer of HTTP 401 or 403."""
    return named_as_credentials(err) or http_status(err) in (401, 403)


@contextlib.contextmanager
def forgotten_if_refused(fs: Any) -> Iterator[None]:
    """Within (a call of ``fs``): if its credentials are refused, its kind of client is made
    anew next time. fsspec keeps one client per set of options for the life of the process,
    with the credentials it loaded once: credentials set after a refusal (a notebook's
    ``os.environ["AWS_ACCESS_KEY_ID"] = ...``, a renewed key file) were never read, and the
    same call was refused until Python was restarted."""
    try:
        yield
    except Exception as err:
        clear = getattr(type(fs), "clear_instance_cache", None)
        if callable(clear) and refused_credentials(err):
            clear()
        raise
