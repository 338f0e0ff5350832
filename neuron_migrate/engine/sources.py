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
import tokenize
from dataclasses import dataclass

from neuron_migrate.engine.store import open_folder, read_regular  # noqa: F401 (read_regular: for its users)

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
        wide = _wide_encoding(data)
        if wide:
            raise SourceError(f"file is {wide} encoded, and Python reads source files as UTF-8; convert it "
                              f"(`iconv -f {wide} -t UTF-8`) to migrate it; it was left alone")
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


def _wide_encoding(data: bytes) -> str | None:
    """UTF-16 or UTF-32 (by the byte order mark, or by ASCII text with a zero byte beside every character)."""
    for bom, name in ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
                      (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16")):
        if data.startswith(bom):
            return name
    head = data[:400]
    if len(head) >= 8 and (head[1::2].count(0) == len(head) // 2 or head[0::2].count(0) == (len(head) + 1) // 2):
        return "UTF-16"
    return None


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


# Larger files of a kind are reported and left alone: generated code, data or a mistake, and a pathological input
# must not cost minutes and gigabytes (a 48 MB requirements file took 48 s). The largest real file of each kind
# is far smaller: notebooks hold their outputs (images), lock files every package of a big project.
SIZE_LIMITS = {"python": MAX_BYTES, "notebook": 64 * 1024 * 1024, "lockfile": 16 * 1024 * 1024}
OTHER_LIMIT = 4 * 1024 * 1024  # requirements, pyproject.toml, setup.cfg, environment.yml, Dockerfiles, shell, ...


def size_limit(kind: str | None) -> int:
    return SIZE_LIMITS.get(kind or "", OTHER_LIMIT)


def _megabytes(n: int) -> str:
    return f"{n // (1024 * 1024)} MB" if n >= 1024 * 1024 else f"{n // 1024} KB"


def _open_readonly(path: str) -> int:
    """Without blocking: opening a FIFO for reading waits for a writer otherwise."""
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))


def read_bytes(path: str, limit: int = MAX_BYTES, kind: str | None = None) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them (SourceError past it, and for anything that
    is not a regular file: a FIFO would block the run, `/dev/zero` never ends)."""
    try:
        fd = _open_readonly(path)
    except FileNotFoundError:
        raise SourceError("no such file") from None
    except PermissionError:
        raise SourceError("permission denied: cannot read the file") from None
    except IsADirectoryError:
        raise SourceError("is a directory") from None
    except OSError as exc:
        raise SourceError(f"cannot read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise SourceError("is a directory")
            if not stat.S_ISREG(st.st_mode):
                raise SourceError("not a regular file (a pipe, a device or a socket); it was left alone")
            data = fh.read(limit + 1) if st.st_size <= limit else b""
        except OSError as exc:
            raise SourceError(f"cannot read: {exc.strerror or exc}") from None
    if st.st_size > limit or len(data) > limit:
        what, hint = ("source files", "generated code?") if kind in (None, "python") else \
            (f"{kind} files", "generated, or not what its name says?")
        raise SourceError(f"file is {_megabytes(max(st.st_size, len(data)))}, larger than the {_megabytes(limit)} "
                          f"limit for {what} ({hint}); it was left alone")
    return data


def _refuse_read_only(name: str, st: os.stat_result, dir_fd: int) -> None:
    """A file its mode or its owner keeps from being written is not replaced, though its folder is writable."""
    mode = stat.S_IMODE(st.st_mode)
    if not mode & 0o222:
        raise PermissionError(errno.EACCES, f"read-only file, mode {mode:o}: make it writable with `chmod u+w` to "
                              "rewrite it")
    if not os.access(name, os.W_OK, dir_fd=dir_fd, follow_symlinks=False):
        if os.statvfs(dir_fd).f_flag & os.ST_RDONLY:
            raise OSError(errno.EROFS, "Read-only file system")
        raise PermissionError(errno.EACCES, f"no write permission for this file (mode {mode:o}, owner uid "
                              f"{st.st_uid}); the folder's permission is not enough")


class ChangedOnDisk(OSError):
    def __init__(self) -> None:
        super().__init__(errno.ESTALE, "the file changed on disk during the run; run again")


def write_atomic(path: str, data: bytes, expected: bytes | None = None, real: str | None = None) -> None:
    """Replace `path` with `data` so that the file is either untouched or fully written.

    The temporary file lives in the same folder (same file system, so the rename is atomic) and takes the
    original's mode bits, owner and group; on any failure it is removed and the original stays as it was. A
    read-only file (no write permission bit, even for root) is refused, as an editor refuses it. A symbolic
    link named by `path` stays a link: the file it points to is the one replaced. With `real` (the real path
    the run found the file at), a path that now resolves elsewhere (the file swapped for a link meanwhile) is
    refused. The write itself never goes through a link: the folders are opened one by one without following
    links, and the file is replaced by name inside the opened folder (`write_in_folder`), so a link swapped in
    after the check makes the write fail, not land elsewhere. With `expected` (the bytes the new content was
    computed from), a file that someone changed meanwhile (an editor saving) is not overwritten.
    """
    target = os.path.realpath(path)
    if real is not None and target != real:
        raise OSError(errno.ELOOP, "the file was replaced by a symbolic link to another place during the run "
                                   f"({target}); it was not written through the link")
    folder, name = os.path.split(target)
    dir_fd = open_folder(folder)
    try:
        write_in_folder(dir_fd, name, data, expected)
    finally:
        os.close(dir_fd)


def write_in_folder(dir_fd: int, name: str, data: bytes, expected: bytes | None = None,
                    new_mode: int = 0o644) -> None:
    """Replace the entry `name` of the folder `dir_fd` with a regular file holding `data` (see `write_atomic`);
    an entry that is a link or not a regular file is refused, never followed. A new file gets `new_mode`."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise OSError(errno.ELOOP, "the file is a symbolic link now (it was swapped during the run); it was "
                                       "not written through the link")
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file now; it was left alone")
        _refuse_read_only(name, st, dir_fd)
    fd, tmp = _create_temp(dir_fd)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), stat.S_IMODE(st.st_mode) if st else new_mode)
            if st is not None:
                _keep_owner(fh.fileno(), st)
            os.fsync(fh.fileno())
        if expected is None or _needs_write(dir_fd, name, data, expected):
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        else:
            os.unlink(tmp, dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        raise


def _create_temp(dir_fd: int) -> tuple[int, str]:
    """A new file (never an existing entry, never through a link) for the content, and its name."""
    tmp = f".nm-{os.urandom(6).hex()}.tmp"  # what secrets.token_hex(6) gives, without loading hashlib
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    return os.open(tmp, flags, 0o600, dir_fd=dir_fd), tmp


def _needs_write(dir_fd: int, name: str, data: bytes, expected: bytes) -> bool:
    """False when the file already holds `data` (another run wrote it); ChangedOnDisk when it holds neither."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=dir_fd)
    except FileNotFoundError:
        current = None if expected else b""  # a new file (`expected` empty) must still be absent
    else:
        with os.fdopen(fd, "rb") as fh:
            current = fh.read(max(len(expected), len(data)) + 1)
    if current == data:
        return False
    if current != expected:
        raise ChangedOnDisk()
    return True


def _keep_owner(fd: int, st: os.stat_result) -> None:
    new = os.fstat(fd)
    if (new.st_uid, new.st_gid) != (st.st_uid, st.st_gid):
        try:
            os.fchown(fd, st.st_uid, st.st_gid)
        except PermissionError:  # only root may give a file away; its owner may still give it its group
            try:
                os.fchown(fd, -1, st.st_gid)
            except PermissionError:
                pass  # a group the user is not in: the content matters more than the group
