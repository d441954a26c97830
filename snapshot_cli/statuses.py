"""A storage's HTTP refusals in words: the status a failed call got, what it means, what to do.

The status is found where the client put it (:func:`.retry.status_of`: gcsfs's ``code``,
botocore's response, also under an s3fs error raised from it). gcsfs raises some as bare
builtins naming its own request URL (403 ``OSError("Forbidden: URL")``, 404
``FileNotFoundError(URL)``, 412 ``FileExistsError(URL)``): messages name snap's path and say
the server's words without that URL.
"""

from __future__ import annotations

import http
import re
import urllib.parse

from .retry import causes, gcsfs_status, status_of

# What each status means, for a read and for a write; what to do follows (:func:`refusal`).
_MEANS = {
    400: "the storage refused the request as malformed (HTTP 400 Bad Request)",
    401: "access denied (HTTP 401 Unauthorized: no credentials, or ones the storage did not "
    "accept)",
    403: "access denied (HTTP 403 Forbidden: the credentials may not do this there)",
    404: "not found (HTTP 404)",
    409: "the storage refused it (HTTP 409 Conflict: another request changed it at the same time)",
    412: "a precondition of the request failed (HTTP 412 Precondition Failed: the object "
    "changed while it was being {done})",
    416: "the storage refused the byte range asked for (HTTP 416 Range Not Satisfiable: the "
    "file is shorter than the request expected)",
}
AGAIN = "run the same command again"
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_GCS_OBJECT = re.compile(r"/b/([^/?#\s]+)/o/([^?#\s]+)|/b/([^/?#\s]+)/o\?(?:\S*&)?name=([^&#\s]+)")


def http_status(err: BaseException) -> int | None:
    """The HTTP status behind ``err``: its own, or that of the error it was raised from
    (s3fs's PermissionError over botocore's ClientError). None if no answer carried one."""
    for e in causes(err):
        if (status := status_of(e)) is not None:
            return status
    return None


def server_said(err: BaseException) -> str:
    """What the server said, as one line without the client's request URL (gcsfs's first
    line of a bare builtin is that URL; its second, the server's message)."""
    text = str(err)
    if gcsfs_status(err) is not None:  # ("Forbidden: URL\nmessage", or the URL alone)
        text = text.partition("\n")[2]
    text = re.sub(r"^\[Errno \d+\] ", "", _URL.sub("", text).strip())  # (s3fs's OSError)
    return " ".join(text.split()).strip(" :;,")


def object_named(text: str) -> str | None:
    """``gs://bucket/name`` of the object a gcsfs request URL in ``text`` names, if one does:
    what a caller that knew no path can name instead of that URL."""
    found = _GCS_OBJECT.search(text)
    if found is None:
        return None
    bucket, name = (found.group(1), found.group(2)) if found.group(1) else found.group(3, 4)
    return f"gs://{urllib.parse.unquote(bucket)}/{urllib.parse.unquote(name)}"


def refusal(status: int, reading: bool, err: BaseException, credentials: str | None) -> str:
    """``"<what the status means> (the storage said: ...); <what to do>"`` for a call that
    got ``status``: one of a read (``reading``) or of a write. ``credentials``: where the
    storage's credentials come from, for a 401/403."""
    done = "read" if reading else "written"
    means = _MEANS.get(status, f"the storage refused it ({named(status)})").format(done=done)
    said = server_said(err)
    if said and said.lower() not in means.lower():
        means += f" (the storage said: {said})"
    if status in (401, 403):
        where = f" ({credentials})" if credentials else ""
        may = "read it" if reading else "write there"
        todo = f"check the credentials{where} and that they may {may}, then {AGAIN}"
    elif status == 400:
        todo = f"check the URL and the storage options (endpoint, project), then {AGAIN}"
    elif status == 416:
        todo = f"{AGAIN}; if it persists, snap verify checks the snapshot's files"
    elif status == 404:
        todo = f"{AGAIN}; if it persists, snap verify lists the snapshot's missing files"
    elif status in (409, 412):
        todo = f"{AGAIN} (once no other writer changes that file)"
    else:
        todo = f"check the URL and the storage, then {AGAIN}"
    return f"{means}; {todo}"


def named(status: int) -> str:
    """``"HTTP 502 Bad Gateway"``."""
    try:
        return f"HTTP {status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def lost_upload(status: int, err: BaseException) -> str:
    """A 404 to a write into a bucket that exists: GCS's resumable upload session expired or
    ended already (its last chunk's answer lost, the retry then finds no session)."""
    said = f"; the storage said: {server_said(err)}" if server_said(err) else ""
    return (
        f"the storage answered HTTP {status} Not Found to the upload though the bucket exists "
        f"(the upload session expired, or ended with an answer that was lost on the way{said}); "
        f"{AGAIN}"
    )
