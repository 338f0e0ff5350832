"""Read bytes, decode them the way Python would, and write results back atomically.

A source keeps everything needed to give the user back exactly the bytes they had: the encoding
(PEP 263 cookie or UTF-8), the BOM and the newline style. Lines the rules do not touch must come back
byte-identical.
"""

from __future__ import annotations

import codecs
import errno
import io
import os
import stat
import tempfile
import tokenize
from dataclasses import dataclass

MAX_BYTES = 20 * 1024 * 1024  # larger files are generated code; they are reported and left alone


class SourceError(Exception):
    """A file that cannot be processed; the message says why and what to do."""


@dataclass(frozen=True)
class Source:
    text: str
    encoding: str  # codec name as Python understands it ("utf-8", "latin-1", ...)
    bom: bool

    @property
    def newline(self) -> str:
        """The file's dominant newline, used for lines a rule inserts."""
        crlf = self.text.count("\r\n")
        lf = self.text.count("\n") - crlf
        cr = self.text.count("\r") - crlf
        if crlf >= lf and crlf >= cr and crlf:
            return "\r\n"
        if cr > lf:
            return "\r"
        return "\n"

    def encode(self, text: str) -> bytes:
        data = text.encode(self.encoding)
        return codecs.BOM_UTF8 + data if self.bom else data


def decode(data: bytes) -> Source:
    """Decode Python source bytes as the interpreter would, or raise SourceError."""
    if len(data) > MAX_BYTES:
        raise SourceError(f"file is {len(data) // (1024 * 1024)} MB, larger than the {MAX_BYTES // (1024 * 1024)} MB "
                          "limit for source files (generated code?); it was left alone")
    if b"\0" in data:
        raise SourceError("file contains NUL bytes: not a Python source file; it was left alone")
    bom = data.startswith(codecs.BOM_UTF8)
    codec = _declared_encoding(data, bom)
    body = data[len(codecs.BOM_UTF8):] if bom else data
    try:
        text = body.decode(codec)
    except UnicodeDecodeError as exc:
        line = body[: exc.start].count(b"\n") + 1
        raise SourceError(f"line {line}: bytes are not valid {codec} (byte {exc.object[exc.start]:#04x}); "
                          "add a coding cookie such as `# -*- coding: latin-1 -*-` or convert the file to UTF-8"
                          ) from None
    return Source(text=text, encoding=codec, bom=bom)


def _declared_encoding(data: bytes, bom: bool) -> str:
    """The encoding of the PEP 263 coding cookie, or UTF-8."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        message = str(exc)
        if message.startswith("unknown encoding"):
            raise SourceError(f"{message} in the coding cookie; name an encoding Python knows (PEP 263)") from None
        if bom:
            raise SourceError("the file starts with a UTF-8 byte order mark but its coding cookie is not `utf-8` "
                              "(Python refuses such a file); remove the cookie or spell it `utf-8`") from None
        return "utf-8"  # no usable cookie and bytes that are not UTF-8: decoding says which line holds them
    return "utf-8" if encoding in ("utf-8-sig", "utf-8") else encoding


def read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        raise SourceError("no such file") from None
    except PermissionError:
        raise SourceError("permission denied: cannot read the file") from None
    except IsADirectoryError:
        raise SourceError("is a directory") from None
    except OSError as exc:
        raise SourceError(f"cannot read: {exc.strerror or exc}") from None


def _refuse_read_only(path: str, st: os.stat_result) -> None:
    """A file its mode or its owner keeps from being written is not replaced, though its folder is writable."""
    mode = stat.S_IMODE(st.st_mode)
    if not mode & 0o222:
        raise PermissionError(errno.EACCES, f"read-only file, mode {mode:o}: make it writable with `chmod u+w` to "
                              "rewrite it")
    if not os.access(path, os.W_OK):
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            raise OSError(errno.EROFS, "Read-only file system")
        raise PermissionError(errno.EACCES, f"no write permission for this file (mode {mode:o}, owner uid "
                              f"{st.st_uid}); the folder's permission is not enough")


class ChangedOnDisk(OSError):
    def __init__(self) -> None:
        super().__init__(errno.ESTALE, "the file changed on disk during the run; run again")


def write_atomic(path: str, data: bytes, expected: bytes | None = None) -> None:
    """Replace `path` with `data` so that the file is either untouched or fully written.

    The temporary file lives in the same folder (same file system, so the rename is atomic) and takes the
    original's mode bits, owner and group; on any failure it is removed and the original stays as it was. A
    read-only file (no write permission bit, even for root) is refused, as an editor refuses it. A symbolic
    link stays a link: the file it points to is the one replaced. With `expected` (the bytes the new content
    was computed from), a file that someone changed meanwhile (an editor saving) is not overwritten.
    """
    path = os.path.realpath(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        _refuse_read_only(path, st)
    fd, tmp = tempfile.mkstemp(prefix=".nm-", suffix=".tmp", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, stat.S_IMODE(st.st_mode) if st else 0o644)
        if st is not None:
            _keep_owner(tmp, st)
        if expected is None or _needs_write(path, data, expected):
            os.replace(tmp, path)
        else:
            os.unlink(tmp)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _needs_write(path: str, data: bytes, expected: bytes) -> bool:
    """False when the file already holds `data` (another run wrote it); ChangedOnDisk when it holds neither."""
    try:
        with open(path, "rb") as fh:
            current = fh.read()
    except FileNotFoundError:
        current = None
    if current == data:
        return False
    if current != expected:
        raise ChangedOnDisk()
    return True


def _keep_owner(tmp: str, st: os.stat_result) -> None:
    new = os.stat(tmp)
    if (new.st_uid, new.st_gid) != (st.st_uid, st.st_gid):
        try:
            os.chown(tmp, st.st_uid, st.st_gid)
        except PermissionError:  # only root may give a file away; its owner may still give it its group
            try:
                os.chown(tmp, -1, st.st_gid)
            except PermissionError:
                pass  # a group the user is not in: the content matters more than the group
