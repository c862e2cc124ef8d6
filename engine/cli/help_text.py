"""Examples for every command's `--help` (an EXAMPLES epilog) and the `memories help TOPIC` pages.

Only read when help is shown, so it costs nothing on an ordinary call. A command path is
its words joined by spaces ("vault member add"). tests/unit/test_cli_help.py walks the
whole parser and fails for a command without an entry here or an option without a help
string, so a new command gets its examples when it is added.
"""

from __future__ import annotations

import argparse

__all__ = ["EXAMPLES", "TOPICS", "apply_examples", "topic_text"]

EXAMPLES: dict[str, tuple[str, ...]] = {
    "": ("memories init", "memories put --title 'Wi-Fi' --body 'router in the hall'", "memories help ids"),
    "init": ("memories init", "printf '%s\\n' \"$PW\" | memories init --password-stdin"),
    "unlock": ("memories unlock", "printf '%s\\n' \"$PW\" | memories unlock --password-stdin"),
    "sudo": ("memories sudo", "memories sudo && memories export --format jsonl ~/backup"),
    "lock": ("memories lock",),
    "status": ("memories status", "memories status --json"),
    "daemon": ("memories daemon status", "memories daemon stop"),
    "daemon start": ("memories daemon start",),
    "daemon stop": ("memories daemon stop",),
    "daemon status": ("memories daemon status --json",),
    "daemon run": ("memories daemon run   # in the foreground, e.g. under a service manager",),
    "put": (
        "memories put --title 'Dentist' --body 'Tuesday 9:30' --tag health",
        "pbpaste | memories put --title 'Meeting notes'",
        "memories put   # on a terminal: write it in $EDITOR",
    ),
    "list": ("memories list", "memories list --tag health --sort title", "memories list --all | grep -i dentist"),
    "get": ("memories get 3fa9c2d1", "memories get 3fa9 --rev 81c0aa12e4f0"),
    "edit": (
        "memories edit 3fa9c2d1   # opens $VISUAL/$EDITOR on a terminal",
        "memories edit 3fa9c2d1 --add-tag done --remove-tag todo",
        "pbpaste | memories edit 3fa9c2d1",
        "memories edit 3fa9c2d1 --resolve --body-file merged.txt",
    ),
    "delete": ("memories delete 3fa9c2d1",),
    "history": ("memories history 3fa9c2d1", "memories history 3fa9c2d1 --restore 9be04a7c"),
    "trash": ("memories trash", "memories trash restore 3fa9c2d1"),
    "trash restore": ("memories trash restore 3fa9c2d1",),
    "diff": ("memories diff 3fa9c2d1", "memories diff 3fa9c2d1 81c0aa12e4f0 d7e01b5a9c33"),
    "import": (
        "memories import ~/notes",
        "memories import ~/Obsidian/MyVault   # folders kept as paths, [[wikilinks]] as links",
        "memories import export.jsonl",
        "memories import bitwarden bitwarden_export.json --dry-run",
        "memories import keepassxc Passwords.kdbx",
        "memories import 1password export.1pux",
    ),
    "export": ("memories sudo && memories export --format markdown ~/backup",),
    "wikilinks": ("memories wikilinks   # link every note's [[wikilinks]] again; list names no item has",),
    "search": (
        "memories search dentist",
        "memories search '\"exact phrase\"' --limit 5",
        "memories search sourdough --limit 50 --offset 50   # the second page of 50",
        "memories help search",
    ),
    "retrieve": ("memories retrieve 'when is the dentist'",),
    "ask": ("memories ask 'when is my dentist appointment?'",),
    "rag": ("memories rag status",),
    "rag status": ("memories rag status --json",),
    "rag index": ("memories rag index", "memories rag index --rebuild --no-vectors"),
    "card": ("memories card new --type knowledge --title 'Postgres tuning'", "memories card link 3fa9 81c0 --rel depends_on"),
    "card new": ("memories card new --type persona --title 'Me' --body 'prefers short answers'",),
    "card show": ("memories card show 3fa9c2d1",),
    "card edit": ("memories card edit 3fa9c2d1 --title 'Postgres tuning (2024)'",),
    "card link": ("memories card link 3fa9c2d1 81c0aa12 --rel depends_on --confidence 0.8",),
    "card unlink": ("memories card unlink 3fa9c2d1 81c0aa12 --rel depends_on",),
    "card connections": ("memories card connections 3fa9c2d1 --depth 2 --direction out",),
    "card recall": ("memories card recall 3fa9c2d1 81c0aa12 --hops 2",),
    "graph": ("memories graph", "memories graph 3fa9c2d1 --depth 1"),
    "protected": ("memories protected new --title GitHub --account me --token-stdin",),
    "protected new": (
        "printf '%s' \"$TOKEN\" | memories protected new --title GitHub --env GITHUB_TOKEN --token-stdin",
        "printf '%s' \"$OTPAUTH_URI\" | memories protected new --title 'GitHub 2FA' --account me --otp-stdin",
    ),
    "otp": ("memories otp 3fa9c2d1",),
    "secret": ("printf '%s' \"$VALUE\" | memories secret protect 3fa9c2d1 --label api --value-stdin",),
    "secret protect": ("printf '%s' \"$VALUE\" | memories secret protect 3fa9c2d1 --label api --value-stdin",),
    "local-config": ("memories local-config show",),
    "local-config record": ("memories local-config record",),
    "local-config show": ("memories local-config show --json",),
    "copy": ("memories sudo && memories copy 3fa9c2d1:api --clear-after 20",),
    "tray": ("memories tray",),
    "dashboard": ("memories dashboard",),
    "config": ("memories config", "memories config set idle_lock_minutes 10"),
    "config show": ("memories config show --json",),
    "config get": ("memories config get clipboard_clear_seconds",),
    "config set": ("memories config set lock_on_screen_lock off", "memories config set theme dark"),
    "autostart": ("memories autostart enable", "memories autostart status"),
    "autostart enable": ("memories autostart enable", "memories autostart enable --kind systemd"),
    "autostart disable": ("memories autostart disable", "memories autostart disable --kind systemd"),
    "autostart status": ("memories autostart status --json",),
    "desktop": ("memories desktop install", "memories desktop uninstall"),
    "desktop install": ("memories desktop install", "memories --home ~/work-vault desktop install"),
    "desktop uninstall": ("memories desktop uninstall",),
    "mcp": ("memories mcp   # stdio, started by the agent client", "memories mcp --http --port 8765"),
    "mcp grant": ("memories sudo && memories mcp grant --name claude --scope read",),
    "mcp grants": ("memories mcp grants --all",),
    "mcp revoke": ("memories mcp revoke claude",),
    "mcp config": ("memories mcp config --client claude-code",),
    "inject": ("memories inject --client all", "memories inject --client claude-code --scope project --dir ."),
    "agent": ("memories agent connect claude-code", "memories agent list"),
    "agent connect": (
        "memories sudo && memories agent connect claude-code",
        "memories agent connect codex --scope read --project .   # a grant of its own for this project",
        "memories agent connect claude-code --project ~/shop --transcripts all",
        "memories agent connect codex --project .   # transcripts: only this project's sessions (the default)",
    ),
    "agent capture": (
        'echo \'{"transcript_path": "/home/me/.claude/projects/-home-me-shop/S.jsonl"}\' | memories agent capture claude-code',
    ),
    "agent list": ("memories agent list",),
    "agent notebook": (
        "memories agent notebook   # every agent's private notebook",
        "memories agent notebook claude-code --revisions",
        "memories agent notebook claude-code --export notebook.json",
        "memories sudo && memories agent notebook claude-code --delete",
    ),
    "agent disconnect": (
        "memories agent disconnect claude-code",
        "memories agent disconnect codex --project .   # only this project's grant",
    ),
    "credential": ("memories credential list", "memories credential new postgres --name db --host db.lan --password-stdin"),
    "credential new": (
        "printf '%s' \"$PW\" | memories credential new postgres --name db --host db.lan --password-stdin",
        "memories credential new openpgp --name release-key --key-file release-key.asc   # for `memories job`",
        "memories credential new ssh-key --name deploy --identity-file ~/.ssh/id_ed25519",
        "memories credential new tls-cert --name android-release --pkcs12-file release.jks   # asks its password",
    ),
    "credential generate": ("memories credential generate ssh --name deploy-key",),
    "credential public": ("memories credential public deploy-key",),
    "credential list": ("memories credential list --type ssh", "memories credential list --all"),
    "credential show": ("memories credential show db",),
    "remote": ("memories remote open db", "memories remote propose 5c2e 'SELECT 1'"),
    "remote open": ("memories remote open db",),
    "remote propose": ("memories remote propose 5c2e 'SELECT count(*) FROM users'",),
    "remote approve": ("memories sudo && memories remote approve 9d41 --fingerprint 6f1a…",),
    "remote reject": ("memories remote reject 9d41",),
    "remote exec": ("memories remote exec 9d41",),
    "remote close": ("memories remote close 5c2e",),
    "remote list": ("memories remote list",),
    "proxy": ("memories proxy start db", "memories proxy list"),
    "proxy start": ("memories proxy start db --port 6432",),
    "proxy stop": ("memories proxy stop 1",),
    "proxy list": ("memories proxy list --json",),
    "audit": ("memories sudo && memories audit --since 1d --actor mcp:",),
    "help": ("memories help", "memories help ids"),
    "completion": (
        "source <(memories completion bash)           # in ~/.bashrc",
        'memories completion zsh > "${fpath[1]}/_memories"',
        "memories completion fish > ~/.config/fish/completions/memories.fish",
    ),
    "login": ("memories login new --title GitHub --username me --url https://github.com --generate", "memories login list"),
    "login new": (
        "memories login new --title GitHub --username me --url https://github.com --generate",
        "printf '%s' \"$PW\" | memories login new --title Bank --username me --password-stdin",
        'printf \'%s\\n%s\\n\' "$PW" "$OTPAUTH_URI" | memories login new --title Bank --password-stdin --otp-stdin',
    ),
    "login show": ("memories login show 3fa9c2d1",),
    "login list": ("memories login list", "memories login list bank", "memories login list --tag work"),
    "login copy-password": (
        "memories sudo && memories login copy-password 3fa9c2d1",
        "memories sudo && memories login copy-password 3fa9c2d1 --previous 1   # the password before the current one",
    ),
    "login history": ("memories login history 3fa9c2d1",),
    "login copy-username": ("memories login copy-username 3fa9c2d1",),
    "login copy-otp": ("memories login copy-otp 3fa9c2d1 --clear-after 20",),
    "password": ("memories password generate", "memories password generate --words 6"),
    "backup": ("memories sudo && memories backup create ~/memories.backup", "memories backup verify ~/memories.backup"),
    "backup create": (
        "memories sudo && memories backup create ~/memories.backup",
        "printf '%s\\n' \"$BACKUP_PW\" | memories backup create /mnt/usb/memories.backup --password-stdin",
    ),
    "backup verify": ("memories backup verify ~/memories.backup",),
    "restore": (
        "memories --home ~/memories-restored restore ~/memories.backup",
        'printf \'%s\\n%s\\n\' "$BACKUP_PW" "$NEW_PW" | memories --home ~/new restore memories.backup --password-stdin',
    ),
    "password generate": ("memories password generate --length 32", "memories password generate --words 6"),
    "vaults": ("memories vaults",),
    "vault": ("memories vault new family", "memories vault members --vault family"),
    "vault new": ("memories vault new family",),
    "vault members": ("memories vault members --vault family",),
    "vault member": ("memories sudo && memories vault member add 7c1d… --role editor --vault family",),
    "vault member add": (
        "memories sudo && memories vault member add invite.txt --role editor --vault family",
        "memories sudo && memories vault member add memories-invite-v1.… --role reader --vault family --yes",
    ),
    "vault member role": ("memories vault member role 7c1d… --role reader --vault family",),
    "vault member remove": ("memories vault member remove 7c1d… --vault family",),
    "vault transfer": ("memories vault transfer 7c1d… --vault family",),
    "vault rotate": ("memories vault rotate --vault family",),
    "vault forks": ("memories vault forks --vault family",),
    "vault fork": ("memories sudo && memories vault fork resolve --keep 3f9a0c2e --vault family",),
    "vault fork resolve": ("memories sudo && memories vault fork resolve --keep 3f9a0c2e --vault family",),
    "transcript": ("memories transcript import", "memories transcript list", "memories transcript show 3f9a0c --turn 4"),
    "transcript import": ("memories transcript import", "memories transcript import ~/.codex/sessions/2026/11/30"),
    "transcript list": ("memories transcript list --agent claude_code",),
    "transcript assign": ("memories transcript assign 3f9a0c --project ~/src/shop",),
    "transcript scrub": ("memories transcript scrub --dry-run", "memories transcript scrub"),
    "transcript show": ("memories transcript show 3f9a0c", "memories transcript show 3f9a0c --turn 4"),
    "memory": ("memories memory cycle once", "memories memory cycle once --replies replies.jsonl"),
    "memory cycle": ("memories memory cycle once",),
    "memory cycle once": ("memories memory cycle once", "memories memory cycle once --replies replies.jsonl --limit 20"),
    "transcript watch": (
        "memories transcript watch",
        "memories transcript watch --interval 5 ~/.claude/projects",
    ),
    "quarantine": ("memories quarantine", "memories quarantine show 5e0b71c2"),
    "quarantine list": ("memories quarantine list",),
    "quarantine show": ("memories quarantine show 5e0b71c2",),
    "quarantine reapply": ("memories sudo && memories quarantine reapply 5e0b71c2",),
    "quarantine discard": ("memories sudo && memories quarantine discard 5e0b71c2",),
    "whoami": (
        "memories whoami",
        "memories sudo && memories whoami --invite --owner 'FINGERPRINT OF THE OWNER' -o invite.txt",
    ),
    "devices": ("memories devices",),
    "device": (
        "memories whoami   # on the device you have: its device ID",
        "memories device request --approver DEVICE_ID -o request.txt   # on the new device",
        "memories sudo && memories device approve request.txt -o approval.txt   # on the device you have",
        "memories device join approval.txt   # on the new device, then `memories sync` to fetch the notes",
    ),
    "device request": ("memories device request --approver DEVICE_ID --name laptop -o request.txt",),
    "device approve": (
        "memories sudo && memories device approve request.txt -o approval.txt",
        "memories device approve request.txt --ticket 'mct1.…'  # with a [[centers]] entry",
    ),
    "device join": ("memories device join approval.txt",),
    "device revoke": ("memories sudo && memories device revoke laptop",),
    "serve": ("memories serve", "memories serve --listen 0.0.0.0:7700 --allow-non-loopback --tls-cert c.pem --tls-key k.pem"),
    "cloud": ("memories cloud accounts", "memories cloud sync --watch"),
    "cloud add": ("memories sudo && memories cloud add s3 --name team --endpoint https://s3.example.com --bucket notes",),
    "cloud add s3": (
        "memories sudo && AWS_ACCESS_KEY_ID=… AWS_SECRET_ACCESS_KEY=… memories cloud add s3 --name team "
        "--endpoint https://s3.eu-central-1.amazonaws.com --bucket notes --region eu-central-1",
        'printf \'%s\\n%s\\n\' "$KEY_ID" "$SECRET" | memories cloud add s3 --name lab --endpoint http://127.0.0.1:9000 '
        "--bucket notes --keys-stdin",
    ),
    "cloud login": (
        "memories sudo && memories cloud login onedrive --client-id 00000000-0000-0000-0000-000000000000",
        "memories sudo && MEMORIES_GDRIVE_CLIENT_ID=… memories cloud login gdrive --name drive --no-browser",
    ),
    "cloud accounts": ("memories cloud accounts", "memories cloud accounts --json"),
    "cloud remove": ("memories sudo && memories cloud remove team",),
    "cloud sync": ("memories cloud sync", "memories cloud sync team --watch --interval 30"),
    "sync": (
        "memories sudo && memories sync token new --device laptop",
        "MEMORIES_SYNC_TOKEN=msync1.… memories sync http://127.0.0.1:7700 --watch",
        'memories sync --relay https://relay.example:7701 --room="$ROOM"',
        "memories sync status",
    ),
    # issue 30: the Center (docs/center.md)
    "center": ("memories center serve --data /srv/center", "memories center admin status --data /srv/center"),
    "center serve": (
        "memories center serve --data /srv/center --listen 0.0.0.0:8443 --tls-cert c.pem --tls-key k.pem",
        "memories center serve --data /srv/center --store postgresql://center@db/center",
    ),
    "center standby": (
        "MEMORIES_CENTER_PRIMARY_TOKEN=mca_… memories center standby --data /srv/standby --primary https://c1:8443 --ca ca.pem",
    ),
    "center promote": ("memories center promote --data /srv/standby",),
    "center info": ("memories center info https://center.example:8443 --ca ca.pem",),
    "center admin": ("memories center admin unlock --data /srv/center", "memories center admin status --data /srv/center"),
    "center admin unlock": ("memories center admin unlock --data /srv/center",),
    "center admin lock": ("memories center admin lock --data /srv/center",),
    "center admin status": ("memories center admin status --data /srv/center --json",),
    "center admin grant": ("memories center admin grant list --data /srv/center",),
    "center admin grant new": (
        "memories center admin grant new alice --scope read_write --vault team --data /srv/center",
        "memories center admin grant new ci --scope read --vault team --expires 30d --data /srv/center",
    ),
    "center admin grant list": ("memories center admin grant list --data /srv/center --json",),
    "center admin grant revoke": ("memories center admin grant revoke alice --data /srv/center",),
    # the daemon side: tickets from a Center pinned in config.toml [[centers]]
    "center ticket": ("memories center ticket apply 'mct1.…' --name claude", "memories center ticket list"),
    "center ticket apply": (
        "memories center ticket apply 'mct1.…' --name claude",
        "cat ticket.txt | memories center ticket apply - --name ci",
    ),
    "center ticket list": ("memories center ticket list --json",),
    "relay": ("memories relay serve --listen 127.0.0.1:7701",),
    "relay serve": ("memories relay serve --listen 0.0.0.0:7701 --allow-non-loopback --tls-cert c.pem --tls-key k.pem",),
    "file": ("memories file add contract.pdf --tag legal", "memories file get 3fa9c2d1 -o contract.pdf"),
    "file add": ("memories file add contract.pdf --tag legal", "memories file add v2.pdf --update 3fa9c2d1"),
    "file get": ("memories file get 3fa9c2d1 --output contract.pdf", "memories file get 3fa9c2d1 | sha256sum"),
    "file list": ("memories file list", "memories file list --tag legal --json"),
    "file edit": ("memories file edit 3fa9c2d1 --searchable", "memories file edit 3fa9c2d1 --title 'Lease 2027' --tag legal"),
    "file history": ("memories file history 3fa9c2d1",),
    "file exec": ("memories file exec 3fa9c2d1 -- evince {file}", "memories file exec 7c01 -- ssh-keygen -l -f {file}"),
    "run": (
        "memories sudo && memories run --env DB_PASSWORD=db_password -- ./deploy.sh",
        "memories run --env API_KEY=card:3fa9c2d1#token -- curl -H @headers.txt https://api.example",
        "memories run --template app.env.tpl -- ./app --env-file {template}",
    ),
    "job": ("memories job plan smime-sign report.pdf -o report.p7m --key signer", "memories job run <PLAN_DIGEST>"),
    "job plan": (
        "memories job plan smime-sign report.pdf -o report.p7m --key signer",
        "memories job plan openpgp-sign release.tar.gz -o release.tar.gz.asc --key release-key",
        "memories job plan openpgp-encrypt notes.txt -o notes.txt.gpg --recipient alice --json",
        "memories job plan apk-sign app.apk -o app-signed.apk --key android-release --min-sdk 24",
    ),
    "job show": ("memories job show <PLAN_DIGEST>",),
    "job run": ("memories sudo && memories job run <PLAN_DIGEST>",),
    "job status": ("memories job status <RUN_ID>", "memories job status <RUN_ID> --json"),
}


TOPICS: dict[str, str] = {
    "ids": """IDs

Every memory, card, credential and file has an ID of 32 hex digits. Commands show the
shortest prefix that is unique in your vault (at least 8 digits), and accept any unique
prefix of at least 4 digits:

    memories get 3fa9c2d1
    memories get 3fa9

If a prefix matches more than one item, the command fails with `ambiguous_id` and lists
the candidates (ID, kind and title); type more digits. Revisions have IDs too
(`memories history ID` shows them, 12 digits), accepted the same way by `get --rev`,
`edit --base` and `diff`.
""",
    "conflicts": """CONFLICTS

Two edits made from the same revision (on two devices, or by two programs at once) are
both kept: the memory then has two heads and shows CONFLICT in `list` and `get`. Nothing
is lost and nothing is chosen for you. To settle it:

    memories get ID                 # shows every head
    memories diff ID REV_A REV_B    # compare two of them
    memories edit ID --resolve      # writes a revision whose parents are all heads

`edit --resolve` starts from the newest head (or `--base REV`), with the fields you give.
""",
    "search": """SEARCH

`memories search QUERY` finds memories and cards by their words, in English and Chinese.
Words are matched in any order and results are ranked: items with more of the words, rarer
words and words in the title come first. Case and accents do not matter.

    memories search dentist tuesday          either word; both rank higher
    memories search '"exact phrase"'         matches those words in that order
    memories search 长期记忆                   Chinese is segmented into words
    memories search dentist --kind memory    only one kind
    memories search dentist --mode lexical   words only, no embedding model

Results show the ID, title and a snippet; `memories get ID` shows the whole memory. Just
after an unlock the index may still be building: results then say they are partial.
`memories retrieve` gives passages with sources, `memories ask` an answer with citations.
""",
    "secrets": """SECRETS

Secrets (passwords, tokens, keys, one-time-password seeds) live in credentials, never in a
memory's body. They are stored encrypted like everything else, are never printed, never
returned by `get`, `search`, `export` or to agents, and are only used by the engine:

    memories credential new postgres --name db --host db.lan --password-stdin
    memories protected new --title GitHub --env GITHUB_TOKEN --token-stdin
    printf '%s' "$VALUE" | memories secret protect ID --label api --value-stdin
    memories sudo && memories copy ID:api          # to the clipboard, cleared after 30 s

Give secrets on standard input (`--…-stdin`), never as arguments: other users on the
machine can see a command's arguments in `ps`. Copying needs `memories sudo` first.
""",
}


# `memories` alone: every command once, in groups, on one screen (issue 31). `--help` keeps
# the full one-line-per-command list; tests/unit/test_cli_help.py checks both cover the table.
OVERVIEW_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Everyday", ("init", "unlock", "lock", "status", "sudo", "put", "list", "get", "edit", "delete", "search")),
    ("", ("history", "trash", "diff", "import", "export", "login", "password", "copy", "otp", "file", "backup", "restore")),
    ("Cards", ("card", "protected", "secret", "graph", "wikilinks", "retrieve", "ask", "rag")),
    ("Sharing", ("vaults", "vault", "whoami", "devices", "device", "sync", "serve", "relay", "cloud", "quarantine", "center")),
    ("Agents", ("agent", "mcp", "inject", "transcript", "memory")),
    ("Remote", ("credential", "remote", "proxy", "run", "job")),
    ("Admin", ("config", "daemon", "audit", "tray", "dashboard", "autostart", "desktop")),
    ("", ("local-config", "completion", "help")),
)


def overview_text() -> str:
    """What `memories` with no command prints: the commands grouped, and where to read more."""
    lines = ["Memories: a local-first, end-to-end encrypted vault.", "usage: memories COMMAND [options] [--json] [--home DIR]"]
    lines.append("")
    lines += [f"  {title:<10}{'  '.join(words)}" for title, words in OVERVIEW_GROUPS]
    lines += [
        "",
        "  memories COMMAND --help   one command's options and examples",
        "  memories help TOPIC       ids, conflicts, search, secrets",
        "  memories --help           every command with a one-line description",
    ]
    return "\n".join(lines)


def _path_of(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.prog.split()[1:])


def apply_examples(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` and every subcommand parser its EXAMPLES epilog (kept as written)."""
    examples = EXAMPLES.get(_path_of(parser))
    if examples:
        parser.epilog = "EXAMPLES\n" + "\n".join(f"  {line}" for line in examples)
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                apply_examples(sub)


def topic_text(name: str) -> str | None:
    return TOPICS.get(name.lower())
