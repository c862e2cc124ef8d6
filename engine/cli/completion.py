"""Shell completion scripts for bash, zsh and fish, generated from the parser tree.

The command words, options and choices are written into the script (static: no Python
runs for them); IDs and tags come from ``memories __complete ids|tags PREFIX``, which asks
a running, unlocked engine and prints nothing otherwise. shtab was considered: it covers
bash and zsh but not fish, so the three scripts are generated here from one table.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

__all__ = ["script", "SHELLS"]

SHELLS = ("bash", "zsh", "fish")
# Positional arguments (by dest) that take an item ID, and options that take a tag.
ID_DESTS = {"id", "ids", "src", "dst", "card"}
TAG_OPTIONS = {"--tag", "--add-tag", "--remove-tag"}


@dataclass
class Node:
    subs: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)  # options without a value
    valued: dict[str, list[str]] = field(default_factory=dict)  # option -> its choices ([] = any)
    ids: bool = False  # a positional takes an item ID


def _tree(parser: argparse.ArgumentParser, path: str, out: dict[str, Node]) -> None:
    node = Node()
    out[path] = node
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if name.startswith("__"):
                    continue
                node.subs.append(name)
                _tree(sub, f"{path} {name}".strip(), out)
        elif action.option_strings:
            if action.help == argparse.SUPPRESS:
                continue
            long_names = [o for o in action.option_strings if o.startswith("--")] or list(action.option_strings)
            for option in long_names:
                if action.nargs == 0:
                    node.flags.append(option)
                else:
                    node.valued[option] = [str(c) for c in action.choices] if action.choices else []
        elif action.dest in ID_DESTS:
            node.ids = True


def _q(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def _bash(tree: dict[str, Node]) -> str:
    subs = "\n".join(f"        {_q(p)}) echo {_q(' '.join(n.subs))} ;;" for p, n in tree.items() if n.subs)
    opts = "\n".join(f"        {_q(p)}) echo {_q(' '.join([*n.flags, *n.valued, '--help']))} ;;" for p, n in tree.items())
    valued = sorted({o for n in tree.values() for o in n.valued})
    choices = "\n".join(
        f"        {_q(p + ' ' + o)}) echo {_q(' '.join(c))} ;;" for p, n in tree.items() for o, c in n.valued.items() if c
    )
    ids = " | ".join(_q(p) for p, n in tree.items() if n.ids) or "''"
    return f"""# memories completion for bash: source <(memories completion bash)
_memories_subs() {{
    case "$1" in
{subs}
    esac
}}
_memories_opts() {{
    case "$1" in
{opts}
    esac
}}
_memories_choices() {{
    case "$1" in
{choices}
    esac
}}
_memories_dynamic() {{
    command memories __complete "$1" "$2" 2>/dev/null | cut -f1
}}
_memories() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    local path="" i w
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${{COMP_WORDS[i]}}"
        case "$w" in
            --home) ((i++)); continue ;;
            -*) continue ;;
        esac
        if [[ " $(_memories_subs "$path") " == *" $w "* ]]; then
            path="${{path:+$path }}$w"
        else
            break
        fi
    done
    case "$prev" in
        --tag|--add-tag|--remove-tag)
            COMPREPLY=($(compgen -W "$(_memories_dynamic tags "$cur")" -- "$cur")); return ;;
{"|".join(valued) or "--never"})
            local c; c="$(_memories_choices "$path $prev")"
            if [[ -n "$c" ]]; then COMPREPLY=($(compgen -W "$c" -- "$cur")); else COMPREPLY=($(compgen -f -- "$cur")); fi
            return ;;
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$(_memories_opts "$path")" -- "$cur")); return
    fi
    local s; s="$(_memories_subs "$path")"
    if [[ -n "$s" ]]; then
        COMPREPLY=($(compgen -W "$s" -- "$cur")); return
    fi
    case "$path" in
        {ids})
            COMPREPLY=($(compgen -W "$(_memories_dynamic ids "$cur")" -- "$cur")); return ;;
    esac
    COMPREPLY=($(compgen -f -- "$cur"))
}}
complete -F _memories memories
"""


def _fish(tree: dict[str, Node]) -> str:
    lines = [
        "# memories completion for fish: memories completion fish > ~/.config/fish/completions/memories.fish",
        "function __memories_subs",
        '    switch "$argv[1]"',
    ]
    for path, node in tree.items():
        if node.subs:
            lines += [f"        case {_q(path)}", f"            echo {' '.join(node.subs)}"]
    lines += [
        "    end",
        "end",
        "function __memories_path",
        "    set -l path ''",
        "    set -l skip 0",
        "    for w in (commandline -opc)[2..-1]",
        "        if test $skip = 1; set skip 0; continue; end",
        '        if test "$w" = --home; set skip 1; continue; end',
        "        if string match -q -- '-*' $w; continue; end",
        "        if contains -- $w (string split ' ' (__memories_subs \"$path\"))",
        '            set path (string trim "$path $w")',
        "        else",
        "            break",
        "        end",
        "    end",
        "    echo $path",
        "end",
        'function __memories_at; test (__memories_path) = "$argv[1]"; end',
        "complete -c memories -f",
    ]
    for path, node in tree.items():
        cond = f"-n \"__memories_at '{path}'\""  # command words: no quotes or '$' in them
        if node.subs:
            lines.append(f"complete -c memories {cond} -a {_q(' '.join(node.subs))}")
        for flag in node.flags:
            lines.append(f"complete -c memories {cond} -l {flag[2:]}")
        for option, choices in node.valued.items():
            if option in TAG_OPTIONS:
                lines.append(f"complete -c memories {cond} -l {option[2:]} -x -a '(memories __complete tags (commandline -ct))'")
            elif choices:
                lines.append(f"complete -c memories {cond} -l {option[2:]} -x -a {_q(' '.join(choices))}")
            else:
                lines.append(f"complete -c memories {cond} -l {option[2:]} -r -F")
        if node.ids:
            lines.append(f"complete -c memories {cond} -a '(memories __complete ids (commandline -ct))'")
    return "\n".join(lines) + "\n"


def _zsh(tree: dict[str, Node]) -> str:
    # zsh runs the bash function through its bashcompinit layer: one table, same behaviour.
    return (
        '#compdef memories\n# memories completion for zsh: memories completion zsh > "${fpath[1]}/_memories"\n'
        "autoload -U +X bashcompinit && bashcompinit\n" + _bash(tree).split("\n", 1)[1]
    )


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    tree: dict[str, Node] = {}
    _tree(parser, "", tree)
    return {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell](tree)
