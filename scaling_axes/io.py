"""The suite's files on disk. Writes are atomic: a temporary file in the same directory, then a rename, so readers
see old or new, never half; a write that fails (a full disk) names the file. Reads never unpickle code
(`weights_only=True`) and a missing, truncated or corrupt file is an error that names the file and what to do."""

from __future__ import annotations

import csv
import errno
import functools
import hashlib
import importlib.util
import io
import json
import os
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

TEMPORARY = re.compile(r"^\..+\.tmp(\d+)$")  # `.<name>.tmp<pid>`: what `temporary_path` names


def temporary_path(path: Path) -> Path:
    """Where `path` is written before its rename: a hidden name in the same directory, unique to this process."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def remove_temporaries(directory: Path, unlocked: bool = False) -> list[Path]:
    """Delete the temporary files that writes killed mid-way left in `directory`; call it only while holding the lock
    on what writes there (a live writer's file would go too), or `unlocked`: then only those whose writer (the pid
    in its name) is no longer alive on this machine. Returns what was removed."""
    found = [
        p
        for p in directory.glob(".*.tmp*")
        if (m := TEMPORARY.match(p.name)) and p.is_file() and not (unlocked and alive(int(m.group(1))))
    ]
    for path in found:
        path.unlink(missing_ok=True)
    if found:
        print(f"removed {len(found)} temporary file(s) that an interrupted write left in {directory}")
    return found


def alive(pid: int) -> bool:
    """Whether process `pid` runs on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def _replace_with(path: str | Path, write: Callable[[Path], None], before_rename: Callable | None = None) -> None:
    """`write` a temporary file, then rename it over `path`; on any failure the temporary file goes, `path` stays.
    `before_rename(tmp, path)` runs on the finished temporary file."""
    path = Path(path)
    tmp = temporary_path(path)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # as a plain open makes it (safetensors' writer makes its files 0600)
        if before_rename is not None:
            before_rename(tmp, path)
        os.replace(tmp, path)
    except Exception as error:
        if (code := write_failure(error, tmp)) is None:
            raise
        raise _unwritable(path, code) from error
    finally:
        tmp.unlink(missing_ok=True)


def write_failure(error: BaseException, written: Path) -> int | None:
    """Why writing `written` failed, as an errno of UNWRITABLE, from the OS's error or the one a writer wraps it in
    (torch.save's zip writer: "unexpected pos", "file write failed"; safetensors' SafetensorError); None: another
    error."""
    text = str(error)
    if isinstance(error, OSError):
        return error.errno if error.errno in UNWRITABLE else None
    if isinstance(error, RuntimeError) and ("unexpected pos" in text or "write failed" in text):
        return errno.EFBIG if _at_size_limit(written) else errno.ENOSPC
    if type(error).__name__ == "SafetensorError" and ("No space left" in text or "too large" in text):
        return errno.EFBIG if "too large" in text else errno.ENOSPC
    return None


UNWRITABLE = {  # why a write failed -> what to do
    errno.ENOSPC: "free space on its device",
    errno.EDQUOT: "free space within your disk quota",
    errno.EFBIG: "raise this process's file-size limit (ulimit -f)",
    errno.EACCES: "make its directory writable",
    errno.EROFS: "make its directory writable (its file system is read-only)",
}


def _at_size_limit(tmp: Path) -> bool:
    """Whether a failed write stopped at the process's file-size limit (`ulimit -f`), not at a full disk."""
    import resource

    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return limit != resource.RLIM_INFINITY and tmp.exists() and tmp.stat().st_size >= limit - 2**20


@functools.cache
def _umask() -> int:
    """This process's umask (read by setting it, so once, and set back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _unwritable(path: Path, code: int) -> OSError:
    return OSError(
        code,
        f"could not write {path} ({os.strerror(code)}): {UNWRITABLE[code]}, then rerun the same command (a run "
        "resumes from its last checkpoint)",
    )


def out_of_resources(error: BaseException) -> str | None:
    """One line for an error of the resources class (memory, disk, file size, file descriptors): what ran out and
    where; None for any other error."""
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    if isinstance(error, MemoryError) or (
        isinstance(error, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)
    ):
        return f"ran out of memory ({text}): train a smaller micro-batch or model, or free memory, then rerun"
    if isinstance(error, ImportError) and ("failed to map segment" in text or "cannot allocate memory" in text.lower()):
        # the loader could not map a shared library (torch's are gigabytes) under an address-space limit
        return f"ran out of memory loading a library ({text}): raise the memory limit (ulimit -v), then rerun"
    if not isinstance(error, OSError) or error.errno not in (*UNWRITABLE, errno.EMFILE, errno.ENFILE):
        return None
    where = f" at {error.filename}" if error.filename else ""
    if error.errno in (errno.EMFILE, errno.ENFILE):
        return f"ran out of file descriptors{where} ({error.strerror}): raise the limit (ulimit -n), then rerun"
    if where:
        return f"could not write{where} ({error.strerror}): {UNWRITABLE[error.errno]}, then rerun"
    return None  # already one that names its file (`_unwritable`)


def atomic_write(path: str | Path, data: str | bytes, checksum: bool = False) -> None:
    """Write `data` atomically; with `checksum` its blake2b goes into `<path>.blake2b` first (`verify_checksum`)."""
    _replace_with(
        path,
        lambda tmp: tmp.write_bytes(data.encode() if isinstance(data, str) else data),
        _record_checksum if checksum else None,
    )


def atomic_torch_save(obj: Any, path: str | Path, checksum: bool = False) -> None:
    """`torch.save` atomically; with `checksum` its blake2b goes into `<path>.blake2b` first (`verify_checksum`)."""
    import torch  # here, not above: the commands that train nothing import this module and need no torch

    _replace_with(path, lambda tmp: torch.save(obj, tmp), _record_checksum if checksum else None)


def atomic_save_safetensors(state: dict[str, torch.Tensor], path: str | Path, checksum: bool = False) -> None:
    """A state dict as safetensors, atomically (tensors only: loading it runs no code). Tensors that share memory
    (tied weights) are stored under each name, as safetensors requires."""
    from safetensors.torch import save_file

    stored, tensors = set(), {}
    for name, tensor in state.items():
        tensor = tensor.detach().cpu()
        storage = tensor.untyped_storage().data_ptr()
        tensors[name] = tensor.clone() if storage in stored else tensor.contiguous()
        stored.add(storage)
    _replace_with(path, lambda tmp: save_file(tensors, str(tmp)), _record_checksum if checksum else None)


def load_state(path: str | Path, fix: str) -> dict[str, torch.Tensor]:
    """A state dict the suite wrote: safetensors (`.safetensors`), else a tensors-only torch file (`load_torch`)."""
    path = Path(path)
    if path.suffix != ".safetensors":
        return load_torch(path, fix)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; {fix}")
    from safetensors.torch import load_file

    try:
        return load_file(path)
    except Exception as error:  # whatever a damaged header or a short file raises: the file is the problem
        raise _unreadable(path, fix, error) from error


def file_digest(path: Path) -> str:
    """The blake2b (16 bytes) of a file's bytes, read in 16 MiB blocks; once per process and version of the file
    (its size and modification time), so that a report reading many finished runs hashes each once."""
    stat = Path(path).stat()
    return _digest(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=4096)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            digest.update(block)
    return digest.hexdigest()


def checksum_file(path: Path) -> Path:
    return path.with_name(f"{path.name}.blake2b")


INTEGRITY_FORMAT = 2  # checksum files say which format wrote them; none before it is trusted


def _record_checksum(tmp: Path, path: Path) -> None:
    """Before `tmp` replaces `path`: the checksum file lists its digest and the last two other ones before it, so a
    kill on either side of the rename leaves a file whose digest is listed, and rewriting the same bytes leaves the
    checksum file's bytes as they were (a rebuild of unchanged results changes no file)."""
    sidecar = checksum_file(path)
    try:
        earlier = json.loads(sidecar.read_text())["blake2b"] if sidecar.exists() else []
    except (ValueError, KeyError, TypeError):  # a damaged checksum file lists nothing earlier
        earlier = []
    digest = file_digest(tmp)
    record = {"format": INTEGRITY_FORMAT, "blake2b": [digest, *(d for d in earlier if d != digest)][:3]}
    atomic_write(sidecar, json.dumps(record))


def verify_checksum(path: Path, fix: str) -> None:
    """Stop unless `path`'s bytes are what the suite wrote: its checksum file (`<name>.blake2b`, of this integrity
    format) lists their digest. A missing or unreadable checksum file stops too: the suite writes one with every
    file it later trusts, so its absence means the file was not written by this suite's version, or was tampered
    with, never that it may be skipped."""
    sidecar = checksum_file(Path(path))
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path} does not exist; {fix}")
    if not sidecar.is_file():
        raise CorruptFileError(
            f"{path} has no checksum file ({sidecar.name}), which the suite writes with it: it "
            f"cannot be verified; {fix}"
        )
    record = read_json(sidecar, fix)
    if not isinstance(record, dict) or record.get("format") != INTEGRITY_FORMAT:
        raise CorruptFileError(
            f"{sidecar} is not a checksum file of format {INTEGRITY_FORMAT} (an older suite's, or "
            f"damaged): {path} cannot be verified; {fix}"
        )
    if file_digest(Path(path)) not in record.get("blake2b", []):
        raise CorruptFileError(
            f"{path} does not match the checksum written with it ({sidecar.name}): its bytes "
            f"changed after it was written; {fix}"
        )


def read_verified_json(path: str | Path, fix: str) -> Any:
    """A JSON file the suite wrote with a checksum (`atomic_write(..., checksum=True)`), verified, then parsed."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; {fix}")
    verify_checksum(path, fix)
    return read_json(path, fix)


class SuiteError(Exception):
    """An error whose message says what was wrong and what to do: the command line prints it as one line."""


class CorruptFileError(SuiteError, ValueError):
    """A file of the suite's that cannot be read: the message names it and what to do."""


def load_torch(path: str | Path, fix: str, mmap: bool = False) -> Any:
    """`torch.load(path, weights_only=True)` onto the CPU: tensors and plain containers only, so a crafted file cannot
    run code. `fix` says what to do if the file is unreadable; `mmap` maps the tensors instead of reading them (a
    cheap check that a large checkpoint opens)."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; {fix}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as error:
        if not mmap:
            raise _unreadable(path, fix, error) from error
    try:  # a file that does not map (a crafted or legacy pickle): read it plainly, to load it or to say why not
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        raise _unreadable(path, fix, error) from error


def _unreadable(path: Path, fix: str, error: Exception) -> CorruptFileError:
    first = (str(error).splitlines() or [""])[0]
    if isinstance(error, pickle.UnpicklingError):
        return CorruptFileError(
            f"{path} holds more than tensors and plain data ({first}); the suite never writes such "
            f"files and will not run the code a pickle can carry. {fix}"
        )
    # whatever a damaged zip or pickle stream raises: the file is the problem
    return CorruptFileError(f"{path} is truncated or corrupt ({type(error).__name__}: {first}); {fix}")


def check_directory(path: Path, what: str) -> None:
    """Stop before any compute unless `path` is a directory this process can write in (made if missing); `what` names
    the option or setting it came from."""
    if path.exists() and not path.is_dir():
        raise SuiteError(f"{what} {path} is a file, not a directory: pass a directory (it is made if missing)")
    probe = path / f".write-test-{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise SuiteError(
            f"cannot write in {path} ({error.strerror}): make it writable or pass another {what}, then rerun"
        ) from error


def check_within(path: Path, root: Path) -> None:
    """Stop before a run writes into `path` if it, or any folder between it and `root` (the output root), is a link
    out of `root`: the run would land beside someone else's files. Links that stay inside `root` (a run two
    experiments declare alike, linked to where it trained) are the suite's own."""
    inside = Path(root).resolve()
    for part in (Path(path), *Path(path).parents):
        if part == Path(root) or Path(root) not in part.parents:
            break
        if part.is_symlink() and not part.resolve().is_relative_to(inside):
            raise SuiteError(
                f"{part} is a link (to {os.readlink(part)}) out of the output root {root}: a run would write "
                "there; remove the link, or pass that folder as --out-dir"
            )


def check_no_links(folder: Path, managed: tuple[str, ...] = ()) -> None:
    """Stop before anything is written into `folder` if an entry inside it is a link out of it: a write through it
    (Lightning's CSV logger opens hparams.yaml plainly) would land outside. Links within it stay, and so does what
    the subfolders `managed` hold (a tool's own, which it links as it likes); the subfolder itself is checked."""
    inside = folder.resolve()
    for directory, folders, files in os.walk(folder):  # links to folders are listed, never followed
        entries = [Path(directory) / name for name in (*folders, *files)]
        if Path(directory) == folder:  # a tool's own folder is checked itself, its insides left to the tool
            folders[:] = [name for name in folders if name not in managed]
        for path in entries:
            if path.is_symlink() and not path.resolve().is_relative_to(inside):
                raise SuiteError(
                    f"{path} is a link (to {os.readlink(path)}): the suite writes its own files there and would "
                    "write through it; remove the link and rerun"
                )


def read_json(path: str | Path, fix: str) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CorruptFileError(f"{path} is truncated or corrupt ({error}); {fix}") from error


def write_csv(path: Path, columns: tuple[str, ...], rows: list[dict], checksum: bool = False) -> str:
    """Write rows (dicts keyed by `columns`) to `path` atomically (`checksum`: with its digest beside it, for a file
    later read as evidence); returns the CSV text."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write(path, buffer.getvalue(), checksum)
    return buffer.getvalue()


def read_rows(path: Path) -> list[dict]:
    """A CSV file's rows as dicts of strings; none where the file does not exist."""
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def package_file(package: str, relative: str) -> Path | None:
    """Path of `relative` inside installed `package` (not imported), or None when the package is absent."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    return path if path.exists() else None


def default_data_root() -> Path:
    """Where corpora and corpus-trained tokenizers live: $SCALING_AXES_DATA, else ./data."""
    value = os.environ.get("SCALING_AXES_DATA")
    if value is None:
        return Path("data")
    if not value.strip() or Path(value).is_file():
        what = "is empty" if not value.strip() else f"is a file ({value})"
        raise SuiteError(f"SCALING_AXES_DATA {what}: set it to a directory for the corpora, or unset it for ./data")
    return Path(value)
