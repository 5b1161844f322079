"""Whose a discovered file is. customops finds a manifest, a profile and the checkout that bounds the search
by climbing from the repository; in a directory others can write (a shared /tmp, a CI runner's workspace)
another user can plant `.git/` and `customops.toml` above someone's repository, and so choose what `launch`
preloads. What discovery finds is used only when no one else could have put it there, the cache's rule:
owned by the invoking user or root, not writable by group or others; its directory likewise (writable by
others only if sticky and the user's own); every directory above it owned by the user or root and not
writable by others unless sticky (no one else can rename what is below). A file named on the command line
(`--manifest`, `--profile`) is the user's choice and never judged."""

from __future__ import annotations

import os
import stat

from customops import cachedir
from customops.errors import printable


def foreign(path: str) -> str | None:
    """Why `path` (a file or directory discovery found) may be someone else's doing, for a warning; None when
    it is not. A symbolic link is judged as itself, where it lies, and as what it leads to."""
    try:
        for judged in dict.fromkeys([os.path.abspath(path), os.path.realpath(path)]):
            reason = _judged(judged, path)
            if reason is not None:
                return reason
    except OSError as exc:
        return f"{printable(path)} cannot be judged: {exc.strerror or exc}"
    return None


def _judged(entry: str, path: str) -> str | None:
    """The rule for one entry (`path` as discovery named it, for the warning): its owner and mode, its
    directory's, and those of every directory above."""
    st = os.lstat(entry)
    if not _trusted_owner(st):
        return f"{printable(entry)} is owned by {_owner(st.st_uid)}, not by you or root"
    if st.st_mode & 0o022 and not stat.S_ISLNK(st.st_mode):  # a link's own mode means nothing
        return f"{printable(entry)} is writable by others"
    directory = os.path.dirname(entry)
    holder = os.stat(directory)
    if not _trusted_owner(holder) or (holder.st_mode & 0o022 and not (
            holder.st_mode & stat.S_ISVTX and holder.st_uid == os.geteuid())):
        return f"its directory {printable(directory)} is writable by others or owned by {_owner(holder.st_uid)}"
    while directory != "/":
        directory = os.path.dirname(directory)
        if not cachedir.trusted_directory(os.stat(directory), own=False):  # the cache's own rule above it
            return f"{printable(directory)} above it can be changed by others"
    return None


def ignored(path: str, what: str) -> bool:
    """Whether discovery must pass over `path` (foreign); if so the warning that says which file and why is
    kept for the command to show (warnings())."""
    reason = foreign(path)
    if reason is not None:
        _WARNINGS[f"ignored {what} {printable(path)}: {reason} (someone else may have put it there; name it "
                  "with its option to use it anyway)"] = None
    return reason is not None


def warnings() -> list[str]:
    """The warnings of the files discovery passed over in this process, each once."""
    return list(_WARNINGS)


_WARNINGS: dict[str, None] = {}  # in the order found, each once


def _trusted_owner(st: os.stat_result) -> bool:
    return st.st_uid in (os.geteuid(), 0)


def _owner(uid: int) -> str:
    import pwd

    try:
        return f"{printable(pwd.getpwuid(uid).pw_name)} (uid {uid})"
    except KeyError:
        return f"uid {uid}"
