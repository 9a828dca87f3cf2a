"""Turns reStructuredText (the Linux kernel's and Python's documentation sources) into readable
plain text, the way a reader sees the rendered page: titles and body text stay, markup goes.

- Section adornments, table borders, comments (`.. SPDX-License-Identifier: ...`), link targets and
  substitution definitions are dropped.
- Directives that only steer the build (toctree, kernel-doc, include, image, raw, index, ...) are
  dropped with their block; the others keep their content: admonitions get their label ("Note:"),
  version notes their sentence ("New in version 3.2."), API descriptions their signature.
- Literal blocks (after `::` or in code directives) are kept verbatim; outside them, inline markup
  is reduced to its text: ``literal``, *emphasis*, **strong**, :role:`text <target>`,
  `link <url>`_, reference_.
The caller folds the result's line breaks into spaces.
"""

import itertools
import re

# Directives whose whole block is dropped: they pull in or index other material, or hold no prose.
DROPPED_DIRECTIVES = {
    "toctree", "include", "literalinclude", "kernel-doc", "kernel-include", "kernel-feat", "kernel-abi",
    "kernel-figure", "kernel-render", "image", "figure", "raw", "index", "highlight", "contents",
    "sectionauthor", "moduleauthor", "codeauthor", "tabularcolumns", "cssclass", "currentmodule",
    "module", "default-domain", "c:namespace", "c:namespace-push", "c:namespace-pop", "cpp:namespace",
    "testsetup", "testcleanup", "only", "meta", "autosummary", "sidebar", "productionlist", "rst-class",
}
# Directives whose argument is a language or a file, not text; their content is a literal block.
LITERAL_DIRECTIVES = {"code-block", "code", "sourcecode", "doctest", "testcode", "testoutput", "parsed-literal"}
# Labels that Sphinx prints before an admonition's text.
ADMONITION_LABELS = {
    "note": "Note:", "warning": "Warning:", "important": "Important:", "tip": "Tip:", "hint": "Hint:",
    "attention": "Attention:", "caution": "Caution:", "danger": "Danger:", "error": "Error:",
    "seealso": "See also:", "impl-detail": "CPython implementation detail:",
}
VERSION_SENTENCES = {"versionadded": "New in version {}.", "versionchanged": "Changed in version {}.",
                     "deprecated": "Deprecated since version {}.", "deprecated-removed": "Deprecated since version {}."}

_DIRECTIVE = re.compile(r"(\s*)\.\.\s+([\w:.+-]+)::(?:\s+(.*))?$")
_EXPLICIT = re.compile(r"(\s*)\.\.(\s.*)?$")  # any other explicit markup: comment, target, substitution
_FOOTNOTE = re.compile(r"\s*\.\.\s+\[[^\]]+\]\s+(.*)$")
_OPTION = re.compile(r"\s+:[\w\s.-]+:(\s.*)?$")
_ADORNMENT = re.compile(r"\s*([=\-`:'\"~^_*+#<>.])\1{2,}\s*$")
_TABLE_BORDER = re.compile(r"\s*(=+( +=+)+|\+([-=]+\+)+|-+( +-+)+)\s*$")
_TABLE_ROW = re.compile(r"\s*\|.*\|\s*$")

_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)
_ROLE = re.compile(r"(?::[\w:.+-]+:)?`([^`]+)`(?::[\w:.+-]+:|__?)?")
_STRONG = re.compile(r"(?<![\w*\\])\*\*(\S(?:.*?\S)?)\*\*(?![\w*])", re.DOTALL)
_EMPHASIS = re.compile(r"(?<![\w*\\])\*(\S(?:[^*]*?\S)?)\*(?![\w*])")
_REFERENCE = re.compile(r"(?<=[A-Za-z0-9])_(?=[\s.,;:)]|$)")
_ESCAPE = re.compile(r"\\(.)")
_PLACEHOLDER = re.compile("\x02(\\d+)\x03")


def _indent(line):
    return len(line) - len(line.lstrip(" "))


def _role_text(inner):
    """`title <target>` -> title; `~pkg.name` -> name; `!name` -> name."""
    titled = re.fullmatch(r"(.*?)\s*<[^<>]+>", inner, re.DOTALL)
    if titled and titled.group(1):
        return titled.group(1)
    inner = inner.lstrip("!")
    if inner.startswith("~"):
        inner = re.split(r"[.:]", inner[1:])[-1]
    return inner


def inline_text(line):
    """The text of running reST (a line or a paragraph), inline markup removed."""
    literals = []  # literal text is set aside so that no later rule touches it

    def set_aside(text):
        literals.append(text)
        return f"\x02{len(literals) - 1}\x03"

    line = _LITERAL.sub(lambda m: set_aside(m.group(1)), line)
    line = _ROLE.sub(lambda m: set_aside(_role_text(m.group(1))), line)
    line = _STRONG.sub(r"\1", line)
    line = _EMPHASIS.sub(r"\1", line)
    line = _REFERENCE.sub("", line)
    line = _ESCAPE.sub(r"\1", line)
    return _PLACEHOLDER.sub(lambda m: literals[int(m.group(1))], line)


def to_text(source):
    """Plain text of a reST document (lines joined by '\n'; the caller folds them)."""
    lines = source.expandtabs(8).splitlines()
    out = []                   # (is running text, line): running text gets its inline markup removed
                               # a paragraph at a time, as markup may span lines
    skip_deeper_than = None    # inside a dropped block: skip lines indented more than this
    literal_deeper_than = None  # inside a literal block: keep lines indented more than this verbatim
    pending_literal = None     # a `::` paragraph or code directive at this indent: its block is literal
    in_options = False         # just after a directive: its `:option: value` lines are dropped
    for line in lines:
        blank = not line.strip()
        indent = _indent(line)
        if skip_deeper_than is not None:
            if blank or indent > skip_deeper_than:
                continue
            skip_deeper_than = None
        if literal_deeper_than is not None:
            if blank or indent > literal_deeper_than:
                out.append((False, line))
                continue
            literal_deeper_than = None
        if in_options and not blank and _OPTION.match(line):
            continue
        in_options = False
        if pending_literal is not None and not blank:
            if indent > pending_literal:
                literal_deeper_than = pending_literal
                out.append((False, line))
                pending_literal = None
                continue
            pending_literal = None
        if blank:
            out.append((False, ""))
            continue

        directive = _DIRECTIVE.match(line)
        if directive:
            name, argument = directive.group(2).lower(), (directive.group(3) or "").strip()
            if name in DROPPED_DIRECTIVES or name.startswith("kernel-"):
                skip_deeper_than = indent
                continue
            in_options = True
            if name in LITERAL_DIRECTIVES:
                pending_literal = indent
            elif name in VERSION_SENTENCES:
                version, _, rest = argument.partition(" ")
                sentence = VERSION_SENTENCES[name].format(version)
                out.append((False, sentence + (" " + inline_text(rest) if rest else "")))
            elif name in ADMONITION_LABELS:
                out.append((False, ADMONITION_LABELS[name] + (" " + inline_text(argument) if argument else "")))
            elif argument:
                out.append((False, inline_text(argument)))  # a signature, a rubric, a table's or topic's title
            continue
        footnote = _FOOTNOTE.match(line)
        if footnote:
            out.append((True, footnote.group(1)))
            continue
        if _EXPLICIT.match(line):  # comment, hyperlink target, substitution definition: its block goes
            skip_deeper_than = indent
            continue
        if _ADORNMENT.fullmatch(line) or _TABLE_BORDER.fullmatch(line):
            continue
        if _TABLE_ROW.fullmatch(line):
            line = line.replace("|", " ")

        stripped = line.rstrip()
        if stripped.endswith("::"):
            pending_literal = indent
            stripped = stripped[:-2] if stripped[:-2].strip() == "" or stripped[-3] == " " else stripped[:-1]
            if not stripped.strip():
                continue
        out.append((True, stripped))
    text = []
    for running, group in itertools.groupby(out, key=lambda item: item[0]):
        lines = [line for _, line in group]
        text += [inline_text("\n".join(lines))] if running else lines
    return "\n".join(text)
