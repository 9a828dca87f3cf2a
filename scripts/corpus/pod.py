"""Turns Perl's POD (perl-doc's .pod files) into readable plain text, as `perldoc` shows it.

POD is made of paragraphs (runs of lines up to a blank line):
- command paragraphs (`=head1 NAME`, `=item * text`, `=over 4`, ...): headings and items keep their
  text; structure commands (=over, =back, =pod, =cut, =encoding) and `=for` paragraphs are dropped,
  and so is everything from `=begin FORMAT` to `=end FORMAT` (output for other formatters);
- verbatim paragraphs (starting with whitespace): code, kept as it is;
- ordinary paragraphs: text with formatting codes (B<bold>, C<code>, L<text|target>, E<gt>,
  C<< $a->b >>, ...) reduced to what they show.
Text outside POD (after =cut, before the next command) is program code and is dropped.
"""

import html
import re


class PodError(Exception):
    pass


_COMMAND = re.compile(r"=([a-zA-Z]\w*)\s*(.*)", re.DOTALL)
_ITEM_BULLET = re.compile(r"(\*|\d+\.?)(\s+|$)")
_CODE_START = re.compile(r"([A-Z])(<+)")
_ENTITIES = {"lt": "<", "gt": ">", "verbar": "|", "sol": "/"}


def _entity(name):
    name = name.strip()
    if name in _ENTITIES:
        return _ENTITIES[name]
    if re.fullmatch(r"0x[0-9a-fA-F]+", name):
        return chr(int(name, 16))
    if re.fullmatch(r"0[0-7]+", name):
        return chr(int(name, 8))
    if name.isdigit():
        return chr(int(name))
    text = html.unescape(f"&{name};")
    return text if text != f"&{name};" else name


def _link(content):
    """What L<...> shows: its text before '|', else 'section in page', else the page or URL."""
    if "|" in content:
        return content.split("|", 1)[0]
    if re.match(r"\w+:[^:\s]\S*$", content):  # a URL
        return content
    page, slash, section = content.partition("/")
    if not slash:
        return page.strip('"')
    section = section.strip('"')
    return f'"{section}" in {page}' if page else f'"{section}"'


def _apply(code, content):
    if code in "XZ":
        return ""
    if code == "E":
        return _entity(content)
    if code == "L":
        return _link(content)
    return content  # B I C F S: the text itself


def _parse(text, position, closer):
    """Text from `position` up to `closer` (None: the end), formatting codes expanded; returns
    (text, position after the closer). An unclosed code keeps its text: real documents have some."""
    out = []
    while position < len(text):
        if closer and text.startswith(closer, position):
            return "".join(out), position + len(closer)
        start = _CODE_START.match(text, position)
        if start:
            code, brackets = start.group(1), len(start.group(2))
            if brackets == 1:
                inner, after = _parse(text, start.end(), ">")
            else:
                inner, after = _parse(text, start.end(), " " + ">" * brackets)
                inner = inner.strip()
            out.append(_apply(code, inner))
            position = after
            continue
        out.append(text[position])
        position += 1
    return "".join(out), position


def formatted_text(paragraph):
    """An ordinary paragraph's text with its formatting codes expanded."""
    return _parse(paragraph, 0, None)[0]


def _paragraphs(source):
    paragraph = []
    for line in source.splitlines():
        if line.strip():
            paragraph.append(line)
        elif paragraph:
            yield "\n".join(paragraph)
            paragraph = []
    if paragraph:
        yield "\n".join(paragraph)


def to_text(source, name="POD"):
    """Plain text of a POD document (paragraphs joined by blank lines)."""
    out = []
    in_pod = False
    skipped_format = None  # inside =begin FORMAT ... =end FORMAT
    for paragraph in _paragraphs(source.expandtabs(8)):
        command = _COMMAND.match(paragraph) if paragraph.startswith("=") else None
        if skipped_format is not None:
            if command and command.group(1) == "end":
                skipped_format = None
            continue
        if command:
            verb, argument = command.group(1), command.group(2).strip()
            in_pod = verb != "cut"
            if verb.startswith("head"):
                out.append(formatted_text(argument))
            elif verb == "item":
                bullet = _ITEM_BULLET.match(argument)
                text = argument[bullet.end():] if bullet else argument
                if text:
                    out.append(formatted_text(text))
            elif verb == "begin":
                skipped_format = argument
            elif verb == "end":
                raise PodError(f"{name}: =end {argument} without a =begin")
            continue
        if not in_pod:
            continue
        out.append(paragraph if paragraph[0].isspace() else formatted_text(paragraph))
    if skipped_format is not None:
        raise PodError(f"{name}: =begin {skipped_format} is never ended")
    return "\n\n".join(out)
