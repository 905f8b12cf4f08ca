"""How an export reaches its folder without touching what it did not write: it is written in a folder of its own
beside OUT (made fresh and exclusively, never an existing path or a link, and marked as this export's), with a
manifest of every file it wrote and its digest, then moved in by one rename, signals held across the renames.
`--replace` removes an earlier export only where OUT holds exactly what that export's manifest names, each file with
its digest; anything else there is refused by name. What a killed export left beside OUT is cleaned by the next only
where it carries an export's marker and its process is gone, and an earlier export it had moved aside is put back.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

from scaling_axes.io import SuiteError, alive, atomic_write

MANIFEST = "scaling_axes_export.json"  # every file the export wrote, with its sha256
MARKER = ".scaling_axes_aside"  # inside each folder an export made beside OUT: whose it is, and what for
STOPS = (signal.SIGINT, signal.SIGTERM)
PREVIOUS = "previous"  # an earlier export, moved into a `replaced` aside while the new one moves in


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def new_aside(out: Path, kind: str) -> Path:
    """A folder beside `out`, made by this process alone (`mkdtemp`: a new random name, created exclusively, 0700),
    marked with its pid, OUT's name and `kind` ("export": being written; "replaced": an earlier export moved out)."""
    path = Path(tempfile.mkdtemp(prefix=f".{out.name}.{kind}", dir=out.parent))
    path.chmod(0o777 & ~_umask())  # mkdtemp's 0700, opened as a folder mkdir makes: others read an export (0755)
    atomic_write(path / MARKER, json.dumps({"pid": os.getpid(), "out": out.name, "kind": kind}))  # whole or absent
    return path


def _umask() -> int:
    """The process's umask, read without setting it (another thread's files never see a momentary 0)."""
    status = Path("/proc/self/status")
    lines = status.read_text().splitlines() if status.exists() else []
    found = [int(line.split()[1], 8) for line in lines if line.startswith("Umask:")]
    if found:
        return found[0]
    mask = os.umask(0o022)  # no /proc: set and restored at once
    os.umask(mask)
    return mask


def write_manifest(folder: Path) -> None:
    """The manifest of every file in `folder` (the export, written there by this export alone) and its digest."""
    files = {p.name: digest(p) for p in sorted(folder.iterdir()) if p.name not in (MANIFEST, MARKER)}
    (folder / MANIFEST).write_text(json.dumps({"format": 1, "files": files}, indent=1))


def earlier_export(out: Path) -> dict[str, str]:
    """name -> digest of the earlier export `out` holds, verified: its manifest, and every entry of `out` a file it
    names with that digest; else a one-line refusal naming the first entry that is not (a user's file, an edited
    one, a link)."""
    manifest = out / MANIFEST
    if manifest.is_symlink() or not manifest.is_file():
        raise SuiteError(
            f"OUT {out} holds no export manifest ({MANIFEST}): --replace replaces only an export this suite wrote; "
            "pass an empty or new folder"
        )
    files = manifest_files(manifest)
    for entry in sorted(out.iterdir()):
        if entry.name == MANIFEST or (entry.name == MARKER and entry.is_file() and not entry.is_symlink()):
            continue  # the marker: an export killed between its rename and the marker's removal
        if entry.is_symlink() or not entry.is_file() or entry.name not in files:
            raise SuiteError(
                f"OUT {out} holds {entry.name}, which no earlier export there wrote: --replace would take it; "
                "move it out, or pass another folder"
            )
        if digest(entry) != files[entry.name]:
            raise SuiteError(
                f"OUT {out}'s {entry.name} changed since the export wrote it: --replace would take your edit; "
                "move it out, or pass another folder"
            )
    return files


MAX_MANIFEST_BYTES = 1 << 20  # a manifest names a dozen files: anything larger is not one


def manifest_files(manifest: Path) -> dict[str, str]:
    """The manifest's `files` (name -> sha256), or one line naming it and what is wrong with it."""
    fix = "it is not what an export wrote: move OUT's files out by hand, or pass an empty or new folder"
    if manifest.stat().st_size > MAX_MANIFEST_BYTES:
        raise SuiteError(f"{manifest}: over {MAX_MANIFEST_BYTES:,} bytes; {fix}")
    try:
        files = json.loads(manifest.read_text()).get("files")
    except (ValueError, RecursionError, AttributeError, UnicodeDecodeError):
        raise SuiteError(f"{manifest}: not a JSON object of an export's manifest; {fix}") from None
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise SuiteError(f"{manifest}: its `files` is {type(files).__name__}, not a mapping of names to digests; {fix}")
    return files


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM held back across what must not be cut in two (the renames that publish), then delivered
    to the handlers they had. Held by handlers, not a signal mask: a mask is the calling thread's, and the process's
    other threads (torch's, the tokenizers') would take the signal and have it run here at once."""
    held: list[int] = []
    previous = {each: signal.signal(each, lambda signum, frame: held.append(signum)) for each in STOPS}
    try:
        yield
    finally:
        for each, handler in previous.items():
            signal.signal(each, handler)
        for each in held:
            signal.raise_signal(each)


def publish(aside: Path, out: Path, replace: bool) -> None:
    """Move the export in `aside` to `out` in one rename: onto a missing or empty `out`; with `replace`, the earlier
    export (checked again: exactly its manifest's files) moved into a `replaced` aside first, put back if the move
    fails, removed once the new one is in. The caller holds signals across it (`signals_held`): it is never cut
    between its renames."""
    holder = None
    if replace and out.exists() and any(out.iterdir()):
        earlier_export(out)
        holder = new_aside(out, "replaced")
        os.rename(out, holder / PREVIOUS)
    try:
        os.rename(aside, out)
    except OSError as error:
        if holder is not None:
            os.rename(holder / PREVIOUS, out)
            shutil.rmtree(holder)  # its marker alone: the earlier export is back in place
        raise SuiteError(
            f"OUT {out} was written by another export meanwhile ({error.strerror}): nothing of this one was "
            "left there; pass another folder, or --replace"
        ) from None
    (out / MARKER).unlink()  # the marker came along, so that a kill before this left nothing unmarked aside
    if holder is not None:
        shutil.rmtree(holder)  # the earlier export, verified, and the marker: nothing else is in it


def tidy_stranded(out: Path) -> None:
    """What exports to `out` that were killed left beside it, where it is theirs (a folder, not a link, holding an
    export's marker naming `out`) and their process is gone: an earlier export moved aside is put back where `out`
    is missing, then the folder goes."""
    for stale in sorted(out.parent.glob(f".{out.name}.*")):
        marker = stale / MARKER
        if stale.is_symlink() or not stale.is_dir() or marker.is_symlink() or not marker.is_file():
            continue
        owner = read_marker(marker)
        if owner["out"] != out.name or alive(owner["pid"]):
            continue
        previous = stale / PREVIOUS
        if owner["kind"] == "replaced" and previous.is_dir() and not previous.is_symlink():
            if out.exists():  # OUT made again by hand since: the earlier export stays aside, never deleted
                print(
                    f"kept aside: {previous} holds the export that an interrupted `export --replace` moved out of "
                    f"{out}, made again since; move it back or remove it yourself"
                )
                continue
            os.rename(previous, out)
            print(f"put back the export that an interrupted `export --replace` had moved aside: {out}")
        shutil.rmtree(stale)


PID_MAX = 1 << 22  # the largest process id Linux gives (/proc/sys/kernel/pid_max at most)


def read_marker(marker: Path) -> dict:
    """An aside's marker (pid, OUT's name, kind) as an export writes it, or one line naming it, what is wrong and
    how to clear it: a marker no export wrote would otherwise stop every export to that folder."""
    fix = f"an export did not write it: remove {marker.parent} once you have checked it holds nothing of yours"
    try:
        owner = json.loads(marker.read_text()) if marker.stat().st_size <= MAX_MANIFEST_BYTES else None
    except (ValueError, RecursionError, UnicodeDecodeError):
        owner = None
    if not isinstance(owner, dict):
        raise SuiteError(f"{marker}: not an export's marker (a JSON object of pid, out and kind); {fix}")
    pid = owner.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid <= PID_MAX:
        raise SuiteError(f"{marker}: its pid {pid!r} is not a process id (1 to {PID_MAX}); {fix}")
    if not isinstance(owner.get("out"), str) or owner.get("kind") not in ("export", "replaced"):
        raise SuiteError(
            f"{marker}: its out {owner.get('out')!r} or kind {owner.get('kind')!r} is not an export's; {fix}"
        )
    return owner
