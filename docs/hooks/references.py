"""MkDocs hook: the two option references are generated from the code at build time, so they
cannot go stale.

- ``<!-- llmreplay-cli -->`` becomes every ``llmreplay`` subcommand: its usage line, description
  and options, read from :func:`pytest_llmreplay.cli.main.build_parser` (argparse).
- ``<!-- pytest-options -->`` becomes the table of the plugin's pytest options and their ini keys,
  read from :data:`pytest_llmreplay.plugin.options.OPTIONS`.

A page that names a marker this hook does not know, or a marker missing from the page it belongs
to, fails the build.
"""

from __future__ import annotations

import argparse
import html
import re

MARKER = re.compile(r"^<!-- ([a-z-]+) -->$", re.MULTILINE)
USAGE_WIDTH = 96  # columns of a usage line, as argparse wraps it
PAGES = {"reference/cli.md": "llmreplay-cli", "reference/pytest-options.md": "pytest-options"}


def prose(text: str) -> str:
    """``text`` (argparse's help, wrapped or not) as one line of Markdown that shows it as written."""
    return html.escape(" ".join(text.split()), quote=False).replace("*", "\\*")


def cell(text: str) -> str:
    """``text`` in a Markdown table cell: as :func:`prose`, a ``|`` kept literal."""
    return prose(text).replace("|", "\\|")


def code(text: str) -> str:
    """``text`` as inline code (a table cell's ``|`` inside a code span is kept, not a column break)."""
    return f"`{text}`"


def option_label(action: argparse.Action, formatter: argparse.HelpFormatter) -> str:
    """How ``--help`` names an option: each flag with its metavar (``--rate R``), or a positional's metavar."""
    if not action.option_strings:
        return code(formatter._format_args(action, formatter._get_default_metavar_for_positional(action)))
    if action.nargs == 0:
        return ", ".join(code(flag) for flag in action.option_strings)
    value = formatter._format_args(action, formatter._get_default_metavar_for_optional(action))
    return ", ".join(code(f"{flag} {value}") for flag in action.option_strings)


def command_section(name: str, parser: argparse.ArgumentParser, summary: str | None) -> list[str]:
    formatter = parser._get_formatter()
    lines = [f"## `llmreplay {name}`", ""]
    if parser.description or summary:
        lines += [prose(parser.description or summary), ""]
    usage = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)  # not the terminal's: the same on every build
    usage.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    lines += ["```text", usage.format_help().rstrip(), "```", ""]
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if not isinstance(a, argparse._HelpAction)]
        if not actions:
            continue
        lines += [f"**{group.title}**", "", "| option | meaning |", "|---|---|"]
        for action in actions:
            meaning = formatter._expand_help(action) if action.help else ""
            if action.required and action.option_strings:
                meaning += " (required)"
            lines.append(f"| {option_label(action, formatter)} | {cell(meaning.strip()) or ' '} |")
        lines.append("")
    return lines


def cli_reference() -> str:
    from pytest_llmreplay.cli.main import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {choice.dest: choice.help for choice in commands._choices_actions}
    lines = []
    for name, command in commands.choices.items():
        lines += command_section(name, command, summaries.get(name))
    return "\n".join(lines)


def pytest_options() -> str:
    from pytest_llmreplay.plugin.options import METAVARS, OPTIONS

    lines = ["| option | ini key | default | meaning |", "|---|---|---|---|"]
    for flag, ini, kind, default, help_text in OPTIONS:
        if kind == "bool":
            shown = flag
        elif flag == "--llm-compare":
            shown = f"{flag}[=REF]"
        else:
            shown = f"{flag}={METAVARS.get(flag, ini.removeprefix('llm_').upper())}"
        value = "none" if default is None else str(default).lower() if kind == "bool" else str(default)
        lines.append(f"| {code(shown)} | {code(ini)} | {code(value)} | {cell(help_text)} |")
    return "\n".join(lines)


GENERATORS = {"llmreplay-cli": cli_reference, "pytest-options": pytest_options}


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    found = MARKER.findall(markdown)
    expected = PAGES.get(page.file.src_uri)
    if expected is not None and expected not in found:
        raise ValueError(f"{page.file.src_uri}: the marker <!-- {expected} --> is missing")
    for name in found:
        if name not in GENERATORS:
            raise ValueError(f"{page.file.src_uri}: unknown marker <!-- {name} -->")
    return MARKER.sub(lambda match: GENERATORS[match.group(1)](), markdown)
