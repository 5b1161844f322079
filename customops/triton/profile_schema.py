"""The schema of a container profile, checked in full before anything is used: a profile is untrusted
input (a pull request can edit a committed customops-profile.json). Every key, type and value is checked
(paths absolute and normalised, nothing nested under a file or a symlink, sizes and offsets bounded); the
first problem is an InputError naming the file and the JSON pointer."""

from __future__ import annotations

import os
import posixpath
import re
from typing import NoReturn

from customops import safeio
from customops.errors import InputError, printable
from customops.frameworks import VERSIONED

MAX_FILE_SIZE = 64 << 30  # the largest libraries of a Triton image are ~2 GB; a sparse skeleton file this big
MAX_DEPTH = 128  # path components (real containers: < 20)
MAX_TEXT = 4096
CHUNK_LIMIT = 256 * safeio.MiB  # one chunk decompressed (the largest real ones: string tables of ~80 MB)
SMALL_FILE_LIMIT = 1 * safeio.MiB  # a file kept whole (TRITON_VERSION, model.py)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
TOP_KEYS = {"schema", "facts", "image", "backend_dir", "server", "server_args", "environment", "working_directory",
            "target", "directories", "links", "files", "ld_so_cache"}
ENVIRONMENT_KEYS = ("LD_PRELOAD", "LD_LIBRARY_PATH")  # an image's loader variables: what its server inherits
REQUIRED_KEYS = {"schema", "facts"}
VERSION_FACTS = ("triton_version", *(f.backend for f in VERSIONED), "cuda", "libpython", "glibc", "glibcxx", "cxxabi")
LIST_FACTS = ("backends", "absent_backends", "missing")
REPOSITORY_FLAGS = ("--model-repository=", "--model-store=")
DIRECTORY = "a directory"


class Validator:
    """Every key, type and value of a profile, in the order materialisation would meet them."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, pointer: str, reason: str) -> NoReturn:
        raise InputError(self.where, f"damaged customops profile: {printable(pointer or '/')}: {reason}")

    def profile(self, p: dict) -> None:
        for key in p:
            if key not in TOP_KEYS:
                self.fail(at("", key), "unknown key")
        for key in REQUIRED_KEYS - p.keys():
            self.fail(at("", key), "missing")
        self.facts(p["facts"])
        if p.get("image") is not None:
            self.text("/image", p["image"], 1024)  # a reference: registry/name:tag@sha256:...
        if "backend_dir" in p:
            self.path("/backend_dir", p["backend_dir"])
        if p.get("server") is not None:
            self.path("/server", p["server"])
        for i, arg in enumerate(self.array("/server_args", p.get("server_args", []))):
            self.text(f"/server_args/{i}", arg)
            if arg.startswith(REPOSITORY_FLAGS):
                self.path(f"/server_args/{i}", arg.split("=", 1)[1])
        for name, value in self.object("/environment", p.get("environment", {})).items():
            if name not in ENVIRONMENT_KEYS:
                self.fail(at("/environment", name), "not a loader variable customops records")
            self.text(at("/environment", name), value)
        if "working_directory" in p:
            self.path("/working_directory", p["working_directory"])
        if "target" in p:
            self.target(p["target"])
        nodes: dict[str, tuple[str, str]] = {}  # path -> (what it is, where the profile says so)
        for i, directory in enumerate(self.array("/directories", p.get("directories", []))):
            self.node(f"/directories/{i}", directory, DIRECTORY, nodes, root_ok=True)
        for path, target in self.object("/links", p.get("links", {})).items():
            self.node(at("/links", path), path, "a link", nodes)
            self.link_target(at("/links", path), target)
        for path, entry in self.object("/files", p.get("files", {})).items():
            self.node(at("/files", path), path, "a file", nodes)
            self.file(at("/files", path), entry)
        if p.get("ld_so_cache") is not None:
            self.base64("/ld_so_cache", p["ld_so_cache"])
            self.node("/ld_so_cache", "/etc/ld.so.cache", "the ld.so.cache", nodes)
        for path, (_, pointer) in nodes.items():  # nothing may be created under a file or a link
            parent = os.path.dirname(path)
            while parent != "/":
                kind = nodes.get(parent, (DIRECTORY, ""))[0]
                if kind != DIRECTORY:
                    self.fail(pointer, f"lies under {parent}, which the profile makes {kind}")
                parent = os.path.dirname(parent)

    def facts(self, facts: object) -> None:
        for key, value in self.object("/facts", facts).items():
            pointer = at("/facts", key)
            if key in VERSION_FACTS:
                if value is not None:
                    self.text(pointer, value, 256)
            elif key in LIST_FACTS:
                for i, item in enumerate(self.array(pointer, value)):
                    self.text(f"{pointer}/{i}", item)
                    if key != "missing" and ("/" in item or item in ("", ".", "..")):
                        self.fail(f"{pointer}/{i}", "not a backend name")
            elif key == "source":
                self.text(pointer, value, 16)
            else:
                self.fail(pointer, "unknown key")

    def target(self, target: object) -> None:
        fields = self.object("/target", target)
        if fields.keys() != {"system_dirs", "lib_token", "platform"}:
            self.fail("/target", "expected exactly the keys system_dirs, lib_token, platform")
        for i, directory in enumerate(self.array("/target/system_dirs", fields["system_dirs"])):
            self.path(f"/target/system_dirs/{i}", directory)
        self.text("/target/lib_token", fields["lib_token"], 256)
        self.text("/target/platform", fields["platform"], 256)

    def file(self, pointer: str, entry: object) -> None:
        fields = self.object(pointer, entry)
        if fields.keys() not in ({"size", "mode", "chunks"}, {"size", "mode", "content"}):
            self.fail(pointer, "expected the keys size, mode and one of chunks, content")
        size = self.integer(f"{pointer}/size", fields["size"], MAX_FILE_SIZE)
        self.integer(f"{pointer}/mode", fields["mode"], 0o7777)
        if "content" in fields:
            self.base64(f"{pointer}/content", fields["content"])
            if size > SMALL_FILE_LIMIT:
                self.fail(f"{pointer}/size", f"over {SMALL_FILE_LIMIT} bytes for a file kept whole")
            return
        previous = -1
        for i, chunk in enumerate(self.array(f"{pointer}/chunks", fields["chunks"])):
            here = f"{pointer}/chunks/{i}"
            if type(chunk) is not list or len(chunk) != 2:
                self.fail(here, "expected [offset, data]")
            offset = self.integer(f"{here}/0", chunk[0], size)
            if offset <= previous:
                self.fail(f"{here}/0", "chunks must be in increasing order of offset")
            previous = offset
            self.base64(f"{here}/1", chunk[1])

    def node(self, pointer: str, path: object, kind: str, nodes: dict[str, tuple[str, str]],
             root_ok: bool = False) -> None:
        self.path(pointer, path)
        assert isinstance(path, str)
        if path == "/" and not root_ok:
            self.fail(pointer, f"the root directory cannot be {kind}")
        if path in nodes:
            self.fail(pointer, f"{path} is listed twice (as {nodes[path][0]} and as {kind})")
        nodes[path] = (kind, pointer)

    def path(self, pointer: str, path: object) -> str:
        """Absolute, normalised, printable, encodable, within the kernel's limits."""
        self.text(pointer, path)
        assert isinstance(path, str)
        if not path.startswith("/") or path.startswith("//") or posixpath.normpath(path) != path:
            self.fail(pointer, "not an absolute, normalised path (no '..', '.', '//' or trailing '/')")
        try:
            parts = path.encode("utf-8", "surrogateescape").split(b"/")
        except UnicodeEncodeError:
            self.fail(pointer, "not encodable as a file name")
        if len(parts) > MAX_DEPTH or any(len(part) > 255 for part in parts):
            self.fail(pointer, f"more than {MAX_DEPTH} components, or one longer than 255 bytes")
        return path

    def link_target(self, pointer: str, target: object) -> None:
        self.text(pointer, target)
        assert isinstance(target, str)
        if not target:
            self.fail(pointer, "an empty symlink target")
        try:
            target.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            self.fail(pointer, "not encodable as a file name")

    def text(self, pointer: str, value: object, limit: int = MAX_TEXT) -> str:
        if type(value) is not str:
            self.fail(pointer, f"expected a string, not {kind_of(value)}")
        if len(value) > limit:
            self.fail(pointer, f"longer than {limit} characters")
        if _CONTROL.search(value):
            self.fail(pointer, "contains a control character")
        return value

    def base64(self, pointer: str, value: object) -> None:
        if type(value) is not str or not _BASE64.fullmatch(value) or len(value) % 4:
            self.fail(pointer, "expected base64 text")

    def integer(self, pointer: str, value: object, limit: int) -> int:
        if type(value) is not int:
            self.fail(pointer, f"expected an integer, not {kind_of(value)}")
        if not 0 <= value <= limit:
            self.fail(pointer, f"{value} is outside 0..{limit}")
        return value

    def array(self, pointer: str, value: object) -> list:
        if type(value) is not list:
            self.fail(pointer, f"expected an array, not {kind_of(value)}")
        return value

    def object(self, pointer: str, value: object) -> dict:
        if type(value) is not dict:
            self.fail(pointer, f"expected an object, not {kind_of(value)}")
        return value


def at(pointer: str, key: str) -> str:
    """A JSON pointer one key further (RFC 6901 escapes)."""
    return f"{pointer}/{key.replace('~', '~0').replace('/', '~1')}"


def kind_of(value: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


# -- materialisation: a skeleton root, confined to its directory ----------------------------------
