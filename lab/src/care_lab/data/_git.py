"""What git says about a file: the commit a test read ran at, and whether its rule is committed.

Examples:
    >>> committed_file("/nowhere/rule.md")
    Traceback (most recent call last):
    ...
    care_sdk.errors.InputError: /nowhere/rule.md: no such rule file: a test read needs the committed rule ...
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

from care_sdk.errors import InputError

__all__ = ["CommittedFile", "committed_file", "git"]


def git(repo: Path, *args: str) -> str | None:
    """``git -C repo ARGS``'s output, stripped; ``None`` when git fails or is missing.

    Examples:
        >>> git(Path("/"), "rev-parse", "--is-inside-work-tree") is None
        True
    """
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@dataclass(frozen=True)
class CommittedFile:
    """A file committed and unchanged in its working tree, with the commits that prove when.

    Examples:
        >>> CommittedFile("r.md", "ab" * 32, "c1", "c2", True).path
        'r.md'
    """

    path: str
    """The path relative to the repository root."""
    sha256: str
    """The sha256 of its bytes (the committed bytes: the working tree holds the same)."""
    commit: str
    """The last commit that changed it."""
    head: str
    """The repository's HEAD commit now."""
    clean: bool
    """Whether the whole working tree (tracked files) matches HEAD."""


def committed_file(path: str | Path) -> CommittedFile:
    """The committed state of ``path``: it must be tracked in HEAD and unchanged in the working tree.

    Raises:
        InputError: no such file, not in a git repository, not committed, or changed since its
            last commit (the message names the file).

    Examples:
        >>> import subprocess, tempfile
        >>> repo = Path(tempfile.mkdtemp())
        >>> _ = subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
        >>> _ = (repo / "rule.md").write_text("# Rule\\n")
        >>> committed_file(repo / "rule.md")
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: .../rule.md: the rule is not committed: commit it before the read, ...
    """
    path = Path(path).absolute()
    if not path.is_file():
        raise InputError("no such rule file: a test read needs the committed rule that governs it", location=str(path))
    root = git(path.parent, "rev-parse", "--show-toplevel")
    if root is None:
        raise InputError("not in a git repository: a test read needs a committed rule", location=str(path))
    relative = path.resolve().relative_to(Path(root).resolve()).as_posix()
    head = git(Path(root), "rev-parse", "HEAD")
    commit = git(Path(root), "log", "-1", "--format=%H", "--", relative)
    if head is None or not commit or git(Path(root), "cat-file", "-e", f"HEAD:{relative}") is None:
        raise InputError(
            "the rule is not committed: commit it before the read, so the read can be shown to come after it",
            location=str(path),
        )
    if git(Path(root), "diff", "--quiet", "HEAD", "--", relative) is None:
        raise InputError(
            "the rule has changed since its last commit: commit the change (a rule is fixed before the read)",
            location=str(path),
        )
    status = git(Path(root), "status", "--porcelain", "--untracked-files=no")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return CommittedFile(relative, digest, commit, head, status == "")
