"""Moving-in benchmark (issue 15): KDBX import of N entries, entries/s, and the ratio to KeePassXC.

    .venv/bin/python bench/moving.py [--entries 10000] [--cache DIR]

Builds a KDBX 4 database of N entries with pykeepass (Chinese and ASCII titles, a group
tree, a TOTP on every tenth entry, a custom field on every fifth), cached under DIR (a temp
directory by default) because building it is slow. Then, end to end through the real CLI
and a real daemon on a fresh vault (test KDF), times `memories import keepassxc FILE.kdbx`
(parse + every check + batches committed by the engine), and, if `keepassxc-cli` is
installed, times KeePassXC's own `keepassxc-cli export -f xml` of the same database and
`keepassxc-cli import` of that XML in the same run, and prints the ratio to each (issue 33)
and the load average. Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "bench-kdbx-password"
VAULT_PASSWORD = "bench vault password that is long enough"


def build_kdbx(path: Path, entries: int) -> None:
    from pykeepass import create_database

    kp = create_database(str(path), password=PASSWORD)
    groups = []
    for i in range(20):
        parent = kp.add_group(kp.root_group, f"分组 {i}")
        groups.append(kp.add_group(parent, f"子分组 {i}"))
    for i in range(entries):
        title = f"网站 {i}" if i % 2 else f"site {i}"
        entry = kp.add_entry(
            groups[i % len(groups)],
            title,
            f"user{i}@example.cn",
            f"pw-{i}-{os.urandom(6).hex()}",
            url=f"https://site{i}.example.cn/login",
            notes=f"第 {i} 个条目的备注" if i % 3 == 0 else None,
            otp="otpauth://totp/S:u?secret=JBSWY3DPEHPK3PXP&issuer=S" if i % 10 == 0 else None,
            force_creation=True,
        )
        if i % 5 == 0:
            entry.set_custom_property("客户号", f"C-{i}")
    kp.save()


def _memories(home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMORIES_KDF_TARGET_MS": "10"}
    env.pop("MEMORIES_HOME", None)
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", "--home", str(home), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
        timeout=3600,
    )


def time_memories(db: Path, work: Path) -> tuple[float, str]:
    home = work / "home"
    shutil.rmtree(home, ignore_errors=True)
    init = _memories(home, "init", "--password-stdin", stdin=VAULT_PASSWORD + "\n")
    if init.returncode != 0:
        raise SystemExit(f"init failed: {init.stderr}")
    try:
        start = time.perf_counter()
        proc = _memories(home, "import", "keepassxc", str(db), "--kdbx-password-stdin", "--json", stdin=PASSWORD + "\n")
        elapsed = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"import failed: {proc.stdout} {proc.stderr}")
        return elapsed, proc.stdout.strip()
    finally:
        _memories(home, "daemon", "stop")


def time_keepassxc(db: Path, work: Path) -> tuple[float, float] | None:
    """(export, import) seconds: `keepassxc-cli export -f xml` of the database (open, decrypt,
    write every entry: the counterpart of our parse) and `keepassxc-cli import` of that XML
    into a new database (parse, build, encrypt, write: the counterpart of our commit)."""
    if shutil.which("keepassxc-cli") is None:
        return None
    xml = work / "export.xml"
    start = time.perf_counter()
    with open(xml, "w", encoding="utf-8") as out:
        subprocess.run(
            ["keepassxc-cli", "export", "-f", "xml", str(db)],
            input=PASSWORD + "\n",
            stdout=out,
            stderr=subprocess.DEVNULL,
            text=True,
            check=True,
        )
    exported = time.perf_counter() - start
    target = work / "imported.kdbx"
    target.unlink(missing_ok=True)
    start = time.perf_counter()
    subprocess.run(
        # -p: a password (from stdin, twice); -t 100: a short KDF, like the test KDF memories runs with here.
        ["keepassxc-cli", "import", "-q", "-p", "-t", "100", str(xml), str(target)],
        input=f"{PASSWORD}\n{PASSWORD}\n",
        capture_output=True,
        text=True,
        check=True,
    )
    elapsed = time.perf_counter() - start
    xml.unlink()
    return exported, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--cache", type=Path, help="directory to keep the generated KDBX in (default: a temp dir)")
    args = parser.parse_args()
    cache = args.cache or Path(tempfile.gettempdir()) / "memories-bench-moving"
    cache.mkdir(parents=True, exist_ok=True)
    db = cache / f"bench-{args.entries}.kdbx"
    if not db.exists():
        start = time.perf_counter()
        build_kdbx(db, args.entries)
        print(f"built {db} ({args.entries} entries) in {time.perf_counter() - start:.1f} s (cached for later runs)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ours, summary = time_memories(db, work)
        print(f"memories import keepassxc: {args.entries} entries in {ours:.2f} s = {args.entries / ours:.0f} entries/s")
        print(f"  result: {summary[:160]}…")
        theirs = time_keepassxc(db, work)
        if theirs is None:
            print("keepassxc-cli not installed: no ratio (scripts/test's apt list installs keepassxc)")
        else:
            exported, imported = theirs
            print(f"keepassxc-cli export -f xml (same file): {exported:.2f} s = {args.entries / exported:.0f} entries/s")
            print(f"keepassxc-cli import (that XML): {imported:.2f} s = {args.entries / imported:.0f} entries/s")
            print(f"ratio memories import / keepassxc-cli export: {ours / exported:.2f}")
            print(f"ratio memories import / keepassxc-cli import: {ours / imported:.2f}")
            print(f"ratio memories import / (export + import): {ours / (exported + imported):.2f}")
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
