"""A client whose credentials are missing or refused is not reused (credentials.py): fsspec
keeps one client per set of options for the life of the process, with the credentials it
loaded once, so credentials set after a refusal were never read. Every kind of refusal the
storage libraries raise clears the cache; nothing else does (a missing file, a full disk, a
server's 500, a local permission are no reason to make clients anew). The backends' test
(tests/backends/test_credentials_set_later.py) shows it against a real S3 server."""

from __future__ import annotations

import errno

import fsspec
import pytest
from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError
from google.auth.exceptions import DefaultCredentialsError, RefreshError

from snapshot_cli.credentials import forgotten_if_refused, refused_credentials
from snapshot_cli.errors import StorageError


def answer(status: int, code: str) -> ClientError:
    meta = {
        "Error": {"Code": code, "Message": code},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(meta, "GetObject")  # type: ignore[arg-type]


def raised_from(outer: BaseException, inner: BaseException) -> BaseException:
    """``outer`` as a library raises it: ``raise outer from inner`` (s3fs's PermissionError
    over botocore's ClientError)."""
    try:
        try:
            raise inner
        except BaseException as err:
            raise outer from err
    except BaseException as caught:
        return caught


REFUSALS = {
    "no credentials (botocore)": NoCredentialsError(),
    "half the credentials (botocore)": PartialCredentialsError(provider="env", cred_var="x"),
    "no default credentials (google-auth)": DefaultCredentialsError("none found"),
    "a token refresh refused (google-auth)": RefreshError("invalid_grant"),
    "403 under s3fs's PermissionError": raised_from(PermissionError("Forbidden"),
                                                   answer(403, "InvalidAccessKeyId")),
    "401": answer(401, "Unauthorized"),
    "403 under snap's StorageError": raised_from(StorageError("x"), answer(403, "AccessDenied")),
}  # fmt: skip
OTHERS = {
    "404 under FileNotFoundError": raised_from(FileNotFoundError("x"), answer(404, "NoSuchKey")),
    "500": answer(500, "InternalError"),
    "a local permission": PermissionError(errno.EACCES, "Permission denied", "/x"),
    "a full disk": OSError(errno.ENOSPC, "No space left on device"),
    "a refused connection": ConnectionRefusedError(errno.ECONNREFUSED, "refused"),
}


@pytest.mark.parametrize("err", REFUSALS.values(), ids=REFUSALS.keys())
def test_a_refusal_of_credentials_makes_the_next_client_anew(err: BaseException) -> None:
    assert refused_credentials(err)
    fs = fsspec.filesystem("memory")
    with pytest.raises(type(err)), forgotten_if_refused(fs):
        raise err
    assert fsspec.filesystem("memory") is not fs


@pytest.mark.parametrize("err", OTHERS.values(), ids=OTHERS.keys())
def test_any_other_failure_keeps_the_client(err: BaseException) -> None:
    assert not refused_credentials(err)
    fs = fsspec.filesystem("memory")
    with pytest.raises(type(err)), forgotten_if_refused(fs):
        raise err
    assert fsspec.filesystem("memory") is fs
